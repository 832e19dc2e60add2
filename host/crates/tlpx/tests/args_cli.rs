//! Argument handling shared by every subcommand, end to end through the real binary:
//! negative numbers, duplicates in lists, exit statuses (2 bad input, 3 the card's fault),
//! output paths checked before anything is measured, and `tlpx lat`'s error counts.
//!
//! Most cases point `--device` at a simulator socket that does not exist: a check that runs
//! before the card is touched answers first; one that does not would meet the missing
//! simulator instead (exit status 3, "no simulated card").

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;
use tlpx_testkit::SimProcess as Sim;

use crate::common;
use common::{text, tlpx, tlpx_bin};

/// A device selector naming a simulator that is not running.
fn absent(dir: &Path) -> String {
    format!("sim:{}", dir.join("absent.sock").display())
}

fn path_str(p: &Path) -> &str {
    p.to_str().expect("UTF-8 path")
}

// 1. Negative numbers --------------------------------------------------------------------------

#[test]
fn negative_numbers_are_refused_naming_the_option_and_its_range() {
    let dir = tempfile::tempdir().expect("temp dir");
    let device = absent(dir.path());
    let cases: &[(&[&str], &[&str])] = &[
        (&["bw", "--count", "-1"], &["--count", "-1", "0..=1000000000"]),
        (&["bw", "--count=-1"], &["--count", "0..=1000000000"]),
        (&["bw", "--repeat", "-2"], &["--repeat", "1..=1000"]),
        (&["bw", "--outstanding", "-8"], &["--outstanding", "1..=32"]),
        (&["bw", "--request-size", "-512"], &["--request-size", "power of two in 4..=4096"]),
        (&["bw", "--sizes", "-64"], &["--sizes", "\"-64\" is negative", "1..=65536"]),
        (&["bw", "--sizes", "64,-4K"], &["--sizes", "\"-4K\" is negative", "1..=65536"]),
        (&["bw", "--window", "-1M"], &["--window", "64..=64M"]),
        (&["bw", "--offset", "-4"], &["--offset", "0..=63"]),
        (&["bw", "--duration", "-2ms"], &["--duration", "positive duration of at most 1 hour"]),
        (&["lat", "--count", "-5"], &["--count", "0..=1000000000"]),
        (&["lat", "--sizes", "-64"], &["--sizes", "1..=65536"]),
        (&["lat", "--cdf-rows", "-3"], &["--cdf-rows", "2..=200"]),
        (&["pio", "--count", "-3"], &["--count", "1..=1000000"]),
        (&["pio", "--widths", "-4"], &["--widths", "1, 2, 4, 8, 16, 32 or 64"]),
        (&["pio", "--offset", "-64"], &["--offset", "multiple of 64 in 0..=65472"]),
        (&["characterize", "--lat-count", "-1"], &["--lat-count", "1..=1000000"]),
        (&["characterize", "--pio-count", "-1"], &["--pio-count", "1..=1000000"]),
        (&["irq", "--samples", "-10"], &["--samples", "1..=4294967295"]),
        (&["irq", "--cpu", "-1"], &["--cpu", "0..="]),
        (&["irq", "--fifo", "-5"], &["--fifo", "1..=99"]),
        (&["irq", "--min", "-10us"], &["--min", "positive duration"]),
        (&["loop", "--iterations", "-1"], &["--iterations", "1..=4294967295"]),
        (&["loop", "--size", "-64"], &["--size", "multiples of 4 in 8..=4096"]),
        (&["loop", "--load-cpus", "0,-1"], &["--load-cpus", "-1", "0..="]),
        (&["rule30", "run", "--length", "-8"], &["--length", "1..=1024"]),
        (&["rule30", "run", "--generations", "-1"], &["--generations", "1..=65535"]),
        // Unbounded before: 4294967295 packets aborted allocating 103 GB.
        (&["rule30", "run", "--packets", "4294967295"], &["--packets", "1..=1000000"]),
        (&["rule30", "sweep", "--packets", "1000001"], &["--packets", "1..=1000000"]),
        (&["rule30", "sweep", "--lengths", "-8"], &["--lengths", "1..=1024"]),
        (&["rule30", "sweep", "--latencies", "-1us"], &["--latencies", "positive duration"]),
        (&["spy", "capture", "--ring", "-16"], &["--ring", "power of two in 16..=16777216"]),
        (&["spy", "capture", "--records", "-1"], &["--records", "1..="]),
        (&["spy", "capture", "--pre", "-1"], &["--pre", "0..=2047"]),
        (&["spy", "capture", "--poll", "-50us"], &["--poll", "positive duration"]),
        (&["top", "--recent", "-1"], &["--recent", "1..=1000"]),
        (&["top", "--width", "-80"], &["--width", "20..=1000"]),
        (&["model", "--mps", "-128"], &["--mps", "128, 256, 512, 1024, 2048 or 4096"]),
        (&["model", "--gen", "-3"], &["--gen", "1..=5"]),
        (&["model", "--sizes", "-64"], &["--sizes", "1..=1G"]),
        (&["selftest", "--dma-bytes", "-4"], &["--dma-bytes", "multiple of 4 in 4..=16777212"]),
        (&["bench", "mmio", "--count", "-1"], &["--count", "1..=10000000"]),
    ];
    for (args, needles) in cases {
        let out = tlpx(&device, args);
        let err = text(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(!err.contains("unexpected argument") && !err.contains("panicked"), "{args:?}: {err}");
        for needle in *needles {
            assert!(err.contains(needle), "{args:?}: {needle:?} missing from: {err}");
        }
    }
}

// 2. Duplicates --------------------------------------------------------------------------------

#[test]
fn a_list_that_names_an_item_twice_is_refused_naming_it() {
    let dir = tempfile::tempdir().expect("temp dir");
    let device = absent(dir.path());
    let cases: &[(&[&str], &str)] = &[
        (&["bw", "--sizes", "64,64"], "--sizes: 64 is given twice (\"64\" twice)"),
        (&["bw", "--sizes", "64..4096,256"], "--sizes: 256 is given twice (\"64..4096\" and \"256\")"),
        (&["bw", "--window", "1M,1M"], "--window: 1048576 is given twice"),
        (&["bw", "--offset", "0,0"], "--offset: 0 is given twice"),
        (&["bw", "--op", "read,read"], "--op: read is given twice"),
        (&["bw", "--pattern", "seq,random,seq"], "--pattern: seq is given twice"),
        (&["lat", "--op", "wrrd,wrrd"], "--op: wrrd is given twice"),
        (&["lat", "--sizes", "64,64"], "--sizes: 64 is given twice"),
        (&["characterize", "--lat-sizes", "64,64"], "--lat-sizes: 64 is given twice"),
        (&["characterize", "--widths", "4,4"], "--widths: 4 is given twice"),
        (&["pio", "--widths", "8,8"], "--widths: 8 is given twice"),
        (&["irq", "--compare", "idle,idle"], "--compare: idle is given twice"),
        (&["irq", "--compare", "idle,loaded,idle"], "--compare: idle is given twice"),
        (&["irq", "--load", "cpu,cpu"], "--load: cpu is given twice"),
        (&["irq", "--load", "cpu", "--load-cpus", "0,0"], "--load-cpus: 0 is given twice"),
        (&["loop", "--detect", "poll,irq,poll"], "--detect: poll is given twice"),
        (&["loop", "--return", "dma,dma"], "--return: dma is given twice"),
        (&["loop", "--size", "64,64"], "--size: 64 is given twice"),
        (&["rule30", "sweep", "--lengths", "8,8"], "--lengths: 8 bits is given twice (\"8\" twice)"),
        (&["rule30", "sweep", "--lengths", "8..64/8,16"], "--lengths: 16 bits is given twice (\"8..64/8\" and \"16\")"),
        (&["rule30", "sweep", "--latencies", "1us,1000ns"], "--latencies: \"1us\" and \"1000ns\" are the same latency"),
        (&["rule30", "run", "--mode", "hw-irq,hw-irq"], "--mode: hw-irq is given twice"),
        (&["rule30", "run", "--mode", "all,sw-char"], "--mode: sw-char is given twice (\"all\" and \"sw-char\")"),
        (&["spy", "capture", "--types", "mrd,cpld,mrd"], "--types: mrd is given twice"),
        (&["spy", "capture", "--dir", "up,up"], "--dir: up is given twice"),
        (&["model", "--sizes", "64..256,128"], "--sizes: 128 is given twice"),
    ];
    for (args, needle) in cases {
        let out = tlpx(&device, args);
        let err = text(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains(needle), "{args:?}: {needle:?} missing from: {err}");
        assert!(!err.contains("no simulated card"), "{args:?}: refused before the card: {err}");
    }
}

// 3. Exit statuses -----------------------------------------------------------------------------

#[test]
fn the_card_s_failures_exit_3_and_bad_input_exits_2() {
    let dir = tempfile::tempdir().expect("temp dir");
    let device = absent(dir.path());
    // No simulator: the device side.
    for args in [&["info"][..], &["selftest"], &["bw", "--sizes", "64", "--count", "10"], &["spy", "stats"]] {
        let out = tlpx(&device, args);
        let err = text(&out.stderr);
        assert_eq!(out.status.code(), Some(3), "{args:?}: {err}");
        assert!(err.contains("no simulated card at"), "{args:?}: {err}");
    }
    // Bad input, found by clap or by the command: 2, with or without a card.
    for args in [&["bw", "--op", "sideways"][..], &["bw", "--sizes", "0"], &["info", "--bogus"], &["irq", "--min", "1ms", "--max", "1us"]] {
        let out = tlpx(&device, args);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {}", text(&out.stderr));
    }
    let out = tlpx("bogus-selector", &["info"]);
    assert_eq!(out.status.code(), Some(2), "a malformed --device is bad input: {}", text(&out.stderr));

    // A card with another register map: refused by the card check.
    let sim = Sim::start(&["--corrupt-read", "0xc:0x1"]);
    let out = tlpx(&sim.selector(), &["info"]);
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "{err}");
    assert!(err.contains("register map"), "{err}");
}

#[test]
fn losing_the_simulator_during_a_measurement_exits_3() {
    let sim = Sim::start(&[]);
    let mut child = Command::new(tlpx_bin())
        .args(["--device", &sim.selector(), "bw", "--sizes", "64..4096", "--count", "500", "--repeat", "500"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start tlpx bw");
    std::thread::sleep(Duration::from_millis(1500));
    assert!(child.try_wait().expect("wait").is_none(), "the sweep is meant to run for minutes");
    drop(sim); // kills tlpx-sim
    let out = child.wait_with_output().expect("tlpx bw ends");
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "{err}");
    assert!(err.contains("simulator") && !err.contains("panicked"), "{err}");
}

#[test]
fn the_long_help_documents_the_exit_statuses() {
    let out = Command::new(tlpx_bin()).arg("--help").output().expect("run tlpx");
    assert!(out.status.success());
    let help = text(&out.stdout);
    assert!(help.contains("Exit status:"), "{help}");
    assert!(help.contains("  2    bad input") && help.contains("  3    the card, its backend or the simulator"), "{help}");
}

// 4. tlpx lat's error counts -------------------------------------------------------------------

#[test]
fn lat_prints_the_card_s_error_counts_by_name() {
    // Every 10th read of the card gets an Unsupported Request completion.
    let sim = Sim::start(&["--fault-ur-every", "10"]);
    let args = ["lat", "--op", "read", "--sizes", "256", "--count", "100"];
    let out = tlpx(&sim.selector(), &args);
    let stdout = text(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "errors make the exit status 1: {}{}", stdout, text(&out.stderr));
    let line = stdout.lines().find(|l| l.contains("ERRORS counted by the card")).unwrap_or_else(|| panic!("no error line in: {stdout}"));
    assert!(line.contains("unsupported request (UR)"), "{line}");
    assert!(!stdout.contains("ErrorCounts") && !line.contains('{'), "the Debug struct: {line}");
    // "ERRORS counted by the card (N in all): N unsupported request (UR)[, M data mismatches]"
    let total: u64 = line.split('(').nth(1).and_then(|s| s.split(' ').next()).and_then(|n| n.parse().ok()).expect("a total");
    assert!(total >= 5, "{line}");

    let mut json_args = vec!["--json"];
    json_args.extend_from_slice(&args);
    let out = tlpx(&sim.selector(), &json_args);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    let v: Value = serde_json::from_slice(&out.stdout).expect("JSON");
    let errors = &v["points"][0]["card_errors"];
    for field in [
        "unsupported_request",
        "completer_abort",
        "other_status",
        "poisoned",
        "completion_timeouts",
        "unexpected_completions",
        "data_mismatches",
    ] {
        assert!(errors[field].is_u64(), "card_errors.{field}: {errors}");
    }
    assert!(errors["unsupported_request"].as_u64().unwrap_or(0) >= 5, "{errors}");
}

// 5. Output paths ------------------------------------------------------------------------------

#[test]
fn output_paths_are_checked_before_the_card_is_touched() {
    let dir = tempfile::tempdir().expect("temp dir");
    let device = absent(dir.path());
    // A regular file where a folder would have to be: nothing can be created below it.
    let blocker = dir.path().join("a-file");
    std::fs::write(&blocker, "not a folder").expect("write");
    let bad = |name: &str| blocker.join(name).display().to_string();
    let (json, svg, trace, folder) = (bad("r.json"), bad("f.svg"), bad("t.tlpx"), bad("figures"));
    let cases: Vec<(Vec<&str>, &str)> = vec![
        (vec!["bw", "--output", &json], "--output"),
        (vec!["lat", "--output", &json], "--output"),
        (vec!["lat", "--svg", &svg], "--svg"),
        (vec!["pio", "--output", &json], "--output"),
        (vec!["characterize", "--out-dir", &folder], "--out-dir"),
        (vec!["characterize", "--out-dir", path_str(dir.path()), "--output", &json], "--output"),
        (vec!["irq", "--output", &json], "--output"),
        (vec!["irq", "--svg", &svg], "--svg"),
        (vec!["loop", "--output", &json], "--output"),
        (vec!["loop", "--svg", &svg], "--svg"),
        (vec!["rule30", "run", "--output", &json], "--output"),
        (vec!["rule30", "run", "--mode", "sw-char", "--packets", "10", "--output", &json], "--output"),
        (vec!["rule30", "sweep", "--out-dir", &folder], "--out-dir"),
        (vec!["spy", "capture", "--output", &trace], "--output"),
        (vec!["model", "--output", &json], "--output"),
    ];
    for (args, flag) in &cases {
        let started = Instant::now();
        let out = tlpx(&device, args);
        let err = text(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains(&format!("{flag} {}", blocker.display())), "{args:?}: {err}");
        assert!(!err.contains("no simulated card"), "{args:?}: checked before the card: {err}");
        assert!(started.elapsed() < Duration::from_secs(10), "{args:?} took {:?}", started.elapsed());
    }
    // A file that could be written but whose run then fails is not left behind empty.
    let fresh = dir.path().join("new/r.json");
    let out = tlpx(&device, &["bw", "--output", path_str(&fresh)]);
    assert_eq!(out.status.code(), Some(3), "{}", text(&out.stderr));
    assert!(!fresh.exists(), "the check left {} behind", fresh.display());
    let figures = dir.path().join("figures");
    let out = tlpx(&device, &["characterize", "--out-dir", path_str(&figures)]);
    assert_eq!(out.status.code(), Some(3), "{}", text(&out.stderr));
    assert!(!figures.exists(), "the check left an empty {} behind", figures.display());
}

#[test]
fn a_bad_output_path_fails_before_anything_is_measured() {
    let sim = Sim::start(&[]);
    let blocker = sim.path("a-file");
    std::fs::write(&blocker, "not a folder").expect("write");
    let json = blocker.join("r.json");
    let svg = blocker.join("cdf.svg");
    for args in [
        vec!["bw", "--op", "read", "--sizes", "64,128", "--count", "20", "--output", path_str(&json)],
        vec!["lat", "--op", "read", "--count", "20", "--svg", path_str(&svg)],
        vec!["pio", "--widths", "4", "--count", "10", "--output", path_str(&json)],
    ] {
        let out = tlpx(&sim.selector(), &args);
        let (stdout, err) = (text(&out.stdout), text(&out.stderr));
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains(&blocker.display().to_string()), "{args:?}: {err}");
        // Nothing was measured: not even the card's description was printed.
        assert!(stdout.is_empty(), "{args:?} measured before failing:\n{stdout}");
    }
}

// Found by the skeptical sweep of issue 26 -------------------------------------------------------

/// An output that is the input (or another output) is refused before anything is read or
/// written, the input left whole (before: `report bw.json -o bw.json` replaced the result
/// with its report, `script compile -o s.tlpxs s.tlpxs` the source with its image, and
/// `lat --svg F --output F` kept only one of the two); `bw --duration 1ns` (0 transfers, exit
/// 0 before) and `fw console --duration` without `--follow` (accepted, ignored) are refused.
#[test]
fn outputs_that_are_inputs_and_meaningless_durations_are_refused() {
    let dir = tempfile::tempdir().expect("temp dir");
    let device = absent(dir.path());
    let result = dir.path().join("bw.json");
    std::fs::write(&result, "{\"kept\": true}").expect("write");
    let source = dir.path().join("s.tlpxs");
    std::fs::write(&source, "mark m\n").expect("write");
    let same = dir.path().join("f");
    let alias = dir.path().join("./f");
    let cases: Vec<(Vec<&str>, &[&str])> = vec![
        (vec!["report", path_str(&result), "-o", path_str(&result)], &["--output", "that is the file of RESULTS"]),
        (vec!["script", "compile", "-o", path_str(&source), path_str(&source)], &["--output", "that is the file of SOURCE"]),
        (vec!["script", "run", path_str(&source), "--output", path_str(&source)], &["--output", "that is the file of SOURCE"]),
        (vec!["lat", "--svg", path_str(&same), "--output", path_str(&alias)], &["--svg", "that is the file of --output"]),
        (vec!["irq", "--svg", path_str(&same), "--output", path_str(&same)], &["--svg", "that is the file of --output"]),
        (vec!["loop", "--svg", path_str(&same), "--output", path_str(&same)], &["--svg", "that is the file of --output"]),
        (vec!["bw", "--duration", "1ns"], &["--duration 1ns", "shorter than 1us", "give 1us or more"]),
        (vec!["fw", "console", "--duration", "2s"], &["--follow"]),
    ];
    for (args, needles) in &cases {
        let out = tlpx(&device, args);
        let err = text(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        for n in *needles {
            assert!(err.contains(n), "{args:?}: {n:?} is not in {err}");
        }
        assert!(!err.contains("no simulated card"), "{args:?}: refused only after reaching for the card: {err}");
    }
    assert_eq!(std::fs::read_to_string(&result).expect("read"), "{\"kept\": true}");
    assert_eq!(std::fs::read_to_string(&source).expect("read"), "mark m\n");
    assert!(!same.exists());
}
