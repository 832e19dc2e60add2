//! Running the generator: one run with its data check, one point of `repeat` runs, and a
//! sweep of points with progress, DMA buffers per window and Ctrl-C.

use std::time::Duration;

use anyhow::Context;
use tlpx_device::generator::{self, ErrorCounts, GenConfig, GenResult, Operation, ValidGenConfig};
use tlpx_device::DmaBuffer;
use tlpx_model::link::{self, CompletionSplit};
use tlpx_model::stats::Summary;

use super::check::{add_errors, check_unchanged, check_written, error_total, expected_written, pattern_bytes};
use super::config::{model_operation, op_label, op_short, pattern_short, session_model};
use super::figures::efficiency_meaning;
use super::host_memory;
use crate::cmd::bw::{BwPoint, CacheState, HostCheck, RunRecord};
use crate::output::bytes;
use crate::progress::{self, Progress};
use crate::session::Session;

/// Card time a run may take before the host gives up: twenty times what the model (or, without
/// one, 50 MB/s) predicts, plus the idle cycles, plus 10 ms.
pub fn run_timeout(cfg: &GenConfig, model_bytes_per_second: Option<f64>, clock_hz: u32) -> Duration {
    let base = Duration::from_millis(10);
    if cfg.duration_cycles > 0 && cfg.count == 0 {
        return base + Duration::from_secs_f64(2.0 * cfg.duration_cycles as f64 / f64::from(clock_hz.max(1)));
    }
    let streams = if cfg.operation == Operation::ReadWrite || cfg.operation == Operation::WriteThenRead { 2.0 } else { 1.0 };
    let bytes = cfg.count as f64 * f64::from(cfg.transfer_size);
    let rate = model_bytes_per_second.filter(|r| *r > 0.0).unwrap_or(50e6);
    let idle = cfg.count as f64 * f64::from(cfg.idle_cycles) * (cfg.transfer_size as f64 / 64.0).max(1.0) / f64::from(clock_hz.max(1));
    // Latency-bound runs (one read outstanding): a few µs per transfer at worst.
    let latency = if cfg.max_outstanding <= 2 { cfg.count as f64 * 20e-6 } else { 0.0 };
    base + Duration::from_secs_f64((20.0 * streams * bytes / rate + 2.0 * idle + latency).min(3600.0))
}

/// One run: prepare the buffer, run the generator, check what the card wrote.
pub fn run_once(
    session: &mut Session,
    buffer: &DmaBuffer,
    cfg: &ValidGenConfig,
    timeout: Duration,
) -> anyhow::Result<(GenResult, Option<HostCheck>)> {
    let window = cfg.window as usize;
    let pattern = pattern_bytes(window, buffer.bus_addr, cfg.data_pattern, cfg.seed, false);
    // Writes land on something else than their pattern, so every byte the card wrote is
    // visible; reads need the pattern there to check it. The host writes it (then flushes or
    // thrashes for --cache cold and thrash), or under --cache device-warm the card does.
    let writes = matches!(cfg.operation, Operation::Write | Operation::WriteThenRead);
    let before = if session.host_memory.cache == CacheState::DeviceWarm {
        // The CPU first writes what neither the warm-up nor the run writes (the pattern's
        // complement), so that a warm-up that did not land shows in the checks; the card's
        // writes come last, so the window is still device-warm.
        buffer.write_bytes(0, &pattern.iter().map(|b| !b).collect::<Vec<u8>>())?;
        let seed = if writes { host_memory::warm_seed(cfg.seed) } else { cfg.seed };
        host_memory::device_write_window(session, buffer, cfg, seed)?;
        if writes {
            pattern_bytes(window, buffer.bus_addr, cfg.data_pattern, seed, false)
        } else {
            pattern.clone()
        }
    } else {
        let before = if writes { pattern.iter().map(|b| !b).collect::<Vec<u8>>() } else { pattern.clone() };
        buffer.write_bytes(0, &before)?;
        host_memory::after_host_write(session, buffer, window)?;
        before
    };
    let result = generator::run(&mut session.card, buffer, cfg, timeout)
        .with_context(|| format!("running the generator ({} of {} bytes)", op_label(cfg.operation), cfg.transfer_size))?;
    if !cfg.check_data {
        return Ok((result, None));
    }
    let mut got = vec![0u8; window];
    buffer.read_bytes(0, &mut got)?;
    let check = match cfg.operation {
        Operation::Read => None,
        Operation::ReadWrite => Some(check_unchanged(&got, &pattern)),
        Operation::Write | Operation::WriteThenRead => {
            let transfers = result.write_bytes / u64::from(cfg.transfer_size.max(1));
            let expected = expected_written(cfg, transfers);
            Some(check_written(&got, &pattern, &before, expected.as_deref()))
        }
    };
    Ok((result, check))
}

/// Runs one point `repeat` times and summarises it.
pub fn measure_point(session: &mut Session, buffer: &DmaBuffer, cfg: &ValidGenConfig, repeat: u32) -> anyhow::Result<BwPoint> {
    let model = session_model(session, cfg.addr64).and_then(|m| {
        model_operation(cfg.operation)
            .map(|op| link::analyse(&m, op, u64::from(cfg.transfer_size), CompletionSplit::Mps).bandwidth.bytes_per_second)
    });
    let timeout = run_timeout(cfg, model, session.clock_hz);
    let mut runs = Vec::new();
    let mut rates = Vec::new();
    let mut errors = ErrorCounts::default();
    let mut host_check: Option<HostCheck> = None;
    let mut sums = [0u64; 6];
    for i in 0..repeat {
        // Ctrl-C: keep the runs done so far (at least one) and stop.
        if i > 0 && crate::progress::stop_requested() {
            break;
        }
        let (r, check) = run_once(session, buffer, cfg, timeout)?;
        let clock = if r.clock_hz > 0 { r.clock_hz } else { session.clock_hz };
        let secs = r.cycles as f64 / f64::from(clock);
        let payload = match cfg.operation {
            Operation::Read => r.read_bytes as f64,
            Operation::Write => r.write_bytes as f64,
            Operation::ReadWrite | Operation::WriteThenRead => (r.read_bytes + r.write_bytes) as f64 / 2.0,
        };
        let rate = if secs > 0.0 { payload / secs } else { 0.0 };
        rates.push(rate);
        runs.push(RunRecord { cycles: r.cycles, bytes_per_second: rate, transfers: r.transfers_done, ended_by: r.ended_by.clone() });
        add_errors(&mut errors, &r.errors);
        for (s, v) in sums.iter_mut().zip([r.transfers_done, r.read_requests, r.read_bytes, r.completions, r.write_requests, r.write_bytes])
        {
            *s += v;
        }
        if let Some(c) = check {
            host_check.get_or_insert_with(HostCheck::default).add(&c);
        }
    }
    let achieved = Summary::of(&rates).context("no runs")?;
    let efficiency = model.and_then(|m| Summary::of(&rates.iter().map(|r| r / m).collect::<Vec<f64>>()));
    let efficiency_meaning = efficiency.as_ref().map(|_| efficiency_meaning(session.environment.simulated));
    Ok(BwPoint {
        operation: op_short(cfg.operation),
        transfer_size: cfg.transfer_size,
        window: cfg.window,
        offset: cfg.offset,
        pattern: pattern_short(cfg.address_pattern),
        config: cfg.config().clone(),
        achieved_bytes_per_second: achieved,
        model_bytes_per_second: model,
        efficiency,
        efficiency_meaning,
        runs,
        transfers: sums[0],
        read_requests: sums[1],
        read_bytes: sums[2],
        completions: sums[3],
        write_requests: sums[4],
        write_bytes: sums[5],
        card_error_total: error_total(&errors),
        card_errors: errors,
        host_check,
    })
}

/// DMA buffers by window size, allocated on first use and all freed by [`Buffers::free_all`].
#[derive(Default)]
pub struct Buffers {
    buffers: Vec<DmaBuffer>,
}

impl Buffers {
    pub fn get(&mut self, session: &mut Session, len: u64) -> anyhow::Result<&DmaBuffer> {
        let len = usize::try_from(len).context("window too large for this host")?;
        if let Some(i) = self.buffers.iter().position(|b| b.len == len) {
            return Ok(&self.buffers[i]);
        }
        let b = session
            .card
            .device()
            .alloc_dma(len)
            .with_context(|| format!("allocating a DMA buffer of {} for the window", bytes(len as u64)))?;
        // Where its pages are, checked against --numa-node: a buffer elsewhere is freed.
        if let Err(e) = host_memory::record_buffer(session, &b) {
            let _ = session.card.device().free_dma(b);
            return Err(e.context(format!("placing a DMA buffer of {}", bytes(len as u64))));
        }
        self.buffers.push(b);
        Ok(self.buffers.last().expect("just pushed"))
    }

    /// Returns every buffer to the device; the first error is reported after all were tried.
    pub fn free_all(&mut self, session: &mut Session) -> anyhow::Result<()> {
        let mut first = Ok(());
        for b in self.buffers.drain(..) {
            if let Err(e) = session.card.device().free_dma(b) {
                if first.is_ok() {
                    first = Err(anyhow::Error::new(e).context("freeing a DMA buffer"));
                }
            }
        }
        first
    }
}

/// Runs a plan of `items` in order with a progress bar: `label` names each as it starts,
/// `measure` measures it, `each` sees every point as it completes. Stops early on Ctrl-C
/// (before an item, or an interrupt out of one); returns the points and whether it did. Any
/// other error ends the plan.
pub fn run_plan<I, T>(
    items: &[I],
    progress: &Progress,
    label: impl Fn(&I) -> String,
    mut measure: impl FnMut(&I) -> anyhow::Result<T>,
    mut each: impl FnMut(&T),
) -> anyhow::Result<(Vec<T>, bool)> {
    let mut points = Vec::new();
    for item in items {
        if progress::stop_requested() {
            return Ok((points, true));
        }
        progress.start(&label(item));
        match measure(item) {
            Ok(p) => {
                each(&p);
                points.push(p);
                progress.done_one();
            }
            Err(e) if progress::is_interrupt(&e) => return Ok((points, true)),
            Err(e) => return Err(e),
        }
    }
    Ok((points, false))
}

/// Runs `configs` in order with a progress bar ([`run_plan`]): `measure` runs one point
/// (buffers of the window size are allocated once and all freed at the end, also on errors),
/// `each` sees every point as it completes. Stops early on Ctrl-C; returns the points and
/// whether it did.
pub fn sweep<T>(
    session: &mut Session,
    configs: &[ValidGenConfig],
    progress: &Progress,
    mut measure: impl FnMut(&mut Session, &DmaBuffer, &ValidGenConfig) -> anyhow::Result<T>,
    each: impl FnMut(&T),
) -> anyhow::Result<(Vec<T>, bool)> {
    let mut buffers = Buffers::default();
    let outcome = run_plan(
        configs,
        progress,
        |cfg| format!("{} {} window {}", op_short(cfg.operation), bytes(u64::from(cfg.transfer_size)), bytes(cfg.window)),
        |cfg| {
            let b = buffers.get(session, cfg.window)?;
            measure(session, b, cfg)
        },
        each,
    );
    let freed = buffers.free_all(session);
    let measured = outcome?;
    freed?;
    Ok(measured)
}

/// The exit status of a measuring command: 130 after Ctrl-C, 1 when a point failed its
/// checks, 0 otherwise.
pub fn exit_status(interrupted: bool, failed: bool) -> std::process::ExitCode {
    if interrupted {
        std::process::ExitCode::from(progress::INTERRUPTED_EXIT)
    } else if failed {
        std::process::ExitCode::from(crate::exit::CHECK_FAILED)
    } else {
        std::process::ExitCode::SUCCESS
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timeouts_grow_with_the_work() {
        let g = GenConfig::new(Operation::Read, 4096, 1000);
        let fast = run_timeout(&g, Some(6e9), 250_000_000);
        let slow = run_timeout(&g, Some(1e8), 250_000_000);
        assert!(fast >= Duration::from_millis(10) && slow > fast);
        let mut d = GenConfig::new(Operation::Write, 64, 0);
        d.duration_cycles = 125_000;
        assert_eq!(run_timeout(&d, None, 125_000_000), Duration::from_millis(12));
    }
}
