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
use serde::{Deserialize, Serialize};
use tlpx_device::card::Feature;
use tlpx_device::lease::Block;
use tlpx_device::rule30::{self as accel, HwMode, OpConfig};
use tlpx_device::{BarPath, ClockSource};
use tlpx_model::stats::Summary;
use tlpx_rule30::{char_run, from_card_words, test_packets, BitLine, CharLine, Variant, CARD_WORDS};

use crate::args::{check_optional_output, check_output_dir, whole};
use crate::checkpoint::Checkpoints;
use crate::defaults::{BackendDefault, DefaultsFor};
use crate::plot::{self, Chart, Series, Style, XAxis};
use crate::progress::{self, Progress};
use crate::realtime::fmt_ns;
use crate::results::{self, ResultDoc, SimLimit};
use crate::session::Session;
use crate::sizes::parse_duration;

/// Most generations the accelerator computes per start.
pub const MAX_GENERATIONS: u32 = 65535;

/// Packets per point of `run` (the help of --packets says the same; tested in main.rs).
pub const RUN_PACKETS: BackendDefault<u32> = BackendDefault { hardware: 1000, simulator: 100 };
/// Packets per point of `sweep`: a sweep measures a point per length, latency and mode.
pub const SWEEP_PACKETS: BackendDefault<u32> = BackendDefault { hardware: 1000, simulator: 10 };
/// Lengths of `sweep`: every 8 bits on hardware; the powers of two on the simulator (the
/// crossovers and the zoom figure are below 256 bits, where they are dense).
pub const SWEEP_LENGTHS: BackendDefault<&str> = BackendDefault { hardware: "8..1024/8", simulator: "8,16,32,64,128,256,512,1024" };

/// A mode of `tlpx rule30 run` (serialised as its name: "sw-char", "hw-batch").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    Sw(Variant),
    Hw(HwMode),
    Batch,
}

impl Serialize for Mode {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.name())
    }
}

impl<'de> Deserialize<'de> for Mode {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Mode, D::Error> {
        let name = std::borrow::Cow::<str>::deserialize(d)?;
        Mode::all().into_iter().find(|m| m.name() == name).ok_or_else(|| {
            let names: Vec<&str> = Mode::all().iter().map(|m| m.name()).collect();
            serde::de::Error::custom(format!("unknown rule-30 mode {name:?}; the modes are {}", names.join(", ")))
        })
    }
}

impl Mode {
    pub fn name(self) -> &'static str {
        match self {
            Mode::Sw(v) => v.name(),
            Mode::Hw(m) => m.name(),
            Mode::Batch => "hw-batch",
        }
    }

    pub fn is_hw(self) -> bool {
        !matches!(self, Mode::Sw(_))
    }

    pub fn all() -> Vec<Mode> {
        let mut v: Vec<Mode> = Variant::ALL.iter().map(|s| Mode::Sw(*s)).collect();
        v.extend(HwMode::ALL.iter().map(|m| Mode::Hw(*m)));
        v.push(Mode::Batch);
        v
    }

    /// Which of `modes` (parsed from `text`) the list names one by one, not through a group.
    fn named_alone(text: &str, modes: &[Mode]) -> Vec<Mode> {
        modes.iter().copied().filter(|m| text.split(',').any(|t| t.trim() == m.name())).collect()
    }

    fn parse(text: &str) -> anyhow::Result<Vec<Mode>> {
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
}

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

// Checked arguments --------------------------------------------------------------------------

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Plan {
    pub modes: Vec<Mode>,
    /// The modes named one by one in --mode (not through all, sw or hw): a device that cannot
    /// run one of these refuses the command; one the groups brought in is left out, said so.
    /// How the list was written, not a parameter of the measurement: not in results.
    #[serde(skip)]
    pub named_modes: Vec<Mode>,
    pub packets: u32,
    pub generations: u32,
    pub rule: u8,
    pub seed: u64,
    pub verify: bool,
    pub lengths: Vec<u32>,
    pub latencies_ns: Vec<f64>,
    /// Whose defaults applied to the options not given (crate::defaults).
    pub defaults_for: DefaultsFor,
}

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

impl Plan {
    /// `latency_flag` names the option `latencies` came from (`--latency` of run, `--latencies`
    /// of sweep); `packets` and `lengths` are the values used (given or the backend's default).
    fn parse(
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
        let modes = Mode::parse(&common.mode)?;
        let named_modes = Mode::named_alone(&common.mode, &modes);
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

    fn has_hw(&self) -> bool {
        self.modes.iter().any(|m| m.is_hw())
    }

    /// What one packet of `mode` at `length` weighs on the progress bar: with hardware modes
    /// in the plan only theirs count (software points take milliseconds), growing with the
    /// line (the words moved per packet).
    fn packet_weight(&self, mode: Mode, length: u32) -> u64 {
        if mode.is_hw() || !self.has_hw() {
            128 + u64::from(length)
        } else {
            0
        }
    }
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

// Measurement --------------------------------------------------------------------------------

/// One mode at one length and latency.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Point {
    pub mode: Mode,
    pub length_bits: u32,
    /// The latency asked for, and what the card does (cycles; software modes: none).
    pub latency_ns: f64,
    pub latency_cycles: Option<u32>,
    pub packets: u32,
    pub generations: u32,
    /// "host" (software modes; hardware modes on hardware) or "simulated_card".
    pub clock: &'static str,
    pub per_packet_ns: Summary,
    pub per_line_ns: Summary,
    /// max / avg of the per-packet times (the seed's jitter).
    pub jitter: f64,
    /// CPU time of the measuring thread over the point: user and kernel, ns.
    pub user_ns: u64,
    pub kernel_ns: u64,
    /// Hardware modes: the accelerator's busy cycles over the point, and busy / total.
    pub busy_ns: Option<f64>,
    pub efficiency: Option<f64>,
    /// (total - busy) per operation, ns.
    pub overhead_per_op_ns: Option<f64>,
    pub operations: Option<u32>,
    /// Packets whose output was compared with sw-char's and matched (with --verify).
    pub verified_packets: Option<u32>,
    /// Packets whose output differs from sw-char's or is missing (with --verify).
    pub mismatches: u32,
    /// Of the mismatches, packets the mode returned no output for (a failure, never a pass).
    pub missing_outputs: u32,
    /// Hardware modes: how register accesses reached the card (mapped loads and stores, a
    /// system call each, or a simulator message each).
    pub bar_path: Option<BarPath>,
}

fn thread_cpu_ns() -> (u64, u64) {
    // SAFETY: getrusage fills the struct it is given.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    unsafe { libc::getrusage(libc::RUSAGE_THREAD, &mut ru) };
    let ns = |t: libc::timeval| t.tv_sec as u64 * 1_000_000_000 + t.tv_usec as u64 * 1000;
    (ns(ru.ru_utime), ns(ru.ru_stime))
}

struct Workload {
    packets: Vec<BitLine>,
    golden: Option<Vec<BitLine>>,
}

fn workload(plan: &Plan, length: u32) -> anyhow::Result<Workload> {
    let chars = test_packets(plan.packets as usize, length as usize, plan.seed)?;
    let packets: Vec<BitLine> = chars.iter().map(BitLine::from).collect();
    let golden =
        plan.verify.then(|| chars.iter().map(|c: &CharLine| BitLine::from(&char_run(c, plan.rule, plan.generations as usize))).collect());
    Ok(Workload { packets, golden })
}

fn summarise(per_packet: &[f64], per_line: &[f64]) -> anyhow::Result<(Summary, Summary, f64)> {
    let pp = Summary::of(per_packet).context("no packets measured")?;
    let pl = Summary::of(per_line).context("no lines measured")?;
    let jitter = if pp.mean > 0.0 { pp.max / pp.mean } else { 0.0 };
    Ok((pp, pl, jitter))
}

fn run_sw(plan: &Plan, variant: Variant, length: u32, work: &Workload) -> anyhow::Result<Point> {
    let g = plan.generations as usize;
    let mut per_packet = Vec::with_capacity(work.packets.len());
    let mut mismatches = 0u32;
    let cpu0 = thread_cpu_ns();
    for (i, p) in work.packets.iter().enumerate() {
        let t0 = Instant::now();
        let out = std::hint::black_box(variant.run(std::hint::black_box(p), plan.rule, g));
        per_packet.push(t0.elapsed().as_nanos() as f64);
        if let Some(golden) = &work.golden {
            mismatches += u32::from(golden[i] != out);
        }
    }
    let cpu1 = thread_cpu_ns();
    let per_line: Vec<f64> = per_packet.iter().map(|t| t / g as f64).collect();
    let (pp, pl, jitter) = summarise(&per_packet, &per_line)?;
    Ok(Point {
        mode: Mode::Sw(variant),
        length_bits: length,
        latency_ns: 0.0,
        latency_cycles: None,
        packets: plan.packets,
        generations: plan.generations,
        clock: "host",
        per_packet_ns: pp,
        per_line_ns: pl,
        jitter,
        user_ns: cpu1.0 - cpu0.0,
        kernel_ns: cpu1.1 - cpu0.1,
        busy_ns: None,
        efficiency: None,
        overhead_per_op_ns: None,
        operations: None,
        verified_packets: work.golden.as_ref().map(|_| plan.packets - mismatches),
        missing_outputs: 0,
        mismatches,
        bar_path: None,
    })
}

/// One hardware point; `tick(n)` says that `n` packets of it are done (the progress bar).
fn run_hw(
    session: &mut Session,
    plan: &Plan,
    mode: Mode,
    length: u32,
    latency_ns: f64,
    work: &Workload,
    tick: &dyn Fn(u64),
) -> anyhow::Result<Point> {
    let clock_hz = session.clock_hz;
    // Worded as the driver's refusal ("invalid argument: ...").
    let latency_cycles = accel::latency_cycles(latency_ns, clock_hz).map_err(tlpx_device::DeviceError::from)?;
    let op = OpConfig { rule: plan.rule, line_length: length, latency_cycles };
    let card = &mut session.card;
    let clock = match card.device().clock_source() {
        ClockSource::Host => "host",
        ClockSource::SimulatedCard => "simulated_card",
    };
    let cycle_ns = 1e9 / f64::from(clock_hz.max(1));
    let cpu0 = thread_cpu_ns();
    let t_start = card.device().clock_ns()?;
    let mut per_packet = Vec::with_capacity(work.packets.len());
    let mut per_line = Vec::with_capacity(work.packets.len() * plan.generations as usize);
    let mut mismatches = 0u32;
    let mut outputs = Vec::with_capacity(work.packets.len());
    let (busy_cycles, operations);
    let path;
    match mode {
        Mode::Hw(m) => {
            // The core is one block with one owner: single operations rewrite the registers a
            // batch (or another process's single operations) relies on. Claimed per point, as
            // the batch engine's run does (accel::batch::run), and refreshed between packets.
            card.claim(Block::Rule30Batch)?;
            let per_start = if m == HwMode::Multi { plan.generations } else { 1 };
            if let Err(e) = accel::configure(card, &op, m, per_start) {
                let _ = card.release(Block::Rule30Batch);
                return Err(e.into());
            }
            // hw-syscall: every access crosses the kernel (the seed's char driver) where the
            // backend has a mapping to avoid; the others use the backend's usual path.
            let usual = card.device().bar_path();
            if m == HwMode::Syscall && usual == BarPath::Mapped {
                card.device().set_bar_path(BarPath::Syscall)?;
            }
            path = Some(card.device().bar_path());
            let run = (|| -> anyhow::Result<(u64, u32)> {
                let c0 = accel::counters(card)?;
                for p in &work.packets {
                    // A point of a thousand packets takes minutes on the simulator: Ctrl-C
                    // ends it here, between packets (the point is then dropped, unfinished).
                    if progress::stop_requested() {
                        return Err(tlpx_device::DeviceError::Interrupted.into());
                    }
                    let input = p.to_card_words();
                    let t0 = card.device().clock_ns()?;
                    let out = accel::run_packet(card, m, &op, &input, plan.generations, &mut per_line)?;
                    per_packet.push((card.device().clock_ns()? - t0) as f64);
                    outputs.push(out);
                    tick(outputs.len() as u64);
                    // Outside the timed packet: a lease refresh when one is due.
                    card.keep_leases()?;
                }
                let c1 = accel::counters(card)?;
                Ok((c1.busy_cycles - c0.busy_cycles, c1.operations.wrapping_sub(c0.operations)))
            })();
            let restored = card.device().set_bar_path(usual);
            let released = card.release(Block::Rule30Batch);
            (busy_cycles, operations) = run?;
            restored?;
            released?;
        }
        Mode::Batch => {
            path = Some(card.device().bar_path());
            let r = accel::batch::run(card, &op, &work.packets.iter().map(BitLine::to_card_words).collect::<Vec<_>>(), plan.generations)?;
            per_packet = r.per_packet_ns.clone();
            per_line = per_packet.iter().map(|t| t / f64::from(plan.generations)).collect();
            busy_cycles = r.busy_cycles;
            operations = r.operations;
            outputs = r.outputs;
            tick(outputs.len() as u64);
        }
        Mode::Sw(_) => unreachable!("software modes are run by run_sw"),
    }
    let total_ns = (card.device().clock_ns()? - t_start) as f64;
    let cpu1 = thread_cpu_ns();
    let verification = work.golden.as_ref().map(|golden| verify_outputs(golden, &outputs, length)).transpose()?;
    if let Some(v) = verification {
        mismatches = v.mismatches;
    }
    let (pp, pl, jitter) = summarise(&per_packet, &per_line)?;
    let busy_ns = busy_cycles as f64 * cycle_ns;
    Ok(Point {
        mode,
        length_bits: length,
        latency_ns,
        latency_cycles: Some(op.latency_cycles),
        packets: plan.packets,
        generations: plan.generations,
        clock,
        per_packet_ns: pp,
        per_line_ns: pl,
        jitter,
        user_ns: cpu1.0 - cpu0.0,
        kernel_ns: cpu1.1 - cpu0.1,
        busy_ns: Some(busy_ns),
        efficiency: (total_ns > 0.0).then(|| busy_ns / total_ns),
        overhead_per_op_ns: (operations > 0).then(|| (total_ns - busy_ns) / f64::from(operations)),
        operations: Some(operations),
        verified_packets: verification.map(|v| v.verified),
        missing_outputs: verification.map_or(0, |v| v.missing),
        mismatches,
        bar_path: path,
    })
}

/// What --verify found for the outputs of one hardware mode.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Verification {
    /// Outputs compared with their packet's golden line and equal to it.
    verified: u32,
    /// Outputs that differ, plus packets without an output and outputs without a packet.
    mismatches: u32,
    /// |packets - outputs|: a count that differs is a failure of every unpaired packet.
    missing: u32,
}

/// Compares the outputs with the golden lines, packet by packet. Only comparisons actually
/// made count as verified; the two lists must be as long as each other, and every packet
/// or output without a partner is a mismatch (zip alone would stop at the shorter one and
/// leave the packets it never compared looking verified).
fn verify_outputs(golden: &[BitLine], outputs: &[[u32; CARD_WORDS]], length: u32) -> anyhow::Result<Verification> {
    let (mut verified, mut mismatches) = (0u32, 0u32);
    for (g, out) in golden.iter().zip(outputs) {
        if *g == from_card_words(out, length as usize)? {
            verified += 1;
        } else {
            mismatches += 1;
        }
    }
    let missing = golden.len().abs_diff(outputs.len()) as u32;
    Ok(Verification { verified, mismatches: mismatches + missing, missing })
}

/// Measures `tasks` in order with a progress bar; `each` sees the points so far after every
/// finished one, and the session (checkpoints, the sweep's line per length). Stops on Ctrl-C after the point
/// in progress, or within it for the hardware modes (that point is dropped); returns the
/// finished points.
fn measure(
    mut session: Option<&mut Session>,
    plan: &Plan,
    tasks: &[Task],
    progress: &Progress,
    mut each: impl FnMut(&[Point], &Task, Option<&Session>) -> anyhow::Result<()>,
) -> anyhow::Result<Vec<Point>> {
    let mut points = Vec::new();
    let mut work: Option<(u32, Workload)> = None;
    let mut base = 0u64;
    for (i, task) in tasks.iter().enumerate() {
        if progress::stop_requested() {
            break;
        }
        progress.start(&format!("{} (point {} of {})", task.describe(), i + 1, tasks.len()));
        if work.as_ref().is_none_or(|(l, _)| *l != task.length) {
            work = Some((task.length, workload(plan, task.length)?));
        }
        let Some((_, w)) = &work else { unreachable!("made above") };
        let weight = plan.packet_weight(task.mode, task.length);
        let point = match (task.mode, session.as_deref_mut()) {
            (Mode::Sw(v), _) => run_sw(plan, v, task.length, w),
            (_, Some(s)) => run_hw(s, plan, task.mode, task.length, task.latency_ns, w, &|n| progress.set_done(base + n * weight)),
            (_, None) => unreachable!("hardware modes open a session"),
        };
        match point {
            Ok(p) => {
                export_point(&p);
                points.push(p);
                base += u64::from(plan.packets) * weight;
                progress.set_done(base);
                each(&points, task, session.as_deref())?;
            }
            Err(e) if progress::is_interrupt(&e) => break,
            Err(e) => return Err(e),
        }
    }
    Ok(points)
}

/// Per mode, into the process's metrics (served with `--metrics-listen`): lines computed and
/// the mean time per line of the last point. The card counts operations of all modes together
/// (`tlpx_rule30_operations_total`); the mode is the host's notion, so it is counted here.
fn export_point(p: &Point) {
    let r = crate::metrics::global();
    let ok = r
        .describe_counter("tlpx_rule30_mode_lines_total", "Rule-30 lines (generations) computed by `tlpx rule30`, per mode.")
        .and_then(|_| {
            r.describe_gauge(
                "tlpx_rule30_mode_line_seconds",
                "Mean time per line of the last `tlpx rule30` point, per mode (simulated card time for hardware modes on the simulator).",
            )
        });
    if ok.is_err() {
        return;
    }
    let lines = f64::from(p.packets) * f64::from(p.generations);
    r.counter_inc("tlpx_rule30_mode_lines_total", &[("mode", p.mode.name())], lines);
    r.gauge_set("tlpx_rule30_mode_line_seconds", &[("mode", p.mode.name())], p.per_line_ns.mean / 1e9);
}

// Output -------------------------------------------------------------------------------------

fn point_row(p: &Point) -> String {
    format!(
        "  {:<10} {:<11} {:>5} {:>9} {:>11} {:>11} {:>11} {:>11} {:>7.2} {:>9} {:>9} {:>6} {}",
        p.mode.name(),
        if p.clock == "simulated_card" { "card (sim)" } else { "host wall" },
        p.length_bits,
        if p.mode.is_hw() { fmt_ns(p.latency_ns) } else { "-".into() },
        fmt_ns(p.per_line_ns.min),
        fmt_ns(p.per_line_ns.mean),
        fmt_ns(p.per_line_ns.max),
        fmt_ns(p.per_packet_ns.mean),
        p.jitter,
        fmt_ns(p.user_ns as f64 / f64::from(p.packets)),
        fmt_ns(p.kernel_ns as f64 / f64::from(p.packets)),
        p.efficiency.map_or("-".into(), |e| format!("{:.1}%", e * 100.0)),
        match p.verified_packets {
            Some(v) if p.mismatches == 0 => format!("verified {v}/{}", p.packets),
            Some(_) if p.missing_outputs > 0 => {
                format!("MISMATCH {} of {} ({} outputs missing)", p.mismatches, p.packets, p.missing_outputs)
            }
            Some(_) => format!("MISMATCH {} of {}", p.mismatches, p.packets),
            None => String::new(),
        }
    )
}

fn header() -> String {
    format!(
        "  {:<10} {:<11} {:>5} {:>9} {:>11} {:>11} {:>11} {:>11} {:>7} {:>9} {:>9} {:>6}",
        "mode", "clock", "bits", "latency", "line min", "line avg", "line max", "packet avg", "jitter", "user/pkt", "kern/pkt", "eff"
    )
}

/// What the columns' clocks are (the line above the table).
const COLUMNS_NOTE: &str = "columns: line and packet times in the row's clock (host wall = this host's wall clock; card (sim) = \
                            the simulated card's clock); user/pkt and kern/pkt are the measuring thread's CPU time on this host; \
                            eff = accelerator busy / total, in %";

/// On the simulator with hardware modes: what comparing the modes' times (the crossovers
/// above all) can and cannot claim, the two clocks being different.
fn crossover_claim(session: &Session) -> Option<String> {
    let sim = session.environment.sim.as_ref()?;
    let link = format!("Gen{} x{}", sim.link_model.generation, sim.link_model.lanes);
    Some(if sim.host_time == "real" {
        format!(
            "comparing modes compares two clocks: software modes in host wall time on this host's CPU, hardware modes in \
             card time (simulated: the modelled {link} link, root complex and card, plus this host's wall time between \
             register accesses, tlpx-sim's socket round trips included); the socket is no PCIe host's, so these crossovers \
             bound no real host's"
        )
    } else {
        format!(
            "comparing modes compares two clocks: software modes in host wall time on this host's CPU, hardware modes in card \
             time (simulated, virtual host time: the modelled {link} link, root complex ({} ns read latency + 0..{} ns) and \
             card; the driver's own CPU time costs nothing); a crossover here is a lower bound on a real host's only for a \
             host whose link and root complex are no faster than these and whose CPU runs the software modes at least as fast \
             as this one (its driver then only adds time to the hardware modes); a faster link or root complex, or a slower CPU, can bring the crossover \
             below these lengths",
            sim.dma_latency_ns, sim.dma_jitter_ns
        )
    })
}

fn clock_statement(session: &Session) -> String {
    if session.environment.simulated {
        let mode = session.environment.sim.as_ref().map_or("virtual".to_string(), |s| s.host_time.clone());
        format!(
            "software modes: host wall time on this host's CPU; hardware modes: SIMULATED card time (host time {mode}: {}), \
             on the simulator every register access of hw-poll and hw-syscall alike is one socket message",
            if mode == "real" {
                "the modelled bus and card plus this host's real time between accesses, socket included"
            } else {
                "only the modelled bus and card; the driver's own CPU time is not in it"
            }
        )
    } else {
        let path = match session.environment.backend.as_deref() {
            Some("litepcie") => "this backend reaches the card's registers by a system call per access only, so hw-poll is one too",
            _ => "hw-poll loads and stores on the mapped BAR; hw-syscall makes every access a system call (pread/pwrite)",
        };
        format!("all modes timed with the host's clock (hardware); {path}")
    }
}

#[derive(Debug, Serialize, Deserialize)]
#[serde(bound(deserialize = "'de: 'static"))]
pub struct Body<'a> {
    pub clock_statement: String,
    /// On the simulator with hardware modes: what comparing the modes' times across their two
    /// clocks can claim (crossovers above all); null otherwise.
    pub crossover_claim: Option<String>,
    /// Borrowed when written, owned when read back.
    pub points: Cow<'a, [Point]>,
    pub crossovers: Vec<Crossover>,
}

/// Where a hardware mode starts beating a software mode, per line.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Crossover {
    pub hw_mode: &'static str,
    pub sw_mode: &'static str,
    /// The clocks the two modes were timed with (the points' `clock`): on the simulator
    /// "simulated_card" against "host", two different clocks (see `crossover_claim`); empty
    /// when read from a document written before they were recorded.
    #[serde(default)]
    pub hw_clock: &'static str,
    #[serde(default)]
    pub sw_clock: &'static str,
    pub latency_ns: f64,
    /// The shortest length from which the hardware mode is faster at every longer length
    /// measured; `None`: never within the lengths.
    pub length_bits: Option<u32>,
}

fn crossovers(points: &[Point], latencies: &[f64]) -> Vec<Crossover> {
    let mut out = Vec::new();
    let hw: Vec<Mode> = {
        let mut v: Vec<Mode> = points.iter().map(|p| p.mode).filter(|m| m.is_hw()).collect();
        v.dedup();
        v.sort_by_key(|m| m.name());
        v.dedup();
        v
    };
    let sw: Vec<Mode> = {
        let mut v: Vec<Mode> = points.iter().map(|p| p.mode).filter(|m| !m.is_hw()).collect();
        v.sort_by_key(|m| m.name());
        v.dedup();
        v
    };
    for &lat in latencies {
        for h in &hw {
            for s in &sw {
                let mut lengths: Vec<u32> = points.iter().filter(|p| p.mode == *h && p.latency_ns == lat).map(|p| p.length_bits).collect();
                lengths.sort_unstable();
                let mut from = None;
                for &l in lengths.iter().rev() {
                    let hp = points.iter().find(|p| p.mode == *h && p.latency_ns == lat && p.length_bits == l);
                    let sp = points.iter().find(|p| p.mode == *s && p.length_bits == l);
                    match (hp, sp) {
                        (Some(hp), Some(sp)) if hp.per_line_ns.mean < sp.per_line_ns.mean => from = Some(l),
                        _ => break,
                    }
                }
                let clock_of = |m: &Mode| points.iter().find(|p| p.mode == *m).map_or("host", |p| p.clock);
                out.push(Crossover {
                    hw_mode: h.name(),
                    sw_mode: s.name(),
                    hw_clock: clock_of(h),
                    sw_clock: clock_of(s),
                    latency_ns: lat,
                    length_bits: from,
                });
            }
        }
    }
    out
}

/// A point's `clock` in words: "host wall time" or "card time (simulated)".
pub fn clock_text(clock: &str) -> &'static str {
    if clock == "simulated_card" {
        "card time (simulated)"
    } else {
        "host wall time"
    }
}

/// Per latency: a row per hardware mode, a column per software mode, the crossover length;
/// the heading names the clocks of both.
pub fn crossover_table(crossovers: &[Crossover]) -> Vec<String> {
    let mut out = Vec::new();
    let mut latencies: Vec<f64> = crossovers.iter().map(|c| c.latency_ns).collect();
    latencies.dedup();
    let mut sw: Vec<&str> = crossovers.iter().map(|c| c.sw_mode).collect();
    sw.sort_unstable();
    sw.dedup();
    let mut hw: Vec<&str> = crossovers.iter().map(|c| c.hw_mode).collect();
    hw.sort_unstable();
    hw.dedup();
    for lat in latencies {
        let clocks = |f: fn(&Crossover) -> &'static str| {
            let mut v: Vec<&str> = crossovers.iter().map(|c| clock_text(f(c))).collect();
            v.sort_unstable();
            v.dedup();
            v.join(" / ")
        };
        out.push(format!(
            "  crossover (bits from which the hardware mode is faster per line), latency {}; rows (hardware modes) in {}, \
             columns (software modes) in {}:",
            fmt_ns(lat),
            clocks(|c| c.hw_clock),
            clocks(|c| c.sw_clock)
        ));
        out.push(format!("    {:<11}{}", "", sw.iter().map(|s| format!("{s:>10}")).collect::<String>()));
        for h in &hw {
            let cells: String = sw
                .iter()
                .map(|s| {
                    let c = crossovers.iter().find(|c| c.latency_ns == lat && c.hw_mode == *h && c.sw_mode == *s);
                    format!("{:>10}", c.and_then(|c| c.length_bits).map_or("never".to_string(), |l| l.to_string()))
                })
                .collect();
            out.push(format!("    {h:<11}{cells}"));
        }
    }
    out
}

/// The Gedae seed's table per hardware mode and latency, at the longest length measured:
/// efficiency (accelerator busy / total) and overhead per operation.
pub fn overhead_table(points: &[Point]) -> Vec<String> {
    let Some(longest) = points.iter().filter(|p| p.mode.is_hw()).map(|p| p.length_bits).max() else {
        return Vec::new();
    };
    let clock = points.iter().find(|p| p.mode.is_hw()).map_or("host", |p| p.clock);
    let mut out = vec![
        format!("  overhead at {longest} bits, in {} (efficiency = accelerator busy time / total):", clock_text(clock)),
        format!("    {:<11}{:>10}{:>12}{:>14}{:>12}", "mode", "latency", "efficiency", "overhead/op", "time/line"),
    ];
    for p in points.iter().filter(|p| p.mode.is_hw() && p.length_bits == longest) {
        out.push(format!(
            "    {:<11}{:>10}{:>12}{:>14}{:>12}",
            p.mode.name(),
            fmt_ns(p.latency_ns),
            p.efficiency.map_or("-".into(), |e| format!("{:.1}%", e * 100.0)),
            p.overhead_per_op_ns.map_or("-".into(), fmt_ns),
            fmt_ns(p.per_line_ns.mean)
        ));
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
    let backend = DefaultsFor::of_device(device)?;
    let packets = RUN_PACKETS.pick(a.packets, backend);
    let mut plan = Plan::parse(&a.common, packets, &a.length.to_string(), &a.latency, "--latency", backend)?;
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
    let backend = DefaultsFor::of_device(device)?;
    let packets = SWEEP_PACKETS.pick(a.packets, backend);
    let lengths = SWEEP_LENGTHS.pick(a.lengths.as_deref(), backend);
    let mut plan = Plan::parse(&a.common, packets, lengths, &a.latencies, "--latencies", backend)?;
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

fn write_figures(dir: &std::path::Path, points: &[Point], plan: &Plan) -> anyhow::Result<()> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let lat0 = plan.latencies_ns.first().copied().unwrap_or(0.0);
    let series_for = |pred: &dyn Fn(&Point) -> bool, label: String, y: &dyn Fn(&Point) -> f64| Series {
        label,
        points: points.iter().filter(|p| pred(p)).map(|p| (f64::from(p.length_bits), y(p))).collect(),
        style: Style::Line,
    };
    let per_mode = |max_len: u32, lat: f64| -> Vec<Series> {
        plan.modes
            .iter()
            .map(|m| {
                series_for(
                    &|p: &Point| p.mode == *m && p.length_bits <= max_len && (!m.is_hw() || p.latency_ns == lat),
                    m.name().to_string(),
                    &|p: &Point| p.per_line_ns.mean / 1e3,
                )
            })
            .collect()
    };
    let charts = [
        (
            "rule30-landscape.svg",
            Chart {
                title: format!("rule 30: time per line against length (latency {})", fmt_ns(lat0)),
                x_label: "packet length, bits".into(),
                y_label: "time per line, us (mean)".into(),
                x_axis: XAxis::Linear,
                y_range: None,
                series: per_mode(1024, lat0),
            },
        ),
        (
            "rule30-zoom.svg",
            Chart {
                title: "rule 30: below 256 bits".into(),
                x_label: "packet length, bits".into(),
                y_label: "time per line, us (mean)".into(),
                x_axis: XAxis::Linear,
                y_range: None,
                series: per_mode(256, lat0),
            },
        ),
        (
            "rule30-latencies.svg",
            Chart {
                title: "rule 30: hardware latencies overlapped".into(),
                x_label: "packet length, bits".into(),
                y_label: "time per line, us (mean)".into(),
                x_axis: XAxis::Linear,
                y_range: None,
                series: plan
                    .modes
                    .iter()
                    .filter(|m| m.is_hw())
                    .flat_map(|m| plan.latencies_ns.iter().map(move |lat| (*m, *lat)))
                    .map(|(m, lat)| {
                        series_for(
                            &|p: &Point| p.mode == m && p.latency_ns == lat,
                            format!("{} {}", m.name(), fmt_ns(lat)),
                            &|p: &Point| p.per_line_ns.mean / 1e3,
                        )
                    })
                    .collect(),
            },
        ),
        (
            "rule30-jitter.svg",
            Chart {
                title: "rule 30: jitter (max / avg time per packet)".into(),
                x_label: "packet length, bits".into(),
                y_label: "max / avg".into(),
                x_axis: XAxis::Linear,
                y_range: None,
                series: plan
                    .modes
                    .iter()
                    .map(|m| {
                        series_for(&|p: &Point| p.mode == *m && (!m.is_hw() || p.latency_ns == lat0), m.name().to_string(), &|p: &Point| {
                            p.jitter
                        })
                    })
                    .collect(),
            },
        ),
    ];
    for (name, chart) in charts {
        let path = dir.join(name);
        std::fs::write(&path, plot::render_svg(&chart)?).with_context(|| format!("writing {}", path.display()))?;
        eprintln!("tlpx: wrote {}", path.display());
    }
    Ok(())
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
        assert_eq!(Mode::parse("all").expect("all").len(), 9);
        assert_eq!(Mode::parse("sw,hw-irq").expect("sw").len(), 4);
        let e = Mode::parse("sw,sw-char").expect_err("sw-char twice").to_string();
        assert_eq!(e, "--mode: sw-char is given twice (\"sw\" and \"sw-char\"); give each mode once");
        let e = Mode::parse("hw-irq,hw-irq").expect_err("hw-irq twice").to_string();
        assert!(e.contains("hw-irq is given twice (\"hw-irq\" twice)"), "{e}");
    }

    #[test]
    fn modes_named_alone_are_told_from_those_a_group_brought() {
        let named = |text: &str| Mode::named_alone(text, &Mode::parse(text).expect("valid"));
        assert!(named("all").is_empty());
        assert_eq!(named("sw, hw-batch"), vec![Mode::Batch]);
        assert_eq!(named("hw-irq,hw-poll"), vec![Mode::Hw(HwMode::Irq), Mode::Hw(HwMode::Poll)]);
    }

    #[test]
    fn verify_counts_only_the_comparisons_it_made_and_a_missing_output_fails() {
        let golden: Vec<BitLine> = test_packets(3, 40, 9).expect("packets").iter().map(BitLine::from).collect();
        let words: Vec<[u32; CARD_WORDS]> = golden.iter().map(BitLine::to_card_words).collect();
        let v = |verified, mismatches, missing| Verification { verified, mismatches, missing };
        assert_eq!(verify_outputs(&golden, &words, 40).expect("compared"), v(3, 0, 0));
        // One output for three packets: one verified, two missing are failures, not passes.
        assert_eq!(verify_outputs(&golden, &words[..1], 40).expect("compared"), v(1, 2, 2));
        // No output at all: nothing verified.
        assert_eq!(verify_outputs(&golden, &[], 40).expect("compared"), v(0, 3, 3));
        // More outputs than packets is as wrong as fewer.
        let mut extra = words.clone();
        extra.push(words[0]);
        assert_eq!(verify_outputs(&golden, &extra, 40).expect("compared"), v(3, 1, 1));
        // A wrong output is a mismatch, the others still verified.
        let mut wrong = words;
        wrong[1][0] ^= 1;
        assert_eq!(verify_outputs(&golden, &wrong, 40).expect("compared"), v(2, 1, 0));
    }

    #[test]
    fn the_same_latency_twice_is_refused_however_written() {
        let c = Common { mode: "sw-char".into(), generations: 1, rule: 30, seed: 1, verify: false };
        let hw = DefaultsFor::Hardware;
        assert_eq!(Plan::parse(&c, 1, "8", "1us,10us", "--latencies", hw).expect("two latencies").latencies_ns, vec![1000.0, 10000.0]);
        let e = Plan::parse(&c, 1, "8", "1us,1000ns", "--latencies", hw).expect_err("the same").to_string();
        assert_eq!(e, "--latencies: \"1us\" and \"1000ns\" are the same latency; give each once");
        let e = Mode::parse("hw-fast").expect_err("unknown").to_string();
        assert!(e.contains("hw-fast") && e.contains("hw-batch"), "{e}");
    }
}
