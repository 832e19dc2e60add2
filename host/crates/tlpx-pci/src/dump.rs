//! Writing config space in the text format of `lspci -x` / `-xxx` / `-xxxx`, which libpci's
//! "dump" access method reads back (`lspci -F <file>`, and `tlpx_device::pci::scan` with
//! `tlpx_device::pci::PciSource::DumpFile`).
//!
//! What libpci's parser (lib/dump.c of pciutils) accepts, and so what this writes:
//! - a function starts with a line `DDDD:BB:DD.F ` (or `BB:DD.F `), hex fields of exactly
//!   those widths, then a space and any text (we write `lspci -n`'s `class: vendor:device`);
//! - then lines `OO: xx xx ...`: a hex offset of 2 to 8 digits, a colon, a space and up to
//!   16 two-digit hex bytes separated by single spaces; anything else after the bytes makes
//!   the whole file fail ("Malformed line");
//! - 256 bytes are kept per function unless an offset reaches 0x100, then 4096; an offset of
//!   4096 or more fails the file; only bytes up to the highest one written are readable;
//! - a blank line ends a function; other lines are ignored; lines must be < 255 characters.

use std::fmt::Write as _;

/// Largest configuration space a dump can hold (PCIe extended configuration space).
pub const MAX_DUMP_CONFIG_BYTES: usize = 4096;

/// Renders one function's configuration space as libpci's dump method reads it, ending with
/// a blank line so renders of several functions can be concatenated into one file.
///
/// `config` starts at offset 0; give at least 64 bytes (`lspci` refuses less), 256 for the
/// capability list, 4096 for extended capabilities. Bytes past 4096 are not written. The
/// address is written as `DDDD:BB:DD.F`; `device` must be below 32 and `function` below 8
/// (the widths of those fields in a Routing ID): larger values are masked to those widths.
pub fn render_dump(domain: u16, bus: u8, device: u8, function: u8, config: &[u8]) -> String {
    debug_assert!(device < 32 && function < 8, "PCI device {device} / function {function} out of range");
    let config = &config[..config.len().min(MAX_DUMP_CONFIG_BYTES)];
    let mut out = String::with_capacity(64 + config.len() * 3 + config.len() / 16 * 6);
    let _ = write!(out, "{domain:04x}:{bus:02x}:{:02x}.{:x} ", device & 0x1f, function & 0x7);
    out.push_str(&describe(config));
    out.push('\n');
    for (line, bytes) in config.chunks(16).enumerate() {
        // Same as lspci's show_hex_dump: "%02x:" then " %02x" per byte.
        let _ = write!(out, "{:02x}:", line * 16);
        for b in bytes {
            let _ = write!(out, " {b:02x}");
        }
        out.push('\n');
    }
    out.push('\n');
    out
}

/// `lspci -n` style description: `1180: 1234:7c01 (rev 01)`.
fn describe(config: &[u8]) -> String {
    if config.len() < 0x0c {
        return "PCI function".to_string();
    }
    // Vendor ID 0x00, Device ID 0x02, Revision ID 0x08, Class Code 0x09..0x0b
    // (PCI LB 3.0, 6.2.1).
    let vendor = u16::from_le_bytes([config[0], config[1]]);
    let device = u16::from_le_bytes([config[2], config[3]]);
    let revision = config[8];
    let mut s = format!("{:02x}{:02x}: {vendor:04x}:{device:04x}", config[0x0b], config[0x0a]);
    if revision != 0 {
        let _ = write!(s, " (rev {revision:02x})");
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn render_dump_matches_lspci_x_layout() {
        let mut config = vec![0u8; 64];
        config[0..4].copy_from_slice(&[0x34, 0x12, 0x01, 0x7c]);
        config[8] = 0x01;
        config[0x0a] = 0x80;
        config[0x0b] = 0x11;
        let text = render_dump(0, 3, 0, 0, &config);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines[0], "0000:03:00.0 1180: 1234:7c01 (rev 01)");
        assert_eq!(lines[1], "00: 34 12 01 7c 00 00 00 00 01 00 80 11 00 00 00 00");
        assert_eq!(lines[4].len(), "30:".len() + 16 * 3);
        assert!(lines[4].starts_with("30: "));
        assert_eq!(lines[5], "");
        assert_eq!(lines.len(), 6);
        assert!(text.ends_with("\n\n"));
    }

    #[test]
    fn render_dump_of_4096_bytes_uses_three_digit_offsets() {
        let config = vec![0xabu8; 5000];
        let text = render_dump(0x1f, 0xff, 31, 7, &config);
        let lines: Vec<&str> = text.lines().collect();
        assert!(lines[0].starts_with("001f:ff:1f.7 "));
        assert_eq!(lines.len(), 1 + 256 + 1);
        assert!(lines[16].starts_with("f0: "));
        assert!(lines[17].starts_with("100: "));
        assert!(lines[256].starts_with("ff0: "));
        assert!(lines.iter().all(|l| l.len() < 255));
    }

    #[test]
    fn render_dump_of_a_partial_last_line() {
        let text = render_dump(0, 0, 0, 0, &[1, 2, 3]);
        assert_eq!(text, "0000:00:00.0 PCI function\n00: 01 02 03\n\n");
    }
}
