#!/usr/bin/env bash
# `make litepcie-driver`: LitePCIe's stock Linux driver, generated for the tlpx card and built.
#
#   build/litepcie-driver/            the driver tree for the card: the stock sources of the
#                                     installed LitePCIe (main.c, litepcie.h, config.h, flags.h,
#                                     Makefile, init.sh, ...), the card's csr.h/soc.h/mem.h, and
#                                     tlpx_compat.h (gateware/tools/gen_driver_headers.py), a Kbuild
#                                     file, and main.c's descriptor writes following the card's CSR
#                                     word order (see below). Copy it to the card's machine and
#                                     `make` there (against /lib/modules/$(uname -r)/build).
#   build/litepcie-driver/user/       LitePCIe's user tools (the stock litepcie_util.c, litepcie_test.c,
#                                     liblitepcie/ and Makefile), built static for the card:
#                                     user/litepcie_util, user/litepcie_test (they run in any Linux
#                                     user space, the virtual platform's busybox initramfs included)
#   build/litepcie-driver/kernels/<release>/litepcie.ko
#                                     the module built against Debian's kernel headers
#                                     (scripts/debian_kernel.sh), and against the running kernel's
#                                     headers when /lib/modules/$(uname -r)/build exists.
#
# Environment: DATA_WIDTH (64), KERNEL_RELEASE (see scripts/debian_kernel.sh),
# LITEPCIE_DRIVER_SKIP_DEBIAN=1 (build only against the running kernel).
# docs/litepcie-driver.md says what the driver offers, how to load it and what tlpx uses.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
OUT=build/litepcie-driver
PY=.venv/bin/python
DATA_WIDTH=${DATA_WIDTH:-64}

say() { echo "litepcie-driver: $*" >&2; }
die() { say "error: $*"; exit 1; }

[ -x "$PY" ] || die "no $PY: run 'make setup' first"
SRC=$("$PY" -c 'import litepcie, os; print(os.path.join(os.path.dirname(litepcie.__file__), "software", "kernel"))')
[ -f "$SRC/main.c" ] || die "the installed LitePCIe has no stock driver at $SRC (expected main.c there)"
version=$("$PY" -c 'import importlib.metadata as m; print(m.version("litepcie"))' 2>/dev/null || echo unknown)

# 1. The driver tree ----------------------------------------------------------------------------
mkdir -p "$OUT"
# Each file replaced only when it changes (main.c after its patch below), so that a second run
# leaves the tree's times alone and nothing built from it (kernel73.sh's litepcie.ko) rebuilds.
for f in main.c litepcie.h config.h flags.h litex.h liteuart.c Makefile init.sh README; do
    [ -f "$SRC/$f" ] || die "the stock driver lacks $f ($SRC)"
    cp "$SRC/$f" "$OUT/$f.new"
    [ "$f" = main.c ] && continue
    cmp -s "$OUT/$f.new" "$OUT/$f" 2>/dev/null && rm "$OUT/$f.new" || mv "$OUT/$f.new" "$OUT/$f"
done
chmod +x "$OUT/init.sh"

# The card's headers (this elaborates the card, without Verilator: ~10 s).
"$PY" gateware/tools/gen_driver_headers.py --data-width "$DATA_WIDTH" --output "$OUT" --driver-dir "$SRC" >&2

# The one change to main.c: its four descriptor writes use the offsets tlpx_compat.h computes from
# the card's CSR word order (identical to the stock ones for csr_ordering "big"; swapped for
# "little", which the tlpx card uses). Without it the driver would program the descriptors' length
# and flags as their address. Exactly four lines must change, or the stock code moved: stop.
"$PY" - "$OUT/main.c.new" <<'EOF'
import re, sys
path = sys.argv[1]
text = open(path).read()
if "TLPX_COMPAT" in text:
    sys.exit(0)
n = 0
for way in ("WRITER", "READER"):
    text, a = re.subn(rf"PCIE_DMA_{way}_TABLE_VALUE_OFFSET \+ 4,", f"PCIE_DMA_{way}_TABLE_VALUE_LO_OFFSET,", text)
    text, b = re.subn(rf"PCIE_DMA_{way}_TABLE_VALUE_OFFSET,\n", f"PCIE_DMA_{way}_TABLE_VALUE_HI_OFFSET,\n", text)
    n += a + b
    if (a, b) != (1, 1):
        sys.exit(f"litepcie-driver: error: main.c's {way.lower()} descriptor writes are not where this script expects "
                 f"them ({a} address, {b} length/flags writes found, 1 each expected): update scripts/litepcie_driver.sh")
text = text.replace('#include "litepcie.h"\n',
    '/* TLPX_COMPAT: descriptor writes follow the card\'s CSR word order (tlpx_compat.h,\n'
    ' * scripts/litepcie_driver.sh); everything else is the stock LitePCIe driver. */\n'
    '#include "litepcie.h"\n', 1)
open(path, "w").write(text)
print(f"litepcie-driver: main.c: {n} descriptor writes follow the card's CSR word order", file=sys.stderr)
EOF
cmp -s "$OUT/main.c.new" "$OUT/main.c" 2>/dev/null && rm "$OUT/main.c.new" || mv "$OUT/main.c.new" "$OUT/main.c"

# Kbuild takes precedence over the stock Makefile for kbuild, so `make` (the stock Makefile,
# init.sh) and `make -C <headers> M=<dir>` both build with tlpx_compat.h included first.
cat > "$OUT/Kbuild.new" <<'EOF'
# Generated by scripts/litepcie_driver.sh: the stock Makefile's objects, with the tlpx card's
# compat header (tlpx_compat.h) included before main.c's own includes.
obj-m := litepcie.o liteuart.o
litepcie-objs := main.o
CFLAGS_main.o := -include $(src)/tlpx_compat.h
EOF
cmp -s "$OUT/Kbuild.new" "$OUT/Kbuild" 2>/dev/null && rm "$OUT/Kbuild.new" || mv "$OUT/Kbuild.new" "$OUT/Kbuild"
cat > "$OUT/VERSION" <<EOF
LitePCIe $version stock driver ($SRC)
generated for the tlpx card (DATA_WIDTH=$DATA_WIDTH) by scripts/litepcie_driver.sh; see docs/litepcie-driver.md
EOF
say "driver tree in $OUT (LitePCIe $version)"

# 2. The user tools ----------------------------------------------------------------------------
# LitePCIe's litepcie_util (info, scratch_test, dma_test) and litepcie_test (record, play), from
# the installed LitePCIe's sources, built with its own Makefile. What changes, and why:
#   CFLAGS  the stock ones, with the driver tree above in place of ../kernel (it holds the card's
#           csr.h/soc.h next to litepcie.h and config.h), and tlpx_user_compat.h included first:
#           the card's tlpx_compat.h plus CSR_CTRL_SCRATCH_ADDR (scratch_test), which the card has
#           as ident.scratch (gateware/tools/gen_driver_headers.py says why it is a separate file);
#   LDFLAGS -static: one file each, no libc to match in the guest or on a card's machine.
USER_SRC=$(dirname "$SRC")/user
USER_OUT=$OUT/user
for f in litepcie_util.c litepcie_test.c Makefile liblitepcie/liblitepcie.h liblitepcie/litepcie_dma.c \
         liblitepcie/litepcie_dma.h liblitepcie/litepcie_flash.c liblitepcie/litepcie_flash.h \
         liblitepcie/litepcie_helpers.c liblitepcie/litepcie_helpers.h; do
    [ -f "$USER_SRC/$f" ] || die "the installed LitePCIe's user tools lack $f ($USER_SRC)"
    mkdir -p "$(dirname "$USER_OUT/$f")"
    cp "$USER_SRC/$f" "$USER_OUT/$f.new"
    cmp -s "$USER_OUT/$f.new" "$USER_OUT/$f" 2>/dev/null && rm "$USER_OUT/$f.new" || mv "$USER_OUT/$f.new" "$USER_OUT/$f"
done
command -v gcc >/dev/null || die "gcc is missing: apt-get install gcc libc6-dev (make setup does)"
say "building LitePCIe's user tools for the card (static) in $USER_OUT"
user_log=$ROOT/$USER_OUT/build.log
# make's dependency files (-MMD) rebuild what a changed header affects; a current build is a no-op.
if ! make -C "$USER_OUT" litepcie_util litepcie_test \
        CFLAGS="-O2 -Wall -g -I$ROOT/$OUT -Iliblitepcie -MMD -fPIC -include $ROOT/$OUT/tlpx_user_compat.h" \
        LDFLAGS="-g -static" >"$user_log" 2>&1; then
    tail -40 "$user_log" >&2
    die "LitePCIe's user tools do not build for the card (whole log: $user_log)"
fi
if grep -E "warning:" "$user_log" >&2; then
    say "(compiler warnings above, from $user_log: the stock sources' own)"
fi
for tool in litepcie_util litepcie_test; do
    bin=$USER_OUT/$tool
    [ -x "$bin" ] || die "no $bin after building the user tools ($user_log)"
    # Static: no program interpreter (a dynamic executable names its loader in PT_INTERP).
    if readelf -l "$bin" | grep -q INTERP; then die "$bin is dynamically linked (the build did not take -static)"; fi
    # It runs: without a command both print their usage and exit 1.
    rc=0; usage=$("$bin" 2>&1) || rc=$?
    [ "$rc" = 1 ] && grep -q "^usage: $tool " <<<"$usage" ||
        die "$bin does not run here (exit $rc, expected its usage and exit 1): $(head -3 <<<"$usage")"
done
say "OK $USER_OUT/litepcie_util, $USER_OUT/litepcie_test (static)"

# 3. Builds ------------------------------------------------------------------------------------
# build_against RELEASE HEADERS [MAKEFILE]: copies the tree to kernels/RELEASE and builds it there.
build_against() {
    local release=$1 headers=$2 makefile=${3:-}
    local dir="$ROOT/$OUT/kernels/$release"
    mkdir -p "$dir"
    for f in main.c litepcie.h config.h flags.h litex.h liteuart.c Kbuild csr.h soc.h mem.h tlpx_compat.h; do
        cp "$OUT/$f" "$dir/$f"
    done
    say "building against $release ($headers)"
    local log="$dir/build.log"
    if ! make -C "$headers" ${makefile:+-f "$makefile"} M="$dir" modules >"$log" 2>&1; then
        tail -40 "$log" >&2
        die "the build against $release failed (whole log: $log)"
    fi
    if grep -E "warning:" "$log" >&2; then
        say "(compiler warnings above, from $log)"
    fi
    [ -f "$dir/litepcie.ko" ] || die "no litepcie.ko after building against $release ($log)"
    local vermagic
    vermagic=$(modinfo -F vermagic "$dir/litepcie.ko") || die "modinfo cannot read $dir/litepcie.ko"
    case "$vermagic" in
        "$release "*) ;;
        *) die "$dir/litepcie.ko has vermagic '$vermagic', not one of $release" ;;
    esac
    modinfo -F alias "$dir/litepcie.ko" | grep -qi "v000010EEd00007021" ||
        die "$dir/litepcie.ko has not the stock PCI ID table (no 10ee:7021 alias)"
    say "OK $dir/litepcie.ko (vermagic: $vermagic)"
}

if [ "${LITEPCIE_DRIVER_SKIP_DEBIAN:-0}" != 1 ]; then
    release=$(scripts/debian_kernel.sh) || die "scripts/debian_kernel.sh could not fetch a Debian kernel's headers"
    headers="$ROOT/build/kernel/root/usr/src/linux-headers-$release"
    [ -d "$headers" ] || die "no $headers after scripts/debian_kernel.sh"
    # Debian's headers Makefile includes /usr/src/linux-headers-<release>-common/Makefile by its
    # absolute path; unpacked under build/kernel/root, point that include at the unpacked copy.
    wrapper="$ROOT/$OUT/kernels/$release.mk"
    mkdir -p "$ROOT/$OUT/kernels"
    sed "s#^include /usr/src/#include $ROOT/build/kernel/root/usr/src/#" "$headers/Makefile" > "$wrapper"
    grep -q "^include $ROOT/build/kernel/root/usr/src/linux-headers-.*-common/Makefile" "$wrapper" ||
        die "$headers/Makefile does not include its -common Makefile as expected: see scripts/litepcie_driver.sh"
    build_against "$release" "$headers" "$wrapper"
fi

running=$(uname -r)
if [ -e "/lib/modules/$running/build/Makefile" ]; then
    build_against "$running" "/lib/modules/$running/build"
else
    say "not building against the running kernel $running: no /lib/modules/$running/build (its headers are not installed)"
fi
say "done; load it with: insmod <dir>/litepcie.ko, then bind the card: see docs/litepcie-driver.md"
