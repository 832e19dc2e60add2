//! Finding the tracepoint: its id and format under tracefs, wherever tracefs is mounted, and
//! the error that says why it was not found (the paths tried, the likely cause, the perf
//! access level with this process's rights).

use std::io;
use std::path::PathBuf;

use serde::Serialize;

use super::error::IsrTraceError;
use super::format::TracepointFormat;
use crate::perf::{PermissionFacts, PARANOID_PATH};
use crate::DeviceError;

/// Where tracefs lives: its own mount point, then the old place under debugfs.
pub const TRACEFS_ROOTS: [&str; 2] = ["/sys/kernel/tracing", "/sys/kernel/debug/tracing"];
/// The tracepoint's folder under a tracefs root.
pub const EVENT_DIR: &str = "events/irq/irq_handler_entry";

/// The perf event id of `irq:irq_handler_entry` (the `config` of a PERF_TYPE_TRACEPOINT event).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct TracepointId {
    pub id: u64,
    /// The event's folder in tracefs (it holds `id` and `format`).
    pub event_dir: PathBuf,
}

/// One path tried while looking for the tracepoint, and why it did not do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tried {
    pub path: PathBuf,
    pub reason: String,
    /// Set when the file could not be read (rather than read and found wrong).
    pub kind: Option<io::ErrorKind>,
}

impl TracepointId {
    /// Reads the id from tracefs: /sys/kernel/tracing, /sys/kernel/debug/tracing, then any
    /// other tracefs or debugfs mount point /proc/self/mounts lists. The error names every
    /// path tried, the likely cause (tracefs not mounted, not root) and the perf access
    /// level (/proc/sys/kernel/perf_event_paranoid) with this process's capabilities.
    pub fn find() -> Result<TracepointId, DeviceError> {
        let mounts = std::fs::read_to_string("/proc/self/mounts").unwrap_or_default();
        let mut roots: Vec<PathBuf> = TRACEFS_ROOTS.iter().map(PathBuf::from).collect();
        for m in tracing_mounts(&mounts) {
            let root = if m.fs_type == "debugfs" { m.mount_point.join("tracing") } else { m.mount_point };
            if !roots.contains(&root) {
                roots.push(root);
            }
        }
        TracepointId::find_in(&roots)
            .map_err(|tried| IsrTraceError::TracepointNotFound(find_failure_message(&tried, &mounts, &PermissionFacts::read())).into())
    }

    /// Reads the id under the first of `roots` (tracefs roots) that has it; otherwise returns
    /// every path tried and why it failed.
    pub fn find_in(roots: &[PathBuf]) -> Result<TracepointId, Vec<Tried>> {
        let mut tried = Vec::new();
        for root in roots {
            let event_dir = root.join(EVENT_DIR);
            let path = event_dir.join("id");
            match std::fs::read_to_string(&path) {
                Ok(text) => match text.trim().parse::<u64>() {
                    Ok(id) => return Ok(TracepointId { id, event_dir }),
                    Err(_) => tried.push(Tried { path, reason: format!("holds {:?}, not an event id", text.trim()), kind: None }),
                },
                Err(e) => tried.push(Tried { path, reason: e.to_string(), kind: Some(e.kind()) }),
            }
        }
        Err(tried)
    }

    /// Reads and parses the tracepoint's `format` file.
    pub fn format(&self) -> Result<TracepointFormat, DeviceError> {
        let path = self.event_dir.join("format");
        let text = std::fs::read_to_string(&path)
            .map_err(|source| DeviceError::Io { context: format!("cannot read the tracepoint format {}", path.display()), source })?;
        TracepointFormat::parse(&text).map_err(|e| IsrTraceError::FormatFile { path, cause: Box::new(e) }.into())
    }
}

/// A tracefs or debugfs mount, as /proc/self/mounts lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TracingMount {
    pub fs_type: String,
    pub mount_point: PathBuf,
}

/// The tracefs and debugfs mounts in the text of /proc/self/mounts.
pub fn tracing_mounts(mounts: &str) -> Vec<TracingMount> {
    mounts
        .lines()
        .filter_map(|line| {
            let mut f = line.split_whitespace();
            let (_source, point, fs_type) = (f.next()?, f.next()?, f.next()?);
            (fs_type == "tracefs" || fs_type == "debugfs").then(|| TracingMount {
                fs_type: fs_type.to_string(),
                // /proc/mounts escapes blanks as octal (\040).
                mount_point: PathBuf::from(point.replace("\\040", " ")),
            })
        })
        .collect()
}

/// One sentence on the perf access level and this process's rights.
pub fn permission_note(facts: &PermissionFacts) -> String {
    let level = match &facts.paranoid {
        Ok(p) => format!("kernel.perf_event_paranoid is {p} ({PARANOID_PATH})"),
        Err(e) => format!("kernel.perf_event_paranoid could not be read ({PARANOID_PATH}: {e})"),
    };
    let rights = match facts.perf_capable() {
        Some(true) => format!("this process (euid {}) has CAP_PERFMON/CAP_SYS_ADMIN, which overrides it", facts.euid),
        Some(false) => format!(
            "this process (euid {}) has neither CAP_PERFMON nor CAP_SYS_ADMIN: run as root, grant CAP_PERFMON, \
             or `sysctl kernel.perf_event_paranoid=-1`",
            facts.euid
        ),
        None => format!("this process runs as euid {} (its capabilities could not be read)", facts.euid),
    };
    let allowed = match (&facts.paranoid, facts.perf_capable()) {
        (_, Some(true)) | (Ok(-1), _) => "permitted",
        (Ok(_), Some(false)) => "refused",
        _ => "maybe permitted",
    };
    format!("{level}; raw tracepoint samples of every CPU need it at -1 or CAP_PERFMON; {rights} (so perf should be {allowed})")
}

/// The error text of [`TracepointId::find`]: the paths tried, the likely cause, the perf level.
pub fn find_failure_message(tried: &[Tried], mounts: &str, facts: &PermissionFacts) -> String {
    let paths: Vec<String> = tried.iter().map(|t| format!("{} ({})", t.path.display(), t.reason)).collect();
    let mounted = tracing_mounts(mounts);
    let cause = if tried.iter().any(|t| t.kind == Some(io::ErrorKind::PermissionDenied)) {
        "tracefs is readable by root only: run as root (or give this user read access to tracefs)".to_string()
    } else if mounted.is_empty() {
        "tracefs is not mounted (neither tracefs nor debugfs is in /proc/self/mounts): as root, \
         `mount -t tracefs nodev /sys/kernel/tracing`"
            .to_string()
    } else if tried.iter().any(|t| t.kind.is_none()) {
        "the id file holds something else than a number: is that really tracefs?".to_string()
    } else {
        let at: Vec<String> = mounted.iter().map(|m| format!("{} at {}", m.fs_type, m.mount_point.display())).collect();
        format!(
            "{} is mounted but has no {EVENT_DIR}: the kernel was built without irq tracepoints \
             (CONFIG_TRACEPOINTS, CONFIG_EVENT_TRACING), or this is not tracefs",
            at.join(", ")
        )
    };
    format!(
        "cannot find the kernel tracepoint irq:irq_handler_entry, which the ISR stage needs; tried {}. {cause}. {}",
        paths.join(", "),
        permission_note(facts)
    )
}
#[cfg(test)]
mod tests {
    use super::super::format::IrqEntryLayout;
    use super::super::testdata::FORMAT_6_18;
    use super::*;
    use std::path::Path;

    #[test]
    fn tracepoint_lookup_in_a_fake_tracefs_and_its_errors() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (empty, good, junk) = (dir.path().join("empty"), dir.path().join("good"), dir.path().join("junk"));
        for (root, id) in [(&good, "225\n"), (&junk, "two hundred\n")] {
            std::fs::create_dir_all(root.join(EVENT_DIR)).expect("mkdir");
            std::fs::write(root.join(EVENT_DIR).join("id"), id).expect("write id");
        }
        std::fs::write(good.join(EVENT_DIR).join("format"), FORMAT_6_18).expect("write format");
        let found = TracepointId::find_in(&[empty.clone(), good.clone()]).expect("found in the second root");
        assert_eq!((found.id, found.event_dir.clone()), (225, good.join(EVENT_DIR)));
        assert_eq!(IrqEntryLayout::from_format(&found.format().expect("format")).expect("layout").irq, (8, 4, true));
        let tried = TracepointId::find_in(&[empty.clone(), junk.clone()]).expect_err("none");
        assert_eq!(tried.len(), 2);
        assert_eq!(tried[0].kind, Some(io::ErrorKind::NotFound));
        assert!(tried[1].reason.contains("two hundred"), "{:?}", tried[1]);
    }

    #[test]
    fn the_find_error_names_paths_cause_and_perf_level() {
        let tried: Vec<Tried> = TRACEFS_ROOTS
            .iter()
            .map(|r| Tried {
                path: Path::new(r).join(EVENT_DIR).join("id"),
                reason: "No such file or directory (os error 2)".into(),
                kind: Some(io::ErrorKind::NotFound),
            })
            .collect();
        let root = PermissionFacts { paranoid: Ok(2), euid: 0, cap_eff: Some(0x1ff_feff_ffff) };
        let user = PermissionFacts { paranoid: Ok(2), euid: 1000, cap_eff: Some(0) };
        let m = find_failure_message(&tried, "proc /proc proc rw 0 0\nsysfs /sys sysfs rw 0 0\n", &root);
        for want in [
            "/sys/kernel/tracing/events/irq/irq_handler_entry/id",
            "/sys/kernel/debug/tracing/events/irq/irq_handler_entry/id",
            "tracefs is not mounted",
            "mount -t tracefs nodev /sys/kernel/tracing",
            "perf_event_paranoid is 2",
            "has CAP_PERFMON",
        ] {
            assert!(m.contains(want), "{want:?} missing from: {m}");
        }
        let m = find_failure_message(&tried, "tracefs /sys/kernel/tracing tracefs rw 0 0\n", &user);
        assert!(m.contains("tracefs at /sys/kernel/tracing is mounted but has no events/irq"), "{m}");
        assert!(m.contains("euid 1000") && m.contains("neither CAP_PERFMON") && m.contains("refused"), "{m}");
        let denied: Vec<Tried> = tried.iter().map(|t| Tried { kind: Some(io::ErrorKind::PermissionDenied), ..t.clone() }).collect();
        let m = find_failure_message(&denied, "tracefs /sys/kernel/tracing tracefs rw 0 0\n", &user);
        assert!(m.contains("root only"), "{m}");
        let open = PermissionFacts { paranoid: Ok(-1), euid: 1000, cap_eff: Some(0) };
        assert!(permission_note(&open).contains("should be permitted"), "{}", permission_note(&open));
        let mounts = tracing_mounts("none /sys/kernel/debug debugfs rw 0 0\nnodev /my\\040trace tracefs rw 0 0\n");
        assert_eq!(mounts.iter().map(|m| m.mount_point.display().to_string()).collect::<Vec<_>>(), ["/sys/kernel/debug", "/my trace"]);
    }
}
