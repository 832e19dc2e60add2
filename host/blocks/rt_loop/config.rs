//! The real-time loop's configuration: one run ([`LoopConfig`]), its checks
//! ([`ValidLoopConfig::new`]) and the register writes that program the loop and each chunk.

use std::fmt;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tlpx_regs::rt_loop as regs;

use crate::RegWrite;

/// Smallest buffer (bytes): the token and one data DW.
pub const MIN_SIZE: u32 = 8;
/// Largest buffer (bytes).
pub const MAX_SIZE: u32 = tlpx_regs::constants::RT_LOOP_MAX_BUFFER_BYTES as u32;
/// Where the host stores the checksum for a DMA return: this far into the buffer allocation
/// (after the largest buffer, so the two never overlap).
pub const RESULT_OFFSET: usize = MAX_SIZE as usize;
/// The card's largest write payload, log2: 2^7 (PCIe's smallest MPS) ..= 2^12 (its largest).
const PAYLOAD_SIZE_LOG2: std::ops::RangeInclusive<u8> = 7..=12;

/// How the host notices a new buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Detect {
    /// Read the buffer's first DW until it holds the token.
    Poll,
    /// Wait for the card's MSI (raised once the token is written).
    Irq,
}

/// How the host gives the checksum back.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Return {
    /// A posted write of the checksum to the card's `result` register.
    Register,
    /// The checksum in host memory, a `doorbell` write, and the card's DMA read of it.
    Dma,
}

impl Detect {
    pub fn name(self) -> &'static str {
        match self {
            Detect::Poll => "poll",
            Detect::Irq => "irq",
        }
    }
}

impl Return {
    pub fn name(self) -> &'static str {
        match self {
            Return::Register => "register",
            Return::Dma => "dma",
        }
    }
}

/// What one loop run does.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct LoopConfig {
    /// Buffer bytes, token included: a multiple of 4 in [`MIN_SIZE`]..=[`MAX_SIZE`].
    pub size_bytes: u32,
    /// Iterations (>= 1).
    pub iterations: u32,
    /// Token of the first iteration (then +1 each).
    pub seed: u32,
    pub detect: Detect,
    pub ret: Return,
    /// Also check every data DW against the pattern, on the host, inside the timed loop.
    pub verify_data: bool,
    /// log2 of the card's largest write payload (7 = 128 bytes, valid on every link).
    pub payload_size_log2: u8,
    /// Longest the host waits for one buffer (wall time) before giving up.
    pub detect_timeout: Duration,
    /// Card time let pass between two polls on a backend where time only runs when asked
    /// (the simulator); ignored on hardware, where the poll is a plain spin.
    pub poll_step: Duration,
}

/// Why a loop run cannot be programmed; the messages name the value and what is accepted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LoopConfigError {
    Size { bytes: u32 },
    NoIterations,
    PayloadSizeLog2 { log2: u8 },
}

impl fmt::Display for LoopConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LoopConfigError::Size { bytes } => write!(
                f,
                "the loop buffer must be a multiple of 4 bytes in {MIN_SIZE}..={MAX_SIZE} (the token and at least one data DW), not {bytes}"
            ),
            LoopConfigError::NoIterations => write!(f, "the loop needs at least 1 iteration, not 0"),
            LoopConfigError::PayloadSizeLog2 { log2 } => write!(f, "the payload size must be 2^7..2^12 bytes, not 2^{log2}"),
        }
    }
}

impl std::error::Error for LoopConfigError {}

impl LoopConfig {
    pub fn new(size_bytes: u32, iterations: u32, detect: Detect, ret: Return) -> LoopConfig {
        LoopConfig {
            size_bytes,
            iterations,
            seed: 1,
            detect,
            ret,
            verify_data: false,
            payload_size_log2: 7,
            detect_timeout: Duration::from_secs(5),
            poll_step: Duration::from_nanos(200),
        }
    }

    /// Checks the values; errors name the bad value and what is accepted.
    pub fn validate(&self) -> Result<(), LoopConfigError> {
        if !(MIN_SIZE..=MAX_SIZE).contains(&self.size_bytes) || self.size_bytes % 4 != 0 {
            return Err(LoopConfigError::Size { bytes: self.size_bytes });
        }
        if self.iterations == 0 {
            return Err(LoopConfigError::NoIterations);
        }
        if !PAYLOAD_SIZE_LOG2.contains(&self.payload_size_log2) {
            return Err(LoopConfigError::PayloadSizeLog2 { log2: self.payload_size_log2 });
        }
        Ok(())
    }
}

/// A [`LoopConfig`] that passed its checks: the only thing the loop is programmed from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ValidLoopConfig(LoopConfig);

impl ValidLoopConfig {
    pub fn new(config: &LoopConfig) -> Result<ValidLoopConfig, LoopConfigError> {
        config.validate()?;
        Ok(ValidLoopConfig(config.clone()))
    }

    pub fn config(&self) -> &LoopConfig {
        &self.0
    }

    /// A clear, then the buffer at bus address `buffer` (its checksum slot at
    /// [`RESULT_OFFSET`]), the payload size and how the host detects and returns.
    pub fn setup_writes(&self, buffer: u64) -> Vec<RegWrite> {
        let c = &self.0;
        let config =
            regs::config::IRQ.set(u64::from(c.detect == Detect::Irq)) | regs::config::DMA_RETURN.set(u64::from(c.ret == Return::Dma));
        vec![
            RegWrite::new(regs::CONTROL, regs::control::CLEAR.set(1)),
            RegWrite::new(regs::BUFFER_BASE, buffer),
            RegWrite::new(regs::SIZE, u64::from(c.size_bytes)),
            RegWrite::new(regs::PAYLOAD_SIZE_LOG2, u64::from(c.payload_size_log2)),
            RegWrite::new(regs::RESULT_ADDRESS, buffer + RESULT_OFFSET as u64),
            RegWrite::new(regs::CONFIG, config),
        ]
    }
}

/// One chunk of `iterations` (at most the card's sample FIFO) starting at token `seed`.
pub fn chunk_writes(iterations: u32, seed: u32) -> [RegWrite; 2] {
    [RegWrite::new(regs::ITERATIONS, u64::from(iterations)), RegWrite::new(regs::SEED, u64::from(seed))]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn size_iteration_and_payload_edges() {
        let ok = LoopConfig::new(MIN_SIZE, 1, Detect::Poll, Return::Register);
        assert!(ValidLoopConfig::new(&ok).is_ok());
        assert!(LoopConfig { size_bytes: MAX_SIZE, ..ok.clone() }.validate().is_ok());
        for bytes in [0, 4, 6, MAX_SIZE + 4, 8192] {
            assert_eq!(LoopConfig { size_bytes: bytes, ..ok.clone() }.validate(), Err(LoopConfigError::Size { bytes }));
        }
        assert_eq!(LoopConfig { iterations: 0, ..ok.clone() }.validate(), Err(LoopConfigError::NoIterations));
        assert!(LoopConfig { payload_size_log2: 12, ..ok.clone() }.validate().is_ok());
        assert_eq!(LoopConfig { payload_size_log2: 6, ..ok.clone() }.validate(), Err(LoopConfigError::PayloadSizeLog2 { log2: 6 }));
        assert_eq!(
            LoopConfig { payload_size_log2: 13, ..ok }.validate().expect_err("13").to_string(),
            "the payload size must be 2^7..2^12 bytes, not 2^13"
        );
    }

    #[test]
    fn setup_writes_put_detect_and_return_in_their_fields() {
        let c = LoopConfig::new(64, 3, Detect::Irq, Return::Dma);
        let w = ValidLoopConfig::new(&c).expect("valid").setup_writes(0x10_0000);
        let names: Vec<&str> = w.iter().map(|w| w.register.name).collect();
        assert_eq!(names, ["control", "buffer_base", "size", "payload_size_log2", "result_address", "config"]);
        assert_eq!(w[4].value, 0x10_0000 + RESULT_OFFSET as u64);
        assert_eq!((regs::config::IRQ.get(w[5].value), regs::config::DMA_RETURN.get(w[5].value)), (1, 1));
        // Polling with a register return is the all-zero config (what a responder programs).
        let p = LoopConfig::new(64, 1, Detect::Poll, Return::Register);
        assert_eq!(ValidLoopConfig::new(&p).expect("valid").setup_writes(0)[5].value, 0);
        let [it, seed] = chunk_writes(5, 9);
        assert_eq!((it.register.name, it.value, seed.register.name, seed.value), ("iterations", 5, "seed", 9));
    }
}
