#!/usr/bin/env bash
# `make pcitest`: Linux's own PCI endpoint test, host side, for the virtual platform's guest kernel
# (docs/virtual-platform.md, "Linux's endpoint test"), built from Debian's kernel source package
# of the SAME version as the guest kernel (scripts/debian_kernel.sh):
#
#   build/pcitest/<release>/pci_endpoint_test.ko   drivers/misc/pci_endpoint_test.c, unmodified,
#                                                  built out of tree against the kernel's headers
#                                                  (Debian builds its 6.1 kernels without
#                                                  CONFIG_PCI_ENDPOINT_TEST: no module to take)
#   build/pcitest/pcitest                          tools/pci/pcitest.c, static (busybox guest)
#   build/pcitest/pcitest.sh                       tools/pci/pcitest.sh, unmodified
#   build/pcitest/pcitest-short.sh                 the same with only its two interrupt loops' bounds
#                                                  cut (below: why)
#   build/pcitest/source/                          the only files taken from linux-source-6.1
#                                                  (and a SOURCE file naming the package version)
#
# The driver needs no source change: the card (placement `bar0`) puts the test registers at BAR0
# offset 0, which is what a `new_id` binding (driver_data 0: test_reg_bar 0, alignment 0) uses.
# Idempotent: the source package is downloaded (139 MB) and unpacked only when build/pcitest/source
# lacks the version; the module and tool are rebuilt only when missing or older than their source.
#
#   scripts/pcitest_build.sh     prints build/pcitest on stdout, what it does on stderr
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
OUT=$ROOT/build/pcitest
SRC=$OUT/source

say() { echo "pcitest-build: $*" >&2; }
die() { say "error: $*"; exit 1; }

for tool in apt-get dpkg-deb tar xz gcc make modinfo readelf; do
    command -v "$tool" >/dev/null || die "$tool is missing (apt, dpkg, tar, xz-utils, gcc, make, kmod, binutils)"
done

# 1. The source, of the guest kernel's own version ----------------------------------------------
release=$(scripts/debian_kernel.sh) || die "scripts/debian_kernel.sh could not give the guest kernel"
image_deb=$(ls "$ROOT"/build/kernel/debs/linux-image-"$release"_*.deb 2>/dev/null | head -1)
[ -n "$image_deb" ] || die "no linux-image-$release .deb in build/kernel/debs (scripts/debian_kernel.sh keeps it)"
# The image's package version is its source's (e.g. 6.1.192-2): linux-source-6.1 of that version
# is the tree that kernel was built from.
version=$(dpkg-deb -f "$image_deb" Version)
series=$(echo "$release" | cut -d. -f1,2)   # 6.1.0-56-amd64 -> 6.1
package=linux-source-$series
FILES=(drivers/misc/pci_endpoint_test.c tools/pci/pcitest.c tools/pci/pcitest.sh include/uapi/linux/pcitest.h)
if [ "$(cat "$SRC/SOURCE" 2>/dev/null)" != "$package $version" ]; then
    say "downloading $package=$version (the guest kernel $release's source; 139 MB, kept only until unpacked)"
    tmp=$OUT/download.tmp
    rm -rf "$tmp" "$SRC"
    mkdir -p "$tmp"
    (cd "$tmp" && apt-get download -qq "$package=$version" >&2) ||
        die "apt-get download $package=$version failed: Debian's archive must have the guest kernel's exact source version (apt-get update; or pin another kernel with KERNEL_RELEASE)"
    deb=$(ls "$tmp"/"${package}"_*.deb)
    # The package holds one tarball of the tree; only the files above are taken out of it.
    members=()
    for f in "${FILES[@]}"; do members+=("$package/$f"); done
    mkdir -p "$tmp/x"
    dpkg-deb --fsys-tarfile "$deb" | tar -xO "./usr/src/$package.tar.xz" | tar -xJ -C "$tmp/x" "${members[@]}" ||
        die "could not take ${FILES[*]} out of $deb"
    mv "$tmp/x/$package" "$SRC"
    echo "$package $version" >"$SRC/SOURCE"
    rm -rf "$tmp"
fi
for f in "${FILES[@]}"; do [ -f "$SRC/$f" ] || die "$SRC/$f is missing: remove $SRC and run again"; done

# 2. The module, unmodified, against the guest kernel's headers ---------------------------------
headers=$ROOT/build/kernel/root/usr/src/linux-headers-$release
[ -d "$headers" ] || die "no $headers after scripts/debian_kernel.sh"
MOD=$OUT/$release
KO=$MOD/pci_endpoint_test.ko
if [ ! -f "$KO" ] || [ "$SRC/drivers/misc/pci_endpoint_test.c" -nt "$KO" ]; then
    say "building pci_endpoint_test.ko against $release"
    rm -rf "$MOD"
    mkdir -p "$MOD"
    cp "$SRC/drivers/misc/pci_endpoint_test.c" "$MOD/"
    echo 'obj-m := pci_endpoint_test.o' >"$MOD/Kbuild"
    # Debian's headers Makefile includes /usr/src/linux-headers-<release>-common/Makefile by its
    # absolute path: a copy points that include at the unpacked tree (as scripts/litepcie_driver.sh).
    sed "s#^include /usr/src/#include $ROOT/build/kernel/root/usr/src/#" "$headers/Makefile" >"$MOD/headers.mk"
    grep -q "^include $ROOT/build/kernel/root/usr/src/linux-headers-.*-common/Makefile" "$MOD/headers.mk" ||
        die "$headers/Makefile does not include its -common Makefile as expected: see scripts/pcitest_build.sh"
    make -C "$headers" -f "$MOD/headers.mk" M="$MOD" modules >"$MOD/build.log" 2>&1 || {
        tail -30 "$MOD/build.log" >&2
        die "pci_endpoint_test.ko does not build against $release (log: $MOD/build.log)"
    }
fi
vermagic=$(modinfo -F vermagic "$KO") || die "modinfo cannot read $KO"
case "$vermagic" in "$release "*) ;; *) die "$KO has vermagic '$vermagic', not $release's" ;; esac
cmp -s "$SRC/drivers/misc/pci_endpoint_test.c" "$MOD/pci_endpoint_test.c" ||
    die "$MOD/pci_endpoint_test.c differs from the package's source: the driver is built unmodified"

# 3. The tool (static) and the script ------------------------------------------------------------
if [ ! -x "$OUT/pcitest" ] || [ "$SRC/tools/pci/pcitest.c" -nt "$OUT/pcitest" ]; then
    say "building pcitest (static)"
    gcc -O2 -Wall -static -I"$SRC/include/uapi" -o "$OUT/pcitest.tmp" "$SRC/tools/pci/pcitest.c" ||
        die "tools/pci/pcitest.c does not build"
    mv "$OUT/pcitest.tmp" "$OUT/pcitest"
fi
if readelf -l "$OUT/pcitest" | grep -q INTERP; then die "$OUT/pcitest is dynamically linked (the build did not take -static)"; fi
cp "$SRC/tools/pci/pcitest.sh" "$OUT/pcitest.sh"
# pcitest.sh tries MSI vectors 1..32 and MSI-X vectors 1..2048, and each vector the function did
# not grant costs the driver's 1 s wait for an interrupt that never comes (34 min for MSI-X
# vectors 33..2048 against the card's 32-entry table). The copy the guest runs keeps the MSI loop
# (1..32, every vector the card has) and tries MSI-X 1..33: every entry of the table, and one
# past it. Only that bound changes: exactly one line, or stop.
sed -e 's/^\(while \[ \$msix -lt \)2049 \]/\134 ]/' \
    "$OUT/pcitest.sh" >"$OUT/pcitest-short.sh.tmp"
changed=$(diff "$OUT/pcitest.sh" "$OUT/pcitest-short.sh.tmp" | grep -c '^>' || true)
[ "$changed" = 1 ] && grep -q '^while \[ \$msi -lt 33 \]' "$OUT/pcitest-short.sh.tmp" &&
    grep -q '^while \[ \$msix -lt 34 \]' "$OUT/pcitest-short.sh.tmp" ||
    die "tools/pci/pcitest.sh's interrupt loops are not as this script expects (while [ \$msi -lt 33 ], while [ \$msix -lt 2049 ]): $changed lines changed; update scripts/pcitest_build.sh"
mv "$OUT/pcitest-short.sh.tmp" "$OUT/pcitest-short.sh"
say "OK $KO ($package $version), $OUT/pcitest (static), pcitest.sh, pcitest-short.sh"
echo "$OUT"
