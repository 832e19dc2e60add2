//! Turning `--device` into an open `Device`, plus what libpci says about it.

use std::path::PathBuf;

use anyhow::{bail, Context};
use serde::Serialize;
use tlpx_device::backends::sim::SimDevice;
use tlpx_device::pci::{self, PciFunction, PciSource};
use tlpx_device::Device;

/// Which card `--device` names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Selector {
    /// A simulator socket; `None` is the default one.
    Sim(Option<PathBuf>),
    /// A PCI address on this machine's bus.
    Pci(String),
}

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
        match pci::parse_address(text) {
            Ok(_) => Ok(Selector::Pci(text.to_string())),
            Err(_) => bail!(
                "unknown device selector {text:?}: use `sim`, `sim:SOCKET_PATH` or a PCI address like 0000:03:00.0 (see `tlpx list`)"
            ),
        }
    }
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
            bail!(
                "{} ({:04x}:{:04x}) exists, but this tlpx has no backend for real cards yet: the vfio and LitePCIe-driver backends arrive with the real-hardware path; use --device sim",
                function.address(),
                function.vendor_id,
                function.device_id
            )
        }
    }
}
