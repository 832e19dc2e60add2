//! Who is in the card's accelerator slot: the `slot` CSR block (docs/architecture.md, "The
//! accelerator slot"), read once for `tlpx info`, the spy's attribution of the slot's tags,
//! and the rule-30 commands' check that rule 30 is what the slot holds.

use serde::Serialize;
use tlpx_device::card::Card;
use tlpx_device::Width;
use tlpx_regs::slot;

/// The slot block's identification and counters.
#[derive(Debug, Clone, Serialize)]
pub struct SlotInfo {
    /// `slot.dut_name`: the accelerator's name (`rule30`, `pci_epf_test`).
    pub dut_name: String,
    /// `major.minor`.
    pub dut_version: String,
    /// `slot.dut_map_hash`, e.g. `0x4636ad39`.
    pub dut_map_hash: String,
    /// The slot interface version the DUT was built for.
    pub interface_version: u64,
    /// `window` (the DUT's registers at BAR0 `SLOT_WINDOW_BASE`) or `bar0` (at BAR0 0,
    /// tlpx's map at `RELOCATED_TLPX_BASE`).
    pub placement: String,
    /// The DUT sends TLPs of its own with the slot's tags.
    pub dma: bool,
    /// BAR0 offset of the DUT's register window as the host sees BAR0.
    pub window_bar0_offset: u64,
    pub window_bytes: u64,
    /// The slot's tags (SLOT_TAG_BASE..+SLOT_TAGS).
    pub tags: [u64; 2],
    pub dma_reads: u64,
    pub dma_writes: u64,
    pub dma_read_bytes: u64,
    pub dma_write_bytes: u64,
    pub dma_errors: u64,
    pub irqs: u64,
}

/// The ASCII name in a NUL-padded register (byte 0 in bits 7:0 of the first word).
pub fn read_name(card: &mut Card, offset: u64, words: u64) -> Result<String, tlpx_device::DeviceError> {
    let mut bytes = Vec::new();
    for i in 0..words {
        bytes.extend_from_slice(&(card.device().bar_read(tlpx_regs::BAR, offset + 4 * i, Width::W32)? as u32).to_le_bytes());
    }
    Ok(bytes.iter().take_while(|b| **b != 0).map(|b| if b.is_ascii_graphic() { *b as char } else { '?' }).collect())
}

/// Just the DUT's name (one 128-bit register).
pub fn dut_name(card: &mut Card) -> Result<String, tlpx_device::DeviceError> {
    read_name(card, slot::DUT_NAME.offset, u64::from(slot::DUT_NAME.size_bits.div_ceil(32)))
}

pub fn read(card: &mut Card) -> Result<SlotInfo, tlpx_device::DeviceError> {
    let version = card.read(slot::DUT_VERSION)?;
    let interface = card.read(slot::INTERFACE)?;
    let placement_value = slot::interface::PLACEMENT.get(interface) as u32;
    let placement = slot::interface::Placement::try_from(placement_value);
    let window_bar0_offset = match placement {
        Ok(slot::interface::Placement::Bar0) => 0,
        _ => tlpx_regs::constants::SLOT_WINDOW_BASE,
    };
    Ok(SlotInfo {
        dut_name: dut_name(card)?,
        dut_version: format!("{}.{}", slot::dut_version::MAJOR.get(version), slot::dut_version::MINOR.get(version)),
        dut_map_hash: format!("0x{:08x}", card.read(slot::DUT_MAP_HASH)?),
        interface_version: slot::interface::VERSION.get(interface),
        placement: placement.map_or_else(|v| format!("unknown ({v})"), |p| p.name().to_owned()),
        dma: slot::interface::DMA.get(interface) != 0,
        window_bar0_offset,
        window_bytes: card.read(slot::WINDOW_BYTES)?,
        tags: [tlpx_regs::constants::SLOT_TAG_BASE, tlpx_regs::constants::SLOT_TAG_BASE + tlpx_regs::constants::SLOT_TAGS - 1],
        dma_reads: card.read(slot::DMA_READS)?,
        dma_writes: card.read(slot::DMA_WRITES)?,
        dma_read_bytes: card.read(slot::DMA_READ_BYTES)?,
        dma_write_bytes: card.read(slot::DMA_WRITE_BYTES)?,
        dma_errors: card.read(slot::DMA_ERRORS)?,
        irqs: card.read(slot::IRQS)?,
    })
}

/// Refuses a card whose slot holds an accelerator other than `want` (the rule-30 commands
/// drive rule 30's registers: on another DUT they would write that DUT's).
pub fn require(card: &mut Card, want: &str, command: &str) -> anyhow::Result<()> {
    let name = dut_name(card)?;
    if name != want {
        anyhow::bail!(
            "this card's accelerator slot holds {name:?}, not {want:?}: `{command}` drives {want}'s registers and would write {name}'s; use a card built with {want} in the slot (make gateware, no DUT=), or `tlpx reg` for {name}'s registers"
        );
    }
    Ok(())
}
