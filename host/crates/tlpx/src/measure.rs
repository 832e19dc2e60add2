//! The measurement loop of the DMA and PIO commands (`bw`, `lat`, `pio`, `characterize`):
//! what a sweep point is and how its generator configuration is built and checked
//! ([`config`]), one run with its data check and one point of repeated runs, and running a
//! plan of points with progress, DMA buffers and Ctrl-C ([`runner`], [`check`]), DMA read
//! latency ([`latency`]) and PIO accesses ([`pio`]), and what the figures mean ([`figures`]).
//! The commands are thin adapters over it: they parse their arguments, call these, and write
//! their own result documents.

pub mod check;
pub mod config;
pub mod figures;
pub mod host_memory;
pub mod latency;
#[path = "../../../blocks/pio/measure.rs"]
pub mod pio;
pub mod runner;
