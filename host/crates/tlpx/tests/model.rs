//! `tlpx model` through the real binary, against hand-computed cases.
//!
//!   tlpx model ──(link from the flags, libpci on a running tlpx-sim, or the default)──► tlpx-model
//!
//! The expected figures are computed by hand from pcie-bench's constants (the same cases
//! tlpx-model's own tests recompute), so a change in the command's wiring (wrong field,
//! wrong operation, lost flag) shows up here as a wrong number.

use std::process::Output;
use tlpx_testkit::SimProcess as Sim;

use crate::common;
use common::tlpx;

/// A device that is certainly not there, so the model falls back to its default link.
const NO_DEVICE: &str = "sim:/nonexistent/tlpx-model-test.sock";

fn json(out: &Output) -> serde_json::Value {
    assert!(out.status.success(), "tlpx failed: {}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).expect("tlpx printed JSON")
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// The one point of a `--json` run with one size and one operation.
fn only_point(args: &[&str]) -> serde_json::Value {
    let mut all = vec!["--json", "model"];
    all.extend_from_slice(args);
    let v = json(&tlpx(NO_DEVICE, &all));
    let points = v["points"].as_array().expect("points");
    assert_eq!(points.len(), 1, "{v}");
    points[0].clone()
}

fn assert_close(actual: &serde_json::Value, expected: f64) {
    let a = actual.as_f64().expect("a number");
    assert!((a / expected - 1.0).abs() < 1e-9, "got {a}, expected {expected}");
}

const GEN3_X8: [&str; 8] = ["--gen", "3", "--lanes", "8", "--mps", "256", "--mrrs", "512"];

#[test]
fn gen3_x8_4k_read_is_6_711_gb_s() {
    // Downstream: 16 CplD × (8 framing + 12 header) + 4096 = 4416 bytes per transfer;
    // capacity 7.876923077e9 × (1 − 16/203 − 4/1538) = 7.235595703e9 B/s.
    let mut args = GEN3_X8.to_vec();
    args.extend(["--sizes", "4096", "--op", "read"]);
    let p = only_point(&args);
    assert_close(&p["bytes_per_second"], 6.711_277_174e9);
    assert_close(&p["gbit_per_second"], 6.711_277_174e9 * 8.0 / 1e9);
    assert_close(&p["efficiency"], 0.852_017_610_0);
    assert_eq!(p["analysis"]["upstream_tlps"], 8);
    assert_eq!(p["analysis"]["downstream_tlps"], 16);
    assert_eq!(p["analysis"]["limited_by"], "downstream");
}

#[test]
fn small_writes_pay_the_header_and_addr64_costs_more() {
    // 64/(8 + 12 + 64) × C and 64/(8 + 16 + 64) × C.
    let mut args = GEN3_X8.to_vec();
    args.extend(["--sizes", "64", "--op", "write"]);
    assert_close(&only_point(&args)["bytes_per_second"], 5.512_834_821e9);
    args.push("--addr64");
    assert_close(&only_point(&args)["bytes_per_second"], 5.262_251_420e9);
}

#[test]
fn write_sawtooth_at_mps() {
    let mut args = vec!["--json", "model"];
    args.extend(GEN3_X8);
    args.extend(["--sizes", "256,257", "--op", "write", "--addr64"]);
    let v = json(&tlpx(NO_DEVICE, &args));
    assert_close(&v["points"][0]["bytes_per_second"], 6.615_401_786e9);
    assert_close(&v["points"][1]["bytes_per_second"], 6.096_879_002e9);
}

#[test]
fn read_write_and_rcb_completions() {
    let mut args = GEN3_X8.to_vec();
    args.extend(["--sizes", "4K", "--op", "rdwr", "--addr64"]);
    // Upstream 16 MWr × 24 + 4096 + 8 MRd × 24 = 4672 bytes: 4096/4672 × C.
    assert_close(&only_point(&args)["bytes_per_second"], 6.343_535_959e9);
    let mut args = GEN3_X8.to_vec();
    args.extend(["--sizes", "4096", "--op", "read", "--rcb-completions"]);
    // 64 completions of 64 B: 64 × 20 + 4096 = 5376 bytes: 4096/5376 × C.
    assert_close(&only_point(&args)["bytes_per_second"], 5.512_834_821e9);
}

#[test]
fn gen2_x4_4k_write() {
    // Raw 5 GT/s × 8/10 × 4 / 8 = 2e9; DLLP interval (Gen2 x4 MPS 256) 169 bytes:
    // C = 2e9 × (1 − 16/169 − 4/1538) = 1.805449327e9; 4096/4416 × C = 1.674619666e9.
    let p = only_point(&["--gen", "2", "--lanes", "4", "--mps", "256", "--mrrs", "512", "--sizes", "4096", "--op", "write"]);
    assert_close(&p["bytes_per_second"], 1.674_619_666e9);
}

#[test]
fn default_link_is_pcie_bench_s_and_says_so() {
    let out = tlpx(NO_DEVICE, &["model", "--sizes", "4096", "--op", "read"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("Gen3 x8, MPS 256, MRRS 512"), "{text}");
    assert!(text.contains("default") && text.contains("no device reachable"), "{text}");
    assert!(text.contains("6711.277"), "{text}");
    let v = json(&tlpx(NO_DEVICE, &["--json", "model", "--sizes", "64..4096"]));
    assert_eq!(v["schema"], "tlpx-result");
    assert_eq!(v["kind"], "model");
    assert_eq!(v["points"].as_array().map(Vec::len), Some(7 * 3));
    assert!(v["parameters"]["link_source"].as_str().is_some_and(|s| s.starts_with("default")));
}

#[test]
fn sizes_ranges_and_output_file() {
    let dir = tempfile::tempdir().expect("temp dir");
    let file = dir.path().join("sub/model.json");
    let out = tlpx(NO_DEVICE, &["model", "--sizes", "64..256+64", "--op", "write", "--output", file.to_str().expect("utf-8")]);
    assert!(out.status.success(), "{}", stderr(&out));
    let v: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&file).expect("written")).expect("json");
    let sizes: Vec<u64> = v["points"].as_array().expect("points").iter().map(|p| p["transfer_size"].as_u64().unwrap_or(0)).collect();
    assert_eq!(sizes, vec![64, 128, 192, 256]);
    assert_eq!(v["schema_version"], 1);
}

#[test]
fn bad_model_arguments_are_clear_errors() {
    for (args, needle) in [
        (&["model", "--gen", "6"][..], "--gen"),
        (&["model", "--lanes", "3"][..], "1, 2, 4, 8 or 16"),
        (&["model", "--mps", "300"][..], "--mps must be 128, 256"),
        (&["model", "--mrrs", "8192"][..], "'8192' for '--mrrs <MRRS>': 8192 is out of range; accepted: 128, 256"),
        (&["model", "--rcb", "32"][..], "'32' for '--rcb <RCB>': 32 is out of range; accepted: 64 or 128 bytes"),
        (&["model", "--sizes", "0"][..], "--sizes: 0"),
        (&["model", "--sizes", "64..abc"][..], "\"64..abc\""),
        (&["model", "--op", "sideways"][..], "sideways"),
    ] {
        let out = tlpx(NO_DEVICE, args);
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        let err = stderr(&out);
        assert!(err.contains(needle), "{args:?}: {err}");
        assert!(!err.contains("panicked"), "{err}");
    }
}

// With a simulated card: the link comes from libpci on the sim's config space -------------

#[test]
fn link_comes_from_libpci_on_the_simulated_card() {
    let sim = Sim::start(&["--gen", "3", "--lanes", "4", "--mps", "128", "--mrrs", "256"]);
    let v = json(&tlpx(&sim.selector(), &["--json", "model", "--sizes", "4096", "--op", "read"]));
    assert_eq!(v["model"]["link"]["generation"], 3);
    assert_eq!(v["model"]["link"]["lanes"], 4);
    assert_eq!(v["model"]["link"]["mps"], 128);
    assert_eq!(v["model"]["link"]["mrrs"], 256);
    assert_eq!(v["link"]["source"], "libpci");
    assert_eq!(v["environment"]["simulated"], true);
    assert!(v["parameters"]["link_source"].as_str().is_some_and(|s| s.starts_with("libpci")), "{v}");
    // By hand: raw 8e9 × 128/130 × 4 / 8 = 3.938461538e9; DLLP interval (Gen3 x4 MPS 128) 169:
    // C = raw × (1 − 16/169 − 4/1538) = 3.555366e9. 4 KiB read: 16 MRd (upstream 320 B),
    // 32 CplD of 128 B downstream: 32 × 20 + 4096 = 4736 B. 4096/4736 × C.
    let raw = 8e9 * 128.0 / 130.0 * 4.0 / 8.0;
    let c = raw * (1.0 - 16.0 / 169.0 - 4.0 / 1538.0);
    assert_close(&v["points"][0]["bytes_per_second"], 4096.0 / 4736.0 * c);
    // A flag replaces one field of the device's link, and the output says so.
    let v = json(&tlpx(&sim.selector(), &["--json", "model", "--sizes", "4096", "--op", "read", "--mps", "256"]));
    assert_eq!(v["model"]["link"]["mps"], 256);
    assert_eq!(v["model"]["link"]["lanes"], 4);
    assert!(v["parameters"]["link_source"].as_str().is_some_and(|s| s.contains("mps")), "{v}");
}
