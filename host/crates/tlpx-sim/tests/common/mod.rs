//! Starts the real `tlpx-sim` binary with the real card library on a socket in a temporary
//! directory, and stops it again. The card library must exist: `make gateware` builds it.

#![allow(dead_code, clippy::unwrap_used)]

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use tlpx_device::backends::sim::SimDevice;

pub const MAGIC: u32 = 0x544C_5058;

/// The card library of `data_width`: env TLPX_CARD_LIB (64-bit tests only), else
/// build/card/dw<N>/libtlpxcard.so above this crate. Fails (does not skip) when it is missing.
pub fn card_library(data_width: u32) -> PathBuf {
    if data_width == 64 {
        if let Some(p) = std::env::var_os("TLPX_CARD_LIB").filter(|p| !p.is_empty()) {
            return PathBuf::from(p);
        }
    }
    let rel = format!("build/card/dw{data_width}/libtlpxcard.so");
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    let manifest = std::fs::canonicalize(manifest).unwrap_or_else(|_| manifest.to_owned());
    for dir in manifest.ancestors() {
        let candidate = dir.join(&rel);
        if candidate.exists() {
            return candidate;
        }
    }
    panic!("the card library {rel} is missing: run `make gateware` in the repository root (or set TLPX_CARD_LIB) before these tests");
}

pub struct Sim {
    pub child: Child,
    pub dir: tempfile::TempDir,
    pub socket: PathBuf,
}

impl Sim {
    /// Starts tlpx-sim with the 64-bit card and `args`.
    pub fn start(args: &[&str]) -> Sim {
        Self::start_width(64, args)
    }

    pub fn start_width(data_width: u32, args: &[&str]) -> Sim {
        Self::start_card(Some(card_library(data_width)), args)
    }

    /// Starts tlpx-sim with `--card card`, or with no --card and no TLPX_CARD_LIB (so it
    /// chooses among the built cards itself).
    pub fn start_card(card: Option<PathBuf>, args: &[&str]) -> Sim {
        let dir = tempfile::Builder::new().prefix("tlpx-sim-test").tempdir().unwrap();
        let socket = dir.path().join("sim.sock");
        Self::spawn(dir, socket, card, args)
    }

    /// Starts tlpx-sim with the 64-bit card on `dir/sim.sock`, a directory the test prepared.
    pub fn start_in(dir: tempfile::TempDir, args: &[&str]) -> Sim {
        let socket = dir.path().join("sim.sock");
        Self::spawn(dir, socket, Some(card_library(64)), args)
    }

    /// Starts tlpx-sim with the 64-bit card on `socket`, somewhere below `dir`.
    pub fn start_at(dir: tempfile::TempDir, socket: PathBuf, args: &[&str]) -> Sim {
        Self::spawn(dir, socket, Some(card_library(64)), args)
    }

    fn spawn(dir: tempfile::TempDir, socket: PathBuf, card: Option<PathBuf>, args: &[&str]) -> Sim {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_tlpx-sim"));
        cmd.arg("--socket").arg(&socket);
        match card {
            Some(card) => {
                cmd.arg("--card").arg(card);
            }
            None => {
                cmd.env_remove("TLPX_CARD_LIB");
            }
        }
        let mut child = cmd
            .arg("--quiet")
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start tlpx-sim");
        let t0 = Instant::now();
        loop {
            if std::os::unix::net::UnixStream::connect(&socket).is_ok() {
                break;
            }
            if let Some(status) = child.try_wait().unwrap() {
                let mut err = String::new();
                if let Some(mut e) = child.stderr.take() {
                    let _ = e.read_to_string(&mut err);
                }
                panic!("tlpx-sim exited with {status} before listening: {err}");
            }
            assert!(t0.elapsed() < Duration::from_secs(30), "tlpx-sim did not listen on {} within 30 s", socket.display());
            std::thread::sleep(Duration::from_millis(10));
        }
        Sim { child, dir, socket }
    }

    pub fn connect(&self) -> SimDevice {
        SimDevice::connect_as(&self.socket, "test").unwrap()
    }

    /// Stops the sim through the protocol, waits for it to exit cleanly and returns what it
    /// printed on stderr (with --quiet: warnings and errors only).
    pub fn shutdown_stderr(mut self) -> String {
        self.connect().shutdown().unwrap();
        let status = self.child.wait().unwrap();
        assert!(status.success(), "tlpx-sim exited with {status}");
        let mut err = String::new();
        if let Some(mut e) = self.child.stderr.take() {
            let _ = e.read_to_string(&mut err);
        }
        err
    }

    /// Stops the sim through the protocol and waits for it to exit cleanly.
    pub fn shutdown(mut self) {
        self.connect().shutdown().unwrap();
        let t0 = Instant::now();
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                assert!(status.success(), "tlpx-sim exited with {status}");
                break;
            }
            assert!(t0.elapsed() < Duration::from_secs(10), "tlpx-sim did not exit after Shutdown");
            std::thread::sleep(Duration::from_millis(10));
        }
        assert!(!self.socket.exists(), "socket left behind");
        let hostmem = self.socket.with_extension("hostmem");
        assert!(!hostmem.exists(), "host memory left behind");
    }
}

impl Drop for Sim {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// Runs tlpx-sim with `args` that must make it fail; returns (exit code, stderr).
pub fn run_failing(args: &[&str]) -> (Option<i32>, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_tlpx-sim")).args(args).stdin(Stdio::null()).output().expect("run tlpx-sim");
    (out.status.code(), String::from_utf8_lossy(&out.stderr).into_owned())
}

/// LitePCIe's DMA and MSI registers as the tests drive them, from the generated map (one
/// source: the card's csr.json through tlpx-regs), not copied by hand into each test.
pub mod litepcie {
    use tlpx_regs::{pcie_dma0 as dma, pcie_msi as msi};

    pub const MSI_ENABLE: u64 = msi::ENABLE.offset;
    pub const MSI_CLEAR: u64 = msi::CLEAR.offset;
    pub const MSI_VECTOR: u64 = msi::VECTOR.offset;
    pub const WRITER_ENABLE: u64 = dma::WRITER_ENABLE.offset;
    pub const WRITER_VALUE: u64 = dma::WRITER_TABLE_VALUE.offset;
    pub const WRITER_WE: u64 = dma::WRITER_TABLE_WE.offset;
    pub const WRITER_LOOP_PROG_N: u64 = dma::WRITER_TABLE_LOOP_PROG_N.offset;
    pub const WRITER_RESET: u64 = dma::WRITER_TABLE_RESET.offset;
    pub const READER_ENABLE: u64 = dma::READER_ENABLE.offset;
    pub const READER_VALUE: u64 = dma::READER_TABLE_VALUE.offset;
    pub const READER_WE: u64 = dma::READER_TABLE_WE.offset;
    pub const READER_LOOP_PROG_N: u64 = dma::READER_TABLE_LOOP_PROG_N.offset;
    pub const READER_RESET: u64 = dma::READER_TABLE_RESET.offset;
    pub const LOOPBACK_ENABLE: u64 = dma::LOOPBACK_ENABLE.offset;
    /// The descriptor's IRQ_DISABLE bit in its high 32-bit word (the register is 64 bits wide,
    /// written as two words).
    pub const IRQ_DISABLE: u32 = 1 << (dma::writer_table_value::IRQ_DISABLE.shift - 32);
}
