//! The rule-30 accelerator through its BAR0 window on the real tlpx-sim: the published centre
//! column of rule 30 from a single seed cell (OEIS A051023) by hwo chaining and by the
//! multi-generation mode, and the documented handling of bad register values.

use std::time::Duration;

use tlpx_device::backends::sim::SimDevice;
use tlpx_device::card::Card;
use tlpx_device::rule30::{self as accel, reg, HwMode, OpConfig};
use tlpx_device::DeviceError;
use tlpx_testkit::SimProcess;

fn open(sim: &SimProcess) -> Card {
    let dev = SimDevice::connect(sim.socket()).expect("connect to the sim");
    Card::open(Box::new(dev)).expect("a tlpx card")
}

const LEN: u32 = 255;
const CENTRE: usize = 127;

fn seed_cell() -> [u32; 32] {
    let mut w = [0u32; 32];
    w[CENTRE / 32] = 1 << (CENTRE % 32);
    w
}

#[test]
fn hwo_chaining_and_multi_generation_give_the_published_centre_column() {
    let sim = SimProcess::start(&[]);
    let mut card = open(&sim);
    let want = tlpx_rule30::centre_column(100).expect("OEIS reference");
    let op = OpConfig { rule: 30, line_length: LEN, latency_cycles: 3 };
    // hwo: the card copies each output to its input; the host only starts and reads.
    accel::configure(&mut card, &op, HwMode::Hwo, 1).expect("configure");
    accel::write_words(&mut card, reg::INPUT, &seed_cell()[..8]).expect("seed");
    let mut got = vec![1u8];
    for _ in 1..100 {
        accel::write(&mut card, reg::START_COMPUTE, 1).expect("start");
        accel::wait_complete(&mut card, HwMode::Hwo, Duration::from_secs(1)).expect("complete");
        let w = accel::read(&mut card, reg::OUTPUT + 4 * (CENTRE / 32) as u64).expect("output");
        got.push(((w >> (CENTRE % 32)) & 1) as u8);
    }
    assert_eq!(got, want, "hwo chaining");
    // Multi-generation: one start runs n generations back to back.
    for n in [1u32, 17, 99] {
        let mut lines = Vec::new();
        accel::configure(&mut card, &op, HwMode::Multi, n).expect("configure");
        let out = accel::run_packet(&mut card, HwMode::Multi, &op, &seed_cell(), n, &mut lines).expect("run");
        assert_eq!(((out[CENTRE / 32] >> (CENTRE % 32)) & 1) as u8, want[n as usize], "{n} generations");
    }
    let c = accel::counters(&mut card).expect("counters");
    assert_eq!(c.refused_starts + c.ignored_starts, 0);
}

#[test]
fn bad_line_lengths_are_refused_and_a_start_while_busy_is_ignored() {
    let sim = SimProcess::start(&[]);
    let mut card = open(&sim);
    let info = accel::info(&mut card).expect("info");
    assert_eq!(info.irq_num, accel::msi_bit());
    assert_eq!(info.min_cycles_per_generation, 1);
    let op = OpConfig { rule: 30, line_length: 64, latency_cycles: 0 };
    accel::configure(&mut card, &op, HwMode::Poll, 1).expect("configure");
    for bad in [0u32, 1025] {
        let before = accel::counters(&mut card).expect("counters");
        accel::write(&mut card, reg::LINE_LENGTH, bad).expect("length");
        accel::write(&mut card, reg::START_COMPUTE, 1).expect("start");
        let e = accel::wait_complete(&mut card, HwMode::Poll, Duration::from_secs(1)).expect_err("refused");
        assert!(matches!(e, DeviceError::StartRefused { .. }), "a refused start, typed: {e:?}");
        let e = e.to_string();
        assert!(e.starts_with("the rule-30 accelerator refused the start") && e.contains(&format!("line_length {bad}")), "{e}");
        let after = accel::counters(&mut card).expect("counters");
        assert_eq!(after.refused_starts, before.refused_starts + 1);
        assert_eq!(after.operations, before.operations, "nothing computed");
        accel::write(&mut card, reg::STATUS, accel::STATUS_ERROR).expect("clear the error");
    }
    // The driver refuses bad lengths before the card sees them.
    let e = accel::configure(&mut card, &OpConfig { line_length: 0, ..op }, HwMode::Poll, 1).expect_err("zero").to_string();
    assert!(e.contains("not 0"), "{e}");
    // A start while busy (a long latency) is ignored and counted; the running one completes.
    let slow = OpConfig { latency_cycles: 20_000, ..op };
    accel::configure(&mut card, &slow, HwMode::Poll, 1).expect("configure");
    accel::write(&mut card, reg::START_COMPUTE, 1).expect("start");
    accel::write(&mut card, reg::START_COMPUTE, 1).expect("start again");
    accel::wait_complete(&mut card, HwMode::Poll, Duration::from_secs(5)).expect("the first completes");
    let c = accel::counters(&mut card).expect("counters");
    assert_eq!((c.ignored_starts, c.operations), (1, 1), "{c:?}");
    assert!(c.busy_cycles >= 20_000, "{c:?}");
}
