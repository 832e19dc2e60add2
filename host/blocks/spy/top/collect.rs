//! The collector: the only owner of the card. Every interval of wall time (a sleep: on the
//! simulator top holds live time, so card time runs meanwhile; `Card::idle` on hardware, a
//! sleep too) it reads the spy's counters, the latency histogram and the error counters,
//! drains its own capture ring if it has one, and sends one [`Sample`] on the event channel.
//!
//! It never writes the spy's CLEAR and never touches a ring someone else set up: when another
//! tool captures (`spy::is_capturing`), top shows counters only.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::Sender;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::Serialize;
use tlpx_device::card::{Card, Feature};
use tlpx_device::generator;
use tlpx_device::spy::{self, SpyCounters};
use tlpx_device::{DeviceError, TimeMode};
use tlpx_regs::{generator as gen, request_path as rp, Register};
use tlpx_trace::{log_line_named, Body, Direction as TraceDirection, Record, RECORD_SIZE};

use super::Event;

/// Number of TLP classes the spy counts (mrd, mwr, cpl, cpld, msg, cfg, io, other).
pub const CLASS_COUNT: usize = 8;
/// log2 buckets of the spy's latency histogram (the generated constant, through the driver).
pub use tlpx_device::spy::LATENCY_BUCKETS;
/// Largest slice of card time one `idle` call lets pass, so that quitting stays prompt and
/// the capture ring is drained often enough.
const IDLE_SLICE: Duration = Duration::from_millis(2);
/// Longest wall-time sleep between two drains of the ring and lease refreshes in live time
/// (the simulator runs at most as fast as the card's clock, so this is at most 20 ms of card
/// time: far inside the spy's 100 ms lease, and a ring drained often enough).
const WALL_SLICE: Duration = Duration::from_millis(20);

/// How the TLP classes are shown (the spy's order).
pub const CLASS_LABELS: [&str; CLASS_COUNT] = ["MRd", "MWr", "Cpl", "CplD", "Msg", "Cfg", "IO", "other"];

/// One direction's counters for one class, cumulative as the spy keeps them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct ClassCount {
    pub tlps: u64,
    pub bytes: u64,
    pub payload_bytes: u64,
    pub wait_cycles: u64,
}

impl ClassCount {
    /// `self - earlier`, or `self` when the counter went backwards (someone cleared the spy).
    pub fn since(&self, earlier: &ClassCount) -> ClassCount {
        if self.tlps < earlier.tlps || self.bytes < earlier.bytes {
            return *self;
        }
        ClassCount {
            tlps: self.tlps - earlier.tlps,
            bytes: self.bytes - earlier.bytes,
            payload_bytes: self.payload_bytes.saturating_sub(earlier.payload_bytes),
            wait_cycles: self.wait_cycles.saturating_sub(earlier.wait_cycles),
        }
    }
}

/// The request path's error counters (cumulative since the card's reset).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct RequestPathErrors {
    pub ur_sent: u64,
    pub posted_dropped: u64,
    pub cfg_requests: u64,
    pub poisoned: u64,
    pub reads_too_long: u64,
    pub bus_errors: u64,
    pub malformed: u64,
}

/// The generator's error counters (they restart with every generator run).
pub use tlpx_device::generator::ErrorCounts as GeneratorErrors;

/// Who uses the spy's capture ring.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum RingOwner {
    /// top's own small capture: recent transactions are shown.
    Top,
    /// Another tool captures: top shows counters only.
    Other,
    /// Capture disabled by --no-capture.
    Off,
}

/// Everything read from the card at one instant.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Reading {
    /// The card's cycle counter.
    pub cycles: u64,
    pub down: [ClassCount; CLASS_COUNT],
    pub up: [ClassCount; CLASS_COUNT],
    pub sequence: u32,
    pub lost: u32,
    pub latency_histogram: Vec<u64>,
    pub request_path: RequestPathErrors,
    pub generator: GeneratorErrors,
    /// The spy's own ring writes (any capture's, top's own included), since the last clear.
    pub own: spy::OwnTraffic,
    /// MSIs the card sent, since the spy's last clear.
    pub msi_count: u64,
}

impl Reading {
    /// A reading of nothing (for tests and the first frame).
    pub fn zero() -> Reading {
        Reading {
            cycles: 0,
            down: [ClassCount::default(); CLASS_COUNT],
            up: [ClassCount::default(); CLASS_COUNT],
            sequence: 0,
            lost: 0,
            latency_histogram: vec![0; LATENCY_BUCKETS],
            request_path: RequestPathErrors::default(),
            generator: GeneratorErrors::default(),
            own: spy::OwnTraffic::default(),
            msi_count: 0,
        }
    }
}

/// One direction over one interval.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct DirectionRate {
    /// Payload bytes per second of card time.
    pub payload_bytes_per_second: f64,
    /// Datapath bytes (headers and payload) per second of card time.
    pub bytes_per_second: f64,
    pub tlps_per_second: f64,
    /// Per class, in [`CLASS_LABELS`] order: counts during the interval.
    pub classes: [ClassCount; CLASS_COUNT],
}

impl DirectionRate {
    fn between(now: &[ClassCount; CLASS_COUNT], before: &[ClassCount; CLASS_COUNT], seconds: f64) -> DirectionRate {
        let classes: [ClassCount; CLASS_COUNT] = std::array::from_fn(|i| now[i].since(&before[i]));
        let per_second = |v: u64| if seconds > 0.0 { v as f64 / seconds } else { 0.0 };
        DirectionRate {
            payload_bytes_per_second: per_second(classes.iter().map(|c| c.payload_bytes).sum()),
            bytes_per_second: per_second(classes.iter().map(|c| c.bytes).sum()),
            tlps_per_second: per_second(classes.iter().map(|c| c.tlps).sum()),
            classes,
        }
    }
}

/// One sample: what changed between two readings, and the later reading itself.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Sample {
    /// 1 for the first sample.
    pub index: u64,
    /// Card time of the reading (seconds since the card's cycle counter started).
    pub card_time_s: f64,
    /// Card time of the previous reading: the sample covers card time `card_start_s` to
    /// `card_time_s`.
    pub card_start_s: f64,
    /// Card time since the previous reading (`card_time_s - card_start_s`).
    pub interval_s: f64,
    /// Wall time since top started.
    pub wall_s: f64,
    /// Wall time since the previous reading: on the simulator far more than `interval_s`.
    pub wall_interval_s: f64,
    /// The clock of the card-time figures: `live` on the simulator (top holds live time),
    /// `hardware` on a card.
    pub time_mode: TimeMode,
    /// Host to card.
    pub down: DirectionRate,
    /// Card to host.
    pub up: DirectionRate,
    /// Records the spy lost during the interval (ring full or spy too slow).
    pub lost_delta: u64,
    /// The spy's own ring writes during the interval, per second of card time: TLPs, and
    /// bytes on the wire (header, payload and the link's framing per TLP).
    pub own_tlps_per_second: f64,
    pub own_wire_bytes_per_second: f64,
    /// MSIs the card sent, per second of card time.
    pub msis_per_second: f64,
    pub ring: RingOwner,
    /// Records top took from its ring during the interval.
    pub records_received: u64,
    /// Of those, top's own register accesses, not shown in `recent`.
    pub own_accesses_hidden: u64,
    /// The last of them as log lines (`tlpx_trace::log_line`), oldest first.
    pub recent: Vec<String>,
    /// Cumulative counters at the end of the interval.
    pub reading: Reading,
}

/// Builds a sample from two readings; `clock_hz` converts cycles to seconds.
pub fn sample_between(index: u64, before: &Reading, now: &Reading, clock_hz: u32, wall_s: f64) -> Sample {
    let hz = f64::from(clock_hz.max(1));
    let interval_s = now.cycles.saturating_sub(before.cycles) as f64 / hz;
    let lost_delta = if now.lost >= before.lost { now.lost - before.lost } else { now.lost };
    let per_second = |v: u64| if interval_s > 0.0 { v as f64 / interval_s } else { 0.0 };
    // A counter that went backwards was cleared: the interval counts from the clear.
    let since = |now: u64, before: u64| if now >= before { now - before } else { now };
    let own_tlps = since(now.own.tlps, before.own.tlps);
    let own_bytes = since(now.own.bytes, before.own.bytes);
    let own_wire = own_bytes + own_tlps * u64::from(tlpx_model::link::TLP_FRAMING_BYTES);
    Sample {
        index,
        card_time_s: now.cycles as f64 / hz,
        card_start_s: before.cycles as f64 / hz,
        interval_s,
        wall_s,
        wall_interval_s: 0.0,
        time_mode: TimeMode::Hardware,
        down: DirectionRate::between(&now.down, &before.down, interval_s),
        up: DirectionRate::between(&now.up, &before.up, interval_s),
        lost_delta: u64::from(lost_delta),
        own_tlps_per_second: per_second(own_tlps),
        own_wire_bytes_per_second: per_second(own_wire),
        msis_per_second: per_second(since(now.msi_count, before.msi_count)),
        ring: RingOwner::Off,
        records_received: 0,
        own_accesses_hidden: 0,
        recent: Vec::new(),
        reading: now.clone(),
    }
}

fn class_count(c: &spy::ClassCounters) -> ClassCount {
    ClassCount { tlps: c.tlps, bytes: c.bytes, payload_bytes: c.payload_bytes, wait_cycles: c.wait_cycles }
}

/// Reads everything top shows. The cycle counter is read first, so the interval a reading
/// closes never includes the time spent reading it.
pub fn read_card(card: &mut Card) -> Result<Reading, DeviceError> {
    let cycles = card.cycles()?;
    let counters: SpyCounters = spy::counters(card)?;
    let mut latency_histogram = spy::latency_histogram(card)?;
    latency_histogram.resize(LATENCY_BUCKETS, 0);
    let mut r = |reg: Register| card.read(reg);
    let request_path = RequestPathErrors {
        ur_sent: r(rp::UR_SENT)?,
        posted_dropped: r(rp::POSTED_DROPPED)?,
        cfg_requests: r(rp::CFG_REQUESTS)?,
        poisoned: r(rp::POISONED)?,
        reads_too_long: r(rp::READS_TOO_LONG)?,
        bus_errors: r(rp::BUS_ERRORS)?,
        malformed: r(rp::MALFORMED)?,
    };
    let generator = if card.has_feature(Feature::Generator) { generator::error_counts(card)? } else { GeneratorErrors::default() };
    Ok(Reading {
        cycles,
        down: std::array::from_fn(|i| class_count(&counters.down[i])),
        up: std::array::from_fn(|i| class_count(&counters.up[i])),
        sequence: counters.sequence,
        lost: counters.lost,
        latency_histogram,
        request_path,
        generator,
        own: counters.own,
        msi_count: counters.msi_count,
    })
}

/// What the collector was asked to do.
#[derive(Debug, Clone)]
pub struct Plan {
    /// Wall time between samples.
    pub interval: Duration,
    /// The simulator in live time: wait in wall time (card time runs meanwhile), refreshing
    /// leases between sleeps. Otherwise (hardware) `Card::idle`, a sleep there.
    pub live: bool,
    /// The clock of the figures, stated in every sample.
    pub time_mode: TimeMode,
    /// Stop after this many samples.
    pub frames: Option<u64>,
    /// Start top's own capture when nobody else captures.
    pub capture: bool,
    /// Records in top's ring (a power of two).
    pub ring_records: u32,
    /// Log lines kept per sample.
    pub recent: usize,
    /// The link's Max Payload Size (the spy's ring writes stay within it).
    pub mps: u32,
}

/// BAR0 ranges top itself reads or writes every sample (its own polling): the timebase,
/// the request path's and generator's error counters and the spy's registers.
const TOP_REGISTERS: [std::ops::Range<u64>; 4] = [
    tlpx_regs::timebase::CYCLES_LO.offset..tlpx_regs::timebase::CYCLES_LO.offset + 8,
    rp::UR_SENT.offset..rp::MALFORMED.offset + 4,
    gen::ERR_UR.offset..gen::ERR_MISMATCHES.offset + 4,
    tlpx_regs::spy::REGION_OFFSET..tlpx_regs::spy::REGION_OFFSET + 0x100,
];

/// Recognises top's own register accesses in the records, so that the recent-transactions
/// panel shows the traffic being watched rather than the watching: host requests into
/// [`TOP_REGISTERS`] of BAR0, and the card's completions to those reads (by tag).
/// Another tool reading the same registers is hidden too; the count says how many.
#[derive(Debug, Clone)]
pub struct OwnAccessFilter {
    /// BAR0's bus address (None: unknown, nothing is hidden).
    bar0: Option<u64>,
    /// Tags of hidden reads whose completion has not been seen.
    pending: [bool; 256],
}

impl OwnAccessFilter {
    pub fn new(bar0: Option<u64>) -> OwnAccessFilter {
        OwnAccessFilter { bar0, pending: [false; 256] }
    }

    /// True when `record` is one of top's own register accesses (or its completion).
    pub fn hides(&mut self, record: &Record) -> bool {
        let Some(bar0) = self.bar0 else { return false };
        match &record.body {
            Body::Request(r) if r.direction == TraceDirection::Down => {
                let Some(offset) = r.address.checked_sub(bar0) else { return false };
                let ours = TOP_REGISTERS.iter().any(|range| range.contains(&offset));
                if ours && !r.kind().name().starts_with("MWr") {
                    self.pending[usize::from(r.tag)] = true;
                }
                ours
            }
            Body::Completion(c) if c.direction == TraceDirection::Up && self.pending[usize::from(c.tag)] => {
                if c.last || c.split_index == 0 {
                    self.pending[usize::from(c.tag)] = false;
                }
                true
            }
            _ => false,
        }
    }
}

/// top's own capture and the decoding of its records.
struct OwnCapture {
    capture: spy::Capture,
    raw: Vec<[u8; RECORD_SIZE]>,
    filter: OwnAccessFilter,
    /// Names of the BAR0 registers host requests hit, and the blocks card reads belong to.
    names: Option<tlpx_trace::Bar0Names>,
    /// The last record logged (for the delta column), kept across samples.
    previous: Option<Record>,
    lines: std::collections::VecDeque<String>,
    received: u64,
    hidden: u64,
}

impl OwnCapture {
    fn drain(&mut self, card: &mut Card, keep: usize, clock_hz: u64) -> Result<(), DeviceError> {
        self.raw.clear();
        self.capture.poll(card, &mut self.raw)?;
        self.received += self.raw.len() as u64;
        // Every record is decoded (the filter follows read tags), the last `keep` shown.
        for bytes in &self.raw {
            let line = match Record::from_bytes(bytes) {
                Ok(record) => {
                    if record.is_footer() {
                        continue;
                    }
                    if self.filter.hides(&record) {
                        self.hidden += 1;
                        continue;
                    }
                    // Host accesses to BAR0 end with the register's name (spy.wr_index).
                    let line = log_line_named(&record, self.previous.as_ref(), clock_hz, self.names.as_ref());
                    self.previous = Some(record);
                    line
                }
                Err(e) => format!("undecodable record: {e}"),
            };
            self.lines.push_back(line);
            while self.lines.len() > keep {
                self.lines.pop_front();
            }
        }
        Ok(())
    }
}

/// Runs the collector until `plan.frames` samples were sent, `stop` is set or the card
/// fails; always ends with [`Event::Finished`], after giving top's ring back.
pub fn run(mut card: Card, plan: Plan, events: Sender<Event>, stop: Arc<AtomicBool>) {
    let result = collect(&mut card, &plan, &events, &stop);
    let message = result.err().map(|e| format!("{e:#}"));
    let _ = events.send(Event::Finished(message));
}

fn stopping(stop: &AtomicBool) -> bool {
    stop.load(Ordering::SeqCst) || crate::progress::stop_requested()
}

fn collect(card: &mut Card, plan: &Plan, events: &Sender<Event>, stop: &AtomicBool) -> anyhow::Result<()> {
    let clock_hz = card.identity().clock_hz;
    let started = Instant::now();
    let mut own: Option<OwnCapture> = None;
    let result = (|| -> anyhow::Result<()> {
        let mut ring = if plan.capture { RingOwner::Other } else { RingOwner::Off };
        // Read lazily: starting a capture clears the spy, so the first reading comes after it.
        let mut before: Option<(Reading, Instant)> = None;
        let mut index = 0;
        // How long the last reading of the card took (wall time). In live time the frame's
        // wait is shortened by it, so frames keep the interval's cadence: under heavy DMA
        // each MMIO read of the simulated card queues behind the link's completions and a
        // reading of ~120 registers takes a sizeable part of a second of wall time.
        let mut read_cost = Duration::ZERO;
        // When the next frame is due (live time): frames follow a fixed schedule, one per
        // interval, so the slices' overheads do not add up from frame to frame.
        let mut due: Option<Instant> = None;
        while plan.frames.is_none_or(|n| index < n) {
            // Capture only with a free spy: another tool's capture (or its lease) is left alone.
            if plan.capture
                && own.is_none()
                && !spy::is_capturing(card)?
                && tlpx_device::lease::owner(card, tlpx_device::lease::Block::Spy)?.is_none()
            {
                let capture =
                    spy::Capture::start_with_mps(card, plan.ring_records, plan.mps, &spy::Filters::default(), &spy::Trigger::default())?;
                own = Some(OwnCapture {
                    capture,
                    raw: Vec::new(),
                    // tlpx's registers are at BAR0 + tlpx_base (relocated when the slot's DUT is at 0).
                    filter: OwnAccessFilter::new(crate::cmd::spy::bar0_address(card).map(|b| b + card.tlpx_base())),
                    names: crate::cmd::spy::bar0_names(card),
                    hidden: 0,
                    previous: None,
                    lines: Default::default(),
                    received: 0,
                });
                ring = RingOwner::Top;
                // Starting a capture clears the spy's counters: measure from here.
                before = None;
            }
            let (before_reading, read_at) = match before.take() {
                Some(r) => r,
                None => {
                    let t = Instant::now();
                    let r = read_card(card)?;
                    read_cost = t.elapsed();
                    (r, Instant::now())
                }
            };
            // Let the interval pass in slices, draining the ring between them.
            if plan.live {
                // Wall time: card time runs live meanwhile, at whatever speed the simulator has.
                let next = match due {
                    // Fallen behind (a reading longer than the interval): start again from now.
                    Some(d) if d > read_at => d,
                    _ => read_at + plan.interval,
                };
                due = Some(next + plan.interval);
                let end = next.checked_sub(read_cost).unwrap_or(read_at);
                loop {
                    if stopping(stop) || tlpx_device::stop::requested() {
                        return Ok(());
                    }
                    let left = end.saturating_duration_since(Instant::now());
                    if left.is_zero() {
                        break;
                    }
                    // What Card::idle does between its slices: top's lease on the spy stays alive.
                    card.keep_leases()?;
                    std::thread::sleep(left.min(WALL_SLICE));
                    if let Some(o) = own.as_mut() {
                        o.drain(card, plan.recent, u64::from(clock_hz))?;
                    }
                }
            } else {
                let mut left = plan.interval;
                while !left.is_zero() {
                    if stopping(stop) {
                        return Ok(());
                    }
                    let slice = left.min(IDLE_SLICE);
                    // Card::idle keeps top's lease on the spy alive; a stop request ends top.
                    match card.idle(slice) {
                        Err(tlpx_device::DeviceError::Interrupted) => return Ok(()),
                        other => other?,
                    }
                    left -= slice;
                    if let Some(o) = own.as_mut() {
                        o.drain(card, plan.recent, u64::from(clock_hz))?;
                    }
                }
            }
            let read_start = Instant::now();
            let now = read_card(card)?;
            let now_at = Instant::now();
            read_cost = now_at - read_start;
            index += 1;
            let mut sample = sample_between(index, &before_reading, &now, clock_hz, started.elapsed().as_secs_f64());
            sample.wall_interval_s = now_at.duration_since(read_at).as_secs_f64();
            sample.time_mode = plan.time_mode;
            sample.ring = ring;
            if let Some(o) = own.as_mut() {
                o.drain(card, plan.recent, u64::from(clock_hz))?;
                sample.records_received = std::mem::take(&mut o.received);
                sample.own_accesses_hidden = std::mem::take(&mut o.hidden);
                sample.recent = o.lines.iter().cloned().collect();
            }
            if events.send(Event::Sample(Box::new(sample))).is_err() {
                return Ok(());
            }
            before = Some((now, now_at));
        }
        Ok(())
    })();
    // Give the ring back whatever happened.
    if let Some(o) = own {
        let stopped = o.capture.stop(card);
        if let (Ok(()), Err(e)) = (&result, stopped) {
            return Err(anyhow::Error::new(e).context("stopping top's spy capture"));
        }
    }
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    fn count(tlps: u64, payload: u64) -> ClassCount {
        ClassCount { tlps, bytes: tlps * 16 + payload, payload_bytes: payload, wait_cycles: 0 }
    }

    #[test]
    fn rates_are_per_second_of_card_time() {
        let before = Reading::zero();
        let mut now = Reading::zero();
        now.cycles = 125_000; // 1 ms at 125 MHz
        now.up[1] = count(100, 25_600);
        now.down[3] = count(10, 640);
        now.lost = 3;
        let s = sample_between(1, &before, &now, 125_000_000, 0.5);
        assert!((s.interval_s - 1e-3).abs() < 1e-12);
        assert!((s.up.payload_bytes_per_second - 25.6e6).abs() < 1.0);
        assert!((s.up.tlps_per_second - 100e3).abs() < 1e-6);
        assert!((s.down.payload_bytes_per_second - 640e3).abs() < 1e-6);
        assert_eq!(s.up.classes[1].tlps, 100);
        assert_eq!(s.lost_delta, 3);
    }

    #[test]
    fn a_cleared_spy_counts_from_zero_instead_of_wrapping() {
        let mut before = Reading::zero();
        before.cycles = 1000;
        before.up[1] = count(500, 9000);
        before.lost = 10;
        let mut now = Reading::zero();
        now.cycles = 2000;
        now.up[1] = count(20, 640);
        now.lost = 2;
        let s = sample_between(2, &before, &now, 1000, 0.0);
        assert_eq!(s.up.classes[1], count(20, 640));
        assert_eq!(s.lost_delta, 2);
    }

    #[test]
    fn top_s_own_register_reads_and_their_completions_are_recognised() {
        use tlpx_trace::{build, Direction};
        let bar0 = 0xf000_0000;
        let mut f = OwnAccessFilter::new(Some(bar0));
        let spy_read = build::mem_read(0, Direction::Down, 10, 0, 0x21, bar0 + 0x3870, 2);
        let gen_read = build::mem_read(1, Direction::Down, 11, 0, 0x22, bar0 + 0x2800, 1);
        let dma_read = build::mem_read(2, Direction::Up, 12, 0x100, 0x21, 0x4000_0000, 64);
        assert!(f.hides(&spy_read));
        assert!(!f.hides(&gen_read), "another tool's generator setup is shown");
        assert!(!f.hides(&dma_read), "the card's own reads are shown");
        assert!(f.pending[0x21] && !f.pending[0x22]);
        // Its completion (up, same tag) is hidden once; a later completion of tag 0x21 is not.
        let cpl = build::completion(3, Direction::Up, 20, 0, 0x21, 0x0100, 8, 2, Some(10), 1, true);
        assert!(f.hides(&cpl));
        assert!(!f.hides(&cpl));
        assert!(!OwnAccessFilter::new(None).hides(&spy_read));
    }

    #[test]
    fn a_zero_interval_gives_zero_rates() {
        let s = sample_between(1, &Reading::zero(), &Reading::zero(), 125_000_000, 0.0);
        assert_eq!(s.up.payload_bytes_per_second, 0.0);
        assert_eq!(s.interval_s, 0.0);
    }
}
