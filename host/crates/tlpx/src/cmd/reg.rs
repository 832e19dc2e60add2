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
use tlpx_device::card::Card;
use tlpx_device::lease::{self, Block, OwnerProcess};
use tlpx_device::Width;

use crate::output::print_json;
use crate::regmap::{parse_number, Access, RegDef, RegMap, Target};
use crate::session::Session;

mod json;

use json::{DumpRow, FieldRead, FieldValue, RegisterListing, RegisterRead, WatchChange, WriteReport};

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
    ///
    /// A write into a block that acts on its own (generator, spy, irq_timer, rt_loop, rule 30,
    /// the CPU, the accelerator in the slot) takes the block's lease for the write: a block
    /// another process owns is refused, naming it; a job the write starts ends when the command
    /// does (no DMA runs without an owner).
    Write {
        /// `region.register`, `region.register.field` or a BAR0 offset.
        register: String,
        /// The value: a number (decimal or 0x hex), or a field's value name.
        value: String,
        /// Write even into a block another process owns (its owner's job may then fail or
        /// report wrong figures: what it breaks is said).
        #[arg(long)]
        force: bool,
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

/// The value a write of `value` into field `f` of `reg` writes, from the register's value
/// `before`: the other fields kept, but never a write-1-to-act bit (start, stop, clear): the
/// card acts on every 1 written there, so writing back one read (an older card kept them)
/// would start, stop or clear again.
pub(crate) fn field_write(reg: &RegDef, f: &crate::regmap::FieldDef, before: u64, value: u64) -> u64 {
    (before & !f.mask() & !reg.actions) | (value << f.shift)
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

/// The registers of accelerator `dut` from `map` (those `--regs` added), by their offset in
/// its window: a trace's header carries them so that the spy's conversions name the host's
/// accesses to them (`card.slot_registers`, traces/FORMAT.md).
pub(crate) fn slot_registers(map: &RegMap, dut: &str) -> Vec<tlpx_trace::SlotRegister> {
    map.registers
        .iter()
        .filter(|r| r.owner == crate::regmap::Owner::Dut && r.region == dut)
        .filter_map(|r| {
            let offset = r.offset.checked_sub(tlpx_regs::constants::SLOT_WINDOW_BASE)?;
            Some(tlpx_trace::SlotRegister { name: r.name.clone(), offset, size_bits: r.size_bits })
        })
        .collect()
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

// Leases of writes --------------------------------------------------------------------------------

/// The region of tlpx's map at BAR0 offset `offset` (tlpx-internal), for a write given by
/// number: the CSR page it is in, or the window (`dut` for the slot's, `cpu_sram`, `pio`).
fn region_at(offset: u64) -> Option<(&'static str, bool)> {
    use tlpx_regs::constants as c;
    if (c::SLOT_WINDOW_BASE..c::SLOT_WINDOW_BASE + c::SLOT_WINDOW_MAX).contains(&offset) {
        return Some(("slot window", true));
    }
    if (c::CPU_SRAM_BASE..c::CPU_SRAM_BASE + c::CPU_SRAM_SIZE).contains(&offset) {
        return Some(("cpu_sram", false));
    }
    // CSR pages (0x800 bytes each) below the PIO window.
    let page = offset & !0x7ff;
    tlpx_regs::ALL
        .iter()
        .find(|r| r.offset & !0x7ff == page && page < c::PIO_WINDOW_BASE)
        .map(|r| (r.region, tlpx_regs::DUT_REGIONS.contains(&r.region)))
}

/// The blocks whose leases cover a write into `reg`: the block of its region; for the
/// accelerator's registers (its window, its CSR banks) the slot's, and rule 30's own lease too
/// for rule 30's (`tlpx rule30` holds that one).
pub(crate) fn write_blocks(reg: &RegDef) -> Vec<Block> {
    let (region, dut) = if reg.region == "bar0" {
        match region_at(reg.offset) {
            Some((r, dut)) => (r, dut),
            None => return Vec::new(),
        }
    } else {
        let dut = reg.owner == crate::regmap::Owner::Dut || tlpx_regs::DUT_REGIONS.contains(&reg.region.as_str());
        (reg.region.as_str(), dut)
    };
    let mut blocks = Vec::new();
    if dut {
        blocks.push(Block::Slot);
    }
    if let Some(b) = Block::of_region(region, false) {
        if !blocks.contains(&b) {
            blocks.push(b);
        }
    }
    blocks
}

/// Before a write of `what` into `blocks`: a block a live process owns is refused (busy, its
/// owner named) unless `force`, which writes anyway and says what it breaks; a free block (or
/// one whose owner is gone) is claimed for this process, so that nothing the write starts
/// runs without an owner. Returns the blocks claimed here (give them to [`end_write_leases`]).
pub(crate) fn write_leases(card: &mut Card, blocks: &[Block], what: &str, force: bool) -> anyhow::Result<Vec<Block>> {
    let mut claimed = Vec::new();
    for &block in blocks {
        if !card.has_feature(block.feature()) || card.holds(block) {
            continue;
        }
        let owner = lease::owner(card, block)?;
        match owner {
            Some(o) if o.process != OwnerProcess::Gone => {
                if !force {
                    return Err(anyhow::Error::new(tlpx_device::DeviceError::Busy { block, owner: o.describe() }).context(format!(
                        "refusing to write {what} into {}, which another process owns; --force writes anyway (it breaks {})",
                        block.title(),
                        block.force_breaks()
                    )));
                }
                eprintln!(
                    "tlpx: warning: --force: writing {what} into {} while {} owns it: this breaks {}",
                    block.title(),
                    o.describe(),
                    block.force_breaks()
                );
            }
            _ => {
                card.claim(block)?;
                claimed.push(block);
            }
        }
    }
    for note in card.take_notes() {
        eprintln!("tlpx: note: {note}");
    }
    Ok(claimed)
}

/// Gives back the leases [`write_leases`] claimed. A job the write started ends with them
/// (the card ends a block's job when its lease is released; the slot fences its DMA): said,
/// since nothing this process does keeps it running. Returns the notes said.
pub(crate) fn end_write_leases(card: &mut Card, claimed: &[Block]) -> anyhow::Result<Vec<String>> {
    let mut notes = Vec::new();
    for &block in claimed {
        // The CPU runs on after its lease's release (the firmware stays): nothing ends.
        let ends = block != Block::Cpu && lease::job_running(card, block)?;
        card.release(block)?;
        if ends {
            let how = match block {
                Block::Slot => "the slot fenced its DMA until the accelerator is quiet",
                Block::Spy => "the spy halted",
                _ => "the card stopped it",
            };
            let note = format!(
                "{} was working when this command ended: tlpx held its lease for the write only, and at its release {how} \
                 (nothing runs without an owner; a session that owns it: tlpx slot run, tlpx bw, tlpx spy capture, ...)",
                block.title()
            );
            eprintln!("tlpx: note: {note}");
            notes.push(note);
        }
    }
    Ok(notes)
}

pub(crate) fn flush(card: &mut Card) -> anyhow::Result<()> {
    // A read so the posted write has reached the card when this returns.
    bar_read(card, tlpx_regs::ident::MAGIC.offset, Width::W32).map(|_| ())
}

pub fn run(cmd: &Cmd, device: &str, json: bool) -> anyhow::Result<ExitCode> {
    match &cmd.action {
        Action::List { region } => list(cmd.regs.as_ref(), region.as_deref(), json),
        Action::Dump { region } => dump(cmd.regs.as_ref(), region.as_deref(), device, json),
        Action::Read { register } => read(cmd.regs.as_ref(), register, device, json),
        Action::Write { register, value, force } => write(cmd.regs.as_ref(), register, value, *force, device, json),
        Action::Watch { registers, interval, count, force } => {
            watch_registers(cmd.regs.as_ref(), registers, interval, *count, *force, device, json)
        }
    }
}

/// `reg list`: the registers of a region (or all), with offsets, sizes and fields; reads nothing.
fn list(regs: Option<&PathBuf>, region: Option<&str>, json: bool) -> anyhow::Result<ExitCode> {
    let loaded = load_map(regs)?;
    // A card whose DUT sits at BAR0 0 (placement bar0, from --regs): the host sees the
    // DUT's registers at their window offset and tlpx's map at RELOCATED_TLPX_BASE.
    let relocated = loaded.dut.as_ref().and_then(|(_, d)| d.placement.as_deref()) == Some("bar0");
    let bar0 = |r: &RegDef| -> u64 {
        use tlpx_regs::constants::{RELOCATED_TLPX_BASE, SLOT_WINDOW_BASE};
        match (relocated, r.owner) {
            (false, _) => r.offset,
            (true, crate::regmap::Owner::Dut) if r.offset >= SLOT_WINDOW_BASE => r.offset - SLOT_WINDOW_BASE,
            (true, _) => r.offset + RELOCATED_TLPX_BASE,
        }
    };
    let map = loaded.map;
    let rows: Vec<&RegDef> = map.registers.iter().filter(|r| region.is_none_or(|want| r.region == want)).collect();
    if rows.is_empty() {
        bail!("no region {:?} in the register map; regions: {}", region.unwrap_or(""), map.regions().join(", "));
    }
    if json {
        let v: Vec<RegisterListing> = rows.iter().map(|r| RegisterListing::of(r, bar0(r))).collect();
        print_json(&v)?;
    } else {
        if relocated {
            crate::outln!(
                "# offsets are BAR0 as the host sees this card (placement bar0, from --regs): the DUT's registers at BAR0 0, \
                 tlpx's map at {:#x}; a number given to `tlpx reg read` is tlpx's own offset (BAR0 - {:#x})",
                tlpx_regs::constants::RELOCATED_TLPX_BASE,
                tlpx_regs::constants::RELOCATED_TLPX_BASE
            );
        }
        for r in rows {
            crate::outln!("{:#07x}  {:<40} {:>2} bits {}  {}", bar0(r), r.full_name(), r.size_bits, r.access.name(), r.description);
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

/// `reg dump`: every register of a region (or of the card) read, but those whose read acts.
fn dump(regs: Option<&PathBuf>, region: Option<&str>, device: &str, json: bool) -> anyhow::Result<ExitCode> {
    let loaded = load_map(regs)?;
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
        .filter(|r| region.is_none_or(|want| r.region == want))
        .filter(|r| cpu || !tlpx_regs::CPU_REGIONS.contains(&r.region.as_str()))
        .collect();
    if rows.is_empty() {
        bail!("no region {:?} on this card; regions: {}", region.unwrap_or(""), map.regions().join(", "));
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
                Ok(v) => DumpRow { name, not_read: None, offset: *offset, value: Some(v) },
                Err(what) => DumpRow { name, not_read: Some(what), offset: *offset, value: None },
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

/// `reg read`: a register with its fields decoded, or one field.
fn read(regs: Option<&PathBuf>, register: &str, device: &str, json: bool) -> anyhow::Result<ExitCode> {
    // Names first: a bad name is an error before any card is opened.
    let loaded = load_map(regs)?;
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
                print_json(&FieldRead {
                    name: target.name(),
                    offset: reg.offset,
                    register: reg.full_name(),
                    shift: f.shift,
                    value: v,
                    value_name: f.value_name(v),
                    width: f.width,
                })?;
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
                        print_json(&RegisterRead {
                            bits: reg.size_bits,
                            fields: FieldValue::all(&reg, v),
                            hex,
                            name: reg.full_name(),
                            offset: reg.offset,
                            value: Some(v),
                        })?;
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
                        print_json(&RegisterRead {
                            bits: reg.size_bits,
                            fields: Vec::new(),
                            hex,
                            name: reg.full_name(),
                            offset: reg.offset,
                            value: None,
                        })?;
                    } else {
                        crate::outln!("{} = {hex}", reg.full_name());
                    }
                }
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// `reg write`: a register or a field (read-modify-write), under the written block's lease.
fn write(regs: Option<&PathBuf>, register: &str, value: &str, force: bool, device: &str, json: bool) -> anyhow::Result<ExitCode> {
    // Names, access and value are checked before any card is opened.
    let loaded = load_map(regs)?;
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
    let claimed = write_leases(&mut session.card, &write_blocks(&reg), &target.name(), force)?;
    let written = match &target {
        Target::Register(_) => {
            write_number(&mut session.card, &reg, value)?;
            WriteReport { name: reg.full_name(), offset: reg.offset, written: value, ..WriteReport::default() }
        }
        Target::Field(_, f) => {
            let before = read_number(&mut session.card, &reg)?;
            let after = field_write(&reg, f, before, value);
            write_number(&mut session.card, &reg, after)?;
            WriteReport {
                before: Some(before),
                field_value: Some(value),
                name: target.name(),
                offset: reg.offset,
                register: Some(reg.full_name()),
                written: after,
                ..WriteReport::default()
            }
        }
    };
    flush(&mut session.card)?;
    let notes = end_write_leases(&mut session.card, &claimed)?;
    if json {
        let doc = WriteReport { leases_held: claimed.iter().map(|b| b.name()).collect(), notes, ..written };
        print_json(&doc)?;
    }
    Ok(ExitCode::SUCCESS)
}

/// `reg watch`: registers polled every `interval` and printed as they change.
fn watch_registers(
    regs: Option<&PathBuf>,
    registers: &[String],
    interval: &str,
    count: Option<u64>,
    force: bool,
    device: &str,
    json: bool,
) -> anyhow::Result<ExitCode> {
    let seconds = crate::sizes::parse_duration("--interval", interval).map_err(|e| anyhow!(e))?;
    if seconds < 1e-3 {
        bail!("--interval {interval} is shorter than 1ms: give 1ms or more (e.g. 200ms)");
    }
    let loaded = load_map(regs)?;
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
    watch(&mut session, &targets, Duration::from_secs_f64(seconds), count, json)
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
                let change = WatchChange {
                    card_cycles: cycles,
                    card_seconds: cycles as f64 / clock_hz,
                    fields_changed: &changed,
                    name: t.name(),
                    previous: prev.as_ref().map(|p| p.1),
                    text: &now.0,
                    value: now.1,
                    wall_utc: &wall_utc,
                };
                crate::outln!("{}", serde_json::to_string(&change)?);
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
