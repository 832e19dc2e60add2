//! `tlpx irq` end to end with the real binary and the real tlpx-sim.
//!
//!   tlpx irq ──► tlpx-sim (card: interrupt timer) ──MSI──► measuring thread ──ack_user──► card
//!            ◄── sample ring ── JSON result, SVG histogram, terminal histograms
//!
//! The result must account for every fire (histogram counts = fires, no unexplained gap in
//! the sample sequence), a host that deliberately skips acknowledgements must get exactly
//! those overruns, the output must say what is modelled and what is real host time, and bad
//! arguments must be refused with a message naming the value and exit status 2.

use std::path::PathBuf;
use std::process::{Command, Output};

use serde_json::Value;
use tlpx_testkit::SimProcess as Sim;

use crate::common;
use common::text;

fn tlpx(device: &str, args: &[&str]) -> Output {
    Command::new(PathBuf::from(env!("CARGO_BIN_EXE_tlpx"))).arg("--device").arg(device).args(args).output().expect("run tlpx")
}

fn user_stage(point: &Value) -> &Value {
    point["stages"].as_array().expect("stages").iter().find(|s| s["stage"] == "user").expect("user stage")
}

#[test]
fn every_fire_is_counted_and_the_result_says_what_is_modelled() {
    let sim = Sim::start(&[]);
    let json = sim.path("irq.json");
    let svg = sim.path("irq.svg");
    let out = tlpx(
        &sim.selector(),
        &[
            "irq",
            "--samples",
            "300",
            "--min",
            "10us",
            "--max",
            "30us",
            "--output",
            json.to_str().expect("path"),
            "--svg",
            svg.to_str().expect("path"),
        ],
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    let log = text(&out.stdout);
    assert!(log.contains("virtual time") && log.contains("NOT in these figures"), "{log}");
    assert!(log.contains("p99.9") && log.contains("user stage") && log.contains("isr stage: not measured"), "{log}");
    assert!(log.contains(" |#"), "a terminal histogram: {log}");
    let doc: Value = serde_json::from_str(&std::fs::read_to_string(&json).expect("result")).expect("JSON");
    assert_eq!(doc["kind"], "irq");
    assert_eq!(doc["time_basis"]["kind"], "sim_virtual");
    let p = &doc["points"][0];
    let fires = p["counters"]["fires"].as_u64().expect("fires");
    assert_eq!(fires, 300);
    assert_eq!(p["interrupts_waited"], 300);
    let hist: u64 = user_stage(p)["card"]["histogram"].as_array().expect("histogram").iter().map(|v| v.as_u64().expect("count")).sum();
    assert_eq!(hist, fires, "the card's histogram counts every fire");
    assert_eq!(user_stage(p)["latency_ns"]["count"], 300);
    assert_eq!(p["sequence"]["missing"], 0);
    assert_eq!(p["unexplained_missing"], 0);
    assert_eq!((p["counters"]["overruns"].as_u64(), p["counters"]["lost"].as_u64()), (Some(0), Some(0)));
    assert_eq!(p["user_cycles"].as_array().expect("samples").len(), 300);
    assert!(p["ping_cycles"].as_u64().expect("ping") > 0);
    let figure = std::fs::read_to_string(&svg).expect("svg");
    assert!(figure.starts_with("<svg") && figure.contains("simulated"), "{}", &figure[..200.min(figure.len())]);
    assert!(figure.contains("Interrupt user stage (no dispatch simulated)"), "{}", &figure[..400.min(figure.len())]);
    // The user stage keeps its samples: bins chosen from them, said on the axis, ticks in time.
    assert!(figure.contains("bins of") || figure.contains("log bins"), "data bins: {figure}");
    assert!(figure.contains("from the samples") && !figure.contains("log2"), "{figure}");
    assert!(figure.contains(" ns</text>") || figure.contains(" µs</text>"), "ticks in ns or µs");
}

#[test]
fn skipped_acknowledgements_become_overruns_and_compare_runs_both() {
    let sim = Sim::start(&[]);
    let out = tlpx(
        &sim.selector(),
        &[
            "--json",
            "irq",
            "--samples",
            "100",
            "--period",
            "20us",
            "--no-ack",
            "7",
            "--compare",
            "idle,loaded",
            "--load",
            "cpu",
            "--load-cpus",
            "0",
        ],
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    let doc: Value = serde_json::from_slice(&out.stdout).expect("JSON");
    let points = doc["points"].as_array().expect("points");
    assert_eq!(points.len(), 2);
    assert_eq!((points[0]["condition"].as_str(), points[1]["condition"].as_str()), (Some("idle"), Some("loaded")));
    for p in points {
        assert_eq!(p["counters"]["fires"], 100);
        assert_eq!(p["counters"]["overruns"], 7, "{p}");
        let hist: u64 = user_stage(p)["card"]["histogram"].as_array().expect("h").iter().map(|v| v.as_u64().expect("n")).sum();
        assert_eq!(hist + 7, 100, "acknowledged samples plus overruns are the fires");
        assert_eq!(p["unexplained_missing"], 0);
        let overrun_samples =
            p["user_cycles"].as_array().expect("samples").iter().filter(|v| v.as_u64() == Some(u64::from(u32::MAX))).count();
        assert_eq!(overrun_samples, 7);
    }
    assert_eq!(points[1]["load"][0], "cpu");
}

/// Idle against loaded on the simulator shows no host's interrupt dispatch: in virtual time
/// the two are the same by construction, with real host time they are this machine's
/// scheduling of the simulator and tlpx. The output says so where the figures are, and the
/// result records it.
#[test]
fn an_idle_loaded_comparison_on_the_simulator_says_what_it_can_show() {
    let sim = Sim::start(&[]);
    let json = sim.path("irq.json");
    let args = ["irq", "--samples", "30", "--period", "20us", "--compare", "idle,loaded", "--load", "cpu", "--load-cpus", "0"];
    let out = tlpx(&sim.selector(), &[&args[..], &["--output", json.to_str().expect("path")]].concat());
    assert!(out.status.success(), "{}", text(&out.stderr));
    let log = text(&out.stdout);
    assert!(
        log.contains("what this comparison shows: idle and loaded are the same by construction in virtual time")
            && log.contains("load cannot change these figures"),
        "{log}"
    );
    assert!(log.contains("user stage (fire to ack arriving, card clock)"), "{log}");
    assert!(log.contains("clock: figures below are card time (simulated, virtual"), "{log}");
    let doc: Value = serde_json::from_str(&std::fs::read_to_string(&json).expect("result")).expect("JSON");
    assert_eq!(doc["comparison"]["shows_host_load"], false, "{}", doc["comparison"]);
    assert!(doc["time_basis"]["clock"].as_str().is_some_and(|c| c.contains("virtual")));
    let ids: Vec<&str> = doc["simulator_limits"].as_array().expect("limits").iter().filter_map(|l| l["id"].as_str()).collect();
    assert_eq!(ids, ["interrupt_dispatch_not_modelled", "idle_vs_loaded_identical_in_virtual_time"]);

    // With real host time: this machine's scheduling, not interrupt dispatch.
    let real = Sim::start(&["--host-time", "real"]);
    let out = tlpx(
        &real.selector(),
        &[
            "--json",
            "irq",
            "--samples",
            "10",
            "--min",
            "200us",
            "--max",
            "300us",
            "--compare",
            "idle,loaded",
            "--load",
            "cpu",
            "--load-cpus",
            "0",
        ],
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    let doc: Value = serde_json::from_slice(&out.stdout).expect("JSON");
    let c = doc["comparison"]["statement"].as_str().expect("a comparison statement");
    assert!(c.contains("how this machine's") && c.contains("not a host's interrupt dispatch"), "{c}");
    assert!(doc["simulator_limits"].as_array().expect("limits").iter().any(|l| l["id"] == "idle_vs_loaded_is_this_machines_scheduling"));
    // A lone run has no comparison.
    let one: Value = serde_json::from_slice(&tlpx(&sim.selector(), &["--json", "irq", "--samples", "5"]).stdout).expect("JSON");
    assert!(one["comparison"].is_null(), "{}", one["comparison"]);
}

#[test]
fn bad_arguments_are_refused_with_exit_2() {
    let sim = Sim::start(&[]);
    let cases: &[(&[&str], &str)] = &[
        (&["irq", "--samples", "0"], "'0' for '--samples <SAMPLES>': 0 is out of range; accepted: a whole number in 1..="),
        (&["irq", "--min", "100us", "--max", "10us"], "inverted"),
        (&["irq", "--cpu", "4096"], "CPU 4096 does not exist"),
        (&["irq", "--load", "cpu", "--load-cpus", "9999"], "CPU 9999"),
        (&["irq", "--period", "0us"], "--period"),
        (&["irq", "--samples", "5", "--no-ack", "5"], "--no-ack 5"),
        (&["irq", "--fifo", "0"], "--fifo"),
    ];
    for (args, expected) in cases {
        let out = tlpx(&sim.selector(), args);
        let err = text(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains(expected), "{args:?}: {err}");
    }
    // The CPU error lists the CPUs that exist.
    let err = text(&tlpx(&sim.selector(), &["irq", "--cpu", "4096"]).stderr);
    assert!(err.contains("the CPUs are 0"), "{err}");
}

#[test]
fn a_duration_run_accounts_for_every_fire() {
    let sim = Sim::start(&[]);
    let out = tlpx(&sim.selector(), &["--json", "irq", "--duration", "3ms", "--min", "10us", "--max", "50us"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let doc: Value = serde_json::from_slice(&out.stdout).expect("JSON");
    let p = &doc["points"][0];
    let fires = p["counters"]["fires"].as_u64().expect("fires");
    // 3 ms of card time at 10..50 us per interval, plus the fire that may be pending at stop.
    assert!((60..=301).contains(&fires), "{fires}");
    let hist: u64 = user_stage(p)["card"]["histogram"].as_array().expect("h").iter().map(|v| v.as_u64().expect("n")).sum();
    assert_eq!(hist + p["counters"]["overruns"].as_u64().expect("overruns"), fires);
    assert_eq!(p["user_cycles"].as_array().expect("samples").len() as u64, fires);
    assert_eq!(p["unexplained_missing"], 0);
}

#[test]
fn with_real_host_time_the_output_says_host_time_is_included() {
    let sim = Sim::start(&["--host-time", "real"]);
    let out = tlpx(&sim.selector(), &["irq", "--samples", "40", "--min", "300us", "--max", "600us"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let log = text(&out.stdout);
    assert!(log.contains("host time real") && log.contains("PLUS the real wake-up"), "{log}");
    assert!(log.contains("fires 40"), "{log}");
}

/// The CPUs this test process may run on (its affinity), which `--cpus all` selects too.
fn allowed_cpus() -> Vec<u64> {
    // /proc/self/status: "Cpus_allowed_list:\t0-1".
    let status = std::fs::read_to_string("/proc/self/status").expect("status");
    let list = status.lines().find_map(|l| l.strip_prefix("Cpus_allowed_list:")).expect("Cpus_allowed_list").trim().to_string();
    list.split(',')
        .flat_map(|part| {
            let (a, b) = part.split_once('-').unwrap_or((part, part));
            a.parse::<u64>().expect("cpu")..=b.parse::<u64>().expect("cpu")
        })
        .collect()
}

#[test]
fn a_per_cpu_run_deals_the_fires_to_every_cpu_and_each_wakes_on_its_own() {
    // Real host time: each CPU's figure holds the wake-up of the thread pinned there.
    let sim = Sim::start(&["--host-time", "real"]);
    let json = sim.path("percpu.json");
    let cpus = allowed_cpus();
    let n = 12 * cpus.len() as u64;
    let samples = n.to_string();
    let out = tlpx(
        &sim.selector(),
        &[
            "irq",
            "--samples",
            &samples,
            "--min",
            "2ms",
            "--max",
            "4ms",
            "--cpus",
            "all",
            // SCHED_FIFO (where permitted) lets each thread preempt the simulator on its CPU:
            // without it, on a loaded machine, every fire of a CPU can overrun.
            "--fifo",
            "50",
            "--output",
            json.to_str().expect("path"),
        ],
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    let log = text(&out.stdout);
    assert!(log.contains("per CPU (user stage per CPU") && log.contains("socket"), "{log}");
    let doc: Value = serde_json::from_str(&std::fs::read_to_string(&json).expect("result")).expect("JSON");
    assert_eq!(doc["parameters"]["cpus"].as_array().expect("cpus").iter().map(|c| c.as_u64().expect("cpu")).collect::<Vec<_>>(), cpus);
    let p = &doc["points"][0];
    assert_eq!(p["counters"]["fires"].as_u64(), Some(n));
    let per_cpu = p["per_cpu"].as_array().expect("per_cpu");
    assert_eq!(per_cpu.len(), cpus.len());
    for (c, want) in per_cpu.iter().zip(&cpus) {
        assert_eq!(c["cpu"].as_u64(), Some(*want));
        // Dealt in turn: every CPU takes n / k fires.
        assert_eq!(c["fires"].as_u64(), Some(12), "{c}");
        assert_eq!(c["woke_elsewhere"].as_u64(), Some(0), "pinned: every wake-up on its CPU: {c}");
        let acked = c["fires"].as_u64().expect("fires") - c["overruns"].as_u64().expect("overruns");
        assert_eq!(c["user_ns"]["count"].as_u64().unwrap_or(0), acked, "{c}");
    }
    // A latency on some CPU at least. Not on each: with the other tests' simulators on the same
    // CPUs, every fire of one CPU can overrun (its record, dealt to it, is still there, and its
    // thread's wake-up is still checked below).
    let acked: u64 = per_cpu.iter().map(|c| c["user_ns"]["count"].as_u64().unwrap_or(0)).sum();
    assert!(acked > 0, "{per_cpu:?}");
    // Every sample keeps its CPU, and the CPU it woke on is that one.
    let asked: Vec<u64> = p["sample_cpus"].as_array().expect("sample_cpus").iter().map(|v| v.as_u64().expect("cpu")).collect();
    let woke: Vec<u64> = p["woke_cpus"].as_array().expect("woke_cpus").iter().map(|v| v.as_u64().expect("cpu")).collect();
    assert_eq!((asked.len() as u64, woke.len() as u64), (n, n));
    for (i, (a, w)) in asked.iter().zip(&woke).enumerate() {
        assert_eq!(*a, cpus[i % cpus.len()], "fire {} dealt in turn", i + 1);
        assert_eq!(w, a, "sample {i} woke on CPU {w}, its thread is pinned on {a}");
    }
    let path = json.to_str().expect("path");
    // tlpx diff: per-CPU rows across documents, and the CPUs of one document against the first.
    let across = Command::new(PathBuf::from(env!("CARGO_BIN_EXE_tlpx"))).args(["diff", path, path]).output().expect("diff");
    assert_eq!(across.status.code(), Some(0), "{}", text(&across.stderr));
    let rows = text(&across.stdout);
    for c in &cpus {
        assert!(rows.contains(&format!("idle user, CPU {c} (median)")), "{rows}");
    }
    let within = Command::new(PathBuf::from(env!("CARGO_BIN_EXE_tlpx"))).args(["diff", path]).output().expect("diff");
    let rows = text(&within.stdout);
    if cpus.len() > 1 {
        assert!(matches!(within.status.code(), Some(0 | 1)), "{}", text(&within.stderr));
        assert!(rows.contains(&format!("CPU {} against CPU {} (median)", cpus[1], cpus[0])), "{rows}");
    } else {
        assert_eq!(within.status.code(), Some(2), "one CPU: nothing to compare within");
    }
    // tlpx report: the per-CPU table and figure.
    let html = sim.path("percpu.html");
    let report = Command::new(PathBuf::from(env!("CARGO_BIN_EXE_tlpx")))
        .args(["report", path, "--output", html.to_str().expect("path")])
        .output()
        .expect("report");
    assert!(report.status.success(), "{}", text(&report.stderr));
    let page = std::fs::read_to_string(&html).expect("page");
    assert!(
        page.contains("Interrupt latency per CPU, user stage")
            && (page.contains("SIMULATED: the thread&#x27;s wake-up") || page.contains("SIMULATED: the thread's wake-up")),
        "per-CPU table"
    );
    assert!(page.contains(&format!("idle CPU {}", cpus[0])), "per-CPU rows and series");
}

#[test]
fn with_vectors_granted_each_cpu_waits_on_its_own_vector_and_each_fire_raises_it() {
    // Two CPUs' worth of vectors from either MSI-X or multi-message MSI; virtual time (only
    // the routing is checked here). The fires rotate over vectors 8, 9: fire n raises vector
    // 8 + (n-1) mod 2 and the thread of the ((n-1) mod 2)-th CPU, waiting on that vector
    // alone, takes it (a fire on the wrong vector would never wake its thread: the run would
    // time out instead of acknowledging it).
    let cpus = allowed_cpus();
    let list = cpus.iter().map(u64::to_string).collect::<Vec<_>>().join(",");
    for (flags, mode) in [(["--msix", "32"], "msi-x"), (["--msi-vectors", "32"], "msi-multi")] {
        let sim = Sim::start(&flags);
        let json = sim.path("vectors.json");
        let out = tlpx(&sim.selector(), &["irq", "--samples", "20", "--cpus", &list, "--output", json.to_str().expect("path")]);
        assert!(out.status.success(), "{flags:?}: {}", text(&out.stderr));
        let log = text(&out.stdout);
        assert!(log.contains("steering: one vector per CPU") && log.contains("nothing is steered"), "{log}");
        let doc: Value = serde_json::from_str(&std::fs::read_to_string(&json).expect("result")).expect("JSON");
        let p = &doc["points"][0];
        assert_eq!(p["steering"]["mode"], "per_cpu_vectors", "{flags:?}: {}", p["steering"]);
        assert_eq!(p["steering"]["granted"]["mode"], mode, "{}", p["steering"]);
        for (i, c) in p["per_cpu"].as_array().expect("per_cpu").iter().enumerate() {
            assert_eq!(c["vector"].as_u64(), Some(8 + i as u64), "{c}");
            assert_eq!(c["fires"].as_u64(), Some(20 / cpus.len() as u64), "{c}");
        }
        let vectors: Vec<u64> = p["sample_vectors"].as_array().expect("sample_vectors").iter().map(|v| v.as_u64().expect("v")).collect();
        assert_eq!(vectors.len(), 20);
        for (i, v) in vectors.iter().enumerate() {
            assert_eq!(*v, 8 + (i % cpus.len()) as u64, "fire {} raised vector {v}", i + 1);
        }
    }
    // One vector (the default card, as stock drivers take it): every thread waits on vector 0.
    let log = per_cpu_run_on(&[]);
    assert!(log.contains("steering: one vector for every CPU") && log.contains("1 granted (Msi)"), "{log}");
}

/// `tlpx irq --samples 10 --cpus <every allowed CPU>` on a simulator started with `sim_args`;
/// its output (the run must succeed).
fn per_cpu_run_on(sim_args: &[&str]) -> String {
    let list = allowed_cpus().iter().map(u64::to_string).collect::<Vec<_>>().join(",");
    let sim = Sim::start(sim_args);
    let out = tlpx(&sim.selector(), &["irq", "--samples", "10", "--cpus", &list]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    text(&out.stdout)
}

#[test]
fn a_partial_multi_message_grant_falls_back_to_one_vector_and_still_measures_every_cpu() {
    // 4 vectors granted for the 10 a 2-CPU run asks: the timer's own vector (4) would fold
    // into 3, where nobody waits; tlpx goes back to one vector and says so.
    let log = per_cpu_run_on(&["--msi-vectors", "4"]);
    assert!(log.contains("steering: one vector for every CPU") && log.contains("back to 1 vector (Msi)"), "{log}");
}

#[test]
fn per_cpu_layouts_print_rtla_and_cyclictest_columns() {
    let sim = Sim::start(&[]);
    let cpus = allowed_cpus();
    let list = cpus.iter().map(u64::to_string).collect::<Vec<_>>().join(",");
    let out =
        tlpx(&sim.selector(), &["irq", "--samples", "20", "--cpus", &list, "--layout", "rtla", "--bucket-size", "50", "--entries", "8"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let log = text(&out.stdout);
    let head = log.lines().find(|l| l.starts_with("Index")).unwrap_or_else(|| panic!("no Index row: {log}"));
    let want: Vec<String> = cpus.iter().map(|c| format!("Thr-{c:03}")).collect();
    assert_eq!(head.split_whitespace().skip(1).collect::<Vec<_>>(), want, "{log}");
    let count = log.lines().find(|l| l.starts_with("count:")).expect("count row");
    let total: u64 = count.split_whitespace().skip(1).map(|v| v.parse::<u64>().expect("count")).sum();
    assert_eq!(total, 20, "{log}");
    // Virtual time: the modelled link, 22 or 23 cycles (176 or 184 ns) for every sample: bucket 3 of 50 ns.
    assert!(log.lines().any(|l| l.starts_with("150 ")), "{log}");
    let out = tlpx(&sim.selector(), &["irq", "--samples", "20", "--cpus", &list, "--layout", "cyclictest", "--entries", "4"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let log = text(&out.stdout);
    assert!(log.contains("# Histogram\n000000 ") && log.contains("# Max Latencies:") && log.contains("# Histogram Overflows:"), "{log}");
}

#[test]
fn a_cpu_that_is_not_online_is_refused_before_the_card_is_touched() {
    // No simulator at this socket: the refusal comes before anything opens it.
    let out = tlpx("sim:/nonexistent/tlpx.sock", &["irq", "--cpus", "0,4095"]);
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("CPU 4095 does not exist or is offline") && err.contains("the online CPUs are 0"), "{err}");
    assert!(!err.contains("no simulated card"), "{err}");
    let out = tlpx("sim:/nonexistent/tlpx.sock", &["irq", "--cpus", "0,0"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("CPU 0 twice"));
    let out = tlpx("sim:/nonexistent/tlpx.sock", &["irq", "--cpus", "0", "--cpu", "0"]);
    assert_eq!(out.status.code(), Some(2), "--cpus and --cpu exclude each other");
}
