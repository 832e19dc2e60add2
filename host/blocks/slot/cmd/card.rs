//! The card's side of a slot session: the script's DMA buffers, the spy's capture, the slot's
//! DMA counters and MSI, and the slot's lease (owning it, and waiting for it to stand still).

use super::*;

/// zlib's CRC-32 (the one tlpx-script uses for its images).
pub(super) fn crc32(data: &[u8]) -> u32 {
    tlpx_script::image::crc32(data)
}

pub(super) struct Buffers {
    pub(super) held: Vec<(String, DmaBuffer)>,
    /// Each buffer's CRC-32 as filled.
    pub(super) crcs: Vec<u32>,
}

impl Buffers {
    /// Allocates and fills every buffer of `script`, in the script's order (the random fills
    /// take the seeded generator's bytes in that order), before the session writes anything to
    /// the card: a backend that cannot allocate (LitePCIe's driver owns its buffers) or a host
    /// out of DMA memory stops the run with the card untouched. On an error the buffers
    /// already allocated are freed.
    pub(super) fn allocate(card: &mut Card, script: &Script, rng: &mut rand_chacha::ChaCha8Rng) -> anyhow::Result<Buffers> {
        let mut buffers = Buffers { held: Vec::new(), crcs: Vec::new() };
        for step in &script.steps {
            let Op::Buffer { name, size, fill } = &step.op else { continue };
            let data: Vec<u8> = match fill {
                Fill::Random => {
                    let mut d = vec![0u8; *size];
                    rng.fill_bytes(&mut d);
                    d
                }
                Fill::Zero => vec![0; *size],
                Fill::Byte(b) => vec![*b; *size],
            };
            let allocated = card.device().alloc_dma(*size).map_err(anyhow::Error::new).and_then(|buf| match buf.write_bytes(0, &data) {
                Ok(()) => Ok(buf),
                Err(e) => {
                    let _ = card.device().free_dma(buf);
                    Err(e.into())
                }
            });
            match allocated {
                Ok(buf) => {
                    buffers.held.push((name.clone(), buf));
                    buffers.crcs.push(crc32(&data));
                }
                Err(e) => {
                    buffers.free(card);
                    return Err(e.context(format!(
                        "{} `{}`: allocating the buffer (before anything was written to the card)",
                        step.place, step.text
                    )));
                }
            }
        }
        Ok(buffers)
    }

    pub(super) fn index(&self, name: &str) -> anyhow::Result<usize> {
        self.held.iter().position(|(n, _)| n == name).ok_or_else(|| anyhow!("internal: buffer {name} was not allocated"))
    }

    /// Frees every buffer; the failures as text.
    pub(super) fn free(&mut self, card: &mut Card) -> Vec<String> {
        let mut errors = Vec::new();
        for (name, buf) in self.held.drain(..) {
            if let Err(e) = card.device().free_dma(buf) {
                errors.push(format!("{name}: {e}"));
            }
        }
        self.crcs.clear();
        errors
    }

    pub(super) fn get(&self, i: usize) -> &DmaBuffer {
        &self.held[i].1
    }
    pub(super) fn bytes(&self, i: usize, len: usize) -> anyhow::Result<Vec<u8>> {
        let mut out = vec![0u8; len];
        self.held[i].1.read_bytes(0, &mut out)?;
        Ok(out)
    }
}

/// The spy capture of `--spy`: its trace and the capture itself.
pub(super) struct SpySession {
    pub(super) path: PathBuf,
    pub(super) writer: TraceWriter<std::io::BufWriter<std::fs::File>>,
    pub(super) capture: Capture,
    pub(super) batch: Vec<[u8; RECORD_BYTES]>,
}

impl SpySession {
    pub(super) fn poll(&mut self, card: &mut Card) -> anyhow::Result<()> {
        self.capture.poll(card, &mut self.batch)?;
        for raw in self.batch.drain(..) {
            self.writer.write_raw(&raw).map_err(|e| anyhow!("writing {}: {e}", self.path.display()))?;
        }
        Ok(())
    }

    /// Stops the capture and finishes the trace; the records written and lost.
    pub(super) fn finish(mut self, card: &mut Card) -> anyhow::Result<(u64, u64)> {
        let end = self.capture.stop_into(card, &mut self.batch);
        for raw in self.batch.drain(..) {
            self.writer.write_raw(&raw).map_err(|e| anyhow!("writing {}: {e}", self.path.display()))?;
        }
        let end = match end {
            Ok(end) => end,
            Err(e) => {
                let _ = self.writer.finish_without_footer();
                return Err(e.into());
            }
        };
        let written = self.writer.records_written();
        self.writer
            .finish(
                end.next_sequence,
                Footer { records_created: end.records_created, records_lost: end.records_lost, trigger_sequence: None },
            )
            .map_err(|e| anyhow!("finishing {}: {e}", self.path.display()))?;
        Ok((written, end.records_lost))
    }
}

/// The slot block's counters (to report what the session made the accelerator do).
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub(super) struct SlotCounters {
    pub(super) dma_reads: u64,
    pub(super) dma_writes: u64,
    pub(super) dma_read_bytes: u64,
    pub(super) dma_write_bytes: u64,
    pub(super) dma_errors: u64,
    pub(super) irqs: u64,
}

pub(super) fn slot_counters(card: &mut Card) -> anyhow::Result<SlotCounters> {
    Ok(SlotCounters {
        dma_reads: card.read(slot_regs::DMA_READS)?,
        dma_writes: card.read(slot_regs::DMA_WRITES)?,
        dma_read_bytes: card.read(slot_regs::DMA_READ_BYTES)?,
        dma_write_bytes: card.read(slot_regs::DMA_WRITE_BYTES)?,
        dma_errors: card.read(slot_regs::DMA_ERRORS)?,
        irqs: card.read(slot_regs::IRQS)?,
    })
}

impl SlotCounters {
    pub(super) fn since(&self, before: &SlotCounters) -> SlotCounters {
        let d = |a: u64, b: u64| a.wrapping_sub(b) & 0xFFFF_FFFF;
        SlotCounters {
            dma_reads: d(self.dma_reads, before.dma_reads),
            dma_writes: d(self.dma_writes, before.dma_writes),
            dma_read_bytes: d(self.dma_read_bytes, before.dma_read_bytes),
            dma_write_bytes: d(self.dma_write_bytes, before.dma_write_bytes),
            dma_errors: d(self.dma_errors, before.dma_errors),
            irqs: d(self.irqs, before.irqs),
        }
    }
}

/// Whether the accelerator is working (the DUT busy, its DMA or interrupt in flight).
pub(super) fn slot_busy(card: &mut Card) -> anyhow::Result<bool> {
    Ok(slot_regs::status::BUSY.get(card.read(slot_regs::STATUS)?) != 0)
}

/// Wait slices the end of a session gives a command still running to end (100 ms of card time).
pub(super) const QUIET_SLICES: u32 = 2000;

/// The MSI of the slot: vector 0 with one vector granted (LitePCIe's behaviour: the source is
/// the bit of `pcie_msi.vector`), the slot's own vector with several (`msi::wait_mask`).
pub(super) const MSI_WAIT_MASK: u32 = msi::wait_mask(tlpx_regs::constants::MSI_SLOT as u32);

pub(super) fn slot_bit() -> u64 {
    1 << tlpx_regs::constants::MSI_SLOT
}

/// What a session owns and changed on the card before its first line, to give back at its end.
pub(super) struct Owned {
    /// This session holds the slot's lease (not with --force while another session held it).
    pub(super) holds_slot: bool,
    /// The other blocks its `write` lines write into, held for the session.
    pub(super) others: Vec<Block>,
    /// The slot's MSI enable as the session found it (a script that waits for interrupts
    /// turns it on), put back at the end.
    pub(super) msi: Option<msi::Found>,
    /// What taking the slot did, said at the start.
    pub(super) notes: Vec<String>,
}

impl Owned {
    pub(super) fn restore(&self, card: &mut Card) -> anyhow::Result<()> {
        if let Some(found) = &self.msi {
            found.restore(card)?;
        }
        Ok(())
    }
}

/// Waits at most `slices` wait slices of card time for `slot.status.busy` to fall.
pub(super) fn wait_slot_quiet(card: &mut Card, slices: u32) -> anyhow::Result<bool> {
    for _ in 0..slices {
        if !slot_busy(card)? {
            return Ok(true);
        }
        card.idle(WAIT_SLICE)?;
    }
    Ok(!slot_busy(card)?)
}

/// Takes the slot for a session: its lease (a live owner refused, naming it, unless `force`;
/// a dead one's command fenced and waited for, said), the leases of the blocks the script's
/// `write` lines write into, an accelerator that is still busy with a command no one owns
/// made quiet (the session never inherits another's command), and, for a script that waits
/// for interrupts, the slot's MSI enabled, its latched bit and the queued interrupts dropped.
pub(super) fn own_the_slot(card: &mut Card, script: &Script, force: bool, waits_irq: bool) -> anyhow::Result<Owned> {
    let mut owned = Owned { holds_slot: false, others: Vec::new(), msi: None, notes: Vec::new() };
    match lease::owner(card, Block::Slot)? {
        Some(o) if o.process != OwnerProcess::Gone => {
            if !force {
                return Err(anyhow::Error::new(tlpx_device::DeviceError::Busy { block: Block::Slot, owner: o.describe() }).context(
                    format!("another session drives the accelerator; --force runs anyway (it breaks {})", Block::Slot.force_breaks()),
                ));
            }
            eprintln!("tlpx: warning: --force: running while {} owns the slot: this breaks {}", o.describe(), Block::Slot.force_breaks());
        }
        _ => {
            card.claim(Block::Slot)?;
            owned.holds_slot = true;
        }
    }
    owned.notes.extend(card.take_notes());
    let blocks: Vec<Block> = script
        .steps
        .iter()
        .filter_map(|s| match &s.op {
            Op::Write { target, .. } => Some(reg::write_blocks(target.register())),
            _ => None,
        })
        .flatten()
        .filter(|b| *b != Block::Slot)
        .fold(Vec::new(), |mut all, b| {
            if !all.contains(&b) {
                all.push(b);
            }
            all
        });
    owned.others = reg::write_leases(card, &blocks, "the script's write lines", force)?;
    if owned.holds_slot && slot_busy(card)? && !wait_slot_quiet(card, QUIET_SLICES)? {
        // A command nobody owns (a forced register write, a driver's): fenced by a lease
        // ending while the DUT is busy, as a dead owner's is, then waited for.
        card.release(Block::Slot)?;
        card.claim(Block::Slot)?;
        if !wait_slot_quiet(card, QUIET_SLICES)? {
            bail!(
                "the accelerator is busy (slot.status.busy) with a command this session did not start, and stays busy with its DMA fenced: \
                 reset the card (restart tlpx-sim) before running a session"
            );
        }
        owned.notes.push("the accelerator was busy with a command no session owned: its DMA was fenced and it is quiet now".into());
    }
    if waits_irq {
        // The slot's MSI must be enabled (it is at reset; another tool may have masked it), its
        // latched bit clear, and interrupts queued before the session dropped.
        let bit = tlpx_regs::constants::MSI_SLOT as u32;
        let found = msi::switch(card, bit, true)?;
        if !found.was_on {
            owned.notes.push("pcie_msi.enable had the slot's bit off: turned on for the session".into());
        }
        owned.msi = Some(found);
        msi::clear_latched(card, bit)?;
        while card.device().wait_interrupt(MSI_WAIT_MASK, Duration::ZERO)?.is_some() {}
    }
    Ok(owned)
}

/// Starts `--spy`'s capture: the trace's header (with the DUT's registers from --regs) and the
/// spy's capture of the whole session.
pub(super) fn start_spy(
    session: &mut Session,
    path: &std::path::Path,
    loaded: &reg::Loaded,
    info: &crate::slot::SlotInfo,
) -> anyhow::Result<SpySession> {
    {
        let card = &mut session.card;
        card.require(Feature::Spy, "spy")?;
    }
    let time_mode = session.environment.time_mode_at_start().unwrap_or(tlpx_device::TimeMode::Hardware);
    let (filters, trigger) = (Filters::default(), Trigger::default());
    let (mut header, _) = crate::cmd::spy::trace_header(session, &filters, &trigger, time_mode)?;
    // The DUT's registers from --regs: the trace names its window's accesses by them.
    header.card.slot_registers = reg::slot_registers(&loaded.map, &info.dut_name);
    let (mps, _) = session.mps_mrrs();
    let card = &mut session.card;
    let mut writer = TraceWriter::create(path, &header).map_err(|e| anyhow!("creating {}: {e}", path.display()))?;
    writer.flush().map_err(|e| anyhow!("writing {}: {e}", path.display()))?;
    let capture = Capture::start_with_mps(card, SPY_RING_RECORDS, mps, &filters, &trigger)?;
    Ok(SpySession { path: path.to_path_buf(), writer, capture, batch: Vec::new() })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crc32_is_zlib_s() {
        // zlib.crc32(b"123456789") == 0xcbf43926 (the CRC-32 check value).
        assert_eq!(crc32(b"123456789"), 0xcbf4_3926);
    }
}
