//! Golden comparison: identical captures pass whatever their creation time and tool, and
//! whatever card cycle they started at (times count from the first record); any other
//! difference, the spacing of the records in time included, fails with a message naming
//! the first difference.
#![allow(clippy::unwrap_used)]

use crate::common;

use std::ops::Range;
use std::path::{Path, PathBuf};

use tlpx_trace::golden::compare;
use tlpx_trace::header::Header;
use tlpx_trace::{Body, Footer, Record, TraceWriter};

fn write(dir: &Path, name: &str, header: &Header, records: &[Record], footer: Option<(u32, Footer)>) -> PathBuf {
    let path = dir.join(name);
    let mut w = TraceWriter::create_with_header(&path, header).unwrap();
    for r in records {
        w.write(r).unwrap();
    }
    match footer {
        Some((s, f)) => drop(w.finish(s, f).unwrap()),
        None => drop(w.finish_without_footer().unwrap()),
    }
    path
}

struct Fixture {
    _dir: tempfile::TempDir,
    dir: PathBuf,
    golden: PathBuf,
    records: Vec<Record>,
    footer: (u32, Footer),
}

fn fixture() -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    let records = common::scenario();
    let footer = common::scenario_footer(&records);
    let golden = write(dir.path(), "golden.tlpx", &common::header(), &records, Some(footer));
    Fixture { dir: dir.path().to_owned(), _dir: dir, golden, records, footer }
}

fn expect_diff(f: &Fixture, actual: &Path, fragments: &[&str]) {
    let msg = compare(actual, &f.golden).expect_err("must differ");
    for frag in fragments {
        assert!(msg.contains(frag), "message lacks {frag:?}:\n{msg}");
    }
    assert!(msg.contains("TLPX_UPDATE_GOLDEN=1"), "{msg}");
}

#[test]
fn same_capture_at_another_time_by_another_tool_matches() {
    let f = fixture();
    let mut h = common::header();
    h.created_utc = "2030-01-01T00:00:00Z".into();
    h.tool = "tlpx 9.9.9".into();
    let actual = write(&f.dir, "a.tlpx", &h, &f.records, Some(f.footer));
    compare(&actual, &f.golden).unwrap();
}

#[test]
fn a_changed_field_is_named_with_record_index_and_offset() {
    let f = fixture();
    let mut records = f.records.clone();
    if let Body::Request(r) = &mut records[3].body {
        r.address += 0x40;
        r.timing.wait_cycles += 1;
    }
    let actual = write(&f.dir, "a.tlpx", &common::header(), &records, Some(f.footer));
    let start = tlpx_trace::TraceReader::open(&actual).unwrap().records_start();
    expect_diff(
        &f,
        &actual,
        &[
            &format!("record #3 (offset {})", start + 3 * 32),
            "address_lo is 0x2040 (golden 0x2000)",
            "wait_cycles is 0x4 (golden 0x3)",
            "actual: seq 3",
            "0x00002040",
            "golden: seq 3",
        ],
    );
    // Fields of other kinds that share the bits are not reported.
    let msg = compare(&actual, &f.golden).unwrap_err();
    assert!(!msg.contains("completer_id"), "{msg}");
}

#[test]
fn a_changed_kind_reports_fmt_and_type() {
    let f = fixture();
    let mut records = f.records.clone();
    if let Body::Request(r) = &mut records[0].body {
        r.fmt = 3; // MRd64 -> MWr64
    }
    let actual = write(&f.dir, "a.tlpx", &common::header(), &records, Some(f.footer));
    expect_diff(&f, &actual, &["record #0", "fmt is 0x3 (golden 0x1)", "MWr64", "MRd64"]);
}

#[test]
fn missing_and_extra_records_are_reported() {
    let f = fixture();
    let fewer = write(&f.dir, "fewer.tlpx", &common::header(), &f.records[..10], Some(f.footer));
    expect_diff(&f, &fewer, &["fewer records: 10 vs golden 37", "first missing record #10"]);
    let mut more = f.records.clone();
    more.push(f.records[0]);
    let more = write(&f.dir, "more.tlpx", &common::header(), &more, Some(f.footer));
    expect_diff(&f, &more, &["more records: 38 vs golden 37", "first extra record #37", "MRd64"]);
}

#[test]
fn header_and_footer_differences_are_reported() {
    let f = fixture();
    let mut h = common::header();
    h.link.as_mut().unwrap().mps = 128;
    let actual = write(&f.dir, "h.tlpx", &h, &f.records, Some(f.footer));
    expect_diff(&f, &actual, &["header differs", "`link.mps` is 128 (golden 256)"]);

    let mut h = common::header();
    h.capture.include_own_traffic = true;
    let actual = write(&f.dir, "h2.tlpx", &h, &f.records, Some(f.footer));
    expect_diff(&f, &actual, &["`capture.include_own_traffic` is true (golden false)"]);

    let (seq, mut footer) = f.footer;
    footer.records_lost = 4;
    let actual = write(&f.dir, "f.tlpx", &common::header(), &f.records, Some((seq, footer)));
    expect_diff(&f, &actual, &["footer differs", "4 lost", "3 lost"]);
    let actual = write(&f.dir, "nf.tlpx", &common::header(), &f.records, None);
    expect_diff(&f, &actual, &["footer differs", "none (capture did not end cleanly)"]);
}

#[test]
fn unreadable_files_are_reported_not_panicked() {
    let f = fixture();
    let missing = f.dir.join("missing.tlpx");
    let msg = compare(&f.golden, &missing).unwrap_err();
    assert!(msg.contains("cannot read golden trace") && msg.contains("TLPX_UPDATE_GOLDEN=1"), "{msg}");
    let junk = f.dir.join("junk.tlpx");
    std::fs::write(&junk, b"not a trace at all").unwrap();
    let msg = compare(&junk, &f.golden).unwrap_err();
    assert!(msg.contains("cannot read actual trace") && msg.contains("wrong magic"), "{msg}");
}

/// `records` with `by` card cycles added (wrapping) to the time of those in `range`.
fn shifted(records: &[Record], range: Range<usize>, by: u64) -> Vec<Record> {
    let mut out = records.to_vec();
    for r in &mut out[range] {
        match &mut r.body {
            Body::Request(x) => x.timing.timestamp = x.timing.timestamp.wrapping_add(by),
            Body::Completion(x) => x.timing.timestamp = x.timing.timestamp.wrapping_add(by),
            Body::Timeout(x) => x.timestamp = x.timestamp.wrapping_add(by),
            Body::Msi(x) => x.timestamp = x.timestamp.wrapping_add(by),
            Body::Footer(_) | Body::Payload(_) => {}
        }
    }
    out
}

#[test]
fn the_same_scenario_started_at_another_card_cycle_matches() {
    // The host did more (or less) before the scenario: every record N cycles later or earlier,
    // across the 32-bit boundary of the timestamp's two words too.
    let f = fixture();
    for by in [1, 12_345, 1 << 32, (1 << 32) - 1, u64::MAX] {
        let actual = write(&f.dir, "shifted.tlpx", &common::header(), &shifted(&f.records, 0..f.records.len(), by), Some(f.footer));
        compare(&actual, &f.golden).unwrap_or_else(|e| panic!("shifted by {by}: {e}"));
    }
}

#[test]
fn a_changed_gap_between_two_records_is_reported_with_times_from_the_first_record() {
    let f = fixture();
    let time = |i: usize| f.records[i].timestamp().unwrap() - f.records[0].timestamp().unwrap();
    // Records 5.. one cycle later (the gap between records 4 and 5 grew), the whole trace
    // later as well: the first difference is record 5, in time only.
    let later = shifted(&shifted(&f.records, 5..f.records.len(), 1), 0..f.records.len(), 1000);
    let actual = write(&f.dir, "gap.tlpx", &common::header(), &later, Some(f.footer));
    let msg = compare(&actual, &f.golden).unwrap_err();
    expect_diff(&f, &actual, &["record #5", &format!("cycles since the first record are {} (golden {})", time(5) + 1, time(5))]);
    assert!(!msg.contains("timestamp_lo") && !msg.contains("timestamp_hi"), "{msg}");
    // Only the first record later: every other one is closer to it, record 1 first.
    let first_later = shifted(&f.records, 0..1, 3);
    let actual = write(&f.dir, "first.tlpx", &common::header(), &first_later, Some(f.footer));
    expect_diff(&f, &actual, &["record #1", &format!("cycles since the first record are {} (golden {})", time(1) - 3, time(1))]);
}

/// `records` with `by` added (modulo 256) to the tags of the host's reads (down, no data) and
/// of the card's completions to them (up), as when the host made more reads before the
/// scenario; `card: true` shifts the card's own tags instead (its reads up, their completions
/// down).
fn tags_shifted(records: &[Record], by: u8, card: bool) -> Vec<Record> {
    let mut out = records.to_vec();
    for r in &mut out {
        match &mut r.body {
            Body::Request(x) if (x.direction == tlpx_trace::Direction::Down) != card && x.fmt & 0b10 == 0 => x.tag = x.tag.wrapping_add(by),
            Body::Completion(x) if (x.direction == tlpx_trace::Direction::Up) != card => x.tag = x.tag.wrapping_add(by),
            _ => {}
        }
    }
    out
}

#[test]
fn the_host_reading_more_before_the_scenario_matches() {
    // The root complex numbers the host's read tags in turn: M more reads before the scenario
    // shift every host tag by M (modulo 256), together with the time.
    let f = fixture();
    for by in [1u8, 6, 200, 255] {
        let records = shifted(&tags_shifted(&f.records, by, false), 0..f.records.len(), 777);
        let actual = write(&f.dir, "host-tags.tlpx", &common::header(), &records, Some(f.footer));
        compare(&actual, &f.golden).unwrap_or_else(|e| panic!("host tags shifted by {by}: {e}"));
    }
}

#[test]
fn the_cards_own_tags_and_a_broken_host_tag_order_are_still_reported() {
    let f = fixture();
    // The card's tags are its own design: a shift is a difference.
    let actual = write(&f.dir, "card-tags.tlpx", &common::header(), &tags_shifted(&f.records, 1, true), Some(f.footer));
    expect_diff(&f, &actual, &["tag is"]);
    // One host read's tag out of turn (its completion keeps the old one): reported.
    let mut records = f.records.clone();
    let i = records
        .iter()
        .rposition(|r| matches!(&r.body, Body::Request(x) if x.direction == tlpx_trace::Direction::Down && x.fmt & 0b10 == 0))
        .expect("a host read in the scenario");
    if let Body::Request(x) = &mut records[i].body {
        x.tag = x.tag.wrapping_add(1);
    }
    let actual = write(&f.dir, "host-tag-order.tlpx", &common::header(), &records, Some(f.footer));
    expect_diff(&f, &actual, &[&format!("record #{i}"), "tag is"]);
}
