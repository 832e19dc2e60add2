//! The card's MSI sources: each driver turns its own source's enable bit on and off, and
//! never writes the others'.
//!
//! `pcie_msi.enable` has a bit per source (the gateware's MSI_SOURCES; `tlpx_regs::constants::
//! MSI_*`). Written whole (`enable = 1 << mine`) it turned every other source off: after a
//! `tlpx bw` the slot's source, on at reset for a stock driver of the DUT that knows nothing of
//! tlpx's mask, stayed off until the next reset. The card sets and clears single bits
//! (`pcie_msi.enable_set`, `pcie_msi.enable_clear`, gateware cores/msi.py); these are the only
//! writes tlpx's drivers make to it.
//!
//! LitePCIe's MSI block sends one vector for every source, so with other sources on a driver
//! tells its own interrupt by its bit of `pcie_msi.vector` where it matters.

use tlpx_regs::pcie_msi;

use crate::card::Card;
use crate::DeviceError;

fn mask(bit: u32) -> u64 {
    1u64 << bit
}

/// Whether source `bit` is enabled now.
pub fn enabled(card: &mut Card, bit: u32) -> Result<bool, DeviceError> {
    Ok(card.read(pcie_msi::ENABLE)? & mask(bit) != 0)
}

/// Turns source `bit` on or off, leaving every other source as it is.
pub fn set(card: &mut Card, bit: u32, on: bool) -> Result<(), DeviceError> {
    card.write(if on { pcie_msi::ENABLE_SET } else { pcie_msi::ENABLE_CLEAR }, mask(bit))
}

/// Clears source `bit`'s latched bit of `pcie_msi.vector` (an interrupt it raised before).
pub fn clear_latched(card: &mut Card, bit: u32) -> Result<(), DeviceError> {
    card.write(pcie_msi::CLEAR, mask(bit))
}

/// A source's enable as a driver found it: [`Found::restore`] puts it back.
#[derive(Debug, Clone, Copy)]
pub struct Found {
    pub bit: u32,
    pub was_on: bool,
}

/// Sets source `bit` to `on` and returns how it was.
pub fn switch(card: &mut Card, bit: u32, on: bool) -> Result<Found, DeviceError> {
    let was_on = enabled(card, bit)?;
    if was_on != on {
        set(card, bit, on)?;
    }
    Ok(Found { bit, was_on })
}

impl Found {
    /// Leaves the source as it was found.
    pub fn restore(&self, card: &mut Card) -> Result<(), DeviceError> {
        set(card, self.bit, self.was_on)
    }
}
