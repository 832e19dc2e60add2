//! Decoders of configuration-space bytes: capability lists, the PCI Express capability, MSI
//! and BARs. Pure functions over `&[u8]` (config space from offset 0), so they work the same
//! on bytes from libpci, from a dump file or from the simulator, and are unit-tested on
//! hand-built arrays.
//!
//! Spec references: "PCI LB 3.0" is the PCI Local Bus Specification rev 3.0; "PCIe 5.0" is
//! the PCI Express Base Specification rev 5.0 version 1.0 (section numbers as in that
//! revision; the registers used here have not moved since PCIe 2.0).
//!
//! Every read is bounds-checked: a decoder given too few bytes (an unprivileged sysfs read
//! returns only the 64-byte header) returns what it can prove, never garbage.

use std::collections::BTreeSet;

// Type 0/1 header (PCI LB 3.0, 6.1 and figure 6-1) ------------------------------------------

/// Status register; bit 4 "Capabilities List" says whether the capability pointer is valid
/// (PCI LB 3.0, 6.2.3).
const STATUS: usize = 0x06;
const STATUS_CAP_LIST: u16 = 1 << 4;
/// Header Type register; bits 6:0 select the layout, bit 7 flags a multi-function device
/// (PCI LB 3.0, 6.2.1).
const HEADER_TYPE: usize = 0x0e;
/// Base Address Registers start here in type 0 and type 1 headers (PCI LB 3.0, 6.2.5.1).
const BAR0: usize = 0x10;
/// Capabilities Pointer of type 0 and type 1 headers (PCI LB 3.0, 6.7).
const CAP_PTR: usize = 0x34;
/// Capabilities Pointer of a type 2 (CardBus bridge) header (PC Card Standard, CardBus).
const CAP_PTR_CARDBUS: usize = 0x14;
/// Capabilities live after the predefined header, in the first 256 bytes (PCI LB 3.0, 6.7).
const CAP_AREA_START: usize = 0x40;
/// Extended capabilities start at 0x100 of the 4096-byte PCIe configuration space
/// (PCIe 5.0, 7.6.1).
const EXT_CAP_START: usize = 0x100;
const CONFIG_SPACE_SIZE: usize = 4096;

/// Capability IDs (PCI Code and ID Assignment Specification, 2).
pub const CAP_ID_MSI: u8 = 0x05;
pub const CAP_ID_PCIE: u8 = 0x10;
pub const CAP_ID_MSIX: u8 = 0x11;

fn read8(config: &[u8], offset: usize) -> Option<u8> {
    config.get(offset).copied()
}

fn read16(config: &[u8], offset: usize) -> Option<u16> {
    let b = config.get(offset..offset.checked_add(2)?)?;
    Some(u16::from_le_bytes([b[0], b[1]]))
}

fn read32(config: &[u8], offset: usize) -> Option<u32> {
    let b = config.get(offset..offset.checked_add(4)?)?;
    Some(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
}

/// Layout of the header (bits 6:0 of Header Type): 0 = device, 1 = PCI-to-PCI bridge,
/// 2 = CardBus bridge. `None` if the byte is not there.
pub fn header_type(config: &[u8]) -> Option<u8> {
    read8(config, HEADER_TYPE).map(|h| h & 0x7f)
}

// Capabilities ---------------------------------------------------------------------------------

/// One entry of the (conventional) capability list in the first 256 bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct Capability {
    /// Capability ID (PCI Code and ID Assignment Specification, 2).
    pub id: u8,
    /// Offset of the capability header in configuration space.
    pub offset: u16,
    /// Name of the capability ID, "Unknown" for an unassigned one.
    pub name: &'static str,
}

/// One entry of the PCIe extended capability list (offsets 0x100..0xfff).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct ExtendedCapability {
    /// Extended Capability ID (PCI Code and ID Assignment Specification, 3).
    pub id: u16,
    /// Capability Version field.
    pub version: u8,
    /// Offset of the capability header in configuration space.
    pub offset: u16,
    /// Name of the capability ID, "Unknown" for an unassigned one.
    pub name: &'static str,
}

/// Name of a capability ID (PCI Code and ID Assignment Specification, 2).
pub fn capability_name(id: u8) -> &'static str {
    match id {
        0x00 => "Null",
        0x01 => "Power Management",
        0x02 => "AGP",
        0x03 => "Vital Product Data",
        0x04 => "Slot Identification",
        0x05 => "MSI",
        0x06 => "CompactPCI Hot Swap",
        0x07 => "PCI-X",
        0x08 => "HyperTransport",
        0x09 => "Vendor Specific",
        0x0a => "Debug Port",
        0x0b => "CompactPCI Central Resource Control",
        0x0c => "PCI Hot-Plug",
        0x0d => "Bridge Subsystem Vendor ID",
        0x0e => "AGP 8x",
        0x0f => "Secure Device",
        0x10 => "PCI Express",
        0x11 => "MSI-X",
        0x12 => "SATA Data/Index Configuration",
        0x13 => "Advanced Features",
        0x14 => "Enhanced Allocation",
        0x15 => "Flattening Portal Bridge",
        _ => "Unknown",
    }
}

/// Name of an extended capability ID (PCI Code and ID Assignment Specification, 3).
pub fn extended_capability_name(id: u16) -> &'static str {
    match id {
        0x0000 => "Null",
        0x0001 => "Advanced Error Reporting",
        0x0002 => "Virtual Channel",
        0x0003 => "Device Serial Number",
        0x0004 => "Power Budgeting",
        0x0005 => "Root Complex Link Declaration",
        0x0006 => "Root Complex Internal Link Control",
        0x0007 => "Root Complex Event Collector Endpoint Association",
        0x0008 => "Multi-Function Virtual Channel",
        0x0009 => "Virtual Channel (MFVC present)",
        0x000a => "Root Complex Register Block Header",
        0x000b => "Vendor-Specific Extended",
        0x000c => "Configuration Access Correlation",
        0x000d => "Access Control Services",
        0x000e => "Alternative Routing-ID Interpretation",
        0x000f => "Address Translation Services",
        0x0010 => "SR-IOV",
        0x0011 => "MR-IOV",
        0x0012 => "Multicast",
        0x0013 => "Page Request Interface",
        0x0015 => "Resizable BAR",
        0x0016 => "Dynamic Power Allocation",
        0x0017 => "TPH Requester",
        0x0018 => "Latency Tolerance Reporting",
        0x0019 => "Secondary PCI Express",
        0x001a => "Protocol Multiplexing",
        0x001b => "Process Address Space ID",
        0x001c => "LN Requester",
        0x001d => "Downstream Port Containment",
        0x001e => "L1 PM Substates",
        0x001f => "Precision Time Measurement",
        0x0020 => "PCI Express over M-PHY",
        0x0021 => "FRS Queueing",
        0x0022 => "Readiness Time Reporting",
        0x0023 => "Designated Vendor-Specific",
        0x0024 => "VF Resizable BAR",
        0x0025 => "Data Link Feature",
        0x0026 => "Physical Layer 16.0 GT/s",
        0x0027 => "Lane Margining at the Receiver",
        0x0028 => "Hierarchy ID",
        0x0029 => "Native PCIe Enclosure Management",
        0x002a => "Physical Layer 32.0 GT/s",
        0x002e => "Data Object Exchange",
        0x002f => "Device 3",
        0x0030 => "Integrity and Data Encryption",
        _ => "Unknown",
    }
}

/// Walks the capability list (PCI LB 3.0, 6.7): the pointer at 0x34 (0x14 for CardBus)
/// names the first capability; each one holds its ID at +0 and the next pointer at +1. The
/// bottom two bits of a pointer are reserved and masked. The walk stops at a null pointer,
/// a pointer into the predefined header (< 0x40), a capability beyond the bytes given, an
/// ID of 0xff (config reads of an absent device return all ones), or a capability already
/// visited: a list that loops (a device bug, or a corrupted dump) ends instead of hanging.
pub fn capabilities(config: &[u8]) -> Vec<Capability> {
    let mut found = Vec::new();
    let Some(status) = read16(config, STATUS) else {
        return found;
    };
    if status & STATUS_CAP_LIST == 0 {
        return found;
    }
    let pointer_at = match header_type(config) {
        Some(0) | Some(1) => CAP_PTR,
        Some(2) => CAP_PTR_CARDBUS,
        _ => return found,
    };
    let Some(first) = read8(config, pointer_at) else {
        return found;
    };
    let mut visited = [false; 256 / 4];
    let mut offset = usize::from(first & 0xfc);
    while offset >= CAP_AREA_START {
        let slot = offset / 4;
        if visited[slot] {
            break;
        }
        visited[slot] = true;
        let (Some(id), Some(next)) = (read8(config, offset), read8(config, offset + 1)) else {
            break;
        };
        if id == 0xff {
            break;
        }
        found.push(Capability { id, offset: offset as u16, name: capability_name(id) });
        offset = usize::from(next & 0xfc);
    }
    found
}

/// Walks the extended capability list (PCIe 5.0, 7.6.3): a 32-bit header at 0x100 holds the
/// ID in bits 15:0, the version in 19:16 and the next offset in 31:20 (bottom two bits
/// reserved). The walk stops at a header of 0 or all ones, a next offset below 0x100, a
/// capability beyond the bytes given, or one already visited. Needs the full 4096-byte
/// space (from root on sysfs, or a dump written with 4096 bytes); empty otherwise.
pub fn extended_capabilities(config: &[u8]) -> Vec<ExtendedCapability> {
    let mut found = Vec::new();
    let mut visited = BTreeSet::new();
    let mut offset = EXT_CAP_START;
    while (EXT_CAP_START..CONFIG_SPACE_SIZE).contains(&offset) && visited.insert(offset) {
        let Some(header) = read32(config, offset) else {
            break;
        };
        if header == 0 || header == 0xffff_ffff {
            break;
        }
        let id = (header & 0xffff) as u16;
        found.push(ExtendedCapability {
            id,
            version: ((header >> 16) & 0xf) as u8,
            offset: offset as u16,
            name: extended_capability_name(id),
        });
        offset = ((header >> 20) & 0xffc) as usize;
    }
    found
}

/// Offset of the first capability with `id`, if the list has one.
pub fn find_capability(config: &[u8], id: u8) -> Option<u16> {
    capabilities(config).into_iter().find(|c| c.id == id).map(|c| c.offset)
}

// PCI Express capability ---------------------------------------------------------------------

// Register offsets inside the PCI Express Capability structure (PCIe 5.0, 7.5.3, fig. 7-10).
/// PCI Express Capabilities Register (PCIe 5.0, 7.5.3.2): bits 3:0 version, 7:4 type.
const PCIE_CAPS: usize = 0x02;
/// Device Capabilities Register (PCIe 5.0, 7.5.3.3): bits 2:0 Max_Payload_Size Supported.
const PCIE_DEVCAP: usize = 0x04;
/// Device Control Register (PCIe 5.0, 7.5.3.4): bits 7:5 Max_Payload_Size,
/// bits 14:12 Max_Read_Request_Size.
const PCIE_DEVCTL: usize = 0x08;
/// Link Capabilities Register (PCIe 5.0, 7.5.3.6): bits 3:0 Max Link Speed,
/// bits 9:4 Maximum Link Width.
const PCIE_LNKCAP: usize = 0x0c;
/// Link Status Register (PCIe 5.0, 7.5.3.8): bits 3:0 Current Link Speed,
/// bits 9:4 Negotiated Link Width.
const PCIE_LNKSTA: usize = 0x12;

/// What the PCI Express capability says about a function and its link.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct PcieInfo {
    /// Device/Port Type (PCIe 5.0, 7.5.3.2): 0 endpoint, 1 legacy endpoint, 4 root port,
    /// 5 upstream switch port, 6 downstream switch port, 7 PCIe-to-PCI bridge,
    /// 8 PCI-to-PCIe bridge, 9 root complex integrated endpoint, 10 root complex event
    /// collector. See [`PcieInfo::device_type_name`].
    pub device_type: u8,
    /// Current link speed in GT/s; 0.0 if the link is down or the value is reserved.
    pub link_speed_gt_s: f64,
    /// Negotiated link width in lanes; 0 if the link is down.
    pub link_width: u8,
    /// Maximum link speed the port supports, in GT/s.
    pub max_link_speed_gt_s: f64,
    /// Maximum link width the port supports, in lanes.
    pub max_link_width: u8,
    /// Largest payload the function supports, in bytes (Device Capabilities).
    pub max_payload_supported: u32,
    /// Max_Payload_Size in effect, in bytes (Device Control).
    pub max_payload_size: u32,
    /// Max_Read_Request_Size in effect, in bytes (Device Control).
    pub max_read_request_size: u32,
    /// PCIe generation of the current link speed: 1..6 for 2.5, 5, 8, 16, 32, 64 GT/s;
    /// 0 if the link is down or the speed is reserved.
    pub generation: u8,
    /// PCIe generation of the maximum link speed (Link Capabilities), 0 if reserved.
    pub max_generation: u8,
}

impl PcieInfo {
    /// Human name of `device_type`.
    pub fn device_type_name(&self) -> &'static str {
        match self.device_type {
            0x0 => "Endpoint",
            0x1 => "Legacy Endpoint",
            0x4 => "Root Port",
            0x5 => "Upstream Switch Port",
            0x6 => "Downstream Switch Port",
            0x7 => "PCIe to PCI/PCI-X Bridge",
            0x8 => "PCI/PCI-X to PCIe Bridge",
            0x9 => "Root Complex Integrated Endpoint",
            0xa => "Root Complex Event Collector",
            _ => "Reserved",
        }
    }
}

/// Bytes of a Max_Payload_Size / Max_Read_Request_Size encoding: 000b = 128 ... 101b = 4096
/// (PCIe 5.0, 7.5.3.3 and 7.5.3.4); 0 for the reserved encodings 110b and 111b.
pub fn payload_size_bytes(encoding: u8) -> u32 {
    if encoding <= 5 {
        128 << encoding
    } else {
        0
    }
}

/// GT/s of a link speed encoding. The value n selects bit n-1 of the Supported Link Speeds
/// Vector (PCIe 5.0, 7.5.3.6, 7.5.3.8, 7.5.3.18), whose bits stand for 2.5, 5, 8, 16, 32
/// and 64 GT/s in order. 0.0 for 0 (link down) and reserved values.
pub fn link_speed_gt_s(encoding: u8) -> f64 {
    match encoding {
        1 => 2.5,
        2 => 5.0,
        3 => 8.0,
        4 => 16.0,
        5 => 32.0,
        6 => 64.0,
        _ => 0.0,
    }
}

/// Decodes the PCI Express capability, if present and inside the bytes given.
pub fn pcie(config: &[u8]) -> Option<PcieInfo> {
    let base = usize::from(find_capability(config, CAP_ID_PCIE)?);
    let caps = read16(config, base + PCIE_CAPS)?;
    let devcap = read32(config, base + PCIE_DEVCAP)?;
    let devctl = read16(config, base + PCIE_DEVCTL)?;
    let lnkcap = read32(config, base + PCIE_LNKCAP)?;
    let lnksta = read16(config, base + PCIE_LNKSTA)?;
    let speed = (lnksta & 0xf) as u8;
    let max_speed = (lnkcap & 0xf) as u8;
    Some(PcieInfo {
        device_type: ((caps >> 4) & 0xf) as u8,
        link_speed_gt_s: link_speed_gt_s(speed),
        link_width: ((lnksta >> 4) & 0x3f) as u8,
        max_link_speed_gt_s: link_speed_gt_s(max_speed),
        max_link_width: ((lnkcap >> 4) & 0x3f) as u8,
        max_payload_supported: payload_size_bytes((devcap & 0x7) as u8),
        max_payload_size: payload_size_bytes(((devctl >> 5) & 0x7) as u8),
        max_read_request_size: payload_size_bytes(((devctl >> 12) & 0x7) as u8),
        generation: if (1..=6).contains(&speed) { speed } else { 0 },
        max_generation: if (1..=6).contains(&max_speed) { max_speed } else { 0 },
    })
}

// MSI capability --------------------------------------------------------------------------------

// Register offsets inside the MSI capability (PCI LB 3.0, 6.8.1; PCIe 5.0, 7.7.1).
/// Message Control (PCIe 5.0, 7.7.1.2): bit 0 MSI Enable, bits 3:1 Multiple Message
/// Capable, bits 6:4 Multiple Message Enable (both log2 of a vector count), bit 7 64-bit
/// Address Capable.
const MSI_CONTROL: usize = 0x02;
/// Message Address, bits 31:2 (PCIe 5.0, 7.7.1.3); bits 1:0 are reserved.
const MSI_ADDRESS_LO: usize = 0x04;
/// Message Upper Address in the 64-bit layout (PCIe 5.0, 7.7.1.4).
const MSI_ADDRESS_HI: usize = 0x08;
/// Message Data: at 0x08 in the 32-bit layout, 0x0c in the 64-bit one (PCIe 5.0, 7.7.1.5).
const MSI_DATA_32: usize = 0x08;
const MSI_DATA_64: usize = 0x0c;

/// State of the MSI capability.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct MsiInfo {
    /// MSI Enable: the function signals interrupts through MSI.
    pub enabled: bool,
    /// The function can generate 64-bit message addresses.
    pub is_64bit: bool,
    /// Vectors the function asks for: 1, 2, 4, 8, 16 or 32 (decoded from the log2 field).
    pub multiple_message_capable: u8,
    /// Vectors software granted: 1, 2, 4, 8, 16 or 32 (decoded from the log2 field).
    pub multiple_message_enabled: u8,
    /// Message Address (upper half included in the 64-bit layout).
    pub address: u64,
    /// Message Data.
    pub data: u16,
}

/// Decodes the MSI capability, if present and inside the bytes given.
pub fn msi(config: &[u8]) -> Option<MsiInfo> {
    let base = usize::from(find_capability(config, CAP_ID_MSI)?);
    let control = read16(config, base + MSI_CONTROL)?;
    let is_64bit = control & (1 << 7) != 0;
    let low = u64::from(read32(config, base + MSI_ADDRESS_LO)? & !0x3);
    let (address, data) = if is_64bit {
        let high = u64::from(read32(config, base + MSI_ADDRESS_HI)?);
        (high << 32 | low, read16(config, base + MSI_DATA_64)?)
    } else {
        (low, read16(config, base + MSI_DATA_32)?)
    };
    Some(MsiInfo {
        enabled: control & 1 != 0,
        is_64bit,
        multiple_message_capable: 1 << ((control >> 1) & 0x7),
        multiple_message_enabled: 1 << ((control >> 4) & 0x7),
        address,
        data,
    })
}

// Base Address Registers -----------------------------------------------------------------------

/// One Base Address Register as configuration space shows it. The size is not in these
/// bytes (finding it takes writing all ones to the BAR); the backends know it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct Bar {
    /// BAR number (a 64-bit BAR takes its number and the next).
    pub index: u8,
    /// Base address with the flag bits cleared.
    pub address: u64,
    /// An I/O space BAR (else memory).
    pub is_io: bool,
    /// A 64-bit memory BAR.
    pub is_64bit: bool,
    /// A prefetchable memory BAR.
    pub prefetchable: bool,
}

/// Decodes the BARs (PCI LB 3.0, 6.2.5.1): six in a type 0 header, two in a type 1
/// (PCI-to-PCI Bridge Architecture 1.2, 3.2), none otherwise. Bit 0 set means I/O space
/// (address in bits 31:2); for memory, bits 2:1 give the type (00b 32-bit, 10b 64-bit, the
/// upper half in the next BAR) and bit 3 prefetchability, address in bits 31:4. A register
/// that reads 0 is left out: without sizing, an unimplemented BAR and an unassigned 32-bit
/// memory BAR look the same.
pub fn bars(config: &[u8]) -> Vec<Bar> {
    let count = match header_type(config) {
        Some(0) => 6,
        Some(1) => 2,
        _ => 0,
    };
    let mut found = Vec::new();
    let mut index = 0;
    while index < count {
        let Some(low) = read32(config, BAR0 + 4 * index) else {
            break;
        };
        if low == 0 {
            index += 1;
            continue;
        }
        if low & 0x1 != 0 {
            found.push(Bar { index: index as u8, address: u64::from(low & !0x3), is_io: true, is_64bit: false, prefetchable: false });
            index += 1;
            continue;
        }
        let is_64bit = (low >> 1) & 0x3 == 0b10;
        // A 64-bit BAR in the last slot has no upper half: treat the upper half as zero.
        let high = if is_64bit && index + 1 < count { read32(config, BAR0 + 4 * (index + 1)).unwrap_or(0) } else { 0 };
        found.push(Bar {
            index: index as u8,
            address: u64::from(high) << 32 | u64::from(low & !0xf),
            is_io: false,
            is_64bit,
            prefetchable: low & (1 << 3) != 0,
        });
        index += if is_64bit { 2 } else { 1 };
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A type 0 header with the Capabilities List bit set and the capability pointer at
    /// `first`, 256 bytes.
    fn header_with_caps(first: u8) -> Vec<u8> {
        let mut c = vec![0u8; 256];
        c[0x00..0x02].copy_from_slice(&0x1234u16.to_le_bytes());
        c[STATUS] = STATUS_CAP_LIST as u8;
        c[CAP_PTR] = first;
        c
    }

    #[test]
    fn capability_walk_follows_the_list() {
        let mut c = header_with_caps(0x50);
        c[0x50] = CAP_ID_MSI;
        c[0x51] = 0x70;
        c[0x70] = CAP_ID_PCIE;
        c[0x71] = 0x00;
        let caps = capabilities(&c);
        assert_eq!(
            caps,
            vec![Capability { id: 0x05, offset: 0x50, name: "MSI" }, Capability { id: 0x10, offset: 0x70, name: "PCI Express" },]
        );
    }

    #[test]
    fn capability_walk_stops_on_a_self_loop() {
        let mut c = header_with_caps(0x40);
        c[0x40] = 0x01;
        c[0x41] = 0x40; // points to itself
        assert_eq!(capabilities(&c).len(), 1);
    }

    #[test]
    fn capability_walk_stops_on_a_longer_loop() {
        let mut c = header_with_caps(0x40);
        c[0x40] = 0x01;
        c[0x41] = 0x60;
        c[0x60] = 0x05;
        c[0x61] = 0x43; // reserved low bits set: still 0x40, already visited
        let caps = capabilities(&c);
        assert_eq!(caps.iter().map(|c| c.offset).collect::<Vec<_>>(), vec![0x40, 0x60]);
    }

    #[test]
    fn capability_walk_needs_the_status_bit() {
        let mut c = header_with_caps(0x40);
        c[0x40] = 0x01;
        c[STATUS] = 0;
        assert!(capabilities(&c).is_empty());
    }

    #[test]
    fn capability_walk_on_a_64_byte_header_is_empty() {
        let c = header_with_caps(0x40);
        assert!(capabilities(&c[..64]).is_empty());
        assert!(pcie(&c[..64]).is_none());
        assert!(msi(&c[..64]).is_none());
    }

    #[test]
    fn capability_walk_stops_at_all_ones() {
        let mut c = header_with_caps(0x40);
        c[0x40] = 0xff;
        c[0x41] = 0xff;
        assert!(capabilities(&c).is_empty());
    }

    #[test]
    fn capability_walk_of_a_cardbus_header_uses_0x14() {
        let mut c = header_with_caps(0);
        c[HEADER_TYPE] = 0x02;
        c[CAP_PTR_CARDBUS] = 0x80;
        c[0x80] = 0x01;
        assert_eq!(capabilities(&c)[0].offset, 0x80);
    }

    #[test]
    fn capability_walk_ignores_the_multifunction_bit() {
        let mut c = header_with_caps(0x40);
        c[HEADER_TYPE] = 0x80;
        c[0x40] = 0x09;
        assert_eq!(capabilities(&c)[0].name, "Vendor Specific");
    }

    #[test]
    fn extended_walk_reads_headers_and_stops_on_loops() {
        let mut c = vec![0u8; 4096];
        // AER v1 at 0x100 -> DSN v1 at 0x140 -> back to 0x100.
        c[0x100..0x104].copy_from_slice(&(0x0001u32 | 1 << 16 | 0x140 << 20).to_le_bytes());
        c[0x140..0x144].copy_from_slice(&(0x0003u32 | 1 << 16 | 0x100 << 20).to_le_bytes());
        let ext = extended_capabilities(&c);
        assert_eq!(
            ext,
            vec![
                ExtendedCapability { id: 1, version: 1, offset: 0x100, name: "Advanced Error Reporting" },
                ExtendedCapability { id: 3, version: 1, offset: 0x140, name: "Device Serial Number" },
            ]
        );
        assert!(extended_capabilities(&c[..256]).is_empty());
    }

    #[test]
    fn extended_walk_of_all_ones_is_empty() {
        let c = vec![0xffu8; 4096];
        assert!(extended_capabilities(&c).is_empty());
    }

    #[test]
    fn pcie_gen3_x16_mps128_mrrs4096() {
        let mut c = header_with_caps(0x40);
        c[0x40] = CAP_ID_PCIE;
        c[0x42..0x44].copy_from_slice(&0x0042u16.to_le_bytes()); // v2, type 4 = root port
        c[0x44..0x48].copy_from_slice(&0x0000_0001u32.to_le_bytes()); // MPS supported 256
        c[0x48..0x4a].copy_from_slice(&(0b101u16 << 12).to_le_bytes()); // MPS 128, MRRS 4096
        c[0x4c..0x50].copy_from_slice(&(0x3u32 | 16 << 4).to_le_bytes()); // 8 GT/s x16
        c[0x52..0x54].copy_from_slice(&(0x3u16 | 16 << 4).to_le_bytes());
        let p = pcie(&c).expect("PCIe capability");
        assert_eq!(p.device_type, 4);
        assert_eq!(p.device_type_name(), "Root Port");
        assert_eq!(p.generation, 3);
        assert_eq!(p.link_speed_gt_s, 8.0);
        assert_eq!(p.link_width, 16);
        assert_eq!(p.max_link_speed_gt_s, 8.0);
        assert_eq!(p.max_link_width, 16);
        assert_eq!(p.max_payload_supported, 256);
        assert_eq!(p.max_payload_size, 128);
        assert_eq!(p.max_read_request_size, 4096);
    }

    #[test]
    fn pcie_link_down_reports_generation_0() {
        let mut c = header_with_caps(0x40);
        c[0x40] = CAP_ID_PCIE;
        c[0x4c] = 0x4; // 16 GT/s capable, link status all zero
        let p = pcie(&c).expect("PCIe capability");
        assert_eq!(p.generation, 0);
        assert_eq!(p.link_speed_gt_s, 0.0);
        assert_eq!(p.max_link_speed_gt_s, 16.0);
    }

    #[test]
    fn pcie_capability_cut_off_by_the_end_of_the_bytes_is_none() {
        let mut c = header_with_caps(0xf0);
        c[0xf0] = CAP_ID_PCIE;
        assert!(pcie(&c).is_none()); // Link Status would be at 0x102
    }

    #[test]
    fn payload_and_speed_encodings() {
        assert_eq!((0..8).map(payload_size_bytes).collect::<Vec<_>>(), vec![128, 256, 512, 1024, 2048, 4096, 0, 0]);
        assert_eq!((0..8).map(link_speed_gt_s).collect::<Vec<_>>(), vec![0.0, 2.5, 5.0, 8.0, 16.0, 32.0, 64.0, 0.0]);
    }

    #[test]
    fn msi_32bit_layout() {
        let mut c = header_with_caps(0x60);
        c[0x60] = CAP_ID_MSI;
        c[0x62..0x64].copy_from_slice(&0x0001u16.to_le_bytes()); // enabled, 1 vector, 32-bit
        c[0x64..0x68].copy_from_slice(&0xfee0_1003u32.to_le_bytes()); // reserved bits set
        c[0x68..0x6a].copy_from_slice(&0x0041u16.to_le_bytes());
        let m = msi(&c).expect("MSI capability");
        assert_eq!(
            m,
            MsiInfo {
                enabled: true,
                is_64bit: false,
                multiple_message_capable: 1,
                multiple_message_enabled: 1,
                address: 0xfee0_1000,
                data: 0x41
            }
        );
    }

    #[test]
    fn msi_64bit_layout_32_vectors() {
        let mut c = header_with_caps(0x60);
        c[0x60] = CAP_ID_MSI;
        c[0x62..0x64].copy_from_slice(&(1u16 << 7 | 5 << 4 | 5 << 1).to_le_bytes());
        c[0x64..0x68].copy_from_slice(&0x1000_0000u32.to_le_bytes());
        c[0x68..0x6c].copy_from_slice(&0x0000_0002u32.to_le_bytes());
        c[0x6c..0x6e].copy_from_slice(&0xbeefu16.to_le_bytes());
        let m = msi(&c).expect("MSI capability");
        assert!(!m.enabled && m.is_64bit);
        assert_eq!((m.multiple_message_capable, m.multiple_message_enabled), (32, 32));
        assert_eq!(m.address, 0x2_1000_0000);
        assert_eq!(m.data, 0xbeef);
    }

    #[test]
    fn bars_of_a_type0_header() {
        let mut c = vec![0u8; 64];
        let regs: [u32; 6] = [0xf000_0000, 0x0000_000c, 0x0000_0004, 0x0000_c001, 0, 0x0000_0004];
        // BAR0 32-bit mem; BAR1+2 64-bit prefetchable at 0x4_0000_0000 (BAR2 is the upper
        // half); BAR3 I/O at 0xc000;
        // BAR4 unused; BAR5 64-bit with no room for the upper half.
        for (i, r) in regs.iter().enumerate() {
            c[0x10 + 4 * i..0x14 + 4 * i].copy_from_slice(&r.to_le_bytes());
        }
        let b = bars(&c);
        assert_eq!(
            b,
            vec![
                Bar { index: 0, address: 0xf000_0000, is_io: false, is_64bit: false, prefetchable: false },
                Bar { index: 1, address: 0x4_0000_0000, is_io: false, is_64bit: true, prefetchable: true },
                Bar { index: 3, address: 0xc000, is_io: true, is_64bit: false, prefetchable: false },
                Bar { index: 5, address: 0, is_io: false, is_64bit: true, prefetchable: false },
            ]
        );
    }

    #[test]
    fn bars_of_a_bridge_are_two() {
        let mut c = vec![0u8; 64];
        c[HEADER_TYPE] = 0x01;
        for i in 0..6 {
            c[0x10 + 4 * i..0x14 + 4 * i].copy_from_slice(&0xe000_0000u32.to_le_bytes());
        }
        assert_eq!(bars(&c).len(), 2);
    }

    #[test]
    fn decoders_survive_short_and_empty_input() {
        for n in [0, 1, 6, 15, 16, 20, 63] {
            let c = vec![0xffu8; n];
            assert!(capabilities(&c).is_empty());
            assert!(extended_capabilities(&c).is_empty());
            assert!(pcie(&c).is_none());
            assert!(msi(&c).is_none());
            let _ = bars(&c);
        }
    }
}
