//! `tlpx reg`: read and write the card's registers by name (`region.register`) or BAR0 offset.
//!
//! ```text
//! tlpx reg read generator.status        # 0x00000a01
//! tlpx reg read 0x2000
//! tlpx reg write ident.scratch 0x1234
//! tlpx reg list spy                     # the registers of a region, with offsets
//! tlpx reg dump ident                    # every register of a region and its value
//! ```
//!
//! Names come from the generated map (tlpx-regs). Some registers act when read (a FIFO's
//! head register pops it): `read` does what a read does, `list` reads nothing, `dump` reads
//! every register but those ([`READ_ACTS`]), which it names without reading.

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
    /// Read every register of a region (or of the card) and print `region.register value`,
    /// one a line; registers whose read acts on the card (pops a FIFO, latches a half) are
    /// named, not read.
    Dump {
        /// A region name; all regions the card has without it.
        region: Option<String>,
    },
}

/// Registers whose read changes the card, and what it does: `dump` does not read them (one
/// dump must not eat a FIFO's sample or break another reader's two-word sequence). From the
/// registers' descriptions in the map; `reg_dump_read_acts_names_exist` keeps the names real.
pub const READ_ACTS: &[(&str, &str)] = &[
    ("timebase.cycles_lo", "latches cycles_hi"),
    ("generator.lat_sample", "pops the latency sample FIFO"),
    ("rt_loop.sample", "pops the loop-time sample FIFO"),
    ("rule30.busy_cycles_lo", "latches busy_cycles_hi"),
    ("uart.rxtx", "pops the console's receive FIFO"),
];

fn read_acts(reg: &Register) -> Option<&'static str> {
    READ_ACTS.iter().find(|(name, _)| name.split_once('.') == Some((reg.region, reg.name))).map(|&(_, what)| what)
}

/// A register's value as hex digits (its width, most significant first); registers wider
/// than 64 bits (the rule-30 lines) are read a word at a time.
fn read_hex(card: &mut tlpx_device::card::Card, reg: Register) -> anyhow::Result<String> {
    let digits = (reg.size_bits as usize).div_ceil(4);
    if reg.size_bits <= 64 {
        let v = card.read(reg)?;
        return Ok(format!("{v:#0width$x}", width = digits + 2));
    }
    let mut words = Vec::new();
    for i in 0..u64::from(reg.size_bits.div_ceil(32)) {
        words.push(card.device().bar_read(tlpx_regs::BAR, reg.offset + 4 * i, tlpx_device::Width::W32)?);
    }
    Ok(format!("0x{}", words.iter().rev().map(|w| format!("{w:08x}")).collect::<String>()))
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
        Action::Dump { region } => {
            let mut session = Session::open_as_is(device)?;
            let cpu = tlpx_regs::ident::features::CPU.get(u64::from(session.card.identity().feature_bits)) != 0;
            // The map is the CPU card's superset: a card without the CPU has no CPU regions.
            let rows: Vec<Register> = tlpx_regs::ALL
                .iter()
                .copied()
                .filter(|r| region.as_deref().is_none_or(|want| r.region == want))
                .filter(|r| cpu || !tlpx_regs::CPU_REGIONS.contains(&r.region))
                .collect();
            if rows.is_empty() {
                bail!("no region {:?} on this card (`tlpx reg list` lists them)", region.as_deref().unwrap_or(""));
            }
            let mut out = Vec::new();
            for r in rows {
                let name = format!("{}.{}", r.region, r.name);
                // Ok(value), or Err(what its read would do) for a register not read.
                let value = match read_acts(&r) {
                    Some(what) => Err(what),
                    None => Ok(read_hex(&mut session.card, r)?),
                };
                out.push((name, r.offset, value));
            }
            if json {
                let v: Vec<_> = out
                    .iter()
                    .map(|(name, offset, value)| match value {
                        Ok(v) => serde_json::json!({"name": name, "offset": offset, "value": v}),
                        Err(what) => serde_json::json!({"name": name, "offset": offset, "value": null, "not_read": what}),
                    })
                    .collect();
                print_json(&v)?;
            } else {
                for (name, _, value) in out {
                    match value {
                        Ok(v) => crate::outln!("{name} {v}"),
                        Err(what) => crate::outln!("{name} (not read: reading it {what})"),
                    }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reg_dump_read_acts_names_exist() {
        for (name, _) in READ_ACTS {
            assert!(
                tlpx_regs::ALL.iter().any(|r| Some((r.region, r.name)) == name.split_once('.')),
                "{name} is not in the register map: update READ_ACTS"
            );
        }
    }
}
