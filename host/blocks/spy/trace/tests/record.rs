//! Record bytes <-> typed Record, checked against traces/FORMAT.md's table written out
//! by hand here (not through the crate's field table), so a wrong table fails.
#![allow(clippy::unwrap_used)]

use crate::common;

use rand::Rng;
use tlpx_trace::{field, field_by_name, field_table, Body, CplStatus, Direction, RawRecord, Record, RequestKind, TraceError, FIELDS};

fn bytes_of(words: [u32; 8]) -> [u8; 32] {
    RawRecord { words }.to_bytes()
}

#[test]
fn request_decodes_per_format_md() {
    // MRd64 (type 0), up, length 128 DW, tc 3, attr RO, ep 0, own 1; rid 0x0100 tag 0x85 BE f/f.
    let w3 = 1 | (1 << 1) | (0b10 << 10) | (3 << 12) | (128 << 15) | (1 << 25);
    let w4 = 0x0100 | (0x85 << 16) | (0xf << 24) | (0x7 << 28);
    let words = [41, 1563, 0x2, w3, w4, 0x4000_1000, 0x1, 2 | (5 << 16) | (7 << 24)];
    let r = Record::from_bytes(&bytes_of(words)).unwrap();
    assert_eq!(r.sequence, 41);
    let Body::Request(q) = r.body else { panic!("{r:?}") };
    assert_eq!(q.kind(), RequestKind::MRd64);
    assert_eq!(q.direction, Direction::Up);
    assert_eq!(q.timing.timestamp, 0x2_0000_061b);
    assert_eq!((q.timing.duration, q.timing.wait_cycles, q.timing.gap_cycles), (2, 5, 7));
    assert_eq!(q.address, 0x1_4000_1000);
    assert_eq!(q.length_dw, 128);
    assert_eq!((q.requester_id, q.tag, q.first_be, q.last_be), (0x0100, 0x85, 0xf, 0x7));
    assert_eq!((q.attr, q.tc, q.ep, q.own), (0b10, 3, false, true));
    assert_eq!(q.read_bytes(), 4 + 126 * 4 + 3);
    assert_eq!(r.to_bytes(), bytes_of(words));
}

#[test]
fn completion_decodes_per_format_md() {
    // CplD down, length 0 (= 1024 DW), matched, last, split 3; lower address 0x44;
    // completer 0x0200, status CA, byte count 0 (= 4096), latency 156.
    let w3 = (0b010 << 1) | (0b01010 << 4) | (1 << 9) | (1 << 26) | (1 << 27) | (3 << 28);
    let w4 = 0x0100 | (0x85 << 16) | (0x44 << 24) | (1 << 31);
    let w5 = 0x0200 | (4 << 16);
    let words = [7, 100, 0, w3, w4, w5, 156, 0];
    let r = Record::from_bytes(&bytes_of(words)).unwrap();
    let Body::Completion(c) = r.body else { panic!("{r:?}") };
    assert_eq!(c.name(), "CplD");
    assert!(c.ep);
    assert_eq!(c.length_dw, 1024);
    assert_eq!(c.byte_count, 4096);
    assert_eq!(c.status, CplStatus::Ca);
    assert_eq!(c.lower_address, 0x44);
    assert!(c.bcm);
    assert_eq!(c.completer_id, 0x0200);
    assert_eq!(c.latency, Some(156));
    assert_eq!((c.split_index, c.last), (3, true));
    assert_eq!(r.to_bytes(), bytes_of(words));

    // Unmatched: latency is absent even if w6 is not 0 (reserved then), and re-encodes as 0.
    let words2 = [7, 100, 0, w3 & !(1 << 26), w4, w5, 156, 0];
    let r2 = Record::from_bytes(&bytes_of(words2)).unwrap();
    let Body::Completion(c2) = r2.body else { panic!() };
    assert_eq!(c2.latency, None);
    assert_eq!(r2.to_raw().words[6], 0);
}

#[test]
fn events_decode_per_format_md() {
    let timeout = [3, 0xdead, 0xbeef, 1 | (7 << 1) | (1 << 4) | (1 << 25), 0x0100 | (9 << 16), 0, 50_000, 0];
    let r = Record::from_bytes(&bytes_of(timeout)).unwrap();
    let Body::Timeout(t) = r.body else { panic!("{r:?}") };
    assert_eq!((t.direction, t.own, t.requester_id, t.tag), (Direction::Up, true, 0x0100, 9));
    assert_eq!((t.timestamp, t.waited), (0xbeef_0000_dead, 50_000));
    assert_eq!(r.to_bytes(), bytes_of(timeout));

    let footer = [12, 1000, 1, (7 << 1) | (2 << 4), 0, 17, 2, 0];
    let r = Record::from_bytes(&bytes_of(footer)).unwrap();
    let Body::Footer(f) = r.body else { panic!("{r:?}") };
    assert_eq!((f.records_created, f.records_lost), ((1 << 32) + 1000, (2 << 32) + 17));
    assert_eq!(r.to_bytes(), bytes_of(footer));
}

#[test]
fn reserved_kinds_are_rejected_with_offset() {
    for ty in (0..32u32).filter(|t| ![1, 2, 4, 5].contains(t)) {
        let words = [0, 0, 0, (7 << 1) | (ty << 4), 0, 0, 0, 0];
        let err = Record::from_bytes_at(&bytes_of(words), 4096).unwrap_err();
        assert!(matches!(err, TraceError::ReservedKind { offset: 4096, .. }), "{err}");
        let msg = err.to_string();
        assert!(msg.contains("offset 4096") && msg.contains(&format!("reserved kind fmt 7 type {ty}")), "{msg}");
        assert!(msg.contains("expected type 1"), "{msg}");
    }
}

#[test]
fn typed_records_round_trip_through_bytes() {
    let mut rng = common::rng(1);
    for _ in 0..20_000 {
        let r = common::random_record(&mut rng);
        let back = Record::from_bytes(&r.to_bytes()).unwrap();
        assert_eq!(back, r);
    }
}

#[test]
fn random_bytes_decode_or_fail_and_canonical_bytes_round_trip() {
    let mut rng = common::rng(2);
    let (mut ok, mut err) = (0, 0);
    for _ in 0..20_000 {
        let mut bytes = [0u8; 32];
        rng.fill(&mut bytes);
        if rng.gen_bool(0.3) {
            bytes[12] |= 0b1110; // fmt 7: events and reserved kinds
        }
        match Record::from_bytes(&bytes) {
            Ok(r) => {
                ok += 1;
                // Decoding ignores reserved bits; the canonical encoding is a fixed point.
                let canonical = r.to_bytes();
                assert_eq!(Record::from_bytes(&canonical).unwrap(), r);
                assert_eq!(Record::from_bytes(&canonical).unwrap().to_bytes(), canonical);
            }
            Err(_) => err += 1,
        }
    }
    assert!(ok > 1000 && err > 1000, "ok {ok} err {err}");
}

#[test]
fn raw_accessor_uses_the_field_table() {
    let words = [5, 6, 7, (3 << 1) | (100 << 15), 0x0100 | (0x42 << 16), 0x1000, 0, 0];
    let raw = RawRecord::from_bytes(&bytes_of(words));
    assert_eq!(raw.field("sequence"), Some(5));
    assert_eq!(raw.field("fmt"), Some(3));
    assert_eq!(raw.field("length"), Some(100));
    assert_eq!(raw.field("tag"), Some(0x42));
    assert_eq!(raw.field("address_lo"), Some(0x1000));
    assert_eq!(raw.get(&field::REQUESTER_ID), 0x0100);
    assert_eq!(raw.field("bogus"), None);
    assert_eq!(field_by_name("byte_count").map(|f| (f.word, f.shift, f.width)), Some((5, 19, 12)));
}

#[test]
fn header_field_table_is_generated_from_the_code_table() {
    let table = field_table();
    assert_eq!(table.len(), FIELDS.len());
    let json = serde_json::to_value(&table).unwrap();
    assert_eq!(json[0]["name"], "sequence");
    assert_eq!(json[0]["width"], 32);
    let names: Vec<&str> = FIELDS.iter().map(|f| f.name).collect();
    // The rows of traces/FORMAT.md's record table, in order.
    let doc = include_str!("../../../../../traces/FORMAT.md");
    // Only the spy record's tables: the sections "## Record ..." (version 1's, then version 2's).
    let sections: Vec<&str> = doc.split("\n## ").filter(|sec| sec.starts_with("Record")).collect();
    assert_eq!(sections.len(), 2, "FORMAT.md has the sections Record and Record format version 2");
    let rows: Vec<&str> = sections
        .iter()
        .flat_map(|sec| sec.lines())
        .filter(|l| l.starts_with("| w") && l.as_bytes().get(3).is_some_and(u8::is_ascii_digit))
        .collect();
    let doc_names: Vec<&str> = rows.iter().filter_map(|l| l.split('`').nth(1)).collect();
    assert_eq!(names, doc_names, "FIELDS and traces/FORMAT.md's record table differ");
    // And the bits: `| w3 | 24:15 | ...` must equal word 3, shift 15, width 10.
    for line in rows {
        let cells: Vec<&str> = line.split('|').map(str::trim).collect();
        let word: u8 = cells[1][1..].parse().unwrap();
        let (hi, lo): (u8, u8) = match cells[2].split_once(':') {
            Some((h, l)) => (h.parse().unwrap(), l.parse().unwrap()),
            None => (cells[2].parse().unwrap(), cells[2].parse().unwrap()),
        };
        let name = cells[3].trim_matches('`');
        let f = field_by_name(name).unwrap();
        assert_eq!((f.word, f.shift, f.width), (word, lo, hi - lo + 1), "{name}: {line}");
    }
}
