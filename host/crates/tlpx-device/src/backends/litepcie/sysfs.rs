//! Which /dev/litepcieN is which PCI function, and what sysfs says of it (BAR sizes, config
//! space path): the driver creates its nodes without a parent, so the link is found here.

use std::path::{Path, PathBuf};

use super::DOC;
use crate::DeviceError;

/// Where the driver's nodes and the PCI functions are: `/dev` and `/sys` on a real machine,
/// a fake tree in tests.
#[derive(Debug, Clone)]
pub struct SysfsLayout {
    pub dev: PathBuf,
    pub sys: PathBuf,
}

impl Default for SysfsLayout {
    fn default() -> Self {
        SysfsLayout { dev: PathBuf::from("/dev"), sys: PathBuf::from("/sys") }
    }
}

/// One /dev/litepcieN node: its path and the N (the driver's minor index).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Node {
    pub path: PathBuf,
    pub index: u32,
}

pub(super) fn not_loaded(layout: &SysfsLayout) -> String {
    if layout.sys.join("bus/pci/drivers/litepcie").is_dir() {
        // Loaded, but no function probed: the stock driver's ID table lacks the tlpx card.
        format!(
            "no {}/litepcie*: the LitePCIe driver is loaded but drives no card; bind the card with \
             `echo 10ee 7c01 > {}/bus/pci/drivers/litepcie/new_id` (as root); see {DOC}",
            layout.dev.display(),
            layout.sys.display()
        )
    } else {
        format!(
            "no {}/litepcie*: the LitePCIe driver is not loaded; see {DOC} (`make litepcie-driver`, insmod, bind the card)",
            layout.dev.display()
        )
    }
}

impl SysfsLayout {
    /// The driver's nodes, by index: its class devices (/sys/class/litepcie/litepcieN) if the
    /// class exists, else the /dev/litepcieN files.
    pub fn nodes(&self) -> Result<Vec<Node>, DeviceError> {
        let mut out = Vec::new();
        let class = self.sys.join("class/litepcie");
        let dir = if class.is_dir() { class } else { self.dev.clone() };
        let entries = match std::fs::read_dir(&dir) {
            Ok(e) => e,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(out),
            Err(e) => return Err(DeviceError::Io { context: format!("cannot list {}", dir.display()), source: e }),
        };
        for entry in entries.flatten() {
            let name = entry.file_name();
            let name = name.to_string_lossy();
            if let Some(index) = name.strip_prefix("litepcie").and_then(|n| n.parse::<u32>().ok()) {
                out.push(Node { path: self.dev.join(&*name), index });
            }
        }
        out.sort_by_key(|n| n.index);
        Ok(out)
    }

    /// PCI functions bound to the driver (/sys/bus/pci/drivers/litepcie/<address>), sorted.
    pub fn bound_functions(&self) -> Result<Vec<String>, DeviceError> {
        let dir = self.sys.join("bus/pci/drivers/litepcie");
        let entries = match std::fs::read_dir(&dir) {
            Ok(e) => e,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(DeviceError::Io { context: format!("cannot list {}", dir.display()), source: e }),
        };
        let mut out: Vec<String> =
            entries.flatten().map(|e| e.file_name().to_string_lossy().into_owned()).filter(|n| is_pci_address(n)).collect();
        out.sort();
        Ok(out)
    }

    /// The node of the card at PCI address `address` (channel 0's, the lowest index).
    ///
    /// The driver names its nodes in probe order and does not link them to their PCI function,
    /// so this is certain only when `address` is the one function bound to the driver.
    pub fn node_for(&self, address: &str) -> Result<Node, DeviceError> {
        let address = canonical_address(address)?;
        let function = self.sys.join("bus/pci/devices").join(&address);
        if !function.exists() {
            return Err(DeviceError::NoSuchDevice(format!("no PCI function {address} ({} does not exist)", function.display())));
        }
        match std::fs::read_link(function.join("driver")) {
            Ok(driver) if driver.file_name().is_some_and(|n| n == "litepcie") => {}
            Ok(driver) => {
                return Err(DeviceError::NoSuchDevice(format!(
                    "{address} is bound to the {} driver, not litepcie; see {DOC} (unbind it, then \
                     echo 10ee 7c01 > /sys/bus/pci/drivers/litepcie/new_id)",
                    driver.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default()
                )))
            }
            Err(_) => {
                return Err(DeviceError::NoSuchDevice(format!(
                    "{address} is bound to no driver: load litepcie and give it the card's ID \
                     (echo 10ee 7c01 > /sys/bus/pci/drivers/litepcie/new_id); see {DOC}"
                )))
            }
        }
        let bound = self.bound_functions()?;
        let nodes = self.nodes()?;
        let Some(first) = nodes.first().cloned() else {
            return Err(DeviceError::NoSuchDevice(format!(
                "{address} is bound to litepcie but there is no {}/litepcie*: the driver failed its probe \
                 (see dmesg) or udev did not create the nodes",
                self.dev.display()
            )));
        };
        if bound.len() != 1 {
            return Err(DeviceError::InvalidArgument(format!(
                "{} PCI functions are bound to litepcie ({}) and the driver does not link its nodes ({}) to \
                 them: open the node and the address together (LitePcieDevice::open_with)",
                bound.len(),
                bound.join(", "),
                nodes.iter().map(|n| n.path.display().to_string()).collect::<Vec<_>>().join(", ")
            )));
        }
        Ok(first)
    }

    /// The PCI function behind `node`, when it is certain: the one function bound to litepcie.
    pub fn function_for(&self, node: &Path) -> Result<String, DeviceError> {
        let bound = self.bound_functions()?;
        match bound.as_slice() {
            [one] => Ok(one.clone()),
            [] => Err(DeviceError::NoSuchDevice(format!(
                "{} exists but no PCI function is bound to litepcie ({} is empty)",
                node.display(),
                self.sys.join("bus/pci/drivers/litepcie").display()
            ))),
            many => Err(DeviceError::InvalidArgument(format!(
                "{} PCI functions are bound to litepcie ({}) and the driver does not say which one {} is: \
                 open the node and the address together (LitePcieDevice::open_with)",
                many.len(),
                many.join(", "),
                node.display()
            ))),
        }
    }

    /// Sizes of BARs 0..5 from /sys/bus/pci/devices/ADDR/resource (None: not implemented).
    pub fn bar_sizes(&self, address: &str) -> Result<Vec<Option<u64>>, DeviceError> {
        let path = self.sys.join("bus/pci/devices").join(address).join("resource");
        let text = std::fs::read_to_string(&path)
            .map_err(|e| DeviceError::Io { context: format!("cannot read {}", path.display()), source: e })?;
        parse_resource(&text).map_err(|m| DeviceError::Backend(format!("{}: {m}", path.display())))
    }

    pub(super) fn config_path(&self, address: &str) -> PathBuf {
        self.sys.join("bus/pci/devices").join(address).join("config")
    }
}

/// Parses sysfs's `resource` file: one "start end flags" line (hex) per resource; the first six
/// are the BARs.
pub fn parse_resource(text: &str) -> Result<Vec<Option<u64>>, String> {
    let mut bars = Vec::new();
    for (i, line) in text.lines().take(6).enumerate() {
        let parts: Vec<u64> = line
            .split_whitespace()
            .map(|w| u64::from_str_radix(w.trim_start_matches("0x"), 16))
            .collect::<Result<_, _>>()
            .map_err(|e| format!("line {} ({line:?}) is not three hex numbers: {e}", i + 1))?;
        let [start, end, _flags] = parts[..] else {
            return Err(format!("line {} ({line:?}) has {} fields, not 3 (start end flags)", i + 1, parts.len()));
        };
        bars.push(if end > start { Some(end - start + 1) } else { None });
    }
    if bars.len() < 6 {
        return Err(format!("{} lines, a PCI function has 6 BAR lines", bars.len()));
    }
    Ok(bars)
}

fn is_pci_address(s: &str) -> bool {
    let b = s.as_bytes();
    b.len() == 12
        && b[4] == b':'
        && b[7] == b':'
        && b[10] == b'.'
        && b.iter().enumerate().all(|(i, c)| matches!(i, 4 | 7 | 10) || c.is_ascii_hexdigit())
}

/// "03:00.0" or "0000:03:00.0" -> "0000:03:00.0" (lower case).
pub fn canonical_address(address: &str) -> Result<String, DeviceError> {
    let full = if address.len() == 7 { format!("0000:{address}") } else { address.to_string() };
    let full = full.to_ascii_lowercase();
    if !is_pci_address(&full) {
        return Err(DeviceError::InvalidArgument(format!(
            "{address:?} is not a PCI address: write DDDD:BB:DD.F or BB:DD.F in hex, e.g. 0000:03:00.0"
        )));
    }
    Ok(full)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_resource_file() {
        let text = "0x00000000fe000000 0x00000000fe0fffff 0x0000000000040200\n\
                    0x0000000000000000 0x0000000000000000 0x0000000000000000\n"
            .to_string()
            + &"0x0000000000000000 0x0000000000000000 0x0000000000000000\n".repeat(5);
        let bars = parse_resource(&text).expect("parses");
        assert_eq!(bars, vec![Some(0x100000), None, None, None, None, None]);
        assert!(parse_resource("0x1 0x2\n").expect_err("an error").contains("2 fields"));
        assert!(parse_resource("0x0 0x0 0x0\n").expect_err("an error").contains("6 BAR lines"));
    }

    #[test]
    fn canonical_addresses() {
        assert_eq!(canonical_address("03:00.0").expect("parses"), "0000:03:00.0");
        assert_eq!(canonical_address("0000:0A:00.1").expect("parses"), "0000:0a:00.1");
        let e = canonical_address("3:0.0").expect_err("an error").to_string();
        assert!(e.contains("\"3:0.0\" is not a PCI address"), "{e}");
    }
}
