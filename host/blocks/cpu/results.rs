//! The types of `tlpx script run` documents (kind "script"): host/blocks/cpu/cmd/script.rs
//! writes them; `tlpx report` reads them.

use serde::{Deserialize, Serialize};

/// What `script run` was asked, after defaults.
#[derive(Debug, Serialize, Deserialize)]
pub struct RunParameters {
    pub file: String,
    pub firmware: Option<String>,
    pub buffer_bytes: u64,
    pub clock_hz: u32,
    pub map_hash: u32,
    pub image_bytes: usize,
}

/// One result record, decoded and named.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RecordDoc {
    pub index: u64,
    pub slot: u16,
    pub name: String,
    pub kind: String,
    pub status: u8,
    pub status_name: &'static str,
    pub pc: u32,
    pub cycle: u64,
    pub delta_cycles: u64,
    pub value: u64,
    pub aux: u64,
}

#[derive(Debug, Serialize, Deserialize)]
pub struct EndDoc {
    pub status: u32,
    pub status_name: &'static str,
    pub ok: bool,
    pub records: u64,
    pub instructions: u32,
    pub aborted: bool,
}

/// The body of the result document: the records are its points.
#[derive(Debug, Serialize, Deserialize)]
#[serde(bound(deserialize = "'de: 'static"))]
pub struct RunBody {
    pub points: Vec<RecordDoc>,
    pub end: EndDoc,
    pub console: String,
    pub host_side: HostSideDoc,
}

#[derive(Debug, Default, Serialize, Deserialize)]
pub struct HostSideDoc {
    /// `--serve loop`: iterations answered, buffers whose data did not match their token.
    pub loop_served: Option<u64>,
    pub loop_data_errors: Option<u64>,
    /// `--serve irq`: interrupts acknowledged, samples copied, and the user stage of the
    /// samples (card cycles from the fire to the acknowledgement).
    pub irq_acked: Option<u64>,
    pub irq_samples: Option<usize>,
    pub irq_user_cycles: Option<tlpx_model::stats::Summary>,
}
