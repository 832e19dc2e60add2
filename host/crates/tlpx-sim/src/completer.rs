//! The root complex as completer of the card's memory reads: latency, ordering and fault
//! injection. Pure bookkeeping over TLP DWs and a clock (no card, no link), so it is tested
//! on its own.
//!
//! - **Latency.** A read's completions become ready `latency + uniform(0..=jitter)` card
//!   cycles after the read arrived (one draw per read from a ChaCha8 generator seeded with
//!   `--seed`), never before the previous read's: completions leave in the order the reads
//!   arrived (a FIFO root complex), a request's own CplDs in address order. Completions of
//!   different requests are never reordered, although PCIe would allow it (2.4.1): the
//!   card's requester must cope with any order, and a FIFO is what it sees from most root
//!   complexes under sequential load.
//! - **Tags.** The requester's tag (all 8 bits) and requester ID go back in every
//!   completion; the completer keeps no state per tag, so any number of reads may be
//!   outstanding, with any tags, even repeated ones.
//! - **Faults** ([`DmaFaults`]): every Nth read (counted from when the faults were set) gets
//!   a Cpl with UR or CA, poisoned CplDs, or no completion.

use std::collections::VecDeque;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use tlpx_model::link::LinkConfig;
use tlpx_sim_protocol::tlp;
use tlpx_sim_protocol::{DmaFault, DmaFaults, InjectedFaultCounts};

use crate::rc;

/// What became of one memory read of the card.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReadOutcome {
    /// Completed with data: `bytes` of host memory were sent (poisoned ones included).
    Completed { bytes: u32, poisoned: bool },
    /// The root complex may not read those bytes (bus mastering off, no allocation): UR.
    Refused,
    /// An injected fault other than poison: UR, CA or no completion.
    Injected(DmaFault),
}

/// Schedules the root complex's completions of the card's requests.
#[derive(Debug)]
pub struct ReadCompleter {
    completer_id: u16,
    latency_cycles: u64,
    jitter_cycles: u64,
    rng: ChaCha8Rng,
    last_ready: u64,
    faults: DmaFaults,
    /// Memory reads seen since the faults were set.
    reads: u64,
    /// Completions with the cycle from which they may go on the link, in order.
    pending: VecDeque<(u64, Vec<u32>)>,
    scratch: Vec<Vec<u32>>,
}

impl ReadCompleter {
    pub fn new(completer_id: u16, latency_cycles: u64, jitter_cycles: u64, seed: u64) -> ReadCompleter {
        ReadCompleter {
            completer_id,
            latency_cycles,
            jitter_cycles,
            rng: ChaCha8Rng::seed_from_u64(seed),
            last_ready: 0,
            faults: DmaFaults::default(),
            reads: 0,
            pending: VecDeque::new(),
            scratch: Vec::new(),
        }
    }

    /// Sets the fault injection; the next memory read is number 1.
    pub fn set_faults(&mut self, faults: DmaFaults) {
        self.faults = faults;
        self.reads = 0;
    }

    pub fn faults(&self) -> DmaFaults {
        self.faults
    }

    /// When the completions of a request arriving at `now` become ready.
    fn ready_time(&mut self, now: u64) -> u64 {
        let jitter = if self.jitter_cycles > 0 { self.rng.gen_range(0..=self.jitter_cycles) } else { 0 };
        let ready = (now + self.latency_cycles + jitter).max(self.last_ready);
        self.last_ready = ready;
        ready
    }

    /// A non-memory request of the card the root complex answers with one completion
    /// (`status_completion`), scheduled like a read's.
    pub fn complete_with_status(&mut self, now: u64, status: u8, req: &[u32]) {
        let c = rc::status_completion(self.completer_id, status, req);
        let ready = self.ready_time(now);
        self.pending.push_back((ready, c));
    }

    /// A memory read `req` of the card arrived at `now`. `readable`: the root complex may
    /// read every byte it asks for; `read(addr, buf)` fetches host memory. Injected faults
    /// are counted in `faults`.
    pub fn read(
        &mut self,
        now: u64,
        cfg: &LinkConfig,
        req: &[u32],
        readable: bool,
        read: impl FnMut(u64, &mut [u8]),
        faults: &mut InjectedFaultCounts,
    ) -> ReadOutcome {
        self.reads += 1;
        let fault = if self.faults.is_off() { None } else { self.faults.fault_for_read(self.reads) };
        if !readable {
            self.complete_with_status(now, tlp::CPL_UR, req);
            return ReadOutcome::Refused;
        }
        let poisoned = match fault {
            None => false,
            Some(DmaFault::Poisoned) => {
                faults.poisoned += 1;
                true
            }
            Some(DmaFault::UnsupportedRequest) => {
                faults.ur += 1;
                self.complete_with_status(now, tlp::CPL_UR, req);
                return ReadOutcome::Injected(DmaFault::UnsupportedRequest);
            }
            Some(DmaFault::CompleterAbort) => {
                faults.ca += 1;
                self.complete_with_status(now, tlp::CPL_CA, req);
                return ReadOutcome::Injected(DmaFault::CompleterAbort);
            }
            Some(DmaFault::Dropped) => {
                faults.dropped += 1;
                return ReadOutcome::Injected(DmaFault::Dropped);
            }
        };
        let ready = self.ready_time(now);
        let mut out = std::mem::take(&mut self.scratch);
        out.clear();
        rc::read_completions(cfg, self.completer_id, req, read, &mut out);
        for mut c in out.drain(..) {
            if poisoned {
                c[0] |= 1 << 14;
            }
            self.pending.push_back((ready, c));
        }
        self.scratch = out;
        ReadOutcome::Completed { bytes: rc::read_range(req).1, poisoned }
    }

    /// The next completion if it is ready at `now`.
    pub fn pop_ready(&mut self, now: u64) -> Option<Vec<u32>> {
        if self.pending.front().is_some_and(|(ready, _)| *ready <= now) {
            self.pending.pop_front().map(|(_, c)| c)
        } else {
            None
        }
    }

    /// No completion is waiting for its latency to pass.
    pub fn is_idle(&self) -> bool {
        self.pending.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tlpx_sim_protocol::tlp::Kind;

    fn cfg() -> LinkConfig {
        LinkConfig::new(2, 4, 256, 512, 64, false).expect("valid")
    }

    /// Runs the completer until every completion is out; returns (cycle, completion).
    fn drain(c: &mut ReadCompleter, from: u64) -> Vec<(u64, Vec<u32>)> {
        let mut out = vec![];
        let mut now = from;
        while !c.is_idle() {
            while let Some(t) = c.pop_ready(now) {
                out.push((now, t));
            }
            now += 1;
            assert!(now < from + 1_000_000, "completions never became ready");
        }
        out
    }

    #[test]
    fn many_outstanding_reads_with_high_tags_complete_in_arrival_order() {
        // 64 reads of 512 bytes with tags 128..191 (any tag values work), one per cycle.
        let mut c = ReadCompleter::new(0, 50, 7, 1);
        let mut faults = InjectedFaultCounts::default();
        for i in 0..64u32 {
            let tag = 128 + i as u8;
            let req = tlp::mem_read(0x0100, tag, 0x4000_0000 + 512 * u64::from(i), 128, 0xF, 0xF, i % 2 == 1);
            let o = c.read(u64::from(i), &cfg(), &req, true, |a, buf| buf.fill((a >> 9) as u8), &mut faults);
            assert_eq!(o, ReadOutcome::Completed { bytes: 512, poisoned: false });
        }
        let out = drain(&mut c, 0);
        assert_eq!(out.len(), 128, "two 256-byte CplDs per 512-byte read");
        let mut last = 0;
        for (k, (at, cpl)) in out.iter().enumerate() {
            let i = k / 2;
            assert_eq!(tlp::kind(cpl[0]), Kind::CplD);
            assert_eq!(tlp::cpl_tag(cpl[2]), 128 + i as u8, "completion {k}");
            assert_eq!(tlp::cpl_requester_id(cpl[2]), 0x0100);
            assert_eq!(tlp::cpl_byte_count(cpl[1]), if k % 2 == 0 { 512 } else { 256 });
            assert_eq!(cpl[3] & 0xFF, (0x4000_0000u32 / 512 + i as u32) & 0xFF, "data of read {i}");
            assert!(*at >= i as u64 + 50 && *at <= i as u64 + 50 + 7 || *at == last, "read {i} ready at {at}");
            assert!(*at >= last, "completions in arrival order");
            last = *at;
        }
        assert_eq!(faults, InjectedFaultCounts::default());
    }

    #[test]
    fn every_eighth_tag_value_works_including_repeats() {
        let mut c = ReadCompleter::new(0, 0, 0, 1);
        let mut f = InjectedFaultCounts::default();
        for tag in (0..=255u8).step_by(8).chain([255, 255, 0]) {
            let req = tlp::mem_read(0x0100, tag, 0x1000, 1, 0xF, 0, false);
            c.read(5, &cfg(), &req, true, |_, _| {}, &mut f);
        }
        let tags: Vec<u8> = drain(&mut c, 0).iter().map(|(_, t)| tlp::cpl_tag(t[2])).collect();
        let want: Vec<u8> = (0..=255u8).step_by(8).chain([255, 255, 0]).collect();
        assert_eq!(tags, want);
    }

    #[test]
    fn faults_hit_every_nth_read_deterministically() {
        let faults = DmaFaults { ur_every: 3, ca_every: 5, poison_every: 7, drop_every: 11 };
        let run = || {
            let mut c = ReadCompleter::new(0, 10, 3, 9);
            c.set_faults(faults);
            let mut f = InjectedFaultCounts::default();
            let mut outcomes = vec![];
            for n in 1..=77u64 {
                let req = tlp::mem_read(0x0100, n as u8, 0x2000, 64, 0xF, 0xF, false);
                outcomes.push(c.read(n, &cfg(), &req, true, |_, _| {}, &mut f));
            }
            (outcomes, f, drain(&mut c, 0))
        };
        let (outcomes, f, cpls) = run();
        for (i, o) in outcomes.iter().enumerate() {
            let n = i as u64 + 1;
            let want = if n.is_multiple_of(3) {
                ReadOutcome::Injected(DmaFault::UnsupportedRequest)
            } else if n.is_multiple_of(5) {
                ReadOutcome::Injected(DmaFault::CompleterAbort)
            } else if n.is_multiple_of(7) {
                ReadOutcome::Completed { bytes: 256, poisoned: true }
            } else if n.is_multiple_of(11) {
                ReadOutcome::Injected(DmaFault::Dropped)
            } else {
                ReadOutcome::Completed { bytes: 256, poisoned: false }
            };
            assert_eq!(*o, want, "read {n}");
        }
        // 1..=77: UR 25; CA 15 minus multiples of 15 (5) = 10; poison 11 minus multiples of
        // 21 (3) and 35 (2) = 6; drop 7 minus 33, 66 (UR), 55 (CA), 77 (poison) = 3.
        assert_eq!(f, InjectedFaultCounts { ur: 25, ca: 10, poisoned: 6, dropped: 3 });
        let ur = cpls.iter().filter(|(_, t)| tlp::kind(t[0]) == Kind::Cpl && tlp::cpl_status(t[1]) == tlp::CPL_UR).count();
        let ca = cpls.iter().filter(|(_, t)| tlp::cpl_status(t[1]) == tlp::CPL_CA).count();
        let poisoned = cpls.iter().filter(|(_, t)| tlp::poisoned(t[0])).count();
        let tags: Vec<u8> = cpls.iter().map(|(_, t)| tlp::cpl_tag(t[2])).collect();
        assert_eq!((ur, ca, poisoned), (25, 10, 6));
        for dropped in [11, 22, 44] {
            assert!(!tags.contains(&dropped), "dropped read {dropped} got a completion");
        }
        assert!(tags.contains(&33) && tags.contains(&55), "UR and CA win over drop");
        assert_eq!(cpls.len(), 77 - 3, "one completion per read (256 bytes = one CplD), none for dropped ones");
        // The same faults and the same stamps on a second run.
        let (outcomes2, f2, cpls2) = run();
        assert_eq!((outcomes, f), (outcomes2, f2));
        assert_eq!(cpls, cpls2);
    }

    #[test]
    fn setting_faults_restarts_the_count_and_refused_reads_count_too() {
        let mut c = ReadCompleter::new(0, 0, 0, 1);
        let mut f = InjectedFaultCounts::default();
        let req = tlp::mem_read(0x0100, 1, 0x2000, 1, 0xF, 0, false);
        c.read(0, &cfg(), &req, true, |_, _| {}, &mut f);
        c.set_faults(DmaFaults { ur_every: 2, ..Default::default() });
        assert_eq!(c.read(0, &cfg(), &req, false, |_, _| {}, &mut f), ReadOutcome::Refused);
        assert_eq!(c.read(0, &cfg(), &req, true, |_, _| {}, &mut f), ReadOutcome::Injected(DmaFault::UnsupportedRequest));
        c.set_faults(DmaFaults::default());
        assert!(matches!(c.read(0, &cfg(), &req, true, |_, _| {}, &mut f), ReadOutcome::Completed { .. }));
        assert_eq!(f.ur, 1);
    }
}
