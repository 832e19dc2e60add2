//! The types of `tlpx loop` documents (kind "loop"): host/blocks/rt_loop/cmd.rs writes them;
//! `tlpx report`, `tlpx diff` and the metrics exporter read them.

use std::borrow::Cow;

use serde::{Deserialize, Serialize};
use tlpx_device::rt_loop::{CardStats, Detect, LoopConfig, Return};
use tlpx_model::stats::Summary;

use crate::realtime::{self, Comparison, Condition, HostGaps, Placement, TimeBasis};

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Plan {
    pub iterations: u32,
    pub sizes: Vec<u32>,
    pub detect: Vec<Detect>,
    pub ret: Vec<Return>,
    pub seed: u32,
    pub verify: bool,
    pub sweep: bool,
    #[serde(flatten)]
    pub placement: Placement,
}

impl Plan {
    pub fn config(&self, size: u32, detect: Detect, ret: Return) -> LoopConfig {
        let mut c = LoopConfig::new(size, self.iterations, detect, ret);
        c.seed = self.seed;
        c.verify_data = self.verify;
        c
    }
}

/// One point: one size, detection, return and condition.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Point {
    pub size_bytes: u32,
    pub detect: Detect,
    #[serde(rename = "return")]
    pub ret: Return,
    pub condition: Condition,
    pub load: Vec<realtime::LoadKind>,
    pub load_cpus: Vec<usize>,
    pub iterations: u32,
    /// Every checksum right, every iteration counted, no sample lost.
    pub verified: bool,
    pub clock_hz: u32,
    /// Loop time (card clock), ns.
    pub loop_ns: Option<Summary>,
    /// max - min of the loop time, ns (the DataMover's jitter).
    pub jitter_ns: Option<f64>,
    /// Standard deviation of the loop time, ns.
    pub stddev_ns: Option<f64>,
    /// DMA return: mean cycles from the doorbell's arrival to the read's completion, in ns.
    pub return_read_mean_ns: Option<f64>,
    /// Host wall time from seeing the token to issuing the return, ns (real host time).
    pub host_compute_ns: Option<Summary>,
    pub polls_per_iteration: Option<f64>,
    pub interrupts: u64,
    pub doorbell_retries: u64,
    pub data_errors: u64,
    pub card: CardStats,
    /// Simulator with real host time: gaps charged during the point and how many were capped.
    pub sim_host_gaps: Option<HostGaps>,
    pub pinned_cpu: Option<usize>,
    pub fifo_priority: Option<i32>,
    pub notes: Vec<String>,
    /// Every loop time in cycles.
    pub loop_cycles: Vec<u32>,
}

impl Point {
    /// Every loop time in ns (the result keeps them: its histogram's bins are chosen from them).
    pub fn loop_samples_ns(&self) -> Vec<f64> {
        let ns = 1e9 / f64::from(self.clock_hz.max(1));
        self.loop_cycles.iter().map(|&c| f64::from(c) * ns).collect()
    }

    pub fn label(&self) -> String {
        format!("{}/{} {}", self.detect.name(), self.ret.name(), format!("{:?}", self.condition).to_lowercase())
    }
}

#[derive(Debug, Serialize, Deserialize)]
#[serde(bound(deserialize = "'de: 'static"))]
pub struct Body<'a> {
    pub time_basis: TimeBasis,
    /// What comparing idle and loaded points shows on this time basis (when both ran).
    pub comparison: Option<Comparison>,
    /// On the simulator with both detections: why irq against poll shows nothing about a host.
    pub detection: Option<String>,
    /// Borrowed when written, owned when read back.
    pub points: Cow<'a, [Point]>,
}
