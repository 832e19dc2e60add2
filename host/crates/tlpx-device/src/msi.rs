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

/// The vector mask a driver waits on for source `bit`'s interrupt: vector 0, where every source
/// arrives when the host granted one MSI vector (a stock set-up), and the source's own vector,
/// where it arrives when the host granted several (multi-message MSI, MSI-X: the card sends
/// source n as vector n; docs/interrupts.md, "Several vectors").
pub const fn wait_mask(bit: u32) -> u32 {
    1 | (1 << bit)
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

/// Where a host's interrupt controller takes MSI and MSI-X writes (x86's local APIC window).
pub const MSI_ADDRESS: u32 = 0xFEE0_0000;

const CAP_ID_MSI: u8 = 0x05;
const CAP_ID_MSIX: u8 = 0x11;

/// Enables `count` vectors or more as a host's OS would for a driver that asks (Linux's
/// `pci_alloc_irq_vectors`, MSI-X preferred): with `count` > 1 on a card with MSI-X, programs
/// every table entry (address [`MSI_ADDRESS`], data = the vector's number, unmasked: the card
/// sends any of its vectors under MSI-X, and an entry left masked would hold a source's
/// messages in the PBA for ever), turns MSI off and MSI-X on, and reports the table's size;
/// else sets MSI's Multiple Message Enable to the power of two that covers `count`, at most
/// what the card is capable of, with MSI-X off (one vector: the stock set-up). For the backends
/// where nothing else plays the OS: the simulator's socket, where tlpx-sim delivers a message's
/// vector as its data says (it restores the mode when this client leaves). Vectors then
/// arrive as their own number.
pub fn enable_vectors_as_host(dev: &mut dyn crate::Device, count: u32) -> Result<crate::InterruptVectors, DeviceError> {
    use crate::{InterruptMode, InterruptVectors, Width};
    if count == 0 {
        return Err(DeviceError::InvalidArgument("0 interrupt vectors asked: ask for 1 or more".into()));
    }
    let config = dev.config_read(0, 256)?;
    let caps = tlpx_pci::decode::capabilities(&config);
    let at = |id: u8| caps.iter().find(|c| c.id == id).map(|c| usize::from(c.offset));
    let get16 = |o: usize| u16::from_le_bytes([config[o], config[o + 1]]);
    let get32 = |o: usize| u32::from_le_bytes([config[o], config[o + 1], config[o + 2], config[o + 3]]);
    if let (Some(msix), true) = (at(CAP_ID_MSIX), count > 1) {
        let control = get16(msix + 2);
        let size = u32::from(control & 0x7FF) + 1;
        let table = get32(msix + 4);
        if table & 7 != 0 {
            return Err(DeviceError::Backend(format!("the MSI-X table is in BAR{}, not BAR0: not supported", table & 7)));
        }
        let n = size;
        for v in 0..n {
            let entry = u64::from(table) + 16 * u64::from(v);
            dev.bar_write(0, entry, Width::W32, u64::from(MSI_ADDRESS))?;
            dev.bar_write(0, entry + 4, Width::W32, 0)?;
            dev.bar_write(0, entry + 8, Width::W32, u64::from(v))?;
            dev.bar_write(0, entry + 12, Width::W32, 0)?;
        }
        if let Some(msi) = at(CAP_ID_MSI) {
            dev.config_write((msi + 2) as u16, &(get16(msi + 2) & !1).to_le_bytes())?;
        }
        // Enable on, Function Mask off.
        dev.config_write((msix + 2) as u16, &((control & !(1 << 14)) | (1 << 15)).to_le_bytes())?;
        return Ok(InterruptVectors { mode: InterruptMode::MsiX, count: n });
    }
    let Some(msi) = at(CAP_ID_MSI) else {
        return Err(DeviceError::Backend("the card has no MSI capability".into()));
    };
    if let Some(msix) = at(CAP_ID_MSIX) {
        // MSI-X off (an earlier request may have turned it on), before MSI goes on.
        dev.config_write((msix + 2) as u16, &(get16(msix + 2) & !(1 << 15)).to_le_bytes())?;
    }
    let control = get16(msi + 2);
    let capable = (control >> 1) & 7;
    let mme = (count.min(32).next_power_of_two().trailing_zeros() as u16).min(capable);
    dev.config_write((msi + 2) as u16, &((control & !(7 << 4)) | (mme << 4) | 1).to_le_bytes())?;
    let granted = 1u32 << mme;
    Ok(InterruptVectors { mode: if granted > 1 { InterruptMode::MsiMulti } else { InterruptMode::Msi }, count: granted })
}
