//! The measurement commands (bw, lat, pio, characterize) end to end on the simulated card.
//!
//!   tlpx bw/lat/pio/characterize ──socket + shared memory──► tlpx-sim ──► Verilated card
//!                                                              (generator, PIO window)
//!
//! Each test starts its own simulator, runs the real binary with small sweeps (each test
//! takes well under 10 s) and checks what a user relies on: the result document follows
//! the schema, data is checked in both directions, the card's counters agree with what was
//! asked, efficiency against the model is there and plausible, errors are counted and the
//! exit code says so, bad input is a clear error with exit code 2.

use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;
use tlpx_testkit::SimProcess as Sim;

use crate::common;
use common::{tlpx, tlpx_bin};

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The JSON document of a successful run, checked against the result schema.
fn doc(out: &Output, kind: &str) -> Value {
    assert!(out.status.success(), "tlpx failed ({:?}): {}\n{}", out.status.code(), stderr(out), stdout(out));
    let v: Value = serde_json::from_slice(&out.stdout).expect("tlpx printed JSON");
    check_schema(&v, kind);
    v
}

/// The schema every result follows (docs/bandwidth.md, src/results.rs).
fn check_schema(v: &Value, kind: &str) {
    assert_eq!(v["schema"], "tlpx-result", "{v}");
    assert_eq!(v["schema_version"], 1);
    assert_eq!(v["kind"], kind);
    for f in ["created", "command", "parameters", "environment", "link", "points", "interrupted", "notes"] {
        assert!(v.get(f).is_some(), "missing {f}");
    }
    let env = &v["environment"];
    for f in ["tlpx_version", "host_name", "kernel", "cpu_model", "backend", "device"] {
        assert!(env.get(f).is_some(), "missing environment.{f}");
    }
    assert_eq!(env["backend"], "sim");
    assert_eq!(env["simulated"], true);
    assert!(env["sim"]["link_model"]["generation"].is_u64(), "{env}");
    assert!(env["sim"]["seed"].is_u64());
    assert_eq!(v["link"]["source"], "libpci");
    assert_eq!(v["interrupted"], false);
}

/// min <= median <= p99 <= p99.9 <= max, all there.
fn check_summary(s: &Value) {
    let f = |k: &str| s[k].as_f64().unwrap_or_else(|| panic!("summary without {k}: {s}"));
    assert!(f("min") <= f("median") && f("median") <= f("p99") && f("p99") <= f("p999") && f("p999") <= f("max"), "{s}");
}

fn u(v: &Value) -> u64 {
    v.as_u64().unwrap_or_else(|| panic!("not an integer: {v}"))
}

fn f(v: &Value) -> f64 {
    v.as_f64().unwrap_or_else(|| panic!("not a number: {v}"))
}

// bw -----------------------------------------------------------------------------------

#[test]
fn bw_read_write_rdwr_check_data_and_report_efficiency() {
    let sim = Sim::start(&[]);
    let file = sim.path("bw.json");
    let out = tlpx(
        &sim.selector(),
        &[
            "--json",
            "bw",
            "--op",
            "read,write,rdwr",
            "--sizes",
            "64,1024",
            "--count",
            "200",
            "--data",
            "prbs",
            "--output",
            file.to_str().expect("utf-8"),
        ],
    );
    let v = doc(&out, "bw");
    let saved: Value = serde_json::from_str(&std::fs::read_to_string(&file).expect("--output written")).expect("json");
    assert_eq!(saved["points"], v["points"]);
    let points = v["points"].as_array().expect("points");
    assert_eq!(points.len(), 6);
    for p in points {
        let op = p["operation"].as_str().expect("operation");
        let size = u(&p["transfer_size"]);
        assert_eq!(u(&p["transfers"]), 200, "{p}");
        assert_eq!(u(&p["card_error_total"]), 0, "{p}");
        assert_eq!(p["runs"][0]["ended_by"], "count");
        // The card moved exactly what was asked, and checked it.
        if op != "write" {
            assert_eq!(u(&p["read_bytes"]), 200 * size, "{p}");
            assert_eq!(u(&p["card_errors"]["data_mismatches"]), 0);
        }
        if op != "read" {
            assert_eq!(u(&p["write_bytes"]), 200 * size, "{p}");
            let c = &p["host_check"];
            assert_eq!(u(&c["corrupt_bytes"]) + u(&c["missing_bytes"]) + u(&c["stray_bytes"]), 0, "{p}");
        }
        if op == "write" {
            // 200 slots of 64 or 1024 bytes written, each exactly once.
            assert_eq!(u(&p["host_check"]["written_bytes"]), 200 * size);
        }
        check_summary(&p["achieved_bytes_per_second"]);
        let model = f(&p["model_bytes_per_second"]);
        let eff = f(&p["efficiency"]["median"]);
        assert!((f(&p["achieved_bytes_per_second"]["median"]) / model - eff).abs() < 1e-9);
        // The generator runs close to the link's limit in the simulator, and never above it:
        // the simulator paces its link with the model (every run ends with a flushing read).
        assert!((0.90..=1.001).contains(&eff), "{op} {size}: efficiency {eff}");
    }
    // Text mode prints the efficiency column.
    let text = tlpx(&sim.selector(), &["bw", "--op", "read", "--sizes", "256", "--count", "50"]);
    assert!(text.status.success(), "{}", stderr(&text));
    let t = stdout(&text);
    assert!(t.contains("EFF*") && t.contains('%') && t.contains("MODEL MB/s") && t.contains("simulated card"), "{t}");
    assert!(t.contains("ACHIEVED is payload MB/s over card time (simulated)"), "the clock is named: {t}");
    assert!(!stderr(&text).contains("[00:"), "no progress bar without a terminal: {}", stderr(&text));
}

/// The simulator paces its link with the model it is compared with, so efficiency cannot
/// exceed 100 % there: asserted over three links (the 64-, 128- and 256-bit cards), every
/// operation, sizes on and off the MPS/MRRS sawtooth, and the knobs that change the TLPs
/// (offset, 64-bit headers, smaller payloads and requests). The output must say why, beside
/// every efficiency figure: the text's footnote, the JSON's `efficiency_meaning` and
/// `simulator_limits`.
#[test]
fn efficiency_on_the_simulator_never_exceeds_100_percent_and_says_why() {
    let cases: [(&[&str], &[&str]); 4] = [
        (&["--gen", "2", "--lanes", "1"], &["--sizes", "64,257,4096", "--offset", "0,3"]),
        (&["--gen", "2", "--lanes", "4"], &["--sizes", "100,256,1024", "--payload-size", "128", "--request-size", "128"]),
        (&["--gen", "3", "--lanes", "8"], &["--sizes", "64,512,4096"]),
        (&["--gen", "3", "--lanes", "8"], &["--sizes", "64,4096", "--addr64"]),
    ];
    for (sim_args, bw_args) in cases {
        let sim = Sim::start(sim_args);
        let mut args = vec!["--json", "bw", "--op", "read,write,rdwr", "--count", "200"];
        args.extend_from_slice(bw_args);
        let v = doc(&tlpx(&sim.selector(), &args), "bw");
        let points = v["points"].as_array().expect("points");
        assert!(points.len() >= 6, "{sim_args:?} {bw_args:?}");
        for p in points {
            let what = format!("{sim_args:?} {} {} B offset {}", p["operation"], p["transfer_size"], p["offset"]);
            let e = &p["efficiency"];
            for k in ["min", "median", "max"] {
                assert!(f(&e[k]) <= 1.001, "{what}: efficiency {k} {} is above the model", e[k]);
            }
            assert!(f(&e["median"]) > 0.5, "{what}: efficiency {}", e["median"]);
            let meaning = p["efficiency_meaning"].as_str().expect("efficiency_meaning beside efficiency");
            assert!(meaning.contains("fraction") && meaning.contains("cannot exceed 1.0 by construction"), "{meaning}");
        }
        let limits = v["simulator_limits"].as_array().expect("simulator_limits");
        assert!(limits.iter().any(|l| l["id"] == "efficiency_paced_by_the_model"), "{limits:?}");
        assert!(v["notes"].as_array().expect("notes").iter().any(|n| n.as_str().is_some_and(|n| n.contains("cannot exceed 1.0 (100 %)"))));
    }
    // The text output says it beside the column, as a percentage.
    let sim = Sim::start(&[]);
    let t = stdout(&tlpx(&sim.selector(), &["bw", "--op", "write", "--sizes", "4096", "--count", "100"]));
    assert!(t.contains("EFF*") && t.contains("EFF* = ACHIEVED / MODEL in %") && t.contains("cannot exceed 100 % here"), "{t}");
}

/// Knobs the simulator cannot vary (address window and pattern: no caches, IOTLB or NUMA;
/// TLP attributes it ignores) are said in one line each when used, and recorded.
#[test]
fn knobs_the_simulator_cannot_vary_are_said_and_recorded() {
    let sim = Sim::start(&[]);
    let args = ["bw", "--op", "read", "--sizes", "256", "--count", "50", "--window", "4K,64K", "--pattern", "seq,random", "--ro"];
    let out = tlpx(&sim.selector(), &args);
    assert!(out.status.success(), "{}", stderr(&out));
    let t = stdout(&out);
    let knob_lines: Vec<&str> = t.lines().filter(|l| l.starts_with("note: SIMULATED: --window and --pattern only move")).collect();
    assert_eq!(knob_lines.len(), 1, "one line: {t}");
    assert!(knob_lines[0].contains("no host caches") && knob_lines[0].contains("IOTLB") && knob_lines[0].contains("NUMA"), "{t}");
    assert!(t.contains("note: SIMULATED: --ro sets TLP attributes that tlpx-sim's root complex ignores"), "{t}");
    let mut json_args = vec!["--json"];
    json_args.extend_from_slice(&args);
    let v = doc(&tlpx(&sim.selector(), &json_args), "bw");
    let limits = v["simulator_limits"].as_array().expect("limits");
    let knob = limits.iter().find(|l| l["id"] == "window_and_address_pattern_not_modelled").expect("the knob is recorded");
    assert_eq!(knob["concerns"], serde_json::json!(["--window", "--pattern"]));
    assert!(limits.iter().any(|l| l["id"] == "tlp_attributes_ignored" && l["concerns"] == serde_json::json!(["--ro"])));
    let notes: Vec<&str> = v["notes"].as_array().expect("notes").iter().filter_map(Value::as_str).collect();
    assert!(notes.iter().any(|n| n.starts_with("SIMULATED: --window and --pattern")), "{notes:?}");
    // Without them: no such note.
    let plain = tlpx(&sim.selector(), &["bw", "--op", "read", "--sizes", "256", "--count", "50"]);
    assert!(!stdout(&plain).contains("only move the card's addresses"), "{}", stdout(&plain));
    // lat: the same knobs, and the root complex's latency is the simulator's setting.
    let lat = tlpx(&sim.selector(), &["lat", "--op", "read", "--count", "20", "--pattern", "random"]);
    let t = stdout(&lat);
    assert!(t.contains("note: SIMULATED: --pattern only moves the card's addresses"), "{t}");
    assert!(t.contains("tlpx-sim's setting, 400 ns + 0..50 ns uniform jitter"), "{t}");
    assert!(t.contains("(card time (simulated), 125 MHz clock)"), "{t}");
    // pio: write combining cannot be tried here.
    let v = doc(&tlpx(&sim.selector(), &["--json", "pio", "--widths", "64", "--count", "10"]), "pio");
    assert!(v["simulator_limits"].as_array().expect("limits").iter().any(|l| l["id"] == "pio_write_combining"), "{v}");
}

#[test]
fn bw_sweeps_offsets_and_patterns_with_exact_data() {
    // Unaligned transfers (first/last byte enables) over a small window, every pattern.
    let sim = Sim::start(&[]);
    let out = tlpx(
        &sim.selector(),
        &[
            "--json",
            "bw",
            "--op",
            "write,read",
            "--sizes",
            "100",
            "--offset",
            "0,3",
            "--pattern",
            "seq,fixed,random",
            "--window",
            "4K",
            "--count",
            "60",
        ],
    );
    let v = doc(&out, "bw");
    let points = v["points"].as_array().expect("points");
    assert_eq!(points.len(), 2 * 2 * 3);
    for p in points {
        assert_eq!(u(&p["card_error_total"]), 0, "{p}");
        assert_eq!(u(&p["transfers"]), 60);
        if p["operation"] == "write" {
            let c = &p["host_check"];
            assert_eq!(u(&c["corrupt_bytes"]) + u(&c["missing_bytes"]) + u(&c["stray_bytes"]), 0, "{p}");
            let expected = match p["pattern"].as_str() {
                // 4 KiB window of 128-byte slots: 60 transfers fill 32 slots, 100 bytes each.
                Some("seq") => 32 * 100,
                Some("fixed") => 100,
                _ => u(&c["written_bytes"]),
            };
            assert_eq!(u(&c["written_bytes"]), expected, "{p}");
        }
    }
}

#[test]
fn bw_duration_and_repeat() {
    let sim = Sim::start(&[]);
    let v = doc(&tlpx(&sim.selector(), &["--json", "bw", "--op", "write", "--sizes", "256", "--duration", "40us", "--repeat", "3"]), "bw");
    let p = &v["points"][0];
    let runs = p["runs"].as_array().expect("runs");
    assert_eq!(runs.len(), 3);
    assert!(runs.iter().all(|r| r["ended_by"] == "duration" && u(&r["transfers"]) > 0), "{p}");
    assert_eq!(u(&p["achieved_bytes_per_second"]["count"]), 3);
    assert_eq!(u(&p["config"]["duration_cycles"]), 5000, "40 µs at 125 MHz");
}

#[test]
fn bw_on_gen3_x8_reaches_the_model() {
    let sim = Sim::start(&["--gen", "3", "--lanes", "8"]);
    let v = doc(&tlpx(&sim.selector(), &["--json", "bw", "--op", "read,write", "--sizes", "4096", "--count", "300"]), "bw");
    assert_eq!(v["link"]["generation"], 3);
    assert_eq!(v["link"]["lanes"], 8);
    for p in v["points"].as_array().expect("points") {
        let eff = f(&p["efficiency"]["median"]);
        assert!(eff >= 0.97, "{} 4 KiB on Gen3 x8: {eff}", p["operation"]);
    }
}

#[test]
fn bw_counts_injected_error_completions_and_recovers() {
    let sim = Sim::start(&["--fault-ur-every", "10"]);
    let out = tlpx(&sim.selector(), &["--json", "bw", "--op", "read", "--sizes", "512", "--count", "50", "--request-size", "512"]);
    assert_eq!(out.status.code(), Some(1), "errors make the exit code 1: {}", stderr(&out));
    let v: Value = serde_json::from_slice(&out.stdout).expect("JSON even with errors");
    check_schema(&v, "bw");
    let p = &v["points"][0];
    assert!(u(&p["card_errors"]["unsupported_request"]) >= 4, "{p}");
    assert_eq!(u(&p["card_error_total"]), u(&p["card_errors"]["unsupported_request"]) + u(&p["card_errors"]["data_mismatches"]));
    // The engine is usable again: writes do not read, so no UR.
    let again = doc(&tlpx(&sim.selector(), &["--json", "bw", "--op", "write", "--sizes", "512", "--count", "50"]), "bw");
    assert_eq!(u(&again["points"][0]["card_error_total"]), 0);
}

#[test]
fn bw_bad_arguments_are_clear_errors() {
    let sim = Sim::start(&[]);
    for (args, needle) in [
        (&["bw", "--sizes", "0"][..], "--sizes: 0"),
        (&["bw", "--sizes", "70000"][..], "1..=65536"),
        (&["bw", "--sizes", "64..abc"][..], "\"64..abc\""),
        (&["bw", "--window", "3000"][..], "--window 3000"),
        (&["bw", "--window", "1K", "--sizes", "4096"][..], "--window 1024"),
        (&["bw", "--offset", "64"][..], "--offset 64"),
        (&["bw", "--count", "0"][..], "--count 0"),
        (&["bw", "--duration", "5 fortnights"][..], "--duration"),
        (&["bw", "--request-size", "1024"][..], "MRRS of 512"),
        (&["bw", "--payload-size", "512"][..], "MPS of 256"),
        (&["bw", "--request-size", "100"][..], "--request-size must be a power of two"),
        (&["bw", "--outstanding", "33"][..], "1..=32"),
        (&["bw", "--pattern", "diagonal"][..], "diagonal"),
        (&["bw", "--op", "sideways"][..], "sideways"),
        (&["lat", "--sizes", "0"][..], "--sizes: 0"),
        (&["pio", "--widths", "3"][..], "--widths: 3"),
        (&["pio", "--count", "0"][..], "1..=1000000"),
        (&["characterize", "--sizes", "0"][..], "--sizes: 0"),
        (&["characterize", "--widths", "5"][..], "--widths: 5"),
    ] {
        let out = tlpx(&sim.selector(), args);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {}", stderr(&out));
        let err = stderr(&out);
        assert!(err.contains(needle), "{args:?}: {err}");
        assert!(!err.contains("panicked"), "{err}");
    }
}

#[test]
fn bw_ctrl_c_stops_cleanly_and_keeps_the_points() {
    let sim = Sim::start(&[]);
    let file = sim.path("partial.json");
    let mut child = Command::new(tlpx_bin())
        .args(["--device", &sim.selector(), "bw", "--sizes", "64..4096", "--count", "500", "--repeat", "200"])
        .arg("--output")
        .arg(&file)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start tlpx bw");
    std::thread::sleep(Duration::from_millis(1500));
    let status = Command::new("kill").args(["-INT", &child.id().to_string()]).status().expect("kill");
    assert!(status.success());
    let deadline = Instant::now() + Duration::from_secs(60);
    let code = loop {
        if let Some(s) = child.try_wait().expect("wait") {
            break s.code();
        }
        assert!(Instant::now() < deadline, "tlpx bw did not stop after Ctrl-C");
        std::thread::sleep(Duration::from_millis(50));
    };
    assert_eq!(code, Some(130));
    let v: Value = serde_json::from_str(&std::fs::read_to_string(&file).expect("partial result written")).expect("json");
    assert_eq!(v["interrupted"], true);
    assert!(v["points"].as_array().expect("points").len() < 21);
    // The card and the simulator are fine afterwards.
    doc(&tlpx(&sim.selector(), &["--json", "bw", "--op", "read", "--sizes", "64", "--count", "10"]), "bw");
}

// lat ----------------------------------------------------------------------------------

#[test]
fn lat_reports_percentiles_cdf_and_svg() {
    // A fixed root-complex latency of 1 µs without jitter: every read takes at least that.
    let sim = Sim::start(&["--dma-latency-ns", "1000", "--dma-jitter-ns", "0"]);
    let svg = sim.path("lat.svg");
    let out = tlpx(&sim.selector(), &["--json", "lat", "--count", "200", "--svg", svg.to_str().expect("utf-8")]);
    let v = doc(&out, "lat");
    let points = v["points"].as_array().expect("points");
    assert_eq!(points.iter().map(|p| p["measurement"].as_str().unwrap_or("")).collect::<Vec<_>>(), ["LAT_RD", "LAT_WRRD"]);
    for p in points {
        assert_eq!(u(&p["config"]["max_outstanding"]), 1);
        assert_eq!(u(&p["hardware"]["count"]), 200, "{p}");
        assert_eq!(p["samples_cycles"].as_array().map(Vec::len), Some(200 - u(&p["samples_dropped"]) as usize));
        assert_eq!(u(&p["card_error_total"]), 0, "{p}");
        let l = &p["latency_ns"];
        check_summary(l);
        assert!(f(&l["min"]) >= 1000.0, "{l}");
        assert!(f(&l["max"]) < 5000.0, "{l}");
    }
    let svg = std::fs::read_to_string(&svg).expect("svg written");
    assert!(svg.contains("<svg") && svg.contains("LAT_RD 64 B") && svg.contains("LAT_WRRD 64 B") && svg.contains("<polyline"));
    // Text: percentiles and the CDF.
    let text = tlpx(&sim.selector(), &["lat", "--op", "read", "--count", "50", "--cdf-rows", "5"]);
    let t = stdout(&text);
    assert!(text.status.success() && t.contains("p99.9") && t.contains("CDF") && t.contains("1.000"), "{t}");
}

// pio ----------------------------------------------------------------------------------

#[test]
fn pio_widths_tlp_sizes_and_readback() {
    let sim = Sim::start(&[]);
    let v = doc(&tlpx(&sim.selector(), &["--json", "pio", "--count", "40"]), "pio");
    assert_eq!(v["mapping"], "uncached only (this backend has no write-combining mapping)");
    let points = v["points"].as_array().expect("points");
    let widths: Vec<u64> = points.iter().map(|p| u(&p["width"])).collect();
    assert_eq!(widths, [1, 2, 4, 8, 16, 32, 64]);
    for p in points {
        let w = u(&p["width"]);
        assert_eq!(u(&p["readback_mismatches"]), 0, "{p}");
        // The simulator sends each access as one TLP: the card saw 40 TLPs of `w` bytes.
        assert_eq!(u(&p["write_stats"]["write_tlps"]), 40, "{p}");
        assert_eq!(u(&p["write_stats"]["write_bytes"]), 40 * w, "{p}");
        assert_eq!(p["write_tlp_sizes"], serde_json::json!([{ "low_bytes": w, "tlps": 40 }]), "{p}");
        assert_eq!(u(&p["read_stats"]["read_tlps"]), 40, "{p}");
        assert!(f(&p["card_write_bytes_per_second"]) > 0.0);
        assert!(f(&p["card_cycles_per_read"]) > 0.0);
        check_summary(&p["read_wall_ns"]);
        check_summary(&p["write_wall_ns"]);
    }
}

/// On the simulator the PIO figures are the card's PIO window and the simulator's socket
/// round trips: labelled so in the text (columns, table rows) and in the result.
#[test]
fn pio_figures_on_the_simulator_are_labelled_as_the_card_window_and_socket_round_trips() {
    let sim = Sim::start(&[]);
    let out = tlpx(&sim.selector(), &["pio", "--widths", "4,64", "--count", "20"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let t = stdout(&out);
    assert!(t.contains("SOCK WR ns med/p99") && t.contains("SOCK RD ns med/p99"), "{t}");
    assert!(t.contains("this process's message to tlpx-sim over its Unix socket") && t.contains("not a PCIe load or store"), "{t}");
    assert!(t.contains("note: SIMULATED: PIO figures are the card's PIO window, not a host's PIO"), "{t}");
    assert!(!t.contains("WRITE ns med/p99"), "no host-PIO column names on the simulator: {t}");
    let v = doc(&tlpx(&sim.selector(), &["--json", "pio", "--widths", "4,64", "--count", "20"]), "pio");
    for p in v["points"].as_array().expect("points") {
        assert_eq!(p["wall_clock"], "host_wall_time_of_sim_socket_round_trips", "{p}");
    }
    let limit = v["simulator_limits"].as_array().expect("limits").iter().find(|l| l["id"] == "pio_is_the_card_window").cloned();
    let statement = limit.expect("pio_is_the_card_window")["statement"].as_str().expect("statement").to_string();
    // The window's cost per 64-byte store is measured and quoted (about 52 card cycles).
    let cycles: f64 = statement.split("here ").nth(1).and_then(|r| r.split(' ').next()).and_then(|n| n.parse().ok()).expect("cycles");
    assert!((40.0..70.0).contains(&cycles) && statement.contains("card cycles per 64 B store"), "{statement}");

    let dir = sim.path("char");
    let out = tlpx(
        &sim.selector(),
        &[
            "--json",
            "characterize",
            "--sizes",
            "256",
            "--count",
            "50",
            "--lat-count",
            "10",
            "--widths",
            "64",
            "--pio-count",
            "10",
            "--out-dir",
            dir.to_str().expect("utf-8"),
        ],
    );
    let v = doc(&out, "characterize");
    for r in v["table"].as_array().expect("table").iter().filter(|r| r["what"].as_str().is_some_and(|w| w.starts_with("pio"))) {
        assert!(r["label"].as_str().is_some_and(|l| l.ends_with(", card window")), "{r}");
        assert!(r["how"].as_str().is_some_and(|h| h.starts_with("SIMULATED: the card's PIO window")), "{r}");
    }
    let text = tlpx(
        &sim.selector(),
        &[
            "characterize",
            "--sizes",
            "256",
            "--count",
            "50",
            "--lat-count",
            "10",
            "--widths",
            "64",
            "--pio-count",
            "10",
            "--out-dir",
            dir.to_str().expect("utf-8"),
        ],
    );
    let t = stdout(&text);
    assert!(t.contains("PIO write, card window") && t.contains("PIO read, card window"), "{t}");
    assert!(t.contains("PIO rows (SIMULATED): the card's PIO window"), "{t}");
    assert!(t.contains("* EFF = BEST / MODEL AT SIZE in %; SIMULATED"), "{t}");
}

#[test]
fn pio_read_delay_adds_card_cycles_per_read() {
    let sim = Sim::start(&[]);
    let cycles = |extra: &[&str]| {
        let mut args = vec!["--json", "pio", "--widths", "4", "--count", "50"];
        args.extend_from_slice(extra);
        f(&doc(&tlpx(&sim.selector(), &args), "pio")["points"][0]["card_cycles_per_read"])
    };
    let base = cycles(&[]);
    let delayed = cycles(&["--read-delay", "200"]);
    assert!((delayed - base - 200.0).abs() < 10.0, "read delay 200: {base} -> {delayed} cycles per read");
    // The delay is cleared afterwards.
    assert!((cycles(&[]) - base).abs() < 2.0);
}

// characterize ------------------------------------------------------------------------

#[test]
fn characterize_writes_the_table_json_and_figures() {
    let sim = Sim::start(&[]);
    let dir = sim.path("results");
    let out = tlpx(
        &sim.selector(),
        &[
            "--json",
            "characterize",
            "--sizes",
            "64,4096",
            "--count",
            "100",
            "--lat-count",
            "100",
            "--widths",
            "4,64",
            "--pio-count",
            "20",
            "--out-dir",
            dir.to_str().expect("utf-8"),
        ],
    );
    let v = doc(&out, "characterize");
    let table = v["table"].as_array().expect("table");
    let whats: Vec<&str> = table.iter().map(|r| r["what"].as_str().unwrap_or("")).collect();
    assert_eq!(whats, ["dma_write", "dma_read", "pio_write", "pio_read", "dma_read_write"]);
    for r in table {
        assert!(f(&r["best_bytes_per_second"]) > 0.0, "{r}");
        assert!([4, 64, 4096].contains(&u(&r["at_bytes"])), "{r}");
        if r["what"].as_str().is_some_and(|w| w.starts_with("dma")) {
            assert!(f(&r["model_at_size_bytes_per_second"]) > 0.0 && f(&r["efficiency"]) > 0.8, "{r}");
        }
    }
    assert_eq!(v["points"].as_array().map(Vec::len), Some(6));
    assert_eq!(v["latency"].as_array().map(Vec::len), Some(2));
    assert_eq!(v["pio"].as_array().map(Vec::len), Some(2));
    let on_disk: Value = serde_json::from_str(&std::fs::read_to_string(dir.join("characterize.json")).expect("written")).expect("json");
    check_schema(&on_disk, "characterize");
    for name in ["bw-write.svg", "bw-read.svg", "bw-rdwr.svg", "lat-cdf.svg", "pio.svg"] {
        let svg = std::fs::read_to_string(dir.join(name)).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert!(svg.starts_with("<svg") && svg.contains("</svg>"), "{name}");
    }
    let bw = std::fs::read_to_string(dir.join("bw-read.svg")).expect("svg");
    assert!(bw.contains("model (tlpx-model") && bw.contains("measured (BW_RD") && bw.contains("transfer size"));
    assert!(v["figures"].as_array().is_some_and(|f| f.len() == 5));
}

#[test]
fn characterize_text_prints_the_pamette_table() {
    let sim = Sim::start(&[]);
    let dir = sim.path("r");
    let out = tlpx(
        &sim.selector(),
        &[
            "characterize",
            "--sizes",
            "256",
            "--count",
            "50",
            "--lat-count",
            "20",
            "--widths",
            "8",
            "--pio-count",
            "10",
            "--out-dir",
            dir.to_str().expect("utf-8"),
        ],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let t = stdout(&out);
    for row in ["DMA write", "DMA read", "PIO write", "PIO read", "DMA read+write", "SIMULATED", "MODEL AT SIZE"] {
        assert!(t.contains(row), "{row}: {t}");
    }
    assert!(Path::new(&dir.join("characterize.json")).exists());
}
