//! The traffic generator's configuration: a run as the host asks for it ([`GenConfig`]), its
//! checks against the generator's limits and the link ([`GenConfig::validate`]), and the
//! register writes that program it ([`ValidGenConfig::register_writes`]).
//!
//! Every limit is the gateware's (`tlpx_regs::constants`) and every field position and value
//! code the register map's (`tlpx_regs::generator`), so a change there changes the host.

use std::fmt;
use std::ops::Deref;

use serde::{Deserialize, Serialize};
use tlpx_regs::generator as gen;

use crate::{LinkLimits, RegWrite};

/// What a run does, how it addresses the window, what data it moves: the generator's
/// `config` field values, generated from the gateware's register map (serialized as the
/// map's value names: `read`, `read_write`, `write_then_read`, `sequential`, `prbs`, ...).
pub use tlpx_regs::generator::config::{AddressPattern, DataPattern, Operation};

/// Tags the generator may have outstanding (its tag range on the link is TAG_BASE..TAG_BASE+TAGS,
/// inside the 64 tags every requester on the card shares: gateware tlp.py).
pub const TAGS: u32 = tlpx_regs::constants::GENERATOR_TAGS as u32;
/// Largest transfer one descriptor moves.
pub const MAX_TRANSFER_BYTES: u32 = tlpx_regs::constants::GENERATOR_MAX_TRANSFER_BYTES as u32;
/// Buckets of the log2 latency / size histograms (bucket k counts values in [2^k, 2^(k+1))).
pub const HISTOGRAM_BUCKETS: usize = tlpx_regs::constants::GENERATOR_HISTOGRAM_BUCKETS as usize;
/// Largest byte offset of a transfer within its slot: the slot is at least a 64-byte cache
/// line and the offset places the transfer within that line.
pub const MAX_OFFSET: u32 = 63;
/// Smallest slot a transfer occupies (one cache line), so that offsets 0..=63 are meaningful.
const MIN_STRIDE: u32 = 64;

/// Bytes one transfer moves, checked against the generator's limit: the one place the
/// transfer size's range is decided (the CLI's size lists and [`GenConfig::validate`] both
/// go through it).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct TransferSize(u32);

impl TransferSize {
    /// `bytes` as a transfer size: 1..=[`MAX_TRANSFER_BYTES`].
    pub fn new(bytes: u64) -> Result<TransferSize, GenConfigError> {
        u32::try_from(bytes)
            .ok()
            .filter(|b| (1..=MAX_TRANSFER_BYTES).contains(b))
            .map(TransferSize)
            .ok_or(GenConfigError::TransferSize { bytes })
    }

    pub const fn get(self) -> u32 {
        self.0
    }
}

/// One generator run as asked for: plain data (results record it as it was asked), turned
/// into something the card runs only by [`GenConfig::validate`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GenConfig {
    pub operation: Operation,
    /// Bytes per transfer: 1..=MAX_TRANSFER_BYTES.
    pub transfer_size: u32,
    /// Transfers to do (per direction for ReadWrite); 0 = until `duration_cycles`.
    pub count: u64,
    /// Stop after this many card cycles; 0 = until `count`.
    pub duration_cycles: u64,
    /// Largest read request in bytes (power of two, 4..=MRRS).
    pub request_size: u32,
    /// Largest write payload in bytes (power of two, 4..=MPS).
    pub payload_size: u32,
    /// Idle card cycles after each request.
    pub idle_cycles: u32,
    /// Reads in flight at most: 1..=TAGS (1 = LAT_RD).
    pub max_outstanding: u32,
    pub address_pattern: AddressPattern,
    /// Bytes of the buffer the transfers move in (power of two, >= stride).
    pub window: u64,
    /// Byte offset of each transfer within its stride slot (the offset in a cache line).
    pub offset: u32,
    /// Force 4DW (64-bit) headers even below 4 GiB.
    pub addr64: bool,
    pub data_pattern: DataPattern,
    /// Check read data against the pattern.
    pub check_data: bool,
    pub relaxed_ordering: bool,
    pub no_snoop: bool,
    pub seed: u32,
    /// End runs with writes with a flushing 1-DW read, so that the measured time covers every
    /// write reaching host memory (not only leaving the card). On by default.
    #[serde(default = "default_true")]
    pub flush_writes: bool,
}

fn default_true() -> bool {
    true
}

/// Why a configuration cannot run. The messages name the value and what is accepted; callers
/// that know which flag set the value add it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GenConfigError {
    TransferSize { bytes: u64 },
    RequestSize { bytes: u32, mrrs: u32 },
    PayloadSize { bytes: u32, mps: u32 },
    Outstanding { reads: u32 },
    Offset { bytes: u32 },
    Window { bytes: u64, stride: u64, buffer: u64 },
    NoEnd,
}

impl fmt::Display for GenConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            GenConfigError::TransferSize { bytes } => write!(f, "transfer size must be 1..={MAX_TRANSFER_BYTES} bytes, not {bytes}"),
            GenConfigError::RequestSize { bytes, mrrs } => {
                write!(f, "request size must be a power of two in 4..={mrrs} (the link's MRRS), not {bytes}")
            }
            GenConfigError::PayloadSize { bytes, mps } => {
                write!(f, "payload size must be a power of two in 4..={mps} (the link's MPS), not {bytes}")
            }
            GenConfigError::Outstanding { reads } => write!(f, "outstanding reads must be 1..={TAGS}, not {reads}"),
            GenConfigError::Offset { bytes } => write!(f, "offset within a cache line must be 0..={MAX_OFFSET} bytes, not {bytes}"),
            GenConfigError::Window { bytes, stride, buffer } => {
                write!(f, "window must be a power of two from {stride} (one transfer slot) to {buffer} (the buffer), not {bytes}")
            }
            GenConfigError::NoEnd => write!(f, "give a transfer count or a duration (both are 0)"),
        }
    }
}

impl std::error::Error for GenConfigError {}

impl GenConfig {
    /// A sensible start: sequential 4 KiB writes, counter pattern, 32 reads in flight.
    pub fn new(operation: Operation, transfer_size: u32, count: u64) -> GenConfig {
        GenConfig {
            operation,
            transfer_size,
            count,
            duration_cycles: 0,
            request_size: 512,
            payload_size: 256,
            idle_cycles: 0,
            max_outstanding: 32,
            address_pattern: AddressPattern::Sequential,
            window: 1 << 20,
            offset: 0,
            addr64: false,
            data_pattern: DataPattern::Counter,
            check_data: true,
            relaxed_ordering: false,
            no_snoop: false,
            seed: 1,
            flush_writes: true,
        }
    }

    /// Slot size of one transfer: the power of two >= max(64, offset + transfer_size).
    pub fn stride(&self) -> u64 {
        u64::from((self.offset + self.transfer_size).max(MIN_STRIDE)).next_power_of_two()
    }

    /// Checks every parameter against the generator's limits and `link` (MPS, MRRS), and a
    /// window that fits a buffer of `buffer_len` bytes; the first bad value is the error.
    pub fn validate(&self, link: LinkLimits, buffer_len: u64) -> Result<ValidGenConfig, GenConfigError> {
        TransferSize::new(u64::from(self.transfer_size))?;
        if !self.request_size.is_power_of_two() || !(4..=link.mrrs).contains(&self.request_size) {
            return Err(GenConfigError::RequestSize { bytes: self.request_size, mrrs: link.mrrs });
        }
        if !self.payload_size.is_power_of_two() || !(4..=link.mps).contains(&self.payload_size) {
            return Err(GenConfigError::PayloadSize { bytes: self.payload_size, mps: link.mps });
        }
        if !(1..=TAGS).contains(&self.max_outstanding) {
            return Err(GenConfigError::Outstanding { reads: self.max_outstanding });
        }
        if self.offset > MAX_OFFSET {
            return Err(GenConfigError::Offset { bytes: self.offset });
        }
        let valid = ValidGenConfig { config: self.clone() };
        valid.check_buffer(buffer_len)?;
        if self.count == 0 && self.duration_cycles == 0 {
            return Err(GenConfigError::NoEnd);
        }
        Ok(valid)
    }
}

/// A [`GenConfig`] that passed [`GenConfig::validate`]: the only thing the driver runs and
/// [`register_writes`](ValidGenConfig::register_writes) encodes. Read its fields through
/// `Deref`; it cannot be changed (change the request and validate again).
#[derive(Debug, Clone, PartialEq)]
pub struct ValidGenConfig {
    config: GenConfig,
}

impl Deref for ValidGenConfig {
    type Target = GenConfig;
    fn deref(&self) -> &GenConfig {
        &self.config
    }
}

impl ValidGenConfig {
    /// The request this was validated from (what results record).
    pub fn config(&self) -> &GenConfig {
        &self.config
    }

    /// Checks that the window fits a buffer of `buffer_len` bytes: the buffer a run is given
    /// may be another than the one the configuration was validated for.
    pub fn check_buffer(&self, buffer_len: u64) -> Result<(), GenConfigError> {
        let (window, stride) = (self.config.window, self.config.stride());
        if !window.is_power_of_two() || window < stride || window > buffer_len {
            return Err(GenConfigError::Window { bytes: window, stride, buffer: buffer_len });
        }
        Ok(())
    }

    /// The `config` register: operation, patterns and flags in their generated fields. A
    /// write-then-read run never flushes (its read after the write is the flush already).
    pub fn config_word(&self) -> u64 {
        let c = &self.config;
        gen::config::OPERATION.set(u64::from(c.operation.value()))
            | gen::config::ADDRESS_PATTERN.set(u64::from(c.address_pattern.value()))
            | gen::config::DATA_PATTERN.set(u64::from(c.data_pattern.value()))
            | gen::config::CHECK_DATA.set(u64::from(c.check_data))
            | gen::config::ADDR64.set(u64::from(c.addr64))
            | gen::config::RELAXED_ORDERING.set(u64::from(c.relaxed_ordering))
            | gen::config::NO_SNOOP.set(u64::from(c.no_snoop))
            | gen::config::FLUSH.set(u64::from(c.flush_writes && c.operation != Operation::WriteThenRead))
    }

    /// log2 of the request, payload and slot sizes, as the card takes them (all powers of two
    /// once validated).
    pub fn request_size_log2(&self) -> u32 {
        self.config.request_size.trailing_zeros()
    }
    pub fn payload_size_log2(&self) -> u32 {
        self.config.payload_size.trailing_zeros()
    }
    pub fn stride_log2(&self) -> u32 {
        self.config.stride().trailing_zeros()
    }
    /// The `window_mask` register: the window is a power of two.
    pub fn window_mask(&self) -> u64 {
        self.config.window - 1
    }

    /// The writes that program a run over the buffer at bus address `base` on a card clocked
    /// at `clock_hz`, in the order the driver makes them: `control.clear` first (it resets the
    /// counters of the last run), then every parameter. Starting is the driver's (after it
    /// has armed its interrupt).
    pub fn register_writes(&self, base: u64, clock_hz: u32) -> Vec<RegWrite> {
        let c = &self.config;
        vec![
            RegWrite::new(gen::CONTROL, gen::control::CLEAR.set(1)),
            RegWrite::new(gen::CONFIG, self.config_word()),
            RegWrite::new(gen::TRANSFER_SIZE, u64::from(c.transfer_size)),
            RegWrite::new(gen::COUNT, c.count),
            RegWrite::new(gen::DURATION, c.duration_cycles),
            RegWrite::new(gen::REQUEST_SIZE_LOG2, u64::from(self.request_size_log2())),
            RegWrite::new(gen::PAYLOAD_SIZE_LOG2, u64::from(self.payload_size_log2())),
            RegWrite::new(gen::IDLE_CYCLES, u64::from(c.idle_cycles)),
            RegWrite::new(gen::MAX_OUTSTANDING, u64::from(c.max_outstanding)),
            RegWrite::new(gen::BASE, base),
            RegWrite::new(gen::WINDOW_MASK, self.window_mask()),
            RegWrite::new(gen::STRIDE_LOG2, u64::from(self.stride_log2())),
            RegWrite::new(gen::OFFSET, u64::from(c.offset)),
            RegWrite::new(gen::SEED, u64::from(c.seed)),
            RegWrite::new(gen::TIMEOUT, u64::from(completion_timeout_cycles(clock_hz))),
        ]
    }
}

/// The completion timeout the host programs: 1 ms of card time (PCIe's range A starts at
/// 50 us; 1 ms is generous).
pub const fn completion_timeout_cycles(clock_hz: u32) -> u32 {
    clock_hz / 1000
}

/// lowbias32 (Chris Wellons): the PRBS pattern's mixing function, the same in the gateware.
pub fn lowbias32(mut x: u32) -> u32 {
    x ^= x >> 16;
    x = x.wrapping_mul(0x7feb_352d);
    x ^= x >> 15;
    x = x.wrapping_mul(0x846c_a68b);
    x ^= x >> 16;
    x
}

/// The pattern's DW at bus address `bus_addr` (DW aligned): DW `i` of host memory holds
/// `pattern_word(pattern, seed, 4*i)`, so data can be checked in any completion order.
pub fn pattern_word(pattern: DataPattern, seed: u32, bus_addr: u64) -> u32 {
    let index = (bus_addr >> 2) as u32;
    match pattern {
        DataPattern::Counter => index.wrapping_add(seed),
        DataPattern::Prbs => lowbias32(index ^ seed),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LINK: LinkLimits = LinkLimits { mps: 256, mrrs: 512 };

    fn valid(c: &GenConfig) -> ValidGenConfig {
        c.validate(LINK, 1 << 20).expect("valid")
    }

    fn error(c: &GenConfig) -> GenConfigError {
        c.validate(LINK, 1 << 20).expect_err("invalid")
    }

    #[test]
    fn transfer_size_edges_are_the_gateware_limit() {
        assert_eq!(TransferSize::new(1).map(TransferSize::get), Ok(1));
        assert_eq!(
            TransferSize::new(u64::from(MAX_TRANSFER_BYTES)).map(TransferSize::get),
            Ok(tlpx_regs::constants::GENERATOR_MAX_TRANSFER_BYTES as u32)
        );
        assert_eq!(TransferSize::new(0), Err(GenConfigError::TransferSize { bytes: 0 }));
        let over = u64::from(MAX_TRANSFER_BYTES) + 1;
        assert_eq!(TransferSize::new(over), Err(GenConfigError::TransferSize { bytes: over }));
        // Beyond u32: refused, not truncated to a small valid size.
        assert!(TransferSize::new((1 << 32) + 64).is_err());
        let c = GenConfig::new(Operation::Read, MAX_TRANSFER_BYTES + 1, 1);
        assert_eq!(error(&c).to_string(), "transfer size must be 1..=65536 bytes, not 65537");
    }

    #[test]
    fn request_and_payload_sizes_are_checked_against_the_link() {
        let mut c = GenConfig::new(Operation::Read, 64, 1);
        c.request_size = 512;
        c.payload_size = 256;
        valid(&c);
        c.request_size = 1024;
        assert_eq!(error(&c).to_string(), "request size must be a power of two in 4..=512 (the link's MRRS), not 1024");
        c.request_size = 384;
        assert!(matches!(error(&c), GenConfigError::RequestSize { bytes: 384, mrrs: 512 }));
        c.request_size = 2;
        assert!(matches!(error(&c), GenConfigError::RequestSize { .. }));
        c.request_size = 4;
        c.payload_size = 512;
        assert_eq!(error(&c).to_string(), "payload size must be a power of two in 4..=256 (the link's MPS), not 512");
        // The same request on the largest link PCIe allows.
        assert!(c.validate(LinkLimits::LARGEST, 1 << 20).is_ok());
    }

    #[test]
    fn outstanding_offset_window_and_end_edges() {
        let mut c = GenConfig::new(Operation::Read, 64, 1);
        c.max_outstanding = TAGS;
        valid(&c);
        c.max_outstanding = TAGS + 1;
        assert_eq!(error(&c), GenConfigError::Outstanding { reads: TAGS + 1 });
        c.max_outstanding = 0;
        assert_eq!(error(&c), GenConfigError::Outstanding { reads: 0 });
        c.max_outstanding = 1;
        c.offset = 63;
        // 64 + 63 bytes need a 128-byte slot.
        assert_eq!(valid(&c).stride(), 128);
        c.offset = 64;
        assert_eq!(error(&c).to_string(), "offset within a cache line must be 0..=63 bytes, not 64");
        c.offset = 0;
        c.window = 64;
        valid(&c);
        c.window = 32;
        assert_eq!(error(&c).to_string(), "window must be a power of two from 64 (one transfer slot) to 1048576 (the buffer), not 32");
        c.window = 96;
        assert!(matches!(error(&c), GenConfigError::Window { .. }));
        c.window = 2 << 20;
        assert!(matches!(error(&c), GenConfigError::Window { buffer: 1_048_576, .. }));
        c.window = 4096;
        c.count = 0;
        assert_eq!(error(&c), GenConfigError::NoEnd);
        c.duration_cycles = 1;
        valid(&c);
    }

    #[test]
    fn a_smaller_buffer_than_validated_for_is_refused() {
        let mut c = GenConfig::new(Operation::Write, 64, 1);
        c.window = 4096;
        let v = valid(&c);
        assert!(v.check_buffer(4096).is_ok());
        assert_eq!(v.check_buffer(2048), Err(GenConfigError::Window { bytes: 4096, stride: 64, buffer: 2048 }));
    }

    #[test]
    fn config_word_puts_each_value_in_its_generated_field() {
        let mut c = GenConfig::new(Operation::ReadWrite, 64, 1);
        c.address_pattern = AddressPattern::Random;
        c.data_pattern = DataPattern::Prbs;
        c.check_data = false;
        c.addr64 = true;
        c.no_snoop = true;
        let w = valid(&c).config_word();
        assert_eq!(gen::config::OPERATION.get(w), u64::from(Operation::ReadWrite.value()));
        assert_eq!(gen::config::ADDRESS_PATTERN.get(w), u64::from(AddressPattern::Random.value()));
        assert_eq!(gen::config::DATA_PATTERN.get(w), u64::from(DataPattern::Prbs.value()));
        assert_eq!(
            [gen::config::CHECK_DATA, gen::config::ADDR64, gen::config::RELAXED_ORDERING, gen::config::NO_SNOOP, gen::config::FLUSH]
                .map(|f| f.get(w)),
            [0, 1, 0, 1, 1]
        );
        // Nothing outside the fields.
        let all = [
            gen::config::OPERATION,
            gen::config::ADDRESS_PATTERN,
            gen::config::DATA_PATTERN,
            gen::config::CHECK_DATA,
            gen::config::ADDR64,
            gen::config::RELAXED_ORDERING,
            gen::config::NO_SNOOP,
            gen::config::FLUSH,
        ];
        assert_eq!(w & !all.iter().fold(0, |m, f| m | f.mask()), 0);
        // Write-then-read never asks for the flushing read.
        c.operation = Operation::WriteThenRead;
        assert_eq!(gen::config::FLUSH.get(valid(&c).config_word()), 0);
    }

    #[test]
    fn register_writes_clear_first_then_every_parameter_in_order() {
        let mut c = GenConfig::new(Operation::Write, 200, 7);
        c.offset = 8;
        c.window = 4096;
        c.request_size = 128;
        c.payload_size = 64;
        c.seed = 0xdead;
        let writes = valid(&c).register_writes(0x4000_0000, 125_000_000);
        let order: Vec<&str> = writes.iter().map(|w| w.register.name).collect();
        assert_eq!(
            order,
            [
                "control",
                "config",
                "transfer_size",
                "count",
                "duration",
                "request_size_log2",
                "payload_size_log2",
                "idle_cycles",
                "max_outstanding",
                "base",
                "window_mask",
                "stride_log2",
                "offset",
                "seed",
                "timeout"
            ]
        );
        assert!(writes.iter().all(|w| w.register.region == "generator" && w.register.writable));
        let value = |name: &str| writes.iter().find(|w| w.register.name == name).map(|w| w.value);
        assert_eq!(value("control"), Some(gen::control::CLEAR.mask()));
        assert_eq!(value("transfer_size"), Some(200));
        assert_eq!(value("request_size_log2"), Some(7));
        assert_eq!(value("payload_size_log2"), Some(6));
        // 200 + 8 bytes: a 256-byte slot.
        assert_eq!(value("stride_log2"), Some(8));
        assert_eq!(value("window_mask"), Some(0xfff));
        assert_eq!(value("base"), Some(0x4000_0000));
        assert_eq!(value("timeout"), Some(125_000));
    }

    #[test]
    fn the_request_keeps_its_json_names_and_default_flush() -> Result<(), serde_json::Error> {
        let c = GenConfig::new(Operation::WriteThenRead, 64, 1);
        let mut json = serde_json::to_value(&c)?;
        assert_eq!(json["operation"], "write_then_read");
        assert_eq!(json["address_pattern"], "sequential");
        // Results written before flush_writes existed read back with it on.
        json.as_object_mut().map(|o| o.remove("flush_writes"));
        assert!(serde_json::from_value::<GenConfig>(json)?.flush_writes);
        Ok(())
    }

    #[test]
    fn patterns_are_the_gateware_s_functions() {
        assert_eq!(pattern_word(DataPattern::Counter, 5, 0x1004), 0x401 + 5);
        assert_eq!(pattern_word(DataPattern::Prbs, 0, 0), lowbias32(0));
        // lowbias32's published test vector start: 0 maps to 0, 1 to a mixed value.
        assert_eq!(lowbias32(0), 0);
        assert_ne!(pattern_word(DataPattern::Prbs, 1, 4), pattern_word(DataPattern::Prbs, 1, 8));
    }
}
