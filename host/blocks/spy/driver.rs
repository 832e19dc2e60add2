//! The passive spy block: one 32-byte summary record per TLP on the card's link, live
//! counters and histograms, records streamed into a ring in host memory.
//!
//! ```text
//!  PHY rx/tx ──tap──► spy: filters, sequence numbers ──► record FIFO ──MWr──► ring (DmaBuffer)
//!                      └─ counters, histograms (always running)          host: Capture::poll
//! ```
//!
//! Counters and histograms run whether or not a capture is on ([`counters`],
//! [`latency_histogram`], [`payload_histograms`], [`clear`]). A [`Capture`] owns the ring:
//! [`Capture::start`] clears the spy, programs filters, trigger and ring and enables it;
//! [`Capture::poll`] copies the records the card has written since the last poll and hands
//! the ring space back (`rd_index`); [`Capture::stop`] disables capture, drains what is left
//! and frees the ring. The record layout is traces/FORMAT.md (record format version 2: a TLP's
//! record may be followed by payload records, and the card's MSIs have records of their own).
//!
//! Every record carries a sequence number given before it can be lost, so a loss (ring full)
//! shows as a sequence gap and in the `lost` counter. Only one capture can run per card: a
//! capture is a lease on the spy ([`crate::lease`]), so a second one gets
//! [`DeviceError::Busy`], and a capture whose process died stops by itself when its lease
//! expires (its ring writes stop: the ring's memory is no longer the owner's).
//! [`is_capturing`] tells a second tool (e.g. `tlpx top`) whether one is on.

use std::fmt;
use std::time::{Duration, Instant};

use serde::Serialize;

use tlpx_regs::spy as regs;

use crate::card::{Card, Feature};
use crate::lease::Block;
use crate::{DeviceError, DmaBuffer};

/// Size of one record in bytes (record format versions 1 and 2).
pub const RECORD_BYTES: usize = 32;
/// Record format version the spy writes and this driver reads.
pub const RECORD_VERSION: u16 = 2;
/// Buckets of the read-latency histogram (bucket k counts [2^k, 2^(k+1)) cycles).
pub const LATENCY_BUCKETS: usize = tlpx_regs::constants::SPY_LATENCY_BUCKETS as usize;
/// Buckets of the payload-size histograms (bucket k counts [2^k, 2^(k+1)) bytes).
pub const PAYLOAD_BUCKETS: usize = tlpx_regs::constants::SPY_PAYLOAD_BUCKETS as usize;
/// The capture's configuration, its checks and its register writes live in the pure block
/// crate; the driver programs what it encodes.
pub use tlpx_blocks::spy::{
    Filters, Ring, SpyConfig, SpyConfigError, Trigger, TriggerMode, ALL_FILTER_CLASSES, ALL_TLP_CLASSES, CLASSES, CLASS_MSI,
    FILTER_CLASSES, FLUSH_CYCLES, MAX_RING_RECORDS, MIN_RING_RECORDS, PAYLOAD_DWS_MAX, RECORD_FIFO_DEPTH,
};

/// What can go wrong with the spy, one variant per failure so that a caller can match it (a
/// ring overrun is not a refused trigger); [`DeviceError::Spy`] carries it. The `Config`,
/// `Direction`, `UnknownType` and `MsiNotTlp` variants are the caller's input
/// ([`SpyError::is_invalid_argument`]).
#[derive(Debug, thiserror::Error)]
pub enum SpyError {
    /// Filters, trigger or ring the spy cannot take (tlpx-blocks' checks).
    #[error("invalid argument: {0}")]
    Config(SpyConfigError),
    #[error("invalid argument: direction must be `down` (host to card) or `up` (card to host), not {0:?}")]
    Direction(String),
    #[error("invalid argument: type must be one of {} or all, not {name:?}", .accepted.join(", "))]
    UnknownType { name: String, accepted: &'static [&'static str] },
    #[error("invalid argument: type must be a TLP type, one of {} or all, not \"msi\" (an MSI is no TLP on the spy's streams)", CLASSES.join(", "))]
    MsiNotTlp,
    /// On, yet nobody holds its lease.
    #[error(
        "the spy is capturing without an owner (started by the card's firmware or by register writes): \
         `tlpx stop spy` turns it off"
    )]
    Unowned,
    #[error("the ring's bus address 0x{bus:x} is not 32-byte aligned, as the spy needs")]
    RingMisaligned { bus: u64 },
    #[error("no driver DMA")]
    NoDriverDma,
    /// The LitePCIe driver's writer ring is too small for whole records.
    #[error("the LitePCIe driver's writer ring ({buffers} buffers of {size} bytes) cannot hold whole 32-byte records")]
    DriverRingUnfit { buffers: usize, size: usize },
    #[error(
        "the LitePCIe driver's writer buffers hold {records} records each; the spy can complete at most {} (its pad register)",
        u16::MAX
    )]
    DriverBuffersTooLarge { records: usize },
    /// The card wrote more records than the ring holds since the host's last read.
    #[error(
        "the spy's write index {wr} is {ahead} records past the host's read index {rd_index} in a ring of {ring_records}: \
         the spy was cleared or another capture took over"
    )]
    Overrun { wr: u32, ahead: u32, rd_index: u32, ring_records: u32 },
    #[error("the spy still holds {waiting} records after 10 s of draining (write index {wr_index}, {delivered} delivered)")]
    DrainTimeout { waiting: u64, wr_index: u64, delivered: u64 },
    #[error(
        "{what}: LitePCIe's DMA writer was stopped by another user of the driver (its writer ioctl takes no \
         lock); the records after the last one delivered are lost"
    )]
    WriterStopped { what: String },
    #[error("{what}: LitePCIe's DMA writer is on but does not take them")]
    WriterStalled { what: String },
    #[error("the spy did not clear: its sequence counter reads {sequence} after the clear")]
    NotCleared { sequence: u64 },
}

// Not `#[from]`: that would make the configuration error this one's `source` as well as its
// text, and `{:#}` (how the CLI prints an error) would print the message twice.
impl From<SpyConfigError> for SpyError {
    fn from(e: SpyConfigError) -> Self {
        SpyError::Config(e)
    }
}

impl SpyError {
    /// The caller's input was refused (not the card or its backend).
    pub fn is_invalid_argument(&self) -> bool {
        matches!(self, SpyError::Config(_) | SpyError::Direction(_) | SpyError::UnknownType { .. } | SpyError::MsiNotTlp)
    }
}

/// Direction of a TLP on the link.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Direction {
    /// Host to card.
    Down,
    /// Card to host.
    Up,
}

impl Direction {
    pub const BOTH: [Direction; 2] = [Direction::Down, Direction::Up];

    /// Bit of the direction in the spy's masks (0 down, 1 up).
    pub fn bit(self) -> u32 {
        match self {
            Direction::Down => 0,
            Direction::Up => 1,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Direction::Down => "down",
            Direction::Up => "up",
        }
    }

    /// Parses `down` / `up`.
    pub fn parse(s: &str) -> Result<Direction, DeviceError> {
        match s.trim().to_ascii_lowercase().as_str() {
            "down" => Ok(Direction::Down),
            "up" => Ok(Direction::Up),
            other => Err(SpyError::Direction(other.to_string()).into()),
        }
    }
}

impl fmt::Display for Direction {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Bit mask of the record filter's classes from names (`mrd,mwr,...,msi`; `all` for every
/// class, MSIs included).
pub fn class_mask(names: &[&str]) -> Result<u16, DeviceError> {
    let mut mask = 0u16;
    for name in names {
        let n = name.trim().to_ascii_lowercase();
        if n == "all" {
            mask = ALL_FILTER_CLASSES;
            continue;
        }
        match FILTER_CLASSES.iter().position(|c| *c == n) {
            Some(i) => mask |= 1 << i,
            None => return Err(SpyError::UnknownType { name: name.to_string(), accepted: &FILTER_CLASSES }.into()),
        }
    }
    Ok(mask)
}

/// Bit mask of TLP classes from names (`mrd,mwr,...`; `all` for every TLP class), for what
/// only TLPs have: the trigger and payload capture. `msi` is refused by name.
pub fn tlp_class_mask(names: &[&str]) -> Result<u8, DeviceError> {
    // Checked name by name first, so that the error lists only what is accepted here.
    if let Some(bad) = names.iter().find(|n| {
        let n = n.trim().to_ascii_lowercase();
        n != "all" && n != "msi" && !CLASSES.contains(&n.as_str())
    }) {
        return Err(SpyError::UnknownType { name: bad.to_string(), accepted: &CLASSES }.into());
    }
    let mask = class_mask(names)?;
    if names.iter().any(|n| n.trim().eq_ignore_ascii_case("msi")) {
        return Err(SpyError::MsiNotTlp.into());
    }
    Ok((mask & u16::from(ALL_TLP_CLASSES)) as u8)
}

/// Names of the classes in `mask` (bits of [`FILTER_CLASSES`]).
pub fn class_names(mask: u16) -> Vec<&'static str> {
    FILTER_CLASSES.iter().enumerate().filter(|(i, _)| mask & (1 << i) != 0).map(|(_, c)| *c).collect()
}

/// Live counters of one direction and class (all TLPs: filters do not apply; the spy's own
/// ring writes are counted only while a capture includes them).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct ClassCounters {
    pub tlps: u64,
    /// Header and payload bytes on the datapath.
    pub bytes: u64,
    pub payload_bytes: u64,
    /// Cycles the TLPs waited with valid high and ready low.
    pub wait_cycles: u64,
}

/// Everything the spy counts, and where its capture stands.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct SpyCounters {
    /// Host to card, index = class (see [`CLASSES`]).
    pub down: [ClassCounters; 8],
    /// Card to host.
    pub up: [ClassCounters; 8],
    /// Records numbered so far (the next record's sequence number).
    pub sequence: u32,
    /// Records numbered but lost (ring full or spy too slow).
    pub lost: u32,
    /// Records written to the ring.
    pub wr_index: u32,
    pub triggered: bool,
    /// The trigger's post count is reached: capture stopped.
    pub stopped: bool,
    /// `control.enable` and not halted: a capture is on.
    pub capturing: bool,
    /// The capture's lease ended (expired or released) while it was on: the spy halted.
    pub halted: bool,
    /// Sequence number of the record that matched the trigger (when it has).
    #[serde(default)]
    pub trigger_sequence: Option<u32>,
    /// The spy's own ring writes since the last clear (counted whether recorded or not).
    #[serde(default)]
    pub own: OwnTraffic,
    /// MSIs the card's hard IP accepted since the last clear (filters do not apply).
    #[serde(default)]
    pub msi_count: u64,
}

/// The spy's own ring writes: TLPs and their bytes on the datapath (header and payload DWs,
/// as `count_bytes`; the wire adds the link's framing to each TLP).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct OwnTraffic {
    pub tlps: u64,
    pub bytes: u64,
}

fn read_own(card: &mut Card) -> Result<OwnTraffic, DeviceError> {
    Ok(OwnTraffic { tlps: card.read(regs::OWN_TLPS)?, bytes: card.read(regs::OWN_BYTES)? })
}

fn trigger_sequence(card: &mut Card, status: u64) -> Result<Option<u32>, DeviceError> {
    Ok(if regs::status::TRIGGERED.get(status) != 0 { Some(card.read(regs::TRIGGER_SEQUENCE)? as u32) } else { None })
}

impl SpyCounters {
    pub fn direction(&self, d: Direction) -> &[ClassCounters; 8] {
        match d {
            Direction::Down => &self.down,
            Direction::Up => &self.up,
        }
    }

    /// Sum over the classes of a direction.
    pub fn total(&self, d: Direction) -> ClassCounters {
        self.direction(d).iter().fold(ClassCounters::default(), |mut t, c| {
            t.tlps += c.tlps;
            t.bytes += c.bytes;
            t.payload_bytes += c.payload_bytes;
            t.wait_cycles += c.wait_cycles;
            t
        })
    }
}

/// Reads the live counters, sequence, loss and capture state.
///
/// This is 16 counter selections of 5 register accesses each: on a card under capture these
/// MMIO accesses are TLPs the spy records too.
pub fn counters(card: &mut Card) -> Result<SpyCounters, DeviceError> {
    card.require(Feature::Spy, "spy")?;
    let mut sets: Vec<ClassCounters> = Vec::with_capacity(16);
    for select in 0..16u64 {
        card.write(regs::COUNTER_SELECT, select)?;
        sets.push(ClassCounters {
            tlps: card.read(regs::COUNT_TLPS)?,
            bytes: card.read(regs::COUNT_BYTES)?,
            payload_bytes: card.read(regs::COUNT_PAYLOAD)?,
            wait_cycles: card.read(regs::COUNT_WAIT)?,
        });
    }
    let up: [ClassCounters; 8] = std::array::from_fn(|i| sets[8 + i].clone());
    let down: [ClassCounters; 8] = std::array::from_fn(|i| sets[i].clone());
    let status = card.read(regs::STATUS)?;
    let control = card.read(regs::CONTROL)?;
    Ok(SpyCounters {
        down,
        up,
        sequence: card.read(regs::SEQUENCE)? as u32,
        lost: card.read(regs::LOST)? as u32,
        wr_index: card.read(regs::WR_INDEX)? as u32,
        triggered: regs::status::TRIGGERED.get(status) != 0,
        stopped: regs::status::STOPPED.get(status) != 0,
        capturing: regs::control::ENABLE.get(control) != 0 && regs::status::HALTED.get(status) == 0,
        halted: regs::status::HALTED.get(status) != 0,
        trigger_sequence: trigger_sequence(card, status)?,
        own: read_own(card)?,
        msi_count: card.read(regs::MSI_COUNT)?,
    })
}

/// The matched-read latency histogram (request to last completion, card cycles), 32 log2
/// buckets.
pub fn latency_histogram(card: &mut Card) -> Result<Vec<u64>, DeviceError> {
    card.require(Feature::Spy, "spy")?;
    crate::generator::read_histogram(card, regs::LATENCY_HIST_SELECT, regs::LATENCY_HIST_COUNT, LATENCY_BUCKETS)
}

/// Payload bytes per TLP with data, (down, up), 13 log2 buckets (1 B .. 4 KiB).
pub fn payload_histograms(card: &mut Card) -> Result<(Vec<u64>, Vec<u64>), DeviceError> {
    card.require(Feature::Spy, "spy")?;
    let down = crate::generator::read_histogram(card, regs::PAYLOAD_HIST_DOWN_SELECT, regs::PAYLOAD_HIST_DOWN_COUNT, PAYLOAD_BUCKETS)?;
    let up = crate::generator::read_histogram(card, regs::PAYLOAD_HIST_UP_SELECT, regs::PAYLOAD_HIST_UP_COUNT, PAYLOAD_BUCKETS)?;
    Ok((down, up))
}

/// Zeroes counters, histograms, sequence, loss and ring indices, and re-arms the trigger.
/// Also turns capture off (it writes the whole control register): do not call it while
/// another tool captures (see [`is_capturing`]).
pub fn clear(card: &mut Card) -> Result<(), DeviceError> {
    card.require(Feature::Spy, "spy")?;
    card.write(regs::CONTROL, regs::control::CLEAR.set(1))
}

/// Turns capture off whoever started it: releases the ring of a capturing process that died
/// without stopping (its ring buffer is gone; records still in the spy stay there until the
/// next capture clears them).
pub fn force_stop(card: &mut Card) -> Result<Option<crate::lease::Owner>, DeviceError> {
    card.require(Feature::Spy, "spy")?;
    crate::lease::force_stop(card, Block::Spy)
}

/// Whether a capture is on (`control.enable`, and its lease has not ended), e.g. started by
/// another tlpx process.
pub fn is_capturing(card: &mut Card) -> Result<bool, DeviceError> {
    card.require(Feature::Spy, "spy")?;
    let enabled = regs::control::ENABLE.get(card.read(regs::CONTROL)?) != 0;
    Ok(enabled && regs::status::HALTED.get(card.read(regs::STATUS)?) == 0)
}

/// How a capture ended.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct CaptureEnd {
    /// Records the spy numbered (its `sequence` counter; also the sequence the next record
    /// would have carried, modulo 2^32). In start-trigger mode this includes the pre-trigger
    /// records the spy discarded beyond `pre`.
    pub records_created: u64,
    /// Records numbered but lost because a FIFO or the ring was full.
    pub records_lost: u64,
    /// Records the host copied out of the ring during the whole capture.
    pub records_delivered: u64,
    /// Records left in the spy's FIFO that will never reach the ring: the pre-trigger
    /// records of a start trigger that never matched.
    pub records_held: u64,
    /// The spy's next sequence number, for the trace footer.
    pub next_sequence: u32,
    pub triggered: bool,
    pub stopped: bool,
    /// Sequence number of the record that matched the trigger, when it matched (the trace
    /// footer's `trigger_sequence`).
    pub trigger_sequence: Option<u32>,
    /// The capture's own ring writes (its share of the link it observes).
    pub own: OwnTraffic,
    /// MSIs the card sent during the capture (all of them, recorded or not).
    pub msi_count: u64,
    /// The records drained from the ring by [`Capture::stop`] (not by `stop_into`, which
    /// appends them to the caller's vector).
    #[serde(skip)]
    pub remaining: Vec<[u8; RECORD_BYTES]>,
}

/// A running capture: owns where the records go and the host's read position.
#[derive(Debug)]
pub struct Capture {
    transport: Transport,
    ring_records: u32,
    delivered: u64,
    include_own: bool,
    trigger_mode: TriggerMode,
    scratch: Vec<u8>,
}

/// Where a capture's records go.
#[derive(Debug)]
enum Transport {
    /// The spy's own ring in a [`DmaBuffer`]: the spy writes it, the host hands space back
    /// through `rd_index` (every backend that gives bus addresses: sim, vfio).
    Ring { ring: DmaBuffer, rd_index: u32 },
    /// LitePCIe's DMA writer, through its driver's rings (the litepcie backend: the driver owns
    /// the buffers and keeps their bus addresses): the spy hands records to the writer
    /// (`control.to_dma_writer`), which fills the driver's buffers in loop mode, record `k` of
    /// the capture in slot `k` modulo the ring. The writer does not wait for the host, so the
    /// host zeroes a slot once read and takes a slot as written when it is no longer zero (no
    /// record is all zero: its word 3 holds the TLP's format and type); records the writer
    /// went round the ring past before the host read them are lost, and counted.
    DriverWriter(DriverRing),
}

/// The host's side of a capture through the driver's ring (see [`Transport::DriverWriter`]).
#[derive(Debug)]
struct DriverRing {
    buffers: u32,
    buffer_records: u32,
    /// Records taken (or skipped) so far: the next one is in slot `consumed` modulo the ring.
    consumed: u64,
    /// Items (records and pad records) the spy has handed to the writer, widened from wr_index.
    streamed: u64,
    /// Records the writer went round the ring past before the host read them.
    overwritten: u64,
    /// The smallest sequence number the next record can carry: one more than the last taken's,
    /// plus one per slot skipped. A slot holding an older one holds the previous lap's record.
    next_sequence: u32,
    /// The newest record seen, not yet taken: a record is taken once a later one is seen, or
    /// when it reads the same in two polls (a DMA write and the host's read of the same slot
    /// can overlap: the first read may catch it half written).
    held: Option<[u8; RECORD_BYTES]>,
}

impl Capture {
    /// Starts a capture into a new ring of `ring_records` records (a power of two in
    /// 16..=2^24), with ring writes of 128 bytes (valid for every link: 128 is PCIe's
    /// smallest Max Payload Size). See [`Capture::start_with_mps`].
    pub fn start(card: &mut Card, ring_records: u32, filters: &Filters, trigger: &Trigger) -> Result<Capture, DeviceError> {
        Capture::start_with_mps(card, ring_records, 128, filters, trigger)
    }

    /// Starts a capture: clears the spy (counters, histograms, sequence, ring indices),
    /// allocates the ring, programs filters and trigger, and enables capture. `mps` is the
    /// link's Max Payload Size: the spy's ring writes stay within it (and within 256 bytes).
    ///
    /// The write that enables capture is not recorded; every TLP after it is (filters
    /// permitting), the MMIO of [`Capture::poll`] and of [`Capture::stop`]'s disabling write
    /// included.
    pub fn start_with_mps(
        card: &mut Card,
        ring_records: u32,
        mps: u32,
        filters: &Filters,
        trigger: &Trigger,
    ) -> Result<Capture, DeviceError> {
        card.require(Feature::Spy, "spy")?;
        let ring_config = Ring::new(ring_records, mps)?;
        let config = SpyConfig::new(filters, trigger)?;
        card.claim(Block::Spy)?;
        if is_capturing(card)? {
            // On, yet nobody held its lease: started by the card's firmware or by hand.
            card.release(Block::Spy)?;
            return Err(SpyError::Unowned.into());
        }
        if card.device().try_as_driver_dma().is_some() {
            return match Capture::start_driver_writer(card, &config) {
                Ok(c) => Ok(c),
                Err(e) => {
                    let _ = card.release(Block::Spy);
                    Err(e)
                }
            };
        }
        let ring = match card.device().alloc_dma(ring_records as usize * RECORD_BYTES) {
            Ok(ring) => ring,
            Err(e) => {
                let _ = card.release(Block::Spy);
                return Err(e);
            }
        };
        if ring.bus_addr % RECORD_BYTES as u64 != 0 {
            let bus = ring.bus_addr;
            card.device().free_dma(ring)?;
            return Err(SpyError::RingMisaligned { bus }.into());
        }
        let programmed = program(card, Some((&ring, ring_config)), &config);
        if let Err(e) = programmed {
            let _ = card.device().free_dma(ring);
            return Err(e);
        }
        Ok(Capture {
            transport: Transport::Ring { ring, rd_index: 0 },
            ring_records,
            delivered: 0,
            include_own: config.filters().include_own,
            trigger_mode: config.trigger().mode,
            scratch: Vec::new(),
        })
    }

    /// The capture through LitePCIe's DMA writer (see [`Transport::DriverWriter`]): the
    /// driver's writer ring zeroed, loopback off, the writer started (the driver programs its
    /// buffers into the card's table, first buffer first), then the spy enabled.
    fn start_driver_writer(card: &mut Card, config: &SpyConfig) -> Result<Capture, DeviceError> {
        use crate::backends::litepcie::Engine;
        let d = card.device().try_as_driver_dma().ok_or(SpyError::NoDriverDma)?;
        let l = d.layout()?;
        let (buffers, size) = (l.dma_rx_buf_count as usize, l.dma_rx_buf_size as usize);
        if buffers == 0 || size == 0 || size % RECORD_BYTES != 0 {
            return Err(SpyError::DriverRingUnfit { buffers, size }.into());
        }
        // The ring is the writer's: take it before touching its buffers; and the reader too, as
        // the loopback (which the capture turns off) and the DMA TLPs the capture counts as its
        // own are both engines'.
        d.claim(Engine::Writer)?;
        d.claim(Engine::Reader)?;
        if size / RECORD_BYTES > usize::from(u16::MAX) {
            // spy.pad is 16 bits: a buffer of more records could not be completed at the end.
            return Err(SpyError::DriverBuffersTooLarge { records: size / RECORD_BYTES }.into());
        }
        let zeros = vec![0u8; size];
        for k in 0..buffers {
            d.write_buffer(Engine::Writer, k, 0, &zeros)?;
        }
        d.set_loopback(false)?;
        d.set_enabled(Engine::Writer, true)?;
        let programmed = program(card, None, config);
        if let Err(e) = programmed {
            if let Some(d) = card.device().try_as_driver_dma() {
                let _ = d.set_enabled(Engine::Writer, false);
                let _ = d.set_enabled(Engine::Reader, false);
            }
            return Err(e);
        }
        let buffer_records = (size / RECORD_BYTES) as u32;
        Ok(Capture {
            transport: Transport::DriverWriter(DriverRing {
                buffers: buffers as u32,
                buffer_records,
                consumed: 0,
                streamed: 0,
                overwritten: 0,
                next_sequence: 0,
                held: None,
            }),
            ring_records: buffers as u32 * buffer_records,
            delivered: 0,
            include_own: config.filters().include_own,
            trigger_mode: config.trigger().mode,
            scratch: Vec::new(),
        })
    }

    /// Whether the records go through LitePCIe's DMA writer (the driver's rings) rather than
    /// the spy's own ring.
    pub fn through_driver_writer(&self) -> bool {
        matches!(self.transport, Transport::DriverWriter { .. })
    }

    /// Ring capacity in records.
    pub fn ring_records(&self) -> u32 {
        self.ring_records
    }

    /// Records copied out of the ring so far.
    pub fn delivered(&self) -> u64 {
        self.delivered
    }

    /// Copies the records the card has written since the last poll into `out` (appended),
    /// hands their ring space back, and returns how many were copied. One MMIO read when
    /// nothing is new; one read and one write otherwise.
    pub fn poll(&mut self, card: &mut Card, out: &mut Vec<[u8; RECORD_BYTES]>) -> Result<usize, DeviceError> {
        if self.through_driver_writer() {
            return self.poll_driver_writer(card, out, None);
        }
        let Transport::Ring { ring, rd_index } = &mut self.transport else { unreachable!() };
        let wr = card.read(regs::WR_INDEX)? as u32;
        let n = wr.wrapping_sub(*rd_index);
        if n == 0 {
            return Ok(0);
        }
        if n > self.ring_records {
            return Err(SpyError::Overrun { wr, ahead: n, rd_index: *rd_index, ring_records: self.ring_records }.into());
        }
        let mask = self.ring_records - 1;
        let first = *rd_index & mask;
        let contiguous = n.min(self.ring_records - first);
        let bytes = n as usize * RECORD_BYTES;
        self.scratch.resize(bytes, 0);
        let split = contiguous as usize * RECORD_BYTES;
        ring.read_bytes(first as usize * RECORD_BYTES, &mut self.scratch[..split])?;
        if contiguous < n {
            ring.read_bytes(0, &mut self.scratch[split..])?;
        }
        out.extend(self.scratch.chunks_exact(RECORD_BYTES).map(record));
        *rd_index = wr;
        self.delivered += u64::from(n);
        card.write(regs::RD_INDEX, u64::from(wr))?;
        Ok(n as usize)
    }

    /// Copies the records the DMA writer has put in the driver's buffers since the last poll,
    /// zeroing each slot it took. `upto`: the number of records (pads excluded) the capture
    /// handed to the writer, once known (at the end); until then, up to the spy's count.
    ///
    /// A slot holds the next record when it is not zero and its sequence number is not older
    /// than the next one can be (an older one is the previous lap's: the writer has not reached
    /// the slot yet, its request still gathering data on the card). The newest record is taken
    /// only once a later one is seen or it reads the same twice ([`DriverRing::held`]).
    fn poll_driver_writer(&mut self, card: &mut Card, out: &mut Vec<[u8; RECORD_BYTES]>, upto: Option<u64>) -> Result<usize, DeviceError> {
        use crate::backends::litepcie::Engine;
        let Transport::DriverWriter(ring) = &mut self.transport else { unreachable!() };
        let wr = card.read(regs::WR_INDEX)? as u32;
        ring.streamed += u64::from(wr.wrapping_sub(ring.streamed as u32));
        let limit = upto.unwrap_or(ring.streamed);
        let per_buffer = u64::from(ring.buffer_records);
        let capacity = u64::from(ring.buffers) * per_buffer;
        if limit > ring.consumed + capacity {
            // The writer went round the whole ring past records the host had not read: their
            // slots hold later records now. Skip to a full ring behind the writer.
            let skip = limit - capacity - ring.consumed;
            ring.overwritten += skip;
            ring.consumed += skip;
            ring.next_sequence = ring.next_sequence.wrapping_add(skip as u32);
            ring.held = None;
        }
        // Read every slot from the next record up to the limit (at most the ring: 2 MiB).
        let want = (limit - ring.consumed) as usize;
        self.scratch.resize(want * RECORD_BYTES, 0);
        let d = card.device().try_as_driver_dma().ok_or(SpyError::NoDriverDma)?;
        let mut at = 0;
        while at < want {
            let slot = (ring.consumed + at as u64) % capacity;
            let (buffer, first) = ((slot / per_buffer) as usize, (slot % per_buffer) as usize);
            let n = (want - at).min(per_buffer as usize - first);
            d.read_buffer(Engine::Writer, buffer, first * RECORD_BYTES, &mut self.scratch[at * RECORD_BYTES..(at + n) * RECORD_BYTES])?;
            at += n;
        }
        let take = records_to_take(&self.scratch, ring.next_sequence, &mut ring.held);
        let mut zeros = Vec::new();
        let mut done = 0;
        while done < take {
            let slot = (ring.consumed + done as u64) % capacity;
            let (buffer, first) = ((slot / per_buffer) as usize, (slot % per_buffer) as usize);
            let n = (take - done).min(per_buffer as usize - first);
            zeros.resize(n * RECORD_BYTES, 0);
            d.write_buffer(Engine::Writer, buffer, first * RECORD_BYTES, &zeros)?;
            done += n;
        }
        out.extend(self.scratch[..take * RECORD_BYTES].chunks_exact(RECORD_BYTES).map(record));
        if take > 0 {
            let last = &self.scratch[(take - 1) * RECORD_BYTES..take * RECORD_BYTES];
            ring.next_sequence = u32::from_le_bytes([last[0], last[1], last[2], last[3]]).wrapping_add(1);
        }
        ring.consumed += take as u64;
        self.delivered += take as u64;
        Ok(take)
    }

    /// Stops the capture: disables it, lets card time pass until the spy has written every
    /// record it still holds (copying them into `out`), reads the final counters and frees
    /// the ring. The disabling write is itself recorded.
    pub fn stop_into(mut self, card: &mut Card, out: &mut Vec<[u8; RECORD_BYTES]>) -> Result<CaptureEnd, DeviceError> {
        let result = if self.through_driver_writer() { self.drain_driver_writer(card, out) } else { self.drain(card, out) };
        let freed = match self.transport {
            Transport::Ring { ring, .. } => card.device().free_dma(ring),
            Transport::DriverWriter(_) => match card.device().try_as_driver_dma() {
                Some(d) => {
                    let writer = d.set_enabled(crate::backends::litepcie::Engine::Writer, false).map(|_| ());
                    let reader = d.set_enabled(crate::backends::litepcie::Engine::Reader, false).map(|_| ());
                    writer.and(reader)
                }
                None => Ok(()),
            },
        };
        // The ring is gone: the spy must not own one any more (the release halts it).
        let released = card.release(Block::Spy);
        let end = result?;
        freed?;
        released?;
        Ok(end)
    }

    fn drain(&mut self, card: &mut Card, out: &mut Vec<[u8; RECORD_BYTES]>) -> Result<CaptureEnd, DeviceError> {
        card.write(regs::CONTROL, regs::control::INCLUDE_OWN.set(u64::from(self.include_own)))?;
        // The flush timer writes a partial batch FLUSH_CYCLES after the last record.
        let settle = card.cycles_to_duration(u64::from(FLUSH_CYCLES) * 2 + 64);
        let deadline = Instant::now() + Duration::from_secs(10);
        let mut quiet_rounds = 0;
        loop {
            let got = self.poll(card, out)?;
            let status = card.read(regs::STATUS)?;
            let waiting = regs::status::RECORDS.get(status);
            let holding = self.trigger_mode == TriggerMode::Start && regs::status::TRIGGERED.get(status) == 0;
            if waiting == 0 || holding {
                // Nothing left in the FIFO; one more round after the last ring write lands.
                quiet_rounds = if got == 0 { quiet_rounds + 1 } else { 0 };
                if quiet_rounds >= 2 {
                    return capture_end(card, status, holding, self.delivered, 0);
                }
            } else {
                quiet_rounds = 0;
            }
            if Instant::now() > deadline {
                return Err(SpyError::DrainTimeout { waiting, wr_index: card.read(regs::WR_INDEX)?, delivered: self.delivered }.into());
            }
            card.device().idle(settle)?;
        }
    }

    /// The end of a capture through the DMA writer: capture off; once the spy's FIFO is empty
    /// (or holds only a start trigger's unmatched records) and its count of records handed to
    /// the writer has not moved for two rounds (a record can still be on its way to the FIFO),
    /// zero records complete the driver's current buffer (the writer sends whole requests only)
    /// and the host reads up to the last record. Wall-time bounded.
    fn drain_driver_writer(&mut self, card: &mut Card, out: &mut Vec<[u8; RECORD_BYTES]>) -> Result<CaptureEnd, DeviceError> {
        let control = regs::control::TO_DMA_WRITER.set(1) | regs::control::INCLUDE_OWN.set(u64::from(self.include_own));
        card.write(regs::CONTROL, control)?;
        let settle = card.cycles_to_duration(u64::from(FLUSH_CYCLES) * 2 + 64);
        let deadline = Instant::now() + Duration::from_secs(10);
        let (mut quiet_rounds, mut last_wr) = (0, None);
        let (status, holding, records) = loop {
            self.poll_driver_writer(card, out, None)?;
            let status = card.read(regs::STATUS)?;
            let holding = self.trigger_mode == TriggerMode::Start && regs::status::TRIGGERED.get(status) == 0;
            let wr = card.read(regs::WR_INDEX)? as u32;
            let empty = regs::status::RECORDS.get(status) == 0 || holding;
            quiet_rounds = if empty && last_wr == Some(wr) { quiet_rounds + 1 } else { 0 };
            last_wr = Some(wr);
            if quiet_rounds >= 2 {
                let Transport::DriverWriter(ring) = &mut self.transport else { unreachable!() };
                ring.streamed += u64::from(wr.wrapping_sub(ring.streamed as u32));
                break (status, holding, ring.streamed);
            }
            if Instant::now() > deadline {
                return Err(
                    self.writer_stalled(card, &format!("the spy still holds {} records after 10 s", regs::status::RECORDS.get(status)))
                );
            }
            card.device().idle(settle)?;
        };
        let Transport::DriverWriter(ring) = &self.transport else { unreachable!() };
        let per_buffer = u64::from(ring.buffer_records);
        let pad = (per_buffer - records % per_buffer) % per_buffer;
        card.write(regs::PAD, pad)?;
        loop {
            self.poll_driver_writer(card, out, Some(records))?;
            let Transport::DriverWriter(ring) = &self.transport else { unreachable!() };
            if ring.consumed >= records {
                break;
            }
            if Instant::now() > deadline {
                let left = records - ring.consumed;
                return Err(self.writer_stalled(
                    card,
                    &format!("{left} of the capture's {records} records did not reach the LitePCIe driver's buffers within 10 s"),
                ));
            }
            card.device().idle(settle)?;
        }
        let Transport::DriverWriter(ring) = &self.transport else { unreachable!() };
        capture_end(card, status, holding, self.delivered, ring.overwritten)
    }

    /// The error of a capture whose records stopped reaching the driver's ring: `what`, and
    /// why when the card tells (the driver's writer-enable ioctl takes no lock: another user
    /// of the node can stop the writer under the capture, which then discards its input).
    fn writer_stalled(&self, card: &mut Card, what: &str) -> DeviceError {
        match card.read(tlpx_regs::pcie_dma0::WRITER_ENABLE) {
            Ok(enable) if enable & 1 == 0 => SpyError::WriterStopped { what: what.to_string() }.into(),
            _ => SpyError::WriterStalled { what: what.to_string() }.into(),
        }
    }

    /// Stops the capture (see [`Capture::stop_into`]); the records drained from the ring
    /// are in [`CaptureEnd::remaining`].
    pub fn stop(self, card: &mut Card) -> Result<CaptureEnd, DeviceError> {
        let mut remaining = Vec::new();
        let mut end = self.stop_into(card, &mut remaining)?;
        end.remaining = remaining;
        Ok(end)
    }
}

/// How a capture ended, from the spy's final counters and `status` (read once it held nothing
/// more to write): `holding`, a start trigger never matched (its FIFO keeps what it holds);
/// `host_lost`, records the host side lost on top of the spy's count.
fn capture_end(card: &mut Card, status: u64, holding: bool, delivered: u64, host_lost: u64) -> Result<CaptureEnd, DeviceError> {
    let sequence = card.read(regs::SEQUENCE)? as u32;
    let lost = card.read(regs::LOST)? as u32;
    Ok(CaptureEnd {
        records_created: u64::from(sequence),
        records_lost: u64::from(lost) + host_lost,
        records_delivered: delivered,
        records_held: if holding { regs::status::RECORDS.get(status) } else { 0 },
        next_sequence: sequence,
        triggered: regs::status::TRIGGERED.get(status) != 0,
        stopped: regs::status::STOPPED.get(status) != 0,
        trigger_sequence: trigger_sequence(card, status)?,
        own: read_own(card)?,
        msi_count: card.read(regs::MSI_COUNT)?,
        remaining: Vec::new(),
    })
}

/// How many of `slots` (records read from the driver's ring, from the next one on) to take:
/// the prefix of written ones (not zero, sequence not older than `next_sequence` and rising),
/// all but the newest, which is taken when it reads as `held` (the last poll's newest) and held
/// otherwise. A record is never all zero (it carries its card time); an older sequence number
/// is the previous lap's record in a slot the writer has not reached.
fn records_to_take(slots: &[u8], next_sequence: u32, held: &mut Option<[u8; RECORD_BYTES]>) -> usize {
    let mut next = next_sequence;
    let written = slots
        .chunks_exact(RECORD_BYTES)
        .take_while(|r| {
            let sequence = u32::from_le_bytes([r[0], r[1], r[2], r[3]]);
            let present = r.iter().any(|&b| b != 0) && (sequence.wrapping_sub(next) as i32) >= 0;
            if present {
                next = sequence.wrapping_add(1);
            }
            present
        })
        .count();
    if written == 0 {
        return 0;
    }
    let newest = record(&slots[(written - 1) * RECORD_BYTES..written * RECORD_BYTES]);
    if *held == Some(newest) {
        *held = None;
        written
    } else {
        *held = Some(newest);
        written - 1
    }
}

fn record(bytes: &[u8]) -> [u8; RECORD_BYTES] {
    let mut r = [0u8; RECORD_BYTES];
    r.copy_from_slice(bytes);
    r
}

/// Programs and enables a capture: into `ring` (the spy's own, with its size and largest
/// write), or, without one, into LitePCIe's DMA writer.
fn program(card: &mut Card, ring: Option<(&DmaBuffer, Ring)>, config: &SpyConfig) -> Result<(), DeviceError> {
    let clock_hz = card.identity().clock_hz;
    for w in config.program_writes(ring.map(|(buffer, r)| (buffer.bus_addr, r)), clock_hz) {
        card.write(w.register, w.value)?;
    }
    // A read, so that every write above has reached the card (posted writes are ordered
    // before it) and the capture starts with the enabling write alone: that write is not
    // recorded, and on the simulator it is the only one still on its way when this returns.
    let sequence = card.read(regs::SEQUENCE)?;
    if sequence != 0 {
        return Err(SpyError::NotCleared { sequence }.into());
    }
    card.write(regs::CONTROL, config.enable_word(ring.is_none()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn class_masks_round_trip() {
        assert_eq!(class_mask(&["mrd", "cpld"]).expect("valid"), 0b1001);
        assert_eq!(class_mask(&["all"]).expect("valid"), 0x1FF);
        assert_eq!(class_mask(&["msi"]).expect("valid"), CLASS_MSI);
        assert_eq!(class_names(0b1001), vec!["mrd", "cpld"]);
        assert_eq!(class_names(CLASS_MSI | 2), vec!["mwr", "msi"]);
        let e = class_mask(&["mrw"]).expect_err("invalid").to_string();
        assert!(e.contains("\"mrw\"") && e.contains("mrd, mwr") && e.contains("other, msi"), "{e}");
        // The trigger and payload capture take TLP types only.
        assert_eq!(tlp_class_mask(&["all"]).expect("valid"), 0xFF);
        assert_eq!(tlp_class_mask(&["cpld"]).expect("valid"), 0b1000);
        let e = tlp_class_mask(&["mwr", "msi"]).expect_err("msi").to_string();
        assert!(e.contains("not \"msi\"") && e.contains("other or all"), "{e}");
    }

    /// A slot as the DMA writer leaves it: sequence `seq`, a non-zero time, `fill` elsewhere.
    fn slot(seq: u32, fill: u8) -> [u8; RECORD_BYTES] {
        let mut r = [fill; RECORD_BYTES];
        r[..4].copy_from_slice(&seq.to_le_bytes());
        r[4] = 1;
        r
    }

    fn slots(records: &[[u8; RECORD_BYTES]]) -> Vec<u8> {
        records.concat()
    }

    #[test]
    fn the_newest_record_is_taken_once_it_reads_the_same_twice() {
        let mut held = None;
        let s = slots(&[slot(0, 7), slot(1, 7), [0; RECORD_BYTES]]);
        assert_eq!(records_to_take(&s, 0, &mut held), 1, "record 1 is the newest: held");
        assert_eq!(held, Some(slot(1, 7)));
        // Half written the first time (the rest landed since): held again, not taken.
        let mut held = Some(slot(1, 0));
        assert_eq!(records_to_take(&s[RECORD_BYTES..], 1, &mut held), 0);
        // Read the same again: taken.
        assert_eq!(records_to_take(&s[RECORD_BYTES..], 1, &mut held), 1);
        assert_eq!(held, None);
        // A later record makes it no longer the newest: taken at once.
        let mut held = None;
        assert_eq!(records_to_take(&slots(&[slot(1, 7), slot(2, 7)]), 1, &mut held), 1);
    }

    #[test]
    fn a_slot_the_writer_has_not_reached_ends_the_records() {
        let mut held = None;
        // The previous lap's record (sequence older than the next one can be) is not new.
        let s = slots(&[slot(100, 1), slot(101, 1), slot(37, 1), slot(102, 1)]);
        assert_eq!(records_to_take(&s, 100, &mut held), 1);
        assert_eq!(held, Some(slot(101, 1)));
        // A zero slot too; and a gap (the spy lost records) is a record all the same.
        let mut held = None;
        let s = slots(&[slot(5, 1), slot(9, 1), [0; RECORD_BYTES], slot(10, 1)]);
        assert_eq!(records_to_take(&s, 5, &mut held), 1);
        assert_eq!(records_to_take(&slots(&[slot(4, 1)]), 5, &mut None), 0);
        // Sequence numbers wrap.
        let s = slots(&[slot(u32::MAX, 1), slot(0, 1), slot(1, 1)]);
        assert_eq!(records_to_take(&s, u32::MAX, &mut None), 2);
    }

    #[test]
    fn trigger_and_filter_validation_names_the_value() {
        // As a capture reports them: the block crate's errors as invalid arguments.
        let pre = RECORD_FIFO_DEPTH as u16;
        let t = Trigger { mode: TriggerMode::Start, pre, ..Trigger::default() };
        let e = DeviceError::from(t.validate().expect_err("invalid"));
        assert!(e.to_string().starts_with("invalid argument: ") && e.to_string().contains(&format!("not {pre}")), "{e}");
        let t = Trigger { mode: TriggerMode::Stop, post: 0, ..Trigger::default() };
        assert!(t.validate().expect_err("invalid").to_string().contains("not 0"));
        let f = Filters { down: false, up: false, ..Filters::default() };
        assert!(f.validate().is_err());
        assert!(Ring::new(64, 100).expect_err("invalid").to_string().contains("not 100"));
    }
}
