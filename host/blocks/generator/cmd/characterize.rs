//! `tlpx characterize`: the PCI Pamette table for this host (Moll & Shand, seed 001): the
//! maximum sustained DMA write, DMA read, PIO write and PIO read bandwidth, plus DMA
//! read+write, each the best over a sweep of transfer sizes (DMA) or access widths (PIO),
//! with the size that achieved it and the model's limit beside it.
//!
//! Writes `characterize.json` (a result of kind "characterize") and SVG figures into
//! `--out-dir` (default `results/<UTC timestamp>/`): bandwidth against transfer size for
//! read, write and read+write with the model's line on the same axes, the latency CDFs
//! (LAT_RD, LAT_WRRD), and PIO throughput against access width.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Instant;

use anyhow::Context;
use clap::Args;
use tlpx_device::card::Feature;
use tlpx_device::generator::{LinkLimits, Operation, ValidGenConfig, TAGS};
use tlpx_device::DmaBuffer;
use tlpx_model::link::{self as model_link, CompletionSplit, LinkConfig};

/// The document's types are tlpx-results'.
pub use tlpx_results::characterize::{Body, Parameters, TableRow};

use crate::args::{check_optional_output, check_output_dir, whole};
use crate::cmd::bw::CacheState;
use crate::cmd::bw::{BwPoint, Common, DataArg, PatternArg};
use crate::cmd::lat::LatPoint;
use crate::cmd::pio::{PioPlan, PioPoint};
use crate::measure::config::{parse_common, GenArgs, HostMemoryArgs};
use crate::measure::host_memory;
use crate::measure::latency::{self, LatOp};
use crate::measure::pio::{self, MAPPING_NOTE};
use crate::measure::{config, figures, runner};
use crate::output::{bytes, print_json};
use crate::plot::{self, Chart, Series, Style, XAxis};
use crate::progress::{self, Progress};
use crate::results::{self, ModelConfig, ResultDoc, SimLimit};
use crate::session::Session;

/// Most requests per latency measurement.
pub const MAX_LAT_COUNT: u64 = 1_000_000;

mod matrix;

#[derive(Debug, Args)]
pub struct Cmd {
    /// DMA transfer sizes swept: a list or range (64..4096 doubles).
    #[arg(long, default_value = "64..4096", allow_hyphen_values = true)]
    pub sizes: String,
    /// DMA transfers per point (per stream for read+write).
    #[arg(long, default_value_t = 2000, value_parser = whole(0, config::MAX_COUNT), allow_negative_numbers = true)]
    pub count: u64,
    /// Card time per DMA point instead of a count, e.g. 2ms.
    #[arg(long, allow_hyphen_values = true)]
    pub duration: Option<String>,
    /// DMA window: a power of two, 64 bytes to 64M (the matrix takes --matrix-windows).
    #[arg(long, default_value = "1M", allow_hyphen_values = true, conflicts_with = "matrix")]
    pub window: String,
    /// Reads in flight at most for the bandwidth sweep: 1..=32 (default: all the generator's tags).
    #[arg(long, default_value_t = TAGS, value_parser = whole(1, TAGS), allow_negative_numbers = true)]
    pub outstanding: u32,
    /// Runs per DMA point (the median is what the table keeps).
    #[arg(long, default_value_t = 1, value_parser = whole(1, config::MAX_REPEAT), allow_negative_numbers = true)]
    pub repeat: u32,
    /// Force 64-bit request headers.
    #[arg(long)]
    pub addr64: bool,
    /// Transfer sizes of the latency measurements (LAT_RD, LAT_WRRD).
    #[arg(long, default_value = "64", allow_hyphen_values = true)]
    pub lat_sizes: String,
    /// Requests per latency measurement.
    #[arg(long, default_value_t = 1000, value_parser = whole(1, MAX_LAT_COUNT), allow_negative_numbers = true)]
    pub lat_count: u64,
    /// PIO access widths: 1, 2, 4, 8, 16, 32, 64.
    #[arg(long, default_value = "1,2,4,8,16,32,64", allow_hyphen_values = true, conflicts_with = "matrix")]
    pub widths: String,
    /// PIO accesses per width and direction.
    #[arg(long, default_value_t = 1000, value_parser = whole(1, pio::MAX_COUNT), allow_negative_numbers = true, conflicts_with = "matrix")]
    pub pio_count: u32,
    /// Folder for characterize.json and the SVG figures [default: results/<UTC timestamp>].
    #[arg(long, value_name = "DIR")]
    pub out_dir: Option<PathBuf>,
    /// Also write the result document (JSON) to this file (the matrix writes one per cell in --out-dir).
    #[arg(long, value_name = "FILE.json", conflicts_with = "matrix")]
    pub output: Option<PathBuf>,
    #[command(flatten)]
    pub host: HostMemoryArgs,
    /// pcie-bench's matrix: every cache state x NUMA node x IOMMU page size the host offers,
    /// BW_RD and BW_WR over --matrix-windows (random addresses) and LAT_RD in each cell; one bw
    /// and one lat document per cell and three figures in --out-dir.
    #[arg(long)]
    pub matrix: bool,
    /// The cache states of the matrix (comma-separated) [default: all four].
    #[arg(long, value_enum, value_delimiter = ',', requires = "matrix")]
    pub matrix_cache: Vec<CacheState>,
    /// The windows of the matrix: a list or range (pcie-bench's window sweep).
    #[arg(long, default_value = "4K,64K,1M,4M", allow_hyphen_values = true, requires = "matrix")]
    pub matrix_windows: String,
}

/// The best DMA point of one operation.
pub fn dma_row(
    what: &'static str,
    label: &'static str,
    op: Operation,
    points: &[BwPoint],
    model: Option<&LinkConfig>,
    simulated: bool,
) -> TableRow {
    let mine: Vec<&BwPoint> = points.iter().filter(|p| p.config.operation == op).collect();
    let best = mine.iter().max_by(|a, b| a.achieved_bytes_per_second.median.total_cmp(&b.achieved_bytes_per_second.median));
    let model_best = model.and_then(|m| {
        let mop = config::model_operation(op)?;
        mine.iter()
            .map(|p| model_link::analyse(m, mop, u64::from(p.transfer_size), CompletionSplit::Mps).bandwidth.bytes_per_second)
            .max_by(f64::total_cmp)
    });
    TableRow {
        what,
        label,
        best_bytes_per_second: best.map(|p| p.achieved_bytes_per_second.median),
        at_bytes: best.map(|p| u64::from(p.transfer_size)),
        model_at_size_bytes_per_second: best.and_then(|p| p.model_bytes_per_second),
        efficiency: best.and_then(|p| p.efficiency.as_ref().map(|e| e.median)),
        efficiency_meaning: best.and_then(|p| p.efficiency.as_ref()).map(|_| figures::efficiency_meaning(simulated)),
        model_best_bytes_per_second: model_best,
        how: format!(
            "generator {}, best of {} transfer sizes, payload bytes over card time{}",
            config::op_label(op),
            mine.len(),
            if op == Operation::ReadWrite { ", per stream" } else { "" }
        ),
    }
}

/// The best PIO write and read rows. On the simulator they are the card's PIO window (no
/// host CPU is simulated), and the labels say so.
pub fn pio_rows(points: &[PioPoint], simulated: bool) -> [TableRow; 2] {
    let best_w = points.iter().filter_map(|p| p.card_write_bytes_per_second.map(|b| (b, p.width))).max_by(|a, b| a.0.total_cmp(&b.0));
    let best_r = points.iter().map(|p| (p.card_read_bytes_per_second, p.width)).max_by(|a, b| a.0.total_cmp(&b.0));
    let row = |what, label, best: Option<(f64, u32)>, how: String| TableRow {
        what,
        label,
        best_bytes_per_second: best.map(|b| b.0),
        at_bytes: best.map(|b| u64::from(b.1)),
        model_at_size_bytes_per_second: None,
        efficiency: None,
        efficiency_meaning: None,
        model_best_bytes_per_second: None,
        how,
    };
    if simulated {
        [
            row(
                "pio_write",
                "PIO write, card window",
                best_w,
                "SIMULATED: the card's PIO window taking the simulator's stores (no host CPU is simulated): bytes between the \
                 first and last write the card saw, over card time; the card's request path, not the link, sets it"
                    .to_string(),
            ),
            row(
                "pio_read",
                "PIO read, card window",
                best_r,
                "SIMULATED: the card's PIO window answering the simulator's loads, one at a time: access width / card time \
                 per read (modelled link both ways)"
                    .to_string(),
            ),
        ]
    } else {
        [
            row(
                "pio_write",
                "PIO write",
                best_w,
                format!("host stores, {MAPPING_NOTE}; bandwidth between the first and last write the card saw"),
            ),
            row("pio_read", "PIO read", best_r, "host loads, one at a time; access width / card time per read".to_string()),
        ]
    }
}

/// The model's line for `op` over `[lo, hi]`, in MB/s, at most ~2000 points.
pub fn model_series(model: &LinkConfig, op: Operation, lo: u64, hi: u64) -> Option<Series> {
    let mop = config::model_operation(op)?;
    let step = ((hi.saturating_sub(lo)) / 2000).max(1).next_multiple_of(4).max(4);
    let mut sizes: Vec<u64> = (lo..=hi).step_by(step as usize).collect();
    // The sawtooth's teeth are at multiples of MPS/MRRS: put those and their successors in.
    for boundary in [model.mps, model.mrrs] {
        let b = u64::from(boundary);
        let mut x = b;
        while x <= hi {
            if x >= lo {
                sizes.push(x);
                if x < hi {
                    sizes.push(x + 1);
                }
            }
            x += b;
        }
    }
    sizes.push(hi);
    sizes.sort_unstable();
    sizes.dedup();
    let points = sizes
        .into_iter()
        .map(|s| (s as f64, model_link::analyse(model, mop, s, CompletionSplit::Mps).bandwidth.bytes_per_second / 1e6))
        .collect();
    Some(Series {
        label: format!("model (tlpx-model, Gen{} x{} MPS {} MRRS {})", model.generation, model.lanes, model.mps, model.mrrs),
        points,
        style: Style::Line,
    })
}

/// Bandwidth against transfer size for one operation, with the model's line.
pub fn bandwidth_chart(title: &str, op: Operation, points: &[BwPoint], model: Option<&LinkConfig>) -> Chart {
    let mine: Vec<&BwPoint> = points.iter().filter(|p| p.config.operation == op).collect();
    let lo = mine.iter().map(|p| u64::from(p.transfer_size)).min().unwrap_or(64);
    let hi = mine.iter().map(|p| u64::from(p.transfer_size)).max().unwrap_or(4096);
    let mut series = Vec::new();
    if let Some(m) = model.and_then(|m| model_series(m, op, lo, hi)) {
        series.push(m);
    }
    series.push(Series {
        label: format!("measured ({}, median)", config::op_label(op)),
        points: mine.iter().map(|p| (f64::from(p.transfer_size), p.achieved_bytes_per_second.median / 1e6)).collect(),
        style: Style::Points,
    });
    Chart {
        title: title.to_string(),
        x_label: "transfer size".into(),
        y_label: "payload MB/s (card time)".into(),
        x_axis: XAxis::Log2Bytes,
        y_range: None,
        series,
    }
}

fn pio_chart(title: &str, points: &[PioPoint]) -> Chart {
    Chart {
        title: title.to_string(),
        x_label: "access width".into(),
        y_label: "MB/s (card time)".into(),
        x_axis: XAxis::Log2Bytes,
        y_range: None,
        series: vec![
            Series {
                label: "PIO write (card: first to last write)".into(),
                points: points.iter().filter_map(|p| p.card_write_bytes_per_second.map(|b| (f64::from(p.width), b / 1e6))).collect(),
                style: Style::Points,
            },
            Series {
                label: "PIO read (width / card time per read)".into(),
                points: points.iter().map(|p| (f64::from(p.width), p.card_read_bytes_per_second / 1e6)).collect(),
                style: Style::Points,
            },
        ],
    }
}

fn mb(v: Option<f64>) -> String {
    v.map_or("-".into(), |b| format!("{:.1}", b / 1e6))
}

pub fn table_text(rows: &[TableRow], simulated: bool) -> Vec<String> {
    let mut out = vec![
        format!("Maximum sustained bandwidth (payload, card time{})", if simulated { "; SIMULATED card and link" } else { "" }),
        format!(
            "{:<22} {:>10} {:>7} {:>16} {:>8} {:>15}",
            "",
            "BEST MB/s",
            "AT",
            "MODEL AT SIZE",
            if simulated { "EFF*" } else { "EFF" },
            "MODEL BEST MB/s"
        ),
    ];
    for r in rows {
        out.push(format!(
            "{:<22} {:>10} {:>7} {:>16} {:>8} {:>15}",
            r.label,
            mb(r.best_bytes_per_second),
            r.at_bytes.map_or("-".into(), bytes),
            mb(r.model_at_size_bytes_per_second),
            r.efficiency.map_or("-".into(), |e| format!("{:.1} %", e * 100.0)),
            mb(r.model_best_bytes_per_second),
        ));
    }
    if simulated {
        out.push(
            "* EFF = BEST / MODEL AT SIZE in %; SIMULATED: tlpx-sim paces its link with this same model, so EFF cannot exceed \
             100 % by construction: it shows how near the card's gateware comes to the model, not how good a host is"
                .to_string(),
        );
        if rows.iter().any(|r| r.what.starts_with("pio")) {
            out.push(
                "PIO rows (SIMULATED): the card's PIO window taking the simulator's loads and stores, in card time; no host \
                 CPU, store buffer or write combining is simulated, so they say nothing about a host's PIO"
                    .to_string(),
            );
        }
    } else {
        out.push("EFF = BEST / MODEL AT SIZE in %".to_string());
    }
    out
}

fn write_svg(dir: &Path, name: &str, chart: &Chart, figures: &mut Vec<String>) -> anyhow::Result<()> {
    let path = dir.join(name);
    let svg = plot::render_svg(chart)?;
    std::fs::write(&path, svg).with_context(|| format!("writing {}", path.display()))?;
    figures.push(path.display().to_string());
    Ok(())
}

pub fn run(cmd: &Cmd, device: &str, json: bool) -> anyhow::Result<ExitCode> {
    if cmd.matrix {
        return matrix::run(cmd, device, json);
    }
    let started = Instant::now();
    // Arguments, all checked before the card is touched.
    let gen_args = gen_args(cmd);
    let common = parse_common(&gen_args).map_err(anyhow::Error::msg)?;
    if common.windows.len() != 1 {
        anyhow::bail!("--window takes one window for characterize, not {}", common.windows.len());
    }
    let sizes = config::transfer_sizes("--sizes", &cmd.sizes).map_err(anyhow::Error::msg)?;
    let lat_sizes = config::transfer_sizes("--lat-sizes", &cmd.lat_sizes).map_err(anyhow::Error::msg)?;
    if !(1..=MAX_LAT_COUNT).contains(&cmd.lat_count) {
        anyhow::bail!("--lat-count must be 1..={MAX_LAT_COUNT}, not {}", cmd.lat_count);
    }
    let lat_common = Common { count: cmd.lat_count, duration_seconds: None, repeat: 1, ..common.clone() };
    let pio_plan = crate::cmd::pio::parse_plan(&cmd.widths, cmd.pio_count, 0, None)
        .map_err(|e| anyhow::anyhow!(e.replace("--count", "--pio-count")))?;
    let dma_ops = [Operation::Write, Operation::Read, Operation::ReadWrite];
    config::build_configs(&dma_ops, &sizes, cmd.outstanding, &common, LinkLimits::LARGEST, 1).map_err(anyhow::Error::msg)?;
    latency::build_configs(&[LatOp::Read, LatOp::Wrrd], &lat_sizes, &lat_common, LinkLimits::LARGEST, 1).map_err(anyhow::Error::msg)?;
    let out_dir = cmd.out_dir.clone().unwrap_or_else(|| PathBuf::from("results").join(results::utc_now().1));
    // The folder and the extra result file are made sure of before the card is touched.
    check_output_dir("--out-dir", &out_dir)?;
    check_optional_output("--output", cmd.output.as_deref())?;

    let mut session = Session::open(device)?;
    let (mps, mrrs) = session.mps_mrrs();
    let dma_configs = config::build_configs(&dma_ops, &sizes, cmd.outstanding, &common, LinkLimits { mps, mrrs }, session.clock_hz)
        .map_err(anyhow::Error::msg)?;
    let lat_configs: Vec<ValidGenConfig> =
        latency::build_configs(&[LatOp::Read, LatOp::Wrrd], &lat_sizes, &lat_common, LinkLimits { mps, mrrs }, session.clock_hz)
            .map_err(anyhow::Error::msg)?;
    session.card.require(Feature::Generator, "traffic generator")?;
    host_memory::prepare(&mut session, &common)?;
    std::fs::create_dir_all(&out_dir).with_context(|| format!("creating {}", out_dir.display()))?;
    progress::install_stop_handler();
    let model = config::session_model(&session, cmd.addr64);
    let say = |line: &str| {
        if !json {
            crate::outln!("{line}");
        }
    };
    say(&format!("tlpx characterize: {}", session.describe()));
    for n in &session.notes {
        say(&format!("note: {n}"));
    }
    for line in host_memory::describe(&session) {
        say(&line);
    }
    let progress = Progress::new((dma_configs.len() + lat_configs.len() + pio_plan.widths.len()) as u64, json);
    let simulated = session.environment.simulated;
    let clock = session.environment.card_clock();
    let mut limits: Vec<SimLimit> = Vec::new();
    if simulated {
        limits.extend(model.iter().map(|_| figures::efficiency_limit()));
        limits.extend(figures::knob_limits(&common));
        limits.extend(figures::read_latency_limit(&session.environment));
    }

    // 1. DMA bandwidth.
    say(&format!("\nDMA bandwidth (generator, payload MB/s of {clock})"));
    for line in figures::legend(&session.environment) {
        say(&line);
    }
    for l in limits.iter().filter(|l| l.id == "window_and_address_pattern_not_modelled" || l.id == "host_memory_state_not_modelled") {
        say(&format!("note: {}", l.note()));
    }
    say(&figures::header_line(simulated));
    let repeat = cmd.repeat;
    let (points, mut interrupted) = runner::sweep(
        &mut session,
        &dma_configs,
        &progress,
        |s: &mut Session, b: &DmaBuffer, c: &ValidGenConfig| runner::measure_point(s, b, c, repeat),
        |p: &BwPoint| {
            if !json {
                progress.println(&figures::point_line(p));
            }
        },
    )?;
    // 2. Latency.
    let mut latency = Vec::new();
    if !interrupted {
        (latency, interrupted) = measure_latency(&mut session, &lat_configs, &progress, &limits, clock, json)?;
    }
    // 3. PIO.
    let mut pio_points = Vec::new();
    if !interrupted {
        say(&format!("\nPIO ({MAPPING_NOTE})"));
        say(&pio::times_line(simulated));
        say(&pio::header_line(simulated));
        let (p, i) = pio::measure(&mut session, &pio_plan, &progress, |p| {
            if !json {
                progress.println(&pio::point_line(p));
            }
        })?;
        pio_points = p;
        interrupted = i;
    }
    progress.finish();

    let table = table_rows(&points, &pio_points, model.as_ref(), simulated);
    if simulated && !pio_points.is_empty() {
        limits.extend(pio::sim_limits(&pio_points));
    }

    let link_text = session.link.as_ref().map_or("link unknown".to_string(), |l| l.to_string());
    let figures = write_figures(&out_dir, &link_text, simulated, &points, &latency, &pio_points, model.as_ref())?;

    let failed = points.iter().any(BwPoint::failed) || latency.iter().any(LatPoint::failed) || pio_points.iter().any(PioPoint::failed);
    let mut doc = ResultDoc::new(
        "characterize",
        parameters(cmd, &common, sizes, lat_sizes, pio_plan, &out_dir),
        session.environment.clone(),
        session.link.clone(),
        model.map(|link| ModelConfig { link, completion_split: CompletionSplit::Mps }),
        Body { table, points, latency, pio: pio_points, figures },
        started.elapsed().as_secs_f64(),
        notes(&session.notes, simulated),
    );
    if interrupted {
        let b = &doc.body;
        let planned = dma_configs.len() + lat_configs.len() + doc.parameters.pio.widths.len();
        doc.stopped_at(b.points.len() + b.latency.len() + b.pio.len(), planned);
    }
    for l in limits {
        doc.add_sim_limit(l);
    }
    results::write_json(&out_dir.join("characterize.json"), &doc)?;
    if let Some(path) = &cmd.output {
        results::write_json(path, &doc)?;
    }
    if json {
        print_json(&doc)?;
    } else {
        print_table(&doc.body, &out_dir, simulated, interrupted);
    }
    Ok(runner::exit_status(interrupted, failed))
}

/// The latency part of the run: LAT_RD and LAT_WRRD over the latency sizes, a line per point.
fn measure_latency(
    session: &mut Session,
    lat_configs: &[ValidGenConfig],
    progress: &Progress,
    limits: &[SimLimit],
    clock: &str,
    json: bool,
) -> anyhow::Result<(Vec<LatPoint>, bool)> {
    if !json {
        crate::outln!("\nDMA read latency (one request in flight, ns of {clock})");
        for l in limits.iter().filter(|l| l.id == "dma_read_latency_configured") {
            crate::outln!("note: {}", l.note());
        }
    }
    runner::sweep(
        session,
        lat_configs,
        progress,
        |s: &mut Session, b: &DmaBuffer, c: &ValidGenConfig| latency::measure_point(s, b, c, 1),
        |p: &LatPoint| {
            if !json {
                progress.println(&lat_line(p));
            }
        },
    )
}

/// The parameters of the result document.
fn parameters(cmd: &Cmd, common: &Common, sizes: Vec<u32>, lat_sizes: Vec<u32>, pio: PioPlan, out_dir: &Path) -> Parameters {
    Parameters {
        sizes,
        count: common.count,
        duration_seconds: common.duration_seconds,
        window: common.windows[0],
        outstanding: cmd.outstanding,
        repeat: cmd.repeat,
        addr64: cmd.addr64,
        lat_sizes,
        lat_count: cmd.lat_count,
        pio,
        out_dir: out_dir.display().to_string(),
        host: common.host,
    }
}

/// The notes of the result document: the session's, the PIO mapping, and on the simulator
/// where the card-time figures come from.
fn notes(session_notes: &[String], simulated: bool) -> Vec<String> {
    let mut notes = session_notes.to_vec();
    notes.push(format!("PIO mapping: {MAPPING_NOTE}"));
    if simulated {
        notes.push("every card-time figure comes from the simulated card and link model".to_string());
    }
    notes
}

/// The generator options of `characterize`'s DMA sweep: its own flags, the rest at `bw`'s
/// defaults (sequential addresses, offset 0, counter data, checked).
fn gen_args(cmd: &Cmd) -> GenArgs {
    GenArgs {
        window: cmd.window.clone(),
        offset: "0".into(),
        pattern: vec![PatternArg::Seq],
        count: if cmd.duration.is_some() { None } else { Some(cmd.count) },
        duration: cmd.duration.clone(),
        request_size: None,
        payload_size: None,
        idle: 0,
        addr64: cmd.addr64,
        data: DataArg::Counter,
        seed: 1,
        no_check: false,
        ro: false,
        ns: false,
        repeat: cmd.repeat,
        host: cmd.host.clone(),
    }
}

/// A latency point's line: its percentiles in ns, or that it has no samples.
fn lat_line(p: &LatPoint) -> String {
    match &p.latency_ns {
        Some(s) => format!(
            "{:<14} min {:.1} ns  median {:.1}  p99 {:.1}  p99.9 {:.1}  max {:.1}  ({} samples)",
            p.label(),
            s.min,
            s.median,
            s.p99,
            s.p999,
            s.max,
            s.count
        ),
        None => format!("{:<14} no samples", p.label()),
    }
}

/// The Pamette table: DMA write, DMA read, PIO write, PIO read, DMA read+write.
fn table_rows(points: &[BwPoint], pio_points: &[PioPoint], model: Option<&LinkConfig>, simulated: bool) -> Vec<TableRow> {
    let mut table = vec![
        dma_row("dma_write", "DMA write", Operation::Write, points, model, simulated),
        dma_row("dma_read", "DMA read", Operation::Read, points, model, simulated),
    ];
    let [pio_w, pio_r] = pio_rows(pio_points, simulated);
    table.push(pio_w);
    table.push(pio_r);
    table.push(dma_row("dma_read_write", "DMA read+write (each)", Operation::ReadWrite, points, model, simulated));
    table
}

/// The SVG figures into `out_dir`: bandwidth by transfer size per operation (with the
/// model's line), the latency CDFs, PIO throughput by width. Their file names.
fn write_figures(
    out_dir: &Path,
    link_text: &str,
    simulated: bool,
    points: &[BwPoint],
    latency: &[LatPoint],
    pio_points: &[PioPoint],
    model: Option<&LinkConfig>,
) -> anyhow::Result<Vec<String>> {
    let tag = if simulated { "simulated" } else { "measured" };
    let mut figures = Vec::new();
    for (name, op, what) in [
        ("bw-write.svg", Operation::Write, "DMA write (BW_WR)"),
        ("bw-read.svg", Operation::Read, "DMA read (BW_RD)"),
        ("bw-rdwr.svg", Operation::ReadWrite, "DMA read+write (BW_RDWR, per stream)"),
    ] {
        if points.iter().any(|p| p.config.operation == op) {
            let chart = bandwidth_chart(&format!("{what}, {link_text}, {tag}"), op, points, model);
            write_svg(out_dir, name, &chart, &mut figures)?;
        }
    }
    if !latency.is_empty() {
        write_svg(
            out_dir,
            "lat-cdf.svg",
            &latency::cdf_chart(&format!("DMA read latency CDF, {link_text}, {tag}"), latency),
            &mut figures,
        )?;
    }
    if !pio_points.is_empty() {
        write_svg(out_dir, "pio.svg", &pio_chart(&format!("PIO throughput by access width, {tag}"), pio_points), &mut figures)?;
    }
    Ok(figures)
}

/// The text after the run: the table, the files written, and whether it was interrupted.
fn print_table(body: &Body, out_dir: &Path, simulated: bool, interrupted: bool) {
    crate::outln!();
    for line in table_text(&body.table, simulated) {
        crate::outln!("{line}");
    }
    crate::outln!("\nwrote {} and {} figure(s):", out_dir.join("characterize.json").display(), body.figures.len());
    for f in &body.figures {
        crate::outln!("  {f}");
    }
    if interrupted {
        crate::outln!("interrupted: the result holds the points measured so far");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tlpx_device::generator::{ErrorCounts, GenConfig};
    use tlpx_model::stats::Summary;

    fn summarise(rates: &[f64]) -> Option<Summary> {
        Summary::of(rates)
    }

    fn bw_point(op: Operation, size: u32, rate: f64, model: &LinkConfig) -> BwPoint {
        let cfg = GenConfig::new(op, size, 10);
        let m = config::model_operation(op)
            .map(|o| model_link::analyse(model, o, u64::from(size), CompletionSplit::Mps).bandwidth.bytes_per_second);
        BwPoint {
            operation: config::op_short(op),
            transfer_size: size,
            window: cfg.window,
            offset: 0,
            pattern: "seq",
            config: cfg,
            achieved_bytes_per_second: summarise(&[rate]).expect("one"),
            model_bytes_per_second: m,
            efficiency: m.and_then(|m| summarise(&[rate / m])),
            efficiency_meaning: m.map(|_| figures::efficiency_meaning(true)),
            runs: vec![],
            transfers: 10,
            read_requests: 0,
            read_bytes: 0,
            completions: 0,
            write_requests: 0,
            write_bytes: 0,
            card_errors: ErrorCounts::default(),
            card_error_total: 0,
            host_check: None,
        }
    }

    #[test]
    fn table_keeps_the_best_size_and_the_model_beside_it() {
        let m = LinkConfig::new(2, 4, 256, 512, 64, false).expect("valid");
        let points = vec![
            bw_point(Operation::Read, 64, 0.5e9, &m),
            bw_point(Operation::Read, 4096, 1.5e9, &m),
            bw_point(Operation::Read, 1024, 1.4e9, &m),
            bw_point(Operation::Write, 256, 1.6e9, &m),
        ];
        let r = dma_row("dma_read", "DMA read", Operation::Read, &points, Some(&m), true);
        assert_eq!(r.at_bytes, Some(4096));
        assert_eq!(r.best_bytes_per_second, Some(1.5e9));
        let model_4k = model_link::read_bandwidth(&m, 4096).bytes_per_second;
        assert_eq!(r.model_at_size_bytes_per_second, Some(model_4k));
        assert!((r.efficiency.expect("eff") - 1.5e9 / model_4k).abs() < 1e-12);
        assert_eq!(r.model_best_bytes_per_second, Some(model_4k));
        let w = dma_row("dma_write", "DMA write", Operation::Write, &points, Some(&m), true);
        assert_eq!(w.at_bytes, Some(256));
        let none = dma_row("dma_read_write", "x", Operation::ReadWrite, &points, Some(&m), true);
        assert_eq!((none.best_bytes_per_second, none.at_bytes), (None, None));
        assert!(r.efficiency_meaning.is_some_and(|m| m.contains("cannot exceed 1.0")), "{r:?}");
        assert_eq!(none.efficiency_meaning, None);
        let text = table_text(&[r.clone(), w, none], true).join("\n");
        assert!(text.contains("SIMULATED") && text.contains("DMA read") && text.contains("4 KiB"), "{text}");
        assert!(text.contains("EFF*") && text.contains("cannot exceed 100 % by construction"), "{text}");
        let hardware = table_text(&[r], false).join("\n");
        assert!(!hardware.contains("EFF*") && !hardware.contains("SIMULATED"), "{hardware}");
    }

    #[test]
    fn bandwidth_chart_has_model_line_and_measured_points() {
        let m = LinkConfig::new(3, 8, 256, 512, 64, false).expect("valid");
        let points: Vec<BwPoint> = [64, 256, 1024, 4096].iter().map(|&s| bw_point(Operation::Write, s, f64::from(s) * 1e6, &m)).collect();
        let chart = bandwidth_chart("DMA write", Operation::Write, &points, Some(&m));
        assert_eq!(chart.series.len(), 2);
        let model = &chart.series[0];
        assert!(model.label.starts_with("model") && model.points.len() > 500);
        // The sawtooth's tooth at MPS 256 is in the line: 256 and 257 both present.
        assert!(model.points.iter().any(|p| p.0 == 256.0) && model.points.iter().any(|p| p.0 == 257.0));
        let svg = plot::render_svg(&chart).expect("svg");
        assert!(svg.contains("transfer size") && svg.contains("model (tlpx-model, Gen3 x8 MPS 256 MRRS 512)"));
        assert_eq!(svg.matches("<circle").count(), 5);
    }
}
