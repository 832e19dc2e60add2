//! `tlpx reg`: read and write the card's registers by name (`region.register`) or BAR0 offset.
//!
//! ```text
//! tlpx reg read generator.status        # 0x00000a01
//! tlpx reg read 0x2000
//! tlpx reg write ident.scratch 0x1234
//! tlpx reg list spy                     # the registers of a region, with offsets
//! ```
//!
//! Names come from the generated map (tlpx-regs). Some registers act when read (a FIFO's
//! head register pops it): `read` does what a read does, `list` reads nothing.

use std::process::ExitCode;

use anyhow::{anyhow, bail};
use clap::{Args, Subcommand};
use tlpx_regs::Register;

use crate::output::print_json;
use crate::session::Session;

#[derive(Debug, Args)]
pub struct Cmd {
    #[command(subcommand)]
    action: Action,
}

#[derive(Debug, Subcommand)]
enum Action {
    /// Read a register (64-bit registers in one access where aligned).
    Read {
        /// `region.register` (e.g. generator.status) or a BAR0 offset (0x2000).
        register: String,
    },
    /// Write a register.
    Write {
        /// `region.register` or a BAR0 offset.
        register: String,
        /// The value (decimal or 0x hex).
        value: String,
    },
    /// List the registers of a region (or of every region), with offsets and sizes; reads nothing.
    List {
        /// A region name (ident, generator, spy, ...); all regions without it.
        region: Option<String>,
    },
}

fn parse_number(text: &str) -> anyhow::Result<u64> {
    let t = text.trim().replace('_', "");
    match t.strip_prefix("0x").or_else(|| t.strip_prefix("0X")) {
        Some(h) => u64::from_str_radix(h, 16),
        None => t.parse(),
    }
    .map_err(|_| anyhow!("{text:?} is not a number (decimal, or hex with 0x)"))
}

/// The register `text` names: `region.register`, or an offset (a 32-bit register there).
fn resolve(text: &str) -> anyhow::Result<Register> {
    if let Some((region, name)) = text.split_once('.') {
        return tlpx_regs::ALL.iter().copied().find(|r| r.region == region && r.name == name).ok_or_else(|| {
            let regions: Vec<&str> = tlpx_regs::ALL.iter().map(|r| r.region).fold(Vec::new(), |mut v, r| {
                if v.last() != Some(&r) {
                    v.push(r);
                    v
                } else {
                    v
                }
            });
            anyhow!("no register {text:?}: `tlpx reg list REGION` lists a region's registers (regions: {})", regions.join(", "))
        });
    }
    let offset = parse_number(text)?;
    if !offset.is_multiple_of(4) || offset >= tlpx_regs::BAR_SIZE {
        bail!("offset {offset:#x} must be DW-aligned and inside BAR0 (0..{:#x})", tlpx_regs::BAR_SIZE);
    }
    Ok(tlpx_regs::ALL.iter().copied().find(|r| r.offset == offset).unwrap_or(Register {
        region: "bar0",
        name: "raw",
        offset,
        size_bits: 32,
        writable: true,
        description: "",
    }))
}

pub fn run(cmd: &Cmd, device: &str, json: bool) -> anyhow::Result<ExitCode> {
    match &cmd.action {
        Action::List { region } => {
            let rows: Vec<&Register> = tlpx_regs::ALL.iter().filter(|r| region.as_deref().is_none_or(|want| r.region == want)).collect();
            if rows.is_empty() {
                bail!("no region {:?} in the register map", region.as_deref().unwrap_or(""));
            }
            if json {
                let v: Vec<_> = rows
                    .iter()
                    .map(|r| serde_json::json!({"name": format!("{}.{}", r.region, r.name), "offset": r.offset, "bits": r.size_bits, "writable": r.writable, "description": r.description}))
                    .collect();
                print_json(&v)?;
            } else {
                for r in rows {
                    crate::outln!(
                        "{:#07x}  {:<40} {:>2} bits {}  {}",
                        r.offset,
                        format!("{}.{}", r.region, r.name),
                        r.size_bits,
                        if r.writable { "rw" } else { "ro" },
                        r.description
                    );
                }
            }
            Ok(ExitCode::SUCCESS)
        }
        Action::Read { register } => {
            let reg = resolve(register)?;
            let mut session = Session::open_as_is(device)?;
            let value = session.card.read(reg)?;
            if json {
                print_json(&serde_json::json!({"name": format!("{}.{}", reg.region, reg.name), "offset": reg.offset, "value": value}))?;
            } else {
                let digits = (reg.size_bits as usize).div_ceil(4);
                crate::outln!("{}.{} = {value:#0width$x} ({value})", reg.region, reg.name, width = digits + 2);
            }
            Ok(ExitCode::SUCCESS)
        }
        Action::Write { register, value } => {
            let reg = resolve(register)?;
            let v = parse_number(value)?;
            if !reg.writable {
                bail!("{}.{} is read-only", reg.region, reg.name);
            }
            if reg.size_bits < 64 && v >> reg.size_bits != 0 {
                bail!("{v:#x} does not fit {}.{}'s {} bits", reg.region, reg.name, reg.size_bits);
            }
            let mut session = Session::open_as_is(device)?;
            session.card.write(reg, v)?;
            // A read so the posted write has reached the card when this returns.
            session.card.read(tlpx_regs::ident::MAGIC)?;
            Ok(ExitCode::SUCCESS)
        }
    }
}
