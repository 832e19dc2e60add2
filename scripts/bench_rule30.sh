#!/usr/bin/env bash
# Rule-30 benchmark: sw-fast against sw-char at 1024 bits (the seed's 1000 packets x 99
# generations), and a reduced sweep on the simulated card for the crossover lengths and the
# overhead table. Writes build/bench/rule30-*.json and docs/performance.md between
# <!-- rule30:begin --> and <!-- rule30:end -->. The full default sweep (8..1024/8 bits x 5
# latencies x 1000 x 99) is `make rule30-sweep` (hours on the simulator).
#
# Usage: scripts/bench_rule30.sh [PACKETS] [GENERATIONS]   (sweep; default 10 20)
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
source scripts/simctl.sh
trap sim_stop EXIT
packets="${1:-10}"
generations="${2:-20}"
out=build/bench
mkdir -p "$out"

echo "== bench: sw-fast against sw-char at 1024 bits, 1000 packets x 99 generations"
(cd host && cargo run --release -q -p tlpx-rule30 --example bench_ratio -- --json 1024 1000 99) > "$out/rule30-ratio.json"

echo "== bench: rule-30 sweep on the simulated card ($packets packets x $generations generations per point)"
lengths="8,16,32,64,128,256,512,1024"
latencies="1ns,100ns,10us"
cmd_sweep="tlpx rule30 sweep --packets $packets --generations $generations --lengths $lengths --latencies $latencies --verify"
sim_start
"$TLPX_BIN/tlpx" --device "sim:$SIM_SOCK" rule30 sweep --packets "$packets" --generations "$generations" \
    --lengths "$lengths" --latencies "$latencies" --verify --out-dir "$out/rule30" > "$out/rule30-sweep.txt"
sim_stop

section="$(mktemp)"
.venv/bin/python scripts/bench_rule30_report.py "$out" "$cmd_sweep" > "$section"
.venv/bin/python scripts/md_section.py rule30 docs/performance.md "$section"
rm -f "$section"
echo "written to docs/performance.md"
