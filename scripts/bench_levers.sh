#!/usr/bin/env bash
# The build levers of the card's model, each measured alone on the 64-bit card: the same card
# built four ways by tlpx_gateware.build (g++ or clang, without or with the profile-guided
# pass) into build/levers/, measured interleaved by scripts/bench_sim.sh (REPEATS rounds,
# callgrind instructions per idle cycle), written to docs/performance.md (<!-- levers -->).
# "gcc" is the build as it was before clang and PGO (g++ -O3, no profile).
# Not part of `make bench` (four more builds, several minutes); run after `make gateware host`.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=build/levers
mkdir -p "$OUT"
declare -A FLAGS=([gcc]="--cxx gcc --no-pgo" [clang]="--cxx clang --no-pgo" [gcc+PGO]="--cxx gcc" [clang+PGO]="--cxx clang")
ORDER=(gcc clang gcc+PGO clang+PGO)
args=()
for v in "${ORDER[@]}"; do
    dir="$OUT/dw64-${v//+/-}"
    start=$(date +%s)
    # shellcheck disable=SC2086
    .venv/bin/python -m tlpx_gateware.build --data-width 64 --output "$dir" ${FLAGS[$v]}
    echo "$v: build $(( $(date +%s) - start )) s (elaboration included; 0 when up to date)"
    args+=("$v=$dir/libtlpxcard.so")
done
REPEATS=${REPEATS:-3} scripts/bench_sim.sh "$OUT/levers.json" "${args[@]}"
.venv/bin/python scripts/bench_sim_report.py levers docs/performance.md "$OUT/levers.json"
