#!/usr/bin/env bash
# The vfio backend on a real kernel: boots a Debian kernel in QEMU (q35, intel-iommu with
# interrupt remapping, QEMU's edu device and an ivshmem-plain), binds both to vfio-pci with
# `tlpx vfio bind`, and runs host/crates/tlpx-device/examples/vfio_edu.rs inside the guest
# (BAR mmap, config space, DMA through the IOMMU, MSI via eventfd with a latency run, reset,
# write-combining), then `tlpx list`. See docs/vfio.md.
#
#   scripts/qemu_vfio_test.sh               KVM if /dev/kvm is usable, else TCG
#   ACCEL=tcg scripts/qemu_vfio_test.sh     force TCG
#   QEMU_TIMEOUT=300 LATENCY_SAMPLES=1000   wall-clock limit (s) and latency run length
#
# The guest has two serial ports: ttyS0, its kernel console, goes to build/qemu-vfio/serial.log
# (for people); ttyS1 carries only the test's records (TLPX-CHECK, TLPX-RESULTS, the `tlpx
# list` output ...) to build/qemu-vfio/checks.log, which scripts/qemu/vfio_checks.py parses
# strictly. The kernel prints to its console at any moment (the DMAR fault this test
# provokes, for one), so records on the console could be split by a kernel message and lost.
#
# Exits non-zero on any failed, missing, repeated or malformed check, a malformed line on the
# checks channel, or the timeout. Writes the figures to build/qemu-vfio/results.json.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
OUT=$ROOT/build/qemu-vfio
STAGE=$OUT/initramfs
CARGO=${CARGO:-$(command -v cargo || echo "$HOME/.cargo/bin/cargo")}
LATENCY_SAMPLES=${LATENCY_SAMPLES:-1000}
started=$(date +%s.%N)
mkdir -p "$OUT"
CHECKER=scripts/qemu/vfio_checks.py

for tool in qemu-system-x86_64 busybox cpio depmod modinfo python3; do
    if ! command -v "$tool" >/dev/null; then
        echo "qemu_vfio_test: $tool is missing: apt-get install qemu-system-x86 busybox-static cpio kmod python3 (make setup does)" >&2
        exit 1
    fi
done
BUSYBOX=$(command -v busybox)
if ldd "$BUSYBOX" >/dev/null 2>&1; then
    echo "qemu_vfio_test: $BUSYBOX is dynamically linked; the initramfs needs busybox-static (apt-get install busybox-static)" >&2
    exit 1
fi

# The parser first: it must refuse the mangled lines it exists to refuse (a second).
python3 "$CHECKER" --self-test

echo "== build (tlpx, examples/vfio_edu)"
# The whole workspace with its examples (make test's cargo test built them): `-p` alone would
# resolve the dependencies' features for one package and rebuild half of them.
(cd host && "$CARGO" build --release -q --workspace --bins --examples)

echo "== kernel"
release=$(scripts/debian_kernel.sh)
KROOT=$ROOT/build/kernel/root
MODDIR=$KROOT/lib/modules/$release
echo "kernel $release"

echo "== LitePCIe's driver for the card, built against the guest's kernel headers"
KERNEL_RELEASE=$release scripts/litepcie_driver.sh >"$OUT/litepcie-driver.log" 2>&1 \
    || { echo "qemu_vfio_test: make litepcie-driver failed:" >&2; tail -20 "$OUT/litepcie-driver.log" >&2; exit 1; }
LITEPCIE_KO=$ROOT/build/litepcie-driver/kernels/$release/litepcie.ko
[ -f "$LITEPCIE_KO" ] || { echo "qemu_vfio_test: $LITEPCIE_KO was not built (see $OUT/litepcie-driver.log)" >&2; exit 1; }

echo "== initramfs"
rm -rf "$STAGE"
mkdir -p "$STAGE"/{bin,sbin,usr/bin,usr/sbin,usr/share/misc,proc,sys,dev,run,tmp,lib/modules/$release}
cp "$BUSYBOX" "$STAGE/bin/busybox"
ln -s busybox "$STAGE/bin/sh"
install -m 0755 scripts/qemu/init "$STAGE/init"
cp "$LITEPCIE_KO" "$STAGE/lib/modules/litepcie.ko"

# Modules: vfio-pci and vfio_iommu_type1 with everything they depend on (modinfo's
# `depends`), then modules.dep for the guest's modprobe (depmod on the staged tree).
declare -A seen=()
want=(vfio-pci vfio_iommu_type1)
find_module() { find "$MODDIR/kernel" -name "$1.ko" -o -name "$(echo "$1" | tr _ -).ko" -o -name "$(echo "$1" | tr - _).ko" | head -1; }
while [ ${#want[@]} -gt 0 ]; do
    m=${want[0]}; want=("${want[@]:1}")
    [ -n "${seen[$m]:-}" ] && continue
    seen[$m]=1
    ko=$(find_module "$m")
    if [ -z "$ko" ]; then
        if grep -q "/$m.ko\|/$(echo "$m" | tr _ -).ko" "$MODDIR/modules.builtin"; then continue; fi
        echo "qemu_vfio_test: module $m not found under $MODDIR" >&2; exit 1
    fi
    rel=${ko#"$MODDIR/"}
    mkdir -p "$STAGE/lib/modules/$release/$(dirname "$rel")"
    cp "$ko" "$STAGE/lib/modules/$release/$rel"
    deps=$(modinfo -F depends "$ko" | tr ',' ' ')
    for d in $deps; do want+=("$d"); done
done
cp "$MODDIR"/modules.order "$MODDIR"/modules.builtin "$STAGE/lib/modules/$release/" 2>/dev/null || true
[ -f "$MODDIR/modules.builtin.modinfo" ] && cp "$MODDIR/modules.builtin.modinfo" "$STAGE/lib/modules/$release/"
depmod -b "$STAGE" "$release"
echo "modules: $(cd "$STAGE/lib/modules/$release" && find kernel -name '*.ko' -printf '%f ' )"
echo "modules.dep: $(grep -c . "$STAGE/lib/modules/$release/modules.dep") entries"

# Programs and the shared libraries ldd lists for them.
for bin in host/target/release/tlpx host/target/release/examples/vfio_edu; do
    strip --strip-debug -o "$STAGE/usr/bin/$(basename "$bin")" "$bin"
    ldd "$bin" | awk '/=> \// {print $3} /^\t\/[^ ]+ \(/ {print $1}' | while read -r lib; do
        mkdir -p "$STAGE$(dirname "$lib")"
        [ -f "$STAGE$lib" ] || cp -L "$lib" "$STAGE$lib"
    done
done
for ids in /usr/share/misc/pci.ids /usr/share/hwdata/pci.ids; do
    if [ -f "$ids" ]; then cp "$ids" "$STAGE/usr/share/misc/pci.ids"; break; fi
done
(cd "$STAGE" && find . | cpio -o -H newc --quiet) > "$OUT/initramfs.cpio"
echo "initramfs $(du -h "$OUT/initramfs.cpio" | cut -f1)"

# Accelerator: KVM when /dev/kvm is usable, else TCG. Chosen here rather than with QEMU's
# accel=kvm:tcg fallback because the CPU model differs (`-cpu host,-arch-capabilities` with
# KVM: under nested KVM the outer hypervisor may refuse QEMU's write of
# IA32_ARCH_CAPABILITIES, MSR 0x10a, and QEMU aborts; `-cpu max` with TCG), and because a
# /dev/kvm that exists is not always one that boots Linux (nested KVM on some cloud VMs
# hangs in the guest's early boot): the kernel must print its banner within
# KVM_PROBE_SECONDS, otherwise the run is repeated with TCG and the reason recorded.
ACCEL=${ACCEL:-}
KVM_PROBE_SECONDS=${KVM_PROBE_SECONDS:-10}
if [ -z "$ACCEL" ]; then
    if [ -r /dev/kvm ] && [ -w /dev/kvm ]; then ACCEL=kvm; else ACCEL=tcg; fi
fi
case "$ACCEL" in
    kvm|tcg) ;;
    *) echo "qemu_vfio_test: ACCEL must be kvm or tcg, not '$ACCEL'" >&2; exit 2 ;;
esac
SERIAL=$OUT/serial.log
CHECKS=$OUT/checks.log
fallback_reason=""

# run_qemu ACCEL TIMEOUT PROBE: boots the guest; sets $status (124: timed out, 125: KVM probe failed).
run_qemu() {
    local accel=$1 limit=$2 probe=$3 cpu
    if [ "$accel" = kvm ]; then cpu=host,-arch-capabilities; else cpu=max; fi
    local args=(
        -machine "q35,accel=$accel,kernel-irqchip=split" -cpu "$cpu" -smp 2 -m 1024
        -nodefaults -display none -monitor none -nic none -no-reboot
        -serial stdio -chardev "file,id=checks,path=${CHECKS//,/,,}" -serial chardev:checks
        -device intel-iommu,intremap=on
        -device edu,addr=05.0
        -object memory-backend-ram,id=shm,size=1M,share=on -device ivshmem-plain,memdev=shm,addr=06.0
        -device pcie-root-port,id=rp1,chassis=1,slot=1,addr=07.0,x-speed=8,x-width=4 -device virtio-rng-pci,bus=rp1
        -kernel "$KROOT/boot/vmlinuz-$release" -initrd "$OUT/initramfs.cpio"
        -append "console=ttyS0 earlyprintk=serial,ttyS0 intel_iommu=on panic=-1 loglevel=4 rdinit=/init vfio_edu_samples=$LATENCY_SAMPLES"
    )
    echo "== qemu (accel $accel, timeout ${limit}s)"
    echo "qemu-system-x86_64 ${args[*]}" > "$OUT/qemu-cmdline.txt"
    : > "$SERIAL"
    : > "$CHECKS"
    timeout --kill-after=10 "$limit" qemu-system-x86_64 "${args[@]}" </dev/null >"$SERIAL" 2>"$OUT/qemu-stderr.log" &
    local pid=$! waited=0
    status=0
    while kill -0 "$pid" 2>/dev/null; do
        if [ "$probe" -gt 0 ] && [ "$waited" -ge "$probe" ] && ! grep -q 'Linux version' "$SERIAL"; then
            kill "$pid" 2>/dev/null || true
            wait "$pid" 2>/dev/null || true
            status=125
            return
        fi
        sleep 1
        waited=$((waited + 1))
    done
    wait "$pid" || status=$?
}

qemu_started=$(date +%s.%N)
if [ "$ACCEL" = kvm ]; then
    run_qemu kvm "${QEMU_TIMEOUT:-240}" "$KVM_PROBE_SECONDS"
    if [ "$status" = 125 ] || grep -q 'failed to set MSR\|Could not access KVM' "$OUT/qemu-stderr.log"; then
        fallback_reason="under KVM the guest kernel printed nothing within ${KVM_PROBE_SECONDS}s or QEMU refused KVM ($(head -c 200 "$OUT/qemu-stderr.log" | tr '\n' ' ')): /dev/kvm exists but nested KVM on this machine does not boot the guest"
        echo "qemu_vfio_test: $fallback_reason; running under TCG instead"
        ACCEL=tcg
        qemu_started=$(date +%s.%N)
    fi
fi
if [ "$ACCEL" = tcg ]; then
    run_qemu tcg "${QEMU_TIMEOUT:-900}" 0
fi
QEMU_TIMEOUT=${QEMU_TIMEOUT:-$([ "$ACCEL" = tcg ] && echo 900 || echo 240)}
qemu_seconds=$(python3 -c "import time; print(round(time.time() - $qemu_started, 1))")
tr -d '\r' <"$SERIAL" >"$SERIAL.txt" && mv "$SERIAL.txt" "$SERIAL"

total_seconds=$(python3 -c "import time; print(round(time.time() - $started, 1))")
python3 "$CHECKER" --checks "$CHECKS" --serial "$SERIAL" --out "$OUT/results.json" --qemu-status "$status" \
    --timeout "$QEMU_TIMEOUT" --accel "$ACCEL" --release "$release" --qemu-seconds "$qemu_seconds" \
    --total-seconds "$total_seconds" --samples "$LATENCY_SAMPLES" --fallback "$fallback_reason"
