//! The tlpx exerciser script language (docs/firmware.md, "Script language").
//!
//! ```text
//!  script.tlpxs ──compile()──► Program ──encode()──► image (.bin) ──► card's soft CPU
//!        ▲ errors: line:col: reason          ◄──decode()── (refuses corrupt images)
//! ```
//!
//! A script is one statement per line (`dma`, `poke`, `peek`, `wait`, `wait event`, `loop N {`
//! ... `}`, `mark`, `assert`, `compare`, `let`); register names come from tlpx-regs and are
//! resolved to BAR0 offsets, times are converted to card cycles at the clock of [`Options`].

pub mod compile;
pub mod disasm;
pub mod firmware;
pub mod image;
pub mod lex;
pub mod names;

use std::fmt;

pub use compile::compile;
pub use disasm::{disassemble, summary};
pub use firmware::{FirmwareImage, FirmwareImageError};
pub use image::{decode, AreaError, DecodeError, Program};

/// Compile options.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Options {
    /// Card clock in Hz: times (ns, us, ms, s) become cycles of this clock.
    pub clock_hz: u32,
}

/// The card clock scripts are compiled for unless told otherwise: 125 MHz.
pub const DEFAULT_CLOCK_HZ: u32 = 125_000_000;

impl Default for Options {
    fn default() -> Self {
        Options { clock_hz: DEFAULT_CLOCK_HZ }
    }
}

/// A compile error: where (1-based line and column, in characters) and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Diagnostic {
    pub line: usize,
    pub col: usize,
    pub message: String,
}

impl Diagnostic {
    pub fn new(line: usize, col: usize, message: String) -> Diagnostic {
        Diagnostic { line, col, message }
    }

    /// `file:line:col: message`, as compilers print them.
    pub fn render(&self, file: &str) -> String {
        format!("{file}:{}:{}: {}", self.line, self.col, self.message)
    }
}

impl fmt::Display for Diagnostic {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}: {}", self.line, self.col, self.message)
    }
}

/// One record of a run's results, as the firmware writes them (32 bytes, little-endian):
/// `slot u16, kind u8, status u8, pc u32, cycle u64, value u64, aux u64`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct ResultRecord {
    /// Result slot (index into the program's slots); 0xFFFF for the end record.
    pub slot: u16,
    /// The slot's kind (image::SlotKind as u8), 0 for the end record.
    pub kind: u8,
    /// One of [`status`].
    pub status: u8,
    /// Index of the instruction that wrote the record.
    pub pc: u32,
    /// Card cycle (timebase) when it was written.
    pub cycle: u64,
    /// Mark: 0; peek: the value; check: 1 if it held, else 0; dma: generator.cycles; event:
    /// the mask of events found set; end record: instructions executed.
    pub value: u64,
    /// Check: the masked value compared; dma: generator.transfers; others 0.
    pub aux: u64,
}

/// Status codes of [`ResultRecord::status`].
pub mod status {
    pub const OK: u8 = 0;
    /// A `compare` did not hold (the program goes on).
    pub const COMPARE_FAILED: u8 = 1;
    /// An `assert` did not hold: the program ended.
    pub const ASSERT_FAILED: u8 = 2;
    /// A `wait event` timed out: the program ended.
    pub const EVENT_TIMEOUT: u8 = 3;
    /// A blocking `dma` ran past its limit: the generator was stopped and the program ended.
    pub const DMA_LIMIT: u8 = 4;
    /// The firmware refused the image (magic, version, CRC, map hash, clock, structure).
    pub const BAD_IMAGE: u8 = 5;
    /// The program needs more host buffer than the host gave it.
    pub const BUFFER_TOO_SMALL: u8 = 6;
    /// The host stopped the program.
    pub const STOPPED: u8 = 7;
}

/// Bytes of one result record.
pub const RECORD_LEN: usize = 32;

impl ResultRecord {
    pub fn decode(b: &[u8; RECORD_LEN]) -> ResultRecord {
        let u64_at = |i: usize| {
            let mut w = [0u8; 8];
            w.copy_from_slice(&b[i..i + 8]);
            u64::from_le_bytes(w)
        };
        ResultRecord {
            slot: u16::from_le_bytes([b[0], b[1]]),
            kind: b[2],
            status: b[3],
            pc: u32::from_le_bytes([b[4], b[5], b[6], b[7]]),
            cycle: u64_at(8),
            value: u64_at(16),
            aux: u64_at(24),
        }
    }

    pub fn encode(&self) -> [u8; RECORD_LEN] {
        let mut b = [0u8; RECORD_LEN];
        b[0..2].copy_from_slice(&self.slot.to_le_bytes());
        b[2] = self.kind;
        b[3] = self.status;
        b[4..8].copy_from_slice(&self.pc.to_le_bytes());
        b[8..16].copy_from_slice(&self.cycle.to_le_bytes());
        b[16..24].copy_from_slice(&self.value.to_le_bytes());
        b[24..32].copy_from_slice(&self.aux.to_le_bytes());
        b
    }
}
