//! What the screen shows, built from samples and keys; drawing only reads it.
//!
//! "Clear counters" is a baseline kept here: top never writes the spy's CLEAR, which would
//! zero the counters and the ring indices under another tool that is capturing.

use std::collections::VecDeque;

use tlpx_device::TimeMode;

use super::collect::{ClassCount, GeneratorErrors, Reading, RequestPathErrors, RingOwner, Sample, CLASS_COUNT};

/// Samples kept for the bandwidth history.
pub const HISTORY: usize = 600;

/// The panels, in focus order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Panel {
    Bandwidth,
    Mix,
    Latency,
    Counters,
    Recent,
}

impl Panel {
    pub const ALL: [Panel; 5] = [Panel::Bandwidth, Panel::Mix, Panel::Latency, Panel::Counters, Panel::Recent];

    pub fn title(self) -> &'static str {
        match self {
            Panel::Bandwidth => "Bandwidth",
            Panel::Mix => "TLP mix",
            Panel::Latency => "Read latency",
            Panel::Counters => "Drops and errors",
            Panel::Recent => "Recent transactions",
        }
    }

    fn step(self, by: isize) -> Panel {
        let i = Panel::ALL.iter().position(|p| *p == self).unwrap_or(0) as isize;
        let n = Panel::ALL.len() as isize;
        Panel::ALL[(i + by).rem_euclid(n) as usize]
    }
}

/// What a key asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    Quit,
    Pause,
    Clear,
    NextPanel,
    PreviousPanel,
    Zoom,
    Redraw,
}

/// The link and model limits the bandwidth panel compares against.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Limits {
    /// "Gen2 x1, MPS 256, MRRS 512 (libpci)".
    pub link: Option<String>,
    /// Model payload limit, host to card (DMA reads' completions), bytes/s.
    pub down: Option<f64>,
    /// Model payload limit, card to host (DMA writes), bytes/s.
    pub up: Option<f64>,
    /// What one direction of the link carries for TLPs (framing included), bytes/s: the
    /// measure of the spy's own ring writes.
    pub tlp_bytes_per_second: Option<f64>,
}

/// The view.
#[derive(Debug, Clone)]
pub struct State {
    /// One line saying what card this is.
    pub header: String,
    pub limits: Limits,
    /// Wall time between frames.
    pub interval_s: f64,
    /// `Live` on the simulator: frames follow wall time and each states the card time it
    /// covers. `Hardware`: card time is wall time.
    pub time_mode: TimeMode,
    /// Card clock (cycles to time in the latency panel).
    pub clock_hz: u32,
    /// (card time s, payload bytes/s) per sample.
    pub down_history: VecDeque<(f64, f64)>,
    pub up_history: VecDeque<(f64, f64)>,
    pub last: Option<Sample>,
    /// Counters at the last clear (zero: since the card's reset or the spy's last clear).
    pub baseline: Reading,
    pub samples: u64,
    pub received_records: u64,
    pub paused: bool,
    pub focus: Panel,
    pub zoomed: bool,
    /// A problem to show in the status line (the collector stopped, ...).
    pub message: Option<String>,
}

impl State {
    pub fn new(header: String, limits: Limits, interval_s: f64) -> State {
        State {
            header,
            limits,
            interval_s,
            time_mode: TimeMode::Hardware,
            clock_hz: 0,
            down_history: VecDeque::new(),
            up_history: VecDeque::new(),
            last: None,
            baseline: Reading::zero(),
            samples: 0,
            received_records: 0,
            paused: false,
            focus: Panel::Bandwidth,
            zoomed: false,
            message: None,
        }
    }

    pub fn apply(&mut self, sample: Sample) {
        // A spy cleared by someone else: its counters restart, and so does the baseline.
        if sample.reading.sequence < self.baseline.sequence
            || (0..CLASS_COUNT)
                .any(|i| sample.reading.down[i].tlps < self.baseline.down[i].tlps || sample.reading.up[i].tlps < self.baseline.up[i].tlps)
        {
            self.baseline = Reading { request_path: self.baseline.request_path, ..Reading::zero() };
        }
        for (history, rate) in
            [(&mut self.down_history, sample.down.payload_bytes_per_second), (&mut self.up_history, sample.up.payload_bytes_per_second)]
        {
            history.push_back((sample.card_time_s, rate));
            while history.len() > HISTORY {
                history.pop_front();
            }
        }
        self.samples += 1;
        self.received_records += sample.records_received;
        self.last = Some(sample);
    }

    /// Handles a key; returns false when top should quit.
    pub fn act(&mut self, action: Action) -> bool {
        match action {
            Action::Quit => return false,
            Action::Pause => self.paused = !self.paused,
            Action::Clear => {
                if let Some(s) = &self.last {
                    self.baseline = s.reading.clone();
                }
                self.down_history.clear();
                self.up_history.clear();
                self.received_records = 0;
            }
            Action::NextPanel => self.focus = self.focus.step(1),
            Action::PreviousPanel => self.focus = self.focus.step(-1),
            Action::Zoom => self.zoomed = !self.zoomed,
            Action::Redraw => {}
        }
        true
    }

    /// Per-class totals since the last clear, down and up.
    pub fn totals(&self) -> ([ClassCount; CLASS_COUNT], [ClassCount; CLASS_COUNT]) {
        match &self.last {
            Some(s) => (
                std::array::from_fn(|i| s.reading.down[i].since(&self.baseline.down[i])),
                std::array::from_fn(|i| s.reading.up[i].since(&self.baseline.up[i])),
            ),
            None => Default::default(),
        }
    }

    /// Latency histogram since the last clear.
    pub fn latency(&self) -> Vec<u64> {
        match &self.last {
            Some(s) => s
                .reading
                .latency_histogram
                .iter()
                .enumerate()
                .map(|(i, v)| v.saturating_sub(self.baseline.latency_histogram.get(i).copied().unwrap_or(0)))
                .collect(),
            None => Vec::new(),
        }
    }

    /// Records lost since the last clear, and the spy's sequence.
    pub fn lost(&self) -> (u64, u32) {
        match &self.last {
            Some(s) => (u64::from(s.reading.lost.saturating_sub(self.baseline.lost)), s.reading.sequence),
            None => (0, 0),
        }
    }

    /// Request-path errors since the last clear.
    pub fn request_path(&self) -> RequestPathErrors {
        let (now, b) = match &self.last {
            Some(s) => (s.reading.request_path, self.baseline.request_path),
            None => return RequestPathErrors::default(),
        };
        RequestPathErrors {
            ur_sent: now.ur_sent.saturating_sub(b.ur_sent),
            posted_dropped: now.posted_dropped.saturating_sub(b.posted_dropped),
            cfg_requests: now.cfg_requests.saturating_sub(b.cfg_requests),
            poisoned: now.poisoned.saturating_sub(b.poisoned),
            reads_too_long: now.reads_too_long.saturating_sub(b.reads_too_long),
            bus_errors: now.bus_errors.saturating_sub(b.bus_errors),
            malformed: now.malformed.saturating_sub(b.malformed),
        }
    }

    /// The generator's error counters of its current or last run (they restart with every
    /// run, so they are shown as the card keeps them).
    pub fn generator(&self) -> GeneratorErrors {
        self.last.as_ref().map(|s| s.reading.generator).unwrap_or_default()
    }

    pub fn ring(&self) -> Option<RingOwner> {
        self.last.as_ref().map(|s| s.ring)
    }

    /// Highest payload rate in the history, per direction.
    pub fn peaks(&self) -> (f64, f64) {
        let peak = |h: &VecDeque<(f64, f64)>| h.iter().map(|p| p.1).fold(0.0, f64::max);
        (peak(&self.down_history), peak(&self.up_history))
    }
}

#[cfg(test)]
mod tests {
    use super::super::collect::{sample_between, Reading};
    use super::*;

    fn reading(cycles: u64, mwr_up: u64) -> Reading {
        let mut r = Reading::zero();
        r.cycles = cycles;
        r.up[1] = ClassCount { tlps: mwr_up, bytes: mwr_up * 272, payload_bytes: mwr_up * 256, wait_cycles: 0 };
        r.sequence = mwr_up as u32;
        r
    }

    #[test]
    fn clear_is_a_baseline_and_focus_cycles() {
        let mut s = State::new("card".into(), Limits::default(), 0.1);
        s.apply(sample_between(1, &reading(0, 0), &reading(1000, 10), 1000, 0.0));
        assert_eq!(s.totals().1[1].tlps, 10);
        assert!(s.act(Action::Clear));
        assert_eq!(s.totals().1[1].tlps, 0);
        s.apply(sample_between(2, &reading(1000, 10), &reading(2000, 15), 1000, 0.0));
        assert_eq!(s.totals().1[1].tlps, 5);
        assert_eq!(s.up_history.len(), 1);
        // Someone cleared the spy: totals restart from its zero.
        s.apply(sample_between(3, &reading(2000, 15), &reading(3000, 2), 1000, 0.0));
        assert_eq!(s.totals().1[1].tlps, 2);
        assert_eq!(s.focus, Panel::Bandwidth);
        s.act(Action::PreviousPanel);
        assert_eq!(s.focus, Panel::Recent);
        s.act(Action::NextPanel);
        s.act(Action::NextPanel);
        assert_eq!(s.focus, Panel::Mix);
        assert!(!s.act(Action::Quit));
    }
}
