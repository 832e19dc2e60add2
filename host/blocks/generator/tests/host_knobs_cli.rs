//! pcie-bench's host knobs on the simulated card, end to end through the tlpx binary: each
//! cache state runs with exact data and is recorded with how it was produced, the buffers'
//! NUMA node is what the kernel (move_pages) says, `--iommu-pages` is refused where no IOMMU
//! is ours to map through, and pcie-bench's table layout carries the same figures as the
//! document (docs/bandwidth.md, "The host's knobs").

use std::process::Output;

use serde_json::Value;
use tlpx_testkit::SimProcess as Sim;

use crate::common;
use common::{text, tlpx};

fn json(out: &Output) -> Value {
    assert!(out.status.success(), "tlpx failed ({:?}): {}\n{}", out.status.code(), text(&out.stderr), text(&out.stdout));
    serde_json::from_slice(&out.stdout).expect("tlpx printed JSON")
}

fn u(v: &Value) -> u64 {
    v.as_u64().unwrap_or_else(|| panic!("not an integer: {v}"))
}

/// Every page of every buffer the run used is on a node the host has, as the kernel says.
fn check_buffers_on(v: &Value, node: Option<u64>) {
    let env = &v["environment"];
    let nodes: Vec<u64> = env["host_memory"]["numa_nodes"].as_array().expect("numa_nodes").iter().map(u).collect();
    assert!(!nodes.is_empty(), "{env}");
    let buffers = env["dma_buffers"].as_array().expect("dma_buffers");
    assert!(!buffers.is_empty(), "the buffers are recorded: {env}");
    for b in buffers {
        let pages = b["pages_by_node"].as_object().expect("pages_by_node");
        let total: u64 = pages.values().map(u).sum();
        assert_eq!(total, u(&b["bytes"]).div_ceil(u(&b["page_bytes"])), "every page has a node: {b}");
        assert!(b["page_errors"].as_object().expect("page_errors").is_empty(), "{b}");
        for n in pages.keys() {
            let n: u64 = n.parse().expect("a node number");
            assert!(nodes.contains(&n), "node {n} is one of the host's {nodes:?}");
            if let Some(want) = node {
                assert_eq!(n, want, "{b}");
            }
        }
    }
}

#[test]
fn every_cache_state_runs_with_exact_data_and_says_how_it_was_produced() {
    let sim = Sim::start(&[]);
    for (state, how) in [("host-warm", "the CPU writes"), ("device-warm", "the card writes"), ("cold", "flushes"), ("thrash", "MiB buffer")]
    {
        let out = tlpx(
            &sim.selector(),
            &[
                "--json",
                "bw",
                "--op",
                "read,write,rdwr",
                "--sizes",
                "256",
                "--count",
                "64",
                "--window",
                "16K",
                "--pattern",
                "seq,random",
                "--cache",
                state,
            ],
        );
        let v = json(&out);
        assert_eq!(v["parameters"]["cache"], state, "{}", v["parameters"]);
        for p in v["points"].as_array().expect("points") {
            assert_eq!(u(&p["card_error_total"]), 0, "{state}: {p}");
            if p["operation"] != "read" {
                let c = &p["host_check"];
                let bad = u(&c["corrupt_bytes"]) + u(&c["missing_bytes"]) + u(&c["stray_bytes"]);
                assert_eq!(bad, 0, "{state} {}: {c}", p["operation"]);
                assert!(u(&c["written_bytes"]) > 0, "{state}: the check saw the writes: {c}");
            }
        }
        check_buffers_on(&v, None);
        let limits = v["simulator_limits"].as_array().expect("limits");
        let said = limits.iter().any(|l| l["id"] == "host_memory_state_not_modelled" && l["concerns"] == serde_json::json!(["--cache"]));
        assert_eq!(said, state != "host-warm", "{state}: {limits:?}");
        // The text says the state and how it was made.
        let t = text(
            &tlpx(&sim.selector(), &["bw", "--op", "write", "--sizes", "256", "--count", "16", "--window", "4K", "--cache", state]).stdout,
        );
        let line = t.lines().find(|l| l.starts_with("cache: ")).unwrap_or_else(|| panic!("no cache line: {t}"));
        assert!(line.starts_with(&format!("cache: {state} (")) && line.contains(how), "{line}");
        assert!(t.contains("host memory: NUMA nodes ") && t.contains("the simulated card is on none"), "{t}");
        assert!(t.contains("(move_pages)"), "{t}");
    }
    // lat takes the same states (its write-then-read check included).
    let v = json(&tlpx(&sim.selector(), &["--json", "lat", "--count", "30", "--cache", "device-warm"]));
    assert_eq!(v["parameters"]["cache"], "device-warm");
    for p in v["points"].as_array().expect("points") {
        assert_eq!(u(&p["card_error_total"]), 0, "{p}");
        assert_eq!(u(&p["samples_dropped"]) + p["samples_cycles"].as_array().expect("samples").len() as u64, 30, "{p}");
    }
}

#[test]
fn the_numa_node_asked_is_where_the_kernel_puts_the_buffers() {
    let sim = Sim::start(&[]);
    let node = std::fs::read_to_string("/sys/devices/system/node/online")
        .map_or(0, |t| t.trim().split([',', '-']).next().and_then(|n| n.parse().ok()).unwrap_or(0));
    let v = json(&tlpx(
        &sim.selector(),
        &["--json", "bw", "--op", "read", "--sizes", "512", "--count", "32", "--window", "64K,1M", "--numa-node", &node.to_string()],
    ));
    assert_eq!(v["parameters"]["numa_node"], node);
    check_buffers_on(&v, Some(node));
    assert_eq!(v["environment"]["dma_buffers"].as_array().expect("buffers").len(), 2, "one per window");
    assert!(v["environment"]["host_memory"]["card_numa_node"].is_null(), "the simulated card is no PCI function here");
    assert!(v["simulator_limits"].as_array().expect("limits").iter().any(|l| l["concerns"] == serde_json::json!(["--numa-node"])));
    // A node the host does not have: refused naming the nodes it has.
    let out = tlpx(&sim.selector(), &["bw", "--op", "read", "--sizes", "512", "--count", "8", "--numa-node", "4000"]);
    assert!(!out.status.success());
    let e = text(&out.stderr);
    assert!(e.contains("--numa-node 4000") && e.contains("online NUMA nodes are"), "{e}");
    assert!(!e.contains("panicked"), "{e}");
}

#[test]
fn iommu_pages_are_refused_where_no_iommu_is_ours_to_map_through() {
    let sim = Sim::start(&[]);
    for cmd in [&["bw", "--op", "read", "--sizes", "256", "--count", "8"][..], &["lat", "--count", "8"]] {
        let mut args = cmd.to_vec();
        args.extend(["--iommu-pages", "2m"]);
        let out = tlpx(&sim.selector(), &args);
        assert!(!out.status.success(), "{args:?}");
        let e = text(&out.stderr);
        assert!(e.contains("--iommu-pages 2m") && e.contains("sim backend") && e.contains("vfio"), "{e}");
    }
    // A value clap does not know: the accepted ones are named.
    let out = tlpx(&sim.selector(), &["bw", "--iommu-pages", "64k"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("4k, 2m, 1g"), "{}", text(&out.stderr));
    let out = tlpx(&sim.selector(), &["bw", "--cache", "warm"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("host-warm, device-warm, cold, thrash"), "{}", text(&out.stderr));
}

/// pcie-bench's CSV: its header and rows (CRLF), split into cells.
fn csv(out: &Output) -> (Vec<String>, Vec<Vec<String>>) {
    assert!(out.status.success(), "{}", text(&out.stderr));
    let t = text(&out.stdout);
    assert!(t.ends_with("\r\n") && !t.replace("\r\n", "").contains('\n'), "CRLF line ends only: {t:?}");
    let mut lines = t.split("\r\n").filter(|l| !l.is_empty()).map(|l| l.split(',').map(String::from).collect::<Vec<_>>());
    let head = lines.next().expect("header");
    (head, lines.collect())
}

#[test]
fn pcie_benchs_layout_carries_the_documents_figures() {
    let sim = Sim::start(&[]);
    let dir = tempfile::tempdir().expect("tempdir");
    let doc_path = dir.path().join("bw.json");
    let out = tlpx(
        &sim.selector(),
        &[
            "bw",
            "--op",
            "read,rdwr",
            "--sizes",
            "64,512",
            "--count",
            "100",
            "--window",
            "8K",
            "--pattern",
            "random",
            "--repeat",
            "2",
            "--cache",
            "cold",
            "--format",
            "pciebench-csv",
            "--output",
            doc_path.to_str().expect("utf-8"),
        ],
    );
    let (head, rows) = csv(&out);
    assert_eq!(head.join(","), "Test,PAT,Cache,HO,DO,WinSZ,SZ,Time(cyc),Time,Bytes,Trans,BW (GB/s),Trans/s");
    let v: Value = serde_json::from_str(&std::fs::read_to_string(&doc_path).expect("the document")).expect("JSON");
    let clock = v["environment"]["card"]["clock_hz"].as_f64().expect("clock");
    let runs: Vec<(&Value, &Value)> = v["points"]
        .as_array()
        .expect("points")
        .iter()
        .flat_map(|p| p["runs"].as_array().expect("runs").iter().map(move |r| (p, r)))
        .collect();
    assert_eq!(rows.len(), 4 * 2, "one row per run");
    for (row, (p, r)) in rows.iter().zip(runs) {
        let test = if p["operation"] == "read" { "BW_DMA_RD" } else { "BW_DMA_RW" };
        assert_eq!(&row[..7], &[test, "Rand", "Flush", "0", "0", "8192", &p["transfer_size"].to_string()], "{row:?}");
        assert_eq!(row[7], r["cycles"].to_string());
        let ns: f64 = row[8].parse().expect("ns");
        assert!((ns - u(&r["cycles"]) as f64 * 1e9 / clock).abs() < 1e-3, "{row:?}");
        assert_eq!(row[9].parse::<u64>().expect("bytes"), u(&r["transfers"]) * u(&p["transfer_size"]));
        // pcie-bench's "GB/s" is 8 x bytes / ns: the document's bytes per second x 8 / 1e9.
        let gbit: f64 = row[11].parse().expect("bw");
        let from_doc = r["bytes_per_second"].as_f64().expect("rate") * 8.0 / 1e9;
        assert!((gbit - from_doc).abs() < 1e-6 * from_doc.max(1.0), "{gbit} vs {from_doc}");
    }
    // The text table: pcie-bench's heading, the same rows, nothing else on stdout.
    let t = text(
        &tlpx(&sim.selector(), &["bw", "--op", "write", "--sizes", "256", "--count", "50", "--window", "64K", "--format", "pciebench"])
            .stdout,
    );
    let lines: Vec<&str> = t.lines().collect();
    assert_eq!(lines.len(), 2, "{t}");
    assert!(lines[0].starts_with("      Test  PAT   Cache HO DO WinSZ   SZ     Time(cyc)"), "{t}");
    assert!(lines[1].trim_start().starts_with("BW_DMA_WR  Seq   HWarm  0  0  64KB  256"), "{t}");
    // Latency: pcie-bench's statistics of the document's samples.
    let lat_path = dir.path().join("lat.json");
    let out = tlpx(
        &sim.selector(),
        &["lat", "--op", "read", "--count", "200", "--format", "pciebench-csv", "--output", lat_path.to_str().expect("utf-8")],
    );
    let (head, rows) = csv(&out);
    assert_eq!(
        head[7..].join(","),
        "TAvg,Avg,Med,Min,Max,95%,99.9%,TAvg(ns),Avg(ns),Med(ns),Min(ns),Max(ns),95%(ns),99.9%(ns),#outliers,#samples"
    );
    let v: Value = serde_json::from_str(&std::fs::read_to_string(&lat_path).expect("the document")).expect("JSON");
    let p = &v["points"][0];
    let samples: Vec<u64> = p["samples_cycles"].as_array().expect("samples").iter().map(u).collect();
    assert_eq!(rows.len(), 1);
    let row = &rows[0];
    assert_eq!(&row[..2], &["LAT_DMA_RD", "Seq"]);
    assert_eq!(row[22].parse::<usize>().expect("#samples"), samples.len());
    assert_eq!(row[10].parse::<f64>().expect("min") as u64, *samples.iter().min().expect("samples"));
    assert_eq!(row[11].parse::<f64>().expect("max") as u64, *samples.iter().max().expect("samples"));
    // TAvg: the run's card time over every request (not over the samples the card kept).
    let tavg: f64 = row[7].parse().expect("TAvg");
    assert!((tavg - u(&p["cycles"]) as f64 / u(&p["transfers"]) as f64).abs() < 1e-9, "{row:?} {p}");
    assert!(tavg >= row[10].parse::<f64>().expect("min"), "a request lasts at least its latency: {row:?}");
    // --format with --json: one document on stdout at a time.
    let out = tlpx(&sim.selector(), &["--json", "lat", "--format", "pciebench"]);
    assert!(!out.status.success());
    assert!(text(&out.stderr).contains("choose one"), "{}", text(&out.stderr));
}

#[test]
fn the_matrix_writes_a_document_per_cell_and_its_figures_and_diff_compares_two_cells() {
    let sim = Sim::start(&[]);
    let dir = tempfile::tempdir().expect("tempdir");
    let out_dir = dir.path().join("m");
    let out = tlpx(
        &sim.selector(),
        &[
            "characterize",
            "--matrix",
            "--matrix-cache",
            "host-warm,cold",
            "--matrix-windows",
            "4K,64K",
            "--sizes",
            "64",
            "--count",
            "40",
            "--lat-count",
            "40",
            "--out-dir",
            out_dir.to_str().expect("utf-8"),
        ],
    );
    assert!(out.status.success(), "{}\n{}", text(&out.stderr), text(&out.stdout));
    let t = text(&out.stdout);
    assert!(t.contains("2 cells (cache state x NUMA node x IOMMU pages)"), "{t}");
    assert!(t.contains("SIMULATED: every cell is the same host to the simulator"), "{t}");
    for cell in ["host-warm-anynode-pages-default", "cold-anynode-pages-default"] {
        let bw: Value =
            serde_json::from_str(&std::fs::read_to_string(out_dir.join(format!("bw-{cell}.json"))).expect("bw doc")).expect("JSON");
        assert_eq!(bw["kind"], "bw");
        assert_eq!(bw["parameters"]["cache"], cell.split("-anynode").next().expect("state"));
        assert_eq!(bw["parameters"]["patterns"], serde_json::json!(["random"]), "pcie-bench's window sweeps are random");
        // BW_RD and BW_WR at 64 B over both windows, clean.
        assert_eq!(bw["points"].as_array().expect("points").len(), 4);
        assert!(bw["points"].as_array().expect("points").iter().all(|p| u(&p["card_error_total"]) == 0));
        check_buffers_on(&bw, None);
        let lat: Value =
            serde_json::from_str(&std::fs::read_to_string(out_dir.join(format!("lat-{cell}.json"))).expect("lat doc")).expect("JSON");
        assert_eq!(lat["points"][0]["measurement"], "LAT_RD");
    }
    // The bandwidth figures carry the model's line; the CDF one series per node.
    for (fig, has) in [
        ("matrix-bw-window-pages.svg", "model, BW_RD 64 B"),
        ("matrix-lat-cdf-nodes.svg", "LAT_RD 64 B"),
        ("matrix-bw-cache.svg", "model, BW_WR 64 B"),
    ] {
        let svg = std::fs::read_to_string(out_dir.join(fig)).expect("figure");
        assert!(svg.starts_with("<svg") && svg.contains(has), "{fig} names {has}");
    }
    // Any two cells compare, and the diff says how their hosts' memory differed.
    let a = out_dir.join("bw-host-warm-anynode-pages-default.json");
    let b = out_dir.join("bw-cold-anynode-pages-default.json");
    let d = tlpx(&sim.selector(), &["diff", a.to_str().expect("utf-8"), b.to_str().expect("utf-8")]);
    let dt = text(&d.stdout);
    assert!(d.status.success(), "{}", text(&d.stderr));
    assert!(dt.contains("host memory A: cache host-warm") && dt.contains("B: cache cold") && dt.contains("(differs)"), "{dt}");
    // The matrix sets the knobs itself, and has no single document for --json.
    for (args, says) in [
        (&["characterize", "--matrix", "--cache", "cold"][..], "leave out --cache"),
        (&["--json", "characterize", "--matrix"], "--json has no single document"),
    ] {
        let out = tlpx(&sim.selector(), args);
        assert!(!out.status.success(), "{args:?}");
        assert!(text(&out.stderr).contains(says), "{args:?}: {}", text(&out.stderr));
    }
    let out = tlpx(&sim.selector(), &["characterize", "--matrix-cache", "cold"]);
    assert_eq!(out.status.code(), Some(2), "--matrix-cache needs --matrix");
    // Options the matrix does not use are refused, not ignored.
    for opt in [&["--window", "64K"][..], &["--output", "m.json"], &["--widths", "4"], &["--pio-count", "5"]] {
        let mut args = vec!["characterize", "--matrix"];
        args.extend_from_slice(opt);
        let out = tlpx(&sim.selector(), &args);
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        assert!(text(&out.stderr).contains("cannot be used with"), "{args:?}: {}", text(&out.stderr));
    }
}
