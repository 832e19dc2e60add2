//! `tlpx top`: a live terminal view of the card's bus, from the spy's counters.
//!
//! ```text
//!  input thread ──Event::Input──┐
//!  (keys)                       ├──► one mpsc channel ──► draw loop (State ─► ratatui frame)
//!  collector thread ─Event::Sample / Finished──┘          or --snapshot text / --json lines
//!  (owns the Card: idle, read counters, drain ring)
//! ```
//!
//! Panels: payload bandwidth per direction over time against the model's limit for the link
//! libpci reports, the TLP mix per class and direction, the spy's matched-read latency
//! histogram, dropped records and error counters, and recent transactions from top's own
//! small capture (only when nobody else captures: top never takes another tool's ring).
//!
//! Frames come every `--interval` of wall time (1 s on the simulator, 100 ms on hardware);
//! every figure is card time. On the simulator top holds live time for its whole life
//! (docs/sim-protocol.md): card time runs on its own, never ahead of wall time and usually far
//! slower, so each frame says the span of card time it covers; another tlpx command can drive
//! the same card at the same time (`tlpx bw` in another terminal) and top sees it move.

mod collect;
mod draw;
mod input;
mod state;

use std::io::{IsTerminal, Write};
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context};
use clap::Args;
use ratatui::backend::TestBackend;
use ratatui::Terminal;
use tlpx_device::spy::{MAX_RING_RECORDS, MIN_RING_RECORDS};

use crate::args::{whole, whole_as};
use crate::session::Session;
use crate::sizes::parse_duration;
use collect::{Plan, Sample};
use state::{Action, Limits, State};
use tlpx_device::card::Feature;
use tlpx_device::TimeMode;

#[derive(Debug, Args)]
pub struct Cmd {
    /// Wall time between frames (1us..=60s), e.g. 1s, 100ms [default: 1s on the simulator,
    /// 100ms on hardware]. On the simulator top holds live time: card time runs on its own,
    /// slower than wall time, and each frame says the span of card time it covers.
    #[arg(long, allow_hyphen_values = true)]
    pub interval: Option<String>,
    /// Stop after this many samples (default: run until q or Ctrl-C; 1 with --snapshot).
    #[arg(long, value_parser = whole(1, u64::MAX), allow_negative_numbers = true)]
    pub frames: Option<u64>,
    /// Draw one frame (after the last sample) as plain text on stdout, without a terminal.
    #[arg(long)]
    pub snapshot: bool,
    /// Width of the --snapshot frame in columns (20..=1000).
    #[arg(long, default_value_t = 120, value_parser = whole(20u16, 1000), allow_negative_numbers = true)]
    pub width: u16,
    /// Height of the --snapshot frame in rows (8..=500).
    #[arg(long, default_value_t = 40, value_parser = whole(8u16, 500), allow_negative_numbers = true)]
    pub height: u16,
    /// Transactions kept for the recent-transactions panel (1..=1000).
    #[arg(long, default_value_t = 64, value_parser = whole(1usize, 1000), allow_negative_numbers = true)]
    pub recent: usize,
    /// Records in top's capture ring: a power of two, 16..=16M.
    #[arg(
        long,
        default_value_t = 16384,
        value_parser = whole_as(MIN_RING_RECORDS, MAX_RING_RECORDS, "a power of two in 16..=16777216 records"),
        allow_negative_numbers = true
    )]
    pub ring: u32,
    /// Never start top's own capture: counters only (the spy's ring stays free for others).
    #[arg(long)]
    pub no_capture: bool,
}

/// What the threads tell the draw loop.
#[derive(Debug)]
pub enum Event {
    Input(Action),
    Sample(Box<Sample>),
    /// The collector ended; `Some` says why when it failed.
    Finished(Option<String>),
}

/// Wall time between frames on the simulator without --interval: a frame then covers some
/// ms to tens of ms of card time (the simulator runs the card tens to hundreds of times slower
/// than its clock), and top's own polling stays a small part of the traffic it shows.
const SIM_INTERVAL: Duration = Duration::from_secs(1);
/// Wall time between frames on hardware without --interval.
const HARDWARE_INTERVAL: Duration = Duration::from_millis(100);

/// The checked arguments.
#[derive(Debug, Clone, PartialEq)]
struct Options {
    /// None: the default of the card's kind (known once it is open).
    interval: Option<Duration>,
    frames: Option<u64>,
}

fn check(cmd: &Cmd, json: bool) -> Result<Options, String> {
    let interval = match &cmd.interval {
        Some(text) => {
            let seconds = parse_duration("--interval", text)?;
            if !(1e-6..=60.0).contains(&seconds) {
                return Err(format!("--interval {text} is outside 1us..=60s"));
            }
            Some(Duration::from_secs_f64(seconds))
        }
        None => None,
    };
    if cmd.frames == Some(0) {
        return Err("--frames 0: give at least 1 sample (or leave --frames out to run until q)".into());
    }
    if cmd.snapshot && json {
        return Err("--snapshot and --json both print to stdout: choose one".into());
    }
    if !(20..=1000).contains(&cmd.width) || !(8..=500).contains(&cmd.height) {
        return Err(format!("--width {} --height {}: a snapshot is 20..=1000 columns by 8..=500 rows", cmd.width, cmd.height));
    }
    if !(1..=1000).contains(&cmd.recent) {
        return Err(format!("--recent must be 1..=1000 transactions, not {}", cmd.recent));
    }
    if !cmd.ring.is_power_of_two() || !(MIN_RING_RECORDS..=MAX_RING_RECORDS).contains(&cmd.ring) {
        return Err(format!("--ring {}: the ring holds a power of two of records in {MIN_RING_RECORDS}..={MAX_RING_RECORDS}", cmd.ring));
    }
    let frames = cmd.frames.or(if cmd.snapshot { Some(1) } else { None });
    Ok(Options { interval, frames })
}

/// The model's payload limits per direction for the link libpci reports.
fn limits(session: &Session) -> Limits {
    let Some(link) = &session.link else { return Limits::default() };
    let model = link.model(false);
    Limits {
        link: Some(format!("Gen{} x{} MPS {}", link.generation, link.lanes, link.mps)),
        // Host to card payload travels in the completions of the card's reads; card to host
        // in its writes. Largest transfers: the best the link can do.
        down: model.as_ref().map(|m| tlpx_model::link::read_bandwidth(m, 4096).bytes_per_second),
        up: model.as_ref().map(|m| tlpx_model::link::write_bandwidth(m, 4096).bytes_per_second),
        tlp_bytes_per_second: model.as_ref().map(|m| m.tlp_bytes_per_second()),
    }
}

fn header(session: &Session) -> String {
    let env = &session.environment;
    match &env.sim {
        Some(s) => format!("simulated card, {}-bit at {:.0} MHz", s.data_width, s.clock_hz as f64 / 1e6),
        None => format!("{} card at {}", env.backend.as_deref().unwrap_or("?"), env.device.as_deref().unwrap_or("?")),
    }
}

pub fn run(cmd: &Cmd, device: &str, json: bool) -> anyhow::Result<ExitCode> {
    let options = check(cmd, json).map_err(anyhow::Error::msg)?;
    let interactive = !cmd.snapshot && !json;
    if interactive && !std::io::stdout().is_terminal() {
        bail!("tlpx top draws on a terminal, but stdout is not one: use --snapshot for one frame as text, or --json for samples as JSON lines");
    }
    let mut session = Session::open_observer(device)?;
    session.card.require(Feature::Spy, "spy")?;
    // On the simulator: live time for top's whole life, so the view moves while nothing else
    // waits on the card, and frames follow wall time.
    let live = session.environment.simulated;
    if live {
        session.hold_live_time()?;
    }
    let interval = options.interval.unwrap_or(if live { SIM_INTERVAL } else { HARDWARE_INTERVAL });
    let time_mode = session.environment.time_mode_at_start().unwrap_or(TimeMode::Hardware);
    let mut state = State::new(header(&session), limits(&session), interval.as_secs_f64());
    state.clock_hz = session.clock_hz;
    state.time_mode = time_mode;
    let plan = Plan {
        interval,
        live,
        time_mode,
        frames: options.frames,
        capture: !cmd.no_capture,
        ring_records: cmd.ring,
        recent: cmd.recent,
        mps: session.mps_mrrs().0,
    };

    let (tx, rx) = mpsc::channel();
    let stop = Arc::new(AtomicBool::new(false));
    let collector = {
        let (tx, stop, card) = (tx.clone(), stop.clone(), session.card);
        std::thread::Builder::new().name("top-collector".into()).spawn(move || collect::run(card, plan, tx, stop))?
    };
    let result = if interactive {
        interactive_loop(&mut state, &rx, tx, &stop)
    } else {
        crate::progress::install_stop_handler();
        drop(tx);
        headless_loop(cmd, json, &mut state, &rx)
    };
    stop.store(true, Ordering::SeqCst);
    // Wait for the collector to hand its ring back before exiting.
    let _ = collector.join();
    result
}

fn headless_loop(cmd: &Cmd, json: bool, state: &mut State, rx: &Receiver<Event>) -> anyhow::Result<ExitCode> {
    let mut out = std::io::stdout().lock();
    let mut failure = None;
    for event in rx.iter() {
        match event {
            Event::Sample(s) => {
                if json {
                    serde_json::to_writer(&mut out, &s)?;
                    writeln!(out)?;
                    out.flush()?;
                }
                state.apply(*s);
            }
            Event::Finished(err) => {
                failure = err;
                break;
            }
            Event::Input(_) => {}
        }
    }
    if let Some(e) = failure {
        // The collector thread reports the card's error as text: it is the card's all the same.
        return Err(crate::exit::card_failure(format!("tlpx top: reading the card failed after {} samples: {e}", state.samples)));
    }
    if cmd.snapshot {
        if state.samples == 0 {
            bail!("tlpx top: stopped before the first sample, nothing to draw");
        }
        let mut terminal = Terminal::new(TestBackend::new(cmd.width, cmd.height)).context("a text canvas")?;
        terminal.draw(|f| draw::draw(f, state)).context("drawing the snapshot")?;
        write!(out, "{}", draw::buffer_text(terminal.backend().buffer()))?;
    }
    Ok(ExitCode::SUCCESS)
}

fn interactive_loop(state: &mut State, rx: &Receiver<Event>, tx: mpsc::Sender<Event>, stop: &Arc<AtomicBool>) -> anyhow::Result<ExitCode> {
    let mut terminal = ratatui::try_init().context("setting up the terminal")?;
    let input = {
        let stop = stop.clone();
        std::thread::Builder::new().name("top-input".into()).spawn(move || input::run(tx, stop))?
    };
    // Samples that arrive while paused wait here, so the view stands still but loses nothing.
    let mut held: Vec<Sample> = Vec::new();
    let mut failure = None;
    let mut collector_done = false;
    let drawn = (|| -> anyhow::Result<()> {
        terminal.draw(|f| draw::draw(f, state))?;
        loop {
            let event = match rx.recv_timeout(Duration::from_millis(500)) {
                Ok(e) => e,
                Err(RecvTimeoutError::Timeout) => continue,
                Err(RecvTimeoutError::Disconnected) => break,
            };
            match event {
                Event::Sample(s) => {
                    if state.paused {
                        held.push(*s);
                    } else {
                        state.apply(*s);
                    }
                }
                Event::Input(a) => {
                    if !state.act(a) {
                        break;
                    }
                    if !state.paused {
                        for s in held.drain(..) {
                            state.apply(s);
                        }
                    }
                }
                Event::Finished(err) => {
                    collector_done = true;
                    if err.is_none() {
                        break; // --frames reached
                    }
                    failure = err.clone();
                    state.message = err.map(|e| format!("collector stopped: {e} (q quits)"));
                }
            }
            terminal.draw(|f| draw::draw(f, state))?;
        }
        Ok(())
    })();
    stop.store(true, Ordering::SeqCst);
    ratatui::restore();
    let _ = input.join();
    if !collector_done {
        // Drain until the collector says it is done (it stops its capture first).
        while let Ok(e) = rx.recv_timeout(Duration::from_secs(15)) {
            if let Event::Finished(err) = e {
                failure = failure.or(err);
                break;
            }
        }
    }
    drawn?;
    if let Some(e) = failure {
        return Err(crate::exit::card_failure(format!("tlpx top: reading the card failed: {e}")));
    }
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cmd() -> Cmd {
        Cmd { interval: None, frames: None, snapshot: false, width: 120, height: 40, recent: 64, ring: 16384, no_capture: false }
    }

    #[test]
    fn arguments_are_checked_with_the_flag_named() {
        let o = check(&cmd(), false).expect("defaults");
        assert_eq!((o.interval, o.frames), (None, None), "the interval's default depends on the card");
        let o = check(&Cmd { interval: Some("250ms".into()), ..cmd() }, false).expect("interval");
        assert_eq!(o.interval, Some(Duration::from_millis(250)));
        assert!(check(&Cmd { interval: Some("90s".into()), ..cmd() }, false).expect_err("too long").contains("90s is outside 1us..=60s"));
        let snap = Cmd { snapshot: true, ..cmd() };
        assert_eq!(check(&snap, false).expect("snapshot").frames, Some(1));
        let e = check(&snap, true).expect_err("snapshot and json");
        assert!(e.contains("--snapshot and --json"), "{e}");
        assert!(check(&Cmd { interval: Some("soon".into()), ..cmd() }, false).expect_err("interval").contains("--interval"));
        assert!(check(&Cmd { frames: Some(0), ..cmd() }, false).expect_err("frames").contains("--frames 0"));
        assert!(check(&Cmd { ring: 1000, ..cmd() }, false).expect_err("ring").contains("--ring 1000"));
        assert!(check(&Cmd { width: 5, ..cmd() }, false).expect_err("width").contains("--width 5"));
        assert!(check(&Cmd { recent: 0, ..cmd() }, false).expect_err("recent").contains("--recent"));
    }
}
