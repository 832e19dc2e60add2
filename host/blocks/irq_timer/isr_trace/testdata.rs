//! Inputs the tests of several files share: the recorded format file, raw records and perf
//! records built byte by byte as the kernel lays them out, a /proc/interrupts listing, and
//! clock pairs from a known clock.

#![allow(dead_code)]

use super::clock::{diff, ClockCorrelation, ClockFit};
use super::format::{IrqEntryLayout, TracepointFormat};
use super::records::{PERF_RECORD_LOST, PERF_RECORD_SAMPLE};
use super::trace::IrqEntry;

/// The format file of this machine's kernel (6.18.44), as tracefs gives it: recorded with
/// `unshare -m` + `mount -t tracefs nodev /sys/kernel/tracing` +
/// `cat events/irq/irq_handler_entry/format`, so the parser is tested on the kernel's own text.
pub(super) const FORMAT_6_18: &str = include_str!("../tests/fixtures/irq_handler_entry.format");

/// The data area (one page) of a perf ring the kernel wrote: irq:irq_handler_entry on CPU 1
/// of this machine (6.18.44, virtio disk interrupts) with the trace's attributes, the first
/// records freed as a reader frees them so that the live ones, [tail, head), run past the end
/// of the ring. Recorded by blocks/irq_timer/tests/fixtures/record_ring.py.
pub(super) const RING_CPU1: &[u8] = include_bytes!("../tests/fixtures/ring_cpu1_tail3072_head4864.bin");
pub(super) const RING_CPU1_TAIL: u64 = 3072;
pub(super) const RING_CPU1_HEAD: u64 = 4864;

/// A raw record as the kernel writes it for FORMAT_6_18.
pub(super) fn raw_entry(id: u16, irq: i32, name: &str) -> Vec<u8> {
    let mut r = Vec::new();
    r.extend_from_slice(&id.to_ne_bytes());
    r.extend_from_slice(&[0x01, 0x02]); // flags, preempt count
    r.extend_from_slice(&4321i32.to_ne_bytes()); // pid
    r.extend_from_slice(&irq.to_ne_bytes());
    let loc = ((name.len() as u32 + 1) << 16) | 16;
    r.extend_from_slice(&loc.to_ne_bytes());
    r.extend_from_slice(name.as_bytes());
    r.push(0);
    r
}

/// A PERF_RECORD_SAMPLE of a TIME | CPU | RAW event, padded as the kernel pads it.
pub(super) fn sample_record(time_ns: u64, cpu: u32, raw: &[u8]) -> Vec<u8> {
    let raw_size = (raw.len() + 4).div_ceil(8) * 8 - 4;
    let size = 28 + raw_size;
    let mut r = Vec::new();
    r.extend_from_slice(&PERF_RECORD_SAMPLE.to_ne_bytes());
    r.extend_from_slice(&0u16.to_ne_bytes());
    r.extend_from_slice(&(size as u16).to_ne_bytes());
    r.extend_from_slice(&time_ns.to_ne_bytes());
    r.extend_from_slice(&cpu.to_ne_bytes());
    r.extend_from_slice(&0u32.to_ne_bytes());
    r.extend_from_slice(&(raw_size as u32).to_ne_bytes());
    r.extend_from_slice(raw);
    r.resize(size, 0);
    r
}

pub(super) fn lost_record(lost: u64) -> Vec<u8> {
    let mut r = Vec::new();
    r.extend_from_slice(&PERF_RECORD_LOST.to_ne_bytes());
    r.extend_from_slice(&0u16.to_ne_bytes());
    r.extend_from_slice(&24u16.to_ne_bytes());
    r.extend_from_slice(&7u64.to_ne_bytes()); // id
    r.extend_from_slice(&lost.to_ne_bytes());
    r
}

/// Writes `bytes` into `ring` at free-running position `pos`, wrapping.
pub(super) fn put(ring: &mut [u8], pos: u64, bytes: &[u8]) {
    let n = ring.len() as u64;
    for (i, b) in bytes.iter().enumerate() {
        ring[((pos + i as u64) % n) as usize] = *b;
    }
}

pub(super) fn layout_6_18() -> IrqEntryLayout {
    IrqEntryLayout::from_format(&TracepointFormat::parse(FORMAT_6_18).expect("format")).expect("layout")
}

/// /proc/interrupts of a 4-CPU x86 host with the card on vfio (MSI) at 01:00.0, another
/// card on vfio (MSI-X, 3 vectors) at 03:00.0, LitePCIe's driver on an old kernel
/// (IR-PCI-MSI, hwirq encodes 02:00.0) and a new one (chip names 0000:04:00.0).
pub(super) const PROC_INTERRUPTS: &str = "           CPU0       CPU1       CPU2       CPU3
   0:         36          0          0          0   IO-APIC   2-edge      timer
   8:          0          0          0          0   IO-APIC   8-edge      rtc0
   9:          0          4          0          0   IO-APIC   9-fasteoi   acpi
 120:          0          0          0          0  IR-PCI-MSI 458752-edge      PCIe PME, pciehp
 121:          0         12          0          0  IR-PCI-MSI 524288-edge      vfio-msi[0](0000:01:00.0)
 122:        400          0          0          0  IR-PCI-MSI 1048576-edge      litepcie
 123:          0          0       1003          0  IR-PCI-MSIX-0000:03:00.0    0-edge      vfio-msix[0](0000:03:00.0)
 124:          0          0          0         17  IR-PCI-MSIX-0000:03:00.0    1-edge      vfio-msix[1](0000:03:00.0)
 125:          0          0          0          2  IR-PCI-MSIX-0000:03:00.0    2-edge      vfio-msix[2](0000:03:00.0)
 126:          9          0          0          0  PCI-MSI-0000:04:00.0    0-edge      litepcie
 127:          0          0          0      88123  IR-PCI-MSIX-0000:05:00.0    1-edge      nvme0q1
 NMI:          0          0          0          0   Non-maskable interrupts
 LOC:   12345678   12345678   12345678   12345678   Local timer interrupts
 ERR:          0
";

// Clock correlation: synthetic pairs from a known clock --------------------------------

/// A small deterministic generator (numbers in [0, 1)).
pub(super) struct Lcg(pub(super) u64);
impl Lcg {
    pub(super) fn next(&mut self) -> f64 {
        self.0 = self.0.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        (self.0 >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// The card's continuous time at host time t: c0 + rate·dt + ½·accel·dt², dt from `t_start`.
#[derive(Clone, Copy)]
pub(super) struct TrueClock {
    pub(super) t_start: u64,
    pub(super) c0: f64,
    pub(super) rate: f64,
    pub(super) accel: f64,
}
impl TrueClock {
    pub(super) fn at(&self, t: u64) -> f64 {
        let dt = diff(t, self.t_start);
        self.c0 + self.rate * dt + 0.5 * self.accel * dt * dt
    }
}

/// `n` pairs from `start`, one every `spacing` ns (or right after the previous one when
/// that took longer), round trips `rt` (+ up to 30 %), every `outlier_every`-th one 40 µs
/// long; the card latches at a random point of each.
pub(super) fn pairs(
    clock: TrueClock,
    start: u64,
    n: usize,
    spacing: u64,
    rt: u64,
    outlier_every: usize,
    rng: &mut Lcg,
) -> Vec<(u64, u64, u64)> {
    let mut prev_b = 0;
    (0..n)
        .map(|i| {
            let a = (start + i as u64 * spacing + (rng.next() * 50.0) as u64).max(prev_b + 20);
            let trip = if outlier_every > 0 && i % outlier_every == outlier_every - 1 {
                40_000
            } else {
                rt + (rng.next() * 0.3 * rt as f64) as u64
            };
            let latch = a + (rng.next() * trip as f64) as u64;
            prev_b = a + trip;
            (a, clock.at(latch).floor() as u64, a + trip)
        })
        .collect()
}

/// Largest error of the fit against the true clock at `samples` points from `from` to `to`.
pub(super) fn worst_error(fit: &ClockFit, clock: TrueClock, from: u64, to: u64) -> f64 {
    (0..=100u64).map(|k| from + (to - from) / 100 * k).map(|t| (fit.cycles_since(t, 0) - clock.at(t)).abs()).fold(0.0, f64::max)
}

pub(super) const BOOT: u64 = 3_600_000_000_000; // an hour of uptime
pub(super) const NOMINAL: u32 = 125_000_000;

// The ISR stage -------------------------------------------------------------------------

/// A fit of a 125 MHz card whose cycle 0 is host time 0, from 100 pairs over host times
/// 1..3 ms (card cycles 125 000..375 000), round trips ~40 ns.
pub(super) fn exact_fit() -> ClockFit {
    let clock = TrueClock { t_start: 0, c0: 0.0, rate: 0.125, accel: 0.0 };
    ClockCorrelation::fit(&pairs(clock, 1_000_000, 100, 20_000, 40, 0, &mut Lcg(9))).expect("fit")
}

/// A handler entry at the host time the fit puts at card cycle `t0` + `cycles`.
pub(super) fn entry_at(fit: &ClockFit, t0: u64, cycles: f64) -> IrqEntry {
    let at_t0 = fit.cycles_to_host_ns(t0).expect("in range") as f64;
    // cycles_to_host_ns gives the middle of cycle t0; start from its beginning.
    let host_ns = (at_t0 + (cycles - 0.5) / fit.cycles_per_ns).round() as u64;
    IrqEntry { irq: 45, cpu: 1, host_ns }
}
