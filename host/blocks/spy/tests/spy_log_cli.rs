//! `tlpx spy convert --log` prints a trace in time order across directions. A capture of the
//! generator's DMA reads and writes holds records out of time order (the spy emits a record at
//! its TLP's last beat, stamped with its first, so a short TLP inside a long one of the other
//! direction comes first), and the log puts every one of them in order, with no negative delta.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use tlpx_testkit::SimProcess as Sim;
use tlpx_trace::{Record, TraceReader};

use crate::common;
use common::{text, tlpx, tlpx_bin};

/// The time column of a log line, in ns (`   12.504 us  ...`).
fn time_ns(line: &str) -> Option<u64> {
    let (us, _) = line.trim_start().split_once(" us  ")?;
    let (whole, frac) = us.split_once('.')?;
    Some(whole.parse::<u64>().ok()? * 1000 + frac.parse::<u64>().ok()?)
}

#[test]
fn the_log_of_a_trace_recorded_out_of_time_order_is_in_time_order() {
    let sim = Sim::start(&[]);
    let device = sim.selector();
    let trace = sim.path("order.tlpx");
    let mut capture = Command::new(tlpx_bin())
        .args(["--device", &device, "--json", "spy", "capture", "--quiet", "-o"])
        .arg(&trace)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start capture");
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let v: serde_json::Value = serde_json::from_slice(&tlpx(&device, &["--json", "owners"]).stdout).unwrap_or_default();
        if v.as_array().into_iter().flatten().any(|r| r["block"] == "spy" && r["owner"]["pid"].as_u64() == Some(u64::from(capture.id()))) {
            break;
        }
        assert!(Instant::now() < deadline && capture.try_wait().ok().flatten().is_none(), "the capture never owned the spy");
        std::thread::sleep(Duration::from_millis(20));
    }
    for op in ["read", "write"] {
        let out = tlpx(&device, &["bw", "--op", op, "--sizes", "1024", "--count", "8"]);
        assert!(out.status.success(), "{}", text(&out.stderr));
    }
    assert!(tlpx(&device, &["spy", "stop"]).status.success());
    let out = capture.wait_with_output().expect("capture");
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));

    let records: Vec<Record> = TraceReader::open(&trace).expect("trace").read_all().expect("records");
    // The file is out of time order somewhere (else this test would show nothing).
    let out_of_order = records.windows(2).filter(|w| w[1].event_time() < w[0].event_time()).count();
    assert!(out_of_order > 0, "the capture has records out of time order");
    let out = tlpx(&device, &["spy", "convert", trace.to_str().expect("path"), "--log"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let log = text(&out.stdout);
    let times: Vec<u64> = log.lines().filter_map(time_ns).collect();
    assert_eq!(times.len(), tlpx_trace::entries(&records).len(), "a line per entry\n{log}");
    assert!(times.windows(2).all(|w| w[0] <= w[1]), "times never go back\n{log}");
    let negative =
        |l: &&str| l.split_whitespace().any(|w| w.strip_prefix('-').is_some_and(|d| d.starts_with(|c: char| c.is_ascii_digit())));
    assert!(!log.lines().any(|l| negative(&l)), "no negative delta\n{log}");
    assert!(log.contains("end of capture:"), "the footer line");
    eprintln!("{out_of_order} records out of time order in the file, {} log lines in order", times.len());
}
