//! One card cycle: TLPs of the root complex go down the link and into the card beat by beat;
//! the card's TLPs and MSIs come up the link beat by beat and are handed on when they have
//! fully arrived.

use std::cmp::Reverse;

use tlpx_sim_protocol::tlp;
use tlpx_sim_protocol::Reply;

use super::{Blocked, DownTlp, Origin, Sim, QUIET_GRACE_CYCLES};
use crate::card::MAX_DWORDS;
use crate::link::{RX_BUFFER_TLPS, TX_BUFFER_TLPS};
use crate::rc;

impl Sim {
    #[inline]
    pub(super) fn step(&mut self) {
        // Host to card: completions whose latency has passed join the transmit queue; TLPs
        // go on the wire while the direction is free and the card's receive buffer has room;
        // a TLP that has fully arrived is presented to the card beat by beat.
        while let Some(dwords) = self.completer.pop_ready(self.now) {
            self.down_queue.push_back(DownTlp { dwords, origin: Origin::Completion });
        }
        while !self.down_queue.is_empty()
            && self.link.down.is_free(self.now)
            && self.down_wire.len() + usize::from(self.down_cur.is_some()) < RX_BUFFER_TLPS
        {
            self.start_down();
        }
        if self.down_cur.is_none() && self.down_wire.front().is_some_and(|(arrival, _)| *arrival <= self.now) {
            if let Some((_, t)) = self.down_wire.pop_front() {
                self.down_cur = Some(t);
                self.down_pos = 0;
            }
        }
        if self.down_cur.is_some() {
            self.load_rx_beat();
        } else {
            self.inp.rx_valid = 0;
        }
        // Card to host: ready while the transmit buffer has room or a TLP is in its middle
        // (a TLP is never cut); a TLP goes on the wire from its first beat, as soon as the
        // direction is free. MSIs queue in the same buffer.
        let room = self.up_arrivals.len() + self.msi_arrivals.len() < TX_BUFFER_TLPS;
        self.inp.tx_ready = u8::from(self.up_in_tlp || room);
        self.inp.msi_ready = u8::from(!self.up_in_tlp && room);

        self.card.cycle(&self.inp, &mut self.out);
        self.now += 1;

        if self.inp.rx_valid != 0 && self.out.rx_ready != 0 {
            self.rx_beat_taken();
        }
        if self.out.tx_valid != 0 && self.inp.tx_ready != 0 {
            self.tx_beat();
        }
        if self.out.msi_valid != 0 && self.inp.msi_ready != 0 {
            self.msi_taken(u32::from(self.out.msi_vector));
        }
        while self.up_arrivals.front().is_some_and(|(t, _)| *t <= self.now) {
            if let Some((_, dwords)) = self.up_arrivals.pop_front() {
                self.card_tlp(&dwords);
                self.give(dwords);
            }
        }
        while self.msi_arrivals.front().is_some_and(|(t, _)| *t <= self.now) {
            if let Some((_, vector)) = self.msi_arrivals.pop_front() {
                self.deliver_msi(vector);
            }
        }
        while self.deadlines.peek().is_some_and(|Reverse((t, _))| *t <= self.now) {
            if let Some(Reverse((_, d))) = self.deadlines.pop() {
                self.deadline(d);
            }
        }
        if (self.p.free_run || self.clients.is_empty()) && self.traffic_in_flight() {
            self.quiet_until = self.now + QUIET_GRACE_CYCLES;
        }
    }

    fn start_down(&mut self) {
        let Some(t) = self.down_queue.pop_front() else { return };
        let dw0 = t.dwords[0];
        let transfer = self.link.send_down(self.now, tlp::header_dw(dw0), tlp::payload_dw(dw0));
        let k = tlp::kind(dw0);
        self.c.down[k as usize] += 1;
        self.c.down_dir.tlps += 1;
        self.c.down_dir.wire_bytes += u64::from(transfer.wire_bytes);
        self.c.down_dir.payload_bytes += 4 * tlp::payload_dw(dw0) as u64;
        self.down_wire.push_back((transfer.arrival_cycle(), t));
    }

    #[inline]
    fn load_rx_beat(&mut self) {
        let Some(cur) = &self.down_cur else { return };
        let n = cur.dwords.len();
        let end = (self.down_pos + self.dw_per_beat).min(n);
        let beat = &cur.dwords[self.down_pos..end];
        self.inp.rx_dat = [0; MAX_DWORDS];
        self.inp.rx_dat[..beat.len()].copy_from_slice(beat);
        self.inp.rx_be = if beat.len() >= 8 { u32::MAX } else { (1u32 << (4 * beat.len())) - 1 };
        self.inp.rx_valid = 1;
        self.inp.rx_first = u8::from(self.down_pos == 0);
        self.inp.rx_last = u8::from(end == n);
    }

    fn rx_beat_taken(&mut self) {
        let Some(cur) = &self.down_cur else { return };
        self.down_pos += self.dw_per_beat;
        if self.down_pos < cur.dwords.len() {
            return;
        }
        let Some(done) = self.down_cur.take() else { return };
        let t = &done.dwords;
        match done.origin {
            Origin::Mmio => {
                if tlp::payload_dw(t[0]) > 0 {
                    let bytes = rc::write_range(t).map_or(0, |(lo, hi)| hi - lo);
                    self.c.traffic.mmio_writes.add(t[0], bytes);
                } else {
                    self.c.traffic.mmio_reads.add(t[0], u64::from(rc::read_range(t).1));
                }
            }
            Origin::Completion => self.c.traffic.host_completions.add(t),
            Origin::Injected { waiter } => {
                self.c.traffic.injected_tlps += 1;
                if let Some((client, token)) = waiter {
                    let blocked = self.clients.get(&client).and_then(|c| c.blocked);
                    if let Some(Blocked::InjectPosted { token: t, .. }) = blocked {
                        if t == token {
                            self.unblock(client, Reply::InjectDelivered { card_cycle: self.now });
                        }
                    }
                }
            }
        }
        self.give(done.dwords);
    }

    fn tx_beat(&mut self) {
        let o = self.out;
        if o.tx_first != 0 {
            if self.up_in_tlp {
                self.c.stats.malformed_card_tlps += 1;
            }
            self.up_buf.clear();
            self.up_in_tlp = true;
            let dw0 = o.tx_dat[0];
            let t = self.link.send_up(self.now - 1, tlp::header_dw(dw0), tlp::payload_dw(dw0));
            self.up_end = t.end;
            let k = tlp::kind(dw0);
            self.c.up[k as usize] += 1;
            self.c.up_dir.tlps += 1;
            self.c.up_dir.wire_bytes += u64::from(t.wire_bytes);
            self.c.up_dir.payload_bytes += 4 * tlp::payload_dw(dw0) as u64;
        } else if !self.up_in_tlp {
            self.c.stats.malformed_card_tlps += 1;
            return;
        }
        for i in 0..self.dw_per_beat {
            if (o.tx_be >> (4 * i)) & 0xF != 0 && self.up_buf.len() < 4 + 1024 {
                self.up_buf.push(o.tx_dat[i]);
            }
        }
        if o.tx_last != 0 {
            self.up_in_tlp = false;
            if self.up_buf.first().is_none_or(|&dw0| self.up_buf.len() != tlp::total_dw(dw0)) {
                self.c.stats.malformed_card_tlps += 1;
                return;
            }
            // The wire cannot finish before the card handed over the last beat (a datapath
            // slower than the link).
            let end = self.up_end.max(self.now as f64);
            if end > self.link.up.free_at {
                self.link.up.free_at = end;
            }
            let arrival = (end.ceil() as u64).max(self.now);
            let mut v = self.take();
            v.extend_from_slice(&self.up_buf);
            self.up_arrivals.push_back((arrival, v));
        }
    }

    fn msi_taken(&mut self, vector: u32) {
        if !self.view.msi_enable {
            self.c.stats.msis_while_disabled += 1;
            return;
        }
        // The hard IP writes Message Data | vector to Message Address: a MWr on the link.
        let header = if self.view.msi_address >> 32 != 0 { 4 } else { 3 };
        let t = self.link.send_up(self.now - 1, header, 1);
        self.c.msi_writes += 1;
        self.c.traffic.card_msis += 1;
        self.c.up_dir.tlps += 1;
        self.c.up_dir.wire_bytes += u64::from(t.wire_bytes);
        self.c.up_dir.payload_bytes += 4;
        let vector = vector & (self.view.msi_vectors - 1);
        self.msi_arrivals.push_back(((t.end.ceil() as u64).max(self.now), vector));
    }

    fn take(&mut self) -> Vec<u32> {
        self.pool.pop().unwrap_or_else(|| Vec::with_capacity(64))
    }

    fn give(&mut self, mut v: Vec<u32>) {
        if self.pool.len() < 256 {
            v.clear();
            self.pool.push(v);
        }
    }
}
