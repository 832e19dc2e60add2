//! The ISR stage on hardware: the kernel's `irq:irq_handler_entry` tracepoint, read through
//! perf_event_open, and the correlation of the host's clock with the card's cycle counter.
//!
//! ```text
//!  card: fire at T0 (card cycles) ──MSI──► kernel: irq_handler_entry(irq, name)
//!                                              │ one perf event per CPU, sample time in
//!                                              │ CLOCK_MONOTONIC_RAW ns ──► IrqHandlerTrace
//!  host: t_a ─ MRd timebase.cycles (card latches c) ─ CplD ─ t_b   (N times)
//!          └────────────► ClockCorrelation::fit ─► ClockFit: host ns ⇄ card cycles ± bound
//!  isr_stage_cycles: ISR stage = cycles(first entry after T0, before the next fire) − T0
//! ```
//!
//! No tlpx code runs in the kernel, so on a real card (vfio backend) nothing can write
//! `ack_isr` at the moment the kernel's handler for the card's MSI starts. The kernel says
//! it itself: the tracepoint `irq:irq_handler_entry` fires at the entry of every handler.
//! [`IrqHandlerTrace`] opens it on every online CPU with sample times in a clock user space
//! can read ([`TraceClock`]), keeps the interrupt numbers of the card ([`find_msi_irqs`] finds
//! them in /proc/interrupts) and hands out [`IrqEntry`]s. [`ClockCorrelation`] turns those
//! host times into card cycles: pairs (t_a, card counter, t_b) bracket the instant the card
//! latched its counter; a least-squares line through the fastest pairs, and the polygon of
//! every line the brackets allow, give the conversion and a bound on its error.
//! [`isr_stage_cycles`] pairs each fire with its handler entry.
//!
//! One file per concern. The pure ones are tested on recorded input (blocks/irq_timer/tests/fixtures:
//! this machine's tracepoint format file, a perf ring the kernel wrote whose live records
//! wrap past its end, clock pairs taken from the simulated card) and on bytes and pairs built
//! as the kernel and the card produce them: the clock fit and the pairing are checked against
//! pairs from a known clock, because only there is the true error known:
//!
//! | file | what | touches |
//! |---|---|---|
//! | `tracefs.rs` | finding the tracepoint's id and format; why it was not found | tracefs, /proc/self/mounts |
//! | `format.rs` | the format file parser; decoding a raw record with it ([`decode_irq_entry`]) | pure |
//! | `interrupts.rs` | the card's interrupt numbers in /proc/interrupts ([`find_msi_irqs`]) | pure |
//! | `records.rs` | perf's records ([`parse_record`]) and the ring walk with records that wrap ([`walk_ring`]) | pure |
//! | `trace.rs` | [`IrqHandlerTrace`]: one event and ring per CPU through [`crate::perf`] | perf_event_open |
//! | `clock.rs` | [`ClockCorrelation`]: the fit and its bound | the card's timebase (`measure`) |
//! | `steering.rs` | per-CPU dispatch: CPU roles (online, isolated, nohz_full), steering an irq to a CPU, the per-CPU counts of /proc/interrupts that check it ([`SteeringCheck`]) | sysfs, /proc/irq |
//! | `pairing.rs` | [`isr_stage_cycles`]: each fire paired with its handler entry | pure |
//! | `error.rs` | [`IsrTraceError`]: each failure above as a variant a caller can match | pure |
//!
//! docs/interrupts.md, last section, explains the method, its error bounds and what was
//! verified where.

mod clock;
mod error;
mod format;
mod interrupts;
mod pairing;
mod records;
mod steering;
mod trace;
mod tracefs;

#[cfg(test)]
mod testdata;

pub use clock::{ClockCorrelation, ClockFit, MAX_PAIRS, MIN_PAIRS};
pub use error::IsrTraceError;
pub use format::{decode_irq_entry, DecodedIrqEntry, FormatField, IrqEntryLayout, TracepointFormat};
pub use interrupts::find_msi_irqs;
pub use pairing::isr_stage_cycles;
pub use records::{parse_record, walk_ring, PerfRecord, PERF_RECORD_LOST, PERF_RECORD_LOST_SAMPLES, PERF_RECORD_SAMPLE};
pub use steering::{effective_affinity, parse_cpu_list_or_empty, steer_irq, CpuRoles, InterruptCounts, SteeringCheck, PROC, SYS_CPU};
pub use trace::{parse_cpu_list, IrqEntry, IrqHandlerTrace, TraceBatch, TraceClock, TraceOptions};
pub use tracefs::{find_failure_message, permission_note, tracing_mounts, TracepointId, TracingMount, Tried, EVENT_DIR, TRACEFS_ROOTS};
// The perf access facts moved to the shared perf layer; these names stay for callers of
// `isr_trace::` from before.
pub use crate::perf::{PermissionFacts, PARANOID_PATH};
