//! `tlpx diff` end to end: characterisations of the real tlpx-sim at two link settings.
//!
//!   tlpx-sim --gen 2 --lanes 1 ──tlpx characterize ×2──► x1-a.json, x1-b.json (repeats)
//!   tlpx-sim --gen 2 --lanes 4 ──tlpx characterize────► x4.json
//!   tlpx diff x1-a x1-b ──► exit 0, nothing changed       tlpx diff x1-a x4 ──► exit 1, the
//!   bandwidths, model limits and latencies changed, the link named as differing
//!
//! The smallest characterisation that still carries every figure kind: two DMA sizes, a
//! latency measurement of 50 samples, one PIO width. Bad inputs exit 2 with the file named.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;
use tlpx_testkit::SimProcess as Sim;

use crate::common;
use common::{text, tlpx};

fn s(p: &Path) -> &str {
    p.to_str().expect("utf-8 path")
}

fn characterize(sim: &Sim, name: &str) -> PathBuf {
    let dir = sim.path(name);
    let o = tlpx(
        &sim.selector(),
        &[
            "characterize",
            "--sizes",
            "64,1024",
            "--count",
            "50",
            "--lat-count",
            "50",
            "--widths",
            "4",
            "--pio-count",
            "10",
            "--out-dir",
            s(&dir),
        ],
    );
    assert!(o.status.success(), "{name}: {}\n{}", text(&o.stdout), text(&o.stderr));
    dir.join("characterize.json")
}

fn diff(args: &[&str]) -> Output {
    Command::new(common::tlpx_bin()).arg("diff").args(args).output().expect("run tlpx diff")
}

#[test]
fn diff_of_characterisations_at_two_link_widths_reports_the_changes_and_repeats_none() {
    let x1 = Sim::start(&["--gen", "2", "--lanes", "1"]);
    let x4 = Sim::start(&["--gen", "2", "--lanes", "4"]);
    let (a, b, wide) = (characterize(&x1, "a"), characterize(&x1, "b"), characterize(&x4, "w"));

    // Two repeats of the same settings: nothing changed, exit 0.
    let o = diff(&[s(&a), s(&b)]);
    assert_eq!(o.status.code(), Some(0), "{}\n{}", text(&o.stdout), text(&o.stderr));
    let out = text(&o.stdout);
    assert!(out.contains("no significant change: 0 of "), "{out}");
    assert!(out.contains("LAT_RD 64 B: latency (median)") && out.contains("95 % CI, 50 samples"), "{out}");

    // x1 against x4: exit 1, and the figures the link sets are the ones that changed.
    let o = diff(&["--json", s(&a), s(&wide)]);
    assert!(o.status.code() == Some(1), "{}\n{}", text(&o.stdout), text(&o.stderr));
    // --json is a global flag of tlpx: given after the subcommand it is still read.
    let v: Value = serde_json::from_slice(&o.stdout).expect("JSON");
    assert_eq!(v["verdict"], "changed");
    assert_eq!(v["kind"], "characterize");
    let link = v["context"].as_array().expect("context").iter().find(|c| c["what"] == "link").expect("link row").clone();
    assert_eq!(link["differs"], true);
    assert!(link["a"].as_str().is_some_and(|l| l.contains("x1")) && link["b"].as_str().is_some_and(|l| l.contains("x4")), "{link}");
    let rows = v["rows"].as_array().expect("rows");
    let row = |key: &str| rows.iter().find(|r| r["figure"] == key).unwrap_or_else(|| panic!("no row {key}: {rows:?}"));
    for key in [
        "DMA read: best sustained bandwidth",
        "DMA write: best sustained bandwidth",
        "DMA BW_RD 1 KiB, seq, window 1 MiB: model limit",
        "DMA BW_WR 1 KiB, seq, window 1 MiB: payload bandwidth (median)",
    ] {
        let r = row(key);
        assert_eq!(r["changed"], true, "{r}");
        assert_eq!(r["unit"], "MB/s");
        // Four lanes carry more than one: the change is up, by more than half again.
        assert!(r["change_percent"].as_f64().is_some_and(|p| p > 50.0), "{r}");
    }
    assert_eq!(row("DMA write: best sustained bandwidth")["clock"], "card time");
    // The changed count is the rows marked changed, and host wall times are never among them.
    let marked = rows.iter().filter(|r| r["changed"] == true).count();
    assert_eq!(v["changed"].as_u64(), Some(marked as u64));
    assert!(rows.iter().filter(|r| r["clock"] == "host wall time").all(|r| r["changed"] == false));

    // The text form marks the changed figures and ends with the verdict.
    let o = diff(&["--changed-only", s(&a), s(&wide)]);
    assert_eq!(o.status.code(), Some(1));
    let out = text(&o.stdout);
    assert!(out.contains("(differs)") && out.contains("CHANGED") && out.contains(&format!("changed: {marked} of ")), "{out}");
    assert!(!out.lines().any(|l| l.contains("  no  ")), "--changed-only shows only changed rows: {out}");
}

#[test]
fn inputs_that_cannot_be_compared_exit_2_naming_the_file() {
    let fixtures = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/results");
    let (bw, lat, spy) = (fixtures.join("bw.json"), fixtures.join("lat.json"), fixtures.join("spy.json"));
    let dir = tempfile::tempdir().expect("tempdir");
    let missing = dir.path().join("missing.json");
    let not_json = dir.path().join("notes.json");
    std::fs::write(&not_json, "this is not { json").expect("write");
    let mut hw: Value = serde_json::from_str(&std::fs::read_to_string(&bw).expect("read")).expect("JSON");
    hw["environment"]["simulated"] = false.into();
    hw["environment"]["sim"] = Value::Null;
    hw["environment"]["backend"] = "vfio".into();
    hw["time_mode"] = "hardware".into();
    hw.as_object_mut().expect("doc").remove("simulator_limits");
    let hw_path = dir.path().join("hw.json");
    std::fs::write(&hw_path, serde_json::to_string(&hw).expect("JSON")).expect("write");

    for (args, needles) in [
        (vec![s(&bw), s(&missing)], vec![s(&missing), "cannot read it"]),
        (vec![s(&not_json), s(&bw)], vec![s(&not_json), "not JSON"]),
        (vec![s(&bw), s(&lat)], vec!["\"bw\"", "\"lat\"", "same kind"]),
        (vec![s(&spy), s(&spy)], vec![s(&spy), "accepted kinds: bw, lat, pio, characterize, model, irq, loop"]),
        (vec![s(&bw), s(&hw_path)], vec!["simulated", "hardware", "--across-clocks"]),
        (vec!["--threshold=-3", s(&bw), s(&bw)], vec!["--threshold", "-3"]),
    ] {
        let o = diff(&args);
        let err = text(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {err}");
        assert!(!err.contains("panicked"), "{err}");
        for n in needles {
            assert!(err.contains(n), "{args:?}: {n:?} not in {err}");
        }
    }
    // Accepted across clocks: every row flagged, none judged, exit 0.
    let o = diff(&["--across-clocks", s(&bw), s(&hw_path)]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    assert!(text(&o.stdout).contains("CLOCKS DIFFER"), "{}", text(&o.stdout));
}

/// Two results with no figure in common (every row "only in A" or "only in B") compared
/// nothing: that is no evidence of "no change" (before: "no significant change", exit 0).
#[test]
fn results_with_nothing_in_common_exit_2_saying_nothing_was_compared() {
    let fixtures = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/results");
    let bw = fixtures.join("bw.json");
    let mut other: Value = serde_json::from_str(&std::fs::read_to_string(&bw).expect("read")).expect("JSON");
    for p in other["points"].as_array_mut().expect("points") {
        let size = p["transfer_size"].as_u64().expect("transfer_size");
        p["transfer_size"] = (size + 4).into();
        if p["config"].is_object() {
            p["config"]["transfer_size"] = (size + 4).into();
        }
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("other-sizes.json");
    std::fs::write(&path, serde_json::to_string(&other).expect("JSON")).expect("write");
    let o = diff(&[s(&bw), s(&path)]);
    let (out, err) = (text(&o.stdout), text(&o.stderr));
    assert_eq!(o.status.code(), Some(2), "{out}{err}");
    assert!(out.contains("nothing compared: 0 of "), "{out}");
    assert!(err.contains("nothing was compared") && err.contains("only in one"), "{err}");
    let o = diff(&["--json", s(&bw), s(&path)]);
    assert_eq!(o.status.code(), Some(2));
    let v: Value = serde_json::from_slice(&o.stdout).expect("JSON");
    assert_eq!((v["verdict"].as_str(), v["compared"].as_u64()), (Some("nothing compared"), Some(0)), "{v}");
}
