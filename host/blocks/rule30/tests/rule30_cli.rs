//! `tlpx rule30` end to end with the real binary and the real tlpx-sim (card with the Amaranth
//! accelerator): every mode verified against the seed's char-based golden reference, the
//! sweep's result and figures, and bad arguments refused.

use std::path::PathBuf;
use std::process::{Command, Output};

use serde_json::Value;
use tlpx_testkit::SimProcess as Sim;

use crate::common;
use common::text;

fn tlpx(device: &str, args: &[&str]) -> Output {
    Command::new(PathBuf::from(env!("CARGO_BIN_EXE_tlpx"))).arg("--device").arg(device).args(args).output().expect("run tlpx")
}

#[test]
fn every_mode_matches_the_golden_reference_over_random_packets_and_rules() {
    let sim = Sim::start(&[]);
    for (rule, length, seed) in [("30", "1024", "1"), ("110", "33", "2"), ("90", "1", "3"), ("45", "200", "4")] {
        let out = tlpx(
            &sim.selector(),
            &[
                "--json",
                "rule30",
                "run",
                "--mode",
                "all",
                "--packets",
                "6",
                "--generations",
                "7",
                "--rule",
                rule,
                "--length",
                length,
                "--seed",
                seed,
                "--verify",
            ],
        );
        assert!(out.status.success(), "rule {rule} length {length}: {}", text(&out.stderr));
        let doc: Value = serde_json::from_slice(&out.stdout).expect("JSON");
        assert_eq!(doc["kind"], "rule30");
        let points = doc["points"].as_array().expect("points");
        assert_eq!(points.len(), 9, "every mode");
        for p in points {
            assert_eq!(p["verified_packets"], 6, "rule {rule} length {length}: {p}");
            assert_eq!(p["mismatches"], 0);
            let hw = p["mode"].as_str().expect("mode").starts_with("hw") || p["mode"] == "hwo";
            assert_eq!(p["clock"], if hw { "simulated_card" } else { "host" }, "{p}");
            if hw {
                let ops = p["operations"].as_u64().expect("operations");
                let want = if p["mode"] == "hw-multi" || p["mode"] == "hw-batch" { 6 } else { 6 * 7 };
                assert_eq!(ops, want, "one operation per start: {p}");
                assert!(p["efficiency"].as_f64().expect("efficiency") > 0.0);
                // On the simulator every access is one message, hw-syscall included.
                assert_eq!(p["bar_path"], "sim_message", "{p}");
            } else {
                assert!(p["bar_path"].is_null(), "{p}");
            }
        }
    }
}

#[test]
fn the_sweep_writes_points_crossovers_and_figures() {
    let sim = Sim::start(&[]);
    let dir = sim.path("sweep");
    let out = tlpx(
        &sim.selector(),
        &[
            "rule30",
            "sweep",
            "--packets",
            "3",
            "--generations",
            "4",
            "--lengths",
            "8,512",
            "--latencies",
            "1ns,10us",
            "--verify",
            "--out-dir",
            dir.to_str().expect("path"),
        ],
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    let log = text(&out.stdout);
    assert!(log.contains("SIMULATED card time") && log.contains("crossover") && log.contains("efficiency"), "{log}");
    let doc: Value = serde_json::from_str(&std::fs::read_to_string(dir.join("rule30-sweep.json")).expect("result")).expect("JSON");
    let points = doc["points"].as_array().expect("points");
    assert_eq!(points.len(), 2 * (3 + 6 * 2), "lengths x (software modes + hardware modes x latencies)");
    assert!(points.iter().all(|p| p["mismatches"] == 0));
    let crossovers = doc["crossovers"].as_array().expect("crossovers");
    assert_eq!(crossovers.len(), 2 * 6 * 3);
    // A crossover compares two clocks, and says which.
    assert!(crossovers.iter().all(|c| c["hw_clock"] == "simulated_card" && c["sw_clock"] == "host"), "{crossovers:?}");
    let claim = doc["crossover_claim"].as_str().expect("crossover_claim");
    assert!(claim.contains("two clocks") && claim.contains("no faster than these") && claim.contains("lower bound"), "{claim}");
    assert!(doc["simulator_limits"].as_array().expect("limits").iter().any(|l| l["id"] == "rule30_two_clocks"));
    assert!(
        log.contains("rows (hardware modes) in card time (simulated), columns (software modes) in host wall time"),
        "the crossover table names both clocks: {log}"
    );
    assert!(log.contains("hw-poll    card (sim)") && log.contains("sw-char    host wall"), "each row names its clock: {log}");
    // A longer accelerator latency costs the hardware modes time.
    let line = |mode: &str, lat: f64| {
        points.iter().find(|p| p["mode"] == mode && p["latency_ns"].as_f64() == Some(lat) && p["length_bits"] == 512).expect("point")
            ["per_line_ns"]["mean"]
            .as_f64()
            .expect("mean")
    };
    assert!(line("hw-poll", 10_000.0) > line("hw-poll", 1.0) + 9_000.0);
    for f in ["rule30-landscape.svg", "rule30-zoom.svg", "rule30-latencies.svg", "rule30-jitter.svg"] {
        let svg = std::fs::read_to_string(dir.join(f)).expect("figure");
        assert!(svg.starts_with("<svg") && svg.contains("rule 30"), "{f}");
    }
}

#[test]
fn bad_arguments_are_refused_with_exit_2() {
    let sim = Sim::start(&[]);
    let cases: [(&[&str], &str); 6] = [
        (&["rule30", "run", "--packets", "0"], "'0' for '--packets <PACKETS>': 0 is out of range"),
        (&["rule30", "run", "--length", "0"], "'0' for '--length <LENGTH>': 0 is out of range; accepted: a whole number in 1..=1024"),
        (&["rule30", "run", "--length", "1025"], "1025 is out of range; accepted: a whole number in 1..=1024"),
        (&["rule30", "run", "--mode", "hw-fast"], "\"hw-fast\" is not a mode"),
        (&["rule30", "run", "--generations", "0"], "'0' for '--generations <GENERATIONS>'"),
        (&["rule30", "sweep", "--lengths", "64..8"], "FROM <= TO"),
    ];
    for (args, want) in cases {
        let out = tlpx(&sim.selector(), args);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {}", text(&out.stderr));
        let err = text(&out.stderr);
        assert!(err.contains(want), "{args:?}: {err}");
    }
}
