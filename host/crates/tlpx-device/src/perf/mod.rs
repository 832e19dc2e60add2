//! The one perf_event_open layer of tlpx: the kernel's `struct perf_event_attr` (once, with
//! its layout and version sizes), the system call and its fd, the mmap ring of a sampling
//! event, and the facts a refusal is explained with (perf_event_paranoid, capabilities,
//! errno names).
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
