//! Naming a card and opening it: the `--device` grammar ([`Selector`]), opening what a
//! selector names ([`open`]), and what can be opened ([`list_devices`]). The library owns
//! this, as probe-rs's `ProbeFactory` does, so every tool reaches a card the same way.
//!
//! ```text
//!  "sim" | "sim:PATH"        ─► Selector::Sim      ─► SimDevice (config space: the sim's dump)
//!  "0000:03:00.0"            ─► Selector::Pci      ─► the bound driver says: vfio-pci ─► VfioDevice
//!                                                                      litepcie ─► LitePcieDevice
//!  "vfio:0000:03:00.0"       ─► Selector::Vfio     ─► VfioDevice, whatever sysfs says
//!  "litepcie:/dev/litepcie0" ─► Selector::LitePcie ─► LitePcieDevice
//! ```

use std::path::{Path, PathBuf};

use serde::Serialize;
use tlpx_sim_protocol::{HelloInfo, LinkConfig};

use crate::backends::litepcie::LitePcieDevice;
use crate::backends::sim::SimDevice;
use crate::backends::vfio::VfioDevice;
use crate::pci::{self, PciFunction, PciSource};
use crate::{Device, DeviceError};

/// PCI IDs a tlpx card presents (the simulated card and the board targets).
pub const TLPX_VENDOR_ID: u16 = 0x10ee;
pub const TLPX_DEVICE_ID: u16 = 0x7c01;

/// Which card `--device` names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Selector {
    /// A simulator socket; `None` is the default one.
    Sim(Option<PathBuf>),
    /// A PCI address on this machine's bus; the backend follows the driver bound to it
    /// (vfio-pci → vfio, litepcie → LitePCIe's driver).
    Pci(String),
    /// `vfio:ADDRESS`: the vfio backend, whatever sysfs says.
    Vfio(String),
    /// `litepcie:/dev/litepcieN`: LitePCIe's driver through its device node.
    LitePcie(PathBuf),
}

const SELECTORS: &str = "use `sim`, `sim:SOCKET_PATH`, a PCI address like 0000:03:00.0 (the backend follows the bound driver), \
`vfio:0000:03:00.0` or `litepcie:/dev/litepcie0` (see `tlpx list`)";

/// Text that is not a device selector: the user's input is wrong (the message says what is
/// accepted).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct SelectorError(String);

/// Why a selector could not be opened.
#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    #[error(transparent)]
    Selector(#[from] SelectorError),
    /// The PCI function exists but no backend reaches it: the device side, as when a backend
    /// itself cannot open a card.
    #[error(
        "{address} ({ids}) is driven by the kernel's {driver} driver, which tlpx cannot use: bind it to \
             vfio-pci with `tlpx vfio bind {address}` (as root), or to LitePCIe's driver (docs/litepcie-driver.md)"
    )]
    UnusableDriver { address: String, ids: String, driver: String },
    #[error(
        "{address} ({ids}) has no driver bound: bind it to vfio-pci with `tlpx vfio bind {address}` (as root), \
             or load LitePCIe's driver (docs/litepcie-driver.md); then run the command again"
    )]
    NoDriver { address: String, ids: String },
    /// What libpci says of the opened card could not be read; `source` says why.
    #[error("{context}")]
    ConfigSpace { context: String, source: DeviceError },
    #[error(transparent)]
    Device(#[from] DeviceError),
}

impl OpenError {
    /// The device error behind this one, if any (the caller's exit status follows it).
    pub fn device_error(&self) -> Option<&DeviceError> {
        match self {
            OpenError::Device(e) | OpenError::ConfigSpace { source: e, .. } => Some(e),
            _ => None,
        }
    }
}

impl Selector {
    pub fn parse(text: &str) -> Result<Selector, SelectorError> {
        let bad = |message: String| Err(SelectorError(message));
        if text == "sim" {
            return Ok(Selector::Sim(None));
        }
        if let Some(path) = text.strip_prefix("sim:") {
            if path.is_empty() {
                return bad("device selector `sim:` needs a socket path after the colon, e.g. sim:/tmp/tlpx-1000/sim.sock".into());
            }
            return Ok(Selector::Sim(Some(PathBuf::from(path))));
        }
        if let Some(address) = text.strip_prefix("vfio:") {
            return match pci::parse_address(address) {
                Ok(_) => Ok(Selector::Vfio(address.to_string())),
                Err(_) => bad(format!("device selector {text:?}: `vfio:` needs a PCI address, e.g. vfio:0000:03:00.0")),
            };
        }
        if let Some(node) = text.strip_prefix("litepcie:") {
            if node.is_empty() {
                return bad("device selector `litepcie:` needs the driver's device node, e.g. litepcie:/dev/litepcie0".into());
            }
            return Ok(Selector::LitePcie(PathBuf::from(node)));
        }
        match pci::parse_address(text) {
            Ok(_) => Ok(Selector::Pci(text.to_string())),
            Err(_) => bad(format!("unknown device selector {text:?}: {SELECTORS}")),
        }
    }

    /// The simulator socket this selector names: its own, or the default one for `sim`;
    /// `None` for a real card.
    pub fn sim_socket(&self) -> Option<PathBuf> {
        match self {
            Selector::Sim(path) => Some(path.clone().unwrap_or_else(default_sim_socket)),
            _ => None,
        }
    }

    /// Opens the device this selector names, with its PCI function as libpci reads it.
    pub fn open(&self) -> Result<Opened, OpenError> {
        match self {
            Selector::Sim(path) => {
                let path = path.clone().unwrap_or_else(default_sim_socket);
                let (sim, pci) = sim_function(&path)?;
                let hello = sim.hello();
                let summary = SimSummary {
                    socket: path.display().to_string(),
                    link: hello.link,
                    clock_hz: hello.card_clock_hz,
                    data_width: hello.data_width,
                    config_dump: hello.config_dump_path.clone(),
                    seed: hello.seed,
                    board: hello.board.clone(),
                    hard_ip: hello.hard_ip.clone(),
                };
                Ok(Opened { device: Box::new(sim), pci, sim: Some(summary) })
            }
            Selector::Pci(address) => {
                let function = pci::find(&PciSource::System, address)?;
                let address = function.address();
                let ids = format!("{:04x}:{:04x}", function.vendor_id, function.device_id);
                match bound_driver(&address) {
                    Some(driver) if driver == "vfio-pci" => open_vfio(&address, function),
                    Some(driver) if driver == "litepcie" => {
                        let device = LitePcieDevice::open_pci(&address)?;
                        Ok(Opened { device: Box::new(device), pci: function, sim: None })
                    }
                    Some(driver) => Err(OpenError::UnusableDriver { address, ids, driver }),
                    None => Err(OpenError::NoDriver { address, ids }),
                }
            }
            Selector::Vfio(address) => {
                let function = pci::find(&PciSource::System, address)?;
                open_vfio(&function.address(), function)
            }
            Selector::LitePcie(node) => {
                let (device, pci) = litepcie_function(node)?;
                Ok(Opened { device: Box::new(device), pci, sim: None })
            }
        }
    }

    /// The PCI function this selector names, through libpci only: the simulator's config
    /// dump (one short connection for its Hello) or this machine's bus; the card itself is not
    /// touched (LitePCIe's node is opened for its PCI address only).
    pub fn locate(&self) -> Result<Located, OpenError> {
        match self {
            Selector::Sim(path) => {
                let path = path.clone().unwrap_or_else(default_sim_socket);
                let (sim, function) = sim_function(&path)?;
                Ok(Located { function, location: format!("sim:{}", path.display()), sim: Some((path, sim.hello().clone())) })
            }
            Selector::Pci(address) | Selector::Vfio(address) => {
                Ok(Located { function: pci::find(&PciSource::System, address)?, location: address.clone(), sim: None })
            }
            Selector::LitePcie(node) => {
                let (_, function) = litepcie_function(node)?;
                Ok(Located { function, location: format!("litepcie:{}", node.display()), sim: None })
            }
        }
    }
}

/// A connection to the simulator at `socket`, and its card's PCI function as libpci reads the
/// simulator's config dump.
fn sim_function(socket: &Path) -> Result<(SimDevice, PciFunction), OpenError> {
    let sim = SimDevice::connect(socket)?;
    let dump = PathBuf::from(&sim.hello().config_dump_path);
    let function = pci::find(&PciSource::DumpFile(dump.clone()), &sim.hello().pci_address).map_err(|source| OpenError::ConfigSpace {
        context: format!("reading the simulated card's config space through libpci ({})", dump.display()),
        source,
    })?;
    Ok((sim, function))
}

/// LitePCIe's driver through `node`, and the card's PCI function on this machine's bus.
fn litepcie_function(node: &Path) -> Result<(LitePcieDevice, PciFunction), OpenError> {
    let device = LitePcieDevice::open(node)?;
    let address = device.description().pci_address;
    let function = pci::find(&PciSource::System, &address).map_err(|source| OpenError::ConfigSpace {
        context: format!("reading the config space of {} ({address}) through libpci", node.display()),
        source,
    })?;
    Ok((device, function))
}

impl std::str::FromStr for Selector {
    type Err = SelectorError;
    fn from_str(text: &str) -> Result<Selector, SelectorError> {
        Selector::parse(text)
    }
}

impl std::fmt::Display for Selector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Selector::Sim(None) => write!(f, "sim"),
            Selector::Sim(Some(path)) => write!(f, "sim:{}", path.display()),
            Selector::Pci(address) => write!(f, "{address}"),
            Selector::Vfio(address) => write!(f, "vfio:{address}"),
            Selector::LitePcie(node) => write!(f, "litepcie:{}", node.display()),
        }
    }
}

/// The kernel driver bound to the PCI function `address` of this machine (sysfs).
pub fn bound_driver(address: &str) -> Option<String> {
    let link = std::fs::read_link(format!("/sys/bus/pci/devices/{address}/driver")).ok()?;
    link.file_name().map(|n| n.to_string_lossy().into_owned())
}

/// The simulator's side of an open simulated card.
#[derive(Debug, Clone, Serialize)]
pub struct SimSummary {
    pub socket: String,
    pub link: LinkConfig,
    pub clock_hz: u64,
    pub data_width: u32,
    pub config_dump: String,
    pub seed: u64,
    /// The board whose hard IP the sim's config space presents, and that IP (tlpx-sim --board).
    pub board: String,
    pub hard_ip: String,
}

/// An open card: the device, its PCI function as libpci reads it, and sim details.
pub struct Opened {
    pub device: Box<dyn Device>,
    pub pci: PciFunction,
    pub sim: Option<SimSummary>,
}

/// What [`Selector::locate`] found.
pub struct Located {
    pub function: PciFunction,
    /// The selector that reached it, spelled out (`sim:/path`, a PCI address, `litepcie:/dev/...`).
    pub location: String,
    /// The simulator's socket and Hello when the device is the simulated card.
    pub sim: Option<(PathBuf, HelloInfo)>,
}

pub fn default_sim_socket() -> PathBuf {
    SimDevice::default_socket_path()
}

/// Opens the device `text` names.
pub fn open(text: &str) -> Result<Opened, OpenError> {
    Selector::parse(text)?.open()
}

fn open_vfio(address: &str, function: PciFunction) -> Result<Opened, OpenError> {
    let device = VfioDevice::open(address)?;
    Ok(Opened { device: Box::new(device), pci: function, sim: None })
}

// Listing ------------------------------------------------------------------------------------------

/// Where a listed function was found.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ListSource {
    /// This machine's bus, through libpci's default access method (sysfs on Linux).
    System,
    /// The simulated card, through libpci's dump access method on the simulator's config dump.
    Sim,
}

impl ListSource {
    pub fn name(self) -> &'static str {
        match self {
            ListSource::System => "system",
            ListSource::Sim => "sim",
        }
    }
}

/// One PCI function that can be named with `--device`.
#[derive(Debug, Clone)]
pub struct Listed {
    pub source: ListSource,
    pub function: PciFunction,
    /// The kernel driver bound to it (sysfs; functions of this machine's bus only).
    pub driver: Option<String>,
    /// The selector that opens it.
    pub selector: String,
}

impl Listed {
    /// Whether the function presents a tlpx card's PCI IDs.
    pub fn is_tlpx_card(&self) -> bool {
        is_tlpx_card(&self.function)
    }
}

/// Whether `function` presents a tlpx card's PCI IDs.
pub fn is_tlpx_card(function: &PciFunction) -> bool {
    function.vendor_id == TLPX_VENDOR_ID && function.device_id == TLPX_DEVICE_ID
}

/// Everything [`list_devices`] found, and why a place could not be looked at.
#[derive(Debug, Clone, Default)]
pub struct DeviceList {
    pub functions: Vec<Listed>,
    /// One line per place that could not be read (this machine's bus, the simulator).
    pub notes: Vec<String>,
}

/// Every PCI function libpci sees on this machine's bus, then the simulated card at the
/// socket `selector` names (its own for `sim:PATH`, otherwise the default one).
pub fn list_devices(selector: &Selector) -> DeviceList {
    let mut list = DeviceList::default();
    match pci::scan(&PciSource::System) {
        Ok(functions) => {
            for function in functions {
                let address = function.address();
                let driver = bound_driver(&address);
                list.functions.push(Listed { source: ListSource::System, function, driver, selector: address });
            }
        }
        Err(e) => list.notes.push(format!("this machine's PCI bus could not be read: {e}")),
    }
    let socket = selector.sim_socket().unwrap_or_else(default_sim_socket);
    list_sim(&socket, &mut list);
    list
}

fn list_sim(socket: &Path, list: &mut DeviceList) {
    let sim = match SimDevice::connect(socket) {
        Ok(sim) => sim,
        Err(e) => return list.notes.push(format!("no simulated card: {e}")),
    };
    let dump = sim.hello().config_dump_path.clone();
    match pci::scan(&PciSource::DumpFile(dump.clone().into())) {
        Ok(functions) => {
            for function in functions {
                let selector = format!("sim:{}", socket.display());
                list.functions.push(Listed { source: ListSource::Sim, function, driver: None, selector });
            }
        }
        Err(e) => list.notes.push(format!("the simulator's config dump {dump} could not be read: {e}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_form_parses_and_prints_back() {
        for (text, selector) in [
            ("sim", Selector::Sim(None)),
            ("sim:/tmp/x.sock", Selector::Sim(Some("/tmp/x.sock".into()))),
            ("0000:03:00.0", Selector::Pci("0000:03:00.0".into())),
            ("03:00.0", Selector::Pci("03:00.0".into())),
            ("vfio:0000:03:00.0", Selector::Vfio("0000:03:00.0".into())),
            ("litepcie:/dev/litepcie0", Selector::LitePcie("/dev/litepcie0".into())),
        ] {
            assert_eq!(Selector::parse(text), Ok(selector.clone()), "{text}");
            assert_eq!(selector.to_string(), text);
            assert_eq!(text.parse::<Selector>(), Ok(selector));
        }
    }

    #[test]
    fn bad_selectors_say_what_is_accepted() {
        for (text, message) in [
            ("sim:", "device selector `sim:` needs a socket path after the colon, e.g. sim:/tmp/tlpx-1000/sim.sock"),
            ("vfio:nope", "device selector \"vfio:nope\": `vfio:` needs a PCI address, e.g. vfio:0000:03:00.0"),
            ("litepcie:", "device selector `litepcie:` needs the driver's device node, e.g. litepcie:/dev/litepcie0"),
            ("bogus", "unknown device selector \"bogus\": use `sim`, `sim:SOCKET_PATH`, a PCI address like 0000:03:00.0 (the backend follows the bound driver), `vfio:0000:03:00.0` or `litepcie:/dev/litepcie0` (see `tlpx list`)"),
        ] {
            assert_eq!(Selector::parse(text).expect_err(text).to_string(), message);
        }
    }

    #[test]
    fn only_sim_selectors_name_a_socket() {
        assert_eq!(Selector::Sim(Some("/tmp/x.sock".into())).sim_socket(), Some(PathBuf::from("/tmp/x.sock")));
        assert_eq!(Selector::Sim(None).sim_socket(), Some(default_sim_socket()));
        assert_eq!(Selector::Pci("0000:03:00.0".into()).sim_socket(), None);
    }

    #[test]
    fn opening_a_simulator_that_is_not_running_is_the_device_error() {
        let dir = tempfile::tempdir().expect("tempdir");
        let socket = dir.path().join("absent.sock");
        let e = open(&format!("sim:{}", socket.display())).err().expect("no simulator");
        assert!(matches!(e.device_error(), Some(DeviceError::SimNotRunning { .. })), "{e:?}");
        assert!(e.to_string().starts_with(&format!("no simulated card at {}", socket.display())), "{e}");
        assert!(matches!(open("bogus"), Err(OpenError::Selector(_))));
    }

    #[test]
    fn a_listing_without_a_simulator_says_so_and_names_each_function_by_its_selector() {
        let dir = tempfile::tempdir().expect("tempdir");
        let socket = dir.path().join("absent.sock");
        let list = list_devices(&Selector::Sim(Some(socket.clone())));
        assert!(
            list.notes.iter().any(|n| n.starts_with(&format!("no simulated card: no simulated card at {}", socket.display()))),
            "{:?}",
            list.notes
        );
        for l in &list.functions {
            assert_eq!((l.source, l.selector.clone()), (ListSource::System, l.function.address()));
        }
    }
}
