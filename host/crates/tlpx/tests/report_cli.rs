//! `tlpx report` end to end: real results from the real binary against the real tlpx-sim.
//!
//!   tlpx bw / lat / pio / irq / loop / rule30 ──► tlpx-sim ──► result JSON documents
//!   tlpx report *.json ──► one self-contained HTML page (inline CSS, inline SVG)
//!
//! The page must be well formed enough to open (one <html>, balanced <svg>, a data mark in
//! every figure), load nothing from the network, say SIMULATED for simulated results, give
//! every input its own section and escape what it is given. Bad inputs (missing, not JSON,
//! not a tlpx result, unknown kind, a field missing) are refused with exit 2, naming the file.
//! (A headless-browser rendering test is separate work.)

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;
use tlpx_testkit::SimProcess as Sim;

use crate::common;
use common::text;

fn tlpx(device: Option<&str>, args: &[&str]) -> Output {
    let mut c = Command::new(PathBuf::from(env!("CARGO_BIN_EXE_tlpx")));
    if let Some(d) = device {
        c.arg("--device").arg(d);
    }
    c.args(args).output().expect("run tlpx")
}

fn s(p: &Path) -> &str {
    p.to_str().expect("utf-8 path")
}

/// Runs every measuring command once (small) and returns the result documents' paths.
fn generate(sim: &Sim) -> Vec<PathBuf> {
    let dev = sim.selector();
    let runs: Vec<(&str, Vec<&str>)> = vec![
        ("bw", vec!["bw", "--sizes", "64,256,1024", "--count", "100"]),
        ("lat", vec!["lat", "--count", "100"]),
        ("pio", vec!["pio", "--widths", "4,8", "--count", "50"]),
        (
            "irq",
            vec![
                "irq",
                "--samples",
                "50",
                "--min",
                "10us",
                "--max",
                "30us",
                "--compare",
                "idle,loaded",
                "--load",
                "cpu",
                "--load-cpus",
                "0",
            ],
        ),
        ("loop", vec!["loop", "--size", "8,256", "--detect", "poll,irq", "--iterations", "5"]),
    ];
    let mut out = Vec::new();
    for (name, args) in runs {
        let path = sim.path(&format!("{name}.json"));
        let mut a = args.clone();
        a.extend(["--output", s(&path)]);
        let o = tlpx(Some(&dev), &a);
        assert!(o.status.success(), "{name}: {}\n{}", text(&o.stdout), text(&o.stderr));
        out.push(path);
    }
    let r30 = sim.path("r30");
    let o = tlpx(
        Some(&dev),
        &["rule30", "sweep", "--packets", "2", "--generations", "3", "--lengths", "8,64,256", "--latencies", "10ns", "--out-dir", s(&r30)],
    );
    assert!(o.status.success(), "rule30: {}\n{}", text(&o.stdout), text(&o.stderr));
    out.push(r30.join("rule30-sweep.json"));
    for p in &out {
        assert!(p.exists(), "{} was not written", p.display());
    }
    out
}

/// Every `<svg>...</svg>` of the page.
fn figures(html: &str) -> Vec<&str> {
    html.split("<svg").skip(1).map(|f| f.split("</svg>").next().expect("split")).collect()
}

#[test]
fn report_of_every_kind_is_self_contained_with_a_section_and_figures_each() {
    let sim = Sim::start(&[]);
    let inputs = generate(&sim);
    let html_path = sim.path("out/report.html");
    let mut args = vec!["--json", "report", "--output", s(&html_path), "--title", "Bench <run> & \"friends\" 'x'"];
    args.extend(inputs.iter().map(|p| s(p)));
    let o = tlpx(None, &args);
    assert!(o.status.success(), "{}\n{}", text(&o.stdout), text(&o.stderr));
    let summary: Value = serde_json::from_slice(&o.stdout).expect("JSON summary");
    assert_eq!(summary["path"], s(&html_path));
    let sections = summary["sections"].as_array().expect("sections");
    assert_eq!(sections.len(), inputs.len());
    let html = std::fs::read_to_string(&html_path).expect("report written");

    // Well formed enough: one document, balanced SVG, a data mark in every figure.
    assert!(html.starts_with("<!DOCTYPE html>"));
    assert_eq!(html.matches("<html").count(), 1);
    assert_eq!(html.matches("</html>").count(), 1);
    assert_eq!(html.matches("<body>").count(), 1);
    assert_eq!(html.matches("<svg").count(), html.matches("</svg>").count(), "balanced <svg>");
    let figs = figures(&html);
    assert_eq!(figs.len() as u64, summary["figures"].as_u64().expect("figures"));
    assert_eq!(html.matches("<section").count(), html.matches("</section>").count());
    for (i, f) in figs.iter().enumerate() {
        assert!(f.contains("<polyline") || f.contains("<circle") || f.contains("class=\"data\""), "figure {i} has no data mark");
        assert!(f.contains("<text"), "figure {i} has no labels");
    }

    // Self-contained: nothing fetched, no scripts.
    let lower = html.to_lowercase();
    assert!(!lower.contains("http://") && !lower.contains("https://"), "an external reference");
    assert!(!lower.contains("<script") && !lower.contains("<link") && !lower.contains("src="), "an external resource");

    // Simulated results say so; the title is escaped.
    assert!(html.contains("SIMULATED (link model Gen"), "simulated badge");
    assert!(html.contains("Bench &lt;run&gt; &amp; &quot;friends&quot; &#39;x&#39;"), "escaped title");
    assert!(!html.contains("<run>"));

    // What the simulator fixes by construction is said beside the figures, not as findings:
    // efficiency in % with why it cannot exceed 100 %, a box of limits (not repeated among the
    // notes), PIO as socket round trips, the comparisons and both clocks of the crossovers.
    for needle in [
        "efficiency (% of model)",
        "so efficiency cannot exceed 100 % by construction",
        "What the simulator fixes here (not findings)",
        "tlpx-sim socket round trip per access (host wall time)",
        "Idle vs loaded:</b> idle and loaded are the same by construction",
        "irq vs poll:</b>",
        "Two clocks:</b>",
        "its clock",
        "Latency (card time, simulated)",
        "host compute (median, real host time)",
        "(SIMULATED: no interrupt controller or kernel dispatch in it)",
    ] {
        assert!(html.contains(needle), "{needle}");
    }
    assert!(!html.contains("SIMULATED: efficiency (achieved / model) cannot exceed"), "a limit repeated among the notes");
    assert!(html.contains("efficiency (achieved / model) cannot exceed 1.0 (100 %)"), "the efficiency limit in its box");

    // A section per input, each with its kind's figures.
    for (input, section) in inputs.iter().zip(sections) {
        assert_eq!(section["file"], s(input));
        assert!(html.contains(&format!("— {}</h2>", s(input))), "no section for {}", input.display());
    }
    let by_kind =
        |k: &str| sections.iter().find(|x| x["kind"] == k).unwrap_or_else(|| panic!("no {k} section"))["figures"].as_u64().expect("n");
    assert_eq!(by_kind("bw"), 3, "one figure per operation (read, write, rdwr)");
    assert_eq!(by_kind("lat"), 1, "the CDF");
    assert_eq!(by_kind("pio"), 1);
    assert_eq!(by_kind("irq"), 1, "the histogram");
    assert!(by_kind("loop") >= 2, "median against size and histograms");
    assert_eq!(by_kind("rule30"), 1, "the landscape");
    for needle in
        ["model (tlpx-model", "DMA read latency CDF", "Interrupt latency histogram", "Loop time:", "Rule 30: time per line", "p99"]
    {
        assert!(html.contains(needle), "{needle}");
    }

    // Text mode prints the path written.
    let mut args = vec!["report", "-o", s(&html_path)];
    args.push(s(&inputs[0]));
    let o = tlpx(None, &args);
    assert!(o.status.success());
    assert!(text(&o.stdout).contains(s(&html_path)), "{}", text(&o.stdout));
}

fn refused(args: &[&str], file: &Path, what: &str) {
    let mut a = vec!["report", "--output"];
    let out = file.with_extension("html");
    a.push(s(&out));
    a.extend(args);
    let o = tlpx(None, &a);
    let err = text(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{what}: {err}");
    assert!(err.contains(s(file)), "{what}: the file is not named: {err}");
    assert!(!err.contains("panicked"), "{err}");
    assert!(!out.exists(), "{what}: a report was written anyway");
}

#[test]
fn bad_inputs_are_refused_with_the_file_named() {
    let dir = tempfile::tempdir().expect("tempdir");
    let missing = dir.path().join("missing.json");
    refused(&[s(&missing)], &missing, "missing file");

    let not_json = dir.path().join("notes.json");
    std::fs::write(&not_json, "this is not { json").expect("write");
    refused(&[s(&not_json)], &not_json, "not JSON");

    let other = dir.path().join("package.json");
    std::fs::write(&other, r#"{"name": "left-pad", "version": "1.0.0"}"#).expect("write");
    refused(&[s(&other)], &other, "not a tlpx result");

    let unknown = dir.path().join("unknown.json");
    std::fs::write(&unknown, r#"{"schema": "tlpx-result", "schema_version": 1, "kind": "teapot", "points": []}"#).expect("write");
    refused(&[s(&unknown)], &unknown, "unknown kind");
    let o = tlpx(None, &["report", "-o", s(&dir.path().join("x.html")), s(&unknown)]);
    let err = text(&o.stderr);
    assert!(err.contains("teapot") && err.contains("bw, bw_driver, lat, pio"), "accepted kinds listed: {err}");
}

#[test]
fn a_known_kind_missing_a_field_is_refused_with_the_field_named() {
    let sim = Sim::start(&[]);
    let path = sim.path("lat.json");
    let o = tlpx(Some(&sim.selector()), &["lat", "--count", "50", "--output", s(&path)]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let mut doc: Value = serde_json::from_str(&std::fs::read_to_string(&path).expect("read")).expect("JSON");
    doc["points"][0].as_object_mut().expect("point").remove("samples_cycles");
    let broken = sim.path("lat-broken.json");
    std::fs::write(&broken, serde_json::to_string(&doc).expect("JSON")).expect("write");
    refused(&[s(&path), s(&broken)], &broken, "missing field");
    let o = tlpx(None, &["report", "-o", s(&sim.path("x.html")), s(&broken)]);
    assert!(text(&o.stderr).contains("points[0].samples_cycles"), "{}", text(&o.stderr));

    let mut doc: Value = serde_json::from_str(&std::fs::read_to_string(&path).expect("read")).expect("JSON");
    doc.as_object_mut().expect("doc").remove("environment");
    std::fs::write(&broken, serde_json::to_string(&doc).expect("JSON")).expect("write");
    let o = tlpx(None, &["report", "-o", s(&sim.path("x.html")), s(&broken)]);
    assert_eq!(o.status.code(), Some(2));
    assert!(text(&o.stderr).contains("environment") && text(&o.stderr).contains(s(&broken)), "{}", text(&o.stderr));
}

fn fixtures() -> Vec<PathBuf> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/results");
    ["bw", "bw_driver", "lat", "pio", "characterize", "model", "irq", "loop", "rule30", "spy", "script"]
        .iter()
        .map(|k| dir.join(format!("{k}.json")))
        .collect()
}

#[test]
fn the_fixtures_of_every_kind_are_drawn_with_their_figures() {
    // Documents of every kind, written by the commands on the simulated card (src/results/kinds.rs
    // says with which arguments); read through their types, drawn through crate::plot.
    let dir = tempfile::tempdir().expect("tempdir");
    let html_path = dir.path().join("report.html");
    let inputs = fixtures();
    let mut args = vec!["--json", "report", "--output", s(&html_path)];
    args.extend(inputs.iter().map(|p| s(p)));
    let o = tlpx(None, &args);
    assert!(o.status.success(), "{}\n{}", text(&o.stdout), text(&o.stderr));
    let summary: Value = serde_json::from_slice(&o.stdout).expect("JSON summary");
    let figures_of = |k: &str| {
        summary["sections"].as_array().expect("sections").iter().find(|x| x["kind"] == k).expect("a section")["figures"]
            .as_u64()
            .expect("n")
    };
    // bw: read, write, rdwr; characterize: its three bandwidths, the CDF and PIO; irq: the
    // histogram; loop: medians and a histogram per (condition, detection, return).
    // bw_driver (LitePCIe's driver, written in the virtual platform's guest): a table, no figure.
    let expected =
        [("bw", 3), ("bw_driver", 0), ("lat", 1), ("pio", 1), ("characterize", 5), ("model", 1), ("irq", 1), ("loop", 3), ("rule30", 1)];
    for (kind, n) in expected {
        assert_eq!(figures_of(kind), n, "{kind}");
    }
    assert_eq!(figures_of("script"), 1);
    assert!(figures_of("spy") <= 1);
    let html = std::fs::read_to_string(&html_path).expect("report written");
    assert_eq!(html.matches("<section").count(), inputs.len());
    assert_eq!(html.matches("<svg").count() as u64, summary["figures"].as_u64().expect("figures"));
    for needle in
        ["Read latency seen by the spy", "TLPs seen by the spy", "Model: payload bandwidth", "Script: DMA runs", "Maximum sustained"]
    {
        assert!(html.contains(needle), "{needle}");
    }
}

#[test]
fn a_schema_version_this_tlpx_does_not_read_is_refused_with_the_versions() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut doc: Value = serde_json::from_str(&std::fs::read_to_string(&fixtures()[0]).expect("read")).expect("JSON");
    doc["schema_version"] = 2.into();
    let newer = dir.path().join("newer.json");
    std::fs::write(&newer, serde_json::to_string(&doc).expect("JSON")).expect("write");
    refused(&[s(&newer)], &newer, "a newer version");
    let o = tlpx(None, &["report", "-o", s(&dir.path().join("x.html")), s(&newer)]);
    let err = text(&o.stderr);
    assert!(err.contains("\"schema_version\" is 2; this tlpx reads version 1"), "{err}");

    doc.as_object_mut().expect("doc").remove("schema_version");
    let unversioned = dir.path().join("unversioned.json");
    std::fs::write(&unversioned, serde_json::to_string(&doc).expect("JSON")).expect("write");
    refused(&[s(&unversioned)], &unversioned, "no version");
    let o = tlpx(None, &["report", "-o", s(&dir.path().join("x.html")), s(&unversioned)]);
    assert!(text(&o.stderr).contains("without \"schema_version\"; this tlpx reads version 1"), "{}", text(&o.stderr));
}

#[test]
fn results_of_a_kind_given_twice_are_compared_with_overlays_and_differences() {
    // Two copies of the loop, irq and bw fixtures (one of them a run 25 % slower): a comparison
    // section per kind, first in the page and named in its index, histograms overlaid bar by bar.
    let dir = tempfile::tempdir().expect("tempdir");
    let fx = fixtures();
    let pick = |k: &str| fx.iter().find(|p| p.file_stem().is_some_and(|s| s == k)).expect("fixture").clone();
    let mut inputs = Vec::new();
    for k in ["loop", "irq", "bw"] {
        let mut v: Value = serde_json::from_str(&std::fs::read_to_string(pick(k)).expect("read")).expect("JSON");
        let copy = dir.path().join(format!("{k}-2.json"));
        if k == "bw" {
            for p in v["points"].as_array_mut().expect("points") {
                let m = p["achieved_bytes_per_second"]["median"].as_f64().expect("median");
                p["achieved_bytes_per_second"]["median"] = (m * 0.75).into();
            }
        }
        std::fs::write(&copy, serde_json::to_string(&v).expect("JSON")).expect("write");
        inputs.push(pick(k));
        inputs.push(copy);
    }
    let html_path = dir.path().join("report.html");
    let mut args = vec!["--json", "report", "--output", s(&html_path)];
    args.extend(inputs.iter().map(|p| s(p)));
    let o = tlpx(None, &args);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let summary: Value = serde_json::from_slice(&o.stdout).expect("JSON");
    let kinds: Vec<&str> = summary["sections"].as_array().expect("sections").iter().map(|x| x["kind"].as_str().expect("kind")).collect();
    assert_eq!(&kinds[..3], ["comparison of loop", "comparison of irq", "comparison of bw"]);
    assert_eq!(kinds.len(), 3 + 6);
    let html = std::fs::read_to_string(&html_path).expect("report");
    let index = html.split("<nav>").next().expect("head");
    for needle in ["Compared: 2 loop results: #1 ", "2 irq results: #3 ", "2 bw results: #5 "] {
        assert!(index.contains(needle), "{needle}: {index}");
    }
    let section =
        |n: usize| html.split(&format!("<section id=\"r{n}\">")).nth(1).and_then(|x| x.split("</section>").next()).expect("section");
    // The loop's histograms: two results' bars in each (two paths of bars, two legend entries).
    let loop_cmp = section(1);
    let hist = loop_cmp.split("<svg").skip(1).find(|f| f.contains("loop time 8 B")).expect("a loop histogram overlay");
    assert_eq!(hist.matches("<path class=\"data\"").count(), 2, "a bar series per result");
    // Both results keep their loop times: one binning chosen from the samples of both.
    assert!(hist.contains("from the samples") && !hist.contains("log2"), "data bins in the overlay");
    assert!(
        loop_cmp.contains("Differences: #2") && loop_cmp.contains("loop time 8 B, idle, poll, register return (median)"),
        "loop differences"
    );
    // bw: the slower copy changed by tlpx diff's rules.
    let bw_cmp = section(3);
    assert!(bw_cmp.contains("Differences: #6") && bw_cmp.contains("<td>CHANGED</td>") && bw_cmp.contains("(-25.0 %)"), "bw differences");
}
