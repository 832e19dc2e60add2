//! Where tlpx's register map is in BAR0, and the one wrapper that puts every access there.
//!
//! A card whose accelerator slot holds a DUT with placement `bar0` (its host driver expects
//! the DUT's registers at BAR0 offset 0) moves tlpx's own map to BAR0
//! `RELOCATED_TLPX_BASE` (gateware cores/request_path: the relocation). Every offset in
//! `tlpx-regs` is tlpx-internal (the card's bus), so the host finds the map once
//! ([`locate`]: `ident.magic` at BAR0 0, else at `RELOCATED_TLPX_BASE`) and, when it moved,
//! wraps the device in [`Relocated`], which adds the base to every access of BAR0. Every
//! command then runs unchanged on a relocated card.

use std::time::Duration;

use tlpx_regs::{constants, ident};

use crate::{backends, BarPath, ClockSource, Device, DeviceDescription, DeviceError, DmaBuffer, Interrupt, TimeMark, TlpInjector, Width};

/// The BAR0 offset of tlpx's map on a card with a DUT placed at BAR0 0.
pub const RELOCATED_TLPX_BASE: u64 = constants::RELOCATED_TLPX_BASE;

/// Where `ident.magic` was looked for and what was read there.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Located {
    /// The map's base in BAR0: 0 or [`RELOCATED_TLPX_BASE`].
    At(u64),
    /// Neither place holds the magic: what BAR0 0 read, and what the relocated place read
    /// (None: it could not be read, e.g. a BAR0 smaller than that).
    Nowhere { at_zero: u32, relocated: Option<u32> },
}

/// Looks for `ident.magic` at BAR0 offset 0, then at [`RELOCATED_TLPX_BASE`].
pub fn locate(device: &mut dyn Device) -> Result<Located, DeviceError> {
    let at_zero = device.bar_read(tlpx_regs::BAR, ident::MAGIC.offset, Width::W32)?;
    locate_given(device, at_zero as u32)
}

/// [`locate`] when BAR0 offset 0 has been read already (`at_zero`): a card with its map at 0
/// sees no further access (the spy's golden trace counts the host's reads).
pub fn locate_given(device: &mut dyn Device, at_zero: u32) -> Result<Located, DeviceError> {
    let magic = constants::IDENT_MAGIC;
    if u64::from(at_zero) == magic {
        return Ok(Located::At(0));
    }
    // A device that is no tlpx card may have a smaller BAR0: an error here means "not there".
    let relocated = device.bar_read(tlpx_regs::BAR, RELOCATED_TLPX_BASE + ident::MAGIC.offset, Width::W32).ok();
    if relocated == Some(magic) {
        return Ok(Located::At(RELOCATED_TLPX_BASE));
    }
    Ok(Located::Nowhere { at_zero, relocated: relocated.map(|v| v as u32) })
}

/// A device whose BAR0 accesses go to tlpx's map at `base` (every other BAR, the
/// configuration space, DMA and interrupts pass through as they are).
pub struct Relocated {
    inner: Box<dyn Device>,
    base: u64,
}

impl Relocated {
    pub fn new(inner: Box<dyn Device>, base: u64) -> Relocated {
        Relocated { inner, base }
    }

    pub fn base(&self) -> u64 {
        self.base
    }

    fn offset(&self, bar: u8, offset: u64) -> u64 {
        if bar == tlpx_regs::BAR {
            offset + self.base
        } else {
            offset
        }
    }
}

impl Device for Relocated {
    fn description(&self) -> DeviceDescription {
        self.inner.description()
    }
    fn bar_read(&mut self, bar: u8, offset: u64, width: Width) -> Result<u64, DeviceError> {
        let at = self.offset(bar, offset);
        self.inner.bar_read(bar, at, width)
    }
    fn bar_write(&mut self, bar: u8, offset: u64, width: Width, value: u64) -> Result<(), DeviceError> {
        let at = self.offset(bar, offset);
        self.inner.bar_write(bar, at, width, value)
    }
    fn bar_read_block(&mut self, bar: u8, offset: u64, len: usize) -> Result<Vec<u8>, DeviceError> {
        let at = self.offset(bar, offset);
        self.inner.bar_read_block(bar, at, len)
    }
    fn bar_write_block(&mut self, bar: u8, offset: u64, data: &[u8]) -> Result<(), DeviceError> {
        let at = self.offset(bar, offset);
        self.inner.bar_write_block(bar, at, data)
    }
    fn config_read(&mut self, offset: u16, len: u16) -> Result<Vec<u8>, DeviceError> {
        self.inner.config_read(offset, len)
    }
    fn config_write(&mut self, offset: u16, data: &[u8]) -> Result<(), DeviceError> {
        self.inner.config_write(offset, data)
    }
    fn alloc_dma(&mut self, len: usize) -> Result<DmaBuffer, DeviceError> {
        self.inner.alloc_dma(len)
    }
    fn free_dma(&mut self, buffer: DmaBuffer) -> Result<(), DeviceError> {
        self.inner.free_dma(buffer)
    }
    fn set_dma_placement(&mut self, placement: crate::host_memory::DmaPlacement) -> Result<(), DeviceError> {
        self.inner.set_dma_placement(placement)
    }
    fn iova_page_sizes(&self) -> Option<u64> {
        self.inner.iova_page_sizes()
    }
    fn request_vectors(&mut self, count: u32) -> Result<crate::InterruptVectors, DeviceError> {
        self.inner.request_vectors(count)
    }
    fn vector_host_irq(&self, vector: u32) -> Option<u32> {
        self.inner.vector_host_irq(vector)
    }
    fn wait_interrupt(&mut self, vector_mask: u32, timeout: Duration) -> Result<Option<Interrupt>, DeviceError> {
        self.inner.wait_interrupt(vector_mask, timeout)
    }
    fn idle(&mut self, duration: Duration) -> Result<(), DeviceError> {
        self.inner.idle(duration)
    }
    fn clock_ns(&mut self) -> Result<u64, DeviceError> {
        self.inner.clock_ns()
    }
    fn clock_source(&self) -> ClockSource {
        self.inner.clock_source()
    }
    fn set_live(&mut self, live: bool) -> Result<(), DeviceError> {
        self.inner.set_live(live)
    }
    fn time_mark(&mut self) -> Result<TimeMark, DeviceError> {
        self.inner.time_mark()
    }
    fn poll_pause(&mut self, step: Duration) -> Result<(), DeviceError> {
        self.inner.poll_pause(step)
    }
    fn bar_path(&self) -> BarPath {
        self.inner.bar_path()
    }
    fn set_bar_path(&mut self, path: BarPath) -> Result<(), DeviceError> {
        self.inner.set_bar_path(path)
    }
    // Raw TLPs: a memory request into BAR0 goes to tlpx's map too (see the TlpInjector impl).
    fn try_as_tlp_injector(&mut self) -> Option<&mut dyn TlpInjector> {
        self.inner.try_as_tlp_injector()?;
        Some(self)
    }
    fn try_as_driver_dma(&mut self) -> Option<&mut dyn backends::litepcie::DriverDma> {
        self.inner.try_as_driver_dma()
    }
}

/// A memory request (MRd/MWr, 3- or 4-DW header) whose address falls in BAR0 is moved by the
/// base as every other BAR0 access is: an offset computed from tlpx's map (`BAR0 +
/// ident.magic`) reaches tlpx's register there, not the DUT at BAR0 0. Other TLPs (config,
/// messages, completions, requests outside BAR0) are injected as they are.
impl TlpInjector for Relocated {
    fn inject_tlp(&mut self, dwords: &[u32], timeout: Duration) -> Result<Option<Vec<u32>>, DeviceError> {
        let bar0 = self.inner.config_read(0x10, 4)?;
        let bar0 = u64::from(u32::from_le_bytes([bar0[0], bar0[1], bar0[2], bar0[3]]) & !0xF);
        let mut dws = dwords.to_vec();
        relocate_memory_request(&mut dws, bar0, tlpx_regs::BAR_SIZE, self.base);
        let backend = self.inner.description().backend;
        let inner = self.inner.try_as_tlp_injector().ok_or(DeviceError::Unsupported {
            backend,
            what: "inject TLPs".into(),
            instead: "the simulator (sim:)".into(),
        })?;
        inner.inject_tlp(&dws, timeout)
    }
}

/// Adds `base` to the address of the memory request in `dws` when it lies in BAR0 (`bar0`,
/// `size` bytes) below `size - base` (the relocated map's part of BAR0).
fn relocate_memory_request(dws: &mut [u32], bar0: u64, size: u64, base: u64) {
    let Some(&dw0) = dws.first() else { return };
    let (fmt, tlp_type) = (dw0 >> 29, (dw0 >> 24) & 0x1F);
    // Memory requests (PCIe Base spec 2.2.7): Type 0 (MRd/MWr), Fmt 0..3.
    if tlp_type != 0 || fmt > 3 {
        return;
    }
    let four = fmt & 1 != 0;
    if dws.len() < if four { 4 } else { 3 } {
        return;
    }
    let address = if four { (u64::from(dws[2]) << 32) | u64::from(dws[3]) } else { u64::from(dws[2]) };
    let Some(offset) = address.checked_sub(bar0).filter(|o| *o + base < size) else { return };
    let moved = bar0 + offset + base;
    if four {
        dws[2] = (moved >> 32) as u32;
        dws[3] = moved as u32;
    } else {
        dws[2] = moved as u32;
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use std::collections::HashMap;
    use std::sync::{Arc, Mutex};

    use super::*;

    #[test]
    fn injected_memory_requests_into_bar0_move_to_the_relocated_map_and_nothing_else_does() {
        let (bar0, size, base) = (0xf000_0000u64, 1u64 << 20, RELOCATED_TLPX_BASE);
        let moved = |dws: &[u32]| {
            let mut d = dws.to_vec();
            relocate_memory_request(&mut d, bar0, size, base);
            d
        };
        // MRd32 of BAR0 + 0x0 (ident.magic in tlpx's offsets) -> BAR0 + 0x80000.
        assert_eq!(moved(&[0x0000_0001, 0x0000_010f, 0xf000_0000])[2], 0xf008_0000);
        // MWr32 with data.
        assert_eq!(moved(&[0x4000_0001, 0x0000_000f, 0xf000_0018, 7]), [0x4000_0001, 0x0000_000f, 0xf008_0018, 7]);
        // MRd64 (4-DW header) of the same place.
        assert_eq!(moved(&[0x2000_0001, 0x0000_010f, 0, 0xf000_0000]), [0x2000_0001, 0x0000_010f, 0, 0xf008_0000]);
        // Outside BAR0, above the relocated map's part, a config read, a completion: as given.
        for dws in [
            vec![0x0000_0001, 0x0000_010f, 0x4000_0000],
            vec![0x0000_0001, 0x0000_010f, (bar0 + size - base) as u32],
            vec![0x0400_0001, 0x0000_5a0f, 0x0100_0000],
            vec![0x4a00_0001, 0x0100_0004, 0x0000_0100, 9],
        ] {
            assert_eq!(moved(&dws), dws);
        }
    }

    /// A card in memory: BAR0 as a map of DWs (unwritten DWs read 0), of `bar0_size` bytes
    /// (an access past it fails, as on a BAR that small), with tlpx's ident block at `base`.
    pub(crate) struct MemoryCard {
        pub dws: Arc<Mutex<HashMap<u64, u32>>>,
        bar0_size: u64,
    }

    impl MemoryCard {
        pub(crate) fn with_ident_at(base: u64, bar0_size: u64) -> MemoryCard {
            let mut dws = HashMap::new();
            dws.insert(base + ident::MAGIC.offset, constants::IDENT_MAGIC as u32);
            dws.insert(base + ident::MAP_HASH.offset, tlpx_regs::MAP_HASH);
            dws.insert(base + ident::DATA_WIDTH.offset, 64);
            dws.insert(base + ident::CLOCK_HZ.offset, 125_000_000);
            MemoryCard { dws: Arc::new(Mutex::new(dws)), bar0_size }
        }

        fn check(&self, bar: u8, offset: u64) -> Result<(), DeviceError> {
            if bar != 0 || offset + 4 > self.bar0_size {
                return Err(DeviceError::InvalidArgument(format!("BAR{bar} offset {offset:#x} is outside the BAR")));
            }
            Ok(())
        }
    }

    impl Device for MemoryCard {
        fn description(&self) -> DeviceDescription {
            DeviceDescription {
                backend: "memory".into(),
                location: "memory".into(),
                pci_address: "0000:00:00.0".into(),
                bar_sizes: vec![Some(self.bar0_size)],
            }
        }
        fn bar_read(&mut self, bar: u8, offset: u64, _width: Width) -> Result<u64, DeviceError> {
            self.check(bar, offset)?;
            Ok(u64::from(self.dws.lock().expect("the memory card's lock").get(&offset).copied().unwrap_or(0)))
        }
        fn bar_write(&mut self, bar: u8, offset: u64, _width: Width, value: u64) -> Result<(), DeviceError> {
            self.check(bar, offset)?;
            self.dws.lock().expect("the memory card's lock").insert(offset, value as u32);
            Ok(())
        }
        fn config_read(&mut self, _offset: u16, len: u16) -> Result<Vec<u8>, DeviceError> {
            Ok(vec![0; len as usize])
        }
        fn config_write(&mut self, _offset: u16, _data: &[u8]) -> Result<(), DeviceError> {
            Ok(())
        }
        fn alloc_dma(&mut self, _len: usize) -> Result<DmaBuffer, DeviceError> {
            Err(DeviceError::Backend("no DMA in memory".into()))
        }
        fn free_dma(&mut self, _buffer: DmaBuffer) -> Result<(), DeviceError> {
            Ok(())
        }
        fn wait_interrupt(&mut self, _vector_mask: u32, _timeout: Duration) -> Result<Option<Interrupt>, DeviceError> {
            Ok(None)
        }
        fn idle(&mut self, _duration: Duration) -> Result<(), DeviceError> {
            Ok(())
        }
    }

    #[test]
    fn the_map_is_found_at_zero_or_at_the_relocated_base() {
        assert_eq!(locate(&mut MemoryCard::with_ident_at(0, 0x100000)).expect("the memory card answers"), Located::At(0));
        let mut relocated = MemoryCard::with_ident_at(RELOCATED_TLPX_BASE, 0x100000);
        relocated.dws.lock().expect("the memory card's lock").insert(0, 0xDEAD_BEEF); // the DUT's register at BAR0 0
        assert_eq!(locate(&mut relocated).expect("the memory card answers"), Located::At(RELOCATED_TLPX_BASE));
    }

    #[test]
    fn neither_place_is_reported_with_what_each_read() {
        let mut other = MemoryCard::with_ident_at(0x4000, 0x100000);
        other.dws.lock().expect("the memory card's lock").insert(0, 0x1234);
        assert_eq!(locate(&mut other).expect("the memory card answers"), Located::Nowhere { at_zero: 0x1234, relocated: Some(0) });
        let mut small = MemoryCard::with_ident_at(0x4000, 0x1000);
        assert_eq!(locate(&mut small).expect("the memory card answers"), Located::Nowhere { at_zero: 0, relocated: None });
    }

    #[test]
    fn the_wrapper_adds_the_base_to_bar0_only() {
        let card = MemoryCard::with_ident_at(RELOCATED_TLPX_BASE, 0x100000);
        let dws = card.dws.clone();
        let mut dev = Relocated::new(Box::new(card), RELOCATED_TLPX_BASE);
        assert_eq!(dev.bar_read(0, ident::MAGIC.offset, Width::W32).expect("the memory card answers"), constants::IDENT_MAGIC);
        dev.bar_write(0, ident::SCRATCH.offset, Width::W32, 0x55).expect("the memory card answers");
        assert_eq!(dws.lock().expect("the memory card's lock").get(&(RELOCATED_TLPX_BASE + ident::SCRATCH.offset)), Some(&0x55));
        let block = dev.bar_read_block(0, ident::MAGIC.offset, 4).expect("the memory card answers");
        assert_eq!(u32::from_le_bytes(block.try_into().expect("4 bytes")), constants::IDENT_MAGIC as u32);
        // Another BAR keeps its offsets (the memory card has none: its error names BAR1 0x0).
        let err = dev.bar_read(1, 0, Width::W32).expect_err("an error").to_string();
        assert!(err.contains("BAR1 offset 0x0 "), "{err}");
    }
}
