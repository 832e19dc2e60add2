//! `tlpx info`: identification block, link, MPS/MRRS and features of one card.

use std::process::ExitCode;

use clap::Args;
use serde::Serialize;
use tlpx_device::card::{Card, Identity};
use tlpx_device::pci::{MsiInfo, PcieInfo};
use tlpx_device::selector::{self, SimSummary};

use crate::output::{bytes, print_json};

#[derive(Debug, Args)]
pub struct Cmd {}

#[derive(Debug, Serialize)]
struct Info {
    device: String,
    backend: String,
    pci_address: String,
    vendor_id: String,
    device_id: String,
    identity: Identity,
    pcie: Option<PcieInfo>,
    msi: Option<MsiInfo>,
    bar0_size: Option<u64>,
    cycles: u64,
    simulated: Option<SimSummary>,
    model_limit_4k: Option<ModelLimit>,
    /// The accelerator slot: who is in it, where its registers are.
    slot: crate::slot::SlotInfo,
    /// BAR0 offset of tlpx's own register map (0, or RELOCATED_TLPX_BASE when the DUT is at BAR0 0).
    tlpx_map_bar0_offset: u64,
}

#[derive(Debug, Serialize)]
struct ModelLimit {
    write_bytes_per_second: f64,
    read_bytes_per_second: f64,
}

pub fn run(_cmd: &Cmd, device: &str, json: bool) -> anyhow::Result<ExitCode> {
    let opened = selector::open(device)?;
    let description = opened.device.description();
    let mut card = Card::open(opened.device)?;
    let cycles = card.cycles()?;
    let slot = crate::slot::read(&mut card)?;
    let pcie = opened.pci.pcie();
    let model_limit_4k = pcie.as_ref().and_then(|p| {
        let cfg =
            tlpx_model::link::LinkConfig::new(p.generation, p.link_width, p.max_payload_size, p.max_read_request_size, 64, false).ok()?;
        Some(ModelLimit {
            write_bytes_per_second: tlpx_model::link::write_bandwidth(&cfg, 4096).bytes_per_second,
            read_bytes_per_second: tlpx_model::link::read_bandwidth(&cfg, 4096).bytes_per_second,
        })
    });
    let info = Info {
        device: description.location.clone(),
        backend: description.backend.clone(),
        pci_address: opened.pci.address(),
        vendor_id: format!("{:04x}", opened.pci.vendor_id),
        device_id: format!("{:04x}", opened.pci.device_id),
        identity: card.identity().clone(),
        pcie,
        msi: opened.pci.msi(),
        bar0_size: description.bar_sizes.first().copied().flatten(),
        cycles,
        simulated: opened.sim,
        model_limit_4k,
        slot,
        tlpx_map_bar0_offset: card.tlpx_base(),
    };
    if json {
        print_json(&info)?;
        return Ok(ExitCode::SUCCESS);
    }
    let id = &info.identity;
    crate::outln!("card        {} ({} backend) at {}", info.pci_address, info.backend, info.device);
    crate::outln!("ids         {}:{}", info.vendor_id, info.device_id);
    crate::outln!(
        "identity    tlpx card, register map {}.{} hash 0x{:08x} (known to this tlpx)",
        id.version_major,
        id.version_minor,
        id.map_hash
    );
    crate::outln!("datapath    {} bits at {:.1} MHz", id.data_width, f64::from(id.clock_hz) / 1e6);
    crate::outln!("features    {}", id.feature_list());
    let s = &info.slot;
    crate::outln!(
        "slot        {} {} (slot interface {}, DUT map hash {}), placement {}: registers at BAR0 {:#x}..{:#x}{}",
        s.dut_name,
        s.dut_version,
        s.interface_version,
        s.dut_map_hash,
        s.placement,
        s.window_bar0_offset,
        s.window_bar0_offset + s.window_bytes,
        if s.dma { format!(", DMA with tags {}..={}", s.tags[0], s.tags[1]) } else { String::new() }
    );
    if info.tlpx_map_bar0_offset != 0 {
        crate::outln!("tlpx map    at BAR0 {:#x} (relocated: the DUT is at BAR0 0)", info.tlpx_map_bar0_offset);
    }
    if let Some(size) = info.bar0_size {
        crate::outln!("bar0        {}", bytes(size));
    }
    match &info.pcie {
        Some(p) => {
            crate::outln!(
                "link        Gen{} x{} ({} GT/s; capable of {} GT/s x{})",
                p.generation,
                p.link_width,
                p.link_speed_gt_s,
                p.max_link_speed_gt_s,
                p.max_link_width
            );
            crate::outln!(
                "payload     MPS {} B (supports {} B), MRRS {} B",
                p.max_payload_size,
                p.max_payload_supported,
                p.max_read_request_size
            );
        }
        None => crate::outln!("link        no PCI Express capability found"),
    }
    if let Some(m) = &info.msi {
        crate::outln!(
            "msi         {} ({}-bit, {} of {} vectors)",
            if m.enabled { "enabled" } else { "disabled" },
            if m.is_64bit { 64 } else { 32 },
            m.multiple_message_enabled,
            m.multiple_message_capable
        );
    }
    if let Some(l) = &info.model_limit_4k {
        crate::outln!(
            "model limit 4 KiB DMA write {:.0} MB/s, read {:.0} MB/s (tlpx-model, for this link)",
            l.write_bytes_per_second / 1e6,
            l.read_bytes_per_second / 1e6
        );
    }
    crate::outln!("cycles      {} ({:.3} ms of card time)", info.cycles, card.cycles_to_duration(info.cycles).as_secs_f64() * 1e3);
    if let Some(s) = &info.simulated {
        // The generic card stands for no board: say so rather than "hard IP of generic".
        let ip = if s.board == s.hard_ip {
            format!("no board's hard IP ({}: LitePCIe's payload limit, any link)", s.board)
        } else {
            format!("hard IP of {} ({})", s.board, s.hard_ip)
        };
        crate::outln!(
            "simulated   yes: tlpx-sim at {}, {ip}, link model Gen{} x{}, MPS {} MRRS {} RCB {}, seed {}",
            s.socket,
            s.link.generation,
            s.link.lanes,
            s.link.mps,
            s.link.mrrs,
            s.link.rcb,
            s.seed
        );
    }
    Ok(ExitCode::SUCCESS)
}
