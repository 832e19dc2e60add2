//! Golden traces: a capture test compares its trace with one stored in traces/golden/,
//! record by record, field by field. Only the header's `created_utc` and `tool` may differ,
//! times count from the scenario's first record and the host's tags from its first one: a
//! capture that starts N card cycles later, after the host made M more reads (opening the card,
//! setting it up), matches; one whose records are spaced, ordered or tagged differently does
//! not.
//!
//! ```no_run
//! // In a capture test:
//! tlpx_trace::golden::check("target/cap.tlpx", "../traces/golden/mmio_scenario.tlpx")
//!     .unwrap_or_else(|e| panic!("{e}"));
//! ```
//!
//! [`check`] is [`compare`] unless `TLPX_UPDATE_GOLDEN=1` is set, in which case it copies
//! the actual trace over the golden one: updating a golden trace is a deliberate act that
//! shows up in the diff of the commit.

use std::path::Path;

use serde_json::Value;

use crate::fields::{field as f, FieldSpec, RawRecord, FIELDS};
use crate::file::TraceReader;
use crate::log::log_line;
use crate::record::{Body, Record};

/// Environment variable that makes [`check`] rewrite golden traces.
pub const UPDATE_ENV: &str = "TLPX_UPDATE_GOLDEN";

/// Header keys that legitimately differ between two captures of the same scenario.
pub const IGNORED_HEADER_KEYS: &[&str] = &["created_utc", "tool"];

/// Compares the trace at `actual_path` with the golden trace at `golden_path`; the error
/// describes the first difference (header key, record count, or record and fields). Each
/// record's timestamp is compared as the cycles since the trace's first timed record.
pub fn compare(actual_path: impl AsRef<Path>, golden_path: impl AsRef<Path>) -> Result<(), String> {
    let (actual_path, golden_path) = (actual_path.as_ref(), golden_path.as_ref());
    let mut actual = TraceReader::open(actual_path).map_err(|e| format!("cannot read actual trace {}: {e}", actual_path.display()))?;
    let mut golden = TraceReader::open(golden_path).map_err(|e| {
        format!("cannot read golden trace {}: {e}\n(to create it from the actual trace, rerun with {UPDATE_ENV}=1)", golden_path.display())
    })?;
    let hint = format!(
        "\nactual: {}\ngolden: {}\nIf the change is intended, rerun with {UPDATE_ENV}=1 to update the golden trace and commit it.",
        actual_path.display(),
        golden_path.display()
    );

    let strip = |v: &Value| {
        let mut v = v.clone();
        if let Value::Object(m) = &mut v {
            for k in IGNORED_HEADER_KEYS {
                m.remove(*k);
            }
        }
        v
    };
    // A golden trace of record format 1 compared with a capture written as version 2: the
    // records of version 1 are the same in version 2, and each file's field table was already
    // checked against its own version by the reader; the tables differ only by version 2's rows.
    let strip_fields = actual.record_version() != golden.record_version();
    let strip = |v: &Value| {
        let mut v = strip(v);
        if let (true, Value::Object(m)) = (strip_fields, &mut v) {
            m.remove("fields");
        }
        v
    };
    if let Some(diff) = json_diff("", &strip(actual.header_json()), &strip(golden.header_json())) {
        return Err(format!("header differs: {diff}{hint}"));
    }
    let clock_hz = golden.clock_hz();

    let (mut actual_origin, mut golden_origin) = (Origin::default(), Origin::default());
    let mut index = 0u64;
    loop {
        let a = actual.next_raw().transpose().map_err(|e| format!("actual trace: {e}"))?;
        let g = golden.next_raw().transpose().map_err(|e| format!("golden trace: {e}"))?;
        let a = a.map(|(offset, raw)| (offset, relative(&raw, &mut actual_origin)));
        let g = g.map(|(offset, raw)| (offset, relative(&raw, &mut golden_origin)));
        match (a, g) {
            (None, None) => break,
            (Some((offset, a)), Some((_, g))) => {
                if a != g {
                    return Err(format!("record #{index} (offset {offset}) differs: {}{hint}", describe_difference(&a, &g, clock_hz)));
                }
            }
            (Some((offset, a)), None) => {
                return Err(format!(
                    "actual trace has more records: {} vs golden {}; first extra record #{index} (offset {offset}): {}{hint}",
                    actual.record_count(),
                    golden.record_count(),
                    render(&a, clock_hz)
                ))
            }
            (None, Some((offset, g))) => {
                return Err(format!(
                    "actual trace has fewer records: {} vs golden {}; first missing record #{index} (golden offset {offset}): {}{hint}",
                    actual.record_count(),
                    golden.record_count(),
                    render(&g, clock_hz)
                ))
            }
        }
        index += 1;
    }

    match (actual.footer_record(), golden.footer_record()) {
        (None, None) => Ok(()),
        (Some(a), Some(g)) if a == g => Ok(()),
        (a, g) => Err(format!("footer differs: actual {}, golden {}{hint}", footer_text(a), footer_text(g))),
    }
}

/// [`compare`], or, with `TLPX_UPDATE_GOLDEN=1` in the environment, copy `actual_path` to
/// `golden_path` (creating its folder) after checking that it is a valid trace.
pub fn check(actual_path: impl AsRef<Path>, golden_path: impl AsRef<Path>) -> Result<(), String> {
    let (actual_path, golden_path) = (actual_path.as_ref(), golden_path.as_ref());
    if std::env::var(UPDATE_ENV).is_ok_and(|v| v == "1") {
        TraceReader::open(actual_path)
            .and_then(|r| r.read_all())
            .map_err(|e| format!("not updating golden trace: actual trace {} is invalid: {e}", actual_path.display()))?;
        if let Some(dir) = golden_path.parent() {
            std::fs::create_dir_all(dir).map_err(|e| format!("creating {}: {e}", dir.display()))?;
        }
        std::fs::copy(actual_path, golden_path)
            .map_err(|e| format!("copying {} to {}: {e}", actual_path.display(), golden_path.display()))?;
        eprintln!("updated golden trace {}", golden_path.display());
        return Ok(());
    }
    compare(actual_path, golden_path)
}

/// Where a trace's relative values count from: the card cycle of its first timed record, and
/// the tag of its first record that carries a host-issued tag (each set by the first record
/// that has one).
#[derive(Default)]
struct Origin {
    time: Option<u64>,
    host_tag: Option<u32>,
}

/// `raw` with its timestamp made the cycles since the trace's first timed record, and a tag
/// the host's root complex gave made the tags since its first one (modulo 256). Both depend on
/// what the host did before the capture (opening the card, setting it up: its reads used
/// tags in turn), which the golden trace does not pin; the card's own tags, and the order and
/// spacing of everything, stay strict. Records without a time (and unreadable ones) are
/// returned as they are.
fn relative(raw: &RawRecord, origin: &mut Origin) -> RawRecord {
    let Ok(record) = Record::from_raw_at(raw, 0) else {
        return *raw;
    };
    let Some(time) = record.timestamp() else {
        return *raw;
    };
    let mut rel = *raw;
    let t0 = *origin.time.get_or_insert(time);
    rel.set64(&f::TIMESTAMP_LO, &f::TIMESTAMP_HI, time.wrapping_sub(t0));
    // The host's tags: on its reads (down, no data: a posted write's tag means nothing and the
    // root complex does not number it) and on the card's completions to them (up).
    let host_tagged = match record.body {
        Body::Request(_) => raw.get(&f::DIRECTION) == 0 && raw.get(&f::FMT) & 0b10 == 0,
        Body::Completion(_) => raw.get(&f::DIRECTION) == 1,
        _ => false,
    };
    if host_tagged {
        let tag = raw.get(&f::TAG);
        let tag0 = *origin.host_tag.get_or_insert(tag);
        rel.set(&f::TAG, tag.wrapping_sub(tag0) & 0xFF);
    }
    rel
}

fn footer_text(r: Option<&Record>) -> String {
    match r {
        Some(Record { sequence, body: Body::Footer(ft) }) => {
            format!("{{next seq {sequence}, {} created, {} lost}}", ft.records_created, ft.records_lost)
        }
        _ => "none (capture did not end cleanly)".into(),
    }
}

fn render(raw: &RawRecord, clock_hz: u64) -> String {
    match Record::from_raw_at(raw, 0) {
        Ok(r) => format!("seq {} {}", r.sequence, log_line(&r, None, clock_hz).trim()),
        Err(_) => format!("raw {:08x?}", raw.words),
    }
}

/// Fields that carry meaning for the record's kind (aliases of other kinds left out).
fn applies(raw: &RawRecord, field: &FieldSpec) -> bool {
    const REQUEST_ONLY: &[&str] = &["first_be", "last_be", "address_lo", "address_hi"];
    const COMPLETION_ONLY: &[&str] =
        &["lower_address", "completer_id", "status", "byte_count", "latency", "matched", "last", "split_index"];
    const PAYLOAD_ONLY: &[&str] =
        &["first_dw", "count", "final", "payload_dw0", "payload_dw1", "payload_dw2", "payload_dw3", "payload_dw4", "payload_dw5"];
    const MSI_ONLY: &[&str] = &["vector", "sources", "msi_wait_cycles"];
    const FOOTER_ONLY: &[&str] = &["trigger_sequence", "triggered"];
    let version_2 = |name: &str| PAYLOAD_ONLY.contains(&name) || MSI_ONLY.contains(&name) || FOOTER_ONLY.contains(&name);
    match Record::from_raw_at(raw, 0) {
        Ok(Record { body: Body::Request(_), .. }) => !COMPLETION_ONLY.contains(&field.name) && !version_2(field.name),
        Ok(Record { body: Body::Completion(_), .. }) => !REQUEST_ONLY.contains(&field.name) && !version_2(field.name),
        Ok(Record { body: Body::Payload(_), .. }) => PAYLOAD_ONLY.contains(&field.name) || field.name == "sequence",
        Ok(Record { body: Body::Msi(_), .. }) => {
            MSI_ONLY.contains(&field.name) || ["sequence", "timestamp_lo", "timestamp_hi"].contains(&field.name)
        }
        _ => true,
    }
}

/// The differing fields of two records whose timestamps are relative (see [`relative`]); the
/// records are shown with their times from the first record.
fn describe_difference(a: &RawRecord, g: &RawRecord, clock_hz: u64) -> String {
    let kind_changed = a.get(&f::FMT) != g.get(&f::FMT) || a.get(&f::TYPE) != g.get(&f::TYPE);
    let is_time = |field: &FieldSpec| field.name == f::TIMESTAMP_LO.name || field.name == f::TIMESTAMP_HI.name;
    let (time_a, time_g) = (a.get64(&f::TIMESTAMP_LO, &f::TIMESTAMP_HI), g.get64(&f::TIMESTAMP_LO, &f::TIMESTAMP_HI));
    let timed = Record::from_raw_at(g, 0).ok().and_then(|r| r.timestamp()).is_some();
    let time = (timed && time_a != time_g).then(|| format!("cycles since the first record are {time_a} (golden {time_g})"));
    let fields: Vec<String> = time
        .into_iter()
        .chain(
            FIELDS
                .iter()
                .filter(|field| !(timed && is_time(field)))
                .filter(|field| field.get(&a.words) != field.get(&g.words))
                .filter(|field| kind_changed || applies(g, field))
                .map(|field| format!("{} is {:#x} (golden {:#x})", field.name, field.get(&a.words), field.get(&g.words))),
        )
        .collect();
    format!("{}\n  actual: {}\n  golden: {}\n  (times from the first record)", fields.join(", "), render(a, clock_hz), render(g, clock_hz))
}

/// First difference between two JSON values, as `key.path: actual X, golden Y`.
fn json_diff(path: &str, a: &Value, g: &Value) -> Option<String> {
    let at = |p: &str| {
        if p.is_empty() {
            "(top level)".to_owned()
        } else {
            format!("`{p}`")
        }
    };
    match (a, g) {
        (Value::Object(ma), Value::Object(mg)) => {
            for (k, vg) in mg {
                let p = if path.is_empty() { k.clone() } else { format!("{path}.{k}") };
                match ma.get(k) {
                    None => return Some(format!("key `{p}` is missing (golden {vg})")),
                    Some(va) => {
                        if let Some(d) = json_diff(&p, va, vg) {
                            return Some(d);
                        }
                    }
                }
            }
            ma.keys()
                .find(|k| !mg.contains_key(*k))
                .map(|k| format!("key `{}` is not in the golden trace", if path.is_empty() { k.clone() } else { format!("{path}.{k}") }))
        }
        (Value::Array(va), Value::Array(vg)) => {
            for (i, (x, y)) in va.iter().zip(vg).enumerate() {
                if let Some(d) = json_diff(&format!("{path}[{i}]"), x, y) {
                    return Some(d);
                }
            }
            (va.len() != vg.len()).then(|| format!("{} has {} entries (golden {})", at(path), va.len(), vg.len()))
        }
        _ => (a != g).then(|| format!("{} is {a} (golden {g})", at(path))),
    }
}
