//! PCI configuration space as bytes: decoding it ([`decode`]) and rendering it in the text
//! format of `lspci -x` that libpci's dump method reads back ([`render_dump`]).
//!
//! Pure Rust over `&[u8]`, without libpci: the simulator (tlpx-sim) writes its card's dump
//! and decodes its own config space with it, and tlpx-device's PCI enumeration (through
//! libpci) re-exports it as `tlpx_device::pci`, so neither needs the other.

pub mod decode;
mod dump;

pub use decode::{Bar, Capability, ExtendedCapability, MsiInfo, PcieInfo};
pub use dump::{render_dump, MAX_DUMP_CONFIG_BYTES};
