//! The card's MSIs, once they have crossed the link: to the clients waiting for them
//! (WaitIrq), else queued per client until they ask.

use tlpx_sim_protocol::{ErrorKind, Reply};

use super::{Blocked, Sim, MAX_QUEUED_IRQS};

impl Sim {
    pub(super) fn deliver_msi(&mut self, vector: u32) {
        self.c.stats.msis += 1;
        let now = self.now;
        let mut wake = Vec::new();
        for (&id, c) in self.clients.iter_mut() {
            if !c.hello || c.dead {
                continue;
            }
            match c.blocked {
                Some(Blocked::WaitIrq { mask, .. }) if mask & (1u32 << (vector & 31)) != 0 => {
                    wake.push(id);
                }
                _ => {
                    if c.irqs.len() >= MAX_QUEUED_IRQS {
                        c.irqs.pop_front();
                        c.stats.irqs_dropped += 1;
                    }
                    c.irqs.push_back((vector, now));
                }
            }
        }
        for id in wake {
            if let Some(c) = self.clients.get_mut(&id) {
                c.stats.irqs_delivered += 1;
            }
            self.unblock(id, Reply::Irq { vector, card_cycle: now });
        }
    }

    /// WaitIrq: an interrupt of `vector_mask` already queued for the client, else the client
    /// waits up to `timeout_cycles` for one (0: does not wait).
    pub(super) fn wait_irq(&mut self, id: u64, vector_mask: u32, timeout_cycles: u64) {
        if vector_mask == 0 {
            self.error(id, ErrorKind::InvalidArgument, "vector_mask 0 selects no vector: set bit n to wait for vector n (0..31)".into());
            return;
        }
        let Some(c) = self.clients.get_mut(&id) else { return };
        if let Some(pos) = c.irqs.iter().position(|(v, _)| vector_mask & (1u32 << (v & 31)) != 0) {
            let (vector, card_cycle) = c.irqs.remove(pos).unwrap_or((0, 0));
            c.stats.irqs_delivered += 1;
            self.reply(id, &Reply::Irq { vector, card_cycle });
        } else if timeout_cycles == 0 {
            self.reply(id, &Reply::IrqTimedOut { card_cycle: self.now });
        } else {
            let deadline = self.now.saturating_add(timeout_cycles);
            self.block(id, |serial| Blocked::WaitIrq { mask: vector_mask, serial }, Some(deadline));
        }
    }
}
