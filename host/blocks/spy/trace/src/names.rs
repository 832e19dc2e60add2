//! Register names for BAR0 addresses: the one lookup the text log, CSV, VCD and `tlpx top`
//! use to show `spy.wr_index` where a host request hits BAR0.
//!
//! A name is:
//! - `region.register` at a register's first byte, `region.register+0x4` inside a wider one
//!   (the high word of a 64-bit counter, a word of a rule-30 line);
//! - `window+0x40` inside a window that has no register there (the PIO window `pio`, the
//!   rule-30 window `rule30`, the soft CPU's SRAM `cpu_sram`);
//! - `region+0x1fc` inside a CSR region (0x800 bytes each) at an offset with no register;
//! - nothing elsewhere (an unmapped offset: the address alone is shown).
//!
//! The names come from the generated map (tlpx-regs) of this build. A trace records its
//! card's map hash: [`Bar0Names::from_header`] names nothing when the trace was taken on a
//! card with another map, whose offsets may mean other registers.

use tlpx_regs::constants;

use crate::header::Header;
use crate::record::{Body, Direction, Record, RequestKind};

/// Bytes of one CSR region (LiteX's CSR paging: a region every 0x800 bytes).
const CSR_REGION_BYTES: u64 = 0x800;

/// Windows of BAR0 that are not CSR regions: name, offset, size.
const WINDOWS: [(&str, u64, u64); 3] = [
    ("pio", constants::PIO_WINDOW_BASE, constants::PIO_WINDOW_SIZE),
    ("rule30", constants::RULE30_WINDOW_BASE, constants::RULE30_WINDOW_SIZE),
    ("cpu_sram", constants::CPU_SRAM_BASE, constants::CPU_SRAM_SIZE),
];

/// Bytes a register spans in BAR0 (whole 32-bit words).
fn span(reg: &tlpx_regs::Register) -> u64 {
    4 * u64::from(reg.size_bits.div_ceil(32))
}

fn with_offset(name: &str, delta: u64) -> String {
    if delta == 0 {
        name.to_owned()
    } else {
        format!("{name}+{delta:#x}")
    }
}

/// The name of BAR0 offset `offset` in the card's map (see the module's doc), or None.
pub fn bar0_name(offset: u64) -> Option<String> {
    if offset >= tlpx_regs::BAR_SIZE {
        return None;
    }
    // ALL is in BAR0 order: the last register starting at or before `offset`.
    let all = tlpx_regs::ALL;
    let i = all.partition_point(|r| r.offset <= offset);
    if let Some(reg) = i.checked_sub(1).map(|i| &all[i]) {
        if offset < reg.offset + span(reg) {
            return Some(with_offset(&format!("{}.{}", reg.region, reg.name), offset - reg.offset));
        }
    }
    if let Some((name, base, _)) = WINDOWS.iter().find(|(_, base, size)| (*base..base + size).contains(&offset)) {
        return Some(with_offset(name, offset - base));
    }
    let region_base = offset & !(CSR_REGION_BYTES - 1);
    if region_base < constants::PIO_WINDOW_BASE {
        if let Some(reg) = all.iter().find(|r| r.offset & !(CSR_REGION_BYTES - 1) == region_base) {
            return Some(with_offset(reg.region, offset - region_base));
        }
    }
    None
}

/// The card's MSI sources, by bit in an MSI record's `sources` (the gateware's MSI_SOURCES,
/// whose bit numbers tlpx-regs exports as `MSI_*`).
const MSI_SOURCE_BITS: [(&str, u64); 7] = [
    ("pcie_dma0_writer", constants::MSI_PCIE_DMA0_WRITER),
    ("pcie_dma0_reader", constants::MSI_PCIE_DMA0_READER),
    ("software", constants::MSI_SOFTWARE),
    ("generator", constants::MSI_GENERATOR),
    ("irq_timer", constants::MSI_IRQ_TIMER),
    ("rt_loop", constants::MSI_RT_LOOP),
    ("slot", constants::MSI_SLOT),
];

/// The names of the MSI sources set in `sources`, lowest bit first, joined by `+`
/// (`generator`, `software+generator`); a bit no source has is shown as `bit9`; `-` for none.
pub fn msi_sources_text(sources: u32) -> String {
    let names: Vec<String> = (0..32u64)
        .filter(|bit| sources >> bit & 1 != 0)
        .map(|bit| MSI_SOURCE_BITS.iter().find(|(_, b)| *b == bit).map_or_else(|| format!("bit{bit}"), |(n, _)| (*n).to_owned()))
        .collect();
    if names.is_empty() {
        "-".to_owned()
    } else {
        names.join("+")
    }
}

/// Parses a `0x` hex address as the trace header writes it.
pub fn parse_address(text: &str) -> Option<u64> {
    let hex = text.strip_prefix("0x").or_else(|| text.strip_prefix("0X"))?;
    u64::from_str_radix(hex, 16).ok()
}

/// Names the host's requests into BAR0 at a known bus address, and attributes the card's
/// tagged requests (and their completions) to the block that owns the tag.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Bar0Names {
    /// BAR0's bus address.
    pub base: u64,
    /// BAR0 offset of tlpx's own map: 0, or `RELOCATED_TLPX_BASE` on a card whose slot DUT
    /// is placed at BAR0 0 (its window is then BAR0 0..).
    pub tlpx_base: u64,
    /// The accelerator in the slot (`slot.dut_name`); None: the map's own (rule 30).
    pub dut: Option<String>,
    /// Its registers when known (the trace header's `slot_registers`): its window's
    /// accesses are then named by register.
    pub dut_registers: Vec<crate::SlotRegister>,
}

impl Bar0Names {
    pub fn new(base: u64) -> Bar0Names {
        Bar0Names { base, tlpx_base: 0, dut: None, dut_registers: Vec::new() }
    }

    /// With the card's layout: tlpx's map at `tlpx_base`, `dut` in the slot.
    pub fn with_slot(mut self, tlpx_base: u64, dut: Option<String>) -> Bar0Names {
        self.tlpx_base = tlpx_base;
        self.dut = dut;
        self
    }

    /// From a trace header: None when it records no BAR0 address (traces written before
    /// it did), or a map hash other than this build's (names could be wrong).
    pub fn from_header(header: &Header) -> Option<Bar0Names> {
        let base = parse_address(header.card.bar0_address.as_deref()?)?;
        if let Some(hash) = header.card.map_hash.as_deref() {
            let hash = u32::try_from(parse_address(hash)?).ok()?;
            if !this_map(hash) {
                return None;
            }
        }
        let tlpx_base = header.card.tlpx_map_offset.as_deref().and_then(parse_address).unwrap_or(0);
        Some(Bar0Names::new(base).with_slot(tlpx_base, header.card.slot_dut.clone()).with_dut_registers(header.card.slot_registers.clone()))
    }

    /// With the slot DUT's registers (name, window offset): its accesses named by register.
    pub fn with_dut_registers(mut self, registers: Vec<crate::SlotRegister>) -> Bar0Names {
        self.dut_registers = registers;
        self
    }

    /// The name of offset `offset` of the other DUT's window `dut`: its register there when
    /// the registers are known, else `dut+0x4`.
    fn dut_window_name(&self, dut: &str, offset: u64) -> String {
        match self.dut_registers.iter().find(|r| (r.offset..r.offset + 4 * u64::from(r.size_bits.div_ceil(32)).max(1)).contains(&offset)) {
            Some(r) => with_offset(&format!("{dut}.{}", r.name), offset - r.offset),
            None => with_offset(dut, offset),
        }
    }

    /// The slot DUT's name when it is not the map's own DUT (rule 30): its registers are
    /// not in tlpx-regs, so its window is named by offset.
    fn other_dut(&self) -> Option<&str> {
        self.dut.as_deref().filter(|d| !tlpx_regs::DUT_REGIONS.contains(d))
    }

    /// The register `record` reads or writes: host memory requests (down) into BAR0.
    pub fn name(&self, record: &Record) -> Option<String> {
        let Body::Request(r) = &record.body else { return None };
        if r.direction != Direction::Down
            || !matches!(r.kind(), RequestKind::MRd32 | RequestKind::MRd64 | RequestKind::MWr32 | RequestKind::MWr64)
        {
            return None;
        }
        // First byte the request touches: the first byte enable's lowest set lane.
        let lane = if r.first_be == 0 { 0 } else { u64::from(r.first_be.trailing_zeros()) };
        let offset = (r.address.checked_sub(self.base)? + lane) & !3;
        if offset >= tlpx_regs::BAR_SIZE {
            return None;
        }
        if self.tlpx_base != 0 {
            // The DUT at BAR0 0 (placement bar0): below tlpx's map is its window.
            // Inside tlpx's map, the slot's window (SLOT_WINDOW_BASE) is the same DUT again:
            // `tlpx reg` reaches the DUT's registers there.
            let window = constants::SLOT_WINDOW_BASE..constants::SLOT_WINDOW_BASE + constants::SLOT_WINDOW_MAX;
            return match (offset.checked_sub(self.tlpx_base), self.other_dut()) {
                (Some(internal), Some(dut)) if window.contains(&internal) => {
                    Some(self.dut_window_name(dut, internal - constants::SLOT_WINDOW_BASE))
                }
                (Some(internal), _) => bar0_name(internal),
                (None, dut) => Some(self.dut_window_name(dut.or(self.dut.as_deref()).unwrap_or("slot"), offset)),
            };
        }
        let window = constants::SLOT_WINDOW_BASE..constants::SLOT_WINDOW_BASE + constants::SLOT_WINDOW_MAX;
        if let (Some(dut), true) = (self.other_dut(), window.contains(&offset)) {
            return Some(self.dut_window_name(dut, offset - constants::SLOT_WINDOW_BASE));
        }
        bar0_name(offset)
    }

    /// Who sent a TLP, or whose transaction it belongs to: every record gets one.
    ///
    /// - The card's requests (up) by their tag: each block stamps tags of its own range into
    ///   its reads and, although PCIe leaves a posted write's tag unused, its writes
    ///   (gateware soc.CARD_TAGS, exported as constants): `generator`, `rt_loop`, `irq_timer`,
    ///   `spy`, `litepcie` (LitePCIe's DMA), the slot's DUT by name; the spy's own traffic
    ///   (its ring, or LitePCIe's DMA carrying its records) is `spy` whatever the tag.
    /// - The completions that answer them (down), and a read's completion timeout: the reader's.
    /// - The host's requests (down) and the card's completions of them (up): `host`.
    /// - An MSI: its sources (`generator`, `slot`, ...).
    ///
    /// None only for a footer, a payload chunk, or a card request whose tag no block owns (a
    /// card built before the tags, or a broken one).
    pub fn source(&self, record: &Record) -> Option<String> {
        let (direction, tag, own, write) = match &record.body {
            Body::Request(r) => (r.direction, r.tag, r.own, matches!(r.kind(), RequestKind::MWr32 | RequestKind::MWr64)),
            // A completion down answers a request (a read) that went up.
            Body::Completion(c) => (c.direction.other(), c.tag, false, false),
            Body::Timeout(t) => (t.direction, t.tag, t.own, false),
            Body::Msi(m) => return Some(msi_sources_text(m.sources)),
            Body::Footer(_) | Body::Payload(_) => return None,
        };
        if own {
            return Some("spy".to_owned());
        }
        if direction == Direction::Down {
            return Some("host".to_owned());
        }
        tag_owner(u64::from(tag), write).map(|owner| match owner {
            TagOwner::Slot => self.dut.clone().unwrap_or_else(|| "rule30".to_owned()),
            TagOwner::Block(name) => name.to_owned(),
        })
    }
}

enum TagOwner {
    Block(&'static str),
    Slot,
}

/// Who owns a card tag of a write (`write`) or another request (the tag ranges the gateware
/// exports: soc.CARD_TAGS). LitePCIe's DMA reads take tags 0..LITEPCIE_TAGS and its writes
/// carry LITEPCIE_WRITE_TAG (in that range); the other blocks use one range for both.
fn tag_owner(tag: u64, write: bool) -> Option<TagOwner> {
    let c = |lo: u64, n: u64| (lo..lo + n).contains(&tag);
    if (!write && c(0, constants::LITEPCIE_TAGS)) || (write && tag == constants::LITEPCIE_WRITE_TAG) {
        Some(TagOwner::Block("litepcie"))
    } else if c(constants::GENERATOR_TAG_BASE, constants::GENERATOR_TAGS) || tag == constants::GENERATOR_FLUSH_TAG {
        Some(TagOwner::Block("generator"))
    } else if tag == constants::RT_LOOP_TAG {
        Some(TagOwner::Block("rt_loop"))
    } else if c(constants::SLOT_TAG_BASE, constants::SLOT_TAGS) {
        Some(TagOwner::Slot)
    } else if tag == constants::SPY_RING_TAG {
        Some(TagOwner::Block("spy"))
    } else if tag == constants::IRQ_TIMER_RING_TAG {
        Some(TagOwner::Block("irq_timer"))
    } else if tag == constants::MSIX_TAG {
        // MSI-X messages: a vector's table entry written to the host (gateware cores/msix.py).
        Some(TagOwner::Block("msix"))
    } else {
        None
    }
}

/// True when `hash` (a card's ident.map_hash: the card-owned part of the map) is this
/// build's, with or without the CPU.
pub fn this_map(hash: u32) -> bool {
    hash == tlpx_regs::MAP_HASH || hash == tlpx_regs::MAP_HASH_CPU
}

#[cfg(test)]
mod tests {
    use super::*;
    use tlpx_regs::{generator, ident, rule30, spy};

    #[test]
    fn registers_windows_and_regions_are_named() {
        assert_eq!(bar0_name(ident::MAGIC.offset).as_deref(), Some("ident.magic"));
        assert_eq!(bar0_name(spy::WR_INDEX.offset).as_deref(), Some("spy.wr_index"));
        assert_eq!(bar0_name(generator::STATUS.offset).as_deref(), Some("generator.status"));
        // A 64-bit register's high word.
        let wide = tlpx_regs::ALL.iter().find(|r| r.size_bits > 32 && r.size_bits <= 64).expect("a 64-bit register");
        assert_eq!(bar0_name(wide.offset + 4), Some(format!("{}.{}+0x4", wide.region, wide.name)));
        assert_eq!(bar0_name(constants::PIO_WINDOW_BASE + 0x40).as_deref(), Some("pio+0x40"));
        assert_eq!(bar0_name(rule30::VERSION.offset).as_deref(), Some("rule30.version"));
        let end = rule30::REGION_OFFSET + constants::RULE30_WINDOW_SIZE - 4;
        let last = tlpx_regs::ALL.iter().filter(|r| r.region == "rule30").map(|r| r.offset + span(r)).max().unwrap_or(0);
        if end >= last {
            assert_eq!(bar0_name(end), Some(format!("rule30+{:#x}", end - rule30::REGION_OFFSET)));
        }
        // An offset inside the ident region with no register, and outside everything.
        assert_eq!(bar0_name(0x7fc).as_deref(), Some("ident+0x7fc"));
        assert_eq!(bar0_name(0xf_fffc), None);
        assert_eq!(bar0_name(tlpx_regs::BAR_SIZE), None);
    }

    #[test]
    fn only_host_requests_into_bar0_are_named() {
        use crate::record::build;
        let names = Bar0Names::new(0xf000_0000);
        let at = |a: u64| build::mem_read(0, Direction::Down, 0, 0, 1, a, 1);
        let window = 0xf000_0000 + constants::SLOT_WINDOW_BASE;
        assert_eq!(names.name(&at(window)).as_deref(), Some("rule30.version"), "the map's own DUT by register");
        let other = names.clone().with_slot(0, Some("pci_epf_test".into()));
        assert_eq!(other.name(&at(window + 0x8)).as_deref(), Some("pci_epf_test+0x8"), "another DUT's window by offset");
        assert_eq!(other.name(&at(0xf000_0000 + spy::WR_INDEX.offset)).as_deref(), Some("spy.wr_index"));
        // Placement bar0: the DUT at BAR0 0, tlpx's map relocated.
        let moved = names.clone().with_slot(constants::RELOCATED_TLPX_BASE, Some("pci_epf_test".into()));
        assert_eq!(moved.name(&at(0xf000_0004)).as_deref(), Some("pci_epf_test+0x4"));
        // The same window through tlpx's relocated map (where `tlpx reg` reaches it), and by
        // register once the DUT's registers are known.
        let alias = 0xf000_0000 + constants::RELOCATED_TLPX_BASE + constants::SLOT_WINDOW_BASE;
        assert_eq!(moved.name(&at(alias + 0x4)).as_deref(), Some("pci_epf_test+0x4"));
        let regs = |names: &[(&str, u64)]| {
            names.iter().map(|(n, o)| crate::SlotRegister { name: (*n).into(), offset: *o, size_bits: 32 }).collect::<Vec<_>>()
        };
        let known = moved.clone().with_dut_registers(regs(&[("magic", 0), ("command", 4)]));
        assert_eq!(known.name(&at(0xf000_0004)).as_deref(), Some("pci_epf_test.command"));
        assert_eq!(known.name(&at(alias + 0x4)).as_deref(), Some("pci_epf_test.command"));
        assert_eq!(known.name(&at(alias + 0x8)).as_deref(), Some("pci_epf_test+0x8"), "no register there");
        let in_window = other.clone().with_dut_registers(regs(&[("command", 4)]));
        assert_eq!(in_window.name(&at(window + 0x4)).as_deref(), Some("pci_epf_test.command"));
        assert_eq!(moved.name(&at(0xf000_0000 + constants::RELOCATED_TLPX_BASE + spy::WR_INDEX.offset)).as_deref(), Some("spy.wr_index"));
        assert_eq!(names.name(&at(0xf000_0000 + spy::WR_INDEX.offset)).as_deref(), Some("spy.wr_index"));
        assert_eq!(names.name(&at(0xe000_0000)), None, "below BAR0");
        assert_eq!(names.name(&at(0xf000_0000 + tlpx_regs::BAR_SIZE)), None, "above BAR0");
        let up = build::mem_read(0, Direction::Up, 0, 0, 1, 0xf000_0000, 1);
        assert_eq!(names.name(&up), None, "the card's own requests go to host memory");
    }

    #[test]
    fn card_requests_are_attributed_by_tag() {
        use crate::record::build;
        let names = Bar0Names::new(0xf000_0000).with_slot(0, Some("pci_epf_test".into()));
        let read = |tag: u64| build::mem_read(0, Direction::Up, 0, 0x100, tag as u8, 0x4000_0000, 1);
        assert_eq!(names.source(&read(constants::GENERATOR_TAG_BASE)).as_deref(), Some("generator"));
        assert_eq!(names.source(&read(constants::RT_LOOP_TAG)).as_deref(), Some("rt_loop"));
        assert_eq!(names.source(&read(constants::SLOT_TAG_BASE)).as_deref(), Some("pci_epf_test"));
        assert_eq!(names.source(&read(constants::SLOT_TAG_BASE + constants::SLOT_TAGS - 1)).as_deref(), Some("pci_epf_test"));
        assert_ne!(
            names.source(&read(constants::SLOT_TAG_BASE + constants::SLOT_TAGS)).as_deref(),
            Some("pci_epf_test"),
            "past the slot's tags"
        );
        assert_eq!(Bar0Names::new(0).source(&read(constants::SLOT_TAG_BASE)).as_deref(), Some("rule30"), "the map's own DUT");
        // The completion answering it (down), not a host read's completion (up).
        let cpl = |dir| build::completion(0, dir, 0, 0x100, constants::SLOT_TAG_BASE as u8, 0, 4, 1, None, 1, true);
        assert_eq!(names.source(&cpl(Direction::Down)).as_deref(), Some("pci_epf_test"));
        // A host read with the same tag value is the host's, and so is its completion (up).
        let host = build::mem_read(0, Direction::Down, 0, 0, constants::SLOT_TAG_BASE as u8, 0xf000_0000, 1);
        assert_eq!(names.source(&host).as_deref(), Some("host"));
        assert_eq!(names.source(&cpl(Direction::Up)).as_deref(), Some("host"));
        // Every block's tags, writes included (PCIe leaves a posted write's tag unused).
        let write = |tag: u64| build::mem_write(0, Direction::Up, 0, 0x100, tag as u8, 0x4000_0000, 1);
        assert_eq!(names.source(&read(0)).as_deref(), Some("litepcie"));
        assert_eq!(names.source(&read(constants::LITEPCIE_TAGS - 1)).as_deref(), Some("litepcie"));
        assert_eq!(names.source(&write(constants::LITEPCIE_WRITE_TAG)).as_deref(), Some("litepcie"));
        assert_eq!(names.source(&write(1)), None, "LitePCIe's writes carry one tag of its range");
        for (tag, block) in [
            (constants::GENERATOR_TAG_BASE, "generator"),
            (constants::GENERATOR_FLUSH_TAG, "generator"),
            (constants::RT_LOOP_TAG, "rt_loop"),
            (constants::SLOT_TAG_BASE, "pci_epf_test"),
            (constants::SPY_RING_TAG, "spy"),
            (constants::IRQ_TIMER_RING_TAG, "irq_timer"),
            (constants::MSIX_TAG, "msix"),
        ] {
            assert_eq!(names.source(&write(tag)).as_deref(), Some(block), "tag {tag}");
            assert_eq!(names.source(&read(tag)).as_deref(), Some(block), "tag {tag}");
        }
        assert_eq!(names.source(&write(100)), None, "a tag no block owns");
    }
}
