//! The root complex's own non-posted requests (CPU loads, injected non-posted TLPs): their
//! tags, and the completions the card returns for them.

use std::cmp::Reverse;

use tlpx_sim_protocol::tlp::{self, Kind};
use tlpx_sim_protocol::{ErrorKind, Reply};

use super::{Blocked, Deadline, Sim, TagKind, TagUse};

impl Sim {
    pub(super) fn card_completion(&mut self, t: &[u32]) {
        let tag = tlp::cpl_tag(t[2]);
        let status = tlp::cpl_status(t[1]);
        if status != tlp::CPL_SC {
            self.c.stats.error_completions += 1;
        }
        let Some(mut used) = self.tags[usize::from(tag)].take() else {
            self.c.stats.unexpected_completions += 1;
            return;
        };
        match &mut used.kind {
            TagKind::Mmio { offset, len, block, data } => {
                let (offset, len, block) = (*offset, *len, *block);
                let ok = status == tlp::CPL_SC && tlp::kind(t[0]) == Kind::CplD;
                if ok && !data.add(t) {
                    // The card split its completion: wait for the rest.
                    self.tags[usize::from(tag)] = Some(used);
                    return;
                }
                self.free_tag_slot();
                let Some(client) = used.client else { return };
                let reply = if ok {
                    let TagKind::Mmio { data, .. } = used.kind else { return };
                    let mut bytes = data.into_bytes();
                    for (i, b) in bytes.iter_mut().enumerate() {
                        let addr = offset + i as u64;
                        for &(o, x) in &self.p.corrupt_read {
                            if o == addr & !3 {
                                *b ^= (x >> (8 * (addr & 3))) as u8;
                            }
                        }
                    }
                    if block {
                        Reply::MmioBlock { data: bytes, card_cycle: self.now }
                    } else {
                        let mut v = [0u8; 8];
                        v[..bytes.len().min(8)].copy_from_slice(&bytes[..bytes.len().min(8)]);
                        Reply::MmioValue { value: u64::from_le_bytes(v), card_cycle: self.now }
                    }
                } else {
                    let what = if status == tlp::CPL_SC {
                        "a completion without data".to_string()
                    } else {
                        format!("completion status {}", tlp::status_name(status))
                    };
                    Reply::Error {
                        kind: status_kind(status),
                        message: format!("the card answered the {len}-byte read of BAR0 offset {offset:#x} with {what}"),
                    }
                };
                self.unblock(client, reply);
            }
            TagKind::Inject { orig_tag, collected } => {
                let start = collected.len();
                collected.extend_from_slice(t);
                tlp::set_cpl_tag(&mut collected[start..], *orig_tag);
                let len_bytes = 4 * tlp::payload_dw(t[0]) as u32;
                let offset_in_dw = u32::from(tlp::cpl_lower_address(t[2]) & 3);
                let last = status != tlp::CPL_SC || tlp::payload_dw(t[0]) == 0 || tlp::cpl_byte_count(t[1]) + offset_in_dw <= len_bytes;
                if !last {
                    self.tags[usize::from(tag)] = Some(used);
                    return;
                }
                self.free_tag_slot();
                let TagKind::Inject { collected, .. } = used.kind else { return };
                let Some(client) = used.client else { return };
                let blocked = self.clients.get(&client).and_then(|c| c.blocked);
                if let Some(Blocked::InjectNonPosted { tag: bt, .. }) = blocked {
                    if bt == tag {
                        self.unblock(client, Reply::InjectCompletion { dwords: collected, card_cycle: self.now });
                    }
                }
            }
        }
    }

    pub(super) fn free_tag_slot(&mut self) {
        self.tags_used -= 1;
    }

    pub(super) fn alloc_tag(&mut self, client: u64, kind: TagKind) -> Option<(u8, u64)> {
        if self.tags_used >= 256 {
            return None;
        }
        loop {
            let t = self.next_tag;
            self.next_tag = self.next_tag.wrapping_add(1);
            if self.tags[usize::from(t)].is_none() {
                self.serial += 1;
                let serial = self.serial;
                self.tags[usize::from(t)] = Some(TagUse { client: Some(client), serial, kind });
                self.tags_used += 1;
                let deadline = self.now.saturating_add(self.p.completion_timeout_cycles);
                self.deadlines.push(Reverse((deadline, Deadline::Tag { tag: t, serial })));
                return Some((t, serial));
            }
        }
    }
}

fn status_kind(status: u8) -> ErrorKind {
    match status {
        tlp::CPL_UR => ErrorKind::UnsupportedRequest,
        tlp::CPL_CA => ErrorKind::CompleterAbort,
        _ => ErrorKind::OtherCompletionStatus,
    }
}
