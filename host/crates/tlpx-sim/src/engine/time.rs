//! Virtual time: the sim thread's main loop, which runs card cycles only while time runs
//! ([`Sim::busy`]); the host clock of `--host-time real`; the pacing of live time
//! ([`pace`]) and the claims on it; the deadlines that end a client's wait.

use std::sync::mpsc::{Receiver, RecvTimeoutError, TryRecvError};
use std::time::{Duration, Instant};

use tlpx_sim_protocol::{ErrorKind, Reply};

use super::{Blocked, Deadline, Event, Sim, TagKind, BATCH_CYCLES, OUTBOX_RETRY, PACE_SLACK, SPIN_BEFORE_SLEEP};

/// What the pacing of live time allows now: `now` card cycles, live time having started at
/// card cycle `c0` `elapsed` wall time ago, with a card clock of `clock_hz`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pace {
    /// Run at most this many cycles: card time then reaches, and does not pass, wall time.
    Run(u64),
    /// Card time has caught up with wall time: wait this long (then card time is
    /// [`PACE_SLACK`] behind wall time).
    Wait(Duration),
}

/// The pacing rule of live time: card time never runs ahead of wall time, i.e. the sim runs
/// only while `now - c0 < elapsed × clock_hz` (the card's own clock is the fastest card
/// time can go), and runs no further than `c0 + elapsed × clock_hz`.
pub fn pace(now: u64, c0: u64, elapsed: Duration, clock_hz: f64) -> Pace {
    let allowed = c0.saturating_add((elapsed.as_secs_f64() * clock_hz) as u64);
    if now < allowed {
        return Pace::Run(allowed - now);
    }
    let card = Duration::from_secs_f64(now.saturating_sub(c0) as f64 / clock_hz);
    Pace::Wait((card + PACE_SLACK).saturating_sub(elapsed))
}

impl Sim {
    /// Runs until Shutdown, a signal, or the channel closing.
    pub fn run(&mut self, rx: &Receiver<Event>) {
        loop {
            loop {
                match rx.try_recv() {
                    Ok(ev) => self.on_event(ev),
                    Err(TryRecvError::Empty) => break,
                    Err(TryRecvError::Disconnected) => return,
                }
            }
            self.flush_outboxes();
            self.reap_dead();
            if self.shutdown {
                return;
            }
            if !self.busy() {
                // A client that just got its reply usually sends the next request within
                // microseconds: look again for a short while before sleeping, which saves
                // a futex wake-up per round trip.
                let t0 = Instant::now();
                let ev = loop {
                    match rx.try_recv() {
                        Ok(ev) => break Some(ev),
                        Err(TryRecvError::Disconnected) => return,
                        Err(TryRecvError::Empty) if t0.elapsed() < SPIN_BEFORE_SLEEP => std::thread::yield_now(),
                        Err(TryRecvError::Empty) => break None,
                    }
                };
                let ev = match ev {
                    Some(ev) => ev,
                    // Replies a client's socket did not take: look again soon.
                    None if self.clients.values().any(|c| !c.outbox.is_empty()) => match rx.recv_timeout(OUTBOX_RETRY) {
                        Ok(ev) => ev,
                        Err(RecvTimeoutError::Timeout) => continue,
                        Err(RecvTimeoutError::Disconnected) => return,
                    },
                    None => match rx.recv() {
                        Ok(ev) => ev,
                        Err(_) => return,
                    },
                };
                self.on_event(ev);
                continue;
            }
            let mut batch = u64::from(BATCH_CYCLES);
            if let Some((t0, c0)) = self.live_since {
                match pace(self.now, c0, t0.elapsed(), self.p.clock_hz) {
                    Pace::Run(allowed) => batch = batch.min(allowed),
                    Pace::Wait(wait) => {
                        // Ahead of wall time: wait, serving clients meanwhile.
                        let w0 = Instant::now();
                        let ev = rx.recv_timeout(wait);
                        self.live_paced += w0.elapsed();
                        match ev {
                            Ok(ev) => self.on_event(ev),
                            Err(RecvTimeoutError::Timeout) => {}
                            Err(RecvTimeoutError::Disconnected) => return,
                        }
                        continue;
                    }
                }
            }
            self.live_changed = false;
            let t0 = Instant::now();
            let start = self.now;
            self.batch_start = Some(t0);
            for _ in 0..batch {
                self.step();
                if !self.busy() || self.live_changed {
                    break;
                }
            }
            let t1 = Instant::now();
            self.batch_start = None;
            // A batch that stopped time ended, for the host clock, at its last reply: the
            // reply wakes the client, which may take the CPU from the sim before it gets here,
            // and that is the client's time, not the simulator's.
            let reply = self.batch_reply.take();
            let end = if self.busy() { t1 } else { reply.unwrap_or(t1) };
            self.last_batch = (t0, end);
            self.busy += end - t0;
            self.c.wall += t1 - t0;
            self.c.cycles_run += self.now - start;
            self.reap_dead();
        }
    }

    /// The host clock at wall instant `t` (now or a little before: a stamp of a request
    /// that arrived during the running or the last batch): wall time since the sim started,
    /// less the wall time it spent running card cycles. A client's host time is measured on
    /// this clock, so that the wall time the sim needs to simulate one client's host time
    /// (or anything else) does not become host time of another client.
    pub(super) fn host_clock(&self, t: Instant) -> Duration {
        let busy = match self.batch_start {
            Some(s) if t >= s => self.busy + (t - s),
            Some(s) => self.busy.saturating_sub(s - t),
            None => {
                let (s, e) = self.last_batch;
                self.busy.saturating_sub(e.saturating_duration_since(t.max(s)))
            }
        };
        t.saturating_duration_since(self.epoch).saturating_sub(busy)
    }

    /// Whether virtual time runs now.
    fn busy(&self) -> bool {
        if self.waiting > 0 || self.live_clients > 0 {
            return true;
        }
        if self.p.free_run || (self.clients.is_empty() && self.now < self.drain_until) {
            // The card's engines go quiet for a few cycles between requests: keep running a
            // little after the last traffic so they can issue the next one.
            return self.now < self.quiet_until || self.traffic_in_flight();
        }
        false
    }

    pub(super) fn traffic_in_flight(&self) -> bool {
        self.down_cur.is_some()
            || !self.down_queue.is_empty()
            || !self.down_wire.is_empty()
            || !self.completer.is_idle()
            || self.up_in_tlp
            || !self.up_arrivals.is_empty()
            || !self.msi_arrivals.is_empty()
            || self.out.tx_valid != 0
            || self.out.msi_valid != 0
            || self.tags_used > 0
    }

    /// Runs `cycles` card cycles regardless of clients (benchmarks and tests of the lib).
    pub fn run_cycles(&mut self, cycles: u64) {
        let t0 = Instant::now();
        for _ in 0..cycles {
            self.step();
        }
        self.c.wall += t0.elapsed();
        self.c.cycles_run += cycles;
    }

    pub(super) fn deadline(&mut self, d: Deadline) {
        match d {
            Deadline::Tag { tag, serial } => {
                let slot = &mut self.tags[usize::from(tag)];
                if slot.as_ref().is_none_or(|u| u.serial != serial) {
                    return;
                }
                let Some(used) = slot.take() else { return };
                self.free_tag_slot();
                self.c.stats.completion_timeouts += 1;
                let Some(client) = used.client else { return };
                let blocked = self.clients.get(&client).and_then(|c| c.blocked);
                let timeout_us = self.p.completion_timeout_cycles as f64 / self.p.clock_hz * 1e6;
                match (used.kind, blocked) {
                    (TagKind::Mmio { offset, len, .. }, Some(Blocked::MmioRead { tag: bt, .. })) if bt == tag => {
                        let message = format!(
                            "no completion for the {len}-byte read of BAR0 offset {offset:#x} within {} card cycles ({timeout_us:.0} us, --completion-timeout-us)",
                            self.p.completion_timeout_cycles
                        );
                        self.unblock(client, Reply::Error { kind: ErrorKind::CompletionTimeout, message });
                    }
                    (TagKind::Inject { .. }, Some(Blocked::InjectNonPosted { tag: bt, .. })) if bt == tag => {
                        self.unblock(client, Reply::InjectTimedOut { card_cycle: self.now });
                    }
                    _ => {}
                }
            }
            Deadline::Client { id, serial } => {
                let Some(b) = self.clients.get(&id).and_then(|c| c.blocked) else { return };
                if b.serial() != serial {
                    return;
                }
                if let Blocked::HostTime { .. } = b {
                    // Host time charged: the request at the front of the queue runs now.
                    if let Some(c) = self.clients.get_mut(&id) {
                        c.blocked = None;
                        self.waiting -= 1;
                    }
                    self.pump(id);
                    return;
                }
                let reply = match b {
                    Blocked::WaitIrq { .. } => Reply::IrqTimedOut { card_cycle: self.now },
                    Blocked::Advance { .. } => Reply::Advanced { now: self.now },
                    Blocked::InjectNonPosted { tag, .. } => {
                        // The tag stays reserved until the completion timeout; a late
                        // completion is dropped.
                        if let Some(u) = self.tags[usize::from(tag)].as_mut() {
                            u.client = None;
                        }
                        Reply::InjectTimedOut { card_cycle: self.now }
                    }
                    Blocked::InjectPosted { .. } => Reply::InjectTimedOut { card_cycle: self.now },
                    Blocked::MmioRead { .. } | Blocked::HostTime { .. } => return,
                };
                self.unblock(id, reply);
            }
        }
    }

    /// Client `id` took a claim on live time: the first one starts live time, whose pacing
    /// counts from here (this wall instant, this card cycle).
    pub(super) fn live_claim_started(&mut self, id: u64) {
        self.live_clients += 1;
        if self.live_clients == 1 {
            self.live_since = Some((Instant::now(), self.now));
            self.live_changed = true;
            self.info(&format!(
                "client {id} asked for live time: card time runs continuously from card cycle {}, never ahead of wall time",
                self.now
            ));
        }
    }

    /// A claim on live time ended (`why`: the client gave it up or left); the last one ends
    /// live time and time runs only while a client waits again.
    pub(super) fn live_claim_ended(&mut self, id: u64, why: &str) {
        self.live_clients = self.live_clients.saturating_sub(1);
        if self.live_clients > 0 {
            return;
        }
        if let Some((t0, c0)) = self.live_since.take() {
            let cycles = self.now - c0;
            self.live_cycles_done += cycles;
            self.live_changed = true;
            self.info(&format!(
                "live time ended (client {id}: {why}) after {cycles} card cycles ({:.3} ms of card time in {:.2} s of wall time): time runs only while a client waits",
                cycles as f64 / self.p.clock_hz * 1e3,
                t0.elapsed().as_secs_f64()
            ));
        }
    }

    /// Card cycles run in live time so far (ended spans and the running one).
    pub(super) fn live_cycles(&self) -> u64 {
        self.live_cycles_done + self.live_since.map_or(0, |(_, c0)| self.now - c0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const HZ: f64 = 125e6;

    #[test]
    fn live_time_runs_up_to_wall_time_and_no_further() {
        // 1 ms of wall time since live time began at cycle 1000: up to cycle 1000 + 125,000.
        assert_eq!(pace(1000, 1000, Duration::from_millis(1), HZ), Pace::Run(125_000));
        assert_eq!(pace(100_000, 1000, Duration::from_millis(1), HZ), Pace::Run(26_000));
        // Exactly at wall time: wait until wall time is PACE_SLACK ahead.
        assert_eq!(pace(126_000, 1000, Duration::from_millis(1), HZ), Pace::Wait(PACE_SLACK));
        // Ahead (cannot happen while the sim obeys Run, but the rule holds): wait longer.
        assert_eq!(pace(251_000, 1000, Duration::from_millis(1), HZ), Pace::Wait(Duration::from_millis(1) + PACE_SLACK));
    }

    #[test]
    fn a_slow_simulator_never_waits() {
        // The sim ran 1,000 cycles in a second of a 125 MHz card: far behind wall time.
        let p = pace(1000, 0, Duration::from_secs(1), HZ);
        assert_eq!(p, Pace::Run(125_000_000 - 1000));
        // Live time just started: no cycle is allowed until some wall time has passed.
        assert!(matches!(pace(5, 5, Duration::ZERO, HZ), Pace::Wait(w) if w == PACE_SLACK));
    }
}
