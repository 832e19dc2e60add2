//! The types of `spy stats` documents (kind "spy") that are the spy's own: the counters
//! themselves are the device's (`tlpx_device::spy::SpyCounters`).

use serde::{Deserialize, Serialize};

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
