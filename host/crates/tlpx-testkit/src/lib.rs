//! Test support shared by the integration tests of the tlpx crates.
//!
//! [`SimProcess`] starts the real `tlpx-sim` binary (built by the same `cargo test
//! --workspace` into the same profile directory) on a private socket in a temporary folder,
//! waits for it to listen, and kills it when dropped, so tests run in parallel.

#![allow(clippy::unwrap_used)]

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The profile directory (target/release or target/debug) of the running test executable.
pub fn profile_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("test executable path");
    // Test executables live in <profile>/deps/.
    exe.parent().and_then(Path::parent).expect("the profile directory").to_path_buf()
}

/// A binary of the workspace, from the same profile as the running test.
pub fn workspace_bin(name: &str) -> PathBuf {
    let bin = profile_dir().join(name);
    assert!(bin.exists(), "{} is missing: run `cargo build --release --workspace` (make host)", bin.display());
    bin
}

/// A running tlpx-sim, killed on drop.
pub struct SimProcess {
    child: Child,
    dir: tempfile::TempDir,
}

impl SimProcess {
    /// Starts tlpx-sim with `args` (plus --socket and --quiet) and waits until it listens.
    pub fn start(args: &[&str]) -> SimProcess {
        let dir = tempfile::tempdir().expect("temp dir");
        let socket = dir.path().join("sim.sock");
        let child = Command::new(workspace_bin("tlpx-sim"))
            .arg("--socket")
            .arg(&socket)
            .arg("--quiet")
            .args(args)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start tlpx-sim");
        let deadline = Instant::now() + Duration::from_secs(20);
        while !socket.exists() {
            assert!(Instant::now() < deadline, "tlpx-sim did not create {}", socket.display());
            std::thread::sleep(Duration::from_millis(20));
        }
        SimProcess { child, dir }
    }

    /// The simulator's socket.
    pub fn socket(&self) -> PathBuf {
        self.dir.path().join("sim.sock")
    }

    /// The `--device` selector of this simulator.
    pub fn selector(&self) -> String {
        format!("sim:{}", self.socket().display())
    }

    /// A path in the simulator's private temporary folder (for test outputs).
    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }
}

impl Drop for SimProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
