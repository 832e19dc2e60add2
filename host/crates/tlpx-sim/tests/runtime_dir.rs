//! The runtime directory is trusted only when it is safe, as ssh-agent and systemd trust
//! theirs: owned by the effective user and not writable by group or others. Files in it are
//! created without following symlinks and only our own stale files are replaced: a symlink
//! or anything that is not a stale file of a dead sim is refused by name, never followed,
//! truncated or deleted.
//!
//! These tests run as root on the CI machine, so "another user's directory" is a temporary
//! directory given to uid 65534 (nobody) with chown. Every case runs the real tlpx-sim.

#![allow(clippy::unwrap_used)]

use crate::common;

use std::ffi::CString;
use std::io::Read;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::MAGIC;
use tlpx_device::backends::sim::SimDevice;
use tlpx_device::{Device, Width};

const NOBODY: u32 = 65534;
const PRECIOUS: &[u8] = b"root-only contents that a sim must never overwrite\n";

fn chown(path: &Path, uid: u32) {
    let c = CString::new(path.as_os_str().as_bytes()).unwrap();
    // SAFETY: a valid NUL-terminated path; lchown does not follow a symlink.
    let r = unsafe { libc::lchown(c.as_ptr(), uid, u32::MAX) };
    assert_eq!(r, 0, "lchown {}: {}", path.display(), std::io::Error::last_os_error());
}

fn set_mode(path: &Path, mode: u32) {
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
}

/// A root-only file outside the runtime directory, the target of the planted symlinks.
fn victim(dir: &Path) -> std::path::PathBuf {
    let v = dir.join("victim");
    std::fs::write(&v, PRECIOUS).unwrap();
    set_mode(&v, 0o600);
    v
}

fn assert_intact(victim: &Path) {
    let got = std::fs::read(victim).unwrap();
    assert!(got == PRECIOUS, "{} was overwritten: now {} bytes", victim.display(), got.len());
}

/// Runs tlpx-sim on `socket` with a small host memory. Returns its exit code and stderr when
/// it exits by itself within 30 s, or None (it is then killed) when it is serving instead:
/// its socket answers.
fn run_sim(socket: &Path) -> (Option<i32>, String) {
    let card = common::card_library(64);
    let mut child = Command::new(env!("CARGO_BIN_EXE_tlpx-sim"))
        .arg("--socket")
        .arg(socket)
        .arg("--card")
        .arg(&card)
        .args(["--quiet", "--host-mem-mib", "1"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let t0 = Instant::now();
    let code = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status.code();
        }
        if std::os::unix::net::UnixStream::connect(socket).is_ok() || t0.elapsed() > Duration::from_secs(30) {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    let mut err = String::new();
    child.stderr.take().unwrap().read_to_string(&mut err).unwrap();
    (code, err)
}

fn assert_refused(socket: &Path, needles: &[&str]) -> String {
    let (code, err) = run_sim(socket);
    assert_eq!(code, Some(1), "tlpx-sim should refuse {} with exit code 1; stderr: {err}", socket.display());
    for n in needles {
        assert!(err.contains(n), "expected {n:?} in: {err}");
    }
    assert!(!err.contains("panicked"), "{err}");
    err
}

#[test]
fn a_runtime_directory_owned_by_another_user_is_refused_and_its_symlink_not_followed() {
    // The reported attack: another user owns the directory (say /tmp/tlpx-0, made before the
    // root sim ran) and plants sim.hostmem pointing at a root-only file.
    let top = tempfile::tempdir().unwrap();
    let victim = victim(top.path());
    let run = top.path().join("run");
    std::fs::create_dir(&run).unwrap();
    std::os::unix::fs::symlink(&victim, run.join("sim.hostmem")).unwrap();
    chown(&run.join("sim.hostmem"), NOBODY);
    chown(&run, NOBODY);
    set_mode(&run, 0o755);
    let err = assert_refused(&run.join("sim.sock"), &[run.to_str().unwrap(), "uid 65534", "0755", "owned by uid 0"]);
    assert!(err.contains("not writable by group or others"), "says what is accepted: {err}");
    assert_intact(&victim);
    assert!(
        std::fs::symlink_metadata(run.join("sim.hostmem")).unwrap().file_type().is_symlink(),
        "the planted symlink is not ours to delete"
    );
    assert!(!run.join("sim.sock").exists() && !run.join("sim.pid").exists(), "nothing created in a refused directory");
}

#[test]
fn a_group_or_world_writable_runtime_directory_is_refused() {
    for mode in [0o777u32, 0o770, 0o1777] {
        let top = tempfile::tempdir().unwrap();
        let run = top.path().join("run");
        std::fs::create_dir(&run).unwrap();
        set_mode(&run, mode);
        assert_refused(&run.join("sim.sock"), &[run.to_str().unwrap(), &format!("mode {mode:04o}"), "not writable by group or others"]);
        assert_eq!(std::fs::read_dir(&run).unwrap().count(), 0, "mode {mode:o}: nothing created");
        assert_eq!(std::fs::metadata(&run).unwrap().mode() & 0o7777, mode, "the directory is left as it was");
    }
}

#[test]
fn a_symlink_among_the_runtime_files_is_refused_not_followed_nor_removed() {
    for name in ["sim.hostmem", "sim.pid", "sim.lspci", "sim.sock"] {
        let top = tempfile::tempdir().unwrap();
        let victim = victim(top.path());
        // The runtime directory itself is ours and private: only the symlink is wrong.
        let link = top.path().join(name);
        std::os::unix::fs::symlink(&victim, &link).unwrap();
        let err = assert_refused(&top.path().join("sim.sock"), &[link.to_str().unwrap(), "symbolic link"]);
        assert!(err.contains(victim.to_str().unwrap()), "{name}: names where it points: {err}");
        assert_intact(&victim);
        assert!(std::fs::symlink_metadata(&link).unwrap().file_type().is_symlink(), "{name}: the symlink was removed");
    }
}

#[test]
fn something_that_is_not_a_stale_socket_at_socket_is_refused_and_left_intact() {
    let top = tempfile::tempdir().unwrap();
    let sock = top.path().join("sim.sock");
    std::fs::write(&sock, PRECIOUS).unwrap();
    assert_refused(&sock, &[sock.to_str().unwrap(), "regular file", "not a socket"]);
    assert_intact(&sock);
    assert!(!top.path().join("sim.hostmem").exists() && !top.path().join("sim.pid").exists());

    let top = tempfile::tempdir().unwrap();
    let sock = top.path().join("sim.sock");
    std::fs::create_dir(&sock).unwrap();
    std::fs::write(sock.join("keep"), PRECIOUS).unwrap();
    assert_refused(&sock, &[sock.to_str().unwrap(), "directory", "not a socket"]);
    assert_intact(&sock.join("keep"));
}

#[test]
fn a_runtime_file_owned_by_someone_else_is_refused_not_removed() {
    let top = tempfile::tempdir().unwrap();
    let pid = top.path().join("sim.pid");
    std::fs::write(&pid, PRECIOUS).unwrap();
    chown(&pid, NOBODY);
    assert_refused(&top.path().join("sim.sock"), &[pid.to_str().unwrap(), "uid 65534"]);
    assert_intact(&pid);
}

#[test]
fn stale_files_of_a_dead_sim_are_replaced() {
    let top = tempfile::tempdir().unwrap();
    let sock = top.path().join("sim.sock");
    drop(std::os::unix::net::UnixListener::bind(&sock).unwrap());
    for name in ["sim.pid", "sim.lspci", "sim.lspci.tmp", "sim.hostmem"] {
        std::fs::write(top.path().join(name), b"stale\n").unwrap();
    }
    let sim = common::Sim::start_in(top, &["--host-mem-mib", "1"]);
    let mut dev: SimDevice = sim.connect();
    assert_eq!(dev.bar_read(0, 0, Width::W32).unwrap(), u64::from(MAGIC));
    let pid = std::fs::read_to_string(sim.dir.path().join("sim.pid")).unwrap();
    assert_eq!(pid.trim(), sim.child.id().to_string());
    assert_eq!(std::fs::metadata(sim.dir.path().join("sim.hostmem")).unwrap().len(), 1 << 20);
    assert!(std::fs::read_to_string(sim.dir.path().join("sim.lspci")).unwrap().contains("10ee"), "a fresh config dump");
    assert!(!sim.dir.path().join("sim.lspci.tmp").exists());
    let mode = std::fs::metadata(&sim.socket).unwrap().mode();
    assert_eq!(mode & 0o777, 0o600, "socket mode {mode:o}");
    drop(dev);
    sim.shutdown();
}

#[test]
fn a_missing_runtime_directory_is_created_private() {
    let top = tempfile::tempdir().unwrap();
    let run = top.path().join("a").join("b");
    let sim = common::Sim::start_at(top, run.join("sim.sock"), &["--host-mem-mib", "1"]);
    assert_eq!(std::fs::metadata(&run).unwrap().mode() & 0o777, 0o700);
    assert_eq!(sim.connect().bar_read(0, 0, Width::W32).unwrap(), u64::from(MAGIC));
    sim.shutdown();
}
