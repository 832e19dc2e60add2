//! Progress of a sweep on stderr, and Ctrl-C as a request to stop between points.
//!
//! The bar shows the time elapsed and an estimate of the time left (ETA, from the rate so
//! far). It counts points when they cost about the same, or units of work (packets,
//! interrupts, records) when they do not, so that the estimate follows where the time goes.
//! The bar is drawn only when stderr is a terminal and the output is not JSON, so scripts
//! and tests see clean streams. The first Ctrl-C asks the sweep to stop after the point in
//! progress (the generator stops by itself at the end of each run, buffers are freed and
//! the partial result is written, marked `"interrupted": true`); a second one exits at once.

use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

static STOP: AtomicBool = AtomicBool::new(false);
static PRESSES: AtomicU32 = AtomicU32::new(0);
static INSTALLED: AtomicBool = AtomicBool::new(false);
/// Partial outputs (temporary files) removed when a second signal quits at once.
static PARTIAL: Mutex<Vec<PathBuf>> = Mutex::new(Vec::new());

/// Exit status after an interrupted measurement (128 + SIGINT, as shells report it).
pub const INTERRUPTED_EXIT: u8 = 130;

/// Installs the Ctrl-C handler (once per process; later calls do nothing).
pub fn install_stop_handler() {
    if INSTALLED.swap(true, Ordering::SeqCst) {
        return;
    }
    let result = ctrlc::set_handler(|| {
        STOP.store(true, Ordering::SeqCst);
        // The card's waits end within a slice (tlpx_device::stop): a long point stops too.
        tlpx_device::stop::request();
        if PRESSES.fetch_add(1, Ordering::SeqCst) == 0 {
            eprintln!("\ntlpx: stopping after the current point (Ctrl-C again to quit at once)");
        } else {
            // The handler runs in a thread of its own (ctrlc), not in signal context.
            if let Ok(partial) = PARTIAL.lock() {
                for path in partial.iter() {
                    let _ = std::fs::remove_file(path);
                }
            }
            eprintln!("\ntlpx: quitting; what this process runs on the card stops when its lease expires, or at once when the next tlpx finds it gone");
            std::process::exit(i32::from(INTERRUPTED_EXIT));
        }
    });
    if let Err(e) = result {
        eprintln!("tlpx: warning: Ctrl-C cannot stop sweeps cleanly here: {e}");
    }
}

/// Signals (Ctrl-C, SIGTERM, SIGHUP) this process has had: a step that began after an earlier
/// signal (a capture's conversion, after the signal that ended the capture) stops at the next.
pub fn signals() -> u32 {
    PRESSES.load(Ordering::SeqCst)
}

/// `path` is a partial output (a temporary file): a second signal, which quits at once,
/// removes it first. [`forget_partial`] when it is complete (renamed) or removed.
pub fn partial_output(path: &Path) {
    if let Ok(mut partial) = PARTIAL.lock() {
        partial.push(path.to_path_buf());
    }
}

/// `path` is no longer a partial output.
pub fn forget_partial(path: &Path) {
    if let Ok(mut partial) = PARTIAL.lock() {
        partial.retain(|p| p != path);
    }
}

/// True once Ctrl-C was pressed (or SIGTERM/SIGHUP came, or the output went away).
pub fn stop_requested() -> bool {
    STOP.load(Ordering::SeqCst) || tlpx_device::stop::requested()
}

/// Whether `e` is a card wait that ended because a stop was requested: the point in progress
/// is abandoned (its run stopped on the card), the sweep keeps what it measured.
///
/// A block taken back from this process (`tlpx stop BLOCK` from another terminal, or its lease
/// expired) ends the run the same way, so the points measured before it are kept; that case
/// is said on stderr here, once, as the sweep loops test for it.
pub fn is_interrupt(e: &anyhow::Error) -> bool {
    e.chain().any(|c| match c.downcast_ref::<tlpx_device::DeviceError>() {
        Some(tlpx_device::DeviceError::Interrupted) => true,
        Some(lost @ tlpx_device::DeviceError::LeaseLost { .. }) => {
            eprintln!("tlpx: {lost}: stopping here, keeping the points measured before");
            // As a Ctrl-C: the command stops, and its result says it was interrupted.
            STOP.store(true, Ordering::SeqCst);
            true
        }
        _ => false,
    })
}

/// A progress bar over the points of a sweep (hidden for JSON or without a terminal).
pub struct Progress {
    bar: ProgressBar,
}

impl Progress {
    /// A bar over `points` points of about equal cost.
    pub fn new(points: u64, json: bool) -> Progress {
        Progress::with_template(points, json, "{pos}/{len}")
    }

    /// A bar over `total` units of work of unequal size (weighted packets), shown in percent.
    pub fn work(total: u64, json: bool) -> Progress {
        Progress::with_template(total, json, "{percent:>3}%")
    }

    /// A bar over `total` units of work named `unit` ("records", "interrupts"): advanced
    /// with [`Progress::done_one`], [`Progress::set_done`] or a [`Ticker`] (from the middle
    /// of a point too).
    pub fn units(total: u64, unit: &str, json: bool) -> Progress {
        // The unit is text of tlpx's, but braces would be read as template keys.
        let unit: String = unit.chars().filter(|c| *c != '{' && *c != '}').collect();
        Progress::with_template(total, json, &format!("{{pos}}/{{len}} {unit}"))
    }

    fn with_template(len: u64, json: bool, count: &str) -> Progress {
        let visible = !json && std::io::stderr().is_terminal();
        let target = if visible { ProgressDrawTarget::stderr() } else { ProgressDrawTarget::hidden() };
        let bar = ProgressBar::with_draw_target(Some(len), target);
        let template = format!("{{spinner}} [{{elapsed_precise}}] {{bar:30}} {count} ETA {{eta}} {{msg}}");
        if let Ok(style) = ProgressStyle::with_template(&template) {
            bar.set_style(style);
        }
        if visible {
            bar.enable_steady_tick(Duration::from_millis(200));
        }
        Progress { bar }
    }

    /// Says which point runs now.
    pub fn start(&self, what: &str) {
        self.bar.set_message(what.to_string());
    }

    pub fn done_one(&self) {
        self.bar.inc(1);
    }

    /// Moves the bar to `units` done (a point that ended early leaves its units behind).
    pub fn set_done(&self, units: u64) {
        self.bar.set_position(units);
    }

    /// True when nothing is drawn (JSON output, or stderr is not a terminal).
    pub fn is_hidden(&self) -> bool {
        self.bar.is_hidden()
    }

    /// A handle that advances this bar from another thread (the measuring thread of irq).
    pub fn ticker(&self) -> Ticker {
        Ticker(self.bar.clone())
    }

    /// Prints a line above the bar (text mode output while the bar runs).
    pub fn println(&self, line: &str) {
        if self.bar.is_hidden() {
            crate::outln!("{line}");
        } else {
            self.bar.suspend(|| crate::outln!("{line}"));
        }
    }

    /// Runs `f` (which writes to the terminal) with the bar out of its way.
    pub fn suspend<R>(&self, f: impl FnOnce() -> R) -> R {
        self.bar.suspend(f)
    }

    pub fn finish(&self) {
        self.bar.finish_and_clear();
    }
}

/// Advances a [`Progress`] from the thread that does the work.
#[derive(Clone)]
pub struct Ticker(ProgressBar);

impl Ticker {
    pub fn advance(&self, n: u64) {
        self.0.inc(n);
    }
}

impl Drop for Progress {
    fn drop(&mut self) {
        self.bar.finish_and_clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_output_hides_the_bar() {
        let p = Progress::new(3, true);
        assert!(p.bar.is_hidden());
        p.start("x");
        p.done_one();
        assert_eq!(p.bar.position(), 1);
        p.finish();
    }

    #[test]
    fn units_advance_from_a_ticker_and_from_the_main_thread() {
        let p = Progress::units(100, "packets {x}", true);
        let t = p.ticker();
        std::thread::spawn(move || t.advance(30)).join().expect("ticker thread");
        p.done_one();
        assert_eq!(p.bar.position(), 31);
        p.set_done(40);
        assert_eq!(p.bar.position(), 40);
        assert_eq!(p.bar.length(), Some(100));
    }
}
