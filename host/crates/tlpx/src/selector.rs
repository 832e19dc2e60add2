//! Turning `--device` into an open `Device`, plus what libpci says about it.

use std::path::PathBuf;

use anyhow::{bail, Context};
use serde::Serialize;
use tlpx_device::backends::litepcie::LitePcieDevice;
use tlpx_device::backends::sim::SimDevice;
use tlpx_device::backends::vfio::VfioDevice;
use tlpx_device::pci::{self, PciFunction, PciSource};
use tlpx_device::Device;

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

impl Selector {
    pub fn parse(text: &str) -> anyhow::Result<Selector> {
        if text == "sim" {
            return Ok(Selector::Sim(None));
        }
        if let Some(path) = text.strip_prefix("sim:") {
            if path.is_empty() {
                bail!("device selector `sim:` needs a socket path after the colon, e.g. sim:/tmp/tlpx-1000/sim.sock");
            }
            return Ok(Selector::Sim(Some(PathBuf::from(path))));
        }
        if let Some(address) = text.strip_prefix("vfio:") {
            return match pci::parse_address(address) {
                Ok(_) => Ok(Selector::Vfio(address.to_string())),
                Err(_) => bail!("device selector {text:?}: `vfio:` needs a PCI address, e.g. vfio:0000:03:00.0"),
            };
        }
        if let Some(node) = text.strip_prefix("litepcie:") {
            if node.is_empty() {
                bail!("device selector `litepcie:` needs the driver's device node, e.g. litepcie:/dev/litepcie0");
            }
            return Ok(Selector::LitePcie(PathBuf::from(node)));
        }
        match pci::parse_address(text) {
            Ok(_) => Ok(Selector::Pci(text.to_string())),
            Err(_) => bail!("unknown device selector {text:?}: {SELECTORS}"),
        }
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
    pub link: tlpx_model::link::LinkConfig,
    pub clock_hz: u64,
    pub data_width: u32,
    pub config_dump: String,
    pub seed: u64,
}

/// An open card: the device, its PCI function as libpci reads it, and sim details.
pub struct Opened {
    pub device: Box<dyn Device>,
    pub pci: PciFunction,
    pub sim: Option<SimSummary>,
}

pub fn default_sim_socket() -> PathBuf {
    SimDevice::default_socket_path()
}

/// Opens the device `text` names.
pub fn open(text: &str) -> anyhow::Result<Opened> {
    match Selector::parse(text)? {
        Selector::Sim(path) => {
            let path = path.unwrap_or_else(default_sim_socket);
            let sim = SimDevice::connect(&path)?;
            let hello = sim.hello().clone();
            let dump = PathBuf::from(&hello.config_dump_path);
            let address = sim.description().pci_address;
            let pci = pci::find(&PciSource::DumpFile(dump.clone()), &address)
                .with_context(|| format!("reading the simulated card's config space through libpci ({})", dump.display()))?;
            let summary = SimSummary {
                socket: path.display().to_string(),
                link: hello.link,
                clock_hz: hello.card_clock_hz,
                data_width: hello.data_width,
                config_dump: dump.display().to_string(),
                seed: hello.seed,
            };
            Ok(Opened { device: Box::new(sim), pci, sim: Some(summary) })
        }
        Selector::Pci(address) => {
            let function = pci::find(&PciSource::System, &address)?;
            let address = function.address();
            let ids = format!("{:04x}:{:04x}", function.vendor_id, function.device_id);
            match bound_driver(&address).as_deref() {
                Some("vfio-pci") => open_vfio(&address, function),
                Some("litepcie") => {
                    let device = LitePcieDevice::open_pci(&address)?;
                    Ok(Opened { device: Box::new(device), pci: function, sim: None })
                }
                // No backend reaches the device: the device side (exit status 3), as when the
                // vfio or LitePCIe backend itself cannot open it.
                Some(other) => Err(crate::exit::card_failure(format!(
                    "{address} ({ids}) is driven by the kernel's {other} driver, which tlpx cannot use: bind it to \
                     vfio-pci with `tlpx vfio bind {address}` (as root), or to LitePCIe's driver (docs/litepcie-driver.md)"
                ))),
                None => Err(crate::exit::card_failure(format!(
                    "{address} ({ids}) has no driver bound: bind it to vfio-pci with `tlpx vfio bind {address}` (as root), \
                     or load LitePCIe's driver (docs/litepcie-driver.md); then run the command again"
                ))),
            }
        }
        Selector::Vfio(address) => {
            let function = pci::find(&PciSource::System, &address)?;
            open_vfio(&function.address(), function)
        }
        Selector::LitePcie(node) => {
            let device = LitePcieDevice::open(&node)?;
            let address = device.description().pci_address;
            let pci = pci::find(&PciSource::System, &address)
                .with_context(|| format!("reading the config space of {} ({address}) through libpci", node.display()))?;
            Ok(Opened { device: Box::new(device), pci, sim: None })
        }
    }
}

fn open_vfio(address: &str, function: PciFunction) -> anyhow::Result<Opened> {
    let device = VfioDevice::open(address)?;
    Ok(Opened { device: Box::new(device), pci: function, sim: None })
}
