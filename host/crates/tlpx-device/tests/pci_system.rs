//! Enumeration of this machine's real PCI bus through libpci's default access method,
//! checked against what Linux itself publishes in /sys/bus/pci/devices.
//!
//! ```text
//!  scan(System) ──libpci (sysfs)──► functions ──┐
//!  /sys/bus/pci/devices/*/{vendor,device,class} ─┴─► same set, same ids
//! ```
//!
//! Machines differ (a VM may have a handful of functions, a container none), so the test
//! compares with sysfs rather than with fixed values.

use std::collections::BTreeMap;
use std::path::Path;

use tlpx_device::pci::{self, PciSource};

const SYSFS_DEVICES: &str = "/sys/bus/pci/devices";

fn sysfs_hex(dir: &Path, name: &str) -> u32 {
    let text = std::fs::read_to_string(dir.join(name)).unwrap_or_else(|e| panic!("read {}/{name}: {e}", dir.display()));
    let digits = text.trim().trim_start_matches("0x");
    u32::from_str_radix(digits, 16).unwrap_or_else(|e| panic!("{}/{name} holds {text:?}: {e}", dir.display()))
}

fn well_formed(address: &str) -> bool {
    let b = address.as_bytes();
    b.len() == 12
        && b[4] == b':'
        && b[7] == b':'
        && b[10] == b'.'
        && address.chars().enumerate().all(|(i, c)| matches!(i, 4 | 7 | 10) || c.is_ascii_hexdigit() && !c.is_ascii_uppercase())
        && (b'0'..=b'7').contains(&b[11])
}

#[test]
fn pci_system_scan_matches_sysfs() {
    let (functions, warnings) = pci::scan_with_warnings(&PciSource::System).expect("scan this machine's PCI bus");
    eprintln!("{} functions; libpci warnings: {warnings:?}", functions.len());

    for f in &functions {
        let a = f.address();
        assert!(well_formed(&a), "bad address {a:?}");
        assert_eq!(pci::parse_address(&a).ok(), Some((f.domain, f.bus, f.device, f.function)));
        assert!(f.config.len() >= 64, "{a}: only {} config bytes", f.config.len());
        assert!([64, 128, 256, 4096].contains(&f.config.len()), "{a}: {} config bytes", f.config.len());
        // The config header agrees with the identity libpci reported.
        assert_eq!(u16::from_le_bytes([f.config[0], f.config[1]]), f.vendor_id, "{a}");
        assert_eq!(u16::from_le_bytes([f.config[2], f.config[3]]), f.device_id, "{a}");
        assert_eq!(f.config[8], f.revision, "{a}");
    }
    let mut sorted = functions.iter().map(|f| f.address()).collect::<Vec<_>>();
    sorted.sort();
    assert_eq!(sorted, functions.iter().map(|f| f.address()).collect::<Vec<_>>(), "scan sorts by address");

    let sysfs = Path::new(SYSFS_DEVICES);
    if !sysfs.is_dir() {
        eprintln!("{SYSFS_DEVICES} does not exist here: only the scan itself was checked");
        return;
    }
    let mut expected = BTreeMap::new();
    for entry in std::fs::read_dir(sysfs).expect("list sysfs PCI devices") {
        let entry = entry.expect("sysfs entry");
        let name = entry.file_name().to_string_lossy().into_owned();
        // 16-bit domains only (wider VMD domains are documented as left out).
        if name.len() != 12 {
            continue;
        }
        let dir = entry.path();
        expected.insert(name, (sysfs_hex(&dir, "vendor"), sysfs_hex(&dir, "device"), sysfs_hex(&dir, "class")));
    }
    let found: BTreeMap<String, (u32, u32, u32)> =
        functions.iter().map(|f| (f.address(), (u32::from(f.vendor_id), u32::from(f.device_id), f.class))).collect();
    assert_eq!(found, expected, "libpci's view of the bus differs from {SYSFS_DEVICES}");
}

#[test]
fn pci_system_decoders_run_on_every_real_function() {
    // Real config spaces, whatever they hold, must decode without panicking or looping.
    let functions = pci::scan(&PciSource::System).expect("scan this machine's PCI bus");
    for f in &functions {
        let caps = f.capabilities();
        let offsets: std::collections::BTreeSet<u16> = caps.iter().map(|c| c.offset).collect();
        assert_eq!(offsets.len(), caps.len(), "{}: a capability listed twice", f.address());
        assert!(caps.iter().all(|c| (0x40..0x100).contains(&c.offset)), "{}: {caps:?}", f.address());
        let _ = (f.pcie(), f.msi(), f.bars(), f.extended_capabilities());
        if let Some(p) = f.pcie() {
            assert!(p.generation <= 6 && p.max_read_request_size <= 4096, "{}: {p:?}", f.address());
        }
    }
}

#[test]
fn pci_system_matches_lspci() {
    // lspci's config dump and ours must agree byte for byte on the standard header, which
    // every user may read (root sees more; the comparison is the same 64 bytes).
    let functions = pci::scan(&PciSource::System).expect("scan this machine's PCI bus");
    assert!(!functions.is_empty(), "libpci found no PCI function on this machine: the comparison needs one");
    let f = &functions[0];
    let out =
        std::process::Command::new("lspci").args(["-xxxx", "-s", &f.address()]).output().expect("run lspci (apt-get install pciutils)");
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    let mut bytes = Vec::new();
    for line in text.lines().skip(1) {
        let Some((_, hex)) = line.split_once(": ") else {
            continue;
        };
        bytes.extend(hex.split(' ').map(|b| u8::from_str_radix(b, 16).expect("hex byte")));
    }
    // lspci prints 4096 bytes when it can read them, else 256; registers that change by
    // themselves (status bits, counters) are rare in the header: compare the first 64.
    assert!(bytes.len() >= 64, "{text}");
    assert_eq!(&bytes[..64], &f.config[..64], "{}", f.address());
}
