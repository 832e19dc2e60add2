#!/usr/bin/env bash
# make demo: the main job on the simulated card. For now: start tlpx-sim, then
# `tlpx list`, `tlpx info` and `tlpx selftest` against it, stop it, summarise.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/simctl.sh
trap sim_stop EXIT

DATA_WIDTH=${DATA_WIDTH:-64}
echo "== starting tlpx-sim (simulated card, ${DATA_WIDTH}-bit datapath)"
sim_start --data-width "$DATA_WIDTH"
TLPX=("$TLPX_BIN/tlpx" --device "sim:$SIM_SOCK")

echo; echo "== tlpx list"
"${TLPX[@]}" list
echo; echo "== tlpx info"
"${TLPX[@]}" info
echo; echo "== tlpx selftest"
status=0
"${TLPX[@]}" selftest || status=$?
sim_stop
echo
if [ "$status" = 0 ]; then
    echo "demo: simulated card found, identified and selftest PASS (figures above are simulated)"
else
    echo "demo: selftest FAILED (exit $status)"; exit "$status"
fi
