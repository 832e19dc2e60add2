//! The passive spy's capture configuration: what to record ([`Filters`]), when to start or
//! stop ([`Trigger`]), the ring it writes ([`Ring`]), their checks ([`SpyConfig::new`],
//! [`Ring::new`]) and the register writes that program a capture
//! ([`SpyConfig::program_writes`], [`SpyConfig::enable_word`]).

use std::fmt;

use serde::Serialize;
use tlpx_regs::spy as regs;

use crate::RegWrite;

/// TLP classes of the live counters and the type filters, in bit order.
pub const CLASSES: [&str; 8] = ["mrd", "mwr", "cpl", "cpld", "msg", "cfg", "io", "other"];
/// Classes of the record filter ([`Filters::class_mask`]): the TLP classes, then `msi` (the
/// card's MSIs, which no PHY stream carries: the spy's MSI records).
pub const FILTER_CLASSES: [&str; 9] = ["mrd", "mwr", "cpl", "cpld", "msg", "cfg", "io", "other", "msi"];
/// The filter's `msi` bit.
pub const CLASS_MSI: u16 = 1 << 8;
/// Every class of the record filter.
pub const ALL_FILTER_CLASSES: u16 = (1 << FILTER_CLASSES.len()) - 1;
/// Every TLP class (trigger, payload capture).
pub const ALL_TLP_CLASSES: u8 = 0xFF;
/// Records the spy's record FIFO holds: the most `pre` records of a start trigger.
pub const RECORD_FIFO_DEPTH: u32 = tlpx_regs::constants::SPY_RECORD_FIFO_DEPTH as u32;
/// Most data DWs the spy captures per TLP (`payload.dws`).
pub const PAYLOAD_DWS_MAX: u8 = tlpx_regs::constants::SPY_PAYLOAD_DWS_MAX as u8;
/// Smallest ring (records).
pub const MIN_RING_RECORDS: u32 = 16;
/// Largest ring (records): 2^24 records = 512 MiB of host memory.
pub const MAX_RING_RECORDS: u32 = 1 << 24;
/// Idle cycles after which the spy writes a partial batch of records to the ring.
pub const FLUSH_CYCLES: u32 = 256;

/// What to record. The default records everything except the spy's own ring writes.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Filters {
    /// Record host-to-card TLPs.
    pub down: bool,
    /// Record card-to-host TLPs.
    pub up: bool,
    /// Classes to record, bit per class of [`FILTER_CLASSES`] (bit 8: MSIs).
    pub class_mask: u16,
    /// Requests are recorded when `(address & address_mask) == (address_base & address_mask)`
    /// (completions carry no address and always pass).
    pub address_base: u64,
    pub address_mask: u64,
    /// Requests and completions are recorded when their requester ID matches under the mask.
    pub requester_id: u16,
    pub requester_mask: u16,
    /// Also record the spy's own ring writes.
    pub include_own: bool,
    /// Data DWs to capture per TLP with data (0 = off, up to [`PAYLOAD_DWS_MAX`]): they
    /// follow the TLP's record as payload records.
    pub payload_dws: u8,
    /// TLP classes whose payload is captured, bit per class of [`CLASSES`].
    pub payload_classes: u8,
    /// Directions whose payload is captured: bit 0 down, bit 1 up.
    pub payload_directions: u8,
}

impl Default for Filters {
    fn default() -> Self {
        Filters {
            down: true,
            up: true,
            class_mask: ALL_FILTER_CLASSES,
            address_base: 0,
            address_mask: 0,
            requester_id: 0,
            requester_mask: 0,
            include_own: false,
            payload_dws: 0,
            payload_classes: ALL_TLP_CLASSES,
            payload_directions: 0b11,
        }
    }
}

/// Trigger modes (the spy's `trigger.mode`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum TriggerMode {
    /// Record continuously.
    Off,
    /// Keep the last `pre` records until the trigger matches, then `post` records (the
    /// trigger's included) and stop.
    Start,
    /// Record continuously until the trigger matches, then `post` records (the trigger's
    /// included) and stop.
    Stop,
}

impl TriggerMode {
    /// The `trigger.mode` field's value (generated from the register map).
    pub fn value(self) -> u32 {
        match self {
            TriggerMode::Off => regs::trigger::Mode::Off,
            TriggerMode::Start => regs::trigger::Mode::Start,
            TriggerMode::Stop => regs::trigger::Mode::Stop,
        }
        .value()
    }
}

/// When to start or stop recording. Only records that passed the filters can trigger.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Trigger {
    pub mode: TriggerMode,
    /// Classes that can trigger.
    pub class_mask: u8,
    /// Directions that can trigger.
    pub down: bool,
    pub up: bool,
    /// Requests trigger when `(address & address_mask) == (address_base & address_mask)`;
    /// completions match any address.
    pub address_base: u64,
    pub address_mask: u64,
    /// Records kept before the trigger (start mode): 0..[`RECORD_FIFO_DEPTH`].
    pub pre: u16,
    /// Records kept from the trigger on, the trigger's included: >= 1.
    pub post: u32,
}

impl Default for Trigger {
    fn default() -> Self {
        Trigger { mode: TriggerMode::Off, class_mask: 0xFF, down: true, up: true, address_base: 0, address_mask: 0, pre: 0, post: 1 }
    }
}

/// Why a capture cannot be programmed; the messages name the value and what is accepted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SpyConfigError {
    FiltersNoDirection,
    FiltersNoClass,
    TriggerPre { pre: u16 },
    TriggerPreOnStop { pre: u16 },
    TriggerPostZero,
    TriggerNoDirection,
    TriggerNoClass,
    RingRecords { records: u32 },
    Mps { mps: u32 },
    PayloadDws { dws: u8 },
    PayloadNoClass,
    PayloadDirections { mask: u8 },
}

impl fmt::Display for SpyConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let classes = CLASSES.join(", ");
        match self {
            SpyConfigError::FiltersNoDirection => write!(f, "the filters select no direction: record down, up or both"),
            SpyConfigError::FiltersNoClass => {
                write!(f, "the filters select no TLP type: choose some of {}", FILTER_CLASSES.join(", "))
            }
            SpyConfigError::TriggerPre { pre } => {
                write!(f, "pre-trigger records must be 0..={} (the spy's record FIFO), not {pre}", RECORD_FIFO_DEPTH - 1)
            }
            SpyConfigError::TriggerPreOnStop { pre } => {
                write!(f, "pre-trigger records ({pre}) only apply to a start trigger: a stop trigger records everything before it")
            }
            SpyConfigError::TriggerPostZero => write!(f, "post-trigger records must be at least 1 (the trigger itself), not 0"),
            SpyConfigError::TriggerNoDirection => write!(f, "the trigger matches no direction: choose down, up or both"),
            SpyConfigError::TriggerNoClass => write!(f, "the trigger matches no TLP type: choose some of {classes}"),
            SpyConfigError::RingRecords { records } => {
                write!(f, "ring size must be a power of two in {MIN_RING_RECORDS}..={MAX_RING_RECORDS} records, not {records}")
            }
            SpyConfigError::Mps { mps } => write!(f, "Max Payload Size must be a power of two in 128..=4096 bytes, not {mps}"),
            SpyConfigError::PayloadDws { dws } => {
                write!(f, "payload capture takes 0..={PAYLOAD_DWS_MAX} data DWs per TLP (0: off), not {dws}")
            }
            SpyConfigError::PayloadNoClass => write!(f, "payload capture selects no TLP type: choose some of {classes}"),
            SpyConfigError::PayloadDirections { mask } => {
                write!(f, "payload capture directions must be down (1), up (2) or both (3), not {mask}")
            }
        }
    }
}

impl std::error::Error for SpyConfigError {}

impl Filters {
    pub fn validate(&self) -> Result<(), SpyConfigError> {
        if !self.down && !self.up {
            return Err(SpyConfigError::FiltersNoDirection);
        }
        if self.class_mask & ALL_FILTER_CLASSES == 0 {
            return Err(SpyConfigError::FiltersNoClass);
        }
        if self.payload_dws > PAYLOAD_DWS_MAX {
            return Err(SpyConfigError::PayloadDws { dws: self.payload_dws });
        }
        if self.payload_dws > 0 {
            if self.payload_classes == 0 {
                return Err(SpyConfigError::PayloadNoClass);
            }
            if self.payload_directions == 0 || self.payload_directions > 0b11 {
                return Err(SpyConfigError::PayloadDirections { mask: self.payload_directions });
            }
        }
        Ok(())
    }
}

impl Trigger {
    pub fn validate(&self) -> Result<(), SpyConfigError> {
        if self.mode == TriggerMode::Off {
            return Ok(());
        }
        if u32::from(self.pre) >= RECORD_FIFO_DEPTH {
            return Err(SpyConfigError::TriggerPre { pre: self.pre });
        }
        if self.pre > 0 && self.mode == TriggerMode::Stop {
            return Err(SpyConfigError::TriggerPreOnStop { pre: self.pre });
        }
        if self.post == 0 {
            return Err(SpyConfigError::TriggerPostZero);
        }
        if !self.down && !self.up {
            return Err(SpyConfigError::TriggerNoDirection);
        }
        if self.class_mask == 0 {
            return Err(SpyConfigError::TriggerNoClass);
        }
        Ok(())
    }
}

/// The spy's own ring in host memory: its size in records and the largest write the spy
/// makes into it, checked against the link's Max Payload Size.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Ring {
    records: u32,
    payload_size_log2: u32,
}

impl Ring {
    /// A ring of `records` records (a power of two in 16..=2^24) for a link of Max Payload
    /// Size `mps` (a power of two in 128..=4096 bytes).
    pub fn new(records: u32, mps: u32) -> Result<Ring, SpyConfigError> {
        if !records.is_power_of_two() || !(MIN_RING_RECORDS..=MAX_RING_RECORDS).contains(&records) {
            return Err(SpyConfigError::RingRecords { records });
        }
        if !mps.is_power_of_two() || !(128..=4096).contains(&mps) {
            return Err(SpyConfigError::Mps { mps });
        }
        // Up to 256 bytes (8 records per TLP): larger writes gain little and delay delivery.
        Ok(Ring { records, payload_size_log2: mps.min(256).trailing_zeros() })
    }

    pub fn records(self) -> u32 {
        self.records
    }

    pub fn payload_size_log2(self) -> u32 {
        self.payload_size_log2
    }
}

/// Filters and trigger that passed their checks: the only thing a capture is programmed from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SpyConfig {
    filters: Filters,
    trigger: Trigger,
}

fn direction_mask(down: bool, up: bool) -> u64 {
    u64::from(down) | u64::from(up) << 1
}

impl SpyConfig {
    /// Checks the filters, then the trigger; the first bad value is the error.
    pub fn new(filters: &Filters, trigger: &Trigger) -> Result<SpyConfig, SpyConfigError> {
        filters.validate()?;
        trigger.validate()?;
        Ok(SpyConfig { filters: filters.clone(), trigger: trigger.clone() })
    }

    pub fn filters(&self) -> &Filters {
        &self.filters
    }

    pub fn trigger(&self) -> &Trigger {
        &self.trigger
    }

    /// The writes that program a capture, in order, up to (not including) the enabling write:
    /// a clear (counters, histograms, sequence, ring indices), the ring when the spy writes
    /// its own (`ring`: the ring's bus address and size; without one, records go to LitePCIe's
    /// DMA writer), filters, trigger, a completion timeout of 1 ms of card time (as the
    /// generator's), and a second clear: the programming writes were counted by the live
    /// counters.
    pub fn program_writes(&self, ring: Option<(u64, Ring)>, clock_hz: u32) -> Vec<RegWrite> {
        let (f, t) = (&self.filters, &self.trigger);
        let clear = RegWrite::new(regs::CONTROL, regs::control::CLEAR.set(1));
        let mut w = vec![clear];
        if let Some((bus_addr, ring)) = ring {
            w.push(RegWrite::new(regs::RING_BASE, bus_addr));
            w.push(RegWrite::new(regs::RING_SIZE_LOG2, u64::from(ring.records.trailing_zeros())));
            w.push(RegWrite::new(regs::PAYLOAD_SIZE_LOG2, u64::from(ring.payload_size_log2)));
        }
        w.extend([
            RegWrite::new(regs::FLUSH_CYCLES, u64::from(FLUSH_CYCLES)),
            RegWrite::new(regs::RD_INDEX, 0),
            RegWrite::new(regs::DIRECTION_MASK, direction_mask(f.down, f.up)),
            RegWrite::new(regs::CLASS_MASK, u64::from(f.class_mask)),
            RegWrite::new(regs::ADDRESS_BASE, f.address_base),
            RegWrite::new(regs::ADDRESS_MASK, f.address_mask),
            RegWrite::new(regs::REQUESTER_ID, u64::from(f.requester_id)),
            RegWrite::new(regs::REQUESTER_MASK, u64::from(f.requester_mask)),
            RegWrite::new(
                regs::PAYLOAD,
                regs::payload::DWS.set(u64::from(f.payload_dws))
                    | regs::payload::CLASS_MASK.set(u64::from(f.payload_classes))
                    | regs::payload::DIRECTION_MASK.set(u64::from(f.payload_directions)),
            ),
            RegWrite::new(
                regs::TRIGGER,
                regs::trigger::MODE.set(u64::from(t.mode.value()))
                    | regs::trigger::CLASS_MASK.set(u64::from(t.class_mask))
                    | regs::trigger::DIRECTION_MASK.set(direction_mask(t.down, t.up)),
            ),
            RegWrite::new(regs::TRIGGER_ADDRESS_BASE, t.address_base),
            RegWrite::new(regs::TRIGGER_ADDRESS_MASK, t.address_mask),
            RegWrite::new(regs::TRIGGER_PRE, u64::from(t.pre)),
            RegWrite::new(regs::TRIGGER_POST, u64::from(t.post.max(1))),
            RegWrite::new(regs::TIMEOUT, u64::from(clock_hz / 1000)),
            clear,
        ]);
        w
    }

    /// The `control` value that enables the capture (`to_dma_writer`: records go to
    /// LitePCIe's DMA writer instead of the spy's ring).
    pub fn enable_word(&self, to_dma_writer: bool) -> u64 {
        regs::control::ENABLE.set(1)
            | regs::control::INCLUDE_OWN.set(u64::from(self.filters.include_own))
            | regs::control::TO_DMA_WRITER.set(u64::from(to_dma_writer))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn filter_and_trigger_edges() {
        assert!(SpyConfig::new(&Filters::default(), &Trigger::default()).is_ok());
        let f = Filters { down: false, up: false, ..Filters::default() };
        assert_eq!(f.validate(), Err(SpyConfigError::FiltersNoDirection));
        let f = Filters { class_mask: 0, ..Filters::default() };
        assert!(f.validate().expect_err("no class").to_string().ends_with("mrd, mwr, cpl, cpld, msg, cfg, io, other, msi"));
        // MSIs alone are a valid filter.
        assert!(Filters { class_mask: CLASS_MSI, ..Filters::default() }.validate().is_ok());
        // Off: nothing of the trigger matters.
        assert!(Trigger { class_mask: 0, post: 0, ..Trigger::default() }.validate().is_ok());
        let start = Trigger { mode: TriggerMode::Start, ..Trigger::default() };
        let last = (RECORD_FIFO_DEPTH - 1) as u16;
        assert!(Trigger { pre: last, ..start.clone() }.validate().is_ok());
        let e = Trigger { pre: last + 1, ..start.clone() }.validate().expect_err("pre");
        assert_eq!(e.to_string(), format!("pre-trigger records must be 0..={last} (the spy's record FIFO), not {}", last + 1));
        let stop = Trigger { mode: TriggerMode::Stop, ..Trigger::default() };
        assert_eq!(Trigger { pre: 1, ..stop.clone() }.validate(), Err(SpyConfigError::TriggerPreOnStop { pre: 1 }));
        assert_eq!(Trigger { post: 0, ..stop.clone() }.validate(), Err(SpyConfigError::TriggerPostZero));
        assert_eq!(Trigger { down: false, up: false, ..stop.clone() }.validate(), Err(SpyConfigError::TriggerNoDirection));
        assert_eq!(Trigger { class_mask: 0, ..stop }.validate(), Err(SpyConfigError::TriggerNoClass));
    }

    #[test]
    fn payload_capture_edges() {
        let max = Filters { payload_dws: PAYLOAD_DWS_MAX, ..Filters::default() };
        assert!(max.validate().is_ok());
        let e = Filters { payload_dws: PAYLOAD_DWS_MAX + 1, ..Filters::default() }.validate().expect_err("too many");
        assert_eq!(e.to_string(), format!("payload capture takes 0..={PAYLOAD_DWS_MAX} data DWs per TLP (0: off), not 17"));
        assert_eq!(Filters { payload_classes: 0, ..max.clone() }.validate(), Err(SpyConfigError::PayloadNoClass));
        assert_eq!(Filters { payload_directions: 4, ..max.clone() }.validate(), Err(SpyConfigError::PayloadDirections { mask: 4 }));
        // Off: the masks do not matter.
        assert!(Filters { payload_classes: 0, payload_directions: 0, ..Filters::default() }.validate().is_ok());
        let f = Filters { payload_dws: 4, payload_classes: 0b1000, payload_directions: 0b01, ..Filters::default() };
        let w = SpyConfig::new(&f, &Trigger::default()).expect("valid").program_writes(None, 125_000_000);
        let p = w.iter().find(|w| w.register.name == "payload").map(|w| w.value).expect("payload written");
        assert_eq!([regs::payload::DWS, regs::payload::CLASS_MASK, regs::payload::DIRECTION_MASK].map(|x| x.get(p)), [4, 0b1000, 0b01]);
        let c = w.iter().find(|w| w.register.name == "class_mask").map(|w| w.value).expect("class_mask");
        assert_eq!(c, u64::from(ALL_FILTER_CLASSES));
    }

    #[test]
    fn ring_size_and_payload_edges() {
        assert_eq!(Ring::new(MIN_RING_RECORDS, 128).map(Ring::records), Ok(16));
        assert!(Ring::new(MAX_RING_RECORDS, 128).is_ok());
        assert_eq!(Ring::new(8, 128), Err(SpyConfigError::RingRecords { records: 8 }));
        assert_eq!(Ring::new(MAX_RING_RECORDS * 2, 128), Err(SpyConfigError::RingRecords { records: MAX_RING_RECORDS * 2 }));
        assert!(Ring::new(100, 128).is_err());
        assert!(Ring::new(64, 100).expect_err("mps").to_string().contains("not 100"));
        assert!(Ring::new(64, 8192).is_err());
        // Ring writes: the link's MPS, at most 256 bytes.
        assert_eq!(Ring::new(64, 128).map(Ring::payload_size_log2), Ok(7));
        assert_eq!(Ring::new(64, 512).map(Ring::payload_size_log2), Ok(8));
    }

    #[test]
    fn program_writes_clear_ring_filters_trigger_timeout_clear() {
        let f =
            Filters { up: false, class_mask: 0b10, address_base: 0x1000, address_mask: !0xfff, include_own: true, ..Filters::default() };
        let t = Trigger { mode: TriggerMode::Start, class_mask: 0b1, down: false, pre: 3, post: 9, ..Trigger::default() };
        let c = SpyConfig::new(&f, &t).expect("valid");
        let ring = Ring::new(1024, 256).expect("ring");
        let w = c.program_writes(Some((0x8000_0000, ring)), 125_000_000);
        let names: Vec<&str> = w.iter().map(|w| w.register.name).collect();
        assert_eq!(names.first(), Some(&"control"));
        assert_eq!(names.last(), Some(&"control"));
        assert_eq!(&names[1..4], ["ring_base", "ring_size_log2", "payload_size_log2"]);
        let value = |n: &str| w.iter().find(|w| w.register.name == n).map(|w| w.value).expect(n);
        assert_eq!((value("ring_base"), value("ring_size_log2"), value("payload_size_log2")), (0x8000_0000, 10, 8));
        assert_eq!((value("direction_mask"), value("class_mask")), (0b01, 0b10));
        let trig = value("trigger");
        assert_eq!(regs::trigger::MODE.get(trig), u64::from(regs::trigger::Mode::Start.value()));
        assert_eq!((regs::trigger::CLASS_MASK.get(trig), regs::trigger::DIRECTION_MASK.get(trig)), (0b1, 0b10));
        assert_eq!((value("trigger_pre"), value("trigger_post"), value("timeout")), (3, 9, 125_000));
        // Without a ring of its own the spy's ring registers are left alone.
        let w = c.program_writes(None, 125_000_000);
        assert!(w.iter().all(|w| !w.register.name.starts_with("ring_") && w.register.name != "payload_size_log2"));
        let e = c.enable_word(true);
        assert_eq!(
            [regs::control::ENABLE, regs::control::INCLUDE_OWN, regs::control::TO_DMA_WRITER, regs::control::CLEAR].map(|f| f.get(e)),
            [1, 1, 1, 0]
        );
    }

    #[test]
    fn trigger_modes_are_the_register_map_s_values() {
        assert_eq!([TriggerMode::Off, TriggerMode::Start, TriggerMode::Stop].map(TriggerMode::value), [0, 1, 2]);
    }
}
