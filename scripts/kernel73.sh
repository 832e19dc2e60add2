#!/usr/bin/env bash
# `make kernel73`: the virtual platform's second guest kernel, Debian's 7.3 from trixie-backports
# (docs/virtual-platform.md, "The 7.3 kernel"), and what the guest needs built against it, under
# build/kernel73 (the 6.1 kernel's scripts/debian_kernel.sh, scripts/pcitest_build.sh and build/kernel
# are left as they are):
#
#   apt/                    a private apt state (sources trixie + trixie-backports, lists, cache):
#                           this bookworm machine's own apt is neither asked nor changed
#   debs/, root/            linux-image-<release> and the packages holding its kernel and modules
#                           (7.3 splits them: linux-binary-, linux-modules-, linux-base-), unpacked;
#                           the kernel is root/usr/lib/modules/<release>/vmlinuz (7.3's layout)
#   buildroot/              a trixie chroot (mmdebstrap) with gcc-14 (the compiler Debian built
#                           7.3 with), make, libc6-dev and linux-headers-<release>: linux-kbuild-7.3's
#                           host programs need glibc >= 2.38 and bookworm has 2.36, so every 7.3
#                           build runs in there (bind mounts in a private mount namespace)
#   source/                 the files taken from linux-source-7.3 of the image's exact version
#   out/pci_endpoint_test.ko        drivers/misc/pci_endpoint_test.c, unmodified, out of tree against
#                                   the 7.3 headers (Debian's 7.3 config has CONFIG_PCI_ENDPOINT_TEST
#                                   unset, as 6.1's: no Debian module to take; checked below)
#   out/pci_endpoint_test           tools/testing/selftests/pci_endpoint/pci_endpoint_test.c, the
#                                   kselftest (kselftest_harness.h, TAP output), static
#   out/litepcie.ko                 LitePCIe's stock driver for the card (the tree
#                                   scripts/litepcie_driver.sh generates), main.c only: the stock
#                                   liteuart.c does not build against 7.3 (out/liteuart-build.log
#                                   keeps the errors; docs/virtual-platform.md lists them)
#   release, SETUP          the kernel release; what was downloaded and how long the set-up took
#
# Idempotent: each step has its stamp and a second run downloads and builds nothing. Needs root
# (mmdebstrap, chroot) and Debian's archive.
#
#   scripts/kernel73.sh      prints build/kernel73 on stdout, what it does on stderr
#   KERNEL73_VERSION=7.3.4-1~bpo13+1   the pinned package version (the default); another one
#                            rebuilds everything under build/kernel73
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
OUT=$ROOT/build/kernel73
MIRROR=${VPLAT_MIRROR:-http://deb.debian.org/debian}
# Pinned like the 6.1 kernel: linux-image-amd64 of trixie-backports depends on this image today.
# The release (ABI name) is read from that version's linux-image-amd64 below.
VERSION=${KERNEL73_VERSION:-7.3.4-1~bpo13+1}
SERIES=7.3
started=$(date +%s)

say() { echo "kernel73: $*" >&2; }
die() { say "error: $*"; exit 1; }

[ "$(id -u)" = 0 ] || die "mmdebstrap and chroot need root"
for tool in apt-get apt-cache dpkg-deb mmdebstrap unshare chroot tar xz modinfo readelf; do
    command -v "$tool" >/dev/null || die "$tool is missing (apt, dpkg, mmdebstrap, util-linux, tar, xz-utils, kmod, binutils)"
done
mkdir -p "$OUT"

# 1. A private apt state for trixie + trixie-backports ---------------------------------------------
A=$OUT/apt
APT=(-o "Dir::Etc::SourceList=$A/sources.list" -o "Dir::Etc::SourceParts=$A/sources.list.d"
     -o "Dir::State::Lists=$A/lists" -o "Dir::Cache=$A/cache" -o "Dir::State::status=$A/status"
     -o "Dir::Etc::Preferences=$A/preferences" -o "Dir::Etc::PreferencesParts=$A/preferences.d"
     -o APT::Architecture=amd64 -o APT::Sandbox::User=root)
mkdir -p "$A/lists/partial" "$A/cache/archives/partial" "$A/sources.list.d" "$A/preferences.d"
: >>"$A/status"; : >>"$A/preferences"
sources="deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] $MIRROR trixie main
deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] $MIRROR trixie-backports main"
if [ "$(cat "$A/sources.list" 2>/dev/null)" != "$sources" ] || [ ! -f "$A/lists.stamp" ]; then
    [ -f /usr/share/keyrings/debian-archive-keyring.gpg ] || die "no Debian archive keyring (apt-get install debian-archive-keyring)"
    echo "$sources" >"$A/sources.list"
    say "apt-get update (trixie, trixie-backports) in $A"
    apt-get -q "${APT[@]}" update >"$A/update.log" 2>&1 || { tail -5 "$A/update.log" >&2; die "apt-get update failed (log: $A/update.log)"; }
    touch "$A/lists.stamp"
fi
aptc() { apt-cache "${APT[@]}" "$@" 2>/dev/null; }
release=$(aptc depends "linux-image-amd64=$VERSION" | awk '/Depends: linux-image-[0-9]/ {sub("linux-image-", "", $2); print $2; exit}')
[ -n "$release" ] || die "trixie-backports has no linux-image-amd64=$VERSION (apt-cache policy linux-image-amd64 lists what it has; set KERNEL73_VERSION)"
case "$release" in "$SERIES".*) ;; *) die "linux-image-amd64=$VERSION is kernel $release, not $SERIES" ;; esac
abi=${release%-amd64}   # 7.3.4+deb13
# A different pinned version (known to the archive: checked above) starts afresh, all but the apt
# state: the stamps below hold what they were made for, not the version.
if [ -f "$OUT/VERSION" ] && [ "$(cat "$OUT/VERSION")" != "$VERSION" ]; then
    say "build/kernel73 holds $(cat "$OUT/VERSION"), $VERSION asked: starting afresh"
    find "$OUT" -mindepth 1 -maxdepth 1 ! -name apt -exec rm -rf {} +
fi
echo "$VERSION" >"$OUT/VERSION"

# fetch DIR PACKAGE...: apt-get download of exactly $VERSION each, into DIR.
fetch() {
    local dir=$1; shift
    local pins=() p
    for p in "$@"; do pins+=("$p=$VERSION"); done
    mkdir -p "$dir"
    (cd "$dir" && apt-get -q "${APT[@]}" download "${pins[@]}" >"$dir/download.log" 2>&1) ||
        { tail -5 "$dir/download.log" >&2; die "apt-get download ${pins[*]} failed"; }
}

# 2. The kernel and its modules ---------------------------------------------------------------------
KDIR=$OUT/root/usr/lib/modules/$release
if [ ! -f "$OUT/root/.unpacked-$release" ]; then
    packages=("linux-image-$release" "linux-binary-$release" "linux-modules-$release" "linux-base-$release")
    say "downloading ${packages[*]} ($VERSION)"
    rm -rf "$OUT/debs" "$OUT/root"
    fetch "$OUT/debs" "${packages[@]}"
    for p in "${packages[@]}"; do dpkg-deb -x "$OUT/debs/${p}_"*.deb "$OUT/root"; done
    touch "$OUT/root/.unpacked-$release"
fi
[ -f "$KDIR/vmlinuz" ] && [ -f "$KDIR/config" ] && [ -f "$KDIR/modules.builtin" ] ||
    die "$KDIR lacks vmlinuz, config or modules.builtin (did 7.3's package layout change?): rm -r $OUT/root and run again"
# Debian's 7.3 config: the endpoint test driver is not built (so it is built here, below).
if grep -q '^CONFIG_PCI_ENDPOINT_TEST=[my]' "$KDIR/config"; then
    die "Debian's $release has CONFIG_PCI_ENDPOINT_TEST set: use its module instead of an out-of-tree build (update scripts/kernel73.sh)"
fi

# 3. The build chroot (trixie, gcc-14, the 7.3 headers) ---------------------------------------------
BR=$OUT/buildroot
include="make,gcc-14,libc6-dev,kmod,xz-utils"
for p in "linux-headers-$release" "linux-headers-$abi-common" "linux-kbuild-$abi" "linux-base-$release"; do
    include="$include,$p/trixie-backports"
done
if [ "$(cat "$OUT/buildroot.stamp" 2>/dev/null)" != "$include" ] || [ ! -d "$BR/usr/src/linux-headers-$release" ]; then
    say "mmdebstrap: a trixie build chroot with $include"
    rm -rf "$BR" "$OUT/buildroot.stamp"
    t0=$(date +%s)
    mmdebstrap --variant=apt --include="$include" trixie "$BR" \
        "deb $MIRROR trixie main" "deb $MIRROR trixie-backports main" >"$OUT/mmdebstrap.log" 2>&1 ||
        { tail -20 "$OUT/mmdebstrap.log" >&2; die "mmdebstrap failed (log: $OUT/mmdebstrap.log)"; }
    echo "$include" >"$OUT/buildroot.stamp"
    echo "buildroot_seconds $(( $(date +%s) - t0 ))" >"$OUT/buildroot.time"
fi
hv=$(chroot "$BR" dpkg-query -W -f '${Version}' "linux-headers-$release") || die "no linux-headers-$release in $BR"
[ "$hv" = "$VERSION" ] || die "$BR has linux-headers-$release $hv, not $VERSION: rm -r $BR and run again"
# A kbuild host program runs (without arguments fixdep prints its usage and exits 1).
fixdep=$(chroot "$BR" /usr/src/linux-headers-"$release"/scripts/basic/fixdep 2>&1 || true)
grep -q '^Usage: fixdep' <<<"$fixdep" || die "linux-kbuild's host programs do not run in $BR: $fixdep"

# in_chroot DIR COMMAND...: COMMAND in the build chroot with DIR at /work and /proc mounted (objtool
# reads /proc), in a private mount and PID namespace: nothing to unmount afterwards.
in_chroot() {
    local dir=$1; shift
    mkdir -p "$BR/work"
    unshare -m -p -f --propagation private sh -c 'mount --bind "$1" "$2/work" && mount -t proc proc "$2/proc" && shift 2 && exec chroot "$@"' \
        sh "$dir" "$BR" "$BR" "$@"
}

# 4. The source, of the image's exact version --------------------------------------------------------
SRC=$OUT/source
package=linux-source-$SERIES
FILES=(drivers/misc/pci_endpoint_test.c include/uapi/linux/pcitest.h
       tools/testing/selftests/pci_endpoint/pci_endpoint_test.c tools/testing/selftests/pci_endpoint/Makefile
       tools/testing/selftests/kselftest.h tools/testing/selftests/kselftest_harness.h)
if [ "$(cat "$SRC/SOURCE" 2>/dev/null)" != "$package $VERSION" ]; then
    tmp=$OUT/download.tmp
    rm -rf "$tmp" "$SRC"
    say "downloading $package=$VERSION (kept only until the files are taken out)"
    fetch "$tmp" "$package"
    mkdir -p "$tmp/x"
    members=()
    for f in "${FILES[@]}"; do members+=("$package/$f"); done
    # tools/include: what kselftest_harness.h and kselftest.h may pull in beside libc's headers.
    dpkg-deb --fsys-tarfile "$tmp/${package}_"*.deb | tar -xO "./usr/src/$package.tar.xz" |
        tar -xJ -C "$tmp/x" "${members[@]}" "$package/tools/include" || die "could not take ${FILES[*]} out of $package"
    du -m "$tmp/${package}_"*.deb | awk '{print "source_deb_mb " $1}' >"$tmp/x/$package/SIZE"
    mv "$tmp/x/$package" "$SRC"
    echo "$package $VERSION" >"$SRC/SOURCE"
    rm -rf "$tmp"
fi
for f in "${FILES[@]}"; do [ -f "$SRC/$f" ] || die "$SRC/$f is missing: rm -r $SRC and run again"; done

mkdir -p "$OUT/out"
# build_module NAME DIR: make modules in DIR (with its Kbuild) against the 7.3 headers, in the chroot.
build_module() {
    local name=$1 dir=$2
    in_chroot "$dir" make -C "/usr/src/linux-headers-$release" M=/work modules >"$dir/build.log" 2>&1 || {
        grep -E 'error|Error' "$dir/build.log" | head -30 >&2
        die "$name does not build against $release (log: $dir/build.log)"
    }
}
check_ko() {
    local vm
    vm=$(modinfo -F vermagic "$1") || die "modinfo cannot read $1"
    case "$vm" in "$release "*) ;; *) die "$1 has vermagic '$vm', not $release's" ;; esac
}

# 5. pci_endpoint_test.ko, unmodified ------------------------------------------------------------------
KO=$OUT/out/pci_endpoint_test.ko
if [ ! -f "$KO" ] || [ "$SRC/drivers/misc/pci_endpoint_test.c" -nt "$KO" ]; then
    say "building pci_endpoint_test.ko against $release (in the chroot)"
    d=$OUT/mod-pci_endpoint_test
    rm -rf "$d"; mkdir -p "$d"
    cp "$SRC/drivers/misc/pci_endpoint_test.c" "$d/"
    echo 'obj-m := pci_endpoint_test.o' >"$d/Kbuild"
    build_module pci_endpoint_test.ko "$d"
    cp "$d/pci_endpoint_test.ko" "$KO"
fi
check_ko "$KO"
cmp -s "$SRC/drivers/misc/pci_endpoint_test.c" "$OUT/mod-pci_endpoint_test/pci_endpoint_test.c" ||
    die "the module's source differs from the package's: it is built unmodified"

# 6. The kselftest, static (the guest is busybox). Built as its Makefile's CFLAGS/LDFLAGS say
# (-O2 -Wl,-no-as-needed -Wall, -lrt -lpthread -lm) plus -static; its headers are taken by the
# relative include it has (include/uapi/linux/pcitest.h) and -I.. for kselftest_harness.h.
KST=$OUT/out/pci_endpoint_test
kst_src=$SRC/tools/testing/selftests/pci_endpoint/pci_endpoint_test.c
if [ ! -x "$KST" ] || [ "$kst_src" -nt "$KST" ]; then
    say "building the kselftest pci_endpoint_test (static, gcc-14 in the chroot)"
    grep -q '^CFLAGS += -O2 -Wl,-no-as-needed -Wall \$(KHDR_INCLUDES)$' "$SRC/tools/testing/selftests/pci_endpoint/Makefile" ||
        die "the kselftest's Makefile changed its CFLAGS: update scripts/kernel73.sh"
    in_chroot "$SRC" sh -c 'cd /work/tools/testing/selftests/pci_endpoint &&
        gcc-14 -O2 -Wl,-no-as-needed -Wall -static -I.. -o /work/pci_endpoint_test.kst pci_endpoint_test.c -lrt -lpthread -lm' \
        >"$OUT/out/kselftest-build.log" 2>&1 || { cat "$OUT/out/kselftest-build.log" >&2; die "the kselftest does not build"; }
    mv "$SRC/pci_endpoint_test.kst" "$KST"
fi
if readelf -l "$KST" | grep -q INTERP; then die "$KST is dynamically linked"; fi
# It runs here: -l lists the tests (on stderr), without a device to open.
tests=$("$KST" -l 2>&1 || true)
grep -q 'MSI_TEST' <<<"$tests" || die "$KST -l does not list its tests: $tests"

# 7. LitePCIe's stock driver: the tree scripts/litepcie_driver.sh generated for the card (run here
# if the tree is not there yet), built here against 7.3: litepcie.ko (main.c), and
# liteuart.ko attempted so that its errors stay on record.
LP=$ROOT/build/litepcie-driver
LPKO=$OUT/out/litepcie.ko
lp_files=(main.c litepcie.h config.h flags.h litex.h liteuart.c Kbuild csr.h soc.h mem.h tlpx_compat.h)
missing=""
for f in "${lp_files[@]}"; do [ -f "$LP/$f" ] || missing="$missing $f"; done
if [ -n "$missing" ]; then
    # The tree is generated from the card (it elaborates the gateware); the 6.1 build of it is
    # what makes it: run it once here (its log beside the 7.3 builds).
    say "no LitePCIe driver tree for the card ($missing missing): scripts/litepcie_driver.sh"
    scripts/litepcie_driver.sh >"$OUT/litepcie-driver.log" 2>&1 ||
        { tail -20 "$OUT/litepcie-driver.log" >&2; die "scripts/litepcie_driver.sh failed (log: $OUT/litepcie-driver.log)"; }
    for f in "${lp_files[@]}"; do [ -f "$LP/$f" ] || die "no $LP/$f after scripts/litepcie_driver.sh"; done
fi
if [ ! -f "$LPKO" ] || [ -n "$(find "$LP/main.c" "$LP/csr.h" "$LP/tlpx_compat.h" "$LP/Kbuild" -newer "$LPKO" | head -1)" ]; then
    d=$OUT/mod-litepcie
    rm -rf "$d"; mkdir -p "$d"
    for f in "${lp_files[@]}"; do cp "$LP/$f" "$d/"; done
    grep -q '^obj-m := litepcie.o liteuart.o$' "$d/Kbuild" || die "$LP/Kbuild's obj-m is not 'litepcie.o liteuart.o': update scripts/kernel73.sh"
    # The stock tree first, as it is: kept for the record (liteuart.c fails on 7.3's APIs).
    say "building LitePCIe's stock driver (litepcie.o liteuart.o) against $release"
    if in_chroot "$d" make -C "/usr/src/linux-headers-$release" M=/work modules >"$OUT/out/liteuart-build.log" 2>&1; then
        say "the whole stock tree builds against $release (liteuart.ko too)"
    else
        say "the stock tree does not build against $release: $(grep -c ' error: ' "$OUT/out/liteuart-build.log") errors, all in liteuart.c? $(grep ' error: ' "$OUT/out/liteuart-build.log" | grep -vc '^liteuart.c:') elsewhere"
    fi
    grep ' error: ' "$OUT/out/liteuart-build.log" | grep -v '^liteuart.c:' >&2 && die "LitePCIe's main.c has errors against $release (above)"
    # Then main.c alone (the card's PCIe driver: the card has no LiteUART).
    sed -i 's/^obj-m := litepcie.o liteuart.o$/obj-m := litepcie.o/' "$d/Kbuild"
    rm -f "$d"/*.o "$d"/*.ko
    build_module litepcie.ko "$d"
    if grep -E 'warning:' "$d/build.log" >&2; then say "(compiler warnings above, from $d/build.log)"; fi
    cp "$d/litepcie.ko" "$LPKO"
fi
check_ko "$LPKO"
modinfo -F alias "$LPKO" | grep -qi "v000010EEd00007021" || die "$LPKO has not the stock PCI ID table"

echo "$release" >"$OUT/release"
if [ ! -f "$OUT/SETUP" ]; then
    mb() { du -cm "$@" 2>/dev/null | awk 'END {print $1}'; }
    {
        echo "version $VERSION"
        echo "release $release"
        echo "kernel_debs_mb $(mb "$OUT"/debs/*.deb)"
        cat "$SRC/SIZE"
        echo "buildroot_mb $(mb "$BR")"
        cat "$OUT/buildroot.time" 2>/dev/null || true
        echo "setup_seconds $(( $(date +%s) - started ))"
    } >"$OUT/SETUP"
fi
say "OK $release: $KDIR/vmlinuz, $KO, $KST (static), $LPKO"
echo "$OUT"
