//! The types of `tlpx pio` documents (kind "pio"): host/blocks/pio/cmd.rs writes them; `tlpx
//! report`, `tlpx diff` and `tlpx characterize` read them.

use serde::{Deserialize, Serialize};
use tlpx_device::pio::PioStats;
use tlpx_model::stats::Summary;

/// The checked arguments.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct PioPlan {
    pub widths: Vec<u32>,
    pub count: u32,
    pub offset: u32,
    pub read_delay_cycles: Option<u32>,
}

/// One histogram bucket as printed: TLP payload sizes in [low, 2 × low).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SizeBucket {
    pub low_bytes: u64,
    pub tlps: u64,
}

/// One width's figures.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct PioPoint {
    pub width: u32,
    pub accesses: u32,
    /// "uncached" (the only mapping this tlpx has).
    pub mapping: &'static str,
    /// The clock of the wall-time fields: "host_wall_time" (the CPU's loads and stores) or, on
    /// the simulator, "host_wall_time_of_sim_socket_round_trips" (messages to tlpx-sim).
    pub wall_clock: &'static str,
    /// Host-side time each write call took (a posted write: the cost of issuing it).
    pub write_wall_ns: Summary,
    /// Host-side time each read took (a round trip).
    pub read_wall_ns: Summary,
    /// Write payload bytes per second between the card's first and last arriving write.
    pub card_write_bytes_per_second: Option<f64>,
    /// Card cycles per write over the burst (counter read before, after a flushing read).
    pub card_cycles_per_write: f64,
    /// Card cycles per read over the reads (the card's counter before and after).
    pub card_cycles_per_read: f64,
    /// Read bytes per second of card time: width / card time per read.
    pub card_read_bytes_per_second: f64,
    /// Bytes per second of host wall time over the write burst and over the reads.
    pub host_write_bytes_per_second: f64,
    pub host_read_bytes_per_second: f64,
    pub write_stats: PioStats,
    pub read_stats: PioStats,
    pub write_tlp_sizes: Vec<SizeBucket>,
    pub read_tlp_sizes: Vec<SizeBucket>,
    /// Host stores per write TLP the card saw (>1: the host merged them; <1: it split them).
    pub accesses_per_write_tlp: Option<f64>,
    /// Reads whose data differed from what was written there.
    pub readback_mismatches: u64,
}

impl PioPoint {
    pub fn failed(&self) -> bool {
        self.readback_mismatches > 0 || self.write_stats.write_bytes != u64::from(self.accesses) * u64::from(self.width)
    }
}

#[derive(Debug, Serialize, Deserialize)]
pub struct Body {
    pub mapping: &'static str,
    pub points: Vec<PioPoint>,
}
