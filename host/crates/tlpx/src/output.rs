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

/// Writes `text` to standard output as it is (its own line ends: a CSV's CRLF), as
/// [`out_line`] does.
pub fn out_text(text: &str) {
    if OUTPUT_CLOSED.load(Ordering::Relaxed) {
        return;
    }
    let mut out = std::io::stdout().lock();
    if out.write_all(text.as_bytes()).and_then(|_| out.flush()).is_err() {
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

/// Formats nanoseconds with a unit that fits: "740 ns", "12.5 ns", "3.20 µs", "1.05 ms", "2.00 s";
/// "–" when not finite.
pub fn ns_text(ns: f64) -> String {
    let a = ns.abs();
    if !ns.is_finite() {
        "–".into()
    } else if a >= 1e9 {
        format!("{:.2} s", ns / 1e9)
    } else if a >= 1e6 {
        format!("{:.2} ms", ns / 1e6)
    } else if a >= 1e3 {
        format!("{:.2} µs", ns / 1e3)
    } else if a >= 10.0 || ns.fract() == 0.0 {
        format!("{ns:.0} ns")
    } else {
        format!("{ns:.1} ns")
    }
}

/// Escapes text for XML and HTML element content and attribute values.
pub fn xml_escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// At most `n` characters of `s`, with "…" when cut.
pub fn truncate(s: &str, n: usize) -> String {
    if s.chars().count() > n {
        format!("{}…", s.chars().take(n).collect::<String>())
    } else {
        s.to_string()
    }
}

/// Formats a byte count as "4 KiB", "256 B" (tlpx-results' labels use it too).
pub use tlpx_results::bytes;
