//! The schema of tlpx's result documents, apart from the commands that write them.
//!
//! A result document is one schema-versioned JSON object (the envelope: schema, version,
//! kind, environment, link, model, notes, ...; the tlpx crate's `results` module describes
//! every field) with its kind's body beside the common fields. This crate holds the parts of
//! the envelope that are plain data ([`SimLimit`], [`Partial`], [`CardEnvironment`],
//! [`LinkReport`], [`ModelConfig`]), the kinds this tlpx writes ([`KINDS`]), the typed reader
//! ([`read`]: schema version checks, and a deserializer that names the field a document lacks),
//! and every kind's parameters, body and point types, one module per kind ([`bw`], [`lat`],
//! [`spy`], ...), kept in the block's folder (host/blocks/<block>/results.rs) and compiled here:
//! the commands construct them and write them; report, diff and the metrics read them back
//! through the same types. With the `clap` feature the option values a document records are
//! also the command line's (`ValueEnum`).

use serde::{Deserialize, Serialize};
use tlpx_model::link::{CompletionSplit, LinkConfig};

#[path = "../../../blocks/generator/results/bw.rs"]
pub mod bw;
#[path = "../../../blocks/generator/results/bw_driver.rs"]
pub mod bw_driver;
#[path = "../../../blocks/generator/results/characterize.rs"]
pub mod characterize;
pub mod host_memory;
#[path = "../../../blocks/irq_timer/results.rs"]
pub mod irq;
#[path = "../../../blocks/generator/results/lat.rs"]
pub mod lat;
pub mod model;
#[path = "../../../blocks/generator/results/pciebench.rs"]
pub mod pciebench;
#[path = "../../../blocks/pio/results.rs"]
pub mod pio;
pub mod read;
pub mod realtime;
#[path = "../../../blocks/rt_loop/results.rs"]
pub mod rt_loop;
#[path = "../../../blocks/rule30/results.rs"]
pub mod rule30;
#[path = "../../../blocks/cpu/results.rs"]
pub mod script;
#[path = "../../../blocks/spy/results.rs"]
pub mod spy;

pub const SCHEMA: &str = "tlpx-result";
pub const SCHEMA_VERSION: u32 = 1;
/// The kinds of result this tlpx writes.
pub const KINDS: &[&str] = &["bw", "bw_driver", "lat", "pio", "characterize", "model", "irq", "loop", "rule30", "spy", "script"];

/// Formats a byte count as "4 KiB", "256 B".
pub fn bytes(n: u64) -> String {
    if n >= 1 << 20 && n.is_multiple_of(1 << 20) {
        format!("{} MiB", n >> 20)
    } else if n >= 1 << 10 && n.is_multiple_of(1 << 10) {
        format!("{} KiB", n >> 10)
    } else {
        format!("{n} B")
    }
}

/// Which backend's defaults a run used (`parameters.defaults_for`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DefaultsFor {
    Hardware,
    Simulator,
}

/// Something the simulator fixes by construction or cannot model, recorded in a result next
/// to the figures it concerns (docs/simulator-limits.md has the whole list).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SimLimit {
    /// Stable name, e.g. "efficiency_paced_by_the_model".
    pub id: &'static str,
    /// The figures (JSON fields) or knobs (flags) it concerns.
    pub concerns: Vec<String>,
    /// What the simulator does instead, and what to use on real hardware.
    pub statement: String,
}

impl SimLimit {
    pub fn new(id: &'static str, concerns: &[&str], statement: impl Into<String>) -> SimLimit {
        SimLimit { id, concerns: concerns.iter().map(ToString::to_string).collect(), statement: statement.into() }
    }

    /// The statement as a note (`notes` of the result, `note:` lines of the text output).
    pub fn note(&self) -> String {
        format!("SIMULATED: {}", self.statement)
    }
}

/// How much of its run a partial document holds (`partial`, with `"interrupted": true`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Partial {
    /// "interrupted": the run stopped on a signal and wrote this at its end; "checkpoint":
    /// written after a finished point while the run went on (see the module's text).
    pub state: &'static str,
    /// Finished points the document holds (a point stopped in its middle is not one of them).
    pub points_done: usize,
    pub points_planned: usize,
}

/// The states of [`Partial`].
pub const PARTIAL_STATES: &[&str] = &["interrupted", "checkpoint"];

/// What the card's identification block says.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(bound(deserialize = "'de: 'static"))]
pub struct CardEnvironment {
    pub data_width: u32,
    pub clock_hz: u32,
    pub map_hash: u32,
    pub version: String,
    pub features: Vec<&'static str>,
}

/// The link as libpci reports it from the card's PCI Express capability.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LinkReport {
    /// Where the figures come from: "libpci" (config space of the card).
    pub source: String,
    pub generation: u8,
    pub lanes: u8,
    pub speed_gt_s: f64,
    pub mps: u32,
    pub mrrs: u32,
    /// From the Link Control register's Read Completion Boundary bit (64 when clear).
    pub rcb: u32,
    pub max_payload_supported: u32,
}

impl LinkReport {
    /// The model's configuration for this link; `None` when the model cannot describe it
    /// (link down, Gen6, a width it has no table for).
    pub fn model(&self, addr64: bool) -> Option<LinkConfig> {
        LinkConfig::new(self.generation, self.lanes, self.mps, self.mrrs, self.rcb, addr64).ok()
    }
}

impl std::fmt::Display for LinkReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Gen{} x{}, MPS {}, MRRS {}, RCB {}", self.generation, self.lanes, self.mps, self.mrrs, self.rcb)
    }
}

/// The model configuration a result compares against.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ModelConfig {
    pub link: LinkConfig,
    pub completion_split: CompletionSplit,
}

#[cfg(test)]
mod tests {
    //! Every fixture of the tlpx crate (documents the real commands wrote) is read with this
    //! crate's reader: its version checked, and the envelope's parts held here read into
    //! their types and written again as they stood.
    use super::*;
    use serde_json::Value;

    const FIXTURES: &[(&str, &str)] = &[
        ("bw", include_str!("../../tlpx/tests/fixtures/results/bw.json")),
        ("bw_driver", include_str!("../../tlpx/tests/fixtures/results/bw_driver.json")),
        ("lat", include_str!("../../tlpx/tests/fixtures/results/lat.json")),
        ("pio", include_str!("../../tlpx/tests/fixtures/results/pio.json")),
        ("characterize", include_str!("../../tlpx/tests/fixtures/results/characterize.json")),
        ("model", include_str!("../../tlpx/tests/fixtures/results/model.json")),
        ("irq", include_str!("../../tlpx/tests/fixtures/results/irq.json")),
        ("loop", include_str!("../../tlpx/tests/fixtures/results/loop.json")),
        ("rule30", include_str!("../../tlpx/tests/fixtures/results/rule30.json")),
        ("spy", include_str!("../../tlpx/tests/fixtures/results/spy.json")),
        ("script", include_str!("../../tlpx/tests/fixtures/results/script.json")),
    ];

    /// The envelope's parts this crate types (the rest of a document is ignored here).
    #[derive(Debug, Serialize, Deserialize)]
    struct Parts {
        kind: &'static str,
        link: Option<LinkReport>,
        model: Option<ModelConfig>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        partial: Option<Partial>,
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        simulator_limits: Vec<SimLimit>,
        card: Option<CardEnvironment>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        own_traffic: Option<spy::OwnTraffic>,
    }

    #[test]
    fn every_fixture_is_read_with_this_reader() {
        let mut kinds: Vec<&str> = FIXTURES.iter().map(|(k, _)| *k).collect();
        kinds.sort_unstable();
        let mut written = KINDS.to_vec();
        written.sort_unstable();
        assert_eq!(kinds, written);
        for (kind, text) in FIXTURES {
            let v: Value = serde_json::from_str(text).expect("JSON");
            assert_eq!(read::check_version(&v), Ok(()), "{kind}");
            // The parts as they stand in the document (the card's is in the environment, the
            // spy's own traffic in its first point).
            let mut parts = serde_json::json!({
                "kind": v["kind"], "link": v["link"], "model": v["model"], "card": v["environment"]["card"],
            });
            for field in ["partial", "simulator_limits"] {
                if let Some(x) = v.get(field) {
                    parts[field] = x.clone();
                }
            }
            if let Some(own) = v["points"].get(0).and_then(|p| p.get("own_traffic")) {
                parts["own_traffic"] = own.clone();
            }
            let typed: Parts = read::from_value(parts.clone()).unwrap_or_else(|e| panic!("{kind}: {e}"));
            assert_eq!(typed.kind, *kind);
            assert_eq!(serde_json::to_value(&typed).expect("serialises"), parts, "{kind}: read and written again differs");
            if *kind == "spy" {
                assert!(typed.own_traffic.is_some(), "the spy fixture has its own traffic");
            }
        }
    }
}
