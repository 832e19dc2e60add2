//! The integration tests of tlpx-device, one module per test file, built as one test binary
//! (`autotests = false` in Cargo.toml). Apart, each file was a binary of its own that compiled
//! the same dependencies' generic code again and was linked alone: about 5 CPU-seconds each of a
//! fresh `make test` (docs/performance.md, "make test's time"). The tests run as before, on
//! `cargo test`'s threads; a file that changes process-wide state stays a binary of its own.
#![allow(clippy::unwrap_used)]

#[path = "../../../blocks/generator/tests/generator_sim.rs"]
mod generator_sim;
#[path = "../../../blocks/irq_timer/tests/irq_sim.rs"]
mod irq_sim;
#[path = "litepcie_abi.rs"]
mod litepcie_abi;
#[path = "litepcie_backend.rs"]
mod litepcie_backend;
#[path = "pci_address.rs"]
mod pci_address;
#[path = "pci_decode.rs"]
mod pci_decode;
#[path = "pci_dump.rs"]
mod pci_dump;
#[path = "pci_system.rs"]
mod pci_system;
#[path = "../../../blocks/rt_loop/tests/rt_loop_sim.rs"]
mod rt_loop_sim;
#[path = "../../../blocks/rule30/tests/rule30_sim.rs"]
mod rule30_sim;
#[path = "selector_sim.rs"]
mod selector_sim;
#[path = "../../../blocks/spy/tests/spy_payload_msi.rs"]
mod spy_payload_msi;
#[path = "../../../blocks/spy/tests/spy_sim.rs"]
mod spy_sim;
#[path = "vfio_sysfs.rs"]
mod vfio_sysfs;
