//! Analytic models used by the tlpx host tools and the simulator.
//!
//! - [`link`]: the PCIe link bandwidth model of pcie-bench (Neugebauer et al.,
//!   "Understanding PCIe performance for end host networking", SIGCOMM 2018),
//!   plus the TLP splitting rules (MPS, MRRS, RCB, 4 KiB) the simulator applies.

pub mod link;
pub mod stats;
