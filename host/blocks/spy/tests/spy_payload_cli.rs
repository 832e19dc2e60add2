//! `tlpx spy capture --payload`, MSIs and the spy's own traffic, end to end with the real
//! binary and tlpx-sim; bad values of the new flags refused with the value named.
//!
//!   tlpx spy capture --payload 4 ──► tlpx-sim ──ring──► cap.tlpx ──► entries (payload bytes)
//!        summary: own ring writes (TLPs, bytes, wire bytes, share of the link), MSIs

use std::process::Output;

use tlpx_testkit::SimProcess as Sim;
use tlpx_trace::{Body, Direction, TraceReader};

use crate::common;
use common::{text, tlpx};

fn json(out: &Output) -> serde_json::Value {
    assert!(out.status.success(), "tlpx failed: {}", text(&out.stderr));
    serde_json::from_slice(&out.stdout).expect("tlpx printed JSON")
}

#[test]
fn payload_capture_records_the_completions_data_and_states_own_traffic() {
    let sim = Sim::start(&[]);
    let trace = sim.path("p.tlpx");
    let t = trace.to_str().expect("path");
    // The capture's own polling: MMIO reads of the spy's registers, whose 1-DW completions
    // (up) carry the register values: with --payload-types cpld --payload-dir up, only they
    // get payload.
    let v = json(&tlpx(
        &sim.selector(),
        &[
            "--json",
            "spy",
            "capture",
            "--records",
            "40",
            "--poll",
            "10us",
            "--payload",
            "4",
            "--payload-types",
            "cpld",
            "--payload-dir",
            "up",
            "-o",
            t,
        ],
    ));
    assert_eq!(v["records_lost"], 0, "{v}");
    let own = &v["own_traffic"];
    let (tlps, bytes, wire) =
        (own["tlps"].as_u64().expect("tlps"), own["bytes"].as_u64().expect("bytes"), own["wire_bytes"].as_u64().expect("wire"));
    assert!(tlps > 0 && bytes >= tlps * (12 + 32), "{own}");
    assert_eq!(wire, bytes + 8 * tlps, "8 framing bytes per TLP on the wire: {own}");
    let share = own["link_share"].as_f64().expect("the sim reports a link: a share");
    assert!(share > 0.0 && share < 1.0, "{own}");
    assert_eq!(v["msis"], 0, "no MSI during the capture: {v}");
    let reader = TraceReader::open(&trace).expect("trace");
    assert_eq!(reader.header().capture.filters["payload_dws"], 4);
    let records = reader.read_all().expect("records");
    let entries = tlpx_trace::entries(&records);
    let mut with_payload = 0;
    for e in &entries {
        match &e.record.body {
            Body::Completion(c) if c.direction == Direction::Up && c.with_data() => {
                assert_eq!(e.payload.len(), 4 * usize::from(c.length_dw).min(4), "{e:?}");
                assert!(e.payload_complete);
                with_payload += 1;
            }
            _ => assert!(e.payload.is_empty(), "payload only for up CplD: {e:?}"),
        }
    }
    assert!(with_payload > 0);
    // Every record, payload records included, numbered without a gap.
    assert!(records.iter().enumerate().all(|(i, r)| r.sequence == i as u32));
}

#[test]
fn text_summary_and_stats_state_own_traffic_and_msis() {
    let sim = Sim::start(&[]);
    let trace = sim.path("s.tlpx");
    let out = tlpx(&sim.selector(), &["spy", "capture", "--records", "10", "--quiet", "-o", trace.to_str().expect("path")]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let summary = text(&out.stdout);
    assert!(
        summary.contains("the spy's own ring writes: ") && summary.contains("on the wire") && summary.contains("MSIs sent by the card: 0"),
        "{summary}"
    );
    let s = json(&tlpx(&sim.selector(), &["--json", "spy", "stats"]));
    let own = &s["own_traffic"];
    assert!(own["tlps"].as_u64().expect("tlps") > 0, "{s}");
    assert_eq!(own["wire_bytes"].as_u64(), Some(own["bytes"].as_u64().expect("bytes") + 8 * own["tlps"].as_u64().expect("tlps")));
    assert_eq!(s["counters"]["msi_count"], 0);
    let out = tlpx(&sim.selector(), &["spy", "stats"]);
    let t = text(&out.stdout);
    assert!(out.status.success() && t.contains("the spy's own ring writes: ") && t.contains("of the card-to-host bytes"), "{t}");
}

#[test]
fn bad_payload_and_type_values_are_refused_by_name() {
    let sim = Sim::start(&[]);
    let out_file = sim.path("x.tlpx");
    let o = out_file.to_str().expect("path");
    for (args, want) in [
        (vec!["spy", "capture", "--payload", "17", "-o", o], "17 is out of range; accepted: a whole number in 0..=16"),
        (vec!["spy", "capture", "--payload", "4", "--payload-types", "msi", "-o", o], "not \"msi\""),
        (vec!["spy", "capture", "--payload", "4", "--payload-types", "cpld,bogus", "-o", o], "\"bogus\""),
        (vec!["spy", "capture", "--payload", "4", "--payload-dir", "sideways", "-o", o], "\"sideways\""),
        (vec!["spy", "capture", "--payload-types", "cpld", "-o", o], "need --payload N"),
        (vec!["spy", "capture", "--types", "mwr,msj", "-o", o], "other, msi or all, not \"msj\""),
        (vec!["spy", "capture", "--trigger", "stop", "--trigger-types", "msi", "-o", o], "--trigger-types: "),
    ] {
        let out = tlpx(&sim.selector(), &args);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {}", text(&out.stderr));
        let err = text(&out.stderr);
        assert!(err.contains(want) && !err.contains("panicked"), "{args:?}: {err}");
        assert!(!out_file.exists(), "{args:?}: nothing written");
    }
    // msi is a type the record filter takes: MSIs only.
    let out = tlpx(&sim.selector(), &["spy", "capture", "--types", "msi", "--duration", "100us", "--quiet", "-o", o]);
    assert!(out.status.code() != Some(2), "--types msi is accepted: {}", text(&out.stderr));
}
