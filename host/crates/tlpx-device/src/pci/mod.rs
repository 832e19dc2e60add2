//! PCI enumeration through pciutils' libpci.
//!
//! tlpx finds PCI functions only through libpci: on a real machine with its default access
//! method (sysfs on Linux, as `lspci` does), and for the simulated card with libpci's "dump"
//! method reading the `lspci -x` style file the simulator writes with [`render_dump`] — so
//! `lspci -F <dump> -vv` shows the simulated card too.
//!
//! - [`scan`] lists functions with their ids, names and config bytes;
//! - [`PciFunction`]'s methods decode the capability list, the PCI Express capability, MSI
//!   and BARs from those bytes in pure Rust ([`decode`], from the tlpx-pci crate);
//! - [`parse_address`] reads `0000:03:00.0` / `03:00.0`.
//!
//! libpci is reached through a small C shim (csrc/tlpx_pci.c) that keeps libpci's structure
//! layouts out of Rust and turns libpci's fatal errors — which would otherwise exit the
//! process — into [`DeviceError::Pci`].

mod ffi;

use std::path::PathBuf;
use std::sync::Mutex;

// The pure part (decoders and the dump format) lives in tlpx-pci, so the simulator can use it
// without libpci; re-exported here so `tlpx_device::pci::...` paths keep working.
pub use tlpx_pci::decode;
pub use tlpx_pci::{render_dump, Bar, Capability, ExtendedCapability, MsiInfo, PcieInfo, MAX_DUMP_CONFIG_BYTES};

use crate::DeviceError;
use ffi::{LibPci, NameKind};

/// Where to enumerate.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PciSource {
    /// This machine's PCI bus, through libpci's default access method (sysfs on Linux).
    System,
    /// A file in `lspci -x` format, through libpci's dump method (the simulated card).
    DumpFile(PathBuf),
}

impl PciSource {
    fn describe(&self) -> String {
        match self {
            PciSource::System => "this machine's PCI bus".to_string(),
            PciSource::DumpFile(p) => format!("PCI dump file {}", p.display()),
        }
    }
}

/// One PCI function as libpci reports it.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct PciFunction {
    pub domain: u16,
    pub bus: u8,
    pub device: u8,
    pub function: u8,
    pub vendor_id: u16,
    pub device_id: u16,
    /// 24-bit class code: base class << 16 | subclass << 8 | programming interface.
    pub class: u32,
    pub revision: u8,
    pub subsystem_vendor_id: u16,
    pub subsystem_id: u16,
    /// Names from the PCI ID database (pci.ids / udev hwdb); `None` when it has no entry.
    pub vendor_name: Option<String>,
    pub device_name: Option<String>,
    /// Name of the base class and subclass.
    pub class_name: Option<String>,
    /// Configuration space from offset 0, as much as readable: 4096 bytes (PCIe, as root),
    /// 256 (conventional PCI, or a dump of 256), 128 (CardBus) or 64 (the header: what
    /// sysfs gives an unprivileged user). Always at least 64 bytes.
    pub config: Vec<u8>,
}

impl PciFunction {
    /// Builds a function from its address and config bytes alone (ids, class and subsystem
    /// read from the header; no names). For a backend that holds config space itself.
    pub fn from_config(domain: u16, bus: u8, device: u8, function: u8, config: Vec<u8>) -> PciFunction {
        let byte = |o: usize| config.get(o).copied().unwrap_or(0xff);
        let word = |o: usize| u16::from_le_bytes([byte(o), byte(o + 1)]);
        // Header fields (PCI LB 3.0, 6.1): subsystem ids at 0x2c/0x2e of a type 0 header only.
        let (subsystem_vendor_id, subsystem_id) = if decode::header_type(&config) == Some(0) { (word(0x2c), word(0x2e)) } else { (0, 0) };
        PciFunction {
            domain,
            bus,
            device,
            function,
            vendor_id: word(0x00),
            device_id: word(0x02),
            class: u32::from(byte(0x0b)) << 16 | u32::from(byte(0x0a)) << 8 | u32::from(byte(0x09)),
            revision: byte(0x08),
            subsystem_vendor_id,
            subsystem_id,
            vendor_name: None,
            device_name: None,
            class_name: None,
            config,
        }
    }

    /// The address in `lspci -D` form: `0000:03:00.0`.
    pub fn address(&self) -> String {
        format!("{:04x}:{:02x}:{:02x}.{:x}", self.domain, self.bus, self.device, self.function)
    }

    /// The conventional capability list (needs 256 config bytes; empty with the 64-byte
    /// header an unprivileged sysfs read gives).
    pub fn capabilities(&self) -> Vec<Capability> {
        decode::capabilities(&self.config)
    }

    /// The PCIe extended capability list (needs all 4096 config bytes).
    pub fn extended_capabilities(&self) -> Vec<ExtendedCapability> {
        decode::extended_capabilities(&self.config)
    }

    /// The PCI Express capability, if the function has one.
    pub fn pcie(&self) -> Option<PcieInfo> {
        decode::pcie(&self.config)
    }

    /// The MSI capability, if the function has one.
    pub fn msi(&self) -> Option<MsiInfo> {
        decode::msi(&self.config)
    }

    /// The BARs that hold a value (sizes are not in config space).
    pub fn bars(&self) -> Vec<Bar> {
        decode::bars(&self.config)
    }

    /// A copy of this function's config space in the format libpci's dump method reads.
    pub fn to_dump(&self) -> String {
        render_dump(self.domain, self.bus, self.device, self.function, &self.config)
    }
}

// libpci keeps no global state we know of, but its name cache, hwdb handle and method
// back-ends were not written with threads in mind: one scan at a time per process.
static LIBPCI: Mutex<()> = Mutex::new(());

/// Lists the PCI functions of `source`, sorted by address.
///
/// For [`PciSource::System`], a function whose config header cannot be read, or whose
/// domain does not fit 16 bits (Intel VMD domains), is left out; [`scan_with_warnings`]
/// says which. A dump file is held to a stricter standard: it must contain at least one
/// function and each must have at least 64 bytes, otherwise the dump is malformed and the
/// result is an error.
pub fn scan(source: &PciSource) -> Result<Vec<PciFunction>, DeviceError> {
    scan_with_warnings(source).map(|(functions, _)| functions)
}

/// [`scan`], also returning libpci's warnings and the functions that were left out.
pub fn scan_with_warnings(source: &PciSource) -> Result<(Vec<PciFunction>, Vec<String>), DeviceError> {
    let _one_at_a_time = LIBPCI.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    let fail = |what: &str, msg: String| DeviceError::Pci(failure_message(source, what, &msg));

    let dump = match source {
        PciSource::System => None,
        PciSource::DumpFile(path) => Some(path.as_path()),
    };
    let mut lib = LibPci::open(dump).map_err(|msg| fail("read", msg))?;
    let count = lib.scan().map_err(|msg| fail("scan", msg))?;

    let mut functions = Vec::with_capacity(count);
    let mut skipped = Vec::new();
    let mut names_work = true;
    for index in 0..count {
        let raw = lib.info(index).map_err(|msg| fail("identify a function of", msg))?;
        let address = format!("{:04x}:{:02x}:{:02x}.{:x}", raw.domain, raw.bus, raw.dev, raw.func);
        let Ok(domain) = u16::try_from(raw.domain) else {
            skipped.push(format!("{address}: left out, its PCI domain does not fit 16 bits (an Intel VMD domain?)"));
            continue;
        };
        let config = lib.read_config(index).map_err(|msg| fail(&format!("read config space of {address} in"), msg))?;
        if config.len() < 64 {
            skipped.push(format!(
                "{address}: left out, fewer than 64 bytes of its config space are readable{}",
                match source {
                    PciSource::System => format!(" (check /sys/bus/pci/devices/{address}/config)"),
                    PciSource::DumpFile(_) => String::new(),
                }
            ));
            continue;
        }
        let mut function = PciFunction {
            domain,
            bus: raw.bus,
            device: raw.dev,
            function: raw.func,
            vendor_id: raw.vendor_id,
            device_id: raw.device_id,
            class: raw.class_code,
            revision: raw.revision,
            subsystem_vendor_id: raw.subsys_vendor_id,
            subsystem_id: raw.subsys_id,
            vendor_name: None,
            device_name: None,
            class_name: None,
            config,
        };
        if names_work {
            match lookup_names(&mut lib, &mut function) {
                Ok(()) => {}
                Err(msg) => {
                    // A broken ID database costs names, not the scan.
                    skipped.push(format!("PCI ID database unusable, names left out: {msg}"));
                    names_work = false;
                }
            }
        }
        functions.push(function);
    }
    let mut warnings = lib.warnings();
    drop(lib);
    functions.sort_by_key(|f| (f.domain, f.bus, f.device, f.function));

    if let PciSource::DumpFile(path) = source {
        if !skipped.is_empty() || functions.is_empty() {
            let mut problems = skipped;
            problems.append(&mut warnings);
            if functions.is_empty() && problems.is_empty() {
                problems.push("it contains no PCI function".to_string());
            }
            return Err(DeviceError::Pci(format!(
                "PCI dump file {} is malformed: {}. {}",
                path.display(),
                problems.join("; "),
                DUMP_FORMAT_HINT
            )));
        }
    }
    warnings.extend(skipped);
    Ok((functions, warnings))
}

/// Finds the function at `address` (any form [`parse_address`] accepts) in `source`.
pub fn find(source: &PciSource, address: &str) -> Result<PciFunction, DeviceError> {
    let wanted = parse_address(address)?;
    let functions = scan(source)?;
    let present: Vec<String> = functions.iter().map(PciFunction::address).collect();
    functions.into_iter().find(|f| (f.domain, f.bus, f.device, f.function) == wanted).ok_or_else(|| {
        DeviceError::NoSuchDevice(format!(
            "no PCI function at {address} on {}; present: {}",
            source.describe(),
            if present.is_empty() { "none".to_string() } else { present.join(", ") }
        ))
    })
}

const DUMP_FORMAT_HINT: &str = "A dump holds, per function, a line like `0000:03:00.0 1180: 1234:7c01` \
     followed by lines like `00: 34 12 01 7c ...` (a hex offset and up to 16 hex bytes), at \
     least 64 bytes per function, as `lspci -xxx` prints and tlpx_device::pci::render_dump writes";

fn failure_message(source: &PciSource, what: &str, libpci_message: &str) -> String {
    let msg = libpci_message.trim_end();
    match source {
        PciSource::System => format!(
            "cannot {what} this machine's PCI bus with libpci's default access method: {msg}. \
             On Linux libpci reads /sys/bus/pci: check that sysfs is mounted and readable, or \
             point tlpx at a dump file instead"
        ),
        PciSource::DumpFile(path) => format!("cannot {what} PCI dump file {}: {msg}. {DUMP_FORMAT_HINT}", path.display()),
    }
}

fn lookup_names(lib: &mut LibPci, f: &mut PciFunction) -> Result<(), String> {
    f.vendor_name = lib.lookup(NameKind::Vendor, f.vendor_id.into(), 0)?;
    f.device_name = lib.lookup(NameKind::Device, f.vendor_id.into(), f.device_id.into())?;
    f.class_name = lib.lookup(NameKind::Class, f.class >> 8, 0)?;
    Ok(())
}

/// Parses a PCI address: `DDDD:BB:DD.F` (domain, bus, device, function, as `lspci -D`
/// prints) or `BB:DD.F` (domain 0), all in hex; returns (domain, bus, device, function).
pub fn parse_address(s: &str) -> Result<(u16, u8, u8, u8), DeviceError> {
    let bad = |why: &str| {
        DeviceError::InvalidArgument(format!(
            "PCI address {s:?} {why}: expected DOMAIN:BUS:DEVICE.FUNCTION or BUS:DEVICE.FUNCTION \
             in hex, e.g. 0000:03:00.0 or 03:00.0 (domain up to ffff, bus up to ff, device up \
             to 1f, function 0-7)"
        ))
    };
    let hex = |field: &str, name: &str, digits: usize, max: u32| -> Result<u32, DeviceError> {
        if field.is_empty() || field.len() > digits || !field.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(bad(&format!("has a bad {name} field {field:?}")));
        }
        let value = u32::from_str_radix(field, 16).map_err(|_| bad(&format!("has a bad {name} field {field:?}")))?;
        if value > max {
            return Err(bad(&format!("has {name} {value:#x} out of range")));
        }
        Ok(value)
    };
    let (slot, func) = s.rsplit_once('.').ok_or_else(|| bad("has no `.FUNCTION`"))?;
    let parts: Vec<&str> = slot.split(':').collect();
    let (domain, bus, device) = match parts.as_slice() {
        [bus, device] => (0, *bus, *device),
        [domain, bus, device] => (hex(domain, "domain", 4, 0xffff)?, *bus, *device),
        _ => return Err(bad("has the wrong number of `:`-separated fields")),
    };
    let bus = hex(bus, "bus", 2, 0xff)?;
    let device = hex(device, "device", 2, 0x1f)?;
    let function = hex(func, "function", 1, 7)?;
    Ok((domain as u16, bus as u8, device as u8, function as u8))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pci_address_round_trip() {
        let f = PciFunction::from_config(0x10, 0x3, 0x1f, 7, vec![0; 64]);
        assert_eq!(f.address(), "0010:03:1f.7");
        assert_eq!(parse_address(&f.address()).ok(), Some((0x10, 3, 0x1f, 7)));
    }

    #[test]
    fn pci_from_config_reads_the_header() {
        let mut c = vec![0u8; 64];
        c[0..4].copy_from_slice(&[0x86, 0x80, 0x57, 0x0d]);
        c[8..12].copy_from_slice(&[0x02, 0x01, 0x00, 0x06]);
        c[0x2c..0x30].copy_from_slice(&[0xf4, 0x1a, 0x01, 0x11]);
        let f = PciFunction::from_config(0, 0, 0, 0, c);
        assert_eq!((f.vendor_id, f.device_id, f.class, f.revision), (0x8086, 0x0d57, 0x060001, 2));
        assert_eq!((f.subsystem_vendor_id, f.subsystem_id), (0x1af4, 0x1101));
    }
}
