//! The traffic generator block: DMA reads/writes of host memory, instrumented in hardware.
//!
//! The card builds the TLPs itself (not through LitePCIe's requester), so every header field
//! an exerciser needs is under control: 3DW or forced 4DW headers, byte enables for any byte
//! offset, relaxed ordering and no-snoop, its own tags (128..128+TAGS) and completion
//! matching, per-request read latency, error and timeout counting.
//!
//! Data pattern: DW `i` of host memory (byte address `bus_addr = 4*i`) holds
//! `pattern_word(pattern, seed, bus_addr)`; the host fills buffers with [`fill_pattern`] and the
//! card writes and checks the same function, so data can be checked in any completion order.

use std::time::Duration;

use serde::Serialize;

use tlpx_regs::{generator as gen, Register};

use crate::card::{Card, Feature};
use crate::lease::Block;
use crate::msi;
use crate::{ClockSource, DeviceError, DmaBuffer};

/// The generator's configuration, limits and encoding live in the pure block crate; the
/// driver runs what it encodes.
pub use tlpx_blocks::generator::{
    lowbias32, pattern_word, AddressPattern, DataPattern, GenConfig, GenConfigError, Operation, TransferSize, ValidGenConfig,
    HISTOGRAM_BUCKETS, MAX_TRANSFER_BYTES, TAGS,
};
pub use tlpx_blocks::LinkLimits;

/// What can go wrong with the generator; [`DeviceError::Generator`] carries it.
#[derive(Debug, thiserror::Error)]
pub enum GeneratorError {
    /// A configuration the generator cannot run (tlpx-blocks' checks): the caller's input.
    #[error("invalid argument: {0}")]
    Config(GenConfigError),
    /// The run did not end: its status register, the reads still outstanding, and whether
    /// it had been stopped (a run that timed out).
    #[error("the generator did not finish (status 0x{status:x}, {outstanding} reads outstanding){}", if *.stopped { " even after being stopped" } else { "" })]
    NotFinished { status: u64, outstanding: u64, stopped: bool },
}

// Not `#[from]`: that would make the configuration error this one's `source` as well as its
// text, and `{:#}` (how the CLI prints an error) would print the message twice.
impl From<GenConfigError> for GeneratorError {
    fn from(e: GenConfigError) -> Self {
        GeneratorError::Config(e)
    }
}

impl GeneratorError {
    /// The caller's input was refused (not the card or its backend).
    pub fn is_invalid_argument(&self) -> bool {
        matches!(self, GeneratorError::Config(_))
    }
}

/// Read-latency statistics as the hardware keeps them (card cycles).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LatencyStats {
    pub count: u64,
    pub min: u64,
    pub max: u64,
    pub sum: u64,
    /// log2 histogram: bucket k counts latencies in [2^k, 2^(k+1)) cycles.
    pub histogram: Vec<u64>,
    /// Per-request samples (card cycles), as many as the card's sample FIFO kept.
    pub samples: Vec<u32>,
    /// Samples the FIFO had to drop (counted, never silently).
    pub samples_dropped: u64,
}

/// Error and anomaly counters of a run.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct ErrorCounts {
    pub unsupported_request: u64,
    pub completer_abort: u64,
    pub other_status: u64,
    pub poisoned: u64,
    pub completion_timeouts: u64,
    pub unexpected_completions: u64,
    pub data_mismatches: u64,
}

/// The generator's state and counters as they stand, for a monitor that watches runs others
/// start (`tlpx serve`): they restart with every run and stay put after one ends.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct GenCounters {
    pub running: bool,
    pub done: bool,
    /// Read requests waiting for their completions.
    pub outstanding_reads: u64,
    pub read_bytes: u64,
    pub write_bytes: u64,
    pub read_requests: u64,
    pub write_requests: u64,
    pub completions: u64,
    pub transfers: u64,
    /// Card cycles of the run so far.
    pub cycles: u64,
    pub errors: ErrorCounts,
    /// Latency samples taken, and the sum of their cycles.
    pub latency_count: u64,
    pub latency_sum: u64,
}

/// What a run measured (all from the card's hardware counters).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct GenResult {
    /// Card cycles from the first request to the last completion / last write beat.
    pub cycles: u64,
    pub clock_hz: u32,
    pub transfers_done: u64,
    pub read_requests: u64,
    pub read_bytes: u64,
    pub completions: u64,
    pub write_requests: u64,
    pub write_bytes: u64,
    pub latency: LatencyStats,
    pub errors: ErrorCounts,
    /// "count", "duration", "stopped" (by the host) or "timeout" (the host gave up).
    pub ended_by: String,
}

impl GenResult {
    /// Payload bytes per second of card time, reads + writes.
    pub fn bytes_per_second(&self) -> f64 {
        let secs = self.cycles as f64 / f64::from(self.clock_hz.max(1));
        if secs == 0.0 {
            return 0.0;
        }
        (self.read_bytes + self.write_bytes) as f64 / secs
    }
}

/// Fills `buffer` with the pattern the card checks (and writes).
pub fn fill_pattern(buffer: &DmaBuffer, pattern: DataPattern, seed: u32) -> Result<(), DeviceError> {
    let mut bytes = Vec::with_capacity(buffer.len);
    for i in 0..buffer.len / 4 {
        bytes.extend_from_slice(&pattern_word(pattern, seed, buffer.bus_addr + 4 * i as u64).to_le_bytes());
    }
    buffer.write_bytes(0, &bytes)
}

/// Counts the DWs of `buffer` that differ from the pattern (for checking the card's writes).
pub fn pattern_mismatches(buffer: &DmaBuffer, pattern: DataPattern, seed: u32) -> Result<u64, DeviceError> {
    let mut bytes = vec![0u8; buffer.len];
    buffer.read_bytes(0, &mut bytes)?;
    Ok(bytes
        .chunks_exact(4)
        .enumerate()
        .filter(|(i, c)| u32::from_le_bytes([c[0], c[1], c[2], c[3]]) != pattern_word(pattern, seed, buffer.bus_addr + 4 * *i as u64))
        .count() as u64)
}

fn histogram(card: &mut Card, select: Register, count: Register, buckets: usize) -> Result<Vec<u64>, DeviceError> {
    let mut out = Vec::with_capacity(buckets);
    for i in 0..buckets {
        card.write(select, i as u64)?;
        out.push(card.read(count)?);
    }
    Ok(out)
}

/// Reads a log2 histogram through its select/count register pair.
pub(crate) fn read_histogram(card: &mut Card, select: Register, count: Register, buckets: usize) -> Result<Vec<u64>, DeviceError> {
    histogram(card, select, count, buckets)
}

/// Reads the generator's state and counters without touching a run (no lease needed).
pub fn counters(card: &mut Card) -> Result<GenCounters, DeviceError> {
    card.require(Feature::Generator, "traffic generator")?;
    let status = card.read(gen::STATUS)?;
    let mut r = |reg: Register| card.read(reg);
    let (read_bytes, write_bytes, read_requests, write_requests) =
        (r(gen::READ_BYTES)?, r(gen::WRITE_BYTES)?, r(gen::READ_REQUESTS)?, r(gen::WRITE_REQUESTS)?);
    let (completions, transfers, cycles) = (r(gen::COMPLETIONS)?, r(gen::TRANSFERS)?, r(gen::CYCLES)?);
    let errors = error_counts(card)?;
    Ok(GenCounters {
        running: gen::status::RUNNING.get(status) != 0,
        done: gen::status::DONE.get(status) != 0,
        outstanding_reads: gen::status::OUTSTANDING.get(status),
        read_bytes,
        write_bytes,
        read_requests,
        write_requests,
        completions,
        transfers,
        cycles,
        errors,
        latency_count: card.read(gen::LAT_COUNT)?,
        latency_sum: card.read(gen::LAT_SUM)?,
    })
}

/// Reads the error and anomaly counters of the current (or last) run.
pub fn error_counts(card: &mut Card) -> Result<ErrorCounts, DeviceError> {
    card.require(Feature::Generator, "traffic generator")?;
    Ok(ErrorCounts {
        unsupported_request: card.read(gen::ERR_UR)?,
        completer_abort: card.read(gen::ERR_CA)?,
        other_status: card.read(gen::ERR_OTHER)?,
        poisoned: card.read(gen::ERR_POISONED)?,
        completion_timeouts: card.read(gen::ERR_TIMEOUTS)?,
        unexpected_completions: card.read(gen::ERR_UNEXPECTED)?,
        data_mismatches: card.read(gen::ERR_MISMATCHES)?,
    })
}

/// Reads the latency histogram of the current (or last) run: [`HISTOGRAM_BUCKETS`] log2
/// buckets of cycles. Selecting a bucket is a register write: a monitor reads it once a run
/// has ended.
pub fn latency_histogram(card: &mut Card) -> Result<Vec<u64>, DeviceError> {
    card.require(Feature::Generator, "traffic generator")?;
    histogram(card, gen::LAT_HIST_SELECT, gen::LAT_HIST_COUNT, HISTOGRAM_BUCKETS)
}

/// Runs the generator on `card` over `buffer` and returns what the card measured.
///
/// The card becomes this process's owner of the generator (a lease, [`crate::lease`]) if it
/// is not yet: another live owner makes this [`DeviceError::Busy`].
/// `timeout` bounds the run in card time (the simulator's clock, or the card's cycle counter on
/// a hardware backend, where card time is wall time for a card at its clock): when it
/// passes, the run is stopped, outstanding reads are left to complete or time out, and the
/// result says `ended_by: "timeout"`. A stop request ([`crate::stop`]) stops the run the same
/// way and returns [`DeviceError::Interrupted`]. `config` was validated against the link by
/// the caller ([`GenConfig::validate`]); here only its window is checked against `buffer`.
pub fn run(card: &mut Card, buffer: &DmaBuffer, config: &ValidGenConfig, timeout: Duration) -> Result<GenResult, DeviceError> {
    card.require(Feature::Generator, "traffic generator")?;
    config.check_buffer(buffer.len as u64)?;
    card.claim(Block::Generator)?;
    let clock_hz = card.identity().clock_hz;
    for w in config.register_writes(buffer.bus_addr, clock_hz) {
        card.write(w.register, w.value)?;
    }

    let irq_bit = tlpx_regs::constants::MSI_GENERATOR as u32;
    msi::clear_latched(card, irq_bit)?;
    // Its own source only: the others' bits (the slot's, on for a DUT's stock driver) stay.
    let found = msi::switch(card, irq_bit, true)?;
    // A read so every write above has arrived, then drop interrupts queued before this run
    // (a stopped earlier run's, a taken-over dead owner's).
    card.read(gen::STATUS)?;
    while card.device().wait_interrupt(msi::wait_mask(irq_bit), Duration::ZERO)?.is_some() {}
    card.write(gen::CONTROL, gen::control::START.set(1))?;
    // Every source of the card shares one MSI vector (and another process's block may be
    // running): an interrupt ends the wait only when the generator says it is done.
    let deadline = card.device().clock_ns()?.saturating_add(timeout.as_nanos() as u64);
    // On a hardware backend the budget is card time too, measured by the card's counter: a
    // card slower than its clock (the Verilated card behind vfio-user) gets its budget in its
    // own time (Card::wait_interrupt_card_time). The simulator's clock is card time already.
    let host_clock = card.device().clock_source() == ClockSource::Host;
    let (start_cycle, budget_cycles) =
        if host_clock { (card.cycles()?, (timeout.as_secs_f64() * f64::from(clock_hz.max(1))) as u64) } else { (0, 0) };
    let (timed_out, interrupted) = loop {
        let waited = if host_clock {
            let used = card.cycles()?.wrapping_sub(start_cycle);
            let left = card.cycles_to_duration(budget_cycles.saturating_sub(used));
            card.wait_interrupt_card_time(msi::wait_mask(irq_bit), left)
        } else {
            let left = Duration::from_nanos(deadline.saturating_sub(card.device().clock_ns()?));
            card.wait_interrupt(msi::wait_mask(irq_bit), left)
        };
        match waited {
            Ok(Some(_)) if gen::status::DONE.get(card.read(gen::STATUS)?) == 0 => continue,
            Ok(irq) => break (irq.is_none(), false),
            Err(DeviceError::Interrupted) => break (true, true),
            Err(e) => return Err(e),
        }
    };
    // Its interrupt may have been taken by another process's wait (the sim queues the card's
    // interrupts for whoever waits): a run that is done did not time out.
    let timed_out = timed_out && (interrupted || gen::status::DONE.get(card.read(gen::STATUS)?) == 0);
    if timed_out {
        // Stop issuing; what is outstanding completes or times out within the completion
        // timeout (1 ms), so the run is done well within 5 ms.
        card.write(gen::CONTROL, gen::control::STOP.set(1))?;
        if host_clock {
            card.wait_interrupt_card_time(msi::wait_mask(irq_bit), Duration::from_millis(5))?;
        } else {
            card.device().wait_interrupt(msi::wait_mask(irq_bit), Duration::from_millis(5))?;
        }
    }
    msi::clear_latched(card, irq_bit)?;
    found.restore(card)?;
    if interrupted {
        return Err(DeviceError::Interrupted);
    }
    let status = card.read(gen::STATUS)?;
    if gen::status::DONE.get(status) == 0 {
        return Err(GeneratorError::NotFinished { status, outstanding: gen::status::OUTSTANDING.get(status), stopped: timed_out }.into());
    }
    let ended_by = if timed_out {
        "timeout"
    } else {
        match gen::status::EndedBy::try_from(gen::status::ENDED_BY.get(status) as u32) {
            Ok(gen::status::EndedBy::Count) => "count",
            Ok(gen::status::EndedBy::Duration) => "duration",
            _ => "stopped",
        }
    }
    .to_string();
    if ended_by == "stopped" {
        // Not stopped by this process (it stops only on a timeout): `tlpx stop generator` or
        // an expired lease ended the run, and the block is no longer ours.
        card.verify_held(Block::Generator)?;
    }

    let lat_count = card.read(gen::LAT_COUNT)?;
    let level = gen::lat_samples::LEVEL.get(card.read(gen::LAT_SAMPLES)?);
    let mut samples = Vec::with_capacity(level as usize);
    for _ in 0..level {
        samples.push(card.read(gen::LAT_SAMPLE)? as u32);
    }
    let latency = LatencyStats {
        count: lat_count,
        min: if lat_count == 0 { 0 } else { card.read(gen::LAT_MIN)? },
        max: card.read(gen::LAT_MAX)?,
        sum: card.read(gen::LAT_SUM)?,
        histogram: histogram(card, gen::LAT_HIST_SELECT, gen::LAT_HIST_COUNT, HISTOGRAM_BUCKETS)?,
        samples,
        samples_dropped: card.read(gen::LAT_SAMPLES_DROPPED)?,
    };
    let errors = error_counts(card)?;
    Ok(GenResult {
        cycles: card.read(gen::CYCLES)?,
        clock_hz,
        transfers_done: card.read(gen::TRANSFERS)?,
        read_requests: card.read(gen::READ_REQUESTS)?,
        read_bytes: card.read(gen::READ_BYTES)?,
        completions: card.read(gen::COMPLETIONS)?,
        write_requests: card.read(gen::WRITE_REQUESTS)?,
        write_bytes: card.read(gen::WRITE_BYTES)?,
        latency,
        errors,
        ended_by,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn config_values_keep_their_json_names() -> Result<(), serde_json::Error> {
        // Results and saved configurations carry these names: the generated enums must
        // (de)serialize as the hand-written ones did.
        let names = Operation::ALL.iter().map(serde_json::to_string).collect::<Result<Vec<_>, _>>()?;
        assert_eq!(names, ["\"read\"", "\"write\"", "\"read_write\"", "\"write_then_read\""]);
        let names = AddressPattern::ALL.iter().map(serde_json::to_string).collect::<Result<Vec<_>, _>>()?;
        assert_eq!(names, ["\"sequential\"", "\"fixed\"", "\"random\""]);
        assert_eq!(serde_json::to_string(&DataPattern::Prbs)?, "\"prbs\"");
        assert_eq!(serde_json::from_str::<Operation>("\"write_then_read\"")?, Operation::WriteThenRead);
        Ok(())
    }
}
