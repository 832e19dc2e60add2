//! `tlpx vfio bind|unbind|status ADDR`: hand a PCI function to vfio-pci (for the vfio
//! backend), give it back, and show where it stands (driver, IOMMU group and its members,
//! whether the IOMMU is on). The work is in `tlpx_device::backends::vfio::bind`.

use std::process::ExitCode;

use clap::{Args, Subcommand};
use tlpx_device::backends::vfio::bind::{self, BindStatus, Sysfs};

use crate::output::print_json;

#[derive(Debug, Args)]
pub struct Cmd {
    #[command(subcommand)]
    action: Action,
}

#[derive(Debug, Subcommand)]
enum Action {
    /// Bind a function to vfio-pci (needs root): remembers its driver, sets driver_override,
    /// unbinds it, lets the kernel probe it again; loads vfio-pci if needed.
    Bind {
        /// PCI address, e.g. 0000:03:00.0 or 03:00.0.
        address: String,
    },
    /// Give a function back from vfio-pci to the driver it had before bind (needs root).
    Unbind {
        /// PCI address, e.g. 0000:03:00.0 or 03:00.0.
        address: String,
    },
    /// Driver, IOMMU group, group members and their drivers, IOMMU on or off.
    Status {
        /// PCI address, e.g. 0000:03:00.0 or 03:00.0.
        address: String,
    },
}

pub fn run(cmd: &Cmd, json: bool) -> anyhow::Result<ExitCode> {
    let sysfs = Sysfs::system();
    match &cmd.action {
        Action::Bind { address } => {
            let out = bind::bind(&sysfs, address)?;
            if json {
                print_json(&out)?;
            } else if out.already_bound {
                crate::outln!("{} is bound to vfio-pci already", out.address);
                print_status(&out.status);
            } else {
                if out.loaded_module {
                    crate::outln!("loaded the vfio-pci module");
                }
                crate::outln!(
                    "{} bound to vfio-pci (was: {}; `tlpx vfio unbind {}` restores it)",
                    out.address,
                    out.previous_driver.as_deref().unwrap_or("no driver"),
                    out.address
                );
                print_status(&out.status);
            }
        }
        Action::Unbind { address } => {
            let out = bind::unbind(&sysfs, address)?;
            if json {
                print_json(&out)?;
            } else if out.was_not_bound {
                crate::outln!(
                    "{} is not bound to vfio-pci (driver: {}); nothing to undo",
                    out.address,
                    out.status.driver.as_deref().unwrap_or("none")
                );
            } else {
                crate::outln!(
                    "{} unbound from vfio-pci; now bound to {}",
                    out.address,
                    out.status.driver.as_deref().unwrap_or("no driver")
                );
            }
        }
        Action::Status { address } => {
            let status = bind::status(&sysfs, address)?;
            if json {
                print_json(&status)?;
            } else {
                print_status(&status);
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}

fn print_status(s: &BindStatus) {
    crate::outln!("address      {}{}", s.address, s.id.as_deref().map(|i| format!(" ({i})")).unwrap_or_default());
    crate::outln!("driver       {}", s.driver.as_deref().unwrap_or("none"));
    if let Some(o) = &s.driver_override {
        crate::outln!("override     {o}");
    }
    if let Some(p) = &s.previous_driver {
        crate::outln!("before bind  {}", if p.is_empty() { "no driver" } else { p });
    }
    crate::outln!("iommu        {}", if s.iommu_on { "on" } else { "off (no IOMMU groups: boot with intel_iommu=on or amd_iommu=on)" });
    match s.iommu_group {
        Some(g) => {
            crate::outln!("iommu group  {g}");
            for m in &s.group_members {
                let note = if m.address == s.address {
                    " (this function)"
                } else if m.blocks_vfio() {
                    " (bound to a host driver: keeps the group from being viable)"
                } else if m.bridge {
                    " (bridge: allowed)"
                } else {
                    ""
                };
                crate::outln!("  member     {} {}{note}", m.address, m.driver.as_deref().unwrap_or("no driver"));
            }
        }
        None => crate::outln!("iommu group  none"),
    }
    crate::outln!("vfio-pci     {}", if s.vfio_pci_loaded { "loaded" } else { "not loaded (bind loads it)" });
    let ready = if s.ready() {
        "yes: tlpx --device ADDR can open it through vfio".to_string()
    } else if s.iommu_group.is_none() {
        "no: no IOMMU group".to_string()
    } else if s.driver.as_deref() != Some(bind::VFIO_PCI) {
        format!("no: run `tlpx vfio bind {}`", s.address)
    } else {
        "no: other functions of its IOMMU group are bound to host drivers".to_string()
    };
    crate::outln!("vfio ready   {ready}");
}
