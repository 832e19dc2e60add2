//! Leases: one owner at a time for each block of the card that acts on its own.
//!
//! The generator, the spy, the interrupt timer, the real-time loop, the rule-30 batch engine,
//! the soft CPU and the accelerator slot each carry a lease in their register page
//! (`<block>.lease_*`; the card's side is gateware/tlpx_gateware/cores/lease.py):
//!
//! ```text
//!  Card::claim(block) ─► lease_claim = token ─► lease_owner == token? ─► ours: pid, host, time
//!        │                                              └─ no: Busy (who, since when, what to do)
//!  Card::keep_leases() every quarter lease ─► lease_claim = token (refresh)
//!  owner killed: no refresh ─► after lease_length card cycles the block stops by itself
//!  Card dropped / Card::release ─► lease_release = token
//! ```
//!
//! A process that dies leaves its block running until the lease expires; a second tlpx on the
//! same host does not wait for that: the owner's identity (PID, host and PID namespace, claim
//! time) tells it the owner is gone, and it takes the block over at once (stopping the dead
//! owner's job first). An owner that is alive gets the second user a [`DeviceError::Busy`]
//! naming it and the command that takes the block back (`tlpx stop BLOCK`).

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::Serialize;

use crate::block_table::{BlockInfo, LeaseRegs, BLOCKS};
use crate::card::{Card, Feature};
use crate::DeviceError;

/// What can go wrong with a lease other than [`DeviceError::Busy`] and
/// [`DeviceError::LeaseLost`]; [`DeviceError::Lease`] carries it.
#[derive(Debug, thiserror::Error)]
pub enum LeaseError {
    /// A block name that is no block's (the caller's input).
    #[error("invalid argument: block must be one of {names} (or all), not {0:?}", names = crate::block_table::names())]
    UnknownBlock(String),
    /// A job that did not end within `after` (card time) of its block's stop.
    #[error("{} is still running {} ms (card time) after it was stopped", .block.title(), .after.as_millis())]
    StillRunning { block: Block, after: Duration },
}

impl LeaseError {
    /// The caller's input was refused (not the card or its backend).
    pub fn is_invalid_argument(&self) -> bool {
        matches!(self, LeaseError::UnknownBlock(_))
    }
}

/// A block of the card that acts on its own and therefore has an owner.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Block {
    Generator,
    Spy,
    IrqTimer,
    RtLoop,
    Rule30Batch,
    Cpu,
    /// The accelerator slot: the device under test in it and its DMA. Claimed by a host
    /// session that drives the DUT (`tlpx slot run`, a `tlpx reg write` into its window); a
    /// stock driver of the DUT never claims it (the lease is optional for the DUT's own path).
    Slot,
}

impl Block {
    pub const ALL: [Block; 7] = [Block::Generator, Block::Spy, Block::IrqTimer, Block::RtLoop, Block::Rule30Batch, Block::Cpu, Block::Slot];

    /// The block's row of the block table: its name, title, feature and lease registers.
    pub fn info(self) -> &'static BlockInfo {
        // BLOCKS is in the order of the enum (block_table's test checks it).
        &BLOCKS[self as usize]
    }

    /// The block's register page name, also its name on the command line (`tlpx stop spy`).
    pub fn name(self) -> &'static str {
        self.info().name
    }

    /// What a person calls it.
    pub fn title(self) -> &'static str {
        self.info().title
    }

    /// What a write into the block breaks while another process owns it (`--force`).
    pub fn force_breaks(self) -> &'static str {
        self.info().force_breaks
    }

    /// The block whose lease covers writes into register region `region` of the card's map
    /// (`generator`, `rule30`, `cpu_ctrl`, ...); `dut` is true for a region the accelerator in
    /// the slot owns (its window, its CSR banks): the slot's. None: a region no lease covers
    /// (ident, timebase, pcie_msi, pcie_dma0, pio, ...).
    pub fn of_region(region: &str, dut: bool) -> Option<Block> {
        if dut {
            return Some(Block::Slot);
        }
        BLOCKS.iter().find(|b| b.regions.contains(&region)).map(|b| b.block)
    }

    /// The identification feature the card has when it carries the block.
    pub fn feature(self) -> Feature {
        self.info().feature
    }

    /// [`DeviceError::MissingBlock`] unless `card` carries the block.
    pub fn require_on(self, card: &Card) -> Result<(), DeviceError> {
        card.require(self.feature(), self.title().trim_start_matches("the "))
    }

    /// Parses a block name or one of its aliases (`generator`/`gen`, `spy`, `irq_timer`/`irq`,
    /// `rt_loop`/`loop`, `rule30_batch`/`rule30`, `cpu`, `slot`).
    pub fn parse(text: &str) -> Result<Block, DeviceError> {
        let name = text.trim().to_ascii_lowercase().replace('-', "_");
        match BLOCKS.iter().find(|b| b.name == name || b.aliases.contains(&name.as_str())) {
            Some(b) => Ok(b.block),
            None => Err(LeaseError::UnknownBlock(name).into()),
        }
    }

    fn regs(self) -> &'static LeaseRegs {
        &self.info().lease
    }
}

impl std::fmt::Display for Block {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// Who holds a block, as its lease registers say.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Owner {
    pub block: Block,
    pub token: u32,
    /// The owner's process ID (0 when it never wrote it).
    pub pid: u32,
    /// The owner's host and PID namespace ([`host_id`]).
    pub host: u32,
    /// The owner's clock when it claimed the block (Unix seconds).
    pub claimed_unix: u32,
    /// Card cycle of the claim.
    pub since_cycle: u64,
    /// Card cycles left before the lease expires.
    pub left_cycles: u64,
    /// What this host knows of the owner's process.
    pub process: OwnerProcess,
}

/// Whether the owner's process still runs, as far as this host can tell.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case", tag = "state")]
pub enum OwnerProcess {
    /// The owner is on this host and runs: its command line.
    Running { command: String },
    /// The owner was on this host and is gone (its PID is free or belongs to a younger process).
    Gone,
    /// Another host or PID namespace: only the lease can tell.
    Elsewhere,
}

impl Owner {
    /// "PID 1234 (tlpx bw) since 12:03:04 UTC, 3 s ago", for messages.
    pub fn describe(&self) -> String {
        let who = match &self.process {
            OwnerProcess::Running { command } => format!("PID {} ({command})", self.pid),
            OwnerProcess::Gone => format!("PID {} (no longer running)", self.pid),
            OwnerProcess::Elsewhere => format!("PID {} on another host or PID namespace", self.pid),
        };
        let since = if self.claimed_unix == 0 {
            String::new()
        } else {
            let now = unix_now();
            let ago = u64::from(now.saturating_sub(self.claimed_unix));
            format!(" since {} UTC ({ago} s ago)", utc_hms(self.claimed_unix))
        };
        format!("{who}{since}")
    }
}

/// Reads who holds `block`; `None` when it is free.
pub fn owner(card: &mut Card, block: Block) -> Result<Option<Owner>, DeviceError> {
    block.require_on(card)?;
    let r = block.regs();
    let token = card.read(r.owner)? as u32;
    if token == 0 {
        return Ok(None);
    }
    let pid = card.read(r.pid)? as u32;
    let host = card.read(r.host)? as u32;
    let claimed_unix = card.read(r.time)? as u32;
    let since_cycle = card.read(r.since)?;
    let left_cycles = card.read(r.left)?;
    let process = owner_process(pid, host, claimed_unix);
    Ok(Some(Owner { block, token, pid, host, claimed_unix, since_cycle, left_cycles, process }))
}

/// Leases expired on the card since it started (the block stopped by itself each time).
pub fn expiries(card: &mut Card, block: Block) -> Result<u64, DeviceError> {
    block.require_on(card)?;
    card.read(block.regs().expiries)
}

/// A lease this process holds.
#[derive(Debug, Clone)]
pub(crate) struct Held {
    pub block: Block,
    pub token: u32,
    /// Card time (ns, [`crate::Device::clock_ns`]) of the last claim or refresh.
    pub refreshed_ns: u64,
}

/// The lease length and refresh period for a backend whose clock is `source`.
///
/// The refresh runs in the owner's own thread between its calls to the card (deterministic
/// on the simulator), so the lease must outlast the owner's longest step between two
/// refreshes: a quarter of the lease, as `Card`'s waits are cut into slices of at most that.
/// On the simulator card time runs only while clients wait, so a dead owner's lease runs out
/// after that much of other clients' card time: 100 ms (6..25 s of the simulator's wall
/// time); a dead owner on the same host is taken over at once anyway.
pub(crate) fn lease_length(source: crate::ClockSource) -> Duration {
    match source {
        crate::ClockSource::Host => Duration::from_secs(1),
        crate::ClockSource::SimulatedCard => Duration::from_millis(100),
    }
}

/// Claims `block` for this process: `Ok(Some(owner))` when a dead owner's block was taken
/// over (its job stopped first), `Ok(None)` when it was free, [`DeviceError::Busy`] when a
/// live owner holds it.
pub(crate) fn claim(card: &mut Card, block: Block, length: Duration) -> Result<(Held, Option<Owner>), DeviceError> {
    block.require_on(card)?;
    let r = block.regs();
    let mut taken_over = None;
    if let Some(previous) = owner(card, block)? {
        if previous.process != OwnerProcess::Gone {
            return Err(DeviceError::Busy { block, owner: previous.describe() });
        }
        take_back(card, block, Some(&previous))?;
        taken_over = Some(previous);
    }
    let token = new_token();
    let cycles = (length.as_secs_f64() * f64::from(card.identity().clock_hz)).round().clamp(1.0, f64::from(u32::MAX)) as u64;
    card.write(r.length, cycles)?;
    card.write(r.claim, u64::from(token))?;
    // The read flushes the posted claim: the owner now is whoever won.
    let now = card.read(r.owner)? as u32;
    if now != token {
        let winner = owner(card, block)?;
        return Err(DeviceError::Busy {
            block,
            owner: winner.map_or_else(|| "another process (it released it at once)".to_string(), |o| o.describe()),
        });
    }
    card.write(r.pid, u64::from(std::process::id()))?;
    card.write(r.host, u64::from(host_id()))?;
    card.write(r.time, u64::from(unix_now()))?;
    let refreshed_ns = card.device().clock_ns()?;
    Ok((Held { block, token, refreshed_ns }, taken_over))
}

/// Refreshes a held lease; [`DeviceError::LeaseLost`] when it is no longer ours (it expired
/// while this process was stopped, or someone ran `tlpx stop`).
pub(crate) fn refresh(card: &mut Card, held: &mut Held) -> Result<(), DeviceError> {
    let r = held.block.regs();
    card.write(r.claim, u64::from(held.token))?;
    held.refreshed_ns = card.device().clock_ns()?;
    Ok(())
}

/// Checks that a held lease is still ours (one register read).
pub(crate) fn verify(card: &mut Card, held: &Held) -> Result<(), DeviceError> {
    let owner = card.read(held.block.regs().owner)? as u32;
    if owner == held.token {
        return Ok(());
    }
    Err(DeviceError::LeaseLost {
        block: held.block.title().to_string(),
        detail: if owner == 0 {
            "its lease expired (this process did not refresh it in time: was it stopped?) or `tlpx stop` took it back".to_string()
        } else {
            "another process holds it now".to_string()
        },
    })
}

/// Gives a held lease back (the block ends its job, as after an expiry).
pub(crate) fn release(card: &mut Card, held: &Held) -> Result<(), DeviceError> {
    card.write(held.block.regs().release, u64::from(held.token))
}

/// Stops whatever `block` is doing, whoever started it, and frees it: `tlpx stop BLOCK`.
/// Returns the owner it took the block from, if any.
pub fn force_stop(card: &mut Card, block: Block) -> Result<Option<Owner>, DeviceError> {
    let previous = owner(card, block)?;
    take_back(card, block, previous.as_ref())?;
    Ok(previous)
}

/// Releases `previous`'s lease (the card ends the block's job at once: the release has the
/// effect of an expiry), stops a job that runs without an owner, and waits until it ended.
fn take_back(card: &mut Card, block: Block, previous: Option<&Owner>) -> Result<(), DeviceError> {
    if let Some(o) = previous {
        if block == Block::Spy && o.process != OwnerProcess::Gone {
            // A capture whose owner runs ends with a complete trace: the spy stops recording
            // and writes the records it still holds into the ring, which the owner drains and
            // finishes with its footer when it sees its lease gone. Releasing at once would
            // empty the spy's FIFO (the effect of an expiry), a gap at the trace's end.
            flush_spy(card)?;
        }
        card.write(block.regs().release, u64::from(o.token))?;
    }
    stop_job(card, block)
}

/// Turns the spy's recording off and waits (card time, bounded) until its record FIFO is
/// empty: every record it numbered is in the ring, or lost and counted (a full ring nobody
/// drains). The lease is left as it is.
fn flush_spy(card: &mut Card) -> Result<(), DeviceError> {
    use tlpx_regs::spy;
    issue_stop(card, Block::Spy)?;
    // The ring writer sends a partial batch FLUSH_CYCLES after the last record.
    let settle = card.cycles_to_duration(u64::from(crate::spy::FLUSH_CYCLES) * 2 + 64);
    let mut empty_rounds = 0;
    for _ in 0..64 {
        let status = card.read(spy::STATUS)?;
        if spy::status::RECORDS.get(status) == 0 || spy::status::HALTED.get(status) != 0 {
            empty_rounds += 1;
            if empty_rounds >= 2 {
                return Ok(());
            }
        } else {
            empty_rounds = 0;
        }
        card.device().idle(settle)?;
    }
    // A ring its owner does not drain stays full: the records left are lost, as they would
    // be at an expiry, and the owner's footer counts them.
    Ok(())
}

/// The block's own stop, for a job that runs without an owner (started by firmware or an
/// older tlpx) as well as one whose owner is gone; then waits (card time) until the job has
/// ended, so the next owner never starts under reads still in flight (a stopped generator
/// lets its outstanding reads complete or time out: at most its completion timeout, 1 ms).
fn stop_job(card: &mut Card, block: Block) -> Result<(), DeviceError> {
    issue_stop(card, block)?;
    // The spy's stop is immediate (its FIFO is flushed or emptied by the lease's end).
    let running = |card: &mut Card| if block == Block::Spy { Ok(false) } else { job_running(card, block) };
    // A fenced DUT still streams the rest of its command (refused: filler, no TLP) before it
    // is quiet, about a DW per cycle: 100 ms covers a command of 50 MB on the 125 MHz card.
    let (step, steps) = (Duration::from_micros(100), if block == Block::Slot { 1000 } else { 50 });
    for _ in 0..steps {
        if !running(card)? {
            return Ok(());
        }
        card.device().idle(step)?;
    }
    Err(LeaseError::StillRunning { block, after: step * steps }.into())
}

/// Whether `block` has a job running now: a generator run, a capture (the spy recording and
/// not halted), the timer firing, the loop iterating, a rule-30 batch, the CPU out of reset, the
/// DUT in the slot busy (working, or its DMA in flight).
pub fn job_running(card: &mut Card, block: Block) -> Result<bool, DeviceError> {
    use tlpx_regs::{cpu_ctrl, generator, irq_timer, rt_loop, rule30_batch, slot, spy};
    Ok(match block {
        Block::Generator => generator::status::RUNNING.get(card.read(generator::STATUS)?) != 0,
        Block::IrqTimer => irq_timer::status::RUNNING.get(card.read(irq_timer::STATUS)?) != 0,
        Block::RtLoop => rt_loop::status::RUNNING.get(card.read(rt_loop::STATUS)?) != 0,
        Block::Rule30Batch => rule30_batch::status::RUNNING.get(card.read(rule30_batch::STATUS)?) != 0,
        Block::Cpu => cpu_ctrl::status::STATE.get(card.read(cpu_ctrl::STATUS)?) != 0,
        // The DUT's command ends (its DMA refused by the fence) and it goes quiet.
        Block::Slot => slot::status::BUSY.get(card.read(slot::STATUS)?) != 0,
        Block::Spy => spy::control::ENABLE.get(card.read(spy::CONTROL)?) != 0 && spy::status::HALTED.get(card.read(spy::STATUS)?) == 0,
    })
}

fn issue_stop(card: &mut Card, block: Block) -> Result<(), DeviceError> {
    use tlpx_regs::{cpu_ctrl, generator, irq_timer, rt_loop, rule30_batch, slot, spy};
    match block {
        Block::Generator => card.write(generator::CONTROL, generator::control::STOP.set(1)),
        Block::Spy => {
            let control = card.read(spy::CONTROL)?;
            card.write(spy::CONTROL, control & !spy::control::ENABLE.mask())
        }
        Block::IrqTimer => card.write(irq_timer::CONTROL, irq_timer::control::STOP.set(1)),
        Block::RtLoop => card.write(rt_loop::CONTROL, rt_loop::control::STOP.set(1)),
        Block::Rule30Batch => card.write(rule30_batch::CONTROL, rule30_batch::control::ABORT.set(1)),
        // A script the CPU runs for a dead host: hold the CPU in reset (`tlpx fw load` starts
        // the firmware again).
        Block::Cpu => card.write(cpu_ctrl::CONTROL, 0),
        // No generic stop exists for an accelerator: the slot fences its DMA when a lease ends
        // while the DUT is busy (a released owner's lease did already). A job that runs
        // without an owner is fenced by a lease of our own, claimed and released at once.
        Block::Slot => {
            if card.read(slot::LEASE_OWNER)? != 0 {
                return Ok(());
            }
            let token = new_token();
            card.write(slot::LEASE_CLAIM, u64::from(token))?;
            if card.read(slot::LEASE_OWNER)? as u32 == token {
                card.write(slot::LEASE_RELEASE, u64::from(token))?;
            }
            Ok(())
        }
    }
}

fn new_token() -> u32 {
    loop {
        let mut b = [0u8; 4];
        // SAFETY: getrandom writes at most b.len() bytes into b.
        let n = unsafe { libc::getrandom(b.as_mut_ptr().cast(), b.len(), 0) };
        let t = if n == 4 {
            u32::from_le_bytes(b)
        } else {
            // No getrandom: the PID and the clock are unique enough against accidents.
            std::process::id() ^ (crate::host_clock_ns() as u32).rotate_left(16)
        };
        if t != 0 {
            return t;
        }
    }
}

/// Unix time in seconds (32 bits: good until 2106).
pub fn unix_now() -> u32 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs() as u32)
}

fn utc_hms(unix: u32) -> String {
    let s = unix % 86_400;
    format!("{:02}:{:02}:{:02}", s / 3600, s / 60 % 60, s % 60)
}

/// An identifier of this host's boot and PID namespace: PIDs mean the same process only
/// where this matches (FNV-1a of /proc/sys/kernel/random/boot_id and the namespace's inode).
pub fn host_id() -> u32 {
    let boot = std::fs::read_to_string("/proc/sys/kernel/random/boot_id").unwrap_or_default();
    let ns = std::fs::read_link("/proc/self/ns/pid").map(|p| p.display().to_string()).unwrap_or_default();
    let mut h: u32 = 0x811C_9DC5;
    for b in boot.trim().bytes().chain(ns.bytes()) {
        h = (h ^ u32::from(b)).wrapping_mul(0x0100_0193);
    }
    h.max(1)
}

/// What this host knows of process `pid` that claimed a block at `claimed_unix` from host `host`.
fn owner_process(pid: u32, host: u32, claimed_unix: u32) -> OwnerProcess {
    if pid == 0 || host != host_id() {
        return OwnerProcess::Elsewhere;
    }
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return OwnerProcess::Gone;
    };
    // A PID reused by a process that started after the claim is not the owner.
    if let Some(started) = process_start_unix(&stat) {
        if claimed_unix != 0 && started > u64::from(claimed_unix) + 1 {
            return OwnerProcess::Gone;
        }
    }
    // A zombie has exited: its block is nobody's.
    if stat.rsplit_once(')').and_then(|(_, rest)| rest.split_whitespace().next()) == Some("Z") {
        return OwnerProcess::Gone;
    }
    let command = std::fs::read(format!("/proc/{pid}/cmdline"))
        .map(|raw| {
            let words: Vec<String> =
                raw.split(|b| *b == 0).filter(|w| !w.is_empty()).map(|w| String::from_utf8_lossy(w).into_owned()).collect();
            let mut shown: Vec<String> = Vec::new();
            for (i, w) in words.iter().enumerate() {
                shown.push(if i == 0 { w.rsplit('/').next().unwrap_or(w).to_string() } else { w.clone() });
                if shown.len() == 4 {
                    break;
                }
            }
            shown.join(" ")
        })
        .unwrap_or_default();
    OwnerProcess::Running { command: if command.is_empty() { "?".into() } else { command } }
}

/// The Unix time (seconds) a process started, from its /proc/PID/stat (field 22, clock ticks
/// after boot) and the boot time in /proc/stat.
fn process_start_unix(stat: &str) -> Option<u64> {
    let after = stat.rsplit_once(')')?.1;
    let ticks: u64 = after.split_whitespace().nth(19)?.parse().ok()?;
    // SAFETY: sysconf only reads a configuration value.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if hz <= 0 {
        return None;
    }
    let boot: u64 =
        std::fs::read_to_string("/proc/stat").ok()?.lines().find_map(|l| l.strip_prefix("btime ").and_then(|v| v.trim().parse().ok()))?;
    Some(boot + ticks / hz as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn block_names_round_trip_and_bad_names_are_refused() {
        for b in Block::ALL {
            assert_eq!(Block::parse(b.name()).expect("its own name"), b);
        }
        assert_eq!(Block::parse("irq").expect("alias"), Block::IrqTimer);
        let e = Block::parse("dma").expect_err("not a block").to_string();
        assert!(e.contains("\"dma\"") && e.contains("spy"), "{e}");
    }

    #[test]
    fn this_process_is_running_and_a_free_pid_is_gone() {
        let me = std::process::id();
        match owner_process(me, host_id(), unix_now()) {
            OwnerProcess::Running { command } => assert!(!command.is_empty()),
            other => panic!("this process reads as {other:?}"),
        }
        // PIDs above pid_max never exist.
        assert_eq!(owner_process(u32::MAX - 1, host_id(), unix_now()), OwnerProcess::Gone);
        assert_eq!(owner_process(me, host_id() ^ 1, unix_now()), OwnerProcess::Elsewhere);
        // A process that started after the claim holds a reused PID, not the owner's.
        assert_eq!(owner_process(me, host_id(), 1_000_000), OwnerProcess::Gone);
    }
}
