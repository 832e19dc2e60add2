//! The types of `tlpx bw` documents written through LitePCIe's stock driver (kind "bw_driver"):
//! host/blocks/generator/cmd/bw_driver.rs writes them; `tlpx report` reads them.

use serde::{Deserialize, Serialize};
use tlpx_model::stats::Summary;

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Parameters {
    /// "litepcie_driver_dma": LitePCIe's DMA through its driver.
    pub engine: String,
    /// "rdwr": reader and writer together, in the card's loopback.
    pub direction: String,
    pub buffer_bytes: u64,
    pub ring_buffers: u64,
    pub buffers_per_run: u64,
    pub repeat: u32,
    pub seed: u32,
    pub check: bool,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Run {
    /// Buffers the driver counted for each direction (its writer's count; the reader's runs
    /// ahead by the loopback's depth).
    pub buffers: u64,
    pub bytes_per_direction: u64,
    pub host_seconds: f64,
    pub host_mb_per_s_per_direction: f64,
    pub card_cycles: u64,
    pub card_mb_per_s_per_direction: f64,
    /// Writer buffers compared with their reader buffers, and how many differed.
    pub checked_buffers: u64,
    pub bad_buffers: u64,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Body {
    /// One per run, in order.
    pub points: Vec<Run>,
    /// Over the runs: card-clock and host-clock MB/s per direction.
    pub card_mb_per_s: Option<Summary>,
    pub host_mb_per_s: Option<Summary>,
}
