//! Reading result documents back into the types that wrote them.
//!
//! ```text
//!   file ──read_value──► JSON value ──check_version──► schema and version checked
//!        ──from_value──► ResultDoc<P, B> of the writer's own types (B: the kind's body)
//! ```
//!
//! The deserializer ([`from_value`], in tlpx-results with the version checks) interns the
//! strings the writers' `&'static str` fields need and names the field a document lacks
//! ("field points[0].samples_cycles is missing"); this module reads files and splits a
//! document into its envelope and its kind's body.

use std::path::Path;

use serde::de;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
pub use tlpx_results::read::check_version;
use tlpx_results::read::{from_value, ReadError};

use super::ResultDoc;

/// Reads the JSON of a result file of at most `max_bytes`; the error names the file.
pub fn read_value(path: &Path, max_bytes: u64) -> Result<Value, String> {
    let name = path.display();
    let text = crate::input::read_capped(path, max_bytes).map_err(|e| format!("{name}: cannot read it: {e}"))?;
    serde_json::from_slice(&text).map_err(|e| format!("{name}: not JSON ({e})"))
}

/// Reads the result document of kind `kind` in `path` into its types: the schema version is
/// checked first, then the kind, then every field. Errors name the file. (`tlpx report`
/// reads documents of any kind, through [`super::AnyResult`]; this is the reader of one kind.)
#[allow(dead_code)]
pub fn read_document<P, B>(path: &Path, kind: &str, max_bytes: u64) -> Result<ResultDoc<P, B>, String>
where
    P: Serialize + Deserialize<'static>,
    B: Serialize + Deserialize<'static>,
{
    let name = path.display();
    let v = read_value(path, max_bytes)?;
    check_version(&v).map_err(|e| format!("{name}: {e}"))?;
    match v.get("kind").and_then(Value::as_str) {
        Some(k) if k == kind => {}
        Some(k) => return Err(format!("{name}: a {k:?} result, not the {kind:?} result expected")),
        None => return Err(format!("{name}: a tlpx result without a \"kind\" string; expected {kind:?}")),
    }
    document_from_value(v).map_err(|e| format!("{name}: this {kind:?} result is incomplete or malformed: {e}"))
}

/// The fields of [`ResultDoc`] other than its flattened body (checked against the struct by a
/// test).
pub(super) const ENVELOPE: &[&str] = &[
    "schema",
    "schema_version",
    "kind",
    "created",
    "command",
    "parameters",
    "environment",
    "time_mode",
    "link",
    "model",
    "interrupted",
    "partial",
    "wall_seconds",
    "notes",
    "pmc",
    "simulator_limits",
];

/// A document without its body: what [`document_from_value`] reads the common fields into.
#[derive(Debug, Serialize, Deserialize)]
pub struct NoBody {}

/// Reads a whole result document (its version not checked: see [`check_version`]). The body
/// is read apart from the common fields, not through `#[serde(flatten)]`, so that an error in
/// it keeps its field's path (serde buffers a flattened body and loses it).
pub fn document_from_value<P, B>(v: Value) -> Result<ResultDoc<P, B>, ReadError>
where
    P: Serialize + Deserialize<'static>,
    B: Serialize + Deserialize<'static>,
{
    let Value::Object(mut rest) = v else {
        return Err(de::Error::custom("a result document is a JSON object"));
    };
    let mut common = Map::new();
    for &field in ENVELOPE {
        if let Some(x) = rest.remove(field) {
            common.insert(field.to_string(), x);
        }
    }
    let d: ResultDoc<P, NoBody> = from_value(Value::Object(common))?;
    let body: B = from_value(Value::Object(rest))?;
    Ok(ResultDoc {
        schema: d.schema,
        schema_version: d.schema_version,
        kind: d.kind,
        created: d.created,
        command: d.command,
        parameters: d.parameters,
        environment: d.environment,
        time_mode: d.time_mode,
        link: d.link,
        model: d.model,
        body,
        interrupted: d.interrupted,
        partial: d.partial,
        wall_seconds: d.wall_seconds,
        notes: d.notes,
        pmc: d.pmc,
        simulator_limits: d.simulator_limits,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::results::SCHEMA_VERSION;

    #[test]
    fn reading_a_file_names_it_with_the_version_or_kind_found() {
        let dir = tempfile::tempdir().expect("tempdir");
        let file = |name: &str, v: &Value| {
            let path = dir.path().join(name);
            std::fs::write(&path, serde_json::to_string(v).expect("JSON")).expect("write");
            path
        };
        let read = |path: &Path, kind: &str| read_document::<Value, Value>(path, kind, 1 << 20).map(|_| ());
        let doc: Value = serde_json::from_str(include_str!("../../tests/fixtures/results/pio.json")).expect("JSON");
        let ok = file("pio.json", &doc);
        assert_eq!(read(&ok, "pio"), Ok(()));

        let mut newer = doc.clone();
        newer["schema_version"] = (SCHEMA_VERSION + 1).into();
        let path = file("newer.json", &newer);
        let e = read(&path, "pio").expect_err("newer");
        assert_eq!(
            e,
            format!("{}: \"schema_version\" is {}; this tlpx reads version {SCHEMA_VERSION}", path.display(), SCHEMA_VERSION + 1)
        );

        let mut unversioned = doc.clone();
        unversioned.as_object_mut().expect("object").remove("schema_version");
        let path = file("unversioned.json", &unversioned);
        let e = read(&path, "pio").expect_err("no version");
        assert_eq!(e, format!("{}: a tlpx result without \"schema_version\"; this tlpx reads version {SCHEMA_VERSION}", path.display()));

        let e = read(&ok, "bw").expect_err("another kind");
        assert_eq!(e, format!("{}: a \"pio\" result, not the \"bw\" result expected", ok.display()));

        let mut broken = doc;
        broken["points"][1].as_object_mut().expect("point").remove("read_wall_ns");
        let path = file("broken.json", &broken);
        let e = read_document::<Value, tlpx_results::pio::Body>(&path, "pio", 1 << 20).expect_err("a field missing");
        assert_eq!(
            e,
            format!("{}: this \"pio\" result is incomplete or malformed: field points[1].read_wall_ns is missing", path.display())
        );
    }
}
