//! `tlpx list`: every PCI function libpci sees, and the simulated card.

use std::process::ExitCode;

use clap::Args;
use serde::Serialize;
use tlpx_device::backends::sim::SimDevice;
use tlpx_device::pci::{self, PciFunction, PciSource};

use crate::output::print_json;
use crate::selector::{self, Selector};

/// PCI IDs a tlpx card presents (the simulated card and the board targets).
pub const TLPX_VENDOR_ID: u16 = 0x10ee;
pub const TLPX_DEVICE_ID: u16 = 0x7c01;

#[derive(Debug, Args)]
pub struct Cmd {
    /// Only list tlpx cards.
    #[arg(long)]
    pub cards_only: bool,
}

#[derive(Debug, Serialize)]
struct Entry {
    source: String,
    address: String,
    vendor_id: String,
    device_id: String,
    class: String,
    description: String,
    tlpx_card: bool,
    selector: Option<String>,
}

fn entry(f: &PciFunction, source: &str, selector: Option<String>) -> Entry {
    let description = match (&f.vendor_name, &f.device_name) {
        (Some(v), Some(d)) => format!("{v} {d}"),
        (Some(v), None) => format!("{v} device {:04x}", f.device_id),
        _ => format!("device {:04x}:{:04x}", f.vendor_id, f.device_id),
    };
    Entry {
        source: source.to_string(),
        address: f.address(),
        vendor_id: format!("{:04x}", f.vendor_id),
        device_id: format!("{:04x}", f.device_id),
        class: f.class_name.clone().unwrap_or_else(|| format!("class {:06x}", f.class)),
        description,
        tlpx_card: f.vendor_id == TLPX_VENDOR_ID && f.device_id == TLPX_DEVICE_ID,
        selector,
    }
}

pub fn run(cmd: &Cmd, device: &str, json: bool) -> anyhow::Result<ExitCode> {
    let mut entries = Vec::new();
    let mut notes = Vec::new();

    // This machine's bus, through libpci's default access method (sysfs on Linux).
    match pci::scan(&PciSource::System) {
        Ok(functions) => {
            for f in &functions {
                let sel = Some(f.address());
                entries.push(entry(f, "system", sel));
            }
        }
        Err(e) => notes.push(format!("this machine's PCI bus could not be read: {e}")),
    }

    // The simulated card, through libpci's dump access method on the sim's config dump.
    let socket = match Selector::parse(device)? {
        Selector::Sim(Some(path)) => path,
        _ => selector::default_sim_socket(),
    };
    match SimDevice::connect(&socket) {
        Ok(sim) => {
            let dump = sim.hello().config_dump_path.clone();
            match pci::scan(&PciSource::DumpFile(dump.clone().into())) {
                Ok(functions) => {
                    for f in &functions {
                        entries.push(entry(f, "sim", Some(format!("sim:{}", socket.display()))));
                    }
                }
                Err(e) => notes.push(format!("the simulator's config dump {dump} could not be read: {e}")),
            }
        }
        Err(e) => notes.push(format!("no simulated card: {e}")),
    }

    if cmd.cards_only {
        entries.retain(|e| e.tlpx_card);
    }
    if json {
        print_json(&serde_json::json!({ "functions": entries, "notes": notes }))?;
    } else {
        println!("{:<8} {:<14} {:<9} {:<40} DESCRIPTION", "SOURCE", "ADDRESS", "ID", "CLASS");
        for e in &entries {
            let mark = if e.tlpx_card { format!("  <- tlpx card (--device {})", e.selector.as_deref().unwrap_or("?")) } else { String::new() };
            println!(
                "{:<8} {:<14} {:<9} {:<40} {}{}",
                e.source,
                e.address,
                format!("{}:{}", e.vendor_id, e.device_id),
                truncate(&e.class, 40),
                e.description,
                mark
            );
        }
        for n in &notes {
            println!("note: {n}");
        }
        let cards = entries.iter().filter(|e| e.tlpx_card).count();
        println!("{} PCI function(s), {} tlpx card(s)", entries.len(), cards);
    }
    Ok(ExitCode::SUCCESS)
}

fn truncate(s: &str, n: usize) -> String {
    if s.chars().count() <= n {
        s.to_string()
    } else {
        let t: String = s.chars().take(n - 1).collect();
        format!("{t}…")
    }
}
