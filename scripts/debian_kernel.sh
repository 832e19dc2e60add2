#!/usr/bin/env bash
# Fetches a Debian kernel (image and modules) and its headers as packages from Debian's
# archive and unpacks them under build/kernel/root, without installing anything on this
# machine. Used by the QEMU vfio test (the guest kernel and its vfio modules) and by
# `make litepcie-driver` (the headers the driver is built against).
#
#   scripts/debian_kernel.sh            fetch (once) and print the kernel release, e.g. 6.1.0-56-amd64
#   KERNEL_RELEASE=6.1.0-56-amd64 ...   a given release instead of linux-image-amd64's current one
#
# Prints only the release on stdout; what it does goes to stderr. Idempotent: a second run
# with the same release downloads nothing.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=build/kernel
mkdir -p "$OUT/debs" "$OUT/root"

release=${KERNEL_RELEASE:-}
if [ -z "$release" ]; then
    release=$(apt-cache depends linux-image-amd64 2>/dev/null | awk '/Depends: linux-image-/ {sub("linux-image-", "", $2); print $2; exit}')
    if [ -z "$release" ]; then
        echo "debian_kernel: apt does not know linux-image-amd64; run 'apt-get update' (Debian's archive must be reachable)" >&2
        exit 1
    fi
fi
stamp="$OUT/root/.unpacked-$release"
if [ ! -f "$stamp" ]; then
    # The headers package names its -common and kbuild companions.
    common=$(apt-cache depends "linux-headers-$release" | awk '/Depends: linux-headers-.*-common/ {print $2; exit}')
    kbuild=$(apt-cache depends "linux-headers-$release" | awk '/Depends: linux-kbuild-/ {print $2; exit}')
    if [ -z "$common" ] || [ -z "$kbuild" ]; then
        echo "debian_kernel: cannot find the headers of $release in apt (try apt-get update)" >&2
        exit 1
    fi
    packages=("linux-image-$release" "linux-headers-$release" "$common" "$kbuild")
    echo "debian_kernel: downloading ${packages[*]}" >&2
    (cd "$OUT/debs" && apt-get download -qq "${packages[@]}" >&2)
    for p in "${packages[@]}"; do
        deb=$(ls "$OUT/debs/${p}"_*.deb | head -1)
        dpkg-deb -x "$deb" "$OUT/root"
    done
    touch "$stamp"
fi
if [ ! -f "$OUT/root/boot/vmlinuz-$release" ] || [ ! -d "$OUT/root/lib/modules/$release" ]; then
    echo "debian_kernel: $OUT/root lacks vmlinuz-$release or its modules; remove $stamp and run again" >&2
    exit 1
fi
echo "$release"
