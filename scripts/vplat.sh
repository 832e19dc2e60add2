#!/usr/bin/env bash
# `make vplat`: the virtual platform (docs/virtual-platform.md). Starts a vfio-user device
# server, boots the guest (scripts/vplat_guest.sh) in QEMU 11.1 from the trixie root
# (scripts/vplat_root.sh) with QEMU's vfio-user-pci client connected to that server, and
# holds the guest's check records (scripts/vplat/init) to scripts/vplat/vplat_checks.py.
# Prints PASS/FAIL per check; exits non-zero on any FAIL, missing or malformed check, or the
# timeout.
#
#   scripts/vplat.sh                       the card: `tlpx-sim --vfio-user SOCKET` (host/target/release)
#   VPLAT_SERVER='CMD ARGS' VPLAT_ID=VVVV:DDDD scripts/vplat.sh
#                                          another server: run as `CMD ARGS SOCKET` (words split on
#                                          spaces, no shell quoting), it must listen on the Unix
#                                          socket SOCKET; VPLAT_ID is the vendor:device it presents
#                                          (e.g. VPLAT_SERVER='host/target/release/tlpx-sim --gen 3
#                                          --lanes 4 --vfio-user' VPLAT_LINK='8GT/s x4')
#   VPLAT_LINK='5GT/s x1'                  the link the card's lspci must show (tlpx-sim's default:
#                                          Gen2, x1 for the 64-bit card)
#   VPLAT_TIMEOUT=300                      wall-clock limit of the QEMU run (s)
#   VPLAT_SERVER_WAIT=30                   how long the server may take to create its socket (s)
#
# The server contract: it is started before QEMU with the socket path as its last argument and
# must create the socket within VPLAT_SERVER_WAIT s; it serves one connection (QEMU's); it may
# exit 0 when QEMU closes the connection, or keep running (it is then sent SIGTERM 5 s after
# QEMU has ended); any other end (non-zero exit, a signal, an exit before QEMU's end) fails the
# run. Its stdout and stderr go to build/vplat/run/server.log. The device appears in the guest at
# 0000:01:00.0, behind a PCIe root port at 0000:00:04.0. The checks are the card's (its IDs,
# capabilities, registers, DMA, MSI): another server must serve the card.
#
# Files (build/vplat/run, fresh each run): console.log (ttyS0, the kernel console), checks.log
# (ttyS1, the records), server.log, qemu-stderr.log, qemu-cmdline.txt, results.json.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
VPLAT=$ROOT/build/vplat
ROOTFS=$VPLAT/root
RUN=$VPLAT/run
CARGO=${CARGO:-$(command -v cargo || echo "$HOME/.cargo/bin/cargo")}
CHECKER=scripts/vplat/vplat_checks.py
TIMEOUT=${VPLAT_TIMEOUT:-300}
SERVER_WAIT=${VPLAT_SERVER_WAIT:-30}
# Where QEMU puts the device, and so where the guest looks for it: in slot 0 behind a PCIe root
# port (00:04.0), as a card sits in a slot. Not on the root bus: there QEMU's vfio code turns an
# Endpoint into a Root Complex Integrated Endpoint and hides its link registers (LnkCap/LnkSta
# read 0), and the card's link speed and width could not be seen in the guest.
ADDR=0000:01:00.0
# Inside QEMU's chroot, $RUN is bind-mounted here.
IN_ROOT=/vplat
started=$(date +%s.%N)

say() { echo "vplat: $*" >&2; }
die() { say "error: $*"; exit 1; }

[ "$(id -u)" = 0 ] || die "QEMU runs chrooted in $ROOTFS, which needs root (run as root or with sudo)"
for tool in chroot unshare mount flock timeout python3; do
    command -v "$tool" >/dev/null || die "$tool is missing (coreutils, util-linux, python3)"
done
[ -f "$VPLAT/root.manifest" ] && [ -x "$ROOTFS/usr/bin/qemu-system-x86_64" ] ||
    die "no QEMU root in $ROOTFS: run 'make vplat-root' (scripts/vplat_root.sh) first"
qemu_version=$(chroot "$ROOTFS" qemu-system-x86_64 --version | head -1)

# The parser first: it must refuse the mangled channels it exists to refuse (a second).
python3 "$CHECKER" --self-test

echo "== guest image"
GUEST=$(scripts/vplat_guest.sh) || die "scripts/vplat_guest.sh failed (above)"
release=$(cat "$GUEST/release")
tlpx_version=$("$ROOT/host/target/release/tlpx" --version)

echo "== device server"
if [ -n "${VPLAT_SERVER:-}" ]; then
    read -ra server_cmd <<<"$VPLAT_SERVER"
    [ -n "${VPLAT_ID:-}" ] || die "VPLAT_SERVER is set but not VPLAT_ID (the vendor:device its device presents, e.g. 10ee:7c01)"
    ID=$VPLAT_ID
    command -v "${server_cmd[0]}" >/dev/null || die "VPLAT_SERVER's command ${server_cmd[0]} is not there or not executable"
else
    # The card: tlpx-sim's vfio-user mode, with the card library it finds (build/card/dw64).
    [ -f "$ROOT/build/card/dw64/libtlpxcard.so" ] ||
        die "no card library at build/card/dw64/libtlpxcard.so: build it with 'make gateware'"
    [ -x "$CARGO" ] || die "no cargo ($CARGO): make setup installs Rust"
    (cd host && "$CARGO" build --release -q -p tlpx-sim --bin tlpx-sim) || die "cargo could not build tlpx-sim"
    server_cmd=("$ROOT/host/target/release/tlpx-sim" --vfio-user)
    ID=${VPLAT_ID:-10ee:7c01}
fi
LINK=${VPLAT_LINK:-5GT/s x1}
[[ "$LINK" =~ ^[0-9.]+GT/s\ x[0-9]+$ ]] || die "VPLAT_LINK must be 'SPEED WIDTH' as lspci prints them (like '5GT/s x1'), not '$LINK'"
[[ "$ID" =~ ^[0-9a-f]{4}:[0-9a-f]{4}$ ]] || die "VPLAT_ID must be vendor:device in lower-case hex (like 1234:7070), not '$ID'"

# One run at a time: a second would remove this run's files and socket.
exec 9>"$VPLAT/run.lock"
flock -n 9 || die "another scripts/vplat.sh is running (it holds $VPLAT/run.lock)"
rm -rf "$RUN"
mkdir -p "$RUN" "$ROOTFS$IN_ROOT"
SOCK=$RUN/dev.sock
# sun_path holds 107 bytes and a NUL.
[ ${#SOCK} -le 107 ] || die "the socket path $SOCK is ${#SOCK} bytes, more than a Unix socket takes (107): use a shorter checkout path"
# The guest's files beside the run's, so that one bind mount shows QEMU both (hard links: no copy).
ln -f "$GUEST/vmlinuz" "$RUN/vmlinuz" 2>/dev/null || cp "$GUEST/vmlinuz" "$RUN/vmlinuz"
ln -f "$GUEST/initramfs.cpio" "$RUN/initramfs.cpio" 2>/dev/null || cp "$GUEST/initramfs.cpio" "$RUN/initramfs.cpio"

say "starting ${server_cmd[*]} $SOCK (log: build/vplat/run/server.log)"
"${server_cmd[@]}" "$SOCK" >"$RUN/server.log" 2>&1 &
srv=$!
server_end=""
stop_server() {
    if [ -n "${srv:-}" ] && kill -0 "$srv" 2>/dev/null; then kill "$srv" 2>/dev/null || true; wait "$srv" 2>/dev/null || true; fi
}
trap stop_server EXIT
for ((i = 0; i < SERVER_WAIT * 10; i++)); do
    [ -S "$SOCK" ] && break
    if ! kill -0 "$srv" 2>/dev/null; then
        rc=0; wait "$srv" || rc=$?
        tail -20 "$RUN/server.log" >&2
        die "the device server exited (status $rc) before creating its socket $SOCK (log above: build/vplat/run/server.log)"
    fi
    sleep 0.1
done
[ -S "$SOCK" ] || die "the device server did not create its socket $SOCK within ${SERVER_WAIT} s (VPLAT_SERVER_WAIT)"

echo "== QEMU ($qemu_version, TCG, timeout ${TIMEOUT}s) with the device at $ADDR ($ID)"
# Why each option: docs/virtual-platform.md, "The QEMU command line".
qemu_args=(
    -machine q35,memory-backend=mem,kernel-irqchip=split -accel tcg -cpu max -smp 1 -m 512M
    -object memory-backend-memfd,id=mem,size=512M,share=on
    -nodefaults -nic none -display none -monitor none -no-reboot
    -serial "file:$IN_ROOT/console.log" -serial "file:$IN_ROOT/checks.log"
    -kernel "$IN_ROOT/vmlinuz" -initrd "$IN_ROOT/initramfs.cpio"
    -append "console=ttyS0 panic=-1 loglevel=4 no_timer_check intel_iommu=on iommu=pt rdinit=/init vplat_addr=$ADDR vplat_id=$ID"
    -device intel-iommu,intremap=on,caching-mode=on
    -device pcie-root-port,id=rp0,chassis=1,slot=0,addr=04.0
    -device "{\"driver\":\"vfio-user-pci\",\"bus\":\"rp0\",\"addr\":\"00.0\",\"socket\":{\"type\":\"unix\",\"path\":\"$IN_ROOT/dev.sock\"}}"
)
{
    echo "# in a private mount namespace with $RUN bind-mounted at $ROOTFS$IN_ROOT (scripts/vplat.sh):"
    python3 -c 'import shlex, sys; print(shlex.join(sys.argv[1:]))' chroot "$ROOTFS" qemu-system-x86_64 "${qemu_args[@]}"
} >"$RUN/qemu-cmdline.txt"
qemu_started=$(date +%s.%N)
qemu_status=0
# A private mount namespace: $RUN appears in the root at $IN_ROOT for QEMU only, and the bind
# mount ends with it (nothing to clean up, even after a kill).
timeout --kill-after=10 "$TIMEOUT" unshare -m --propagation private \
    sh -c 'mount --bind "$1" "$2$3" && shift 3 && exec chroot "$@"' sh "$RUN" "$ROOTFS" "$IN_ROOT" \
    "$ROOTFS" qemu-system-x86_64 "${qemu_args[@]}" </dev/null >"$RUN/qemu-stdout.log" 2>"$RUN/qemu-stderr.log" ||
    qemu_status=$?
qemu_seconds=$(python3 -c "import time; print(round(time.time() - $qemu_started, 1))")
if [ -s "$RUN/qemu-stderr.log" ]; then
    say "QEMU's stderr (build/vplat/run/qemu-stderr.log):"
    sed 's/^/  | /' "$RUN/qemu-stderr.log" >&2
fi

# The server: exited on its own (0 = it saw QEMU close the connection), or still running.
for ((i = 0; i < 50; i++)); do kill -0 "$srv" 2>/dev/null || break; sleep 0.1; done
if kill -0 "$srv" 2>/dev/null; then
    server_end=running
    kill "$srv" 2>/dev/null || true
    wait "$srv" 2>/dev/null || true
else
    rc=0; wait "$srv" || rc=$?
    if [ "$rc" -gt 128 ]; then server_end="signal $((rc - 128))"; else server_end="exit $rc"; fi
fi
srv=""
[ "$server_end" = "exit 0" ] || [ "$server_end" = running ] || { say "the device server's log ends:"; tail -20 "$RUN/server.log" | sed 's/^/  | /' >&2; }
tr -d '\r' <"$RUN/console.log" >"$RUN/console.txt" 2>/dev/null && mv "$RUN/console.txt" "$RUN/console.log" || true

echo "== checks"
total_seconds=$(python3 -c "import time; print(round(time.time() - $started, 1))")
python3 "$CHECKER" --checks "$RUN/checks.log" --console "$RUN/console.log" --out "$RUN/results.json" \
    --release "$release" --addr "$ADDR" --id "$ID" --tlpx-version "$tlpx_version" \
    --qemu-status "$qemu_status" --timeout "$TIMEOUT" --server "$server_end" --server-command "${server_cmd[*]}" \
    --qemu "$qemu_version" --qemu-seconds "$qemu_seconds" --total-seconds "$total_seconds" \
    --link "$LINK" --server-log "$RUN/server.log"
