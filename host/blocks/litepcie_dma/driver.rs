//! LitePCIe's scatter-gather DMA (reader, writer, loopback) on a tlpx card.
//!
//! Programming model (litepcie/frontend/dma.py): in "prog" mode each descriptor written to
//! a table (`*_table_value` then `*_table_we`) is executed once; the writer raises its MSI
//! source when a descriptor is done. With `loopback_enable`, what the reader fetches from
//! host memory is what the writer stores back.

use std::time::Duration;

use tlpx_regs::pcie_dma0;

use crate::card::Card;
use crate::msi;
use crate::{DeviceError, DmaBuffer};

/// Largest descriptor the table takes (24-bit length).
pub const MAX_DESCRIPTOR_BYTES: usize = (1 << 24) - 4;

/// A buffer the card's LitePCIe DMA cannot take (the caller's input);
/// [`DeviceError::LitepcieDma`] carries it.
#[derive(Debug, thiserror::Error)]
pub enum LitepcieDmaError {
    #[error("invalid argument: a DMA descriptor covers 4..={MAX_DESCRIPTOR_BYTES} bytes in whole DWs, not {len}")]
    DescriptorLength { len: usize },
    /// The card's DMA is built with 32-bit descriptor addresses.
    #[error("invalid argument: the card's LitePCIe DMA addresses 32 bits, and the buffer at bus address {bus_addr:#x} ({len} bytes) ends above 4 GiB")]
    Above4GiB { bus_addr: u64, len: usize },
    #[error("invalid argument: loopback source ({src} bytes) and destination ({dst} bytes) must be the same size")]
    SizeMismatch { src: usize, dst: usize },
}

/// Outcome of one loopback transfer.
#[derive(Debug, Clone, Copy)]
pub struct Loopback {
    /// Card cycles from enabling the engines to the writer's interrupt being seen.
    pub cycles: u64,
    /// Whether the writer's interrupt arrived before the timeout.
    pub completed: bool,
}

fn descriptor(buffer: &DmaBuffer) -> Result<u64, DeviceError> {
    if buffer.len == 0 || buffer.len > MAX_DESCRIPTOR_BYTES || !buffer.len.is_multiple_of(4) {
        return Err(LitepcieDmaError::DescriptorLength { len: buffer.len }.into());
    }
    // The card's LitePCIe DMA is built with 32-bit descriptor addresses: a buffer above 4 GiB
    // (an IOVA the IOMMU handed out) would be truncated to another address, so it is refused.
    if buffer.bus_addr.checked_add(buffer.len as u64).is_none_or(|end| end > 1 << 32) {
        return Err(LitepcieDmaError::Above4GiB { bus_addr: buffer.bus_addr, len: buffer.len }.into());
    }
    Ok(pcie_dma0::reader_table_value::ADDRESS_LSB.set(buffer.bus_addr) | pcie_dma0::reader_table_value::LENGTH.set(buffer.len as u64))
}

/// Stops both engines and the loopback, and masks the DMA interrupts.
pub fn stop(card: &mut Card) -> Result<(), DeviceError> {
    card.write(pcie_dma0::READER_ENABLE, 0)?;
    card.write(pcie_dma0::WRITER_ENABLE, 0)?;
    card.write(pcie_dma0::LOOPBACK_ENABLE, 0)?;
    msi::set(card, tlpx_regs::constants::MSI_PCIE_DMA0_WRITER as u32, false)?;
    msi::set(card, tlpx_regs::constants::MSI_PCIE_DMA0_READER as u32, false)
}

/// Copies `src` to `dst` through the card (reader -> loopback -> writer) and waits up to
/// `timeout` of card time (the card's counter on a hardware backend) for the writer's interrupt. Leaves the engines
/// stopped.
pub fn loopback(card: &mut Card, src: &DmaBuffer, dst: &DmaBuffer, timeout: Duration) -> Result<Loopback, DeviceError> {
    if src.len != dst.len {
        return Err(LitepcieDmaError::SizeMismatch { src: src.len, dst: dst.len }.into());
    }
    let (src_desc, dst_desc) = (descriptor(src)?, descriptor(dst)?);
    stop(card)?;
    card.write(pcie_dma0::READER_TABLE_RESET, 1)?;
    card.write(pcie_dma0::WRITER_TABLE_RESET, 1)?;
    card.write(pcie_dma0::READER_TABLE_LOOP_PROG_N, 0)?;
    card.write(pcie_dma0::WRITER_TABLE_LOOP_PROG_N, 0)?;
    card.write(pcie_dma0::LOOPBACK_ENABLE, 1)?;
    card.write(pcie_dma0::WRITER_TABLE_VALUE, dst_desc)?;
    card.write(pcie_dma0::WRITER_TABLE_WE, dst.bus_addr >> 32)?;
    card.write(pcie_dma0::READER_TABLE_VALUE, src_desc)?;
    card.write(pcie_dma0::READER_TABLE_WE, src.bus_addr >> 32)?;
    let writer_bit = tlpx_regs::constants::MSI_PCIE_DMA0_WRITER as u32;
    msi::clear_latched(card, writer_bit)?;
    msi::set(card, writer_bit, true)?;
    let start = card.cycles()?;
    card.write(pcie_dma0::WRITER_ENABLE, 1)?;
    card.write(pcie_dma0::READER_ENABLE, 1)?;
    // `timeout` is card time (the loopback's own work), whatever the backend's clock.
    let irq = card.wait_interrupt_card_time(msi::wait_mask(writer_bit), timeout)?;
    let end = card.cycles()?;
    msi::clear_latched(card, writer_bit)?;
    stop(card)?;
    Ok(Loopback { cycles: end.saturating_sub(start), completed: irq.is_some() })
}
