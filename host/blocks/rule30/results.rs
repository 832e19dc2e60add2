//! The types of `tlpx rule30` documents (kind "rule30"): host/blocks/rule30/cmd/ writes them;
//! `tlpx report` reads them.

use std::borrow::Cow;

use serde::{Deserialize, Serialize};
use tlpx_device::rule30::HwMode;
use tlpx_device::BarPath;
use tlpx_model::stats::Summary;
use tlpx_rule30::Variant;

use crate::DefaultsFor;

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
}

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

impl Plan {
    pub fn has_hw(&self) -> bool {
        self.modes.iter().any(|m| m.is_hw())
    }

    /// What one packet of `mode` at `length` weighs on the progress bar: with hardware modes
    /// in the plan only theirs count (software points take milliseconds), growing with the
    /// line (the words moved per packet).
    pub fn packet_weight(&self, mode: Mode, length: u32) -> u64 {
        if mode.is_hw() || !self.has_hw() {
            128 + u64::from(length)
        } else {
            0
        }
    }
}

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
