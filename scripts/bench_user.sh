#!/usr/bin/env bash
# make bench, the part a user waits for (issue 14's targets): on the 64-bit simulated card
#   1. tlpx top beside a running tlpx bw: frames per wall second, time to the first frame and
#      the span of card time each frame covers (top holds live time on the simulator);
#   2. make demo after set-up: scripts/demo.sh's wall time (what `make demo` runs once the
#      builds are up to date);
#   3. every command of README.md's "Using it" block with its defaults (scripts/readme_commands.sh).
# Writes build/bench/user-*.{json,md,log} and the <!-- user --> section of docs/performance.md.
# Environment: TOP_FRAMES (default 10), SKIP_DEMO=1 / SKIP_README=1 to leave a part out (the
# section then keeps saying which part was not measured).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/simctl.sh
OUT=build/bench
mkdir -p "$OUT"
TOP_FRAMES=${TOP_FRAMES:-10}
BW_PID=
cleanup() {
    [ -n "$BW_PID" ] && kill -INT "$BW_PID" 2>/dev/null && wait "$BW_PID" 2>/dev/null
    sim_stop
}
trap cleanup EXIT

echo "== bench (user): tlpx top beside tlpx bw on the 64-bit card, $TOP_FRAMES frames"
sim_start --data-width 64
TLPX=("$TLPX_BIN/tlpx" --device "sim:$SIM_SOCK")
# The traffic: DMA reads of 4 KiB for a second of card time (far longer than top runs in live
# time); stopped with Ctrl-C once top is done.
"${TLPX[@]}" bw --op read --sizes 4096 --duration 1s --repeat 1 >"$OUT/user-top-bw.log" 2>&1 &
BW_PID=$!
# Up to 60 s: on a loaded machine bw takes a while to start and claim the generator.
for _ in $(seq 1 1200); do
    "${TLPX[@]}" owners 2>/dev/null | grep -q "^generator  *PID $BW_PID " && break
    kill -0 "$BW_PID" 2>/dev/null || { echo "bench_user: tlpx bw ended before top started:" >&2; cat "$OUT/user-top-bw.log" >&2; exit 1; }
    sleep 0.05
done
"${TLPX[@]}" owners | grep -q "^generator  *PID $BW_PID " || { echo "bench_user: tlpx bw never owned the generator" >&2; exit 1; }
start=$(date +%s.%N)
"${TLPX[@]}" --json top --frames "$TOP_FRAMES" >"$OUT/user-top.jsonl"
end=$(date +%s.%N)
kill -0 "$BW_PID" 2>/dev/null || { echo "bench_user: tlpx bw ended while top ran: top did not watch traffic throughout" >&2; exit 1; }
kill -INT "$BW_PID"; wait "$BW_PID" 2>/dev/null || true; BW_PID=
sim_stop
python3 -c 'import sys; print(f"{float(sys.argv[2]) - float(sys.argv[1]):.2f}")' "$start" "$end" >"$OUT/user-top-wall.txt"

if [ "${SKIP_DEMO:-0}" != 1 ]; then
    echo "== bench (user): make demo after set-up (scripts/demo.sh)"
    start=$(date +%s.%N)
    scripts/demo.sh >"$OUT/user-demo.log" 2>&1
    end=$(date +%s.%N)
    python3 -c 'import sys; print(f"{float(sys.argv[2]) - float(sys.argv[1]):.1f}")' "$start" "$end" >"$OUT/user-demo-wall.txt"
else
    rm -f "$OUT/user-demo-wall.txt"
fi

if [ "${SKIP_README:-0}" != 1 ]; then
    echo "== bench (user): every README command with its defaults (scripts/readme_commands.sh)"
    LOG_DIR="$PWD/$OUT/user-readme-logs" scripts/readme_commands.sh "$OUT/user-readme.md"
else
    rm -f "$OUT/user-readme.md"
fi

.venv/bin/python scripts/bench_user_report.py "$OUT" docs/performance.md
