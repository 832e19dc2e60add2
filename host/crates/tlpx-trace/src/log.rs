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
//! card cycles. With [`log_line_named`], a host request into BAR0 ends with the register
//! it hits, and a card read (or its completion) with the block its tag belongs to
//! (`[generator]`, `[rt_loop]`, `[rule30]`: [`crate::names`]):
//!
//! ```text
//!      1.200 us  down MWr32  0xf000385c len   1 tag 0x00  dur  0  lat   -       +0.128 us  spy.wr_index
//! ```

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
    let ts = record.timestamp().unwrap_or(0);
    let time = format_us_ps(cycles_to_ps(ts, clock_hz) as i128, false);
    // Blank (same width) for the first line, so the columns stay aligned.
    let delta = match previous.and_then(Record::timestamp) {
        Some(prev) => {
            let now = cycles_to_ps(ts, clock_hz) as i128;
            let before = cycles_to_ps(prev, clock_hz) as i128;
            format!("{:>11} us", format_us_ps(now - before, true))
        }
        None => " ".repeat(14),
    };
    let dir = record.direction().map(|d| d.name()).unwrap_or("?");
    // The block a card request (and its completion) belongs to, by tag: `  [generator]`.
    let source = names.and_then(|n| n.source(record)).map_or_else(String::new, |s| format!("  [{s}]"));
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
                c.length_dw.to_string(),
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
            "  completion timeout".to_owned(),
        ),
        Body::Footer(ft) => {
            return format!(
                "{:>12}  end of capture: {} records created, {} lost (next seq {})",
                "", ft.records_created, ft.records_lost, record.sequence
            )
        }
    };
    let tag = record.tag().unwrap_or(0);
    format!(
        "{time:>9} us  {dir:<4} {kind:<6} {target} len {len:>3} tag 0x{tag:02x}  dur {dur:>2}  lat {lat:>3}  {delta}{suffix}",
        kind = record.kind_name(),
    )
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
        // The card's own write to host memory at the same address is not a register.
        let up = build::mem_write(0, Direction::Up, 150, 0x0100, 0, a, 1);
        assert_eq!(log_line_named(&up, None, 125_000_000, Some(&names)), log_line(&up, None, 125_000_000));
    }
}
