//! The card firmware's image file (`tlpx-fw.img`, built by `make firmware`): a 32-byte header
//! and the payload the host loads into the soft CPU's SRAM (docs/firmware.md, "The soft CPU").
//!
//! ```text
//!  0 magic "TLFW" │ 4 u16 version 1 │ 6 u16 header length 32 │ 8 u32 load address
//! 12 u32 payload length │ 16 u32 CRC-32 of the payload │ 20 u32 map hash of the CPU card
//! 24 u32 firmware version (major << 16 | minor) │ 28 u32 reserved 0 │ 32.. payload
//! ```
//!
//! Every field is little-endian. [`FirmwareImage::parse`] checks everything the file alone
//! can tell; [`FirmwareImage::check_card`] the two fields that need the card (its map hash and
//! SRAM base). Every refusal names the field, the value found and what is accepted, so a bad
//! file is refused before anything is written to the card.

use std::fmt;

use crate::image::crc32;

/// "TLFW" in the first four bytes of a firmware image.
pub const MAGIC: [u8; 4] = *b"TLFW";
/// Version of the image format this crate reads.
pub const FORMAT_VERSION: u16 = 1;
/// Bytes of the header.
pub const HEADER_LEN: usize = 32;
/// Largest payload: the firmware area of the SRAM, below the mailbox (0x40000..0x47F00).
pub const MAX_PAYLOAD: u32 = 0x7F00;
/// Where the firmware is loaded and starts on the CPU card (its `cpu_ctrl.sram_base`).
pub const LOAD_ADDRESS: u32 = 0x4_0000;

/// A checked firmware image: the header's fields and the payload.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FirmwareImage {
    /// Where the payload goes (CPU address == BAR0 offset); must be the card's SRAM base.
    pub load_address: u32,
    /// CRC-32 (IEEE/zlib) of the payload, as the header says (checked).
    pub crc: u32,
    /// Register map hash of the CPU card the firmware was built for.
    pub map_hash: u32,
    /// Firmware version: major << 16 | minor.
    pub version: u32,
    /// The bytes loaded into the SRAM (a nonzero multiple of 4, at most [`MAX_PAYLOAD`]).
    pub payload: Vec<u8>,
}

/// Why an image file was refused: the field, what it holds and what is accepted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FirmwareImageError {
    /// The header field (or "file" for the file's size).
    pub field: &'static str,
    /// The value found, written for a person.
    pub found: String,
    /// What would have been accepted.
    pub accepted: String,
}

impl fmt::Display for FirmwareImageError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "firmware image {}: found {}; accepted: {}", self.field, self.found, self.accepted)
    }
}

impl std::error::Error for FirmwareImageError {}

fn refuse<T>(field: &'static str, found: String, accepted: String) -> Result<T, FirmwareImageError> {
    Err(FirmwareImageError { field, found, accepted })
}

fn u16_at(b: &[u8], i: usize) -> u16 {
    u16::from_le_bytes([b[i], b[i + 1]])
}

fn u32_at(b: &[u8], i: usize) -> u32 {
    u32::from_le_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]])
}

impl FirmwareImage {
    /// Reads and checks an image file: size, magic, format version, header length, reserved
    /// word, payload length (nonzero, a multiple of 4, at most [`MAX_PAYLOAD`], equal to what
    /// the file holds after the header) and the payload's CRC-32. The map hash and the load
    /// address are checked against a card by [`FirmwareImage::check_card`].
    pub fn parse(bytes: &[u8]) -> Result<FirmwareImage, FirmwareImageError> {
        if bytes.len() < HEADER_LEN {
            return refuse(
                "file",
                format!("{} bytes", bytes.len()),
                format!("a {HEADER_LEN}-byte header and a payload (the file is truncated or not a firmware image)"),
            );
        }
        if bytes[0..4] != MAGIC {
            return refuse("magic", format!("{:02x?}", &bytes[0..4]), "\"TLFW\" (54 4c 46 57): a tlpx firmware image".into());
        }
        let version = u16_at(bytes, 4);
        if version != FORMAT_VERSION {
            return refuse("format version", version.to_string(), format!("{FORMAT_VERSION}"));
        }
        let header_len = u16_at(bytes, 6);
        if usize::from(header_len) != HEADER_LEN {
            return refuse("header length", header_len.to_string(), format!("{HEADER_LEN} (format version {FORMAT_VERSION})"));
        }
        let load_address = u32_at(bytes, 8);
        let length = u32_at(bytes, 12);
        let crc = u32_at(bytes, 16);
        let map_hash = u32_at(bytes, 20);
        let fw_version = u32_at(bytes, 24);
        let reserved = u32_at(bytes, 28);
        if reserved != 0 {
            return refuse("reserved word (offset 28)", format!("0x{reserved:08x}"), "0".into());
        }
        if length == 0 || length % 4 != 0 || length > MAX_PAYLOAD {
            return refuse(
                "payload length",
                format!("{length} bytes"),
                format!("a nonzero multiple of 4 of at most {MAX_PAYLOAD} (0x{MAX_PAYLOAD:x}) bytes: the firmware area below the mailbox"),
            );
        }
        let payload = &bytes[HEADER_LEN..];
        if payload.len() != length as usize {
            return refuse(
                "payload length",
                format!("{length} bytes in the header, but the file holds {} bytes after the header", payload.len()),
                format!(
                    "a file of exactly {} bytes (header + payload): the file is truncated or has trailing bytes",
                    HEADER_LEN + length as usize
                ),
            );
        }
        let computed = crc32(payload);
        if computed != crc {
            return refuse(
                "payload CRC-32",
                format!("0x{crc:08x} in the header, but the payload's is 0x{computed:08x}"),
                "the CRC-32 (IEEE/zlib) of the payload: the file is corrupt".into(),
            );
        }
        Ok(FirmwareImage { load_address, crc, map_hash, version: fw_version, payload: payload.to_vec() })
    }

    /// Checks the fields that depend on the card: the map hash it was built for against the
    /// card's `ident.map_hash`, and the load address against its `cpu_ctrl.sram_base`.
    pub fn check_card(&self, card_map_hash: u32, sram_base: u32) -> Result<(), FirmwareImageError> {
        if self.map_hash != card_map_hash {
            return refuse(
                "map hash",
                format!("0x{:08x}", self.map_hash),
                format!("0x{card_map_hash:08x}, the map of this card: rebuild the firmware for it (make firmware)"),
            );
        }
        if self.load_address != sram_base {
            return refuse("load address", format!("0x{:08x}", self.load_address), format!("0x{sram_base:08x}, the card's SRAM base"));
        }
        Ok(())
    }

    /// The firmware version as "major.minor".
    pub fn version_string(&self) -> String {
        version_string(self.version)
    }

    /// The image file of this image (header and payload), with the CRC computed anew.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(HEADER_LEN + self.payload.len());
        out.extend_from_slice(&MAGIC);
        out.extend_from_slice(&FORMAT_VERSION.to_le_bytes());
        out.extend_from_slice(&(HEADER_LEN as u16).to_le_bytes());
        for w in [self.load_address, self.payload.len() as u32, crc32(&self.payload), self.map_hash, self.version, 0] {
            out.extend_from_slice(&w.to_le_bytes());
        }
        out.extend_from_slice(&self.payload);
        out
    }
}

/// A firmware version word (major << 16 | minor) as "major.minor".
pub fn version_string(version: u32) -> String {
    format!("{}.{}", version >> 16, version & 0xFFFF)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn good() -> FirmwareImage {
        FirmwareImage {
            load_address: LOAD_ADDRESS,
            crc: 0,
            map_hash: tlpx_regs::MAP_HASH_CPU,
            version: (1 << 16) | 2,
            payload: (0..256u32).flat_map(|i| (i * 0x0101_0101).to_le_bytes()).collect(),
        }
    }

    fn set32(b: &mut [u8], at: usize, v: u32) {
        b[at..at + 4].copy_from_slice(&v.to_le_bytes());
    }

    fn refused(bytes: &[u8]) -> FirmwareImageError {
        FirmwareImage::parse(bytes).expect_err("refused")
    }

    #[test]
    fn a_good_image_parses_to_its_fields() {
        let g = good();
        let file = g.encode();
        assert_eq!(file.len(), HEADER_LEN + 1024);
        let img = FirmwareImage::parse(&file).unwrap();
        assert_eq!(img.payload, g.payload);
        assert_eq!(img.crc, crc32(&g.payload));
        assert_eq!(img.map_hash, tlpx_regs::MAP_HASH_CPU);
        assert_eq!(img.version_string(), "1.2");
        assert_eq!(img.load_address, 0x40000);
        img.check_card(tlpx_regs::MAP_HASH_CPU, 0x40000).unwrap();
        // the largest payload is accepted too
        let big = FirmwareImage { payload: vec![0x13; MAX_PAYLOAD as usize], ..good() };
        FirmwareImage::parse(&big.encode()).unwrap();
    }

    #[test]
    fn a_short_file_is_refused() {
        for n in [0, 4, 31] {
            let e = refused(&good().encode()[..n]);
            assert_eq!(e.field, "file");
            assert!(e.to_string().contains(&format!("found {n} bytes")), "{e}");
        }
    }

    #[test]
    fn a_truncated_or_padded_file_is_refused_with_the_lengths() {
        let file = good().encode();
        let e = refused(&file[..file.len() - 4]);
        assert_eq!(e.field, "payload length");
        assert!(e.found.contains("1024 bytes in the header") && e.found.contains("holds 1020 bytes"), "{e}");
        let mut longer = file.clone();
        longer.extend_from_slice(&[0; 4]);
        assert_eq!(refused(&longer).field, "payload length");
    }

    #[test]
    fn bad_magic_version_header_length_and_reserved_are_refused() {
        let mut f = good().encode();
        f[0] = b'X';
        let e = refused(&f);
        assert_eq!(e.field, "magic");
        assert!(e.to_string().contains("TLFW"), "{e}");

        let mut f = good().encode();
        f[4] = 2;
        let e = refused(&f);
        assert_eq!((e.field, e.found.as_str(), e.accepted.as_str()), ("format version", "2", "1"));

        let mut f = good().encode();
        f[6] = 48;
        assert_eq!(refused(&f).field, "header length");

        let mut f = good().encode();
        set32(&mut f, 28, 7);
        let e = refused(&f);
        assert!(e.field.starts_with("reserved") && e.found == "0x00000007", "{e}");
    }

    #[test]
    fn payload_lengths_outside_the_firmware_area_are_refused() {
        // zero, unaligned, longer than the area
        for (len, file_payload) in [(0u32, 0usize), (6, 6), (MAX_PAYLOAD + 4, MAX_PAYLOAD as usize + 4)] {
            let mut f = good().encode()[..HEADER_LEN].to_vec();
            f.extend(std::iter::repeat_n(0u8, file_payload));
            set32(&mut f, 12, len);
            let crc = crc32(&f[HEADER_LEN..]);
            set32(&mut f, 16, crc);
            let e = refused(&f);
            assert_eq!(e.field, "payload length", "{len}: {e}");
            assert!(e.accepted.contains("0x7f00"), "{e}");
        }
    }

    #[test]
    fn a_bad_crc_is_refused_with_both_values() {
        let mut f = good().encode();
        let last = f.len() - 1;
        f[last] ^= 1;
        let e = refused(&f);
        assert_eq!(e.field, "payload CRC-32");
        let real = crc32(&f[HEADER_LEN..]);
        assert!(e.found.contains(&format!("0x{real:08x}")), "{e}");
    }

    #[test]
    fn map_hash_and_load_address_are_checked_against_the_card() {
        let img = FirmwareImage::parse(&good().encode()).unwrap();
        let e = img.check_card(tlpx_regs::MAP_HASH, 0x40000).expect_err("wrong map");
        assert_eq!(e.field, "map hash");
        assert!(
            e.found == format!("0x{:08x}", tlpx_regs::MAP_HASH_CPU) && e.accepted.contains(&format!("0x{:08x}", tlpx_regs::MAP_HASH)),
            "{e}"
        );
        let e = img.check_card(tlpx_regs::MAP_HASH_CPU, 0x80000).expect_err("wrong base");
        assert_eq!(e.field, "load address");
        assert!(e.to_string().contains("0x00040000") && e.to_string().contains("0x00080000"), "{e}");
    }
}
