#!/usr/bin/env bash
# End-to-end test with the official OpenAI Node client (`openai` on npm, pinned in
# tests/node/package.json): starts `devshard-gateway demo --profile zero` with an API key and runs
# tests/node/client.mjs against it (whole answer, stream, logprobs asked, errors, models).
# Installs nodejs/npm from Debian when missing (needs root) and the npm package into a cache
# directory (${XDG_CACHE_HOME:-$HOME/.cache}/devshard-node, override DEVSHARD_NODE_CACHE), so later
# runs do not touch the network. `--install-only`: install node and the package and stop (what
# .ci/run starts in the background).
set -euo pipefail
cd "$(dirname "$0")/../.."
. tests/lib/install_lock.sh

fail() { echo "FAIL: $*" >&2; exit 1; }

install_lock
if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
    echo "== installing nodejs and npm (Debian packages)"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends nodejs npm
fi
node --version

CACHE="${DEVSHARD_NODE_CACHE:-${XDG_CACHE_HOME:-${HOME:-/root}/.cache}/devshard-node}"
DIR="$CACHE/openai-$(sha256sum tests/node/package.json | cut -c1-16)"
if [ ! -f "$DIR/.complete" ]; then
    echo "== npm install (first run) into $DIR"
    rm -rf "$DIR"
    mkdir -p "$DIR"
    cp tests/node/package.json "$DIR/"
    (cd "$DIR" && npm install --silent --no-package-lock --ignore-scripts --no-audit --no-fund >/dev/null)
    touch "$DIR/.complete"
fi
install_unlock
[ "${1:-}" = --install-only ] && exit 0
# ES modules resolve packages from the script's own directory.
cp tests/node/client.mjs "$DIR/"

. tests/lib/demo.sh
demo_build
trap demo_stop EXIT

KEY="node-$(head -c 12 /dev/urandom | od -An -tx1 | tr -d ' \n')"
demo_start zero DEVSHARD_API_KEYS="$KEY"
MODEL="$(curl -fsS "$URL/v1/models" | sed -n 's/.*"id" *: *"\([^"]*\)".*/\1/p' | head -1)"
[ -n "$MODEL" ] || fail "no model in /v1/models"

echo "== openai (npm) client"
node "$DIR/client.mjs" "$URL" "$KEY" "$MODEL" || { tail -30 "$WORK/demo.log" >&2; fail "the node client test failed"; }
