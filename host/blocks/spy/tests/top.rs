//! `tlpx top` against a real tlpx-sim, with traffic driven by a second client.
//!
//!   tlpx bw (child, drives the generator) ──┐
//!                                            ├──► tlpx-sim ──► libtlpxcard.so (spy counts)
//!   tlpx top --snapshot / --json ───────────┘
//!
//! On the simulator top holds live time: card time runs on its own while top sleeps between
//! frames (wall time), so it sees the traffic `bw` drives. Each frame says the span of card
//! time it covers. No assertion is on wall time. Each test has its own sim.

use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use tlpx_device::backends::sim::SimDevice;
use tlpx_testkit::SimProcess as Sim;

use crate::common;
use common::{tlpx, tlpx_bin};

/// Starts `tlpx bw` writing for `duration` of card time and returns once its first
/// writes reached the root complex.
fn drive_writes(sim: &Sim, duration: &str) -> Child {
    let mut probe = SimDevice::connect(sim.socket()).expect("connect a probe");
    let before = probe.traffic().expect("traffic").card_writes.tlps;
    let mut bw = Command::new(tlpx_bin())
        .args(["--device", &sim.selector(), "bw", "--op", "write", "--sizes", "256", "--duration", duration])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start tlpx bw");
    let deadline = Instant::now() + Duration::from_secs(30);
    while probe.traffic().expect("traffic").card_writes.tlps < before + 100 {
        if let Ok(Some(status)) = bw.try_wait() {
            panic!("tlpx bw ended ({status}) before it wrote anything");
        }
        assert!(Instant::now() < deadline, "tlpx bw wrote nothing within 30 s");
        std::thread::sleep(Duration::from_millis(10));
    }
    bw
}

fn text(out: &Output) -> String {
    assert!(out.status.success(), "tlpx failed ({}): {}", out.status, String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The number after `label` in `line` (e.g. "up   card->host      381 MB/s").
fn mb_s_after(line: &str, label: &str) -> f64 {
    let rest = &line[line.find(label).expect("label") + label.len()..];
    rest.split_whitespace().next().and_then(|v| v.parse().ok()).unwrap_or_else(|| panic!("no figure after {label:?} in {line:?}"))
}

#[test]
fn snapshot_while_bw_writes_shows_upstream_bandwidth_and_mwr() {
    let sim = Sim::start(&[]);
    let mut bw = drive_writes(&sim, "100ms");
    let out = tlpx(&sim.selector(), &["top", "--snapshot", "--frames", "3", "--interval", "50ms"]);
    let _ = bw.wait();
    let snapshot = text(&out);
    for title in ["Bandwidth", "TLP mix", "Read latency", "Drops and errors", "Recent transactions"] {
        assert!(snapshot.contains(title), "{title} missing:\n{snapshot}");
    }
    assert_eq!(snapshot.lines().count(), 40, "{snapshot}");
    assert!(snapshot.lines().all(|l| l.chars().count() <= 120), "{snapshot}");
    let up = snapshot.lines().find(|l| l.contains("up   card->host")).expect("up line");
    assert!(mb_s_after(up, "card->host") > 1.0, "no upstream bandwidth: {up}\n{snapshot}");
    assert!(up.contains("limit"), "{up}");
    // The generator's writes: MWr up, with a non-zero rate.
    let mwr = snapshot.lines().find(|l| l.contains("MWr ")).expect("MWr row");
    let cells: Vec<&str> = mwr.split('│').filter(|c| c.trim_start().starts_with("MWr")).collect();
    let row: Vec<&str> = cells[0].split_whitespace().collect();
    assert_eq!(row[0], "MWr", "{mwr}");
    assert_ne!(row[3], "0", "no upstream MWr rate in {mwr}");
    // top's ring shows the writes themselves.
    assert!(snapshot.contains("up   MWr32"), "{snapshot}");
}

#[test]
fn json_gives_one_sample_per_frame_with_the_card_time_span_it_covers() {
    let sim = Sim::start(&[]);
    let mut bw = drive_writes(&sim, "100ms");
    let out = tlpx(&sim.selector(), &["--json", "top", "--frames", "3", "--interval", "50ms"]);
    let _ = bw.wait();
    let stdout = text(&out);
    let samples: Vec<serde_json::Value> = stdout.lines().map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}"))).collect();
    assert_eq!(samples.len(), 3, "{stdout}");
    let times: Vec<f64> = samples.iter().map(|s| s["card_time_s"].as_f64().expect("card_time_s")).collect();
    assert!(times.windows(2).all(|w| w[1] > w[0]), "card time not increasing: {times:?}");
    for (i, s) in samples.iter().enumerate() {
        assert_eq!(s["index"], i as u64 + 1);
        // Each frame covers card time from the previous reading to this one; the spans join.
        let (start, end, span) = (s["card_start_s"].as_f64().expect("start"), times[i], s["interval_s"].as_f64().expect("span"));
        assert!(span > 0.0 && (end - start - span).abs() < 1e-9, "{s}");
        if i > 0 {
            assert_eq!(start, times[i - 1], "frames cover adjacent spans");
        }
        assert_eq!(s["time_mode"], "live");
        assert_eq!(s["ring"], "top");
    }
    let up_total: f64 = samples.iter().map(|s| s["up"]["payload_bytes_per_second"].as_f64().expect("up")).sum();
    assert!(up_total > 0.0, "{stdout}");
    assert_eq!(samples[0]["up"]["classes"].as_array().expect("classes").len(), 8);
}

#[test]
fn on_the_simulator_top_holds_live_time_and_each_frame_states_its_card_time_span() {
    // Nothing else runs: in virtual time top's frames would cover only its own reads; in live
    // time card time runs while top sleeps.
    let sim = Sim::start(&[]);
    let mut probe = SimDevice::connect(sim.socket()).expect("probe");
    let out = tlpx(&sim.selector(), &["top", "--snapshot", "--frames", "2", "--interval", "100ms", "--width", "200"]);
    let snapshot = text(&out);
    let status = snapshot.lines().next().expect("status line");
    // "card time 0.001234..0.012345 s (11.111 ms in 100.123 ms wall, live) | frame 2"
    let span = status.split("card time ").nth(1).unwrap_or_else(|| panic!("no card time span: {status}"));
    let (range, rest) = span.split_once(" s (").unwrap_or_else(|| panic!("{status}"));
    let (a, b) = range.split_once("..").unwrap_or_else(|| panic!("{status}"));
    let (a, b): (f64, f64) = (a.parse().expect("start"), b.parse().expect("end"));
    assert!(b > a, "{status}");
    assert!(rest.contains(" wall, live) | frame 2"), "{status}");
    // top's claim ended with it: nobody holds live time now.
    let s = probe.stats().expect("stats");
    assert_eq!(s.live_clients, 0);
    assert!(s.live_cycles > 0, "top ran in live time");
}

#[test]
fn no_capture_leaves_the_ring_alone() {
    let sim = Sim::start(&[]);
    let out = tlpx(&sim.selector(), &["top", "--snapshot", "--frames", "2", "--interval", "20ms", "--no-capture"]);
    let snapshot = text(&out);
    assert!(snapshot.contains("capture is off (--no-capture)"), "{snapshot}");
    // And a spy capture can start right after: top gave nothing to release.
    let out = tlpx(&sim.selector(), &["--json", "top", "--frames", "1", "--interval", "20ms"]);
    assert!(text(&out).contains("\"ring\":\"top\""));
}

#[test]
fn bad_arguments_exit_2_with_a_message() {
    let sim = Sim::start(&[]);
    for (args, needle) in [
        (&["top", "--snapshot", "--interval", "soon"][..], "--interval"),
        (&["top", "--snapshot", "--frames", "0"][..], "'0' for '--frames <FRAMES>'"),
        (&["top", "--snapshot", "--ring", "1000"][..], "--ring 1000"),
        (&["top", "--snapshot", "--width", "5"][..], "'5' for '--width <WIDTH>': 5 is out of range; accepted: a whole number in 20..=1000"),
        (&["--json", "top", "--snapshot"][..], "--snapshot and --json"),
        // Not a terminal and no headless mode.
        (&["top"][..], "stdout is not one"),
        (&["top", "--frames", "x"][..], "invalid value"),
    ] {
        let out = tlpx(&sim.selector(), args);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {}", String::from_utf8_lossy(&out.stderr));
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(needle), "{args:?}: {err}");
    }
}

#[test]
fn another_tools_capture_is_left_alone_and_named() {
    use tlpx_device::card::Card;
    use tlpx_device::spy;
    let sim = Sim::start(&[]);
    let device = SimDevice::connect(sim.socket()).expect("connect");
    let mut card = Card::open(Box::new(device)).expect("card");
    let mut capture = spy::Capture::start(&mut card, 1024, &spy::Filters::default(), &spy::Trigger::default()).expect("start a capture");
    // A short run: this test's capture refreshes no lease meanwhile, and top's live time runs
    // card time on (the lease is 100 ms of card time).
    let out = tlpx(&sim.selector(), &["top", "--snapshot", "--frames", "2", "--interval", "1ms"]);
    let snapshot = text(&out);
    assert!(snapshot.contains("another tool is capturing"), "{snapshot}");
    assert!(snapshot.contains("ring: another tool's capture"), "{snapshot}");
    // The capture is intact: still on, and its ring indices were not reset under it.
    assert!(spy::is_capturing(&mut card).expect("is_capturing"));
    let mut records = Vec::new();
    let got = capture.poll(&mut card, &mut records).expect("poll after top");
    assert!(got > 0, "top's register reads should be in the other tool's capture");
    let end = capture.stop(&mut card).expect("stop");
    assert_eq!(end.records_lost, 0);
}

#[test]
fn recent_transactions_name_the_bar0_registers_another_tool_reads() {
    // `tlpx reg watch` polls ident.scratch (not one of top's own registers) every 5 ms while
    // top samples: its reads show in top's list with the register's name.
    let sim = Sim::start(&[]);
    let mut watch = Command::new(tlpx_bin())
        .args(["--device", &sim.selector(), "reg", "watch", "--interval", "5ms", "--count", "400", "ident.scratch"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start tlpx reg watch");
    let out = tlpx(&sim.selector(), &["--json", "top", "--frames", "4", "--interval", "100ms", "--recent", "1000"]);
    let _ = watch.kill();
    let _ = watch.wait();
    let stdout = text(&out);
    let lines: Vec<String> = stdout
        .lines()
        .flat_map(|l| {
            let s: serde_json::Value = serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}"));
            s["recent"].as_array().expect("recent").iter().map(|r| r.as_str().expect("a line").to_owned()).collect::<Vec<_>>()
        })
        .collect();
    // The simulator's BAR0 is at bus address 0xf0000000 (tlpx-sim's BAR0_BUS_ADDRESS).
    let scratch = format!("0x{:08x}", 0xf000_0000 + tlpx_regs::ident::SCRATCH.offset);
    let named: Vec<&String> = lines.iter().filter(|l| l.contains("down MRd32") && l.ends_with("  ident.scratch")).collect();
    assert!(!named.is_empty(), "no named read of ident.scratch in {lines:#?}");
    assert!(named.iter().all(|l| l.contains(&scratch)), "the address stays beside the name: {named:?}");
}
