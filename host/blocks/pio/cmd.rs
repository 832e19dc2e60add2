//! `tlpx pio`: host-driven reads and writes of the card's PIO window (BAR0 + 0x10000).
//!
//! For each access width (1, 2, 4, 8 bytes as single loads/stores; 16, 32, 64 as block
//! accesses, one TLP where the backend can):
//! - a burst of `--count` writes at consecutive addresses: host-side time per write (wall
//!   clock), and the throughput the **card** measured between its first and last arriving
//!   write, with the histogram of TLP sizes it saw (how the host cut or merged the stores);
//! - `--count` reads of the same addresses, each checked against what was written: host-side
//!   latency per read, and card cycles per read from the card's counter over the run.
//!
//! Mappings: only uncached BAR accesses exist today. A write-combining mapping needs a
//! backend that maps BAR0 into this process (vfio); the simulator cannot have one, and the
//! result says so rather than pretending.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

use clap::Args;
use tlpx_device::pio::{self, WINDOW_OFFSET, WINDOW_SIZE};

/// The document's types are tlpx-results'.
pub use tlpx_results::pio::{Body, PioPlan, PioPoint, SizeBucket};

use crate::args::{check_optional_output, whole, whole_as};
use crate::measure::pio::{header_line, measure, point_line, sim_limits, times_line, MAPPING_NOTE, MAX_COUNT, WIDTHS};
use crate::progress::{self, Progress};
use crate::results::ResultDoc;
use crate::session::Session;
use crate::sizes::parse_size_list;

#[derive(Debug, Args)]
pub struct Cmd {
    /// Access widths in bytes: 1, 2, 4, 8, 16, 32, 64 (a list).
    #[arg(long, default_value = "1,2,4,8,16,32,64", allow_hyphen_values = true)]
    pub widths: String,
    /// Accesses per width and direction (1..=1000000).
    #[arg(long, default_value_t = 1000, value_parser = whole(1, MAX_COUNT), allow_negative_numbers = true)]
    pub count: u32,
    /// First window offset used, a multiple of 64 below 65536.
    #[arg(
        long,
        default_value_t = 0,
        value_parser = whole_as(0u32, (WINDOW_SIZE - 64) as u32, "a multiple of 64 in 0..=65472"),
        allow_negative_numbers = true
    )]
    pub offset: u32,
    /// Card cycles the window waits before answering each read (set for the run, then 0).
    #[arg(long, value_name = "CYCLES", value_parser = whole(0, pio::MAX_READ_DELAY), allow_negative_numbers = true)]
    pub read_delay: Option<u32>,
    /// Also write the result document (JSON) to this file.
    #[arg(long, value_name = "FILE.json")]
    pub output: Option<PathBuf>,
}

/// The checked arguments (the plan a `pio` document records).
pub fn parse_plan(widths: &str, count: u32, offset: u32, read_delay: Option<u32>) -> Result<PioPlan, String> {
    let widths = parse_size_list("--widths", widths, "1, 2, 4, 8, 16, 32 or 64 bytes")?
        .into_iter()
        .map(|w| {
            u32::try_from(w)
                .ok()
                .filter(|w| WIDTHS.contains(w))
                .ok_or_else(|| format!("--widths: {w} is not an access width: use 1, 2, 4, 8, 16, 32 or 64 bytes"))
        })
        .collect::<Result<Vec<u32>, String>>()?;
    if !(1..=MAX_COUNT).contains(&count) {
        return Err(format!("--count must be 1..={MAX_COUNT} accesses, not {count}"));
    }
    if !offset.is_multiple_of(64) || u64::from(offset) >= WINDOW_SIZE {
        return Err(format!("--offset must be a multiple of 64 below {WINDOW_SIZE} (the window's size), not {offset}"));
    }
    Ok(PioPlan { widths, count, offset, read_delay_cycles: read_delay })
}

pub fn run(cmd: &Cmd, device: &str, json: bool) -> anyhow::Result<ExitCode> {
    let started = Instant::now();
    let plan = parse_plan(&cmd.widths, cmd.count, cmd.offset, cmd.read_delay).map_err(anyhow::Error::msg)?;
    check_optional_output("--output", cmd.output.as_deref())?;
    let mut session = Session::open(device)?;
    if session.card.device().description().bar_sizes.first().copied().flatten().is_some_and(|s| s < WINDOW_OFFSET + WINDOW_SIZE) {
        return Err(crate::exit::card_failure(format!(
            "BAR0 of this card is smaller than the PIO window's end ({:#x}): is the gateware current?",
            WINDOW_OFFSET + WINDOW_SIZE
        )));
    }
    progress::install_stop_handler();
    if !json {
        crate::outln!("{}", session.describe());
        crate::outln!("mapping: {MAPPING_NOTE}");
        if let Some(d) = plan.read_delay_cycles {
            crate::outln!("read delay: {d} card cycles");
        }
        crate::outln!("{}", times_line(session.environment.simulated));
        crate::outln!("{}", header_line(session.environment.simulated));
    }
    let progress = Progress::new(plan.widths.len() as u64, json);
    let (points, interrupted) = measure(&mut session, &plan, &progress, |p| {
        if !json {
            progress.println(&point_line(p));
        }
    })?;
    progress.finish();
    let failed = points.iter().any(PioPoint::failed);
    let limits = if session.environment.simulated { sim_limits(&points) } else { Vec::new() };
    if !json {
        for l in &limits {
            crate::outln!("note: {}", l.note());
        }
    }
    let mut notes = session.notes.clone();
    notes.push(format!("mapping: {MAPPING_NOTE}"));
    let mut doc = ResultDoc::new(
        "pio",
        plan,
        session.environment.clone(),
        session.link.clone(),
        None,
        Body { mapping: MAPPING_NOTE, points },
        started.elapsed().as_secs_f64(),
        notes,
    );
    if interrupted {
        doc.stopped_at(doc.body.points.len(), doc.parameters.widths.len());
    }
    for l in limits {
        doc.add_sim_limit(l);
    }
    doc.emit(cmd.output.as_deref(), json, failed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn widths_are_checked() {
        let p = parse_plan("1,2,4,8,16,32,64", 10, 0, None).expect("valid");
        assert_eq!(p.widths, WIDTHS.to_vec());
        assert_eq!(parse_plan("1..64", 10, 0, None).expect("valid").widths, WIDTHS.to_vec());
        let e = parse_plan("3", 10, 0, None).expect_err("3 bytes");
        assert!(e.contains("--widths: 3") && e.contains("1, 2, 4, 8, 16, 32 or 64"), "{e}");
        assert!(parse_plan("128", 10, 0, None).is_err());
        assert!(parse_plan("4", 0, 0, None).is_err_and(|e| e.contains("--count")));
        assert!(parse_plan("4", 1, 32, None).is_err_and(|e| e.contains("--offset") && e.contains("32")));
        assert!(parse_plan("4", 1, 65536, None).is_err());
    }
}
