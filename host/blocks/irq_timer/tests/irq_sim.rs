//! The interrupt latency timer driven through the real tlpx-sim.
//!
//!   irq_timer::Run ──CSRs──► tlpx-sim ──► Verilated card: timer fires ──MSI──► wait_interrupt
//!        ▲                                                   ◄──ack_user (posted write)──┘
//!        └──── 32-byte sample records (ring in host memory) ◄──┘
//!
//! The host here acknowledges every interrupt as `tlpx irq` does, so the card's histograms
//! must count exactly the fires, the ring must carry one record per fire with no sequence
//! gap and agree with the card's own statistics, and a host that deliberately skips
//! acknowledgements must show exactly those as overruns.

use std::time::Duration;

use tlpx_device::backends::sim::SimDevice;
use tlpx_device::card::Card;
use tlpx_device::irq_timer::{self, Mode, Run, Sample, Stage, TimerConfig};
use tlpx_testkit::SimProcess;

fn open(sim: &SimProcess) -> Card {
    let dev = SimDevice::connect(sim.socket()).expect("connect to the sim");
    Card::open(Box::new(dev)).expect("a tlpx card")
}

/// Runs `config` and acknowledges every interrupt except those numbered in `skip` (1-based).
fn run(card: &mut Card, config: &TimerConfig, ring: u32, skip: &[u32]) -> (Vec<Sample>, irq_timer::RunEnd) {
    let mut run = Run::start(card, config, ring).expect("start");
    let mut samples = Vec::new();
    for n in 1..=config.count {
        let irq = card.wait_interrupt(irq_timer::WAIT_MASK, Duration::from_millis(5)).expect("wait");
        assert!(irq.is_some(), "interrupt {n} of {} never came", config.count);
        let fire = run.took_interrupt();
        assert_eq!(fire, n);
        if !skip.contains(&n) {
            irq_timer::ack_user(card, fire).expect("ack");
        }
        if n % 8 == 0 {
            run.poll(card, &mut samples).expect("poll");
        }
    }
    let end = run.finish(card, true, &mut samples).expect("finish");
    (samples, end)
}

#[test]
fn histogram_counts_equal_fires_and_the_stream_has_no_gap() {
    let sim = SimProcess::start(&[]);
    let mut card = open(&sim);
    let clock = card.identity().clock_hz;
    // A ring smaller than the run: it wraps four times while the host polls.
    let cfg = TimerConfig::random_ns(10_000.0, 40_000.0, 64, 7, clock).expect("config");
    let (samples, end) = run(&mut card, &cfg, 16, &[]);
    let c = &end.counters;
    assert_eq!((c.fires, c.overruns, c.lost, c.stray_user_acks), (64, 0, 0, 0), "{c:?}");
    assert_eq!(samples.len(), 64);
    assert_eq!(irq_timer::check_sequence(&samples, 0), irq_timer::SequenceCheck::default());
    assert!(samples.iter().enumerate().all(|(i, s)| s.fire == i as u32 + 1 && !s.overrun));
    // The card's own histogram counts every fire, and agrees bucket by bucket with the records.
    let user = irq_timer::stage_stats(&mut card, Stage::User).expect("stats");
    assert_eq!(user.histogram.iter().sum::<u64>(), u64::from(c.fires));
    assert_eq!(user.count, 64);
    let from_records = irq_timer::histogram_of(samples.iter().map(|s| s.user_cycles.expect("acknowledged")));
    assert_eq!(user.histogram, from_records);
    let values: Vec<u32> = samples.iter().filter_map(|s| s.user_cycles).collect();
    assert_eq!(user.min_cycles, values.iter().min().map(|v| u64::from(*v)));
    assert_eq!(user.max_cycles, u64::from(*values.iter().max().expect("samples")));
    assert_eq!(user.sum_cycles, values.iter().map(|v| u64::from(*v)).sum::<u64>());
    // Random intervals within the bounds, and the fires really are that far apart.
    assert!(samples.iter().all(|s| (1250..=5000).contains(&s.interval_cycles)), "{samples:?}");
    // (The record's `interval` is the one the card drew right after that fire, i.e. the
    // gap to the next fire, not the one before it as traces/FORMAT.md says: the card draws
    // the next interval before the acknowledgement closes the record.)
    for w in samples.windows(2) {
        let gap = w[1].t0 - w[0].t0;
        assert!((1250..=5002).contains(&gap), "{w:?}");
    }
    // No ISR in user space: the ISR stage is empty.
    assert_eq!(irq_timer::stage_stats(&mut card, Stage::Isr).expect("stats").count, 0);
    assert!(samples.iter().all(|s| s.isr_cycles.is_none()));
}

#[test]
fn skipped_acknowledgements_are_counted_as_overruns() {
    let sim = SimProcess::start(&[]);
    let mut card = open(&sim);
    let clock = card.identity().clock_hz;
    let cfg = TimerConfig::periodic_ns(20_000.0, 20, 3, clock).expect("config");
    assert_eq!(cfg.mode, Mode::Periodic);
    let skip = [3, 4, 10];
    let (samples, end) = run(&mut card, &cfg, 64, &skip);
    let c = &end.counters;
    assert_eq!((c.fires, c.overruns, c.lost), (20, 3, 0), "{c:?}");
    assert_eq!(samples.len(), 20);
    let overrun: Vec<u32> = samples.iter().filter(|s| s.overrun).map(|s| s.fire).collect();
    assert_eq!(overrun, skip);
    let user = irq_timer::stage_stats(&mut card, Stage::User).expect("stats");
    assert_eq!(user.histogram.iter().sum::<u64>() + u64::from(c.overruns), u64::from(c.fires));
    assert!(samples.iter().all(|s| s.interval_cycles == cfg.min_interval_cycles));
}

#[test]
fn ping_measures_a_posted_write_and_bad_configs_are_refused() {
    let sim = SimProcess::start(&[]);
    let mut card = open(&sim);
    let (median, all) = irq_timer::ping_cost(&mut card, 5).expect("ping");
    assert!(median > 0 && median < 1000, "{all:?}");
    let clock = card.identity().clock_hz;
    let inverted = TimerConfig { mode: Mode::Random, min_interval_cycles: 100, max_interval_cycles: 10, count: 1, seed: 1 };
    let e = Run::start(&mut card, &inverted, 16).expect_err("inverted").to_string();
    assert!(e.contains("inverted") && e.contains("100"), "{e}");
    let cfg = TimerConfig::periodic_ns(10_000.0, 1, 1, clock).expect("config");
    let e = Run::start(&mut card, &cfg, 100).expect_err("not a power of two").to_string();
    assert!(e.contains("not 100"), "{e}");
}

#[test]
fn a_late_acknowledgement_never_closes_a_later_fire() {
    // Periodic fires every 10 us. The host answers every odd fire late, 1 us after the next
    // fire has come (that fire is an overrun, its acknowledgement a stray), and every even
    // fire after 2 us. Each acknowledgement names its fire, so every sample the card keeps
    // is its own fire's: at least the 2 us the host waited before acknowledging it. (A card
    // that took any acknowledgement for the waiting fire closed each even fire with the odd
    // fire's late acknowledgement, ~1 us after it: too short.)
    let sim = SimProcess::start(&[]);
    let mut card = open(&sim);
    let clock = card.identity().clock_hz;
    let period = Duration::from_micros(10);
    let prompt = Duration::from_micros(2);
    let late = period + Duration::from_micros(1);
    let cfg = TimerConfig::periodic_ns(period.as_nanos() as f64, 20, 1, clock).expect("config");
    let mut run = Run::start(&mut card, &cfg, 64).expect("start");
    let mut samples = Vec::new();
    for n in 1..=cfg.count {
        let irq = card.wait_interrupt(irq_timer::WAIT_MASK, Duration::from_millis(5)).expect("wait");
        assert!(irq.is_some(), "interrupt {n} never came");
        let fire = run.took_interrupt();
        card.idle(if n % 2 == 1 { late } else { prompt }).expect("idle");
        irq_timer::ack_user(&mut card, fire).expect("ack");
    }
    let end = run.finish(&mut card, true, &mut samples).expect("finish");
    let c = &end.counters;
    assert_eq!(c.fires, 20, "{c:?}");
    assert_eq!(c.overruns, 10, "every odd fire is an overrun: {c:?}");
    assert_eq!(c.stray_user_acks, 10, "every late acknowledgement is a stray: {c:?}");
    let kept: Vec<&Sample> = samples.iter().filter(|s| !s.overrun).collect();
    assert_eq!(kept.len(), 10, "{samples:?}");
    let prompt_cycles = (prompt.as_secs_f64() * f64::from(clock)) as u32;
    for s in &kept {
        assert_eq!(s.fire % 2, 0, "an odd fire was kept: {s:?}");
        let user = s.user_cycles.expect("acknowledged");
        assert!(user >= prompt_cycles, "fire {} closed after {user} cycles, less than the {prompt_cycles} the host waited", s.fire);
    }
}

#[test]
fn whatever_vectors_an_earlier_run_left_a_new_run_starts_on_the_timers_own() {
    // MSI-X on (every vector its own message), and the timer left rotating over vectors 8
    // and 9, as a per-CPU run killed before its end leaves it: a plain run waits on vector 0
    // and the timer's own, so unless its start puts the timer back there every fire would go
    // to a vector nobody waits on.
    let sim = SimProcess::start(&["--msix", "32"]);
    let mut card = open(&sim);
    let granted = card.device().request_vectors(32).expect("vectors");
    assert_eq!(granted.mode, tlpx_device::InterruptMode::MsiX);
    card.write(tlpx_regs::irq_timer::VECTORS, 0x300).expect("stale vectors");
    let clock = card.identity().clock_hz;
    let cfg = TimerConfig::periodic_ns(20_000.0, 6, 1, clock).expect("config");
    let (samples, end) = run(&mut card, &cfg, 16, &[]);
    assert_eq!((end.counters.fires, samples.len()), (6, 6));
    assert_eq!(card.read(tlpx_regs::irq_timer::VECTORS).expect("read"), 1 << irq_timer::msi_bit());
    assert!(samples.iter().all(|s| u32::from(s.vector) == irq_timer::msi_bit()), "{samples:?}");
    // ...and a per-CPU run's vectors are written by its own start, after the claim.
    let cfg = TimerConfig::periodic_ns(20_000.0, 4, 1, clock).expect("config");
    let mut r = Run::start_on_vectors(&mut card, &cfg, 16, 0x300).expect("start");
    for n in 1..=4u32 {
        let irq = card.wait_interrupt(1 << (8 + (n - 1) % 2), Duration::from_millis(5)).expect("wait");
        assert_eq!(irq.map(|i| i.vector), Some(8 + (n - 1) % 2), "fire {n}");
        irq_timer::ack_user(&mut card, r.took_interrupt()).expect("ack");
    }
    let mut samples = Vec::new();
    r.finish(&mut card, true, &mut samples).expect("finish");
}
