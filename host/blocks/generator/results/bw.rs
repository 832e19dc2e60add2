//! The types of `tlpx bw` documents (kind "bw"): the sweep's parameters, its points, and the
//! option values they record. `tlpx bw` (host/blocks/generator/cmd/bw.rs) writes them; `tlpx
//! report`, `tlpx diff` and the metrics exporter read them back.

use serde::{Deserialize, Serialize};
use tlpx_device::generator::{AddressPattern, DataPattern, ErrorCounts, GenConfig, Operation};
use tlpx_model::stats::Summary;

pub use crate::host_memory::{CacheState, HostKnobs, IommuPages};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
#[serde(rename_all = "snake_case")]
pub enum BwOp {
    /// BW_RD: the card reads host memory.
    Read,
    /// BW_WR: the card writes host memory.
    Write,
    /// BW_RDWR: both at once.
    Rdwr,
}

impl BwOp {
    pub fn operation(self) -> Operation {
        match self {
            BwOp::Read => Operation::Read,
            BwOp::Write => Operation::Write,
            BwOp::Rdwr => Operation::ReadWrite,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
#[serde(rename_all = "snake_case")]
pub enum PatternArg {
    /// Transfer n at (n × slot) mod window.
    Seq,
    /// Every transfer at the same address.
    Fixed,
    /// A slot of the window chosen by the card's LFSR.
    Random,
}

impl PatternArg {
    pub fn pattern(self) -> AddressPattern {
        match self {
            PatternArg::Seq => AddressPattern::Sequential,
            PatternArg::Fixed => AddressPattern::Fixed,
            PatternArg::Random => AddressPattern::Random,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
#[serde(rename_all = "snake_case")]
pub enum DataArg {
    /// DW at byte address a holds a/4 + seed.
    Counter,
    /// DW at byte address a holds a hash of a/4 and the seed.
    Prbs,
}

impl DataArg {
    pub fn pattern(self) -> DataPattern {
        match self {
            DataArg::Counter => DataPattern::Counter,
            DataArg::Prbs => DataPattern::Prbs,
        }
    }
}

/// The generator options after parsing, checked against everything but the link.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Common {
    pub windows: Vec<u64>,
    pub offsets: Vec<u32>,
    pub patterns: Vec<PatternArg>,
    pub count: u64,
    pub duration_seconds: Option<f64>,
    pub request_size: Option<u32>,
    pub payload_size: Option<u32>,
    pub idle_cycles: u32,
    pub addr64: bool,
    pub data: DataArg,
    pub seed: u32,
    pub check: bool,
    pub relaxed_ordering: bool,
    pub no_snoop: bool,
    pub repeat: u32,
    /// The host's knobs (cache, numa_node, iommu_pages).
    #[serde(flatten)]
    pub host: HostKnobs,
}

/// What the host found in the buffer after the card wrote it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct HostCheck {
    /// Bytes examined (the whole window).
    pub checked_bytes: u64,
    /// Bytes that hold the pattern the card writes.
    pub written_bytes: u64,
    /// Bytes that hold neither the pattern nor what the host put there before the run.
    pub corrupt_bytes: u64,
    /// Bytes the card should have written (sequential and fixed patterns) but did not.
    pub missing_bytes: u64,
    /// Bytes outside the transfers that the card wrote anyway.
    pub stray_bytes: u64,
    /// Window offset of the first bad byte.
    pub first_bad_offset: Option<u64>,
}

impl HostCheck {
    pub fn bad(&self) -> u64 {
        self.corrupt_bytes + self.missing_bytes + self.stray_bytes
    }

    /// What was bad, for the text output: "2 corrupt, 0 missing, 1 stray bytes (first at +5)".
    pub fn bad_text(&self) -> String {
        format!(
            "{} corrupt, {} missing, {} stray bytes (first at +{})",
            self.corrupt_bytes,
            self.missing_bytes,
            self.stray_bytes,
            self.first_bad_offset.unwrap_or(0)
        )
    }

    /// Adds the counts of another run (the first bad offset stays the first one seen).
    pub fn add(&mut self, o: &HostCheck) {
        self.checked_bytes += o.checked_bytes;
        self.written_bytes += o.written_bytes;
        self.corrupt_bytes += o.corrupt_bytes;
        self.missing_bytes += o.missing_bytes;
        self.stray_bytes += o.stray_bytes;
        self.first_bad_offset = self.first_bad_offset.or(o.first_bad_offset);
    }
}

/// One run as the point keeps it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RunRecord {
    pub cycles: u64,
    pub bytes_per_second: f64,
    pub transfers: u64,
    pub ended_by: String,
}

/// One point of a bandwidth sweep.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct BwPoint {
    pub operation: &'static str,
    pub transfer_size: u32,
    pub window: u64,
    pub offset: u32,
    pub pattern: &'static str,
    pub config: GenConfig,
    /// Payload bytes per second of card time (per stream for rdwr), over the runs.
    pub achieved_bytes_per_second: Summary,
    /// The model's limit for the link libpci reports (per stream for rdwr).
    pub model_bytes_per_second: Option<f64>,
    /// achieved / model as a fraction (1.0 = the model's limit), over the runs.
    pub efficiency: Option<Summary>,
    /// What `efficiency` is (unit, and on the simulator that it cannot exceed 1.0); null
    /// without a model.
    pub efficiency_meaning: Option<&'static str>,
    pub runs: Vec<RunRecord>,
    /// Sums over the runs.
    pub transfers: u64,
    pub read_requests: u64,
    pub read_bytes: u64,
    pub completions: u64,
    pub write_requests: u64,
    pub write_bytes: u64,
    pub card_errors: ErrorCounts,
    pub card_error_total: u64,
    /// The host's check of the buffer after writes (null for reads: the card checks those).
    pub host_check: Option<HostCheck>,
}

impl BwPoint {
    /// True when the point is not clean: card errors, bad data, a run that did not end by its
    /// count or duration, or no transfer at all (nothing was measured).
    pub fn failed(&self) -> bool {
        self.transfers == 0
            || self.card_error_total > 0
            || self.host_check.as_ref().is_some_and(|c| c.bad() > 0)
            || self.runs.iter().any(|r| r.ended_by != "count" && r.ended_by != "duration")
    }
}

/// The parameters of a `bw` document, as written and as `tlpx report` reads them back.
///
/// The options' fields (the command's `Common`) one by one rather than flattened: its `request_size` and
/// `payload_size` are the options as given (absent = from the link), while the document
/// records the sizes resolved from the link, under the same names.
#[derive(Debug, Serialize, Deserialize)]
#[serde(bound(deserialize = "'de: 'static"))]
pub struct Parameters {
    pub operations: Vec<&'static str>,
    pub sizes: Vec<u32>,
    pub outstanding: u32,
    pub windows: Vec<u64>,
    pub offsets: Vec<u32>,
    pub patterns: Vec<PatternArg>,
    pub count: u64,
    pub duration_seconds: Option<f64>,
    /// Resolved from the link when not given.
    pub request_size: u32,
    pub payload_size: u32,
    pub duration_cycles: u64,
    pub idle_cycles: u32,
    pub addr64: bool,
    pub data: DataArg,
    pub seed: u32,
    pub check: bool,
    pub relaxed_ordering: bool,
    pub no_snoop: bool,
    pub repeat: u32,
    /// The host's knobs (cache, numa_node, iommu_pages).
    #[serde(flatten)]
    pub host: HostKnobs,
}

/// The body of a `bw` document: its points.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(bound(deserialize = "'de: 'static"))]
pub struct Body {
    pub points: Vec<BwPoint>,
}
