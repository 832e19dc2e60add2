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

/// Parses a `0x` hex address as the trace header writes it.
pub fn parse_address(text: &str) -> Option<u64> {
    let hex = text.strip_prefix("0x").or_else(|| text.strip_prefix("0X"))?;
    u64::from_str_radix(hex, 16).ok()
}

/// Names the host's requests into BAR0 at a known bus address.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Bar0Names {
    /// BAR0's bus address.
    pub base: u64,
}

impl Bar0Names {
    pub fn new(base: u64) -> Bar0Names {
        Bar0Names { base }
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
        Some(Bar0Names::new(base))
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
        let offset = r.address.checked_sub(self.base)? + lane;
        bar0_name(offset & !3)
    }
}

/// True when `hash` (a card's ident.map_hash) is this build's map, with or without the CPU,
/// or (with an accelerator slot) the card-owned part of it.
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
        assert_eq!(names.name(&at(0xf000_0000 + spy::WR_INDEX.offset)).as_deref(), Some("spy.wr_index"));
        assert_eq!(names.name(&at(0xe000_0000)), None, "below BAR0");
        assert_eq!(names.name(&at(0xf000_0000 + tlpx_regs::BAR_SIZE)), None, "above BAR0");
        let up = build::mem_read(0, Direction::Up, 0, 0, 1, 0xf000_0000, 1);
        assert_eq!(names.name(&up), None, "the card's own requests go to host memory");
    }
}
