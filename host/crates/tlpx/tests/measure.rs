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

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;
use tlpx_testkit::SimProcess as Sim;

fn tlpx_bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_tlpx"))
}

fn tlpx(device: &str, args: &[&str]) -> Output {
    Command::new(tlpx_bin()).arg("--device").arg(device).args(args).output().expect("run tlpx")
}

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
        // The generator runs close to the link's limit in the simulator. Short runs of writes
        // read high by the TLPs still in the PCIe core's transmit buffer (8 of 200 here).
        assert!((0.90..1.06).contains(&eff), "{op} {size}: efficiency {eff}");
    }
    // Text mode prints the efficiency column.
    let text = tlpx(&sim.selector(), &["bw", "--op", "read", "--sizes", "256", "--count", "50"]);
    assert!(text.status.success(), "{}", stderr(&text));
    let t = stdout(&text);
    assert!(t.contains("EFF") && t.contains('%') && t.contains("MODEL MB/s") && t.contains("simulated card"), "{t}");
    assert!(!stderr(&text).contains("[00:"), "no progress bar without a terminal: {}", stderr(&text));
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
        (&["bw", "--outstanding", "65"][..], "1..=64"),
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
