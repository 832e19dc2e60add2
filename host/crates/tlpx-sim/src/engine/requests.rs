//! The command dispatcher: a client's request, once its turn has come, executed.

use tlpx_sim_protocol::tlp;
use tlpx_sim_protocol::{check_mmio, check_mmio_block, DmaAllocation, ErrorKind, Reply, Request, PROTOCOL_VERSION};

use super::{Blocked, DownTlp, Origin, Sim, TagKind, RC_ID};
use crate::hostmem::AllocError;
use crate::rc::{self, ReadCollector};

/// The answer to a request that needs a tag of the root complex when none is free.
const TAGS_IN_USE: &str = "all 256 tags of the root complex are in use; retry later";

impl Sim {
    pub(super) fn execute(&mut self, id: u64, req: Request) {
        let Some(c) = self.clients.get_mut(&id) else { return };
        // Executed: the client's reader may read its next frame.
        if let Some(credits) = &c.credits {
            credits.release();
        }
        if !c.hello {
            self.first_request(id, req);
            return;
        }
        match req {
            Request::Hello { .. } => self.error(id, ErrorKind::NotAllowed, "Hello was already sent on this connection".into()),
            Request::ConfigRead { offset, len } => self.config_read(id, offset, len),
            Request::ConfigWrite { offset, data } => self.config_write(id, offset, &data),
            Request::MmioRead { bar, offset, width } => {
                let allowed = self.mmio_allowed(bar, offset, width);
                self.mmio_read(id, allowed, offset, width, false);
            }
            Request::MmioReadBlock { bar, offset, len } => {
                let allowed = self.mmio_block_allowed(bar, offset, usize::from(len));
                self.mmio_read(id, allowed, offset, len, true);
            }
            Request::MmioWriteBlock { bar, offset, data } => {
                let allowed = self.mmio_block_allowed(bar, offset, data.len());
                self.mmio_write(id, allowed, |bar0| rc::mmio_write_block_tlp(RC_ID, bar0, offset, &data));
            }
            Request::SetLive { live } => self.set_live(id, live),
            Request::SetDmaFaults(faults) => {
                self.completer.set_faults(faults);
                self.info(&format!(
                    "client {id}: DMA read faults: UR every {}, CA every {}, poison every {}, drop every {} (0 = off)",
                    faults.ur_every, faults.ca_every, faults.poison_every, faults.drop_every
                ));
                self.reply(id, &Reply::DmaFaultsSet);
            }
            Request::MmioWrite { bar, offset, width, value } => {
                let allowed = self.mmio_allowed(bar, offset, width);
                self.mmio_write(id, allowed, |bar0| rc::mmio_write_tlp(RC_ID, bar0, offset, width, value));
            }
            Request::AllocDma { len, align } => self.alloc_dma(id, len, align),
            Request::FreeDma { id: aid } => match self.mem.alloc.free(id, aid) {
                Ok(_) => self.reply(id, &Reply::DmaFreed),
                Err(e) => self.error(id, ErrorKind::InvalidArgument, e),
            },
            Request::WaitIrq { vector_mask, timeout_cycles } => self.wait_irq(id, vector_mask, timeout_cycles),
            Request::Advance { cycles } => {
                if cycles == 0 {
                    self.reply(id, &Reply::Advanced { now: self.now });
                } else {
                    let deadline = self.now.saturating_add(cycles);
                    self.block(id, |serial| Blocked::Advance { serial }, Some(deadline));
                }
            }
            Request::InjectTlp { dwords, wait_cycles } => self.inject_tlp(id, dwords, wait_cycles),
            Request::Stats => {
                let s = self.stats();
                self.reply(id, &Reply::Stats(Box::new(s)));
            }
            Request::Shutdown => {
                self.info(&format!("client {id} asked for shutdown"));
                self.reply(id, &Reply::ShuttingDown);
                self.shutdown = true;
            }
        }
    }

    /// The first request of a connection, which must be a Hello of this protocol version.
    fn first_request(&mut self, id: u64, req: Request) {
        let Some(c) = self.clients.get_mut(&id) else { return };
        match req {
            Request::Hello { protocol_version, client_name } => {
                if protocol_version != PROTOCOL_VERSION {
                    let message = format!(
                        "client speaks protocol version {protocol_version}, this tlpx-sim speaks {PROTOCOL_VERSION}: use tlpx and tlpx-sim of the same build"
                    );
                    self.reply(id, &Reply::HelloRefused { sim_protocol_version: PROTOCOL_VERSION, message });
                    self.kill(id, format!("protocol version {protocol_version} != {PROTOCOL_VERSION}"));
                    return;
                }
                c.hello = true;
                let name: String = client_name.chars().take(200).collect();
                c.stats.name = name.clone();
                self.info(&format!("client {id} ({name}) connected"));
                let mut hello = self.p.hello.clone();
                hello.client_id = id;
                hello.link = *self.link.config();
                self.reply(id, &Reply::HelloOk(Box::new(hello)));
            }
            other => {
                self.error(id, ErrorKind::NotAllowed, format!("the first request must be Hello, not {}", other.name()));
                self.kill(id, format!("sent {} before Hello", other.name()));
            }
        }
    }

    /// A CPU load of `len` bytes at BAR0 `offset` (`block`: a block read, answered with
    /// MmioBlock), `allowed` by the BAR's bounds and the command register: an MRd with a tag
    /// of the root complex; the client waits for its completion.
    fn mmio_read(&mut self, id: u64, allowed: Result<(), (ErrorKind, String)>, offset: u64, len: u8, block: bool) {
        if let Some(c) = self.clients.get_mut(&id) {
            c.stats.mmio_reads += 1;
        }
        if let Err(e) = allowed {
            self.error(id, e.0, e.1);
            return;
        }
        let kind = TagKind::Mmio { offset, len, block, data: ReadCollector::new(usize::from(len)) };
        let Some((tag, _)) = self.alloc_tag(id, kind) else {
            self.error(id, ErrorKind::NotAllowed, TAGS_IN_USE.into());
            return;
        };
        let t = if block {
            rc::mmio_read_block_tlp(RC_ID, tag, self.view.bar0, offset, usize::from(len))
        } else {
            rc::mmio_read_tlp(RC_ID, tag, self.view.bar0, offset, len)
        };
        self.down_queue.push_back(DownTlp { dwords: t, origin: Origin::Mmio });
        self.block(id, |serial| Blocked::MmioRead { tag, serial }, None);
    }

    /// A CPU store, `allowed` as a load is, as the MWr `tlp` makes for BAR0's address: posted,
    /// no reply; a store that is not allowed is dropped with a warning.
    fn mmio_write(&mut self, id: u64, allowed: Result<(), (ErrorKind, String)>, tlp: impl FnOnce(u64) -> Vec<u32>) {
        if let Some(c) = self.clients.get_mut(&id) {
            c.stats.mmio_writes += 1;
        }
        if let Err((_, msg)) = allowed {
            self.reject_mmio_write(id, &msg);
            return;
        }
        let t = tlp(self.view.bar0);
        self.down_queue.push_back(DownTlp { dwords: t, origin: Origin::Mmio });
    }

    fn set_live(&mut self, id: u64, live: bool) {
        let Some(c) = self.clients.get_mut(&id) else { return };
        if c.live != live {
            c.live = live;
            c.stats.live = live;
            if live {
                self.live_claim_started(id);
            } else {
                self.live_claim_ended(id, "it gave its claim up");
            }
        }
        let reply = Reply::LiveSet { live, live_clients: self.live_clients, card_cycle: self.now };
        self.reply(id, &reply);
    }

    fn alloc_dma(&mut self, id: u64, len: u64, align: u64) {
        match self.mem.alloc.alloc(id, len, align) {
            Ok(a) => {
                if let Some(c) = self.clients.get_mut(&id) {
                    c.stats.dma_allocations += 1;
                }
                self.mem.zero(a.offset, a.len);
                let r = DmaAllocation { id: a.id, file_offset: a.offset, bus_addr: a.bus_addr, len: a.len };
                self.reply(id, &Reply::DmaAllocated(r));
            }
            Err(AllocError::Invalid(e)) => self.error(id, ErrorKind::InvalidArgument, e),
            Err(AllocError::OutOfMemory(e)) => self.error(id, ErrorKind::OutOfMemory, e),
        }
    }

    /// A TLP a CPU cannot produce, sent as it is; the client waits up to `wait_cycles` for
    /// the card to take a posted one, or for the completion of a non-posted one (which gets
    /// a tag of the root complex, its own tag put back in the completion).
    fn inject_tlp(&mut self, id: u64, mut dwords: Vec<u32>, wait_cycles: u64) {
        if let Some(c) = self.clients.get_mut(&id) {
            c.stats.injected_tlps += 1;
        }
        let kind = match tlp::check_framing(&dwords) {
            Ok(k) => k,
            Err(e) => {
                self.error(id, ErrorKind::InvalidArgument, e);
                return;
            }
        };
        if dwords.len() < 3 {
            self.error(id, ErrorKind::InvalidArgument, format!("a TLP needs at least 3 header DWs, got {}", dwords.len()));
            return;
        }
        if wait_cycles == 0 {
            self.error(id, ErrorKind::InvalidArgument, "wait_cycles must be at least 1 card cycle".into());
            return;
        }
        let deadline = Some(self.now.saturating_add(wait_cycles));
        if kind.is_non_posted() {
            let orig_tag = tlp::tag(dwords[1]);
            let Some((tag, _)) = self.alloc_tag(id, TagKind::Inject { orig_tag, collected: Vec::new() }) else {
                self.error(id, ErrorKind::NotAllowed, TAGS_IN_USE.into());
                return;
            };
            tlp::set_request_tag(&mut dwords, tag);
            self.down_queue.push_back(DownTlp { dwords, origin: Origin::Injected { waiter: None } });
            self.block(id, |serial| Blocked::InjectNonPosted { tag, serial }, deadline);
        } else {
            self.serial += 1;
            let token = self.serial;
            self.down_queue.push_back(DownTlp { dwords, origin: Origin::Injected { waiter: Some((id, token)) } });
            self.block(id, |serial| Blocked::InjectPosted { token, serial }, deadline);
        }
    }

    fn reject_mmio_write(&mut self, id: u64, msg: &str) {
        self.c.stats.rejected_mmio_writes += 1;
        if let Some(c) = self.clients.get_mut(&id) {
            c.stats.errors += 1;
        }
        self.warn(&format!("client {id}: MMIO write dropped: {msg}"));
    }

    fn mmio_allowed(&self, bar: u8, offset: u64, width: u8) -> Result<(), (ErrorKind, String)> {
        check_mmio(bar, offset, width, &self.p.hello.bar_sizes).map_err(|e| (ErrorKind::InvalidArgument, e))?;
        self.memory_enabled()
    }

    fn mmio_block_allowed(&self, bar: u8, offset: u64, len: usize) -> Result<(), (ErrorKind, String)> {
        check_mmio_block(bar, offset, len, &self.p.hello.bar_sizes).map_err(|e| (ErrorKind::InvalidArgument, e))?;
        self.memory_enabled()
    }

    fn memory_enabled(&self) -> Result<(), (ErrorKind, String)> {
        if !self.view.memory_enable {
            return Err((
                ErrorKind::NotAllowed,
                "memory space is disabled in the card's command register (config offset 0x4, bit 1): enable it with a config write".into(),
            ));
        }
        Ok(())
    }
}
