#!/usr/bin/env bash
# The card's vendor project for a real board (docs/boards.md).
#
#   scripts/bitstream.sh BOARD                 generate build/boards/BOARD; run Vivado if installed
#   scripts/bitstream.sh BOARD --generate-only generate only
#   scripts/bitstream.sh list                  the boards
#   scripts/bitstream.sh --all --generate-only every board (what `make boards` and CI check)
#   scripts/bitstream.sh BOARD --with-cpu      the card with the soft CPU, into build/boards/BOARD-cpu
#   scripts/bitstream.sh BOARD --dut M.toml    the accelerator of manifest M.toml in the slot
#                                              (docs/accelerators.md), into build/boards/BOARD-<its folder>
#
# Exit status: 0 done; 1 error; 2 no or unknown board (the message lists the boards);
# 3 project generated but Vivado is not installed (the message says which to install).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PY="$ROOT/.venv/bin/python"
OUT="$ROOT/build/boards"
[ -x "$PY" ] || { echo "bitstream: no $PY: run 'make setup' first" >&2; exit 1; }

board="${1-}"
shift || true
case "$board" in
  list|--list)
    exec "$PY" -m tlpx_gateware.targets.build --list ;;
  --all)
    exec "$PY" -m tlpx_gateware.targets.build --all --output "$OUT" "$@" ;;
  *)
    # An empty or unknown name is refused by the Python side, with the list of boards.
    suffix=""
    prev=""
    for a in "$@"; do
      [ "$a" = --with-cpu ] && suffix="$suffix-cpu"
      [ "$prev" = --dut ] && suffix="$suffix-$(basename "$(dirname "$a")")"
      prev="$a"
    done
    exec "$PY" -m tlpx_gateware.targets.build --board "$board" --output "$OUT/${board:-none}$suffix" "$@" ;;
esac
