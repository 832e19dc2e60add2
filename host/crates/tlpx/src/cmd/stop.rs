//! `tlpx stop`: take blocks back from whoever owns them, and `tlpx owners`: who owns what.
//!
//! ```text
//! tlpx owners                 # each block: free, or its owner (PID, command, since when), lease left
//! tlpx stop spy               # stop the spy's capture and free it, whoever started it
//! tlpx stop generator irq     # several blocks; `all` for every one
//! ```
//!
//! A block a live process owns answers every other user "busy" (tlpx_device::lease); its
//! owner's own stop is the clean way out, this is the other: the block's job is stopped on
//! the card (the spy stops recording and writing its ring, the generator stops issuing, ...),
//! then its lease is released.
//!
//! The spy is the exception when its owner is a `tlpx spy capture` running on this host: that
//! process is asked to stop (SIGTERM, as `kill` would), and it ends the way Ctrl-C ends it,
//! draining every record the spy holds into its trace and writing the footer; only if it has
//! not let the spy go within [`CAPTURE_STOP_WAIT`] is the spy taken back from it. Taking it
//! back first would empty the spy's record FIFO: the last records of the trace would be
//! missing.

use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::bail;
use clap::Args;
use serde::Serialize;
use tlpx_device::card::Card;
use tlpx_device::lease::{self, Block, Owner, OwnerProcess};

use crate::output::print_json;
use crate::session::Session;

#[derive(Debug, Args)]
pub struct Cmd {
    /// Blocks to stop and free: generator, spy, irq_timer (irq), rt_loop (loop),
    /// rule30_batch (rule30), cpu, slot (the accelerator: its DMA fenced until it is quiet), or all.
    #[arg(required = true, value_name = "BLOCK")]
    blocks: Vec<String>,
}

#[derive(Debug, Args)]
pub struct OwnersCmd {}

/// Wall time a `tlpx spy capture` asked to stop has to drain its ring and let the spy go.
const CAPTURE_STOP_WAIT: Duration = Duration::from_secs(20);

#[derive(Debug, Serialize)]
struct Stopped {
    block: Block,
    /// The owner it was taken from; `None` when it was free (its job, if any, was stopped).
    taken_from: Option<Owner>,
    /// The owner (a `tlpx spy capture` on this host) was asked to stop and ended its job
    /// itself, cleanly: nothing had to be taken back.
    ended_by_owner: bool,
}

pub fn run(cmd: &Cmd, device: &str, json: bool) -> anyhow::Result<ExitCode> {
    let mut blocks = Vec::new();
    for name in &cmd.blocks {
        let named: Vec<Block> = if name.trim().eq_ignore_ascii_case("all") { Block::ALL.to_vec() } else { vec![Block::parse(name)?] };
        for b in named {
            if blocks.contains(&b) {
                bail!("block {b} is named twice");
            }
            blocks.push(b);
        }
    }
    stop_blocks(device, &blocks, json)
}

/// Stops and frees `blocks` (those the card has; with `all`, the others are skipped).
pub fn stop_blocks(device: &str, blocks: &[Block], json: bool) -> anyhow::Result<ExitCode> {
    let mut session = Session::open_as_is(device)?;
    let card = &mut session.card;
    let mut done = Vec::new();
    for &block in blocks {
        // `all` skips the blocks this card lacks; one named on its own must be there.
        if blocks.len() == Block::ALL.len() && !card.has_feature(block.feature()) {
            continue;
        }
        block.require_on(card)?;
        if block == Block::Spy {
            if let Some(owner) = ask_capture_to_stop(card)? {
                done.push(Stopped { block, taken_from: Some(owner), ended_by_owner: true });
                continue;
            }
        }
        let taken_from = lease::force_stop(card, block)?;
        done.push(Stopped { block, taken_from, ended_by_owner: false });
    }
    if json {
        print_json(&done)?;
    } else {
        for s in &done {
            match &s.taken_from {
                Some(o) if s.ended_by_owner => {
                    crate::outln!("{}: {} was asked to stop and ended its capture (its trace is complete)", s.block, o.describe())
                }
                Some(o) => crate::outln!("{}: stopped and freed (it was owned by {})", s.block, o.describe()),
                None => crate::outln!("{}: stopped; it had no owner", s.block),
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// When the spy's owner is a `tlpx spy capture` running on this host, asks it to stop
/// (SIGTERM) and waits until it has let the spy go; returns that owner. `None` when the owner
/// is something else, or did not end in time: the caller then takes the spy back itself.
fn ask_capture_to_stop(card: &mut Card) -> anyhow::Result<Option<Owner>> {
    let Some(owner) = lease::owner(card, Block::Spy)? else { return Ok(None) };
    if !matches!(owner.process, OwnerProcess::Running { .. }) || !is_spy_capture(owner.pid) {
        return Ok(None);
    }
    let Ok(pid) = libc::pid_t::try_from(owner.pid) else { return Ok(None) };
    // SAFETY: kill only sends a signal; the PID is the lease's owner, checked above to be a
    // running `tlpx spy capture` of this host that started before its claim.
    if unsafe { libc::kill(pid, libc::SIGTERM) } != 0 {
        // Another user's process, or it just exited: take the spy back as for anyone else.
        return Ok(None);
    }
    let deadline = Instant::now() + CAPTURE_STOP_WAIT;
    while Instant::now() < deadline {
        match lease::owner(card, Block::Spy)? {
            Some(o) if o.token == owner.token => std::thread::sleep(Duration::from_millis(20)),
            _ => return Ok(Some(owner)),
        }
    }
    eprintln!(
        "tlpx: warning: {} did not end its capture within {} s of being asked to: taking the spy back (the last records it held may be missing from its trace)",
        owner.describe(),
        CAPTURE_STOP_WAIT.as_secs()
    );
    Ok(None)
}

/// Whether process `pid` runs `tlpx ... spy capture ...` (its command line, /proc/PID/cmdline).
fn is_spy_capture(pid: u32) -> bool {
    let Ok(raw) = std::fs::read(format!("/proc/{pid}/cmdline")) else { return false };
    let words: Vec<&[u8]> = raw.split(|b| *b == 0).filter(|w| !w.is_empty()).collect();
    let is_tlpx = words.first().is_some_and(|w| w.rsplit(|b| *b == b'/').next() == Some(b"tlpx"));
    is_tlpx && words.windows(2).any(|w| w[0] == b"spy" && w[1] == b"capture")
}

#[derive(Debug, Serialize)]
struct BlockOwner {
    block: Block,
    owner: Option<Owner>,
    /// Card time left before the owner's lease expires (ms).
    lease_left_ms: Option<f64>,
    expiries: u64,
}

pub fn owners(_cmd: &OwnersCmd, device: &str, json: bool) -> anyhow::Result<ExitCode> {
    let mut session = Session::open_as_is(device)?;
    let card = &mut session.card;
    let clock = f64::from(card.identity().clock_hz.max(1));
    let mut rows = Vec::new();
    for block in Block::ALL {
        if !card.has_feature(block.feature()) {
            continue;
        }
        let owner = lease::owner(card, block)?;
        let lease_left_ms = owner.as_ref().map(|o| o.left_cycles as f64 / clock * 1e3);
        rows.push(BlockOwner { block, owner, lease_left_ms, expiries: lease::expiries(card, block)? });
    }
    if json {
        print_json(&rows)?;
        return Ok(ExitCode::SUCCESS);
    }
    crate::outln!("{:<14} {:<60} {:>14} {:>9}", "BLOCK", "OWNER", "LEASE LEFT", "EXPIRIES");
    for r in &rows {
        let (who, left) = match (&r.owner, r.lease_left_ms) {
            (Some(o), Some(ms)) => (o.describe(), format!("{ms:.1} ms")),
            _ => ("free".to_string(), "-".to_string()),
        };
        crate::outln!("{:<14} {:<60} {:>14} {:>9}", r.block.name(), who, left, r.expiries);
    }
    crate::outln!("(lease left in card time; `tlpx stop BLOCK` takes a block back from its owner)");
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_tlpx_spy_capture_is_asked_to_stop() {
        // This test process is not one; nor is a PID that does not exist.
        assert!(!is_spy_capture(std::process::id()));
        assert!(!is_spy_capture(u32::MAX - 1));
    }
}
