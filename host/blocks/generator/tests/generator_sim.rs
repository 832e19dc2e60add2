//! The traffic generator and the PIO window, driven through the real tlpx-sim and checked
//! against what the simulator's root complex saw.
//!
//!   generator::run ──CSRs──► tlpx-sim ──► Verilated card ──TLPs──► root complex counters
//!
//! The card's own counters (requests, bytes, completions, errors) must equal the root
//! complex's exactly; data must survive both directions; injected faults must be counted
//! and the engine must recover.

use std::time::Duration;

use tlpx_device::backends::sim::SimDevice;
use tlpx_device::card::Card;
use tlpx_device::generator::{self, AddressPattern, DataPattern, GenConfig, LinkLimits, Operation, ValidGenConfig};
use tlpx_device::pio;
use tlpx_sim_protocol::DmaFaults;
use tlpx_testkit::SimProcess as Sim;

fn card(sim: &Sim) -> Card {
    Card::open(Box::new(SimDevice::connect(sim.socket()).expect("connect"))).expect("tlpx card")
}

fn control(sim: &Sim) -> SimDevice {
    SimDevice::connect(sim.socket()).expect("connect")
}

const TIMEOUT: Duration = Duration::from_millis(50);

/// The run as the driver takes it: validated against the largest link (the driver does not
/// know the link; the CLI validates against the one libpci reports).
fn valid(cfg: &GenConfig, buffer: &tlpx_device::DmaBuffer) -> ValidGenConfig {
    cfg.validate(LinkLimits::LARGEST, buffer.len as u64).expect("a valid generator configuration")
}

fn config(op: Operation, size: u32, count: u64) -> GenConfig {
    let mut c = GenConfig::new(op, size, count);
    c.window = 1 << 16;
    c.data_pattern = DataPattern::Prbs;
    c.seed = 0x1234;
    c
}

#[test]
fn generator_counts_equal_what_the_root_complex_saw() {
    let sim = Sim::start(&["--data-width", "128", "--gen", "2", "--lanes", "4"]);
    let mut card = card(&sim);
    let mut control = control(&sim);
    let buffer = card.device().alloc_dma(1 << 16).expect("buffer");
    generator::fill_pattern(&buffer, DataPattern::Prbs, 0x1234).expect("fill");
    for (op, addr64, ro, ns) in
        [(Operation::Write, false, false, false), (Operation::Read, false, false, false), (Operation::ReadWrite, true, true, true)]
    {
        let mut cfg = config(op, 1000, 24);
        cfg.addr64 = addr64;
        cfg.relaxed_ordering = ro;
        cfg.no_snoop = ns;
        let before = control.stats().expect("stats").traffic;
        let r = generator::run(&mut card, &buffer, &valid(&cfg, &buffer), TIMEOUT).expect("run");
        let seen = control.stats().expect("stats").traffic.since(&before);
        assert_eq!(r.ended_by, "count", "{op:?}");
        assert_eq!(r.write_requests, seen.card_writes.tlps, "{op:?} MWr TLPs");
        assert_eq!(r.write_bytes, seen.card_writes.bytes, "{op:?} MWr bytes");
        // A run with writes ends with the flushing 1-DW read, which the card does not count
        // as a generator read.
        let flush = u64::from(op != Operation::Read);
        assert_eq!(r.read_requests + flush, seen.card_reads.tlps, "{op:?} MRd TLPs");
        assert_eq!(r.read_bytes + 4 * flush, seen.card_reads.bytes, "{op:?} MRd bytes");
        assert_eq!(r.completions, seen.host_completions.cpl + seen.host_completions.cpld, "{op:?} completions (the flush's included)");
        let expect_bytes = 24 * 1000;
        if op != Operation::Read {
            assert_eq!(r.write_bytes, expect_bytes);
        }
        if op != Operation::Write {
            assert_eq!(r.read_bytes, expect_bytes);
            assert_eq!(r.errors.data_mismatches, 0);
            assert_eq!(r.latency.count, r.read_requests);
        }
        let all = seen.card_reads.tlps + seen.card_writes.tlps;
        assert_eq!(seen.card_reads.header_4dw + seen.card_writes.header_4dw, if addr64 { all } else { 0 });
        // The flushing read never carries Relaxed Ordering (its completion must not pass the
        // writes) nor No Snoop.
        assert_eq!(seen.card_reads.relaxed_ordering + seen.card_writes.relaxed_ordering, if ro { all - flush } else { 0 });
        assert_eq!(seen.card_reads.no_snoop + seen.card_writes.no_snoop, if ns { all - flush } else { 0 });
    }
    // What the card wrote is the pattern, checked by the host.
    assert_eq!(generator::pattern_mismatches(&buffer, DataPattern::Prbs, 0x1234).expect("check"), 0);
    card.device().free_dma(buffer).expect("free");
}

#[test]
fn corrupted_host_data_is_counted_by_the_card() {
    let sim = Sim::start(&[]);
    let mut card = card(&sim);
    let buffer = card.device().alloc_dma(1 << 16).expect("buffer");
    generator::fill_pattern(&buffer, DataPattern::Counter, 1).expect("fill");
    let mut cfg = config(Operation::Read, 4096, 4);
    cfg.data_pattern = DataPattern::Counter;
    cfg.seed = 1;
    for offset in [0usize, 4096 + 40, 3 * 4096 + 4092] {
        let v = buffer.read_u32(offset).expect("read");
        buffer.write_u32(offset, !v).expect("write");
    }
    let r = generator::run(&mut card, &buffer, &valid(&cfg, &buffer), TIMEOUT).expect("run");
    assert_eq!(r.errors.data_mismatches, 3);
    card.device().free_dma(buffer).expect("free");
}

#[test]
fn injected_error_completions_are_counted_and_the_engine_recovers() {
    let sim = Sim::start(&[]);
    let mut card = card(&sim);
    let mut control = control(&sim);
    let buffer = card.device().alloc_dma(1 << 16).expect("buffer");
    generator::fill_pattern(&buffer, DataPattern::Prbs, 0x1234).expect("fill");
    control.set_dma_faults(DmaFaults { ur_every: 5, ca_every: 7, poison_every: 11, drop_every: 13 }).expect("faults");
    let before = control.stats().expect("stats").traffic;
    let cfg = config(Operation::Read, 512, 60);
    let r = generator::run(&mut card, &buffer, &valid(&cfg, &buffer), TIMEOUT).expect("run");
    let seen = control.stats().expect("stats").traffic.since(&before);
    assert_eq!(r.ended_by, "count");
    assert!(seen.faults.ur > 0 && seen.faults.ca > 0 && seen.faults.poisoned > 0 && seen.faults.dropped > 0, "{seen:?}");
    assert_eq!(r.errors.unsupported_request, seen.faults.ur);
    assert_eq!(r.errors.completer_abort, seen.faults.ca);
    assert_eq!(r.errors.completion_timeouts, seen.faults.dropped);
    assert_eq!(r.errors.poisoned, seen.host_completions.poisoned);
    assert_eq!(r.read_requests, 60);
    let failed = seen.faults.ur + seen.faults.ca + seen.faults.dropped;
    assert_eq!(r.latency.count, 60 - failed);
    // Recovery: the same engine, faults off, runs clean.
    control.set_dma_faults(DmaFaults::default()).expect("faults off");
    let r = generator::run(&mut card, &buffer, &valid(&cfg, &buffer), TIMEOUT).expect("run again");
    assert_eq!(r.ended_by, "count");
    assert_eq!(r.errors, generator::ErrorCounts::default());
    assert_eq!(r.latency.count, 60);
    card.device().free_dma(buffer).expect("free");
}

#[test]
fn latency_and_write_then_read() {
    let sim = Sim::start(&["--dma-latency-ns", "400", "--dma-jitter-ns", "0"]);
    let mut card = card(&sim);
    let buffer = card.device().alloc_dma(1 << 16).expect("buffer");
    let mut cfg = config(Operation::Read, 64, 50);
    cfg.max_outstanding = 1;
    generator::fill_pattern(&buffer, DataPattern::Prbs, 0x1234).expect("fill");
    let r = generator::run(&mut card, &buffer, &valid(&cfg, &buffer), TIMEOUT).expect("LAT_RD");
    assert_eq!(r.latency.count, 50);
    assert_eq!(r.latency.samples.len(), 50);
    let clock = f64::from(r.clock_hz);
    let min_ns = r.latency.min as f64 / clock * 1e9;
    assert!(min_ns >= 400.0, "read latency {min_ns} ns is below the root complex's 400 ns");
    assert_eq!(r.latency.samples.iter().map(|&s| u64::from(s)).sum::<u64>(), r.latency.sum);
    assert_eq!(r.latency.histogram.iter().sum::<u64>(), 50);
    cfg.operation = Operation::WriteThenRead;
    cfg.address_pattern = AddressPattern::Random;
    let r = generator::run(&mut card, &buffer, &valid(&cfg, &buffer), TIMEOUT).expect("LAT_WRRD");
    assert_eq!((r.write_requests, r.read_requests, r.latency.count), (50, 50, 50));
    assert_eq!(r.errors.data_mismatches, 0);
    card.device().free_dma(buffer).expect("free");
}

#[test]
fn pio_block_write_with_partial_byte_enables_lands_exactly() {
    let sim = Sim::start(&[]);
    let mut card = card(&sim);
    pio::reset(&mut card).expect("reset");
    let bar = tlpx_regs::BAR;
    let base = pio::WINDOW_OFFSET + 0x100;
    card.device().bar_write_block(bar, base, &[0x5A; 64]).expect("fill");
    let data: Vec<u8> = (0..61u8).collect();
    card.device().bar_write_block(bar, base + 3, &data).expect("partial");
    let back = card.device().bar_read_block(bar, base, 64).expect("read back");
    let mut expected = vec![0x5A; 64];
    expected[3..64].copy_from_slice(&data);
    assert_eq!(back, expected);
    let s = pio::stats(&mut card).expect("stats");
    assert_eq!((s.write_tlps, s.write_bytes), (2, 64 + 61));
    assert_eq!(s.write_size_histogram[6], 1, "one 64-byte TLP"); // [64, 128)
    assert_eq!(s.write_size_histogram[5], 1, "one 61-byte TLP"); // [32, 64)
    assert_eq!((s.read_tlps, s.read_bytes), (1, 64));
    assert!(s.first_write_cycle > 0 && s.last_write_cycle > s.first_write_cycle);
    assert!(pio::set_read_delay(&mut card, 5000).is_err());
}
