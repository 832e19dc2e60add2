//! The card's configuration space. Like a hard IP, the sim owns it (the Verilated card has
//! none) and hands the card what a hard IP would through its cfg_* inputs.
//!
//! Type 0 header (PCI Local Bus 3.0, 6.1) with a capability list: Power Management (PCI PM
//! 1.2), MSI with up to the board's vectors (enabled with one), 64- or 32-bit addresses as the board's hard IP has it (PCI 3.0,
//! 6.8.1) and the PCI Express capability of an endpoint (PCIe Base, 7.5.3), whose Device and
//! Link Capabilities are the board's (server.rs, `--board`). No extended capabilities.
//!
//! At start the command register has memory space and bus mastering enabled and MSI is
//! enabled with its one vector, as if a driver had already set the card up.

// Layout ------------------------------------------------------------------------------------------

pub const SIZE: usize = 4096;
pub const VENDOR_ID: u16 = 0x10EE;
pub const DEVICE_ID: u16 = 0x7C01;
pub const CLASS_CODE: u32 = 0x11_80_00; // Signal processing controller, other
/// Revision 0, as LitePCIe's hard-IP wrappers present the card (the 7-series IP's default
/// Revision_ID, cfg_rev_id tied to 0 on US/US+), and as LitePCIe's stock driver requires: its
/// probe refuses any other revision (docs/litepcie-driver.md, docs/virtual-platform.md).
pub const REVISION: u8 = 0;
pub const SUBSYSTEM_VENDOR_ID: u16 = 0x10EE;
/// The card's own ID again, as the board targets configure their hard IP (targets/board.py).
pub const SUBSYSTEM_ID: u16 = 0x7C01;

pub const COMMAND: usize = 0x04;
pub const CMD_MEMORY: u16 = 1 << 1;
pub const CMD_BUS_MASTER: u16 = 1 << 2;
pub const BAR0: usize = 0x10;
pub const CAP_PM: usize = 0x40;
pub const CAP_MSI: usize = 0x50;
pub const CAP_MSIX: usize = 0x60;
pub const CAP_PCIE: usize = 0x70;

// MSI-X capability registers (PCIe Base 7.7.2).
const MSIX_CONTROL: usize = CAP_MSIX + 2;
const MSIX_TABLE: usize = CAP_MSIX + 4;
const MSIX_PBA: usize = CAP_MSIX + 8;
const MSIX_ENABLE: u16 = 1 << 15;
const MSIX_FUNCTION_MASK: u16 = 1 << 14;

// MSI capability registers (the data word follows the upper address in the 64-bit layout,
// the lower address in the 32-bit one).
const MSI_CONTROL: usize = CAP_MSI + 2;
const MSI_ADDR_LO: usize = CAP_MSI + 4;
const MSI_ADDR_HI: usize = CAP_MSI + 8;
const MSI_64BIT: u16 = 1 << 7;

// PCI Express capability registers.
const PCIE_DEVCAP: usize = CAP_PCIE + 0x04;
const PCIE_DEVCTL: usize = CAP_PCIE + 0x08;
const PCIE_LINKCAP: usize = CAP_PCIE + 0x0C;
const PCIE_LINKCTL: usize = CAP_PCIE + 0x10;
const PCIE_LINKSTA: usize = CAP_PCIE + 0x12;
const PCIE_DEVCAP2: usize = CAP_PCIE + 0x24;
const PCIE_DEVCTL2: usize = CAP_PCIE + 0x28;
const PCIE_LINKCAP2: usize = CAP_PCIE + 0x2C;
const PCIE_LINKCTL2: usize = CAP_PCIE + 0x30;

/// Where MSIs are addressed at start (the x86 local APIC window, as Linux programs it).
pub const MSI_DEFAULT_ADDRESS: u32 = 0xFEE0_0000;

fn msi_data_offset(msi_64bit: bool) -> usize {
    CAP_MSI + if msi_64bit { 12 } else { 8 }
}

/// Encodes 128..4096 bytes as the 3-bit size field of Device Control / Capabilities.
pub fn size_code(bytes: u32) -> Option<u16> {
    (bytes.is_power_of_two() && (128..=4096).contains(&bytes)).then(|| (bytes / 128).trailing_zeros() as u16)
}

/// Decodes a 3-bit size field; reserved codes (6, 7) read as 4096.
pub fn size_bytes(code: u16) -> u32 {
    128 << (code & 7).min(5)
}

/// What the card is told, and what the root complex needs, from config space.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CardView {
    pub memory_enable: bool,
    pub bus_master_enable: bool,
    pub msi_enable: bool,
    /// Vectors the driver enabled (Multiple Message Enable): 1, 2, 4 .. 32.
    pub msi_vectors: u32,
    pub msi_address: u64,
    pub msi_data: u16,
    /// MSI-X Enable and Function Mask (false without the capability).
    pub msix_enable: bool,
    pub msix_function_mask: bool,
    pub max_payload_size: u32,
    pub max_read_request_size: u32,
    /// BAR0 bus address (memory BAR, low flag bits cleared).
    pub bar0: u64,
}

pub struct ConfigSpace {
    bytes: [u8; SIZE],
    /// Bits a config write may change (everything else is read-only).
    writable: [u8; SIZE],
    bar0_size: u32,
}

/// The MSI-X capability: its table size and where the table and the pending-bit array are in
/// BAR0 (the card's build info: cores/msix.py's window).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MsixParams {
    pub vectors: u32,
    pub table_offset: u32,
    pub pba_offset: u32,
}

/// Parameters of the config space a run presents.
#[derive(Debug, Clone, Copy)]
pub struct ConfigParams {
    pub generation: u8,
    pub lanes: u8,
    pub mps: u32,
    pub mrrs: u32,
    /// Largest payload the card supports (Device Capabilities).
    pub mps_supported: u32,
    /// The fastest, widest link the board's hard IP can train (Link Capabilities); the link
    /// (`generation`, `lanes`) is what it trained to (Link Status).
    pub max_link_generation: u8,
    pub max_link_lanes: u8,
    /// MSI with 64-bit message addresses (else 32-bit).
    pub msi_64bit: bool,
    /// MSI vectors the card can send (Multiple Message Capable): 1, 2, 4, ..., 32.
    pub msi_vectors: u32,
    /// The MSI-X capability, when the card offers it.
    pub msix: Option<MsixParams>,
    pub bar0_address: u32,
    pub bar0_size: u32,
}

impl ConfigSpace {
    pub fn new(p: ConfigParams) -> Result<ConfigSpace, String> {
        let mps_code = size_code(p.mps).ok_or(format!("MPS must be 128, 256, ..., 4096 bytes, not {}", p.mps))?;
        let mrrs_code = size_code(p.mrrs).ok_or(format!("MRRS must be 128, 256, ..., 4096 bytes, not {}", p.mrrs))?;
        let sup_code = size_code(p.mps_supported).ok_or(format!("supported MPS must be 128..4096, not {}", p.mps_supported))?;
        if p.mps > p.mps_supported {
            return Err(format!("MPS {} is larger than the {} bytes the card supports", p.mps, p.mps_supported));
        }
        if !(1..=5).contains(&p.generation) {
            return Err(format!("PCIe generation must be 1..5, not {}", p.generation));
        }
        if ![1, 2, 4, 8, 16].contains(&p.lanes) {
            return Err(format!("link width must be 1, 2, 4, 8 or 16 lanes, not {}", p.lanes));
        }
        if p.generation > p.max_link_generation || p.lanes > p.max_link_lanes {
            return Err(format!(
                "a Gen{} x{} link is beyond the card's hard IP, which trains up to Gen{} x{}",
                p.generation, p.lanes, p.max_link_generation, p.max_link_lanes
            ));
        }
        if !p.bar0_size.is_power_of_two() || p.bar0_size < 16 || !p.bar0_address.is_multiple_of(p.bar0_size) {
            return Err(format!("BAR0 at {:#x} of {:#x} bytes is not naturally aligned", p.bar0_address, p.bar0_size));
        }
        let mut c = ConfigSpace { bytes: [0; SIZE], writable: [0; SIZE], bar0_size: p.bar0_size };

        // Type 0 header.
        c.put16(0x00, VENDOR_ID);
        c.put16(0x02, DEVICE_ID);
        c.put16(COMMAND, CMD_MEMORY | CMD_BUS_MASTER);
        c.mask16(COMMAND, 0x0546); // memory, bus master, parity error, SERR#, INTx disable
        c.put16(0x06, 1 << 4); // status: capabilities list
        c.bytes[0x08] = REVISION;
        c.put_bytes(0x09, &CLASS_CODE.to_le_bytes()[..3]);
        c.mask8(0x0C, 0xFF); // cache line size
        c.put32(BAR0, p.bar0_address); // 32-bit, non-prefetchable memory BAR
        c.mask32(BAR0, !(p.bar0_size - 1) & !0xF);
        c.put16(0x2C, SUBSYSTEM_VENDOR_ID);
        c.put16(0x2E, SUBSYSTEM_ID);
        c.bytes[0x34] = CAP_PM as u8;
        // Interrupt line 0 (none assigned).
        c.mask8(0x3C, 0xFF);
        // Interrupt pin 0: no INTx, MSI only.

        // Power management: version 3 (PM 1.2), D0, No_Soft_Reset.
        c.bytes[CAP_PM] = 0x01;
        c.bytes[CAP_PM + 1] = CAP_MSI as u8;
        c.put16(CAP_PM + 2, 0x0003);
        c.put16(CAP_PM + 4, 0x0008);
        c.mask16(CAP_PM + 4, 0x0003); // PowerState

        // MSI: capable of the vectors the board's hard IP offers (Multiple Message Capable;
        // the card's MSI block sends a vector per source and timer vector once the host
        // enables several, vector 0 for all with one), enabled with one vector (Multiple
        // Message Enable 0, what a stock driver asks for); 64- or 32-bit addresses as the
        // hard IP has.
        c.bytes[CAP_MSI] = 0x05;
        c.bytes[CAP_MSI + 1] = if p.msix.is_some() { CAP_MSIX } else { CAP_PCIE } as u8;
        if !p.msi_vectors.is_power_of_two() || p.msi_vectors > 32 {
            return Err(format!("MSI vectors must be 1, 2, 4, 8, 16 or 32, not {}", p.msi_vectors));
        }
        let mmc = p.msi_vectors.trailing_zeros() as u16;
        c.put16(MSI_CONTROL, if p.msi_64bit { MSI_64BIT } else { 0 } | (mmc << 1) | 1);
        c.mask16(MSI_CONTROL, (7 << 4) | 1);
        c.put32(MSI_ADDR_LO, MSI_DEFAULT_ADDRESS);
        c.mask32(MSI_ADDR_LO, !3);
        if p.msi_64bit {
            c.mask32(MSI_ADDR_HI, !0);
        }
        c.mask16(msi_data_offset(p.msi_64bit), 0xFFFF);

        // MSI-X: the card's table in BAR0 (BIR 0), off at start (MSI is what a set-up card
        // uses); a host turns it on (and MSI off) to steer each vector on its own.
        if let Some(x) = p.msix {
            if !(1..=2048).contains(&x.vectors) || x.table_offset % 8 != 0 || x.pba_offset % 8 != 0 {
                return Err(format!(
                    "MSI-X needs 1..2048 vectors and QWORD-aligned offsets, not {} vectors, table {:#x}, PBA {:#x}",
                    x.vectors, x.table_offset, x.pba_offset
                ));
            }
            if u64::from(x.table_offset) + 16 * u64::from(x.vectors) > u64::from(p.bar0_size) || x.pba_offset >= p.bar0_size {
                return Err(format!(
                    "the MSI-X table ({:#x}) or PBA ({:#x}) is outside BAR0 ({:#x} bytes)",
                    x.table_offset, x.pba_offset, p.bar0_size
                ));
            }
            c.bytes[CAP_MSIX] = 0x11;
            c.bytes[CAP_MSIX + 1] = CAP_PCIE as u8;
            c.put16(MSIX_CONTROL, (x.vectors - 1) as u16);
            c.mask16(MSIX_CONTROL, MSIX_ENABLE | MSIX_FUNCTION_MASK);
            c.put32(MSIX_TABLE, x.table_offset);
            c.put32(MSIX_PBA, x.pba_offset);
        }

        // PCI Express capability, version 2, endpoint.
        c.bytes[CAP_PCIE] = 0x10;
        c.bytes[CAP_PCIE + 1] = 0x00;
        c.put16(CAP_PCIE + 2, 0x0002);
        // Device Capabilities: MPS supported, extended (8-bit) tags, role-based error reporting.
        c.put32(PCIE_DEVCAP, u32::from(sup_code) | (1 << 5) | (1 << 15));
        // Device Control: relaxed ordering, extended tags, no snoop, the sizes.
        c.put16(PCIE_DEVCTL, (1 << 4) | (1 << 8) | (1 << 11) | (mps_code << 5) | (mrrs_code << 12));
        c.mask16(PCIE_DEVCTL, 0x000F | (1 << 4) | (7 << 5) | (1 << 8) | (1 << 11) | (7 << 12));
        // Link Capabilities: max speed, max width, port 0.
        c.put32(PCIE_LINKCAP, u32::from(p.max_link_generation) | (u32::from(p.max_link_lanes) << 4));
        c.mask16(PCIE_LINKCTL, 0x0003 | (1 << 6) | (1 << 7)); // ASPM, common clock, ext synch
                                                              // Link Status: current speed and negotiated width; slot clock configuration.
        c.put16(PCIE_LINKSTA, u16::from(p.generation) | (u16::from(p.lanes) << 4) | (1 << 12));
        // Device Capabilities 2: completion timeout ranges A-D supported, disable supported.
        c.put32(PCIE_DEVCAP2, 0x1F);
        c.mask16(PCIE_DEVCTL2, 0x001F);
        // Link Capabilities 2: supported speeds vector (bit 1 = 2.5 GT/s ...).
        let speeds = ((1u32 << p.max_link_generation) - 1) << 1;
        c.put32(PCIE_LINKCAP2, speeds);
        c.put16(PCIE_LINKCTL2, u16::from(p.max_link_generation));
        c.mask16(PCIE_LINKCTL2, 0x000F);
        Ok(c)
    }

    fn put_bytes(&mut self, off: usize, v: &[u8]) {
        self.bytes[off..off + v.len()].copy_from_slice(v);
    }
    fn put16(&mut self, off: usize, v: u16) {
        self.put_bytes(off, &v.to_le_bytes());
    }
    fn put32(&mut self, off: usize, v: u32) {
        self.put_bytes(off, &v.to_le_bytes());
    }
    fn mask8(&mut self, off: usize, m: u8) {
        self.writable[off] = m;
    }
    fn mask16(&mut self, off: usize, m: u16) {
        self.writable[off..off + 2].copy_from_slice(&m.to_le_bytes());
    }
    fn mask32(&mut self, off: usize, m: u32) {
        self.writable[off..off + 4].copy_from_slice(&m.to_le_bytes());
    }
    fn get16(&self, off: usize) -> u16 {
        u16::from_le_bytes([self.bytes[off], self.bytes[off + 1]])
    }
    fn get32(&self, off: usize) -> u32 {
        u32::from_le_bytes([self.bytes[off], self.bytes[off + 1], self.bytes[off + 2], self.bytes[off + 3]])
    }

    pub fn bytes(&self) -> &[u8; SIZE] {
        &self.bytes
    }

    pub fn bar0_size(&self) -> u32 {
        self.bar0_size
    }

    fn check_range(offset: u16, len: usize) -> Result<(), String> {
        if usize::from(offset) + len > SIZE || len == 0 {
            return Err(format!(
                "config access at offset {offset:#x} of {len} bytes is outside the 4096 bytes of config space (need 1..=4096 bytes within 0..0x1000)"
            ));
        }
        Ok(())
    }

    pub fn read(&self, offset: u16, len: u16) -> Result<Vec<u8>, String> {
        Self::check_range(offset, usize::from(len))?;
        let o = usize::from(offset);
        Ok(self.bytes[o..o + usize::from(len)].to_vec())
    }

    /// Writes `data` at `offset`; only writable bits change. Returns whether anything did.
    pub fn write(&mut self, offset: u16, data: &[u8]) -> Result<bool, String> {
        Self::check_range(offset, data.len())?;
        let o = usize::from(offset);
        let mut changed = false;
        for (i, &d) in data.iter().enumerate() {
            let m = self.writable[o + i];
            let new = (self.bytes[o + i] & !m) | (d & m);
            changed |= new != self.bytes[o + i];
            self.bytes[o + i] = new;
        }
        Ok(changed)
    }

    /// The MSI and MSI-X Message Control registers (MSI-X's 0 without the capability).
    pub fn interrupt_controls(&self) -> (u16, u16) {
        (self.get16(MSI_CONTROL), if self.has_msix() { self.get16(MSIX_CONTROL) } else { 0 })
    }

    /// Writes both Message Control registers back (as config writes: read-only bits stay).
    pub fn set_interrupt_controls(&mut self, (msi, msix): (u16, u16)) {
        let _ = self.write(MSI_CONTROL as u16, &msi.to_le_bytes());
        if self.has_msix() {
            let _ = self.write(MSIX_CONTROL as u16, &msix.to_le_bytes());
        }
    }

    /// Whether the MSI-X capability is in the list.
    pub fn has_msix(&self) -> bool {
        self.bytes[CAP_MSI + 1] as usize == CAP_MSIX
    }

    /// MSI-X vectors (the table's size), 0 without the capability.
    pub fn msix_vectors(&self) -> u32 {
        if self.has_msix() {
            u32::from(self.get16(MSIX_CONTROL) & 0x7FF) + 1
        } else {
            0
        }
    }

    /// MSI vectors the card is capable of (the capability's Multiple Message Capable).
    pub fn msi_vectors_capable(&self) -> u32 {
        1 << ((self.get16(MSI_CONTROL) >> 1) & 7)
    }

    /// What the card and the root complex take from config space now.
    pub fn view(&self) -> CardView {
        let cmd = self.get16(COMMAND);
        let msi = self.get16(MSI_CONTROL);
        let devctl = self.get16(PCIE_DEVCTL);
        // A Multiple Message Enable above what the card is capable of grants what it is
        // capable of (the spec leaves it undefined; the card cannot send more).
        let mme = ((msi >> 4) & 7).min((msi >> 1) & 7);
        CardView {
            memory_enable: cmd & CMD_MEMORY != 0,
            bus_master_enable: cmd & CMD_BUS_MASTER != 0,
            msi_enable: msi & 1 != 0,
            msi_vectors: 1 << mme.min(5),
            msi_address: if msi & MSI_64BIT != 0 {
                (u64::from(self.get32(MSI_ADDR_HI)) << 32) | u64::from(self.get32(MSI_ADDR_LO))
            } else {
                u64::from(self.get32(MSI_ADDR_LO))
            },
            msi_data: self.get16(msi_data_offset(msi & MSI_64BIT != 0)),
            msix_enable: self.has_msix() && self.get16(MSIX_CONTROL) & MSIX_ENABLE != 0,
            msix_function_mask: self.has_msix() && self.get16(MSIX_CONTROL) & MSIX_FUNCTION_MASK != 0,
            max_payload_size: size_bytes(devctl >> 5).min(size_bytes(self.get16(PCIE_DEVCAP))),
            max_read_request_size: size_bytes(devctl >> 12),
            bar0: u64::from(self.get32(BAR0) & !0xF),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tlpx_pci::decode;

    fn params() -> ConfigParams {
        ConfigParams {
            generation: 3,
            lanes: 4,
            mps: 256,
            mrrs: 512,
            mps_supported: 4096,
            max_link_generation: 3,
            max_link_lanes: 8,
            msi_64bit: true,
            msi_vectors: 32,
            msix: Some(MsixParams { vectors: 32, table_offset: 0x50000, pba_offset: 0x50800 }),
            bar0_address: 0xF000_0000,
            bar0_size: 1 << 20,
        }
    }

    #[test]
    fn header_and_capabilities_decode() {
        let c = ConfigSpace::new(params()).unwrap();
        let b = c.bytes();
        assert_eq!(&b[0..4], &[0xEE, 0x10, 0x01, 0x7C]);
        assert_eq!(&b[9..12], &[0x00, 0x80, 0x11]);
        assert_eq!(b[8], 0, "revision 0: LitePCIe's stock driver probes nothing else");
        let caps: Vec<u8> = decode::capabilities(b).iter().map(|c| c.id).collect();
        assert_eq!(caps, vec![0x01, 0x05, 0x11, 0x10]);
        let without = ConfigSpace::new(ConfigParams { msix: None, ..params() }).unwrap();
        let caps: Vec<u8> = decode::capabilities(without.bytes()).iter().map(|c| c.id).collect();
        assert_eq!(caps, vec![0x01, 0x05, 0x10], "no MSI-X capability unless asked");
        let v = c.view();
        assert!(v.memory_enable && v.bus_master_enable && v.msi_enable);
        assert_eq!(v.msi_vectors, 1);
        assert_eq!((v.max_payload_size, v.max_read_request_size), (256, 512));
        assert_eq!(v.bar0, 0xF000_0000);
        assert_eq!(v.msi_address, 0xFEE0_0000);
    }

    #[test]
    fn msi_multiple_message_and_msix_enable_reach_the_view() {
        let mut c = ConfigSpace::new(params()).unwrap();
        assert_eq!(c.msi_vectors_capable(), 32);
        assert_eq!(c.msix_vectors(), 32);
        // MME 3: 8 vectors; a MME above the capability grants the capability's.
        c.write(MSI_CONTROL as u16, &(1u16 | (3 << 4)).to_le_bytes()).unwrap();
        assert_eq!(c.view().msi_vectors, 8);
        let mut few = ConfigSpace::new(ConfigParams { msi_vectors: 4, msix: None, ..params() }).unwrap();
        few.write(MSI_CONTROL as u16, &(1u16 | (5 << 4)).to_le_bytes()).unwrap();
        assert_eq!(few.view().msi_vectors, 4);
        assert!(!few.view().msix_enable);
        // MSI-X Enable and Function Mask are the only writable bits of its control; the table
        // size and locations are read-only.
        assert!(!c.view().msix_enable);
        c.write(MSIX_CONTROL as u16, &0xFFFFu16.to_le_bytes()).unwrap();
        let v = c.view();
        assert!(v.msix_enable && v.msix_function_mask);
        assert_eq!(c.msix_vectors(), 32);
        c.write(MSIX_TABLE as u16, &[0; 4]).unwrap();
        assert_eq!(c.read(MSIX_TABLE as u16, 4).unwrap(), 0x50000u32.to_le_bytes().to_vec());
        assert!(ConfigSpace::new(ConfigParams { msi_vectors: 3, ..params() }).is_err());
        assert!(ConfigSpace::new(ConfigParams {
            msix: Some(MsixParams { vectors: 32, table_offset: 0xFFFF8, pba_offset: 0x50800 }),
            ..params()
        })
        .is_err());
    }

    #[test]
    fn bar_sizing_reads_back_the_size() {
        let mut c = ConfigSpace::new(params()).unwrap();
        c.write(BAR0 as u16, &[0xFF; 4]).unwrap();
        let v = u32::from_le_bytes(c.read(BAR0 as u16, 4).unwrap().try_into().unwrap());
        assert_eq!(v, 0xFFF0_0000);
        c.write(BAR0 as u16, &0xE000_0000u32.to_le_bytes()).unwrap();
        assert_eq!(c.view().bar0, 0xE000_0000);
        // BAR1 is not implemented: reads 0 after writing ones.
        c.write(0x14, &[0xFF; 4]).unwrap();
        assert_eq!(c.read(0x14, 4).unwrap(), vec![0; 4]);
    }

    #[test]
    fn device_control_and_command_are_writable_ids_are_not() {
        let mut c = ConfigSpace::new(params()).unwrap();
        assert!(!c.write(0, &[0, 0, 0, 0]).unwrap());
        assert_eq!(c.read(0, 2).unwrap(), vec![0xEE, 0x10]);
        let devctl = (PCIE_DEVCTL) as u16;
        let mut d = c.read(devctl, 2).unwrap();
        let mut v = u16::from_le_bytes([d[0], d[1]]);
        v = (v & !(7 << 5) & !(7 << 12)) | (size_code(128).unwrap() << 5) | (size_code(4096).unwrap() << 12);
        d = v.to_le_bytes().to_vec();
        assert!(c.write(devctl, &d).unwrap());
        assert_eq!((c.view().max_payload_size, c.view().max_read_request_size), (128, 4096));
        c.write(COMMAND as u16, &[0, 0]).unwrap();
        assert!(!c.view().bus_master_enable && !c.view().memory_enable);
        c.write(MSI_CONTROL as u16, &[0, 0]).unwrap();
        assert!(!c.view().msi_enable);
        assert_eq!(c.view().msi_vectors, 1);
    }

    #[test]
    fn bad_accesses_and_params_are_clear_errors() {
        let c = ConfigSpace::new(params()).unwrap();
        let e = c.read(4095, 2).unwrap_err();
        assert!(e.contains("0xfff") && e.contains("4096"), "{e}");
        let e = ConfigSpace::new(ConfigParams { mps: 300, ..params() }).err().unwrap_or_default();
        assert!(e.contains("not 300"), "{e}");
        let e = ConfigSpace::new(ConfigParams { mps: 4096, mps_supported: 512, ..params() }).err().unwrap_or_default();
        assert!(e.contains("4096") && e.contains("512"), "{e}");
        let e = ConfigSpace::new(ConfigParams { generation: 4, lanes: 16, ..params() }).err().unwrap_or_default();
        assert!(e.contains("Gen4 x16") && e.contains("Gen3 x8"), "{e}");
    }

    #[test]
    fn msi_with_32_bit_addresses_as_pcie_7x_has_it() {
        let mut c = ConfigSpace::new(ConfigParams { msi_64bit: false, ..params() }).unwrap();
        let m = decode::msi(c.bytes()).expect("MSI capability");
        assert!(!m.is_64bit);
        // The data word follows the lower address; the upper address does not exist.
        c.write((CAP_MSI + 8) as u16, &0x4321u16.to_le_bytes()).unwrap();
        c.write((CAP_MSI + 12) as u16, &0x1234u16.to_le_bytes()).unwrap();
        assert_eq!((c.view().msi_data, c.view().msi_address), (0x4321, 0xFEE0_0000));
    }

    #[test]
    fn pcie_capability_reports_the_link() {
        let c = ConfigSpace::new(params()).unwrap();
        let p = decode::pcie(c.bytes()).expect("PCIe capability");
        assert_eq!(p.device_type, 0);
        // A Gen3 x4 link trained on an IP that could do x8: LnkSta says x4, LnkCap x8.
        assert_eq!((p.generation, p.link_width, p.max_link_width), (3, 4, 8));
        assert_eq!((p.max_payload_supported, p.max_payload_size, p.max_read_request_size), (4096, 256, 512));
        let m = decode::msi(c.bytes()).expect("MSI capability");
        assert!(m.enabled && m.is_64bit);
        assert_eq!((m.multiple_message_capable, m.multiple_message_enabled), (32, 1));
        assert_eq!(m.address, 0xFEE0_0000);
        let one = ConfigSpace::new(ConfigParams { msi_vectors: 1, ..params() }).unwrap();
        assert_eq!(decode::msi(one.bytes()).expect("MSI capability").multiple_message_capable, 1);
        let bars = decode::bars(c.bytes());
        assert_eq!(bars[0].address, 0xF000_0000);
        assert!(!bars[0].is_io && !bars[0].is_64bit);
    }
}
