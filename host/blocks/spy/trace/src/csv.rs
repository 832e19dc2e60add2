//! CSV: one row per entry (a record, with the payload records that follow a TLP folded into
//! its row: [`crate::entry`]), the footer's row last, a header row with [`CSV_COLUMNS`].
//!
//! Identifiers, addresses and byte enables are hexadecimal with `0x`; everything else is
//! decimal. Times are given in card cycles and in ns (three decimals, exact). Cells that
//! do not apply to a record's kind are empty. The last two columns came last so that readers
//! of the older columns by position keep working: `register` names the BAR0 register a host
//! request hits (`spy.wr_index`), `source` the block a card read or its completion belongs to
//! by tag (`generator`, `rt_loop`, the slot's DUT: [`crate::names`]); both are empty when the
//! trace records no BAR0 address. For an MSI, `source` names the MSI sources that were
//! pending (`generator`). Record format 2 added the columns after `source`: `lost_before`
//! (records lost in a sequence gap right before the row's record), the captured payload
//! (`payload`: hex bytes in wire order, whole DWs as captured; `payload_captured_bytes`;
//! `payload_complete`), the MSI's `msi_vector` and `msi_sources` (bit mask; its wait is in
//! `wait_cycles`) and the footer's `trigger_sequence`.

use std::io::{Read, Seek, Write};

use crate::entry::{EntryBuilder, EntryInfo};
use crate::error::TraceError;
use crate::file::TraceReader;
use crate::names::Bar0Names;
use crate::record::{Body, Record};
use crate::time::format_ns;

/// The columns, in order.
pub const CSV_COLUMNS: &[&str] = &[
    "sequence",
    "kind",
    "direction",
    "timestamp_cycles",
    "timestamp_ns",
    "fmt",
    "type",
    "requester_id",
    "tag",
    "address",
    "first_be",
    "last_be",
    "length_dw",
    "payload_bytes",
    "completer_id",
    "status",
    "byte_count",
    "lower_address",
    "bcm",
    "matched",
    "latency_cycles",
    "latency_ns",
    "split_index",
    "last",
    "duration_cycles",
    "duration_ns",
    "wait_cycles",
    "gap_cycles",
    "tc",
    "attr",
    "ep",
    "own",
    "records_created",
    "records_lost",
    "register",
    "source",
    "lost_before",
    "payload_captured_bytes",
    "payload_complete",
    "payload",
    "msi_vector",
    "msi_sources",
    "trigger_sequence",
];

fn col(name: &str) -> usize {
    CSV_COLUMNS.iter().position(|c| *c == name).unwrap_or(0)
}

/// The cells of `record`'s row, one per [`CSV_COLUMNS`] entry.
pub fn csv_row(record: &Record, clock_hz: u64) -> Vec<String> {
    csv_row_named(record, clock_hz, None)
}

/// [`csv_row`] with the `register` cell filled from `names` (BAR0's address).
pub fn csv_row_named(record: &Record, clock_hz: u64, names: Option<&Bar0Names>) -> Vec<String> {
    let mut row = vec![String::new(); CSV_COLUMNS.len()];
    let mut set = |name: &str, value: String| row[col(name)] = value;
    set("sequence", record.sequence.to_string());
    set("kind", record.kind_name().to_owned());
    if let Some(d) = record.direction() {
        set("direction", d.name().to_owned());
    }
    if let Some(ts) = record.timestamp() {
        set("timestamp_cycles", ts.to_string());
        set("timestamp_ns", format_ns(ts, clock_hz));
    }
    if let Some(rid) = record.requester_id() {
        set("requester_id", format!("0x{rid:04x}"));
    }
    if let Some(tag) = record.tag() {
        set("tag", format!("0x{tag:02x}"));
    }
    let bool_cell = |b: bool| if b { "1" } else { "0" }.to_owned();
    let timing = |t: &crate::record::Timing, set: &mut dyn FnMut(&str, String)| {
        set("duration_cycles", t.duration.to_string());
        set("duration_ns", format_ns(u64::from(t.duration), clock_hz));
        set("wait_cycles", t.wait_cycles.to_string());
        set("gap_cycles", t.gap_cycles.to_string());
    };
    if let Some(name) = names.and_then(|n| n.name(record)) {
        set("register", name);
    }
    if let Some(source) = names.and_then(|n| n.source(record)) {
        set("source", source);
    }
    match &record.body {
        Body::Request(r) => {
            timing(&r.timing, &mut set);
            set("fmt", r.fmt.to_string());
            set("type", r.tlp_type.to_string());
            set("address", format!("0x{:x}", r.address));
            set("first_be", format!("0x{:x}", r.first_be));
            set("last_be", format!("0x{:x}", r.last_be));
            set("length_dw", r.length_dw.to_string());
            set("payload_bytes", r.payload_bytes().to_string());
            set("tc", r.tc.to_string());
            set("attr", r.attr.to_string());
            set("ep", bool_cell(r.ep));
            set("own", bool_cell(r.own));
        }
        Body::Completion(c) => {
            timing(&c.timing, &mut set);
            set("fmt", c.fmt.to_string());
            set("type", c.tlp_type.to_string());
            // A completion without data has no Length (the field is reserved): 0, not 1024.
            set("length_dw", if c.with_data() { c.length_dw.to_string() } else { "0".to_owned() });
            set("payload_bytes", c.payload_bytes().to_string());
            set("completer_id", format!("0x{:04x}", c.completer_id));
            set("status", c.status.name().to_owned());
            set("byte_count", c.byte_count.to_string());
            set("lower_address", format!("0x{:02x}", c.lower_address));
            set("bcm", bool_cell(c.bcm));
            set("matched", bool_cell(c.latency.is_some()));
            if let Some(l) = c.latency {
                set("latency_cycles", l.to_string());
                set("latency_ns", format_ns(u64::from(l), clock_hz));
            }
            set("split_index", c.split_index.to_string());
            set("last", bool_cell(c.last));
            set("tc", c.tc.to_string());
            set("attr", c.attr.to_string());
            set("ep", bool_cell(c.ep));
            set("own", bool_cell(c.own));
        }
        Body::Timeout(t) => {
            set("latency_cycles", t.waited.to_string());
            set("latency_ns", format_ns(u64::from(t.waited), clock_hz));
            set("own", bool_cell(t.own));
        }
        Body::Footer(ft) => {
            set("records_created", ft.records_created.to_string());
            set("records_lost", ft.records_lost.to_string());
            if let Some(seq) = ft.trigger_sequence {
                set("trigger_sequence", seq.to_string());
            }
        }
        Body::Msi(m) => {
            set("wait_cycles", m.wait_cycles.to_string());
            set("msi_vector", m.vector.to_string());
            set("msi_sources", format!("0x{:x}", m.sources));
            set("source", crate::names::msi_sources_text(m.sources));
        }
        Body::Payload(p) => {
            let bytes = p.bytes();
            set("payload_captured_bytes", bytes.len().to_string());
            set("payload", hex_bytes(&bytes));
        }
    }
    row
}

/// Bytes as lowercase hex without separators (`a5a5000f`).
pub fn hex_bytes(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The row of an entry: its record's cells, the loss before it and its payload.
pub fn csv_entry_row(info: &EntryInfo, clock_hz: u64, names: Option<&Bar0Names>) -> Vec<String> {
    let mut row = csv_row_named(&info.entry.record, clock_hz, names);
    row[col("lost_before")] = info.lost_before.to_string();
    if matches!(info.entry.record.body, Body::Request(_) | Body::Completion(_) | Body::Payload(_)) {
        row[col("payload_captured_bytes")] = info.entry.payload.len().to_string();
        row[col("payload_complete")] = if info.entry.payload_complete { "1" } else { "0" }.to_owned();
        row[col("payload")] = hex_bytes(&info.entry.payload);
    }
    row
}

/// Streams records as CSV rows. No cell ever needs quoting: all are numbers, hex or
/// fixed names (register names are identifiers, `.`, `+` and hex).
pub struct CsvWriter<W: Write> {
    out: W,
    clock_hz: u64,
    names: Option<Bar0Names>,
}

impl<W: Write> CsvWriter<W> {
    /// Writes the header row.
    pub fn new(mut out: W, clock_hz: u64) -> std::io::Result<Self> {
        writeln!(out, "{}", CSV_COLUMNS.join(","))?;
        Ok(CsvWriter { out, clock_hz, names: None })
    }

    /// Names BAR0 registers in the `register` column (BAR0 at `names.base`).
    pub fn with_names(mut self, names: Option<Bar0Names>) -> Self {
        self.names = names;
        self
    }

    /// A row for one record as it is (no payload folding: see [`CsvWriter::write_entry`]).
    pub fn write(&mut self, record: &Record) -> std::io::Result<()> {
        writeln!(self.out, "{}", csv_row_named(record, self.clock_hz, self.names.as_ref()).join(","))
    }

    /// A row for one entry (a TLP with its payload).
    pub fn write_entry(&mut self, info: &EntryInfo) -> std::io::Result<()> {
        writeln!(self.out, "{}", csv_entry_row(info, self.clock_hz, self.names.as_ref()).join(","))
    }

    pub fn into_inner(mut self) -> std::io::Result<W> {
        self.out.flush()?;
        Ok(self.out)
    }
}

/// Converts a whole trace, one row per entry (footer row last, when present); returns the
/// rows written. It streams: a trace of any length converts in constant memory.
pub fn trace_to_csv<R: Read + Seek, W: Write>(reader: TraceReader<R>, out: W) -> Result<u64, TraceError> {
    let io = |e| TraceError::io(0, "writing CSV", e);
    let footer = reader.footer_record().copied();
    let names = Bar0Names::from_header(reader.header());
    let mut csv = CsvWriter::new(out, reader.clock_hz()).map_err(io)?.with_names(names);
    let mut rows = 0;
    let mut entries = EntryBuilder::new();
    for record in reader {
        if let Some(info) = entries.push(record?) {
            csv.write_entry(&info).map_err(io)?;
            rows += 1;
        }
    }
    if let Some(info) = entries.finish(footer.map(|f| f.sequence)) {
        csv.write_entry(&info).map_err(io)?;
        rows += 1;
    }
    if let Some(footer) = footer {
        let lost = entries.end_gap(footer.sequence);
        let info = EntryInfo {
            entry: crate::entry::Entry { record: footer, payload: Vec::new(), payload_complete: true },
            lost_before: lost,
            payload_records: 0,
        };
        csv.write_entry(&info).map_err(io)?;
        rows += 1;
    }
    csv.into_inner().map_err(io)?;
    Ok(rows)
}
