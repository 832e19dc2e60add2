//! `tlpx irq`: interrupt dispatch latency, as the card's interrupt latency timer measures it.
//!
//! ```text
//!  card timer: fire (T0) ──MSI──► host ──wake──► measuring thread (pinned, SCHED_FIFO)
//!       ▲                                              │ wait_interrupt returns
//!       └──────── ack_user write arrives (T_user) ◄────┘ writes ack_user at once
//! ```
//!
//! The timer fires at random times in [--min, --max] (or every --period); a thread pinned to
//! --cpu, optionally SCHED_FIFO, waits for each interrupt and acknowledges it; the card
//! latches when the acknowledgement arrives. Per stage: a log2 histogram in the terminal,
//! p50 / p99 / p99.9 / max, the overrun and loss counters, and the cost of one posted write
//! (ping), which is part of every figure. `--load` runs CPU, memory and syscall load on
//! chosen CPUs; `--compare idle,loaded` runs both and prints them side by side.
//!
//! What the figures mean depends on where they come from (see docs/interrupts.md): on
//! hardware the user stage is real host time; on the simulator in its default virtual time
//! it is the modelled link and card only, and the output says so.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::bail;
use clap::Args;
use serde::Serialize;
use tlpx_device::card::Card;
use tlpx_device::irq_timer::{self, Counters, Run, Sample, SequenceCheck, Stage, StageStats, TimerConfig};
use tlpx_model::stats::Summary;

use crate::plot::{Chart, Series, Style, XAxis};
use crate::realtime::{self, fmt_ns, summary_line, text_histogram, Condition, LoadKind, Placement, PlacementArgs, TimeBasis};
use crate::results::ResultDoc;
use crate::session::Session;
use crate::sizes::parse_duration;

#[derive(Debug, Args)]
pub struct Cmd {
    /// Interrupts to measure per run.
    #[arg(long, conflicts_with = "duration")]
    pub samples: Option<u32>,
    /// Measure for this long (card time) instead of a number of samples: 500ms, 2s.
    #[arg(long)]
    pub duration: Option<String>,
    /// Shortest interval between interrupts (random mode).
    #[arg(long, default_value = "10us", conflicts_with = "period")]
    pub min: String,
    /// Longest interval between interrupts (random mode).
    #[arg(long, default_value = "100us", conflicts_with = "period")]
    pub max: String,
    /// A fixed interval between interrupts instead of random ones.
    #[arg(long)]
    pub period: Option<String>,
    /// Seed of the card's interval LFSR.
    #[arg(long, default_value_t = 1)]
    pub seed: u32,
    #[command(flatten)]
    pub placement: PlacementArgs,
    /// Width in characters of the longest terminal histogram bar (bars are log-scaled).
    #[arg(long, default_value_t = 40, value_parser = clap::value_parser!(u32).range(4..=200))]
    pub bar_width: u32,
    /// Also draw the histograms into this SVG file.
    #[arg(long, value_name = "FILE.svg")]
    pub svg: Option<PathBuf>,
    /// Also write the result document (JSON) to this file.
    #[arg(long, value_name = "FILE.json")]
    pub output: Option<PathBuf>,
    /// Test option: do not acknowledge the first N interrupts, to provoke N overruns.
    #[arg(long, hide = true, default_value_t = 0)]
    pub no_ack: u32,
}

/// How long to measure.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Amount {
    Samples(u32),
    /// Card time in seconds.
    Seconds(f64),
}

/// The checked arguments.
#[derive(Debug, Clone, Serialize)]
pub struct Plan {
    pub amount: Amount,
    /// Interval in ns: (min, max); equal when periodic.
    pub interval_ns: (f64, f64),
    pub periodic: bool,
    pub seed: u32,
    #[serde(flatten)]
    pub placement: Placement,
    pub no_ack: u32,
}

fn bad(msg: String) -> anyhow::Error {
    anyhow::Error::msg(msg)
}

impl Plan {
    /// Checks the arguments; every error names the bad value and what is accepted.
    pub fn parse(cmd: &Cmd) -> anyhow::Result<Plan> {
        let amount = match (&cmd.duration, cmd.samples) {
            (Some(d), _) => Amount::Seconds(parse_duration("--duration", d).map_err(bad)?),
            (None, Some(0)) => bail!("--samples must be at least 1, not 0"),
            (None, Some(n)) => Amount::Samples(n),
            (None, None) => Amount::Samples(1000),
        };
        let ns = |flag: &str, t: &str| parse_duration(flag, t).map(|s| s * 1e9).map_err(bad);
        let (interval_ns, periodic) = match &cmd.period {
            Some(p) => {
                let p = ns("--period", p)?;
                ((p, p), true)
            }
            None => {
                let (lo, hi) = (ns("--min", &cmd.min)?, ns("--max", &cmd.max)?);
                if lo > hi {
                    bail!("the interval is inverted: --min {} is above --max {}; give --min <= --max", cmd.min, cmd.max);
                }
                ((lo, hi), false)
            }
        };
        if let Amount::Samples(n) = amount {
            if cmd.no_ack >= n {
                bail!("--no-ack {} must be below --samples {n}: the last interrupt must be acknowledged", cmd.no_ack);
            }
        }
        let placement = Placement::parse(&cmd.placement)?;
        Ok(Plan { amount, interval_ns, periodic, seed: cmd.seed, placement, no_ack: cmd.no_ack })
    }

    fn timer_config(&self, clock_hz: u32) -> anyhow::Result<TimerConfig> {
        let count = match self.amount {
            Amount::Samples(n) => n,
            Amount::Seconds(_) => 0,
        };
        let c = if self.periodic {
            TimerConfig::periodic_ns(self.interval_ns.0, count, self.seed, clock_hz)?
        } else {
            TimerConfig::random_ns(self.interval_ns.0, self.interval_ns.1, count, self.seed, clock_hz)?
        };
        Ok(c)
    }
}

// Time basis ---------------------------------------------------------------------------------

pub fn time_basis(session: &Session) -> TimeBasis {
    let (kind, sim_host_time) = realtime::basis_kind(session);
    let statement = match kind {
        "hardware" => "hardware: every figure is real, measured by the card's clock: MSI delivery, the host's \
                       interrupt handling, the wake-up of the measuring thread and the ack write's trip back to the card",
        "sim_real_host_time" => "simulator, host time real: the card's clock follows the host's, so the user stage is the modelled \
                        MSI and ack-write link time PLUS the real wake-up of this process on this host (socket, scheduler); \
                        the card, the link and the root complex are modelled, not hardware",
        _ => "simulator, virtual time: card time runs only while tlpx waits on the simulator, so the user stage is \
                        ONLY the modelled link and card time (MSI to the root complex, the ack write back); the host's \
                        wake-up and scheduling cost no card time and are NOT in these figures (tlpx-sim --host-time real \
                        includes them); never read these as hardware figures",
    };
    TimeBasis { kind, sim_host_time, statement: statement.into() }
}

// Measurement --------------------------------------------------------------------------------

/// One stage of one run.
#[derive(Debug, Clone, Serialize)]
pub struct StageReport {
    pub stage: Stage,
    /// Whether anything acknowledged this stage.
    pub measured: bool,
    /// From the sample records, in ns.
    pub latency_ns: Option<Summary>,
    /// The card's own statistics and log2 histogram (cycles).
    pub card: StageStats,
}

/// One run (idle or loaded).
#[derive(Debug, Clone, Serialize)]
pub struct RunReport {
    pub condition: Condition,
    pub load: Vec<LoadKind>,
    pub load_cpus: Vec<usize>,
    pub config: TimerConfig,
    pub clock_hz: u32,
    pub interrupts_waited: u64,
    /// Interrupts the host did not acknowledge on purpose (--no-ack).
    pub not_acknowledged: u32,
    pub counters: Counters,
    pub sequence: SequenceCheck,
    /// Sequence gaps the card's `lost` counter does not explain.
    pub unexplained_missing: u64,
    pub stages: Vec<StageReport>,
    /// Cost of one posted register write as the card sees it (median of pings), cycles and ns.
    pub ping_cycles: u32,
    pub ping_ns: f64,
    pub pinned_cpu: Option<usize>,
    pub fifo_priority: Option<i32>,
    pub notes: Vec<String>,
    /// User-stage samples in cycles (0xFFFFFFFF marks an overrun).
    pub user_cycles: Vec<u32>,
}

impl RunReport {
    fn ns(&self, cycles: f64) -> f64 {
        cycles * 1e9 / f64::from(self.clock_hz.max(1))
    }

    pub fn failed(&self) -> bool {
        self.unexplained_missing > 0 || self.counters.lost > 0
    }
}

/// What the measuring thread needs.
struct Job {
    config: TimerConfig,
    amount: Amount,
    no_ack: u32,
}

/// Per-wait timeout: four longest intervals, at least 20 ms.
fn wait_timeout(config: &TimerConfig, clock_hz: u32) -> Duration {
    let s = 4.0 * f64::from(config.max_interval_cycles) / f64::from(clock_hz.max(1));
    Duration::from_secs_f64(s.max(0.02))
}

/// The measuring loop, in the measuring thread (which owns the card meanwhile).
fn measure(card: &mut Card, job: &Job) -> anyhow::Result<(Vec<Sample>, irq_timer::RunEnd, u64)> {
    let clock_hz = card.identity().clock_hz;
    let timeout = wait_timeout(&job.config, clock_hz);
    let ring = match job.amount {
        Amount::Samples(n) => n.next_power_of_two().clamp(irq_timer::MIN_RING_RECORDS, 4096),
        Amount::Seconds(_) => 4096,
    };
    let mut run = Run::start(card, &job.config, ring)?;
    let mut samples = Vec::new();
    let mut waited = 0u64;
    let started = Instant::now();
    let mut first_cycle = None;
    let mut skip = job.no_ack;
    let outcome: anyhow::Result<()> = (|| {
        loop {
            let irq = card.device().wait_interrupt(irq_timer::WAIT_MASK, timeout)?;
            let Some(irq) = irq else {
                bail!(
                    "no interrupt from the timer within {timeout:?} after {waited} interrupts (its interval is at most {} cycles)",
                    job.config.max_interval_cycles
                );
            };
            if skip > 0 {
                skip -= 1;
            } else {
                irq_timer::ack_user(card)?;
            }
            waited += 1;
            let done = match job.amount {
                Amount::Samples(n) => waited >= u64::from(n),
                Amount::Seconds(s) => match irq.card_cycle {
                    Some(c) => {
                        let first = *first_cycle.get_or_insert(c);
                        (c - first) as f64 / f64::from(clock_hz.max(1)) >= s
                    }
                    None => started.elapsed().as_secs_f64() >= s,
                },
            };
            if done || crate::progress::stop_requested() {
                return Ok(());
            }
            if waited.is_multiple_of(32) {
                run.poll(card, &mut samples)?;
            }
        }
    })();
    let end = run.finish(card, true, &mut samples);
    outcome?;
    Ok((samples, end?, waited))
}

fn stage_report(stage: Stage, samples: &[Sample], card: StageStats, clock_hz: u32) -> StageReport {
    let ns = 1e9 / f64::from(clock_hz.max(1));
    let values: Vec<f64> = samples
        .iter()
        .filter_map(|s| match stage {
            Stage::Isr => s.isr_cycles,
            Stage::User => s.user_cycles,
        })
        .map(|c| f64::from(c) * ns)
        .collect();
    StageReport { stage, measured: card.count > 0, latency_ns: Summary::of(&values), card }
}

fn run_condition(session: &mut Session, plan: &Plan, condition: Condition) -> anyhow::Result<RunReport> {
    let clock_hz = session.clock_hz;
    let config = plan.timer_config(clock_hz)?;
    let (ping_cycles, _) = irq_timer::ping_cost(&mut session.card, 9)?;
    let pl = &plan.placement;
    let load = pl.load_for(condition)?;
    let job = Job { config: config.clone(), amount: plan.amount, no_ack: plan.no_ack };
    // A thread of its own measures with the session's card and hands it back when it ends.
    let (result, notes) = realtime::on_measuring_thread(&mut session.card, "tlpx-irq", pl, |card| measure(card, &job));
    drop(load);
    let (samples, end, waited) = result?;
    let sequence = irq_timer::check_sequence(&samples, 0);
    let unexplained_missing = sequence.missing.saturating_sub(u64::from(end.counters.lost))
        + u64::from(end.counters.sequence.wrapping_sub(end.counters.lost)).saturating_sub(samples.len() as u64);
    let mut stages = Vec::new();
    for stage in Stage::ALL {
        let card_stats = irq_timer::stage_stats(&mut session.card, stage)?;
        stages.push(stage_report(stage, &samples, card_stats, clock_hz));
    }
    let ns = 1e9 / f64::from(clock_hz.max(1));
    Ok(RunReport {
        condition,
        load: if condition == Condition::Loaded { pl.load.clone() } else { Vec::new() },
        load_cpus: if condition == Condition::Loaded { pl.load_cpus.clone() } else { Vec::new() },
        config,
        clock_hz,
        interrupts_waited: waited,
        not_acknowledged: plan.no_ack,
        counters: end.counters,
        sequence,
        unexplained_missing,
        stages,
        ping_cycles,
        ping_ns: f64::from(ping_cycles) * ns,
        pinned_cpu: pl.cpu,
        fifo_priority: pl.fifo.filter(|_| notes.is_empty()),
        notes,
        user_cycles: samples.iter().map(|s| s.user_cycles.unwrap_or(u32::MAX)).collect(),
    })
}

// Output -------------------------------------------------------------------------------------

pub fn run_text(r: &RunReport, width: usize) -> Vec<String> {
    let mut out = vec![format!(
        "{}: {} interrupts ({} fires), interval {}..{} cycles ({}), ping (one posted write) {} cycles = {}",
        realtime::condition_text(r.condition, &r.load, &r.load_cpus),
        r.interrupts_waited,
        r.counters.fires,
        r.config.min_interval_cycles,
        r.config.max_interval_cycles,
        if r.config.mode == irq_timer::Mode::Periodic { "periodic" } else { "random" },
        r.ping_cycles,
        fmt_ns(r.ping_ns)
    )];
    for s in &r.stages {
        if !s.measured {
            out.push(format!(
                "  {} stage: not measured (nothing on this backend writes ack_isr: no interrupt handler of tlpx runs in the kernel)",
                s.stage.name()
            ));
            continue;
        }
        out.push(format!("  {} stage (fire to ack arriving): {}", s.stage.name(), summary_line(&s.latency_ns)));
        out.extend(text_histogram(&s.card.histogram, r.clock_hz, width));
    }
    out.push(format!(
        "  counters: fires {}  overruns {}  stray acks {} (isr) {} (user)  lost {}  sequence gaps {} ({} missing, {} unexplained)",
        r.counters.fires,
        r.counters.overruns,
        r.counters.stray_isr_acks,
        r.counters.stray_user_acks,
        r.counters.lost,
        r.sequence.gaps.len(),
        r.sequence.missing,
        r.unexplained_missing
    ));
    if r.not_acknowledged > 0 {
        out.push(format!("  {} interrupts deliberately not acknowledged (--no-ack)", r.not_acknowledged));
    }
    if r.counters.overruns > r.not_acknowledged {
        out.push(format!(
            "  WARNING: {} fires came before the previous one was acknowledged: the host is slower than the interval, \
             so interrupts queue up and an acknowledgement can close a later fire than the one that woke the thread \
             (the short values); lengthen --min / --period",
            r.counters.overruns - r.not_acknowledged
        ));
    }
    out.push(format!("  {}", realtime::thread_line(r.pinned_cpu, r.fifo_priority)));
    out
}

/// Side-by-side table of runs (rtla timerlat style).
pub fn compare_text(runs: &[RunReport]) -> Vec<String> {
    let mut out = Vec::new();
    let head: Vec<String> = runs.iter().map(|r| format!("{:>14}", format!("{:?}", r.condition).to_lowercase())).collect();
    out.push(format!("  {:<14}{}", "user stage", head.join("")));
    type Get = fn(&Summary) -> f64;
    let rows: [(&str, Get); 5] =
        [("min", |s| s.min), ("p50", |s| s.median), ("p99", |s| s.p99), ("p99.9", |s| s.p999), ("max", |s| s.max)];
    for (name, get) in rows {
        let cells: Vec<String> = runs
            .iter()
            .map(|r| {
                let s = r.stages.iter().find(|s| s.stage == Stage::User).and_then(|s| s.latency_ns.as_ref());
                format!("{:>14}", s.map_or("-".into(), |s| fmt_ns(get(s))))
            })
            .collect();
        out.push(format!("  {name:<14}{}", cells.join("")));
    }
    for (name, get) in [("overruns", 0usize), ("lost", 1)] {
        let cells: Vec<String> = runs
            .iter()
            .map(|r| format!("{:>14}", if get == 0 { r.counters.overruns } else { r.counters.lost }))
            .collect();
        out.push(format!("  {name:<14}{}", cells.join("")));
    }
    out
}

fn histogram_chart(title: &str, runs: &[RunReport]) -> Chart {
    let ns = |r: &RunReport, k: usize| r.ns((1u64 << k) as f64 * 1.5).log2();
    Chart {
        title: title.to_string(),
        x_label: "latency, log2(ns): 10 = 1 us, 20 = 1 ms (log2 buckets of card cycles)".into(),
        y_label: "interrupts".into(),
        x_axis: XAxis::Linear,
        y_range: None,
        series: runs
            .iter()
            .flat_map(|r| {
                r.stages.iter().filter(|s| s.measured).map(move |s| Series {
                    label: format!("{} {}", format!("{:?}", r.condition).to_lowercase(), s.stage.name()),
                    points: s.card.histogram.iter().enumerate().filter(|(_, c)| **c > 0).map(|(k, c)| (ns(r, k), *c as f64)).collect(),
                    style: Style::Points,
                })
            })
            .collect(),
    }
}

#[derive(Debug, Serialize)]
struct Body {
    time_basis: TimeBasis,
    points: Vec<RunReport>,
}

pub fn run(cmd: &Cmd, device: &str, json: bool) -> anyhow::Result<ExitCode> {
    let started = Instant::now();
    let plan = Plan::parse(cmd)?;
    let mut session = Session::open(device)?;
    if !session.card.has_feature("irq_timer") {
        bail!("this card has no interrupt latency timer (its features: {})", session.card.identity().features.join(", "));
    }
    plan.timer_config(session.clock_hz)?;
    crate::progress::install_stop_handler();
    let basis = time_basis(&session);
    let width = cmd.bar_width as usize;
    if !json {
        realtime::print_header(&session, &basis);
    }
    let mut runs = Vec::new();
    for &condition in &plan.placement.conditions {
        let r = run_condition(&mut session, &plan, condition)?;
        if !json {
            for line in run_text(&r, width) {
                println!("{line}");
            }
        }
        runs.push(r);
    }
    if !json && runs.len() > 1 {
        println!("side by side ({}):", basis.kind);
        for line in compare_text(&runs) {
            println!("{line}");
        }
    }
    if let Some(path) = &cmd.svg {
        realtime::write_svg(path, &session, &basis, "Interrupt dispatch latency", |t| histogram_chart(&t, &runs))?;
    }
    let failed = runs.iter().any(RunReport::failed);
    let mut notes = session.notes.clone();
    notes.push(basis.statement.clone());
    let doc = ResultDoc::new(
        "irq",
        plan,
        session.environment.clone(),
        session.link.clone(),
        None,
        Body { time_basis: basis, points: runs },
        started.elapsed().as_secs_f64(),
        notes,
    );
    doc.emit(cmd.output.as_deref(), json, failed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn histogram_rows_cover_the_non_empty_buckets() {
        let mut h = vec![0u64; 32];
        h[4] = 3;
        h[6] = 1000;
        let rows = text_histogram(&h, 125_000_000, 40);
        assert_eq!(rows.len(), 3, "{rows:?}");
        assert!(rows[0].contains("128 ns") && rows[0].contains("   3 |"), "{rows:?}");
        assert!(rows[1].contains("       0 |"), "{rows:?}");
        assert!(rows[2].ends_with(&"#".repeat(40)), "{rows:?}");
    }
}
