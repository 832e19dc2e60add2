//! The one perf_event_open layer of tlpx: the kernel's `struct perf_event_attr`, the system
//! call and its fd, the mmap ring of a sampling event, and the facts a refusal is explained
//! with (perf_event_paranoid, capabilities, errno names). The kernel's ABI (the struct, its
//! version sizes, the syscall, the ioctl numbers, the mmap page's layout) comes from the
//! `perf-event-open-sys2` crate, bindgen's output for the uapi header.
//!
//! Why not the higher-level `perf-event2` crate (0.7.4, on the same bindings): it covers the
//! `--pmc` counters (hardware events of this thread, groups, enable/disable/reset of a group,
//! count with time enabled and running), but a `Counter` is made only by a real system call,
//! so `--pmc`'s open policy (the first event that opens leads; one refused by the group with
//! EINVAL opens alone; the others are listed with their errno) could no longer be tested
//! against a stand-in kernel that refuses on purpose, which this machine's kernel (no PMU)
//! never does in those ways. For the ISR trace it has no PERF_EVENT_IOC_SET_FILTER (the kernel
//! filter on the card's interrupt numbers), and its `Sampler` walks the ring itself, record by
//! record, where `isr_trace::records::walk_ring` is tested on rings the kernel wrote (records
//! wrapping past the end) and on inconsistent head/tail positions. What it would replace is
//! the few calls here, which the sys crate already provides.
//!
//! ```text
//!  tlpx --pmc (tlpx/src/pmc.rs)            isr_trace (irq:irq_handler_entry)
//!   counting events of this thread          sampling tracepoint on every CPU
//!        │ PerfEventAttr, size VER1              │ PerfEventAttr, size VER5
//!        └──────────────► perf_event_open ◄──────┘
//!                     enable / disable / reset / set_filter / read_values
//!                     MappedRing (head/tail protocol)      ◄── isr_trace only
//!                     PermissionFacts, read_paranoid, errno_name ─► each user's message
//! ```
//!
//! What the events are for stays with the users: which events and how they are grouped and
//! scaled (`--pmc`), what a ring's records mean (the ISR trace), and the words of a refusal,
//! whose advice depends on what was asked for.

pub mod access;
pub mod attr;
pub mod event;
pub mod ring;

pub use access::{errno_name, io_errno_name, read_paranoid, PermissionFacts, PARANOID_PATH};
pub use attr::*;
pub use event::{disable, enable, perf_event_open, read_values, reset, set_filter};
pub use ring::{page_size, MappedRing};
