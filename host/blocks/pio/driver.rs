//! The PIO target window: host-driven reads and writes, seen from the card.
//!
//! A 64 KiB memory in BAR0 at [`WINDOW_OFFSET`]. The card honours multi-DW accesses with
//! their byte enables, delays read completions by a programmable number of cycles, and
//! counts what arrives: TLPs, bytes, a log2 histogram of TLP payload sizes, and the card
//! cycles of the first and last write, so it measures PIO bandwidth and how the host
//! aggregated its stores into TLPs.

use serde::Serialize;

use tlpx_regs::pio;

use crate::card::{Card, Feature};
use crate::DeviceError;

/// Offset of the PIO window in BAR0.
pub const WINDOW_OFFSET: u64 = tlpx_regs::constants::PIO_WINDOW_BASE;
/// Size of the PIO window in bytes.
pub const WINDOW_SIZE: u64 = tlpx_regs::constants::PIO_WINDOW_SIZE;

/// What the card saw of host accesses to the window since the last [`reset`].
#[derive(Debug, Clone, Default, PartialEq, Serialize, serde::Deserialize)]
pub struct PioStats {
    pub write_tlps: u64,
    pub write_bytes: u64,
    /// log2 histogram of write TLP payload bytes: bucket k counts sizes in [2^k, 2^(k+1)).
    pub write_size_histogram: Vec<u64>,
    pub first_write_cycle: u64,
    pub last_write_cycle: u64,
    pub read_tlps: u64,
    pub read_bytes: u64,
    pub read_size_histogram: Vec<u64>,
}

/// Buckets of the size histograms (1 B .. 4 KiB).
pub const SIZE_BUCKETS: usize = tlpx_regs::constants::PIO_SIZE_BUCKETS as usize;
/// Largest read delay the window accepts, in cycles.
pub const MAX_READ_DELAY: u32 = tlpx_regs::constants::PIO_MAX_READ_DELAY as u32;

/// A PIO window setting out of range (the caller's input); [`DeviceError::Pio`] carries it.
#[derive(Debug, thiserror::Error)]
pub enum PioError {
    #[error("invalid argument: PIO read delay must be 0..={MAX_READ_DELAY} cycles, not {cycles}")]
    ReadDelay { cycles: u32 },
}

/// Clears the window's counters.
pub fn reset(card: &mut Card) -> Result<(), DeviceError> {
    card.require(Feature::Generator, "PIO window")?;
    card.write(pio::CONTROL, pio::control::CLEAR.set(1))
}

/// Sets how many card cycles the window waits before answering a read (0..=MAX_READ_DELAY).
pub fn set_read_delay(card: &mut Card, cycles: u32) -> Result<(), DeviceError> {
    card.require(Feature::Generator, "PIO window")?;
    if cycles > MAX_READ_DELAY {
        return Err(PioError::ReadDelay { cycles }.into());
    }
    card.write(pio::READ_DELAY, u64::from(cycles))
}

/// Reads the window's counters.
pub fn stats(card: &mut Card) -> Result<PioStats, DeviceError> {
    card.require(Feature::Generator, "PIO window")?;
    Ok(PioStats {
        write_tlps: card.read(pio::WRITE_TLPS)?,
        write_bytes: card.read(pio::WRITE_BYTES)?,
        write_size_histogram: crate::generator::read_histogram(card, pio::WRITE_SIZE_SELECT, pio::WRITE_SIZE_COUNT, SIZE_BUCKETS)?,
        first_write_cycle: card.read(pio::FIRST_WRITE)?,
        last_write_cycle: card.read(pio::LAST_WRITE)?,
        read_tlps: card.read(pio::READ_TLPS)?,
        read_bytes: card.read(pio::READ_BYTES)?,
        read_size_histogram: crate::generator::read_histogram(card, pio::READ_SIZE_SELECT, pio::READ_SIZE_COUNT, SIZE_BUCKETS)?,
    })
}
