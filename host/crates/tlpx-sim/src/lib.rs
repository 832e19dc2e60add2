//! tlpx-sim: a Verilated tlpx card behind a root-complex and PCIe link model.
//!
//! One module per concern: the card's C ABI ([`card`]), link pacing ([`link`]), root-complex
//! TLP handling ([`rc`]) and completion of the card's reads ([`completer`]), configuration space ([`config_space`]), host memory, its
//! allocator and IOMMU ([`hostmem`]), the cycle loop and clients ([`engine`]), the runtime directory and its files ([`rundir`]), and the
//! process around it ([`server`]). The protocol lives in the tlpx-sim-protocol crate, shared with clients.
//! See docs/sim-protocol.md.

#![cfg_attr(test, allow(clippy::unwrap_used))]

pub mod card;
pub mod completer;
pub mod config_space;
pub mod datapath;
pub mod engine;
pub mod guestmem;
pub mod hostmem;
pub mod link;
pub mod rc;
pub mod rundir;
pub mod server;
pub mod vfu;
