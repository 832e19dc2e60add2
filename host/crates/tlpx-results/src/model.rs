//! The types of `tlpx model` documents (kind "model"): host/crates/tlpx/src/cmd/model.rs writes
//! them; `tlpx report` reads them.

use serde::{Deserialize, Serialize};
use tlpx_model::link::{self, Analysis};

/// One line of the model's output.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ModelPoint {
    pub operation: link::Operation,
    pub transfer_size: u64,
    pub bytes_per_second: f64,
    pub gbit_per_second: f64,
    /// Payload bandwidth / raw bandwidth of one direction.
    pub efficiency: f64,
    pub analysis: Analysis,
}

#[derive(Debug, Serialize, Deserialize)]
#[serde(bound(deserialize = "'de: 'static"))]
pub struct Parameters {
    pub sizes: Vec<u64>,
    pub operations: Vec<&'static str>,
    /// Where the link came from: "libpci (DEVICE)" or "default (...)"; "command line" fields listed.
    pub link_source: String,
    pub overridden: Vec<&'static str>,
}

#[derive(Debug, Serialize, Deserialize)]
pub struct Body {
    pub raw_bytes_per_second: f64,
    pub tlp_bytes_per_second: f64,
    pub points: Vec<ModelPoint>,
}
