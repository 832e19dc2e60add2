//! The result types `tlpx irq` and `tlpx loop` share (the CLI's `realtime` module works with
//! them): the load and conditions a run used, where its measuring thread ran, the time basis
//! of its figures and what an idle/loaded comparison shows on it.

use serde::{Deserialize, Serialize};

/// Kinds of load the built-in load generator runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
#[serde(rename_all = "snake_case")]
pub enum LoadKind {
    /// Integer arithmetic in a tight loop.
    Cpu,
    /// Streaming reads and writes over a 64 MiB buffer (memory bandwidth, cache pollution).
    Mem,
    /// Cheap system calls (getppid) in a loop: kernel entries and exits.
    Syscall,
}

/// The runs `--compare` can ask for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
#[serde(rename_all = "snake_case")]
pub enum Condition {
    /// No load from tlpx.
    Idle,
    /// With the --load generator running.
    Loaded,
}

/// The checked placement.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Placement {
    pub cpu: Option<usize>,
    pub fifo: Option<i32>,
    pub load: Vec<LoadKind>,
    pub load_cpus: Vec<usize>,
    pub conditions: Vec<Condition>,
}

/// Which parts of the figures are real host time and which are modelled.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct TimeBasis {
    /// "hardware", "sim_virtual", "sim_live" or "sim_real_host_time".
    pub kind: &'static str,
    /// The simulator's `host_time` mode as its Hello gives it (absent in older simulators).
    pub sim_host_time: Option<String>,
    /// Plain statement for the reader.
    pub statement: String,
    /// The clock of the card-measured figures, as the text output names it (the CLI's `realtime::basis_clock`).
    pub clock: &'static str,
}

/// What an idle/loaded comparison can show on a time basis, in the output and the result.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Comparison {
    /// False where the load cannot change the figures as it would a PCIe host's.
    pub shows_host_load: bool,
    pub statement: String,
}

/// Gaps the simulator charged between two readings, and how many of them it capped.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct HostGaps {
    pub gaps: u64,
    pub capped_gaps: u64,
    pub longest_gap_ns: u64,
}
