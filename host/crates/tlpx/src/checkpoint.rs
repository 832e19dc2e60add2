//! Partial results written to the output file while a long run goes on.
//!
//! After a finished point the command hands its document so far to [`Checkpoints::offer`];
//! when a write is due, the document is written to the output file marked
//! `"interrupted": true, "partial": {"state": "checkpoint", ...}` (results.rs), atomically (a
//! temporary file renamed over the output), so that a run killed without warning (SIGKILL,
//! the machine going down) leaves every point measured until the last checkpoint. The end of
//! the run overwrites it with the whole document, or the interrupted one after Ctrl-C.
//!
//! Writes are spaced so that they cost little however large the document grows: the next one
//! is due once 20 times the last write's own duration has passed (at most ~5 % of the run),
//! and at least [`MIN_SPACING`] after it; the first finished point is written at once.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde::Serialize;
use serde_json::Value;

use crate::results::{self, Partial};

/// Shortest time between two checkpoints.
pub const MIN_SPACING: Duration = Duration::from_secs(1);
/// A checkpoint may cost at most 1/SPACING_FACTOR of the time between two of them.
const SPACING_FACTOR: u32 = 20;

/// The checkpoints of one output file (none without one).
pub struct Checkpoints {
    path: Option<PathBuf>,
    /// When the last write ended and how long it took.
    last: Option<(Instant, Duration)>,
    pub written: u32,
}

impl Checkpoints {
    pub fn new(path: Option<&Path>) -> Checkpoints {
        Checkpoints { path: path.map(Path::to_path_buf), last: None, written: 0 }
    }

    /// Whether a checkpoint would be written now (so that the caller builds the document
    /// only then).
    pub fn due(&self) -> bool {
        self.path.is_some() && self.last.is_none_or(|(at, took)| at.elapsed() >= MIN_SPACING.max(took * SPACING_FACTOR))
    }

    /// Writes `doc` as a checkpoint holding `done` of `planned` points, when one is due.
    /// `doc` is built only then.
    pub fn offer<T: Serialize>(&mut self, done: usize, planned: usize, doc: impl FnOnce() -> T) -> anyhow::Result<()> {
        if !self.due() {
            return Ok(());
        }
        let Some(path) = &self.path else { return Ok(()) };
        let began = Instant::now();
        let mut value = serde_json::to_value(doc())?;
        mark_checkpoint(&mut value, done, planned);
        results::write_value(path, &value)?;
        self.last = Some((Instant::now(), began.elapsed()));
        self.written += 1;
        Ok(())
    }
}

/// Marks a result document as a checkpoint holding `done` of `planned` points.
fn mark_checkpoint(value: &mut Value, done: usize, planned: usize) {
    value["interrupted"] = Value::Bool(true);
    let partial = Partial { state: "checkpoint", points_done: done, points_planned: planned };
    value["partial"] = serde_json::to_value(partial).unwrap_or(Value::Null);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::results::{check_document, machine_environment, ResultDoc};

    fn doc(points: usize) -> ResultDoc<Value, Value> {
        let body = serde_json::json!({ "points": (0..points).collect::<Vec<_>>() });
        ResultDoc::new("rule30", serde_json::json!({"packets": 3}), machine_environment(), None, None, body, 0.1, vec![])
    }

    #[test]
    fn the_first_point_is_written_at_once_then_writes_are_spaced() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("sub/r.json");
        let mut c = Checkpoints::new(Some(&path));
        assert!(c.due());
        c.offer(1, 4, || doc(1)).expect("written");
        let v: Value = serde_json::from_str(&std::fs::read_to_string(&path).expect("file")).expect("json");
        assert_eq!(check_document(&v), Ok(()));
        assert_eq!(v["interrupted"], true);
        assert_eq!(v["partial"], serde_json::json!({"state": "checkpoint", "points_done": 1, "points_planned": 4}));
        // Within a second of it nothing more is written (and the document is not even built).
        assert!(!c.due());
        c.offer(2, 4, || -> Value { panic!("built although no checkpoint was due") }).expect("skipped");
        assert_eq!(c.written, 1);
        // No temporary file is left beside the output.
        let names: Vec<_> = std::fs::read_dir(path.parent().expect("dir")).expect("dir").map(|e| e.expect("entry").file_name()).collect();
        assert_eq!(names, vec![std::ffi::OsString::from("r.json")]);
    }

    #[test]
    fn without_an_output_file_nothing_is_due() {
        let mut c = Checkpoints::new(None);
        assert!(!c.due());
        c.offer(1, 1, || -> Value { panic!("no file to write") }).expect("nothing to do");
    }
}
