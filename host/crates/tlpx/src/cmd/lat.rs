//! `tlpx lat`: DMA read latency as the card measures it, per request.
//!
//! - LAT_RD: reads with one request outstanding; latency from the request to its last
//!   completion.
//! - LAT_WRRD: write a transfer, then read it back; latency from the write to the read's
//!   last completion.
//!
//! Per-request samples (card cycles, converted with the card's clock) give min / median /
//! p99 / p99.9 / max and a CDF (text, and SVG with --svg). The card's own min / max / sum
//! and log2 histogram cover every request, also those its sample FIFO could not keep.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

use anyhow::Context;
use clap::{Args, ValueEnum};
use serde::{Deserialize, Serialize};
use tlpx_device::card::Feature;
use tlpx_device::generator::{ErrorCounts, GenConfig, LinkLimits, Operation, ValidGenConfig};
use tlpx_device::DmaBuffer;
use tlpx_model::stats::Summary;

use crate::args::{check_optional_output, refuse_duplicate_values};
use crate::cmd::bw::{self, Common, GenArgs, HostCheck};
use crate::output::{bytes, print_json};
use crate::plot::{self, Chart, Series, Style, XAxis};
use crate::progress::{self, Progress};
use crate::results::{self, ResultDoc, SimLimit};
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

#[derive(Debug, Args)]
pub struct Cmd {
    /// Measurements: read (LAT_RD), wrrd (LAT_WRRD), comma-separated.
    #[arg(long, value_enum, value_delimiter = ',', default_value = "read,wrrd")]
    pub op: Vec<LatOp>,
    /// Transfer sizes: a list or range as for `tlpx bw`.
    #[arg(long, default_value = "64", allow_hyphen_values = true)]
    pub sizes: String,
    #[command(flatten)]
    pub gen: GenArgs,
    /// Rows of the text CDF.
    #[arg(long, default_value_t = 12, value_parser = crate::args::whole(2u32, 200), allow_negative_numbers = true)]
    pub cdf_rows: u32,
    /// Also draw the CDFs into this SVG file.
    #[arg(long, value_name = "FILE.svg")]
    pub svg: Option<PathBuf>,
    /// Also write the result document (JSON) to this file.
    #[arg(long, value_name = "FILE.json")]
    pub output: Option<PathBuf>,
}

/// The card's own latency counters, converted to ns.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct HardwareLatency {
    pub count: u64,
    pub min_ns: f64,
    pub mean_ns: f64,
    pub max_ns: f64,
    /// log2 histogram in card cycles: bucket k counts latencies in [2^k, 2^(k+1)) cycles.
    pub histogram_cycles: Vec<u64>,
}

/// One latency measurement point.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct LatPoint {
    /// "LAT_RD" or "LAT_WRRD".
    pub measurement: &'static str,
    pub operation: &'static str,
    pub transfer_size: u32,
    pub config: GenConfig,
    pub clock_hz: u32,
    /// Per-request latency in ns from the card's samples; null when the card kept none.
    pub latency_ns: Option<Summary>,
    pub hardware: HardwareLatency,
    /// The samples themselves, in card cycles (what the CDF is drawn from).
    pub samples_cycles: Vec<u32>,
    pub samples_dropped: u64,
    pub transfers: u64,
    pub card_errors: ErrorCounts,
    pub card_error_total: u64,
    pub host_check: Option<HostCheck>,
    pub ended_by: Vec<String>,
}

impl LatPoint {
    pub fn label(&self) -> String {
        format!("{} {}", self.measurement, bytes(u64::from(self.transfer_size)))
    }

    pub fn samples_ns(&self) -> Vec<f64> {
        let ns_per_cycle = 1e9 / f64::from(self.clock_hz.max(1));
        self.samples_cycles.iter().map(|c| f64::from(*c) * ns_per_cycle).collect()
    }

    pub fn failed(&self) -> bool {
        self.card_error_total > 0
            || self.host_check.as_ref().is_some_and(|c| c.bad() > 0)
            || self.ended_by.iter().any(|e| e != "count" && e != "duration")
    }
}

/// Runs one latency point `repeat` times; samples of all runs are pooled.
pub fn measure_point(session: &mut Session, buffer: &DmaBuffer, cfg: &ValidGenConfig, repeat: u32) -> anyhow::Result<LatPoint> {
    let timeout = bw::run_timeout(cfg, None, session.clock_hz);
    let mut samples = Vec::new();
    let mut dropped = 0;
    let mut hw = (0u64, u64::MAX, 0u64, 0u64, vec![0u64; tlpx_device::generator::HISTOGRAM_BUCKETS]);
    let mut errors = ErrorCounts::default();
    let mut host_check: Option<HostCheck> = None;
    let mut transfers = 0;
    let mut ended_by = Vec::new();
    let mut clock_hz = session.clock_hz;
    for i in 0..repeat {
        // Ctrl-C: keep the runs done so far (at least one) and stop.
        if i > 0 && crate::progress::stop_requested() {
            break;
        }
        let (r, check) = bw::run_once(session, buffer, cfg, timeout)?;
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
        let e = &r.errors;
        errors.unsupported_request += e.unsupported_request;
        errors.completer_abort += e.completer_abort;
        errors.other_status += e.other_status;
        errors.poisoned += e.poisoned;
        errors.completion_timeouts += e.completion_timeouts;
        errors.unexpected_completions += e.unexpected_completions;
        errors.data_mismatches += e.data_mismatches;
        transfers += r.transfers_done;
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
        operation: bw::op_short(cfg.operation),
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
        card_error_total: bw::error_total(&errors),
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

/// The text report of one point; `clock` names the card's clock ([`crate::results::Environment::card_clock`]).
pub fn point_text(p: &LatPoint, cdf_rows: usize, clock: &str) -> Vec<String> {
    let mut out = vec![format!(
        "{}: {} requests, {} samples{} ({clock}, {:.0} MHz clock)",
        p.label(),
        p.hardware.count,
        p.samples_cycles.len(),
        if p.samples_dropped > 0 { format!(", {} dropped by the card's FIFO", p.samples_dropped) } else { String::new() },
        f64::from(p.clock_hz) / 1e6
    )];
    match &p.latency_ns {
        Some(s) => out.push(format!(
            "  min {:.1} ns  median {:.1} ns  p99 {:.1} ns  p99.9 {:.1} ns  max {:.1} ns",
            s.min, s.median, s.p99, s.p999, s.max
        )),
        None => out.push("  no per-request samples (the card kept none)".into()),
    }
    out.push(format!(
        "  card counters: min {:.1} ns  mean {:.1} ns  max {:.1} ns over {} requests",
        p.hardware.min_ns, p.hardware.mean_ns, p.hardware.max_ns, p.hardware.count
    ));
    if p.card_error_total > 0 {
        out.push(format!("  ERRORS counted by the card ({} in all): {}", p.card_error_total, bw::error_counts_text(&p.card_errors)));
    }
    if let Some(c) = &p.host_check {
        if c.bad() > 0 {
            out.push(format!("  DATA BAD in host memory: {} of {} checked", c.bad_text(), c.checked_bytes));
        }
    }
    if p.ended_by.iter().any(|e| e != "count" && e != "duration") {
        out.push(format!("  ENDED BY {}", p.ended_by.join(",")));
    }
    if !p.samples_cycles.is_empty() {
        out.push("  CDF (latency, fraction at or below):".into());
        out.extend(plot::text_cdf(&p.samples_ns(), cdf_rows, "ns"));
    }
    out
}

#[derive(Debug, Serialize, Deserialize)]
#[serde(bound(deserialize = "'de: 'static"))]
pub struct Parameters {
    pub measurements: Vec<&'static str>,
    pub sizes: Vec<u32>,
    #[serde(flatten)]
    pub common: Common,
}

#[derive(Debug, Serialize, Deserialize)]
#[serde(bound(deserialize = "'de: 'static"))]
pub struct Body {
    pub points: Vec<LatPoint>,
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
    bw::build_configs(&ops, sizes, 1, common, link, clock_hz)
}

pub fn run(cmd: &Cmd, device: &str, json: bool) -> anyhow::Result<ExitCode> {
    let started = Instant::now();
    let common = Common::parse(&cmd.gen).map_err(anyhow::Error::msg)?;
    let sizes = bw::transfer_sizes("--sizes", &cmd.sizes).map_err(anyhow::Error::msg)?;
    refuse_duplicate_values("--op", &cmd.op).map_err(anyhow::Error::msg)?;
    build_configs(&cmd.op, &sizes, &common, LinkLimits::LARGEST, 1).map_err(anyhow::Error::msg)?;
    check_optional_output("--svg", cmd.svg.as_deref())?;
    check_optional_output("--output", cmd.output.as_deref())?;
    if let (Some(svg), Some(output)) = (&cmd.svg, &cmd.output) {
        crate::args::refuse_same_file("--svg", svg, "--output", output)?;
    }

    let mut session = Session::open(device)?;
    let (mps, mrrs) = session.mps_mrrs();
    let configs = build_configs(&cmd.op, &sizes, &common, LinkLimits { mps, mrrs }, session.clock_hz).map_err(anyhow::Error::msg)?;
    session.card.require(Feature::Generator, "traffic generator")?;
    progress::install_stop_handler();
    let limits: Vec<SimLimit> = if session.environment.simulated {
        bw::read_latency_limit(&session.environment).into_iter().chain(bw::knob_limits(&common)).collect()
    } else {
        Vec::new()
    };
    if !json {
        crate::outln!("{}", session.describe());
        for n in &session.notes {
            crate::outln!("note: {n}");
        }
        for l in &limits {
            crate::outln!("note: {}", l.note());
        }
    }
    let progress = Progress::new(configs.len() as u64, json);
    let repeat = common.repeat;
    let rows = cmd.cdf_rows as usize;
    let clock = session.environment.card_clock();
    let (points, interrupted) = bw::sweep(
        &mut session,
        &configs,
        &progress,
        |s: &mut Session, b: &DmaBuffer, c: &ValidGenConfig| measure_point(s, b, c, repeat),
        |p: &LatPoint| {
            if !json {
                for line in point_text(p, rows, clock) {
                    progress.println(&line);
                }
            }
        },
    )?;
    progress.finish();
    if let Some(path) = &cmd.svg {
        let title = format!("DMA read latency CDF ({})", if session.environment.simulated { "simulated" } else { "measured" });
        let svg = plot::render_svg(&cdf_chart(&title, &points))?;
        std::fs::write(path, svg).with_context(|| format!("writing {}", path.display()))?;
        eprintln!("tlpx: wrote {}", path.display());
    }
    let failed = points.iter().any(LatPoint::failed);
    let mut doc = ResultDoc::new(
        "lat",
        Parameters { measurements: configs.iter().map(|c| bw::op_label(c.operation)).collect(), sizes, common },
        session.environment.clone(),
        session.link.clone(),
        None,
        Body { points },
        started.elapsed().as_secs_f64(),
        session.notes.clone(),
    );
    doc.parameters.measurements.dedup();
    if interrupted {
        doc.stopped_at(doc.body.points.len(), configs.len());
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

    fn point(samples: Vec<u32>) -> LatPoint {
        let cfg = GenConfig::new(Operation::Read, 64, samples.len() as u64);
        LatPoint {
            measurement: "LAT_RD",
            operation: "read",
            transfer_size: 64,
            config: cfg,
            clock_hz: 125_000_000,
            latency_ns: None,
            hardware: HardwareLatency { count: samples.len() as u64, min_ns: 0.0, mean_ns: 0.0, max_ns: 0.0, histogram_cycles: vec![] },
            samples_cycles: samples,
            samples_dropped: 0,
            transfers: 0,
            card_errors: ErrorCounts::default(),
            card_error_total: 0,
            host_check: None,
            ended_by: vec!["count".into()],
        }
    }

    #[test]
    fn errors_are_printed_by_name_not_as_a_struct() {
        let mut p = point((1..=10).collect());
        p.card_errors.unsupported_request = 5;
        p.card_errors.data_mismatches = 2;
        p.card_error_total = 7;
        p.host_check = Some(HostCheck { checked_bytes: 4096, corrupt_bytes: 3, first_bad_offset: Some(12), ..HostCheck::default() });
        let text = point_text(&p, 4, "card time").join("\n");
        assert!(text.contains("ERRORS counted by the card (7 in all): 5 unsupported request (UR), 2 data mismatches"), "{text}");
        assert!(text.contains("DATA BAD in host memory: 3 corrupt, 0 missing, 0 stray bytes (first at +12) of 4096 checked"), "{text}");
        assert!(!text.contains("ErrorCounts") && !text.contains("HostCheck") && !text.contains('{'), "{text}");
    }

    #[test]
    fn samples_convert_with_the_card_clock() {
        // 125 MHz: 8 ns per cycle.
        assert_eq!(point(vec![50, 100]).samples_ns(), vec![400.0, 800.0]);
    }

    #[test]
    fn text_report_has_percentiles_and_cdf() {
        let mut p = point((1..=1000).collect());
        p.latency_ns = Summary::of(&p.samples_ns());
        let text = point_text(&p, 5, "card time (simulated)").join("\n");
        assert!(text.contains("LAT_RD 64 B") && text.contains("p99.9") && text.contains("CDF"), "{text}");
        assert!(text.contains("(card time (simulated), 125 MHz clock)"), "the clock is named: {text}");
        assert!(text.contains("8000.0 ns") && text.contains("1.000"), "{text}");
        assert!(!p.failed());
        p.ended_by = vec!["timeout".into()];
        assert!(p.failed());
    }

    #[test]
    fn latency_configs_keep_one_read_in_flight() {
        let a = GenArgs {
            window: "64K".into(),
            offset: "0".into(),
            pattern: vec![bw::PatternArg::Seq],
            count: Some(10),
            duration: None,
            request_size: None,
            payload_size: None,
            idle: 0,
            addr64: false,
            data: bw::DataArg::Counter,
            seed: 1,
            no_check: false,
            ro: false,
            ns: false,
            repeat: 1,
        };
        let c = Common::parse(&a).expect("valid");
        let cfgs = build_configs(&[LatOp::Read, LatOp::Wrrd], &[64], &c, LinkLimits { mps: 256, mrrs: 512 }, 125_000_000).expect("valid");
        assert!(cfgs.iter().all(|c| c.max_outstanding == 1));
        assert_eq!(cfgs[1].operation, Operation::WriteThenRead);
        let svg = plot::render_svg(&cdf_chart("t", &[point((1..=100).collect())])).expect("svg");
        assert!(svg.contains("LAT_RD 64 B"));
    }
}
