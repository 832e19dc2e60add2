//! VCD for GTKWave (IEEE 1364 value change dump, plus GTKWave's `string` variables).
//!
//! Scope `tlpx`, one sub-scope per direction (`down`, `up`), each with:
//!
//! | signal | type | meaning |
//! |---|---|---|
//! | `tlp` | string | `MRd32_0x40001000_len128_tag0x85` while the TLP is on the link, `-` when idle |
//! | `busy` | wire 1 | high from the TLP's first beat to its last |
//! | `kind` | reg 8 | Fmt (bits 7:5) and Type (bits 4:0) of the last TLP |
//! | `address` | reg 64 | address of the last request |
//! | `length` | reg 11 | length in DWs of the last TLP |
//! | `tag` | reg 8 | tag of the last TLP |
//! | `requester_id` | reg 16 | requester ID of the last TLP |
//! | `latency` | reg 32 | latency in cycles of the last matched completion |
//! | `timeout` | wire 1 | one-cycle pulse when a read of this direction timed out |
//! | `source` | string | the block a card read or its completion belongs to by tag (`generator`, `rt_loop`, the slot's DUT) while it is on the link, `-` otherwise |
//! | `register` | string | the BAR0 register a host request hits (`spy.wr_index`, [`crate::names`]) while it is on the link, `-` otherwise (always `-` in `up`, and when the trace records no BAR0 address) |
//!
//! | `payload` | string | the TLP's captured payload as hex bytes in wire order while it is on the link, `-` otherwise (record format 2) |
//! | `msi` | wire 1 | one-cycle pulse when the card handed an MSI to its hard IP (`up` only; record format 2) |
//! | `msi_sources` | string | the MSI sources pending at the last MSI (`generator`) |
//!
//! and `tlpx.lost`, an integer counting the records lost so far (sequence gaps). Payload
//! records are folded into their TLP ([`crate::entry`]); an orphan shows only in the lost
//! count's neighbourhood (its TLP record is lost).
//!
//! The time unit is the coarsest VCD unit (1/10/100 s..fs) in which one card cycle is a
//! whole number; when none is (a clock of 133.33 MHz), 1 ps, rounded.
//! Records arrive in the order the spy finished them, not by start time, so the
//! converter sorts all value changes by time (memory grows with the trace).

use std::collections::HashMap;
use std::io::{Read, Seek, Write};

use crate::entry::EntryInfo;
use crate::error::TraceError;
use crate::file::TraceReader;
use crate::gaps::GapDetector;
use crate::record::{Body, Direction, Msi, Record, Timeout};
use crate::time::period_text;

/// How card cycles map to VCD time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Timescale {
    /// `$timescale` text, e.g. `"1ns"`, `"100ps"`.
    pub unit: &'static str,
    /// Time units per cycle when exact.
    pub units_per_cycle: Option<u64>,
    clock_hz: u64,
}

const UNITS: &[(&str, u128)] = &[
    ("100s", 100_000_000_000_000_000),
    ("10s", 10_000_000_000_000_000),
    ("1s", 1_000_000_000_000_000),
    ("100ms", 100_000_000_000_000),
    ("10ms", 10_000_000_000_000),
    ("1ms", 1_000_000_000_000),
    ("100us", 100_000_000_000),
    ("10us", 10_000_000_000),
    ("1us", 1_000_000_000),
    ("100ns", 100_000_000),
    ("10ns", 10_000_000),
    ("1ns", 1_000_000),
    ("100ps", 100_000),
    ("10ps", 10_000),
    ("1ps", 1_000),
    ("100fs", 100),
    ("10fs", 10),
    ("1fs", 1),
];

impl Timescale {
    pub fn for_clock(clock_hz: u64) -> Timescale {
        let clock_hz = clock_hz.max(1);
        const FS_PER_S: u128 = 1_000_000_000_000_000;
        for &(unit, fs) in UNITS {
            let denominator = u128::from(clock_hz) * fs;
            if FS_PER_S % denominator == 0 {
                let per_cycle = FS_PER_S / denominator;
                if let Ok(per_cycle) = u64::try_from(per_cycle) {
                    return Timescale { unit, units_per_cycle: Some(per_cycle), clock_hz };
                }
            }
        }
        Timescale { unit: "1ps", units_per_cycle: None, clock_hz }
    }

    /// VCD time of a card cycle.
    pub fn time(&self, cycles: u64) -> u128 {
        match self.units_per_cycle {
            Some(k) => u128::from(cycles) * u128::from(k),
            None => {
                let hz = u128::from(self.clock_hz);
                (u128::from(cycles) * 1_000_000_000_000 + hz / 2) / hz
            }
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
enum Value {
    Bits(u64),
    Text(String),
}

#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
enum Sig {
    Tlp(Direction),
    Busy(Direction),
    Kind(Direction),
    Address(Direction),
    Length(Direction),
    Tag(Direction),
    RequesterId(Direction),
    Latency(Direction),
    Timeout(Direction),
    Register(Direction),
    Source(Direction),
    Payload(Direction),
    Msi(Direction),
    MsiSources(Direction),
    Lost,
}

impl Sig {
    /// The direction whose scope holds the signal (None: the top scope).
    fn direction(self) -> Option<Direction> {
        match self {
            Sig::Tlp(x)
            | Sig::Busy(x)
            | Sig::Kind(x)
            | Sig::Address(x)
            | Sig::Length(x)
            | Sig::Tag(x)
            | Sig::RequesterId(x)
            | Sig::Latency(x)
            | Sig::Timeout(x)
            | Sig::Register(x)
            | Sig::Source(x)
            | Sig::Payload(x)
            | Sig::Msi(x)
            | Sig::MsiSources(x) => Some(x),
            Sig::Lost => None,
        }
    }
}

#[derive(Debug)]
enum Change {
    Set(Sig, Value),
    /// +1 / -1 on an activity counter shown as a 1-bit wire (`busy`, `timeout`).
    Count(Sig, i8),
}

struct Event {
    time: u128,
    /// 0: ends (falling edges), 1: starts; so that a TLP starting when another ends
    /// leaves `busy` high.
    phase: u8,
    order: u64,
    change: Change,
}

struct SigDef {
    sig: Sig,
    var_type: &'static str,
    width: u32,
    name: &'static str,
}

/// Signals added after the first version: their identifier codes come after the older
/// signals' so that those keep theirs (a VCD of an older trace differs only by the new
/// `$var`s and their values).
fn id_index(defs: &[SigDef], i: usize) -> usize {
    // 0: the first version's signals; 1: `register` and `source`; 2: record format 2's.
    let generation = |d: &SigDef| match d.sig {
        Sig::Register(_) | Sig::Source(_) => 1,
        Sig::Payload(_) | Sig::Msi(_) | Sig::MsiSources(_) => 2,
        _ => 0,
    };
    let g = generation(&defs[i]);
    defs.iter().filter(|d| generation(d) < g).count() + defs[..i].iter().filter(|d| generation(d) == g).count()
}

fn signal_defs() -> Vec<SigDef> {
    let mut defs = Vec::new();
    for d in [Direction::Down, Direction::Up] {
        defs.extend([
            SigDef { sig: Sig::Tlp(d), var_type: "string", width: 1, name: "tlp" },
            SigDef { sig: Sig::Busy(d), var_type: "wire", width: 1, name: "busy" },
            SigDef { sig: Sig::Kind(d), var_type: "reg", width: 8, name: "kind" },
            SigDef { sig: Sig::Address(d), var_type: "reg", width: 64, name: "address" },
            SigDef { sig: Sig::Length(d), var_type: "reg", width: 11, name: "length" },
            SigDef { sig: Sig::Tag(d), var_type: "reg", width: 8, name: "tag" },
            SigDef { sig: Sig::RequesterId(d), var_type: "reg", width: 16, name: "requester_id" },
            SigDef { sig: Sig::Latency(d), var_type: "reg", width: 32, name: "latency" },
            SigDef { sig: Sig::Timeout(d), var_type: "wire", width: 1, name: "timeout" },
            SigDef { sig: Sig::Register(d), var_type: "string", width: 1, name: "register" },
            SigDef { sig: Sig::Source(d), var_type: "string", width: 1, name: "source" },
            SigDef { sig: Sig::Payload(d), var_type: "string", width: 1, name: "payload" },
        ]);
        if d == Direction::Up {
            defs.extend([
                SigDef { sig: Sig::Msi(d), var_type: "wire", width: 1, name: "msi" },
                SigDef { sig: Sig::MsiSources(d), var_type: "string", width: 1, name: "msi_sources" },
            ]);
        }
    }
    defs.push(SigDef { sig: Sig::Lost, var_type: "integer", width: 64, name: "lost" });
    defs
}

/// A short identifier code for signal `i` (printable ASCII 33..=126).
fn id_code(mut i: usize) -> String {
    let mut s = String::new();
    loop {
        s.push(char::from(33 + (i % 94) as u8));
        i /= 94;
        if i == 0 {
            return s;
        }
        i -= 1;
    }
}

/// Options of [`write_vcd`].
#[derive(Debug, Clone)]
pub struct VcdOptions {
    pub clock_hz: u64,
    /// `$date` text; use the trace's `created_utc` for reproducible output.
    pub date: String,
    /// Extra `$comment` text (card, link), no `$end` inside.
    pub comment: String,
    /// BAR0's address, to name the registers host requests hit (None: `register` stays `-`).
    pub names: Option<crate::names::Bar0Names>,
}

/// Writes `records` (in file order; the footer, if any, last) as VCD.
pub fn write_vcd<W: Write>(mut out: W, records: &[Record], opts: &VcdOptions) -> std::io::Result<()> {
    let ts = Timescale::for_clock(opts.clock_hz);
    let events = value_changes(records, ts, opts.names.as_ref());

    let defs = signal_defs();
    let ids: HashMap<Sig, (String, u32)> = defs.iter().enumerate().map(|(i, d)| (d.sig, (id_code(id_index(&defs, i)), d.width))).collect();

    write_header(&mut out, opts, &ts)?;
    write_definitions(&mut out, &defs, &ids)?;
    let first_time = events.first().map_or(0, |e| e.time);
    let current = write_initial_values(&mut out, &defs, &ids, first_time)?;
    write_changes(&mut out, &events, &ids, current, first_time)?;
    out.flush()
}

/// Every value change of `records`, sorted by time (ends before starts at the same time, then
/// in record order).
fn value_changes(records: &[Record], ts: Timescale, names: Option<&crate::names::Bar0Names>) -> Vec<Event> {
    let mut changes =
        Changes { ts, names, events: Vec::with_capacity(records.len() * 8), gaps: GapDetector::new(), lost_total: 0, last_time: 0 };
    let footer_sequence = records.iter().find(|r| r.is_footer()).map(|r| r.sequence);
    let plain: Vec<Record> = records.iter().filter(|r| !r.is_footer()).copied().collect();
    let entries = crate::entry::entries_with_info(&plain, footer_sequence);
    let mut all_sequences = records.iter().map(|r| r.sequence);
    for (order, info) in entries.iter().enumerate() {
        changes.entry(order as u64, info, &mut all_sequences);
    }
    let mut events = changes.events;
    events.sort_by_key(|e| (e.time, e.phase, e.order));
    events
}

/// Collects the value changes of the entries, one entry at a time in file order.
struct Changes<'a> {
    ts: Timescale,
    names: Option<&'a crate::names::Bar0Names>,
    events: Vec<Event>,
    gaps: GapDetector,
    /// Records lost so far (the `lost` signal).
    lost_total: u64,
    /// Latest time seen: the start of an entry without a timestamp.
    last_time: u128,
}

impl Changes<'_> {
    fn cycle(&self, c: u64) -> u128 {
        self.ts.time(c)
    }

    fn push(&mut self, order: u64, time: u128, phase: u8, change: Change) {
        self.events.push(Event { time, phase, order, change });
    }

    /// `sig` takes value `v` at `time` (a start: phase 1).
    fn set(&mut self, order: u64, time: u128, sig: Sig, v: Value) {
        self.push(order, time, 1, Change::Set(sig, v));
    }

    /// The changes of entry number `order`; `all_sequences` yields the sequence numbers of
    /// every record in file order, this entry's next.
    fn entry(&mut self, order: u64, info: &EntryInfo, all_sequences: &mut impl Iterator<Item = u32>) {
        let record = &info.entry.record;
        let start = record.timestamp().map(|c| self.cycle(c)).unwrap_or(self.last_time);
        self.last_time = self.last_time.max(start);
        // Gaps over every record (payload records included), up to and with this entry's.
        let entry_records = 1 + usize::from(info.payload_records);
        for sequence in all_sequences.by_ref().take(entry_records) {
            if let Some(gap) = self.gaps.push(sequence) {
                if !gap.is_backwards() {
                    self.lost_total = self.lost_total.saturating_add(u64::from(gap.lost));
                    self.set(order, start, Sig::Lost, Value::Bits(self.lost_total));
                }
            }
        }
        match &record.body {
            Body::Request(_) | Body::Completion(_) => self.tlp(order, info, start),
            Body::Timeout(t) => self.timeout(order, t),
            Body::Msi(m) => self.msi(order, m),
            Body::Footer(_) | Body::Payload(_) => {}
        }
    }

    /// A one-cycle `timeout` pulse when the read's wait ran out.
    fn timeout(&mut self, order: u64, t: &Timeout) {
        let at = self.cycle(t.timestamp.saturating_add(u64::from(t.waited)));
        self.last_time = self.last_time.max(at);
        self.push(order, at, 1, Change::Count(Sig::Timeout(t.direction), 1));
        self.push(order, at + self.cycle(1).max(1), 0, Change::Count(Sig::Timeout(t.direction), -1));
    }

    /// A one-cycle `msi` pulse, and the sources pending at it.
    fn msi(&mut self, order: u64, m: &Msi) {
        let at = self.cycle(m.timestamp);
        self.last_time = self.last_time.max(at);
        self.set(order, at, Sig::MsiSources(Direction::Up), Value::Text(crate::names::msi_sources_text(m.sources)));
        self.push(order, at, 1, Change::Count(Sig::Msi(Direction::Up), 1));
        self.push(order, at + self.cycle(1).max(1), 0, Change::Count(Sig::Msi(Direction::Up), -1));
    }

    /// The changes of a request or completion (with its payload) starting at `start`.
    fn tlp(&mut self, order: u64, info: &EntryInfo, start: u128) {
        let record = &info.entry.record;
        let (d, timing, fmt, ty, length, address, latency) = match &record.body {
            Body::Request(r) => (r.direction, r.timing, r.fmt, r.tlp_type, r.length_dw, Some(r.address), None),
            Body::Completion(c) => (c.direction, c.timing, c.fmt, c.tlp_type, c.length_dw, None, c.latency),
            _ => return, // not a TLP: entry() passes only requests and completions
        };
        if !info.entry.payload.is_empty() {
            self.set(order, start, Sig::Payload(d), Value::Text(crate::csv::hex_bytes(&info.entry.payload)));
        }
        let tag = record.tag().unwrap_or(0);
        let target = match &record.body {
            Body::Completion(c) => format!("{}_bc{}", c.status.name(), c.byte_count),
            _ => format!("0x{:x}", address.unwrap_or(0)),
        };
        let text = format!("{}_{}_len{}_tag0x{:02x}", record.kind_name(), target, length, tag);
        self.set(order, start, Sig::Tlp(d), Value::Text(text));
        if let Some(name) = self.names.and_then(|n| n.name(record)) {
            self.set(order, start, Sig::Register(d), Value::Text(name));
        }
        if let Some(source) = self.names.and_then(|n| n.source(record)) {
            self.set(order, start, Sig::Source(d), Value::Text(source));
        }
        self.push(order, start, 1, Change::Count(Sig::Busy(d), 1));
        self.set(order, start, Sig::Kind(d), Value::Bits(u64::from(fmt) << 5 | u64::from(ty)));
        if let Some(a) = address {
            self.set(order, start, Sig::Address(d), Value::Bits(a));
        }
        self.set(order, start, Sig::Length(d), Value::Bits(u64::from(length)));
        self.set(order, start, Sig::Tag(d), Value::Bits(u64::from(tag)));
        let rid = record.requester_id().unwrap_or(0);
        self.set(order, start, Sig::RequesterId(d), Value::Bits(u64::from(rid)));
        if let Some(l) = latency {
            self.set(order, start, Sig::Latency(d), Value::Bits(u64::from(l)));
        }
        // Busy through the last beat: `duration` cycles after the first, plus that beat.
        let end = self.cycle(timing.timestamp.saturating_add(u64::from(timing.duration) + 1));
        self.last_time = self.last_time.max(end);
        self.push(order, end, 0, Change::Count(Sig::Busy(d), -1));
    }
}

/// `$date`, `$version`, `$comment` and `$timescale`.
fn write_header<W: Write>(out: &mut W, opts: &VcdOptions, ts: &Timescale) -> std::io::Result<()> {
    writeln!(out, "$date\n  {}\n$end", opts.date)?;
    writeln!(out, "$version\n  tlpx-trace {}\n$end", env!("CARGO_PKG_VERSION"))?;
    writeln!(
        out,
        "$comment\n  tlpx spy trace; card clock {} Hz (one cycle = {}). {}\n$end",
        opts.clock_hz,
        period_text(opts.clock_hz),
        opts.comment
    )?;
    writeln!(out, "$timescale {} $end", ts.unit)
}

/// The scopes and `$var`s of the signals, up to `$enddefinitions`.
fn write_definitions<W: Write>(out: &mut W, defs: &[SigDef], ids: &HashMap<Sig, (String, u32)>) -> std::io::Result<()> {
    writeln!(out, "$scope module tlpx $end")?;
    let mut current_scope: Option<Direction> = None;
    for d in defs {
        let dir = d.sig.direction();
        if dir != current_scope {
            if current_scope.is_some() {
                writeln!(out, "$upscope $end")?;
            }
            if let Some(x) = dir {
                writeln!(out, "$scope module {} $end", x.name())?;
            }
            current_scope = dir;
        }
        let (id, width) = &ids[&d.sig];
        let range = if d.var_type == "reg" && *width > 1 { format!(" [{}:0]", width - 1) } else { String::new() };
        writeln!(out, "$var {} {} {} {}{} $end", d.var_type, width, id, d.name, range)?;
    }
    if current_scope.is_some() {
        writeln!(out, "$upscope $end")?;
    }
    writeln!(out, "$upscope $end")?;
    writeln!(out, "$enddefinitions $end")
}

/// The `$dumpvars` block at `first_time`; returns the values written.
fn write_initial_values<W: Write>(
    out: &mut W,
    defs: &[SigDef],
    ids: &HashMap<Sig, (String, u32)>,
    first_time: u128,
) -> std::io::Result<HashMap<Sig, Value>> {
    // Initial values at the first event's time (or 0).
    let mut current: HashMap<Sig, Value> = HashMap::new();
    writeln!(out, "#{first_time}")?;
    writeln!(out, "$dumpvars")?;
    for d in defs {
        let initial = match d.sig {
            Sig::Tlp(_) | Sig::Register(_) | Sig::Source(_) | Sig::Payload(_) | Sig::MsiSources(_) => Value::Text("-".into()),
            _ => Value::Bits(0),
        };
        write_value(out, &ids[&d.sig], &initial)?;
        current.insert(d.sig, initial);
    }
    writeln!(out, "$end")?;
    Ok(current)
}

/// The sorted `events`, one `#time` block per time at which a value differs from `current`.
fn write_changes<W: Write>(
    out: &mut W,
    events: &[Event],
    ids: &HashMap<Sig, (String, u32)>,
    mut current: HashMap<Sig, Value>,
    first_time: u128,
) -> std::io::Result<()> {
    let mut counters: HashMap<Sig, i64> = HashMap::new();
    let mut written_time = first_time;
    let mut i = 0;
    while i < events.len() {
        let time = events[i].time;
        let mut pending: Vec<(Sig, Value)> = Vec::new();
        let set = |pending: &mut Vec<(Sig, Value)>, sig: Sig, v: Value| match pending.iter_mut().find(|(s, _)| *s == sig) {
            Some(slot) => slot.1 = v,
            None => pending.push((sig, v)),
        };
        while i < events.len() && events[i].time == time {
            match &events[i].change {
                Change::Set(sig, v) => set(&mut pending, *sig, v.clone()),
                Change::Count(sig, delta) => {
                    let c = counters.entry(*sig).or_insert(0);
                    *c += i64::from(*delta);
                    let high = *c > 0;
                    set(&mut pending, *sig, Value::Bits(u64::from(high)));
                    if let (Sig::Busy(d), false) = (sig, high) {
                        set(&mut pending, Sig::Tlp(*d), Value::Text("-".into()));
                        set(&mut pending, Sig::Register(*d), Value::Text("-".into()));
                        set(&mut pending, Sig::Source(*d), Value::Text("-".into()));
                        set(&mut pending, Sig::Payload(*d), Value::Text("-".into()));
                    }
                }
            }
            i += 1;
        }
        let changed: Vec<_> = pending.into_iter().filter(|(sig, v)| current.get(sig) != Some(v)).collect();
        if changed.is_empty() {
            continue;
        }
        if time != written_time {
            writeln!(out, "#{time}")?;
            written_time = time;
        }
        for (sig, v) in changed {
            write_value(out, &ids[&sig], &v)?;
            current.insert(sig, v);
        }
    }
    Ok(())
}

fn write_value<W: Write>(out: &mut W, (id, width): &(String, u32), v: &Value) -> std::io::Result<()> {
    match v {
        Value::Text(t) => {
            let t: String = t.chars().map(|c| if c.is_ascii_graphic() { c } else { '_' }).collect();
            writeln!(out, "s{t} {id}")
        }
        Value::Bits(b) if *width == 1 => writeln!(out, "{}{id}", b & 1),
        Value::Bits(b) => writeln!(out, "b{b:b} {id}"),
    }
}

/// Most records [`trace_to_vcd`] converts. VCD lists value changes in time order, and TLPs
/// of the two directions overlap and are recorded out of order, so the converter sorts every
/// change in memory: about 600 bytes a record (measured: 607 MB for a million records). This
/// keeps that near 1.3 GB, a 64 MiB trace of 2,097,152 records, whose VCD (about 180 MB) is
/// already more than a waveform viewer shows comfortably.
pub const MAX_VCD_RECORDS: u64 = 1 << 21;

/// Converts a whole trace; `$date` is the trace's `created_utc`. A trace of more than
/// [`MAX_VCD_RECORDS`] records is refused before any is read.
pub fn trace_to_vcd<R: Read + Seek, W: Write>(reader: TraceReader<R>, out: W) -> Result<u64, TraceError> {
    let records = reader.record_count() + u64::from(reader.footer_record().is_some());
    if records > MAX_VCD_RECORDS {
        return Err(TraceError::TooManyRecords {
            offset: reader.offset_of(MAX_VCD_RECORDS),
            records,
            limit: MAX_VCD_RECORDS,
            what: "VCD conversion",
            why: "it sorts every signal change in memory, about 600 bytes a record",
        });
    }
    let header = reader.header().clone();
    let footer = reader.footer_record().copied();
    let mut records = reader.read_all()?;
    records.extend(footer);
    let mut comment = String::new();
    if let Some(l) = &header.link {
        comment.push_str(&format!("Link gen{} x{}, MPS {}, MRRS {}. ", l.generation, l.lanes, l.mps, l.mrrs));
    }
    if header.simulated {
        comment.push_str("Simulated card. ");
    }
    let opts = VcdOptions {
        clock_hz: header.card.clock_hz,
        date: if header.created_utc.is_empty() { "unknown".into() } else { header.created_utc.clone() },
        comment,
        names: crate::names::Bar0Names::from_header(&header),
    };
    write_vcd(out, &records, &opts).map_err(|e| TraceError::io(0, "writing VCD", e))?;
    Ok(records.len() as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timescale_follows_the_clock() {
        let t = Timescale::for_clock(125_000_000);
        assert_eq!((t.unit, t.units_per_cycle), ("1ns", Some(8)));
        let t = Timescale::for_clock(156_250_000);
        assert_eq!((t.unit, t.units_per_cycle), ("100ps", Some(64)));
        let t = Timescale::for_clock(100_000_000);
        assert_eq!((t.unit, t.units_per_cycle), ("10ns", Some(1)));
        let t = Timescale::for_clock(1);
        assert_eq!((t.unit, t.units_per_cycle), ("1s", Some(1)));
        let t = Timescale::for_clock(133_333_333);
        assert_eq!((t.unit, t.units_per_cycle), ("1ps", None));
        assert_eq!(t.time(1), 7500);
    }

    #[test]
    fn id_codes_are_unique_and_printable() {
        let codes: Vec<String> = (0..10_000).map(id_code).collect();
        let set: std::collections::HashSet<_> = codes.iter().collect();
        assert_eq!(set.len(), codes.len());
        assert!(codes.iter().all(|c| c.chars().all(|ch| ('!'..='~').contains(&ch))));
    }
}
