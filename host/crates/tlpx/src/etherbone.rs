//! Etherbone as LiteX's `RemoteClient` and `litex_server` speak it over TCP.
//!
//! ```text
//!  message = packet header (8) + one record header (4) + the record's body
//!  packet header   4e 6f | ver<<4 nr pr pf | addr_size<<4 port_size | 00 00 00 00
//!  record header   flags (bca rca rff - cyc wca wff) | byte_enable | wcount | rcount
//!  body            [base_write_addr, wcount data words] [base_ret_addr, rcount addresses]
//! ```
//!
//! Big-endian throughout (litex/tools/remote/etherbone.py). The framing is litex_server's,
//! not Etherbone-over-UDP's: every message carries its own packet header and exactly one
//! record, which is how `EtherboneIPC.receive_packet` cuts the TCP stream. A record's writes
//! run before its reads; the reply to reads is one message whose record writes the read
//! values to `base_ret_addr`. Writes get no reply. Data words are 32 bits (port_size 4);
//! addresses 32 or 64 bits (addr_size 4 or 8), as LiteX's `--addr-width`.
//!
//! Parsing never trusts a count: a message is at most HEADER_LEN + [`MAX_BODY`] bytes (255 writes and
//! 255 reads of 64-bit addresses), so a connection's buffer is bounded.

use std::fmt;

use tlpx_device::Width;

/// Packet header (8) and record header (4): what is read before the body's length is known.
pub const HEADER_LEN: usize = 12;
/// The largest body: 255 writes with their base address, 255 reads with their return address.
pub const MAX_BODY: usize = (4 * 255 + 8) + (256 * 8);

const MAGIC: [u8; 2] = [0x4e, 0x6f];
const VERSION: u8 = 1;
const PORT_SIZE: u8 = 4;
// Record flags (byte 0 of the record header).
const FLAG_RCA: u8 = 1 << 1;
const FLAG_WCA: u8 = 1 << 5;
const FLAG_WFF: u8 = 1 << 6;
// Packet flags (low nibble of byte 2).
const FLAG_PROBE: u8 = 1 << 0;

/// Why a message cannot be served. The stream cannot be resynchronised after a bad header,
/// so the connection is closed with this as the message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    BadMagic([u8; 2]),
    BadVersion(u8),
    Probe,
    AddrSize(u8),
    PortSize(u8),
    ConfigSpace,
    ByteEnable(u8),
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Refusal::BadMagic(m) => write!(f, "not an Etherbone packet: magic {:02x}{:02x}, expected 4e6f", m[0], m[1]),
            Refusal::BadVersion(v) => write!(f, "Etherbone version {v}, this bridge speaks version {VERSION}"),
            Refusal::Probe => f.write_str(
                "an Etherbone probe: litex_server's TCP framing has no probes (every message carries one record); \
                 connect with LiteX's RemoteClient / litex_cli",
            ),
            Refusal::AddrSize(s) => write!(f, "address size {s} bytes: this bridge takes 4 or 8 (LiteX's --addr-width 32 or 64)"),
            Refusal::PortSize(s) => write!(f, "port (data) size {s} bytes: this bridge takes 4 (32-bit words, as LiteX's CSR bus)"),
            Refusal::ConfigSpace => {
                f.write_str("a record for the Etherbone config space (rca/wca flag): this bridge has none, only the card's BAR0")
            }
            Refusal::ByteEnable(b) => {
                write!(f, "byte enable {b:#04x}: this bridge takes 0xf (a word), 0x3 / 0xc (a half word) or one lane (0x1, 0x2, 0x4, 0x8)")
            }
        }
    }
}

/// The byte lanes a record's byte enable selects in each 32-bit word: the access to make at
/// `address + offset` of `width`, whose data sits at bits `8 * offset` up in the word
/// (Wishbone's sel bit n is data bits 8n+7..8n; BAR0 is little-endian, so lane n is byte n).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Lanes {
    pub offset: u64,
    pub width: Width,
}

impl Lanes {
    fn of(byte_enable: u8) -> Option<Lanes> {
        let (offset, width) = match byte_enable {
            0xf => (0, Width::W32),
            0x3 => (0, Width::W16),
            0xc => (2, Width::W16),
            0x1 => (0, Width::W8),
            0x2 => (1, Width::W8),
            0x4 => (2, Width::W8),
            0x8 => (3, Width::W8),
            _ => return None,
        };
        Some(Lanes { offset, width })
    }

    /// The access's value placed in its lanes of a data word.
    pub fn place(self, value: u64) -> u32 {
        let mask = (1u64 << (8 * self.width.bytes())) - 1;
        ((value & mask) << (8 * self.offset)) as u32
    }

    /// The access's value taken from its lanes of a data word.
    pub fn take(self, word: u32) -> u64 {
        let mask = (1u64 << (8 * self.width.bytes())) - 1;
        (u64::from(word) >> (8 * self.offset)) & mask
    }
}

/// The fixed part of a message, checked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    /// Bytes per address: 4 or 8.
    pub addr_size: usize,
    pub byte_enable: u8,
    pub lanes: Lanes,
    /// Writes go to one address (a FIFO) instead of consecutive words.
    pub write_fifo: bool,
    pub wcount: usize,
    pub rcount: usize,
}

impl Header {
    pub fn parse(b: &[u8; HEADER_LEN]) -> Result<Header, Refusal> {
        if b[0..2] != MAGIC {
            return Err(Refusal::BadMagic([b[0], b[1]]));
        }
        if b[2] >> 4 != VERSION {
            return Err(Refusal::BadVersion(b[2] >> 4));
        }
        if b[2] & FLAG_PROBE != 0 {
            return Err(Refusal::Probe);
        }
        let addr_size = b[3] >> 4;
        if addr_size != 4 && addr_size != 8 {
            return Err(Refusal::AddrSize(addr_size));
        }
        if b[3] & 0xf != PORT_SIZE {
            return Err(Refusal::PortSize(b[3] & 0xf));
        }
        let flags = b[8];
        if flags & (FLAG_RCA | FLAG_WCA) != 0 {
            return Err(Refusal::ConfigSpace);
        }
        let byte_enable = b[9];
        let lanes = Lanes::of(byte_enable).ok_or(Refusal::ByteEnable(byte_enable))?;
        Ok(Header {
            addr_size: usize::from(addr_size),
            byte_enable,
            lanes,
            write_fifo: flags & FLAG_WFF != 0,
            wcount: usize::from(b[10]),
            rcount: usize::from(b[11]),
        })
    }

    /// Bytes of the body that follows (as `EtherboneIPC.receive_packet` counts them).
    pub fn body_len(&self) -> usize {
        let writes = if self.wcount > 0 { 4 * self.wcount + self.addr_size } else { 0 };
        let reads = if self.rcount > 0 { (self.rcount + 1) * self.addr_size } else { 0 };
        writes + reads
    }
}

/// A record's body, decoded.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Record {
    pub write_base: u64,
    pub write_data: Vec<u32>,
    pub return_base: u64,
    pub read_addresses: Vec<u64>,
}

fn be(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0u64, |v, &b| v << 8 | u64::from(b))
}

impl Record {
    /// Decodes `body` (exactly [`Header::body_len`] bytes).
    pub fn parse(h: &Header, body: &[u8]) -> Record {
        debug_assert_eq!(body.len(), h.body_len());
        let a = h.addr_size;
        let mut r = Record::default();
        let mut at = 0;
        if h.wcount > 0 {
            r.write_base = be(&body[..a]);
            at = a;
            r.write_data = body[at..at + 4 * h.wcount].chunks_exact(4).map(|w| be(w) as u32).collect();
            at += 4 * h.wcount;
        }
        if h.rcount > 0 {
            r.return_base = be(&body[at..at + a]);
            at += a;
            r.read_addresses = body[at..at + a * h.rcount].chunks_exact(a).map(be).collect();
        }
        r
    }

    /// The address of write `i`: consecutive words, or the base for FIFO writes.
    pub fn write_address(&self, h: &Header, i: usize) -> u64 {
        if h.write_fifo {
            self.write_base
        } else {
            self.write_base.wrapping_add(4 * i as u64)
        }
    }
}

/// The reply to a record's reads: one message whose record writes `values` to `return_base`
/// (what litex_server sends; LiteX's client takes the values in order).
pub fn read_reply(h: &Header, return_base: u64, values: &[u32]) -> Vec<u8> {
    debug_assert!(values.len() <= 255);
    let a = h.addr_size;
    let mut out = Vec::with_capacity(HEADER_LEN + a + 4 * values.len());
    out.extend_from_slice(&MAGIC);
    out.push(VERSION << 4);
    out.push((a as u8) << 4 | PORT_SIZE);
    out.extend_from_slice(&[0; 4]);
    out.extend_from_slice(&[0, h.byte_enable, values.len() as u8, 0]);
    out.extend_from_slice(&return_base.to_be_bytes()[8 - a..]);
    for v in values {
        out.extend_from_slice(&v.to_be_bytes());
    }
    out
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    /// The bytes LiteX 2024.12's RemoteClient sends for `read(0x18, length=2)` and
    /// `write(0x18, 0x1234)` (EtherbonePacket(32).encode(), printed from Python).
    const LITEX_READ: [u8; 24] = [0x4e, 0x6f, 0x10, 0x44, 0, 0, 0, 0, 0x00, 0x0f, 0x00, 0x02, 0, 0, 0, 0, 0, 0, 0, 0x18, 0, 0, 0, 0x1c];
    const LITEX_WRITE: [u8; 20] = [0x4e, 0x6f, 0x10, 0x44, 0, 0, 0, 0, 0x00, 0x0f, 0x01, 0x00, 0, 0, 0, 0x18, 0, 0, 0x12, 0x34];

    fn header(bytes: &[u8]) -> Result<Header, Refusal> {
        Header::parse(bytes[..HEADER_LEN].try_into().unwrap())
    }

    #[test]
    fn etherbone_litex_read_decodes() {
        let h = header(&LITEX_READ).unwrap();
        assert_eq!((h.addr_size, h.wcount, h.rcount, h.lanes.width), (4, 0, 2, Width::W32));
        assert_eq!(h.body_len(), LITEX_READ.len() - HEADER_LEN);
        let r = Record::parse(&h, &LITEX_READ[HEADER_LEN..]);
        assert_eq!(r.read_addresses, vec![0x18, 0x1c]);
        assert_eq!(r.return_base, 0);
    }

    #[test]
    fn etherbone_litex_write_decodes() {
        let h = header(&LITEX_WRITE).unwrap();
        assert_eq!(h.body_len(), LITEX_WRITE.len() - HEADER_LEN);
        let r = Record::parse(&h, &LITEX_WRITE[HEADER_LEN..]);
        assert_eq!((r.write_base, r.write_data.clone()), (0x18, vec![0x1234]));
        assert_eq!(r.write_address(&h, 1), 0x1c);
    }

    #[test]
    fn etherbone_reply_is_what_litex_server_sends() {
        let h = header(&LITEX_READ).unwrap();
        // EtherbonePacket(32) with one record of writes [0x544c5058, 1], base 0, encoded.
        let expected = [0x4e, 0x6f, 0x10, 0x44, 0, 0, 0, 0, 0x00, 0x0f, 0x02, 0x00, 0, 0, 0, 0, 0x54, 0x4c, 0x50, 0x58, 0, 0, 0, 1];
        assert_eq!(read_reply(&h, 0, &[0x544c5058, 1]), expected);
    }

    #[test]
    fn etherbone_64bit_addresses() {
        let mut m = vec![0x4e, 0x6f, 0x10, 0x84, 0, 0, 0, 0, 0, 0x0f, 0, 1];
        m.extend_from_slice(&[0; 8]);
        m.extend_from_slice(&0x1_0000_0004u64.to_be_bytes());
        let h = header(&m).unwrap();
        assert_eq!(h.body_len(), 16);
        assert_eq!(Record::parse(&h, &m[HEADER_LEN..]).read_addresses, vec![0x1_0000_0004]);
    }

    #[test]
    fn etherbone_malformed_headers_are_refused() {
        let ok = LITEX_READ;
        let with = |i: usize, v: u8| {
            let mut m = ok;
            m[i] = v;
            header(&m)
        };
        assert_eq!(with(0, 0x47), Err(Refusal::BadMagic([0x47, 0x6f])));
        assert_eq!(with(2, 0x20), Err(Refusal::BadVersion(2)));
        assert_eq!(with(2, 0x11), Err(Refusal::Probe));
        assert_eq!(with(3, 0x24), Err(Refusal::AddrSize(2)));
        assert_eq!(with(3, 0x48), Err(Refusal::PortSize(8)));
        assert_eq!(with(8, FLAG_RCA), Err(Refusal::ConfigSpace));
        assert_eq!(with(9, 0x5), Err(Refusal::ByteEnable(0x5)));
        assert_eq!(with(9, 0x0), Err(Refusal::ByteEnable(0x0)));
        assert!(Refusal::BadMagic([0x47, 0x45]).to_string().contains("4745"));
    }

    #[test]
    fn etherbone_largest_message_is_bounded() {
        let mut m = LITEX_READ;
        m[3] = 0x84;
        m[10] = 255;
        m[11] = 255;
        assert_eq!(header(&m).unwrap().body_len(), MAX_BODY);
    }

    #[test]
    fn etherbone_byte_lanes() {
        let l = Lanes::of(0x4).unwrap();
        assert_eq!((l.offset, l.width), (2, Width::W8));
        assert_eq!(l.take(0x00ab_0000), 0xab);
        assert_eq!(l.place(0x1ab), 0x00ab_0000);
        let h = Lanes::of(0xc).unwrap();
        assert_eq!(h.take(0xbeef_0000), 0xbeef);
    }
}
