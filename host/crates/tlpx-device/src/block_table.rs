//! The card's blocks that act on their own, and so have an owner (a lease), in one table:
//! each one's name, what a person calls it, what a forced write breaks, the register regions
//! its lease covers, its identification feature bit and its lease registers. The methods of
//! [`Block`] read their facts here, so a block is named in one place (its row), not in a
//! `match` per fact.

use tlpx_regs::Register;

use crate::card::Feature;
use crate::lease::Block;

/// The registers of one block's lease.
pub(crate) struct LeaseRegs {
    pub(crate) claim: Register,
    pub(crate) release: Register,
    pub(crate) owner: Register,
    pub(crate) length: Register,
    pub(crate) left: Register,
    pub(crate) since: Register,
    pub(crate) pid: Register,
    pub(crate) host: Register,
    pub(crate) time: Register,
    pub(crate) expiries: Register,
}

macro_rules! lease_regs {
    ($m:ident) => {
        LeaseRegs {
            claim: tlpx_regs::$m::LEASE_CLAIM,
            release: tlpx_regs::$m::LEASE_RELEASE,
            owner: tlpx_regs::$m::LEASE_OWNER,
            length: tlpx_regs::$m::LEASE_LENGTH,
            left: tlpx_regs::$m::LEASE_LEFT,
            since: tlpx_regs::$m::LEASE_SINCE,
            pid: tlpx_regs::$m::LEASE_PID,
            host: tlpx_regs::$m::LEASE_HOST,
            time: tlpx_regs::$m::LEASE_TIME,
            expiries: tlpx_regs::$m::LEASE_EXPIRIES,
        }
    };
}

/// One block's facts.
pub struct BlockInfo {
    pub block: Block,
    /// The block's register page name, also its name on the command line (`tlpx stop spy`).
    pub name: &'static str,
    /// Other names [`Block::parse`] accepts.
    pub aliases: &'static [&'static str],
    /// What a person calls it.
    pub title: &'static str,
    /// What a write into the block breaks while another process owns it (`--force`).
    pub force_breaks: &'static str,
    /// The register regions of the card's map whose writes the block's lease covers.
    pub regions: &'static [&'static str],
    /// The identification feature the card has when it carries the block.
    pub feature: Feature,
    pub(crate) lease: LeaseRegs,
}

/// Every block, in the order of [`Block::ALL`].
pub static BLOCKS: [BlockInfo; 7] = [
    BlockInfo {
        block: Block::Generator,
        name: "generator",
        aliases: &["gen"],
        title: "the traffic generator",
        force_breaks: "its owner's run: its figures, and the data it checks",
        regions: &["generator"],
        feature: Feature::Generator,
        lease: lease_regs!(generator),
    },
    BlockInfo {
        block: Block::Spy,
        name: "spy",
        aliases: &[],
        title: "the spy",
        force_breaks: "its owner's capture: records missed or lost without being counted",
        regions: &["spy"],
        feature: Feature::Spy,
        lease: lease_regs!(spy),
    },
    BlockInfo {
        block: Block::IrqTimer,
        name: "irq_timer",
        aliases: &["irq"],
        title: "the interrupt timer",
        force_breaks: "its owner's interrupt measurement",
        regions: &["irq_timer"],
        feature: Feature::IrqTimer,
        lease: lease_regs!(irq_timer),
    },
    BlockInfo {
        block: Block::RtLoop,
        name: "rt_loop",
        aliases: &["loop"],
        title: "the real-time loop",
        force_breaks: "its owner's loop measurement",
        regions: &["rt_loop"],
        feature: Feature::RtLoop,
        lease: lease_regs!(rt_loop),
    },
    // One lease for the whole core: a batch and single operations (hw-poll, hw-irq, ...)
    // share its registers, so a second user of either would corrupt the first.
    BlockInfo {
        block: Block::Rule30Batch,
        name: "rule30_batch",
        aliases: &["rule30"],
        title: "the rule-30 accelerator",
        force_breaks: "its owner's rule-30 operations and their results",
        regions: &["rule30", "rule30_batch"],
        feature: Feature::Rule30,
        lease: lease_regs!(rule30_batch),
    },
    BlockInfo {
        block: Block::Cpu,
        name: "cpu",
        aliases: &[],
        title: "the soft CPU",
        force_breaks: "the script its owner runs on the CPU",
        regions: &["cpu_ctrl", "uart", "cpu_sram"],
        feature: Feature::Cpu,
        lease: lease_regs!(cpu_ctrl),
    },
    BlockInfo {
        block: Block::Slot,
        name: "slot",
        aliases: &[],
        title: "the accelerator slot",
        force_breaks: "its owner's session with the accelerator: the command it runs and the buffers it checks",
        regions: &["slot"],
        feature: Feature::Slot,
        lease: lease_regs!(slot),
    },
];

/// The blocks' names, as a list in a message ("generator, spy, ...").
pub fn names() -> String {
    BLOCKS.iter().map(|b| b.name).collect::<Vec<_>>().join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_is_in_the_order_of_block_all_and_names_are_unique() {
        assert_eq!(BLOCKS.iter().map(|b| b.block).collect::<Vec<_>>(), Block::ALL);
        let mut all: Vec<&str> = BLOCKS.iter().flat_map(|b| std::iter::once(b.name).chain(b.aliases.iter().copied())).collect();
        let n = all.len();
        all.sort_unstable();
        all.dedup();
        assert_eq!(all.len(), n, "a name or alias of two blocks");
        assert_eq!(names(), "generator, spy, irq_timer, rt_loop, rule30_batch, cpu, slot");
    }
}
