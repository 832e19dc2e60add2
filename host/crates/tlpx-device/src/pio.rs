//! The PIO target window: host-driven reads and writes, seen from the card.
//!
//! A 64 KiB memory in BAR0 at [`WINDOW_OFFSET`]. The card honours multi-DW accesses with
//! their byte enables, delays read completions by a programmable number of cycles, and
//! counts what arrives: TLPs, bytes, a log2 histogram of TLP payload sizes, and the card
//! cycles of the first and last write, so it measures PIO bandwidth and how the host
//! aggregated its stores into TLPs.

use serde::Serialize;

use crate::card::Card;
use crate::DeviceError;

/// Offset of the PIO window in BAR0.
pub const WINDOW_OFFSET: u64 = 0x10000;
/// Size of the PIO window in bytes.
pub const WINDOW_SIZE: u64 = 0x10000;

/// What the card saw of host accesses to the window since the last [`reset`].
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
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

/// Clears the window's counters.
pub fn reset(card: &mut Card) -> Result<(), DeviceError> {
    let _ = card;
    Err(DeviceError::Backend("the PIO driver is being written".to_string()))
}

/// Sets how many card cycles the window waits before answering a read.
pub fn set_read_delay(card: &mut Card, cycles: u32) -> Result<(), DeviceError> {
    let _ = (card, cycles);
    Err(DeviceError::Backend("the PIO driver is being written".to_string()))
}

/// Reads the window's counters.
pub fn stats(card: &mut Card) -> Result<PioStats, DeviceError> {
    let _ = card;
    Err(DeviceError::Backend("the PIO driver is being written".to_string()))
}
