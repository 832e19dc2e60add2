//! `tlpx bw` through LitePCIe's stock driver (`--device litepcie:/dev/litepcieN`).
//!
//! The driver keeps its DMA buffers' bus addresses in the kernel, so the card's traffic
//! generator (which needs them) cannot run; what runs is what the driver offers and LitePCIe's
//! own `litepcie_util dma_test` measures: the card's LitePCIe DMA in loopback, its reader taking
//! the driver's host-to-card buffers and its writer filling the card-to-host ones, both rings in
//! loop mode, the two directions at once. Per run: the buffers the driver's interrupt handler
//! counted, the time they took on two clocks (host wall time between the start and the count's
//! reading; card cycles between the same two points, read from the card's timebase) and a
//! check of the data (each writer buffer equals the reader buffer of its index).
//!
//! The driver counts buffers in its interrupt handler, one MSI per 32 buffers: a run ends at
//! the first count reading at or past its target, so it moves up to 31 buffers more, and both
//! clocks include the interrupt's latency once.

use std::path::Path;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use rand::{RngCore, SeedableRng};
use tlpx_device::backends::litepcie::Engine;
use tlpx_device::DeviceError;
use tlpx_model::stats::Summary;

/// The document's types are tlpx-results'.
pub use tlpx_results::bw_driver::{Body, Parameters, Run};

use crate::args::check_optional_output;
use crate::results::ResultDoc;
use crate::session::Session;

/// Buffers per run when --count is not given: two turns of the driver's 256-buffer rings.
pub const DEFAULT_BUFFERS: u64 = 512;
/// The driver raises an MSI every this many buffers (its DMA_BUFFER_PER_IRQ).
const BUFFERS_PER_IRQ: u64 = 32;

/// What `bw` asks of a run through the driver: the options that apply here, and the options of
/// the traffic generator that were set (refused by [`refuse_generator_options`]).
pub struct Request<'a> {
    /// --count: buffers per run.
    pub count: Option<u64>,
    pub repeat: u32,
    pub seed: u32,
    /// Not --no-check.
    pub check: bool,
    pub output: Option<&'a Path>,
    /// The generator's options set to anything but their defaults, as the refusal names them.
    pub generator_options: Vec<&'static str>,
}

/// The options of `bw` that choose the generator's traffic and mean nothing to the driver's
/// DMA: refused when set to anything but their defaults, rather than ignored.
pub fn refuse_generator_options(request: &Request) -> anyhow::Result<()> {
    let set = &request.generator_options;
    if set.is_empty() {
        Ok(())
    } else {
        anyhow::bail!(
            "{} do(es) not apply through LitePCIe's driver: it moves its own buffers of its own size with the card's \
             LitePCIe DMA; tlpx's traffic generator needs DMA buffers whose bus address user space knows, which vfio gives \
             (--device vfio:ADDRESS). Accepted here: --count (buffers per run), --repeat, --seed, --no-check, --output",
            set.join(", ")
        )
    }
}

/// The buffer pattern of reader buffer `index` for `seed` (random bytes: a stuck or shifted
/// word shows).
fn pattern(seed: u32, index: usize, len: usize) -> Vec<u8> {
    let mut v = vec![0u8; len];
    rand_chacha::ChaCha8Rng::seed_from_u64(u64::from(seed) ^ ((index as u64) << 40)).fill_bytes(&mut v);
    v
}

/// One run: fill the reader ring, start writer then reader, wait for `target` writer buffers,
/// stop, and check the writer ring against the reader ring.
fn run_once(session: &mut Session, target: u64, seed: u32, check: bool) -> anyhow::Result<Run> {
    let card = &mut session.card;
    let d = card.device().try_as_driver_dma().ok_or_else(|| anyhow::anyhow!("this device has no driver DMA"))?;
    let l = d.layout()?;
    let (n, size) = (l.dma_tx_buf_count as usize, l.dma_tx_buf_size as usize);
    if n == 0 || size == 0 || l.dma_rx_buf_count as usize != n || l.dma_rx_buf_size as usize != size {
        anyhow::bail!("the LitePCIe driver's rings differ or are empty: {l:?}");
    }
    // Both rings are the engines': take them before touching their buffers.
    d.claim(Engine::Writer)?;
    d.claim(Engine::Reader)?;
    for k in 0..n {
        d.write_buffer(Engine::Reader, k, 0, &pattern(seed, k, size))?;
        d.write_buffer(Engine::Writer, k, 0, &vec![0u8; size])?;
    }
    d.set_loopback(true)?;
    let cycles0 = card.cycles()?;
    let started = Instant::now();
    let d = card.device().try_as_driver_dma().expect("checked above");
    let w0 = d.set_enabled(Engine::Writer, true)?.hw;
    let counted = (|| -> Result<(u64, Instant), DeviceError> {
        d.set_enabled(Engine::Reader, true)?;
        // Wall time bound: the driver counts in its interrupt handler whatever clock the card
        // runs at; a minute is far beyond any card's and the simulator's time for a run.
        loop {
            let hw = (d.counts(Engine::Writer)?.hw - w0).max(0) as u64;
            if hw >= target {
                return Ok((hw, Instant::now()));
            }
            if started.elapsed() > Duration::from_secs(60) || crate::progress::stop_requested() {
                return Ok((hw, Instant::now()));
            }
            d.poll(Duration::from_millis(100))?;
        }
    })();
    let cycles1 = card.cycles();
    let d = card.device().try_as_driver_dma().expect("checked above");
    let _ = d.set_enabled(Engine::Reader, false);
    let _ = d.set_enabled(Engine::Writer, false);
    let _ = d.set_loopback(false);
    let (buffers, at) = counted?;
    let cycles = cycles1?.wrapping_sub(cycles0);
    if buffers < target && !crate::progress::stop_requested() {
        anyhow::bail!(
            "the driver's DMA writer completed {buffers} of {target} buffers within 60 s of host time: its interrupt handler \
             did not count them (MSI not taken?)"
        );
    }
    let host_seconds = at.duration_since(started).as_secs_f64();
    let bytes = buffers * size as u64;
    let card_seconds = cycles as f64 / f64::from(session.clock_hz);
    let (mut checked, mut bad) = (0u64, 0u64);
    if check {
        let mut got = vec![0u8; size];
        for k in 0..(buffers as usize).min(n) {
            d.read_buffer(Engine::Writer, k, 0, &mut got)?;
            checked += 1;
            if got != pattern(seed, k, size) {
                bad += 1;
            }
        }
    }
    Ok(Run {
        buffers,
        bytes_per_direction: bytes,
        host_seconds,
        host_mb_per_s_per_direction: bytes as f64 / host_seconds.max(1e-12) / 1e6,
        card_cycles: cycles,
        card_mb_per_s_per_direction: bytes as f64 / card_seconds.max(1e-12) / 1e6,
        checked_buffers: checked,
        bad_buffers: bad,
    })
}

/// `tlpx bw` on a device whose DMA belongs to LitePCIe's driver.
pub fn run(request: &Request, mut session: Session, json: bool, started: Instant) -> anyhow::Result<ExitCode> {
    refuse_generator_options(request)?;
    check_optional_output("--output", request.output)?;
    let target = request.count.unwrap_or(DEFAULT_BUFFERS);
    if target == 0 {
        anyhow::bail!("--count 0: a run through the driver moves at least one buffer (1..=1000000000)");
    }
    let d = session.card.device().try_as_driver_dma().ok_or_else(|| anyhow::anyhow!("this device has no driver DMA"))?;
    // The engines first: a second user is refused before anything is printed or touched.
    d.claim(Engine::Writer)?;
    d.claim(Engine::Reader)?;
    let layout = d.layout()?;
    crate::progress::install_stop_handler();
    let params = Parameters {
        engine: "litepcie_driver_dma".into(),
        direction: "rdwr".into(),
        buffer_bytes: layout.dma_tx_buf_size,
        ring_buffers: layout.dma_tx_buf_count,
        buffers_per_run: target,
        repeat: request.repeat,
        seed: request.seed,
        check: request.check,
    };
    if !json {
        crate::outln!("{}", session.describe());
        crate::outln!(
            "engine: LitePCIe's DMA through its driver, loopback: reader (host -> card) and writer (card -> host) together over \
             the driver's {} buffers of {} bytes; figures are per direction",
            params.ring_buffers,
            params.buffer_bytes
        );
        crate::outln!(
            "note: a run ends at the driver's first buffer count at or past {target} (it counts in its interrupt handler, one \
             MSI per {BUFFERS_PER_IRQ} buffers); host MB/s is host wall time, card MB/s the card's cycles over the same span"
        );
        crate::outln!(
            "{:>4} {:>8} {:>12} {:>10} {:>12} {:>12} {:>12}  check",
            "run",
            "buffers",
            "bytes/dir",
            "host s",
            "host MB/s",
            "card cycles",
            "card MB/s"
        );
    }
    let mut runs = Vec::new();
    for r in 0..request.repeat {
        if crate::progress::stop_requested() {
            break;
        }
        let run = run_once(&mut session, target, request.seed.wrapping_add(r), request.check)?;
        if !json {
            let check = if !params.check {
                "not checked".to_string()
            } else if run.bad_buffers == 0 {
                format!("{} buffers ok", run.checked_buffers)
            } else {
                format!("{} of {} buffers DIFFER", run.bad_buffers, run.checked_buffers)
            };
            crate::outln!(
                "{:>4} {:>8} {:>12} {:>10.3} {:>12.1} {:>12} {:>12.1}  {check}",
                r + 1,
                run.buffers,
                run.bytes_per_direction,
                run.host_seconds,
                run.host_mb_per_s_per_direction,
                run.card_cycles,
                run.card_mb_per_s_per_direction
            );
        }
        runs.push(run);
    }
    let failed = runs.iter().any(|r| r.bad_buffers > 0);
    let body = Body {
        card_mb_per_s: Summary::of(&runs.iter().map(|r| r.card_mb_per_s_per_direction).collect::<Vec<_>>()),
        host_mb_per_s: Summary::of(&runs.iter().map(|r| r.host_mb_per_s_per_direction).collect::<Vec<_>>()),
        points: runs,
    };
    if let (false, true, Some(c), Some(h)) = (json, body.points.len() > 1, &body.card_mb_per_s, &body.host_mb_per_s) {
        crate::outln!(
            "over {} runs, MB/s per direction: card min {:.1} median {:.1} max {:.1}; host min {:.1} median {:.1} max {:.1}",
            body.points.len(),
            c.min,
            c.median,
            c.max,
            h.min,
            h.median,
            h.max
        );
    }
    let doc = ResultDoc::new(
        "bw_driver",
        params,
        session.environment.clone(),
        session.link.clone(),
        None,
        body,
        started.elapsed().as_secs_f64(),
        session.notes.clone(),
    );
    doc.emit(request.output, json, failed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buffer_patterns_differ_by_index_and_seed() {
        assert_eq!(pattern(1, 0, 64), pattern(1, 0, 64));
        assert_ne!(pattern(1, 0, 64), pattern(1, 1, 64));
        assert_ne!(pattern(1, 0, 64), pattern(2, 0, 64));
    }
}
