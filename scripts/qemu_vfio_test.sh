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
# Exits non-zero on any failed check, a missing check, or the timeout. Writes the serial log
# to build/qemu-vfio/serial.log and the figures to build/qemu-vfio/results.json.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
OUT=$ROOT/build/qemu-vfio
STAGE=$OUT/initramfs
CARGO=${CARGO:-$(command -v cargo || echo "$HOME/.cargo/bin/cargo")}
LATENCY_SAMPLES=${LATENCY_SAMPLES:-1000}
started=$(date +%s.%N)
mkdir -p "$OUT"

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

echo "== build (tlpx, examples/vfio_edu)"
(cd host && "$CARGO" build --release -q -p tlpx --bin tlpx && "$CARGO" build --release -q -p tlpx-device --example vfio_edu)

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
fallback_reason=""

# run_qemu ACCEL TIMEOUT PROBE: boots the guest; sets $status (124: timed out, 125: KVM probe failed).
run_qemu() {
    local accel=$1 limit=$2 probe=$3 cpu
    if [ "$accel" = kvm ]; then cpu=host,-arch-capabilities; else cpu=max; fi
    local args=(
        -machine "q35,accel=$accel,kernel-irqchip=split" -cpu "$cpu" -smp 2 -m 1024
        -nodefaults -display none -monitor none -serial stdio -nic none -no-reboot
        -device intel-iommu,intremap=on
        -device edu,addr=05.0
        -object memory-backend-ram,id=shm,size=1M,share=on -device ivshmem-plain,memdev=shm,addr=06.0
        -device pcie-root-port,id=rp1,chassis=1,slot=1,addr=07.0 -device virtio-rng-pci,bus=rp1
        -kernel "$KROOT/boot/vmlinuz-$release" -initrd "$OUT/initramfs.cpio"
        -append "console=ttyS0 earlyprintk=serial,ttyS0 intel_iommu=on panic=-1 loglevel=4 rdinit=/init vfio_edu_samples=$LATENCY_SAMPLES"
    )
    echo "== qemu (accel $accel, timeout ${limit}s)"
    echo "qemu-system-x86_64 ${args[*]}" > "$OUT/qemu-cmdline.txt"
    : > "$SERIAL"
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

grep -E '^(TLPX-|== )' "$SERIAL" | grep -v '^TLPX-RESULTS' || true
sed -n '/^TLPX-LIST-BEGIN/,/^TLPX-LIST-END/p' "$SERIAL" | grep -v '^TLPX-LIST' || true

total_seconds=$(python3 -c "import time; print(round(time.time() - $started, 1))")
python3 - "$SERIAL" "$OUT/results.json" "$status" "$QEMU_TIMEOUT" "$ACCEL" "$release" "$qemu_seconds" "$total_seconds" "$LATENCY_SAMPLES" "$fallback_reason" <<'EOF'
import json, sys, subprocess
serial, out, status, timeout, accel_asked, release, qemu_s, total_s, samples, fallback = sys.argv[1:]
lines = open(serial, errors="replace").read().splitlines()
checks, results, accel, listing, in_list, done = [], {}, None, [], False, False
for l in lines:
    if l.startswith("TLPX-CHECK "):
        parts = l.split(" ", 3)
        checks.append({"name": parts[1], "pass": parts[2] == "PASS", "detail": parts[3] if len(parts) > 3 else ""})
    elif l.startswith("TLPX-RESULTS "):
        results = json.loads(l[len("TLPX-RESULTS "):])
    elif l.startswith("TLPX-ACCEL "):
        accel = l.split()[1]
    elif l == "TLPX-LIST-BEGIN":
        in_list = True
    elif l == "TLPX-LIST-END":
        in_list = False
    elif in_list:
        listing.append(l)
    elif l == "TLPX-DONE":
        done = True
problems = []
status = int(status)
if status == 124 or status == 137:
    problems.append(f"QEMU did not finish within {timeout} s (wall clock): see {serial}")
elif status != 0:
    problems.append(f"QEMU exited with status {status}: see {serial} and build/qemu-vfio/qemu-stderr.log")
if not done:
    problems.append("the guest never printed TLPX-DONE")
required = ["modprobe_vfio-pci", "find_edu", "bind_edu", "bind_ivshmem", "wc_refused_on_non_prefetchable_bar", "open",
            "bar0_mmap_uncached", "ident", "liveness", "config_space", "bar_block_16_bytes", "bar_path_syscall", "dma_roundtrip",
            "dma_unmapped_iova_blocked", "msi", "msi_latency", "isr_stage", "reset", "bad_input_refused", "wc_mapping",
            "wc_writes_land", "cli_refuses_non_tlpx_info", "cli_refuses_non_tlpx_selftest", "cli_refuses_non_tlpx_irq", "vfio_edu_exit", "dmar_fault_logged", "unbind_edu", "unbind_ivshmem", "tlpx_list", "litepcie_module_loads", "litepcie_absent_node_refused", "litepcie_module_unloads"]
names = {c["name"] for c in checks}
for r in required:
    if r not in names:
        problems.append(f"check {r} did not run")
for c in checks:
    if not c["pass"]:
        problems.append(f"check {c['name']} failed: {c['detail']}")
lat = results.get("msi_latency")
qemu_version = subprocess.run(["qemu-system-x86_64", "--version"], capture_output=True, text=True).stdout.splitlines()[0]
doc = {
    "what": "tlpx vfio backend in a QEMU guest (q35, intel-iommu intremap, edu, ivshmem-plain); scripts/qemu_vfio_test.sh",
    "qemu": qemu_version, "accel_used": accel_asked, "kvm_fallback_reason": fallback or None, "accel": accel, "guest_kernel": release,
    "qemu_seconds": float(qemu_s), "total_seconds": float(total_s), "latency_samples_requested": int(samples),
    "pass": not problems, "problems": problems, "checks": checks,
    "msi_latency": lat, "guest": {k: v for k, v in results.items() if k not in ("checks", "msi_latency")},
    "tlpx_list": listing,
}
json.dump(doc, open(out, "w"), indent=2)
print()
n_pass = sum(c["pass"] for c in checks)
print(f"qemu_vfio_test: {n_pass} of {len(checks)} checks passed; guest accel {accel}, QEMU ran {qemu_s} s, whole test {total_s} s")
if lat:
    us = lambda ns: f"{ns / 1000:.1f} us"
    print(f"MSI latency (QEMU guest, {accel}; edu raise write -> vfio eventfd wake-up, CLOCK_MONOTONIC): "
          f"{lat['samples']} samples, min {us(lat['min_ns'])}, p50 {us(lat['p50_ns'])}, p99 {us(lat['p99_ns'])}, max {us(lat['max_ns'])}")
isr = results.get("isr_stage")
if isr and isr.get("matched"):
    us = lambda ns: f"{ns / 1000:.1f} us"
    a, b = isr["write_to_handler_entry"], isr["handler_entry_to_wake_up"]
    print(f"  split at the kernel's irq_handler_entry (irqs {isr['irqs']}, {isr['matched']} of {isr['raises']} raises): "
          f"write -> handler entry p50 {us(a['p50_ns'])} p99 {us(a['p99_ns'])}; handler entry -> thread awake p50 {us(b['p50_ns'])} p99 {us(b['p99_ns'])}")
print(f"results: {out}")
for p in problems:
    print(f"FAIL: {p}")
sys.exit(1 if problems else 0)
EOF
