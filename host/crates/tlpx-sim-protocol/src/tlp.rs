//! TLP headers as DWs (PCI Express Base spec, 2.2), in the layout of tlpx_card.h: header DWs
//! are native 32-bit values numbered as in the spec, payload DWs carry bytes little-endian.
//!
//! Shared by the sim's root complex and by clients that inject TLPs.

// Fmt (2.2.1, Table 2-2) --------------------------------------------------------------------------

pub const FMT_3DW_NO_DATA: u8 = 0b000;
pub const FMT_4DW_NO_DATA: u8 = 0b001;
pub const FMT_3DW_DATA: u8 = 0b010;
pub const FMT_4DW_DATA: u8 = 0b011;

// Type (2.2.1, Table 2-3) -------------------------------------------------------------------------

pub const TYPE_MEM: u8 = 0b00000;
pub const TYPE_MEM_LK: u8 = 0b00001;
pub const TYPE_IO: u8 = 0b00010;
pub const TYPE_CFG0: u8 = 0b00100;
pub const TYPE_CFG1: u8 = 0b00101;
pub const TYPE_CPL: u8 = 0b01010;
pub const TYPE_CPL_LK: u8 = 0b01011;
pub const TYPE_FETCHADD: u8 = 0b01100;
pub const TYPE_SWAP: u8 = 0b01101;
pub const TYPE_CAS: u8 = 0b01110;

// Completion status (2.2.9, Table 2-34) -----------------------------------------------------------

pub const CPL_SC: u8 = 0b000;
pub const CPL_UR: u8 = 0b001;
pub const CPL_CRS: u8 = 0b010;
pub const CPL_CA: u8 = 0b100;

/// Name of a completion status value.
pub fn status_name(status: u8) -> &'static str {
    match status {
        CPL_SC => "SC",
        CPL_UR => "UR",
        CPL_CRS => "CRS",
        CPL_CA => "CA",
        _ => "reserved",
    }
}

/// What a TLP is, from Fmt and Type.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Kind {
    MRd32,
    MRd64,
    MRdLk,
    MWr32,
    MWr64,
    IORd,
    IOWr,
    CfgRd0,
    CfgWr0,
    CfgRd1,
    CfgWr1,
    Cpl,
    CplD,
    CplLk,
    CplDLk,
    Msg,
    MsgD,
    FetchAdd,
    Swap,
    Cas,
    Other,
}

impl Kind {
    pub fn name(self) -> &'static str {
        match self {
            Kind::MRd32 => "MRd32",
            Kind::MRd64 => "MRd64",
            Kind::MRdLk => "MRdLk",
            Kind::MWr32 => "MWr32",
            Kind::MWr64 => "MWr64",
            Kind::IORd => "IORd",
            Kind::IOWr => "IOWr",
            Kind::CfgRd0 => "CfgRd0",
            Kind::CfgWr0 => "CfgWr0",
            Kind::CfgRd1 => "CfgRd1",
            Kind::CfgWr1 => "CfgWr1",
            Kind::Cpl => "Cpl",
            Kind::CplD => "CplD",
            Kind::CplLk => "CplLk",
            Kind::CplDLk => "CplDLk",
            Kind::Msg => "Msg",
            Kind::MsgD => "MsgD",
            Kind::FetchAdd => "FetchAdd",
            Kind::Swap => "Swap",
            Kind::Cas => "CAS",
            Kind::Other => "Other",
        }
    }

    /// Posted requests get no completion (memory writes and messages). Completions are
    /// neither posted nor non-posted; this returns false for them.
    pub fn is_posted(self) -> bool {
        matches!(self, Kind::MWr32 | Kind::MWr64 | Kind::Msg | Kind::MsgD)
    }

    pub fn is_completion(self) -> bool {
        matches!(self, Kind::Cpl | Kind::CplD | Kind::CplLk | Kind::CplDLk)
    }

    /// Requests that the completer must answer with a completion.
    pub fn is_non_posted(self) -> bool {
        !self.is_posted() && !self.is_completion() && self != Kind::Other
    }
}

/// Fmt field of DW0.
pub fn fmt(dw0: u32) -> u8 {
    ((dw0 >> 29) & 0b111) as u8
}

/// Type field of DW0.
pub fn typ(dw0: u32) -> u8 {
    ((dw0 >> 24) & 0x1f) as u8
}

/// EP (poisoned) bit of DW0.
pub fn poisoned(dw0: u32) -> bool {
    dw0 & (1 << 14) != 0
}

/// Attr[1] of DW0: relaxed ordering.
pub fn relaxed_ordering(dw0: u32) -> bool {
    dw0 & (1 << 13) != 0
}

/// Attr[0] of DW0: no snoop.
pub fn no_snoop(dw0: u32) -> bool {
    dw0 & (1 << 12) != 0
}

/// DW0 with the relaxed-ordering and no-snoop attribute bits set as given.
pub fn with_attributes(dw0: u32, relaxed_ordering: bool, no_snoop: bool) -> u32 {
    (dw0 & !(0b11 << 12)) | (u32::from(relaxed_ordering) << 13) | (u32::from(no_snoop) << 12)
}

/// Length field in DWs (0 encodes 1024).
pub fn length_dw(dw0: u32) -> u32 {
    match dw0 & 0x3ff {
        0 => 1024,
        n => n,
    }
}

pub fn kind(dw0: u32) -> Kind {
    let f = fmt(dw0);
    let t = typ(dw0);
    let data = f & 0b010 != 0;
    let four = f & 0b001 != 0;
    if f & 0b100 != 0 {
        return Kind::Other; // TLP prefixes
    }
    match t {
        TYPE_MEM => match (data, four) {
            (false, false) => Kind::MRd32,
            (false, true) => Kind::MRd64,
            (true, false) => Kind::MWr32,
            (true, true) => Kind::MWr64,
        },
        TYPE_MEM_LK if !data => Kind::MRdLk,
        TYPE_IO if !four => {
            if data {
                Kind::IOWr
            } else {
                Kind::IORd
            }
        }
        TYPE_CFG0 if !four => {
            if data {
                Kind::CfgWr0
            } else {
                Kind::CfgRd0
            }
        }
        TYPE_CFG1 if !four => {
            if data {
                Kind::CfgWr1
            } else {
                Kind::CfgRd1
            }
        }
        TYPE_CPL if !four => {
            if data {
                Kind::CplD
            } else {
                Kind::Cpl
            }
        }
        TYPE_CPL_LK if !four => {
            if data {
                Kind::CplDLk
            } else {
                Kind::CplLk
            }
        }
        TYPE_FETCHADD if data => Kind::FetchAdd,
        TYPE_SWAP if data => Kind::Swap,
        TYPE_CAS if data => Kind::Cas,
        t if t & 0b11000 == 0b10000 && four => {
            if data {
                Kind::MsgD
            } else {
                Kind::Msg
            }
        }
        _ => Kind::Other,
    }
}

/// Header size in DWs (3 or 4).
pub fn header_dw(dw0: u32) -> usize {
    if fmt(dw0) & 0b001 != 0 {
        4
    } else {
        3
    }
}

/// Payload size in DWs (0 when Fmt says no data).
pub fn payload_dw(dw0: u32) -> usize {
    if fmt(dw0) & 0b010 != 0 {
        length_dw(dw0) as usize
    } else {
        0
    }
}

/// Header + payload DWs of a TLP whose DW0 is `dw0`.
pub fn total_dw(dw0: u32) -> usize {
    header_dw(dw0) + payload_dw(dw0)
}

/// Checks that `dwords` is one well-formed TLP as far as framing goes (enough header DWs,
/// payload as long as Length says), so it can be put on the link.
pub fn check_framing(dwords: &[u32]) -> Result<Kind, String> {
    let Some(&dw0) = dwords.first() else {
        return Err("a TLP needs at least 3 header DWs, got 0".into());
    };
    if fmt(dw0) & 0b100 != 0 {
        return Err(format!("Fmt {:#05b} (TLP prefix) is not supported: use Fmt 000..011", fmt(dw0)));
    }
    let want = total_dw(dw0);
    if dwords.len() != want {
        return Err(format!(
            "DW0 {dw0:#010x} (Fmt {:#05b}, Length {}) describes a TLP of {want} DWs ({} header + {} payload), but {} DWs were given",
            fmt(dw0),
            length_dw(dw0),
            header_dw(dw0),
            payload_dw(dw0),
            dwords.len()
        ));
    }
    Ok(kind(dw0))
}

// Request fields (2.2.7) --------------------------------------------------------------------------

pub fn requester_id(dw1: u32) -> u16 {
    (dw1 >> 16) as u16
}

pub fn tag(dw1: u32) -> u8 {
    (dw1 >> 8) as u8
}

pub fn first_be(dw1: u32) -> u8 {
    (dw1 & 0xf) as u8
}

pub fn last_be(dw1: u32) -> u8 {
    ((dw1 >> 4) & 0xf) as u8
}

/// Address of a memory request (DW-aligned: the two low bits are zero).
pub fn mem_address(dwords: &[u32]) -> u64 {
    if header_dw(dwords[0]) == 4 {
        (u64::from(dwords[2]) << 32) | u64::from(dwords[3] & !3)
    } else {
        u64::from(dwords[2] & !3)
    }
}

/// DW0 from its fields (TC, TD, Attr zero).
pub fn dw0(fmt: u8, typ: u8, length_dw: u32, poisoned: bool) -> u32 {
    (u32::from(fmt & 7) << 29) | (u32::from(typ & 0x1f) << 24) | (u32::from(poisoned) << 14) | (length_dw & 0x3ff)
}

/// DW1 of a memory, I/O or config request.
pub fn request_dw1(requester_id: u16, tag: u8, first_be: u8, last_be: u8) -> u32 {
    (u32::from(requester_id) << 16) | (u32::from(tag) << 8) | (u32::from(last_be & 0xf) << 4) | u32::from(first_be & 0xf)
}

/// Replaces the tag of a request in place.
pub fn set_request_tag(dwords: &mut [u32], tag: u8) {
    dwords[1] = (dwords[1] & !0xff00) | (u32::from(tag) << 8);
}

/// A memory read of `length_dw` DWs at `addr` (3DW header below 4 GiB unless `force64`).
pub fn mem_read(requester_id: u16, tag: u8, addr: u64, length_dw: u32, first_be: u8, last_be: u8, force64: bool) -> Vec<u32> {
    let dw1 = request_dw1(requester_id, tag, first_be, last_be);
    if addr >> 32 != 0 || force64 {
        vec![dw0(FMT_4DW_NO_DATA, TYPE_MEM, length_dw, false), dw1, (addr >> 32) as u32, addr as u32 & !3]
    } else {
        vec![dw0(FMT_3DW_NO_DATA, TYPE_MEM, length_dw, false), dw1, addr as u32 & !3]
    }
}

/// A memory write of `payload` at `addr` (3DW header below 4 GiB unless `force64`).
pub fn mem_write(requester_id: u16, tag: u8, addr: u64, first_be: u8, last_be: u8, payload: &[u32], force64: bool) -> Vec<u32> {
    let dw1 = request_dw1(requester_id, tag, first_be, last_be);
    let n = payload.len() as u32;
    let mut v = if addr >> 32 != 0 || force64 {
        vec![dw0(FMT_4DW_DATA, TYPE_MEM, n, false), dw1, (addr >> 32) as u32, addr as u32 & !3]
    } else {
        vec![dw0(FMT_3DW_DATA, TYPE_MEM, n, false), dw1, addr as u32 & !3]
    };
    v.extend_from_slice(payload);
    v
}

/// A type 0 configuration read of the DW at `register` (byte offset) of `bdf`.
pub fn cfg_read0(requester_id: u16, tag: u8, bdf: u16, register: u16) -> Vec<u32> {
    vec![
        dw0(FMT_3DW_NO_DATA, TYPE_CFG0, 1, false),
        request_dw1(requester_id, tag, 0xf, 0),
        (u32::from(bdf) << 16) | u32::from(register & 0xffc),
    ]
}

// Completion fields (2.2.9) -----------------------------------------------------------------------

pub fn cpl_status(dw1: u32) -> u8 {
    ((dw1 >> 13) & 0b111) as u8
}

pub fn cpl_byte_count(dw1: u32) -> u32 {
    match dw1 & 0xfff {
        0 => 4096,
        n => n,
    }
}

pub fn cpl_completer_id(dw1: u32) -> u16 {
    (dw1 >> 16) as u16
}

pub fn cpl_requester_id(dw2: u32) -> u16 {
    (dw2 >> 16) as u16
}

pub fn cpl_tag(dw2: u32) -> u8 {
    (dw2 >> 8) as u8
}

pub fn cpl_lower_address(dw2: u32) -> u8 {
    (dw2 & 0x7f) as u8
}

/// Replaces the tag of a completion in place.
pub fn set_cpl_tag(dwords: &mut [u32], tag: u8) {
    dwords[2] = (dwords[2] & !0xff00) | (u32::from(tag) << 8);
}

/// DW1 and DW2 of a completion.
pub fn cpl_dw12(completer_id: u16, status: u8, byte_count: u32, requester_id: u16, tag: u8, lower_address: u8) -> (u32, u32) {
    (
        (u32::from(completer_id) << 16) | (u32::from(status & 7) << 13) | (byte_count & 0xfff),
        (u32::from(requester_id) << 16) | (u32::from(tag) << 8) | u32::from(lower_address & 0x7f),
    )
}

/// Byte Count of the first completion of a memory read (2.3.1.1, Table 2-37).
pub fn read_byte_count(length_dw: u32, first_be: u8, last_be: u8) -> u32 {
    if length_dw == 1 {
        if first_be == 0 {
            return 1;
        }
        let low = first_be.trailing_zeros();
        let high = 7 - first_be.leading_zeros(); // bit index of the highest set bit (u8)
        return high - low + 1;
    }
    let lead = if first_be != 0 { first_be.trailing_zeros() } else { 4 };
    let trail = if last_be != 0 { 4 - (8 - last_be.leading_zeros()) } else { 4 };
    length_dw * 4 - lead - trail
}

/// Byte offset of the first enabled byte within the first DW.
pub fn first_byte_offset(first_be: u8) -> u32 {
    if first_be == 0 {
        0
    } else {
        first_be.trailing_zeros()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_from_fmt_and_type() {
        assert_eq!(kind(dw0(FMT_3DW_NO_DATA, TYPE_MEM, 1, false)), Kind::MRd32);
        assert_eq!(kind(dw0(FMT_4DW_NO_DATA, TYPE_MEM, 1, false)), Kind::MRd64);
        assert_eq!(kind(dw0(FMT_3DW_DATA, TYPE_MEM, 1, false)), Kind::MWr32);
        assert_eq!(kind(dw0(FMT_4DW_DATA, TYPE_MEM, 1, false)), Kind::MWr64);
        assert_eq!(kind(dw0(FMT_3DW_NO_DATA, TYPE_CFG0, 1, false)), Kind::CfgRd0);
        assert_eq!(kind(dw0(FMT_3DW_DATA, TYPE_CPL, 1, false)), Kind::CplD);
        assert_eq!(kind(dw0(FMT_3DW_NO_DATA, TYPE_CPL, 0, false)), Kind::Cpl);
        assert_eq!(kind(dw0(FMT_4DW_NO_DATA, 0b10100, 0, false)), Kind::Msg);
        assert_eq!(kind(dw0(FMT_4DW_DATA, TYPE_CAS, 2, false)), Kind::Cas);
        assert!(Kind::MWr64.is_posted() && Kind::Msg.is_posted());
        assert!(Kind::MRd64.is_non_posted() && Kind::CfgRd0.is_non_posted() && Kind::IOWr.is_non_posted());
        assert!(!Kind::CplD.is_non_posted() && !Kind::CplD.is_posted());
    }

    #[test]
    fn framing_checks_length() {
        let rd = mem_read(0, 5, 0x1000, 4, 0xf, 0xf, false);
        assert_eq!(check_framing(&rd), Ok(Kind::MRd32));
        let wr = mem_write(0, 0, 0x1_0000_0000, 0xf, 0xf, &[1, 2], false);
        assert_eq!(wr.len(), 6);
        assert_eq!(check_framing(&wr), Ok(Kind::MWr64));
        assert_eq!(mem_address(&wr), 0x1_0000_0000);
        let e = check_framing(&wr[..5]).unwrap_err();
        assert!(e.contains("6 DWs") && e.contains("5 DWs were given"), "{e}");
        assert!(check_framing(&[]).is_err());
        assert_eq!(length_dw(0), 1024);
    }

    #[test]
    fn byte_counts_match_table_2_37() {
        assert_eq!(read_byte_count(1, 0b1111, 0), 4);
        assert_eq!(read_byte_count(1, 0b0100, 0), 1);
        assert_eq!(read_byte_count(1, 0b0110, 0), 2);
        assert_eq!(read_byte_count(1, 0b1001, 0), 4);
        assert_eq!(read_byte_count(1, 0, 0), 1);
        assert_eq!(read_byte_count(2, 0xf, 0xf), 8);
        assert_eq!(read_byte_count(2, 0b1100, 0b0011), 4);
        assert_eq!(read_byte_count(3, 0b1000, 0b0001), 6);
    }

    #[test]
    fn attributes_are_dw0_bits_13_and_12() {
        let d = dw0(FMT_3DW_DATA, TYPE_MEM, 4, true);
        let a = with_attributes(d, true, false);
        assert!(relaxed_ordering(a) && !no_snoop(a) && poisoned(a));
        assert_eq!(a & !(1 << 13), d, "only Attr[1] changed");
        let b = with_attributes(a, false, true);
        assert!(!relaxed_ordering(b) && no_snoop(b));
        assert_eq!(length_dw(b), 4);
        assert_eq!(kind(b), Kind::MWr32);
    }

    #[test]
    fn completion_fields_round_trip() {
        let (d1, d2) = cpl_dw12(0x0100, CPL_UR, 4096, 0x0000, 0xab, 0x45);
        assert_eq!(cpl_status(d1), CPL_UR);
        assert_eq!(cpl_byte_count(d1), 4096);
        assert_eq!(cpl_completer_id(d1), 0x0100);
        assert_eq!(cpl_tag(d2), 0xab);
        assert_eq!(cpl_lower_address(d2), 0x45);
        let mut v = vec![0, d1, d2];
        set_cpl_tag(&mut v, 7);
        assert_eq!(cpl_tag(v[2]), 7);
        assert_eq!(cpl_lower_address(v[2]), 0x45);
    }
}
