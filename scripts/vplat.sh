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
#   VPLAT_MPS_SUPPORTED=512                the max payload the card's DevCap must show (its board's
#                                          hard IP's: tlpx-sim --board; 512 for the generic board)
#   VPLAT_TIMEOUT=420                      wall-clock limit of the card boot's QEMU run (s)
#   VPLAT_BOOTS='card pcitest'             which boots: "card" (the checks above, the card of
#                                          build/card/dw64) and "pcitest" (Linux's endpoint test,
#                                          a second boot with the card of build/card/dw64-pci_epf_test:
#                                          make gateware DUT=accelerators/pci_epf_test/dut.toml)
#   VPLAT_PCITEST_TIMEOUT=300              wall-clock limit of the pcitest boot (s)
#   VPLAT_PCITEST_SERVER='CMD ARGS' VPLAT_PCITEST_ID=VVVV:DDDD VPLAT_PCITEST_OFFER='bars=6 intx=1 msi=32
#     msix=8 fault=0' [VPLAT_PCITEST_FAULT=0x40]
#                                          development only: another server for the pcitest boot
#                                          (e.g. ../shared/vplat/pcitest/epf-server, a software
#                                          model), what its device offers (the table it is held
#                                          to) and its fault register's BAR0 offset
#   VPLAT_SERVER_WAIT=30                   how long the server may take to create its socket (s)
#   VPLAT_KERNEL=7.3                       the guest with Debian's 7.3 kernel (trixie-backports,
#                                          scripts/kernel73.sh) instead of 6.1: its boots are "card"
#                                          (the same checks) and "kselftest" (the kselftest
#                                          pci_endpoint_test against the pci_epf_test card, in place
#                                          of pcitest); files in build/vplat/run-7.3. `make
#                                          vplat-test` (and make test) runs it with
#                                          VPLAT_BOOTS='driver kselftest' after 6.1's two boots;
#                                          make vplat-test-k73 runs both whole boots
#   VPLAT_BOOTS=driver                     (either kernel) the card boot cut to LitePCIe's stock
#                                          driver: lspci, tlpx list, then only the litepcie checks
#                                          (scripts/vplat/litepcie-checks), in place of "card"
#   VPLAT_SMP=N                            the guest's CPUs (default 2: per-CPU interrupt vectors)
#   VPLAT_KSELFTEST_TIMEOUT=600            wall-clock limit of the kselftest boot (s)
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
# (ttyS1, the records), server.log, qemu-stderr.log, qemu-cmdline.txt, results.json (both boots);
# the pcitest boot's own in build/vplat/run/pcitest/, with pcitest-output.txt (pcitest's whole
# output, pass by pass).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
VPLAT=$ROOT/build/vplat
ROOTFS=$VPLAT/root
KERNEL=${VPLAT_KERNEL:-6.1}
case "$KERNEL" in
    6.1) RUN=$VPLAT/run; SMP=${VPLAT_SMP:-2}; DEFAULT_BOOTS="card pcitest"; ENDPOINT_BOOT=pcitest ;;
    7.3) RUN=$VPLAT/run-7.3; SMP=${VPLAT_SMP:-2}; DEFAULT_BOOTS="card kselftest"; ENDPOINT_BOOT=kselftest ;;
    *) echo "vplat: error: VPLAT_KERNEL is 6.1 (the default) or 7.3, not '$KERNEL'" >&2; exit 1 ;;
esac
[[ "$SMP" =~ ^[1-8]$ ]] || { echo "vplat: error: VPLAT_SMP must be 1..8 CPUs, not '$SMP'" >&2; exit 1; }
CARGO=${CARGO:-$(command -v cargo || echo "$HOME/.cargo/bin/cargo")}
CHECKER=scripts/vplat/vplat_checks.py
TIMEOUT=${VPLAT_TIMEOUT:-420}
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
GUEST=$(VPLAT_KERNEL=$KERNEL scripts/vplat_guest.sh) || die "scripts/vplat_guest.sh failed (above)"
release=$(cat "$GUEST/release")
tlpx_version=$("$ROOT/host/target/release/tlpx" --version)

# Which boots: "card" (the 35 checks, the card of build/card/dw64) and "pcitest" (Linux's endpoint
# test against the card with the pci_epf_test DUT, build/card/dw64-pci_epf_test). Both by default.
# With VPLAT_KERNEL=7.3: "card" and "kselftest" (the kselftest pci_endpoint_test in place of pcitest,
# which Linux 6.14 removed). "driver" in place of "card": the card boot cut to LitePCIe's driver
# (what make test runs on 7.3, whose card checks are otherwise 6.1's).
BOOTS=${VPLAT_BOOTS:-$DEFAULT_BOOTS}
for b in $BOOTS; do
    [ "$b" = card ] || [ "$b" = driver ] || [ "$b" = "$ENDPOINT_BOOT" ] ||
        die "VPLAT_BOOTS takes 'card' or 'driver', and '$ENDPOINT_BOOT', with kernel $KERNEL, not '$b'"
done
want_boot() { case " $BOOTS " in *" $1 "*) true ;; *) false ;; esac; }
want_boot card && want_boot driver && die "VPLAT_BOOTS takes 'card' or 'driver', not both (the driver boot is the card boot cut short)"
# The card's device server serves both.
CARD_BOOT=""; want_boot card && CARD_BOOT=card; want_boot driver && CARD_BOOT=driver
[ -x "$CARGO" ] || die "no cargo ($CARGO): make setup installs Rust"
# The whole workspace, as `make host` builds it (`-p tlpx-sim` alone would rebuild dependencies
# with the features of its graph only).
build_sim() { (cd host && "$CARGO" build --release -q --workspace) || die "cargo could not build tlpx-sim"; }

echo "== device servers"
if [ -n "$CARD_BOOT" ]; then
    if [ -n "${VPLAT_SERVER:-}" ]; then
        read -ra server_cmd <<<"$VPLAT_SERVER"
        [ -n "${VPLAT_ID:-}" ] || die "VPLAT_SERVER is set but not VPLAT_ID (the vendor:device its device presents, e.g. 10ee:7c01)"
        ID=$VPLAT_ID
        command -v "${server_cmd[0]}" >/dev/null || die "VPLAT_SERVER's command ${server_cmd[0]} is not there or not executable"
    else
        # The card: tlpx-sim's vfio-user mode, with the card library it finds (build/card/dw64).
        [ -f "$ROOT/build/card/dw64/libtlpxcard.so" ] ||
            die "no card library at build/card/dw64/libtlpxcard.so: build it with 'make gateware'"
        build_sim
        # 32 MSI vectors and a 32-entry MSI-X table (tlpx-sim's default is one MSI vector): the
        # guest's vfio-pci takes MSI-X, and tlpx irq --cpus steers a vector to each CPU
        # (check vfio_irq_percpu; vplat_checks.card_lspci holds lspci to this offer).
        server_cmd=("$ROOT/host/target/release/tlpx-sim" --msi-vectors 32 --msix 32 --vfio-user)
        ID=${VPLAT_ID:-10ee:7c01}
    fi
    [[ "$ID" =~ ^[0-9a-f]{4}:[0-9a-f]{4}$ ]] || die "VPLAT_ID must be vendor:device in lower-case hex (like 1234:7070), not '$ID'"
fi
LINK=${VPLAT_LINK:-5GT/s x1}
# The max payload the card's Device Capabilities must show: its board's hard IP's (tlpx-sim
# --board; the 64-bit card stands for the generic board, LitePCIe's 512-byte limit), never the
# 4096 bytes tlpx-sim once claimed.
MPS_SUPPORTED=${VPLAT_MPS_SUPPORTED:-512}
[[ "$MPS_SUPPORTED" =~ ^(128|256|512|1024|2048|4096)$ ]] || die "VPLAT_MPS_SUPPORTED must be 128, 256, ..., 4096 bytes, not '$MPS_SUPPORTED'"
[[ "$LINK" =~ ^[0-9.]+GT/s\ x[0-9]+$ ]] || die "VPLAT_LINK must be 'SPEED WIDTH' as lspci prints them (like '5GT/s x1'), not '$LINK'"
# The root port is the card's slot, of the card's speed and width (QEMU's default port is
# 16 GT/s x32). Besides looking like a real slot, this keeps Linux 6.1 from waiting for the
# port's Data Link Layer Link Active after each secondary bus reset, which it does only on ports
# faster than 5 GT/s and which QEMU's port never sets again after one: vfio-pci resets the card
# at every open and close, and on the 16 GT/s port each reset cost over a second (54 in the 6.1
# card boot, a quarter of it). docs/virtual-platform.md, "The QEMU command line".
PORT_SPEED=${LINK%%GT/s*}; PORT_SPEED=${PORT_SPEED/./_}; PORT_WIDTH=${LINK##* x}
case "$PORT_SPEED:$PORT_WIDTH" in
    2_5:*|5:*|8:*|16:*|32:*|64:*) ;;
    *) die "VPLAT_LINK '$LINK': QEMU's root port takes the speeds 2.5, 5, 8, 16, 32 and 64 GT/s" ;;
esac
case "$PORT_WIDTH" in
    1|2|4|8|12|16|32) ;;
    *) die "VPLAT_LINK '$LINK': QEMU's root port takes the widths x1, x2, x4, x8, x12, x16 and x32" ;;
esac

# The pcitest boot's device: the card with the pci_epf_test DUT (make gateware
# DUT=accelerators/pci_epf_test/dut.toml), served by tlpx-sim with that card library; or, for
# development, VPLAT_PCITEST_SERVER (another server, run as `CMD ARGS SOCKET`), with
# VPLAT_PCITEST_ID and VPLAT_PCITEST_OFFER (what it offers: see vplat_checks.py's CARD_OFFER).
DUT_MANIFEST=accelerators/pci_epf_test/dut.toml
DUT_CARD=$ROOT/build/card/dw64-pci_epf_test/libtlpxcard.so
if want_boot pcitest || want_boot kselftest; then
    if [ -n "${VPLAT_PCITEST_SERVER:-}" ]; then
        read -ra pt_server_cmd <<<"$VPLAT_PCITEST_SERVER"
        [ -n "${VPLAT_PCITEST_ID:-}" ] && [ -n "${VPLAT_PCITEST_OFFER:-}" ] ||
            die "VPLAT_PCITEST_SERVER is set but not VPLAT_PCITEST_ID (vendor:device) and VPLAT_PCITEST_OFFER (e.g. 'bars=6 intx=1 msi=32 msix=8 fault=0')"
        command -v "${pt_server_cmd[0]}" >/dev/null || die "VPLAT_PCITEST_SERVER's command ${pt_server_cmd[0]} is not there or not executable"
        PT_ID=$VPLAT_PCITEST_ID
    else
        [ -f "$DUT_CARD" ] ||
            die "no card with the pci_epf_test DUT at ${DUT_CARD#"$ROOT/"}: build it with 'make gateware DUT=$DUT_MANIFEST'"
        build_sim
        # 32 MSI vectors and a 32-entry MSI-X table (off by default in tlpx-sim): the DUT raises
        # the vector pcitest asks for (pcitest_checks.py's CARD_OFFER).
        pt_server_cmd=("$ROOT/host/target/release/tlpx-sim" --card "$DUT_CARD" --msi-vectors 32 --msix 32 --vfio-user)
        PT_ID=${VPLAT_PCITEST_ID:-10ee:7c01}
    fi
    [[ "$PT_ID" =~ ^[0-9a-f]{4}:[0-9a-f]{4}$ ]] || die "VPLAT_PCITEST_ID must be vendor:device in lower-case hex, not '$PT_ID'"
    # The fault switch's BAR0 offset, from the DUT's manifest (its one source): the register
    # `fault`'s window offset, which is its BAR0 offset because the manifest places the window at
    # BAR0 offset 0 (placement "bar0").
    # (VPLAT_PCITEST_FAULT=0xNN instead: another server's register, for development.)
    FAULT_OFF=${VPLAT_PCITEST_FAULT:-}
    [ -n "$FAULT_OFF" ] || FAULT_OFF=$(python3 - "$DUT_MANIFEST" <<'EOF'
import sys, tomllib
path = sys.argv[1]
try:
    m = tomllib.load(open(path, "rb"))
except (OSError, tomllib.TOMLDecodeError) as err:
    sys.exit(f"vplat: error: cannot read the DUT's manifest {path}: {err}")
placement = m.get("dut", {}).get("placement")
if placement != "bar0":
    sys.exit(f"vplat: error: {path} has placement {placement!r}: pci_endpoint_test needs its registers at BAR0 offset 0 ('bar0')")
regs = [r for r in m.get("register", []) if r.get("name") == "fault"]
if len(regs) != 1 or not isinstance(regs[0].get("offset"), int):
    sys.exit(f"vplat: error: {path} names no register 'fault' with an integer offset (the DUT's fault switch)")
print(hex(regs[0]["offset"]))
EOF
) || die "no fault switch offset from $DUT_MANIFEST (above)"
    [[ "$FAULT_OFF" =~ ^0x[0-9a-f]+$ ]] || die "the fault switch's offset must be hex like 0x40, not '$FAULT_OFF'"
fi

# One run at a time: a second would remove this run's files and socket.
exec 9>"$VPLAT/run.lock"
flock -n 9 || die "another scripts/vplat.sh is running (it holds $VPLAT/run.lock)"
rm -rf "$RUN"
mkdir -p "$RUN" "$ROOTFS$IN_ROOT"
# The guest's files beside the run's, so that one bind mount shows QEMU both (hard links: no copy).
ln -f "$GUEST/vmlinuz" "$RUN/vmlinuz" 2>/dev/null || cp "$GUEST/vmlinuz" "$RUN/vmlinuz"
ln -f "$GUEST/initramfs.cpio" "$RUN/initramfs.cpio" 2>/dev/null || cp "$GUEST/initramfs.cpio" "$RUN/initramfs.cpio"

srv=""
stop_server() {
    if [ -n "${srv:-}" ] && kill -0 "$srv" 2>/dev/null; then kill "$srv" 2>/dev/null || true; wait "$srv" 2>/dev/null || true; fi
}
trap stop_server EXIT

# boot DIR ID TIMEOUT APPEND SERVER_CMD...: one boot of the guest with the server's device at
# $ADDR; DIR (under $RUN) gets console.log, checks.log, server.log, qemu-*.log, qemu-cmdline.txt.
# Sets qemu_status, qemu_seconds, server_end.
boot() {
    local dir=$1 id=$2 timeout=$3 append=$4 memory=$5
    shift 5
    local in_root=$IN_ROOT${dir#"$RUN"}
    local sock=$dir/dev.sock
    mkdir -p "$dir"
    # sun_path holds 107 bytes and a NUL.
    [ ${#sock} -le 107 ] || die "the socket path $sock is ${#sock} bytes, more than a Unix socket takes (107): use a shorter checkout path"
    say "starting $* $sock (log: ${dir#"$ROOT/"}/server.log)"
    "$@" "$sock" >"$dir/server.log" 2>&1 &
    srv=$!
    server_end=""
    local i rc
    for ((i = 0; i < SERVER_WAIT * 10; i++)); do
        [ -S "$sock" ] && break
        if ! kill -0 "$srv" 2>/dev/null; then
            rc=0; wait "$srv" || rc=$?
            tail -20 "$dir/server.log" >&2
            die "the device server exited (status $rc) before creating its socket $sock (log above: ${dir#"$ROOT/"}/server.log)"
        fi
        sleep 0.1
    done
    [ -S "$sock" ] || die "the device server did not create its socket $sock within ${SERVER_WAIT} s (VPLAT_SERVER_WAIT)"

    echo "== QEMU ($qemu_version, TCG, -smp $SMP, kernel $release, timeout ${timeout}s) with the device at $ADDR ($id)${append:+, $append}"
    # Why each option: docs/virtual-platform.md, "The QEMU command line".
    # The guest's RAM: one shared memfd (flat), or (numa, the card boot) two NUMA nodes of
    # 256 MiB, each its own shared memfd (vfio-user needs every RAM region shareable), node 1
    # without a CPU, and 2 MiB huge pages reserved at boot (the kernel spreads them over both
    # nodes): what tlpx's --numa-node and --iommu-pages 2m need.
    local mem_args
    case "$memory" in
        flat) mem_args=(-machine q35,memory-backend=mem,kernel-irqchip=split -m 512M
                        -object memory-backend-memfd,id=mem,size=512M,share=on) ;;
        numa) mem_args=(-machine q35,kernel-irqchip=split -m 512M
                        -object memory-backend-memfd,id=m0,size=256M,share=on
                        -object memory-backend-memfd,id=m1,size=256M,share=on
                        -numa node,nodeid=0,cpus=0-$((SMP - 1)),memdev=m0 -numa node,nodeid=1,memdev=m1)
              append="hugepagesz=2M hugepages=32${append:+ $append}" ;;
        *) die "boot: memory must be flat or numa, not '$memory'" ;;
    esac
    local qemu_args=(
        "${mem_args[@]}" -accel tcg -cpu max -smp "$SMP"
        -nodefaults -nic none -display none -monitor none -no-reboot
        -serial "file:$in_root/console.log" -serial "file:$in_root/checks.log"
        -kernel "$IN_ROOT/vmlinuz" -initrd "$IN_ROOT/initramfs.cpio"
        -append "console=ttyS0 panic=-1 loglevel=4 no_timer_check intel_iommu=on iommu=pt rdinit=/init vplat_addr=$ADDR vplat_id=$id${append:+ $append}"
        -device intel-iommu,intremap=on,caching-mode=on
        -device "pcie-root-port,id=rp0,chassis=1,slot=0,addr=04.0,x-speed=$PORT_SPEED,x-width=$PORT_WIDTH"
        -device "{\"driver\":\"vfio-user-pci\",\"bus\":\"rp0\",\"addr\":\"00.0\",\"socket\":{\"type\":\"unix\",\"path\":\"$in_root/dev.sock\"}}"
    )
    {
        echo "# in a private mount namespace with $RUN bind-mounted at $ROOTFS$IN_ROOT (scripts/vplat.sh):"
        python3 -c 'import shlex, sys; print(shlex.join(sys.argv[1:]))' chroot "$ROOTFS" qemu-system-x86_64 "${qemu_args[@]}"
    } >"$dir/qemu-cmdline.txt"
    local qemu_started
    qemu_started=$(date +%s.%N)
    qemu_status=0
    # A private mount namespace: $RUN appears in the root at $IN_ROOT for QEMU only, and the bind
    # mount ends with it (nothing to clean up, even after a kill).
    timeout --kill-after=10 "$timeout" unshare -m --propagation private \
        sh -c 'mount --bind "$1" "$2$3" && shift 3 && exec chroot "$@"' sh "$RUN" "$ROOTFS" "$IN_ROOT" \
        "$ROOTFS" qemu-system-x86_64 "${qemu_args[@]}" </dev/null >"$dir/qemu-stdout.log" 2>"$dir/qemu-stderr.log" ||
        qemu_status=$?
    qemu_seconds=$(python3 -c "import time; print(round(time.time() - $qemu_started, 1))")
    if [ -s "$dir/qemu-stderr.log" ]; then
        say "QEMU's stderr (${dir#"$ROOT/"}/qemu-stderr.log):"
        sed 's/^/  | /' "$dir/qemu-stderr.log" >&2
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
    [ "$server_end" = "exit 0" ] || [ "$server_end" = running ] || { say "the device server's log ends:"; tail -20 "$dir/server.log" | sed 's/^/  | /' >&2; }
    tr -d '\r' <"$dir/console.log" >"$dir/console.txt" 2>/dev/null && mv "$dir/console.txt" "$dir/console.log" || true
}

checker_args=(--kernel "$KERNEL" --smp "$SMP" --release "$release" --addr "$ADDR" --tlpx-version "$tlpx_version" --qemu "$qemu_version" --out "$RUN/results.json")
if [ -n "$CARD_BOOT" ]; then
    if [ "$CARD_BOOT" = driver ]; then
        boot "$RUN" "$ID" "$TIMEOUT" "vplat_mode=driver" flat "${server_cmd[@]}"
        checker_args+=(--card-mode driver)
    else
        boot "$RUN" "$ID" "$TIMEOUT" "" numa "${server_cmd[@]}"
    fi
    checker_args+=(--checks "$RUN/checks.log" --console "$RUN/console.log" --id "$ID"
        --qemu-status "$qemu_status" --timeout "$TIMEOUT" --server "$server_end" --server-command "${server_cmd[*]}"
        --qemu-seconds "$qemu_seconds" --link "$LINK" --mps-supported "$MPS_SUPPORTED" --server-log "$RUN/server.log")
fi
if want_boot pcitest; then
    # iomem=relaxed: the fault switch is written through /dev/mem while pci_endpoint_test holds
    # BAR0 (scripts/vplat/pcitest-checks says why); this boot only.
    PT_TIMEOUT=${VPLAT_PCITEST_TIMEOUT:-300}
    boot "$RUN/pcitest" "$PT_ID" "$PT_TIMEOUT" "vplat_mode=pcitest vplat_fault=$FAULT_OFF iomem=relaxed" flat "${pt_server_cmd[@]}"
    checker_args+=(--pcitest-checks "$RUN/pcitest/checks.log" --pcitest-console "$RUN/pcitest/console.log" --pcitest-id "$PT_ID"
        --pcitest-qemu-status "$qemu_status" --pcitest-timeout "$PT_TIMEOUT" --pcitest-server "$server_end"
        --pcitest-server-command "${pt_server_cmd[*]}" --pcitest-qemu-seconds "$qemu_seconds"
        --pcitest-output "$RUN/pcitest/pcitest-output.txt" --pcitest-server-log "$RUN/pcitest/server.log")
    [ -n "${VPLAT_PCITEST_OFFER:-}" ] && checker_args+=(--pcitest-offer "$VPLAT_PCITEST_OFFER")
fi

if want_boot kselftest; then
    # iomem=relaxed: the fault switch through /dev/mem, as the pcitest boot.
    KS_TIMEOUT=${VPLAT_KSELFTEST_TIMEOUT:-600}
    boot "$RUN/kselftest" "$PT_ID" "$KS_TIMEOUT" "vplat_mode=kselftest vplat_fault=$FAULT_OFF iomem=relaxed" flat "${pt_server_cmd[@]}"
    checker_args+=(--kselftest-checks "$RUN/kselftest/checks.log" --kselftest-console "$RUN/kselftest/console.log" --kselftest-id "$PT_ID"
        --kselftest-qemu-status "$qemu_status" --kselftest-timeout "$KS_TIMEOUT" --kselftest-server "$server_end"
        --kselftest-server-command "${pt_server_cmd[*]}" --kselftest-qemu-seconds "$qemu_seconds"
        --kselftest-output "$RUN/kselftest/kselftest-output.txt" --kselftest-server-log "$RUN/kselftest/server.log")
fi

echo "== checks"
total_seconds=$(python3 -c "import time; print(round(time.time() - $started, 1))")
python3 "$CHECKER" "${checker_args[@]}" --total-seconds "$total_seconds"
