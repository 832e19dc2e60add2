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
use clap::Args;
use tlpx_device::card::Feature;
use tlpx_device::generator::{LinkLimits, ValidGenConfig};
use tlpx_device::DmaBuffer;

/// The document's types are tlpx-results'.
pub use tlpx_results::lat::{Body, HardwareLatency, LatPoint, Parameters};

use crate::args::{check_optional_output, refuse_duplicate_values};
use crate::measure::config::{parse_common, GenArgs};
use crate::measure::figures::TableFormat;
use crate::measure::host_memory;
use crate::measure::latency::{build_configs, cdf_chart, measure_point, LatOp};
use crate::measure::{check, config, figures, runner};
use crate::plot;
use crate::progress::{self, Progress};
use crate::results::{ResultDoc, SimLimit};
use crate::session::Session;

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
    /// How the points are printed: tlpx's lines, or pcie-bench's table (text or CSV).
    #[arg(long, value_enum, default_value_t = TableFormat::Tlpx)]
    pub format: TableFormat,
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
        out.push(format!("  ERRORS counted by the card ({} in all): {}", p.card_error_total, check::error_counts_text(&p.card_errors)));
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

pub fn run(cmd: &Cmd, device: &str, json: bool) -> anyhow::Result<ExitCode> {
    let started = Instant::now();
    let text = cmd.format.tlpx_text(json)?;
    let common = parse_common(&cmd.gen).map_err(anyhow::Error::msg)?;
    let sizes = config::transfer_sizes("--sizes", &cmd.sizes).map_err(anyhow::Error::msg)?;
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
    host_memory::prepare(&mut session, &common)?;
    progress::install_stop_handler();
    let limits: Vec<SimLimit> = if session.environment.simulated {
        figures::read_latency_limit(&session.environment).into_iter().chain(figures::knob_limits(&common)).collect()
    } else {
        Vec::new()
    };
    if text {
        crate::outln!("{}", session.describe());
        for n in &session.notes {
            crate::outln!("note: {n}");
        }
        for l in &limits {
            crate::outln!("note: {}", l.note());
        }
        for line in host_memory::describe(&session) {
            crate::outln!("{line}");
        }
    }
    let progress = Progress::new(configs.len() as u64, json);
    let repeat = common.repeat;
    let rows = cmd.cdf_rows as usize;
    let clock = session.environment.card_clock();
    let (points, interrupted) = runner::sweep(
        &mut session,
        &configs,
        &progress,
        |s: &mut Session, b: &DmaBuffer, c: &ValidGenConfig| measure_point(s, b, c, repeat),
        |p: &LatPoint| {
            if text {
                for line in point_text(p, rows, clock) {
                    progress.println(&line);
                }
            }
        },
    )?;
    progress.finish();
    if let Some(style) = cmd.format.pciebench() {
        crate::output::out_text(&tlpx_results::pciebench::lat_table(&points, common.host.cache, style));
        // pcie-bench's table has no column for errors: say on stderr why the exit status is 1.
        for p in points.iter().filter(|p| p.failed()) {
            let why: Vec<String> =
                point_text(p, 0, "").into_iter().filter(|l| l.contains("ERRORS") || l.contains("BAD") || l.contains("ENDED")).collect();
            eprintln!("tlpx: FAILED {}:{}", p.label(), why.join(";"));
        }
    }
    if let Some(path) = &cmd.svg {
        let title = format!("DMA read latency CDF ({})", if session.environment.simulated { "simulated" } else { "measured" });
        let svg = plot::render_svg(&cdf_chart(&title, &points))?;
        std::fs::write(path, svg).with_context(|| format!("writing {}", path.display()))?;
        eprintln!("tlpx: wrote {}", path.display());
    }
    let failed = points.iter().any(LatPoint::failed);
    let mut doc = ResultDoc::new(
        "lat",
        Parameters { measurements: configs.iter().map(|c| config::op_label(c.operation)).collect(), sizes, common },
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
    doc.emit(cmd.output.as_deref(), json, failed)
}

#[cfg(test)]
mod tests {
    use super::*;
    use tlpx_device::generator::{ErrorCounts, GenConfig, Operation};
    use tlpx_model::stats::Summary;

    use crate::cmd::bw::HostCheck;

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
            cycles: 0,
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
            pattern: vec![crate::cmd::bw::PatternArg::Seq],
            count: Some(10),
            duration: None,
            request_size: None,
            payload_size: None,
            idle: 0,
            addr64: false,
            data: crate::cmd::bw::DataArg::Counter,
            seed: 1,
            no_check: false,
            ro: false,
            ns: false,
            repeat: 1,
            host: Default::default(),
        };
        let c = parse_common(&a).expect("valid");
        let cfgs = build_configs(&[LatOp::Read, LatOp::Wrrd], &[64], &c, LinkLimits { mps: 256, mrrs: 512 }, 125_000_000).expect("valid");
        assert!(cfgs.iter().all(|c| c.max_outstanding == 1));
        assert_eq!(cfgs[1].operation, Operation::WriteThenRead);
        let svg = plot::render_svg(&cdf_chart("t", &[point((1..=100).collect())])).expect("svg");
        assert!(svg.contains("LAT_RD 64 B"));
    }
}
