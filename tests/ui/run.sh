#!/usr/bin/env bash
# Headless-browser test of GET /debug/ui: starts `devshard-gateway demo --profile zero` with a
# random admin key, sends a few chat requests, then renders http://…/debug/ui#key=… in headless
# Chromium and checks the DOM (escrows 42 and 43, a gonka1… participant) and a screenshot.
# Installs Debian's chromium when missing (needs root; works on a fresh machine).
# Keeps the screenshot at target/ui/debug-ui.png (UI_OUT=dir to change).
set -euo pipefail
cd "$(dirname "$0")/../.."

fail() { echo "FAIL: $*" >&2; exit 1; }

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
"$CHROMIUM" --version

echo "== build"
cargo build --locked --quiet
BIN="${CARGO_TARGET_DIR:-target}/debug/devshard-gateway"
[ -x "$BIN" ] || fail "no binary at $BIN"

OUT="${UI_OUT:-${CARGO_TARGET_DIR:-target}/ui}"
mkdir -p "$OUT"
WORK="$(mktemp -d)"
PID=""
cleanup() {
    if [ -n "$PID" ]; then kill "$PID" 2>/dev/null || true; wait "$PID" 2>/dev/null || true; fi
    rm -rf "$WORK"
}
trap cleanup EXIT

# A free port (the kernel picks; the race with another process grabbing it is negligible here).
PORT="$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])' 2>/dev/null \
    || echo $((20000 + RANDOM % 20000)))"
KEY="$(head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n')"
URL="http://127.0.0.1:$PORT"

echo "== demo on $URL"
env -u DEVSHARD_API_KEYS -u DEVSHARD_CONFIG \
    DEVSHARD_LISTEN="127.0.0.1:$PORT" DEVSHARD_ADMIN_API_KEY="$KEY" DEVSHARD_DATA_DIR="$WORK/data" \
    "$BIN" demo --profile zero >"$WORK/demo.log" 2>&1 &
PID=$!
for _ in $(seq 1 150); do
    curl -fsS "$URL/readyz" >/dev/null 2>&1 && break
    kill -0 "$PID" 2>/dev/null || { cat "$WORK/demo.log" >&2; fail "demo exited"; }
    sleep 0.2
done
curl -fsS "$URL/readyz" >/dev/null || { tail -50 "$WORK/demo.log" >&2; fail "demo not ready"; }

MODEL="$(curl -fsS "$URL/v1/models" | sed -n 's/.*"id" *: *"\([^"]*\)".*/\1/p' | head -1)"
[ -n "$MODEL" ] || fail "no model in /v1/models"
for i in 1 2 3 4 5 6; do
    curl -fsS "$URL/v1/chat/completions" -H 'content-type: application/json' \
        -d "{\"model\":\"$MODEL\",\"messages\":[{\"role\":\"user\",\"content\":\"hello $i\"}]}" >/dev/null \
        || fail "chat request $i failed"
done
curl -fsS -o /dev/null -w '' "$URL/debug/ui" || fail "/debug/ui not served without auth"
curl -fsS -H "authorization: Bearer $KEY" "$URL/v1/debug/actors" >"$OUT/actors.json" || fail "/v1/debug/actors"

chrome() {
    "$CHROMIUM" --headless --no-sandbox --disable-gpu --disable-dev-shm-usage \
        --disable-background-networking --disable-component-update --disable-sync --no-first-run \
        --user-data-dir="$WORK/profile-$1" --virtual-time-budget=5000 "${@:2}" 2>>"$WORK/chromium.log"
}

echo "== headless chromium: DOM"
chrome dom --dump-dom "$URL/debug/ui#key=$KEY" >"$OUT/debug-ui.html" || { cat "$WORK/chromium.log" >&2; fail "chromium --dump-dom"; }
for id in 42 43; do
    grep -q "data-escrow-id=\"$id\"" "$OUT/debug-ui.html" || fail "escrow $id not rendered (see $OUT/debug-ui.html)"
done
grep -q 'data-participant="gonka1' "$OUT/debug-ui.html" || fail "no gonka1… participant rendered"
grep -q 'data-health="healthy"' "$OUT/debug-ui.html" || fail "no healthy participant group rendered"
if grep -q 'id="status" class="err"' "$OUT/debug-ui.html"; then fail "page shows an error status"; fi

echo "== headless chromium: screenshot"
rm -f "$OUT/debug-ui.png"
chrome shot --hide-scrollbars --window-size=1280,900 --screenshot="$OUT/debug-ui.png" "$URL/debug/ui#key=$KEY" >/dev/null \
    || { cat "$WORK/chromium.log" >&2; fail "chromium --screenshot"; }
[ -f "$OUT/debug-ui.png" ] || fail "no screenshot"
SIZE="$(wc -c <"$OUT/debug-ui.png")"
[ "$SIZE" -gt 10240 ] || fail "screenshot is only $SIZE bytes"
echo "ok: DOM has escrows 42, 43 and gonka1… participants; screenshot $OUT/debug-ui.png ($SIZE bytes)"
