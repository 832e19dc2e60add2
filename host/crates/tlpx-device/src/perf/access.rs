//! What decides whether the kernel lets this process open a perf event, and the names of the
//! errnos perf_event_open answers with: the facts every refusal message is built from. The
//! sentences themselves stay with their users, because what to advise depends on what was
//! asked for (a counter of this thread in user space, or raw tracepoint samples of every CPU).

use std::io;

/// The kernel's perf access level (kernel.perf_event_paranoid).
pub const PARANOID_PATH: &str = "/proc/sys/kernel/perf_event_paranoid";
/// Capability bits of /proc/self/status `CapEff` (include/uapi/linux/capability.h).
const CAP_SYS_ADMIN: u32 = 21;
const CAP_PERFMON: u32 = 38;

/// kernel.perf_event_paranoid, or why it could not be read (a message to quote).
pub fn read_paranoid() -> Result<i32, String> {
    std::fs::read_to_string(PARANOID_PATH)
        .map_err(|e| e.to_string())
        .and_then(|t| t.trim().parse::<i32>().map_err(|_| format!("it holds {:?}", t.trim())))
}

/// What decides whether this process may open an event: the paranoid level and its rights.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PermissionFacts {
    /// kernel.perf_event_paranoid, or why it could not be read.
    pub paranoid: Result<i32, String>,
    pub euid: u32,
    /// Effective capability set (/proc/self/status CapEff), when readable.
    pub cap_eff: Option<u64>,
}

impl PermissionFacts {
    /// Reads them for this process.
    pub fn read() -> PermissionFacts {
        let cap_eff = std::fs::read_to_string("/proc/self/status")
            .ok()
            .and_then(|s| s.lines().find_map(|l| l.strip_prefix("CapEff:")).and_then(|v| u64::from_str_radix(v.trim(), 16).ok()));
        // SAFETY: geteuid has no preconditions and cannot fail.
        let euid = unsafe { libc::geteuid() };
        PermissionFacts { paranoid: read_paranoid(), euid, cap_eff }
    }

    /// CAP_PERFMON or CAP_SYS_ADMIN (older kernels check the latter) is effective.
    pub fn perf_capable(&self) -> Option<bool> {
        self.cap_eff.map(|c| c & (1 << CAP_PERFMON) != 0 || c & (1 << CAP_SYS_ADMIN) != 0)
    }
}

/// The symbolic name of an errno perf_event_open, mmap, ioctl or read of a perf fd gives;
/// `None` for one a perf message never names (callers print the number instead).
pub fn errno_name(errno: i32) -> Option<&'static str> {
    Some(match errno {
        libc::ENOENT => "ENOENT",
        libc::EOPNOTSUPP => "EOPNOTSUPP",
        libc::ENODEV => "ENODEV",
        libc::EACCES => "EACCES",
        libc::EPERM => "EPERM",
        libc::ENOSYS => "ENOSYS",
        libc::EBUSY => "EBUSY",
        libc::EMFILE => "EMFILE",
        libc::ENFILE => "ENFILE",
        libc::EINVAL => "EINVAL",
        libc::E2BIG => "E2BIG",
        libc::ESRCH => "ESRCH",
        _ => return None,
    })
}

/// [`errno_name`] of an I/O error: `errno N` for an unnamed one, `error` without an errno.
pub fn io_errno_name(e: &io::Error) -> String {
    match e.raw_os_error() {
        Some(n) => errno_name(n).map_or_else(|| format!("errno {n}"), str::to_string),
        None => "error".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errnos_are_named_or_numbered() {
        assert_eq!(errno_name(libc::EACCES), Some("EACCES"));
        assert_eq!(errno_name(libc::EINTR), None);
        assert_eq!(io_errno_name(&io::Error::from_raw_os_error(libc::EMFILE)), "EMFILE");
        assert_eq!(io_errno_name(&io::Error::from_raw_os_error(libc::EINTR)), format!("errno {}", libc::EINTR));
        assert_eq!(io_errno_name(&io::Error::other("x")), "error");
    }

    #[test]
    fn capabilities_decide_perf_capable() {
        let facts = |cap_eff| PermissionFacts { paranoid: Ok(2), euid: 1000, cap_eff };
        assert_eq!(facts(Some(1 << CAP_PERFMON)).perf_capable(), Some(true));
        assert_eq!(facts(Some(1 << CAP_SYS_ADMIN)).perf_capable(), Some(true));
        assert_eq!(facts(Some(0)).perf_capable(), Some(false));
        assert_eq!(facts(None).perf_capable(), None);
        // This process: the level reads as a number or says why not.
        match read_paranoid() {
            Ok(level) => assert!((-1..=4).contains(&level), "{level}"),
            Err(why) => assert!(!why.is_empty()),
        }
    }
}
