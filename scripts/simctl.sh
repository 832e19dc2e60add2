# Helpers to start and stop a tlpx-sim for scripts (sourced, not run).
# Usage: source scripts/simctl.sh; sim_start [tlpx-sim args...]; ...; sim_stop

TLPX_BIN=${TLPX_BIN:-$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)/host/target/release}

sim_start() {
    SIM_DIR=$(mktemp -d "${TMPDIR:-/tmp}/tlpx-sim.XXXXXX")
    SIM_SOCK="$SIM_DIR/sim.sock"
    "$TLPX_BIN/tlpx-sim" --socket "$SIM_SOCK" --quiet "$@" >"$SIM_DIR/sim.log" 2>&1 &
    SIM_PID=$!
    for _ in $(seq 1 200); do
        [ -S "$SIM_SOCK" ] && return 0
        if ! kill -0 "$SIM_PID" 2>/dev/null; then
            echo "tlpx-sim exited during start-up:" >&2; cat "$SIM_DIR/sim.log" >&2; return 1
        fi
        sleep 0.05
    done
    echo "tlpx-sim did not open $SIM_SOCK within 10 s" >&2
    return 1
}

sim_stop() {
    if [ -n "${SIM_PID:-}" ] && kill -0 "$SIM_PID" 2>/dev/null; then
        kill -TERM "$SIM_PID" 2>/dev/null || true
        wait "$SIM_PID" 2>/dev/null || true
    fi
    [ -n "${SIM_DIR:-}" ] && rm -rf "$SIM_DIR"
    SIM_PID=
}
