//! Live time: while a client holds a claim (`SetLive`), card time runs with nobody waiting,
//! never ahead of wall time; other clients are served meanwhile; the claim ends with the
//! client's connection, and then the sim is idle again. Without a claim nothing changes
//! (the determinism tests of process.rs run without one).
//!
//! No assertion here is on how fast anything is: liveness is waited for (with a generous
//! deadline), and the pacing is checked as the bound it is (card time ≤ wall time × clock).

#![allow(clippy::unwrap_used)]

use crate::common;

use std::io::Write;
use std::os::unix::net::UnixStream;
use std::time::{Duration, Instant};

use common::{Sim, MAGIC};
use tlpx_device::backends::sim::SimDevice;
use tlpx_device::{Device, TimeMark, TimeMode, Width};
use tlpx_sim_protocol::{encode_frame, read_frame, Reply, Request, PROTOCOL_VERSION};

fn call(s: &mut UnixStream, req: &Request) -> Reply {
    let mut buf = Vec::new();
    encode_frame(req, &mut buf).unwrap();
    s.write_all(&buf).unwrap();
    read_frame(s).unwrap()
}

/// A client on a bare socket that said Hello as `name`.
fn raw_client(sim: &Sim, name: &str) -> UnixStream {
    let mut s = UnixStream::connect(&sim.socket).unwrap();
    let r = call(&mut s, &Request::Hello { protocol_version: PROTOCOL_VERSION, client_name: name.into() });
    assert!(matches!(r, Reply::HelloOk(_)), "{r:?}");
    s
}

/// Waits (up to 60 s of wall time: a loaded machine runs the sim slowly) until the card has
/// run past `cycle` while `probe` only reads counters, which lets no time pass by itself.
fn wait_for_cycles_past(probe: &mut SimDevice, cycle: u64) -> u64 {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let now = probe.stats().unwrap().cycles;
        if now > cycle {
            return now;
        }
        assert!(Instant::now() < deadline, "card time stayed at {now} (waiting for more than {cycle})");
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Waits until no client holds live time any more.
fn wait_for_no_live_client(probe: &mut SimDevice) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while probe.stats().unwrap().live_clients != 0 {
        assert!(Instant::now() < deadline, "a claim on live time outlived its client");
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Asserts that card time stands still for a while: nobody waits and nobody is live.
fn assert_idle(probe: &mut SimDevice) {
    let before = probe.stats().unwrap();
    std::thread::sleep(Duration::from_millis(200));
    let after = probe.stats().unwrap();
    assert_eq!(after.cycles, before.cycles, "card time ran with no client live or waiting");
    assert_eq!(after.live_cycles, before.live_cycles);
    assert_eq!(after.live_clients, 0);
}

#[test]
fn live_time_runs_with_nobody_waiting_and_ends_with_its_client() {
    let sim = Sim::start(&[]);
    let mut probe = sim.connect();
    let start = probe.stats().unwrap();
    assert_eq!((start.live_clients, start.live_cycles), (0, 0));
    assert_idle(&mut probe);

    let mut live = raw_client(&sim, "live");
    let r = call(&mut live, &Request::SetLive { live: true });
    let Reply::LiveSet { live: true, live_clients: 1, card_cycle } = r else { panic!("{r:?}") };
    // Asking again changes nothing (a claim per client, not a count).
    let r = call(&mut live, &Request::SetLive { live: true });
    assert!(matches!(r, Reply::LiveSet { live: true, live_clients: 1, .. }), "{r:?}");

    // Nobody waits (the live client sleeps, the probe only reads counters), yet time runs.
    let later = wait_for_cycles_past(&mut probe, card_cycle + 10_000);
    let s = probe.stats().unwrap();
    assert_eq!(s.live_clients, 1);
    assert!(s.live_cycles >= later - card_cycle, "{} live cycles, {} run since the claim", s.live_cycles, later - card_cycle);
    let me = s.clients.iter().find(|c| c.name == "live").unwrap();
    assert!(me.live && me.connected, "{me:?}");
    assert!(s.clients.iter().filter(|c| c.name == "test").all(|c| !c.live));

    // Other clients are served while time runs live: MMIO reads answer, stamped later and later.
    let (magic, c1) = probe.bar_read_stamped(0, 0, Width::W32).unwrap();
    let (_, c2) = probe.bar_read_stamped(0, 0, Width::W32).unwrap();
    assert_eq!(magic, u64::from(MAGIC));
    assert!(c2 > c1 && c1 > card_cycle, "{card_cycle} {c1} {c2}");

    // The client goes away without giving its claim up (what the kernel does for a process
    // that dies: its socket closes): live time ends, and the sim is idle again.
    drop(live);
    wait_for_no_live_client(&mut probe);
    let s = probe.stats().unwrap();
    assert!(s.clients.iter().all(|c| !c.live), "{:?}", s.clients);
    assert_idle(&mut probe);
    // What ran live stays counted.
    assert_eq!(probe.stats().unwrap().live_cycles, s.live_cycles);
    assert!(s.live_cycles > 10_000);
    sim.shutdown();
}

#[test]
fn live_time_lasts_while_any_client_holds_it() {
    let sim = Sim::start(&[]);
    let mut probe = sim.connect();
    let mut a = sim.connect();
    let mut b = sim.connect();
    assert_eq!(a.request_live(true).unwrap().live_clients, 1);
    assert_eq!(b.request_live(true).unwrap().live_clients, 2);
    // A gives its claim up: B's keeps time running.
    assert_eq!(a.request_live(false).unwrap().live_clients, 1);
    assert_eq!(a.request_live(false).unwrap().live_clients, 1, "giving up a claim twice changes nothing");
    let c = probe.stats().unwrap().cycles;
    wait_for_cycles_past(&mut probe, c + 10_000);
    // Through the Device trait, as tools use it.
    b.set_live(false).unwrap();
    assert_eq!(probe.stats().unwrap().live_clients, 0);
    assert_idle(&mut probe);
    sim.shutdown();
}

#[test]
fn a_time_mark_tells_whether_a_measurement_ran_live() {
    let sim = Sim::start(&[]);
    let mut dev = sim.connect();
    // A measurement in virtual time: card time ran (the read waited) but none of it live.
    let before = dev.time_mark().unwrap();
    dev.idle(Duration::from_micros(20)).unwrap();
    let after = dev.time_mark().unwrap();
    assert!(matches!(before, TimeMark::Simulator { live_clients: 0, .. }), "{before:?}");
    assert_eq!(after.mode_since(&before), TimeMode::Virtual);
    assert_eq!(after.mode_now(), TimeMode::Virtual);
    // Another client holds live time during the next one.
    let mut other = sim.connect();
    other.set_live(true).unwrap();
    let before = dev.time_mark().unwrap();
    assert_eq!(before.mode_now(), TimeMode::Live);
    dev.idle(Duration::from_micros(20)).unwrap();
    other.set_live(false).unwrap();
    let after = dev.time_mark().unwrap();
    assert_eq!(after.mode_since(&before), TimeMode::Live);
    assert_eq!(after.mode_now(), TimeMode::Virtual);
    sim.shutdown();
}

#[test]
fn card_time_never_runs_ahead_of_wall_time() {
    // A 1 MHz card clock: the slowest the sim accepts, so the pacing has something to do
    // when the sim runs faster than that; the bound holds however fast it runs.
    let sim = Sim::start(&["--clock-mhz", "1"]);
    let mut probe = sim.connect();
    let mut live = sim.connect();
    // Wall time starts before the claim and ends after the last reading: the sim's own
    // epoch and readings lie inside, so card cycles ≤ this wall span × 1 MHz.
    let t0 = Instant::now();
    let c0 = live.request_live(true).unwrap().card_cycle;
    let c1 = wait_for_cycles_past(&mut probe, c0 + 100_000);
    std::thread::sleep(Duration::from_millis(300));
    let s = probe.stats().unwrap();
    let wall = t0.elapsed();
    let allowed = (wall.as_secs_f64() * 1e6).ceil() as u64;
    assert!(s.cycles - c0 <= allowed, "card ran {} cycles in {wall:?} of wall time at 1 MHz (at most {allowed})", s.cycles - c0);
    assert!(s.cycles >= c1);
    assert!(s.live_paced_seconds >= 0.0);
    drop(live);
    wait_for_no_live_client(&mut probe);
    sim.shutdown();
}

#[test]
fn a_client_of_the_previous_protocol_is_refused_with_both_versions_named() {
    let sim = Sim::start(&[]);
    let mut old = UnixStream::connect(&sim.socket).unwrap();
    let r = call(&mut old, &Request::Hello { protocol_version: PROTOCOL_VERSION - 1, client_name: "old tlpx".into() });
    let Reply::HelloRefused { sim_protocol_version, message } = r else { panic!("{r:?}") };
    assert_eq!(sim_protocol_version, PROTOCOL_VERSION);
    let (old_v, new_v) = (format!("version {}", PROTOCOL_VERSION - 1), format!("speaks {PROTOCOL_VERSION}"));
    assert!(message.contains(&old_v) && message.contains(&new_v) && message.contains("same build"), "{message}");
    // The sim carries on for clients of its own version.
    let mut probe = sim.connect();
    assert_eq!(probe.bar_read(0, 0, Width::W32).unwrap(), u64::from(MAGIC));
    sim.shutdown();
}
