//! CSV, VCD and log output, checked by content; the VCD is parsed back minimally and,
//! converted by GTKWave's own parser (`vcd2fst`, installed by `make setup`).
#![allow(clippy::unwrap_used)]

use crate::common;

use std::collections::{HashMap, HashSet};

use tlpx_trace::csv::{csv_row, trace_to_csv, CSV_COLUMNS};
use tlpx_trace::vcd::{trace_to_vcd, write_vcd, VcdOptions, MAX_VCD_RECORDS};
use tlpx_trace::{build, log_line, log_title, Body, Direction, Footer, Record, Timeout, TraceReader};

fn csv_text() -> String {
    let reader = TraceReader::from_bytes(common::scenario_bytes()).unwrap();
    let mut out = Vec::new();
    let rows = trace_to_csv(reader, &mut out).unwrap();
    assert_eq!(rows as usize, common::scenario().len() + 1);
    String::from_utf8(out).unwrap()
}

#[test]
fn csv_has_a_header_row_and_one_row_per_record() {
    let text = csv_text();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines[0], CSV_COLUMNS.join(","));
    assert_eq!(lines.len(), 1 + common::scenario().len() + 1);
    for l in &lines {
        assert_eq!(l.split(',').count(), CSV_COLUMNS.len(), "{l}");
    }
    let col = |name: &str| CSV_COLUMNS.iter().position(|c| *c == name).unwrap();
    let first: Vec<&str> = lines[1].split(',').collect();
    assert_eq!(first[col("sequence")], "0");
    assert_eq!(first[col("kind")], "MRd64");
    assert_eq!(first[col("direction")], "up");
    assert_eq!(first[col("timestamp_cycles")], "1000");
    assert_eq!(first[col("timestamp_ns")], "8000.000"); // 1000 cycles at 125 MHz
    assert_eq!(first[col("address")], "0x100000000");
    assert_eq!(first[col("length_dw")], "128");
    assert_eq!(first[col("payload_bytes")], "0");
    assert_eq!(first[col("latency_cycles")], "");
    let cpl: Vec<&str> = lines[2].split(',').collect();
    assert_eq!(cpl[col("kind")], "CplD");
    assert_eq!(cpl[col("status")], "SC");
    assert_eq!(cpl[col("latency_cycles")], "170");
    assert_eq!(cpl[col("latency_ns")], "1360.000");
    assert_eq!(cpl[col("split_index")], "1");
    assert_eq!(cpl[col("duration_ns")], "128.000");
    let footer: Vec<&str> = lines.last().unwrap().split(',').collect();
    assert_eq!(footer[col("kind")], "Footer");
    assert_eq!(footer[col("records_lost")], "3");
}

#[test]
fn csv_ns_column_uses_the_clock() {
    let r = build::mem_read(0, Direction::Up, 3, 0, 0, 0, 1);
    let row = csv_row(&r, 156_250_000);
    let col = CSV_COLUMNS.iter().position(|c| *c == "timestamp_ns").unwrap();
    assert_eq!(row[col], "19.200");
}

struct Vcd {
    sections: Vec<String>,
    timescale: String,
    vars: HashMap<String, (String, String)>, // id -> (scope path, name)
    times: Vec<u128>,
    changes: Vec<(u128, String, String)>, // time, id, value (after $dumpvars)
    initial: Vec<(String, String)>,       // id, value (in $dumpvars)
}

/// Minimal VCD reader: declaration sections, then `#time` lines and value changes.
fn parse_vcd(text: &str) -> Vcd {
    let mut v = Vcd { sections: vec![], timescale: String::new(), vars: HashMap::new(), times: vec![], changes: vec![], initial: vec![] };
    let mut in_dumpvars = false;
    let mut tokens = text.split_whitespace();
    let mut scopes: Vec<String> = vec![];
    let mut defs_done = false;
    let mut now: Option<u128> = None;
    while let Some(tok) = tokens.next() {
        if let Some(kw) = tok.strip_prefix('$') {
            if matches!(kw, "dumpvars" | "end") {
                // $dumpvars ... $end holds the initial values, written as value changes.
                assert!(defs_done, "${kw} before $enddefinitions");
                in_dumpvars = kw == "dumpvars";
                continue;
            }
            let body: Vec<&str> = tokens.by_ref().take_while(|t| *t != "$end").collect();
            assert!(!defs_done, "declaration ${kw} after $enddefinitions");
            v.sections.push(kw.to_owned());
            match kw {
                "timescale" => v.timescale = body.join(""),
                "scope" => scopes.push(body[1].to_owned()),
                "upscope" => {
                    scopes.pop().expect("$upscope without $scope");
                }
                "var" => {
                    assert!(body.len() >= 4, "{body:?}");
                    assert!(v.vars.insert(body[2].to_owned(), (scopes.join("."), body[3].to_owned())).is_none());
                }
                "enddefinitions" => {
                    assert!(scopes.is_empty(), "unbalanced scopes");
                    defs_done = true;
                }
                _ => {}
            }
            continue;
        }
        assert!(defs_done, "value before $enddefinitions: {tok}");
        if let Some(t) = tok.strip_prefix('#') {
            let t: u128 = t.parse().unwrap();
            if let Some(prev) = now {
                assert!(t > prev, "time {t} after {prev}");
            }
            v.times.push(t);
            now = Some(t);
        } else if let Some(rest) = tok.strip_prefix(['b', 's']) {
            let id = tokens.next().unwrap();
            push(&mut v, in_dumpvars, now.unwrap(), id, rest);
        } else {
            let (val, id) = tok.split_at(1);
            assert!(["0", "1", "x", "z"].contains(&val), "{tok}");
            push(&mut v, in_dumpvars, now.unwrap(), id, val);
        }
    }
    v
}

fn push(v: &mut Vcd, initial: bool, now: u128, id: &str, value: &str) {
    if initial {
        v.initial.push((id.to_owned(), value.to_owned()));
    } else {
        v.changes.push((now, id.to_owned(), value.to_owned()));
    }
}

fn scenario_vcd() -> String {
    let reader = TraceReader::from_bytes(common::scenario_bytes()).unwrap();
    let mut out = Vec::new();
    trace_to_vcd(reader, &mut out).unwrap();
    String::from_utf8(out).unwrap()
}

#[test]
fn vcd_is_well_formed_with_increasing_times() {
    let text = scenario_vcd();
    let vcd = parse_vcd(&text);
    for s in ["date", "version", "timescale", "scope", "var", "upscope", "enddefinitions"] {
        assert!(vcd.sections.iter().any(|x| x == s), "missing ${s}");
    }
    assert_eq!(vcd.timescale, "1ns");
    assert!(text.contains(common::CREATED), "$date is the capture's time");
    assert!(vcd.times.len() > 20);
    let ids: HashSet<&String> = vcd.vars.keys().collect();
    for (_, id, _) in &vcd.changes {
        assert!(ids.contains(id), "undeclared id {id}");
    }
    let initial: HashSet<&String> = vcd.initial.iter().map(|(id, _)| id).collect();
    assert_eq!(initial, ids, "$dumpvars gives every signal a value");
    let by_name = |scope: &str, name: &str| vcd.vars.iter().find(|(_, (s, n))| s == scope && n == name).map(|(id, _)| id.clone()).unwrap();
    // The first TLP: MRd64 up at cycle 1000 = 8000 ns, busy for 2 cycles (duration 1).
    let tlp_up = by_name("tlpx.up", "tlp");
    let busy_up = by_name("tlpx.up", "busy");
    assert!(vcd.changes.contains(&(8000, tlp_up.clone(), "MRd64_0x100000000_len128_tag0x00".into())));
    assert!(vcd.changes.contains(&(8000, busy_up.clone(), "1".into())));
    assert!(vcd.changes.contains(&(8016, busy_up.clone(), "0".into())));
    assert!(vcd.changes.contains(&(8016, tlp_up, "-".into())));
    // Down: two completions, each 17 cycles long, starting 20 cycles apart: busy stays
    // high across them? No: 17 < 20, so it drops in between.
    let busy_down = by_name("tlpx.down", "busy");
    let downs: Vec<_> = vcd.changes.iter().filter(|(_, id, _)| *id == busy_down).collect();
    assert_eq!(downs[0], &(8000 + 170 * 8, busy_down.clone(), "1".into()));
    assert_eq!(downs[1], &(8000 + 187 * 8, busy_down.clone(), "0".into()));
    // The loss of 3 records shows on `lost`.
    let lost = by_name("tlpx", "lost");
    assert!(vcd.changes.iter().any(|(_, id, v)| *id == lost && v == "11"));
    // The timeout pulses.
    let timeout = by_name("tlpx.up", "timeout");
    assert_eq!(vcd.changes.iter().filter(|(_, id, _)| *id == timeout).count(), 2);
}

#[test]
fn vcd_back_to_back_tlps_keep_busy_high() {
    let mut a = build::mem_write(0, Direction::Up, 100, 0, 0, 0x1000, 16);
    let mut b = build::mem_write(1, Direction::Up, 104, 0, 0, 0x1040, 16);
    for r in [&mut a, &mut b] {
        if let Body::Request(q) = &mut r.body {
            q.timing.duration = 3;
        }
    }
    // File order is b then a (the spy may finish them in any order across directions).
    let opts = VcdOptions { clock_hz: 100_000_000, date: "d".into(), comment: String::new(), names: None };
    let mut out = Vec::new();
    write_vcd(&mut out, &[b, a], &opts).unwrap();
    let vcd = parse_vcd(&String::from_utf8(out).unwrap());
    assert_eq!(vcd.timescale, "10ns");
    let busy = vcd.vars.iter().find(|(_, (s, n))| s == "tlpx.up" && n == "busy").unwrap().0;
    let changes: Vec<_> = vcd.changes.iter().filter(|(_, id, _)| id == busy).map(|(t, _, v)| (*t, v.as_str())).collect();
    assert_eq!(changes, vec![(100, "1"), (108, "0")]);
}

#[test]
fn vcd_refuses_a_trace_longer_than_it_holds_in_memory_before_reading_it() {
    // a header, then MAX_VCD_RECORDS + 1 records (a sparse file: zero records are reads)
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("long.tlpx");
    let writer = tlpx_trace::TraceWriter::create_with_header(&path, &tlpx_trace::sample::header()).unwrap();
    let start = writer.bytes_written();
    writer.finish_without_footer().unwrap();
    let records = MAX_VCD_RECORDS + 1;
    std::fs::OpenOptions::new().write(true).open(&path).unwrap().set_len(start + records * 32).unwrap();
    let reader = TraceReader::open(&path).unwrap();
    assert_eq!(reader.record_count(), records);
    let began = std::time::Instant::now();
    let mut out = Vec::new();
    let e = trace_to_vcd(reader, &mut out).unwrap_err();
    let text = e.to_string();
    assert!(text.contains(&format!("holds {records} records")) && text.contains(&format!("at most {MAX_VCD_RECORDS}")), "{text}");
    assert!(text.contains("CSV and log converters stream"), "{text}");
    assert_eq!(e.offset(), start + MAX_VCD_RECORDS * 32, "the first record past the limit");
    assert!(out.is_empty(), "nothing written");
    assert!(began.elapsed() < std::time::Duration::from_secs(1), "refused unread, in {:?}", began.elapsed());
    // the CSV converter takes it, streaming
    let mut csv = std::io::sink();
    assert_eq!(trace_to_csv(TraceReader::open(&path).unwrap(), &mut csv).unwrap(), records);
}

#[test]
fn vcd_opens_in_gtkwave() {
    // GTKWave is installed by the project's set-up (`make setup`, Debian package gtkwave).
    assert!(
        std::process::Command::new("vcd2fst").arg("--help").output().is_ok(),
        "vcd2fst (GTKWave) is missing: run `make setup` (it installs the Debian package gtkwave)"
    );
    let dir = tempfile::tempdir().unwrap();
    let vcd = dir.path().join("t.vcd");
    let fst = dir.path().join("t.fst");
    std::fs::write(&vcd, scenario_vcd()).unwrap();
    let run = std::process::Command::new("vcd2fst").arg(&vcd).arg(&fst).output().unwrap();
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert!(run.status.success(), "vcd2fst failed: {stderr}");
    assert!(!stderr.to_lowercase().contains("error"), "{stderr}");
    assert!(std::fs::metadata(&fst).unwrap().len() > 0);
}

#[test]
fn log_lines_for_each_kind() {
    let records = common::scenario();
    let hz = common::CLOCK_HZ;
    let l0 = log_line(&records[0], None, hz);
    assert_eq!(l0, "    8.000 us  up   MRd64  0x100000000 len 128 tag 0x00  dur  1  lat   -                ");
    let l1 = log_line(&records[1], Some(&records[0]), hz);
    assert_eq!(l1, "    9.360 us  down CplD   SC  bc 512 len  64 tag 0x00  dur 16  lat 170       +1.360 us  split 1");
    let l2 = log_line(&records[2], Some(&records[1]), hz);
    assert!(l2.ends_with("+0.160 us  split 2 last"), "{l2}");
    let t = Record {
        sequence: 1,
        body: Body::Timeout(Timeout { direction: Direction::Down, own: false, requester_id: 0x0100, tag: 5, timestamp: 125, waited: 99 }),
    };
    let lt = log_line(&t, None, hz);
    assert!(lt.contains("down Timeout rid 0x0100") && lt.contains("tag 0x05") && lt.contains("lat  99"), "{lt}");
    let f = Record { sequence: 40, body: Body::Footer(Footer { records_created: 40, records_lost: 3, trigger_sequence: None }) };
    assert!(log_line(&f, None, hz).contains("40 records created, 3 lost (next seq 40)"));
    // Negative delta when records are out of time order.
    let back = log_line(&records[0], Some(&records[1]), hz);
    assert!(back.ends_with("-1.360 us"), "{back}");
    assert!(log_title().contains("delta"));
}

/// A trace of a host polling spy.wr_index and writing ident.scratch, and the card writing host
/// memory at an address inside BAR0's range, with BAR0 at 0xf0000000 and `map_hash` as given.
fn named_trace(map_hash: u32, bar0: Option<&str>) -> Vec<u8> {
    let mut info = tlpx_trace::sample::info();
    info.card.map_hash = Some(format!("0x{map_hash:08x}"));
    info.card.bar0_address = bar0.map(str::to_owned);
    let header = tlpx_trace::Header::with_time(&info, "2026-11-26T00:00:00Z".into());
    let mut w = tlpx_trace::TraceWriter::new(std::io::Cursor::new(Vec::new()), &header).unwrap();
    let base = 0xf000_0000u64;
    w.write(&build::mem_read(0, Direction::Down, 100, 0, 1, base + tlpx_regs::spy::WR_INDEX.offset, 1)).unwrap();
    w.write(&build::mem_write(1, Direction::Down, 200, 0, 0, base + tlpx_regs::ident::SCRATCH.offset, 1)).unwrap();
    w.write(&build::mem_write(2, Direction::Up, 300, 0x100, 0, base + tlpx_regs::ident::SCRATCH.offset, 1)).unwrap();
    w.write(&build::mem_read(3, Direction::Down, 400, 0, 2, base + tlpx_regs::constants::PIO_WINDOW_BASE + 0x40, 1)).unwrap();
    // The slot's DUT reads host memory with its first tag, and the completion comes back.
    let tag = tlpx_regs::constants::SLOT_TAG_BASE as u8;
    w.write(&build::mem_read(4, Direction::Up, 500, 0x100, tag, 0x4000_0000, 1)).unwrap();
    w.write(&build::completion(5, Direction::Down, 600, 0x100, tag, 0, 4, 1, Some(100), 1, true)).unwrap();
    w.finish(6, Footer { records_created: 6, records_lost: 0, trigger_sequence: None }).unwrap().into_inner()
}

fn source_column() -> usize {
    CSV_COLUMNS.iter().position(|c| *c == "source").unwrap()
}

fn csv_registers(bytes: Vec<u8>) -> Vec<String> {
    let mut out = Vec::new();
    trace_to_csv(TraceReader::from_bytes(bytes).unwrap(), &mut out).unwrap();
    let text = String::from_utf8(out).unwrap();
    let col = CSV_COLUMNS.iter().position(|c| *c == "register").unwrap();
    assert_eq!(
        &CSV_COLUMNS[col - 1..col + 2],
        ["records_lost", "register", "source"],
        "new columns last: older readers by position keep working"
    );
    assert_eq!(CSV_COLUMNS[col + 2], "lost_before", "record format 2's columns after them");
    text.lines().skip(1).map(|l| l.split(',').nth(col).unwrap().to_owned()).collect()
}

#[test]
fn host_requests_into_bar0_are_named_in_csv_vcd_and_log() {
    let bytes = named_trace(tlpx_regs::MAP_HASH, Some("0xf0000000"));
    // CSV: the host's read and write named, the card's write to host memory not, the PIO
    // window by offset, the footer row empty.
    assert_eq!(csv_registers(bytes.clone()), ["spy.wr_index", "ident.scratch", "", "pio+0x40", "", "", ""]);
    // `source`: the slot's reads and their completions, by the slot's DUT name (the header's
    // slot_dut; rule 30 when the header has none); the host's requests, `host`.
    let mut out = Vec::new();
    trace_to_csv(TraceReader::from_bytes(bytes.clone()).unwrap(), &mut out).unwrap();
    let sources: Vec<String> =
        String::from_utf8(out).unwrap().lines().skip(1).map(|l| l.split(',').nth(source_column()).unwrap().to_owned()).collect();
    // The host's requests are the host's; the card's tag-0 write is LitePCIe's DMA writer's.
    assert_eq!(sources, ["host", "host", "litepcie", "host", "rule30", "rule30", ""]);
    // VCD: the `register` string signal of `down` carries the names while the TLP is on the link.
    let mut out = Vec::new();
    trace_to_vcd(TraceReader::from_bytes(bytes.clone()).unwrap(), &mut out).unwrap();
    let vcd = String::from_utf8(out).unwrap();
    let v = parse_vcd(&vcd);
    let down_register =
        v.vars.iter().find(|(_, (scope, name))| scope == "tlpx.down" && name == "register").map(|(id, _)| id.clone()).unwrap();
    let initial = v.initial.iter().filter(|(id, _)| *id == down_register).map(|(_, value)| value.as_str());
    let names: Vec<&str> =
        initial.chain(v.changes.iter().filter(|(_, id, _)| *id == down_register).map(|(_, _, value)| value.as_str())).collect();
    assert_eq!(names, ["-", "spy.wr_index", "-", "ident.scratch", "-", "pio+0x40", "-"], "{vcd}");
    let up_source = v.vars.iter().find(|(_, (scope, name))| scope == "tlpx.up" && name == "source").map(|(id, _)| id.clone()).unwrap();
    let sources: Vec<&str> = v.changes.iter().filter(|(_, id, _)| *id == up_source).map(|(_, _, value)| value.as_str()).collect();
    assert_eq!(sources, ["litepcie", "-", "rule30", "-"], "{vcd}");
    // Log: the name ends the line of the host's requests.
    let records = TraceReader::from_bytes(bytes.clone()).unwrap().read_all().unwrap();
    let header = TraceReader::from_bytes(bytes).unwrap().header().clone();
    let names = tlpx_trace::Bar0Names::from_header(&header);
    assert_eq!(names, Some(tlpx_trace::Bar0Names::new(0xf000_0000)));
    let lines: Vec<String> = records.iter().map(|r| tlpx_trace::log_line_named(r, None, 125_000_000, names.as_ref())).collect();
    assert!(lines[0].ends_with("  spy.wr_index") && lines[1].ends_with("  ident.scratch"), "{lines:?}");
    assert_eq!(
        lines[2],
        format!("{}  [litepcie]", log_line(&records[2], None, 125_000_000)),
        "the card's own write is not a register access, only its source follows"
    );
    assert!(lines[4].ends_with("  [rule30]") && lines[5].ends_with("  [rule30]"), "{lines:?}");
}

#[test]
fn another_dut_in_the_slot_is_named_from_the_header() {
    let mut info = tlpx_trace::sample::info();
    info.card.map_hash = Some(format!("0x{:08x}", tlpx_regs::MAP_HASH));
    info.card.bar0_address = Some("0xf0000000".into());
    info.card.tlpx_map_offset = Some(format!("{:#x}", tlpx_regs::constants::RELOCATED_TLPX_BASE));
    info.card.slot_dut = Some("pci_epf_test".into());
    let header = tlpx_trace::Header::with_time(&info, "2026-11-26T00:00:00Z".into());
    let mut w = tlpx_trace::TraceWriter::new(std::io::Cursor::new(Vec::new()), &header).unwrap();
    let base = 0xf000_0000u64;
    w.write(&build::mem_write(0, Direction::Down, 100, 0, 0, base + 0x4, 1)).unwrap();
    w.write(&build::mem_read(
        1,
        Direction::Down,
        200,
        0,
        1,
        base + tlpx_regs::constants::RELOCATED_TLPX_BASE + tlpx_regs::spy::WR_INDEX.offset,
        1,
    ))
    .unwrap();
    w.write(&build::mem_read(2, Direction::Up, 300, 0x100, tlpx_regs::constants::SLOT_TAG_BASE as u8, 0x4000_0000, 1)).unwrap();
    let bytes = w.finish(3, Footer { records_created: 3, records_lost: 0, trigger_sequence: None }).unwrap().into_inner();
    assert_eq!(csv_registers(bytes.clone()), ["pci_epf_test+0x4", "spy.wr_index", "", ""]);
    let mut out = Vec::new();
    trace_to_csv(TraceReader::from_bytes(bytes).unwrap(), &mut out).unwrap();
    let sources: Vec<String> =
        String::from_utf8(out).unwrap().lines().skip(1).map(|l| l.split(',').nth(source_column()).unwrap().to_owned()).collect();
    assert_eq!(sources, ["host", "host", "pci_epf_test", ""]);
}

#[test]
fn traces_without_bar0_or_of_another_map_name_nothing() {
    // Before the header recorded BAR0 (the golden trace's case): the column stays empty.
    assert!(csv_registers(named_trace(tlpx_regs::MAP_HASH, None)).iter().all(String::is_empty));
    // A card with another register map: its offsets may be other registers.
    assert!(csv_registers(named_trace(tlpx_regs::MAP_HASH ^ 1, Some("0xf0000000"))).iter().all(String::is_empty));
    // A header whose bar0_address is not an address is refused (by the writer, as by the
    // reader), naming the key.
    let mut info = tlpx_trace::sample::info();
    info.card.bar0_address = Some("BAR zero".into());
    let header = tlpx_trace::Header::with_time(&info, "2026-11-26T00:00:00Z".into());
    let e = tlpx_trace::TraceWriter::new(std::io::Cursor::new(Vec::new()), &header).err().expect("refused").to_string();
    assert!(e.contains("card.bar0_address") && e.contains("BAR zero") && e.contains("hex"), "{e}");
    // The same length in place, so that the file's header length stays right.
    let mut bad = named_trace(tlpx_regs::MAP_HASH, Some("0xf0000000"));
    let at = bad.windows(12).position(|w| w == b"\"0xf0000000\"").expect("the address in the header");
    bad[at + 1..at + 11].copy_from_slice(b"0xbar00000");
    let e = TraceReader::from_bytes(bad).err().expect("refused").to_string();
    assert!(e.contains("card.bar0_address") && e.contains("0xbar00000"), "{e}");
}

fn info(record: Record) -> tlpx_trace::EntryInfo {
    tlpx_trace::EntryInfo {
        entry: tlpx_trace::Entry { record, payload: Vec::new(), payload_complete: true },
        lost_before: 0,
        payload_records: 0,
    }
}

#[test]
fn the_log_is_in_time_order_across_directions_with_bounded_memory() {
    use tlpx_trace::log::{TimeSorter, SORT_WINDOW_CYCLES};
    // The spy's order: a long write up (first beat at 100, finished at 160) comes after short
    // reads down that started during it; a timeout is ordered at the moment it happened.
    let long_write = build::mem_write(2, Direction::Up, 100, 0x100, 0, 0x1000, 64);
    let read_a = build::mem_read(0, Direction::Down, 110, 0, 1, 0xf000_0000, 1);
    let read_b = build::mem_read(1, Direction::Down, 150, 0, 2, 0xf000_0004, 1);
    let timeout = Record {
        sequence: 3,
        body: Body::Timeout(Timeout { direction: Direction::Up, own: false, requester_id: 0x100, tag: 9, timestamp: 20, waited: 120 }),
    };
    let mut sorter = TimeSorter::new();
    let mut out = Vec::new();
    for r in [read_a, read_b, long_write, timeout] {
        out.extend(sorter.push(info(r)));
    }
    assert!(out.is_empty(), "all within the window: held");
    out.extend(sorter.finish());
    let seqs: Vec<u32> = out.iter().map(|h| h.info.entry.record.sequence).collect();
    assert_eq!(seqs, [2, 0, 3, 1], "by time: write 100, read 110, timeout 140, read 150");
    let mut text = Vec::new();
    let mut previous = None;
    tlpx_trace::log::write_sorted(&mut text, out, &mut previous, common::CLOCK_HZ, None).unwrap();
    let text = String::from_utf8(text).unwrap();
    assert!(!text.contains(" -0."), "no negative delta: {text}");
    assert!(text.contains("completion timeout (read at 0.160 us)"), "{text}");
    // A long capture: what is further back than the window is released, memory stays bounded.
    let mut sorter = TimeSorter::new();
    let mut released = 0;
    let mut last_time = 0;
    for i in 0..200_000u64 {
        let dir = if i % 2 == 0 { Direction::Down } else { Direction::Up };
        // Each direction in order, the two a little out of step.
        let t = i * 4 + if dir == Direction::Up { 0 } else { 30 };
        for h in sorter.push(info(build::mem_read(i as u32, dir, t, 0, 0, 0, 1))) {
            assert!(h.time >= last_time, "released in time order");
            last_time = h.time;
            released += 1;
        }
        assert!(sorter.held() as u64 <= SORT_WINDOW_CYCLES / 4 + 16, "held {} at {i}", sorter.held());
    }
    assert!(released > 150_000);
}

#[test]
fn msi_and_payload_lines() {
    let msi = Record { sequence: 7, body: Body::Msi(tlpx_trace::Msi { timestamp: 1000, vector: 0, sources: 1 << 3, wait_cycles: 2 }) };
    let line = log_line(&msi, None, common::CLOCK_HZ);
    assert!(line.contains("up   MSI    vector 0 sources generator  wait 2"), "{line}");
    let write = build::mem_write(0, Direction::Up, 100, 0x100, 0, 0x1000, 2);
    let chunk = Record {
        sequence: 1,
        body: Body::Payload(tlpx_trace::PayloadChunk {
            direction: Direction::Up,
            first_dw: 0,
            count: 2,
            last: true,
            dws: [0x0403_0201, 0xa5a5_a5a5, 0, 0, 0, 0],
        }),
    };
    let e = tlpx_trace::entry::entries_with_info(&[write, chunk], Some(2));
    assert_eq!(e.len(), 1);
    let line = tlpx_trace::log::log_entry_line(&e[0], None, common::CLOCK_HZ, None);
    assert!(line.ends_with("data 01020304 a5a5a5a5 (8 of 8 bytes)"), "{line}");
    // CSV: one row for the write and its payload.
    let bytes = common::trace_bytes(&[write, chunk], Some((2, Footer { records_created: 2, records_lost: 0, trigger_sequence: None })));
    let mut out = Vec::new();
    assert_eq!(trace_to_csv(TraceReader::from_bytes(bytes).unwrap(), &mut out).unwrap(), 2, "the write's row and the footer's");
    let text = String::from_utf8(out).unwrap();
    let row: Vec<&str> = text.lines().nth(1).unwrap().split(',').collect();
    let col = |name: &str| CSV_COLUMNS.iter().position(|c| *c == name).unwrap();
    assert_eq!((row[col("payload")], row[col("payload_captured_bytes")], row[col("payload_complete")]), ("01020304a5a5a5a5", "8", "1"));
}

#[test]
fn vcd_carries_payload_and_msis() {
    let write = build::mem_write(0, Direction::Up, 100, 0x100, 0, 0x1000, 2);
    let chunk = Record {
        sequence: 1,
        body: Body::Payload(tlpx_trace::PayloadChunk {
            direction: Direction::Up,
            first_dw: 0,
            count: 2,
            last: true,
            dws: [0x0403_0201, 0xa5a5_a5a5, 0, 0, 0, 0],
        }),
    };
    let msi = Record { sequence: 2, body: Body::Msi(tlpx_trace::Msi { timestamp: 200, vector: 0, sources: 1 << 3, wait_cycles: 0 }) };
    let mut out = Vec::new();
    let opts = VcdOptions { clock_hz: common::CLOCK_HZ, date: String::new(), comment: String::new(), names: None };
    write_vcd(&mut out, &[write, chunk, msi], &opts).unwrap();
    let text = String::from_utf8(out).unwrap();
    // The `up` scope's signal (it comes after `down`'s).
    let id = |name: &str| {
        let line =
            text.lines().rfind(|l| l.starts_with("$var") && l.contains(&format!(" {name} "))).unwrap_or_else(|| panic!("{name} in {text}"));
        line.split_whitespace().nth(3).unwrap().to_owned()
    };
    assert!(text.contains(&format!("s01020304a5a5a5a5 {}", id("payload"))), "{text}");
    assert!(text.contains(&format!("sgenerator {}", id("msi_sources"))), "{text}");
    // The MSI pulse: high at 200 cycles (1600 ns), low a cycle later.
    let msi_id = id("msi");
    let at = text.find("#1600").unwrap();
    assert!(text[at..].contains(&format!("1{msi_id}")) && text[at..].contains(&format!("0{msi_id}")), "{text}");
}
