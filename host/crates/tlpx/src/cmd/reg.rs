//! `tlpx reg`: read, write, watch, list and dump the card's registers by name or BAR0 offset,
//! with their fields decoded.
//!
//! ```text
//! tlpx reg read generator.status               # value and every field (ended_by = count (1))
//! tlpx reg read generator.status.ended_by      # one field
//! tlpx reg write ident.scratch 0x1234          # a whole register
//! tlpx reg write generator.config.operation write   # one field: read-modify-write
//! tlpx reg watch --interval 200ms spy.wr_index generator.status   # changes, until Ctrl-C
//! tlpx reg list spy                            # the registers of a region, with offsets
//! tlpx reg dump ident                          # every register of a region and its value
//! tlpx reg --regs build/card/dw64-pci_epf_test/csr.json read pci_epf_test.status
//! ```
//!
//! One grammar for names: `region.register`, `region.register.field` (a register name alone
//! when one region has it), or a BAR0 offset. Names come from the generated map (tlpx-regs;
//! fields and value names through [`crate::regmap`]) and, with `--regs`, from a card build's
//! csr.json (its DUT-owned regions). Some registers act when read (a FIFO's head register
//! pops it): `read` does what a read does, `list` reads nothing, `dump` and `watch` do not
//! read those ([`READ_ACTS`]; `watch --force` does).

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{anyhow, bail};
use clap::{Args, Subcommand};
use serde_json::json;
use tlpx_device::card::Card;
use tlpx_device::Width;

use crate::output::print_json;
use crate::regmap::{parse_number, Access, RegDef, RegMap, Target};
use crate::session::Session;

#[derive(Debug, Args)]
pub struct Cmd {
    /// A card build's csr.json (build/card/<name>/csr.json): its regions with
    /// `"owner": "dut"` (the accelerator's registers) join the names `reg` knows. Their map
    /// hash must equal the card's slot.dut_map_hash (the file is of the accelerator in the slot).
    #[arg(long, global = true, value_name = "FILE")]
    regs: Option<PathBuf>,
    #[command(subcommand)]
    action: Action,
}

#[derive(Debug, Subcommand)]
enum Action {
    /// Read a register and decode its fields, or read one field.
    Read {
        /// `region.register`, `region.register.field` or a BAR0 offset (0x2000).
        register: String,
    },
    /// Write a register, or one field of a read-write register (read-modify-write).
    Write {
        /// `region.register`, `region.register.field` or a BAR0 offset.
        register: String,
        /// The value: a number (decimal or 0x hex), or a field's value name.
        value: String,
    },
    /// Poll registers and print each change with its time, until Ctrl-C or --count polls.
    Watch {
        /// Registers or fields (`region.register[.field]`).
        #[arg(required = true)]
        registers: Vec<String>,
        /// Wall time between polls (e.g. 200ms, 1s).
        #[arg(long, default_value = "200ms", allow_hyphen_values = true)]
        interval: String,
        /// Stop after this many polls (the first prints every value).
        #[arg(long, value_parser = crate::args::whole(1u64, u64::MAX), allow_negative_numbers = true)]
        count: Option<u64>,
        /// Also poll registers whose read acts on the card (pops a FIFO, latches a half).
        #[arg(long)]
        force: bool,
    },
    /// List the registers of a region (or of every region), with offsets, sizes and fields;
    /// reads nothing.
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

/// Registers whose read changes the card, and what it does: `dump` and `watch` do not read
/// them (one dump must not eat a FIFO's sample or break another reader's two-word sequence).
/// From the registers' descriptions in the map; `reg_dump_read_acts_names_exist` keeps the
/// names real.
pub const READ_ACTS: &[(&str, &str)] = &[
    ("timebase.cycles_lo", "latches cycles_hi"),
    ("generator.lat_sample", "pops the latency sample FIFO"),
    ("rt_loop.sample", "pops the loop-time sample FIFO"),
    ("rule30.busy_cycles_lo", "latches busy_cycles_hi"),
    ("uart.rxtx", "pops the console's receive FIFO"),
];

fn read_acts(reg: &RegDef) -> Option<&'static str> {
    let name = reg.full_name();
    READ_ACTS.iter().find(|(n, _)| *n == name).map(|&(_, what)| what)
}

// BAR0 access: every access of `reg` goes through these two, so the card's BAR0 layout
// (tlpx's offsets) is dealt with in one place.
fn bar_read(card: &mut Card, offset: u64, width: Width) -> anyhow::Result<u64> {
    Ok(card.device().bar_read(tlpx_regs::BAR, offset, width)?)
}

fn bar_write(card: &mut Card, offset: u64, width: Width, value: u64) -> anyhow::Result<()> {
    Ok(card.device().bar_write(tlpx_regs::BAR, offset, width, value)?)
}

/// A register's value: up to 64 bits as a number; wider ones (the rule-30 lines) as their
/// 32-bit words, low first, read a word at a time.
pub(crate) enum RegValue {
    Number(u64),
    Words(Vec<u32>),
}

impl RegValue {
    pub(crate) fn hex(&self, reg: &RegDef) -> String {
        match self {
            RegValue::Number(v) => format!("{v:#0width$x}", width = (reg.size_bits as usize).div_ceil(4) + 2),
            RegValue::Words(w) => format!("0x{}", w.iter().rev().map(|w| format!("{w:08x}")).collect::<String>()),
        }
    }
}

/// Reads a register: 64-bit ones in one 2-DW read when 8-byte aligned (as Card::read), else
/// low DW first.
pub(crate) fn read_value(card: &mut Card, reg: &RegDef) -> anyhow::Result<RegValue> {
    if reg.size_bits <= 32 {
        return Ok(RegValue::Number(bar_read(card, reg.offset, Width::W32)?));
    }
    if reg.size_bits <= 64 {
        if reg.offset.is_multiple_of(8) {
            return Ok(RegValue::Number(bar_read(card, reg.offset, Width::W64)?));
        }
        let low = bar_read(card, reg.offset, Width::W32)?;
        let high = bar_read(card, reg.offset + 4, Width::W32)?;
        return Ok(RegValue::Number(high << 32 | low));
    }
    let mut words = Vec::new();
    for i in 0..reg.words() {
        words.push(bar_read(card, reg.offset + 4 * i, Width::W32)? as u32);
    }
    Ok(RegValue::Words(words))
}

pub(crate) fn read_number(card: &mut Card, reg: &RegDef) -> anyhow::Result<u64> {
    match read_value(card, reg)? {
        RegValue::Number(v) => Ok(v),
        RegValue::Words(_) => {
            bail!("{} is {} bits wide: read it whole (`tlpx reg read {0}`), not by field", reg.full_name(), reg.size_bits)
        }
    }
}

pub(crate) fn write_number(card: &mut Card, reg: &RegDef, value: u64) -> anyhow::Result<()> {
    if reg.size_bits <= 32 {
        return bar_write(card, reg.offset, Width::W32, value);
    }
    if reg.offset.is_multiple_of(8) {
        return bar_write(card, reg.offset, Width::W64, value);
    }
    bar_write(card, reg.offset, Width::W32, value & 0xFFFF_FFFF)?;
    bar_write(card, reg.offset + 4, Width::W32, value >> 32)
}

/// The names `reg` knows: the card's map, plus `--regs`'s DUT regions (which [`Loaded::check`]
/// compares with the card's slot once a card is open).
pub(crate) struct Loaded {
    pub(crate) map: RegMap,
    pub(crate) dut: Option<(PathBuf, crate::regmap::DutRegions)>,
}

pub(crate) fn load_map(regs: Option<&PathBuf>) -> anyhow::Result<Loaded> {
    let mut map = RegMap::card();
    let dut = match regs {
        Some(path) => Some((path.clone(), map.add_dut_regions(path)?)),
        None => None,
    };
    Ok(Loaded { map, dut })
}

impl Loaded {
    /// Checks `--regs` against the card's slot, and that `targets` are on this card: the map's
    /// own DUT regions (rule 30's) are another accelerator's registers when the slot holds
    /// another one. Returns that other accelerator's name, if any.
    pub(crate) fn check(&self, card: &mut Card, targets: &[&RegDef]) -> anyhow::Result<Option<String>> {
        if let Some((path, dut)) = &self.dut {
            check_slot(card, path, dut)?;
        }
        let name = crate::slot::dut_name(card)?;
        if tlpx_regs::DUT_REGIONS.contains(&name.as_str()) {
            return Ok(None);
        }
        if let Some(r) =
            targets.iter().find(|r| r.owner == crate::regmap::Owner::Card && tlpx_regs::DUT_REGIONS.contains(&r.region.as_str()))
        {
            bail!(
                "{} is a register of {}, but this card's slot holds {name:?}: give its registers with --regs build/card/<card>/csr.json (the card build's), or a BAR0 offset",
                r.full_name(),
                r.region
            );
        }
        Ok(Some(name))
    }
}

/// The file's DUT regions must be what the card's slot holds: the same map hash as
/// slot.dut_map_hash (else its offsets would name another accelerator's registers).
fn check_slot(card: &mut Card, path: &std::path::Path, dut: &crate::regmap::DutRegions) -> anyhow::Result<()> {
    let on_card = card.read(tlpx_regs::slot::DUT_MAP_HASH)? as u32;
    if on_card != dut.hash {
        let name = crate::slot::dut_name(card)?;
        bail!(
            "--regs {}: its DUT regions ({}) hash to 0x{:08x}, but this card's slot holds {name:?} with DUT map hash 0x{on_card:08x}: the file is from another accelerator or another build of it",
            path.display(),
            dut.names.join(", "),
            dut.hash,
        );
    }
    Ok(())
}

pub(crate) fn flush(card: &mut Card) -> anyhow::Result<()> {
    // A read so the posted write has reached the card when this returns.
    bar_read(card, tlpx_regs::ident::MAGIC.offset, Width::W32).map(|_| ())
}

fn field_json(reg: &RegDef, value: u64) -> Vec<serde_json::Value> {
    reg.fields
        .iter()
        .map(|f| {
            let v = f.get(value);
            json!({"name": f.name, "shift": f.shift, "width": f.width, "value": v, "value_name": f.value_name(v)})
        })
        .collect()
}

pub fn run(cmd: &Cmd, device: &str, json: bool) -> anyhow::Result<ExitCode> {
    match &cmd.action {
        Action::List { region } => {
            let map = load_map(cmd.regs.as_ref())?.map;
            let rows: Vec<&RegDef> = map.registers.iter().filter(|r| region.as_deref().is_none_or(|want| r.region == want)).collect();
            if rows.is_empty() {
                bail!("no region {:?} in the register map; regions: {}", region.as_deref().unwrap_or(""), map.regions().join(", "));
            }
            if json {
                let v: Vec<_> = rows
                    .iter()
                    .map(|r| {
                        let fields: Vec<_> = r
                            .fields
                            .iter()
                            .map(|f| json!({"name": f.name, "shift": f.shift, "width": f.width, "description": f.description, "values": f.values.iter().map(|(n, v)| json!({"name": n, "value": v})).collect::<Vec<_>>()}))
                            .collect();
                        json!({"name": r.full_name(), "offset": r.offset, "bits": r.size_bits, "writable": r.access != Access::Ro, "access": r.access.name(), "description": r.description, "fields": fields})
                    })
                    .collect();
                print_json(&v)?;
            } else {
                for r in rows {
                    crate::outln!(
                        "{:#07x}  {:<40} {:>2} bits {}  {}",
                        r.offset,
                        r.full_name(),
                        r.size_bits,
                        r.access.name(),
                        r.description
                    );
                    for f in &r.fields {
                        let bits = if f.width == 1 { format!("{}", f.shift) } else { format!("{}:{}", f.shift + f.width - 1, f.shift) };
                        let values = if f.values.is_empty() {
                            String::new()
                        } else {
                            format!(" [{}]", f.values.iter().map(|(n, v)| format!("{n}={v}")).collect::<Vec<_>>().join(" "))
                        };
                        crate::outln!("{:9}{:<24} {:>5}  {}{values}", "", f.name, bits, f.description);
                    }
                }
            }
            Ok(ExitCode::SUCCESS)
        }
        Action::Dump { region } => {
            let loaded = load_map(cmd.regs.as_ref())?;
            let mut session = Session::open_as_is(device)?;
            let other_dut = loaded.check(&mut session.card, &[])?;
            let mut map = loaded.map;
            // Another accelerator in the slot: rule 30's registers are not on this card.
            if other_dut.is_some() {
                map.registers.retain(|r| r.owner == crate::regmap::Owner::Dut || !tlpx_regs::DUT_REGIONS.contains(&r.region.as_str()));
            }
            let cpu = tlpx_regs::ident::features::CPU.get(u64::from(session.card.identity().feature_bits)) != 0;
            // The map is the CPU card's superset: a card without the CPU has no CPU regions.
            let rows: Vec<&RegDef> = map
                .registers
                .iter()
                .filter(|r| region.as_deref().is_none_or(|want| r.region == want))
                .filter(|r| cpu || !tlpx_regs::CPU_REGIONS.contains(&r.region.as_str()))
                .collect();
            if rows.is_empty() {
                bail!("no region {:?} on this card; regions: {}", region.as_deref().unwrap_or(""), map.regions().join(", "));
            }
            let mut out = Vec::new();
            for r in rows {
                // Ok(value), or Err(what its read would do) for a register not read.
                let value = match read_acts(r) {
                    Some(what) => Err(what),
                    None if r.access == Access::Wo => Err("is write-only: reads return nothing of it"),
                    None => Ok(read_value(&mut session.card, r)?.hex(r)),
                };
                out.push((r.full_name(), r.offset, value));
            }
            if json {
                let v: Vec<_> = out
                    .iter()
                    .map(|(name, offset, value)| match value {
                        Ok(v) => json!({"name": name, "offset": offset, "value": v}),
                        Err(what) => json!({"name": name, "offset": offset, "value": null, "not_read": what}),
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
            // Names first: a bad name is an error before any card is opened.
            let loaded = load_map(cmd.regs.as_ref())?;
            let target = loaded.map.resolve(register)?;
            let mut session = Session::open_as_is(device)?;
            loaded.check(&mut session.card, &[target.register()])?;
            let reg = target.register().clone();
            if reg.access == Access::Wo {
                bail!("{} is write-only ({}): a read returns nothing of it", reg.full_name(), reg.access.name());
            }
            match &target {
                Target::Field(_, f) => {
                    let v = f.get(read_number(&mut session.card, &reg)?);
                    if json {
                        print_json(
                            &json!({"name": target.name(), "register": reg.full_name(), "offset": reg.offset, "shift": f.shift, "width": f.width, "value": v, "value_name": f.value_name(v)}),
                        )?;
                    } else {
                        crate::outln!("{} = {}", target.name(), f.show(v));
                    }
                }
                Target::Register(_) => {
                    let value = read_value(&mut session.card, &reg)?;
                    let hex = value.hex(&reg);
                    match value {
                        RegValue::Number(v) => {
                            if json {
                                print_json(
                                    &json!({"name": reg.full_name(), "offset": reg.offset, "bits": reg.size_bits, "value": v, "hex": hex, "fields": field_json(&reg, v)}),
                                )?;
                            } else {
                                crate::outln!("{} = {hex} ({v})", reg.full_name());
                                let w = reg.fields.iter().map(|f| f.name.len()).max().unwrap_or(0);
                                for f in &reg.fields {
                                    crate::outln!("  {:<w$} = {}", f.name, f.show(f.get(v)));
                                }
                            }
                        }
                        RegValue::Words(_) => {
                            if json {
                                print_json(
                                    &json!({"name": reg.full_name(), "offset": reg.offset, "bits": reg.size_bits, "value": null, "hex": hex, "fields": []}),
                                )?;
                            } else {
                                crate::outln!("{} = {hex}", reg.full_name());
                            }
                        }
                    }
                }
            }
            Ok(ExitCode::SUCCESS)
        }
        Action::Write { register, value } => {
            // Names, access and value are checked before any card is opened.
            let loaded = load_map(cmd.regs.as_ref())?;
            let target = loaded.map.resolve(register)?;
            let reg = target.register().clone();
            if reg.access == Access::Ro {
                bail!("{} is read-only (ro): it cannot be written", reg.full_name());
            }
            if reg.size_bits > 64 {
                bail!(
                    "{} is {} bits wide: write it a 32-bit word at a time by offset ({:#x}..{:#x})",
                    reg.full_name(),
                    reg.size_bits,
                    reg.offset,
                    reg.offset + 4 * reg.words()
                );
            }
            let value = match &target {
                Target::Register(_) => {
                    let v = parse_number(value)?;
                    if reg.size_bits < 64 && v >> reg.size_bits != 0 {
                        bail!("{v:#x} does not fit {}, a {}-bit register", reg.full_name(), reg.size_bits);
                    }
                    v
                }
                Target::Field(_, f) => {
                    if reg.access != Access::Rw {
                        bail!(
                            "{} is write-only: it cannot be read back for a read-modify-write of {}; write the whole register",
                            reg.full_name(),
                            target.name()
                        );
                    }
                    f.parse_value(&reg, value)?
                }
            };
            let mut session = Session::open_as_is(device)?;
            loaded.check(&mut session.card, &[target.register()])?;
            match &target {
                Target::Register(_) => {
                    let v = value;
                    write_number(&mut session.card, &reg, v)?;
                    flush(&mut session.card)?;
                    if json {
                        print_json(&json!({"name": reg.full_name(), "offset": reg.offset, "written": v}))?;
                    }
                }
                Target::Field(_, f) => {
                    let v = value;
                    let before = read_number(&mut session.card, &reg)?;
                    let after = (before & !f.mask()) | (v << f.shift);
                    write_number(&mut session.card, &reg, after)?;
                    flush(&mut session.card)?;
                    if json {
                        print_json(
                            &json!({"name": target.name(), "register": reg.full_name(), "offset": reg.offset, "field_value": v, "before": before, "written": after}),
                        )?;
                    }
                }
            }
            Ok(ExitCode::SUCCESS)
        }
        Action::Watch { registers, interval, count, force } => {
            let seconds = crate::sizes::parse_duration("--interval", interval).map_err(|e| anyhow!(e))?;
            if seconds < 1e-3 {
                bail!("--interval {interval} is shorter than 1ms: give 1ms or more (e.g. 200ms)");
            }
            let loaded = load_map(cmd.regs.as_ref())?;
            let mut targets = Vec::new();
            for name in registers {
                let t = loaded.map.resolve(name)?;
                let reg = t.register();
                if let (Some(what), false) = (read_acts(reg), force) {
                    bail!(
                        "refusing to watch {}: reading {} {what}, so polling it changes the card; --force polls it anyway",
                        t.name(),
                        reg.full_name()
                    );
                }
                if reg.access == Access::Wo {
                    bail!("{} is write-only: there is nothing to watch", reg.full_name());
                }
                targets.push(t);
            }
            let mut session = Session::open_as_is(device)?;
            loaded.check(&mut session.card, &targets.iter().map(Target::register).collect::<Vec<_>>())?;
            watch(&mut session, &targets, Duration::from_secs_f64(seconds), *count, json)
        }
    }
}

/// Host wall time, UTC, to the microsecond: (RFC 3339 date and time, time of day).
fn wall_time() -> (String, String) {
    let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default();
    let s = now.as_secs() % 86_400;
    let tod = format!("{:02}:{:02}:{:02}.{:06}Z", s / 3600, s / 60 % 60, s % 60, now.subsec_micros());
    let (stamp, _) = crate::results::utc_stamp(now.as_secs());
    (format!("{}{}", &stamp[..11], tod), tod)
}

/// What one target reads: the register's value (a number; the wide ones as hex text).
fn sample(card: &mut Card, t: &Target) -> anyhow::Result<(String, Option<u64>)> {
    let reg = t.register();
    match read_value(card, reg)? {
        RegValue::Number(v) => match t {
            Target::Field(_, f) => Ok((f.show(f.get(v)), Some(f.get(v)))),
            Target::Register(_) => Ok((format!("{} ({v})", RegValue::Number(v).hex(reg)), Some(v))),
        },
        w @ RegValue::Words(_) => Ok((w.hex(reg), None)),
    }
}

/// Polls `targets` every `interval` and prints a line per change (every value at the first
/// poll). Memory: the last value of each target, nothing else.
fn watch(session: &mut Session, targets: &[Target], interval: Duration, count: Option<u64>, json: bool) -> anyhow::Result<ExitCode> {
    crate::progress::install_stop_handler();
    // On the simulator the card runs in wall time while this sleeps (as on hardware).
    session.hold_live_time()?;
    let clock_hz = f64::from(session.card.identity().clock_hz.max(1));
    let (date, _) = crate::results::utc_now();
    if !json {
        crate::outln!(
            "# every {interval:?} from {date}; times: host wall clock (UTC) and card time (timebase cycles / {} Hz); a line per change",
            clock_hz as u64
        );
    }
    let mut last: Vec<Option<(String, Option<u64>)>> = vec![None; targets.len()];
    let mut polls = 0u64;
    let start = Instant::now();
    loop {
        let (wall_utc, wall) = wall_time();
        let cycles = session.card.cycles()?;
        for (t, prev) in targets.iter().zip(last.iter_mut()) {
            let now = sample(&mut session.card, t)?;
            if prev.as_ref() == Some(&now) {
                continue;
            }
            let reg = t.register();
            // The fields that changed, for a whole register with fields.
            let changed: Vec<String> = match (t, prev.as_ref().and_then(|p| p.1), now.1) {
                (Target::Register(_), Some(before), Some(after)) => reg
                    .fields
                    .iter()
                    .filter(|f| f.get(before) != f.get(after))
                    .map(|f| format!("{} {} -> {}", f.name, f.show(f.get(before)), f.show(f.get(after))))
                    .collect(),
                _ => Vec::new(),
            };
            if json {
                crate::outln!(
                    "{}",
                    json!({"wall_utc": wall_utc, "card_cycles": cycles, "card_seconds": cycles as f64 / clock_hz,
                           "name": t.name(), "value": now.1, "text": now.0, "previous": prev.as_ref().map(|p| p.1), "fields_changed": changed})
                );
            } else {
                let was = prev.as_ref().map_or(String::new(), |p| format!("  (was {})", p.0));
                let fields = if changed.is_empty() { String::new() } else { format!("  [{}]", changed.join(", ")) };
                crate::outln!("{wall}  card {:>14.9}s  {} = {}{was}{fields}", cycles as f64 / clock_hz, t.name(), now.0);
            }
            *prev = Some(now);
        }
        polls += 1;
        if count.is_some_and(|c| polls >= c) || crate::progress::stop_requested() || crate::output::output_closed() {
            break;
        }
        // Sleep to the next poll in short slices, so Ctrl-C ends the watch at once.
        let next = interval.saturating_mul(polls as u32);
        while start.elapsed() < next && !crate::progress::stop_requested() {
            std::thread::sleep((next - start.elapsed()).min(Duration::from_millis(50)));
        }
        if crate::progress::stop_requested() {
            break;
        }
    }
    Ok(ExitCode::SUCCESS)
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
