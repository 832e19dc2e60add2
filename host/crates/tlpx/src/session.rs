//! An open card for a measurement: the checked `Card`, the link libpci reports for it, and
//! the environment every result records.

use anyhow::Context;
use tlpx_device::backends::sim::SimDevice;
use tlpx_device::card::Card;
use tlpx_device::lease::{self, Block, OwnerProcess};
use tlpx_device::pci::{decode, PciFunction};
use tlpx_device::selector::{self, Located, Selector};

use crate::results::{self, CardEnvironment, Environment, LinkReport, SimEnvironment, TimeWatch};

/// Offset of Link Control in the PCI Express capability (PCIe 5.0, 7.5.3.7); bit 3 is the
/// Read Completion Boundary (0: 64 bytes, 1: 128 bytes).
const PCIE_LINK_CONTROL: usize = 0x10;
const PCIE_CAP_ID: u8 = 0x10;

/// The link of `function` as its config space (read through libpci) describes it; `None`
/// when it has no PCI Express capability.
pub fn link_report(function: &PciFunction) -> Option<LinkReport> {
    let p = function.pcie()?;
    let rcb = decode::find_capability(&function.config, PCIE_CAP_ID)
        .and_then(|base| function.config.get(usize::from(base) + PCIE_LINK_CONTROL).copied())
        .map_or(64, |lnkctl| if lnkctl & (1 << 3) != 0 { 128 } else { 64 });
    Some(LinkReport {
        source: "libpci".to_string(),
        generation: p.generation,
        lanes: p.link_width,
        speed_gt_s: p.link_speed_gt_s,
        mps: p.max_payload_size,
        mrrs: p.max_read_request_size,
        rcb,
        max_payload_supported: p.max_payload_supported,
    })
}

/// The link of the device `--device` names, through libpci only (no card access): the
/// simulator's config dump, or this machine's sysfs for a PCI address.
pub fn device_link(device: &str) -> anyhow::Result<DeviceLink> {
    let Located { function, location, sim } = Selector::parse(device)?.locate()?;
    let sim = sim.map(|(socket, hello)| SimEnvironment::from_hello(socket.display().to_string(), &hello));
    match link_report(&function) {
        Some(link) => Ok(DeviceLink { link, location, pci_address: function.address(), sim }),
        None => Err(crate::exit::card_failure(format!(
            "{location} ({}) has no PCI Express capability, so libpci reports no link",
            function.address()
        ))),
    }
}

/// What [`device_link`] found.
pub struct DeviceLink {
    pub link: LinkReport,
    /// The selector that reached it ("sim:/path" or a PCI address).
    pub location: String,
    pub pci_address: String,
    /// The simulator's description when the device is the simulated card.
    pub sim: Option<SimEnvironment>,
}

/// An open card ready to measure.
pub struct Session {
    pub card: Card,
    pub link: Option<LinkReport>,
    pub environment: Environment,
    /// Card clock in Hz (cycles → time).
    pub clock_hz: u32,
    pub notes: Vec<String>,
    /// The host-side state the DMA measurements set up (cache state, placement).
    pub host_memory: crate::measure::host_memory::HostState,
}

impl Session {
    /// Opens the card `device` names, records where it is, and looks at the card's other
    /// owners: a block left running by a process that is gone is stopped (and said so); a
    /// block another live process runs is recorded in `environment.perturbed_by` and said on
    /// stderr, since it shares the link with whatever this command measures.
    pub fn open(device: &str) -> anyhow::Result<Session> {
        Session::open_with(device, true)
    }

    /// As [`Session::open`] for a command that watches rather than measures (`top`, `serve`,
    /// `spy`): dead owners' blocks are stopped, live ones are not reported as perturbation.
    pub fn open_observer(device: &str) -> anyhow::Result<Session> {
        Session::open_with(device, false)
    }

    fn open_with(device: &str, measuring: bool) -> anyhow::Result<Session> {
        let mut session = Session::open_as_is(device)?;
        session.look_at_other_owners(measuring)?;
        for note in session.card.take_notes() {
            eprintln!("tlpx: note: {note}");
            session.notes.push(note);
        }
        Ok(session)
    }

    fn look_at_other_owners(&mut self, measuring: bool) -> anyhow::Result<()> {
        for block in Block::ALL {
            if !self.card.has_feature(block.feature()) {
                continue;
            }
            let Some(owner) = lease::owner(&mut self.card, block)? else { continue };
            match owner.process {
                OwnerProcess::Gone => {
                    lease::force_stop(&mut self.card, block)?;
                    let note =
                        format!("{} was left running by {}: stopped and freed (its buffers are gone)", block.title(), owner.describe());
                    eprintln!("tlpx: note: {note}");
                    self.notes.push(note);
                }
                _ if !measuring => {}
                _ => {
                    let what = match block {
                        Block::Spy => "a spy capture (its ring writes share the link)",
                        Block::Generator => "the traffic generator (its DMA shares the link)",
                        Block::IrqTimer => "the interrupt timer (its MSIs and sample writes share the link)",
                        Block::RtLoop => "the real-time loop (its DMA shares the link)",
                        Block::Rule30Batch => "the rule-30 accelerator's user (a batch's DMA shares the link)",
                        Block::Cpu => "a script on the card's CPU (it drives the card's blocks)",
                        Block::Slot => "a session with the accelerator in the slot (its DMA shares the link)",
                    };
                    let text = format!("{what}, run by {}", owner.describe());
                    eprintln!("tlpx: note: this measurement is perturbed by {text}");
                    self.notes.push(format!("perturbed by {text}"));
                    self.environment.perturbed_by.push(text);
                }
            }
        }
        Ok(())
    }

    /// Opens the card without looking at other owners (`tlpx owners`, `tlpx stop`).
    pub fn open_as_is(device: &str) -> anyhow::Result<Session> {
        let opened = selector::open(device)?;
        let description = opened.device.description();
        let card = Card::open(opened.device).context("opening the card")?;
        let id = card.identity().clone();
        let mut environment = results::machine_environment();
        environment.backend = Some(description.backend.clone());
        environment.device = Some(description.location.clone());
        environment.pci_address = Some(opened.pci.address());
        environment.card = Some(CardEnvironment {
            data_width: id.data_width,
            clock_hz: id.clock_hz,
            map_hash: id.map_hash,
            version: format!("{}.{}", id.version_major, id.version_minor),
            features: id.feature_names(),
        });
        environment.simulated = opened.sim.is_some();
        // What the host says about its memory and the card's place in it (the simulated card
        // is no PCI function of this host).
        let host_address = (!environment.simulated).then(|| description.pci_address.clone());
        environment.host_memory = Some(tlpx_device::host_memory::host_report(host_address.as_deref()));
        environment.clock = Some(TimeWatch::hardware());
        // The simulator's latency settings are in its Hello, and its time mode in its
        // counters: ask on a short-lived connection (the open card keeps its own).
        environment.sim = opened.sim.as_ref().map(|s| match SimDevice::connect(&s.socket) {
            Ok(mut sim) => {
                let start = tlpx_device::Device::time_mark(&mut sim)
                    .unwrap_or(tlpx_device::TimeMark::Simulator { live_cycles: 0, live_clients: 0 });
                let hello = sim.hello();
                // Host time charged as card time (or traffic running with nobody waiting):
                // not the deterministic virtual time, whatever live time does.
                let real_host_time = hello.free_run || hello.host_time != tlpx_sim_protocol::HostTime::Virtual;
                environment.clock = Some(TimeWatch { start, sim_socket: Some(s.socket.clone()), holds_live: false, real_host_time });
                SimEnvironment::from_hello(s.socket.clone(), hello)
            }
            Err(_) => SimEnvironment {
                socket: s.socket.clone(),
                link_model: s.link,
                seed: s.seed,
                data_width: s.data_width,
                clock_hz: s.clock_hz,
                dma_latency_ns: 0,
                dma_jitter_ns: 0,
                free_run: false,
                host_time: "unknown".into(),
                host_time_cap_ns: 0,
                sim_version: String::new(),
                board: s.board.clone(),
                hard_ip: s.hard_ip.clone(),
            },
        });
        let link = link_report(&opened.pci);
        let mut notes = Vec::new();
        match &link {
            None => notes.push("libpci finds no PCI Express capability on the card: no link, no model limit".to_string()),
            Some(l) if l.model(false).is_none() => {
                notes.push(format!("the model has no figures for the link libpci reports ({l}): efficiency is not computed"))
            }
            Some(_) => {}
        }
        if let (Some(l), Some(s)) = (&link, &opened.sim) {
            if (l.generation, l.lanes, l.mps, l.mrrs) != (s.link.generation, s.link.lanes, s.link.mps, s.link.mrrs) {
                notes.push(format!(
                    "libpci reports {l} but the simulator models {}: figures follow the simulator, the model follows libpci",
                    s.link
                ));
            }
        }
        Ok(Session { clock_hz: id.clock_hz.max(1), card, link, environment, notes, host_memory: Default::default() })
    }

    /// The link's MPS and MRRS, or 128/128 (the smallest legal values) when unknown.
    pub fn mps_mrrs(&self) -> (u32, u32) {
        match &self.link {
            Some(l) if l.mps >= 128 && l.mrrs >= 128 => (l.mps, l.mrrs),
            _ => (128, 128),
        }
    }

    /// Asks for live time for as long as this session's card is open (on hardware time is
    /// always live: nothing changes), and records it: headers then say live time, and the
    /// result's `time_mode` is `live`.
    pub fn hold_live_time(&mut self) -> anyhow::Result<()> {
        self.card.device().set_live(true).context("asking the simulator for live time")?;
        if let Some(c) = self.environment.clock.as_mut() {
            c.holds_live = c.sim_socket.is_some();
        }
        Ok(())
    }

    /// Text that says whether card-time figures are simulated, and in which time, for headers.
    pub fn describe(&self) -> String {
        let env = &self.environment;
        let link = self.link.as_ref().map_or("link unknown".to_string(), |l| format!("link {l} (libpci)"));
        let time = env.time_text().map_or(String::new(), |t| format!("; {t}"));
        match &env.sim {
            Some(s) => format!(
                "simulated card ({}-bit at {:.0} MHz, tlpx-sim link model {}, seed {}), {link}{time}",
                s.data_width,
                s.clock_hz as f64 / 1e6,
                s.link_model,
                s.seed
            ),
            None => format!("{} card at {}, {link}", env.backend.as_deref().unwrap_or("?"), env.device.as_deref().unwrap_or("?")),
        }
    }
}
