#!/usr/bin/env bash
# `make vplat-guest`: the virtual platform's guest (docs/virtual-platform.md), under
# build/vplat/guest:
#   vmlinuz          the Debian kernel of scripts/debian_kernel.sh
#   initramfs.cpio   busybox (static), pciutils' lspci with its libraries and pci.ids, LitePCIe's
#                    stock driver built for the card against that kernel (scripts/litepcie_driver.sh;
#                    /lib/modules/<release>/extra/litepcie.ko, indexed by depmod) and LitePCIe's
#                    own user tools built static for the card by the same script
#                    (/usr/bin/litepcie_util, /usr/bin/litepcie_test),
#                    Linux's PCI endpoint test built from Debian's linux-source of the kernel's
#                    version by scripts/pcitest_build.sh (/lib/modules/<release>/extra/
#                    pci_endpoint_test.ko; /usr/bin/pcitest, pcitest.sh, pcitest-short.sh) and
#                    scripts/vplat/pcitest-checks (/lib/vplat: the second boot's checks),
#                    scripts/vplat/litepcie-checks (/lib/vplat: LitePCIe's driver, card and driver boots),
#                    the kernel's vfio-pci and vfio_iommu_type1 with the modules they depend on
#                    (tlpx's vfio backend in the guest, through its emulated IOMMU),
#                    tlpx from host/target/release with the libraries ldd lists, and
#                    scripts/vplat/init (the checks)
#   release          the kernel release (one line)
#
# Cached: every input is hashed (build/vplat/guest/inputs.sha256) and an unchanged image is not
# packed again. The LitePCIe driver and user tools are rebuilt only when one is missing or the
# module is older than its generator or the gateware; tlpx is built with cargo (a no-op when it
# is current).
#
#   scripts/vplat_guest.sh          prints the image's directory on stdout, the rest on stderr
#   VPLAT_KERNEL=7.3 scripts/...    the guest with Debian's 7.3 kernel instead (scripts/kernel73.sh),
#                                   under build/vplat/guest-7.3: its litepcie.ko, vfio modules
#                                   (7.3 ships them xz-compressed: unpacked here, busybox's modprobe
#                                   takes plain .ko), and in place of pcitest the kselftest
#                                   pci_endpoint_test with its pci_endpoint_test.ko
#                                   (/usr/bin/pci_endpoint_test, /lib/vplat/kselftest-checks)
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
KERNEL=${VPLAT_KERNEL:-6.1}
case "$KERNEL" in
    6.1) OUT=$ROOT/build/vplat/guest; STAGE=$ROOT/build/vplat/initramfs ;;
    7.3) OUT=$ROOT/build/vplat/guest-7.3; STAGE=$ROOT/build/vplat/initramfs-7.3 ;;
    *) echo "vplat-guest: error: VPLAT_KERNEL is 6.1 (Debian bookworm's, the default) or 7.3 (trixie-backports'), not '$KERNEL'" >&2; exit 1 ;;
esac
CARGO=${CARGO:-$(command -v cargo || echo "$HOME/.cargo/bin/cargo")}
INIT=scripts/vplat/init
LITEPCIE_CHECKS=scripts/vplat/litepcie-checks

say() { echo "vplat-guest: $*" >&2; }
die() { say "error: $*"; exit 1; }

for tool in busybox cpio lspci ldd sha256sum strip depmod modinfo python3; do
    command -v "$tool" >/dev/null ||
        die "$tool is missing: apt-get install busybox-static cpio pciutils binutils kmod python3 (make setup does)"
done
BUSYBOX=$(command -v busybox)
LSPCI=$(command -v lspci)
if ldd "$BUSYBOX" >/dev/null 2>&1; then
    die "$BUSYBOX is dynamically linked; the initramfs needs busybox-static (apt-get install busybox-static)"
fi
PCI_IDS=""
for ids in /usr/share/misc/pci.ids /usr/share/hwdata/pci.ids; do
    [ -f "$ids" ] && { PCI_IDS=$ids; break; }
done
[ -n "$PCI_IDS" ] || die "no pci.ids (/usr/share/misc/pci.ids): apt-get install pci.ids"

# Inputs -----------------------------------------------------------------------------------------
# The 6.1 kernel's release: its litepcie.ko is what tells whether the driver tree and the user
# tools (kernel-independent, static) are current, for either guest.
release=$(scripts/debian_kernel.sh) || die "scripts/debian_kernel.sh could not fetch the Debian kernel"
VMLINUZ=$ROOT/build/kernel/root/boot/vmlinuz-$release
[ -f "$VMLINUZ" ] || die "no $VMLINUZ after scripts/debian_kernel.sh"
KTREE=$ROOT/build/kernel/root
MODSRC=$KTREE/lib/modules/$release

KO=$ROOT/build/litepcie-driver/kernels/$release/litepcie.ko
LITEPCIE_UTIL=$ROOT/build/litepcie-driver/user/litepcie_util
LITEPCIE_TEST=$ROOT/build/litepcie-driver/user/litepcie_test
driver_inputs=(scripts/litepcie_driver.sh gateware/tools/gen_driver_headers.py gateware/tlpx_gateware)
if [ ! -f "$KO" ] || [ ! -x "$LITEPCIE_UTIL" ] || [ ! -x "$LITEPCIE_TEST" ] || [ -n "$(find "${driver_inputs[@]}" -newer "$KO" -name '*.py' -o -newer "$KO" -name '*.sh' | head -1)" ]; then
    say "building LitePCIe's driver for the card against $release (scripts/litepcie_driver.sh)"
    mkdir -p "$ROOT/build/vplat"
    KERNEL_RELEASE=$release scripts/litepcie_driver.sh >"$ROOT/build/vplat/litepcie-driver.log" 2>&1 || {
        tail -20 "$ROOT/build/vplat/litepcie-driver.log" >&2
        die "scripts/litepcie_driver.sh failed (log: build/vplat/litepcie-driver.log)"
    }
    for f in "$KO" "$LITEPCIE_UTIL" "$LITEPCIE_TEST"; do
        [ -f "$f" ] || die "$f was not built (see build/vplat/litepcie-driver.log)"
    done
fi

if [ "$KERNEL" = 6.1 ]; then
    # Linux's endpoint test (the second boot): pci_endpoint_test.ko, pcitest, pcitest.sh from Debian's
    # linux-source of the same version (scripts/pcitest_build.sh: a no-op when built).
    PCITEST=$(scripts/pcitest_build.sh) || die "scripts/pcitest_build.sh failed (above)"
    PCITEST_KO=$PCITEST/$release/pci_endpoint_test.ko
    PCITEST_FILES=("$PCITEST_KO" "$PCITEST/pcitest" "$PCITEST/pcitest.sh" "$PCITEST/pcitest-short.sh")
    PCITEST_CHECKS=scripts/vplat/pcitest-checks
else
    # The 7.3 guest: the kernel, litepcie.ko, pci_endpoint_test.ko and the kselftest from
    # scripts/kernel73.sh (a no-op when built).
    K73=$(scripts/kernel73.sh) || die "scripts/kernel73.sh failed (above)"
    release=$(cat "$K73/release")
    KTREE=$K73/root/usr
    MODSRC=$KTREE/lib/modules/$release
    VMLINUZ=$MODSRC/vmlinuz
    KO=$K73/out/litepcie.ko
    PCITEST_KO=$K73/out/pci_endpoint_test.ko
    PCITEST_FILES=("$PCITEST_KO" "$K73/out/pci_endpoint_test")
    PCITEST_CHECKS=scripts/vplat/kselftest-checks
fi

[ -x "$CARGO" ] || die "no cargo ($CARGO): make setup installs Rust"
# The whole workspace, as `make host` builds it: `-p tlpx` alone resolves the dependencies'
# features for tlpx's graph only, and cargo then rebuilds half of them (two minutes here).
say "tlpx (cargo build --release --workspace, as make host: a no-op when built)"
(cd host && "$CARGO" build --release -q --workspace) || die "cargo could not build tlpx"
TLPX=$ROOT/host/target/release/tlpx

# libs BINARY...: the shared libraries ldd lists for the binaries, the loader included.
libs() {
    local bin out
    for bin in "$@"; do
        out=$(ldd "$bin") || die "ldd $bin failed"
        if grep -q 'not found' <<<"$out"; then die "ldd $bin: a library is missing on this machine: $(grep 'not found' <<<"$out")"; fi
        awk '/=> \// {print $3} /^\t\/[^ ]+ \(/ {print $1}' <<<"$out"
    done | sort -u
}
LIBS=$(libs "$TLPX" "$LSPCI")

# Kernel modules: vfio-pci and vfio_iommu_type1 with everything they depend on (modinfo's
# `depends`), as scripts/qemu_vfio_test.sh takes them; builtins are skipped.
declare -A seen=()
KMODS=()
want=(vfio-pci vfio_iommu_type1)
find_module() {
    local a=$1 b c
    b=$(echo "$1" | tr _ -); c=$(echo "$1" | tr - _)
    find "$MODSRC/kernel" \( -name "$a.ko" -o -name "$b.ko" -o -name "$c.ko" -o -name "$a.ko.xz" -o -name "$b.ko.xz" -o -name "$c.ko.xz" \) | head -1
}
while [ ${#want[@]} -gt 0 ]; do
    m=${want[0]}; want=("${want[@]:1}")
    [ -n "${seen[$m]:-}" ] && continue
    seen[$m]=1
    ko=$(find_module "$m")
    if [ -z "$ko" ]; then
        grep -q "/$m.ko\|/$(echo "$m" | tr _ -).ko" "$MODSRC/modules.builtin" && continue
        die "kernel module $m not found under $MODSRC"
    fi
    KMODS+=("$ko")
    for d in $(modinfo -F depends "$ko" | tr ',' ' '); do want+=("$d"); done
done

key=$( {
    echo "release $release"
    sha256sum "$VMLINUZ" "$INIT" "$LITEPCIE_CHECKS" "$PCITEST_CHECKS" "${PCITEST_FILES[@]}" scripts/vplat_guest.sh "$KO" "$LITEPCIE_UTIL" "$LITEPCIE_TEST" "$TLPX" "$BUSYBOX" "$LSPCI" "$PCI_IDS" "${KMODS[@]}"
    for lib in $LIBS; do sha256sum "$(readlink -f "$lib")" | sed "s#  .*#  $lib#"; done
} )
if [ -f "$OUT/inputs.sha256" ] && [ -f "$OUT/initramfs.cpio" ] && [ -f "$OUT/vmlinuz" ] &&
   [ "$(cat "$OUT/inputs.sha256")" = "$key" ]; then
    say "up to date: $OUT (kernel $release, initramfs $(du -h "$OUT/initramfs.cpio" | cut -f1))"
    echo "$OUT"
    exit 0
fi

# The initramfs --------------------------------------------------------------------------------
say "packing the initramfs (kernel $release)"
rm -rf "$STAGE"
mkdir -p "$STAGE"/{bin,sbin,usr/bin,usr/sbin,usr/share/misc,proc,sys,dev,run,tmp,lib/modules}
cp "$BUSYBOX" "$STAGE/bin/busybox"
ln -s busybox "$STAGE/bin/sh"
install -m 0755 "$INIT" "$STAGE/init"
mkdir -p "$STAGE/lib/vplat"
install -m 0644 "$PCITEST_CHECKS" "$STAGE/lib/vplat/$(basename "$PCITEST_CHECKS")"
install -m 0644 "$LITEPCIE_CHECKS" "$STAGE/lib/vplat/litepcie-checks"
# The module where modprobe and lspci -k look (/lib/modules/<release>/extra), with the module
# index depmod writes for the staged tree: lspci -vv reads it (without it lspci complains
# "Unable to load libkmod resources") and names the module that would bind a function.
MODDIR=$STAGE/lib/modules/$release
mkdir -p "$MODDIR/extra"
cp "$KO" "$MODDIR/extra/litepcie.ko"
cp "$PCITEST_KO" "$MODDIR/extra/pci_endpoint_test.ko"
for ko in "${KMODS[@]}"; do
    rel=${ko#"$MODSRC/"}
    mkdir -p "$MODDIR/$(dirname "$rel")"
    case "$ko" in
        # 7.3's modules are xz-compressed; busybox's modprobe wants them plain (the module's
        # signature is inside the compressed file and stays with it).
        *.ko.xz) xz -dc "$ko" >"$MODDIR/${rel%.xz}" || die "xz -d $ko failed" ;;
        *) cp "$ko" "$MODDIR/$rel" ;;
    esac
done
for f in modules.order modules.builtin modules.builtin.modinfo; do
    cp "$MODSRC/$f" "$MODDIR/$f" || die "the kernel tree lacks $f"
done
depmod -b "$STAGE" "$release" || die "depmod -b $STAGE $release failed"
cp "$LSPCI" "$STAGE/usr/bin/lspci"
cp "$PCI_IDS" "$STAGE/usr/share/misc/pci.ids"
strip --strip-debug -o "$STAGE/usr/bin/tlpx" "$TLPX"
# Static (scripts/litepcie_driver.sh checks): no libraries to carry.
strip --strip-debug -o "$STAGE/usr/bin/litepcie_util" "$LITEPCIE_UTIL"
strip --strip-debug -o "$STAGE/usr/bin/litepcie_test" "$LITEPCIE_TEST"
if [ "$KERNEL" = 6.1 ]; then
    strip --strip-debug -o "$STAGE/usr/bin/pcitest" "$PCITEST/pcitest"
    install -m 0755 "$PCITEST/pcitest.sh" "$PCITEST/pcitest-short.sh" "$STAGE/usr/bin/"
else
    strip --strip-debug -o "$STAGE/usr/bin/pci_endpoint_test" "$K73/out/pci_endpoint_test"
fi
for lib in $LIBS; do
    mkdir -p "$STAGE$(dirname "$lib")"
    cp -L "$lib" "$STAGE$lib"
done
mkdir -p "$OUT"
(cd "$STAGE" && find . | LC_ALL=C sort | cpio -o -H newc --quiet) > "$OUT/initramfs.cpio.tmp"
mv "$OUT/initramfs.cpio.tmp" "$OUT/initramfs.cpio"
cp "$VMLINUZ" "$OUT/vmlinuz"
echo "$release" > "$OUT/release"
echo "$key" > "$OUT/inputs.sha256"
say "$OUT: kernel $release, initramfs $(du -h "$OUT/initramfs.cpio" | cut -f1) (tlpx, lspci, litepcie.ko, litepcie_util, litepcie_test, pci_endpoint_test.ko, $([ "$KERNEL" = 6.1 ] && echo pcitest || echo "the kselftest pci_endpoint_test"), $(for ko in "${KMODS[@]}"; do basename "$ko" .ko; done | tr '\n' ' ')busybox; libraries: $(echo $LIBS))"
echo "$OUT"
