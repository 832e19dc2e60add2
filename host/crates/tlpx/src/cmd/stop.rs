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

use std::process::ExitCode;

use anyhow::bail;
use clap::Args;
use serde::Serialize;
use tlpx_device::lease::{self, Block, Owner};

use crate::output::print_json;
use crate::session::Session;

#[derive(Debug, Args)]
pub struct Cmd {
    /// Blocks to stop and free: generator, spy, irq_timer (irq), rt_loop (loop),
    /// rule30_batch (rule30), cpu, or all.
    #[arg(required = true, value_name = "BLOCK")]
    blocks: Vec<String>,
}

#[derive(Debug, Args)]
pub struct OwnersCmd {}

#[derive(Debug, Serialize)]
struct Stopped {
    block: Block,
    /// The owner it was taken from; `None` when it was free (its job, if any, was stopped).
    taken_from: Option<Owner>,
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
        if !card.has_feature(block.feature()) {
            if blocks.len() == Block::ALL.len() {
                continue;
            }
            bail!("this card has no {} (its features: {})", block.name(), card.identity().features.join(", "));
        }
        let taken_from = lease::force_stop(card, block)?;
        done.push(Stopped { block, taken_from });
    }
    if json {
        print_json(&done)?;
    } else {
        for s in &done {
            match &s.taken_from {
                Some(o) => crate::outln!("{}: stopped and freed (it was owned by {})", s.block, o.describe()),
                None => crate::outln!("{}: stopped; it had no owner", s.block),
            }
        }
    }
    Ok(ExitCode::SUCCESS)
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
