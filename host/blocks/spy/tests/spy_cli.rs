//! `tlpx spy` end to end: capture into a trace file, convert it to CSV / VCD / log with the
//! real binary, report loss with a non-zero exit, and refuse bad arguments clearly.
//!
//!   tlpx spy capture ──► tlpx-sim (card + spy) ──ring──► cap.tlpx ──► tlpx spy convert

use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use tlpx_testkit::SimProcess as Sim;
use tlpx_trace::{Body, TraceReader};

use crate::common;
use common::{text, tlpx, tlpx_bin};

fn json(out: &Output) -> serde_json::Value {
    assert!(out.status.success(), "tlpx failed: {}", text(&out.stderr));
    serde_json::from_slice(&out.stdout).expect("tlpx printed JSON")
}

#[test]
fn capture_writes_a_trace_that_converts_to_csv_vcd_and_log() {
    let sim = Sim::start(&[]);
    let trace = sim.path("cap.tlpx");
    let t = trace.to_str().expect("path");
    // The capture's own ring polling is traffic too: 2-3 TLPs per poll.
    let out = tlpx(&sim.selector(), &["spy", "capture", "--records", "20", "--poll", "10us", "-o", t]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let log = text(&out.stdout);
    assert!(log.contains("MRd32") && log.contains("CplD") && log.contains("records written"), "{log}");
    let reader = TraceReader::open(&trace).expect("valid trace");
    assert!(reader.header().simulated);
    assert_eq!(reader.header().card.data_width, Some(64));
    assert!(reader.header().link.is_some());
    let footer = *reader.footer().expect("footer: the capture ended cleanly");
    let n = reader.record_count();
    assert!(n >= 20, "{n}");
    assert_eq!((footer.records_created, footer.records_lost), (n, 0));
    let records = reader.read_all().expect("records");
    assert!(records.iter().enumerate().all(|(i, r)| r.sequence == i as u32));
    // The log printed while capturing has one line per record.
    assert_eq!(log.lines().filter(|l| l.contains(" us  down ") || l.contains(" us  up ")).count() as u64, n, "{log}");

    let csv = sim.path("cap.csv");
    let out = tlpx(&sim.selector(), &["spy", "convert", t, "--csv", csv.to_str().expect("path")]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let rows = std::fs::read_to_string(&csv).expect("csv");
    assert_eq!(rows.lines().count() as u64, n + 2, "header row, the records, the footer row");
    let vcd = sim.path("cap.vcd");
    let out = tlpx(&sim.selector(), &["spy", "convert", t, "--vcd", vcd.to_str().expect("path")]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let v = std::fs::read_to_string(&vcd).expect("vcd");
    assert!(v.contains("$enddefinitions") && v.contains("tlpx"), "{}", &v[..v.len().min(400)]);
    let out = tlpx(&sim.selector(), &["spy", "convert", t, "--log"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(text(&out.stdout).contains(&format!("end of capture: {n} records created, 0 lost")), "{}", text(&out.stdout));
}

#[test]
fn capture_filters_and_json_summary() {
    let sim = Sim::start(&[]);
    let trace = sim.path("f.tlpx");
    let t = trace.to_str().expect("path");
    let v = json(&tlpx(
        &sim.selector(),
        &["--json", "spy", "capture", "--duration", "300us", "--poll", "20us", "--dir", "up", "--types", "cpld", "-o", t],
    ));
    assert_eq!(v["records_lost"], 0);
    let records = TraceReader::open(&trace).expect("trace").read_all().expect("records");
    assert_eq!(v["records_written"], records.len() as u64);
    assert!(!records.is_empty());
    assert!(records.iter().all(|r| matches!(&r.body, Body::Completion(c) if c.with_data() && c.direction == tlpx_trace::Direction::Up)));
    let header = TraceReader::open(&trace).expect("trace").header().clone();
    assert_eq!(header.capture.filters["class_mask"], 8, "{:?}", header.capture.filters);
    // Stats see the capture's traffic in the counters.
    let s = json(&tlpx(&sim.selector(), &["--json", "spy", "stats"]));
    assert!(s["counters"]["down"][0]["tlps"].as_u64().expect("mrd") > 0, "{s}");
    assert_eq!(s["latency_histogram"].as_array().expect("hist").len(), 32);
    let out = tlpx(&sim.selector(), &["spy", "stats"]);
    assert!(out.status.success() && text(&out.stdout).contains("read latency"), "{}", text(&out.stdout));
}

/// Waits until `tlpx owners` shows the spy owned by process `pid`: the capture has started.
fn wait_until_spy_owned_by(device: &str, pid: u32, capture: &mut Child) {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let v = json(&tlpx(device, &["--json", "owners"]));
        let spy = v.as_array().expect("rows").iter().find(|r| r["block"] == "spy").cloned().expect("a spy row");
        if spy["owner"]["pid"].as_u64() == Some(u64::from(pid)) {
            return;
        }
        if let Ok(Some(status)) = capture.try_wait() {
            panic!("the capture ended ({status}) before it owned the spy");
        }
        assert!(Instant::now() < deadline, "the spy never became owned by PID {pid}: {spy}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// `tlpx spy capture` until stopped, in the background, with its --json summary on stdout.
fn background_capture(sim: &Sim, trace: &std::path::Path, extra: &[&str]) -> Child {
    Command::new(tlpx_bin())
        .args(["--device", &sim.selector(), "--json", "spy", "capture", "--quiet"])
        .args(extra)
        .arg("-o")
        .arg(trace)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start capture")
}

/// The bw write TLPs in a trace: card-to-host MWr32 of `payload_dw` DWs (the spy's own ring
/// writes are not recorded without --include-own).
fn bw_writes(trace: &std::path::Path, payload_dw: u16) -> usize {
    TraceReader::open(trace)
        .expect("trace")
        .read_all()
        .expect("records")
        .iter()
        .filter(|r| match &r.body {
            Body::Request(q) => {
                q.direction == tlpx_trace::Direction::Up && q.kind().name() == "MWr32" && q.length_dw == payload_dw && !q.own
            }
            _ => false,
        })
        .count()
}

#[test]
fn a_capture_started_first_records_traffic_another_process_starts_later_without_a_race() {
    // The pattern of scripts/demo.sh: capture until stopped, wait for it to own the spy, run
    // the traffic, stop it. On the simulator the capture holds live time, so bw's traffic
    // runs while it sleeps and lands in its trace, however the two processes are scheduled.
    let sim = Sim::start(&[]);
    let trace = sim.path("bg.tlpx");
    let mut capture = background_capture(&sim, &trace, &[]);
    wait_until_spy_owned_by(&sim.selector(), capture.id(), &mut capture);
    let n = 40;
    let bw = tlpx(&sim.selector(), &["--json", "bw", "--op", "write", "--sizes", "256", "--count", &n.to_string()]);
    let bw = json(&bw);
    assert_eq!(bw["points"][0]["transfers"], n, "{bw}");
    // bw ran while the capture held live time: its result says so.
    assert_eq!(bw["time_mode"], "live", "{}", bw["notes"]);
    assert!(
        bw["notes"].as_array().expect("notes").iter().any(|n| n.as_str().is_some_and(|n| n.starts_with("LIVE TIME:"))),
        "{}",
        bw["notes"]
    );
    // `tlpx spy stop` from a third process asks the capture to stop (SIGTERM) and waits for
    // it: it ends cleanly, every record and the footer in its trace.
    let stop = tlpx(&sim.selector(), &["--json", "spy", "stop"]);
    let stopped = json(&stop);
    assert_eq!(stopped[0]["taken_from"]["pid"], capture.id(), "{stopped}");
    assert_eq!(stopped[0]["ended_by_owner"], true, "{stopped}");
    let out = capture.wait_with_output().expect("capture");
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let summary: serde_json::Value = serde_json::from_slice(&out.stdout).expect("summary");
    assert_eq!(summary["ended_by"], "signal", "{summary}");
    assert_eq!(summary["time_mode"], "live", "{summary}");
    assert_eq!((summary["records_lost"].as_u64(), summary["interrupted"].as_bool()), (Some(0), Some(false)), "{summary}");
    let reader = TraceReader::open(&trace).expect("trace");
    assert_eq!(reader.header().time_mode.as_deref(), Some("live"));
    let footer = *reader.footer().expect("footer: the capture ended cleanly");
    assert_eq!((footer.records_created, footer.records_lost), (reader.record_count(), 0), "no record missing at the end");
    // 256-byte writes within MPS 256: one MWr32 of 64 DWs per transfer, every one recorded.
    assert_eq!(bw_writes(&trace, 64), n as usize);
}

#[test]
fn ctrl_c_ends_a_capture_until_stopped_with_a_complete_trace() {
    let sim = Sim::start(&[]);
    let trace = sim.path("int.tlpx");
    let mut capture = background_capture(&sim, &trace, &[]);
    wait_until_spy_owned_by(&sim.selector(), capture.id(), &mut capture);
    let bw = tlpx(&sim.selector(), &["--json", "bw", "--op", "write", "--sizes", "128", "--count", "25"]);
    assert!(bw.status.success(), "{}", text(&bw.stderr));
    // SIGINT, as Ctrl-C in its terminal: being stopped is the end of a capture without one of
    // its own, so it exits 0.
    // SAFETY: kill sends a signal to the child this test started; no memory is involved.
    assert_eq!(unsafe { libc::kill(capture.id() as i32, libc::SIGINT) }, 0);
    let out = capture.wait_with_output().expect("capture");
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let summary: serde_json::Value = serde_json::from_slice(&out.stdout).expect("summary");
    assert_eq!(summary["ended_by"], "signal", "{summary}");
    let reader = TraceReader::open(&trace).expect("trace");
    let footer = *reader.footer().expect("footer");
    assert_eq!((footer.records_created, footer.records_lost), (reader.record_count(), 0));
    assert_eq!(bw_writes(&trace, 32), 25);
    // The spy is free again.
    let v = json(&tlpx(&sim.selector(), &["--json", "spy", "stats"]));
    assert_eq!(v["counters"]["capturing"], false, "{v}");
}

#[test]
fn a_capture_whose_spy_is_taken_back_finishes_its_trace() {
    // What happens when the capture cannot be asked to stop (its owner runs on another host):
    // the spy is taken back from it; it sees its lease gone, drains what reached the ring and
    // writes the footer.
    use tlpx_device::card::Card;
    use tlpx_device::lease::{self, Block};
    let sim = Sim::start(&[]);
    let trace = sim.path("taken.tlpx");
    let mut capture = background_capture(&sim, &trace, &[]);
    wait_until_spy_owned_by(&sim.selector(), capture.id(), &mut capture);
    let device = tlpx_device::backends::sim::SimDevice::connect(sim.socket()).expect("connect");
    let mut card = Card::open(Box::new(device)).expect("card");
    let taken = lease::force_stop(&mut card, Block::Spy).expect("take the spy back").expect("it had an owner");
    assert_eq!(taken.pid, capture.id());
    drop(card);
    let out = capture.wait_with_output().expect("capture");
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let summary: serde_json::Value = serde_json::from_slice(&out.stdout).expect("summary");
    assert_eq!(summary["ended_by"], "spy_stop", "{summary}");
    let reader = TraceReader::open(&trace).expect("trace");
    let footer = *reader.footer().expect("footer");
    assert_eq!(footer.records_lost, 0);
    assert!(reader.record_count() > 0);
}

#[test]
fn ring_overflow_is_reported_and_exits_1() {
    let sim = Sim::start(&[]);
    let trace = sim.path("o.tlpx");
    // A 16-record ring polled every 2 ms of card time while the generator writes more records
    // than the ring and the spy's record FIFO hold: they overflow. The capture runs until
    // stopped, so bw's traffic is inside it.
    let mut capture = Command::new(tlpx_bin())
        .args(["--device", &sim.selector(), "spy", "capture", "--ring", "16", "--poll", "2ms", "--quiet", "-o"])
        .arg(&trace)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start capture");
    wait_until_spy_owned_by(&sim.selector(), capture.id(), &mut capture);
    let count = (tlpx_device::spy::RECORD_FIFO_DEPTH * 2).to_string();
    let bw = tlpx(&sim.selector(), &["--json", "bw", "--op", "write", "--sizes", "256", "--window", "64K", "--count", &count]);
    assert!(bw.status.success(), "{}", text(&bw.stderr));
    assert!(tlpx(&sim.selector(), &["spy", "stop"]).status.success());
    let out = capture.wait_with_output().expect("capture");
    assert_eq!(out.status.code(), Some(1), "{}\n{}", text(&out.stdout), text(&out.stderr));
    let err = text(&out.stderr);
    assert!(err.contains("records lost between seq") && err.contains("the ring was full"), "{err}");
    let reader = TraceReader::open(&trace).expect("trace with footer");
    let footer = *reader.footer().expect("footer");
    assert!(footer.records_lost > 0);
    // The footer carries the sequence the next record would have had: records lost at the
    // very end (the whole bw run may fall between two polls) show as a gap before it.
    let next = reader.footer_record().expect("footer record").sequence;
    let records = reader.read_all().expect("records");
    let lost: u64 = tlpx_trace::gaps(records.iter().map(|r| r.sequence).chain([next])).map(|g| u64::from(g.lost)).sum();
    assert!(lost > 0 && lost <= footer.records_lost, "{lost} vs {}", footer.records_lost);
}

#[test]
fn bad_arguments_are_clear_errors_with_exit_2() {
    let sim = Sim::start(&[]);
    let out_file = sim.path("x.tlpx");
    let o = out_file.to_str().expect("path");
    for (args, want) in [
        (vec!["spy", "capture", "--ring", "100", "-o", o], "not 100"),
        (vec!["spy", "capture", "--types", "mrd,bogus", "-o", o], "\"bogus\""),
        (vec!["spy", "capture", "--dir", "sideways", "-o", o], "\"sideways\""),
        (vec!["spy", "capture", "--address", "0x1001/0xffff", "-o", o], "bits outside"),
        (vec!["spy", "capture", "--pre", "3", "-o", o], "need --trigger"),
        (vec!["spy", "capture", "--trigger", "middle", "-o", o], "\"middle\""),
        (
            vec!["spy", "capture", "--trigger", "start", "--pre", "2048", "-o", o],
            "2048 is out of range; accepted: a whole number in 0..=2047",
        ),
        (vec!["spy", "capture", "--duration", "2 parsecs", "-o", o], "not a duration"),
        (vec!["spy", "capture", "--records", "0", "-o", o], "'0' for '--records <RECORDS>'"),
        (vec!["spy", "convert", "/nonexistent/cap.tlpx", "--log"], "cap.tlpx"),
    ] {
        let out = tlpx(&sim.selector(), &args);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {}", text(&out.stderr));
        let err = text(&out.stderr);
        assert!(err.contains(want) && !err.contains("panicked"), "{args:?}: {err}");
    }
    // A truncated trace: the error names the offset.
    let trace = sim.path("t.tlpx");
    let t = trace.to_str().expect("path");
    assert!(tlpx(&sim.selector(), &["spy", "capture", "--records", "5", "--quiet", "-o", t]).status.success());
    let mut bytes = std::fs::read(&trace).expect("read");
    bytes.truncate(bytes.len() - 7);
    std::fs::write(&trace, &bytes).expect("write");
    let out = tlpx(&sim.selector(), &["spy", "convert", t, "--csv", sim.path("t.csv").to_str().expect("path")]);
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("offset") && text(&out.stderr).contains("truncated"), "{}", text(&out.stderr));
    let out = tlpx(&sim.selector(), &["spy", "convert", t]);
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("--csv OUT, --vcd OUT, --pcapng OUT or --log"), "{}", text(&out.stderr));
}

#[test]
fn spy_stop_releases_a_capture_left_by_a_killed_process() {
    let sim = Sim::start(&[]);
    // A capture that nobody stops: start one from a child and kill it mid-capture.
    let mut child = std::process::Command::new(tlpx_testkit::workspace_bin("tlpx"))
        .args(["--device", &sim.selector(), "spy", "capture", "--duration", "1s", "--quiet", "-o"])
        .arg(sim.path("killed.tlpx"))
        .spawn()
        .expect("start capture");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    loop {
        let out = std::process::Command::new(tlpx_testkit::workspace_bin("tlpx"))
            .args(["--device", &sim.selector(), "--json", "spy", "stats"])
            .output()
            .expect("stats");
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_default();
        if v["counters"]["capturing"] == true {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "the capture never started");
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    child.kill().expect("kill");
    let _ = child.wait();
    let out = std::process::Command::new(tlpx_testkit::workspace_bin("tlpx"))
        .args(["--device", &sim.selector(), "--json", "spy", "stop"])
        .output()
        .expect("stop");
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    // Stopped and taken from the killed process, which the card still had as the spy's owner.
    assert_eq!(v[0]["block"], "spy", "{v}");
    assert_eq!(v[0]["taken_from"]["pid"], child.id(), "{v}");
    assert_eq!(v[0]["taken_from"]["process"]["state"], "gone", "{v}");
    let out = std::process::Command::new(tlpx_testkit::workspace_bin("tlpx"))
        .args(["--device", &sim.selector(), "--json", "spy", "stats"])
        .output()
        .expect("stats");
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(v["counters"]["capturing"], false, "{v}");
}

#[test]
fn capture_names_the_bar0_registers_host_requests_hit() {
    let sim = Sim::start(&[]);
    let trace = sim.path("names.tlpx");
    let t = trace.to_str().expect("path");
    // The capture's own polling of the spy's registers is what the host sends to BAR0 here.
    let out = tlpx(&sim.selector(), &["spy", "capture", "--records", "20", "--poll", "10us", "-o", t]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let reader = TraceReader::open(&trace).expect("valid trace");
    // The header records BAR0's bus address (the simulator's BAR0).
    let bar0 = reader.header().card.bar0_address.clone().expect("bar0_address in the header");
    let base = u64::from_str_radix(bar0.trim_start_matches("0x"), 16).expect("hex");
    let records = reader.read_all().expect("records");
    // The names the converters must show: each host request into BAR0, named by the map.
    let expected: Vec<(u32, String)> = records
        .iter()
        .filter_map(|r| match &r.body {
            Body::Request(q)
                if q.direction == tlpx_trace::Direction::Down && q.address >= base && q.address < base + tlpx_regs::BAR_SIZE =>
            {
                let reg = tlpx_regs::ALL.iter().find(|g| g.offset == q.address - base).expect("a register at the offset");
                Some((r.sequence, format!("{}.{}", reg.region, reg.name)))
            }
            _ => None,
        })
        .collect();
    assert!(!expected.is_empty(), "the capture's own register reads are in the trace");
    assert!(expected.iter().any(|(_, n)| n.starts_with("spy.")), "{expected:?}");
    // The running log printed while capturing.
    let log = text(&out.stdout);
    for (_, name) in &expected {
        assert!(log.lines().any(|l| l.ends_with(&format!("  {name}"))), "{name} in {log}");
    }
    // CSV: the `register` column, last.
    let csv = sim.path("names.csv");
    let out = tlpx(&sim.selector(), &["spy", "convert", t, "--csv", csv.to_str().expect("path")]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let rows = std::fs::read_to_string(&csv).expect("csv");
    assert!(rows.lines().next().expect("header row").contains(",records_lost,register,source,"));
    let register = tlpx_trace::csv::CSV_COLUMNS.iter().position(|c| *c == "register").expect("register column");
    let named: Vec<(u32, String)> = rows
        .lines()
        .skip(1)
        .filter_map(|l| {
            let cells: Vec<&str> = l.split(',').collect();
            let name = cells.get(register)?;
            (!name.is_empty()).then(|| (cells[0].parse().expect("sequence"), (*name).to_owned()))
        })
        .collect();
    assert_eq!(named, expected);
    // Log conversion and VCD.
    let out = tlpx(&sim.selector(), &["spy", "convert", t, "--log"]);
    let converted = text(&out.stdout);
    assert_eq!(
        converted.lines().filter(|l| expected.iter().any(|(_, n)| l.ends_with(&format!("  {n}")))).count(),
        expected.len(),
        "{converted}"
    );
    let vcd = sim.path("names.vcd");
    let out = tlpx(&sim.selector(), &["spy", "convert", t, "--vcd", vcd.to_str().expect("path")]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let v = std::fs::read_to_string(&vcd).expect("vcd");
    assert!(v.contains(" register $end"), "a register signal");
    assert!(expected.iter().all(|(_, n)| v.contains(&format!("s{n} "))), "every name as a string value");
}

#[test]
fn the_generators_reads_are_attributed_to_it_by_tag() {
    // The card's reads carry the tag of the block that sent them; the converters name it
    // from the tag ranges the gateware exports (GENERATOR_TAG_BASE..+GENERATOR_TAGS).
    let sim = Sim::start(&[]);
    let trace = sim.path("tags.tlpx");
    let mut capture = background_capture(&sim, &trace, &["--dir", "up", "--types", "mrd"]);
    wait_until_spy_owned_by(&sim.selector(), capture.id(), &mut capture);
    let n = 30;
    let bw = json(&tlpx(&sim.selector(), &["--json", "bw", "--op", "read", "--sizes", "256", "--count", &n.to_string()]));
    assert_eq!(bw["points"][0]["transfers"], n, "{bw}");
    json(&tlpx(&sim.selector(), &["--json", "spy", "stop"]));
    let out = capture.wait_with_output().expect("capture");
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let csv = sim.path("tags.csv");
    let out = tlpx(&sim.selector(), &["spy", "convert", trace.to_str().expect("path"), "--csv", csv.to_str().expect("path")]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let rows = std::fs::read_to_string(&csv).expect("csv");
    let col = |name: &str| tlpx_trace::csv::CSV_COLUMNS.iter().position(|c| *c == name).expect("column");
    let (tag, source) = (col("tag"), col("source"));
    let generator =
        tlpx_regs::constants::GENERATOR_TAG_BASE..tlpx_regs::constants::GENERATOR_TAG_BASE + tlpx_regs::constants::GENERATOR_TAGS;
    let mut attributed = 0;
    for row in rows.lines().skip(1).filter(|l| l.contains(",MRd")) {
        let cells: Vec<&str> = row.split(',').collect();
        let t = u64::from_str_radix(cells[tag].trim_start_matches("0x"), 16).expect("tag");
        if generator.contains(&t) {
            assert_eq!(cells[source], "generator", "{row}");
            attributed += 1;
        } else {
            assert_ne!(cells[source], "generator", "{row}");
        }
    }
    // 256-byte reads within MRRS 512: one MRd a transfer (and the run's flush, if any).
    assert!(attributed >= n as usize, "only {attributed} of the generator's {n} reads attributed:\n{rows}");
}
