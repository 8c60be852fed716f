#!/usr/bin/env bash
# Headless-browser test of GET /debug/ui: starts `devshard-gateway demo --profile fast` with a
# random admin key, drives chat load in the background, then renders http://…/debug/ui#key=… in
# headless Chromium at 1280 px and checks the DOM (escrows 42 and 43, a gonka1… participant, the
# chain poller table, each escrow's settlement row with its nonce and balance budget, seven
# charts, no section wider than the window), renders it again seconds
# later and checks the charts' data moved, and takes two screenshots that differ.
# Installs Debian's chromium when missing (needs root; works on a fresh machine).
# Keeps the screenshot at target/ui/debug-ui.png (UI_OUT=dir to change).
# `--install-only`: install chromium and curl and stop (what .ci/run starts in the background).
set -euo pipefail
cd "$(dirname "$0")/../.."
. tests/lib/install_lock.sh

fail() { echo "FAIL: $*" >&2; exit 1; }

install_lock
CHROMIUM="${CHROMIUM_BIN:-}"
if [ -z "$CHROMIUM" ]; then
    CHROMIUM="$(command -v chromium || command -v chromium-browser || true)"
fi
if [ -z "$CHROMIUM" ]; then
    echo "== installing chromium (Debian packages)"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq chromium
    CHROMIUM="$(command -v chromium)"
fi
for tool in curl; do
    command -v "$tool" >/dev/null 2>&1 || { apt-get update -qq && apt-get install -y -qq "$tool"; }
done
install_unlock
"$CHROMIUM" --version
[ "${1:-}" = --install-only ] && exit 0

. tests/lib/demo.sh
demo_build
OUT="${UI_OUT:-${CARGO_TARGET_DIR:-target}/ui}"
mkdir -p "$OUT"
LOAD=""
cleanup() {
    if [ -n "$LOAD" ]; then kill "$LOAD" 2>/dev/null || true; fi
    demo_stop
}
trap cleanup EXIT

KEY="$(head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n')"
demo_start fast DEVSHARD_ADMIN_API_KEY="$KEY"

MODEL="$(curl -fsS "$URL/v1/models" | sed -n 's/.*"id" *: *"\([^"]*\)".*/\1/p' | head -1)"
[ -n "$MODEL" ] || fail "no model in /v1/models"
for i in 1 2 3 4 5 6; do
    curl -fsS "$URL/v1/chat/completions" -H 'content-type: application/json' \
        -d "{\"model\":\"$MODEL\",\"messages\":[{\"role\":\"user\",\"content\":\"hello $i\"}]}" >/dev/null \
        || fail "chat request $i failed"
done
# Background load for the charts (the printed curl command in a loop, as an operator would).
( i=0; while kill -0 "$PID" 2>/dev/null; do i=$((i + 1))
    curl -fsS -N "$URL/v1/chat/completions" -H 'content-type: application/json' \
        -d "{\"model\":\"$MODEL\",\"stream\":$([ $((i % 2)) = 0 ] && echo true || echo false),\"messages\":[{\"role\":\"user\",\"content\":\"load $i\"}]}" >/dev/null 2>&1 || true
  done ) &
LOAD=$!
sleep 5  # two series points with load
curl -fsS -o /dev/null -w '' "$URL/debug/ui" || fail "/debug/ui not served without auth"
curl -fsS -H "authorization: Bearer $KEY" "$URL/v1/debug/actors" >"$OUT/actors.json" || fail "/v1/debug/actors"

chrome() {
    "$CHROMIUM" --headless --no-sandbox --disable-gpu --disable-dev-shm-usage --window-size=1280,1400 \
        --disable-background-networking --disable-component-update --disable-sync --no-first-run \
        --user-data-dir="$WORK/profile-$1" --virtual-time-budget=5000 "${@:2}" 2>>"$WORK/chromium.log"
}

echo "== headless chromium: DOM"
chrome dom --dump-dom "$URL/debug/ui#key=$KEY" >"$OUT/debug-ui.html" || { cat "$WORK/chromium.log" >&2; fail "chromium --dump-dom"; }
CHARTS="$(grep -o 'data-chart="[a-z]*"' "$OUT/debug-ui.html" | sort -u | wc -l)"
[ "$CHARTS" -ge 7 ] || fail "expected 7 charts, found $CHARTS (see $OUT/debug-ui.html)"
grep -q '<svg' "$OUT/debug-ui.html" || fail "no inline SVG chart"
grep -q '<polyline[^>]*points="[0-9]' "$OUT/debug-ui.html" || fail "the charts have no data"
grep -q 'data-endpoint="epochs_latest"' "$OUT/debug-ui.html" || fail "the chain poller table has no epochs_latest row"
grep -q 'data-overflow=""' "$OUT/debug-ui.html" || fail "a section is wider than 1280 px: $(grep -o 'data-overflow="[^"]*"' "$OUT/debug-ui.html")"
for id in 42 43; do
    grep -q "data-escrow-id=\"$id\"" "$OUT/debug-ui.html" || fail "escrow $id not rendered (see $OUT/debug-ui.html)"
done
for id in 42 43; do
    grep -q "data-settlement=\"$id\" data-settlement-state=\"[a-z]*\" data-nonces-left=\"[0-9][0-9]*\" data-balance=\"[0-9][0-9]*\"" "$OUT/debug-ui.html" \
        || fail "escrow $id has no settlement row with its nonce and balance budget (see $OUT/debug-ui.html)"
done
for id in 42 43; do
    grep -q "data-settlement=\"$id\" [^>]*data-role=\"active\"" "$OUT/debug-ui.html" \
        || fail "escrow $id shows no role (active) in its settlement row (see $OUT/debug-ui.html)"
done
grep -q 'data-limiter="' "$OUT/debug-ui.html" || fail "the overload limiter's table is not rendered"
grep -q '"kind":"settlement"' "$OUT/actors.json" || fail "/v1/debug/actors lists no settlement entry"
grep -q 'data-participant="gonka1' "$OUT/debug-ui.html" || fail "no gonka1… participant rendered"
grep -q 'data-health="healthy"' "$OUT/debug-ui.html" || fail "no healthy participant group rendered"
if grep -q 'id="status" class="err"' "$OUT/debug-ui.html"; then fail "page shows an error status"; fi

echo "== headless chromium: screenshots seconds apart"
shot() {
    rm -f "$OUT/$1"
    chrome "$1" --hide-scrollbars --screenshot="$OUT/$1" "$URL/debug/ui#key=$KEY" >/dev/null \
        || { cat "$WORK/chromium.log" >&2; fail "chromium --screenshot"; }
    [ -f "$OUT/$1" ] || fail "no screenshot $1"
    SIZE="$(wc -c <"$OUT/$1")"
    [ "$SIZE" -gt 10240 ] || fail "screenshot $1 is only $SIZE bytes"
}
shot debug-ui.png
sleep 4  # at least one new series point (one every 2 s)
shot debug-ui-later.png
cmp -s "$OUT/debug-ui.png" "$OUT/debug-ui-later.png" && fail "the two screenshots are identical"
chrome dom2 --dump-dom "$URL/debug/ui#key=$KEY" >"$OUT/debug-ui-later.html" || fail "chromium --dump-dom (later)"
charts() { grep -o 'data-chart="[a-z]*" data-points="[0-9]*" data-last-t="[0-9]*" data-last="[^"]*"' "$1"; }
charts "$OUT/debug-ui.html" >"$WORK/charts-1"
charts "$OUT/debug-ui-later.html" >"$WORK/charts-2"
[ "$(wc -l <"$WORK/charts-2")" -ge 7 ] || fail "charts missing in the later render"
cmp -s "$WORK/charts-1" "$WORK/charts-2" && fail "the charts' data did not change: $(cat "$WORK/charts-2")"
T1="$(sed -n 's/.*data-chart="requests".*data-last-t="\([0-9]*\)".*/\1/p' "$WORK/charts-1")"
T2="$(sed -n 's/.*data-chart="requests".*data-last-t="\([0-9]*\)".*/\1/p' "$WORK/charts-2")"
[ -n "$T1" ] && [ -n "$T2" ] && [ "$T2" -gt "$T1" ] || fail "the series did not advance ($T1 → $T2)"
echo "ok: escrows 42, 43 with settlement budgets and roles, the limiter, gonka1… participants, chain table, $CHARTS charts whose data moved ($T1 → $T2), no overflow at 1280 px; screenshots $OUT/debug-ui.png, $OUT/debug-ui-later.png"
