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
//! A progress bar counts the interrupts (or the card time of --duration) with an estimate of
//! the time left; Ctrl-C ends the run in progress at once, keeping its samples (the run is
//! marked `"interrupted": true`), skips the runs not begun and writes the result (exit
//! status 130). With --output the file is also written after each run (crate::checkpoint).
//! On the simulator --samples defaults to fewer interrupts (crate::defaults): every one is
//! simulated, and with `tlpx-sim --host-time real` every gap of the host is too.
//!
//! What the figures mean depends on where they come from (see docs/interrupts.md): on
//! hardware the user stage is real host time; on the simulator in its default virtual time
//! it is the modelled link and card only, and the output says so.

use std::borrow::Cow;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use clap::Args;
use tlpx_device::card::{Card, Feature};
use tlpx_device::irq_timer::{self, Run, Sample, Stage, StageStats, TimerConfig};
use tlpx_device::isr_trace::{self, ClockCorrelation, ClockFit, IrqHandlerTrace, TraceOptions};
use tlpx_model::stats::Summary;

/// The document's types are tlpx-results'.
pub use tlpx_results::irq::{Amount, Body, CpuReport, IsrTraceReport, Plan, RunReport, StageReport, SteeringReport, NO_CPU};

/// Per-CPU runs (--cpus), the steering of vectors to CPUs and the rtla / cyclictest layouts.
#[path = "percpu.rs"]
pub mod percpu;
pub use percpu::Layout;

use crate::args::{check_optional_output, whole};
use crate::checkpoint::Checkpoints;
use crate::defaults::{BackendDefault, DefaultsFor};
use crate::plot::{log2_buckets, render_log_svg, LogChart, LogSeries, Mark, Ticks};
use crate::progress::{self, Progress, Ticker};
use crate::realtime::{self, fmt_ns, summary_line, text_histogram, Comparison, Condition, PlacementArgs, TimeBasis};
use crate::results::{ResultDoc, SimLimit};
use crate::session::Session;
use crate::sizes::parse_duration;

/// Interrupts per run when neither --samples nor --duration is given. On the simulator with
/// `--host-time real` every interrupt costs the simulation of a host gap (up to 10 ms of card
/// time): `--compare idle,loaded` took 120 s for 1000 (and 89 s for 200 on a machine loaded
/// 6-fold), 11 s for 100; in virtual time 1000 take about a second.
pub const SAMPLES: BackendDefault<u32> = BackendDefault { hardware: 1000, simulator: 100 };

#[derive(Debug, Args)]
pub struct Cmd {
    /// Interrupts to measure per run [default: 1000 on hardware, 100 on the simulator].
    #[arg(long, conflicts_with = "duration", value_parser = whole(1, u32::MAX), allow_negative_numbers = true)]
    pub samples: Option<u32>,
    /// Measure for this long (card time) instead of a number of samples: 500ms, 2s.
    #[arg(long, allow_hyphen_values = true)]
    pub duration: Option<String>,
    /// Shortest interval between interrupts (random mode).
    #[arg(long, default_value = "10us", conflicts_with = "period", allow_hyphen_values = true)]
    pub min: String,
    /// Longest interval between interrupts (random mode).
    #[arg(long, default_value = "100us", conflicts_with = "period", allow_hyphen_values = true)]
    pub max: String,
    /// A fixed interval between interrupts instead of random ones.
    #[arg(long, allow_hyphen_values = true)]
    pub period: Option<String>,
    /// Seed of the card's interval LFSR.
    #[arg(long, default_value_t = 1, value_parser = whole(0, u32::MAX), allow_negative_numbers = true)]
    pub seed: u32,
    #[command(flatten)]
    pub placement: PlacementArgs,
    /// Measure these CPUs in one run: a CPU list (0-3,6) or `all` (every online CPU this
    /// process may run on). A measuring thread pinned on each; the fires are dealt to them in
    /// turn. Without it, the one thread of --cpu.
    #[arg(long, conflicts_with = "cpu", value_name = "LIST|all")]
    pub cpus: Option<String>,
    /// How the histograms are printed: tlpx (log2 rows per stage, plus a per-CPU table), rtla
    /// (`rtla timerlat hist`'s columns per CPU), cyclictest (`cyclictest -h`'s).
    #[arg(long, value_enum, default_value_t = Layout::Tlpx)]
    pub layout: Layout,
    /// Bucket width of the rtla and cyclictest layouts, in ns (rtla's -b; 1000 = 1 us buckets).
    #[arg(long, default_value_t = 1000, value_parser = whole(1u64, 1_000_000_000), allow_negative_numbers = true)]
    pub bucket_size: u64,
    /// Buckets of the rtla and cyclictest layouts (rtla's -E); later values count as over.
    #[arg(long, default_value_t = 256, value_parser = whole(1usize, 1_000_000), allow_negative_numbers = true)]
    pub entries: usize,
    /// Width in characters of the longest terminal histogram bar (bars are log-scaled).
    #[arg(long, default_value_t = 40, value_parser = whole(4u32, 200), allow_negative_numbers = true)]
    pub bar_width: u32,
    /// Also draw the histograms into this SVG file.
    #[arg(long, value_name = "FILE.svg")]
    pub svg: Option<PathBuf>,
    /// Also write the result document (JSON) to this file.
    #[arg(long, value_name = "FILE.json")]
    pub output: Option<PathBuf>,
    /// Test option: do not acknowledge the first N interrupts, to provoke N overruns.
    #[arg(long, hide = true, default_value_t = 0, value_parser = whole(0, u32::MAX), allow_negative_numbers = true)]
    pub no_ack: u32,
}

fn bad(msg: String) -> anyhow::Error {
    anyhow::Error::msg(msg)
}

/// Checks the arguments; every error names the bad value and what is accepted.
pub fn parse_plan(cmd: &Cmd, defaults_for: DefaultsFor) -> anyhow::Result<Plan> {
    let amount = match (&cmd.duration, cmd.samples) {
        (Some(d), _) => Amount::Seconds(parse_duration("--duration", d).map_err(bad)?),
        (None, Some(0)) => bail!("--samples must be at least 1, not 0"),
        (None, samples) => Amount::Samples(SAMPLES.pick(samples, defaults_for)),
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
    let placement = realtime::parse_placement(&cmd.placement)?;
    let cpus = match &cmd.cpus {
        Some(spec) => Some(percpu::parse_cpus(spec, &cpu_roles(), &realtime::allowed_cpus())?),
        None => None,
    };
    Ok(Plan { amount, interval_ns, periodic, seed: cmd.seed, placement, no_ack: cmd.no_ack, cpus, defaults_for })
}

/// This host's CPUs and their roles; where sysfs cannot say, the CPUs this process may run
/// on, none isolated.
fn cpu_roles() -> isr_trace::CpuRoles {
    isr_trace::CpuRoles::read(std::path::Path::new(isr_trace::SYS_CPU)).unwrap_or_else(|_| isr_trace::CpuRoles {
        online: realtime::allowed_cpus().into_iter().map(|c| c as u32).collect(),
        ..Default::default()
    })
}

fn timer_config(plan: &Plan, clock_hz: u32) -> anyhow::Result<TimerConfig> {
    let count = match plan.amount {
        Amount::Samples(n) => n,
        Amount::Seconds(_) => 0,
    };
    let c = if plan.periodic {
        TimerConfig::periodic_ns(plan.interval_ns.0, count, plan.seed, clock_hz)
    } else {
        TimerConfig::random_ns(plan.interval_ns.0, plan.interval_ns.1, count, plan.seed, clock_hz)
    };
    // Worded as the driver's refusal ("invalid argument: ...").
    Ok(c.map_err(tlpx_device::DeviceError::from)?)
}

// Time basis ---------------------------------------------------------------------------------

pub fn time_basis(session: &Session) -> TimeBasis {
    let (kind, sim_host_time) = realtime::basis_kind(session);
    let statement = match kind {
        "hardware" => {
            "hardware: every figure is real, measured by the card's clock: MSI delivery, the host's \
                       interrupt handling, the wake-up of the measuring thread and the ack write's trip back to the card"
        }
        "sim_real_host_time" => {
            "simulator, host time real: the card's clock follows the host's, so the user stage is the modelled \
                        MSI and ack-write link time PLUS the real wake-up of this process on this host (socket, scheduler); \
                        the card, the link and the root complex are modelled, not hardware"
        }
        "sim_live" => {
            "simulator, live time (another client holds it): card time ran on its own while tlpx worked, so the user stage \
                        is the modelled MSI and ack-write link time PLUS this process's wake-up and code on this host, passing \
                        at the simulator's speed (slower than the card's clock: a wall microsecond is less than a card \
                        microsecond); neither the deterministic virtual figures nor hardware ones; not reproducible"
        }
        _ => {
            "simulator, virtual time: card time runs only while tlpx waits on the simulator, so the user stage is \
                        ONLY the modelled link and card time (MSI to the root complex, the ack write back); the host's \
                        wake-up and scheduling cost no card time and are NOT in these figures (tlpx-sim --host-time real \
                        includes them); never read these as hardware figures"
        }
    };
    TimeBasis { kind, sim_host_time, statement: statement.into(), clock: realtime::basis_clock(kind) }
}

/// On the simulator: what the user stage cannot contain (`None` on hardware).
pub fn dispatch_limit(basis: &TimeBasis, cpus: usize) -> Option<SimLimit> {
    let statement = match basis.kind {
        "hardware" => return None,
        "sim_real_host_time" | "sim_live" => format!(
            "the user stage is the modelled MSI and ack-write trips plus this machine's wall time from tlpx-sim's reply on its \
             Unix socket to tlpx's ack write, i.e. how its {cpus} CPU(s) schedule the simulator and tlpx: no interrupt \
             controller or kernel interrupt dispatch is in it; measure dispatch on hardware"
        ),
        _ => "the user stage is only the modelled MSI and ack-write trips (card and link) in virtual time: no interrupt \
              controller, kernel dispatch or thread wake-up is in it, so it is the same for every host; measure dispatch on \
              hardware"
            .to_string(),
    };
    Some(SimLimit::new("interrupt_dispatch_not_modelled", &["points[].stages"], statement))
}

/// When the idle run's median is above the loaded run's, says so with both figures.
pub fn idle_slower_than_loaded(runs: &[RunReport]) -> Option<String> {
    let p50 = |c: Condition| {
        runs.iter()
            .find(|r| r.condition == c)
            .and_then(|r| r.stages.iter().find(|s| s.stage == Stage::User))
            .and_then(|s| s.latency_ns.as_ref())
            .map(|s| s.median)
    };
    let (idle, loaded) = (p50(Condition::Idle)?, p50(Condition::Loaded)?);
    (idle > loaded).then(|| format!("here the idle run's p50 ({}) is above the loaded run's ({})", fmt_ns(idle), fmt_ns(loaded)))
}

// Measurement --------------------------------------------------------------------------------

/// What the measuring thread needs.
struct Job {
    config: TimerConfig,
    amount: Amount,
    no_ack: u32,
    /// The timer's vectors (`Run::start_on_vectors`; 0: its own source's).
    vectors: u32,
}

/// Per-wait timeout in card time: four longest intervals, at least 20 ms.
fn wait_timeout(config: &TimerConfig, clock_hz: u32) -> Duration {
    let s = 4.0 * f64::from(config.max_interval_cycles) / f64::from(clock_hz.max(1));
    Duration::from_secs_f64(s.max(0.02))
}

/// What the measuring loop brings back.
struct Measured {
    samples: Vec<Sample>,
    end: irq_timer::RunEnd,
    /// Interrupts waited for.
    waited: u64,
    /// A stop request ended the run before its end.
    stopped: bool,
    /// Per interrupt taken (fire n at n-1): the CPU `sched_getcpu()` named right after the
    /// waiting thread acknowledged it.
    woke: Vec<u32>,
}

/// One more interrupt, or the run's end.
enum Step {
    More,
    Done,
}

/// The measuring loop's state, handed from thread to thread in a per-CPU run (the card goes
/// with it): each [`Measuring::step`] waits for one interrupt and acknowledges it.
struct Measuring {
    run: Run,
    samples: Vec<Sample>,
    waited: u64,
    started: Instant,
    first_cycle: Option<u64>,
    skip: u32,
    ticked_ms: u64,
    stopped: bool,
    timeout: Duration,
    clock_hz: u32,
    woke: Vec<u32>,
}

/// The CPU the calling thread runs on ([`NO_CPU`] when the kernel cannot say).
pub fn current_cpu() -> u32 {
    // SAFETY: no arguments; returns -1 on failure.
    let c = unsafe { libc::sched_getcpu() };
    u32::try_from(c).unwrap_or(NO_CPU)
}

impl Measuring {
    fn start(card: &mut Card, job: &Job) -> anyhow::Result<Measuring> {
        let clock_hz = card.identity().clock_hz;
        let ring = match job.amount {
            Amount::Samples(n) => n.next_power_of_two().clamp(irq_timer::MIN_RING_RECORDS, 4096),
            Amount::Seconds(_) => 4096,
        };
        let run = Run::start_on_vectors(card, &job.config, ring, job.vectors)?;
        Ok(Measuring {
            run,
            samples: Vec::new(),
            waited: 0,
            started: Instant::now(),
            first_cycle: None,
            skip: job.no_ack,
            ticked_ms: 0,
            stopped: false,
            timeout: wait_timeout(&job.config, clock_hz),
            clock_hz,
            woke: Vec::new(),
        })
    }

    /// Waits for one interrupt on `mask` and acknowledges it.
    fn step(&mut self, card: &mut Card, job: &Job, ticker: &Ticker, mask: u32) -> anyhow::Result<Step> {
        // The timeout is card time (four of the timer's intervals): on a hardware backend
        // the card's counter measures it (the same as wall time on a card at its clock; the
        // Verilated card behind vfio-user in a TCG guest is far slower). On the simulator this
        // is Card::wait_interrupt, as before.
        let irq = match card.wait_interrupt_card_time(mask, self.timeout) {
            Err(tlpx_device::DeviceError::Interrupted) => {
                self.stopped = true;
                return Ok(Step::Done);
            }
            other => other?,
        };
        let Some(irq) = irq else {
            return Err(crate::exit::card_failure(format!(
                "no interrupt from the timer within {:?} after {} interrupts (its interval is at most {} cycles)",
                self.timeout, self.waited, job.config.max_interval_cycles
            )));
        };
        // The n-th interrupt since the start is fire n: the acknowledgement names it, so the
        // card never takes it for a later fire's.
        let fire = self.run.took_interrupt();
        if self.skip > 0 {
            self.skip -= 1;
        } else {
            irq_timer::ack_user(card, fire)?;
        }
        // After the ack, so the figure does not hold it; a pinned thread cannot have moved.
        self.woke.push(current_cpu());
        self.waited += 1;
        let done = match job.amount {
            Amount::Samples(n) => {
                ticker.advance(1);
                self.waited >= u64::from(n)
            }
            Amount::Seconds(s) => {
                let elapsed = match irq.card_cycle {
                    Some(c) => {
                        let first = *self.first_cycle.get_or_insert(c);
                        (c - first) as f64 / f64::from(self.clock_hz.max(1))
                    }
                    None => self.started.elapsed().as_secs_f64(),
                };
                let ms = ((elapsed.min(s)) * 1e3) as u64;
                ticker.advance(ms.saturating_sub(self.ticked_ms));
                self.ticked_ms = self.ticked_ms.max(ms);
                elapsed >= s
            }
        };
        if done || progress::stop_requested() {
            self.stopped = !done;
            return Ok(Step::Done);
        }
        if self.waited.is_multiple_of(32) {
            self.run.poll(card, &mut self.samples)?;
        }
        Ok(Step::More)
    }

    /// Stops the timer and drains the ring, whatever the loop's `outcome`.
    fn finish(mut self, card: &mut Card, outcome: anyhow::Result<()>) -> anyhow::Result<Measured> {
        let end = self.run.finish(card, true, &mut self.samples);
        outcome?;
        Ok(Measured { samples: self.samples, end: end?, waited: self.waited, stopped: self.stopped, woke: self.woke })
    }
}

/// The measuring loop, in the measuring thread (which owns the card meanwhile); `ticker`
/// advances the progress bar by an interrupt (or by the ms of card time of --duration).
fn measure(card: &mut Card, job: &Job, ticker: &Ticker) -> anyhow::Result<Measured> {
    let mut m = Measuring::start(card, job)?;
    let outcome = loop {
        match m.step(card, job, ticker, irq_timer::WAIT_MASK) {
            Ok(Step::More) => {}
            Ok(Step::Done) => break Ok(()),
            Err(e) => break Err(e),
        }
    };
    m.finish(card, outcome)
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
    let source = match stage {
        Stage::Isr => "the card latching ack_isr",
        Stage::User => "the card latching ack_user",
    };
    StageReport { stage, measured: card.count > 0, latency_ns: Summary::of(&values), card, source: source.into(), not_measured: None }
}

// The ISR stage on a real card ---------------------------------------------------------------

/// A running trace of the card's handler entries.
struct IsrTracer {
    trace: IrqHandlerTrace,
    irqs: Vec<u32>,
    before: ClockFit,
}

/// Pairs per clock correlation, and the pause between them (a longer window pins the slope).
const CORRELATION_PAIRS: usize = 64;
const CORRELATION_SPACING: Duration = Duration::from_micros(50);

/// Perf ring pages (log2) per CPU for `entries` handler entries (≈ 72 bytes each with the
/// handler's name, 80 with margin; all on one CPU at worst): 64 KiB at least, 4 MiB at most.
/// The rings are read after the run: a longer run loses entries, and says how many.
fn ring_pages_log2(entries: u64) -> u32 {
    let pages = entries.saturating_mul(80).div_ceil(4096).max(1);
    (64 - (pages - 1).leading_zeros()).clamp(4, 10)
}

/// Opens the trace on the card's MSIs and correlates the clocks; `Err` says why the ISR
/// stage cannot be measured (the run goes on without it).
fn start_isr_trace(session: &mut Session, amount: Amount) -> Result<IsrTracer, String> {
    let address = session.environment.pci_address.clone().ok_or("the card's PCI address is unknown")?;
    let interrupts = std::fs::read_to_string("/proc/interrupts").map_err(|e| format!("cannot read /proc/interrupts: {e}"))?;
    let irqs = isr_trace::find_msi_irqs(&interrupts, &address).map_err(|e| e.to_string())?;
    let entries = match amount {
        Amount::Samples(n) => u64::from(n) + 64,
        Amount::Seconds(_) => u64::MAX,
    };
    let options = TraceOptions { ring_pages_log2: ring_pages_log2(entries), ..TraceOptions::default() };
    let trace = IrqHandlerTrace::open(&irqs, &options).map_err(|e| e.to_string())?;
    let before = ClockCorrelation::measure_spaced(&mut session.card, CORRELATION_PAIRS, CORRELATION_SPACING)
        .map_err(|e| format!("the clock correlation before the run failed: {e}"))?;
    Ok(IsrTracer { trace, irqs, before })
}

/// Ends the trace and sets each sample's ISR stage from the handler entries.
fn finish_isr_trace(mut tracer: IsrTracer, card: &mut Card, samples: &mut [Sample]) -> Result<IsrTraceReport, String> {
    let after = ClockCorrelation::measure_spaced(card, CORRELATION_PAIRS, CORRELATION_SPACING)
        .map_err(|e| format!("the clock correlation after the run failed: {e}"))?;
    let fit = ClockCorrelation::interpolate(&tracer.before, &after).map_err(|e| e.to_string())?;
    // Stop first, then drain: the count of what the kernel could not write is exact only then.
    tracer.trace.stop().map_err(|e| e.to_string())?;
    let batch = tracer.trace.drain().map_err(|e| e.to_string())?;
    let lost_records = tracer.trace.lost() + tracer.trace.unreported().unwrap_or(0);
    let (matched, ambiguous) = isr_stages_from_entries(samples, &batch.entries, &fit)?;
    Ok(IsrTraceReport { irqs: tracer.irqs, entries: batch.entries.len(), lost_records, ambiguous, matched, fit })
}

/// Sets `isr_cycles` of every sample from the first handler entry after its fire (see
/// [`isr_trace::isr_stage_cycles`]); returns (fires with a stage, fires left without one
/// because an overrun made their entry ambiguous).
///
/// Every source of the card shares one MSI vector, so an entry is matched to a fire by time
/// only. When fire k overran (fire k+1 came before the host acknowledged k) and k found no
/// entry before k+1's T0, the first entry after that T0 may be k's late handler as well as
/// k+1's: k+1 is left without a stage rather than given one near zero.
fn isr_stages_from_entries(samples: &mut [Sample], entries: &[isr_trace::IrqEntry], fit: &ClockFit) -> Result<(usize, usize), String> {
    let fires: Vec<(u32, u64)> = samples.iter().map(|s| (s.sequence, s.t0)).collect();
    let mut stages = isr_trace::isr_stage_cycles(&fires, entries, fit).map_err(|e| e.to_string())?;
    let mut ambiguous = 0;
    for k in 0..samples.len().saturating_sub(1) {
        if samples[k].overrun && stages[k].is_none() && stages[k + 1].is_some() {
            stages[k + 1] = None;
            ambiguous += 1;
        }
    }
    let mut matched = 0;
    for (sample, stage) in samples.iter_mut().zip(stages) {
        sample.isr_cycles = stage;
        matched += usize::from(stage.is_some());
    }
    Ok((matched, ambiguous))
}

/// The card-style statistics (same log2 buckets) of stages computed on the host.
fn host_stage_stats(values: impl Iterator<Item = u32>) -> StageStats {
    let v: Vec<u32> = values.collect();
    StageStats {
        count: v.len() as u64,
        min_cycles: v.iter().copied().min().map(u64::from),
        max_cycles: v.iter().copied().max().map_or(0, u64::from),
        sum_cycles: v.iter().copied().map(u64::from).sum(),
        histogram: irq_timer::histogram_of(v.iter().copied()),
    }
}

fn run_condition(session: &mut Session, plan: &Plan, condition: Condition, ticker: &Ticker) -> anyhow::Result<RunReport> {
    let clock_hz = session.clock_hz;
    let config = timer_config(plan, clock_hz)?;
    let (ping_cycles, _) = irq_timer::ping_cost(&mut session.card, 9)?;
    let pl = &plan.placement;
    let load = realtime::load_for(pl, condition)?;
    let mut job = Job { config: config.clone(), amount: plan.amount, no_ack: plan.no_ack, vectors: 0 };
    // On a real card nothing of tlpx runs in the kernel's handler: the ISR stage comes from
    // the kernel's own tracepoint, when it can be opened.
    let hardware = realtime::basis_kind(session).0 == "hardware";
    let tracer = if hardware { Some(start_isr_trace(session, plan.amount)) } else { None };
    // One vector per CPU, steered through the kernel's affinity where a kernel dispatches
    // them; on the simulator the interrupts come over its socket, with nothing to steer, but
    // each CPU's thread still waits on a vector of its own when the card was granted them.
    let steering = plan.cpus.as_ref().map(|cpus| percpu::steer(&mut session.card, cpus, hardware));
    job.vectors = steering.as_ref().map_or(0, |s| s.timer_vectors);
    let (result, mut notes) = match &plan.cpus {
        // A thread per CPU, each pinned there; the card goes from one to the next.
        Some(cpus) => {
            let masks = steering.as_ref().map_or_else(|| vec![irq_timer::WAIT_MASK; cpus.len()], |s| s.masks.clone());
            percpu::measure_per_cpu(&mut session.card, &job, cpus, &masks, pl.fifo, ticker)
        }
        // A thread of its own measures with the session's card and hands it back when it ends.
        None => realtime::on_measuring_thread(&mut session.card, "tlpx-irq", pl, |card| measure(card, &job, ticker)),
    };
    drop(load);
    // The timer back on its own vector, the extra vectors' enables off, whether or not the run
    // measured anything (a killed run leaves them: the next Run::start rewrites the vectors).
    if let Some(s) = steering.as_ref().filter(|s| s.report.mode == "per_cpu_vectors") {
        let vectors: Vec<u32> = s.vectors.iter().filter_map(|v| v.0).collect();
        if let Err(e) = percpu::reset_timer_vectors(&mut session.card, &vectors) {
            notes.push(e);
        }
    }
    let Measured { mut samples, end, waited, stopped: interrupted, woke } = result?;
    let (isr_trace, isr_missing) = match tracer {
        None => (None, "nothing on this backend writes ack_isr: no interrupt handler of tlpx runs in the kernel".to_string()),
        Some(Err(why)) => (None, format!("the kernel's irq_handler_entry could not be traced: {why}")),
        Some(Ok(t)) => match finish_isr_trace(t, &mut session.card, &mut samples) {
            Ok(report) => (Some(report), String::new()),
            Err(why) => (None, format!("the ISR stage could not be computed: {why}")),
        },
    };
    let mut isr_missing = isr_missing;
    if let Some(t) = &isr_trace {
        if t.lost_records > 0 {
            notes.push(format!(
                "{} irq_handler_entry records were lost (ring full, or dropped by the kernel): the ISR stage covers {} of {} fires",
                t.lost_records,
                t.matched,
                samples.len()
            ));
        }
        if t.ambiguous > 0 {
            notes.push(format!(
                "{} fires after an overrun have no ISR stage: their handler entry cannot be told from the late one of the fire before",
                t.ambiguous
            ));
        }
        if t.matched == 0 {
            isr_missing =
                format!("no handler entry of irqs {:?} matched a fire ({} entries traced, {} lost)", t.irqs, t.entries, t.lost_records);
        }
    }
    let sequence = irq_timer::check_sequence(&samples, 0);
    let unexplained_missing = sequence.missing.saturating_sub(u64::from(end.counters.lost))
        + u64::from(end.counters.sequence.wrapping_sub(end.counters.lost)).saturating_sub(samples.len() as u64);
    let mut stages = Vec::new();
    for stage in Stage::ALL {
        let card_stats = irq_timer::stage_stats(&mut session.card, stage)?;
        let mut report = match (stage, &isr_trace) {
            (Stage::Isr, Some(t)) => {
                let mut r = stage_report(stage, &samples, host_stage_stats(samples.iter().filter_map(|s| s.isr_cycles)), clock_hz);
                r.source = format!(
                    "the kernel's irq_handler_entry (irqs {:?}) in card cycles, clock correlation bound ±{:.1} cycles",
                    t.irqs, t.fit.bound_cycles
                );
                r
            }
            _ => stage_report(stage, &samples, card_stats, clock_hz),
        };
        if !report.measured {
            report.not_measured =
                Some(if stage == Stage::Isr { isr_missing.clone() } else { "nothing acknowledged the user stage".into() });
        }
        stages.push(report);
    }
    let ns = 1e9 / f64::from(clock_hz.max(1));
    let vectors = steering.as_ref().map(|s| s.vectors.clone()).unwrap_or_default();
    let (sample_cpus, woke_cpus, per_cpu) = match &plan.cpus {
        Some(cpus) => percpu::per_cpu_reports(cpus, &cpu_roles(), &samples, &woke, clock_hz, &vectors),
        None => Default::default(),
    };
    let steering = plan.cpus.as_ref().zip(steering).map(|(cpus, s)| s.finish(cpus));
    // The vector of each fire is known only where several were dealt out.
    let sample_vectors = if steering.as_ref().is_some_and(|s| s.mode == "per_cpu_vectors") {
        samples.iter().map(|s| u32::from(s.vector)).collect()
    } else {
        Vec::new()
    };
    let isr_cycles = if isr_trace.is_some() { samples.iter().map(|s| s.isr_cycles.unwrap_or(u32::MAX)).collect() } else { Vec::new() };
    Ok(RunReport {
        condition,
        load: if condition == Condition::Loaded { pl.load.clone() } else { Vec::new() },
        load_cpus: if condition == Condition::Loaded { pl.load_cpus.clone() } else { Vec::new() },
        config,
        clock_hz,
        interrupts_waited: waited,
        interrupted,
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
        isr_trace,
        isr_cycles,
        sample_cpus,
        woke_cpus,
        sample_vectors,
        per_cpu,
        steering,
    })
}

// Output -------------------------------------------------------------------------------------

pub fn run_text(r: &RunReport, width: usize) -> Vec<String> {
    let mut out = vec![format!(
        "{}: {} interrupts{} ({} fires), interval {}..{} card cycles ({}), ping (one posted write) {} card cycles = {}",
        realtime::condition_text(r.condition, &r.load, &r.load_cpus),
        r.interrupts_waited,
        if r.interrupted { " (INTERRUPTED: stopped by Ctrl-C before the end of the run)" } else { "" },
        r.counters.fires,
        r.config.min_interval_cycles,
        r.config.max_interval_cycles,
        if r.config.mode == irq_timer::Mode::Periodic { "periodic" } else { "random" },
        r.ping_cycles,
        fmt_ns(r.ping_ns)
    )];
    for s in &r.stages {
        if !s.measured {
            out.push(format!("  {} stage: not measured ({})", s.stage.name(), s.not_measured.as_deref().unwrap_or("no samples")));
            continue;
        }
        let what = if s.source.starts_with("the card") {
            "fire to ack arriving, card clock".to_string()
        } else {
            format!("fire to handler entry: {}", s.source)
        };
        out.push(format!("  {} stage ({what}): {}", s.stage.name(), summary_line(&s.latency_ns)));
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
             so those fires (the slow ones) have no sample and the percentiles are biased low; lengthen --min / --period",
            r.counters.overruns - r.not_acknowledged
        ));
    }
    if r.per_cpu.is_empty() {
        out.push(format!("  {}", realtime::thread_line(r.pinned_cpu, r.fifo_priority)));
    } else {
        let cpus: Vec<usize> = r.per_cpu.iter().map(|c| c.cpu as usize).collect();
        let sched = r.fifo_priority.map_or("normal scheduler".to_string(), |p| format!("SCHED_FIFO {p}"));
        out.push(format!("  measuring threads: one pinned on each of CPUs {}, {sched}, fires dealt in turn", percpu::cpu_list_text(&cpus)));
    }
    out
}

/// A run's text in the chosen `--layout`.
pub fn layout_text(r: &RunReport, cmd: &Cmd, basis: &TimeBasis) -> Vec<String> {
    let what = per_cpu_what(basis);
    match cmd.layout {
        Layout::Tlpx => {
            let mut out = run_text(r, cmd.bar_width as usize);
            out.extend(percpu::per_cpu_table(r, &what));
            out
        }
        Layout::Rtla | Layout::Cyclictest => {
            let cols = percpu::columns(r);
            let mut out = vec![format!(
                "# tlpx irq: {} ({} fires, {} overruns)",
                realtime::condition_text(r.condition, &r.load, &r.load_cpus),
                r.counters.fires,
                r.counters.overruns
            )];
            let header = [format!("clock: {} ({what})", basis.clock), format!("bucket: {} ns, {} entries", cmd.bucket_size, cmd.entries)];
            if cmd.layout == Layout::Rtla {
                out.extend(percpu::rtla_text(&header, &cols, cmd.bucket_size, cmd.entries));
            } else {
                out.extend(header.iter().map(|h| format!("# {h}")));
                out.extend(percpu::cyclictest_text(&cols, cmd.bucket_size, cmd.entries));
            }
            out
        }
    }
}

/// What a per-CPU figure is on this time basis.
pub fn per_cpu_what(basis: &TimeBasis) -> String {
    match basis.kind {
        "hardware" => "user stage per CPU, card clock: the card's MSI, the kernel's dispatch on that CPU, the thread's wake-up there, the ack's trip back".into(),
        "sim_virtual" => "user stage per CPU, card clock in virtual time: only the modelled link, the same on every CPU".into(),
        _ => "user stage per CPU, card clock with this host's wall time charged: the simulator's reply on its socket waking the thread pinned on that CPU, no kernel interrupt".into(),
    }
}

/// Side-by-side table of runs (rtla timerlat style).
pub fn compare_text(runs: &[RunReport]) -> Vec<String> {
    let mut out = Vec::new();
    let head: Vec<String> = runs.iter().map(|r| format!("{:>14}", format!("{:?}", r.condition).to_lowercase())).collect();
    out.push(format!("  {:<14}{}", "user stage", head.join("")));
    type Get = fn(&Summary) -> f64;
    let rows: [(&str, Get); 5] = [("min", |s| s.min), ("p50", |s| s.median), ("p99", |s| s.p99), ("p99.9", |s| s.p999), ("max", |s| s.max)];
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
    // Per CPU: the median and p99 of each CPU's samples, every run side by side.
    let mut cpus: Vec<u32> = runs.iter().flat_map(|r| r.per_cpu.iter().map(|c| c.cpu)).collect();
    cpus.sort_unstable();
    cpus.dedup();
    for cpu in cpus {
        for (name, get) in [("p50", rows[1].1), ("p99", rows[2].1)] {
            let cells: Vec<String> = runs
                .iter()
                .map(|r| {
                    let s = r.per_cpu.iter().find(|c| c.cpu == cpu).and_then(|c| c.user_ns.as_ref());
                    format!("{:>14}", s.map_or("-".into(), |s| fmt_ns(get(s))))
                })
                .collect();
            out.push(format!("  {:<14}{}", format!("CPU {cpu} {name}"), cells.join("")));
        }
    }
    for (name, get) in [("overruns", 0usize), ("lost", 1)] {
        let cells: Vec<String> =
            runs.iter().map(|r| format!("{:>14}", if get == 0 { r.counters.overruns } else { r.counters.lost })).collect();
        out.push(format!("  {name:<14}{}", cells.join("")));
    }
    out
}

/// The histograms of every measured stage of `runs`, labelled by `label(run, stage)`: the user
/// stage over bins chosen from its samples (one binning for all runs), the other stages (and
/// a user stage without samples) over the card's log2 buckets. Returns the series and the
/// x axis label saying which bins are which.
pub fn stage_histograms(runs: &[RunReport], label: impl Fn(&RunReport, &StageReport) -> String) -> (Vec<LogSeries>, String) {
    let with_samples = |r: &RunReport, s: &StageReport| s.stage == Stage::User && r.user_cycles.iter().any(|&c| c != u32::MAX);
    let sets: Vec<(String, Vec<f64>)> = runs
        .iter()
        .flat_map(|r| r.stages.iter().filter(|s| s.measured && with_samples(r, s)).map(|s| (label(r, s), r.user_samples_ns())))
        .collect();
    let binned = crate::plot::binned_series(&sets);
    let mut binned_iter = binned.as_ref().map(|(s, _)| s.clone()).unwrap_or_default().into_iter();
    let mut series = Vec::new();
    let mut log2 = false;
    for r in runs {
        for s in r.stages.iter().filter(|s| s.measured) {
            match if with_samples(r, s) { binned_iter.next() } else { None } {
                Some(b) => series.push(b),
                None => {
                    log2 = true;
                    series.push(LogSeries {
                        label: label(r, s),
                        kind: Mark::Bars(log2_buckets(&s.card.histogram, r.clock_hz)),
                        points: Vec::new(),
                    });
                }
            }
        }
    }
    let x_label = match (&binned, log2) {
        (Some((_, bins)), true) => format!("latency (user stage: {bins} from the samples; other stages: the card's log2 buckets)"),
        (Some((_, bins)), false) => format!("latency ({bins} from the samples)"),
        (None, _) => "latency (log scale; the card's log2 buckets of cycles)".into(),
    };
    (series, x_label)
}

/// The histograms of every measured stage, in ns ([`stage_histograms`]).
fn histogram_chart(title: &str, runs: &[RunReport]) -> LogChart {
    let (series, x_label) = stage_histograms(runs, |r, s| format!("{} {}", format!("{:?}", r.condition).to_lowercase(), s.stage.name()));
    LogChart {
        title: title.to_string(),
        x_label,
        y_label: "interrupts (log scale)".into(),
        x_ticks: Ticks::Ns,
        y_ticks: Ticks::Count,
        series,
    }
}

pub fn run(cmd: &Cmd, device: &str, json: bool) -> anyhow::Result<ExitCode> {
    let started = Instant::now();
    let plan = parse_plan(cmd, crate::defaults::defaults_for(device)?)?;
    check_optional_output("--svg", cmd.svg.as_deref())?;
    check_optional_output("--output", cmd.output.as_deref())?;
    if let (Some(svg), Some(output)) = (&cmd.svg, &cmd.output) {
        crate::args::refuse_same_file("--svg", svg, "--output", output)?;
    }
    let mut session = Session::open(device)?;
    session.card.require(Feature::IrqTimer, "interrupt latency timer")?;
    timer_config(&plan, session.clock_hz)?;
    progress::install_stop_handler();
    let basis = time_basis(&session);
    if !json {
        realtime::print_header(&session, &basis);
    }
    let conditions = plan.placement.conditions.clone();
    let per_run = plan.units_per_run();
    let unit = if matches!(plan.amount, Amount::Samples(_)) { "interrupts" } else { "ms of card time" };
    let progress = Progress::units(per_run * conditions.len() as u64, unit, json);
    let mut checkpoints = Checkpoints::new(cmd.output.as_deref());
    let mut runs = Vec::new();
    for (i, &condition) in conditions.iter().enumerate() {
        if progress::stop_requested() {
            break;
        }
        progress.start(&format!("{} run ({} of {})", format!("{condition:?}").to_lowercase(), i + 1, conditions.len()));
        progress.set_done(per_run * i as u64);
        let r = match run_condition(&mut session, &plan, condition, &progress.ticker()) {
            Ok(r) => r,
            // Stopped before the run's measuring began (its ping, the timer's start).
            Err(e) if progress::is_interrupt(&e) => break,
            Err(e) => return Err(e),
        };
        if !json {
            for line in layout_text(&r, cmd, &basis) {
                progress.println(&line);
            }
        }
        percpu::export_metrics(&r);
        runs.push(r);
        checkpoints.offer(runs.len(), conditions.len(), || document(&plan, &session, &basis, None, &runs, started))?;
    }
    progress.finish();
    let cpus = session.environment.cpus;
    let comparison = (runs.len() > 1).then(|| {
        let mut c = realtime::comparison(&basis, cpus);
        if matches!(basis.kind, "sim_real_host_time" | "sim_live") {
            if let Some(o) = idle_slower_than_loaded(&runs) {
                c.statement = format!("{}; {o}", c.statement);
            }
        }
        c
    });
    if !json && runs.len() > 1 {
        crate::outln!("side by side ({}; {}):", basis.kind, basis.clock);
        for line in compare_text(&runs) {
            crate::outln!("{line}");
        }
        if let Some(c) = &comparison {
            crate::outln!("what this comparison shows: {}", c.statement);
        }
    }
    if let Some(path) = &cmd.svg {
        // On the simulator no interrupt controller or kernel dispatch is in the figures.
        let title = if basis.kind == "hardware" { "Interrupt dispatch latency" } else { "Interrupt user stage (no dispatch simulated)" };
        realtime::write_svg(path, &session, &basis, title, |t| Ok(render_log_svg(&histogram_chart(&t, &runs))))?;
        // Per CPU: the user stage of every CPU overlaid, in a second file beside it.
        if let Some((series, bins)) = percpu::per_cpu_histograms(&runs) {
            let per_cpu_path =
                path.with_file_name(format!("{}-per-cpu.svg", path.file_stem().map_or("irq".into(), |s| s.to_string_lossy().into_owned())));
            realtime::write_svg(&per_cpu_path, &session, &basis, &format!("{title} per CPU"), |t| {
                Ok(render_log_svg(&LogChart {
                    title: t,
                    x_label: format!("user stage ({bins} from the samples; {})", basis.clock),
                    y_label: "interrupts (log scale)".into(),
                    x_ticks: Ticks::Ns,
                    y_ticks: Ticks::Count,
                    series,
                }))
            })?;
        }
    }
    let failed = runs.iter().any(RunReport::failed);
    let mut doc = document(&plan, &session, &basis, comparison, &runs, started);
    if progress::stop_requested() {
        // A run cut short holds samples, but not the run asked for: only whole runs count.
        let whole = runs.iter().filter(|r| !r.interrupted).count();
        doc.stopped_at(whole, conditions.len());
        if !json {
            crate::outln!("interrupted: {whole} of {} runs measured to their end", conditions.len());
        }
    }
    doc.emit(cmd.output.as_deref(), json, failed)
}

/// The result document of `runs` (a checkpoint's, or the final one).
fn document<'a>(
    plan: &'a Plan,
    session: &Session,
    basis: &TimeBasis,
    comparison: Option<Comparison>,
    runs: &'a [RunReport],
    started: Instant,
) -> ResultDoc<&'a Plan, Body<'a>> {
    let mut notes = session.notes.clone();
    notes.push(basis.statement.clone());
    let cpus = session.environment.cpus;
    let limits: Vec<SimLimit> =
        dispatch_limit(basis, cpus).into_iter().chain(comparison.as_ref().and_then(|c| realtime::comparison_limit(basis, c))).collect();
    let mut doc = ResultDoc::new(
        "irq",
        plan,
        session.environment.clone(),
        session.link.clone(),
        None,
        Body { time_basis: basis.clone(), comparison, points: Cow::Borrowed(runs) },
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

    /// A sample of fire `n` at card cycle `t0`.
    fn fire(n: u32, t0: u64) -> Sample {
        Sample { sequence: n, t0, isr_cycles: None, user_cycles: Some(500), overrun: false, interval_cycles: 1000, fire: n + 1, vector: 0 }
    }

    #[test]
    fn handler_entries_become_isr_stages_in_card_cycles() {
        // Card at 125 MHz (0.125 cycles/ns) whose counter read 1_000_000 at host 10 us;
        // brackets of 16 ns round trips.
        let pairs: Vec<(u64, u64, u64)> = (0..64u64)
            .map(|i| {
                let mid = 10_000 + i * 1_000;
                (mid - 8, 1_000_000 + (mid - 10_000) / 8, mid + 8)
            })
            .collect();
        let fit = ClockCorrelation::fit(&pairs).expect("fit");
        // Fires at host 20 us, 40 us and 60 us (card 1_001_250, 1_003_750, 1_006_250);
        // the kernel enters the handler 2 us (250 cycles) after the first, 800 ns after the
        // third, and not at all for the second.
        let mut samples = vec![fire(0, 1_001_250), fire(1, 1_003_750), fire(2, 1_006_250)];
        let at = |host_ns| isr_trace::IrqEntry { irq: 45, cpu: 1, host_ns };
        let entries = [at(22_000), at(60_800)];
        let (matched, ambiguous) = isr_stages_from_entries(&mut samples, &entries, &fit).expect("stages");
        assert_eq!((matched, ambiguous), (2, 0));
        let stages: Vec<Option<u32>> = samples.iter().map(|s| s.isr_cycles).collect();
        assert!(stages[0].is_some_and(|c| c.abs_diff(250) <= 2), "{stages:?}");
        assert_eq!(stages[1], None, "no handler entry: no ISR stage, never a borrowed one");
        assert!(stages[2].is_some_and(|c| c.abs_diff(100) <= 2), "{stages:?}");
        let stats = host_stage_stats(samples.iter().filter_map(|s| s.isr_cycles));
        assert_eq!(stats.count, 2);
        assert_eq!(stats.histogram.iter().sum::<u64>(), 2);
        assert_eq!(stats.sum_cycles, stats.min_cycles.unwrap_or(0) + stats.max_cycles);
        // Fire 0 overran and its handler ran late, after fire 1's T0: the one entry could be
        // either's, so neither gets a stage (fire 1 would otherwise show ~100 cycles).
        let mut overrun = vec![fire(0, 1_001_250), fire(1, 1_003_750)];
        overrun[0].overrun = true;
        let (matched, ambiguous) = isr_stages_from_entries(&mut overrun, &[at(40_800)], &fit).expect("stages");
        assert_eq!((matched, ambiguous), (0, 1));
        assert!(overrun.iter().all(|s| s.isr_cycles.is_none()), "{overrun:?}");
        // Without the overrun the same entry is fire 1's.
        overrun[0].overrun = false;
        assert_eq!(isr_stages_from_entries(&mut overrun, &[at(40_800)], &fit).expect("stages"), (1, 0));
        // Fires out of T0 order are refused, not matched wrongly.
        let mut shuffled = vec![fire(0, 1_003_750), fire(1, 1_001_250)];
        assert!(isr_stages_from_entries(&mut shuffled, &entries, &fit).is_err());
    }

    #[test]
    fn trace_rings_grow_with_the_run_within_bounds() {
        assert_eq!(ring_pages_log2(10), 4, "64 KiB at least");
        assert_eq!(ring_pages_log2(1064), 5, "1064 entries x 80 bytes need 21 pages: 32");
        assert_eq!(ring_pages_log2(u64::MAX), 10, "4 MiB at most");
    }

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

    fn fixture_runs() -> Vec<RunReport> {
        let doc: serde_json::Value =
            serde_json::from_str(include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/results/irq.json"))).expect("fixture");
        serde_json::from_value(doc["points"].clone()).expect("points")
    }

    fn binned_count(s: &LogSeries) -> Option<f64> {
        match &s.kind {
            Mark::Binned { bars, .. } => Some(bars.iter().map(|b| b.2).sum()),
            _ => None,
        }
    }

    #[test]
    fn the_user_stage_is_binned_from_its_samples_and_other_stages_keep_the_card_buckets() {
        let mut runs = fixture_runs();
        let label = |r: &RunReport, s: &StageReport| format!("{:?} {}", r.condition, s.stage.name());
        // The fixture measured the user stage only.
        let (series, x_label) = stage_histograms(&runs, label);
        let users = runs.iter().filter(|r| r.stages.iter().any(|s| s.measured && s.stage == Stage::User)).count();
        assert!(users > 0 && series.len() == users, "{series:?}");
        for (s, r) in series.iter().zip(&runs) {
            let samples = r.user_cycles.iter().filter(|&&c| c != u32::MAX).count() as f64;
            assert_eq!(binned_count(s), Some(samples), "{}", s.label);
        }
        assert!(x_label.contains("from the samples") && !x_label.contains("log2"), "{x_label}");
        // An overrun (no sample) is left out; an ISR stage without samples keeps the card's
        // log2 buckets, and the axis says which bins are which.
        runs[0].user_cycles[0] = u32::MAX;
        let isr = runs[0].stages.iter_mut().find(|s| s.stage == Stage::Isr).expect("isr stage");
        isr.measured = true;
        isr.card.histogram = vec![0, 0, 0, 0, 3];
        let (series, x_label) = stage_histograms(&runs, label);
        assert_eq!(series.len(), users + 1);
        let isr_series = series.iter().find(|s| s.label.ends_with("isr")).expect("isr series");
        assert_eq!(isr_series.kind, Mark::Bars(log2_buckets(&[0, 0, 0, 0, 3], runs[0].clock_hz)));
        let user = series.iter().find(|s| s.label.ends_with("user")).expect("user series");
        assert_eq!(binned_count(user), Some((runs[0].user_cycles.len() - 1) as f64));
        assert!(x_label.contains("user stage:") && x_label.contains("other stages: the card's log2 buckets"), "{x_label}");
        let svg = render_log_svg(&histogram_chart("irq", &runs));
        assert!(svg.contains(" ns</text>") || svg.contains(" µs</text>"), "ticks in ns or µs");
    }
}
