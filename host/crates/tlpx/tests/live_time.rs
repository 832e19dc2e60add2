//! Which clock produced a result, end to end with the real binaries: a plain run on the
//! simulator is `virtual` (deterministic), a run while another process holds live time is
//! `live` (and says so in its notes and in `tlpx report`), and a live client that dies gives
//! live time up: the simulator goes idle again.
//!
//!   tlpx spy capture (live) ──┐
//!   tlpx bw / spy stats ──────┼──► tlpx-sim ──► time_mode in each result
//!   probe (SimDevice stats) ──┘
//!
//! No assertion is on wall time: each step waits for a state (with a generous deadline).

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;
use tlpx_device::backends::sim::SimDevice;
use tlpx_testkit::SimProcess as Sim;

use crate::common;
use common::{text, tlpx, tlpx_bin};

fn json_file(path: &std::path::Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(path).expect("result")).expect("JSON")
}

fn has_live_note(doc: &Value) -> bool {
    doc["notes"].as_array().expect("notes").iter().any(|n| n.as_str().is_some_and(|n| n.starts_with("LIVE TIME:")))
}

/// A `tlpx spy capture` until stopped, in the background; returns once it owns the spy.
fn live_capture(sim: &Sim, name: &str) -> Child {
    let mut child = Command::new(tlpx_bin())
        .args(["--device", &sim.selector(), "spy", "capture", "--quiet", "-o"])
        .arg(sim.path(name))
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start capture");
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let out = tlpx(&sim.selector(), &["--json", "owners"]);
        let rows: Value = serde_json::from_slice(&out.stdout).unwrap_or_default();
        let owned = rows.as_array().into_iter().flatten().any(|r| r["block"] == "spy" && r["owner"]["pid"] == child.id());
        if owned {
            return child;
        }
        if let Ok(Some(status)) = child.try_wait() {
            let mut err = String::new();
            if let Some(mut e) = child.stderr.take() {
                let _ = std::io::Read::read_to_string(&mut e, &mut err);
            }
            panic!("the capture ended ({status}) before it owned the spy: {err}");
        }
        assert!(Instant::now() < deadline, "the capture never owned the spy");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn a_plain_run_is_virtual_and_a_run_beside_a_live_capture_is_live() {
    let sim = Sim::start(&[]);
    let dir = tempfile::tempdir().expect("tempdir");
    // Nothing holds live time: virtual, no LIVE TIME note, the header says virtual time.
    let plain = dir.path().join("plain.json");
    let out = tlpx(&sim.selector(), &["bw", "--op", "write", "--sizes", "256", "--count", "20", "--output", plain.to_str().expect("path")]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(text(&out.stdout).contains("virtual time (deterministic)"), "{}", text(&out.stdout));
    let v = json_file(&plain);
    assert_eq!(v["time_mode"], "virtual");
    assert!(!has_live_note(&v), "{}", v["notes"]);
    let stats = dir.path().join("spy.json");
    assert!(tlpx(&sim.selector(), &["spy", "stats", "--output", stats.to_str().expect("path")]).status.success());
    assert_eq!(json_file(&stats)["time_mode"], "virtual");

    // The same run while another process's capture holds live time.
    let capture = live_capture(&sim, "cap.tlpx");
    let live = dir.path().join("live.json");
    let out = tlpx(&sim.selector(), &["bw", "--op", "write", "--sizes", "256", "--count", "20", "--output", live.to_str().expect("path")]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    assert!(stdout.contains("live time (another client holds it"), "{stdout}");
    assert!(stdout.contains("card time (simulated, live)"), "the clock names the mode: {stdout}");
    let v = json_file(&live);
    assert_eq!(v["time_mode"], "live");
    assert!(has_live_note(&v), "{}", v["notes"]);
    assert!(tlpx(&sim.selector(), &["spy", "stop"]).status.success());
    let done = capture.wait_with_output().expect("capture");
    assert!(done.status.success(), "{}", text(&done.stderr));

    // tlpx report shows the live run's note beside its figures.
    let html = dir.path().join("report.html");
    let out =
        Command::new(tlpx_bin()).args(["report", "-o", html.to_str().expect("path")]).arg(&plain).arg(&live).output().expect("report");
    assert!(out.status.success(), "{}", text(&out.stderr));
    let page = std::fs::read_to_string(&html).expect("report");
    assert_eq!(page.matches("LIVE TIME: the simulator ran in live time").count(), 1, "only the live result says it");
}

#[test]
fn a_live_client_that_dies_gives_live_time_up_and_the_simulator_goes_idle() {
    let sim = Sim::start(&[]);
    let mut probe = SimDevice::connect(sim.socket()).expect("probe");
    let mut capture = live_capture(&sim, "killed.tlpx");
    let s = probe.stats().expect("stats");
    assert_eq!(s.live_clients, 1, "the capture holds live time");
    // Card time runs with nobody waiting on the card... (the capture waits in slices too, so
    // the probe reads live cycles, which grow only in live time).
    let deadline = Instant::now() + Duration::from_secs(60);
    while probe.stats().expect("stats").live_cycles <= s.live_cycles {
        assert!(Instant::now() < deadline, "live cycles did not grow");
        std::thread::sleep(Duration::from_millis(10));
    }
    // ... until the process dies without a word (SIGKILL: no handler runs).
    capture.kill().expect("kill");
    let _ = capture.wait();
    let deadline = Instant::now() + Duration::from_secs(30);
    while probe.stats().expect("stats").live_clients != 0 {
        assert!(Instant::now() < deadline, "the dead capture still holds live time");
        std::thread::sleep(Duration::from_millis(10));
    }
    // Idle: nobody live, nobody waiting, so the counters stand still.
    let a = probe.stats().expect("stats");
    std::thread::sleep(Duration::from_millis(300));
    let b = probe.stats().expect("stats");
    assert_eq!((b.cycles, b.live_cycles), (a.cycles, a.live_cycles), "the simulator kept running after its live client died");
    assert!(b.clients.iter().all(|c| !c.live), "{:?}", b.clients);
}

#[test]
fn irq_and_loop_beside_a_live_capture_say_live_time_in_their_basis_not_virtual() {
    // Before: the header said live time, the next line "virtual: card time runs only while
    // tlpx waits ... NOT in these figures", and time_basis.kind was "sim_virtual".
    let sim = Sim::start(&[]);
    let dir = tempfile::tempdir().expect("tempdir");
    let capture = live_capture(&sim, "cap.tlpx");
    for (cmd, args) in [("irq", vec!["irq", "--samples", "10"]), ("loop", vec!["loop", "--iterations", "10"])] {
        let file = dir.path().join(format!("{cmd}.json"));
        let mut args = args.clone();
        args.extend(["--output", file.to_str().expect("path")]);
        let out = tlpx(&sim.selector(), &args);
        assert!(out.status.success(), "{cmd}: {}", text(&out.stderr));
        let stdout = text(&out.stdout);
        assert!(!stdout.contains("simulator, virtual time"), "{cmd}: {stdout}");
        assert!(stdout.contains("simulator, live time (another client holds it)"), "{cmd}: {stdout}");
        let v = json_file(&file);
        assert_eq!((v["time_mode"].as_str(), v["time_basis"]["kind"].as_str()), (Some("live"), Some("sim_live")), "{cmd}");
    }
    assert!(tlpx(&sim.selector(), &["spy", "stop"]).status.success());
    assert!(capture.wait_with_output().expect("capture").status.success());
}

#[test]
fn a_simulator_charging_real_host_time_gives_results_that_say_so() {
    // Before: tlpx-sim --host-time real (or --free-run) gave time_mode "virtual" and the
    // header "virtual time (deterministic)".
    for flags in [&["--host-time", "real"][..], &["--free-run"][..]] {
        let sim = Sim::start(flags);
        let out = tlpx(&sim.selector(), &["--json", "bw", "--op", "write", "--sizes", "256", "--count", "20"]);
        assert!(out.status.success(), "{flags:?}: {}", text(&out.stderr));
        let v: Value = serde_json::from_slice(&out.stdout).expect("JSON");
        assert_eq!(v["time_mode"], "real_host_time", "{flags:?}");
        let out = tlpx(&sim.selector(), &["bw", "--op", "write", "--sizes", "256", "--count", "20"]);
        let stdout = text(&out.stdout);
        assert!(
            stdout.contains("real host time (tlpx-sim --host-time real or --free-run") && !stdout.contains("deterministic"),
            "{stdout}"
        );
    }
}
