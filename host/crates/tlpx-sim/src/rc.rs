//! Root complex TLP building and parsing: what the root complex puts on the link for a CPU
//! load or store, how it completes the card's memory reads, how it applies the card's memory
//! writes. Pure functions over DWs (PCI Express Base spec, 2.2 and 2.3.1.1), so they are
//! tested without a card.

use tlpx_model::link::{completions_for_read, LinkConfig};
use tlpx_sim_protocol::tlp::{self, *};

/// Byte enables and DW count of a naturally aligned CPU access of `width` bytes at `offset`.
fn access_bes(offset: u64, width: u8) -> (u32, u8, u8) {
    let lane = (offset & 3) as u8;
    match width {
        1 => (1, 1 << lane, 0),
        2 => (1, 0b11 << lane, 0),
        4 => (1, 0xF, 0),
        _ => (2, 0xF, 0xF),
    }
}

/// The MRd32 a CPU load of `width` bytes at BAR offset `offset` becomes (`bar_base` is
/// the BAR's bus address). The access must be naturally aligned (checked by the caller).
pub fn mmio_read_tlp(requester_id: u16, tag: u8, bar_base: u64, offset: u64, width: u8) -> Vec<u32> {
    let (len, fbe, lbe) = access_bes(offset, width);
    tlp::mem_read(requester_id, tag, bar_base + (offset & !3), len, fbe, lbe, false)
}

/// The MWr32 a CPU store of the low `width` bytes of `value` at `offset` becomes.
pub fn mmio_write_tlp(requester_id: u16, bar_base: u64, offset: u64, width: u8, value: u64) -> Vec<u32> {
    let (len, fbe, lbe) = access_bes(offset, width);
    let shift = 8 * (offset & 3);
    let payload: Vec<u32> = if len == 2 {
        vec![value as u32, (value >> 32) as u32]
    } else {
        let mask = if width == 4 { u64::from(u32::MAX) } else { (1u64 << (8 * u32::from(width))) - 1 };
        vec![((value & mask) << shift) as u32]
    };
    tlp::mem_write(requester_id, 0, bar_base + (offset & !3), fbe, lbe, &payload, false)
}

/// DW count and First/Last BE of a block access of `len` (1..=64) bytes at byte `offset`:
/// the DWs from the one holding the first byte to the one holding the last, the first and
/// last partially enabled as needed (contiguous, so legal for any length, PCIe 2.2.5).
pub fn block_bes(offset: u64, len: usize) -> (u32, u8, u8) {
    let lead = (offset & 3) as usize;
    let ndw = (lead + len).div_ceil(4);
    let tail = ndw * 4 - lead - len; // bytes not enabled in the last DW
    let first = (0xFu8 << lead) & 0xF;
    let last = 0xFu8 >> tail;
    if ndw == 1 {
        (1, first & last, 0)
    } else {
        (ndw as u32, first, last)
    }
}

/// The one MRd32 a CPU load of `len` bytes at BAR offset `offset` becomes.
pub fn mmio_read_block_tlp(requester_id: u16, tag: u8, bar_base: u64, offset: u64, len: usize) -> Vec<u32> {
    let (ndw, fbe, lbe) = block_bes(offset, len);
    tlp::mem_read(requester_id, tag, bar_base + (offset & !3), ndw, fbe, lbe, false)
}

/// The one MWr32 a CPU store of `data` at BAR offset `offset` becomes (bytes in their lanes,
/// disabled lanes zero).
pub fn mmio_write_block_tlp(requester_id: u16, bar_base: u64, offset: u64, data: &[u8]) -> Vec<u32> {
    let (ndw, fbe, lbe) = block_bes(offset, data.len());
    let lead = (offset & 3) as usize;
    let mut bytes = vec![0u8; ndw as usize * 4];
    bytes[lead..lead + data.len()].copy_from_slice(data);
    let payload: Vec<u32> = bytes.chunks_exact(4).map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]])).collect();
    tlp::mem_write(requester_id, 0, bar_base + (offset & !3), fbe, lbe, &payload, false)
}

/// Collects the data of the completions of one read (several CplDs when the completer
/// splits it) until Byte Count says it is complete.
#[derive(Debug, Clone, Default)]
pub struct ReadCollector {
    data: Vec<u8>,
    want: usize,
}

impl ReadCollector {
    pub fn new(want: usize) -> ReadCollector {
        ReadCollector { data: Vec::with_capacity(want), want }
    }

    /// Adds one successful CplD; true when the read is complete. A CplD's data starts at
    /// the byte Lower Address points at within its first DW; Byte Count is what remains of
    /// the read including this completion.
    pub fn add(&mut self, cpl: &[u32]) -> bool {
        let h = tlp::header_dw(cpl[0]);
        let n = tlp::payload_dw(cpl[0]).min(cpl.len().saturating_sub(h));
        let skip = usize::from(tlp::cpl_lower_address(cpl[2]) & 3);
        let remaining = tlp::cpl_byte_count(cpl[1]) as usize;
        let here = (4 * n).saturating_sub(skip).min(remaining);
        for i in skip..skip + here {
            if self.data.len() < self.want {
                self.data.push((cpl[h + i / 4] >> (8 * (i % 4))) as u8);
            }
        }
        remaining <= here || self.data.len() >= self.want
    }

    /// The bytes collected, zero-padded to the length asked for.
    pub fn into_bytes(mut self) -> Vec<u8> {
        self.data.resize(self.want, 0);
        self.data
    }
}

/// The value of a CPU load from the payload DWs of its completion (zero-extended).
pub fn mmio_value(offset: u64, width: u8, payload: &[u32]) -> u64 {
    let dw0 = u64::from(payload.first().copied().unwrap_or(0));
    let shift = 8 * (offset & 3);
    match width {
        1 => (dw0 >> shift) & 0xFF,
        2 => (dw0 >> shift) & 0xFFFF,
        4 => dw0,
        _ => dw0 | (u64::from(payload.get(1).copied().unwrap_or(0)) << 32),
    }
}

/// The bytes a memory read asks for: (first byte address, byte count). A zero-length read
/// (Length 1, First BE 0) gives a count of 0.
pub fn read_range(req: &[u32]) -> (u64, u32) {
    let len = tlp::length_dw(req[0]);
    let fbe = tlp::first_be(req[1]);
    let lbe = tlp::last_be(req[1]);
    let addr = tlp::mem_address(req);
    if len == 1 && fbe == 0 {
        return (addr, 0);
    }
    (addr + u64::from(tlp::first_byte_offset(fbe)), tlp::read_byte_count(len, fbe, lbe))
}

/// Completes a memory read `req` whose bytes are all readable: CplDs split as the link
/// model says (RCB/MPS, no 4 KiB crossing), with data read through `read(addr, buf)`.
/// Each completion is pushed onto `out` (header + payload DWs).
pub fn read_completions(cfg: &LinkConfig, completer_id: u16, req: &[u32], mut read: impl FnMut(u64, &mut [u8]), out: &mut Vec<Vec<u32>>) {
    let requester = tlp::requester_id(req[1]);
    let tag = tlp::tag(req[1]);
    let (start, count) = read_range(req);
    if count == 0 {
        // Zero-length read: one DW of undefined data, Byte Count 1 (2.2.5).
        let (d1, d2) = cpl_dw12(completer_id, CPL_SC, 1, requester, tag, (start & 0x7f) as u8);
        out.push(vec![tlp::dw0(FMT_3DW_DATA, TYPE_CPL, 1, false), d1, d2, 0]);
        return;
    }
    let mut remaining = count;
    let mut bytes = Vec::new();
    for (piece, plen) in completions_for_read(cfg, start, count) {
        let dw_start = piece & !3;
        let dw_end = (piece + u64::from(plen) + 3) & !3;
        let ndw = ((dw_end - dw_start) / 4) as usize;
        bytes.clear();
        bytes.resize(ndw * 4, 0);
        read(dw_start, &mut bytes);
        let (d1, d2) = cpl_dw12(completer_id, CPL_SC, remaining, requester, tag, (piece & 0x7f) as u8);
        let mut c = Vec::with_capacity(3 + ndw);
        c.extend_from_slice(&[tlp::dw0(FMT_3DW_DATA, TYPE_CPL, ndw as u32, false), d1, d2]);
        c.extend(bytes.chunks_exact(4).map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]])));
        out.push(c);
        remaining -= plen;
    }
}

/// A completion without data with `status` for the non-posted request `req`.
pub fn status_completion(completer_id: u16, status: u8, req: &[u32]) -> Vec<u32> {
    let (d1, d2) = cpl_dw12(completer_id, status, 0, tlp::requester_id(req[1]), tlp::tag(req[1]), 0);
    // Byte Count of a UR/CA completion to a read: the remaining count, as if nothing was sent.
    let bc = match tlp::kind(req[0]) {
        Kind::MRd32 | Kind::MRd64 | Kind::MRdLk => read_range(req).1.max(1) & 0xfff,
        _ => 4,
    };
    vec![tlp::dw0(FMT_3DW_NO_DATA, if matches!(tlp::kind(req[0]), Kind::MRdLk) { TYPE_CPL_LK } else { TYPE_CPL }, 0, false), d1 | bc, d2]
}

/// The bytes a memory write enables: (first byte address, one past the last). `None` for a
/// zero-length write (Length 1, First BE 0).
pub fn write_range(req: &[u32]) -> Option<(u64, u64)> {
    let n = tlp::payload_dw(req[0]) as u64;
    let fbe = tlp::first_be(req[1]);
    let lbe = tlp::last_be(req[1]);
    let addr = tlp::mem_address(req);
    if fbe == 0 {
        return None;
    }
    let lo = addr + u64::from(fbe.trailing_zeros());
    let last = if n == 1 { fbe } else { lbe };
    let hi = addr + 4 * (n - 1) + u64::from(8 - last.leading_zeros());
    Some((lo, hi))
}

/// The x86 interrupt window (the local APIC's, 0xFEE0_0000..0xFEF0_0000): a memory write there
/// is an interrupt message, not memory (Intel SDM 10.11), as every MSI-X write on x86 is.
pub const MSI_WINDOW: std::ops::Range<u64> = 0xFEE0_0000..0xFEF0_0000;

/// The vector an MSI-X message `req` carries: a one-DW write of all four bytes into
/// [`MSI_WINDOW`] whose data is the vector (how tlpx-sim, as the host's OS, programs the card's
/// table: data = vector number). `None` for any other write.
pub fn msix_message(req: &[u32]) -> Option<u32> {
    if !matches!(tlp::kind(req[0]), Kind::MWr32 | Kind::MWr64) || tlp::payload_dw(req[0]) != 1 || tlp::first_be(req[1]) != 0xF {
        return None;
    }
    let addr = tlp::mem_address(req);
    MSI_WINDOW.contains(&addr).then(|| req[tlp::header_dw(req[0])])
}

/// Calls `write(addr, byte)` for every enabled byte of memory write `req`.
pub fn for_each_written_byte(req: &[u32], mut write: impl FnMut(u64, u8)) {
    let h = tlp::header_dw(req[0]);
    let n = tlp::payload_dw(req[0]);
    let fbe = tlp::first_be(req[1]);
    let lbe = tlp::last_be(req[1]);
    let addr = tlp::mem_address(req);
    for (i, &dw) in req[h..h + n].iter().enumerate() {
        let be = if i == 0 {
            fbe
        } else if i == n - 1 {
            lbe
        } else {
            0xF
        };
        for b in 0..4 {
            if be & (1 << b) != 0 {
                write(addr + 4 * i as u64 + b as u64, (dw >> (8 * b)) as u8);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(mps: u32, rcb: u32) -> LinkConfig {
        LinkConfig::new(3, 4, mps, 512, rcb, false).expect("valid")
    }

    #[test]
    fn msix_messages_are_one_dw_writes_into_the_interrupt_window() {
        let msg = mmio_write_tlp(0x0100, 0xFEE0_0000, 0, 4, 7);
        assert_eq!(msix_message(&msg), Some(7));
        let elsewhere = mmio_write_tlp(0x0100, 0x4000_0000, 0, 4, 7);
        assert_eq!(msix_message(&elsewhere), None);
        let partial = mmio_write_tlp(0x0100, 0xFEE0_0000, 0, 2, 7);
        assert_eq!(msix_message(&partial), None);
        let two_dw = mmio_write_block_tlp(0x0100, 0xFEE0_0000, 0, &[0; 8]);
        assert_eq!(msix_message(&two_dw), None);
        let read = mmio_read_tlp(0, 0, 0xFEE0_0000, 0, 4);
        assert_eq!(msix_message(&read), None);
    }

    #[test]
    fn mmio_reads_use_byte_enables() {
        let t = mmio_read_tlp(0, 3, 0xF000_0000, 0x13, 1);
        assert_eq!(tlp::kind(t[0]), Kind::MRd32);
        assert_eq!((tlp::length_dw(t[0]), tlp::first_be(t[1]), tlp::last_be(t[1])), (1, 0b1000, 0));
        assert_eq!(t[2], 0xF000_0010);
        assert_eq!(tlp::tag(t[1]), 3);
        let t = mmio_read_tlp(0, 0, 0xF000_0000, 0x8, 8);
        assert_eq!((tlp::length_dw(t[0]), tlp::first_be(t[1]), tlp::last_be(t[1])), (2, 0xF, 0xF));
        let t = mmio_read_tlp(0, 0, 0xF000_0000, 0x6, 2);
        assert_eq!(tlp::first_be(t[1]), 0b1100);
        assert_eq!(mmio_value(0x6, 2, &[0x5443_5058]), 0x5443);
        assert_eq!(mmio_value(0x1, 1, &[0x5443_5058]), 0x50);
        assert_eq!(mmio_value(0x0, 8, &[0x1, 0x2]), 0x2_0000_0001);
    }

    #[test]
    fn mmio_writes_place_bytes_in_their_lanes() {
        let t = mmio_write_tlp(0, 0xF000_0000, 0x22, 2, 0xABCD);
        assert_eq!(tlp::kind(t[0]), Kind::MWr32);
        assert_eq!(tlp::first_be(t[1]), 0b1100);
        assert_eq!(t[3], 0xABCD_0000);
        let t = mmio_write_tlp(0, 0xF000_0000, 0x20, 8, 0x1122_3344_5566_7788);
        assert_eq!(&t[3..], &[0x5566_7788, 0x1122_3344]);
        assert_eq!((tlp::first_be(t[1]), tlp::last_be(t[1])), (0xF, 0xF));
        let t = mmio_write_tlp(0, 0xF000_0000, 0x23, 1, 0x1FF);
        assert_eq!(t[3], 0xFF00_0000);
        let mut written = vec![];
        for_each_written_byte(&t, |a, b| written.push((a, b)));
        assert_eq!(written, vec![(0xF000_0023, 0xFF)]);
        assert_eq!(write_range(&t), Some((0xF000_0023, 0xF000_0024)));
    }

    #[test]
    fn block_accesses_are_one_tlp_with_exact_byte_enables() {
        // (offset, len) -> (DWs, First BE, Last BE)
        assert_eq!(block_bes(0x10000, 64), (16, 0xF, 0xF));
        assert_eq!(block_bes(0x10001, 64), (17, 0b1110, 0b0001));
        assert_eq!(block_bes(0x18, 4), (1, 0xF, 0));
        assert_eq!(block_bes(0x19, 2), (1, 0b0110, 0), "inside one DW: Last BE 0");
        assert_eq!(block_bes(0x1B, 1), (1, 0b1000, 0));
        assert_eq!(block_bes(0x1B, 2), (2, 0b1000, 0b0001));
        assert_eq!(block_bes(0x2004, 16), (4, 0xF, 0xF));
        assert_eq!(block_bes(0x3, 13), (4, 0b1000, 0xF));
        assert_eq!(block_bes(0x3, 14), (5, 0b1000, 0b0001));
        let t = mmio_write_block_tlp(0, 0xF000_0000, 0x3, &(1..=13).collect::<Vec<u8>>());
        assert_eq!(tlp::kind(t[0]), Kind::MWr32);
        assert_eq!(t[2], 0xF000_0000);
        assert_eq!(&t[3..], &[0x0100_0000, 0x0504_0302, 0x0908_0706, 0x0D0C_0B0A]);
        assert_eq!(write_range(&t), Some((0xF000_0003, 0xF000_0010)));
        let r = mmio_read_block_tlp(0, 7, 0xF000_0000, 0x10001, 64);
        assert_eq!((tlp::length_dw(r[0]), tlp::first_be(r[1]), tlp::last_be(r[1]), tlp::tag(r[1])), (17, 0b1110, 0b0001, 7));
        assert_eq!(read_range(&r), (0xF001_0001, 64));
    }

    #[test]
    fn a_read_collector_joins_split_completions() {
        // 64 bytes at 0x1020 from a completer with RCB 64 and MPS 128: pieces at the RCB.
        let req = tlp::mem_read(0x0100, 9, 0x1021, 17, 0b1110, 0b0001, false);
        let mut cpls = vec![];
        read_completions(
            &cfg(128, 64),
            0,
            &req,
            |a, buf| {
                for (i, b) in buf.iter_mut().enumerate() {
                    *b = (a as usize + i) as u8;
                }
            },
            &mut cpls,
        );
        assert_eq!(cpls.len(), 2, "split at 0x1040");
        let mut c = ReadCollector::new(64);
        assert!(!c.add(&cpls[0]));
        assert!(c.add(&cpls[1]));
        let want: Vec<u8> = (0x21..0x61).map(|a: u32| a as u8).collect();
        assert_eq!(c.into_bytes(), want);
        // A 2-byte read in the middle of a DW.
        let req = tlp::mem_read(0, 1, 0x2000, 1, 0b0110, 0, false);
        let mut cpls = vec![];
        read_completions(&cfg(128, 64), 0, &req, |_, buf| buf.copy_from_slice(&[1, 2, 3, 4]), &mut cpls);
        let mut c = ReadCollector::new(2);
        assert!(c.add(&cpls[0]));
        assert_eq!(c.into_bytes(), vec![2, 3]);
    }

    #[test]
    fn reads_are_split_at_rcb_and_mps() {
        // 512 bytes at 0x1020: first completion to the 64-byte RCB boundary, then MPS pieces.
        let req = tlp::mem_read(0x0100, 9, 0x1020, 128, 0xF, 0xF, false);
        let mut out = vec![];
        read_completions(
            &cfg(256, 64),
            0,
            &req,
            |a, buf| {
                for (i, b) in buf.iter_mut().enumerate() {
                    *b = (a as usize + i) as u8;
                }
            },
            &mut out,
        );
        let sizes: Vec<u32> = out.iter().map(|c| tlp::length_dw(c[0])).collect();
        assert_eq!(sizes, vec![8, 64, 56]);
        let counts: Vec<u32> = out.iter().map(|c| tlp::cpl_byte_count(c[1])).collect();
        assert_eq!(counts, vec![512, 480, 224]);
        let lower: Vec<u8> = out.iter().map(|c| tlp::cpl_lower_address(c[2])).collect();
        assert_eq!(lower, vec![0x20, 0x40, 0x40]);
        assert!(out.iter().all(|c| tlp::cpl_tag(c[2]) == 9 && tlp::cpl_requester_id(c[2]) == 0x0100));
        assert_eq!(out[0][3], u32::from_le_bytes([0x20, 0x21, 0x22, 0x23]));
    }

    #[test]
    fn partial_dw_reads_report_byte_counts() {
        let req = tlp::mem_read(0, 1, 0x2000, 2, 0b1100, 0b0011, false);
        assert_eq!(read_range(&req), (0x2002, 4));
        let mut out = vec![];
        read_completions(&cfg(128, 64), 0, &req, |_, _| {}, &mut out);
        assert_eq!(out.len(), 1);
        assert_eq!((tlp::length_dw(out[0][0]), tlp::cpl_byte_count(out[0][1]), tlp::cpl_lower_address(out[0][2])), (2, 4, 2));
        // Zero-length read.
        let req = tlp::mem_read(0, 1, 0x2000, 1, 0, 0, false);
        out.clear();
        read_completions(&cfg(128, 64), 0, &req, |_, _| {}, &mut out);
        assert_eq!((out.len(), tlp::cpl_byte_count(out[0][1])), (1, 1));
    }

    #[test]
    fn ur_completion_carries_tag_and_status() {
        let req = tlp::mem_read(0x0100, 0x42, 0x1_0000_0000, 4, 0xF, 0xF, true);
        let c = status_completion(0, CPL_UR, &req);
        assert_eq!(tlp::kind(c[0]), Kind::Cpl);
        assert_eq!(tlp::cpl_status(c[1]), CPL_UR);
        assert_eq!(tlp::cpl_tag(c[2]), 0x42);
        assert_eq!(tlp::cpl_requester_id(c[2]), 0x0100);
        assert_eq!(tlp::cpl_byte_count(c[1]), 16);
    }

    #[test]
    fn write_ranges_follow_byte_enables() {
        let w = tlp::mem_write(0, 0, 0x4000_0000, 0b1110, 0b0111, &[0, 0, 0], false);
        assert_eq!(write_range(&w), Some((0x4000_0001, 0x4000_000B)));
        let mut n = 0;
        for_each_written_byte(&w, |_, _| n += 1);
        assert_eq!(n, 3 + 4 + 3);
        let z = tlp::mem_write(0, 0, 0x4000_0000, 0, 0, &[0], false);
        assert_eq!(write_range(&z), None);
    }
}
