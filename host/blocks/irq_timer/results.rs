//! The types of `tlpx irq` documents (kind "irq"): host/blocks/irq_timer/cmd.rs writes them;
//! `tlpx report`, `tlpx diff` and the metrics exporter read them.

use std::borrow::Cow;

use serde::{Deserialize, Serialize};
use tlpx_device::irq_timer::{Counters, SequenceCheck, Stage, StageStats, TimerConfig};
use tlpx_device::isr_trace::{ClockFit, SteeringCheck};
use tlpx_device::InterruptVectors;
use tlpx_model::stats::Summary;

use crate::realtime::{Comparison, Condition, LoadKind, Placement, TimeBasis};
use crate::DefaultsFor;

/// How long to measure.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Amount {
    Samples(u32),
    /// Card time in seconds.
    Seconds(f64),
}

/// The checked arguments.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Plan {
    pub amount: Amount,
    /// Interval in ns: (min, max); equal when periodic.
    pub interval_ns: (f64, f64),
    pub periodic: bool,
    pub seed: u32,
    #[serde(flatten)]
    pub placement: Placement,
    pub no_ack: u32,
    /// `--cpus`: the CPUs measured in one run, a measuring thread pinned on each, the fires
    /// dealt to them in turn (fire n to the ((n-1) mod k)-th). Absent for the one CPU of
    /// `--cpu` (and in documents before per-CPU runs).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpus: Option<Vec<usize>>,
    /// Whose defaults applied to the options not given (crate::defaults).
    pub defaults_for: DefaultsFor,
}

impl Plan {
    /// The progress bar's units per run: interrupts, or ms of card time with --duration.
    pub fn units_per_run(&self) -> u64 {
        match self.amount {
            Amount::Samples(n) => u64::from(n),
            Amount::Seconds(s) => (s * 1e3).ceil() as u64,
        }
    }
}

/// One stage of one run.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct StageReport {
    pub stage: Stage,
    /// Whether anything acknowledged this stage.
    pub measured: bool,
    /// From the sample records, in ns.
    pub latency_ns: Option<Summary>,
    /// The card's own statistics and log2 histogram (cycles); for the ISR stage on a real
    /// card, the same statistics of the stages found through the kernel's tracepoint.
    pub card: StageStats,
    /// Where the stage's end comes from: the card latching `ack_isr`/`ack_user`, or (ISR
    /// stage on a real card) the kernel's irq_handler_entry converted to card cycles.
    pub source: String,
    /// Why the stage was not measured, when it was not.
    pub not_measured: Option<String>,
}

/// One run (idle or loaded).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RunReport {
    pub condition: Condition,
    pub load: Vec<LoadKind>,
    pub load_cpus: Vec<usize>,
    pub config: TimerConfig,
    pub clock_hz: u32,
    pub interrupts_waited: u64,
    /// Ctrl-C ended this run before its end: its figures hold the interrupts that came until
    /// then (interrupts_waited), fewer than asked.
    pub interrupted: bool,
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
    /// The ISR stage on a real card: the tracepoint and the clock correlation behind it.
    pub isr_trace: Option<IsrTraceReport>,
    /// Per sample (aligned with `user_cycles`), with `--cpus`: the CPU whose measuring thread
    /// took its fire's interrupt (the CPU asked).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub sample_cpus: Vec<u32>,
    /// Per sample, with `--cpus`: the CPU `sched_getcpu()` named when that thread woke with
    /// the interrupt ([`NO_CPU`] when no thread took it: the run ended first).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub woke_cpus: Vec<u32>,
    /// Per sample (aligned with `user_cycles`), where the ISR stage was measured: its cycles
    /// (0xFFFFFFFF: no handler entry matched).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub isr_cycles: Vec<u32>,
    /// Per sample, where the card has several vectors: the MSI vector its fire raised.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub sample_vectors: Vec<u32>,
    /// Per CPU of `--cpus`: its samples' summaries and how its interrupts were dispatched.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub per_cpu: Vec<CpuReport>,
    /// How the interrupts were steered to the CPUs (hardware; absent on the simulator,
    /// whose interrupts come over a socket, with no kernel interrupt to steer).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub steering: Option<SteeringReport>,
}

/// `woke_cpus` of a fire no thread took.
pub const NO_CPU: u32 = u32::MAX;

/// One CPU of a per-CPU run.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct CpuReport {
    pub cpu: u32,
    /// "isolated", "nohz_full", "isolated, nohz_full" (from /sys/devices/system/cpu), or empty.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub role: String,
    /// Fires dealt to this CPU's thread (samples with a record).
    pub fires: u64,
    /// Of them, overruns (no user-stage value).
    pub overruns: u64,
    /// Wake-ups of this CPU's thread that `sched_getcpu()` placed on another CPU (0 when the
    /// pinning held).
    pub woke_elsewhere: u64,
    /// The user stage of its samples, ns (card clock).
    pub user_ns: Option<Summary>,
    /// The ISR stage of its samples, ns (card clock), where measured.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub isr_ns: Option<Summary>,
    /// The card vector steered to this CPU and its host interrupt number (hardware).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vector: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host_irq: Option<u32>,
}

/// How the per-CPU interrupts were steered.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct SteeringReport {
    /// What `request_vectors` granted.
    pub granted: InterruptVectors,
    /// "per_cpu_vectors": one vector per CPU, each steered; "single_vector": one vector for
    /// every CPU, dispatched where the kernel's affinity says.
    pub mode: String,
    /// Plain statement for the reader.
    pub statement: String,
    /// Per steered interrupt: its counts per CPU over the run (/proc/interrupts).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub checks: Vec<SteeringCheck>,
    /// Single vector: the CPUs the kernel dispatched it on (effective_affinity_list).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub effective_affinity: Option<Vec<u32>>,
    /// Steering failures (e.g. not root), each with its cause.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub problems: Vec<String>,
}

impl RunReport {
    pub fn failed(&self) -> bool {
        self.unexplained_missing > 0 || self.counters.lost > 0
    }

    /// The user stage's samples in ns (overruns left out): the result keeps them, so its
    /// histogram's bins are chosen from them. The ISR stage keeps only the card's log2 buckets.
    pub fn user_samples_ns(&self) -> Vec<f64> {
        let ns = 1e9 / f64::from(self.clock_hz.max(1));
        self.user_cycles.iter().filter(|&&c| c != u32::MAX).map(|&c| f64::from(c) * ns).collect()
    }

    /// The ISR stage's samples in ns (those without a handler entry left out); `cpu` keeps
    /// only that CPU's.
    pub fn isr_samples_ns(&self, cpu: Option<u32>) -> Vec<f64> {
        let ns = 1e9 / f64::from(self.clock_hz.max(1));
        self.isr_cycles
            .iter()
            .enumerate()
            .filter(|&(i, &c)| c != u32::MAX && cpu.is_none_or(|k| self.sample_cpus.get(i) == Some(&k)))
            .map(|(_, &c)| f64::from(c) * ns)
            .collect()
    }

    /// The user stage's samples of `cpu` in ns (overruns left out); empty without per-CPU data.
    pub fn user_samples_ns_of(&self, cpu: u32) -> Vec<f64> {
        let ns = 1e9 / f64::from(self.clock_hz.max(1));
        self.user_cycles
            .iter()
            .zip(&self.sample_cpus)
            .filter(|&(&c, &k)| c != u32::MAX && k == cpu)
            .map(|(&c, _)| f64::from(c) * ns)
            .collect()
    }
}

/// How the ISR stage of a run on a real card was taken: the kernel's `irq_handler_entry`
/// for the card's MSIs, converted to card cycles by a clock correlation made before and
/// after the run (tlpx_device::isr_trace; docs/interrupts.md, last section).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct IsrTraceReport {
    /// The card's interrupt numbers, from /proc/interrupts.
    pub irqs: Vec<u32>,
    /// Handler entries of those interrupts during the run.
    pub entries: usize,
    /// Trace records the kernel could not write (ring full), plus events it counted but
    /// neither delivered nor reported lost.
    pub lost_records: u64,
    /// Fires left without an ISR stage because an overrun made their entry ambiguous.
    pub ambiguous: usize,
    /// Fires matched with a handler entry.
    pub matched: usize,
    /// The host/card clock line used, with the bound of its error (cycles).
    pub fit: ClockFit,
}

#[derive(Debug, Serialize, Deserialize)]
#[serde(bound(deserialize = "'de: 'static"))]
pub struct Body<'a> {
    pub time_basis: TimeBasis,
    /// What comparing the runs shows on this time basis (with more than one run).
    pub comparison: Option<Comparison>,
    /// Borrowed when written, owned when read back.
    pub points: Cow<'a, [RunReport]>,
}
