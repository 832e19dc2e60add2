//! The passive spy driven through the real tlpx-sim and checked against what the
//! simulator's link carried.
//!
//!   spy::Capture ──CSRs──► tlpx-sim ──► Verilated card ──TLPs──► root complex counters
//!                   ◄──records (ring in host memory)── spy taps both directions
//!
//! Record counts must equal the link's TLP counts class by class, exactly; the latencies
//! the spy reports must agree with the generator's own hardware counters; filters and
//! triggers must pick exactly the records they describe; a ring that is not emptied must
//! give counted loss and a sequence gap; and a scripted scenario must reproduce a golden
//! trace bit for bit (traces/golden/, update deliberately with TLPX_UPDATE_GOLDEN=1).
//!
//! Window accounting, as the gateware test (test_spy.py) establishes it: the CSR write that
//! enables capture is not recorded (it is summarised before it takes effect), the one that
//! disables it is. MSIs are not TLPs on the card's PHY (the sim counts them as card_msis),
//! and the spy's own ring writes are excluded by default.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use tlpx_device::backends::sim::SimDevice;
use tlpx_device::card::Card;
use tlpx_device::generator::{self, DataPattern, GenConfig, LinkLimits, Operation, ValidGenConfig};
use tlpx_device::lease::Block;
use tlpx_device::spy::{self, Capture, CaptureEnd, Filters, Trigger, TriggerMode};
use tlpx_device::DeviceError;
use tlpx_regs::{ident, pio, spy as regs};
use tlpx_sim_protocol::TrafficStats;
use tlpx_trace::{Body, Record};

struct Sim {
    child: Child,
    dir: tempfile::TempDir,
}

impl Sim {
    fn start(args: &[&str]) -> Sim {
        let exe = std::env::current_exe().expect("test executable");
        let bin = exe.parent().and_then(|d| d.parent()).map(|d| d.join("tlpx-sim")).expect("target dir");
        assert!(bin.exists(), "{} is missing: build the workspace first", bin.display());
        let dir = tempfile::tempdir().expect("temp dir");
        let socket = dir.path().join("sim.sock");
        let child = Command::new(bin)
            .arg("--socket")
            .arg(&socket)
            .arg("--quiet")
            .args(args)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start tlpx-sim");
        let deadline = Instant::now() + Duration::from_secs(20);
        while !socket.exists() {
            assert!(Instant::now() < deadline, "tlpx-sim did not start");
            std::thread::sleep(Duration::from_millis(20));
        }
        Sim { child, dir }
    }

    fn socket(&self) -> PathBuf {
        self.dir.path().join("sim.sock")
    }

    fn card(&self) -> Card {
        Card::open(Box::new(SimDevice::connect(self.socket()).expect("connect"))).expect("tlpx card")
    }

    fn control(&self) -> SimDevice {
        SimDevice::connect(self.socket()).expect("connect")
    }
}

impl Drop for Sim {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

const GEN_TIMEOUT: Duration = Duration::from_millis(50);

/// The run as the driver takes it: validated against the largest link (the driver does not
/// know the link; the CLI validates against the one libpci reports).
fn valid(cfg: &GenConfig, buffer: &tlpx_device::DmaBuffer) -> ValidGenConfig {
    cfg.validate(LinkLimits::LARGEST, buffer.len as u64).expect("a valid generator configuration")
}

fn decode(raw: &[[u8; 32]]) -> Vec<Record> {
    raw.iter().enumerate().map(|(i, r)| Record::from_bytes(r).unwrap_or_else(|e| panic!("record #{i}: {e}"))).collect()
}

/// (direction, class) of a record, classes as the spy's counters name them.
fn class(r: &Record) -> (&'static str, &'static str) {
    use tlpx_trace::RequestKind::*;
    let dir = r.direction().map_or("?", |d| d.name());
    let cls = match &r.body {
        Body::Request(q) => match q.kind() {
            MRd32 | MRd64 | MRdLk => "mrd",
            MWr32 | MWr64 => "mwr",
            Msg | MsgD => "msg",
            CfgRd0 | CfgWr0 | CfgRd1 | CfgWr1 => "cfg",
            IORd | IOWr => "io",
            _ => "other",
        },
        Body::Completion(c) => {
            if c.with_data() {
                "cpld"
            } else {
                "cpl"
            }
        }
        Body::Timeout(_) => "timeout",
        Body::Msi(_) => "msi",
        Body::Payload(_) => "payload",
        Body::Footer(_) => "footer",
    };
    (dir, cls)
}

fn census(records: &[Record]) -> BTreeMap<(&'static str, &'static str), u64> {
    let mut m = BTreeMap::new();
    for r in records {
        *m.entry(class(r)).or_insert(0) += 1;
    }
    m
}

/// The link's TLPs in a window, per (direction, class), as the spy would record them with
/// the default filters. `ring_writes` of the card's memory writes are the spy's own.
fn link_census(t: &TrafficStats, ring_writes: u64) -> BTreeMap<(&'static str, &'static str), u64> {
    let mut m = BTreeMap::new();
    let mut put = |k: (&'static str, &'static str), v: u64| {
        if v != 0 {
            *m.entry(k).or_insert(0) += v;
        }
    };
    put(("down", "mrd"), t.mmio_reads.tlps);
    put(("down", "mwr"), t.mmio_writes.tlps);
    put(("down", "cpl"), t.host_completions.cpl);
    put(("down", "cpld"), t.host_completions.cpld);
    put(("up", "mrd"), t.card_reads.tlps);
    put(("up", "mwr"), t.card_writes.tlps - ring_writes);
    put(("up", "cpl"), t.card_completions.cpl);
    put(("up", "cpld"), t.card_completions.cpld);
    put(("up", "msg"), t.card_messages);
    put(("up", "other"), t.card_other);
    // The card's MSIs: no TLP on its PHY streams, an MSI record each (record format 2).
    put(("up", "msi"), t.card_msis);
    assert_eq!(t.injected_tlps, 0, "no injected TLPs in these windows");
    m
}

fn sub(m: &mut BTreeMap<(&'static str, &'static str), u64>, k: (&'static str, &'static str), n: u64) {
    let e = m.get_mut(&k).unwrap_or_else(|| panic!("{k:?} missing from the link census"));
    *e -= n;
    if *e == 0 {
        m.remove(&k);
    }
}

/// Runs `traffic` inside a capture and returns the records, the capture's end and the link
/// census of exactly the capture window (see the module comment).
fn captured_window(
    card: &mut Card,
    control: &mut SimDevice,
    ring: u32,
    traffic: impl FnOnce(&mut Card) -> u64,
) -> (Vec<Record>, CaptureEnd, BTreeMap<(&'static str, &'static str), u64>) {
    let cap = Capture::start(card, ring, &Filters::default(), &Trigger::default()).expect("start");
    // The enabling write is posted and not on the link yet: it lands inside the window but
    // is not recorded.
    let before = control.traffic().expect("traffic");
    let generator_writes = traffic(card);
    // The disabling write (recorded), then a read so it has landed before the snapshot (the
    // read and its completion are not recorded).
    card.write(regs::CONTROL, 0).expect("disable");
    card.read(ident::SCRATCH).expect("read");
    let seen = control.traffic().expect("traffic").since(&before);
    let end = cap.stop(card).expect("stop");
    let records = decode(&end.remaining);
    // Ring writes in the window: the card's writes that are not the generator's.
    let ring_writes = seen.card_writes.tlps - generator_writes;
    let mut link = link_census(&seen, ring_writes);
    sub(&mut link, ("down", "mwr"), 1); // the enabling write
    sub(&mut link, ("down", "mrd"), 1); // the read after the disabling write
    sub(&mut link, ("up", "cpld"), 1); // and its completion
    (records, end, link)
}

fn check_sequence(records: &[Record], end: &CaptureEnd) {
    let seqs: Vec<u32> = records.iter().map(|r| r.sequence).collect();
    assert_eq!(seqs, (0..records.len() as u32).collect::<Vec<_>>(), "sequence numbers 0.. without gaps");
    assert_eq!(end.records_lost, 0);
    assert_eq!(end.records_created, records.len() as u64);
    assert_eq!(end.next_sequence, records.len() as u32);
}

#[test]
fn record_count_equals_link_tlps_under_mmio_traffic() {
    for width in ["64", "128"] {
        let sim = Sim::start(&["--data-width", width]);
        let mut card = sim.card();
        let mut control = sim.control();
        let (records, end, link) = captured_window(&mut card, &mut control, 4096, |card| {
            for i in 0..25u64 {
                card.write(ident::SCRATCH, i).expect("write");
                assert_eq!(card.read(ident::SCRATCH).expect("read"), i);
                card.device().bar_write_block(0, tlpx_device::pio::WINDOW_OFFSET + 64 * i, &[i as u8; 24]).expect("block write");
                if i % 5 == 0 {
                    card.cycles().expect("64-bit read");
                    card.device().bar_read_block(0, tlpx_device::pio::WINDOW_OFFSET, 64).expect("block read");
                }
            }
            0
        });
        assert_eq!(census(&records), link, "{width}-bit card: records per (direction, class) vs the link");
        assert_eq!(records.len(), 25 * 4 + 5 * 4 + 1, "{width}-bit: the MMIO above plus the disabling write");
        check_sequence(&records, &end);
        assert!(records.iter().all(|r| !matches!(&r.body, Body::Request(q) if q.own)), "own writes excluded");
    }
}

#[test]
fn record_count_equals_link_tlps_under_generator_traffic() {
    let sim = Sim::start(&["--data-width", "128"]);
    let mut card = sim.card();
    let mut control = sim.control();
    let buffer = card.device().alloc_dma(1 << 16).expect("buffer");
    generator::fill_pattern(&buffer, DataPattern::Counter, 1).expect("fill");
    for op in [Operation::Read, Operation::Write, Operation::ReadWrite] {
        let mut cfg = GenConfig::new(op, 700, 20);
        cfg.window = 1 << 16;
        cfg.max_outstanding = 8;
        let mut result = None;
        let (records, end, link) = captured_window(&mut card, &mut control, 4096, |card| {
            let r = generator::run(card, &buffer, &valid(&cfg, &buffer), GEN_TIMEOUT).expect("generator run");
            let w = r.write_requests;
            result = Some(r);
            w
        });
        let r = result.expect("ran");
        assert_eq!(r.ended_by, "count");
        assert_eq!(census(&records), link, "{op:?}: records per (direction, class) vs the link");
        check_sequence(&records, &end);
        // The generator's own counts appear among the records too.
        let c = census(&records);
        let flush = u64::from(op != Operation::Read);
        assert_eq!(c.get(&("up", "mrd")).copied().unwrap_or(0), r.read_requests + flush, "{op:?}");
        assert_eq!(c.get(&("up", "mwr")).copied().unwrap_or(0), r.write_requests, "{op:?}");
        assert_eq!(c.get(&("down", "cpld")).copied().unwrap_or(0), r.completions, "{op:?}");
        // Every completion of a read the spy saw is matched, and each read's last one flagged.
        let cpls: Vec<_> = records
            .iter()
            .filter_map(|rec| match &rec.body {
                Body::Completion(c) if c.direction == tlpx_trace::Direction::Down => Some(c),
                _ => None,
            })
            .collect();
        assert!(cpls.iter().all(|c| c.latency.is_some()), "{op:?}: all completions matched");
        assert_eq!(cpls.iter().filter(|c| c.last).count() as u64, r.read_requests + flush, "{op:?}: one last per read");
    }
}

#[test]
fn latencies_agree_with_the_generators_counters() {
    for width in ["64", "128", "256"] {
        let sim = Sim::start(&["--data-width", width, "--dma-jitter-ns", "200"]);
        let mut card = sim.card();
        let buffer = card.device().alloc_dma(1 << 16).expect("buffer");
        generator::fill_pattern(&buffer, DataPattern::Counter, 1).expect("fill");
        let cap = Capture::start(&mut card, 4096, &Filters::default(), &Trigger::default()).expect("start");
        let mut cfg = GenConfig::new(Operation::Read, 256, 16);
        cfg.window = 1 << 16;
        cfg.max_outstanding = 1;
        let r = generator::run(&mut card, &buffer, &valid(&cfg, &buffer), GEN_TIMEOUT).expect("run");
        let end = cap.stop(&mut card).expect("stop");
        let records = decode(&end.remaining);
        assert_eq!(r.latency.samples.len(), 16);
        // The generator measures request's last beat -> last completion's last beat at its
        // input; the spy request's first beat -> last completion's first beat at the PHY.
        // They differ by the two durations and, on the 64-bit card, by the beat the
        // completion dispatcher holds back to see the tag.
        let lookahead = u64::from(width == "64");
        let mut spy_latencies = Vec::new();
        for (i, rec) in records.iter().enumerate() {
            let Body::Completion(c) = &rec.body else { continue };
            if c.direction != tlpx_trace::Direction::Down || !c.last {
                continue;
            }
            let read = records[..i]
                .iter()
                .rev()
                .find_map(|p| match &p.body {
                    Body::Request(q) if q.direction == tlpx_trace::Direction::Up && q.tag == c.tag && q.kind().is_non_posted_read() => {
                        Some(q)
                    }
                    _ => None,
                })
                .expect("the read of a completion precedes it");
            let lat = u64::from(c.latency.expect("matched"));
            assert_eq!(lat, c.timing.timestamp - read.timing.timestamp, "latency = completion start - request start");
            spy_latencies.push(lat + u64::from(c.timing.duration) - u64::from(read.timing.duration) + lookahead);
        }
        let mut hw: Vec<u64> = r.latency.samples.iter().map(|&s| u64::from(s)).collect();
        hw.sort_unstable();
        spy_latencies.sort_unstable();
        assert_eq!(spy_latencies, hw, "{width}-bit card: spy latencies vs the generator's samples");
        // The spy's own histogram (request to last completion first beat) has every read.
        let hist = spy::latency_histogram(&mut card).expect("histogram");
        assert_eq!(
            hist.iter().sum::<u64>(),
            16 + records
                .iter()
                .filter(|r| matches!(&r.body, Body::Completion(c) if c.direction == tlpx_trace::Direction::Up && c.last))
                .count() as u64
        );
    }
}

#[test]
fn filters_pick_exactly_the_matching_records() {
    let sim = Sim::start(&[]);
    let mut card = sim.card();
    let scratch = ident::SCRATCH.offset;
    let script = |card: &mut Card| {
        for i in 0..6u64 {
            card.write(ident::SCRATCH, i).expect("write");
            card.write(pio::READ_DELAY, 0).expect("write elsewhere");
            card.read(ident::SCRATCH).expect("read");
        }
    };
    // Only down MWr to the scratch register: the address filter compares the BAR offset
    // bits (the BAR's base is above them).
    let f = Filters {
        up: false,
        class_mask: spy::class_mask(&["mwr"]).expect("mwr"),
        address_base: scratch,
        address_mask: 0xFFFC,
        ..Filters::default()
    };
    let cap = Capture::start(&mut card, 256, &f, &Trigger::default()).expect("start");
    script(&mut card);
    let end = cap.stop(&mut card).expect("stop");
    let records = decode(&end.remaining);
    assert_eq!(records.len(), 6, "the six scratch writes and nothing else");
    for r in &records {
        let Body::Request(q) = &r.body else { panic!("{r:?}") };
        assert_eq!((q.direction, q.kind().name(), q.address & 0xFFFC), (tlpx_trace::Direction::Down, "MWr32", scratch));
    }
    // Completions only, up: the six read completions (and nothing of the stop's polling).
    let f = Filters { down: false, class_mask: spy::class_mask(&["cpl", "cpld"]).expect("classes"), ..Filters::default() };
    let cap = Capture::start(&mut card, 256, &f, &Trigger::default()).expect("start");
    script(&mut card);
    let end = cap.stop(&mut card).expect("stop");
    let records = decode(&end.remaining);
    assert_eq!(census(&records), BTreeMap::from([(("up", "cpld"), 6)]));
    // Requester ID: the card's own requests (generator reads) vs the host's.
    let buffer = card.device().alloc_dma(1 << 14).expect("buffer");
    let card_id = {
        let cap = Capture::start(&mut card, 256, &Filters { down: false, class_mask: 1, ..Filters::default() }, &Trigger::default())
            .expect("start");
        let mut cfg = GenConfig::new(Operation::Read, 64, 3);
        cfg.window = 1 << 14;
        cfg.check_data = false;
        generator::run(&mut card, &buffer, &valid(&cfg, &buffer), GEN_TIMEOUT).expect("run");
        let records = decode(&cap.stop(&mut card).expect("stop").remaining);
        assert_eq!(records.len(), 3);
        records[0].requester_id().expect("rid")
    };
    let f = Filters { requester_id: card_id, requester_mask: 0xFFFF, ..Filters::default() };
    let cap = Capture::start(&mut card, 256, &f, &Trigger::default()).expect("start");
    let mut cfg = GenConfig::new(Operation::Read, 128, 5);
    cfg.window = 1 << 14;
    cfg.check_data = false;
    generator::run(&mut card, &buffer, &valid(&cfg, &buffer), GEN_TIMEOUT).expect("run");
    let records = decode(&cap.stop(&mut card).expect("stop").remaining);
    // The card's reads and the host's completions of them (their requester is the card);
    // none of the host's MMIO (requester: the root port) nor the card's completions to it.
    // The run's MSI passes too: the requester filter does not apply to an MSI (it has none).
    let c = census(&records);
    assert_eq!(c.get(&("up", "mrd")), Some(&5), "{c:?}");
    assert_eq!(c.get(&("down", "cpld")), Some(&5), "one completion per 128-byte read; {c:?}");
    assert_eq!(c.get(&("up", "msi")), Some(&1), "{c:?}");
    assert_eq!(c.len(), 3, "{c:?}");
    assert!(records.iter().all(|r| r.requester_id() == Some(card_id) || matches!(r.body, Body::Msi(_))));
}

#[test]
fn triggers_keep_exactly_pre_and_post_records() {
    let sim = Sim::start(&[]);
    let mut card = sim.card();
    let scratch = ident::SCRATCH.offset;
    let target = pio::READ_DELAY.offset;
    let writes_only = Filters { up: false, class_mask: spy::class_mask(&["mwr"]).expect("mwr"), ..Filters::default() };
    // Start trigger: the last 2 writes before the write to `target`, it, and 2 after.
    let t = Trigger { mode: TriggerMode::Start, address_base: target, address_mask: 0xFFFC, pre: 2, post: 3, ..Trigger::default() };
    let cap = Capture::start(&mut card, 256, &writes_only, &t).expect("start");
    for i in 0..6 {
        card.write(ident::SCRATCH, i).expect("write");
    }
    card.write(pio::READ_DELAY, 7).expect("the trigger");
    for i in 0..6 {
        card.write(ident::SCRATCH, 100 + i).expect("write");
    }
    let end = cap.stop(&mut card).expect("stop");
    let records = decode(&end.remaining);
    let addr = |r: &Record| match &r.body {
        Body::Request(q) => q.address & 0xFFFC,
        _ => panic!("{r:?}"),
    };
    assert_eq!(records.iter().map(addr).collect::<Vec<_>>(), vec![scratch, scratch, target, scratch, scratch]);
    assert_eq!(records.iter().map(|r| r.sequence).collect::<Vec<_>>(), vec![4, 5, 6, 7, 8], "pre-trigger records keep their numbers");
    assert!(end.triggered && end.stopped);
    assert_eq!((end.records_lost, end.records_held), (0, 0));

    // Stop trigger: everything until the trigger, then 2 records, then nothing.
    let t = Trigger { mode: TriggerMode::Stop, address_base: target, address_mask: 0xFFFC, post: 2, ..Trigger::default() };
    let cap = Capture::start(&mut card, 256, &writes_only, &t).expect("start");
    for i in 0..4 {
        card.write(ident::SCRATCH, i).expect("write");
    }
    card.write(pio::READ_DELAY, 7).expect("the trigger");
    for i in 0..4 {
        card.write(ident::SCRATCH, 100 + i).expect("write");
    }
    let end = cap.stop(&mut card).expect("stop");
    let records = decode(&end.remaining);
    assert_eq!(records.iter().map(addr).collect::<Vec<_>>(), vec![scratch, scratch, scratch, scratch, target, scratch]);
    assert_eq!(end.records_created, 6, "nothing is numbered after the stop");
    assert!(end.triggered && end.stopped);

    // A start trigger that never matches: its pre records are held, not delivered, and said so.
    let t = Trigger { mode: TriggerMode::Start, address_base: 0xFFF0, address_mask: 0xFFFC, pre: 3, post: 1, ..Trigger::default() };
    let cap = Capture::start(&mut card, 256, &writes_only, &t).expect("start");
    for i in 0..5 {
        card.write(ident::SCRATCH, i).expect("write");
    }
    let end = cap.stop(&mut card).expect("stop");
    assert!(end.remaining.is_empty() && !end.triggered);
    assert_eq!(end.records_held, 3, "{end:?}");
}

#[test]
fn ring_overflow_gives_counted_loss_and_a_sequence_gap() {
    let sim = Sim::start(&[]);
    let mut card = sim.card();
    let writes_only = Filters { up: false, ..Filters::default() };
    let mut cap = Capture::start(&mut card, 16, &writes_only, &Trigger::default()).expect("start");
    // 16 records fit the ring, RECORD_FIFO_DEPTH the spy's FIFO; nobody polls while more
    // writes than both pass.
    for i in 0..u64::from(spy::RECORD_FIFO_DEPTH) + 300 {
        card.write(ident::SCRATCH, i).expect("write");
    }
    card.device().idle(Duration::from_micros(20)).expect("idle");
    let mut raw = Vec::new();
    cap.poll(&mut card, &mut raw).expect("poll");
    assert_eq!(raw.len(), 16, "the full ring");
    let end = cap.stop_into(&mut card, &mut raw).expect("stop");
    let records = decode(&raw);
    assert!(end.records_lost > 0, "{end:?}");
    assert_eq!(end.records_created, records.len() as u64 + end.records_lost, "every numbered record delivered or counted lost");
    let gaps: Vec<_> = tlpx_trace::gaps(records.iter().map(|r| r.sequence).chain([end.next_sequence])).collect();
    assert!(!gaps.is_empty());
    let gap_lost: u64 = gaps.iter().map(|g| u64::from(g.lost)).sum();
    assert_eq!(gap_lost, end.records_lost, "the gaps account for every lost record: {gaps:?}");
    assert!(gaps[0].to_string().contains("records lost between seq"), "{}", gaps[0]);
    // The counters saw every write although the records were lost.
    let counters = spy::counters(&mut card).expect("counters");
    assert!(counters.down[1].tlps >= 801, "{:?}", counters.down[1]);
    assert_eq!(u64::from(counters.lost), end.records_lost);
}

#[test]
fn counters_and_capture_state_for_a_second_tool() {
    let sim = Sim::start(&[]);
    let mut card = sim.card();
    let mut other = sim.card();
    spy::clear(&mut card).expect("clear");
    for i in 0..7 {
        card.write(ident::SCRATCH, i).expect("write");
    }
    card.read(ident::SCRATCH).expect("let the writes land");
    let c = spy::counters(&mut other).expect("counters");
    assert!(!c.capturing);
    assert!(c.down[1].tlps >= 7 && c.down[1].payload_bytes == 4 * c.down[1].tlps, "{:?}", c.down[1]);
    let cap = Capture::start(&mut card, 64, &Filters::default(), &Trigger::default()).expect("start");
    card.read(ident::SCRATCH).expect("let the enabling write land");
    assert!(spy::is_capturing(&mut other).expect("state"));
    let e = Capture::start(&mut other, 64, &Filters::default(), &Trigger::default()).expect_err("second capture");
    let pid = format!("PID {}", std::process::id());
    assert!(matches!(e, DeviceError::Busy { block: Block::Spy, .. }), "busy, typed: {e:?}");
    assert!(e.to_string().starts_with("busy: the spy is owned by") && e.to_string().contains(&pid), "{e}");
    assert!(e.to_string().contains("`tlpx stop spy`"), "{e}");
    cap.stop(&mut card).expect("stop");
    assert!(!spy::is_capturing(&mut other).expect("state"));
    let e = Capture::start(&mut card, 100, &Filters::default(), &Trigger::default()).expect_err("bad ring");
    assert!(e.to_string().contains("not 100"), "{e}");
    let (down, up) = spy::payload_histograms(&mut card).expect("histograms");
    assert_eq!((down.len(), up.len()), (13, 13));
    assert!(down[2] > 0, "4-byte writes in bucket 2: {down:?}");
}

/// The scripted scenario of the golden trace: one client, fixed seed, fixed requests.
fn golden_scenario(card: &mut Card) -> (Vec<[u8; 32]>, CaptureEnd) {
    let buffer = card.device().alloc_dma(1 << 14).expect("buffer");
    generator::fill_pattern(&buffer, DataPattern::Counter, 7).expect("fill");
    let mut cap = Capture::start_with_mps(card, 1024, 256, &Filters::default(), &Trigger::default()).expect("start");
    let mut raw = Vec::new();
    for i in 0..4u64 {
        card.write(ident::SCRATCH, 0x1000 + i).expect("write");
        card.read(ident::SCRATCH).expect("read");
    }
    card.device().bar_write_block(0, tlpx_device::pio::WINDOW_OFFSET + 8, &[0xA5; 20]).expect("block write");
    cap.poll(card, &mut raw).expect("poll");
    let mut cfg = GenConfig::new(Operation::WriteThenRead, 200, 2);
    cfg.window = 1 << 14;
    cfg.offset = 4;
    cfg.seed = 7;
    generator::run(card, &buffer, &valid(&cfg, &buffer), GEN_TIMEOUT).expect("run");
    let end = cap.stop_into(card, &mut raw).expect("stop");
    (raw, end)
}

fn write_trace(path: &std::path::Path, card: &Card, raw: &[[u8; 32]], end: &CaptureEnd) {
    let id = card.identity();
    let mut info = tlpx_trace::HeaderInfo::new(
        "tlpx-device spy_sim",
        tlpx_trace::CardInfo {
            map_hash: Some(format!("0x{:08x}", id.map_hash)),
            data_width: Some(id.data_width),
            clock_hz: u64::from(id.clock_hz),
            pci_address: None,
            bar0_address: None,
            tlpx_map_offset: None,
            slot_dut: None,
            slot_registers: Vec::new(),
        },
    );
    info.simulated = true;
    info.capture.filters = serde_json::to_value(Filters::default()).expect("json");
    info.capture.trigger = serde_json::to_value(Trigger::default()).expect("json");
    let header = tlpx_trace::Header::with_time(&info, "2026-01-01T00:00:00Z".into());
    let mut w = tlpx_trace::TraceWriter::create_with_header(path, &header).expect("create");
    for r in raw {
        w.write_raw(r).expect("record");
    }
    w.finish(
        end.next_sequence,
        tlpx_trace::Footer { records_created: end.records_created, records_lost: end.records_lost, trigger_sequence: end.trigger_sequence },
    )
    .expect("finish");
}

#[test]
fn scripted_scenario_reproduces_the_golden_trace() {
    let sim = Sim::start(&["--data-width", "128", "--seed", "42", "--dma-jitter-ns", "80"]);
    let mut card = sim.card();
    let (raw, end) = golden_scenario(&mut card);
    let records = decode(&raw);
    assert!(records.len() > 30, "{} records", records.len());
    assert_eq!(end.records_lost, 0);
    let out = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("spy_golden_mmio_and_dma.tlpx");
    write_trace(&out, &card, &raw, &end);
    // Record format 2 (the generator's MSI has a record); mmio_and_dma.tlpx stays the
    // version-1 trace that readers must still read.
    let golden = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../../traces/golden/mmio_and_dma_v2.tlpx");
    tlpx_trace::golden::check(&out, &golden).unwrap_or_else(|e| panic!("{e}"));
}

#[test]
fn the_golden_comparison_catches_a_changed_record() {
    // The same scenario twice is identical; a one-bit change in a record is reported.
    let sim = Sim::start(&["--data-width", "128", "--seed", "42", "--dma-jitter-ns", "80"]);
    let mut card = sim.card();
    let (raw, end) = golden_scenario(&mut card);
    let dir = tempfile::tempdir().expect("dir");
    let a = dir.path().join("a.tlpx");
    let b = dir.path().join("b.tlpx");
    write_trace(&a, &card, &raw, &end);
    let mut changed = raw.clone();
    changed[3][28] ^= 1; // duration bit 0 of record 3
    write_trace(&b, &card, &changed, &end);
    let e = tlpx_trace::golden::compare(&b, &a).expect_err("differs");
    assert!(e.contains("record #3") && e.contains("duration"), "{e}");
}

// Spy benchmark: zero-loss bursts and sustained rates -----------------------------------------
//
//   host ──posted MWr32 of 1 DW to ident.scratch──► card      (down: queued in the RC, paced
//   card ◄──generator: MWr32 of 1 DW, idle cycles────  host   by the link model and the card)
//                      both taps ──► spy ──ring writes──► host (the spy's own upstream traffic)
//
// Every figure is in card cycles (virtual time: the sim runs the Verilated card cycle by cycle
// and paces both link directions with tlpx-model's LinkConfig), converted to seconds at the
// card's clock. A burst of L is L TLPs per direction at the fastest pace the path allows; the
// longest zero-loss L comes from doubling L until a loss, then bisecting. The sustained rate is
// the fastest pace (a period of P card cycles per TLP per direction) at which N TLPs per
// direction are recorded with zero loss.

/// Which directions carry the traffic.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Dirs {
    /// The generator's 1-DW MWr32.
    Up,
    /// The host's posted 1-DW MWr32 to ident.scratch.
    Down,
    /// Both at once.
    Both,
    /// The generator's 1-DW reads: MRd32 up, 1-DW CplD down (the only host-to-card traffic
    /// the card takes at the link's pace: completions keep the full datapath width, requests
    /// go through the request path one DW per cycle).
    Reads,
}

impl Dirs {
    fn name(self) -> &'static str {
        match self {
            Dirs::Up => "up",
            Dirs::Down => "down",
            Dirs::Both => "both",
            Dirs::Reads => "reads",
        }
    }
    /// The generator's part, if any.
    fn generator(self) -> Option<Operation> {
        match self {
            Dirs::Up | Dirs::Both => Some(Operation::Write),
            Dirs::Reads => Some(Operation::Read),
            Dirs::Down => None,
        }
    }
    /// The host writes to ident.scratch.
    fn host_writes(self) -> bool {
        matches!(self, Dirs::Down | Dirs::Both)
    }
    fn has_up(self) -> bool {
        self != Dirs::Down
    }
    fn has_down(self) -> bool {
        self != Dirs::Up
    }
}

/// What one traffic run gave.
struct SpyRun {
    /// TLPs of the run per direction (generator writes, host writes to ident.scratch).
    up: u64,
    down: u64,
    /// The spy's loss over the capture, and the sequence gaps the records show: (first missing
    /// sequence, records missing).
    lost: u64,
    gaps: Vec<(u32, u32)>,
    /// Card cycles from the first to the last recorded TLP of the run, per direction, and the
    /// smallest spacing seen (back to back = the path's pace).
    up_span: u64,
    down_span: u64,
    up_min_gap: u64,
    down_min_gap: u64,
    records: u64,
    /// Wire bytes of the spy's own ring writes (8 framing + 12 header + payload per MWr32, as
    /// the sim's link counters give them) per record it wrote.
    own_wire_bytes_per_record: f64,
}

impl SpyRun {
    fn gap_text(&self) -> String {
        match self.gaps.first() {
            None => "none".into(),
            Some((seq, n)) => format!("{}_gaps_first_at_seq_{seq}_missing_{n}", self.gaps.len()),
        }
    }
}

/// Filters of the benchmark's captures: everything (the default: every class, MSIs too, both
/// directions), with payload capture of `payload_dws` DWs per TLP with data (every class and
/// direction, the default).
fn bench_filters(payload_dws: u8) -> Filters {
    Filters { payload_dws, ..Filters::default() }
}

/// One capture around `count` 1-DW MWr per direction at a period of `period` card cycles per
/// TLP (0: as fast as the path takes them). Up: the generator with `period - 1` idle cycles
/// after each request (it issues one per cycle otherwise). Down: posted writes to
/// ident.scratch (no side effect), `period` cycles apart (0: all queued at once, the root
/// complex sends them as the link and the card's receive buffer allow).
fn spy_run(card: &mut Card, control: &mut SimDevice, buffer: &tlpx_device::DmaBuffer, at: &At, count: u64, period: u32) -> SpyRun {
    let (dirs, payload_dws) = (at.dirs, at.payload);
    let clock = u64::from(card.identity().clock_hz);
    let ring: u32 = 1 << 18;
    assert!(2 * count + 4096 < u64::from(ring), "the ring must hold the whole run: {count} TLPs per direction");
    // Held: the records stay in the spy's record FIFO (a start trigger's pre-trigger records)
    // until a read of ident.scratch after the run, so no ring write shares the link during
    // the burst: the logic analyser's way.
    let trigger = if at.held {
        Trigger {
            mode: TriggerMode::Start,
            // Trigger classes are the 8 TLP classes (the record filter's 9th, msi, is not one).
            class_mask: spy::class_mask(&["mrd"]).expect("mrd") as u8,
            down: true,
            up: false,
            address_base: ident::SCRATCH.offset,
            address_mask: 0xFFFC,
            pre: (spy::RECORD_FIFO_DEPTH - 1) as u16,
            post: 1 << 24,
        }
    } else {
        Trigger::default()
    };
    let mut cap = Capture::start(card, ring, &bench_filters(payload_dws), &trigger).expect("start");
    let before = control.traffic().expect("traffic");
    let mut raw = Vec::new();
    if let Some(op) = dirs.generator() {
        let mut cfg = GenConfig::new(op, 4, count);
        cfg.window = 1 << 16;
        cfg.payload_size = 4;
        cfg.request_size = 4;
        cfg.max_outstanding = tlpx_device::generator::TAGS;
        cfg.idle_cycles = period.saturating_sub(1);
        cfg.flush_writes = false;
        card.claim(Block::Generator).expect("generator");
        for w in valid(&cfg, buffer).register_writes(buffer.bus_addr, clock as u32) {
            card.write(w.register, w.value).expect("generator register");
        }
        // Started by a posted write: the host's writes below queue right behind it, so both
        // directions run at once (generator::run would wait for the start first).
        card.write(tlpx_regs::generator::CONTROL, tlpx_regs::generator::control::START.set(1)).expect("start");
    }
    if dirs.host_writes() {
        let spacing = Duration::from_nanos(u64::from(period) * 1_000_000_000 / clock);
        for i in 0..count {
            card.write(ident::SCRATCH, i).expect("scratch");
            if period > 1 {
                card.device().idle(spacing).expect("idle");
            }
        }
    }
    if (dirs.host_writes() && period <= 1) || at.held {
        // A read queues behind every posted write still in the root complex (the card takes
        // one per ~7 cycles): let them through first, or the read would wait past the
        // completion timeout. The ring holds the whole run meanwhile. Held: the first read
        // ends the holding, so it waits for the run to end (8 cycles per TLP is more than any
        // source here takes while nothing else uses the link).
        card.device().idle(Duration::from_nanos((count * 8 + 2000) * 1_000_000_000 / clock)).expect("idle");
    }
    if at.held {
        card.read(ident::SCRATCH).expect("the trigger");
    }
    // Let the run finish (the generator done, every posted write landed), emptying the ring.
    loop {
        card.device().idle(Duration::from_micros(20)).expect("idle");
        cap.poll(card, &mut raw).expect("poll");
        let gen_done = dirs.generator().is_none()
            || tlpx_regs::generator::status::DONE.get(card.read(tlpx_regs::generator::STATUS).expect("status")) == 1;
        if gen_done {
            break;
        }
    }
    card.read(ident::SCRATCH).expect("read");
    if dirs.generator().is_some() {
        card.release(Block::Generator).expect("release");
    }
    let end = cap.stop_into(card, &mut raw).expect("stop");
    let seen = control.traffic().expect("traffic").since(&before);
    let records = decode(&raw);
    // The card's memory writes are the generator's and the spy's ring writes.
    let gen_writes = if dirs.generator() == Some(Operation::Write) { count } else { 0 };
    let own_tlps = seen.card_writes.tlps - gen_writes;
    let own_wire = (seen.card_writes.dw_bytes - 4 * gen_writes) + 20 * own_tlps;
    let mut gaps = Vec::new();
    let mut next = 0u32;
    for r in &records {
        if r.sequence != next {
            gaps.push((next, r.sequence.wrapping_sub(next)));
        }
        next = r.sequence.wrapping_add(1);
    }
    if end.next_sequence != next {
        gaps.push((next, end.next_sequence.wrapping_sub(next)));
    }
    let scratch = ident::SCRATCH.offset;
    let in_buffer = |a: u64| a >= buffer.bus_addr && a < buffer.bus_addr + buffer.len as u64;
    let mut stamps: [Vec<u64>; 2] = [Vec::new(), Vec::new()];
    let mut payload_records = 0u64;
    for r in &records {
        let up = r.direction().map(|d| d.name()) == Some("up");
        match &r.body {
            Body::Request(q) if q.length_dw == 1 && !q.own => {
                let kind = q.kind();
                if up && in_buffer(q.address) && matches!(kind, tlpx_trace::RequestKind::MWr32 | tlpx_trace::RequestKind::MRd32) {
                    stamps[0].push(q.timing.timestamp);
                } else if !up && kind == tlpx_trace::RequestKind::MWr32 && q.address & 0xfff == scratch & 0xfff {
                    stamps[1].push(q.timing.timestamp);
                }
            }
            // Completions host -> card: only the generator's reads get them here.
            Body::Completion(c) if !up && c.with_data() && c.length_dw == 1 => stamps[1].push(c.timing.timestamp),
            Body::Payload(_) => payload_records += 1,
            _ => {}
        }
    }
    let span = |v: &[u64]| v.last().zip(v.first()).map_or(0, |(l, f)| l - f);
    let min_gap = |v: &[u64]| v.windows(2).map(|w| w[1] - w[0]).min().unwrap_or(0);
    // Nothing recorded beyond what the spy counted as lost: the run's TLPs are all there.
    let missing: u64 = gaps.iter().map(|&(_, n)| u64::from(n)).sum();
    if !at.held {
        // Every loss is a numbered record that never came: the gaps add up to the count.
        assert_eq!(missing, end.records_lost, "sequence gaps {gaps:?} against {} lost", end.records_lost);
    }
    if end.records_lost == 0 && missing == 0 {
        assert_eq!(stamps[0].len() as u64, if dirs.has_up() { count } else { 0 }, "generator requests recorded");
        assert_eq!(stamps[1].len() as u64, if dirs.has_down() { count } else { 0 }, "host writes / completions recorded");
        assert!(gaps.is_empty(), "no loss counted but sequence gaps {gaps:?}");
        // Payload capture: a payload record (1 DW) after each of the run's TLPs with data, at
        // least (the MMIO reads' completions of the polling carry data too).
        let with_data = match dirs {
            Dirs::Reads => stamps[1].len() as u64,
            _ => stamps[0].len() as u64 + stamps[1].len() as u64,
        };
        if payload_dws > 0 {
            assert!(payload_records >= with_data, "{payload_records} payload records for {with_data} TLPs with data");
        } else {
            assert_eq!(payload_records, 0, "payload records without payload capture");
        }
    }
    SpyRun {
        up: if dirs.has_up() { count } else { 0 },
        down: if dirs.has_down() { count } else { 0 },
        // Held: the oldest pre-trigger records are dropped when the FIFO is full (numbered
        // and missing, not counted as lost by the spy): the gaps count them.
        lost: end.records_lost.max(missing),
        gaps,
        up_span: span(&stamps[0]),
        down_span: span(&stamps[1]),
        up_min_gap: min_gap(&stamps[0]),
        down_min_gap: min_gap(&stamps[1]),
        records: records.len() as u64,
        own_wire_bytes_per_record: own_wire as f64 / (records.len().max(1)) as f64,
    }
}

/// Which series of the bench a run belongs to: the card width, payload DWs, directions.
struct At<'a> {
    width: &'a str,
    payload: u8,
    dirs: Dirs,
    /// Records held in the spy until the run ends (see spy_run).
    held: bool,
}

impl At<'_> {
    fn series(&self) -> String {
        format!("{}{}", self.dirs.name(), if self.held { "_held" } else { "" })
    }
}

fn print_run(kind: &str, at: &At, period: u32, len: u64, r: &SpyRun, clock: f64) {
    let rate = |n: u64, span: u64| if n > 1 && span > 0 { (n - 1) as f64 * clock / span as f64 } else { 0.0 };
    println!(
        "{kind} width={} payload={} dirs={} period={period} len={len} lost={} records={} gaps={} \
         up_cycles_per_tlp={:.2} down_cycles_per_tlp={:.2} up_min_gap={} down_min_gap={} up_tlps_per_s={:.0} down_tlps_per_s={:.0} own_wire_bytes_per_record={:.1}",
        at.width,
        at.payload,
        at.series(),
        r.lost,
        r.records,
        r.gap_text(),
        if r.up > 1 { r.up_span as f64 / (r.up - 1) as f64 } else { 0.0 },
        if r.down > 1 { r.down_span as f64 / (r.down - 1) as f64 } else { 0.0 },
        r.up_min_gap,
        r.down_min_gap,
        rate(r.up, r.up_span),
        rate(r.down, r.down_span),
        r.own_wire_bytes_per_record,
    );
}

/// The longest burst of `at` with zero loss: L doubles from 16 until a loss (or `burst_max`),
/// then is bisected to within 1/64; prints every run, the result and the first loss beyond it.
fn longest_burst(card: &mut Card, control: &mut SimDevice, buffer: &tlpx_device::DmaBuffer, at: &At, burst_max: u64, clock: f64) {
    let mut good = 0u64;
    let mut bad = None;
    let mut len = 16u64;
    while len <= burst_max {
        let r = spy_run(card, control, buffer, at, len, 0);
        print_run("BENCH_BURST", at, 0, len, &r, clock);
        if r.lost == 0 {
            good = len;
            len *= 2;
        } else {
            bad = Some(len);
            break;
        }
    }
    if let Some(mut hi) = bad {
        let mut lo = good;
        while hi - lo > 1.max(lo / 64) {
            let mid = (lo + hi) / 2;
            let r = spy_run(card, control, buffer, at, mid, 0);
            print_run("BENCH_BURST", at, 0, mid, &r, clock);
            if r.lost == 0 {
                lo = mid;
            } else {
                hi = mid;
            }
        }
        good = lo;
        bad = Some(hi);
    }
    let beyond = bad.map(|b| {
        let r = spy_run(card, control, buffer, at, b, 0);
        print_run("BENCH_BURST_BEYOND", at, 0, b, &r, clock);
        format!("{b}:{}", r.lost)
    });
    println!(
        "BENCH_BURST_MAX width={} payload={} dirs={} longest={good} capped={} beyond={}",
        at.width,
        at.payload,
        at.series(),
        bad.is_none(),
        beyond.unwrap_or_else(|| "-".into())
    );
    assert!(good >= 16, "{}-bit {}: not even a 16-TLP burst without loss", at.width, at.series());
}

fn env_u64(name: &str, default: u64) -> u64 {
    match std::env::var(name) {
        Err(_) => default,
        Ok(v) => v.parse().unwrap_or_else(|_| panic!("{name}={v:?}: expected a whole number")),
    }
}

/// Payload capture settings the bench runs (DWs per TLP; 0 = off; default 0 and 4):
/// TLPX_BENCH_SPY_PAYLOAD, comma-separated, each 0..16.
fn bench_payloads() -> Vec<u8> {
    let v = std::env::var("TLPX_BENCH_SPY_PAYLOAD").unwrap_or_else(|_| "0,4".into());
    v.split(',')
        .map(|s| s.trim().parse::<u8>().ok().filter(|n| *n <= 16).unwrap_or_else(|| panic!("TLPX_BENCH_SPY_PAYLOAD: {s:?} is not 0..16")))
        .collect()
}

/// The spy benchmark, per width: the longest back-to-back burst of 1-DW MWr (up, down, both
/// at once) recorded with zero loss, what a longer one loses, and the fastest sustained pace
/// with zero loss over N TLPs per direction; then the host's ingest rate. In the test suite
/// it runs small (bursts up to 512, 1000 TLPs per rate point) and asserts that a zero-loss
/// burst and rate exist at every width; scripts/bench_spy.sh runs it large
/// (TLPX_BENCH_SPY_BURST_MAX, TLPX_BENCH_SPY_TLPS, TLPX_BENCH_SPY_PAYLOAD) and reads its lines.
#[test]
fn bench_spy_bursts_rates_and_host_ingest() {
    let count = env_u64("TLPX_BENCH_SPY_TLPS", 1_000);
    let burst_max = env_u64("TLPX_BENCH_SPY_BURST_MAX", 512);
    let payloads = bench_payloads();
    for width in ["64", "128", "256"] {
        let sim = Sim::start(&["--data-width", width]);
        let mut card = sim.card();
        let mut control = sim.control();
        let clock = f64::from(card.identity().clock_hz);
        let buffer = card.device().alloc_dma(1 << 16).expect("buffer");
        // The pace the sim's link model allows a 1-DW MWr32 (3-DW header), per direction.
        let link = sim.control().hello().link;
        let wire = link.wire_bytes(12, 4);
        let link_tlps_per_s = link.tlp_bytes_per_second() / f64::from(wire);
        println!(
            "BENCH_LINK width={width} gen={} lanes={} clock_hz={clock:.0} wire_bytes={wire} link_tlps_per_s={link_tlps_per_s:.0} link_cycles_per_tlp={:.2}",
            link.generation,
            link.lanes,
            clock / link_tlps_per_s
        );
        // The upstream source alone (no capture): the generator's own cycle counter, first
        // request to last write beat.
        let mut cfg = GenConfig::new(Operation::Write, 4, count);
        cfg.window = 1 << 16;
        cfg.payload_size = 4;
        cfg.flush_writes = false;
        let r = generator::run(&mut card, &buffer, &valid(&cfg, &buffer), Duration::from_secs(1)).expect("run");
        assert_eq!(r.write_requests, count);
        let gen_cycles_per_tlp = r.cycles as f64 / count as f64;
        assert!(
            gen_cycles_per_tlp < 1.25 * clock / link_tlps_per_s + 1.0,
            "{width}-bit: the generator alone takes {gen_cycles_per_tlp:.2} cycles per 1-DW write, the link {:.2}",
            clock / link_tlps_per_s
        );
        println!(
            "BENCH_SOURCE width={width} source=generator tlps={count} cycles={} cycles_per_tlp={gen_cycles_per_tlp:.2} tlps_per_s={:.0}",
            r.cycles,
            count as f64 * clock / r.cycles as f64
        );
        for &payload in &payloads {
            for dirs in [Dirs::Both, Dirs::Up, Dirs::Down, Dirs::Reads] {
                let at = At { width, payload, dirs, held: false };
                longest_burst(&mut card, &mut control, &buffer, &at, burst_max, clock);
                // Sustained: the fastest period (card cycles per TLP per direction) with zero loss.
                let mut found = false;
                for period in [0u32, 2, 3, 4, 5, 6, 7, 8, 9, 10, 12, 14, 16, 20, 24, 32, 48, 64] {
                    let r = spy_run(&mut card, &mut control, &buffer, &at, count, period);
                    print_run("BENCH_RATE", &at, period, count, &r, clock);
                    if r.lost == 0 {
                        print_run("BENCH_RATE_RESULT", &at, period, count, &r, clock);
                        found = true;
                        break;
                    }
                }
                assert!(found, "{width}-bit {}: no loss-free rate found", at.series());
            }
            // Held in the spy until the burst is over: bursts only (the record FIFO's depth
            // bounds them).
            for dirs in [Dirs::Both, Dirs::Up, Dirs::Down, Dirs::Reads] {
                let at = At { width, payload, dirs, held: true };
                longest_burst(&mut card, &mut control, &buffer, &at, burst_max, clock);
            }
        }
        // Host ingest: records from the ring into a trace file, per wall second.
        let mut cap = Capture::start(&mut card, 1 << 17, &Filters::default(), &Trigger::default()).expect("start");
        let mut cfg = GenConfig::new(Operation::Write, 4, count);
        cfg.window = 1 << 16;
        cfg.payload_size = 4;
        cfg.idle_cycles = 64;
        generator::run(&mut card, &buffer, &valid(&cfg, &buffer), Duration::from_secs(1)).expect("run");
        card.device().idle(Duration::from_micros(50)).expect("idle");
        let path = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("spy_bench.tlpx");
        let info = tlpx_trace::HeaderInfo::new("bench", tlpx_trace::CardInfo::new(clock as u64));
        let mut w = tlpx_trace::TraceWriter::create(&path, &info).expect("create");
        let t0 = Instant::now();
        let mut batch = Vec::new();
        cap.poll(&mut card, &mut batch).expect("poll");
        for r in &batch {
            w.write_raw(r).expect("write");
        }
        w.finish_without_footer().expect("flush");
        let wall = t0.elapsed().as_secs_f64();
        assert!(batch.len() as u64 >= count, "{} records polled for {count} generator writes", batch.len());
        println!("BENCH_INGEST width={width} records={} wall_s={wall:.4} records_per_wall_s={:.0}", batch.len(), batch.len() as f64 / wall);
        cap.stop(&mut card).expect("stop");
    }
}
