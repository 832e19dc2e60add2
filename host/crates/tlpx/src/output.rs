//! Printing helpers shared by the subcommands.
//!
//! Standard output may go to a pipe whose reader leaves (`tlpx ... | head`). tlpx ignores
//! SIGPIPE so that no process dies in the middle of a measurement without stopping what it
//! started on the card; a write that fails instead marks the output closed and asks the
//! measurement to stop (tlpx_device::stop), and main exits with 141 (128 + SIGPIPE) as the
//! shell would report a process killed by it, after cleaning up.

use std::io::Write;
use std::sync::atomic::{AtomicBool, Ordering};

use serde::Serialize;

static OUTPUT_CLOSED: AtomicBool = AtomicBool::new(false);

/// Exit status after standard output was closed under tlpx (128 + SIGPIPE).
pub const OUTPUT_CLOSED_EXIT: u8 = 141;

/// Writes one line to standard output; once a write fails (the reader went away), prints
/// nothing more and asks the running measurement to stop.
pub fn out_line(args: std::fmt::Arguments<'_>) {
    if OUTPUT_CLOSED.load(Ordering::Relaxed) {
        return;
    }
    let mut out = std::io::stdout().lock();
    if writeln!(out, "{args}").and_then(|_| out.flush()).is_err() {
        mark_output_closed();
    }
}

/// Records that standard output is gone and asks the measurement to stop.
pub fn mark_output_closed() {
    OUTPUT_CLOSED.store(true, Ordering::SeqCst);
    tlpx_device::stop::request();
}

/// True once a write to standard output failed.
pub fn output_closed() -> bool {
    OUTPUT_CLOSED.load(Ordering::SeqCst)
}

/// `println!` that survives a closed standard output (see the module's documentation).
#[macro_export]
macro_rules! outln {
    () => { $crate::output::out_line(format_args!("")) };
    ($($t:tt)*) => { $crate::output::out_line(format_args!($($t)*)) };
}

/// Prints `value` as pretty JSON on stdout.
pub fn print_json<T: Serialize>(value: &T) -> anyhow::Result<()> {
    out_line(format_args!("{}", serde_json::to_string_pretty(value)?));
    Ok(())
}

/// Formats a byte count as "4 KiB", "256 B".
pub fn bytes(n: u64) -> String {
    if n >= 1 << 20 && n.is_multiple_of(1 << 20) {
        format!("{} MiB", n >> 20)
    } else if n >= 1 << 10 && n.is_multiple_of(1 << 10) {
        format!("{} KiB", n >> 10)
    } else {
        format!("{n} B")
    }
}
