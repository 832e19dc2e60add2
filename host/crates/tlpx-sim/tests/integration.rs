//! The integration tests of tlpx-sim, one module per test file, built as one test binary
//! (`autotests = false` in Cargo.toml). Apart, each file was a binary of its own that compiled
//! the same dependencies' generic code again and was linked alone: about 5 CPU-seconds each of a
//! fresh `make test` (docs/performance.md, "make test's time"). The tests run as before, on
//! `cargo test`'s threads; a file that changes process-wide state stays a binary of its own.
#![allow(clippy::unwrap_used)]

mod common;

#[path = "block_mmio.rs"]
mod block_mmio;
#[path = "dma_irq.rs"]
mod dma_irq;
#[path = "host_time.rs"]
mod host_time;
#[path = "iommu.rs"]
mod iommu;
#[path = "live.rs"]
mod live;
#[path = "mmio.rs"]
mod mmio;
#[path = "process.rs"]
mod process;
#[path = "runtime_dir.rs"]
mod runtime_dir;
#[path = "traffic_faults.rs"]
mod traffic_faults;
#[path = "vectors.rs"]
mod vectors;
#[path = "vfio_user.rs"]
mod vfio_user;
