//! What the CLI's end-to-end tests share: the tlpx binary cargo built for them, one run of it
//! against a device, and its output as text.
#![allow(dead_code)] // each test file uses a part

use std::path::PathBuf;
use std::process::{Command, Output};

/// The `tlpx` binary of this build (cargo sets the variable for integration tests).
pub fn tlpx_bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_tlpx"))
}

/// Runs `tlpx --device DEVICE ARGS` to its end.
pub fn tlpx(device: &str, args: &[&str]) -> Output {
    Command::new(tlpx_bin()).arg("--device").arg(device).args(args).output().expect("run tlpx")
}

/// A command's output bytes as text (lossy: a test prints what it got).
pub fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}
