//! The pcapng export read back by the real tshark with the repository's dissector, compared
//! record for record, field by field, with `tlpx spy convert --csv` of the same trace.
//!
//!   tlpx spy capture --pcapng ──► cap.pcapng ──► tshark -X lua_script:wireshark/tlpx.lua ─┐
//!                     └─► cap.tlpx ──► tlpx spy convert --csv ──► cap.csv ────────────────┴─► equal
//!
//! The scripted capture has host MMIO, the generator's DMA reads (split completions, some
//! answered Unsupported Request by the simulator's fault injection) and writes, its MSIs, payload
//! capture (--payload 4) and a start trigger.
//!
//! tshark is Debian's package (with Lua), which `make setup` installs; without it these tests
//! fail and say so, they do not skip.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use tlpx_testkit::SimProcess as Sim;
use tlpx_trace::csv::CSV_COLUMNS;

use crate::common;
use common::{text, tlpx, tlpx_bin};

fn dissector() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../../wireshark/tlpx.lua")
}

/// CSV column → the dissector's field that must show the same value, and how to compare.
#[derive(Clone, Copy, PartialEq)]
enum Cmp {
    /// The same text.
    Text,
    /// The same number (decimal or 0x hex on either side); an empty CSV cell (the field does
    /// not apply) must be empty or 0 in tshark (the pseudo-header has a 0 there).
    Number,
    /// 0/1 in the CSV, True/False or 1/0 in tshark; empty CSV: absent or false.
    Bool,
    /// Hex bytes without separators (tshark may print `:` between them).
    Bytes,
}

const FIELDS: &[(&str, &str, Cmp)] = &[
    ("sequence", "tlpx.seq", Cmp::Number),
    ("kind", "tlpx.kind_name", Cmp::Text),
    ("direction", "tlpx.dir", Cmp::Text),
    ("timestamp_cycles", "tlpx.ts_cycles", Cmp::Number),
    ("fmt", "tlpx.fmt", Cmp::Number),
    ("type", "tlpx.tlp_type", Cmp::Number),
    ("requester_id", "tlpx.rid", Cmp::Number),
    ("tag", "tlpx.tag", Cmp::Number),
    ("address", "tlpx.addr", Cmp::Number),
    ("first_be", "tlpx.first_be", Cmp::Number),
    ("last_be", "tlpx.last_be", Cmp::Number),
    ("length_dw", "tlpx.length", Cmp::Number),
    ("completer_id", "tlpx.cid", Cmp::Number),
    ("status", "tlpx.status", Cmp::Text),
    ("byte_count", "tlpx.byte_count", Cmp::Number),
    ("lower_address", "tlpx.lower_addr", Cmp::Number),
    ("bcm", "tlpx.bcm", Cmp::Bool),
    ("matched", "tlpx.matched", Cmp::Bool),
    ("latency_cycles", "tlpx.latency", Cmp::Number),
    ("split_index", "tlpx.split", Cmp::Number),
    ("last", "tlpx.last", Cmp::Bool),
    ("duration_cycles", "tlpx.duration", Cmp::Number),
    ("gap_cycles", "tlpx.gap", Cmp::Number),
    ("tc", "tlpx.tc", Cmp::Number),
    ("attr", "tlpx.attr", Cmp::Number),
    ("ep", "tlpx.ep", Cmp::Bool),
    ("own", "tlpx.own", Cmp::Bool),
    ("lost_before", "tlpx.lost", Cmp::Number),
    ("payload_captured_bytes", "tlpx.payload_captured", Cmp::Number),
    ("payload_complete", "tlpx.payload_complete", Cmp::Bool),
    ("payload", "tlpx.payload", Cmp::Bytes),
    ("msi_vector", "tlpx.msi.vector", Cmp::Number),
    ("msi_sources", "tlpx.msi.sources", Cmp::Number),
];

/// Extra tshark fields the comparison reads besides FIELDS.
const EXTRA: &[&str] = &["frame.time_epoch", "tlpx.wait", "tlpx.msi.wait", "tlpx.trigger", "tlpx.request_in", "tlpx.response_in"];

fn number(s: &str) -> Option<u128> {
    let s = s.trim();
    match s.strip_prefix("0x") {
        Some(h) => u128::from_str_radix(h, 16).ok(),
        None => s.parse().ok(),
    }
}

fn boolean(s: &str) -> Option<bool> {
    match s.trim() {
        "1" | "True" | "true" => Some(true),
        "0" | "False" | "false" | "" => Some(false),
        _ => None,
    }
}

fn same(cmp: Cmp, csv: &str, shark: &str) -> bool {
    match cmp {
        Cmp::Text => csv == shark,
        Cmp::Number if csv.is_empty() => shark.is_empty() || number(shark) == Some(0),
        Cmp::Number => number(csv).is_some() && number(csv) == number(shark),
        Cmp::Bool => boolean(csv).is_some() && boolean(csv) == boolean(shark),
        Cmp::Bytes => csv == shark.replace(':', ""),
    }
}

/// Runs tshark with the dissector (two passes, so requests know their response) and returns
/// one map field → value per packet.
fn tshark_rows(pcapng: &Path) -> Vec<HashMap<String, String>> {
    let version = Command::new("tshark").arg("--version").output();
    assert!(
        version.as_ref().is_ok_and(|o| o.status.success()),
        "tshark is not installed (or does not run): `make setup` installs it (Debian package tshark, with Lua); \
         the pcapng round trip needs the real tshark: {version:?}"
    );
    let names: Vec<&str> = FIELDS.iter().map(|(_, f, _)| *f).chain(EXTRA.iter().copied()).collect();
    let mut cmd = Command::new("tshark");
    cmd.arg("-X").arg(format!("lua_script:{}", dissector().display())).args(["-2", "-r"]).arg(pcapng);
    cmd.args(["-T", "fields", "-E", "separator=\t", "-E", "occurrence=f"]);
    for n in &names {
        cmd.args(["-e", n]);
    }
    let out = cmd.output().expect("run tshark");
    assert!(out.status.success(), "tshark failed: {}", text(&out.stderr));
    let err = text(&out.stderr);
    assert!(!err.contains("Lua: Error") && !err.contains("lua_script"), "the dissector failed to load or run: {err}");
    text(&out.stdout).lines().map(|l| names.iter().zip(l.split('\t')).map(|(n, v)| ((*n).to_owned(), v.to_owned())).collect()).collect()
}

fn csv_rows(csv: &Path) -> Vec<HashMap<String, String>> {
    let body = std::fs::read_to_string(csv).expect("csv");
    let mut lines = body.lines();
    assert_eq!(lines.next().expect("header row"), CSV_COLUMNS.join(","));
    lines.map(|l| CSV_COLUMNS.iter().zip(l.split(',')).map(|(c, v)| ((*c).to_owned(), v.to_owned())).collect()).collect()
}

/// What the comparison saw, for the tests' own checks.
#[derive(Debug, Default)]
struct Seen {
    packets: usize,
    kinds: HashMap<String, usize>,
    statuses: HashMap<String, usize>,
    paired_completions: usize,
    requests_with_response: usize,
    with_payload: usize,
    triggers: usize,
}

/// Converts `trace` to CSV and (if `pcapng` is None) to pcapng with the CLI, runs tshark and
/// compares every packet with its CSV row, field by field. Returns what it compared.
fn round_trip(device: &str, trace: &Path, pcapng: Option<&Path>, dir: &Path) -> Seen {
    let csv = dir.join("rt.csv");
    let out = tlpx(device, &["spy", "convert", trace.to_str().expect("path"), "--csv", csv.to_str().expect("path")]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let converted = dir.join("rt.pcapng");
    let pcapng = match pcapng {
        Some(p) => p.to_path_buf(),
        None => {
            let out = tlpx(device, &["spy", "convert", trace.to_str().expect("path"), "--pcapng", converted.to_str().expect("path")]);
            assert!(out.status.success(), "{}", text(&out.stderr));
            converted
        }
    };
    let mut rows = csv_rows(&csv);
    let footer = rows.pop().filter(|r| r["kind"] == "Footer");
    if footer.is_none() {
        panic!("the trace of the round trip ends cleanly, with a footer row");
    }
    let footer = footer.unwrap_or_default();
    let packets = tshark_rows(&pcapng);
    assert_eq!(packets.len(), rows.len(), "one packet per CSV row (entry), footer aside");
    let clock_hz = tlpx_trace::TraceReader::open(trace).expect("trace").clock_hz();
    let trigger: Option<u32> = footer.get("trigger_sequence").and_then(|s| s.parse().ok());
    let mut seen = Seen { packets: packets.len(), ..Seen::default() };
    for (i, (row, pkt)) in rows.iter().zip(&packets).enumerate() {
        let differ: Vec<String> = FIELDS
            .iter()
            .filter(|(col, field, cmp)| !same(*cmp, &row[*col], &pkt[*field]))
            .map(|(col, field, _)| format!("{col} is {:?} in the CSV, {field} is {:?}", row[*col], pkt[*field]))
            .collect();
        assert!(
            differ.is_empty(),
            "packet #{} (CSV row {}) differs: {}\n  csv: {row:?}\n  tshark: {pkt:?}",
            i + 1,
            i + 2,
            differ.join("; ")
        );
        // Wait cycles: a TLP's in tlpx.wait, an MSI's in tlpx.msi.wait.
        let wait_field = if row["kind"] == "MSI" { "tlpx.msi.wait" } else { "tlpx.wait" };
        assert!(
            same(Cmp::Number, &row["wait_cycles"], &pkt[wait_field]),
            "packet #{}: wait_cycles {:?} vs {wait_field} {:?}",
            i + 1,
            row["wait_cycles"],
            pkt[wait_field]
        );
        // The packet's time: ns of card time, at the record's moment (a timeout's: the read's
        // time plus the cycles waited).
        let cycles: u128 = number(&row["timestamp_cycles"]).unwrap_or(0)
            + if row["kind"] == "Timeout" { number(&row["latency_cycles"]).unwrap_or(0) } else { 0 };
        let epoch = &pkt["frame.time_epoch"];
        let (secs, frac) = epoch.split_once('.').expect("epoch time");
        let ns: u128 = secs.parse::<u128>().expect("secs") * 1_000_000_000 + format!("{frac:0<9}")[..9].parse::<u128>().expect("ns");
        if row["kind"] != "Payload" {
            assert_eq!(ns, cycles * 1_000_000_000 / u128::from(clock_hz), "packet #{}: timestamp", i + 1);
        }
        let seq: u32 = row["sequence"].parse().expect("sequence");
        assert_eq!(boolean(&pkt["tlpx.trigger"]), Some(trigger == Some(seq)), "packet #{}: trigger flag", i + 1);
        seen.triggers += usize::from(trigger == Some(seq));
        *seen.kinds.entry(row["kind"].clone()).or_default() += 1;
        if !row["status"].is_empty() {
            *seen.statuses.entry(row["status"].clone()).or_default() += 1;
        }
        if row["kind"].starts_with("Cpl") && row["matched"] == "1" {
            // The dissector pairs what the spy matched: its request is a packet before it with the
            // same requester ID and tag.
            let req: usize = pkt["tlpx.request_in"]
                .parse()
                .unwrap_or_else(|_| panic!("packet #{}: a matched completion has tlpx.request_in: {pkt:?}", i + 1));
            assert!(req >= 1 && req <= i, "packet #{}: request_in {req}", i + 1);
            let r = &rows[req - 1];
            assert!(r["kind"].starts_with("MRd") || r["kind"].starts_with("IORd") || r["kind"].starts_with("Cfg"), "{r:?}");
            assert_eq!((&r["requester_id"], &r["tag"]), (&row["requester_id"], &row["tag"]), "packet #{}: paired with #{req}", i + 1);
            assert_ne!(r["direction"], row["direction"]);
            seen.paired_completions += 1;
        }
        if !pkt["tlpx.response_in"].is_empty() {
            seen.requests_with_response += 1;
        }
        if !row["payload"].is_empty() {
            seen.with_payload += 1;
        }
    }
    seen
}

/// Waits until `tlpx owners` shows the spy owned by process `pid`: the capture has started.
fn wait_until_spy_owned_by(device: &str, pid: u32, capture: &mut Child) {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let out = tlpx(device, &["--json", "owners"]);
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_default();
        let owned = v.as_array().into_iter().flatten().any(|r| r["block"] == "spy" && r["owner"]["pid"].as_u64() == Some(u64::from(pid)));
        if owned {
            return;
        }
        if let Ok(Some(status)) = capture.try_wait() {
            panic!("the capture ended ({status}) before it owned the spy");
        }
        assert!(Instant::now() < deadline, "the spy never became owned by PID {pid}: {v}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn run_ok(device: &str, args: &[&str]) {
    let out = tlpx(device, args);
    // bw exits 1 when the card's reads got error completions (the scenario injects some).
    assert!(matches!(out.status.code(), Some(0 | 1)), "{args:?}: {}", text(&out.stderr));
}

#[test]
fn a_scripted_capture_reads_back_through_tshark_record_for_record() {
    // Every 5th read of the card's gets an Unsupported Request completion: error completions
    // in the trace beside the successful, split ones.
    let sim = Sim::start(&["--fault-ur-every", "5"]);
    let device = sim.selector();
    let trace = sim.path("rt.tlpx");
    let pcapng = sim.path("rt_capture.pcapng");
    let mut capture = Command::new(tlpx_bin())
        // Payload capture of the first 4 DWs of every TLP with data; a start trigger on the
        // host's first write (the capture's own polling, or the scenario's register write).
        .args(["--device", &device, "--json", "spy", "capture", "--quiet", "--payload", "4"])
        .args(["--trigger", "start", "--trigger-types", "mwr", "--trigger-dir", "down", "-o"])
        .arg(&trace)
        .arg("--pcapng")
        .arg(&pcapng)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start capture");
    wait_until_spy_owned_by(&device, capture.id(), &mut capture);
    // Host MMIO writes and reads.
    run_ok(&device, &["reg", "write", "ident.scratch", "0x12345678"]);
    run_ok(&device, &["reg", "read", "ident.scratch"]);
    // Generator DMA reads of 1 KiB (two MRd at MRRS 512, each answered by completions split at
    // the root complex's 64-byte boundary) and writes.
    run_ok(&device, &["bw", "--op", "read", "--sizes", "1024", "--count", "6"]);
    run_ok(&device, &["bw", "--op", "write", "--sizes", "256", "--count", "6"]);
    let stop = tlpx(&device, &["--json", "spy", "stop"]);
    assert!(stop.status.success(), "{}", text(&stop.stderr));
    let out = capture.wait_with_output().expect("capture");
    // A capture with a trigger has an end of its own: stopped before it, it says it was
    // interrupted (130), with every record and the footer written.
    assert_eq!(out.status.code(), Some(130), "{}", text(&out.stderr));
    let summary: serde_json::Value = serde_json::from_slice(&out.stdout).expect("capture JSON");
    assert_eq!((summary["records_lost"].as_u64(), summary["triggered"].as_bool()), (Some(0), Some(true)), "{summary}");
    assert_eq!(summary["pcapng"], pcapng.display().to_string(), "{summary}");

    let dir = tempfile::tempdir().expect("dir");
    let seen = round_trip(&device, &trace, Some(&pcapng), dir.path());
    eprintln!("round trip compared: {seen:?}");
    assert_eq!(summary["pcapng_packets"].as_u64(), Some(seen.packets as u64), "{summary}");
    // The scenario is in it: host MMIO both ways, the card's reads, split and error completions.
    for kind in ["MWr32", "MRd32", "CplD"] {
        assert!(seen.kinds.get(kind).is_some_and(|&n| n > 0), "{kind} in {:?}", seen.kinds);
    }
    assert!(seen.statuses.get("UR").is_some_and(|&n| n > 0), "error completions: {:?}", seen.statuses);
    // Record format 2: the generator's runs end with an MSI each; payload of the TLPs with data.
    assert!(seen.kinds.get("MSI").is_some_and(|&n| n >= 2), "an MSI per generator run: {:?}", seen.kinds);
    assert!(seen.with_payload >= 100, "payload captured: {seen:?}");
    assert_eq!(seen.triggers, 1, "the trigger record is marked once");
    assert!(seen.paired_completions >= 12, "split completions of 12 reads paired: {seen:?}");
    assert!(seen.requests_with_response >= 12, "{seen:?}");
    // The same trace converted afterwards gives the same packets.
    let again = round_trip(&device, &trace, None, dir.path());
    assert_eq!(again.packets, seen.packets);
}

#[test]
fn the_golden_traces_read_back_through_tshark_record_for_record() {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../../traces/golden");
    let mut goldens: Vec<PathBuf> = std::fs::read_dir(&dir)
        .expect("traces/golden")
        .map(|e| e.expect("entry").path())
        .filter(|p| p.extension().is_some_and(|x| x == "tlpx"))
        .collect();
    goldens.sort();
    assert!(!goldens.is_empty(), "golden traces in {}", dir.display());
    for golden in &goldens {
        let tmp = tempfile::tempdir().expect("dir");
        // Conversion needs no card: any device name does.
        let seen = round_trip("sim:/nonexistent.sock", golden, None, tmp.path());
        let reader = tlpx_trace::TraceReader::open(golden).expect("golden");
        let version = reader.record_version();
        let records = reader.read_all().expect("records");
        assert_eq!(seen.packets, tlpx_trace::entries(&records).len(), "{}: one packet per entry", golden.display());
        if version == 1 {
            assert_eq!(seen.packets, records.len(), "{}: record format 1, one packet per record", golden.display());
        }
        assert!(seen.paired_completions > 0, "{}: {seen:?}", golden.display());
    }
}

#[test]
fn the_dissector_filters_by_type_and_direction() {
    let golden = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../../traces/golden/mmio_and_dma.tlpx");
    let dir = tempfile::tempdir().expect("dir");
    let pcapng = dir.path().join("g.pcapng");
    let out =
        tlpx("sim:/nonexistent.sock", &["spy", "convert", golden.to_str().expect("path"), "--pcapng", pcapng.to_str().expect("path")]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let records = tlpx_trace::TraceReader::open(&golden).expect("golden").read_all().expect("records");
    let count = |filter: &str| {
        let out = Command::new("tshark")
            .arg("-X")
            .arg(format!("lua_script:{}", dissector().display()))
            .arg("-r")
            .arg(&pcapng)
            .args(["-Y", filter, "-T", "fields", "-e", "tlpx.seq"])
            .output()
            .expect("tshark (`make setup` installs it)");
        assert!(out.status.success(), "{filter}: {}", text(&out.stderr));
        text(&out.stdout).lines().count()
    };
    let mrd = records.iter().filter(|r| r.kind_name().starts_with("MRd")).count();
    assert!(mrd > 0);
    assert_eq!(count("tlpx.type == \"MRd\""), mrd);
    let up = records.iter().filter(|r| r.direction() == Some(tlpx_trace::Direction::Up)).count();
    assert_eq!(count("tlpx.dir == \"up\""), up);
    let tag0 = records.iter().filter(|r| r.tag() == Some(0)).count();
    assert_eq!(count("tlpx.tag == 0"), tag0);
    assert_eq!(
        count("tlpx.status == \"SC\"") + count("tlpx.status != \"SC\""),
        records.iter().filter(|r| r.kind_name().starts_with("Cpl")).count()
    );
    assert_eq!(count("tlpx.lost > 0"), 0);
}

#[test]
fn bad_input_and_unwritable_output_are_clear_errors() {
    let dir = tempfile::tempdir().expect("dir");
    let missing = dir.path().join("missing.tlpx");
    let out = tlpx(
        "sim:/nonexistent.sock",
        &["spy", "convert", missing.to_str().expect("path"), "--pcapng", dir.path().join("x.pcapng").to_str().expect("path")],
    );
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    let err = text(&out.stderr);
    assert!(err.contains("missing.tlpx") && !err.contains("panicked"), "{err}");
    let not_a_trace = dir.path().join("junk.tlpx");
    std::fs::write(&not_a_trace, b"this is not a trace at all, just text").expect("write");
    let out = tlpx(
        "sim:/nonexistent.sock",
        &["spy", "convert", not_a_trace.to_str().expect("path"), "--pcapng", dir.path().join("y.pcapng").to_str().expect("path")],
    );
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("not a tlpx trace"), "{}", text(&out.stderr));
    // Unwritable even as root: a path under a regular file.
    let file = dir.path().join("a_file");
    std::fs::write(&file, b"x").expect("write");
    let unwritable = file.join("out.pcapng");
    let u = unwritable.to_str().expect("path");
    let golden = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../../traces/golden/mmio_and_dma.tlpx");
    let out = tlpx("sim:/nonexistent.sock", &["spy", "convert", golden.to_str().expect("path"), "--pcapng", u]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    let err = text(&out.stderr);
    assert!(err.contains(u) && !err.contains("panicked"), "{err}");
    // A capture refuses an unwritable --pcapng before it touches the card (none runs here).
    let out = tlpx("sim:/nonexistent.sock", &["spy", "capture", "-o", dir.path().join("c.tlpx").to_str().expect("path"), "--pcapng", u]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    let err = text(&out.stderr);
    assert!(err.contains("--pcapng") && err.contains(u), "{err}");
}
