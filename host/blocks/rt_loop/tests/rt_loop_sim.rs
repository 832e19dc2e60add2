//! The real-time loop (DataMover) driven through the real tlpx-sim.
//!
//!   card ──data, then token──► host buffer ──(poll DW 0 | MSI)──► rt_loop::serve: checksum
//!     ▲                                                                │
//!     └──── result register write, or doorbell + the card's DMA read ◄─┘
//!
//! Every iteration's checksum is checked by the card against what it wrote (`mismatches`),
//! and here the host also checks every data DW against the token's pattern; the card's
//! histogram and sample stream must account for every iteration, across chunks.

use tlpx_device::backends::sim::SimDevice;
use tlpx_device::card::Card;
use tlpx_device::rt_loop::{self, Detect, LoopConfig, Return};
use tlpx_testkit::SimProcess;

fn open(sim: &SimProcess) -> Card {
    let dev = SimDevice::connect(sim.socket()).expect("connect to the sim");
    Card::open(Box::new(dev)).expect("a tlpx card")
}

fn check_consistent(r: &rt_loop::LoopRun) {
    let c = &r.card;
    assert!(r.verified(), "{c:?} {:?}", r.host);
    assert_eq!(c.histogram.iter().sum::<u64>(), c.count, "the histogram counts every iteration");
    assert_eq!(r.loop_cycles.len() as u64, c.count);
    assert_eq!(c.min_cycles, r.loop_cycles.iter().min().map(|v| u64::from(*v)));
    assert_eq!(c.max_cycles, u64::from(*r.loop_cycles.iter().max().expect("samples")));
    assert_eq!(c.sum_cycles, r.loop_cycles.iter().map(|v| u64::from(*v)).sum::<u64>());
    assert_eq!(r.host.served, c.count);
    assert_eq!(c.unexpected_completions, 0);
}

#[test]
fn every_detection_and_return_mode_round_trips_with_verified_checksums() {
    let sim = SimProcess::start(&[]);
    let mut card = open(&sim);
    for detect in [Detect::Poll, Detect::Irq] {
        for ret in [Return::Register, Return::Dma] {
            for size in [8, 256, 4096] {
                let mut cfg = LoopConfig::new(size, 20, detect, ret);
                cfg.verify_data = true;
                cfg.seed = 1000 * size;
                let r = rt_loop::run(&mut card, &cfg).expect("loop run");
                check_consistent(&r);
                let what = format!("{detect:?}/{ret:?}/{size}");
                match detect {
                    Detect::Poll => assert!(r.host.polls >= 20 && r.host.interrupts == 0, "{what}: {:?}", r.host),
                    Detect::Irq => assert!(r.host.interrupts >= 20 && r.host.polls == 0, "{what}: {:?}", r.host),
                }
                // A DMA return's read is timed by the card; a register return has none.
                match ret {
                    Return::Register => assert_eq!(r.card.read_sum_cycles, 0, "{what}"),
                    Return::Dma => {
                        assert!(r.card.read_sum_cycles > 0 && r.card.read_sum_cycles < r.card.sum_cycles, "{what}: {:?}", r.card)
                    }
                }
                // The loop covers at least the buffer's write: size bytes at 4 bytes per
                // cycle of the narrowest (64-bit, 8 B) datapath would be size/8 cycles.
                let min = r.card.min_cycles.expect("iterations");
                assert!(min >= u64::from(size / 8), "{what}: loop of {min} cycles for {size} bytes");
            }
        }
    }
}

#[test]
fn bigger_buffers_take_longer_and_dma_return_costs_a_read() {
    let sim = SimProcess::start(&["--gen", "1", "--lanes", "1"]);
    let mut card = open(&sim);
    let mut median = |size, ret| {
        let r = rt_loop::run(&mut card, &LoopConfig::new(size, 15, Detect::Irq, ret)).expect("loop run");
        check_consistent(&r);
        let mut v = r.loop_cycles.clone();
        v.sort_unstable();
        v[v.len() / 2]
    };
    let (small, big) = (median(64, Return::Register), median(4096, Return::Register));
    // Gen1 x1 moves 250 MB/s: 4 KiB more take about 16 us more, far above the jitter.
    let clock = 125e6_f64;
    assert!(f64::from(big - small) / clock > 10e-6, "64 B: {small} cycles, 4 KiB: {big} cycles");
    let dma = median(64, Return::Dma);
    assert!(dma > small, "a DMA return ({dma} cycles) must cost more than a register write ({small})");
}

#[test]
fn runs_longer_than_the_sample_fifo_are_chunked_without_loss() {
    let sim = SimProcess::start(&[]);
    let mut card = open(&sim);
    let mut cfg = LoopConfig::new(8, rt_loop::CHUNK_ITERATIONS + 300, Detect::Irq, Return::Register);
    cfg.seed = u32::MAX - 500; // tokens wrap around within the run
    let r = rt_loop::run(&mut card, &cfg).expect("loop run");
    check_consistent(&r);
    assert_eq!(r.card.count, u64::from(cfg.iterations));
}

#[test]
fn failed_reads_of_the_result_are_counted_and_rung_again() {
    // Every 3rd card read of host memory is answered with Unsupported Request.
    let sim = SimProcess::start(&["--fault-ur-every", "3"]);
    let mut card = open(&sim);
    let r = rt_loop::run(&mut card, &LoopConfig::new(64, 12, Detect::Poll, Return::Dma)).expect("loop run");
    check_consistent(&r);
    assert!(r.card.return_errors >= 4, "{:?}", r.card);
    assert_eq!(r.host.doorbell_retries, r.card.return_errors, "one retry per failed read: {:?} {:?}", r.host, r.card);
}

#[test]
fn bad_configurations_are_refused_before_the_card_is_touched() {
    let sim = SimProcess::start(&[]);
    let mut card = open(&sim);
    let e = rt_loop::run(&mut card, &LoopConfig::new(6, 1, Detect::Poll, Return::Register)).expect_err("size").to_string();
    assert!(e.contains("not 6"), "{e}");
    let e = rt_loop::run(&mut card, &LoopConfig::new(64, 0, Detect::Poll, Return::Register)).expect_err("zero").to_string();
    assert!(e.contains("at least 1 iteration"), "{e}");
    // The card is fine afterwards.
    check_consistent(&rt_loop::run(&mut card, &LoopConfig::new(64, 3, Detect::Poll, Return::Register)).expect("run"));
}
