//! Writer -> reader round trips, and every rejection traces/FORMAT.md requires, each with
//! the offset and the expectation its message must name.
#![allow(clippy::unwrap_used)]

use crate::common;

use tlpx_trace::header::Header;
use tlpx_trace::{build, field, Body, Direction, Footer, RawRecord, Record, TraceError, TraceReader, TraceWriter};

fn records_start(bytes: &[u8]) -> usize {
    let n = u32::from_le_bytes(bytes[16..20].try_into().unwrap()) as usize;
    (20 + n).div_ceil(32) * 32
}

fn open(bytes: Vec<u8>) -> Result<Vec<Record>, TraceError> {
    TraceReader::from_bytes(bytes)?.read_all()
}

fn expect_err(bytes: Vec<u8>, fragments: &[&str]) -> TraceError {
    let err = open(bytes).expect_err("the reader must reject this file");
    let msg = err.to_string();
    for f in fragments {
        assert!(msg.contains(f), "message {msg:?} lacks {f:?}");
    }
    err
}

/// Replaces the header JSON (and fixes its length and padding).
fn with_json(bytes: &[u8], json: &str) -> Vec<u8> {
    let start = records_start(bytes);
    let mut out = bytes[..16].to_vec();
    out.extend_from_slice(&(json.len() as u32).to_le_bytes());
    out.extend_from_slice(json.as_bytes());
    while out.len() % 32 != 0 {
        out.push(0);
    }
    out.extend_from_slice(&bytes[start..]);
    out
}

fn json_value(bytes: &[u8]) -> serde_json::Value {
    let n = u32::from_le_bytes(bytes[16..20].try_into().unwrap()) as usize;
    serde_json::from_slice(&bytes[20..20 + n]).unwrap()
}

#[test]
fn writer_then_reader_round_trips_records_header_and_footer() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("scenario.tlpx");
    let records = common::scenario();
    let (next, footer) = common::scenario_footer(&records);
    let mut w = TraceWriter::create_with_header(&path, &common::header()).unwrap();
    for r in &records {
        w.write(r).unwrap();
    }
    assert_eq!(w.records_written(), records.len() as u64);
    w.finish(next, footer).unwrap();

    let bytes = std::fs::read(&path).unwrap();
    assert_eq!(&bytes[..8], b"TLPXTRC\0");
    assert_eq!(&bytes[8..16], &[1, 0, 32, 0, 2, 0, 0, 0], "file version 1, record size 32, record format version 2");
    assert_eq!(bytes.len() % 32, 0);

    let reader = TraceReader::open(&path).unwrap();
    assert_eq!(reader.header(), &common::header());
    assert_eq!(reader.clock_hz(), common::CLOCK_HZ);
    assert_eq!(reader.record_count(), records.len() as u64);
    assert_eq!(reader.footer(), Some(&footer));
    assert_eq!(reader.footer_record().unwrap().sequence, next);
    assert_eq!(reader.records_start() as usize, records_start(&bytes));
    assert_eq!(reader.offset_of(1), reader.records_start() + 32);
    assert_eq!(reader.header_json()["link"]["mrrs"], 512);
    let back = reader.read_all().unwrap();
    assert_eq!(back, records);
}

#[test]
fn trace_without_footer_is_valid() {
    let records = common::scenario();
    let bytes = common::trace_bytes(&records, None);
    let reader = TraceReader::from_bytes(bytes).unwrap();
    assert!(reader.footer().is_none());
    assert_eq!(reader.read_all().unwrap(), records);
}

#[test]
fn empty_trace_with_and_without_footer() {
    let bytes = common::trace_bytes(&[], None);
    let reader = TraceReader::from_bytes(bytes).unwrap();
    assert_eq!(reader.record_count(), 0);
    assert!(reader.read_all().unwrap().is_empty());
    let bytes = common::trace_bytes(&[], Some((0, Footer::default())));
    let reader = TraceReader::from_bytes(bytes).unwrap();
    assert_eq!(reader.footer(), Some(&Footer::default()));
    assert_eq!(reader.record_count(), 0);
}

#[test]
fn raw_ingest_equals_typed_writes() {
    let records = common::scenario();
    let mut ring = Vec::new();
    for r in &records {
        ring.extend_from_slice(&r.to_bytes());
    }
    let mut w = TraceWriter::new(Vec::new(), &common::header()).unwrap();
    w.write_raw(&ring[..5 * 32]).unwrap();
    w.write_raw(&ring[5 * 32..]).unwrap();
    let raw = w.finish_without_footer().unwrap();
    assert_eq!(raw, common::trace_bytes(&records, None));
}

#[test]
fn writer_refuses_footers_partial_records_and_reserved_kinds() {
    let mut w = TraceWriter::new(Vec::new(), &common::header()).unwrap();
    let footer = Record { sequence: 0, body: Body::Footer(Footer::default()) };
    let e = w.write(&footer).unwrap_err().to_string();
    assert!(e.contains("offset") && e.contains("footer"), "{e}");
    let e = w.write_raw(&footer.to_bytes()).unwrap_err().to_string();
    assert!(e.contains("footer"), "{e}");
    let e = w.write_raw(&[0u8; 31]).unwrap_err().to_string();
    assert!(e.contains("31 bytes is not a multiple of 32"), "{e}");
    let mut reserved = RawRecord::default();
    reserved.set(&field::FMT, 7);
    reserved.set(&field::TYPE, 9);
    let e = w.write_raw(&reserved.to_bytes()).unwrap_err().to_string();
    assert!(e.contains("reserved kind fmt 7 type 9"), "{e}");
    assert_eq!(w.records_written(), 0);
}

#[test]
fn writer_refuses_a_header_readers_would_reject() {
    let mut h: Header = common::header();
    h.card.clock_hz = 0;
    let e = TraceWriter::new(Vec::new(), &h).err().unwrap().to_string();
    assert!(e.contains("card.clock_hz"), "{e}");
    let mut h = common::header();
    h.fields.pop();
    let e = TraceWriter::new(Vec::new(), &h).err().unwrap().to_string();
    assert!(e.contains("field table"), "{e}");
}

#[test]
fn rejects_wrong_magic() {
    let mut b = common::scenario_bytes();
    b[0..4].copy_from_slice(b"\x7fELF");
    let e = expect_err(b, &["offset 0", "wrong magic 7f 45 4c 46", "expected `TLPXTRC\\0`"]);
    assert_eq!(e.offset(), 0);
    expect_err(b"hello".to_vec(), &["offset 0", "wrong magic"]);
}

#[test]
fn rejects_short_files() {
    expect_err(Vec::new(), &["offset 0", "file ends after 0 bytes", "20-byte header prefix"]);
    expect_err(b"TLPXTRC\0\x01\x00".to_vec(), &["offset 10", "file ends after 10 bytes"]);
}

#[test]
fn rejects_unknown_file_version() {
    let mut b = common::scenario_bytes();
    b[8] = 2;
    expect_err(b, &["offset 8", "file format version 2", "expected 1"]);
}

#[test]
fn rejects_wrong_record_size() {
    let mut b = common::scenario_bytes();
    b[10] = 48;
    expect_err(b, &["offset 10", "record size 48", "expected 32"]);
}

#[test]
fn rejects_unknown_record_version() {
    let mut b = common::scenario_bytes();
    b[12] = 3;
    expect_err(b, &["offset 12", "record format version 3", "expected 1"]);
}

#[test]
fn rejects_nonzero_reserved_header_field() {
    let mut b = common::scenario_bytes();
    b[15] = 1;
    expect_err(b, &["offset 14", "reserved", "expected 0"]);
}

#[test]
fn rejects_header_json_longer_than_the_file() {
    let mut b = common::scenario_bytes();
    let len = b.len() as u32;
    b[16..20].copy_from_slice(&len.to_le_bytes());
    expect_err(b, &["offset", "header JSON from offset 20", "the length at offset 16"]);
    let mut b = common::scenario_bytes();
    b[16..20].copy_from_slice(&u32::MAX.to_le_bytes());
    expect_err(b, &["offset 16", "header JSON length 4294967295", "expected at most"]);
}

#[test]
fn rejects_invalid_header_json() {
    let b = common::scenario_bytes();
    expect_err(with_json(&b, "{\"card\": {\"clock_hz\": 1"), &["offset 20", "header JSON is not valid", "line 1"]);
    expect_err(with_json(&b, "[1, 2]"), &["offset 20", "is not an object"]);
    let mut bad_utf8 = common::scenario_bytes();
    bad_utf8[22] = 0xff;
    expect_err(bad_utf8, &["offset 20", "header JSON is not valid"]);
}

#[test]
fn rejects_missing_or_bad_required_keys() {
    let b = common::scenario_bytes();
    let mut v = json_value(&b);
    v["card"].as_object_mut().unwrap().remove("clock_hz");
    expect_err(with_json(&b, &v.to_string()), &["offset 20", "`card.clock_hz` is missing", "positive integer"]);

    let mut v = json_value(&b);
    v.as_object_mut().unwrap().remove("card");
    expect_err(with_json(&b, &v.to_string()), &["offset 20", "`card.clock_hz` is missing"]);

    for bad in [serde_json::json!(0), serde_json::json!("125 MHz"), serde_json::json!(-5)] {
        let mut v = json_value(&b);
        v["card"]["clock_hz"] = bad.clone();
        expect_err(with_json(&b, &v.to_string()), &["offset 20", "`card.clock_hz` is", &bad.to_string()]);
    }

    let mut v = json_value(&b);
    v.as_object_mut().unwrap().remove("fields");
    expect_err(with_json(&b, &v.to_string()), &["offset 20", "`fields` is missing"]);

    let mut v = json_value(&b);
    v["link"]["lanes"] = serde_json::json!("four");
    expect_err(with_json(&b, &v.to_string()), &["offset 20", "`link` is invalid", "lanes"]);
}

#[test]
fn rejects_a_field_table_that_does_not_match() {
    let b = common::scenario_bytes();
    let mut v = json_value(&b);
    v["fields"][9]["width"] = serde_json::json!(11);
    expect_err(
        with_json(&b, &v.to_string()),
        &["offset 20", "field table does not match", "field #9 is `length` at word 3 shift 15 width 11", "width 10"],
    );
    let mut v = json_value(&b);
    v["fields"].as_array_mut().unwrap().pop();
    expect_err(with_json(&b, &v.to_string()), &["version 2", "has 42 fields, expected 43", "`triggered` is missing"]);
    let mut v = json_value(&b);
    v["fields"].as_array_mut().unwrap().push(serde_json::json!({"name": "extra", "word": 7, "shift": 0, "width": 1}));
    expect_err(with_json(&b, &v.to_string()), &["has 44 fields", "`extra` is unknown"]);

    // Descriptions are prose: changing one is not a mismatch.
    let mut v = json_value(&b);
    v["fields"][0]["description"] = serde_json::json!("reworded");
    assert!(open(with_json(&b, &v.to_string())).is_ok());
}

#[test]
fn unknown_header_keys_are_kept_not_rejected() {
    let b = common::scenario_bytes();
    let mut v = json_value(&b);
    v["future_key"] = serde_json::json!({"x": 1});
    let r = TraceReader::from_bytes(with_json(&b, &v.to_string())).unwrap();
    assert_eq!(r.header_json()["future_key"]["x"], 1);
}

#[test]
fn rejects_nonzero_padding() {
    let mut b = common::scenario_bytes();
    let n = u32::from_le_bytes(b[16..20].try_into().unwrap()) as usize;
    let start = records_start(&b);
    assert!(start > 20 + n, "the fixture needs padding; adjust the header");
    b[20 + n] = 0xaa;
    expect_err(b, &[&format!("offset {}", 20 + n), "padding byte is 0xaa", "expected 0"]);
}

#[test]
fn rejects_truncated_record_area() {
    let b = common::scenario_bytes();
    let start = records_start(&b);
    for cut in [1usize, 5, 31, 33] {
        let t = b[..b.len() - cut].to_vec();
        let partial = (t.len() - start) % 32;
        let whole_end = t.len() - partial;
        expect_err(
            t,
            &[
                &format!("offset {whole_end}"),
                "truncated record area",
                &format!("{partial} of 32 bytes"),
                &format!("truncate -s {whole_end}"),
            ],
        );
    }
    // Cut inside the header padding.
    expect_err(b[..start - 1].to_vec(), &["zero padding up to offset"]);
}

#[test]
fn rejects_reserved_kind_records_mid_file_and_at_the_end() {
    let records = common::scenario();
    let b = common::trace_bytes(&records, None);
    let start = records_start(&b);
    let mut mid = b.clone();
    let at = start + 3 * 32;
    mid[at + 12] = (7 << 1) | (6 << 4); // w3: fmt 7, type 6
    let mut reader = TraceReader::from_bytes(mid).unwrap();
    let results: Vec<_> = reader.by_ref().collect();
    assert_eq!(results.len(), 4, "iteration stops after the error");
    let e = results[3].as_ref().unwrap_err().to_string();
    assert!(e.contains(&format!("offset {at}")) && e.contains("reserved kind fmt 7 type 6"), "{e}");

    let mut end = b.clone();
    let at = end.len() - 32;
    end[at + 12] = (7 << 1) | (3 << 4);
    expect_err(end, &[&format!("offset {at}"), "reserved kind fmt 7 type 3"]);
}

#[test]
fn rejects_a_footer_that_is_not_last() {
    let records = common::scenario();
    let mut b = common::trace_bytes(&records, Some((0, Footer::default())));
    let start = records_start(&b);
    let footer = Record { sequence: 2, body: Body::Footer(Footer::default()) };
    let at = start + 2 * 32;
    b[at..at + 32].copy_from_slice(&footer.to_bytes());
    expect_err(b, &[&format!("offset {at}"), "footer record is not the last record"]);
}

#[test]
fn timestamps_and_addresses_survive_the_full_range() {
    let mut r = build::mem_write(u32::MAX, Direction::Down, u64::MAX, 0xffff, 0xff, !3, 1024);
    if let Body::Request(q) = &mut r.body {
        q.timing.duration = u16::MAX;
    }
    let b = common::trace_bytes(&[r], None);
    assert_eq!(open(b).unwrap(), vec![r]);
}

/// `bytes` (a version 2 trace) relabelled as record format version 1, with version 1's table.
fn as_version_1(bytes: &[u8]) -> Vec<u8> {
    let mut v = json_value(bytes);
    v["fields"].as_array_mut().unwrap().truncate(tlpx_trace::fields::FIELDS_V1_LEN);
    let mut b = with_json(bytes, &v.to_string());
    b[12] = 1;
    b
}

#[test]
fn version_1_traces_read_with_their_own_table_and_version_2_kinds_are_refused_in_them() {
    let records = common::scenario();
    let footer = common::scenario_footer(&records);
    let v1 = as_version_1(&common::trace_bytes(&records, Some(footer)));
    let reader = TraceReader::from_bytes(v1.clone()).unwrap();
    assert_eq!(reader.record_version(), 1);
    assert_eq!(reader.footer().unwrap().trigger_sequence, None);
    assert_eq!(reader.read_all().unwrap(), records);
    // A version 2 table in a version 1 file (or the reverse) is a mismatch.
    let mut wrong = common::trace_bytes(&records, None);
    wrong[12] = 1;
    expect_err(wrong, &["record format version 1", "has 43 fields, expected 29"]);
    // An MSI record is a version 2 kind.
    let msi = Record { sequence: 0, body: Body::Msi(tlpx_trace::Msi { timestamp: 9, vector: 0, sources: 8, wait_cycles: 2 }) };
    let v1 = as_version_1(&common::trace_bytes(&[msi], None));
    let e = TraceReader::from_bytes(v1.clone()).unwrap().read_all().unwrap_err().to_string();
    let at = records_start(&v1);
    assert!(e.contains(&format!("offset {at}")) && e.contains("MSI record in a trace of record format version 1"), "{e}");
    // The golden trace of the repository is version 1 and reads.
    let golden = std::fs::read(concat!(env!("CARGO_MANIFEST_DIR"), "/../../../../traces/golden/mmio_and_dma.tlpx")).unwrap();
    assert_eq!(golden[12], 1, "the golden trace stays record format version 1");
    assert!(TraceReader::from_bytes(golden).unwrap().read_all().unwrap().len() > 30);
}

#[test]
fn footer_trigger_sequence_round_trips_and_version_2_kinds_read_back() {
    let msi = Record { sequence: 0, body: Body::Msi(tlpx_trace::Msi { timestamp: 9, vector: 3, sources: 0b1001, wait_cycles: 70_000 }) };
    let chunk = Record {
        sequence: 2,
        body: Body::Payload(tlpx_trace::PayloadChunk {
            direction: tlpx_trace::Direction::Down,
            first_dw: 6,
            count: 2,
            last: true,
            dws: [1, 2, 0, 0, 0, 0],
        }),
    };
    let footer = Footer { records_created: 3, records_lost: 1, trigger_sequence: Some(0) };
    let bytes = common::trace_bytes(&[msi, chunk], Some((3, footer)));
    let reader = TraceReader::from_bytes(bytes.clone()).unwrap();
    assert_eq!(reader.footer(), Some(&footer));
    assert_eq!(reader.read_all().unwrap(), vec![msi, chunk]);
    // The words per traces/FORMAT.md.
    let start = records_start(&bytes);
    let word = |rec: usize, w: usize| u32::from_le_bytes(bytes[start + rec * 32 + w * 4..][..4].try_into().unwrap());
    assert_eq!(word(0, 3), 1 | 7 << 1 | 4 << 4, "MSI: up, fmt 7, type 4");
    assert_eq!((word(0, 4), word(0, 5), word(0, 6), word(0, 7)), (3, 0b1001, 70_000, 0));
    assert_eq!(word(1, 3), 7 << 1 | 5 << 4 | 6 << 9 | 2 << 14 | 1 << 17, "payload: down, first_dw 6, count 2, final");
    assert_eq!((word(1, 1), word(1, 2)), (1, 2));
    assert_eq!((word(2, 4), word(2, 7)), (0, 1), "footer: trigger_sequence 0, triggered");
}
