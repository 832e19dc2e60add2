//! The interrupt latency timer: fires interrupts at pseudo-random (or periodic) times and
//! timestamps, in card cycles, each stage of the host's response (the PCI Pamette's design).
//!
//! ```text
//!  LFSR interval ─► fire: T0, MSI ─► host ISR writes ack_isr   ─► T_isr  ┐ per stage: min, max,
//!                                └─► host thread writes ack_user ─► T_user ┘ sum, count, log2 hist
//!  every fire ─► 32-byte sample record ─► ring (DmaBuffer) ─► host: Run::poll
//! ```
//!
//! [`Run::start`] clears the timer, programs interval, count, seed and the ring and starts
//! firing; the caller waits for each interrupt (`Device::wait_interrupt`) and answers with
//! [`ack_user`] (and [`ack_isr`] from an ISR, where the backend has one); [`Run::poll`]
//! copies the sample records the card has written and hands the ring space back;
//! [`Run::finish`] stops the timer, drains the ring and frees it. The record layout is the
//! last section of traces/FORMAT.md. The ring is read as the spy's is (`spy::Capture`): same
//! record writer in the gateware, same write/read index protocol.
//!
//! Every record carries a sequence number given before it can be lost, so a loss shows as a
//! gap ([`check_sequence`]) and in the `lost` counter. A fire while the previous one still
//! waits for `ack_user` is an overrun: that sample is closed incomplete and counted.
//! [`ping`] measures what one posted register write costs as the card sees it, which is
//! part of every stage.

use std::time::{Duration, Instant};

use serde::Serialize;
use tlpx_regs::irq_timer as regs;

use crate::card::{Card, Feature};
use crate::lease::Block;
use crate::msi;
use crate::{DeviceError, DmaBuffer};

/// Size of one sample record in bytes.
pub const RECORD_BYTES: usize = 32;
/// Buckets of the per-stage log2 histograms (bucket k counts [2^k, 2^(k+1)) cycles; bucket
/// 0 also counts 0).
pub const HISTOGRAM_BUCKETS: usize = tlpx_regs::constants::IRQ_TIMER_HISTOGRAM_BUCKETS as usize;
/// The timer's schedule, its checks and its register writes live in the pure block crate;
/// the driver programs what it encodes.
pub use tlpx_blocks::irq_timer::{
    ns_to_cycles, Mode, TimerConfig, TimerConfigError, ValidTimerConfig, FLUSH_CYCLES, MAX_RING_RECORDS, MIN_RING_RECORDS,
};
/// What can go wrong with the interrupt timer, one variant per failure;
/// [`DeviceError::IrqTimer`] carries it.
#[derive(Debug, thiserror::Error)]
pub enum IrqTimerError {
    /// A schedule or ring the timer cannot take (tlpx-blocks' checks): the caller's input.
    #[error("invalid argument: {0}")]
    Config(TimerConfigError),
    #[error("invalid argument: ping rounds must be at least 1, not 0")]
    NoPingRounds,
    #[error("record {record} is not an interrupt timer sample: its kind is fmt {fmt} type {ty}, a sample is fmt 7 type 3")]
    NotASample { record: u32, fmt: u32, ty: u32 },
    #[error("the ring's bus address 0x{bus:x} is not 32-byte aligned")]
    RingMisaligned { bus: u64 },
    /// The card wrote more records than the ring holds since the host's last read.
    #[error(
        "the timer's write index {wr} is {ahead} records past the host's read index {rd_index} in a ring of {ring_records}: \
         the timer was cleared or another run took over"
    )]
    Overrun { wr: u32, ahead: u32, rd_index: u32, ring_records: u32 },
    #[error("the timer still holds records after 10 s of draining (sequence {sequence}, lost {lost}, write index {wr_index}, read index {rd_index})")]
    DrainTimeout { sequence: u32, lost: u32, wr_index: u32, rd_index: u32 },
    /// Firing, yet nobody holds its lease.
    #[error(
        "the interrupt timer is firing without an owner (started by the card's firmware or by register writes): \
         `tlpx stop irq_timer` stops it"
    )]
    Unowned,
    #[error("the timer did not clear: its sequence counter reads {sequence}")]
    NotCleared { sequence: u64 },
}

// Not `#[from]`: that would make the configuration error this one's `source` as well as its
// text, and `{:#}` (how the CLI prints an error) would print the message twice.
impl From<TimerConfigError> for IrqTimerError {
    fn from(e: TimerConfigError) -> Self {
        IrqTimerError::Config(e)
    }
}

impl IrqTimerError {
    /// The caller's input was refused (not the card or its backend).
    pub fn is_invalid_argument(&self) -> bool {
        matches!(self, IrqTimerError::Config(_) | IrqTimerError::NoPingRounds)
    }
}

/// Record kind bits (w3 bits 8:1): fmt 7, type 3.
const KIND_FMT: u32 = 7;
const KIND_TYPE: u32 = 3;
/// The stage value of a stage that was not acknowledged.
const NOT_ACKED: u32 = 0xFFFF_FFFF;

/// One fire, as its 32-byte record tells it (traces/FORMAT.md).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Sample {
    /// +1 per sample; a jump means samples were lost.
    pub sequence: u32,
    /// Card cycle of the fire.
    pub t0: u64,
    /// Cycles from the fire to `ack_isr` arriving; `None` when the ISR did not acknowledge.
    pub isr_cycles: Option<u32>,
    /// Cycles from the fire to `ack_user` arriving; `None` for an overrun.
    pub user_cycles: Option<u32>,
    /// The next fire came before `ack_user`: the sample is incomplete.
    pub overrun: bool,
    /// The interval drawn before this fire (cycles).
    pub interval_cycles: u32,
    /// Fire number, 1-based.
    pub fire: u32,
    /// The MSI vector the fire raised (the timer's `vectors`, in turn; in mode all, the
    /// lowest). 0 from a card built before several vectors, and left out of documents then.
    #[serde(skip_serializing_if = "is_zero")]
    pub vector: u8,
}

fn is_zero(v: &u8) -> bool {
    *v == 0
}

/// Decodes one sample record; refuses a record of another kind.
pub fn decode(record: &[u8; RECORD_BYTES]) -> Result<Sample, DeviceError> {
    let w: [u32; 8] = std::array::from_fn(|i| u32::from_le_bytes([record[4 * i], record[4 * i + 1], record[4 * i + 2], record[4 * i + 3]]));
    let fmt = (w[3] >> 1) & 0x7;
    let ty = (w[3] >> 4) & 0x1F;
    if (fmt, ty) != (KIND_FMT, KIND_TYPE) {
        return Err(IrqTimerError::NotASample { record: w[0], fmt, ty }.into());
    }
    let isr_seen = w[3] & (1 << 9) != 0;
    let overrun = w[3] & (1 << 10) != 0;
    Ok(Sample {
        sequence: w[0],
        t0: u64::from(w[2]) << 32 | u64::from(w[1]),
        isr_cycles: (isr_seen && w[4] != NOT_ACKED).then_some(w[4]),
        user_cycles: (!overrun).then_some(w[5]),
        overrun,
        interval_cycles: w[6],
        fire: w[7],
        vector: ((w[3] >> 16) & 0x1F) as u8,
    })
}

/// Encodes a sample as the card writes it (for tests and converters).
pub fn encode(s: &Sample) -> [u8; RECORD_BYTES] {
    let w3 = KIND_FMT << 1
        | KIND_TYPE << 4
        | u32::from(s.isr_cycles.is_some()) << 9
        | u32::from(s.overrun) << 10
        | u32::from(s.vector & 0x1F) << 16;
    let w = [
        s.sequence,
        s.t0 as u32,
        (s.t0 >> 32) as u32,
        w3,
        s.isr_cycles.unwrap_or(NOT_ACKED),
        if s.overrun { NOT_ACKED } else { s.user_cycles.unwrap_or(NOT_ACKED) },
        s.interval_cycles,
        s.fire,
    ];
    let mut out = [0u8; RECORD_BYTES];
    for (i, v) in w.iter().enumerate() {
        out[4 * i..4 * i + 4].copy_from_slice(&v.to_le_bytes());
    }
    out
}

/// Log2 bucket of a value: bucket k holds [2^k, 2^(k+1)); 0 goes to bucket 0.
pub fn log2_bucket(v: u32) -> usize {
    if v == 0 {
        0
    } else {
        31 - v.leading_zeros() as usize
    }
}

/// The log2 histogram of `values`, as the card builds it.
pub fn histogram_of(values: impl IntoIterator<Item = u32>) -> Vec<u64> {
    let mut h = vec![0u64; HISTOGRAM_BUCKETS];
    for v in values {
        h[log2_bucket(v)] += 1;
    }
    h
}

/// Where the sequence numbers of a sample stream jump.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct SequenceCheck {
    /// (expected, found) at each jump.
    pub gaps: Vec<(u32, u32)>,
    /// Samples missing in all (sum of the jumps).
    pub missing: u64,
}

/// Checks that `samples` are numbered `first, first+1, ...` (wrapping).
pub fn check_sequence(samples: &[Sample], first: u32) -> SequenceCheck {
    let mut check = SequenceCheck::default();
    let mut expected = first;
    for s in samples {
        if s.sequence != expected {
            check.gaps.push((expected, s.sequence));
            check.missing += u64::from(s.sequence.wrapping_sub(expected));
        }
        expected = s.sequence.wrapping_add(1);
    }
    check
}

/// The stages the card timestamps.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Stage {
    /// Fire to `ack_isr` (written by an interrupt handler).
    Isr,
    /// Fire to `ack_user` (written by the thread the interrupt woke).
    User,
}

impl Stage {
    pub const ALL: [Stage; 2] = [Stage::Isr, Stage::User];

    pub fn name(self) -> &'static str {
        match self {
            Stage::Isr => "isr",
            Stage::User => "user",
        }
    }
}

/// The card's statistics of one stage (every sample, lost records included).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct StageStats {
    pub count: u64,
    /// `None` when count is 0.
    pub min_cycles: Option<u64>,
    pub max_cycles: u64,
    pub sum_cycles: u64,
    /// log2 histogram in cycles, [`HISTOGRAM_BUCKETS`] buckets.
    pub histogram: Vec<u64>,
}

impl StageStats {
    pub fn mean_cycles(&self) -> Option<f64> {
        (self.count > 0).then(|| self.sum_cycles as f64 / self.count as f64)
    }
}

/// The timer's counters and state.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct Counters {
    pub fires: u32,
    /// Fires while the previous one still waited for `ack_user`.
    pub overruns: u32,
    pub stray_isr_acks: u32,
    pub stray_user_acks: u32,
    /// Records that found the record FIFO full.
    pub lost: u32,
    /// Records numbered so far.
    pub sequence: u32,
    /// Records written to the ring.
    pub wr_index: u32,
    pub running: bool,
    pub pending: bool,
    pub done: bool,
}

/// Reads the counters and state.
pub fn counters(card: &mut Card) -> Result<Counters, DeviceError> {
    card.require(Feature::IrqTimer, "interrupt latency timer")?;
    let status = card.read(regs::STATUS)?;
    let mut r = |reg| card.read(reg).map(|v| v as u32);
    Ok(Counters {
        fires: r(regs::FIRES)?,
        overruns: r(regs::OVERRUNS)?,
        stray_isr_acks: r(regs::STRAY_ISR_ACKS)?,
        stray_user_acks: r(regs::STRAY_USER_ACKS)?,
        lost: r(regs::LOST)?,
        sequence: r(regs::SEQUENCE)?,
        wr_index: r(regs::WR_INDEX)?,
        running: regs::status::RUNNING.get(status) != 0,
        pending: regs::status::PENDING.get(status) != 0,
        done: regs::status::DONE.get(status) != 0,
    })
}

/// Reads the card's statistics and histogram of `stage`.
pub fn stage_stats(card: &mut Card, stage: Stage) -> Result<StageStats, DeviceError> {
    card.require(Feature::IrqTimer, "interrupt latency timer")?;
    let (count, min, max, sum, select, hist) = match stage {
        Stage::Isr => (regs::ISR_COUNT, regs::ISR_MIN, regs::ISR_MAX, regs::ISR_SUM, regs::ISR_HIST_SELECT, regs::ISR_HIST_COUNT),
        Stage::User => (regs::USER_COUNT, regs::USER_MIN, regs::USER_MAX, regs::USER_SUM, regs::USER_HIST_SELECT, regs::USER_HIST_COUNT),
    };
    let count = card.read(count)?;
    let min = card.read(min)?;
    Ok(StageStats {
        count,
        min_cycles: (count > 0).then_some(min),
        max_cycles: card.read(max)?,
        sum_cycles: card.read(sum)?,
        histogram: crate::generator::read_histogram(card, select, hist, HISTOGRAM_BUCKETS)?,
    })
}

/// Acknowledges the user stage of fire `fire` (the n-th interrupt taken since the timer was
/// cleared is fire n; [`Run::took_interrupt`] counts them), from the thread the interrupt
/// woke. The card closes the sample only if that fire is the one waiting: a late
/// acknowledgement never closes a later fire. Posted: returns as soon as the write is issued.
pub fn ack_user(card: &mut Card, fire: u32) -> Result<(), DeviceError> {
    card.write(regs::ACK_USER, u64::from(fire))
}

/// Acknowledges the ISR stage of fire `fire` (from an interrupt handler, where the backend
/// has one).
pub fn ack_isr(card: &mut Card, fire: u32) -> Result<(), DeviceError> {
    card.write(regs::ACK_ISR, u64::from(fire))
}

/// Cost of one posted register write as the card sees it: two back-to-back pings, then the
/// cycles between their arrivals (`ping_delta`). The read that fetches it also makes sure
/// both writes arrived.
pub fn ping(card: &mut Card) -> Result<u32, DeviceError> {
    card.require(Feature::IrqTimer, "interrupt latency timer")?;
    card.write(regs::PING, 1)?;
    card.write(regs::PING, 1)?;
    Ok(card.read(regs::PING_DELTA)? as u32)
}

/// The median of `rounds` ping measurements (cycles), and all of them.
pub fn ping_cost(card: &mut Card, rounds: usize) -> Result<(u32, Vec<u32>), DeviceError> {
    if rounds == 0 {
        return Err(IrqTimerError::NoPingRounds.into());
    }
    let mut all = Vec::with_capacity(rounds);
    for _ in 0..rounds {
        all.push(ping(card)?);
    }
    let mut sorted = all.clone();
    sorted.sort_unstable();
    Ok((sorted[sorted.len() / 2], all))
}

/// How a run ended.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RunEnd {
    pub counters: Counters,
    /// Samples copied out of the ring during the whole run.
    pub delivered: u64,
    /// A fire was still waiting when the run was stopped: it was acknowledged by `finish`
    /// (`ack_pending`) or left incomplete (its record is then never written).
    pub pending_at_stop: bool,
}

/// A running timer: owns the sample ring, the host's read index and the count of interrupts
/// taken (which numbers the fires).
#[derive(Debug)]
pub struct Run {
    ring: DmaBuffer,
    ring_records: u32,
    rd_index: u32,
    delivered: u64,
    scratch: Vec<u8>,
    interrupts: u32,
}

/// Sets the MSI vectors the timer's fires raise: `mask` (bit n: vector n, 0 for the timer's
/// own source's, [`msi_bit`]), each fire the next of them in turn, or all of them at once with
/// `all`; and enables them in `pcie_msi` (vectors above the card's sources belong to the timer).
/// With one vector granted every message still arrives as vector 0; with several
/// (`Device::request_vectors`) each arrives as its own.
pub fn set_vectors(card: &mut Card, mask: u32, all: bool) -> Result<(), DeviceError> {
    let mask = if mask == 0 { 1 << msi_bit() } else { mask };
    card.write(regs::VECTORS, u64::from(mask))?;
    card.write(regs::VECTOR_MODE, regs::vector_mode::MODE.set(u64::from(all)))?;
    card.write(tlpx_regs::pcie_msi::ENABLE_SET, u64::from(mask))
}

/// Which MSI bit of `pcie_msi` the timer raises (the MSI itself always carries vector 0).
pub fn msi_bit() -> u32 {
    tlpx_regs::constants::MSI_IRQ_TIMER as u32
}

/// The interrupt mask to give `Device::wait_interrupt` for the timer: vector 0, where every
/// source arrives with one MSI vector (LitePCIe's behaviour, what a stock set-up grants), and
/// the timer's own vector, where it arrives when the host granted several (MSI-X on the vfio
/// backend; docs/interrupts.md, "Several vectors").
pub const WAIT_MASK: u32 = msi::wait_mask(tlpx_regs::constants::MSI_IRQ_TIMER as u32);

impl Run {
    /// Clears the timer, allocates a ring of `ring_records` records (a power of two in
    /// 16..=2^24), programs `config` and the ring, enables the timer's MSI and starts firing.
    /// The card becomes this process's owner of the timer (a lease, [`crate::lease`]).
    pub fn start(card: &mut Card, config: &TimerConfig, ring_records: u32) -> Result<Run, DeviceError> {
        Run::start_on_vectors(card, config, ring_records, 0)
    }

    /// [`Run::start`] with the fires raising `vectors` in turn (`vector_mode` rotate; 0: the
    /// timer's own source's vector, what [`Run::start`] gives). Written once this process owns
    /// the timer, and by every start, so nothing an earlier run left there (a killed per-CPU
    /// run's vectors) reaches this one. The vectors' `pcie_msi` enables are set here too.
    pub fn start_on_vectors(card: &mut Card, config: &TimerConfig, ring_records: u32, vectors: u32) -> Result<Run, DeviceError> {
        card.require(Feature::IrqTimer, "interrupt latency timer")?;
        let config = ValidTimerConfig::new(config)?;
        let ring_records = tlpx_blocks::irq_timer::ring_records(ring_records)?;
        card.claim(Block::IrqTimer)?;
        refuse_ownerless_run(card)?;
        let ring = card.device().alloc_dma(ring_records as usize * RECORD_BYTES)?;
        if ring.bus_addr % RECORD_BYTES as u64 != 0 {
            let bus = ring.bus_addr;
            card.device().free_dma(ring)?;
            return Err(IrqTimerError::RingMisaligned { bus }.into());
        }
        if let Err(e) = program(card, &ring, ring_records, &config, vectors) {
            let _ = card.device().free_dma(ring);
            return Err(e);
        }
        Ok(Run { ring, ring_records, rd_index: 0, delivered: 0, scratch: Vec::new(), interrupts: 0 })
    }

    /// Counts one interrupt taken from the timer and returns its fire's number, the value
    /// [`ack_user`] and [`ack_isr`] must carry for it.
    pub fn took_interrupt(&mut self) -> u32 {
        self.interrupts = self.interrupts.wrapping_add(1);
        self.interrupts
    }

    pub fn ring_records(&self) -> u32 {
        self.ring_records
    }

    /// Samples copied out of the ring so far.
    pub fn delivered(&self) -> u64 {
        self.delivered
    }

    /// Copies the records written since the last poll, decoded, into `out`, hands their ring
    /// space back and returns how many came. One MMIO read when nothing is new.
    pub fn poll(&mut self, card: &mut Card, out: &mut Vec<Sample>) -> Result<usize, DeviceError> {
        let wr = card.read(regs::WR_INDEX)? as u32;
        let n = wr.wrapping_sub(self.rd_index);
        if n == 0 {
            return Ok(0);
        }
        if n > self.ring_records {
            return Err(IrqTimerError::Overrun { wr, ahead: n, rd_index: self.rd_index, ring_records: self.ring_records }.into());
        }
        let first = self.rd_index & (self.ring_records - 1);
        let contiguous = n.min(self.ring_records - first);
        self.copy(first, contiguous, out)?;
        if contiguous < n {
            self.copy(0, n - contiguous, out)?;
        }
        self.rd_index = wr;
        self.delivered += u64::from(n);
        card.write(regs::RD_INDEX, u64::from(wr))?;
        Ok(n as usize)
    }

    fn copy(&mut self, slot: u32, count: u32, out: &mut Vec<Sample>) -> Result<(), DeviceError> {
        self.scratch.resize(count as usize * RECORD_BYTES, 0);
        self.ring.read_bytes(slot as usize * RECORD_BYTES, &mut self.scratch)?;
        for c in self.scratch.chunks_exact(RECORD_BYTES) {
            let mut r = [0u8; RECORD_BYTES];
            r.copy_from_slice(c);
            out.push(decode(&r)?);
        }
        Ok(())
    }

    /// Stops firing. When a fire is still waiting for `ack_user` and `ack_pending` is set,
    /// waits (up to `timeout`) for its interrupt and acknowledges it as the measuring loop
    /// would, so the last sample is complete. Returns whether a fire was pending.
    pub fn stop_firing(&mut self, card: &mut Card, ack_pending: bool, timeout: Duration) -> Result<bool, DeviceError> {
        card.write(regs::CONTROL, regs::control::STOP.set(1))?;
        let status = card.read(regs::STATUS)?;
        let pending = regs::status::PENDING.get(status) != 0;
        if pending && ack_pending {
            // Its interrupt, then the acknowledgement naming it (the card says which it is).
            card.device().wait_interrupt(WAIT_MASK, timeout)?;
            let fire = card.read(regs::PENDING_FIRE)? as u32;
            ack_user(card, fire)?;
        }
        Ok(pending)
    }

    /// Ends the run: stops firing (see [`Run::stop_firing`]), lets card time pass until
    /// every record the timer numbered is in the ring or counted lost (copying them into
    /// `out`), disables the MSI, reads the final counters and frees the ring.
    pub fn finish(mut self, card: &mut Card, ack_pending: bool, out: &mut Vec<Sample>) -> Result<RunEnd, DeviceError> {
        let result = self.drain(card, ack_pending, out);
        let freed = card.device().free_dma(self.ring);
        let released = card.release(Block::IrqTimer);
        let end = result?;
        freed?;
        released?;
        Ok(end)
    }

    fn drain(&mut self, card: &mut Card, ack_pending: bool, out: &mut Vec<Sample>) -> Result<RunEnd, DeviceError> {
        let pending_at_stop = self.stop_firing(card, ack_pending, Duration::from_millis(100))?;
        let settle = card.cycles_to_duration(u64::from(FLUSH_CYCLES) * 2 + 64);
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            self.poll(card, out)?;
            let c = counters(card)?;
            // Every numbered record is either in the ring or lost; a still-pending fire (not
            // acknowledged) has no record yet and never will.
            if c.wr_index == c.sequence.wrapping_sub(c.lost) && self.rd_index == c.wr_index {
                msi::set(card, msi_bit(), false)?;
                msi::clear_latched(card, msi_bit())?;
                return Ok(RunEnd { counters: c, delivered: self.delivered, pending_at_stop });
            }
            if Instant::now() > deadline {
                return Err(IrqTimerError::DrainTimeout {
                    sequence: c.sequence,
                    lost: c.lost,
                    wr_index: c.wr_index,
                    rd_index: self.rd_index,
                }
                .into());
            }
            card.device().idle(settle)?;
        }
    }
}

/// A timer that fires although nobody holds its lease was started by the card's firmware or
/// by register writes: not ours to clear under it.
fn refuse_ownerless_run(card: &mut Card) -> Result<(), DeviceError> {
    if regs::status::RUNNING.get(card.read(regs::STATUS)?) != 0 {
        card.release(Block::IrqTimer)?;
        return Err(IrqTimerError::Unowned.into());
    }
    Ok(())
}

fn program(card: &mut Card, ring: &DmaBuffer, ring_records: u32, config: &ValidTimerConfig, vectors: u32) -> Result<(), DeviceError> {
    for w in config.config_writes() {
        card.write(w.register, w.value)?;
    }
    set_vectors(card, vectors, false)?;
    program_ring_and_msi(card, ring, ring_records)?;
    card.write(regs::CONTROL, regs::control::START.set(1))
}

/// The sample ring and the timer's MSI (after a clear), with the interrupt queue emptied.
fn program_ring_and_msi(card: &mut Card, ring: &DmaBuffer, ring_records: u32) -> Result<(), DeviceError> {
    for w in tlpx_blocks::irq_timer::ring_writes(ring.bus_addr, ring_records) {
        card.write(w.register, w.value)?;
    }
    msi::clear_latched(card, msi_bit())?;
    msi::set(card, msi_bit(), true)?;
    // Interrupts queued before this run (an earlier run's last, another source's) would be
    // taken for fires: a read so every write above has arrived, then empty the queue.
    let sequence = card.read(regs::SEQUENCE)?;
    if sequence != 0 {
        return Err(IrqTimerError::NotCleared { sequence }.into());
    }
    while card.device().wait_interrupt(WAIT_MASK, Duration::ZERO)?.is_some() {}
    Ok(())
}

/// The host side of a timer schedule someone else runs — the card's CPU with
/// `tlpx script run --serve irq` (firmware/scripts/irq_schedule.tlpxs): the sample ring and
/// the MSI are set up, the timer is not started; every interrupt that comes is acknowledged
/// from the waiting thread (`ack_user`, the user stage) and the samples are copied out.
pub struct Responder {
    run: Run,
    /// Interrupts acknowledged.
    pub acked: u64,
    /// Samples copied out of the ring.
    pub samples: Vec<Sample>,
}

impl Responder {
    /// Clears the timer (stopped), allocates a ring of `ring_records` records and programs it
    /// and the MSI.
    pub fn attach(card: &mut Card, ring_records: u32) -> Result<Responder, DeviceError> {
        card.require(Feature::IrqTimer, "interrupt latency timer")?;
        let ring_records = tlpx_blocks::irq_timer::ring_records(ring_records)?;
        card.claim(Block::IrqTimer)?;
        refuse_ownerless_run(card)?;
        let ring = card.device().alloc_dma(ring_records as usize * RECORD_BYTES)?;
        let programmed = card
            .write(regs::CONTROL, regs::control::CLEAR.set(1))
            .and_then(|_| set_vectors(card, 0, false))
            .and_then(|_| program_ring_and_msi(card, &ring, ring_records));
        if let Err(e) = programmed {
            let _ = card.device().free_dma(ring);
            return Err(e);
        }
        Ok(Responder {
            run: Run { ring, ring_records, rd_index: 0, delivered: 0, scratch: Vec::new(), interrupts: 0 },
            acked: 0,
            samples: Vec::new(),
        })
    }

    /// Waits at most `wait` for the timer's interrupt and acknowledges it (user stage), then
    /// copies the samples written since; true if anything happened.
    pub fn serve(&mut self, card: &mut Card, wait: Duration) -> Result<bool, DeviceError> {
        let fired = card.wait_interrupt(WAIT_MASK, wait)?.is_some();
        if fired {
            let fire = self.run.took_interrupt();
            ack_user(card, fire)?;
            self.acked += 1;
        }
        let copied = self.run.poll(card, &mut self.samples)?;
        Ok(fired || copied > 0)
    }

    /// Disables the MSI (the timer stopped), copies the last samples and frees the ring.
    pub fn finish(mut self, card: &mut Card) -> Result<(u64, Vec<Sample>), DeviceError> {
        card.write(regs::CONTROL, regs::control::STOP.set(1))?;
        let copied = self.run.poll(card, &mut self.samples);
        let disabled = msi::set(card, msi_bit(), false);
        let freed = card.device().free_dma(self.run.ring);
        let released = card.release(Block::IrqTimer);
        copied?;
        disabled?;
        freed?;
        released?;
        Ok((self.acked, self.samples))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_round_trip_and_other_kinds_are_refused() {
        let s = Sample {
            sequence: 7,
            t0: 0x1_2345_6789,
            isr_cycles: None,
            user_cycles: Some(321),
            overrun: false,
            interval_cycles: 1500,
            fire: 8,
            vector: 13,
        };
        assert_eq!(decode(&encode(&s)).expect("a sample"), s);
        let o = Sample { isr_cycles: Some(40), user_cycles: None, overrun: true, ..s };
        assert_eq!(decode(&encode(&o)).expect("a sample"), o);
        let mut spy_record = encode(&s);
        spy_record[12] = 0b0000_0100; // fmt 2, type 0: a spy request record
        let e = decode(&spy_record).expect_err("not a sample").to_string();
        assert!(e.contains("fmt 2 type 0"), "{e}");
    }

    #[test]
    fn histogram_buckets_are_log2() {
        assert_eq!((log2_bucket(0), log2_bucket(1), log2_bucket(2), log2_bucket(3), log2_bucket(4)), (0, 0, 1, 1, 2));
        assert_eq!(log2_bucket(u32::MAX), 31);
        let h = histogram_of([1, 2, 3, 1000]);
        assert_eq!((h[0], h[1], h[9], h.iter().sum::<u64>()), (1, 2, 1, 4));
    }

    #[test]
    fn sequence_gaps_are_found() {
        let mk = |seq| Sample {
            sequence: seq,
            t0: 0,
            isr_cycles: None,
            user_cycles: Some(1),
            overrun: false,
            interval_cycles: 1,
            fire: seq + 1,
            vector: 0,
        };
        let ok: Vec<Sample> = (0..5).map(mk).collect();
        assert_eq!(check_sequence(&ok, 0), SequenceCheck::default());
        let gap: Vec<Sample> = [0, 1, 4, 5].into_iter().map(mk).collect();
        let c = check_sequence(&gap, 0);
        assert_eq!((c.gaps, c.missing), (vec![(2, 4)], 2));
    }

    #[test]
    fn configs_are_validated_with_the_bad_value() {
        let e = TimerConfig::random_ns(100_000.0, 10_000.0, 10, 1, 125_000_000).expect_err("inverted").to_string();
        assert!(e.contains("inverted") && e.contains("100000"), "{e}");
        let e = TimerConfig::periodic_ns(1.0, 10, 1, 125_000_000).expect_err("under a cycle").to_string();
        assert!(e.contains("1 ns") && e.contains("cycles"), "{e}");
        let c = TimerConfig::random_ns(10_000.0, 100_000.0, 10, 1, 125_000_000).expect("valid");
        assert_eq!((c.min_interval_cycles, c.max_interval_cycles), (1250, 12500));
        let p = TimerConfig::periodic_ns(8_000.0, 0, 1, 125_000_000).expect("valid");
        assert_eq!((p.mode, p.min_interval_cycles, p.max_interval_cycles), (Mode::Periodic, 1000, 1000));
    }
}
