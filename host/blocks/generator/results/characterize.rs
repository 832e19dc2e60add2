//! The types of `tlpx characterize` documents (kind "characterize"): the Pamette table and the
//! points of its bw, lat and pio sweeps. host/blocks/generator/cmd/characterize.rs writes them;
//! `tlpx report` reads them.

use serde::{Deserialize, Serialize};

use crate::host_memory::HostKnobs;

use crate::bw::BwPoint;
use crate::lat::LatPoint;
use crate::pio::{PioPlan, PioPoint};

/// One row of the Pamette table.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct TableRow {
    /// "dma_write", "dma_read", "dma_read_write", "pio_write", "pio_read".
    pub what: &'static str,
    pub label: &'static str,
    /// Best sustained payload bandwidth, bytes/s (median over repeats), card time.
    pub best_bytes_per_second: Option<f64>,
    /// The transfer size (DMA) or access width (PIO) that achieved it.
    pub at_bytes: Option<u64>,
    /// The model's limit at that size (DMA only).
    pub model_at_size_bytes_per_second: Option<f64>,
    /// best / model at that size, a fraction (1.0 = the model's limit); DMA only.
    pub efficiency: Option<f64>,
    /// What `efficiency` is (unit; on the simulator, that it cannot exceed 1.0).
    pub efficiency_meaning: Option<&'static str>,
    /// The model's best over the sizes swept (DMA only).
    pub model_best_bytes_per_second: Option<f64>,
    pub how: String,
}

#[derive(Debug, Serialize, Deserialize)]
pub struct Parameters {
    pub sizes: Vec<u32>,
    pub count: u64,
    pub duration_seconds: Option<f64>,
    pub window: u64,
    pub outstanding: u32,
    pub repeat: u32,
    pub addr64: bool,
    pub lat_sizes: Vec<u32>,
    pub lat_count: u64,
    pub pio: PioPlan,
    pub out_dir: String,
    /// The host's knobs (cache, numa_node, iommu_pages).
    #[serde(flatten)]
    pub host: HostKnobs,
}

#[derive(Debug, Serialize, Deserialize)]
#[serde(bound(deserialize = "'de: 'static"))]
pub struct Body {
    pub table: Vec<TableRow>,
    /// The DMA bandwidth points (kind "bw" points).
    pub points: Vec<BwPoint>,
    pub latency: Vec<LatPoint>,
    pub pio: Vec<PioPoint>,
    pub figures: Vec<String>,
}
