//! Host-driven accesses of the card's PIO window, one width at a time: bursts of writes and
//! checked reads, the host's wall time and the card's cycles and TLP sizes; what the figures
//! are, and the simulator's limits of them.

use std::time::Instant;

use anyhow::Context;
use tlpx_device::card::Card;
use tlpx_device::generator::lowbias32;
use tlpx_device::pio::{self, WINDOW_OFFSET, WINDOW_SIZE};
use tlpx_device::Width;
use tlpx_model::stats::Summary;

use super::runner::run_plan;
use crate::cmd::pio::{PioPlan, PioPoint, SizeBucket};
use crate::output::bytes;
use crate::progress::Progress;
use crate::results::SimLimit;
use crate::session::Session;

/// Access widths the command knows.
pub const WIDTHS: [u32; 7] = [1, 2, 4, 8, 16, 32, 64];
/// Most accesses per width and direction.
pub const MAX_COUNT: u32 = 1_000_000;
/// What the result says about mappings on every backend this tlpx has.
pub const MAPPING_NOTE: &str = "uncached only (this backend has no write-combining mapping)";

fn buckets(histogram: &[u64]) -> Vec<SizeBucket> {
    histogram.iter().enumerate().filter(|(_, n)| **n > 0).map(|(k, n)| SizeBucket { low_bytes: 1 << k, tlps: *n }).collect()
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
fn measure_width(session: &mut Session, width: u32, count: u32, offset: u32) -> anyhow::Result<PioPoint> {
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

pub fn sizes_text(b: &[SizeBucket]) -> String {
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
    each: impl FnMut(&PioPoint),
) -> anyhow::Result<(Vec<PioPoint>, bool)> {
    if let Some(d) = plan.read_delay_cycles {
        pio::set_read_delay(&mut session.card, d).context("setting the PIO window's read delay")?;
    }
    let outcome = run_plan(
        &plan.widths,
        progress,
        |w| format!("PIO {}", bytes(u64::from(*w))),
        |&w| measure_width(session, w, plan.count, plan.offset),
        each,
    );
    let cleared = match plan.read_delay_cycles {
        Some(_) => pio::set_read_delay(&mut session.card, 0).context("clearing the PIO window's read delay"),
        None => Ok(()),
    };
    let measured = outcome?;
    cleared?;
    Ok(measured)
}

#[cfg(test)]
mod tests {
    use super::*;

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
