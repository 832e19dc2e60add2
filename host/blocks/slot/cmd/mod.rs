//! `tlpx slot run`: exercise the accelerator in the card's slot with a short line-based
//! session script (docs/registers-cli.md, "Exercising the accelerator: tlpx slot run").
//!
//! ```text
//! tlpx slot run --regs build/card/dw64-pci_epf_test/csr.json accelerators/pci_epf_test/copy.slot --set size=1025
//! tlpx slot run --regs FILE -e 'write pci_epf_test.magic 0x1234' -e 'expect pci_epf_test.magic 0x1234'
//! ```
//!
//! The script names registers as `tlpx reg` does ([`crate::regmap`]), allocates DMA buffers
//! through the backend's `alloc_dma`, waits for the slot's MSI, and checks registers and
//! buffers. Nothing here knows any accelerator: what a script does is the script's. The whole
//! script is parsed and checked (names, access, value widths, buffers) before the card is
//! opened, so a bad line never leaves half a session on the card.
//!
//! Ownership of host memory: a buffer is freed on every exit path, but the card may still
//! be moving data into it if the script started a transfer and did not wait for its end. No
//! generic "stop" exists for an accelerator, so before freeing after such a script (or an
//! error after a write) the run waits for the slot's DMA counters to stand still, and says
//! which lines wrote to the card after the last completed wait.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{anyhow, bail};
use clap::{Args, Subcommand};
use rand::{RngCore, SeedableRng};
use serde::Serialize;
use tlpx_device::card::{Card, Feature};
use tlpx_device::lease::{self, Block, OwnerProcess};
use tlpx_device::msi;
use tlpx_device::spy::{Capture, Filters, Trigger, RECORD_BYTES};
use tlpx_device::DmaBuffer;
use tlpx_regs::{pcie_msi, slot as slot_regs};
use tlpx_trace::{Footer, TraceWriter};

use crate::cmd::reg::{self, RegValue};
use crate::regmap::{parse_number, Access, RegDef, RegMap, Target};
use crate::session::Session;

mod card;
mod json;
mod script;

use card::{
    crc32, own_the_slot, slot_bit, slot_busy, slot_counters, start_spy, Buffers, Owned, SlotCounters, SpySession, MSI_WAIT_MASK,
    QUIET_SLICES,
};
use json::{CheckedScript, Failure, Ownership, RunReport, SpyTrace, StepField, StepRecord, Variable};
use script::{parse, parse_set, read_lines, AddrPart, Fill, Op, Parser, Script, Step, Value};

/// Largest script read (bytes): a session script is tens of lines; 1 MiB stops an endless
/// input at once.
pub const MAX_SCRIPT_BYTES: u64 = 1 << 20;
/// Largest buffer one `buffer` line may ask for. The DUT's size registers are 32-bit and the
/// simulator's host memory is 64 MiB by default; 256 MiB is beyond any test transfer.
pub const MAX_BUFFER_BYTES: u64 = 256 << 20;
/// Spy ring for `--spy` (records of 32 bytes: 2 MiB). Polled after every line and every
/// slice of a wait, so a few MiB of DMA per wait slice fit.
const SPY_RING_RECORDS: u32 = 1 << 16;
/// Card time between two polls of the spy's ring during a wait.
const WAIT_SLICE: Duration = Duration::from_micros(50);
/// `dump NAME` without a length shows at most this many bytes.
const DUMP_DEFAULT: usize = 256;

#[derive(Debug, Args)]
pub struct Cmd {
    #[command(subcommand)]
    action: Action,
}

#[derive(Debug, Subcommand)]
enum Action {
    /// Run a session script against the accelerator in the slot: buffers, register writes
    /// and reads, waits for its interrupt, checks.
    Run(RunArgs),
    /// Parse and check a session script without a card (names, access, values, buffers).
    Check(RunArgs),
}

#[derive(Debug, Args)]
pub struct RunArgs {
    /// The session script (e.g. accelerators/pci_epf_test/copy.slot); lines of `-e` run after it.
    script: Option<PathBuf>,
    /// A script line (repeatable; after the file's lines, numbered `-e 1`, `-e 2`, ...).
    #[arg(short = 'e', long = "line", value_name = "LINE", allow_hyphen_values = true)]
    lines: Vec<String>,
    /// A script variable: `$NAME` in the script is VALUE (repeatable; overrides `default`).
    #[arg(long = "set", value_name = "NAME=VALUE")]
    set: Vec<String>,
    /// A card build's csr.json (build/card/<name>/csr.json): the accelerator's registers by
    /// name, as `tlpx reg --regs`; checked against the card's slot.dut_map_hash.
    #[arg(long, value_name = "FILE")]
    regs: Option<PathBuf>,
    /// Capture the whole session with the spy into this trace (traces/FORMAT.md).
    #[arg(long, value_name = "OUT.tlpx")]
    spy: Option<PathBuf>,
    /// Seed of `random` buffers [default: from the clock; printed, so a run can be repeated].
    #[arg(long, value_parser = crate::args::whole(0u64, u64::MAX), allow_negative_numbers = true)]
    seed: Option<u64>,
    /// Run even when another process owns the slot (or a block a `write` line writes into):
    /// the other session's command and checks may then fail (what it breaks is said).
    #[arg(long)]
    force: bool,
}

// Running ----------------------------------------------------------------------------------

/// A check that failed (exit status 1), as opposed to an error of the card or the input.
#[derive(Debug)]
struct CheckFailed(String);

impl std::fmt::Display for CheckFailed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for CheckFailed {}

/// What the end of a run leaves: its notes, the slot's counters after it, the MSIs nobody
/// waited for, and the spy's trace (path, records written and lost).
struct Ending {
    notes: Vec<String>,
    after: anyhow::Result<SlotCounters>,
    unclaimed: u64,
    trace: Option<(PathBuf, (u64, u64))>,
}

struct Runner<'a> {
    card: &'a mut Card,
    script: &'a Script,
    buffers: Buffers,
    spy: Option<SpySession>,
    json: bool,
    seed: u64,
    /// Every step's JSON record.
    records: Vec<StepRecord>,
    msis: u64,
    /// Places of the lines that wrote to the card since the last completed wait.
    unwaited: Vec<String>,
}

impl Runner<'_> {
    fn say(&self, line: std::fmt::Arguments<'_>) {
        if !self.json {
            crate::outln!("{line}");
        }
    }

    fn value(&self, v: &Value) -> anyhow::Result<u64> {
        Ok(match *v {
            Value::Number(n) => n,
            Value::Addr(i, part) => {
                let a = self.buffers.get(i).bus_addr;
                match part {
                    AddrPart::Full => a,
                    AddrPart::Lo => a & 0xFFFF_FFFF,
                    AddrPart::Hi => a >> 32,
                }
            }
            Value::Crc { buffer, inverted } => {
                let c = crc32(&self.buffers.bytes(buffer, self.buffers.get(buffer).len)?);
                u64::from(if inverted { !c } else { c })
            }
            Value::Size(i) => self.buffers.get(i).len as u64,
        })
    }

    fn read_target(&mut self, target: &Target) -> anyhow::Result<u64> {
        let reg = target.register();
        let v = match reg::read_value(self.card, reg)? {
            RegValue::Number(v) => v,
            RegValue::Words(_) => bail!("{} is wider than 64 bits", reg.full_name()),
        };
        Ok(match target {
            Target::Field(_, f) => f.get(v),
            Target::Register(_) => v,
        })
    }

    fn show(target: &Target, v: u64) -> String {
        match target {
            Target::Field(_, f) => f.show(v),
            Target::Register(r) => format!("{} ({v})", RegValue::Number(v).hex(r)),
        }
    }

    fn step(&mut self, step: &Step) -> anyhow::Result<StepRecord> {
        let mut rec = StepRecord { line: step.place.clone(), run: step.expanded.clone(), text: step.text.clone(), ..StepRecord::default() };
        match &step.op {
            Op::Buffer { name, size, fill } => {
                // Allocated and filled before the session touched the card (Buffers::allocate).
                let i = self.buffers.index(name)?;
                let bus_addr = self.buffers.get(i).bus_addr;
                let crc = self.buffers.crcs[i];
                let fill_text = match fill {
                    Fill::Random => format!("random (seed {})", self.seed),
                    Fill::Zero => "zero".into(),
                    Fill::Byte(b) => format!("0x{b:02x}"),
                };
                self.say(format_args!("    buffer {name}: {size} bytes at bus 0x{bus_addr:x}, {fill_text}, crc32 0x{crc:08x}"));
                rec.bus_addr = Some(bus_addr);
                rec.size = Some(*size);
                rec.crc32 = Some(crc);
            }
            Op::Write { target, value } => {
                let reg = target.register().clone();
                let v = self.value(value)?;
                let bits = Parser::bits(target);
                if bits < 64 && v >> bits != 0 {
                    bail!("{v:#x} does not fit {}, {bits} bits wide", target.name());
                }
                let written = match target {
                    Target::Register(_) => v,
                    Target::Field(_, f) => reg::field_write(&reg, f, reg::read_number(self.card, &reg)?, v),
                };
                reg::write_number(self.card, &reg, written)?;
                reg::flush(self.card)?;
                self.unwaited.push(step.place.clone());
                self.say(format_args!("    {} <- {}", target.name(), Runner::show(target, v)));
                rec.value = Some(v);
                rec.written = Some(written);
            }
            Op::Read { target } => self.read_step(target, &mut rec)?,
            Op::WaitIrq { timeout } => self.wait_irq(timeout, &mut rec)?,
            Op::WaitReg { target, value, timeout } => self.wait_reg(target, value, timeout, &mut rec)?,
            Op::Expect { target, value } => {
                let want = self.value(value)?;
                let found = self.read_target(target)?;
                rec.expected = Some(want);
                rec.found = Some(found);
                if found != want {
                    return Err(CheckFailed(format!(
                        "expected {} = {}, found {}",
                        target.name(),
                        Runner::show(target, want),
                        Runner::show(target, found)
                    ))
                    .into());
                }
                self.say(format_args!("    ok: {} = {}", target.name(), Runner::show(target, found)));
            }
            Op::Compare { a, b, len } => {
                let (x, y) = (self.buffers.bytes(*a, *len)?, self.buffers.bytes(*b, *len)?);
                let (na, nb) = (&self.buffers.held[*a].0, &self.buffers.held[*b].0);
                if let Some(i) = x.iter().zip(&y).position(|(p, q)| p != q) {
                    let differ = x.iter().zip(&y).filter(|(p, q)| p != q).count();
                    return Err(CheckFailed(format!(
                        "{na} and {nb} differ at offset {i} (0x{i:x}): {na} has 0x{:02x}, {nb} 0x{:02x}; {differ} of {len} bytes differ",
                        x[i], y[i]
                    ))
                    .into());
                }
                self.say(format_args!("    ok: {na} and {nb} are equal ({len} bytes)"));
            }
            Op::Crc32 { buffer } => {
                let c = crc32(&self.buffers.bytes(*buffer, self.buffers.get(*buffer).len)?);
                self.say(format_args!("    crc32({}) = 0x{c:08x} (~crc32 0x{:08x})", self.buffers.held[*buffer].0, !c));
                rec.crc32 = Some(c);
            }
            Op::Dump { buffer, len } => {
                let bytes = self.buffers.bytes(*buffer, *len)?;
                let total = self.buffers.get(*buffer).len;
                self.say(format_args!("    {} ({len} of {total} bytes):", self.buffers.held[*buffer].0));
                for (row, chunk) in bytes.chunks(16).enumerate() {
                    let hex: Vec<String> = chunk.iter().map(|b| format!("{b:02x}")).collect();
                    self.say(format_args!("    {:08x}  {}", row * 16, hex.join(" ")));
                }
                rec.hex = Some(bytes.iter().map(|b| format!("{b:02x}")).collect::<String>());
            }
        }
        Ok(rec)
    }

    /// `read NAME`: the register (with its fields) or field, into the log and `rec`.
    fn read_step(&mut self, target: &Target, rec: &mut StepRecord) -> anyhow::Result<()> {
        let v = self.read_target(target)?;
        match target {
            Target::Register(r) => {
                self.say(format_args!("    {} = {}", r.full_name(), Runner::show(target, v)));
                let w = r.fields.iter().map(|f| f.name.len()).max().unwrap_or(0);
                for f in &r.fields {
                    self.say(format_args!("      {:<w$} = {}", f.name, f.show(f.get(v))));
                }
                rec.fields = Some(
                    r.fields
                        .iter()
                        .map(|f| StepField { name: f.name.clone(), value: f.get(v), value_name: f.value_name(f.get(v)).map(str::to_owned) })
                        .collect(),
                );
            }
            Target::Field(..) => self.say(format_args!("    {} = {}", target.name(), Runner::show(target, v))),
        }
        rec.value = Some(v);
        Ok(())
    }

    /// `wait irq`: the slot's MSI within `timeout` of card time, polling the spy meanwhile.
    fn wait_irq(&mut self, timeout: &Duration, rec: &mut StepRecord) -> anyhow::Result<()> {
        let start = self.card.cycles()?;
        let deadline = start + (timeout.as_secs_f64() * f64::from(self.card.identity().clock_hz)) as u64;
        loop {
            let got = self.card.wait_interrupt_card_time(MSI_WAIT_MASK, WAIT_SLICE.min(*timeout))?;
            if let Some(spy) = self.spy.as_mut() {
                spy.poll(self.card)?;
            }
            // The slot's latched bit says its MSI came, also when another process's wait
            // took the interrupt itself (the simulator gives each to one waiter); with no
            // other source enabled, every MSI is the slot's (two share one latched bit).
            let vector = self.card.read(pcie_msi::VECTOR)?;
            if got.is_some() || vector & slot_bit() != 0 {
                let enable = self.card.read(pcie_msi::ENABLE)?;
                if vector & slot_bit() != 0 || (got.is_some() && enable & !slot_bit() == 0) {
                    self.card.write(pcie_msi::CLEAR, slot_bit())?;
                    self.msis += 1;
                    let after = self.card.cycles()?.saturating_sub(start);
                    let us = after as f64 / f64::from(self.card.identity().clock_hz) * 1e6;
                    self.say(format_args!("    MSI of the slot after {us:.2} us of card time (pcie_msi.vector 0x{vector:x})"));
                    rec.card_us = Some(us);
                    break;
                }
            }
            if self.card.cycles()? >= deadline {
                return Err(crate::exit::card_failure(format!(
                    "no interrupt from the slot within {timeout:?} of card time (pcie_msi.vector 0x{:x}, enable 0x{:x})",
                    self.card.read(pcie_msi::VECTOR)?,
                    self.card.read(pcie_msi::ENABLE)?
                )));
            }
        }
        self.unwaited.clear();
        Ok(())
    }

    /// `wait NAME VALUE`: the register or field reads `value` within `timeout` of card time.
    fn wait_reg(&mut self, target: &Target, value: &Value, timeout: &Duration, rec: &mut StepRecord) -> anyhow::Result<()> {
        let want = self.value(value)?;
        let start = self.card.cycles()?;
        let deadline = start + (timeout.as_secs_f64() * f64::from(self.card.identity().clock_hz)) as u64;
        loop {
            let v = self.read_target(target)?;
            if v == want {
                let us = self.card.cycles()?.saturating_sub(start) as f64 / f64::from(self.card.identity().clock_hz) * 1e6;
                self.say(format_args!("    {} = {} after {us:.2} us of card time", target.name(), Runner::show(target, v)));
                rec.card_us = Some(us);
                break;
            }
            if self.card.cycles()? >= deadline {
                return Err(crate::exit::card_failure(format!(
                    "{} did not become {} within {timeout:?} of card time: it reads {}",
                    target.name(),
                    Runner::show(target, want),
                    Runner::show(target, v)
                )));
            }
            self.card.idle(WAIT_SLICE)?;
            if let Some(spy) = self.spy.as_mut() {
                spy.poll(self.card)?;
            }
        }
        self.unwaited.clear();
        Ok(())
    }

    /// Runs the script's lines in order until one fails, the output is closed or Ctrl-C; the
    /// failure (with its place) if any.
    fn run_steps(&mut self) -> Option<(String, anyhow::Error)> {
        let mut failure: Option<(String, anyhow::Error)> = None;
        let script = self.script;
        for step in &script.steps {
            if step.expanded == step.text {
                self.say(format_args!("{:<16} {}", step.place, step.text));
            } else {
                self.say(format_args!("{:<16} {}    # {}", step.place, step.text, step.expanded));
            }
            let result = self.step(step);
            if let Some(spy) = self.spy.as_mut() {
                if let Err(e) = spy.poll(self.card) {
                    failure.get_or_insert((step.place.clone(), e));
                }
            }
            match result {
                Ok(rec) => self.records.push(rec),
                Err(e) => {
                    failure = Some((format!("{} `{}`", step.place, step.text), e));
                    break;
                }
            }
            if crate::output::output_closed() {
                break;
            }
            if crate::progress::stop_requested() {
                failure = Some((format!("after {}", step.place), anyhow::Error::new(tlpx_device::DeviceError::Interrupted)));
                break;
            }
        }
        failure
    }

    /// The end of every run, whatever happened: the accelerator quiet before its buffers are
    /// freed, the trace finished, the MSI enable as the session found it, the leases given back.
    fn finish(&mut self, owned: &Owned, waits_irq: bool) -> Ending {
        let mut notes = Vec::new();
        match self.quiesce(owned.holds_slot) {
            Ok(None) => {}
            Ok(Some(what)) if self.unwaited.is_empty() => notes.push(what),
            Ok(Some(what)) => notes.push(format!("{} wrote to the card after the last completed wait; {what}", self.unwaited.join(", "))),
            Err(e) => notes
                .push(format!("whether the accelerator was quiet could not be read ({e:#}): it may still use buffers that are now freed")),
        }
        let after = slot_counters(self.card);
        // MSIs that came and nobody waited for (a second interrupt of one command).
        let mut unclaimed = 0u64;
        if waits_irq {
            while let Ok(Some(_)) = self.card.device().wait_interrupt(MSI_WAIT_MASK, Duration::ZERO) {
                unclaimed += 1;
            }
        }
        let mut trace = None;
        if let Some(spy) = self.spy.take() {
            let path = spy.path.clone();
            match spy.finish(self.card) {
                Ok(t) => trace = Some((path, t)),
                Err(e) => notes.push(format!("the spy capture did not end cleanly: {e:#}")),
            }
        }
        let freed_errors = self.buffers.free(self.card);
        if !freed_errors.is_empty() {
            notes.push(format!("freeing buffers failed: {}", freed_errors.join("; ")));
        }
        if let Err(e) = owned.restore(self.card) {
            notes.push(format!("the slot's MSI enable could not be put back as the session found it: {e:#}"));
        }
        Ending { notes, after, unclaimed, trace }
    }

    /// Waits at most `slices` wait slices (card time) for the accelerator to be quiet:
    /// `slot.status.busy` low (the DUT idle, its DMA and interrupt done). True when it is.
    fn wait_quiet(&mut self, slices: u32) -> anyhow::Result<bool> {
        for _ in 0..slices {
            if !slot_busy(self.card)? {
                return Ok(true);
            }
            // The device's own idle: a Ctrl-C that ended the run must not end this bounded
            // wait (the leases are refreshed between slices all the same).
            self.card.keep_leases()?;
            self.card.device().idle(WAIT_SLICE)?;
            if let Some(spy) = self.spy.as_mut() {
                spy.poll(self.card)?;
            }
        }
        slot_busy(self.card).map(|b| !b)
    }

    /// Before the buffers are freed: the accelerator quiet, so nothing of it reaches them
    /// after. A command still running gets `QUIET_SLICES` of card time to end; then the slot's
    /// lease is given back, which fences its DMA (the card refuses and cuts short every request
    /// of the slot's mover until the DUT is quiet), and it gets as long again. Returns what
    /// happened, for a note; None when it was quiet at once.
    fn quiesce(&mut self, holds_slot: bool) -> anyhow::Result<Option<String>> {
        if !slot_busy(self.card)? {
            return Ok(None);
        }
        if self.wait_quiet(QUIET_SLICES)? {
            return Ok(Some(
                "the accelerator was still working when the session ended: it finished (slot.status.busy 0) before the buffers were freed"
                    .into(),
            ));
        }
        if !holds_slot {
            return Ok(Some("the accelerator is still working (slot.status.busy 1) and this session does not own the slot (--force): its buffers are freed under it".into()));
        }
        self.card.release(Block::Slot)?;
        let fenced = self.card.read(slot_regs::DMA_FENCED)?;
        if self.wait_quiet(QUIET_SLICES)? {
            return Ok(Some(format!(
                "the accelerator was still working {} of card time after the session ended: the slot's lease was given back, which fenced its DMA, and it became quiet (slot.dma_fenced {fenced}) before the buffers were freed",
                crate::output::ns_text((WAIT_SLICE * QUIET_SLICES).as_nanos() as f64)
            )));
        }
        Ok(Some("the accelerator is still busy (slot.status.busy 1) with its DMA fenced: nothing of it reaches the freed buffers, but it holds a command it does not finish".into()))
    }
}

pub fn run(cmd: &Cmd, device: &str, json: bool) -> anyhow::Result<ExitCode> {
    match &cmd.action {
        Action::Check(args) => {
            let (script, _) = prepare(args)?;
            if json {
                crate::output::print_json(&CheckedScript {
                    buffers: &script.buffers,
                    steps: script.steps.len(),
                    variables: &script.variables,
                })?;
            } else {
                crate::outln!("{} lines to run, buffers: {}; no errors", script.steps.len(), buffer_list(&script));
            }
            Ok(ExitCode::SUCCESS)
        }
        Action::Run(args) => run_script(args, device, json),
    }
}

fn buffer_list(script: &Script) -> String {
    if script.buffers.is_empty() {
        return "none".into();
    }
    script.buffers.iter().map(|(n, s)| format!("{n} ({s} bytes)")).collect::<Vec<_>>().join(", ")
}

fn prepare(args: &RunArgs) -> anyhow::Result<(Script, reg::Loaded)> {
    let set = args.set.iter().map(|s| parse_set(s)).collect::<anyhow::Result<Vec<_>>>()?;
    let lines = read_lines(args)?;
    let loaded = reg::load_map(args.regs.as_ref())?;
    let script = parse(&lines, &set, &loaded.map, args.regs.is_some())?;
    Ok((script, loaded))
}

fn run_script(args: &RunArgs, device: &str, json: bool) -> anyhow::Result<ExitCode> {
    // Everything about the input first: nothing reaches the card from a bad script.
    let (script, loaded) = prepare(args)?;
    if let Some(path) = &args.spy {
        crate::args::check_output_file("--spy", path)?;
    }
    let seed = args.seed.unwrap_or_else(|| {
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos() as u64 & 0xFFFF_FFFF)
    });
    let mut session = Session::open_observer(device)?;
    let targets: Vec<&RegDef> = script
        .steps
        .iter()
        .filter_map(|s| match &s.op {
            Op::Write { target, .. } | Op::Read { target } | Op::Expect { target, .. } | Op::WaitReg { target, .. } => {
                Some(target.register())
            }
            _ => None,
        })
        .collect();
    loaded.check(&mut session.card, &targets)?;
    let info = crate::slot::read(&mut session.card)?;
    let waits_irq = script.steps.iter().any(|s| matches!(s.op, Op::WaitIrq { .. }));
    let source = args.script.as_ref().map_or_else(|| "-e lines".to_string(), |p| p.display().to_string());
    if !json {
        crate::outln!("# {}", session.describe());
        crate::outln!(
            "# slot: {} {} (placement {}); script {source}, {} lines; seed {seed}{}",
            info.dut_name,
            info.dut_version,
            info.placement,
            script.steps.len(),
            script.variables.iter().map(|(n, v)| format!("; ${n} = {v}")).collect::<String>()
        );
    }
    // Ctrl-C ends the run between lines (or a wait within a slice), so the buffers are freed.
    crate::progress::install_stop_handler();
    let card = &mut session.card;
    // Host memory first: every buffer is allocated and filled before anything is written to
    // the card, so a backend without per-line allocation (LitePCIe's driver) or a host out of
    // DMA memory ends the run with the card untouched.
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
    let mut buffers = Buffers::allocate(card, &script, &mut rng)?;
    let owned = match own_the_slot(card, &script, args.force, waits_irq) {
        Ok(o) => o,
        Err(e) => {
            let _ = buffers.free(card);
            return Err(e);
        }
    };
    for n in &owned.notes {
        if !json {
            crate::outln!("# {n}");
        }
    }
    let spy = match &args.spy {
        Some(path) => match start_spy(&mut session, path, &loaded, &info) {
            Ok(spy) => Some(spy),
            Err(e) => {
                let card = &mut session.card;
                let _ = buffers.free(card);
                let _ = owned.restore(card);
                return Err(e);
            }
        },
        None => None,
    };
    let card = &mut session.card;
    let before = slot_counters(card)?;
    let mut runner = Runner { card, script: &script, buffers, spy, json, seed, records: Vec::new(), msis: 0, unwaited: Vec::new() };
    let failure = runner.run_steps();
    let Ending { notes, after, unclaimed, trace } = runner.finish(&owned, waits_irq);
    let delta = after.as_ref().map(|a| a.since(&before)).ok();
    if json {
        let doc = RunReport {
            failed: failure.as_ref().map(|(place, e)| Failure { error: format!("{e:#}"), line: place.clone() }),
            msis: runner.msis,
            msis_not_waited_for: unclaimed,
            notes: owned.notes.iter().chain(&notes).collect(),
            ok: failure.is_none(),
            owned: Ownership { blocks: owned.others.iter().map(|b| b.name()).collect(), slot: owned.holds_slot },
            seed,
            slot: &info,
            slot_counters: delta,
            spy: trace.as_ref().map(|(p, (w, l))| SpyTrace { output: p.display().to_string(), records_lost: *l, records_written: *w }),
            steps: &runner.records,
            variables: script.variables.iter().map(|(name, value)| Variable { name, value }).collect(),
        };
        crate::output::print_json(&doc)?;
    } else {
        if let Some(d) = delta {
            crate::outln!(
                "# slot counters over the session: irqs +{}, DMA reads +{} ({} bytes), writes +{} ({} bytes), errors +{}; MSIs waited for {}, not waited for {unclaimed}",
                d.irqs,
                d.dma_reads,
                d.dma_read_bytes,
                d.dma_writes,
                d.dma_write_bytes,
                d.dma_errors,
                runner.msis
            );
        }
        if let Some((p, (w, l))) = &trace {
            crate::outln!("# spy: {w} records written to {}{}", p.display(), if *l > 0 { format!(", {l} LOST") } else { String::new() });
        }
    }
    for n in &notes {
        eprintln!("tlpx: note: {n}");
    }
    exit_status(failure, trace.as_ref())
}

/// The exit status of a run: 1 for a failed check or records the spy lost, the error of any
/// other failure with its place.
fn exit_status(failure: Option<(String, anyhow::Error)>, trace: Option<&(PathBuf, (u64, u64))>) -> anyhow::Result<ExitCode> {
    match failure {
        None if trace.is_some_and(|(_, (_, lost))| *lost > 0) => {
            eprintln!("tlpx: the spy lost records: the trace is incomplete");
            Ok(ExitCode::from(crate::exit::CHECK_FAILED))
        }
        None => Ok(ExitCode::SUCCESS),
        Some((place, e)) => {
            if let Some(c) = e.downcast_ref::<CheckFailed>() {
                eprintln!("tlpx: check failed: {place}: {c}");
                return Ok(ExitCode::from(crate::exit::CHECK_FAILED));
            }
            Err(e.context(place))
        }
    }
}
