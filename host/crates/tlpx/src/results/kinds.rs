//! Every kind of result document with its own types, as `tlpx report` reads them.
//!
//! ```text
//!   JSON value ──check_version──► kind ──► AnyResult::Bw(ResultDoc<bw::Parameters, bw::Body>)
//!                                          AnyResult::Lat(ResultDoc<lat::Parameters, lat::Body>) ...
//! ```
//!
//! Each kind is read into the parameters and body its command writes: the same types, which
//! are tlpx-results' (`tlpx_results::<kind>`); the round-trip tests below hold the documents
//! written and read together.

use serde_json::Value;
use tlpx_results::read::ReadError;
use tlpx_results::{bw, bw_driver, characterize, irq, lat, model, pio, rt_loop, rule30, script, spy};

use super::read::document_from_value;
use super::ResultDoc;

/// A result document of any kind, in its kind's types.
#[derive(Debug)]
pub enum AnyResult {
    Bw(ResultDoc<bw::Parameters, bw::Body>),
    BwDriver(ResultDoc<bw_driver::Parameters, bw_driver::Body>),
    Lat(ResultDoc<lat::Parameters, lat::Body>),
    Pio(ResultDoc<pio::PioPlan, pio::Body>),
    Characterize(ResultDoc<characterize::Parameters, characterize::Body>),
    Model(ResultDoc<model::Parameters, model::Body>),
    Irq(ResultDoc<irq::Plan, irq::Body<'static>>),
    Loop(ResultDoc<rt_loop::Plan, rt_loop::Body<'static>>),
    Rule30(ResultDoc<rule30::Plan, rule30::Body<'static>>),
    Spy(ResultDoc<spy::StatsParameters, spy::StatsBody>),
    Script(ResultDoc<script::RunParameters, script::RunBody>),
}

/// Runs `$f` on the document inside any variant (each has its own types).
macro_rules! each {
    ($any:expr, $d:ident => $f:expr) => {
        match $any {
            AnyResult::Bw($d) => $f,
            AnyResult::BwDriver($d) => $f,
            AnyResult::Lat($d) => $f,
            AnyResult::Pio($d) => $f,
            AnyResult::Characterize($d) => $f,
            AnyResult::Model($d) => $f,
            AnyResult::Irq($d) => $f,
            AnyResult::Loop($d) => $f,
            AnyResult::Rule30($d) => $f,
            AnyResult::Spy($d) => $f,
            AnyResult::Script($d) => $f,
        }
    };
}

impl AnyResult {
    /// Reads a document whose schema version has been checked ([`super::check_version`]) into
    /// its kind's types; `None` for a kind this tlpx does not write.
    pub fn from_value(v: Value) -> Option<Result<AnyResult, ReadError>> {
        let kind = v.get("kind").and_then(Value::as_str)?;
        Some(match kind {
            "bw" => document_from_value(v).map(AnyResult::Bw),
            "bw_driver" => document_from_value(v).map(AnyResult::BwDriver),
            "lat" => document_from_value(v).map(AnyResult::Lat),
            "pio" => document_from_value(v).map(AnyResult::Pio),
            "characterize" => document_from_value(v).map(AnyResult::Characterize),
            "model" => document_from_value(v).map(AnyResult::Model),
            "irq" => document_from_value(v).map(AnyResult::Irq),
            "loop" => document_from_value(v).map(AnyResult::Loop),
            "rule30" => document_from_value(v).map(AnyResult::Rule30),
            "spy" => document_from_value(v).map(AnyResult::Spy),
            "script" => document_from_value(v).map(AnyResult::Script),
            _ => return None,
        })
    }

    pub fn kind(&self) -> &'static str {
        each!(self, d => d.kind)
    }
}

#[cfg(test)]
mod tests {
    //! The fixtures are documents the real commands wrote on the simulated card (`tlpx bw
    //! --sizes 64,256,1024 --count 100`, `lat --count 100`, `pio --widths 4,8 --count 50`,
    //! `irq --samples 50 --min 10us --max 30us --compare idle,loaded --load cpu --load-cpus 0`,
    //! `loop --size 8,256 --detect poll,irq --iterations 5`, `rule30 sweep --packets 2
    //! --generations 3 --lengths 8,64,256 --latencies 10ns`, `spy stats`, `characterize
    //! --sizes 64,4096 --count 100 --lat-count 100 --widths 4,64 --pio-count 20`, `model`, and
    //! `script run` of a 16-write, 16-read script on the card with the CPU; and `bw --count 256`
    //! through LitePCIe's stock driver in the virtual platform's guest, scripts/vplat/init); tests/report_cli.rs
    //! renders them too.
    use super::*;
    use crate::results::read::{NoBody, ENVELOPE};
    use crate::results::{check_document, check_version, KINDS};

    const FIXTURES: &[(&str, &str)] = &[
        ("bw", include_str!("../../tests/fixtures/results/bw.json")),
        ("bw_driver", include_str!("../../tests/fixtures/results/bw_driver.json")),
        ("lat", include_str!("../../tests/fixtures/results/lat.json")),
        ("pio", include_str!("../../tests/fixtures/results/pio.json")),
        ("characterize", include_str!("../../tests/fixtures/results/characterize.json")),
        ("model", include_str!("../../tests/fixtures/results/model.json")),
        ("irq", include_str!("../../tests/fixtures/results/irq.json")),
        ("loop", include_str!("../../tests/fixtures/results/loop.json")),
        ("rule30", include_str!("../../tests/fixtures/results/rule30.json")),
        ("spy", include_str!("../../tests/fixtures/results/spy.json")),
        ("script", include_str!("../../tests/fixtures/results/script.json")),
    ];

    fn fixture(kind: &str) -> Value {
        let text = FIXTURES.iter().find(|(k, _)| *k == kind).expect("a fixture of the kind").1;
        serde_json::from_str(text).expect("JSON")
    }

    #[test]
    fn every_kind_has_a_fixture() {
        let kinds: Vec<&str> = FIXTURES.iter().map(|(k, _)| *k).collect();
        let mut written = KINDS.to_vec();
        written.sort_unstable();
        let mut have = kinds.clone();
        have.sort_unstable();
        assert_eq!(have, written);
    }

    #[test]
    fn every_kind_reads_back_to_the_document_written() {
        for (kind, _) in FIXTURES {
            let v = fixture(kind);
            assert_eq!(check_document(&v), Ok(()), "{kind}");
            assert_eq!(check_version(&v), Ok(()), "{kind}");
            let typed = AnyResult::from_value(v.clone()).expect("a kind tlpx writes").unwrap_or_else(|e| panic!("{kind}: {e}"));
            assert_eq!(typed.kind(), *kind);
            let again = each!(&typed, d => serde_json::to_value(d)).expect("serialises");
            assert_eq!(again, v, "{kind}: the document read and written again differs");
        }
    }

    /// `irq --samples 60 --min 1ms --max 2ms --cpus all --fifo 50 --compare idle,loaded --load
    /// cpu --load-cpus 0` on tlpx-sim --host-time real (2 CPUs): the per-CPU fields.
    const IRQ_PER_CPU: &str = include_str!("../../tests/fixtures/results/irq_percpu.json");

    #[test]
    fn a_per_cpu_irq_document_reads_back_unchanged_with_its_cpus() {
        let v: Value = serde_json::from_str(IRQ_PER_CPU).expect("JSON");
        let typed = AnyResult::from_value(v.clone()).expect("a kind tlpx writes").expect("irq");
        assert_eq!(each!(&typed, d => serde_json::to_value(d)).expect("serialises"), v);
        let AnyResult::Irq(d) = &typed else { panic!("not irq") };
        assert_eq!(d.parameters.cpus.as_deref(), Some(&[0usize, 1][..]));
        for p in d.body.points.iter() {
            assert_eq!((p.sample_cpus.len(), p.woke_cpus.len()), (p.user_cycles.len(), p.user_cycles.len()));
            assert_eq!(p.per_cpu.iter().map(|c| c.fires).sum::<u64>(), p.user_cycles.len() as u64);
            assert!(p.per_cpu.iter().all(|c| c.woke_elsewhere == 0));
        }
        // The older fixture has none of the per-CPU fields, and writes none back.
        let old = fixture("irq");
        assert!(old["points"][0].get("per_cpu").is_none() && old["parameters"].get("cpus").is_none());
    }

    #[test]
    fn a_field_missing_in_a_point_is_named_with_its_path() {
        let mut v = fixture("lat");
        v["points"][0].as_object_mut().expect("point").remove("samples_cycles");
        let e = AnyResult::from_value(v).expect("lat").expect_err("no samples");
        assert_eq!(e.to_string(), "field points[0].samples_cycles is missing");
        let mut v = fixture("irq");
        v["points"][1]["stages"][0]["card"]["histogram"] = "many".into();
        let e = AnyResult::from_value(v).expect("irq").expect_err("not a list");
        assert!(e.to_string().starts_with("field points[1].stages[0].card.histogram: invalid type: string \"many\""), "{e}");
        let mut v = fixture("bw");
        v["environment"]["sim"].as_object_mut().expect("sim").remove("seed");
        let e = AnyResult::from_value(v).expect("bw").expect_err("no seed");
        assert_eq!(e.to_string(), "field environment.sim.seed is missing");
    }

    #[test]
    fn older_documents_without_the_later_fields_are_read() {
        // Written before time_mode, simulator_limits and the crossovers' clocks existed.
        let mut v = fixture("rule30");
        let doc = v.as_object_mut().expect("object");
        doc.remove("time_mode");
        doc.remove("simulator_limits");
        for c in doc["crossovers"].as_array_mut().expect("crossovers") {
            let c = c.as_object_mut().expect("crossover");
            c.remove("hw_clock");
            c.remove("sw_clock");
        }
        let Some(Ok(AnyResult::Rule30(d))) = AnyResult::from_value(v) else { panic!("read") };
        assert_eq!(d.time_mode, None);
        assert!(d.simulator_limits.is_empty());
        assert!(d.body.crossovers.iter().all(|c| c.hw_clock.is_empty() && c.sw_clock.is_empty()));
    }

    #[test]
    fn the_envelope_fields_are_the_structs() {
        // Every field of ResultDoc but the body is in ENVELOPE (the reader splits on it).
        let mut v = fixture("bw");
        v["partial"] = serde_json::json!({"state": "interrupted", "points_done": 1, "points_planned": 2});
        v["interrupted"] = true.into();
        v["pmc"] = serde_json::json!([{"label": "main thread", "reading": null, "note": "none"}]);
        let d: ResultDoc<bw::Parameters, NoBody> = document_from_value(v).unwrap_or_else(|e| panic!("{e}"));
        let fields: Vec<String> = serde_json::to_value(&d).expect("value").as_object().expect("object").keys().cloned().collect();
        let mut envelope: Vec<String> = ENVELOPE.iter().map(ToString::to_string).collect();
        envelope.sort();
        assert_eq!(fields, envelope);
    }
}
