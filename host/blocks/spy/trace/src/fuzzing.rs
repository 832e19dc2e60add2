//! The work a fuzzer (fuzz/fuzz_targets/read_trace.rs) and the bounded property test
//! (tests/fuzz.rs) do on arbitrary bytes: read them as a trace and, when that works, push
//! every record through every converter. Must never panic.

use crate::csv::csv_row;
use crate::gaps::GapDetector;
use crate::log::log_line;
use crate::record::Record;
use crate::vcd::{write_vcd, VcdOptions};
use crate::{TraceError, TraceReader, RECORD_SIZE};

/// At most this many records go through the VCD converter (it sorts in memory).
const VCD_LIMIT: usize = 4096;

/// Reads `data` as a trace and converts what it reads; returns the reader's verdict.
pub fn read_everything(data: &[u8]) -> Result<u64, TraceError> {
    // Any 32 bytes decode or fail cleanly as one record.
    for chunk in data.chunks_exact(RECORD_SIZE).take(64) {
        let mut bytes = [0u8; RECORD_SIZE];
        bytes.copy_from_slice(chunk);
        if let Ok(r) = Record::from_bytes(&bytes) {
            let _ = log_line(&r, None, 1);
        }
    }

    let reader = TraceReader::from_bytes(data.to_vec())?;
    let clock_hz = reader.clock_hz();
    let footer = reader.footer_record().copied();
    let _ = reader.header().to_json();
    let mut records: Vec<Record> = Vec::new();
    let mut gaps = GapDetector::new();
    let mut previous: Option<Record> = None;
    let mut count = 0u64;
    for record in reader {
        let record = record?;
        let _ = log_line(&record, previous.as_ref(), clock_hz);
        let _ = csv_row(&record, clock_hz);
        if let Some(gap) = gaps.push(record.sequence) {
            let _ = gap.to_string();
        }
        if records.len() < VCD_LIMIT {
            records.push(record);
        }
        previous = Some(record);
        count += 1;
    }
    if let Some(f) = footer {
        let _ = log_line(&f, previous.as_ref(), clock_hz);
        let _ = csv_row(&f, clock_hz);
        gaps.push(f.sequence);
        records.push(f);
    }
    let opts = VcdOptions { clock_hz, date: String::new(), comment: String::new(), names: None };
    let _ = write_vcd(std::io::sink(), &records, &opts);
    // Entries (payload folding), the log's time sorter and the pcapng writer on what was read.
    let plain: Vec<Record> = records.iter().filter(|r| !r.is_footer()).copied().collect();
    let mut sorter = crate::log::TimeSorter::new();
    for info in crate::entry::entries_with_info(&plain, footer.map(|f| f.sequence)) {
        let _ = crate::log::log_entry_line(&info, None, clock_hz, None);
        let _ = crate::pcapng::packet(&info, None);
        let _ = sorter.push(info);
    }
    let _ = sorter.finish();
    if let Ok(reader) = TraceReader::from_bytes(data.to_vec()) {
        let _ = crate::pcapng::trace_to_pcapng(reader, std::io::sink());
    }
    Ok(count)
}
