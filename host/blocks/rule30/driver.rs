//! The rule-30 accelerator (the device under test, seed 000): its BAR0 register window,
//! exactly the Simics paper's map, and the ways a driver can use it.
//!
//! ```text
//!  host ─► input[32] ─► start_compute ─► (latency_cycles, then 1 cycle per generation) ─► output[32]
//!                                          └─► status.complete (poll) / MSI "rule30" (irq)
//!  hwo: output copied to input at completion;  generations: N per start;  batch: rule30_batch
//! ```
//!
//! Every hardware mode of `tlpx rule30 run` is built here from the same accesses:
//!
//! | mode | per packet | per line (generation) |
//! |---|---|---|
//! | `hw-irq` | write the input words | start, wait for the MSI, read the output words, write them back as input |
//! | `hw-poll` | same | start, read `status` until complete, read the output, write it back |
//! | `hw-syscall` | same | as hw-poll; on hardware every access is a system call (the seed's char driver) |
//! | `hwo` | same | start, poll, read the output (the card copied it to the input itself) |
//! | `hw-multi` | write the input, one start for all generations | the card runs them back to back; only the last line is read |
//!
//! Times are taken with [`crate::Device::clock_ns`]: the host's clock on hardware, the
//! simulated card's clock on the simulator (see [`crate::ClockSource`]).

use std::time::Duration;

use serde::Serialize;

use crate::card::{Card, Feature};
use crate::msi;
use crate::{DeviceError, Width};

/// Byte offset of the accelerator's window in BAR0.
pub const WINDOW_BASE: u64 = tlpx_regs::rule30::REGION_OFFSET;
/// The operation, its checks and the batch mode's descriptors live in the pure block crate.
pub use tlpx_blocks::rule30::{latency_cycles, OpConfig, Rule30Error, MAX_LINE_LENGTH, WORDS};

/// What can go wrong with the rule-30 accelerator (its register window and its DMA batch
/// mode); [`DeviceError::Rule30`] carries it. A refused start is [`DeviceError::StartRefused`].
#[derive(Debug, thiserror::Error)]
pub enum Rule30BlockError {
    /// An operation or batch the accelerator cannot take (the one rule-30 value error, the
    /// model crate's): the caller's input.
    #[error("invalid argument: {0}")]
    Config(Rule30Error),
    #[error("no interrupt from the rule-30 accelerator within {timeout:?}")]
    NoInterrupt { timeout: Duration },
    #[error("the rule-30 accelerator did not complete (status 0x{status:x})")]
    NotComplete { status: u32 },
    #[error("no interrupt at the end of a rule-30 batch of {packets} packets within {timeout:?}")]
    NoBatchInterrupt { packets: usize, timeout: Duration },
    #[error("the rule-30 batch ended in error (status 0x{status:x}, {done} of {packets} packets done)")]
    BatchFailed { status: u64, done: u64, packets: usize },
    /// A result record the batch did not write (a stale record of another batch).
    #[error("result record {record} of a rule-30 batch is not this batch's (status DW 0x{status_dw:08x}, batch sequence {sequence})")]
    ForeignRecord { record: usize, status_dw: u32, sequence: u32 },
}

// Not `#[from]`: that would make the configuration error this one's `source` as well as its
// text, and `{:#}` (how the CLI prints an error) would print the message twice.
impl From<Rule30Error> for Rule30BlockError {
    fn from(e: Rule30Error) -> Self {
        Rule30BlockError::Config(e)
    }
}

impl Rule30BlockError {
    /// The caller's input was refused (not the card or its backend).
    pub fn is_invalid_argument(&self) -> bool {
        matches!(self, Rule30BlockError::Config(_))
    }
}

/// Register offsets in the window (the seed's Figure 5, then tlpx's extensions), from the
/// generated register map (`tlpx_regs::rule30`, the card's csr.json).
pub mod reg {
    use tlpx_regs::rule30 as r;
    pub const VERSION: u64 = r::VERSION.offset - r::REGION_OFFSET;
    pub const CONTROL: u64 = r::CONTROL.offset - r::REGION_OFFSET;
    pub const STATUS: u64 = r::STATUS.offset - r::REGION_OFFSET;
    pub const RESET: u64 = r::RESET.offset - r::REGION_OFFSET;
    pub const IRQ_NUM: u64 = r::IRQ_NUM.offset - r::REGION_OFFSET;
    pub const RULE_SET: u64 = r::RULE_SET.offset - r::REGION_OFFSET;
    pub const LINE_LENGTH: u64 = r::LINE_LENGTH.offset - r::REGION_OFFSET;
    pub const START_COMPUTE: u64 = r::START_COMPUTE.offset - r::REGION_OFFSET;
    pub const INPUT: u64 = r::INPUT.offset - r::REGION_OFFSET;
    pub const OUTPUT: u64 = r::OUTPUT.offset - r::REGION_OFFSET;
    pub const LATENCY_CYCLES: u64 = r::LATENCY_CYCLES.offset - r::REGION_OFFSET;
    pub const GENERATIONS: u64 = r::GENERATIONS.offset - r::REGION_OFFSET;
    pub const ERRORS: u64 = r::ERRORS.offset - r::REGION_OFFSET;
    pub const REFUSED_STARTS: u64 = r::REFUSED_STARTS.offset - r::REGION_OFFSET;
    pub const IGNORED_STARTS: u64 = r::IGNORED_STARTS.offset - r::REGION_OFFSET;
    pub const OPERATIONS: u64 = r::OPERATIONS.offset - r::REGION_OFFSET;
    pub const BUSY_CYCLES_LO: u64 = r::BUSY_CYCLES_LO.offset - r::REGION_OFFSET;
    pub const BUSY_CYCLES_HI: u64 = r::BUSY_CYCLES_HI.offset - r::REGION_OFFSET;
    pub const MIN_CYCLES_PER_GENERATION: u64 = r::MIN_CYCLES_PER_GENERATION.offset - r::REGION_OFFSET;
    pub const OVERHEAD_CYCLES: u64 = r::OVERHEAD_CYCLES.offset - r::REGION_OFFSET;
}

/// `control` bits.
pub const CONTROL_IRQ_ENABLE: u32 = 1 << 0;
pub const CONTROL_HWO: u32 = 1 << 1;
/// `status` bits.
pub const STATUS_COMPLETE: u32 = 1 << 0;
pub const STATUS_ERROR: u32 = 1 << 1;
pub const STATUS_BUSY: u32 = 1 << 2;
/// `errors` bits: a start refused for a bad line_length or generations (nothing computed).
pub const ERRORS_REFUSED: u32 = 0b011;
/// `errors` bit: a start ignored because the core was busy (the running operation goes on).
pub const ERRORS_START_WHILE_BUSY: u32 = 0b100;

/// The interrupt mask for `Device::wait_interrupt`: vector 0 (one MSI vector: every source) and
/// the slot's own vector (several vectors granted: rule 30 raises the slot's source).
pub const WAIT_MASK: u32 = msi::wait_mask(tlpx_regs::constants::MSI_SLOT as u32);

/// A hardware mode of `tlpx rule30 run`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum HwMode {
    Irq,
    Poll,
    Syscall,
    Hwo,
    Multi,
}

impl HwMode {
    pub const ALL: [HwMode; 5] = [HwMode::Irq, HwMode::Poll, HwMode::Syscall, HwMode::Hwo, HwMode::Multi];

    pub fn name(self) -> &'static str {
        match self {
            HwMode::Irq => "hw-irq",
            HwMode::Poll => "hw-poll",
            HwMode::Syscall => "hw-syscall",
            HwMode::Hwo => "hwo",
            HwMode::Multi => "hw-multi",
        }
    }
}

/// Reads a window register.
pub fn read(card: &mut Card, offset: u64) -> Result<u32, DeviceError> {
    Ok(card.device().bar_read(0, WINDOW_BASE + offset, Width::W32)? as u32)
}

/// Writes a window register (a posted write).
pub fn write(card: &mut Card, offset: u64, value: u32) -> Result<(), DeviceError> {
    card.device().bar_write(0, WINDOW_BASE + offset, Width::W32, u64::from(value))
}

/// The accelerator's counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Counters {
    pub operations: u32,
    pub refused_starts: u32,
    pub ignored_starts: u32,
    pub busy_cycles: u64,
    pub errors: u32,
}

pub fn counters(card: &mut Card) -> Result<Counters, DeviceError> {
    let lo = read(card, reg::BUSY_CYCLES_LO)?;
    let hi = read(card, reg::BUSY_CYCLES_HI)?;
    Ok(Counters {
        operations: read(card, reg::OPERATIONS)?,
        refused_starts: read(card, reg::REFUSED_STARTS)?,
        ignored_starts: read(card, reg::IGNORED_STARTS)?,
        busy_cycles: u64::from(hi) << 32 | u64::from(lo),
        errors: read(card, reg::ERRORS)?,
    })
}

/// The core's identity: version, irq_num, and its honest minimum cycles.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct CoreInfo {
    pub version: u32,
    pub irq_num: u32,
    pub min_cycles_per_generation: u32,
    pub overhead_cycles: u32,
}

pub fn info(card: &mut Card) -> Result<CoreInfo, DeviceError> {
    card.require(Feature::Rule30, "rule-30 accelerator")?;
    Ok(CoreInfo {
        version: read(card, reg::VERSION)?,
        irq_num: read(card, reg::IRQ_NUM)?,
        min_cycles_per_generation: read(card, reg::MIN_CYCLES_PER_GENERATION)?,
        overhead_cycles: read(card, reg::OVERHEAD_CYCLES)?,
    })
}

/// Resets the core and programs an operation: rule, length, latency, generations per start,
/// control (interrupt, hwo); enables or disables the core's MSI.
pub fn configure(card: &mut Card, op: &OpConfig, mode: HwMode, generations_per_start: u32) -> Result<(), DeviceError> {
    card.require(Feature::Rule30, "rule-30 accelerator")?;
    op.validate()?;
    write(card, reg::RESET, 1)?;
    write(card, reg::RULE_SET, u32::from(op.rule))?;
    write(card, reg::LINE_LENGTH, op.line_length)?;
    write(card, reg::LATENCY_CYCLES, op.latency_cycles)?;
    write(card, reg::GENERATIONS, generations_per_start)?;
    let irq = mode == HwMode::Irq;
    let control = if irq { CONTROL_IRQ_ENABLE } else { 0 } | if mode == HwMode::Hwo { CONTROL_HWO } else { 0 };
    write(card, reg::CONTROL, control)?;
    // Rule 30 interrupts through the slot's source, on at reset for a stock driver: only the
    // interrupt mode turns it on, and nothing here turns it off (the card's default stays).
    msi::clear_latched(card, msi_bit())?;
    if irq {
        msi::set(card, msi_bit(), true)?;
    }
    // A read so every write above has arrived, then (for the interrupt mode, the only one
    // that waits for one) drop interrupts queued before. The other modes never wait: on a
    // backend whose interrupts belong to a driver (LitePCIe's), asking would be refused.
    read(card, reg::VERSION)?;
    if irq {
        while card.device().wait_interrupt(WAIT_MASK, Duration::ZERO)?.is_some() {}
    }
    Ok(())
}

/// Which MSI bit of `pcie_msi` the accelerator raises.
pub fn msi_bit() -> u32 {
    tlpx_regs::constants::MSI_SLOT as u32
}

/// Writes consecutive window words from `base`.
pub fn write_words(card: &mut Card, base: u64, words: &[u32]) -> Result<(), DeviceError> {
    for (i, w) in words.iter().enumerate() {
        write(card, base + 4 * i as u64, *w)?;
    }
    Ok(())
}

/// Reads consecutive window words from `base`.
pub fn read_words(card: &mut Card, base: u64, out: &mut [u32]) -> Result<(), DeviceError> {
    for (i, w) in out.iter_mut().enumerate() {
        *w = read(card, base + 4 * i as u64)?;
    }
    Ok(())
}

/// Waits for the operation started last: polls `status` (every mode but hw-irq) or waits for
/// the MSI. A refused start (bad parameters) is an error; an ignored one (the core was busy)
/// is not: the running operation completes.
pub fn wait_complete(card: &mut Card, mode: HwMode, timeout: Duration) -> Result<(), DeviceError> {
    if mode == HwMode::Irq {
        if card.wait_interrupt(WAIT_MASK, timeout)?.is_none() {
            return Err(Rule30BlockError::NoInterrupt { timeout }.into());
        }
        let status = read(card, reg::STATUS)?;
        if status & STATUS_ERROR != 0 && read(card, reg::ERRORS)? & ERRORS_REFUSED != 0 {
            return Err(refused(card)?);
        }
        return Ok(());
    }
    let deadline = std::time::Instant::now() + timeout.max(Duration::from_secs(2));
    loop {
        let status = read(card, reg::STATUS)?;
        // An ignored start (start while busy) also sets status.error; only a refusal ends the wait.
        if status & STATUS_ERROR != 0 && read(card, reg::ERRORS)? & ERRORS_REFUSED != 0 {
            return Err(refused(card)?);
        }
        if status & STATUS_COMPLETE != 0 {
            return Ok(());
        }
        if std::time::Instant::now() > deadline {
            return Err(Rule30BlockError::NotComplete { status }.into());
        }
    }
}

fn refused(card: &mut Card) -> Result<DeviceError, DeviceError> {
    let errors = read(card, reg::ERRORS)?;
    let length = read(card, reg::LINE_LENGTH)?;
    let generations = read(card, reg::GENERATIONS)?;
    Ok(DeviceError::StartRefused {
        block: crate::lease::Block::Rule30Batch.title().to_string(),
        detail: format!("errors 0x{errors:x}: line_length {length}, generations {generations}"),
    })
}

/// One packet through the accelerator in `mode`: `generations` lines, each the previous one's
/// next generation. Returns the last line's register words; pushes each line's time (ns of
/// [`crate::Device::clock_ns`]) to `line_ns` (hw-multi: the packet's time divided evenly).
pub fn run_packet(
    card: &mut Card,
    mode: HwMode,
    op: &OpConfig,
    input: &[u32; WORDS],
    generations: u32,
    line_ns: &mut Vec<f64>,
) -> Result<[u32; WORDS], DeviceError> {
    let n = op.words();
    let timeout = Duration::from_secs(1) + card.cycles_to_duration(u64::from(op.latency_cycles) * 4);
    let mut out = [0u32; WORDS];
    write_words(card, reg::INPUT, &input[..n])?;
    if mode == HwMode::Multi {
        let t0 = card.device().clock_ns()?;
        write(card, reg::START_COMPUTE, 1)?;
        wait_complete(card, mode, timeout)?;
        read_words(card, reg::OUTPUT, &mut out[..n])?;
        let t1 = card.device().clock_ns()?;
        let per = (t1 - t0) as f64 / f64::from(generations.max(1));
        line_ns.extend(std::iter::repeat_n(per, generations as usize));
        return Ok(out);
    }
    for g in 0..generations {
        let t0 = card.device().clock_ns()?;
        write(card, reg::START_COMPUTE, 1)?;
        wait_complete(card, mode, timeout)?;
        read_words(card, reg::OUTPUT, &mut out[..n])?;
        if mode != HwMode::Hwo && g + 1 < generations {
            write_words(card, reg::INPUT, &out[..n])?;
        }
        let t1 = card.device().clock_ns()?;
        line_ns.push((t1 - t0) as f64);
    }
    Ok(out)
}

/// The DMA batch mode (`hw-batch`): packets as descriptors in host memory, results written
/// back by the card, one interrupt per batch (gateware: cores/rule30/batch.py, which documents
/// the descriptor and result formats this module writes and reads).
pub mod batch {
    use std::time::Duration;

    use serde::Serialize;
    use tlpx_regs::rule30_batch as regs;

    use super::{configure, HwMode, OpConfig, Rule30BlockError, WAIT_MASK, WORDS};
    use crate::card::Card;
    use crate::msi;
    use crate::DeviceError;

    use tlpx_blocks::rule30::batch::{batch_writes, setup_writes};
    pub use tlpx_blocks::rule30::batch::{descriptor, MAX_BATCH, MAX_GENERATIONS};
    const STATUS_COMPLETE: u32 = 1 << 24;

    /// What a run of batches measured.
    #[derive(Debug, Clone, Default, Serialize)]
    pub struct BatchRun {
        /// Per packet: its batch's time (host-visible, `Device::clock_ns`) / packets in it.
        pub per_packet_ns: Vec<f64>,
        /// The core's busy cycles over all batches.
        pub busy_cycles: u64,
        /// Card cycles of the batches (start write to interrupt), summed.
        pub batch_cycles: u64,
        /// Packets computed.
        pub operations: u32,
        pub batches: u32,
        /// Last line of every packet, as register words.
        #[serde(skip)]
        pub outputs: Vec<[u32; WORDS]>,
    }

    fn to_bytes(dws: &[u32]) -> Vec<u8> {
        dws.iter().flat_map(|d| d.to_le_bytes()).collect()
    }

    /// Runs `inputs` through the card in batches of up to [`MAX_BATCH`], each packet for
    /// `generations` generations, and reads every result back.
    pub fn run(card: &mut Card, op: &OpConfig, inputs: &[[u32; WORDS]], generations: u32) -> Result<BatchRun, DeviceError> {
        tlpx_blocks::rule30::batch::generations(generations)?;
        card.claim(crate::lease::Block::Rule30Batch)?;
        configure(card, op, HwMode::Poll, 1)?;
        let n = op.words();
        let desc_bytes = (1 + n) * 4 * MAX_BATCH;
        let result_bytes = (n + 1) * 4 * MAX_BATCH;
        let descs = card.device().alloc_dma(desc_bytes)?;
        let results = match card.device().alloc_dma(result_bytes) {
            Ok(r) => r,
            Err(e) => {
                let _ = card.device().free_dma(descs);
                return Err(e);
            }
        };
        let out = run_in(card, op, inputs, generations, &descs, &results);
        if out.is_err() {
            // A batch still running must not write results into buffers about to be freed.
            let _ = card.write(regs::CONTROL, regs::control::ABORT.set(1));
            let _ = card.device().idle(Duration::from_micros(50));
        }
        let f1 = card.device().free_dma(descs);
        let f2 = card.device().free_dma(results);
        let released = card.release(crate::lease::Block::Rule30Batch);
        let out = out?;
        f1?;
        f2?;
        released?;
        Ok(out)
    }

    fn run_in(
        card: &mut Card,
        op: &OpConfig,
        inputs: &[[u32; WORDS]],
        generations: u32,
        descs: &crate::DmaBuffer,
        results: &crate::DmaBuffer,
    ) -> Result<BatchRun, DeviceError> {
        let n = op.words();
        for w in setup_writes() {
            card.write(w.register, w.value)?;
        }
        msi::clear_latched(card, super::msi_bit())?;
        let found = msi::switch(card, super::msi_bit(), true)?;
        let mut run = BatchRun::default();
        for chunk in inputs.chunks(MAX_BATCH) {
            let list: Vec<u32> = chunk.iter().flat_map(|w| descriptor(op, generations, Some(w))).collect();
            descs.write_bytes(0, &to_bytes(&list))?;
            let record = (n + 1) * 4;
            results.write_bytes(0, &vec![0u8; record * chunk.len()])?;
            for w in batch_writes(descs.bus_addr, (list.len() * 4) as u64, chunk.len() as u64, results.bus_addr) {
                card.write(w.register, w.value)?;
            }
            card.read(regs::STATUS)?;
            while card.device().wait_interrupt(WAIT_MASK, Duration::ZERO)?.is_some() {}
            let t0 = card.device().clock_ns()?;
            card.write(regs::CONTROL, regs::control::START.set(1))?;
            let timeout =
                Duration::from_secs(2) + card.cycles_to_duration(u64::from(op.latency_cycles + generations + 200) * chunk.len() as u64);
            if card.wait_interrupt(WAIT_MASK, timeout)?.is_none() {
                return Err(Rule30BlockError::NoBatchInterrupt { packets: chunk.len(), timeout }.into());
            }
            let sequence = card.read(regs::SEQUENCE)? as u32;
            let mut bytes = vec![0u8; record * chunk.len()];
            results.read_bytes(0, &mut bytes)?;
            let t1 = card.device().clock_ns()?;
            let status = card.read(regs::STATUS)?;
            if regs::status::ERROR.get(status) != 0 {
                return Err(Rule30BlockError::BatchFailed { status, done: card.read(regs::PACKETS_DONE)?, packets: chunk.len() }.into());
            }
            for (k, rec) in bytes.chunks_exact(record).enumerate() {
                let dw = |i: usize| u32::from_le_bytes([rec[4 * i], rec[4 * i + 1], rec[4 * i + 2], rec[4 * i + 3]]);
                let st = dw(n);
                if st & STATUS_COMPLETE == 0 || st & 0xffff != k as u32 & 0xffff || (st >> 16) & 0xff != sequence & 0xff {
                    return Err(Rule30BlockError::ForeignRecord { record: k, status_dw: st, sequence }.into());
                }
                let mut words = [0u32; WORDS];
                for (i, w) in words.iter_mut().enumerate().take(n) {
                    *w = dw(i);
                }
                run.outputs.push(words);
            }
            let per = (t1 - t0) as f64 / chunk.len() as f64;
            run.per_packet_ns.extend(std::iter::repeat_n(per, chunk.len()));
            run.busy_cycles += card.read(regs::BUSY_CYCLES)?;
            run.batch_cycles += card.read(regs::BATCH_CYCLES)?;
            run.operations += chunk.len() as u32;
            run.batches += 1;
        }
        found.restore(card)?;
        Ok(run)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_window_is_the_seeds_map() {
        // The Simics paper's Figure 5 offsets, as the generated map gives them.
        let seed = [
            (reg::VERSION, 0x00),
            (reg::CONTROL, 0x04),
            (reg::STATUS, 0x08),
            (reg::RESET, 0x0c),
            (reg::IRQ_NUM, 0x10),
            (reg::RULE_SET, 0x14),
            (reg::LINE_LENGTH, 0x18),
            (reg::START_COMPUTE, 0x1c),
            (reg::INPUT, 0x20),
            (reg::OUTPUT, 0xa0),
        ];
        for (got, want) in seed {
            assert_eq!(got, want);
        }
        assert_eq!(WINDOW_BASE, tlpx_regs::constants::RULE30_WINDOW_BASE);
    }

    #[test]
    fn latencies_convert_to_cycles_and_refuse_bad_values() {
        assert_eq!(latency_cycles(10_000.0, 125_000_000).expect("10 us"), 1250);
        assert_eq!(latency_cycles(1.0, 125_000_000).expect("1 ns"), 0);
        assert!(latency_cycles(-5.0, 125_000_000).expect_err("negative").to_string().contains("-5 ns"));
    }
}
