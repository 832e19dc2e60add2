//! The errors of the ISR-stage tracing, typed so that a caller can tell a clock fit it gave bad
//! pairs (its input: the `invalid argument` ones) from a tracepoint or perf ring the kernel
//! does not offer as expected. [`crate::DeviceError::IsrTrace`] carries them.

use std::io;
use std::path::PathBuf;

use super::clock::{MAX_PAIRS, MIN_PAIRS};

#[derive(Debug, thiserror::Error)]
pub enum IsrTraceError {
    // The clock correlation's input (clock.rs).
    #[error("invalid argument: a clock correlation takes {MIN_PAIRS}..={MAX_PAIRS} pairs, not {0}")]
    PairCount(usize),
    #[error("invalid argument: a clock correlation needs at least {MIN_PAIRS} (host_a, card cycles, host_b) pairs, not {0}")]
    TooFewPairs(usize),
    #[error("invalid argument: a clock correlation takes at most {MAX_PAIRS} pairs, not {0}")]
    TooManyPairs(usize),
    #[error("invalid argument: pair {pair}: host_b {host_b} is before host_a {host_a}; each pair is (host time before the read, card cycles, host time after)")]
    PairReversed { pair: usize, host_a: u64, host_b: u64 },
    #[error(
        "invalid argument: pair {pair}: host_a {host_a} is before host_b {previous_host_b} of pair {}: the pairs must be in the order they were \
         taken, with a monotonic host clock",
        .pair - 1
    )]
    PairsOverlap { pair: usize, host_a: u64, previous_host_b: u64 },
    #[error(
        "invalid argument: pair {pair}: card cycles {cycles} do not follow {previous_cycles} of pair {}: the card's counter must increase \
         (was the card reset, or are these two cards?)",
        .pair - 1
    )]
    CardCounterNotIncreasing { pair: usize, cycles: u64, previous_cycles: u64 },
    #[error("invalid argument: all clock pairs have the same host time: nothing to fit a rate to")]
    SameHostTime,
    #[error("invalid argument: the card counter does not advance with host time (fitted {0} cycles per ns)")]
    NoAdvance(f64),
    #[error("invalid argument: the 'after' correlation starts at host ns {after_from} before the 'before' one ends at {before_to}: give them in time order")]
    FitsOutOfOrder { after_from: u64, before_to: u64 },
    #[error("invalid argument: interpolate needs fits made by ClockCorrelation::fit or ::measure (these carry no pairs)")]
    FitsWithoutPairs,
    #[error(
        "invalid argument: the card counter reads {after_start} in the 'after' correlation, not after {before_end} of the 'before' one: \
         was the card reset in between?"
    )]
    CardCounterRestarted { after_start: u64, before_end: u64 },
    #[error("invalid argument: host time {0} ns is outside the card counter's range (before its zero)")]
    HostTimeOutOfRange(u64),
    #[error("invalid argument: card cycle {0} falls outside the host clock's range")]
    CycleOutOfRange(u64),
    // The pairing's input (pairing.rs).
    #[error("invalid argument: fire {fire} (sequence {sequence}) has T0 {t0}, not after T0 {previous_t0} of the fire before it: give fires in T0 order")]
    FiresOutOfOrder { fire: usize, sequence: u32, t0: u64, previous_t0: u64 },
    // The trace's options (trace.rs).
    #[error("invalid argument: a perf ring of 2^{0} pages per CPU is too large; give 0..=12")]
    RingTooLarge(u32),

    // The tracepoint's format file (format.rs, tracefs.rs).
    #[error("tracepoint format line {line:?}: {why}")]
    FormatLine { line: String, why: String },
    #[error("the tracepoint format lists no `field:` lines")]
    FormatWithoutFields,
    #[error("the tracepoint format of {event:?} has no `irq` field (fields: {fields}): not irq_handler_entry?")]
    NoIrqField { event: String, fields: String },
    #[error("the tracepoint's `irq` field is {0} bytes; 1, 2, 4 or 8 expected")]
    IrqFieldSize(usize),
    /// The format file at `path` did not parse.
    #[error("{}: {cause}", .path.display())]
    FormatFile { path: PathBuf, cause: Box<crate::DeviceError> },
    /// Neither tracefs nor debugfs offers the tracepoint; the message lists what was tried and why.
    #[error("{0}")]
    TracepointNotFound(String),

    // The raw records (format.rs, records.rs).
    #[error("a raw irq_handler_entry record of {len} bytes is too short for its {what} (needs {needs})")]
    RawRecordTooShort { len: usize, what: &'static str, needs: usize },
    #[error("a raw record has common_type {found}, but irq_handler_entry is event {id}: not this tracepoint's record")]
    ForeignRecord { found: u64, id: u64 },
    #[error("a raw irq_handler_entry record holds irq field 0x{0:x}, not an interrupt number")]
    IrqValue(u64),
    #[error("malformed perf record of {len} bytes: {why}")]
    MalformedRecord { len: usize, why: String },

    // The perf rings (records.rs, trace.rs).
    #[error("the perf ring's data area is empty")]
    EmptyRing,
    #[error("perf ring positions are inconsistent: tail {tail}, head {head}, ring {size} bytes")]
    RingPositions { tail: u64, head: u64, size: u64 },
    #[error("the perf ring of CPU {cpu} is inconsistent: tail {tail}, head {head}, {size} bytes")]
    CpuRingPositions { cpu: u32, tail: u64, head: u64, size: u64 },
    #[error("perf ring record at {pos} says it is {len} bytes, but {} bytes are left before the head {head}", .head - .pos)]
    RecordPastHead { pos: u64, len: u64, head: u64 },
    /// perf_event_open refused; `advice` says what to change (permissions, kernel, limits).
    #[error("perf_event_open of irq:irq_handler_entry (id {id}) on CPU {cpu} failed: {cause} ({errno}); {advice}")]
    PerfOpen { id: u64, cpu: u32, cause: io::Error, errno: String, advice: String },
    #[error(
        "cannot map the perf ring of CPU {cpu} ({bytes} bytes): {cause} ({errno}); without CAP_IPC_LOCK the rings \
         of all CPUs must fit in kernel.perf_event_mlock_kb: use a smaller ring"
    )]
    RingMap { cpu: u32, bytes: usize, cause: io::Error, errno: String },
    #[error("CPU list {text:?} has a bad part {part:?}")]
    CpuListPart { text: String, part: String },
    #[error("CPU list {0:?} is empty")]
    CpuListEmpty(String),
}

impl IsrTraceError {
    /// The caller's input was refused (pairs, fires or options it gave), not the kernel's
    /// tracing or the card.
    pub fn is_invalid_argument(&self) -> bool {
        use IsrTraceError::*;
        matches!(
            self,
            PairCount(_)
                | TooFewPairs(_)
                | TooManyPairs(_)
                | PairReversed { .. }
                | PairsOverlap { .. }
                | CardCounterNotIncreasing { .. }
                | SameHostTime
                | NoAdvance(_)
                | FitsOutOfOrder { .. }
                | FitsWithoutPairs
                | CardCounterRestarted { .. }
                | HostTimeOutOfRange(_)
                | CycleOutOfRange(_)
                | FiresOutOfOrder { .. }
                | RingTooLarge(_)
        )
    }
}
