//! DMA read latency as the card measures it, per request: its operations (LAT_RD, LAT_WRRD),
//! their configurations (one request in flight), one point of pooled runs, and the CDF figure.

use clap::ValueEnum;
use serde::Serialize;
use tlpx_device::generator::{ErrorCounts, LinkLimits, Operation, ValidGenConfig};
use tlpx_device::DmaBuffer;
use tlpx_model::stats::Summary;

use super::{check, config, runner};
use crate::cmd::bw::{Common, HostCheck};
use crate::cmd::lat::{HardwareLatency, LatPoint};
use crate::plot::{self, Chart, Series, Style, XAxis};
use crate::session::Session;

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum LatOp {
    /// LAT_RD: one read outstanding.
    Read,
    /// LAT_WRRD: write, then read the same bytes back.
    Wrrd,
}

impl LatOp {
    pub fn operation(self) -> Operation {
        match self {
            LatOp::Read => Operation::Read,
            LatOp::Wrrd => Operation::WriteThenRead,
        }
    }
}

/// Runs one latency point `repeat` times; samples of all runs are pooled.
pub fn measure_point(session: &mut Session, buffer: &DmaBuffer, cfg: &ValidGenConfig, repeat: u32) -> anyhow::Result<LatPoint> {
    let timeout = runner::run_timeout(cfg, None, session.clock_hz);
    let mut samples = Vec::new();
    let mut dropped = 0;
    let mut hw = (0u64, u64::MAX, 0u64, 0u64, vec![0u64; tlpx_device::generator::HISTOGRAM_BUCKETS]);
    let mut errors = ErrorCounts::default();
    let mut host_check: Option<HostCheck> = None;
    let mut transfers = 0;
    let mut cycles = 0;
    let mut ended_by = Vec::new();
    let mut clock_hz = session.clock_hz;
    for i in 0..repeat {
        // Ctrl-C: keep the runs done so far (at least one) and stop.
        if i > 0 && crate::progress::stop_requested() {
            break;
        }
        let (r, check) = runner::run_once(session, buffer, cfg, timeout)?;
        if r.clock_hz > 0 {
            clock_hz = r.clock_hz;
        }
        let l = &r.latency;
        samples.extend_from_slice(&l.samples);
        dropped += l.samples_dropped;
        hw.0 += l.count;
        if l.count > 0 {
            hw.1 = hw.1.min(l.min);
            hw.2 = hw.2.max(l.max);
        }
        hw.3 += l.sum;
        for (s, v) in hw.4.iter_mut().zip(&l.histogram) {
            *s += v;
        }
        check::add_errors(&mut errors, &r.errors);
        transfers += r.transfers_done;
        cycles += r.cycles;
        if !ended_by.contains(&r.ended_by) {
            ended_by.push(r.ended_by.clone());
        }
        if let Some(c) = check {
            let h = host_check.get_or_insert_with(HostCheck::default);
            h.checked_bytes += c.checked_bytes;
            h.written_bytes += c.written_bytes;
            h.corrupt_bytes += c.corrupt_bytes;
            h.missing_bytes += c.missing_bytes;
            h.stray_bytes += c.stray_bytes;
            h.first_bad_offset = h.first_bad_offset.or(c.first_bad_offset);
        }
    }
    let ns = 1e9 / f64::from(clock_hz.max(1));
    let samples_ns: Vec<f64> = samples.iter().map(|c| f64::from(*c) * ns).collect();
    let measurement = if cfg.operation == Operation::WriteThenRead { "LAT_WRRD" } else { "LAT_RD" };
    Ok(LatPoint {
        measurement,
        operation: config::op_short(cfg.operation),
        transfer_size: cfg.transfer_size,
        config: cfg.config().clone(),
        clock_hz,
        latency_ns: Summary::of(&samples_ns),
        hardware: HardwareLatency {
            count: hw.0,
            min_ns: if hw.0 > 0 { hw.1 as f64 * ns } else { 0.0 },
            mean_ns: if hw.0 > 0 { hw.3 as f64 / hw.0 as f64 * ns } else { 0.0 },
            max_ns: hw.2 as f64 * ns,
            histogram_cycles: hw.4,
        },
        samples_cycles: samples,
        samples_dropped: dropped,
        transfers,
        cycles,
        card_error_total: check::error_total(&errors),
        card_errors: errors,
        host_check,
        ended_by,
    })
}

/// The CDF figure of some latency points.
pub fn cdf_chart(title: &str, points: &[LatPoint]) -> Chart {
    Chart {
        title: title.to_string(),
        x_label: "latency (ns of card time)".into(),
        y_label: "fraction of requests at or below".into(),
        x_axis: XAxis::Linear,
        y_range: Some((0.0, 1.0)),
        series: points
            .iter()
            .map(|p| Series { label: p.label(), points: plot::cdf_points(&p.samples_ns(), 400), style: Style::Line })
            .collect(),
    }
}

/// Builds the latency configurations: one request in flight, for every op and size.
pub fn build_configs(
    ops: &[LatOp],
    sizes: &[u32],
    common: &Common,
    link: LinkLimits,
    clock_hz: u32,
) -> Result<Vec<ValidGenConfig>, String> {
    let ops: Vec<Operation> = ops.iter().map(|o| o.operation()).collect();
    config::build_configs(&ops, sizes, 1, common, link, clock_hz)
}
