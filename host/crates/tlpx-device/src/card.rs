//! A tlpx card behind any `Device`: identification checked, registers by name.
//!
//! `Card::open` reads the identification block at BAR0 offset 0 and refuses a card whose
//! magic is wrong or whose register-map hash is not the one `tlpx-regs` was generated from:
//! every offset this host uses comes from that map, so talking to another map would read
//! and write the wrong registers.

use std::time::Duration;

use serde::Serialize;
use tlpx_regs::{ident, timebase, Register};

use crate::{Device, DeviceError, Width};

/// What the identification block says.
#[derive(Debug, Clone, Serialize)]
pub struct Identity {
    pub magic: u32,
    pub version_major: u16,
    pub version_minor: u16,
    pub features: Vec<&'static str>,
    pub feature_bits: u32,
    pub map_hash: u32,
    pub data_width: u32,
    pub clock_hz: u32,
}

/// Names of the feature bits, in bit order (ident.features).
pub const FEATURE_NAMES: &[&str] = &["request_path", "msi", "dma_loopback", "generator", "spy", "irq_timer", "rule30", "rt_loop", "cpu"];

/// Reads the identification block without judging it.
pub fn read_identity(device: &mut dyn Device) -> Result<Identity, DeviceError> {
    let bar = tlpx_regs::BAR;
    let mut r = |reg: Register| device.bar_read(bar, reg.offset, Width::W32).map(|v| v as u32);
    let magic = r(ident::MAGIC)?;
    let version = r(ident::VERSION)?;
    let feature_bits = r(ident::FEATURES)?;
    let map_hash = r(ident::MAP_HASH)?;
    let data_width = r(ident::DATA_WIDTH)?;
    let clock_hz = r(ident::CLOCK_HZ)?;
    let features = FEATURE_NAMES.iter().enumerate().filter(|(i, _)| feature_bits & (1 << i) != 0).map(|(_, n)| *n).collect();
    Ok(Identity {
        magic,
        version_major: (version >> 16) as u16,
        version_minor: version as u16,
        features,
        feature_bits,
        map_hash,
        data_width,
        clock_hz,
    })
}

/// Why a device is not a card this host can drive.
#[derive(Debug, thiserror::Error)]
pub enum CardError {
    #[error(transparent)]
    Device(#[from] DeviceError),
    #[error("{location} is not a tlpx card: BAR0 offset 0 reads 0x{found:08x}, a tlpx card reads 0x{expected:08x} (\"TLPX\")")]
    NotATlpxCard { location: String, found: u32, expected: u32 },
    #[error("{location} is a tlpx card with register map 0x{found:08x} (version {major}.{minor}), but this tlpx knows map 0x{expected:08x}: use the tlpx built from the same source as the card's gateware (make host), or rebuild the card (make gateware)")]
    UnknownRegisterMap { location: String, found: u32, expected: u32, major: u16, minor: u16 },
}

/// A checked tlpx card.
pub struct Card {
    device: Box<dyn Device>,
    identity: Identity,
}

impl Card {
    /// Opens `device` as a tlpx card whose map hash must be `tlpx_regs::MAP_HASH` (the card
    /// without the soft CPU) or `tlpx_regs::MAP_HASH_CPU` (with it: a superset of the same map).
    /// The identification block is read once (no more register reads than before the CPU
    /// card existed: the spy's golden trace depends on the card time an open takes).
    pub fn open(device: Box<dyn Device>) -> Result<Card, CardError> {
        Card::open_accepting(device, &[tlpx_regs::MAP_HASH, tlpx_regs::MAP_HASH_CPU])
    }

    /// Opens `device` as a tlpx card whose map hash must be `expected_map_hash`.
    pub fn open_expecting(device: Box<dyn Device>, expected_map_hash: u32) -> Result<Card, CardError> {
        Card::open_accepting(device, &[expected_map_hash])
    }

    /// Opens `device` as a tlpx card whose map hash is one of `accepted` (the first is the one
    /// an error names as expected).
    fn open_accepting(mut device: Box<dyn Device>, accepted: &[u32]) -> Result<Card, CardError> {
        let expected_map_hash = accepted[0];
        let identity = read_identity(device.as_mut())?;
        let location = device.description().location;
        let expected_magic = tlpx_regs::constants::IDENT_MAGIC as u32;
        if identity.magic != expected_magic {
            return Err(CardError::NotATlpxCard { location, found: identity.magic, expected: expected_magic });
        }
        if !accepted.contains(&identity.map_hash) {
            return Err(CardError::UnknownRegisterMap {
                location,
                found: identity.map_hash,
                expected: expected_map_hash,
                major: identity.version_major,
                minor: identity.version_minor,
            });
        }
        Ok(Card { device, identity })
    }

    pub fn identity(&self) -> &Identity {
        &self.identity
    }

    pub fn device(&mut self) -> &mut dyn Device {
        self.device.as_mut()
    }

    pub fn into_device(self) -> Box<dyn Device> {
        self.device
    }

    pub fn has_feature(&self, name: &str) -> bool {
        self.identity.features.contains(&name)
    }

    /// Reads a register. A 64-bit register is one 2-DW read when it is 8-byte aligned (the
    /// CPU access must be naturally aligned), otherwise two 32-bit reads, low DW first.
    pub fn read(&mut self, reg: Register) -> Result<u64, DeviceError> {
        let bar = tlpx_regs::BAR;
        if reg.size_bits <= 32 {
            return self.device.bar_read(bar, reg.offset, Width::W32);
        }
        if reg.offset.is_multiple_of(8) {
            return self.device.bar_read(bar, reg.offset, Width::W64);
        }
        let low = self.device.bar_read(bar, reg.offset, Width::W32)?;
        let high = self.device.bar_read(bar, reg.offset + 4, Width::W32)?;
        Ok(high << 32 | low)
    }

    /// Writes a register; 64-bit registers as `read` describes.
    pub fn write(&mut self, reg: Register, value: u64) -> Result<(), DeviceError> {
        let bar = tlpx_regs::BAR;
        if reg.size_bits <= 32 {
            return self.device.bar_write(bar, reg.offset, Width::W32, value);
        }
        if reg.offset.is_multiple_of(8) {
            return self.device.bar_write(bar, reg.offset, Width::W64, value);
        }
        self.device.bar_write(bar, reg.offset, Width::W32, value & 0xFFFF_FFFF)?;
        self.device.bar_write(bar, reg.offset + 4, Width::W32, value >> 32)
    }

    /// The card's 64-bit cycle counter, read in one 2-DW request (never torn).
    pub fn cycles(&mut self) -> Result<u64, DeviceError> {
        self.device.bar_read(tlpx_regs::BAR, timebase::CYCLES_LO.offset, Width::W64)
    }

    /// Converts card cycles to time.
    pub fn cycles_to_duration(&self, cycles: u64) -> Duration {
        Duration::from_secs_f64(cycles as f64 / f64::from(self.identity.clock_hz.max(1)))
    }
}
