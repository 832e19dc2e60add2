//! The card's requests: DMA reads (completed by the root complex's completer, with fault
//! injection) and writes of host memory, or of the guest's memory under vfio-user, behind
//! the IOMMU's check; the requests the root complex does not serve.

use tlpx_sim_protocol::tlp::{self, Kind};

use super::{Sim, FAULT_LOG_LIMIT};
use crate::completer::ReadOutcome;
use crate::rc;

impl Sim {
    pub(super) fn card_tlp(&mut self, t: &[u32]) {
        let k = tlp::kind(t[0]);
        match k {
            Kind::MRd32 | Kind::MRd64 => self.card_read(t),
            Kind::MWr32 | Kind::MWr64 => self.card_write(t),
            Kind::Cpl | Kind::CplD | Kind::CplLk | Kind::CplDLk => {
                self.c.traffic.card_completions.add(t);
                self.card_completion(t);
            }
            Kind::Msg | Kind::MsgD => {
                self.c.traffic.card_messages += 1;
                self.c.stats.unsupported_card_requests += 1;
            }
            Kind::Other => {
                self.c.traffic.card_other += 1;
                self.c.stats.unsupported_card_requests += 1;
            }
            _ => {
                // MRdLk, I/O, configuration, atomics: the root complex does not serve them.
                self.c.traffic.card_other += 1;
                self.c.stats.unsupported_card_requests += 1;
                self.completer.complete_with_status(self.now, tlp::CPL_UR, t);
            }
        }
    }

    fn card_read(&mut self, t: &[u32]) {
        let (start, count) = rc::read_range(t);
        self.c.traffic.card_reads.add(t[0], u64::from(count));
        if self.guest.is_some() {
            self.card_read_guest(t, start, count);
            return;
        }
        // The IOMMU: the read must lie in one live allocation (a zero-length read reads nothing).
        let target = if self.view.bus_master_enable { self.mem.translate(start, u64::from(count)) } else { None };
        let readable = self.view.bus_master_enable && (count == 0 || target.is_some());
        let mem = &self.mem;
        let outcome = self.completer.read(
            self.now,
            self.link.config(),
            t,
            readable,
            |addr, buf| match &target {
                Some(a) => mem.read(a, addr, buf),
                None => buf.fill(0),
            },
            &mut self.c.traffic.faults,
        );
        self.card_read_done(outcome, start, count);
    }

    fn card_write(&mut self, t: &[u32]) {
        // With MSI-X on, a write into the interrupt window is a vector's message, as the
        // host's interrupt controller takes it; it reaches no memory.
        if self.view.msix_enable {
            if let Some(vector) = rc::msix_message(t) {
                self.c.stats.msix_messages += 1;
                self.deliver_msi(vector);
                return;
            }
        }
        let range = rc::write_range(t);
        self.c.traffic.card_writes.add(t[0], range.map_or(0, |(lo, hi)| hi - lo));
        if tlp::poisoned(t[0]) {
            self.c.stats.dma_poisoned_writes += 1;
            return;
        }
        let Some((lo, hi)) = range else { return };
        if let Some(guest) = &self.guest {
            // vfio-user: the guest's DMA_MAP'd memory, locked for this TLP (DMA_UNMAP waits).
            let view = guest.view();
            let target = if self.view.bus_master_enable { view.find(lo, hi - lo, true) } else { None };
            let Some(s) = target else {
                drop(view);
                self.c.stats.dma_write_faults += 1;
                self.iommu_fault(false, lo, hi - lo);
                return;
            };
            self.c.stats.dma_write_bytes += hi - lo;
            rc::for_each_written_byte(t, |addr, b| view.write_byte(&s, addr, b));
            return;
        }
        let target = if self.view.bus_master_enable { self.mem.translate(lo, hi - lo) } else { None };
        let Some(a) = target else {
            self.c.stats.dma_write_faults += 1;
            self.iommu_fault(false, lo, hi - lo);
            return;
        };
        self.c.stats.dma_write_bytes += hi - lo;
        let mem = &mut self.mem;
        rc::for_each_written_byte(t, |addr, b| mem.write_byte(&a, addr, b));
    }

    /// A card read of guest memory (vfio-user): as [`Sim::card_read`], through the DMA_MAP'd
    /// regions instead of the allocations, read-locked while the completion's data is taken.
    fn card_read_guest(&mut self, t: &[u32], start: u64, count: u32) {
        let Some(guest) = &self.guest else { return };
        let view = guest.view();
        let target = if self.view.bus_master_enable { view.find(start, u64::from(count), false) } else { None };
        let readable = self.view.bus_master_enable && (count == 0 || target.is_some());
        let outcome = self.completer.read(
            self.now,
            self.link.config(),
            t,
            readable,
            |addr, buf| match &target {
                Some(s) => view.read(s, addr, buf),
                None => buf.fill(0),
            },
            &mut self.c.traffic.faults,
        );
        drop(view);
        self.card_read_done(outcome, start, count);
    }

    /// Counts a card read of `count` bytes at `start` as the completer answered it (from host
    /// or guest memory alike); a refused one is an IOMMU fault.
    fn card_read_done(&mut self, outcome: ReadOutcome, start: u64, count: u32) {
        match outcome {
            ReadOutcome::Completed { bytes, .. } => self.c.stats.dma_read_bytes += u64::from(bytes),
            ReadOutcome::Refused => {
                self.c.stats.dma_read_faults += 1;
                self.iommu_fault(true, start, u64::from(count));
            }
            ReadOutcome::Injected(_) => {}
        }
    }

    /// Counts a card read (`read`) or write that the IOMMU refused, already counted as a
    /// fault, as one to freed memory when it is, and logs the first few, as an IOMMU's fault
    /// log would.
    fn iommu_fault(&mut self, read: bool, addr: u64, len: u64) {
        let why = if !self.view.bus_master_enable {
            "bus mastering is off"
        } else if self.guest.is_some() {
            "outside every region the guest DMA-mapped (vfio-user DMA_MAP), or a write to a read-only one"
        } else if self.mem.alloc.was_freed(addr, len) {
            if read {
                self.c.stats.dma_read_faults_freed += 1;
            } else {
                self.c.stats.dma_write_faults_freed += 1;
            }
            "memory its owner freed (or left behind when it disconnected)"
        } else {
            "no allocation there"
        };
        self.fault_logs += 1;
        if self.fault_logs <= FAULT_LOG_LIMIT {
            self.info(&format!(
                "IOMMU fault at card cycle {}: card DMA {} of {len} bytes at bus address {addr:#x}: {why}; {}{}",
                self.now,
                if read { "read" } else { "write" },
                if read { "answered with UR" } else { "dropped" },
                if self.fault_logs == FAULT_LOG_LIMIT { " (further faults are only counted: Stats)" } else { "" }
            ));
        }
    }
}
