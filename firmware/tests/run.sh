#!/bin/sh
# The firmware's interpreter on the build machine (hosttest), on images compiled by the host's
# tlpx: expected statuses in every situation the model can make, then the differential test
# of its image checks against tlpx_script::decode (tests/fuzz_validate.py).
#   sh tests/run.sh OUTDIR        (make -C firmware test)
set -u
OUT=$1
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
TLPX=${TLPX:-$ROOT/host/target/release/tlpx}
HT=$OUT/hosttest
W=$(mktemp -d "${TMPDIR:-/tmp}/tlpx-fw-test.XXXXXX")
trap 'rm -rf "$W"' EXIT
fail=0
if [ ! -x "$TLPX" ]; then
    echo "firmware test: no host tlpx at $TLPX (cargo build --release in host/, or TLPX=...)" >&2
    exit 2
fi
for s in "$ROOT"/firmware/scripts/*.tlpxs "$HERE"/all_ops.tlpxs; do
    "$TLPX" script compile "$s" -o "$W/$(basename "$s" .tlpxs).bin" >/dev/null || { echo "compile $s failed"; fail=1; }
done

# expect NAME STATUS [hosttest options] IMAGE
expect() {
    name=$1; want=$2; shift 2
    got=$("$HT" "$@" 2>"$W/console" | sed -n 's/^.*: status \([0-9]*\) .*$/\1/p' | tail -1)
    if [ "$got" = "$want" ]; then
        echo "ok    $name (status $got)"
    else
        echo "FAIL  $name: status ${got:-none}, expected $want"; tail -5 "$W/console"; fail=1
    fi
}
expect "all ops (the model's DMA cycles make 'w > 1e6' false)" 1 "$W/all_ops.bin"
expect "burst_torture" 0 "$W/burst_torture.bin"
expect "pamette (the model's lat_min is 0)" 2 "$W/pamette.bin"
expect "pamette, the generator never ends" 4 --gen-never "$W/pamette.bin"
expect "burst_torture, host aborts" 7 --abort-after 30 "$W/burst_torture.bin"
expect "burst_torture, host aborts while the ring is full" 7 --ring-cap 1 --no-consume 1000000 --abort-after 5000 "$W/burst_torture.bin"
expect "burst_torture, buffer too small" 6 --buf 100 "$W/burst_torture.bin"
expect "burst_torture, 4-record ring, host slow" 0 --ring-cap 4 --no-consume 1000 "$W/burst_torture.bin"
expect "pamette, other card's map" 5 --card-hash 0x1234 "$W/pamette.bin"
# The card without the CPU: its map hash from the generated header (one source: the gateware).
NO_CPU_HASH=$(sed -n 's/^#define TLPX_MAP_HASH *\(0x[0-9a-f]*\)u.*/\1/p' "$ROOT/firmware/include/tlpx_regs.h")
[ -n "$NO_CPU_HASH" ] || { echo "FAIL  no TLPX_MAP_HASH in firmware/include/tlpx_regs.h"; fail=1; }
expect "pamette, map without the CPU" 2 --card-hash "$NO_CPU_HASH" "$W/pamette.bin"
expect "datamover, no host side" 3 "$W/datamover_card_side.bin"
# Register offsets from the generated header too (a new register moves the ones after it).
reg() { sed -n "s/^#define TLPX_$1 *\(0x[0-9a-f]*\)u.*/\1/p" "$ROOT/firmware/include/tlpx_regs.h"; }
RT_LOOP_STATUS=$(reg RT_LOOP_STATUS); IRQ_TIMER_STATUS=$(reg IRQ_TIMER_STATUS)
[ -n "$RT_LOOP_STATUS" ] && [ -n "$IRQ_TIMER_STATUS" ] ||
    { echo "FAIL  no TLPX_RT_LOOP_STATUS / TLPX_IRQ_TIMER_STATUS in firmware/include/tlpx_regs.h"; fail=1; }
expect "datamover, done but no count" 2 --event-set "$RT_LOOP_STATUS:2" "$W/datamover_card_side.bin"
expect "irq_schedule, no host side" 3 "$W/irq_schedule.bin"
expect "irq_schedule, done at once (fires 0)" 2 --event-set "$IRQ_TIMER_STATUS:2" "$W/irq_schedule.bin"

if "$HT" --mailbox "$W/burst_torture.bin" >"$W/mailbox.log" 2>"$W/console" && grep -q "self-test: PASS" "$W/console"; then
    echo "ok    firmware main: self-test PASS, RUN_SCRIPT, SELFTEST, unknown command, heartbeat"
else
    echo "FAIL  firmware main through the mailbox:"; grep -v "^record\|^generator" "$W/mailbox.log" | tail; tail "$W/console"; fail=1
fi

if [ -n "${DIFFTOOL:-}" ] || cargo --version >/dev/null 2>&1; then
    if [ -z "${DIFFTOOL:-}" ]; then
        CARGO_TARGET_DIR="$OUT/difftool-target" cargo build --release --offline -q --manifest-path "$HERE/difftool/Cargo.toml" || fail=1
        DIFFTOOL=$OUT/difftool-target/release/tlpx-fw-difftool
    fi
    if python3 "$HERE/fuzz_validate.py" "$HT" "$DIFFTOOL" "$W/fuzz" "${SEED:-1}" "$W"/*.bin >"$W/fuzz.log"; then
        echo "ok    $(tail -1 "$W/fuzz.log")"
    else
        echo "FAIL  fuzz_validate:"; tail -20 "$W/fuzz.log"; fail=1
    fi
else
    echo "FAIL  fuzz_validate: no cargo to build the reference decoder (tests/difftool)"; fail=1
fi
[ $fail = 0 ] && echo "firmware test: PASS" || echo "firmware test: FAIL"
exit $fail
