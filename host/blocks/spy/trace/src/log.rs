//! One line per transaction, in the style of the PCI Pamette's real-time-clock log
//! (seed 001): time, direction, transaction, address or tag, length, duration, latency,
//! and the delta to the previous transaction.
//!
//! ```text
//!     12.504 us  up   MRd32  0x40001000 len 128 tag 0x85  dur  2  lat   -       +0.128 us
//!     13.752 us  down CplD   SC  bc 512 len  32 tag 0x85  dur  3  lat 156       +1.248 us  split 1
//! ```
//!
//! Times are microseconds since the card's cycle counter started; `dur` and `lat` are
//! card cycles. A completion timeout is shown at the moment the spy gave up (the read's time
//! plus the cycles waited), an MSI as `MSI vector 0 sources generator` at the moment the hard
//! IP took it, and a TLP's captured payload ([`log_entry_line`]) as hex DWs after `data`.
//!
//! The spy emits records in the order it finished them: a TLP's record comes at its last beat,
//! stamped with its first, and the two directions queue separately, so the file is not in
//! time order across directions. [`TimeSorter`] puts them in order within a bounded window
//! (`tlpx spy convert --log` and the running log of `tlpx spy capture` both use it), so deltas
//! are never negative. With [`log_line_named`], a host request into BAR0 ends with the register
//! it hits, and a card read (or its completion) with the block its tag belongs to
//! (`[generator]`, `[rt_loop]`, `[rule30]`: [`crate::names`]):
//!
//! ```text
//!      1.200 us  down MWr32  0xf000385c len   1 tag 0x00  dur  0  lat   -       +0.128 us  spy.wr_index
//! ```

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use crate::entry::EntryInfo;
use crate::names::Bar0Names;
use crate::record::{Body, Record};
use crate::time::{cycles_to_ps, format_us_ps};

/// The column titles matching [`log_line`].
pub fn log_title() -> String {
    format!(
        "{:>9}     {:<4} {:<6} {:<10} {:>7} {:>8}  {:>6}  {:>7}  {:>11}",
        "time", "dir", "kind", "addr/cpl", "len", "tag", "dur", "lat", "delta"
    )
}

/// Formats `record` as one log line; `previous` is the record logged before it (for the
/// delta), `clock_hz` the card clock of the timestamps.
pub fn log_line(record: &Record, previous: Option<&Record>, clock_hz: u64) -> String {
    log_line_named(record, previous, clock_hz, None)
}

/// [`log_line`], with the BAR0 register a host request hits appended (`names`: BAR0's
/// address; None names nothing).
pub fn log_line_named(record: &Record, previous: Option<&Record>, clock_hz: u64, names: Option<&Bar0Names>) -> String {
    let ts = record.event_time().unwrap_or(0);
    let time = format_us_ps(cycles_to_ps(ts, clock_hz) as i128, false);
    // Blank (same width) for the first line, so the columns stay aligned.
    let delta = match previous.and_then(Record::event_time) {
        Some(prev) => {
            let now = cycles_to_ps(ts, clock_hz) as i128;
            let before = cycles_to_ps(prev, clock_hz) as i128;
            format!("{:>11} us", format_us_ps(now - before, true))
        }
        None => " ".repeat(14),
    };
    let dir = record.direction().map(|d| d.name()).unwrap_or("?");
    // The block a card request (and its completion) belongs to, by tag: `  [generator]`.
    // The host's own requests are named by the register they hit: no `[host]` on each line.
    let source = names.and_then(|n| n.source(record)).filter(|s| s != "host").map_or_else(String::new, |s| format!("  [{s}]"));
    let (target, len, dur, lat, suffix) = match &record.body {
        Body::Request(r) => {
            let suffix = names.and_then(|n| n.name(record)).map_or_else(String::new, |name| format!("  {name}")) + &source;
            (format!("0x{:08x}", r.address), r.length_dw.to_string(), r.timing.duration.to_string(), "-".to_owned(), suffix)
        }
        Body::Completion(c) => {
            let split = if c.split_index == 0 {
                String::new()
            } else {
                format!("  split {}{}{}", c.split_index, if c.split_index == 15 { "+" } else { "" }, if c.last { " last" } else { "" })
            };
            (
                format!("{:<3} bc {:>3}", c.status.name(), c.byte_count),
                // A completion without data has no Length (the field is reserved).
                if c.with_data() { c.length_dw.to_string() } else { "-".to_owned() },
                c.timing.duration.to_string(),
                c.latency.map_or_else(|| "-".to_owned(), |l| l.to_string()),
                split + &source,
            )
        }
        Body::Timeout(t) => (
            format!("rid 0x{:04x}", t.requester_id),
            "-".to_owned(),
            "-".to_owned(),
            t.waited.to_string(),
            format!("  completion timeout (read at {} us)", format_us_ps(cycles_to_ps(t.timestamp, clock_hz) as i128, false)),
        ),
        Body::Msi(m) => {
            return format!(
                "{time:>9} us  up   MSI    vector {} sources {}  wait {}  {delta}",
                m.vector,
                crate::names::msi_sources_text(m.sources),
                m.wait_cycles
            )
            .trim_end()
            .to_owned()
        }
        Body::Payload(p) => {
            // An orphan: its TLP's record was lost.
            return format!(
                "{:>12}  {:<4} payload of a lost TLP record (DW {}..{}{}): {}",
                "",
                p.direction.name(),
                p.first_dw,
                u32::from(p.first_dw) + u32::from(p.count),
                if p.last { ", last" } else { "" },
                hex_dws(&p.bytes())
            );
        }
        Body::Footer(ft) => {
            let trigger = ft.trigger_sequence.map_or_else(String::new, |s| format!("; triggered by seq {s}"));
            return format!(
                "{:>12}  end of capture: {} records created, {} lost (next seq {}){trigger}",
                "", ft.records_created, ft.records_lost, record.sequence
            );
        }
    };
    let tag = record.tag().unwrap_or(0);
    format!(
        "{time:>9} us  {dir:<4} {kind:<6} {target} len {len:>3} tag 0x{tag:02x}  dur {dur:>2}  lat {lat:>3}  {delta}{suffix}",
        kind = record.kind_name(),
    )
}

/// Payload bytes as hex DWs in wire order (`a5a5a5a5 00000001`).
pub fn hex_dws(bytes: &[u8]) -> String {
    bytes.chunks(4).map(|c| c.iter().map(|b| format!("{b:02x}")).collect::<String>()).collect::<Vec<_>>().join(" ")
}

/// [`log_line_named`] for an entry: the TLP's line, then its captured payload
/// (`  data a5a5a5a5 a5a5a5a5 (8 of 20 bytes)`; `incomplete` when payload records were lost).
pub fn log_entry_line(info: &EntryInfo, previous: Option<&Record>, clock_hz: u64, names: Option<&Bar0Names>) -> String {
    let mut line = log_line_named(&info.entry.record, previous, clock_hz, names);
    if !info.entry.is_orphan() && !info.entry.payload.is_empty() {
        let total = info.entry.record.payload_bytes();
        line.push_str(&format!(
            "  data {} ({} of {total} bytes{})",
            hex_dws(&info.entry.payload),
            info.entry.payload.len(),
            if info.entry.payload_complete { "" } else { ", incomplete" }
        ));
    } else if !info.entry.payload_complete && !info.entry.is_orphan() {
        line.push_str("  (payload records may be lost)");
    }
    line
}

/// How far back in card time a record delivered later can be stamped, relative to the newest
/// record already delivered, plus margin. A record is stamped at its TLP's first beat but
/// built at its last beat, after waiting in its direction's summary FIFO (up to 1024 summaries
/// deep: cores/spy/core.py's buffer table) for a builder that takes one summary a cycle, oldest
/// direction first, and a cycle for each payload or MSI record (at most 4 cycles a TLP). So a
/// record X delivered after one stamped T was built after it:
/// `T <= built(X) <= t(X) + duration(X) + wait(X)`, i.e. `t(X) >= T - duration(X) - wait(X)`,
/// with `duration` at most 65535 (the record's field saturates there) and `wait` under
/// 2 x 1024 summaries x 4 cycles = 8192 cycles. Once the newest delivered stamp is more than
/// this past a held record, nothing earlier than it can still come, and it is released in
/// order. Only a TLP stalled longer than the duration field holds could be printed out of
/// order (its record shows the saturated `dur`). The margin is twice the FIFO bound.
pub const SORT_WINDOW_CYCLES: u64 = 65_536 + 16_384;

/// Most entries [`TimeSorter`] holds, whatever the stamps say (a trace from elsewhere, or
/// stamps far apart): the spy builds at most one record a cycle, so a real capture never
/// holds more than [`SORT_WINDOW_CYCLES`] of them; this bounds memory (about 100 bytes an
/// entry, plus captured payload) for any input.
pub const SORT_WINDOW_ENTRIES: usize = SORT_WINDOW_CYCLES as usize;

/// Something to log, held in time order: an entry, with the gap line that goes before it.
#[derive(Debug)]
pub struct Held {
    pub info: EntryInfo,
    /// Card cycle it is ordered by (its event time; an orphan payload record, which has none,
    /// takes the newest stamp seen when it arrived).
    pub time: u64,
}

/// Puts entries in time order across directions within a bounded window (see
/// [`SORT_WINDOW_CYCLES`]): push entries in file order, print what [`TimeSorter::push`]
/// releases, then what [`TimeSorter::finish`] returns.
#[derive(Debug, Default)]
pub struct TimeSorter {
    heap: BinaryHeap<Reverse<(u64, u64, HeldSlot)>>,
    arrivals: u64,
    newest: u64,
}

/// A heap slot ordered only by its key (time, arrival) in the tuple before it.
#[derive(Debug)]
struct HeldSlot(Held);

impl PartialEq for HeldSlot {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}
impl Eq for HeldSlot {}
impl PartialOrd for HeldSlot {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for HeldSlot {
    fn cmp(&self, _: &Self) -> std::cmp::Ordering {
        std::cmp::Ordering::Equal
    }
}

impl TimeSorter {
    pub fn new() -> Self {
        Self::default()
    }

    /// Takes the next entry (file order); returns those now certain to be next in time.
    pub fn push(&mut self, info: EntryInfo) -> Vec<Held> {
        let time = info.entry.record.event_time().unwrap_or(self.newest);
        self.newest = self.newest.max(time);
        self.heap.push(Reverse((time, self.arrivals, HeldSlot(Held { info, time }))));
        self.arrivals += 1;
        let mut out = Vec::new();
        while let Some(Reverse((t, _, _))) = self.heap.peek() {
            if t.saturating_add(SORT_WINDOW_CYCLES) < self.newest || self.heap.len() > SORT_WINDOW_ENTRIES {
                if let Some(Reverse((_, _, HeldSlot(h)))) = self.heap.pop() {
                    out.push(h);
                }
            } else {
                break;
            }
        }
        out
    }

    /// Entries held now.
    pub fn held(&self) -> usize {
        self.heap.len()
    }

    /// Everything still held, in time order (end of the trace or capture).
    pub fn finish(&mut self) -> Vec<Held> {
        let mut out = Vec::with_capacity(self.heap.len());
        while let Some(Reverse((_, _, HeldSlot(h)))) = self.heap.pop() {
            out.push(h);
        }
        out
    }
}

/// Writes the log of `entries` (in file order) in time order: a `***` line for each loss
/// before the entry after it, then the entry's line. `previous` is the last record printed
/// (for deltas); it is updated.
pub fn write_sorted<W: std::io::Write>(
    out: &mut W,
    held: Vec<Held>,
    previous: &mut Option<Record>,
    clock_hz: u64,
    names: Option<&Bar0Names>,
) -> std::io::Result<()> {
    for h in held {
        if h.info.lost_before > 0 {
            writeln!(
                out,
                "{:>12}  *** {} record{} lost before seq {}",
                "",
                h.info.lost_before,
                if h.info.lost_before == 1 { "" } else { "s" },
                h.info.entry.record.sequence
            )?;
        }
        writeln!(out, "{}", log_entry_line(&h.info, previous.as_ref(), clock_hz, names))?;
        if h.info.entry.record.event_time().is_some() {
            *previous = Some(h.info.entry.record);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::{build, Direction};

    #[test]
    fn matches_the_documented_example() {
        // 125 MHz: 12.504 us = 1563 cycles; previous 0.128 us = 16 cycles earlier.
        let prev = build::mem_read(0, Direction::Up, 1547, 0x0100, 0x84, 0x4000_0000, 1);
        let mut rec = build::mem_read(1, Direction::Up, 1563, 0x0100, 0x85, 0x4000_1000, 128);
        if let Body::Request(r) = &mut rec.body {
            r.timing.duration = 2;
        }
        assert_eq!(
            log_line(&rec, Some(&prev), 125_000_000),
            "   12.504 us  up   MRd32  0x40001000 len 128 tag 0x85  dur  2  lat   -       +0.128 us"
        );
    }

    #[test]
    fn a_host_write_into_bar0_names_its_register() {
        let names = Bar0Names::new(0xf000_0000);
        let a = 0xf000_0000 + tlpx_regs::spy::WR_INDEX.offset;
        let rec = build::mem_write(0, Direction::Down, 150, 0x0000, 0, a, 1);
        let prev = build::mem_read(0, Direction::Up, 134, 0x0100, 0x84, 0x4000_0000, 1);
        let line = log_line_named(&rec, Some(&prev), 125_000_000, Some(&names));
        assert_eq!(line, format!("{}  spy.wr_index", log_line(&rec, Some(&prev), 125_000_000)));
        assert!(line.contains(&format!("0x{a:08x}")), "the address stays: {line}");
        // The card's own write to host memory at the same address is not a register: only
        // its source (tag 0: LitePCIe's DMA writer) follows it.
        let up = build::mem_write(0, Direction::Up, 150, 0x0100, 0, a, 1);
        assert_eq!(log_line_named(&up, None, 125_000_000, Some(&names)), format!("{}  [litepcie]", log_line(&up, None, 125_000_000)));
    }
}
