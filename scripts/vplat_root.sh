#!/usr/bin/env bash
# `make vplat-root`: the Debian trixie root that runs QEMU 11.1 for the virtual platform
# (docs/virtual-platform.md), built with mmdebstrap under build/vplat/root.
#
# Why a root: QEMU's vfio-user-pci client device exists from QEMU 10.1 on. bookworm has 7.2,
# bookworm-backports 10.0; trixie-backports has 11.1, which needs trixie's libc. So QEMU runs
# chrooted in a minimal trixie root (scripts/vplat.sh), downloaded from the Debian mirror this
# machine's apt already uses. qemu-system-x86, qemu-system-common, qemu-system-data and
# seabios all come from trixie-backports: they depend on each other's exact versions, and
# mixing suites fails.
#
#   scripts/vplat_root.sh                 build the root once; later runs check it and stop
#   VPLAT_MIRROR=http://... scripts/...   a mirror other than the one apt uses here
#
# Writes build/vplat/root.manifest (package versions, download size, set-up time) last, as
# the sign of a complete root: the stamp. With it, a run only checks the root's QEMU (a
# fraction of a second). The root is rebuilt when the list of packages asked for changes, or
# the root is gone. Needs root (mmdebstrap's root mode).
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=$PWD/build/vplat
ROOTFS=$OUT/root
MANIFEST=$OUT/root.manifest
SUITE=trixie
BACKPORTS=trixie-backports
# QEMU >= 10.1 has the vfio-user-pci client.
QEMU_MIN=10.1
INCLUDE="qemu-system-x86/$BACKPORTS,qemu-system-common/$BACKPORTS,qemu-system-data/$BACKPORTS,seabios/$BACKPORTS,ipxe-qemu"
# What decides the root's content; a change rebuilds it (the mirror does not).
CONFIG="mmdebstrap --variant=apt $SUITE+$BACKPORTS main, no recommends, include=$INCLUDE"

say() { echo "vplat-root: $*" >&2; }
die() { say "error: $*"; exit 1; }

[ "$(id -u)" = 0 ] || die "mmdebstrap's root mode and chroot need root (run as root or with sudo)"

# check_root: QEMU in the root runs, is new enough and has vfio-user-pci; prints its version.
check_root() {
    local dir=$1 version devices
    [ -x "$dir/usr/bin/qemu-system-x86_64" ] || die "$dir has no usr/bin/qemu-system-x86_64"
    version=$(chroot "$dir" qemu-system-x86_64 --version | sed -n '1s/^QEMU emulator version \([0-9.]*\).*/\1/p') ||
        die "chroot $dir qemu-system-x86_64 --version failed"
    [ -n "$version" ] || die "cannot read QEMU's version in $dir"
    if [ "$(printf '%s\n%s\n' "$QEMU_MIN" "$version" | sort -V | head -1)" != "$QEMU_MIN" ]; then
        die "QEMU in $dir is $version; vfio-user-pci needs >= $QEMU_MIN (is $BACKPORTS's qemu-system-x86 older than expected?)"
    fi
    devices=$(chroot "$dir" qemu-system-x86_64 -device help) || die "chroot $dir qemu-system-x86_64 -device help failed"
    grep -q '^name "vfio-user-pci"' <<<"$devices" ||
        die "QEMU $version in $dir does not list vfio-user-pci in '-device help' (was it built without vfio-user?)"
    echo "$version"
}

if [ -f "$MANIFEST" ] && [ -d "$ROOTFS" ] && [ "$(sed -n 's/^config: //p' "$MANIFEST")" = "$CONFIG" ]; then
    version=$(check_root "$ROOTFS")
    say "up to date: QEMU $version with vfio-user-pci in $ROOTFS ($MANIFEST)"
    exit 0
fi

# The host's tools ------------------------------------------------------------------------------
if ! command -v mmdebstrap >/dev/null; then
    say "installing mmdebstrap on this machine (apt)"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends mmdebstrap >&2 ||
        die "apt-get install mmdebstrap failed (make setup installs it too)"
fi

# The mirror: VPLAT_MIRROR, else the first enabled 'deb' source for this machine's release
# (deb822 .sources files, then sources.list).
mirror=${VPLAT_MIRROR:-}
if [ -z "$mirror" ]; then
    codename=$(. /etc/os-release && echo "${VERSION_CODENAME:-}")
    [ -n "$codename" ] || die "cannot read VERSION_CODENAME from /etc/os-release; set VPLAT_MIRROR"
    mirror=$(python3 - "$codename" <<'EOF'
import glob, sys
codename = sys.argv[1]
for path in sorted(glob.glob("/etc/apt/sources.list.d/*.sources")):
    for stanza in open(path).read().split("\n\n"):
        fields = {}
        for line in stanza.splitlines():
            if line.startswith("#") or ":" not in line or line[0].isspace():
                continue
            key, _, value = line.partition(":")
            fields[key.strip().lower()] = value.split()
        if "deb" in fields.get("types", []) and codename in fields.get("suites", []) \
                and fields.get("enabled", ["yes"])[0].lower() != "no" and fields.get("uris"):
            print(fields["uris"][0]); sys.exit()
for path in ["/etc/apt/sources.list"] + sorted(glob.glob("/etc/apt/sources.list.d/*.list")):
    try:
        lines = open(path).read().splitlines()
    except OSError:
        continue
    for line in lines:
        words = [w for w in line.split() if not w.startswith("[")] if not line.lstrip().startswith("#") else []
        if len(words) >= 3 and words[0] == "deb" and words[2] == codename:
            print(words[1]); sys.exit()
EOF
)
    [ -n "$mirror" ] || die "no enabled 'deb ... $codename' source in /etc/apt/sources.list{,.d/}: set VPLAT_MIRROR=http://deb.debian.org/debian (or a mirror)"
fi
say "mirror $mirror"

# Build -----------------------------------------------------------------------------------------
# Into root.tmp, renamed when complete, so that a failed run never leaves a root that looks done.
# Nothing may be mounted below the old root or root.tmp before they are removed (a run of
# mmdebstrap or scripts/vplat.sh killed at the wrong moment could leave its mounts).
for dir in "$ROOTFS" "$OUT/root.tmp"; do
    if [ -e "$dir" ]; then
        if findmnt -rn -o TARGET | grep -q "^$dir\(/\|$\)"; then
            die "something is mounted below $dir: $(findmnt -rn -o TARGET | grep "^$dir\(/\|$\)" | tr '\n' ' ')- unmount it first"
        fi
        say "removing $dir (${dir##*/} is stale or its package list changed)"
        rm -rf "$dir"
    fi
done
rm -f "$MANIFEST"
mkdir -p "$OUT"
tmp=$OUT/root.tmp
started=$(date +%s.%N)
say "mmdebstrap $SUITE with $INCLUDE (measured here: 67 MB downloaded, 45-60 s)"
# The download is measured twice: apt's own "Fetched N MB" lines (package lists and packages,
# in the verbose log) and the .debs themselves, kept in the root by the two --skip options
# and deleted below.
log=$OUT/root.log
if ! mmdebstrap --verbose --variant=apt --include="$INCLUDE" --aptopt='Apt::Install-Recommends "false"' \
        --skip=essential/unlink,cleanup/apt/cache \
        "$SUITE" "$tmp" "deb $mirror $SUITE main" "deb $mirror $BACKPORTS main" >"$log" 2>&1; then
    tail -30 "$log" >&2
    die "mmdebstrap failed (above; whole log $log); the mirror $mirror must serve $SUITE and $BACKPORTS"
fi
grep '^I: ' "$log" >&2 || true
seconds=$(python3 -c "import time; print(round(time.time() - $started, 1))")
# apt names each file it fetches: "Get:8 http://... trixie/main amd64 Packages [9679 kB]" (lists)
# and "Get:54 http://... qemu-system-x86 amd64 1:11.1.3+ds-1~bpo13+1 [10.4 MB]" (packages).
# mmdebstrap's log can repeat a listing (and apt's "Fetched" total with it): each file once.
fetched_bytes=$(python3 -c '
import re, sys
units = {"B": 1, "kB": 1e3, "MB": 1e6, "GB": 1e9}
files = {}
for what, n, u in re.findall(r"^Get:\d+ (.+) \[([0-9,.]+) (B|kB|MB|GB)\]$", open(sys.argv[1], errors="replace").read(), re.M):
    files[what] = float(n.replace(",", "")) * units[u]
print(int(sum(files.values())))
' "$log")
[ "$fetched_bytes" -gt 0 ] || die "no 'Get:' line from apt in $log: cannot measure the download"
archives=$tmp/var/cache/apt/archives
debs=$(find "$archives" -maxdepth 1 -name '*.deb' | wc -l)
download_bytes=$(find "$archives" -maxdepth 1 -name '*.deb' -printf '%s\n' | awk '{s += $1} END {print s + 0}')
[ "$debs" -gt 0 ] || die "no .deb left in $archives to measure the download (did mmdebstrap ignore --skip=essential/unlink,cleanup/apt/cache?)"
find "$archives" -maxdepth 1 -name '*.deb' -delete
version=$(check_root "$tmp")
mv "$tmp" "$ROOTFS"
root_bytes=$(du -sb "$ROOTFS" | cut -f1)

{
    echo "config: $CONFIG"
    echo "mirror: $mirror"
    echo "built: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
    echo "qemu: $version"
    echo "download: $debs packages, $download_bytes bytes of .debs; $fetched_bytes bytes fetched by apt (lists included)"
    echo "root: $root_bytes bytes"
    echo "setup_seconds: $seconds"
    echo "packages:"
    chroot "$ROOTFS" dpkg-query -W -f='  ${Package} ${Version}\n' \
        qemu-system-x86 qemu-system-common qemu-system-data seabios ipxe-qemu libc6
} > "$MANIFEST.tmp"
mv "$MANIFEST.tmp" "$MANIFEST"
mb() { awk -v b="$1" 'BEGIN {printf "%.1f MB", b / 1e6}'; }
say "done in $seconds s: QEMU $version (vfio-user-pci listed), downloaded $debs packages ($(mb "$download_bytes"); $(mb "$fetched_bytes") with the package lists), root $(mb "$root_bytes")"
sed -n '/^packages:/,$p' "$MANIFEST" >&2
