//! The types of `tlpx lat` documents (kind "lat"): `tlpx lat` (host/blocks/generator/cmd/lat.rs)
//! writes them; `tlpx report`, `tlpx diff` and `tlpx characterize` read them.

use serde::{Deserialize, Serialize};
use tlpx_device::generator::{ErrorCounts, GenConfig};
use tlpx_model::stats::Summary;

use crate::bw::{Common, HostCheck};
use crate::bytes;

/// The card's own latency counters, converted to ns.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct HardwareLatency {
    pub count: u64,
    pub min_ns: f64,
    pub mean_ns: f64,
    pub max_ns: f64,
    /// log2 histogram in card cycles: bucket k counts latencies in [2^k, 2^(k+1)) cycles.
    pub histogram_cycles: Vec<u64>,
}

/// One latency measurement point.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct LatPoint {
    /// "LAT_RD" or "LAT_WRRD".
    pub measurement: &'static str,
    pub operation: &'static str,
    pub transfer_size: u32,
    pub config: GenConfig,
    pub clock_hz: u32,
    /// Per-request latency in ns from the card's samples; null when the card kept none.
    pub latency_ns: Option<Summary>,
    pub hardware: HardwareLatency,
    /// The samples themselves, in card cycles (what the CDF is drawn from).
    pub samples_cycles: Vec<u32>,
    pub samples_dropped: u64,
    pub transfers: u64,
    /// Card cycles of the runs, summed (pcie-bench's TAvg is this over the requests; absent
    /// in documents older than it, read as 0).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub cycles: u64,
    pub card_errors: ErrorCounts,
    pub card_error_total: u64,
    pub host_check: Option<HostCheck>,
    pub ended_by: Vec<String>,
}

fn is_zero(v: &u64) -> bool {
    *v == 0
}

impl LatPoint {
    pub fn label(&self) -> String {
        format!("{} {}", self.measurement, bytes(u64::from(self.transfer_size)))
    }

    pub fn samples_ns(&self) -> Vec<f64> {
        let ns_per_cycle = 1e9 / f64::from(self.clock_hz.max(1));
        self.samples_cycles.iter().map(|c| f64::from(*c) * ns_per_cycle).collect()
    }

    pub fn failed(&self) -> bool {
        self.card_error_total > 0
            || self.host_check.as_ref().is_some_and(|c| c.bad() > 0)
            || self.ended_by.iter().any(|e| e != "count" && e != "duration")
    }
}

#[derive(Debug, Serialize, Deserialize)]
#[serde(bound(deserialize = "'de: 'static"))]
pub struct Parameters {
    pub measurements: Vec<&'static str>,
    pub sizes: Vec<u32>,
    #[serde(flatten)]
    pub common: Common,
}

#[derive(Debug, Serialize, Deserialize)]
#[serde(bound(deserialize = "'de: 'static"))]
pub struct Body {
    pub points: Vec<LatPoint>,
}
