//! `tlpx list`: every PCI function libpci sees, and the simulated card.

use std::process::ExitCode;

use clap::Args;
use serde::Serialize;
use tlpx_device::pci::PciFunction;
use tlpx_device::selector::{self, Listed, Selector};

use crate::output::print_json;

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
    /// Kernel driver bound to the function (sysfs), for functions of this machine's bus.
    driver: Option<String>,
    /// The PCI Express link as config space says, or why it is not known.
    link: Link,
    tlpx_card: bool,
    selector: Option<String>,
}

/// A function's PCI Express link: capability (what both ends could do is the smaller of the
/// two ports' capabilities; this is this function's) and status (what was negotiated).
#[derive(Debug, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
enum Link {
    Pcie {
        device_type: String,
        /// Negotiated speed (GT/s) and width; 0 when the link is down (or, on a Root Complex
        /// Integrated Endpoint, when there is no link).
        speed_gt_s: f64,
        generation: u8,
        width: u8,
        /// Link Capabilities: the most this function supports.
        max_speed_gt_s: f64,
        max_generation: u8,
        max_width: u8,
        /// Device Capabilities / Device Control.
        max_payload_supported: u32,
        max_payload_size: u32,
        max_read_request_size: u32,
    },
    /// No PCI Express capability in a readable config space: a conventional PCI function.
    ConventionalPci,
    /// Only the 64-byte header could be read (sysfs gives unprivileged users no more).
    Unknown { reason: String },
}

impl Link {
    fn of(f: &PciFunction) -> Link {
        if f.config.len() <= 64 {
            return Link::Unknown {
                reason: "only the 64-byte config header is readable (sysfs shows the capabilities to root only)".into(),
            };
        }
        match f.pcie() {
            Some(p) => Link::Pcie {
                device_type: p.device_type_name().to_string(),
                speed_gt_s: p.link_speed_gt_s,
                generation: p.generation,
                width: p.link_width,
                max_speed_gt_s: p.max_link_speed_gt_s,
                max_generation: p.max_generation,
                max_width: p.max_link_width,
                max_payload_supported: p.max_payload_supported,
                max_payload_size: p.max_payload_size,
                max_read_request_size: p.max_read_request_size,
            },
            None => Link::ConventionalPci,
        }
    }

    /// One column: `Gen3 x8 (cap Gen3 x16) MPS 256 MRRS 512`.
    fn text(&self) -> String {
        match self {
            Link::Pcie {
                speed_gt_s,
                generation,
                width,
                max_speed_gt_s,
                max_generation,
                max_width,
                max_payload_size,
                max_read_request_size,
                ..
            } => {
                let status = if *width == 0 || *speed_gt_s == 0.0 { "no link".to_string() } else { format!("Gen{generation} x{width}") };
                format!(
                    "{status} (cap {} x{max_width}) MPS {max_payload_size} MRRS {max_read_request_size}",
                    if *max_generation == 0 { format!("{max_speed_gt_s} GT/s") } else { format!("Gen{max_generation}") }
                )
            }
            Link::ConventionalPci => "PCI (no PCIe capability)".to_string(),
            Link::Unknown { .. } => "? (config header only; run as root)".to_string(),
        }
    }
}

fn entry(listed: &Listed) -> Entry {
    let f = &listed.function;
    let description = match (&f.vendor_name, &f.device_name) {
        (Some(v), Some(d)) => format!("{v} {d}"),
        (Some(v), None) => format!("{v} device {:04x}", f.device_id),
        _ => format!("device {:04x}:{:04x}", f.vendor_id, f.device_id),
    };
    Entry {
        source: listed.source.name().to_string(),
        address: f.address(),
        vendor_id: format!("{:04x}", f.vendor_id),
        device_id: format!("{:04x}", f.device_id),
        class: f.class_name.clone().unwrap_or_else(|| format!("class {:06x}", f.class)),
        description,
        driver: listed.driver.clone(),
        link: Link::of(f),
        tlpx_card: listed.is_tlpx_card(),
        selector: Some(listed.selector.clone()),
    }
}

pub fn run(cmd: &Cmd, device: &str, json: bool) -> anyhow::Result<ExitCode> {
    let listed = selector::list_devices(&Selector::parse(device)?);
    let mut entries: Vec<Entry> = listed.functions.iter().map(entry).collect();
    let notes = listed.notes;

    if cmd.cards_only {
        entries.retain(|e| e.tlpx_card);
    }
    if json {
        print_json(&serde_json::json!({ "functions": entries, "notes": notes }))?;
    } else {
        crate::outln!(
            "{:<8} {:<14} {:<9} {:<28} {:<44} {:<12} DESCRIPTION",
            "SOURCE",
            "ADDRESS",
            "ID",
            "CLASS",
            "LINK (status, capability, MPS, MRRS)",
            "DRIVER"
        );
        for e in &entries {
            let mark =
                if e.tlpx_card { format!("  <- tlpx card (--device {})", e.selector.as_deref().unwrap_or("?")) } else { String::new() };
            crate::outln!(
                "{:<8} {:<14} {:<9} {:<28} {:<44} {:<12} {}{}",
                e.source,
                e.address,
                format!("{}:{}", e.vendor_id, e.device_id),
                truncate(&e.class, 28),
                e.link.text(),
                e.driver.as_deref().unwrap_or("-"),
                e.description,
                mark
            );
        }
        for n in &notes {
            crate::outln!("note: {n}");
        }
        let cards = entries.iter().filter(|e| e.tlpx_card).count();
        crate::outln!("{} PCI function(s), {} tlpx card(s)", entries.len(), cards);
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
