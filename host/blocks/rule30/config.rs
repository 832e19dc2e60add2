//! The rule-30 accelerator's operation ([`OpConfig`]: rule, line length, latency) with its
//! checks, and the DMA batch mode's packet descriptors and register writes ([`batch`]).

use serde::Serialize;

/// Longest line, in cells.
pub const MAX_LINE_LENGTH: u32 = 1024;
/// Register words of `input` and `output`.
pub const WORDS: usize = 32;

/// What an operation computes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct OpConfig {
    /// Elementary rule, Wolfram's bit encoding.
    pub rule: u8,
    /// Cells, 1..=1024.
    pub line_length: u32,
    /// Extra card cycles per operation (the emulated hardware's latency).
    pub latency_cycles: u32,
}

/// Why an operation or a batch cannot be programmed; the messages name the value. One type
/// for every rule-30 value, the model crate's (tlpx-rule30), so a caller matches one enum.
pub use tlpx_rule30::Rule30Error;

impl OpConfig {
    pub fn validate(&self) -> Result<(), Rule30Error> {
        if !(1..=MAX_LINE_LENGTH).contains(&self.line_length) {
            return Err(Rule30Error::LineLength(self.line_length as usize));
        }
        Ok(())
    }

    /// Register words a line of this length uses.
    pub fn words(&self) -> usize {
        (self.line_length as usize).div_ceil(32)
    }
}

/// Converts a latency in ns to card cycles (rounded to the nearest, at least 0).
pub fn latency_cycles(ns: f64, clock_hz: u32) -> Result<u32, Rule30Error> {
    let c = (ns * f64::from(clock_hz) / 1e9).round();
    if !c.is_finite() || c < 0.0 || c > f64::from(u32::MAX) {
        return Err(Rule30Error::Latency { ns, cycles: c, clock_hz });
    }
    Ok(c as u32)
}

/// The DMA batch mode: packets as descriptors in host memory (gateware:
/// cores/rule30/batch.py documents the descriptor and result formats).
pub mod batch {
    use tlpx_regs::rule30_batch as regs;

    use super::{OpConfig, Rule30Error, WORDS};
    use crate::RegWrite;

    /// Packets per batch at most (one interrupt each).
    pub const MAX_BATCH: usize = 256;
    /// Generations one descriptor can ask for (its 12-bit field).
    pub const MAX_GENERATIONS: u32 = 4095;
    /// Header bits (batch.py): line length 10:0, chain 11 (no input words: start from the
    /// previous packet's output), rule 19:12, generations 31:20.
    const LINE_LENGTH_MASK: u32 = 0x7ff;
    const CHAIN_BIT: u32 = 1 << 11;
    const RULE_SHIFT: u32 = 12;
    const GENERATIONS_MASK: u32 = 0xfff;
    const GENERATIONS_SHIFT: u32 = 20;

    /// `generations` as a descriptor's: 1..=[`MAX_GENERATIONS`].
    pub fn generations(generations: u32) -> Result<u32, Rule30Error> {
        if !(1..=MAX_GENERATIONS).contains(&generations) {
            return Err(Rule30Error::Generations { generations, max: MAX_GENERATIONS });
        }
        Ok(generations)
    }

    /// The descriptor of one packet: header and input words (none: chained).
    pub fn descriptor(op: &OpConfig, generations: u32, input: Option<&[u32; WORDS]>) -> Vec<u32> {
        let header = (op.line_length & LINE_LENGTH_MASK)
            | if input.is_none() { CHAIN_BIT } else { 0 }
            | u32::from(op.rule) << RULE_SHIFT
            | (generations & GENERATIONS_MASK) << GENERATIONS_SHIFT;
        let mut d = vec![header];
        if let Some(words) = input {
            d.extend_from_slice(&words[..op.words()]);
        }
        d
    }

    /// The writes that hand the card one batch: `count` packets whose descriptors take
    /// `descriptor_bytes` at bus address `descriptors`, results to `results`.
    pub fn batch_writes(descriptors: u64, descriptor_bytes: u64, count: u64, results: u64) -> [RegWrite; 4] {
        [
            RegWrite::new(regs::DESCRIPTOR_BASE, descriptors),
            RegWrite::new(regs::DESCRIPTOR_BYTES, descriptor_bytes),
            RegWrite::new(regs::COUNT, count),
            RegWrite::new(regs::RESULT_BASE, results),
        ]
    }

    /// A clear, then the batch engine's interrupt on (one MSI per batch).
    pub fn setup_writes() -> [RegWrite; 2] {
        [RegWrite::new(regs::CONTROL, regs::control::CLEAR.set(1)), RegWrite::new(regs::CONFIG, regs::config::IRQ.set(1))]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn line_length_and_latency_edges() {
        let op = |line_length| OpConfig { rule: 30, line_length, latency_cycles: 0 };
        assert!(op(1).validate().is_ok() && op(MAX_LINE_LENGTH).validate().is_ok());
        assert_eq!(op(0).validate(), Err(Rule30Error::LineLength(0)));
        assert_eq!(op(MAX_LINE_LENGTH + 1).validate().expect_err("long").to_string(), "line length must be 1..=1024 cells, not 1025");
        assert_eq!((op(1).words(), op(32).words(), op(33).words(), op(1024).words()), (1, 1, 2, 32));
        assert_eq!(latency_cycles(10_000.0, 125_000_000), Ok(1250));
        assert_eq!(latency_cycles(1.0, 125_000_000), Ok(0));
        assert!(latency_cycles(-5.0, 125_000_000).expect_err("negative").to_string().contains("-5 ns"));
        assert!(latency_cycles(f64::INFINITY, 125_000_000).is_err());
    }

    #[test]
    fn batch_descriptors_pack_the_header_fields() {
        assert_eq!(batch::generations(batch::MAX_GENERATIONS), Ok(4095));
        assert_eq!(batch::generations(0), Err(Rule30Error::Generations { generations: 0, max: 4095 }));
        assert!(batch::generations(4096).expect_err("4096").to_string().contains("1..=4095"));
        let op = OpConfig { rule: 30, line_length: 40, latency_cycles: 0 };
        let input = [0xa5a5_a5a5u32; WORDS];
        let d = batch::descriptor(&op, 7, Some(&input));
        assert_eq!(d.len(), 1 + 2);
        assert_eq!(d[0], 40 | 30 << 12 | 7 << 20);
        let chained = batch::descriptor(&op, 4095, None);
        assert_eq!(chained, vec![40 | 1 << 11 | 30 << 12 | 4095 << 20]);
        let w = batch::batch_writes(0x1000, 12, 1, 0x2000);
        assert_eq!(
            w.map(|w| (w.register.name, w.value)),
            [("descriptor_base", 0x1000), ("descriptor_bytes", 12), ("count", 1), ("result_base", 0x2000)]
        );
    }
}
