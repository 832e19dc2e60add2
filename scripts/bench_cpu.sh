#!/usr/bin/env bash
# make bench, the soft CPU: the simulator's speed with the card built without the CPU, with it
# stopped, and with it running the firmware; writes the <!-- cpu --> section of
# docs/performance.md. Needs build/card/dw64/, build/card/dw64-cpu/ and build/firmware/.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/simctl.sh
trap sim_stop EXIT
OUT=build/bench
mkdir -p "$OUT"
BENCH=(bench sim)
sim_start --data-width 64
"$TLPX_BIN/tlpx" --device "sim:$SIM_SOCK" --json "${BENCH[@]}" > "$OUT/sim-cpu-none.json"
sim_stop
sim_start --data-width 64 --with-cpu
"$TLPX_BIN/tlpx" --device "sim:$SIM_SOCK" --json "${BENCH[@]}" > "$OUT/sim-cpu-stopped.json"
"$TLPX_BIN/tlpx" --device "sim:$SIM_SOCK" fw load build/firmware/tlpx-fw.img > "$OUT/fw-load.txt"
"$TLPX_BIN/tlpx" --device "sim:$SIM_SOCK" --json "${BENCH[@]}" > "$OUT/sim-cpu-running.json"
sim_stop
.venv/bin/python scripts/bench_report.py --cpu "$OUT" docs/performance.md
