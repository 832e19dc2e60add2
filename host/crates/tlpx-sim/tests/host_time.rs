//! `--host-time real`: the wall time a client spends between its messages becomes card time
//! (capped per gap); `virtual` (the default) charges nothing. Checked against the card's own
//! cycle counter (timebase) and the interrupt latency timer's user stage.

#![allow(clippy::unwrap_used)]

use crate::common;

use std::time::{Duration, Instant};

use common::Sim;
use tlpx_device::backends::sim::{HostTime, SimDevice};
use tlpx_device::{Device, Width};
use tlpx_regs::{constants, irq_timer, pcie_msi, timebase};

fn cycles(d: Duration, clock_hz: u64) -> u64 {
    (d.as_secs_f64() * clock_hz as f64) as u64
}

fn read32(dev: &mut SimDevice, off: u64) -> u64 {
    dev.bar_read(0, off, Width::W32).unwrap()
}

fn w32(dev: &mut SimDevice, off: u64, v: u64) {
    dev.bar_write(0, off, Width::W32, v).unwrap();
}

/// Reads the card's cycle counter, sleeps `sleep`, reads it again. Returns (counter delta,
/// the client's wall time between the first reply and the second request (a lower bound of
/// the sim's gap), the wall time from before the first request to after the second reply
/// (an upper bound)).
fn sleep_between_reads(dev: &mut SimDevice, sleep: Duration) -> (u64, Duration, Duration) {
    let lo = timebase::CYCLES_LO.offset;
    let t0 = Instant::now();
    let c0 = read32(dev, lo);
    let ta = Instant::now();
    std::thread::sleep(sleep);
    let tb = Instant::now();
    let c1 = read32(dev, lo);
    let t3 = Instant::now();
    (c1.wrapping_sub(c0) & 0xFFFF_FFFF, tb - ta, t3 - t0)
}

#[test]
fn virtual_mode_charges_nothing() {
    let sim = Sim::start(&[]);
    let mut dev = sim.connect();
    assert_eq!(dev.host_time(), HostTime::Virtual);
    assert_eq!(dev.hello().host_time, HostTime::Virtual);
    let (d, _, _) = sleep_between_reads(&mut dev, Duration::from_millis(20));
    assert!(d < 100, "virtual mode: the counter moved by the read's round trip only, not {d}");
    let h = dev.stats().unwrap().host_time;
    assert_eq!(h, Default::default(), "nothing charged in virtual mode");
}

#[test]
fn real_mode_turns_a_client_sleep_into_card_time() {
    let sim = Sim::start(&["--host-time", "real", "--host-time-cap-us", "1000000"]);
    let mut dev = sim.connect();
    assert_eq!(dev.host_time(), HostTime::Real);
    assert_eq!(dev.hello().host_time_cap_ns, 1_000_000_000);
    let clock = dev.hello().card_clock_hz;
    let sleep = Duration::from_millis(20);
    let (d, lower, upper) = sleep_between_reads(&mut dev, sleep);
    eprintln!(
        "real: slept {sleep:?}, client gap >= {lower:?}, <= {upper:?}; counter +{d} cycles = {:.3} ms at {} MHz",
        d as f64 / clock as f64 * 1e3,
        clock / 1_000_000
    );
    assert!(d >= cycles(sleep, clock), "slept {sleep:?} = {} cycles, counter moved only {d}", cycles(sleep, clock));
    assert!(d >= cycles(lower, clock));
    // At most the wall time the client saw around both reads, plus the reads' own paths.
    assert!(d <= cycles(upper, clock) + 1000, "counter moved {d}, more than the {upper:?} that passed");
    let h = dev.stats().unwrap().host_time;
    assert!(h.gaps >= 2 && h.capped_gaps == 0, "{h:?}");
    assert!(h.charged_cycles >= cycles(sleep, clock) && h.gap_cycles >= h.charged_cycles, "{h:?}");
    assert!(h.longest_gap_ns >= sleep.as_nanos() as u64, "{h:?}");
    sim.shutdown();
}

#[test]
fn the_cap_limits_each_gap_and_is_counted() {
    let sim = Sim::start(&["--host-time", "real", "--host-time-cap-us", "2000"]);
    let mut dev = sim.connect();
    let clock = dev.hello().card_clock_hz;
    let cap = cycles(Duration::from_millis(2), clock);
    let before = dev.stats().unwrap().host_time;
    let (d, _, _) = sleep_between_reads(&mut dev, Duration::from_millis(20));
    eprintln!("cap 2 ms: slept 20 ms, counter +{d} cycles (cap {cap})");
    assert!((cap..cap + 1000).contains(&d), "a 20 ms sleep is charged as the 2 ms cap ({cap} cycles) plus the read: {d}");
    let after = dev.stats().unwrap().host_time;
    assert!(after.capped_gaps > before.capped_gaps, "{before:?} -> {after:?}");
    assert!(after.longest_gap_ns >= 20_000_000, "{after:?}");
    let me = dev.stats().unwrap().clients.into_iter().find(|c| c.id == dev.hello().client_id).unwrap();
    assert!(me.host_gaps_capped >= 1 && me.host_gaps >= me.host_gaps_capped, "{me:?}");
}

#[test]
fn two_clients_sleeping_together_advance_the_card_once() {
    let sim = Sim::start(&["--host-time", "real", "--host-time-cap-us", "1000000"]);
    let mut a = sim.connect();
    let mut b = sim.connect();
    let mut watcher = sim.connect();
    let clock = a.hello().card_clock_hz;
    let (ida, idb) = (a.hello().client_id, b.hello().client_id);
    let gaps = |w: &mut SimDevice| {
        let s = w.stats().unwrap();
        let g = |id| s.clients.iter().find(|c| c.id == id).map(|c| c.host_gap_cycles).unwrap();
        (g(ida), g(idb))
    };
    // Both get a reply (their marks), both sleep 20 ms, both ask again.
    let na0 = a.card_cycle().unwrap();
    let nb0 = b.card_cycle().unwrap();
    let before = gaps(&mut watcher);
    let sleep = Duration::from_millis(20);
    let t = std::thread::spawn(move || {
        std::thread::sleep(sleep);
        let n = b.card_cycle().unwrap();
        (b, n)
    });
    std::thread::sleep(sleep);
    let na = a.card_cycle().unwrap();
    let (_b, nb) = t.join().unwrap();
    let after = gaps(&mut watcher);
    let (ga, gb) = (after.0 - before.0, after.1 - before.1);
    let end = na.max(nb);
    eprintln!(
        "two clients, 20 ms each: gaps {:.3} ms and {:.3} ms (their sum {:.3} ms); card +{:.3} ms",
        ga as f64 / clock as f64 * 1e3,
        gb as f64 / clock as f64 * 1e3,
        (ga + gb) as f64 / clock as f64 * 1e3,
        (end - na0) as f64 / clock as f64 * 1e3
    );
    assert!(ga >= cycles(sleep, clock) && gb >= cycles(sleep, clock), "{ga} {gb}");
    // Each reply comes no earlier than its own mark plus its gap ...
    assert!(na >= na0 + ga && nb >= nb0 + gb, "a {na0}+{ga} -> {na}, b {nb0}+{gb} -> {nb}");
    // ... and the card went only as far as the larger of the two targets: the overlapping
    // gaps were charged once, not one after the other.
    assert!(end <= (na0 + ga).max(nb0 + gb) + 1000, "a {na0}+{ga}, b {nb0}+{gb}, card at {end}");
    assert!(end - na0 < ga + gb, "charged twice: {} >= {ga} + {gb}", end - na0);
}

#[test]
fn the_interrupt_timer_user_stage_holds_the_host_sleep() {
    // A cap of 6 ms: an oversleeping host is charged 6 ms, still at least the 5 ms asked.
    let sim = Sim::start(&["--host-time", "real", "--host-time-cap-us", "6000"]);
    let mut dev = sim.connect();
    let clock = dev.hello().card_clock_hz;
    let cap = cycles(Duration::from_nanos(dev.hello().host_time_cap_ns), clock);
    let host = Duration::from_millis(5);
    // Fires 3 times, periodically every 8 ms of card time: longer than the cap, so a fire
    // never comes while the previous one still waits for its ack_user.
    let interval = cycles(Duration::from_millis(8), clock);
    w32(&mut dev, irq_timer::CONTROL.offset, irq_timer::control::CLEAR.set(1));
    w32(&mut dev, irq_timer::CONFIG.offset, irq_timer::config::MODE.set(1));
    w32(&mut dev, irq_timer::MIN_INTERVAL.offset, interval);
    w32(&mut dev, irq_timer::MAX_INTERVAL.offset, interval);
    w32(&mut dev, irq_timer::COUNT.offset, 3);
    w32(&mut dev, pcie_msi::ENABLE.offset, 1 << constants::MSI_IRQ_TIMER);
    w32(&mut dev, irq_timer::CONTROL.offset, irq_timer::control::START.set(1));
    for i in 0..3 {
        let irq = dev.wait_interrupt(u32::MAX, Duration::from_millis(100)).unwrap();
        assert!(irq.is_some(), "fire {i}: no interrupt within 100 ms of card time");
        std::thread::sleep(host);
        w32(&mut dev, irq_timer::ACK_USER.offset, i + 1); // fire i + 1 since the clear
        if std::env::var_os("HOST_TIME_DEBUG").is_some() {
            let irq = irq.unwrap();
            let sum = read32(&mut dev, irq_timer::USER_SUM.offset) | read32(&mut dev, irq_timer::USER_SUM.offset + 4) << 32;
            eprintln!("fire {i}: irq at {:?}, user sum {sum}, {:?}", irq.card_cycle, dev.stats().unwrap().host_time);
        }
    }
    // Let the last ack reach the card.
    dev.idle(Duration::from_micros(10)).unwrap();
    let count = read32(&mut dev, irq_timer::USER_COUNT.offset);
    let min = read32(&mut dev, irq_timer::USER_MIN.offset);
    let max = read32(&mut dev, irq_timer::USER_MAX.offset);
    // 64 bits, read as two DWs (the register is not 8-byte aligned in every map).
    let sum = read32(&mut dev, irq_timer::USER_SUM.offset) | read32(&mut dev, irq_timer::USER_SUM.offset + 4) << 32;
    let overruns = read32(&mut dev, irq_timer::OVERRUNS.offset);
    let fires = read32(&mut dev, irq_timer::FIRES.offset);
    let ms = |c: u64| c as f64 / clock as f64 * 1e3;
    eprintln!(
        "irq timer, real host time: {count} user samples, min {min} ({:.3} ms), mean {:.3} ms, max {max} ({:.3} ms); fires {fires}, overruns {overruns}",
        ms(min),
        ms(sum / count.max(1)),
        ms(max)
    );
    assert_eq!((count, fires, overruns), (3, 3, 0));
    assert!(min >= cycles(host, clock), "user stage min {min} < the {host:?} the host slept ({} cycles)", cycles(host, clock));
    // At most the cap (the sleep's gap is capped) plus the MSI and the ack over the link.
    assert!(max <= cap + 2000, "user stage max {max} > cap {cap} + link");
}
