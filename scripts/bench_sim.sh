#!/usr/bin/env bash
# The simulator's speed for a set of card libraries, measured in the same run, interleaved:
# round r measures every card once (in the order given), then round r+1, ... so that a slow
# moment of this shared machine falls on every card alike. Per card: `tlpx-sim --card LIB`
# then `tlpx --json bench sim` (idle cycles/s, DMA loopback cycles/s, MMIO read round trip),
# REPEATS rounds (median over them in the report), plus the instructions per idle card cycle
# inside tlpx_card_cycle counted by callgrind (valgrind) on tlpx_trainer --idle, which no
# machine noise changes.
#
#   scripts/bench_sim.sh OUT.json LABEL=LIB [LABEL=LIB ...]
#
# Environment: REPEATS (3), IDLE_CYCLES (2000000), DMA_REPEATS (3), MMIO_COUNT (2000),
# CALLGRIND_CYCLES (20000; 0 skips callgrind), SIM_ARGS (more tlpx-sim arguments).
# Writes OUT.json: {"runs": [{"label", "library", "round", "bench": <tlpx bench sim JSON>}...],
# "callgrind": {label: instructions per idle cycle}, "build_flags": {label: build_flags.json}}.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/simctl.sh
trap sim_stop EXIT

out=$1
mkdir -p "$(dirname "$out")"
shift
REPEATS=${REPEATS:-3}
IDLE_CYCLES=${IDLE_CYCLES:-2000000}
DMA_REPEATS=${DMA_REPEATS:-3}
MMIO_COUNT=${MMIO_COUNT:-2000}
CALLGRIND_CYCLES=${CALLGRIND_CYCLES:-20000}
work=$(mktemp -d "${TMPDIR:-/tmp}/tlpx-bench-sim.XXXXXX")
trap 'sim_stop; rm -rf "$work"' EXIT

labels=()
libs=()
for arg in "$@"; do
    labels+=("${arg%%=*}")
    lib=${arg#*=}
    [ -f "$lib" ] || { echo "bench_sim: no card library $lib" >&2; exit 1; }
    libs+=("$(cd "$(dirname "$lib")" && pwd)/$(basename "$lib")")
done

# The trainer, built here with the system's compiler (it only drives the card's C ABI).
trainer="$work/tlpx_trainer"
c++ -std=c++20 -O2 -Igateware/tlpx_gateware/sim gateware/tlpx_gateware/sim/tlpx_trainer.cpp -o "$trainer" -ldl

: > "$work/runs.jsonl"
for round in $(seq 1 "$REPEATS"); do
    for i in "${!labels[@]}"; do
        echo "== bench_sim: round $round/$REPEATS, ${labels[$i]}"
        sim_start --card "${libs[$i]}" ${SIM_ARGS:-}
        "$TLPX_BIN/tlpx" --device "sim:$SIM_SOCK" --json bench sim --idle-cycles "$IDLE_CYCLES" \
            --dma-repeats "$DMA_REPEATS" --mmio-count "$MMIO_COUNT" > "$work/run.json"
        sim_stop
        python3 -c 'import json,sys; print(json.dumps({"label": sys.argv[1], "library": sys.argv[2], "round": int(sys.argv[3]), "bench": json.load(open(sys.argv[4]))}))' \
            "${labels[$i]}" "${libs[$i]}" "$round" "$work/run.json" >> "$work/runs.jsonl"
    done
done

: > "$work/callgrind.txt"
if [ "$CALLGRIND_CYCLES" != 0 ] && command -v valgrind >/dev/null; then
    for i in "${!labels[@]}"; do
        echo "== bench_sim: callgrind, ${labels[$i]} ($CALLGRIND_CYCLES idle cycles)"
        valgrind --tool=callgrind --callgrind-out-file="$work/cg.out" --toggle-collect=tlpx_card_cycle \
            "$trainer" "${libs[$i]}" --idle "$CALLGRIND_CYCLES" > /dev/null 2> "$work/cg.log"
        ir=$(callgrind_annotate "$work/cg.out" | awk '/PROGRAM TOTALS/ {gsub(",", "", $1); print $1; exit}')
        echo "${labels[$i]} $ir" >> "$work/callgrind.txt"
    done
else
    echo "bench_sim: no valgrind (or CALLGRIND_CYCLES=0): no instruction counts" >&2
fi

python3 - "$out" "$work/runs.jsonl" "$work/callgrind.txt" "$CALLGRIND_CYCLES" "${labels[@]}" -- "${libs[@]}" <<'EOF'
import json, sys
from pathlib import Path
out, runs, cg, cycles = sys.argv[1:5]
rest = sys.argv[5:]
sep = rest.index("--")
labels, libs = rest[:sep], rest[sep + 1:]
callgrind = {}
for line in Path(cg).read_text().splitlines():
    label, ir = line.rsplit(" ", 1)
    callgrind[label] = int(ir) / int(cycles)
flags = {}
for label, lib in zip(labels, libs):
    f = Path(lib).parent / "build_flags.json"
    flags[label] = json.loads(f.read_text()) if f.exists() else None
doc = {
    "labels": labels,
    "callgrind_idle_cycles": int(cycles),
    "runs": [json.loads(l) for l in Path(runs).read_text().splitlines()],
    "callgrind": callgrind,
    "build_flags": flags,
}
Path(out).write_text(json.dumps(doc, indent=1) + "\n")
EOF
echo "== bench_sim: wrote $out"
