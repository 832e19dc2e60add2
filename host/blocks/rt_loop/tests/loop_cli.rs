//! `tlpx loop` end to end with the real binary and the real tlpx-sim.
//!
//!   tlpx loop ──► tlpx-sim (card: rt_loop writes buffers) ──► measuring thread polls / waits
//!             ◄── checksum by register write or doorbell + DMA read ── JSON, SVG, table
//!
//! Every point must be verified by the card (checksums end to end, every iteration counted),
//! the sweep must cover sizes × detection × return × idle/loaded, the output must say what is
//! modelled, SCHED_FIFO refused must be said and carried on from, and bad arguments refused.

use std::path::PathBuf;
use std::process::{Command, Output};

use serde_json::Value;
use tlpx_testkit::SimProcess as Sim;

use crate::common;
use common::text;

fn tlpx_command(device: &str, args: &[&str]) -> Command {
    let mut c = Command::new(PathBuf::from(env!("CARGO_BIN_EXE_tlpx")));
    c.arg("--device").arg(device).args(args);
    c
}

fn tlpx(device: &str, args: &[&str]) -> Output {
    tlpx_command(device, args).output().expect("run tlpx")
}

fn hist_sum(p: &Value) -> u64 {
    p["card"]["histogram"].as_array().expect("histogram").iter().map(|v| v.as_u64().expect("count")).sum()
}

#[test]
fn the_sweep_covers_sizes_modes_and_load_with_every_checksum_verified() {
    let sim = Sim::start(&[]);
    let json = sim.path("loop.json");
    let svg = sim.path("loop.svg");
    let out = tlpx(
        &sim.selector(),
        &[
            "loop",
            "--sweep",
            "--iterations",
            "12",
            "--load",
            "syscall",
            "--load-cpus",
            "0",
            "--verify",
            "--output",
            json.to_str().expect("path"),
            "--svg",
            svg.to_str().expect("path"),
        ],
    );
    assert!(out.status.success(), "{}\n{}", text(&out.stdout), text(&out.stderr));
    let log = text(&out.stdout);
    assert!(log.contains("virtual time") && log.contains("NOT in it"), "{log}");
    assert!(log.contains("all points") && log.contains("jitter"), "{log}");
    let doc: Value = serde_json::from_str(&std::fs::read_to_string(&json).expect("result")).expect("JSON");
    assert_eq!(doc["kind"], "loop");
    assert_eq!(doc["time_basis"]["kind"], "sim_virtual");
    assert_eq!(doc["environment"]["sim"]["host_time"], "virtual");
    let points = doc["points"].as_array().expect("points");
    assert_eq!(points.len(), 5 * 2 * 2 * 2, "sizes x detect x return x idle/loaded");
    let mut seen = std::collections::BTreeSet::new();
    for p in points {
        assert_eq!(p["verified"], true, "{p}");
        assert_eq!(p["card"]["count"], 12);
        assert_eq!(p["card"]["mismatches"], 0);
        assert_eq!(p["data_errors"], 0);
        assert_eq!(hist_sum(p), 12, "the histogram counts every iteration");
        assert_eq!(p["loop_cycles"].as_array().expect("samples").len(), 12);
        let s = &p["loop_ns"];
        assert!(s["min"].as_f64() <= s["median"].as_f64() && s["median"].as_f64() <= s["max"].as_f64(), "{s}");
        assert_eq!(p["return_read_mean_ns"].is_number(), p["return"] == "dma", "{p}");
        seen.insert((
            p["size_bytes"].as_u64().expect("size"),
            p["detect"].as_str().expect("detect").to_string(),
            p["return"].as_str().expect("return").to_string(),
            p["condition"].as_str().expect("condition").to_string(),
        ));
    }
    assert_eq!(seen.len(), 40, "every combination once");
    // A bigger buffer takes longer to write: the 4 KiB loop is slower than the 8 B one.
    let median = |size: u64| {
        points
            .iter()
            .find(|p| p["size_bytes"] == size && p["detect"] == "irq" && p["return"] == "register" && p["condition"] == "idle")
            .and_then(|p| p["loop_ns"]["median"].as_f64())
            .expect("point")
    };
    assert!(median(4096) > median(8) + 1000.0, "8 B: {} ns, 4 KiB: {} ns", median(8), median(4096));
    let figure = std::fs::read_to_string(&svg).expect("svg");
    assert!(figure.starts_with("<svg") && figure.contains("simulated"), "{}", &figure[..200.min(figure.len())]);
    // In virtual time idle equals loaded and irq beats polling by construction: said where the
    // table is, and recorded.
    assert!(log.contains("what idle vs loaded shows: idle and loaded are the same by construction in virtual time"), "{log}");
    assert!(log.contains("load cannot change these figures"), "{log}");
    assert!(log.contains("what irq vs poll shows: irq against poll detection in virtual time"), "{log}");
    assert!(log.contains("loop time (card time (simulated, virtual"), "the clock is named: {log}");
    assert_eq!(doc["comparison"]["shows_host_load"], false);
    assert!(doc["detection"].as_str().is_some_and(|d| d.contains("quantised to 200 ns")), "{}", doc["detection"]);
    let ids: Vec<&str> = doc["simulator_limits"].as_array().expect("limits").iter().filter_map(|l| l["id"].as_str()).collect();
    assert_eq!(ids, ["idle_vs_loaded_identical_in_virtual_time", "irq_vs_poll_detection"]);
}

#[test]
fn a_sweep_keeps_an_explicit_compare_idle() {
    // A loaded run repeats the idle one in virtual time: --sweep --compare idle runs the
    // 20 idle points only, and no comparison is claimed.
    let sim = Sim::start(&[]);
    let out = tlpx(&sim.selector(), &["--json", "loop", "--sweep", "--compare", "idle", "--iterations", "3"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let doc: Value = serde_json::from_slice(&out.stdout).expect("JSON");
    let points = doc["points"].as_array().expect("points");
    assert_eq!(points.len(), 5 * 2 * 2);
    assert!(points.iter().all(|p| p["condition"] == "idle" && p["verified"] == true));
    assert!(doc["comparison"].is_null());
    assert!(doc["detection"].is_string(), "both detections ran: {}", doc["detection"]);
}

#[test]
fn sched_fifo_refused_is_said_and_the_run_carries_on() {
    let sim = Sim::start(&[]);
    // No CAP_SYS_NICE (dropped from the bounding set when root) and RLIMIT_RTPRIO 0: the
    // kernel refuses SCHED_FIFO, as for an ordinary user.
    let root = unsafe { libc::geteuid() } == 0;
    let tlpx_bin = PathBuf::from(env!("CARGO_BIN_EXE_tlpx"));
    let mut c = Command::new("prlimit");
    c.arg("--rtprio=0:0").arg("--");
    if root {
        c.args(["setpriv", "--inh-caps=-sys_nice", "--bounding-set=-sys_nice", "--"]);
    }
    c.arg(&tlpx_bin).args(["--device", &sim.selector(), "--json", "loop", "--iterations", "5", "--fifo", "50", "--cpu", "0"]);
    let out = c.output().expect("run prlimit");
    assert!(out.status.success(), "{}", text(&out.stderr));
    let err = text(&out.stderr);
    assert!(err.contains("SCHED_FIFO priority 50 not permitted") && err.contains("carrying on"), "{err}");
    let doc: Value = serde_json::from_slice(&out.stdout).expect("JSON");
    let p = &doc["points"][0];
    assert_eq!(p["verified"], true);
    assert!(p["fifo_priority"].is_null(), "the priority was not granted: {p}");
    assert_eq!(p["pinned_cpu"], 0);
    assert!(p["notes"][0].as_str().expect("note").contains("not permitted"), "{p}");
}

#[test]
fn bad_arguments_are_refused_with_exit_2() {
    let sim = Sim::start(&[]);
    let cases: [(&[&str], &str); 6] = [
        (&["loop", "--iterations", "0"], "'0' for '--iterations <ITERATIONS>': 0 is out of range; accepted: a whole number in 1..="),
        (&["loop", "--size", "6"], "--size 6"),
        (&["loop", "--size", "8K"], "--size 8192"),
        (&["loop", "--cpu", "4096"], "CPU 4096 does not exist"),
        (&["loop", "--load-cpus", "0"], "no --load says which"),
        (&["loop", "--detect", "sometimes"], "sometimes"),
    ];
    for (args, want) in cases {
        let out = tlpx(&sim.selector(), args);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {}", text(&out.stderr));
        let err = text(&out.stderr);
        assert!(err.contains(want), "{args:?}: {err}");
        assert!(!err.contains("panicked"), "{err}");
    }
}

#[test]
fn pmc_counts_the_measuring_thread_or_says_why_not() {
    let sim = Sim::start(&[]);
    let out = tlpx(&sim.selector(), &["--pmc", "--json", "loop", "--iterations", "5"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let doc: Value = serde_json::from_slice(&out.stdout).expect("JSON");
    let records = doc["pmc"].as_array().expect("a pmc field with --pmc");
    let thread = records.iter().find(|r| r["label"] == "measuring thread (tlpx-loop)").expect("the measuring thread's record");
    match thread["reading"].as_object() {
        // Counters available: the thread ran instructions.
        Some(r) => assert!(r["instructions"].as_u64().unwrap_or(0) > 0 || r["cycles"].as_u64().unwrap_or(0) > 0, "{thread}"),
        // Refused (a VM without a PMU, paranoid settings): the reason is given, once on stderr.
        None => {
            let note = thread["note"].as_str().expect("a reason");
            assert!(note.contains("perf_event_open") || note.contains("perf_event_paranoid"), "{note}");
            assert_eq!(text(&out.stderr).matches("carrying on without counters").count(), 1, "{}", text(&out.stderr));
        }
    }
    // Without --pmc there is no pmc field.
    let plain: Value = serde_json::from_slice(&tlpx(&sim.selector(), &["--json", "loop", "--iterations", "3"]).stdout).expect("JSON");
    assert!(plain.get("pmc").is_none());
}
