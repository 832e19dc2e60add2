//! Exact traffic counters and DMA fault injection of the root complex, with the card's
//! LitePCIe DMA in loopback as the requester (the traffic generator's own tests use these
//! counters to check its hardware counters against what the root complex saw).
//!
//!   src ──MRd / CplD (faults: UR, CA, EP, none)──► DMA reader ─► DMA writer ──MWr──► dst
//!                     │                                                  │
//!                     └────────── stats().traffic counts each TLP ───────┘

#![allow(clippy::unwrap_used)]

use crate::common;

use common::litepcie::{
    IRQ_DISABLE, LOOPBACK_ENABLE, MSI_ENABLE, READER_ENABLE, READER_LOOP_PROG_N, READER_RESET, READER_VALUE, READER_WE, WRITER_ENABLE,
    WRITER_LOOP_PROG_N, WRITER_RESET, WRITER_VALUE, WRITER_WE,
};

use std::time::Duration;

use common::{Sim, MAGIC};
use tlpx_device::backends::sim::{DmaFaults, SimDevice, TrafficStats};
use tlpx_device::{Device, Width};

/// The 16 register writes that start a loopback of `len` bytes; the writer raises an MSI.
fn start_loopback(dev: &mut SimDevice, src: u64, dst: u64, len: u32) {
    let writes = [
        (WRITER_ENABLE, 0),
        (READER_ENABLE, 0),
        (WRITER_RESET, 1),
        (READER_RESET, 1),
        (WRITER_LOOP_PROG_N, 0),
        (READER_LOOP_PROG_N, 0),
        (WRITER_VALUE, dst as u32),
        (WRITER_VALUE + 4, len),
        (WRITER_WE, (dst >> 32) as u32),
        (READER_VALUE, src as u32),
        (READER_VALUE + 4, len | IRQ_DISABLE),
        (READER_WE, (src >> 32) as u32),
        (LOOPBACK_ENABLE, 1),
        (MSI_ENABLE, 1),
        (WRITER_ENABLE, 1),
        (READER_ENABLE, 1),
    ];
    for (off, v) in writes {
        dev.bar_write(0, off, Width::W32, u64::from(v)).unwrap();
    }
}

fn stop_dma(dev: &mut SimDevice) {
    for off in [READER_ENABLE, WRITER_ENABLE] {
        dev.bar_write(0, off, Width::W32, 0).unwrap();
    }
    for off in [READER_RESET, WRITER_RESET] {
        dev.bar_write(0, off, Width::W32, 1).unwrap();
    }
}

#[test]
fn a_dma_loopback_is_counted_tlp_by_tlp() {
    let sim = Sim::start(&[]);
    let mut dev = sim.connect();
    let len = 8192u32;
    let src = dev.alloc_dma(len as usize).unwrap();
    let dst = dev.alloc_dma(len as usize).unwrap();
    src.write_bytes(0, &vec![0x3C; len as usize]).unwrap();
    let before = dev.traffic().unwrap();
    start_loopback(&mut dev, src.bus_addr, dst.bus_addr, len);
    dev.wait_interrupt(u32::MAX, Duration::from_millis(2)).unwrap().expect("writer MSI");
    dev.idle(Duration::from_micros(5)).unwrap();
    let t = dev.traffic().unwrap().since(&before);
    let n = u64::from(len);
    // Reads: every byte asked for once, 32-bit addresses, no attributes.
    assert_eq!((t.card_reads.bytes, t.card_reads.dw_bytes), (n, n), "{t:?}");
    assert!(t.card_reads.tlps >= n / 512, "{t:?}");
    assert_eq!((t.card_reads.header_3dw, t.card_reads.header_4dw), (t.card_reads.tlps, 0));
    assert_eq!((t.card_reads.relaxed_ordering, t.card_reads.no_snoop, t.card_reads.poisoned), (0, 0, 0));
    // Completions: exactly the bytes asked for, in CplDs of at most MPS (256).
    assert_eq!((t.host_completions.data_bytes, t.host_completions.payload_bytes), (n, n));
    assert!(t.host_completions.cpld >= n / 256);
    assert_eq!((t.host_completions.cpl, t.host_completions.ur, t.host_completions.poisoned), (0, 0, 0));
    // Writes: every byte once, and one MSI after them.
    assert_eq!((t.card_writes.bytes, t.card_writes.dw_bytes), (n, n));
    assert!(t.card_writes.tlps >= n / 256);
    assert_eq!(t.card_msis, 1);
    // The 16 register writes that started it, 4 bytes each.
    assert_eq!((t.mmio_writes.tlps, t.mmio_writes.bytes), (16, 64));
    assert_eq!(t.faults, Default::default());
    // The per-type direction counters agree.
    let s = dev.stats().unwrap();
    assert_eq!(s.card_to_host.by_type.get("MRd32").copied().unwrap_or(0), t.card_reads.tlps);
    assert_eq!(s.host_to_card.by_type.get("CplD").copied().unwrap_or(0), t.host_completions.cpld);
    assert_eq!(s.dma_read_bytes, n);
    assert_eq!(s.dma_write_bytes, n);
}

/// Runs a loopback of 16 KiB with `faults` set at run time; returns the traffic it caused.
fn loopback_with_faults(dev: &mut SimDevice, faults: DmaFaults) -> TrafficStats {
    let len = 16384u32;
    let src = dev.alloc_dma(len as usize).unwrap();
    let dst = dev.alloc_dma(len as usize).unwrap();
    dev.set_dma_faults(faults).unwrap();
    assert_eq!(dev.stats().unwrap().dma_faults, faults);
    let before = dev.traffic().unwrap();
    start_loopback(dev, src.bus_addr, dst.bus_addr, len);
    // With faults the DMA may never finish: let it run for a fixed card time.
    dev.idle(Duration::from_micros(100)).unwrap();
    let t = dev.traffic().unwrap().since(&before);
    stop_dma(dev);
    dev.set_dma_faults(DmaFaults::default()).unwrap();
    dev.idle(Duration::from_micros(20)).unwrap();
    dev.free_dma(src).unwrap();
    dev.free_dma(dst).unwrap();
    // The card still answers.
    assert_eq!(dev.bar_read(0, 0, Width::W32).unwrap(), u64::from(MAGIC));
    t
}

#[test]
fn ur_and_ca_every_nth_read_are_exact() {
    let sim = Sim::start(&[]);
    let mut dev = sim.connect();
    let t = loopback_with_faults(&mut dev, DmaFaults { ur_every: 2, ..Default::default() });
    assert!(t.card_reads.tlps >= 2, "{t:?}");
    assert_eq!(t.faults.ur, t.card_reads.tlps / 2, "{t:?}");
    assert_eq!(t.host_completions.ur, t.faults.ur, "one UR Cpl per faulted read");
    assert_eq!((t.faults.ca, t.faults.poisoned, t.faults.dropped), (0, 0, 0));
    // LitePCIe's DMA reader does not recover from error completions (the generator does):
    // a fresh card for the next case.
    drop(dev);
    let sim = Sim::start(&[]);
    let mut dev = sim.connect();
    let t = loopback_with_faults(&mut dev, DmaFaults { ca_every: 3, ..Default::default() });
    assert!(t.card_reads.tlps >= 3, "{t:?}");
    assert_eq!(t.faults.ca, t.card_reads.tlps / 3, "{t:?}");
    assert_eq!((t.host_completions.ca, t.host_completions.cpl), (t.faults.ca, t.faults.ca));
    assert_eq!(dev.stats().unwrap().dma_read_faults, 0, "injected faults are not IOMMU faults");
}

#[test]
fn poisoned_completions_still_carry_their_data() {
    let sim = Sim::start(&[]);
    let mut dev = sim.connect();
    let t = loopback_with_faults(&mut dev, DmaFaults { poison_every: 1, ..Default::default() });
    assert!(t.card_reads.tlps >= 1, "{t:?}");
    assert_eq!(t.faults.poisoned, t.card_reads.tlps);
    assert_eq!(t.host_completions.poisoned, t.host_completions.cpld, "every CplD of every read is poisoned");
    assert_eq!(t.host_completions.data_bytes, t.card_reads.bytes, "data is still sent");
}

#[test]
fn dropped_reads_get_no_completion() {
    let sim = Sim::start(&[]);
    let mut dev = sim.connect();
    let t = loopback_with_faults(&mut dev, DmaFaults { drop_every: 1, ..Default::default() });
    assert!(t.card_reads.tlps >= 1, "{t:?}");
    assert_eq!(t.faults.dropped, t.card_reads.tlps);
    assert_eq!((t.host_completions.cpl, t.host_completions.cpld), (0, 0));
    assert_eq!(t.card_writes.tlps, 0, "nothing to loop back");
}

#[test]
fn fault_flags_set_the_faults_at_start() {
    let sim = Sim::start(&["--fault-ca-every", "4", "--fault-drop-every", "0x10"]);
    let mut dev = sim.connect();
    let want = DmaFaults { ca_every: 4, drop_every: 16, ..Default::default() };
    assert_eq!(dev.stats().unwrap().dma_faults, want);
    let src = dev.alloc_dma(16384).unwrap();
    let dst = dev.alloc_dma(16384).unwrap();
    start_loopback(&mut dev, src.bus_addr, dst.bus_addr, 16384);
    dev.idle(Duration::from_micros(100)).unwrap();
    let t = dev.stats().unwrap().traffic;
    assert!(t.card_reads.tlps >= 4, "{t:?}");
    assert_eq!(t.faults.ca, t.card_reads.tlps / 4);
    assert_eq!(t.faults.dropped, 0, "every 16th read is also a 4th: CA wins");
}

#[test]
fn bad_fault_flags_fail_clearly() {
    let card = common::card_library(64);
    let (code, err) = common::run_failing(&["--card", card.to_str().unwrap(), "--fault-ur-every=-1"]);
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains("--fault-ur-every") && err.contains("-1"), "{err}");
    let (code, err) = common::run_failing(&["--card", card.to_str().unwrap(), "--fault-poison-every", "often"]);
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains("often"), "{err}");
}
