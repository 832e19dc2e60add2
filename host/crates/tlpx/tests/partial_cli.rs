//! Long commands stopped in the middle keep what they measured (issue 14): `tlpx rule30
//! sweep`, `tlpx irq` and `tlpx loop` against the real tlpx-sim, stopped by SIGINT (Ctrl-C),
//! SIGTERM or SIGKILL once their first point is finished. The result file must parse, follow
//! the schema, say it is partial and hold the finished points, and `tlpx report` must render
//! it marked PARTIAL. Also: the simulator's defaults are in `--help` and in the result's
//! parameters, and bad values are still refused by name.
//!
//! A point is known to be finished when the command's checkpoint (the result file written
//! as points finish, crate::checkpoint) appears: the signal is sent then, so no test depends
//! on how fast this machine runs the simulator.

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;
use tlpx_testkit::SimProcess as Sim;

use crate::common;
use common::{text, tlpx, tlpx_bin};

fn s(p: &Path) -> &str {
    p.to_str().expect("utf-8 path")
}

/// Starts `tlpx --device DEVICE ARGS` in the background.
fn spawn(device: &str, args: &[&str]) -> Child {
    Command::new(tlpx_bin())
        .arg("--device")
        .arg(device)
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start tlpx")
}

/// Waits until `file` holds a checkpoint (a finished point), or fails after `limit`.
fn wait_for_checkpoint(child: &mut Child, file: &Path, limit: Duration) -> Value {
    let deadline = Instant::now() + limit;
    loop {
        if let Ok(text) = std::fs::read_to_string(file) {
            let v: Value = serde_json::from_str(&text).expect("a checkpoint is whole JSON (written atomically)");
            assert_eq!(v["partial"]["state"], "checkpoint", "{}", v["partial"]);
            return v;
        }
        if let Some(status) = child.try_wait().expect("wait") {
            panic!("tlpx ended ({status}) before its first checkpoint");
        }
        assert!(Instant::now() < deadline, "no checkpoint in {} after {limit:?}", file.display());
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn signal(child: &Child, sig: libc::c_int) {
    // SAFETY: a signal to the child this test started (and has not reaped).
    let r = unsafe { libc::kill(child.id() as libc::pid_t, sig) };
    assert_eq!(r, 0, "kill failed");
}

/// Waits for the child's exit status, failing after a minute (a stop must not hang).
fn exit_code(child: &mut Child) -> Option<i32> {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if let Some(status) = child.try_wait().expect("wait") {
            return status.code();
        }
        assert!(Instant::now() < deadline, "tlpx did not stop within a minute of the signal");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Reads a result file and checks what every partial result must say.
fn partial_result(file: &Path, kind: &str, state: &str) -> Value {
    let v: Value = serde_json::from_str(&std::fs::read_to_string(file).expect("result written")).expect("JSON");
    assert_eq!(v["schema"], "tlpx-result");
    assert_eq!(v["kind"], kind);
    assert_eq!(v["interrupted"], true, "{}", v["partial"]);
    let p = &v["partial"];
    assert_eq!(p["state"], state, "{p}");
    let (done, planned) = (p["points_done"].as_u64().expect("points_done"), p["points_planned"].as_u64().expect("points_planned"));
    assert!(done >= 1 && done < planned, "{p}: at least the first point and not all of them");
    v
}

/// `tlpx report` renders the file and marks it partial, in the heading and the badge.
fn report_says_partial(file: &Path, dir: &Path) {
    let html = dir.join(format!("{}.html", file.file_stem().and_then(|n| n.to_str()).unwrap_or("r")));
    let out = Command::new(tlpx_bin()).args(["report", s(file), "-o", s(&html)]).output().expect("run tlpx report");
    assert!(out.status.success(), "report: {}", text(&out.stderr));
    let page = std::fs::read_to_string(&html).expect("page");
    assert!(page.contains("(PARTIAL)"), "the heading says PARTIAL");
    assert!(page.contains("points finished"), "the badge says how many points");
}

#[test]
fn rule30_sweep_ctrl_c_keeps_the_finished_points_and_sigkill_keeps_the_last_checkpoint() {
    let sim = Sim::start(&[]);
    let args = |dir: &Path| -> Vec<String> {
        ["rule30", "sweep", "--packets", "3", "--generations", "5", "--lengths", "8..1024/8", "--latencies", "10ns,1us", "--verify"]
            .iter()
            .map(ToString::to_string)
            .chain(["--out-dir".to_string(), s(dir).to_string()])
            .collect()
    };
    // Ctrl-C: the point in progress ends (or is dropped), the finished ones are written.
    let dir = sim.path("int");
    let file = dir.join("rule30-sweep.json");
    let a = args(&dir);
    let mut child = spawn(&sim.selector(), &a.iter().map(String::as_str).collect::<Vec<_>>());
    wait_for_checkpoint(&mut child, &file, Duration::from_secs(120));
    signal(&child, libc::SIGINT);
    assert_eq!(exit_code(&mut child), Some(130));
    let v = partial_result(&file, "rule30", "interrupted");
    let points = v["points"].as_array().expect("points");
    assert_eq!(points.len() as u64, v["partial"]["points_done"].as_u64().expect("done"));
    for p in points {
        assert_eq!(p["mismatches"], 0, "a finished point is whole: {p}");
        assert_eq!(p["verified_packets"], 3, "{p}");
    }
    assert_eq!(v["parameters"]["packets"], 3, "the values given are recorded");
    assert!(dir.join("rule30-landscape.svg").exists(), "the figures are drawn from the finished points");
    report_says_partial(&file, &dir);
    // SIGKILL: nothing runs at the end, the last checkpoint is what stays.
    let dir = sim.path("kill");
    let file = dir.join("rule30-sweep.json");
    let a = args(&dir);
    let mut child = spawn(&sim.selector(), &a.iter().map(String::as_str).collect::<Vec<_>>());
    let first = wait_for_checkpoint(&mut child, &file, Duration::from_secs(120));
    assert!(!first["points"].as_array().expect("points").is_empty());
    signal(&child, libc::SIGKILL);
    assert_eq!(exit_code(&mut child), None, "killed by a signal");
    let v = partial_result(&file, "rule30", "checkpoint");
    assert!(!v["points"].as_array().expect("points").is_empty());
    report_says_partial(&file, &dir);
    // The simulator and the accelerator are fine afterwards (the killed run's lease lapses).
    let out = tlpx(&sim.selector(), &["--json", "rule30", "run", "--mode", "hw-poll", "--packets", "2", "--generations", "3", "--verify"]);
    assert!(out.status.success(), "after the kill: {}", text(&out.stderr));
}

#[test]
fn irq_ctrl_c_keeps_the_finished_run_and_the_cut_one_marked() {
    let sim = Sim::start(&[]);
    let file = sim.path("irq.json");
    // The idle run is short; the loaded one (load threads on every CPU) takes long enough
    // that the signal, sent when the idle run's checkpoint appears, cuts it.
    let mut child = spawn(&sim.selector(), &["irq", "--samples", "1000", "--compare", "idle,loaded", "--output", s(&file)]);
    wait_for_checkpoint(&mut child, &file, Duration::from_secs(120));
    signal(&child, libc::SIGINT);
    assert_eq!(exit_code(&mut child), Some(130));
    let v = partial_result(&file, "irq", "interrupted");
    let runs = v["points"].as_array().expect("points");
    assert_eq!(v["partial"], serde_json::json!({"state": "interrupted", "points_done": 1, "points_planned": 2}));
    assert_eq!(runs[0]["condition"], "idle");
    assert_eq!(runs[0]["interrupted"], false);
    assert_eq!(runs[0]["interrupts_waited"], 1000);
    // The loaded run was cut (kept with what it measured), or stopped before its first wait.
    if let Some(cut) = runs.get(1) {
        assert_eq!(cut["interrupted"], true, "{}", cut["interrupts_waited"]);
        assert!(cut["interrupts_waited"].as_u64().expect("waited") < 1000);
    }
    report_says_partial(&file, &sim.path(""));
}

#[test]
fn loop_sigterm_keeps_the_finished_points() {
    let sim = Sim::start(&[]);
    let file = sim.path("loop.json");
    let mut child = spawn(&sim.selector(), &["loop", "--sweep", "--iterations", "2000", "--output", s(&file)]);
    wait_for_checkpoint(&mut child, &file, Duration::from_secs(120));
    // SIGTERM is a stop request like Ctrl-C (a service manager's, a batch system's).
    signal(&child, libc::SIGTERM);
    assert_eq!(exit_code(&mut child), Some(130));
    let v = partial_result(&file, "loop", "interrupted");
    let points = v["points"].as_array().expect("points");
    assert_eq!(v["partial"]["points_planned"], 40);
    assert_eq!(points.len() as u64, v["partial"]["points_done"].as_u64().expect("done"));
    for p in points {
        assert_eq!(p["verified"], true, "a kept point is a whole one: {}", p["size_bytes"]);
        assert_eq!(p["card"]["count"], 2000);
    }
    report_says_partial(&file, &sim.path(""));
}

#[test]
fn simulator_defaults_are_in_the_help_and_in_the_parameters() {
    let help = |args: &[&str]| text(&Command::new(tlpx_bin()).args(args).arg("--help").output().expect("help").stdout);
    assert!(help(&["rule30", "run"]).contains("[default: 1000 on hardware, 100 on the simulator]"));
    let sweep = help(&["rule30", "sweep"]);
    assert!(sweep.contains("[default: 1000 on hardware, 10 on the simulator]"), "{sweep}");
    assert!(sweep.contains("[default: 8..1024/8 on hardware, 8,16,32,64,128,256,512,1024 on the simulator]"), "{sweep}");
    assert!(help(&["irq"]).contains("[default: 1000 on hardware, 100 on the simulator]"));

    let sim = Sim::start(&[]);
    // On the simulator: its defaults, recorded.
    let out = tlpx(&sim.selector(), &["--json", "rule30", "run", "--mode", "sw-char,hw-multi"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let v: Value = serde_json::from_slice(&out.stdout).expect("JSON");
    assert_eq!(v["parameters"]["packets"], 100);
    assert_eq!(v["parameters"]["defaults_for"], "simulator");
    assert!(v["points"].as_array().expect("points").iter().all(|p| p["packets"] == 100));
    assert!(v.get("partial").is_none() && v["interrupted"] == false, "a whole run");
    let out = tlpx(&sim.selector(), &["--json", "irq"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let v: Value = serde_json::from_slice(&out.stdout).expect("JSON");
    assert_eq!(v["parameters"]["amount"], serde_json::json!({"samples": 100}));
    assert_eq!(v["parameters"]["defaults_for"], "simulator");
    assert_eq!(v["points"][0]["interrupts_waited"], 100);
    // A software-only run never opens the card: a PCI address (hardware) keeps the seed's
    // 1000 packets, measured on this host's CPU.
    let out = tlpx("0000:7f:1f.7", &["--json", "rule30", "run", "--mode", "sw-fast", "--generations", "3"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let v: Value = serde_json::from_slice(&out.stdout).expect("JSON");
    assert_eq!(v["parameters"]["packets"], 1000);
    assert_eq!(v["parameters"]["defaults_for"], "hardware");
    // The sweep's defaults, without running it: the plan is in the result of a software-only
    // sweep of one length (lengths given, packets from the simulator's default).
    let dir = sim.path("sw");
    let out = tlpx(&sim.selector(), &["--json", "rule30", "sweep", "--mode", "sw-fast", "--lengths", "8", "--out-dir", s(&dir)]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let v: Value = serde_json::from_slice(&out.stdout).expect("JSON");
    assert_eq!(v["parameters"]["packets"], 10);
    assert_eq!(v["parameters"]["lengths"], serde_json::json!([8]));
}

#[test]
fn bad_values_are_still_refused_by_name() {
    let sim = Sim::start(&[]);
    for (args, needle) in [
        (&["rule30", "run", "--packets", "0"][..], "--packets"),
        (&["rule30", "sweep", "--packets", "-3"][..], "--packets"),
        (&["rule30", "sweep", "--lengths", "0"][..], "--lengths: packet length 0 is outside 1..=1024 bits"),
        (&["rule30", "sweep", "--lengths", "lots"][..], "\"lots\""),
        (&["irq", "--samples", "0"][..], "--samples"),
        (&["irq", "--samples", "10", "--duration", "1ms"][..], "--duration"),
        (&["loop", "--iterations", "0"][..], "--iterations"),
    ] {
        let out = tlpx(&sim.selector(), args);
        let err = text(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains(needle), "{args:?}: {err}");
        assert!(!err.contains("panicked"), "{args:?}: {err}");
    }
    // An unknown device is refused before any default is picked.
    let out = tlpx("nonsense", &["rule30", "run", "--mode", "sw-char"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("unknown device selector \"nonsense\""), "{}", text(&out.stderr));
}
