//! The types of `spy stats` documents (kind "spy"): `spy stats` writes them and `tlpx report`
//! reads them back through the same types. The counters themselves are the device's
//! (`tlpx_device::spy::SpyCounters`).

use serde::{Deserialize, Serialize};
use tlpx_device::spy::SpyCounters;

/// The parameters of a `spy stats` document, as written and as `tlpx report` reads them back.
#[derive(Debug, Serialize, Deserialize)]
pub struct StatsParameters {
    /// `--clear`: the counters and histograms were zeroed after being read.
    pub clear: bool,
}

/// What `spy stats` reads from the card: one point of its document, and its `--json` output.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Stats {
    pub counters: SpyCounters,
    /// The spy's own ring writes since the last clear (also in `counters.own`), with their
    /// share of the card-to-host bytes the spy counted; always written, absent from documents
    /// written before record format 2.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub own_traffic: Option<OwnTraffic>,
    /// The TLP class of each index of the counters.
    pub classes: Vec<String>,
    /// Bucket k counts latencies in [2^k, 2^(k+1)) card cycles.
    pub latency_histogram: Vec<u64>,
    /// Bucket k counts payloads in [2^k, 2^(k+1)) bytes.
    pub payload_histogram_down: Vec<u64>,
    pub payload_histogram_up: Vec<u64>,
    pub clock_hz: u32,
}

/// The body of a `spy stats` document: one point, the stats when it was taken.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct StatsBody {
    pub points: Vec<Stats>,
}

/// The spy's own ring writes against the rest of the card-to-host traffic since the last clear
/// (the counters have no time span: the link's share needs one, see `spy capture` and `top`).
/// `spy stats` writes it as `own_traffic` and `tlpx report` reads it back.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OwnTraffic {
    pub tlps: u64,
    pub bytes: u64,
    /// Plus the link's framing per TLP.
    pub wire_bytes: u64,
    /// Of the card-to-host bytes on the wire (framing included) since the last clear.
    pub share_of_up_traffic: f64,
}
