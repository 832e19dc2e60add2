//! What `tlpx slot run --json` prints, one type per shape.
//!
//! Every struct lists its fields in alphabetical order: the output was written through
//! `serde_json::Value` objects before, whose keys come out sorted, and it stays the same byte
//! for byte. The two records of other modules it holds (the slot's identification and its
//! counters) keep their own field order elsewhere, so they are written through
//! [`sorted_keys`].

use serde::{Serialize, Serializer};

use super::card::SlotCounters;
use crate::slot::SlotInfo;

/// Serializes `value` with the keys of its objects sorted (through `serde_json::Value`).
fn sorted_keys<T: Serialize, S: Serializer>(value: &T, s: S) -> Result<S::Ok, S::Error> {
    serde_json::to_value(value).map_err(serde::ser::Error::custom)?.serialize(s)
}

/// The record of one script line as it ran: what the line did, by its kind.
#[derive(Debug, Default, Serialize)]
pub(super) struct StepRecord {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bus_addr: Option<u64>,
    /// Card time a wait took, in microseconds.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub card_us: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub crc32: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub expected: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fields: Option<Vec<StepField>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub found: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub hex: Option<String>,
    /// Where the line is (`FILE:N` or `-e N`).
    pub line: String,
    /// The line with its variables expanded.
    pub run: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub size: Option<usize>,
    pub text: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub value: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub written: Option<u64>,
}

/// A field of a register a `read` line read.
#[derive(Debug, Serialize)]
pub(super) struct StepField {
    pub name: String,
    pub value: u64,
    pub value_name: Option<String>,
}

/// `--check`: the script parsed, without a card.
#[derive(Debug, Serialize)]
pub(super) struct CheckedScript<'a> {
    pub buffers: &'a [(String, usize)],
    pub steps: usize,
    pub variables: &'a [(String, String)],
}

/// A whole run.
#[derive(Debug, Serialize)]
pub(super) struct RunReport<'a> {
    pub failed: Option<Failure>,
    pub msis: u64,
    pub msis_not_waited_for: u64,
    pub notes: Vec<&'a String>,
    pub ok: bool,
    pub owned: Ownership,
    pub seed: u64,
    #[serde(serialize_with = "sorted_keys")]
    pub slot: &'a SlotInfo,
    #[serde(serialize_with = "sorted_keys")]
    pub slot_counters: Option<SlotCounters>,
    pub spy: Option<SpyTrace>,
    pub steps: &'a [StepRecord],
    pub variables: Vec<Variable<'a>>,
}

/// The line that failed, and why.
#[derive(Debug, Serialize)]
pub(super) struct Failure {
    pub error: String,
    pub line: String,
}

/// What the run held: the slot's lease, and the other blocks its writes went into.
#[derive(Debug, Serialize)]
pub(super) struct Ownership {
    pub blocks: Vec<&'static str>,
    pub slot: bool,
}

/// The spy's trace of the run (`--spy`).
#[derive(Debug, Serialize)]
pub(super) struct SpyTrace {
    pub output: String,
    pub records_lost: u64,
    pub records_written: u64,
}

/// A script variable and its value.
#[derive(Debug, Serialize)]
pub(super) struct Variable<'a> {
    pub name: &'a str,
    pub value: &'a str,
}
