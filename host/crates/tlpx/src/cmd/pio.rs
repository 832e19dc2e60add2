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

use anyhow::Context;
use clap::Args;
use serde::{Deserialize, Serialize};
use tlpx_device::card::Card;
use tlpx_device::generator::lowbias32;
use tlpx_device::pio::{self, PioStats, WINDOW_OFFSET, WINDOW_SIZE};
use tlpx_device::Width;
use tlpx_model::stats::Summary;

use crate::args::{check_optional_output, whole, whole_as};
use crate::output::{bytes, print_json};
use crate::progress::{self, Progress};
use crate::results::{self, ResultDoc, SimLimit};
use crate::session::Session;
use crate::sizes::parse_size_list;

/// Access widths the command knows.
pub const WIDTHS: [u32; 7] = [1, 2, 4, 8, 16, 32, 64];
/// Most accesses per width and direction.
pub const MAX_COUNT: u32 = 1_000_000;
/// What the result says about mappings on every backend this tlpx has.
pub const MAPPING_NOTE: &str = "uncached only (this backend has no write-combining mapping)";

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

/// The checked arguments.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct PioPlan {
    pub widths: Vec<u32>,
    pub count: u32,
    pub offset: u32,
    pub read_delay_cycles: Option<u32>,
}

impl PioPlan {
    pub fn parse(widths: &str, count: u32, offset: u32, read_delay: Option<u32>) -> Result<PioPlan, String> {
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
}

/// One histogram bucket as printed: TLP payload sizes in [low, 2 × low).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SizeBucket {
    pub low_bytes: u64,
    pub tlps: u64,
}

fn buckets(histogram: &[u64]) -> Vec<SizeBucket> {
    histogram.iter().enumerate().filter(|(_, n)| **n > 0).map(|(k, n)| SizeBucket { low_bytes: 1 << k, tlps: *n }).collect()
}

/// One width's figures.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct PioPoint {
    pub width: u32,
    pub accesses: u32,
    /// "uncached" (the only mapping this tlpx has).
    pub mapping: &'static str,
    /// The clock of the wall-time fields: "host_wall_time" (the CPU's loads and stores) or, on
    /// the simulator, "host_wall_time_of_sim_socket_round_trips" (messages to tlpx-sim).
    pub wall_clock: &'static str,
    /// Host-side time each write call took (a posted write: the cost of issuing it).
    pub write_wall_ns: Summary,
    /// Host-side time each read took (a round trip).
    pub read_wall_ns: Summary,
    /// Write payload bytes per second between the card's first and last arriving write.
    pub card_write_bytes_per_second: Option<f64>,
    /// Card cycles per write over the burst (counter read before, after a flushing read).
    pub card_cycles_per_write: f64,
    /// Card cycles per read over the reads (the card's counter before and after).
    pub card_cycles_per_read: f64,
    /// Read bytes per second of card time: width / card time per read.
    pub card_read_bytes_per_second: f64,
    /// Bytes per second of host wall time over the write burst and over the reads.
    pub host_write_bytes_per_second: f64,
    pub host_read_bytes_per_second: f64,
    pub write_stats: PioStats,
    pub read_stats: PioStats,
    pub write_tlp_sizes: Vec<SizeBucket>,
    pub read_tlp_sizes: Vec<SizeBucket>,
    /// Host stores per write TLP the card saw (>1: the host merged them; <1: it split them).
    pub accesses_per_write_tlp: Option<f64>,
    /// Reads whose data differed from what was written there.
    pub readback_mismatches: u64,
}

impl PioPoint {
    pub fn failed(&self) -> bool {
        self.readback_mismatches > 0 || self.write_stats.write_bytes != u64::from(self.accesses) * u64::from(self.width)
    }
}

/// The byte the test writes at window offset `at` for access width `width`.
fn pattern_byte(at: u64, width: u32) -> u8 {
    (lowbias32((at >> 2) as u32 ^ (width << 20) ^ 0x7c01) >> ((at & 3) * 8)) as u8
}

/// Offsets of the `count` accesses of `width` bytes: consecutive from `offset`, wrapping
/// inside the window.
fn access_offsets(offset: u32, width: u32, count: u32) -> impl Iterator<Item = u64> {
    let span = (WINDOW_SIZE - u64::from(offset)) / u64::from(width) * u64::from(width);
    (0..u64::from(count)).map(move |i| u64::from(offset) + (i * u64::from(width)) % span)
}

fn wall_ns(t: Instant) -> f64 {
    t.elapsed().as_secs_f64() * 1e9
}

fn write_access(card: &mut Card, at: u64, width: u32) -> anyhow::Result<()> {
    let data: Vec<u8> = (0..u64::from(width)).map(|i| pattern_byte(at + i, width)).collect();
    let bar = tlpx_regs::BAR;
    let dev = card.device();
    if width <= 8 {
        let mut v = [0u8; 8];
        v[..data.len()].copy_from_slice(&data);
        dev.bar_write(bar, WINDOW_OFFSET + at, Width::from_bits(width * 8)?, u64::from_le_bytes(v))?;
    } else {
        dev.bar_write_block(bar, WINDOW_OFFSET + at, &data)?;
    }
    Ok(())
}

fn read_access(card: &mut Card, at: u64, width: u32) -> anyhow::Result<Vec<u8>> {
    let bar = tlpx_regs::BAR;
    let dev = card.device();
    if width <= 8 {
        let v = dev.bar_read(bar, WINDOW_OFFSET + at, Width::from_bits(width * 8)?)?;
        Ok(v.to_le_bytes()[..width as usize].to_vec())
    } else {
        Ok(dev.bar_read_block(bar, WINDOW_OFFSET + at, width as usize)?)
    }
}

/// Measures one width.
pub fn measure_width(session: &mut Session, width: u32, count: u32, offset: u32) -> anyhow::Result<PioPoint> {
    let clock = f64::from(session.clock_hz);
    let wall_clock = if session.environment.simulated { "host_wall_time_of_sim_socket_round_trips" } else { "host_wall_time" };
    let card = &mut session.card;
    // Writes: a burst, then one read to flush the posted writes before reading the counters.
    pio::reset(card).context("clearing the PIO window's counters")?;
    let mut write_ns = Vec::with_capacity(count as usize);
    let c0 = card.cycles()?;
    let t_burst = Instant::now();
    for at in access_offsets(offset, width, count) {
        let t = Instant::now();
        write_access(card, at, width)?;
        write_ns.push(wall_ns(t));
    }
    let burst_wall = t_burst.elapsed().as_secs_f64();
    read_access(card, u64::from(offset), 4)?;
    let c1 = card.cycles()?;
    let write_stats = pio::stats(card).context("reading the PIO window's counters")?;

    // Reads of the same addresses, checked against what the burst left there.
    pio::reset(card)?;
    let mut expected = vec![None::<u8>; WINDOW_SIZE as usize];
    for at in access_offsets(offset, width, count) {
        for i in 0..u64::from(width) {
            expected[(at + i) as usize] = Some(pattern_byte(at + i, width));
        }
    }
    let mut read_ns = Vec::with_capacity(count as usize);
    let mut mismatches = 0;
    let c2 = card.cycles()?;
    let t_reads = Instant::now();
    for at in access_offsets(offset, width, count) {
        let t = Instant::now();
        let got = read_access(card, at, width)?;
        read_ns.push(wall_ns(t));
        if got.iter().enumerate().any(|(i, b)| expected[at as usize + i].is_some_and(|e| e != *b)) {
            mismatches += 1;
        }
    }
    let reads_wall = t_reads.elapsed().as_secs_f64();
    let c3 = card.cycles()?;
    let read_stats = pio::stats(card)?;

    let total = f64::from(count) * f64::from(width);
    let span = write_stats.last_write_cycle.saturating_sub(write_stats.first_write_cycle);
    let card_write_bytes_per_second = (write_stats.write_tlps >= 2 && span > 0).then(|| {
        // Bytes that arrived after the first TLP, over the time from first to last.
        let per_tlp = write_stats.write_bytes as f64 / write_stats.write_tlps as f64;
        (write_stats.write_bytes as f64 - per_tlp) / (span as f64 / clock)
    });
    // Each counter read is itself one read round trip; the flush read one more.
    let cycles_per_read = c3.saturating_sub(c2) as f64 / (f64::from(count) + 1.0);
    let summary = |v: &[f64]| Summary::of(v).context("no samples");
    Ok(PioPoint {
        width,
        accesses: count,
        mapping: "uncached",
        wall_clock,
        write_wall_ns: summary(&write_ns)?,
        read_wall_ns: summary(&read_ns)?,
        card_write_bytes_per_second,
        card_cycles_per_write: c1.saturating_sub(c0) as f64 / f64::from(count),
        card_cycles_per_read: cycles_per_read,
        card_read_bytes_per_second: if cycles_per_read > 0.0 { f64::from(width) / (cycles_per_read / clock) } else { 0.0 },
        host_write_bytes_per_second: total / burst_wall.max(1e-12),
        host_read_bytes_per_second: total / reads_wall.max(1e-12),
        write_tlp_sizes: buckets(&write_stats.write_size_histogram),
        read_tlp_sizes: buckets(&read_stats.read_size_histogram),
        accesses_per_write_tlp: (write_stats.write_tlps > 0).then(|| f64::from(count) / write_stats.write_tlps as f64),
        write_stats,
        read_stats,
        readback_mismatches: mismatches,
    })
}

fn sizes_text(b: &[SizeBucket]) -> String {
    if b.is_empty() {
        return "-".into();
    }
    b.iter().map(|s| format!("{}x{}", bytes(s.low_bytes), s.tlps)).collect::<Vec<_>>().join(" ")
}

/// The column header; on the simulator the wall-time columns are socket round trips (`SOCK`).
pub fn header_line(simulated: bool) -> String {
    let (w, r) = if simulated { ("SOCK WR ns med/p99", "SOCK RD ns med/p99") } else { ("WRITE ns med/p99", "READ ns med/p99") };
    format!(
        "{:>5} {:>18} {:>18} {:>10} {:>10} {:>12} {:>12}  {:<20} READBACK",
        "WIDTH", w, r, "CYC/WRITE", "CYC/READ", "WR MB/s card", "RD MB/s card", "WRITE TLP SIZES"
    )
}

/// The line above the table that names the clock of every column.
pub fn times_line(simulated: bool) -> String {
    if simulated {
        "times: SOCK WR/RD ns are host wall time per call, i.e. this process's message to tlpx-sim over its Unix socket \
         (a read waits for the simulated card's answer), not a PCIe load or store; CYC/WRITE, CYC/READ and MB/s card are \
         card time (simulated): the card's PIO window, not a host's PIO"
            .to_string()
    } else {
        "times: WRITE/READ ns are host wall time per access (a store: the cost of issuing it; a load: its round trip); \
         CYC and MB/s card are card time"
            .to_string()
    }
}

/// On the simulator: what the PIO figures are (the card's window and socket round trips) and
/// that write combining cannot be tried. `points` give the window's measured cost.
pub fn sim_limits(points: &[PioPoint]) -> Vec<SimLimit> {
    let widest = points.iter().max_by_key(|p| p.width);
    let cost = widest.map_or(String::new(), |p| {
        format!(
            " (here {:.0} card cycles per {} store, set by the card's request path, not the link)",
            p.card_cycles_per_write,
            bytes(u64::from(p.width))
        )
    });
    vec![
        SimLimit::new(
            "pio_is_the_card_window",
            &[
                "points[].write_wall_ns",
                "points[].read_wall_ns",
                "points[].host_write_bytes_per_second",
                "points[].host_read_bytes_per_second",
                "points[].card_write_bytes_per_second",
                "table[pio_write, pio_read]",
            ],
            format!(
                "PIO figures are the card's PIO window, not a host's PIO: tlpx-sim has no CPU, so no store buffer, \
                 write combining or root-port queue; card MB/s is the window's write path{cost}, and the host wall times are \
                 this process's round trips to tlpx-sim over its Unix socket; on a real host they are the CPU's loads and stores"
            ),
        ),
        SimLimit::new(
            "pio_write_combining",
            &["mapping", "points[].write_tlp_sizes"],
            "write combining cannot be tried: tlpx-sim has no CPU and no write-combining mapping; every block access of \
             16..64 bytes is sent as one TLP, which is what a write-combining burst gives on a real host; whether a real CPU \
             merges or splits stores shows only on hardware",
        ),
    ]
}

pub fn point_line(p: &PioPoint) -> String {
    format!(
        "{:>5} {:>18} {:>18} {:>10.1} {:>10.1} {:>12} {:>12.1}  {:<20} {}",
        bytes(u64::from(p.width)),
        format!("{:.0}/{:.0}", p.write_wall_ns.median, p.write_wall_ns.p99),
        format!("{:.0}/{:.0}", p.read_wall_ns.median, p.read_wall_ns.p99),
        p.card_cycles_per_write,
        p.card_cycles_per_read,
        p.card_write_bytes_per_second.map_or("-".into(), |b| format!("{:.1}", b / 1e6)),
        p.card_read_bytes_per_second / 1e6,
        sizes_text(&p.write_tlp_sizes),
        if p.readback_mismatches == 0 { "ok".to_string() } else { format!("{} BAD", p.readback_mismatches) }
    )
}

/// Runs every width of `plan` (the read delay set for the run and cleared after).
pub fn measure(
    session: &mut Session,
    plan: &PioPlan,
    progress: &Progress,
    mut each: impl FnMut(&PioPoint),
) -> anyhow::Result<(Vec<PioPoint>, bool)> {
    if let Some(d) = plan.read_delay_cycles {
        pio::set_read_delay(&mut session.card, d).context("setting the PIO window's read delay")?;
    }
    let mut points = Vec::new();
    let mut interrupted = false;
    let mut outcome = Ok(());
    for &w in &plan.widths {
        if progress::stop_requested() {
            interrupted = true;
            break;
        }
        progress.start(&format!("PIO {}", bytes(u64::from(w))));
        match measure_width(session, w, plan.count, plan.offset) {
            Ok(p) => {
                each(&p);
                points.push(p);
                progress.done_one();
            }
            Err(e) if progress::is_interrupt(&e) => {
                interrupted = true;
                break;
            }
            Err(e) => {
                outcome = Err(e);
                break;
            }
        }
    }
    let cleared = match plan.read_delay_cycles {
        Some(_) => pio::set_read_delay(&mut session.card, 0).context("clearing the PIO window's read delay"),
        None => Ok(()),
    };
    outcome?;
    cleared?;
    Ok((points, interrupted))
}

#[derive(Debug, Serialize, Deserialize)]
pub struct Body {
    pub mapping: &'static str,
    pub points: Vec<PioPoint>,
}

pub fn run(cmd: &Cmd, device: &str, json: bool) -> anyhow::Result<ExitCode> {
    let started = Instant::now();
    let plan = PioPlan::parse(&cmd.widths, cmd.count, cmd.offset, cmd.read_delay).map_err(anyhow::Error::msg)?;
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
    if let Some(path) = &cmd.output {
        results::write_json(path, &doc)?;
    }
    if json {
        print_json(&doc)?;
    }
    Ok(if interrupted {
        ExitCode::from(progress::INTERRUPTED_EXIT)
    } else if failed {
        ExitCode::from(crate::exit::CHECK_FAILED)
    } else {
        ExitCode::SUCCESS
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn widths_are_checked() {
        let p = PioPlan::parse("1,2,4,8,16,32,64", 10, 0, None).expect("valid");
        assert_eq!(p.widths, WIDTHS.to_vec());
        assert_eq!(PioPlan::parse("1..64", 10, 0, None).expect("valid").widths, WIDTHS.to_vec());
        let e = PioPlan::parse("3", 10, 0, None).expect_err("3 bytes");
        assert!(e.contains("--widths: 3") && e.contains("1, 2, 4, 8, 16, 32 or 64"), "{e}");
        assert!(PioPlan::parse("128", 10, 0, None).is_err());
        assert!(PioPlan::parse("4", 0, 0, None).is_err_and(|e| e.contains("--count")));
        assert!(PioPlan::parse("4", 1, 32, None).is_err_and(|e| e.contains("--offset") && e.contains("32")));
        assert!(PioPlan::parse("4", 1, 65536, None).is_err());
    }

    #[test]
    fn accesses_wrap_inside_the_window_and_stay_aligned() {
        let offsets: Vec<u64> = access_offsets(0, 64, 3).collect();
        assert_eq!(offsets, vec![0, 64, 128]);
        let last = access_offsets(65472, 64, 3).collect::<Vec<_>>();
        assert_eq!(last, vec![65472, 65472, 65472]);
        assert!(access_offsets(64, 32, 5000).all(|o| o % 32 == 0 && o + 32 <= WINDOW_SIZE && o >= 64));
    }

    #[test]
    fn histogram_buckets() {
        let b = buckets(&[0, 0, 3, 0, 0, 0, 7]);
        assert_eq!(b.len(), 2);
        assert_eq!((b[0].low_bytes, b[0].tlps, b[1].low_bytes, b[1].tlps), (4, 3, 64, 7));
    }

    #[test]
    fn pattern_differs_between_widths() {
        let a: Vec<u8> = (0..64).map(|i| pattern_byte(i, 4)).collect();
        let b: Vec<u8> = (0..64).map(|i| pattern_byte(i, 8)).collect();
        assert_ne!(a, b);
    }
}
