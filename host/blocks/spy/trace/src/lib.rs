//! The tlpx spy trace format (traces/FORMAT.md, record format versions 1 and 2).
//!
//! A trace is a 20-byte prefix, a self-describing JSON header, then the spy's 32-byte
//! records in capture order, and a footer record when the capture ended cleanly.
//!
//! - [`Record`] decodes and encodes one record; [`RawRecord`] gives raw access by field
//!   name, driven by the field table [`FIELDS`] (which also generates the header's
//!   `fields`).
//! - [`TraceWriter`] / [`TraceReader`] write and read files; every error is a
//!   [`TraceError`] naming the file offset and what was expected there.
//! - [`gaps`] reports lost records from sequence jumps; [`entries`] folds payload records
//!   into their TLP.
//! - [`pcapng`] exports a trace for Wireshark (with the dissector in wireshark/tlpx.lua).
//! - [`csv`], [`vcd`] and [`log`] convert records for spreadsheets, GTKWave and terminals.
//! - [`names`] names BAR0 addresses by register for all of them.
//! - [`golden`] compares a capture with a golden trace.
//!
//! ```
//! use tlpx_trace::{build, CardInfo, Direction, Footer, HeaderInfo, TraceReader, TraceWriter};
//!
//! let dir = tempfile::tempdir().unwrap();
//! let path = dir.path().join("demo.tlpx");
//! let info = HeaderInfo::new("example", CardInfo::new(125_000_000));
//! let mut w = TraceWriter::create(&path, &info).unwrap();
//! w.write(&build::mem_read(0, Direction::Up, 100, 0x0100, 1, 0x4000_1000, 32)).unwrap();
//! w.finish(1, Footer { records_created: 1, records_lost: 0, trigger_sequence: None }).unwrap();
//!
//! let r = TraceReader::open(&path).unwrap();
//! assert_eq!(r.footer().unwrap().records_created, 1);
//! let records = r.read_all().unwrap();
//! assert_eq!(records[0].kind_name(), "MRd32");
//! ```

pub mod csv;
pub mod entry;
mod error;
pub mod fields;
mod file;
#[doc(hidden)]
pub mod fuzzing;
pub mod gaps;
pub mod golden;
pub mod header;
pub mod log;
pub mod names;
pub mod pcapng;
pub mod record;
pub mod sample;
pub mod time;
pub mod vcd;

pub use entry::{entries, Entry, EntryBuilder, EntryInfo};
pub use error::TraceError;
pub use fields::{field, field_by_name, field_table, FieldDesc, FieldSpec, RawRecord, FIELDS, RECORD_SIZE};
pub use file::{TraceReader, TraceWriter};
pub use gaps::{gaps, Gap, GapDetector};
pub use header::{CaptureInfo, CardInfo, Header, HeaderInfo, LinkInfo, SlotRegister};
pub use log::{log_line, log_line_named, log_title};
pub use names::{bar0_name, Bar0Names};
pub use record::{build, Body, Completion, CplStatus, Direction, Footer, Msi, PayloadChunk, Record, Request, RequestKind, Timeout, Timing};
