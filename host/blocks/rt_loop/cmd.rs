//! `tlpx loop`: the real-time round-trip loop of the Altera DataMover (seed 003).
//!
//! ```text
//!  card: buffer (data, then the token) ──DMA write──► host memory
//!        ▲                                               │ measuring thread: poll DW 0, or wait
//!        │                                               │ for the MSI; check the token,
//!        │ loop time (card clock)                        │ checksum the data
//!        └── result register write, or doorbell + DMA read of the result ◄┘
//! ```
//!
//! One run per point of sizes × detection (poll, irq) × return (register, dma) × condition
//! (idle, loaded); `--sweep` runs the whole matrix. Per point: min / p50 / p99 / p99.9 / max /
//! mean and jitter of the loop time, a log2 histogram, what the DMA return's read cost, and the
//! host's own compute time. The card checks every returned checksum.
//!
//! A progress bar counts the points with an estimate of the time left; Ctrl-C stops the
//! point in progress (it is dropped) and writes the finished ones, marked
//! `"interrupted": true` (exit status 130). With --output the file is also written as points
//! finish (crate::checkpoint), so that a killed sweep leaves what it measured.

use std::borrow::Cow;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

use anyhow::{bail, Context};
use clap::{Args, ValueEnum};
use tlpx_device::card::Feature;
use tlpx_device::rt_loop::{self, Detect, Return};
use tlpx_model::stats::Summary;

/// The document's types are tlpx-results'.
pub use tlpx_results::rt_loop::{Body, Plan, Point};

use crate::args::{check_optional_output, refuse_duplicate_values, whole};
use crate::checkpoint::Checkpoints;
use crate::plot::{log2_buckets, render_log_svg, Chart, LogChart, LogSeries, Mark, Series, Style, Ticks, XAxis};
use crate::progress::{self, Progress};
use crate::realtime::{self, fmt_ns, summary_line, text_histogram, Comparison, Condition, PlacementArgs, TimeBasis};
use crate::results::{ResultDoc, SimLimit};
use crate::session::Session;
use crate::sizes::parse_size_list;

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum DetectArg {
    /// Read the buffer's first DW until the token is there.
    Poll,
    /// Wait for the card's interrupt.
    Irq,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ReturnArg {
    /// Write the checksum to the card's `result` register.
    Register,
    /// Store it in host memory and ring the doorbell: the card DMA-reads it.
    Dma,
}

/// Sizes of `--sweep` (bytes, token included).
pub const SWEEP_SIZES: [u32; 5] = [8, 64, 256, 1024, 4096];

#[derive(Debug, Args)]
pub struct Cmd {
    /// Round trips per point.
    #[arg(long, default_value_t = 1000, value_parser = whole(1, u32::MAX), allow_negative_numbers = true)]
    pub iterations: u32,
    /// Buffer sizes (bytes, token included; multiples of 4 in 8..=4096): 64,1K,4K.
    #[arg(long, default_value = "256", allow_hyphen_values = true)]
    pub size: String,
    /// How the host notices the buffer: poll, irq (or both: poll,irq).
    #[arg(long, value_enum, value_delimiter = ',', default_value = "poll")]
    pub detect: Vec<DetectArg>,
    /// How the host returns the checksum: register, dma (or both).
    #[arg(long = "return", value_enum, value_delimiter = ',', default_value = "register")]
    pub ret: Vec<ReturnArg>,
    /// The whole matrix: sizes 8..4096 × poll,irq × register,dma × idle,loaded (overrides
    /// --size, --detect and --return; --compare, when given, picks the conditions).
    #[arg(long)]
    pub sweep: bool,
    /// Token of the first iteration.
    #[arg(long, default_value_t = 1, value_parser = whole(0, u32::MAX), allow_negative_numbers = true)]
    pub seed: u32,
    /// Also check every data DW against the token's pattern on the host (inside the timed loop).
    #[arg(long)]
    pub verify: bool,
    #[command(flatten)]
    pub placement: PlacementArgs,
    /// Width in characters of the longest terminal histogram bar (bars are log-scaled).
    #[arg(long, default_value_t = 40, value_parser = whole(4u32, 200), allow_negative_numbers = true)]
    pub bar_width: u32,
    /// Also draw the figure into this SVG file (histograms; loop time against size for a sweep).
    #[arg(long, value_name = "FILE.svg")]
    pub svg: Option<PathBuf>,
    /// Also write the result document (JSON) to this file.
    #[arg(long, value_name = "FILE.json")]
    pub output: Option<PathBuf>,
}

/// The checked arguments.
/// Checks the arguments.
pub fn parse_plan(cmd: &Cmd) -> anyhow::Result<Plan> {
    if cmd.iterations == 0 {
        bail!("--iterations must be at least 1, not 0");
    }
    let mut placement = realtime::parse_placement(&cmd.placement)?;
    let (sizes, detect, ret) = if cmd.sweep {
        // In virtual time a loaded run repeats the idle one (load costs no card time), so
        // an explicit --compare idle is kept.
        if cmd.placement.compare.is_empty() {
            let mut args = cmd.placement.clone();
            args.compare = vec![Condition::Idle, Condition::Loaded];
            placement = realtime::parse_placement(&args)?;
        }
        (SWEEP_SIZES.to_vec(), vec![Detect::Poll, Detect::Irq], vec![Return::Register, Return::Dma])
    } else {
        let sizes = parse_size_list("--size", &cmd.size, "multiples of 4 in 8..=4096 bytes").map_err(anyhow::Error::msg)?;
        let mut checked = Vec::new();
        for s in sizes {
            let ok = (u64::from(rt_loop::MIN_SIZE)..=u64::from(rt_loop::MAX_SIZE)).contains(&s) && s.is_multiple_of(4);
            if !ok {
                bail!(
                    "--size {s}: a loop buffer is a multiple of 4 bytes in {}..={} (the token and at least one data DW)",
                    rt_loop::MIN_SIZE,
                    rt_loop::MAX_SIZE
                );
            }
            checked.push(s as u32);
        }
        refuse_duplicate_values("--detect", &cmd.detect).map_err(anyhow::Error::msg)?;
        refuse_duplicate_values("--return", &cmd.ret).map_err(anyhow::Error::msg)?;
        let detect: Vec<Detect> = cmd.detect.iter().map(|d| if *d == DetectArg::Poll { Detect::Poll } else { Detect::Irq }).collect();
        let ret: Vec<Return> = cmd.ret.iter().map(|r| if *r == ReturnArg::Register { Return::Register } else { Return::Dma }).collect();
        (checked, detect, ret)
    };
    Ok(Plan { iterations: cmd.iterations, sizes, detect, ret, seed: cmd.seed, verify: cmd.verify, sweep: cmd.sweep, placement })
}

fn stddev(values: &[f64]) -> Option<f64> {
    if values.len() < 2 {
        return None;
    }
    let mean = values.iter().sum::<f64>() / values.len() as f64;
    Some((values.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / (values.len() - 1) as f64).sqrt())
}

/// How long the host waits for one buffer, in wall time, with a simulator that charges host
/// time: a host gap (up to its cap, 10 ms by default) must then be simulated before the buffer
/// can come, and on a loaded 2-core machine simulating 10 ms of card time took longer than the
/// driver's default 5 s (`make demo` failed so at a load average of 12).
pub const SIM_REAL_HOST_TIME_DETECT_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(120);

fn run_point(
    session: &mut Session,
    plan: &Plan,
    point: (u32, Detect, Return, Condition),
    detect_timeout: Option<std::time::Duration>,
) -> anyhow::Result<Point> {
    let (size, detect, ret, condition) = point;
    let pl = &plan.placement;
    let mut config = plan.config(size, detect, ret);
    if let Some(t) = detect_timeout {
        config.detect_timeout = t;
    }
    let before = realtime::sim_host_time_stats(session);
    let load = realtime::load_for(pl, condition)?;
    let (result, notes) =
        realtime::on_measuring_thread(&mut session.card, "tlpx-loop", pl, |card| rt_loop::run(card, &config).context("running the loop"));
    drop(load);
    let r = result?;
    let after = realtime::sim_host_time_stats(session);
    let ns = |c: f64| r.cycles_to_ns(c);
    let loop_ns: Vec<f64> = r.loop_cycles.iter().map(|c| ns(f64::from(*c))).collect();
    let summary = Summary::of(&loop_ns);
    let compute: Vec<f64> = r.host.compute_ns.iter().map(|v| *v as f64).collect();
    Ok(Point {
        size_bytes: size,
        detect,
        ret,
        condition,
        load: if condition == Condition::Loaded { pl.load.clone() } else { Vec::new() },
        load_cpus: if condition == Condition::Loaded { pl.load_cpus.clone() } else { Vec::new() },
        iterations: plan.iterations,
        verified: r.verified(),
        clock_hz: r.clock_hz,
        jitter_ns: summary.as_ref().map(|s| s.max - s.min),
        stddev_ns: stddev(&loop_ns),
        loop_ns: summary,
        return_read_mean_ns: (ret == Return::Dma && r.card.count > 0).then(|| ns(r.card.read_sum_cycles as f64 / r.card.count as f64)),
        host_compute_ns: Summary::of(&compute),
        polls_per_iteration: (detect == Detect::Poll && r.host.served > 0).then(|| r.host.polls as f64 / r.host.served as f64),
        interrupts: r.host.interrupts,
        doorbell_retries: r.host.doorbell_retries,
        data_errors: r.host.data_errors,
        card: r.card.clone(),
        sim_host_gaps: realtime::host_gaps_between(&before, &after),
        pinned_cpu: pl.cpu,
        fifo_priority: pl.fifo.filter(|_| notes.is_empty()),
        notes,
        loop_cycles: r.loop_cycles,
    })
}

pub fn time_basis(session: &Session, poll_step_ns: f64) -> TimeBasis {
    let (kind, sim_host_time) = realtime::basis_kind(session);
    let statement = match kind {
        "hardware" => "hardware: every figure is real, timed by the card's clock: the buffer's DMA write, the host noticing it \
                       (its poll, or the MSI, the kernel and the thread's wake-up), the checksum, and the return (a posted \
                       register write, or the doorbell and the card's DMA read of the result)"
            .to_string(),
        "sim_real_host_time" => "simulator, host time real: the loop time is the modelled card and link (the buffer's write, the MSI, \
                       the return) PLUS this host's real time between its messages to the simulator (polls, the checksum, \
                       the socket wake-up), each gap capped; the card, link and root complex are modelled, not hardware; \
                       the host's own compute time (host_compute_ns) is real in every mode"
            .to_string(),
        "sim_live" => "simulator, live time (another client holds it): card time ran on its own while tlpx worked, so the \
                       loop time is the modelled card and link PLUS this host's detection, checksum and wake-up, passing at \
                       the simulator's speed (slower than the card's clock); neither the deterministic virtual figures nor \
                       hardware ones; not reproducible; host_compute_ns is real host time in every mode"
            .to_string(),
        _ => format!(
            "simulator, virtual time: the loop time is ONLY the modelled card and link time (the buffer's write, the MSI, the \
             return path) plus the poll granularity ({poll_step_ns:.0} ns of card time per poll); the host's detection, \
             checksum and wake-up cost no card time and are NOT in it (tlpx-sim --host-time real includes them); \
             host_compute_ns is real host time; never read these as hardware figures"
        ),
    };
    TimeBasis { kind, sim_host_time, statement, clock: realtime::basis_clock(kind) }
}

/// On the simulator, with both detections: why irq against poll shows nothing about a host.
pub fn detection_limit(basis: &TimeBasis, poll_step_ns: f64) -> Option<SimLimit> {
    let statement = match basis.kind {
        "hardware" => return None,
        "sim_real_host_time" | "sim_live" => {
            "irq against poll detection with real host time or live time: an irq wait is one message to tlpx-sim, \
                                 answered when the simulated MSI arrives, and a poll is a message per read of host memory; \
                                 neither is a host's interrupt path or a CPU polling a cache line, so which is faster here \
                                 says nothing about a PCIe host"
                .to_string()
        }
        _ => format!(
            "irq against poll detection in virtual time: the MSI costs only its modelled trip (no interrupt controller, kernel \
             or thread wake-up) while polling is quantised to {poll_step_ns:.0} ns of card time per poll, so irq looks as fast \
             as or faster than polling by construction; on hardware the interrupt adds the host's dispatch and wake-up \
             (tlpx irq measures it)"
        ),
    };
    Some(SimLimit::new("irq_vs_poll_detection", &["points[].detect"], statement))
}

/// The text of one point; `clock` names the loop time's clock ([`TimeBasis::clock`]).
pub fn point_text(p: &Point, width: usize, clock: &str) -> Vec<String> {
    let placement = realtime::condition_text(p.condition, &p.load, &p.load_cpus);
    let mut out = vec![format!(
        "{} B, detect {}, return {}, {placement}: {} iterations, {}",
        p.size_bytes,
        p.detect.name(),
        p.ret.name(),
        p.card.count,
        if p.verified {
            "every checksum verified by the card".to_string()
        } else {
            format!(
                "NOT VERIFIED: {} wrong checksums, {} data errors, {} samples dropped",
                p.card.mismatches, p.data_errors, p.card.samples_dropped
            )
        }
    )];
    out.push(format!("  loop time ({clock}): {}", summary_line(&p.loop_ns)));
    if let (Some(s), Some(j), Some(sd)) = (&p.loop_ns, p.jitter_ns, p.stddev_ns) {
        out.push(format!("  mean {}  jitter (max - min) {}  std dev {}", fmt_ns(s.mean), fmt_ns(j), fmt_ns(sd)));
    }
    out.extend(text_histogram(&p.card.histogram, p.clock_hz, width));
    if let Some(r) = p.return_read_mean_ns {
        out.push(format!(
            "  DMA return: doorbell to completion {} on average ({clock}); {} failed reads rung again",
            fmt_ns(r),
            p.doorbell_retries
        ));
    }
    if let Some(c) = &p.host_compute_ns {
        out.push(format!("  host: token seen to return issued (real host time) p50 {}  max {}", fmt_ns(c.median), fmt_ns(c.max)));
    }
    match (p.polls_per_iteration, p.detect) {
        (Some(n), Detect::Poll) => out.push(format!("  polls per iteration: {n:.1}")),
        _ => out.push(format!("  interrupts: {}", p.interrupts)),
    }
    if let Some(g) = p.sim_host_gaps {
        if g.capped_gaps > 0 {
            out.push(format!(
                "  WARNING: the simulator capped {} of {} host gaps: those loops under-state the host's time",
                g.capped_gaps, g.gaps
            ));
        }
    }
    out.push(format!("  {}", realtime::thread_line(p.pinned_cpu, p.fifo_priority)));
    out
}

/// The sweep as one table: a row per point.
pub fn sweep_table(points: &[Point]) -> Vec<String> {
    let mut out = vec![format!(
        "  {:>6}  {:<6} {:<9} {:<7} {:>11} {:>11} {:>11} {:>11} {:>11} {:>11}",
        "bytes", "detect", "return", "load", "min", "p50", "p99", "max", "mean", "jitter"
    )];
    for p in points {
        let s = p.loop_ns.as_ref();
        let f = |v: Option<f64>| v.map_or("-".to_string(), fmt_ns);
        out.push(format!(
            "  {:>6}  {:<6} {:<9} {:<7} {:>11} {:>11} {:>11} {:>11} {:>11} {:>11}{}",
            p.size_bytes,
            p.detect.name(),
            p.ret.name(),
            format!("{:?}", p.condition).to_lowercase(),
            f(s.map(|s| s.min)),
            f(s.map(|s| s.median)),
            f(s.map(|s| s.p99)),
            f(s.map(|s| s.max)),
            f(s.map(|s| s.mean)),
            f(p.jitter_ns),
            match (p.verified, p.sim_host_gaps.filter(|g| g.capped_gaps > 0)) {
                (false, _) => "  NOT VERIFIED".to_string(),
                // A capped gap under-states the host: the point's figures are then a floor.
                (true, Some(g)) => format!("  {} of {} host gaps capped (figures under-state the host)", g.capped_gaps, g.gaps),
                (true, None) => String::new(),
            }
        ));
    }
    out
}

/// The loop-time histograms of `points`, labelled by `label`: over bins chosen from their
/// samples (one binning for all) when every point keeps its samples, else over the card's
/// log2 buckets. Returns the series and the x axis label saying which bins these are.
pub fn loop_histograms(points: &[Point], label: impl Fn(&Point) -> String) -> (Vec<LogSeries>, String) {
    if points.iter().all(|p| !p.loop_cycles.is_empty()) {
        let sets: Vec<(String, Vec<f64>)> = points.iter().map(|p| (label(p), p.loop_samples_ns())).collect();
        if let Some((series, bins)) = crate::plot::binned_series(&sets) {
            return (series, format!("loop time ({bins} from the samples)"));
        }
    }
    let series = points
        .iter()
        .map(|p| LogSeries { label: label(p), kind: Mark::Bars(log2_buckets(&p.card.histogram, p.clock_hz)), points: Vec::new() })
        .collect();
    (series, "loop time (log scale; the card's log2 buckets of cycles)".into())
}

/// The figure of a run: median loop time against size for a sweep, else the histograms of
/// loop time (bars in ns over bins chosen from the samples, one series per size).
fn chart_svg(title: &str, points: &[Point], sweep: bool) -> anyhow::Result<String> {
    if sweep {
        crate::plot::render_svg(&sweep_chart(title, points))
    } else {
        let (series, x_label) = loop_histograms(points, |p| format!("{} B {}", p.size_bytes, p.label()));
        Ok(render_log_svg(&LogChart {
            title: title.into(),
            x_label,
            y_label: "iterations (log scale)".into(),
            x_ticks: Ticks::Ns,
            y_ticks: Ticks::Count,
            series,
        }))
    }
}

/// Median loop time against size, one line per detection/return/condition.
fn sweep_chart(title: &str, points: &[Point]) -> Chart {
    {
        // Median loop time against size, one line per detection/return/condition.
        let mut labels: Vec<String> = points.iter().map(Point::label).collect();
        labels.dedup();
        labels.sort();
        labels.dedup();
        Chart {
            title: title.into(),
            x_label: "buffer size".into(),
            y_label: "median loop time, us".into(),
            x_axis: XAxis::Log2Bytes,
            y_range: None,
            series: labels
                .iter()
                .map(|l| Series {
                    label: l.clone(),
                    points: points
                        .iter()
                        .filter(|p| &p.label() == l)
                        .filter_map(|p| p.loop_ns.as_ref().map(|s| (f64::from(p.size_bytes), s.median / 1e3)))
                        .collect(),
                    style: Style::Line,
                })
                .collect(),
        }
    }
}

pub fn run(cmd: &Cmd, device: &str, json: bool) -> anyhow::Result<ExitCode> {
    let started = Instant::now();
    let plan = parse_plan(cmd)?;
    check_optional_output("--svg", cmd.svg.as_deref())?;
    check_optional_output("--output", cmd.output.as_deref())?;
    if let (Some(svg), Some(output)) = (&cmd.svg, &cmd.output) {
        crate::args::refuse_same_file("--svg", svg, "--output", output)?;
    }
    let mut session = Session::open(device)?;
    session.card.require(Feature::RtLoop, "real-time loop")?;
    progress::install_stop_handler();
    let poll_step_ns = plan.config(8, Detect::Poll, Return::Register).poll_step.as_nanos() as f64;
    let basis = time_basis(&session, poll_step_ns);
    let detect_timeout = matches!(basis.kind, "sim_real_host_time" | "sim_live").then_some(SIM_REAL_HOST_TIME_DETECT_TIMEOUT);
    let width = cmd.bar_width as usize;
    if !json {
        realtime::print_header(&session, &basis);
    }
    let mut planned = Vec::new();
    for &condition in &plan.placement.conditions {
        for &size in &plan.sizes {
            for &detect in &plan.detect {
                for &ret in &plan.ret {
                    planned.push((size, detect, ret, condition));
                }
            }
        }
    }
    let progress = Progress::new(planned.len() as u64, json);
    let mut checkpoints = Checkpoints::new(cmd.output.as_deref());
    let mut points = Vec::new();
    for &point in &planned {
        if progress::stop_requested() {
            break;
        }
        let (size, detect, ret, condition) = point;
        progress.start(&format!("{size} B, {}/{}, {}", detect.name(), ret.name(), format!("{condition:?}").to_lowercase()));
        let p = match run_point(&mut session, &plan, point, detect_timeout) {
            Ok(p) => p,
            // Stopped in the middle of the point: it is dropped, the finished ones kept.
            Err(e) if progress::is_interrupt(&e) => break,
            Err(e) => return Err(e),
        };
        if !json {
            for line in point_text(&p, width, basis.clock) {
                progress.println(&line);
            }
        }
        points.push(p);
        progress.done_one();
        let basis = &basis;
        checkpoints.offer(points.len(), planned.len(), || document(&plan, &session, basis, None, None, &points, started))?;
    }
    progress.finish();
    let both = |c: Condition| points.iter().any(|p| p.condition == c);
    let comparison = (both(Condition::Idle) && both(Condition::Loaded)).then(|| {
        let mut c = realtime::comparison(&basis, session.environment.cpus);
        if basis.kind == "sim_virtual" {
            // Polls advance the card by fixed steps: where they fall against the card's DMA
            // can differ between runs by up to a step, whatever the load.
            let step = format!("these figures (a difference of one poll step, {poll_step_ns:.0} ns, or less is where the polls fell);");
            c.statement = c.statement.replacen("these figures;", &step, 1);
        }
        c
    });
    let detected = |d: Detect| points.iter().any(|p| p.detect == d);
    let detection = if detected(Detect::Poll) && detected(Detect::Irq) { detection_limit(&basis, poll_step_ns) } else { None };
    if !json && points.len() > 1 {
        crate::outln!("all points ({}; loop time in {}):", basis.kind, basis.clock);
        for line in sweep_table(&points) {
            crate::outln!("{line}");
        }
    }
    if !json {
        if let Some(c) = &comparison {
            crate::outln!("what idle vs loaded shows: {}", c.statement);
        }
        if let Some(d) = &detection {
            crate::outln!("what irq vs poll shows: {}", d.statement);
        }
    }
    if let Some(path) = &cmd.svg {
        realtime::write_svg(path, &session, &basis, "Real-time loop", |t| chart_svg(&t, &points, plan.sweep || plan.sizes.len() > 1))?;
    }
    let failed = points.iter().any(|p| !p.verified);
    let mut doc = document(&plan, &session, &basis, comparison, detection, &points, started);
    if progress::stop_requested() {
        doc.stopped_at(points.len(), planned.len());
        if !json {
            crate::outln!("interrupted: {} of {} points measured", points.len(), planned.len());
        }
    }
    doc.emit(cmd.output.as_deref(), json, failed)
}

/// The result document of `points` (a checkpoint's, or the final one).
fn document<'a>(
    plan: &'a Plan,
    session: &Session,
    basis: &TimeBasis,
    comparison: Option<Comparison>,
    detection: Option<SimLimit>,
    points: &'a [Point],
    started: Instant,
) -> ResultDoc<&'a Plan, Body<'a>> {
    let mut notes = session.notes.clone();
    notes.push(basis.statement.clone());
    notes.extend(points.iter().flat_map(|p| p.notes.iter().cloned()).take(1));
    let limits: Vec<SimLimit> =
        comparison.as_ref().and_then(|c| realtime::comparison_limit(basis, c)).into_iter().chain(detection.clone()).collect();
    let mut doc = ResultDoc::new(
        "loop",
        plan,
        session.environment.clone(),
        session.link.clone(),
        None,
        Body { time_basis: basis.clone(), comparison, detection: detection.map(|d| d.statement), points: Cow::Borrowed(points) },
        started.elapsed().as_secs_f64(),
        notes,
    );
    for l in limits {
        doc.add_sim_limit(l);
    }
    doc
}

#[cfg(test)]
mod tests {
    use super::*;
    use tlpx_device::rt_loop::CardStats;

    use crate::realtime::HostGaps;

    fn point(gaps: Option<HostGaps>) -> Point {
        Point {
            size_bytes: 256,
            detect: Detect::Poll,
            ret: Return::Register,
            condition: Condition::Loaded,
            load: vec![],
            load_cpus: vec![],
            iterations: 3,
            verified: true,
            clock_hz: 125_000_000,
            loop_ns: Summary::of(&[1000.0, 2000.0, 10_000_000.0]),
            jitter_ns: Some(9_999_000.0),
            stddev_ns: None,
            return_read_mean_ns: None,
            host_compute_ns: None,
            polls_per_iteration: None,
            interrupts: 0,
            doorbell_retries: 0,
            data_errors: 0,
            card: CardStats::default(),
            sim_host_gaps: gaps,
            pinned_cpu: None,
            fifo_priority: None,
            notes: vec![],
            loop_cycles: vec![],
        }
    }

    #[test]
    fn the_table_marks_points_whose_host_gaps_were_capped() {
        let capped = HostGaps { gaps: 40, capped_gaps: 1, longest_gap_ns: 12_000_000 };
        let rows = sweep_table(&[point(Some(capped)), point(Some(HostGaps { capped_gaps: 0, ..capped })), point(None)]);
        assert!(rows[1].ends_with("1 of 40 host gaps capped (figures under-state the host)"), "{rows:?}");
        assert!(!rows[2].contains("capped") && !rows[3].contains("capped"), "{rows:?}");
    }

    #[test]
    fn stddev_of_known_values() {
        assert_eq!(stddev(&[1.0]), None);
        let s = stddev(&[2.0, 4.0, 4.0, 4.0, 5.0, 5.0, 7.0, 9.0]).expect("enough values");
        assert!((s - 2.138).abs() < 1e-3, "{s}");
    }

    fn fixture_points() -> Vec<Point> {
        let doc: serde_json::Value =
            serde_json::from_str(include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/results/loop.json"))).expect("fixture");
        serde_json::from_value(doc["points"].clone()).expect("points")
    }

    #[test]
    fn loop_histograms_bin_the_samples_and_fall_back_to_the_card_buckets() {
        let mut points = fixture_points();
        assert!(points.len() >= 2 && points.iter().all(|p| !p.loop_cycles.is_empty()));
        let (series, x_label) = loop_histograms(&points, |p| format!("{} B", p.size_bytes));
        assert!(x_label.contains("from the samples") && !x_label.contains("log2"), "{x_label}");
        // One binning for all: every series binned, on the same axis, each counting its samples.
        let linear: Vec<bool> = series
            .iter()
            .map(|s| match &s.kind {
                Mark::Binned { linear, .. } => *linear,
                other => panic!("not binned: {other:?}"),
            })
            .collect();
        assert!(linear.windows(2).all(|w| w[0] == w[1]));
        for (s, p) in series.iter().zip(&points) {
            let Mark::Binned { bars, .. } = &s.kind else { unreachable!() };
            assert_eq!(bars.iter().map(|b| b.2).sum::<f64>(), p.loop_cycles.len() as f64, "{}", s.label);
        }
        // The figure of one point: bars over data bins, ticks in time units.
        let svg = chart_svg("Real-time loop", &points[..1], false).expect("svg");
        assert!(svg.contains("from the samples") && !svg.contains("log2"), "{svg}");
        assert!(svg.contains(" ns</text>") || svg.contains(" µs</text>"), "ticks in ns or µs");
        // A point without its samples (an older result): the card's log2 buckets, said so.
        points[1].loop_cycles.clear();
        let (series, x_label) = loop_histograms(&points, |p| format!("{} B", p.size_bytes));
        assert!(x_label.contains("the card's log2 buckets"), "{x_label}");
        assert!(series.iter().all(|s| matches!(s.kind, Mark::Bars(_))));
    }
}
