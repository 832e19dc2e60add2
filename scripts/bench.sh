#!/usr/bin/env bash
# make bench: the simulator's speed (card cycles per wall second, idle and with DMA
# traffic) and the MMIO round trip a client sees, for each datapath width; then the
# generator's DMA bandwidth against the link model (scripts/bench_bw.sh), the spy's rates
# (scripts/bench_spy.sh), the real-time loop and interrupt user stage (scripts/bench_loop.sh),
# rule 30: sw-fast vs sw-char and the crossover on the simulated card (scripts/bench_rule30.sh),
# and the simulator's speed with the soft CPU stopped and running (scripts/bench_cpu.sh); the
# full card against the card without tlpx's blocks, interleaved, with callgrind instruction
# counts (scripts/bench_sim.sh); what a user waits for: top beside bw, make demo, every README
# command with its defaults (scripts/bench_user.sh). The build levers alone: scripts/bench_levers.sh (not here).
# Writes build/bench/*.json and docs/performance.md.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/simctl.sh
trap sim_stop EXIT

WIDTHS=${WIDTHS:-64 128 256}
OUT=build/bench
mkdir -p "$OUT"
for w in $WIDTHS; do
    echo "== bench: ${w}-bit card"
    sim_start --data-width "$w"
    "$TLPX_BIN/tlpx" --device "sim:$SIM_SOCK" --json bench sim > "$OUT/sim-dw$w.json"
    "$TLPX_BIN/tlpx" --device "sim:$SIM_SOCK" bench sim --idle-cycles 1000000 --dma-repeats 1 --mmio-count 100 >/dev/null
    sim_stop
done
.venv/bin/python scripts/bench_report.py "$OUT" docs/performance.md $WIDTHS
sim_stop
echo "== bench: simulator speed, the full card against the card without tlpx's blocks (interleaved; callgrind)"
results=()
for w in $WIDTHS; do
    scripts/bench_sim.sh "$OUT/simspeed-dw$w.json" full="build/card/dw$w/libtlpxcard.so" \
        litepcie="build/card/dw$w-litepcie/libtlpxcard.so" litepcie_gated="build/card/dw$w-litepcie-gated/libtlpxcard.so"
    results+=("$OUT/simspeed-dw$w.json")
done
.venv/bin/python scripts/bench_sim_report.py simspeed docs/performance.md "${results[@]}"
echo "== bench: DMA bandwidth against the link model"
scripts/bench_bw.sh
echo "== bench: spy sustained rate and host ingest"
scripts/bench_spy.sh
echo "== bench: real-time loop and interrupt user stage, idle vs loaded"
scripts/bench_loop.sh
echo "== bench: rule-30 software references and the accelerator's crossover"
scripts/bench_rule30.sh
echo "== bench: the simulator with the soft CPU"
scripts/bench_cpu.sh
echo "== bench: what a user waits for (top under traffic, make demo, the README's commands)"
scripts/bench_user.sh
cat docs/performance.md
