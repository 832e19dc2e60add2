//! A tlpx card behind any `Device`: identification checked, registers by name.
//!
//! `Card::open` reads the identification block at BAR0 offset 0 and refuses a card whose
//! magic is wrong or whose register-map hash is not the one `tlpx-regs` was generated from:
//! every offset this host uses comes from that map, so talking to another map would read
//! and write the wrong registers. A card whose accelerator slot puts its DUT at BAR0 0 has
//! the map at `RELOCATED_TLPX_BASE` instead: `Card::open` finds it there and every access
//! through the card goes there ([`crate::relocate`]).

use std::time::Duration;

use serde::Serialize;
pub use tlpx_regs::ident::features::Feature;
use tlpx_regs::{ident, timebase, Register};

use crate::lease::{self, Block, Held};
use crate::relocate::{self, Located, Relocated};
use crate::{ClockSource, Device, DeviceError, Interrupt, Width};

/// What the identification block says.
#[derive(Debug, Clone, Serialize)]
pub struct Identity {
    pub magic: u32,
    pub version_major: u16,
    pub version_minor: u16,
    /// The blocks `feature_bits` names, in bit order.
    pub features: Vec<Feature>,
    pub feature_bits: u32,
    pub map_hash: u32,
    pub data_width: u32,
    pub clock_hz: u32,
}

impl Identity {
    /// The features' names in the register map, in bit order.
    pub fn feature_names(&self) -> Vec<&'static str> {
        self.features.iter().map(|f| f.name()).collect()
    }

    /// The features' names as a list for people: `request_path, msi, generator`.
    pub fn feature_list(&self) -> String {
        self.feature_names().join(", ")
    }
}

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
    let features = Feature::ALL.into_iter().filter(|f| f.is_in(u64::from(feature_bits))).collect();
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
    #[error("{location} is not a tlpx card: BAR0 offset 0 reads 0x{found:08x}, and neither does offset {:#x} (where a card with its accelerator at BAR0 0 has tlpx's map) read 0x{expected:08x} (\"TLPX\") as a tlpx card does", relocate::RELOCATED_TLPX_BASE)]
    NotATlpxCard { location: String, found: u32, expected: u32 },
    #[error("{location} is a tlpx card with register map 0x{found:08x} (version {major}.{minor}), but this tlpx knows map 0x{expected:08x}: use the tlpx built from the same source as the card's gateware (make host), or rebuild the card (make gateware)")]
    UnknownRegisterMap { location: String, found: u32, expected: u32, major: u16, minor: u16 },
}

/// A checked tlpx card, and the leases (blocks this process owns, [`crate::lease`]) it holds.
///
/// Dropping the card releases its leases. Its waits ([`Card::wait_interrupt`], [`Card::idle`],
/// [`Card::poll_pause`]) are cut into slices: between two, the leases are refreshed when due
/// and a stop request ([`crate::stop`]) ends the wait with [`DeviceError::Interrupted`].
pub struct Card {
    device: Box<dyn Device>,
    identity: Identity,
    tlpx_base: u64,
    leases: Vec<Held>,
    notes: Vec<String>,
    /// Calls of [`Card::poll_pause`], and their steps since the leases were last looked at.
    polls: u32,
    paused: Duration,
}

impl Card {
    /// Opens `device` as a tlpx card whose map hash must be `tlpx_regs::MAP_HASH` (the card
    /// without the soft CPU) or `tlpx_regs::MAP_HASH_CPU` (with it: a superset of the same map).
    /// The identification block is read once. The spy's golden trace compares times from its
    /// scenario's first record and the host's read tags from its first one (the simulated root
    /// complex tags the host's reads in turn from its start), so neither the card time an open
    /// takes nor the number of reads it makes matters to it.
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
        let location = device.description().location;
        let expected_magic = tlpx_regs::constants::IDENT_MAGIC as u32;
        // tlpx's map at BAR0 0, or relocated: then every access through the card is.
        let mut identity = read_identity(device.as_mut())?;
        let (device, tlpx_base) = match relocate::locate_given(device.as_mut(), identity.magic)? {
            Located::At(0) => (device, 0),
            Located::At(base) => {
                let mut relocated = Box::new(Relocated::new(device, base)) as Box<dyn Device>;
                identity = read_identity(relocated.as_mut())?;
                (relocated, base)
            }
            Located::Nowhere { at_zero, .. } => {
                return Err(CardError::NotATlpxCard { location, found: at_zero, expected: expected_magic });
            }
        };
        if !accepted.contains(&identity.map_hash) {
            return Err(CardError::UnknownRegisterMap {
                location,
                found: identity.map_hash,
                expected: expected_map_hash,
                major: identity.version_major,
                minor: identity.version_minor,
            });
        }
        Ok(Card { device, identity, tlpx_base, leases: Vec::new(), notes: Vec::new(), polls: 0, paused: Duration::ZERO })
    }

    pub fn identity(&self) -> &Identity {
        &self.identity
    }

    /// The BAR0 offset of tlpx's map on this card: 0, or `RELOCATED_TLPX_BASE` when the
    /// accelerator slot's DUT is placed at BAR0 0. Every access through [`Card::device`] and
    /// [`Card::read`]/[`Card::write`] already adds it (tlpx-internal offsets in, BAR0 out); a
    /// tool that decodes BAR0 addresses it saw on the link (the spy) subtracts it.
    pub fn tlpx_base(&self) -> u64 {
        self.tlpx_base
    }

    pub fn device(&mut self) -> &mut dyn Device {
        self.device.as_mut()
    }

    pub fn has_feature(&self, feature: Feature) -> bool {
        self.identity.features.contains(&feature)
    }

    /// [`DeviceError::MissingBlock`] unless the card carries `feature`; `block` names what the
    /// caller needs of it for the message (`"spy"`, `"PIO window"`), so that every command and
    /// driver refuses a card without it alike, and callers can tell this refusal from others.
    pub fn require(&self, feature: Feature, block: &str) -> Result<(), DeviceError> {
        if self.has_feature(feature) {
            return Ok(());
        }
        Err(DeviceError::MissingBlock { block: block.to_string(), feature, features: self.identity.feature_list() })
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

    // Leases -------------------------------------------------------------------------------------

    /// Makes this process the owner of `block` (nothing to do when it already is). A block
    /// whose owner is a dead process on this host is taken over (its job stopped first; a
    /// note says so, [`Card::take_notes`]); one a live process owns is [`DeviceError::Busy`].
    pub fn claim(&mut self, block: Block) -> Result<(), DeviceError> {
        if self.holds(block) {
            // Still ours? `tlpx stop` from another process (or an expiry) takes a block back
            // between two runs of a command; the next run must not start on a block this
            // process no longer owns (one register read).
            return self.verify_held(block);
        }
        let length = lease::lease_length(self.device.clock_source());
        let (held, taken_over) = lease::claim(self, block, length)?;
        if let Some(o) = taken_over {
            self.notes.push(format!("took {} over from {}: its job was stopped", block.title(), o.describe()));
        }
        self.leases.push(held);
        Ok(())
    }

    /// [`DeviceError::LeaseLost`] (and the lease forgotten) when `block`, held by this
    /// process, is no longer its own; Ok when it still is or was never held.
    pub fn verify_held(&mut self, block: Block) -> Result<(), DeviceError> {
        let Some(i) = self.leases.iter().position(|h| h.block == block) else {
            return Ok(());
        };
        let held = self.leases[i].clone();
        let result = lease::verify(self, &held);
        if matches!(result, Err(DeviceError::LeaseLost { .. })) {
            self.leases.remove(i);
        }
        result
    }

    /// Whether this process owns `block` through this card.
    pub fn holds(&self, block: Block) -> bool {
        self.leases.iter().any(|h| h.block == block)
    }

    /// Gives `block` back (the card ends whatever job it still has).
    pub fn release(&mut self, block: Block) -> Result<(), DeviceError> {
        let Some(i) = self.leases.iter().position(|h| h.block == block) else {
            return Ok(());
        };
        let held = self.leases.remove(i);
        lease::release(self, &held)
    }

    /// Refreshes every lease whose refresh is due (a quarter of its length has passed);
    /// [`DeviceError::LeaseLost`] when one is no longer ours.
    pub fn keep_leases(&mut self) -> Result<(), DeviceError> {
        if self.leases.is_empty() {
            return Ok(());
        }
        let period = lease::lease_length(self.device.clock_source()).as_nanos() as u64 / 4;
        let now = self.device.clock_ns()?;
        let mut leases = std::mem::take(&mut self.leases);
        let mut result = Ok(());
        let mut lost = None;
        for (i, held) in leases.iter_mut().enumerate() {
            if now.saturating_sub(held.refreshed_ns) >= period {
                result = lease::verify(self, held).and_then(|_| lease::refresh(self, held));
                if result.is_err() {
                    if matches!(result, Err(DeviceError::LeaseLost { .. })) {
                        lost = Some(i);
                    }
                    break;
                }
            }
        }
        // A lease that is no longer ours is forgotten: releasing it later (Card::release,
        // Drop) would only be refused, and counted by the card as a refusal.
        if let Some(i) = lost {
            leases.remove(i);
        }
        self.leases = leases;
        result
    }

    /// Notes about what opening the card or claiming blocks did (a dead owner taken over).
    pub fn take_notes(&mut self) -> Vec<String> {
        std::mem::take(&mut self.notes)
    }

    // Waits ----------------------------------------------------------------------------------------

    /// The longest slice of one wait: short enough to refresh leases in time and to stop within
    /// about a second of wall time (on the simulator card time runs slower than wall time).
    fn wait_slice(&self) -> Duration {
        let lease_quarter = lease::lease_length(self.device.clock_source()) / 4;
        let stop_check = match self.device.clock_source() {
            ClockSource::SimulatedCard => Duration::from_millis(1),
            ClockSource::Host => Duration::from_millis(100),
        };
        lease_quarter.min(stop_check)
    }

    /// `Device::wait_interrupt`, in slices (see the type's documentation).
    pub fn wait_interrupt(&mut self, vector_mask: u32, timeout: Duration) -> Result<Option<Interrupt>, DeviceError> {
        let slice = self.wait_slice();
        let mut left = timeout;
        loop {
            self.keep_leases()?;
            if crate::stop::requested() {
                return Err(DeviceError::Interrupted);
            }
            let step = left.min(slice);
            if let Some(irq) = self.device.wait_interrupt(vector_mask, step)? {
                return Ok(Some(irq));
            }
            left = left.saturating_sub(step);
            if left.is_zero() {
                return Ok(None);
            }
        }
    }

    /// Waits for an interrupt of `vector_mask` for at most `budget` of **card time**.
    ///
    /// On the simulator a backend's timeout is card time already. On a hardware backend it is
    /// wall time, which is card time only for a card that runs at its clock: the Verilated
    /// card behind vfio-user (the virtual platform, docs/virtual-platform.md) runs 15-30 times
    /// slower than wall time, and a guest under TCG takes milliseconds to deliver an MSI, so a
    /// budget meant for the card's work is measured there by the card's own cycle counter,
    /// between slices of wall-time waiting. A wall-time cap (100 times the budget, plus 1 s)
    /// still ends the wait if the counter stops (a card that hangs).
    pub fn wait_interrupt_card_time(&mut self, vector_mask: u32, budget: Duration) -> Result<Option<Interrupt>, DeviceError> {
        if self.device.clock_source() == ClockSource::SimulatedCard {
            return self.wait_interrupt(vector_mask, budget);
        }
        let budget_cycles = (budget.as_secs_f64() * f64::from(self.identity.clock_hz.max(1))).ceil() as u64;
        let start = self.cycles()?;
        let cap = budget.saturating_mul(100) + Duration::from_secs(1);
        let t0 = std::time::Instant::now();
        // Short slices (at most the budget, at most 10 ms): on real hardware the wait ends as
        // soon after the budget as before, one counter read per slice.
        let slice = budget.clamp(Duration::from_micros(100), Duration::from_millis(10));
        loop {
            if let Some(irq) = self.wait_interrupt(vector_mask, slice)? {
                return Ok(Some(irq));
            }
            if self.cycles()?.wrapping_sub(start) >= budget_cycles || t0.elapsed() >= cap {
                return Ok(None);
            }
        }
    }

    /// `Device::idle`, in slices.
    pub fn idle(&mut self, duration: Duration) -> Result<(), DeviceError> {
        let slice = self.wait_slice();
        let mut left = duration;
        while !left.is_zero() {
            self.keep_leases()?;
            if crate::stop::requested() {
                return Err(DeviceError::Interrupted);
            }
            let step = left.min(slice);
            self.device.idle(step)?;
            left = left.saturating_sub(step);
        }
        Ok(())
    }

    /// `Device::poll_pause` with the leases kept and a stop request honoured. On hardware a
    /// poll is a spin of a few ns: the leases are looked at every 1024th call only, so the
    /// poll loop's own cost (what a host-side latency measures) stays that of the spin.
    pub fn poll_pause(&mut self, step: Duration) -> Result<(), DeviceError> {
        // Every 1024th poll, or once the polls' steps add up to a slice (the simulator runs
        // the card for `step` at each poll: long steps must not outlast a lease).
        self.polls = self.polls.wrapping_add(1);
        self.paused += step;
        if self.polls.is_multiple_of(1024) || self.paused >= self.wait_slice() {
            self.paused = Duration::ZERO;
            self.keep_leases()?;
        }
        if crate::stop::requested() {
            return Err(DeviceError::Interrupted);
        }
        self.device.poll_pause(step.min(self.wait_slice()))
    }

    /// Converts card cycles to time.
    pub fn cycles_to_duration(&self, cycles: u64) -> Duration {
        Duration::from_secs_f64(cycles as f64 / f64::from(self.identity.clock_hz.max(1)))
    }
}

impl Drop for Card {
    /// Gives back every block this process still owns, so the next user need not wait for a
    /// lease to expire. Errors are ignored: a lease not released expires by itself.
    fn drop(&mut self) {
        for held in std::mem::take(&mut self.leases) {
            let _ = lease::release(self, &held);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{DeviceDescription, DmaBuffer};

    /// A card that is only its identification block, with `features`: every other register
    /// reads 0 and writes go nowhere. Enough to see how the drivers treat a missing block.
    struct IdentOnly {
        features: u64,
    }

    impl Device for IdentOnly {
        fn description(&self) -> DeviceDescription {
            DeviceDescription {
                backend: "ident-only".into(),
                location: "test".into(),
                pci_address: "0000:00:00.0".into(),
                bar_sizes: vec![Some(tlpx_regs::BAR_SIZE)],
            }
        }
        fn bar_read(&mut self, _bar: u8, offset: u64, _width: Width) -> Result<u64, DeviceError> {
            Ok(match offset {
                o if o == ident::MAGIC.offset => tlpx_regs::constants::IDENT_MAGIC,
                o if o == ident::FEATURES.offset => self.features,
                o if o == ident::MAP_HASH.offset => u64::from(tlpx_regs::MAP_HASH),
                _ => 0,
            })
        }
        fn bar_write(&mut self, _bar: u8, _offset: u64, _width: Width, _value: u64) -> Result<(), DeviceError> {
            Ok(())
        }
        fn config_read(&mut self, _offset: u16, len: u16) -> Result<Vec<u8>, DeviceError> {
            Ok(vec![0; usize::from(len)])
        }
        fn config_write(&mut self, _offset: u16, _data: &[u8]) -> Result<(), DeviceError> {
            Ok(())
        }
        fn alloc_dma(&mut self, _len: usize) -> Result<DmaBuffer, DeviceError> {
            Err(DeviceError::Unsupported { backend: "ident-only".into(), what: "allocate DMA memory".into(), instead: "none".into() })
        }
        fn free_dma(&mut self, _buffer: DmaBuffer) -> Result<(), DeviceError> {
            Ok(())
        }
        fn wait_interrupt(&mut self, _vector_mask: u32, _timeout: Duration) -> Result<Option<Interrupt>, DeviceError> {
            Ok(None)
        }
        fn idle(&mut self, _duration: Duration) -> Result<(), DeviceError> {
            Ok(())
        }
    }

    fn card_with(features: &[Feature]) -> Card {
        let bits = features.iter().fold(0, |bits, f| bits | f.field().set(1));
        Card::open(Box::new(IdentOnly { features: bits })).expect("an identification block that checks")
    }

    #[test]
    fn features_are_the_generated_bits_in_bit_order() {
        let card = card_with(&[Feature::Spy, Feature::Generator]);
        assert_eq!(card.identity().features, [Feature::Generator, Feature::Spy]);
        assert_eq!(card.identity().feature_bits, 0b1_1000, "generator is bit 3, spy bit 4 (ident.features)");
        assert_eq!(card.identity().feature_list(), "generator, spy");
        assert!(card.has_feature(Feature::Spy) && !card.has_feature(Feature::IrqTimer));
        assert_eq!(serde_json::to_value(card.identity()).expect("json")["features"], serde_json::json!(["generator", "spy"]));
    }

    /// Every driver refuses a card without its block with the same typed error, naming the
    /// block and what the card has: a caller can tell it from a bad argument (exit status 3,
    /// not 2, in the CLI).
    #[test]
    fn a_missing_block_is_one_typed_error_naming_the_block_and_the_features() {
        let mut card = card_with(&[Feature::RequestPath, Feature::Msi]);
        let refusals = [
            (crate::spy::counters(&mut card).err(), Feature::Spy, "spy"),
            (crate::generator::counters(&mut card).err(), Feature::Generator, "traffic generator"),
            (crate::pio::reset(&mut card).err(), Feature::Generator, "PIO window"),
            (crate::irq_timer::counters(&mut card).err(), Feature::IrqTimer, "interrupt latency timer"),
            (crate::rule30::info(&mut card).err(), Feature::Rule30, "rule-30 accelerator"),
            (crate::rt_loop::Responder::attach(&mut card, 64).err(), Feature::RtLoop, "real-time loop"),
            (crate::lease::expiries(&mut card, Block::RtLoop).err(), Feature::RtLoop, "real-time loop"),
        ];
        for (error, feature, name) in refusals {
            match error {
                Some(DeviceError::MissingBlock { block, feature: missing, features }) => {
                    assert_eq!((block.as_str(), missing, features.as_str()), (name, feature, "request_path, msi"));
                }
                other => panic!("{name}: expected MissingBlock, got {other:?}"),
            }
        }
        let message = crate::spy::counters(&mut card).expect_err("no spy").to_string();
        assert_eq!(
            message,
            "this card has no spy (its features: request_path, msi); build the card with the spy block \
             (make gateware; then restart tlpx-sim for a simulated card)"
        );
    }

    #[test]
    fn a_block_the_card_has_passes_the_check() {
        let mut card = card_with(&[Feature::Generator]);
        let counters = crate::generator::counters(&mut card).expect("the generator is there");
        assert!(!counters.running && counters.errors == crate::generator::ErrorCounts::default());
        assert!(card.require(Feature::Generator, "traffic generator").is_ok());
    }

    #[test]
    fn a_card_opens_with_its_map_at_zero_or_relocated_and_every_access_goes_there() {
        use crate::relocate::tests::MemoryCard;
        use crate::relocate::RELOCATED_TLPX_BASE;
        for base in [0, RELOCATED_TLPX_BASE] {
            let memory = MemoryCard::with_ident_at(base, 0x100000);
            let dws = memory.dws.clone();
            let mut card = Card::open(Box::new(memory)).unwrap_or_else(|e| panic!("a card with its map at {base:#x}: {e}"));
            assert_eq!(card.tlpx_base(), base);
            assert_eq!(card.identity().map_hash, tlpx_regs::MAP_HASH);
            card.write(ident::SCRATCH, 0xC0FFEE).expect("the memory card answers");
            assert_eq!(dws.lock().expect("the memory card's lock").get(&(base + ident::SCRATCH.offset)), Some(&0xC0FFEE));
            assert_eq!(card.read(ident::SCRATCH).expect("the memory card answers"), 0xC0FFEE);
            // A command's raw access through the device uses tlpx-internal offsets too.
            assert_eq!(
                card.device().bar_read(tlpx_regs::BAR, ident::MAGIC.offset, Width::W32).expect("the memory card answers"),
                tlpx_regs::constants::IDENT_MAGIC
            );
        }
    }

    #[test]
    fn a_device_with_the_magic_in_neither_place_is_refused_naming_both() {
        use crate::relocate::tests::MemoryCard;
        let memory = MemoryCard::with_ident_at(0x1000, 0x100000);
        memory.dws.lock().expect("the memory card's lock").insert(0, 0x1234_5678);
        let err = Card::open(Box::new(memory)).err().expect("not a tlpx card");
        assert!(matches!(err, CardError::NotATlpxCard { found: 0x1234_5678, .. }), "{err:?}");
        let text = err.to_string();
        assert!(text.contains("offset 0 reads 0x12345678") && text.contains("0x80000") && text.contains("0x544c5058"), "{text}");
    }
}
