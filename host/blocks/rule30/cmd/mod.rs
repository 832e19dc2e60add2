//! `tlpx rule30`: the Simics paper's experiment (seed 000), reproduced and extended.
//!
//! ```text
//!  packets (random lines, seeded) ──► each mode: sw-char (golden) │ sw-bit │ sw-fast
//!                                                 hw-irq │ hw-poll │ hw-syscall │ hwo │ hw-multi │ hw-batch
//!     per packet: G generations; time per packet and per line, user vs kernel time, jitter
//!     --verify: every mode's output = sw-char's, packet by packet
//! ```
//!
//! `run` measures chosen modes at one length and latency; `sweep` runs lengths × latencies ×
//! modes, prints the crossover lengths where each hardware mode beats each software mode and
//! the overhead table (Gedae style: accelerator busy time / total, overhead per operation), and
//! draws the landscape, the zoom below 256 bits, the latency overlap and the jitter.
//!
//! Both show a progress bar with an estimate of the time left (weighted by packets and line
//! length: on the simulator the hardware modes' register accesses and data words are where
//! the time goes) and stop on Ctrl-C after the point in progress, keeping every finished
//! point (`"interrupted": true`, exit status 130). The sweep's result file is also written
//! as points finish (crate::checkpoint), so that a killed sweep leaves what it measured.
//! Packets per point and the sweep's lengths have defaults of their own on the simulator
//! (crate::defaults): the hardware ones would keep it busy for minutes (run) or a day (sweep).
//!
//! Software modes are timed with the host's clock (real CPU time on this host, always).
//! Hardware modes are timed with the backend's clock (`Device::clock_ns`): the host's on
//! hardware; the simulated card's on the simulator, where the figures are the modelled bus and
//! card (plus real host gaps with `tlpx-sim --host-time real`), never hardware figures.

use std::borrow::Cow;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

use anyhow::{bail, Context};
use clap::{Args, Subcommand};
use tlpx_device::card::Feature;
use tlpx_device::lease::Block;
use tlpx_device::rule30::{self as accel, HwMode, OpConfig};
use tlpx_device::{BarPath, ClockSource};
use tlpx_model::stats::Summary;
use tlpx_rule30::{char_run, from_card_words, test_packets, BitLine, CharLine, Variant, CARD_WORDS};

/// The document's types are tlpx-results'.
pub use tlpx_results::rule30::{Body, Crossover, Mode, Plan, Point};

use crate::args::{check_optional_output, check_output_dir, whole};
use crate::checkpoint::Checkpoints;
use crate::defaults::{BackendDefault, DefaultsFor};
use crate::plot::{self, Chart, Series, Style, XAxis};
use crate::progress::{self, Progress};
use crate::realtime::fmt_ns;
use crate::results::{self, ResultDoc, SimLimit};
use crate::session::Session;
use crate::sizes::parse_duration;

mod measure;
mod output;

use measure::measure;
use output::{
    clock_statement, crossover_claim, crossover_table, crossovers, header, overhead_table, point_row, write_figures, COLUMNS_NOTE,
};

/// Most generations the accelerator computes per start.
pub const MAX_GENERATIONS: u32 = 65535;

/// Packets per point of `run` (the help of --packets says the same; tested in main.rs).
pub const RUN_PACKETS: BackendDefault<u32> = BackendDefault { hardware: 1000, simulator: 100 };
/// Packets per point of `sweep`: a sweep measures a point per length, latency and mode.
pub const SWEEP_PACKETS: BackendDefault<u32> = BackendDefault { hardware: 1000, simulator: 10 };
/// Lengths of `sweep`: every 8 bits on hardware; the powers of two on the simulator (the
/// crossovers and the zoom figure are below 256 bits, where they are dense).
pub const SWEEP_LENGTHS: BackendDefault<&str> = BackendDefault { hardware: "8..1024/8", simulator: "8,16,32,64,128,256,512,1024" };

#[derive(Debug, Args)]
pub struct Cmd {
    #[command(subcommand)]
    pub action: Action,
}

#[derive(Debug, Subcommand)]
pub enum Action {
    /// Measure modes at one packet length and accelerator latency.
    Run(RunArgs),
    /// The seed's experiment: lengths x latencies x modes, crossovers, overhead table, figures.
    Sweep(SweepArgs),
}

/// What `run` and `sweep` share.
#[derive(Debug, Clone, Args)]
pub struct Common {
    /// Modes: sw-char, sw-bit, sw-fast, hw-irq, hw-poll, hw-syscall, hwo, hw-multi, hw-batch (or all, sw, hw).
    #[arg(long, default_value = "all")]
    pub mode: String,
    /// Generations (lines) per packet (1..=65535, the accelerator's most per start).
    #[arg(long, default_value_t = 99, value_parser = whole(1, MAX_GENERATIONS), allow_negative_numbers = true)]
    pub generations: u32,
    /// Elementary rule (0..=255, Wolfram's numbering).
    #[arg(long, default_value_t = 30, value_parser = whole(0, u8::MAX), allow_negative_numbers = true)]
    pub rule: u8,
    /// Seed of the random packets.
    #[arg(long, default_value_t = 1, value_parser = whole(0, u64::MAX), allow_negative_numbers = true)]
    pub seed: u64,
    /// Compare every mode's output with sw-char (the seed's Figure 4), packet by packet.
    #[arg(long)]
    pub verify: bool,
}

/// Most packets a point takes: its inputs, outputs and per-line times are all kept (for the
/// verification and the percentiles), about 1 KB per packet at 99 generations of 1024 bits.
pub const MAX_PACKETS: u32 = 1_000_000;

#[derive(Debug, Args)]
pub struct RunArgs {
    #[command(flatten)]
    pub common: Common,
    /// Packets per point, 1..=1000000 (a point keeps every packet's input, output and line
    /// times in memory: up to ~1 GB at the limit) [default: 1000 on hardware, 100 on the simulator].
    #[arg(long, value_parser = whole(1, MAX_PACKETS), allow_negative_numbers = true)]
    pub packets: Option<u32>,
    /// Packet length in bits (cells), 1..=1024.
    #[arg(long, default_value_t = 256, value_parser = whole(1, accel::MAX_LINE_LENGTH), allow_negative_numbers = true)]
    pub length: u32,
    /// The accelerator's latency per operation (emulated hardware): 1ns, 100ns, 10us.
    #[arg(long, default_value = "10ns", allow_hyphen_values = true)]
    pub latency: String,
    /// Also write the result document (JSON) to this file.
    #[arg(long, value_name = "FILE.json")]
    pub output: Option<PathBuf>,
}

#[derive(Debug, Args)]
pub struct SweepArgs {
    #[command(flatten)]
    pub common: Common,
    /// Packets per point, 1..=1000000 (a point keeps every packet's input, output and line
    /// times in memory: up to ~1 GB at the limit) [default: 1000 on hardware, 10 on the simulator].
    #[arg(long, value_parser = whole(1, MAX_PACKETS), allow_negative_numbers = true)]
    pub packets: Option<u32>,
    /// Packet lengths in bits: a list (8,64,256) or a range FROM..TO/STEP (8..1024/8)
    /// [default: 8..1024/8 on hardware, 8,16,32,64,128,256,512,1024 on the simulator].
    #[arg(long, allow_hyphen_values = true)]
    pub lengths: Option<String>,
    /// Accelerator latencies.
    #[arg(long, default_value = "1ns,10ns,100ns,1us,10us", allow_hyphen_values = true)]
    pub latencies: String,
    /// Folder for the result JSON and the SVG figures.
    #[arg(long, default_value = "results/rule30")]
    pub out_dir: PathBuf,
}

/// Which of `modes` (parsed from `text`) the list names one by one, not through a group.
fn modes_named_alone(text: &str, modes: &[Mode]) -> Vec<Mode> {
    modes.iter().copied().filter(|m| text.split(',').any(|t| t.trim() == m.name())).collect()
}

fn parse_modes(text: &str) -> anyhow::Result<Vec<Mode>> {
    let mut out = Vec::new();
    // Which word of the list named each mode, for the message about a duplicate.
    let mut by: Vec<&str> = Vec::new();
    for t in text.split(',').map(str::trim).filter(|t| !t.is_empty()) {
        let modes = match t {
            "all" => Mode::all(),
            "sw" => Variant::ALL.iter().map(|s| Mode::Sw(*s)).collect(),
            "hw" => {
                let mut v: Vec<Mode> = HwMode::ALL.iter().map(|m| Mode::Hw(*m)).collect();
                v.push(Mode::Batch);
                v
            }
            _ => match Mode::all().into_iter().find(|m| m.name() == t) {
                Some(m) => vec![m],
                None => bail!(
                    "--mode {t:?} is not a mode; the modes are {} (or all, sw, hw)",
                    Mode::all().iter().map(|m| m.name()).collect::<Vec<_>>().join(", ")
                ),
            },
        };
        for m in modes {
            if let Some(i) = out.iter().position(|o| *o == m) {
                let given = if by[i] == t { format!("{t:?} twice") } else { format!("{:?} and {t:?}", by[i]) };
                bail!("--mode: {} is given twice ({given}); give each mode once", m.name());
            }
            out.push(m);
            by.push(t);
        }
    }
    if out.is_empty() {
        bail!("--mode is empty; give one or more of {}", Mode::all().iter().map(|m| m.name()).collect::<Vec<_>>().join(", "));
    }
    Ok(out)
}

// Checked arguments --------------------------------------------------------------------------

fn parse_lengths(text: &str) -> anyhow::Result<Vec<u32>> {
    let check = |v: u32| -> anyhow::Result<u32> {
        if (1..=accel::MAX_LINE_LENGTH).contains(&v) {
            Ok(v)
        } else {
            bail!("--lengths: packet length {v} is outside 1..=1024 bits")
        }
    };
    let num = |t: &str| -> anyhow::Result<u32> {
        t.trim().parse::<u32>().map_err(|_| {
            anyhow::anyhow!(
                "--lengths: {t:?} is not a packet length: give bits in 1..=1024 as a number, a list 8,64,256 or a range 8..1024/8"
            )
        })
    };
    let mut out = Vec::new();
    // Which item gave each length, for the message about a duplicate.
    let mut by: Vec<&str> = Vec::new();
    for part in text.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let lengths: Vec<u32> = if let Some((from, rest)) = part.split_once("..") {
            let (to, step) = rest.split_once('/').unwrap_or((rest, "1"));
            let (from, to, step) = (check(num(from)?)?, check(num(to)?)?, num(step)?);
            if step == 0 || from > to {
                bail!("--lengths: range {part:?}: give FROM..TO/STEP with FROM <= TO and STEP >= 1");
            }
            (from..=to).step_by(step as usize).collect()
        } else {
            vec![check(num(part)?)?]
        };
        for l in lengths {
            if let Some(i) = out.iter().position(|o| *o == l) {
                let given = if by[i] == part { format!("{part:?} twice") } else { format!("{:?} and {part:?}", by[i]) };
                bail!("--lengths: {l} bits is given twice ({given}); give each length once");
            }
            out.push(l);
            by.push(part);
        }
    }
    if out.is_empty() {
        bail!("--lengths: no packet lengths in {text:?}");
    }
    out.sort_unstable();
    Ok(out)
}

/// `latency_flag` names the option `latencies` came from (`--latency` of run, `--latencies`
/// of sweep); `packets` and `lengths` are the values used (given or the backend's default).
fn parse_plan(
    common: &Common,
    packets: u32,
    lengths: &str,
    latencies: &str,
    latency_flag: &str,
    defaults_for: DefaultsFor,
) -> anyhow::Result<Plan> {
    if packets == 0 {
        bail!("--packets must be at least 1, not 0");
    }
    if common.generations == 0 {
        bail!("--generations must be at least 1, not 0");
    }
    if common.generations > MAX_GENERATIONS {
        bail!("--generations {} is above the accelerator's {MAX_GENERATIONS} per start", common.generations);
    }
    let mut latencies_ns = Vec::new();
    let mut given: Vec<&str> = Vec::new();
    for t in latencies.split(',').map(str::trim).filter(|t| !t.is_empty()) {
        let s = parse_duration(latency_flag, t).map_err(anyhow::Error::msg)?;
        // Equal latencies however written (1us, 1000ns) would measure the same point twice.
        if let Some(i) = latencies_ns.iter().position(|l: &f64| (l / (s * 1e9) - 1.0).abs() < 1e-9) {
            bail!("{latency_flag}: {:?} and {t:?} are the same latency; give each once", given[i]);
        }
        latencies_ns.push(s * 1e9);
        given.push(t);
    }
    if latencies_ns.is_empty() {
        bail!("no latency given");
    }
    let modes = parse_modes(&common.mode)?;
    let named_modes = modes_named_alone(&common.mode, &modes);
    Ok(Plan {
        modes,
        named_modes,
        packets,
        generations: common.generations,
        rule: common.rule,
        seed: common.seed,
        verify: common.verify,
        lengths: parse_lengths(lengths)?,
        latencies_ns,
        defaults_for,
    })
}

/// One point to measure: a mode at a length and (hardware modes) a latency.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Task {
    mode: Mode,
    length: u32,
    latency_ns: f64,
}

impl Task {
    fn describe(&self) -> String {
        if self.mode.is_hw() {
            format!("{} bits, {} at {}", self.length, self.mode.name(), fmt_ns(self.latency_ns))
        } else {
            format!("{} bits, {}", self.length, self.mode.name())
        }
    }
}

/// The points of a sweep in the order measured: per length the software modes, then the
/// hardware modes at each latency (`run` is the sweep of one length and one latency).
fn tasks(plan: &Plan) -> Vec<Task> {
    let mut out = Vec::new();
    for &length in &plan.lengths {
        for &mode in plan.modes.iter().filter(|m| !m.is_hw()) {
            out.push(Task { mode, length, latency_ns: 0.0 });
        }
        for &latency_ns in &plan.latencies_ns {
            for &mode in plan.modes.iter().filter(|m| m.is_hw()) {
                out.push(Task { mode, length, latency_ns });
            }
        }
    }
    out
}

pub fn run(cmd: &Cmd, device: &str, json: bool) -> anyhow::Result<ExitCode> {
    match &cmd.action {
        Action::Run(a) => run_one(a, device, json),
        Action::Sweep(a) => sweep(a, device, json),
    }
}

fn open(plan: &mut Plan, device: &str, json: bool) -> anyhow::Result<Option<Session>> {
    if !plan.modes.iter().any(|m| m.is_hw()) {
        return Ok(None);
    }
    let mut session = Session::open(device)?;
    // Another accelerator in the slot is named, before the feature bits say only "no rule 30".
    crate::slot::require(&mut session.card, "rule30", "tlpx rule30")?;
    session.card.require(Feature::Rule30, "rule-30 accelerator")?;
    accel::info(&mut session.card)?;
    if session.card.device().try_as_driver_dma().is_some() {
        leave_out_driver_less_modes(plan, &mut session, json)?;
    }
    Ok(Some(session))
}

/// Through LitePCIe's stock driver two modes cannot run: hw-irq waits for the core's MSI, which
/// the driver's handler neither reports nor clears, and hw-batch needs DMA buffers whose bus
/// address user space knows, which the driver keeps in the kernel. A mode named alone is
/// refused; one that all or hw brought in is left out, with a note.
fn leave_out_driver_less_modes(plan: &mut Plan, session: &mut Session, json: bool) -> anyhow::Result<()> {
    let why = |m: Mode| match m {
        Mode::Hw(HwMode::Irq) => Some("it waits for the rule-30 core's MSI, which LitePCIe's driver neither reports nor clears"),
        Mode::Batch => Some("it needs DMA buffers whose bus address user space knows, which LitePCIe's driver keeps in the kernel"),
        _ => None,
    };
    if let Some((m, w)) = plan.named_modes.iter().find_map(|&m| why(m).map(|w| (m, w))) {
        bail!("--mode {}: not through LitePCIe's driver: {w}; use the vfio backend (--device vfio:ADDRESS) for it", m.name());
    }
    let (left, kept): (Vec<Mode>, Vec<Mode>) = plan.modes.iter().partition(|&&m| why(m).is_some());
    if kept.iter().all(|m| !m.is_hw()) {
        bail!("no hardware mode of --mode can run through LitePCIe's driver (hw-irq and hw-batch cannot); use hw-poll, hw-syscall, hwo or hw-multi");
    }
    for m in left {
        let note = format!("{} left out: {}", m.name(), why(m).unwrap_or_default());
        if !json {
            crate::outln!("note: {note}");
        }
        session.notes.push(note);
    }
    plan.modes = kept;
    Ok(())
}

fn run_one(a: &RunArgs, device: &str, json: bool) -> anyhow::Result<ExitCode> {
    let started = Instant::now();
    let backend = crate::defaults::defaults_for(device)?;
    let packets = RUN_PACKETS.pick(a.packets, backend);
    let mut plan = parse_plan(&a.common, packets, &a.length.to_string(), &a.latency, "--latency", backend)?;
    check_optional_output("--output", a.output.as_deref())?;
    let mut session = open(&mut plan, device, json)?;
    progress::install_stop_handler();
    let tasks = tasks(&plan);
    let progress = progress_bar(&plan, &tasks, json);
    let mut checkpoints = Checkpoints::new(a.output.as_deref());
    let points = measure(session.as_mut(), &plan, &tasks, &progress, |points, _, s| {
        checkpoints.offer(points.len(), tasks.len(), || document("rule30", &plan, s, points, Vec::new(), started))
    })?;
    progress.finish();
    finish(&plan, session, points, tasks.len(), Vec::new(), a.output.as_deref(), None, json, started)
}

/// The progress bar of `tasks`: their packets, weighted (Plan::packet_weight).
fn progress_bar(plan: &Plan, tasks: &[Task], json: bool) -> Progress {
    let total = tasks.iter().map(|t| u64::from(plan.packets) * plan.packet_weight(t.mode, t.length)).sum();
    Progress::work(total, json)
}

/// The result document of `points` (a checkpoint's, or the final one).
fn document<'a>(
    kind: &'static str,
    plan: &'a Plan,
    session: Option<&Session>,
    points: &'a [Point],
    crossovers: Vec<Crossover>,
    started: Instant,
) -> ResultDoc<&'a Plan, Body<'a>> {
    let statement = session.map_or("software modes only: host wall time on this host's CPU".into(), clock_statement);
    let claim = session.and_then(crossover_claim);
    let (environment, link) = match session {
        Some(s) => (s.environment.clone(), s.link.clone()),
        None => (results::machine_environment(), None),
    };
    let mut doc = ResultDoc::new(
        kind,
        plan,
        environment,
        link,
        None,
        Body { clock_statement: statement.clone(), crossover_claim: claim.clone(), points: Cow::Borrowed(points), crossovers },
        started.elapsed().as_secs_f64(),
        vec![statement],
    );
    if let Some(c) = claim {
        doc.add_sim_limit(SimLimit::new("rule30_two_clocks", &["crossovers", "points[].per_line_ns", "points[].clock"], c));
    }
    doc
}

#[allow(clippy::too_many_arguments)]
fn finish(
    plan: &Plan,
    session: Option<Session>,
    points: Vec<Point>,
    planned: usize,
    crossovers: Vec<Crossover>,
    output: Option<&std::path::Path>,
    figures: Option<&std::path::Path>,
    json: bool,
    started: Instant,
) -> anyhow::Result<ExitCode> {
    let mut doc = document("rule30", plan, session.as_ref(), &points, crossovers, started);
    let interrupted = progress::stop_requested();
    if interrupted {
        doc.stopped_at(points.len(), planned);
    }
    if !json {
        if let Some(s) = &session {
            crate::outln!("{}", s.describe());
        }
        crate::outln!("what these figures are: {}", doc.body.clock_statement);
        crate::outln!("{COLUMNS_NOTE}");
        crate::outln!("{}", header());
        for p in &points {
            crate::outln!("{}", point_row(p));
        }
        if let (Some(c), false) = (&doc.body.crossover_claim, doc.body.crossovers.is_empty()) {
            crate::outln!("what the crossovers can claim: {c}");
        }
        for line in crossover_table(&doc.body.crossovers) {
            crate::outln!("{line}");
        }
        for line in overhead_table(&points) {
            crate::outln!("{line}");
        }
        if interrupted {
            crate::outln!("interrupted: {} of {planned} points measured", points.len());
        }
    }
    if let Some(dir) = figures {
        write_figures(dir, &points, plan)?;
    }
    let failed = points.iter().any(|p| p.mismatches > 0);
    doc.emit(output, json, failed)
}

fn sweep(a: &SweepArgs, device: &str, json: bool) -> anyhow::Result<ExitCode> {
    let started = Instant::now();
    let backend = crate::defaults::defaults_for(device)?;
    let packets = SWEEP_PACKETS.pick(a.packets, backend);
    let lengths = SWEEP_LENGTHS.pick(a.lengths.as_deref(), backend);
    let mut plan = parse_plan(&a.common, packets, lengths, &a.latencies, "--latencies", backend)?;
    // The result and the figures go there at the end of a long sweep: make sure of it first.
    check_output_dir("--out-dir", &a.out_dir)?;
    let out = a.out_dir.join("rule30-sweep.json");
    let mut session = open(&mut plan, device, json)?;
    progress::install_stop_handler();
    let tasks = tasks(&plan);
    let progress = progress_bar(&plan, &tasks, json);
    let mut checkpoints = Checkpoints::new(Some(&out));
    let points = measure(session.as_mut(), &plan, &tasks, &progress, |points, task, s| {
        // Without a bar (not a terminal), a line per length on stderr says how far it is.
        let last_of_length = points.len() == tasks.len() || tasks[points.len()].length != task.length;
        if !json && last_of_length && progress.is_hidden() {
            eprintln!("tlpx: rule30 sweep: {} bits done ({} of {} points)", task.length, points.len(), tasks.len());
        }
        checkpoints
            .offer(points.len(), tasks.len(), || document("rule30", &plan, s, points, crossovers(points, &plan.latencies_ns), started))
    })?;
    progress.finish();
    let crossovers = crossovers(&points, &plan.latencies_ns);
    finish(&plan, session, points, tasks.len(), crossovers, Some(&out), Some(&a.out_dir), json, started)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lengths_parse_lists_and_ranges_and_refuse_bad_ones() {
        assert_eq!(parse_lengths("8..32/8").expect("range"), vec![8, 16, 24, 32]);
        assert_eq!(parse_lengths("64,8").expect("list"), vec![8, 64]);
        let e = parse_lengths("64,8,64").expect_err("duplicate").to_string();
        assert_eq!(e, "--lengths: 64 bits is given twice (\"64\" twice); give each length once");
        let e = parse_lengths("8..64/8,16").expect_err("duplicate in a range").to_string();
        assert!(e.contains("16 bits is given twice (\"8..64/8\" and \"16\")"), "{e}");
        assert!(parse_lengths("0").expect_err("zero").to_string().contains("outside 1..=1024"));
        assert!(parse_lengths("8..2048").expect_err("too long").to_string().contains("2048"));
        assert!(parse_lengths("32..8").expect_err("inverted").to_string().contains("FROM <= TO"));
        assert!(parse_lengths("lots").expect_err("text").to_string().contains("\"lots\""));
    }

    #[test]
    fn modes_parse_with_groups_and_refuse_unknown_ones() {
        assert_eq!(parse_modes("all").expect("all").len(), 9);
        assert_eq!(parse_modes("sw,hw-irq").expect("sw").len(), 4);
        let e = parse_modes("sw,sw-char").expect_err("sw-char twice").to_string();
        assert_eq!(e, "--mode: sw-char is given twice (\"sw\" and \"sw-char\"); give each mode once");
        let e = parse_modes("hw-irq,hw-irq").expect_err("hw-irq twice").to_string();
        assert!(e.contains("hw-irq is given twice (\"hw-irq\" twice)"), "{e}");
    }

    #[test]
    fn modes_named_alone_are_told_from_those_a_group_brought() {
        let named = |text: &str| modes_named_alone(text, &parse_modes(text).expect("valid"));
        assert!(named("all").is_empty());
        assert_eq!(named("sw, hw-batch"), vec![Mode::Batch]);
        assert_eq!(named("hw-irq,hw-poll"), vec![Mode::Hw(HwMode::Irq), Mode::Hw(HwMode::Poll)]);
    }

    #[test]
    fn the_same_latency_twice_is_refused_however_written() {
        let c = Common { mode: "sw-char".into(), generations: 1, rule: 30, seed: 1, verify: false };
        let hw = DefaultsFor::Hardware;
        assert_eq!(parse_plan(&c, 1, "8", "1us,10us", "--latencies", hw).expect("two latencies").latencies_ns, vec![1000.0, 10000.0]);
        let e = parse_plan(&c, 1, "8", "1us,1000ns", "--latencies", hw).expect_err("the same").to_string();
        assert_eq!(e, "--latencies: \"1us\" and \"1000ns\" are the same latency; give each once");
        let e = parse_modes("hw-fast").expect_err("unknown").to_string();
        assert!(e.contains("hw-fast") && e.contains("hw-batch"), "{e}");
    }
}
