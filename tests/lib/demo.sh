# Sourced by the end-to-end scripts (tests/ui, tests/node): builds the gateway and starts
# `devshard-gateway demo` on a port the kernel picks when the gateway binds (DEVSHARD_LISTEN
# 127.0.0.1:0), then reads the bound address from the banner's `gateway:` line. Picking a free port
# beforehand raced with the simulator, whose hosts and chain bind ephemeral ports first and could
# take the same one (CI once failed with "Address already in use").
#
# DEVSHARD_GATEWAY_BIN: use that binary instead of building one (CI passes the one its tests built).
# Usage: demo_build; demo_start <profile> [VAR=value ...]   → sets PID, URL, WORK (temp dir)
#        demo_stop (from the caller's EXIT trap)
# Callers define `fail`.

demo_build() {
    if [ -n "${DEVSHARD_GATEWAY_BIN:-}" ]; then
        echo "== binary $DEVSHARD_GATEWAY_BIN (DEVSHARD_GATEWAY_BIN)"
        BIN="$DEVSHARD_GATEWAY_BIN"
    else
        echo "== build"
        cargo build --locked --quiet
        BIN="${CARGO_TARGET_DIR:-target}/debug/devshard-gateway"
    fi
    [ -x "$BIN" ] || fail "no binary at $BIN"
    WORK="$(mktemp -d)"
    PID=""
}

demo_start() {
    local profile="$1"
    shift
    env -u DEVSHARD_CONFIG -u DEVSHARD_API_KEYS -u DEVSHARD_ADMIN_API_KEY \
        DEVSHARD_LISTEN="127.0.0.1:0" DEVSHARD_DATA_DIR="$WORK/data" "$@" \
        "$BIN" demo --profile "$profile" >"$WORK/demo.log" 2>&1 &
    PID=$!
    URL=""
    for _ in $(seq 1 300); do
        URL="$(sed -n 's/^gateway: \(http:[^ ]*\)$/\1/p' "$WORK/demo.log" | head -1)"
        [ -n "$URL" ] && break
        kill -0 "$PID" 2>/dev/null || { cat "$WORK/demo.log" >&2; fail "demo exited"; }
        sleep 0.1
    done
    [ -n "$URL" ] || { tail -50 "$WORK/demo.log" >&2; fail "demo printed no gateway address"; }
    for _ in $(seq 1 150); do
        curl -fsS "$URL/readyz" >/dev/null 2>&1 && break
        kill -0 "$PID" 2>/dev/null || { cat "$WORK/demo.log" >&2; fail "demo exited"; }
        sleep 0.2
    done
    curl -fsS "$URL/readyz" >/dev/null || { tail -50 "$WORK/demo.log" >&2; fail "demo not ready"; }
    echo "== demo on $URL"
}

demo_stop() {
    if [ -n "${PID:-}" ]; then kill "$PID" 2>/dev/null || true; wait "$PID" 2>/dev/null || true; fi
    if [ -n "${WORK:-}" ]; then rm -rf "$WORK"; fi
}
