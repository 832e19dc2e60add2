#!/usr/bin/env bash
# Real-time loop and interrupt user-stage benchmark on the simulated card, idle vs loaded.
#
#  1. tlpx loop --sweep in virtual time: the modelled card and link part of the loop
#     (deterministic), sizes 8..4096 x poll/irq x register/dma x idle/loaded.
#  2. tlpx loop and tlpx irq with tlpx-sim --host-time real: the same plus this host's real
#     time (socket wake-up, scheduler, the checksum), measuring thread on the last CPU at
#     SCHED_FIFO 50 when permitted, load (cpu, mem, syscall) on CPU 0.
#
# Writes build/bench/loop-*.json, irq-real.json and docs/performance.md between
# <!-- loop:begin --> and <!-- loop:end -->.
#
# Usage: scripts/bench_loop.sh [ITERATIONS] [REAL_ITERATIONS] [IRQ_SAMPLES]  (default 300 100 200)
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
source scripts/simctl.sh
trap sim_stop EXIT
iterations="${1:-300}"
real_iterations="${2:-100}"
irq_samples="${3:-200}"
out=build/bench
mkdir -p "$out"
last_cpu=$(( $(nproc) - 1 ))

echo "== bench: real-time loop sweep, virtual time ($iterations iterations per point)"
sim_start
cmd_sweep="tlpx loop --sweep --iterations $iterations --load cpu,mem,syscall --load-cpus 0"
"$TLPX_BIN/tlpx" --device "sim:$SIM_SOCK" loop --sweep --iterations "$iterations" \
    --load cpu,mem,syscall --load-cpus 0 --output "$out/loop-sweep.json" >/dev/null
sim_stop

echo "== bench: real-time loop with real host time ($real_iterations iterations per point)"
sim_start --host-time real
cmd_real="tlpx loop --size 256 --detect poll,irq --return register,dma --iterations $real_iterations --compare idle,loaded --load cpu,mem,syscall --load-cpus 0 --cpu $last_cpu --fifo 50"
"$TLPX_BIN/tlpx" --device "sim:$SIM_SOCK" loop --size 256 --detect poll,irq --return register,dma \
    --iterations "$real_iterations" --compare idle,loaded --load cpu,mem,syscall --load-cpus 0 \
    --cpu "$last_cpu" --fifo 50 --output "$out/loop-real.json" >/dev/null
sim_stop

echo "== bench: interrupt user stage with real host time ($irq_samples samples per run)"
sim_start --host-time real
cmd_irq="tlpx irq --samples $irq_samples --min 200us --max 500us --compare idle,loaded --load cpu,mem,syscall --load-cpus 0 --cpu $last_cpu --fifo 50"
"$TLPX_BIN/tlpx" --device "sim:$SIM_SOCK" irq --samples "$irq_samples" --min 200us --max 500us \
    --compare idle,loaded --load cpu,mem,syscall --load-cpus 0 --cpu "$last_cpu" --fifo 50 \
    --output "$out/irq-real.json" >/dev/null
sim_stop

section="$(mktemp)"
.venv/bin/python scripts/bench_loop_report.py "$out" "$cmd_sweep" "$cmd_real" "$cmd_irq" > "$section"
.venv/bin/python scripts/md_section.py loop docs/performance.md "$section"
rm -f "$section"
echo "written to docs/performance.md"
