//! The wire protocol between `tlpx-sim` and its clients (see docs/sim-protocol.md).
//!
//! Transport: a Unix stream socket. Every message is one frame: a little-endian `u32` byte
//! length followed by that many bytes of bincode (1.3, default options) encoding a
//! [`Request`] (client to sim) or a [`Reply`] (sim to client). The first request of a
//! connection must be [`Request::Hello`]; the sim answers every request with exactly one
//! reply, in order, except [`Request::MmioWrite`] which is posted and has none.
//!
//! Shared by both sides so they cannot drift apart: the sim (crates/tlpx-sim) and the sim
//! backend of the Device trait (crates/tlpx-device/src/backends/sim.rs).

#![cfg_attr(test, allow(clippy::unwrap_used))]

pub mod paths;
pub mod tlp;

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::path::PathBuf;

use bincode::Options;
use serde::{de::DeserializeOwned, Deserialize, Serialize};
pub use tlpx_model::link::LinkConfig;

/// Bumped whenever a message changes shape or meaning.
/// 2: block MMIO, DMA fault injection, traffic counters.
/// 3: host time (`HelloInfo::host_time`, `host_time_cap_ns`, `SimStats::host_time`).
/// 4: an IOMMU: every allocation gets a fresh bus address in an IOVA window
/// (`HelloInfo::iova_window_size`), so `bus_addr` is no longer `host_memory_bus_base +
/// file_offset`; `SimStats::dma_read_faults_freed` and `dma_write_faults_freed`.
/// 5: live time (`Request::SetLive`, `Reply::LiveSet`, `SimStats::live_clients`,
/// `live_cycles`, `live_paced_seconds`, `ClientStats::live`).
/// 7: several interrupt vectors (MSI's Multiple Message Enable, MSI-X): `Reply::Irq`'s
/// `vector` is the vector the host enabled, `SimStats::msix_messages`.
pub const PROTOCOL_VERSION: u32 = 7;

/// Largest block MMIO access in bytes (a CPU's 64-byte store or write-combining burst).
pub const MAX_BLOCK_BYTES: usize = 64;

/// Largest frame either side accepts (a 4 KiB TLP is far below this).
pub const MAX_FRAME_BYTES: u32 = 1 << 20;

/// BAR0 of the card: a 32-bit memory BAR of 1 MiB.
pub const BAR0_SIZE: u64 = 1 << 20;

// Requests ----------------------------------------------------------------------------------------

/// Client to sim. `Hello` is variant 0 in every protocol version.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Request {
    /// First message of a connection. Answered by `HelloOk` or `Error`.
    Hello { protocol_version: u32, client_name: String },
    /// Reads `len` bytes of the card's configuration space at `offset` (within 0..4096).
    ConfigRead { offset: u16, len: u16 },
    /// Writes bytes of configuration space; read-only bits keep their value.
    ConfigWrite { offset: u16, data: Vec<u8> },
    /// A CPU load from a BAR: `width` is 1, 2, 4 or 8 bytes, `offset` naturally aligned.
    MmioRead { bar: u8, offset: u64, width: u8 },
    /// A CPU store to a BAR (posted: no reply). Ordered before the client's later requests.
    MmioWrite { bar: u8, offset: u64, width: u8, value: u64 },
    /// Allocates DMA-able host memory; `align` is a power of two (0 means 4096).
    AllocDma { len: u64, align: u64 },
    /// Frees an allocation of this client; the card's later accesses there fault.
    FreeDma { id: u64 },
    /// Waits for an MSI whose vector is in `vector_mask` (bit n = vector n), at most
    /// `timeout_cycles` card cycles (0 = only look at interrupts already received).
    WaitIrq { vector_mask: u32, timeout_cycles: u64 },
    /// Lets `cycles` card cycles pass.
    Advance { cycles: u64 },
    /// Sends a raw TLP (header + payload DWs, tlpx_card.h layout) to the card. For a
    /// non-posted request waits up to `wait_cycles` for its completion.
    InjectTlp { dwords: Vec<u32>, wait_cycles: u64 },
    /// Counters of the sim.
    Stats,
    /// Stops the sim (it answers `ShuttingDown`, then exits and removes its files).
    Shutdown,
    /// A CPU load of `len` (1..=64) bytes at any byte `offset` of a BAR, as ONE MRd32 whose
    /// Length and First/Last BE cover exactly those bytes (a 16/32/64-byte load). It must
    /// not cross a 4 KiB boundary. Answered by `MmioBlock`.
    MmioReadBlock { bar: u8, offset: u64, len: u8 },
    /// A CPU store of `data` (1..=64 bytes) at any byte `offset` of a BAR, as ONE MWr32
    /// (a 16/32/64-byte store or a write-combining burst). Posted: no reply.
    MmioWriteBlock { bar: u8, offset: u64, data: Vec<u8> },
    /// Sets the root complex's fault injection for the card's reads of host memory (counted
    /// from this request on; all zero turns it off). Answered by `DmaFaultsSet`.
    SetDmaFaults(DmaFaults),
    /// Asks for live time (`live: true`) or gives this client's claim up (`false`). While at
    /// least one connected client holds a claim, card time runs continuously, whether or not
    /// anyone waits, paced so that it never runs ahead of wall time; a client that
    /// disconnects gives its claim up. Answered by `LiveSet`. Idempotent.
    SetLive { live: bool },
}

impl Request {
    /// Short name for logs and per-client counters.
    pub fn name(&self) -> &'static str {
        match self {
            Request::Hello { .. } => "Hello",
            Request::ConfigRead { .. } => "ConfigRead",
            Request::ConfigWrite { .. } => "ConfigWrite",
            Request::MmioRead { .. } => "MmioRead",
            Request::MmioWrite { .. } => "MmioWrite",
            Request::AllocDma { .. } => "AllocDma",
            Request::FreeDma { .. } => "FreeDma",
            Request::WaitIrq { .. } => "WaitIrq",
            Request::Advance { .. } => "Advance",
            Request::InjectTlp { .. } => "InjectTlp",
            Request::Stats => "Stats",
            Request::Shutdown => "Shutdown",
            Request::MmioReadBlock { .. } => "MmioReadBlock",
            Request::MmioWriteBlock { .. } => "MmioWriteBlock",
            Request::SetDmaFaults(_) => "SetDmaFaults",
            Request::SetLive { .. } => "SetLive",
        }
    }
}

// Replies -----------------------------------------------------------------------------------------

/// Sim to client.
///
/// `HelloOk` and `HelloRefused` are variants 0 and 1 in every protocol version, so that a
/// client of another version still understands why it was turned away.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum Reply {
    HelloOk(Box<HelloInfo>),
    /// The sim speaks another protocol version (or Hello came twice); the connection closes.
    HelloRefused {
        sim_protocol_version: u32,
        message: String,
    },
    ConfigData {
        data: Vec<u8>,
    },
    ConfigWritten,
    /// The value of an `MmioRead`, zero-extended, and the card cycle its completion arrived.
    MmioValue {
        value: u64,
        card_cycle: u64,
    },
    DmaAllocated(DmaAllocation),
    DmaFreed,
    Irq {
        vector: u32,
        card_cycle: u64,
    },
    IrqTimedOut {
        card_cycle: u64,
    },
    Advanced {
        now: u64,
    },
    /// The completion of an injected non-posted TLP (header + payload DWs; the tag is the
    /// one the client sent).
    InjectCompletion {
        dwords: Vec<u32>,
        card_cycle: u64,
    },
    /// An injected posted TLP (or completion) was accepted by the card.
    InjectDelivered {
        card_cycle: u64,
    },
    /// Nothing came back within `wait_cycles` (or a posted TLP was not accepted in time).
    InjectTimedOut {
        card_cycle: u64,
    },
    Stats(Box<SimStats>),
    ShuttingDown,
    Error {
        kind: ErrorKind,
        message: String,
    },
    /// The bytes of an `MmioReadBlock` and the card cycle its last completion arrived.
    MmioBlock {
        data: Vec<u8>,
        card_cycle: u64,
    },
    /// `SetDmaFaults` took effect; the card's next memory read is read number 1.
    DmaFaultsSet,
    /// `SetLive` took effect: `live` is this client's claim now, `live_clients` the clients
    /// holding one (time runs live while it is not 0), `card_cycle` the card cycle then.
    LiveSet {
        live: bool,
        live_clients: u32,
        card_cycle: u64,
    },
}

/// Why a request failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum ErrorKind {
    /// A bad value in the request; the message names it and what is accepted.
    InvalidArgument,
    /// The card completed the request with status Unsupported Request.
    UnsupportedRequest,
    /// The card completed the request with status Completer Abort.
    CompleterAbort,
    /// The card completed the request with another non-success status (CRS, reserved).
    OtherCompletionStatus,
    /// No completion arrived within the completion timeout.
    CompletionTimeout,
    /// The request is not allowed now (e.g. memory space disabled, request before Hello).
    NotAllowed,
    /// Host memory of the sim is exhausted.
    OutOfMemory,
}

/// Everything a client needs to know about the sim and its card.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HelloInfo {
    pub protocol_version: u32,
    /// Version of the tlpx-sim binary.
    pub sim_version: String,
    /// tlpx_card_build_info() of the card library, a JSON object.
    pub card_build_info: String,
    /// Path of the card library that was loaded.
    pub card_library: String,
    /// Datapath width of the card in bits (64, 128, 256).
    pub data_width: u32,
    /// Card clock in Hz: one card cycle is 1/card_clock_hz seconds of virtual time.
    pub card_clock_hz: u64,
    /// The link the sim models (generation, lanes, MPS/MRRS from Device Control, RCB).
    pub link: LinkConfig,
    /// PCI address the config space presents, "0000:01:00.0".
    pub pci_address: String,
    /// Size in bytes of each implemented BAR, index = BAR number.
    pub bar_sizes: Vec<Option<u64>>,
    /// `lspci -x` style dump of the config space (libpci's dump access method reads it).
    pub config_dump_path: String,
    /// Host memory: a file that clients map shared; DMA lands there.
    pub host_memory_path: String,
    pub host_memory_size: u64,
    /// Base of the IOVA window (`--dma-base`): the bus addresses the sim gives allocations
    /// lie in `host_memory_bus_base..host_memory_bus_base + iova_window_size`. Not the bus
    /// address of any file offset: an allocation's `bus_addr` is its own (see `DmaAllocation`).
    pub host_memory_bus_base: u64,
    /// Size of the IOVA window in bytes (below 4 GiB and clear of BAR0 by default).
    pub iova_window_size: u64,
    pub seed: u64,
    /// Root complex read completion latency and jitter (ns of card time).
    pub dma_latency_ns: u64,
    pub dma_jitter_ns: u64,
    pub completion_timeout_cycles: u64,
    /// True when in-flight traffic also advances time with no client waiting (--free-run).
    pub free_run: bool,
    /// Whether a client's own wall-clock time between its messages is charged to the card
    /// as card time (`--host-time real`; then runs are not deterministic) or costs nothing
    /// (`virtual`, the default). See [`HostTime`].
    pub host_time: HostTime,
    /// In `real` mode, the most wall time one gap is charged as (`--host-time-cap-us`), ns.
    pub host_time_cap_ns: u64,
    /// The board whose hard IP the config space presents (`--board`: kcu105, kc705, ...,
    /// generic) and that IP (pcie3_ultrascale, pcie_7x, generic).
    pub board: String,
    pub hard_ip: String,
    /// Client id the sim gave this connection (appears in stats and logs).
    pub client_id: u64,
}

/// How the sim treats the wall time a client spends between its messages (its own work, the
/// socket, the OS waking its thread up).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum HostTime {
    /// It costs no card time: card time runs only while some client waits on the sim, so a
    /// run is deterministic for a given seed and request sequence.
    #[default]
    Virtual,
    /// It is charged as card time: before a client's request is processed, the card is
    /// advanced to the card cycle of the client's last mark (its last reply or message)
    /// plus the wall time since that mark (capped per gap), unless it is already past it.
    /// Host figures are then real host time; runs are not deterministic.
    Real,
}

impl HostTime {
    /// `virtual` or `real`, as the `--host-time` flag spells it.
    pub fn name(self) -> &'static str {
        match self {
            HostTime::Virtual => "virtual",
            HostTime::Real => "real",
        }
    }
}

impl std::fmt::Display for HostTime {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for HostTime {
    type Err = String;
    fn from_str(s: &str) -> Result<HostTime, String> {
        match s {
            "virtual" => Ok(HostTime::Virtual),
            "real" => Ok(HostTime::Real),
            _ => Err(format!("host time must be `virtual` (deterministic) or `real` (wall time between a client's messages becomes card time), not {s:?}")),
        }
    }
}

/// What `--host-time real` charged (all zero in `virtual` mode).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct HostTimeStats {
    /// Gaps measured: requests of clients with a mark (every request after Hello).
    pub gaps: u64,
    /// Gaps longer than the cap, charged as the cap: a figure that includes one of these
    /// under-states the host's time.
    pub capped_gaps: u64,
    /// Sum of the gaps in card cycles, after capping.
    pub gap_cycles: u64,
    /// Card cycles the sim ran for gaps (less than `gap_cycles` when gaps of several
    /// clients overlapped, or time already ran for another client).
    pub charged_cycles: u64,
    /// Longest gap measured, ns of wall time, before capping.
    pub longest_gap_ns: u64,
}

/// A DMA allocation: bytes `file_offset..file_offset+len` of the host-memory file, which the
/// card sees at `bus_addr` (its IOVA) while the allocation lives. Every allocation gets a
/// fresh IOVA, not one a freed allocation had lately, even when it gets the freed file bytes:
/// the card's accesses to a freed IOVA fault instead of reaching the new owner.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct DmaAllocation {
    pub id: u64,
    pub file_offset: u64,
    pub bus_addr: u64,
    pub len: u64,
}

/// TLP counters of one link direction.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DirectionStats {
    pub tlps: u64,
    /// Bytes on the wire (framing, header, payload; DLLPs not included).
    pub wire_bytes: u64,
    pub payload_bytes: u64,
    /// TLPs per type name ("MRd32", "MWr32", "CplD", "Msg", ...).
    pub by_type: BTreeMap<String, u64>,
}

/// Counters of one client (current or gone).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClientStats {
    pub id: u64,
    pub name: String,
    pub connected: bool,
    pub requests: u64,
    pub mmio_reads: u64,
    pub mmio_writes: u64,
    pub errors: u64,
    pub irqs_delivered: u64,
    pub irqs_dropped: u64,
    pub dma_allocations: u64,
    pub injected_tlps: u64,
    /// `--host-time real`: this client's gaps, capped ones, and their card cycles after capping.
    pub host_gaps: u64,
    pub host_gaps_capped: u64,
    pub host_gap_cycles: u64,
    /// The client holds a claim on live time (`SetLive`); false once it is gone.
    pub live: bool,
}

/// Fault injection of the root complex for the card's reads of host memory. Every field is
/// a period N: every Nth memory read of the card (MRd32 or MRd64, counted from the
/// `SetDmaFaults` that set it, first read = 1) gets that fault; 0 turns it off. At most one
/// fault per read: when periods coincide, the first of UR, CA, poison, drop in this order
/// wins. Deterministic: the same reads get the same faults on every run.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DmaFaults {
    /// Complete the read with one Cpl, status Unsupported Request.
    pub ur_every: u64,
    /// Complete the read with one Cpl, status Completer Abort.
    pub ca_every: u64,
    /// Complete the read normally, but with EP = 1 (poisoned) on every CplD; data still sent.
    pub poison_every: u64,
    /// Send no completion at all: the card's completion timeout must fire.
    pub drop_every: u64,
}

impl DmaFaults {
    /// True when no fault is configured.
    pub fn is_off(&self) -> bool {
        *self == DmaFaults::default()
    }

    /// The fault for the card's memory read number `n` (1-based) since they were set.
    pub fn fault_for_read(&self, n: u64) -> Option<DmaFault> {
        let hit = |every: u64| every != 0 && n.is_multiple_of(every);
        if hit(self.ur_every) {
            Some(DmaFault::UnsupportedRequest)
        } else if hit(self.ca_every) {
            Some(DmaFault::CompleterAbort)
        } else if hit(self.poison_every) {
            Some(DmaFault::Poisoned)
        } else if hit(self.drop_every) {
            Some(DmaFault::Dropped)
        } else {
            None
        }
    }
}

/// One injected fault (see [`DmaFaults`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum DmaFault {
    UnsupportedRequest,
    CompleterAbort,
    Poisoned,
    Dropped,
}

/// Memory requests of one kind, counted TLP by TLP.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RequestCounts {
    pub tlps: u64,
    /// Bytes the request moves, as its byte enables select them: for a read the bytes
    /// requested (the Byte Count of its first completion), for a write the bytes written.
    pub bytes: u64,
    /// Length field × 4: the whole DWs the read asks for or the write carries.
    pub dw_bytes: u64,
    /// TLPs with a 3 DW header (32-bit address) and with a 4 DW header (64-bit address).
    pub header_3dw: u64,
    pub header_4dw: u64,
    /// TLPs with Attr[1] (relaxed ordering) and Attr[0] (no snoop) set.
    pub relaxed_ordering: u64,
    pub no_snoop: u64,
    /// TLPs with EP (poisoned) set.
    pub poisoned: u64,
}

/// Completions, counted TLP by TLP.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CompletionCounts {
    /// Completions without data (Cpl), any status.
    pub cpl: u64,
    /// Completions with data (CplD).
    pub cpld: u64,
    /// Length × 4 of the CplDs: the whole DWs they carry.
    pub payload_bytes: u64,
    /// Bytes of the CplDs that belong to the request: from the first byte Lower Address
    /// points at, up to Byte Count (so a 2-byte read's 1-DW CplD counts 2).
    pub data_bytes: u64,
    /// Completions by status: Unsupported Request, Completer Abort, other non-SC.
    pub ur: u64,
    pub ca: u64,
    pub other_status: u64,
    /// CplDs with EP (poisoned) set.
    pub poisoned: u64,
}

/// Faults the root complex injected ([`DmaFaults`]), per kind.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct InjectedFaultCounts {
    pub ur: u64,
    pub ca: u64,
    pub poisoned: u64,
    pub dropped: u64,
}

/// Exact TLP counters of the link by kind, for comparing with what the card counted.
///
/// Card → host TLPs are counted when the root complex has received them (their last byte
/// arrived); host → card TLPs when the card took their last beat. So once traffic has
/// drained, both ends of the link agree. Take a snapshot before and after and subtract with
/// [`TrafficStats::since`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TrafficStats {
    /// Card → host memory reads (MRd32 + MRd64, any tag).
    pub card_reads: RequestCounts,
    /// Card → host memory writes (MWr32 + MWr64); MSIs are not in here.
    pub card_writes: RequestCounts,
    /// Card → host completions (of MMIO reads and injected requests).
    pub card_completions: CompletionCounts,
    /// Card → host messages (Msg, MsgD).
    pub card_messages: u64,
    /// Card → host MSI memory writes (the hard IP's, one DW each).
    pub card_msis: u64,
    /// Other card → host requests (I/O, configuration, MRdLk, atomics, unknown types).
    pub card_other: u64,
    /// Host → card completions of the card's requests (CplD with host memory, Cpl with UR/CA).
    pub host_completions: CompletionCounts,
    /// Host → card MMIO reads and writes (CPU loads and stores, block ones included).
    pub mmio_reads: RequestCounts,
    pub mmio_writes: RequestCounts,
    /// Host → card TLPs injected by clients (InjectTlp), any kind.
    pub injected_tlps: u64,
    /// Faults injected into the card's reads.
    pub faults: InjectedFaultCounts,
}

/// `a - b` for every counter (saturating, so an older snapshot never panics).
trait Since {
    fn since(&self, earlier: &Self) -> Self;
}

macro_rules! impl_since {
    ($t:ty { $($f:ident),* $(,)? }) => {
        impl Since for $t {
            fn since(&self, earlier: &Self) -> Self {
                Self { $($f: self.$f.since(&earlier.$f)),* }
            }
        }
    };
}

impl Since for u64 {
    fn since(&self, earlier: &Self) -> Self {
        self.saturating_sub(*earlier)
    }
}

impl_since!(RequestCounts { tlps, bytes, dw_bytes, header_3dw, header_4dw, relaxed_ordering, no_snoop, poisoned });
impl_since!(CompletionCounts { cpl, cpld, payload_bytes, data_bytes, ur, ca, other_status, poisoned });
impl_since!(InjectedFaultCounts { ur, ca, poisoned, dropped });
impl_since!(TrafficStats {
    card_reads,
    card_writes,
    card_completions,
    card_messages,
    card_msis,
    card_other,
    host_completions,
    mmio_reads,
    mmio_writes,
    injected_tlps,
    faults,
});

impl TrafficStats {
    /// The traffic between an `earlier` snapshot and this one.
    pub fn since(&self, earlier: &TrafficStats) -> TrafficStats {
        Since::since(self, earlier)
    }
}

impl RequestCounts {
    /// Adds one memory request TLP (header + payload DWs) to the counts. `bytes` is what its
    /// byte enables select.
    pub fn add(&mut self, dw0: u32, bytes: u64) {
        self.tlps += 1;
        self.bytes += bytes;
        self.dw_bytes += 4 * u64::from(tlp::length_dw(dw0));
        if tlp::header_dw(dw0) == 4 {
            self.header_4dw += 1;
        } else {
            self.header_3dw += 1;
        }
        self.relaxed_ordering += u64::from(tlp::relaxed_ordering(dw0));
        self.no_snoop += u64::from(tlp::no_snoop(dw0));
        self.poisoned += u64::from(tlp::poisoned(dw0));
    }
}

impl CompletionCounts {
    /// Adds one completion TLP (header + payload DWs, at least the 3 header DWs).
    pub fn add(&mut self, t: &[u32]) {
        let dw0 = t[0];
        let payload = tlp::payload_dw(dw0) as u64;
        if payload == 0 {
            self.cpl += 1;
        } else {
            self.cpld += 1;
            self.payload_bytes += 4 * payload;
            let skip = u64::from(tlp::cpl_lower_address(t[2]) & 3);
            self.data_bytes += u64::from(tlp::cpl_byte_count(t[1])).min((4 * payload).saturating_sub(skip));
            self.poisoned += u64::from(tlp::poisoned(dw0));
        }
        match tlp::cpl_status(t[1]) {
            tlp::CPL_SC => {}
            tlp::CPL_UR => self.ur += 1,
            tlp::CPL_CA => self.ca += 1,
            _ => self.other_status += 1,
        }
    }
}

/// Counters of the sim since it started.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct SimStats {
    /// Card cycles since tlpx_card_new (reset included).
    pub cycles: u64,
    /// Wall time spent running cycles, seconds.
    pub wall_seconds_in_cycle_loop: f64,
    /// cycles run / wall_seconds_in_cycle_loop.
    pub cycles_per_second: f64,
    pub host_to_card: DirectionStats,
    pub card_to_host: DirectionStats,
    /// Card reads of bus addresses that are in no live allocation (or with bus mastering
    /// off), answered with UR: IOMMU faults.
    pub dma_read_faults: u64,
    /// Card writes to bus addresses that are in no live allocation (or with bus mastering
    /// off), dropped: IOMMU faults.
    pub dma_write_faults: u64,
    /// Of `dma_read_faults`: reads that touched an IOVA a client had and freed (FreeDma, or
    /// the client disconnected), e.g. a card block still reading a dead process's buffer.
    pub dma_read_faults_freed: u64,
    /// Of `dma_write_faults`: writes that touched an IOVA a client had and freed.
    pub dma_write_faults_freed: u64,
    /// Poisoned (EP) card writes, dropped.
    pub dma_poisoned_writes: u64,
    /// Other card requests the root complex does not serve (IO, Cfg, Msg, atomics ...).
    pub unsupported_card_requests: u64,
    /// Completions from the card that matched no outstanding request.
    pub unexpected_completions: u64,
    /// MMIO reads / injected requests whose completion did not come in time.
    pub completion_timeouts: u64,
    /// Completions from the card with a status other than SC.
    pub error_completions: u64,
    /// TLPs from the card whose beats did not match their Length field (dropped).
    pub malformed_card_tlps: u64,
    /// MmioWrites the sim refused (bad BAR/offset/width, memory space disabled); posted,
    /// so the client got no error reply: the log says why.
    pub rejected_mmio_writes: u64,
    pub msis: u64,
    /// MSIs the card raised while MSI was disabled in config space (not delivered).
    pub msis_while_disabled: u64,
    /// MSI-X messages: the card's writes into the interrupt window while MSI-X was on (each
    /// delivered as its vector; counted in `msis` too).
    pub msix_messages: u64,
    /// Bytes the card read from (sent in CplDs, poisoned ones included) / wrote to host memory.
    pub dma_read_bytes: u64,
    pub dma_write_bytes: u64,
    /// Exact TLP counters by kind (snapshot and diff with `TrafficStats::since`).
    pub traffic: TrafficStats,
    /// The fault injection in force now (`SetDmaFaults`, `--fault-*-every`).
    pub dma_faults: DmaFaults,
    /// Host time charged as card time (`--host-time real`).
    pub host_time: HostTimeStats,
    /// Connected clients holding a claim on live time (`SetLive`): time runs live while this
    /// is not 0.
    pub live_clients: u32,
    /// Card cycles run in live time since the sim started (while `live_clients` was not 0).
    /// A measurement that reads it before and after ran (partly) in live time when it grew.
    pub live_cycles: u64,
    /// Wall time the sim waited in live time because card time had caught up with wall time
    /// (the pacing: card time never runs ahead of wall time), seconds.
    pub live_paced_seconds: f64,
    pub clients: Vec<ClientStats>,
}

// Framing -----------------------------------------------------------------------------------------

#[derive(Debug, thiserror::Error)]
pub enum FrameError {
    #[error("connection closed")]
    Closed,
    #[error("i/o error: {0}")]
    Io(#[from] std::io::Error),
    #[error("frame of {0} bytes is larger than the limit of {MAX_FRAME_BYTES} bytes")]
    TooLarge(u32),
    #[error("malformed frame: {0}")]
    Malformed(String),
}

/// Encodes `msg` as one frame into `buf` (cleared first), ready for one write_all.
pub fn encode_frame<T: Serialize>(msg: &T, buf: &mut Vec<u8>) -> Result<(), FrameError> {
    buf.clear();
    buf.extend_from_slice(&[0; 4]);
    options().serialize_into(&mut *buf, msg).map_err(|e| FrameError::Malformed(e.to_string()))?;
    let len = buf.len() - 4;
    if len > MAX_FRAME_BYTES as usize {
        return Err(FrameError::TooLarge(len as u32));
    }
    buf[..4].copy_from_slice(&(len as u32).to_le_bytes());
    Ok(())
}

/// Writes `msg` as one frame.
pub fn write_frame<W: Write, T: Serialize>(w: &mut W, msg: &T) -> Result<(), FrameError> {
    let mut buf = Vec::new();
    encode_frame(msg, &mut buf)?;
    w.write_all(&buf)?;
    Ok(())
}

/// Reads one frame. `Closed` when the peer closed the connection between frames.
pub fn read_frame<R: Read, T: DeserializeOwned>(r: &mut R) -> Result<T, FrameError> {
    let mut len = [0u8; 4];
    match r.read_exact(&mut len) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Err(FrameError::Closed),
        Err(e) => return Err(FrameError::Io(e)),
    }
    let len = u32::from_le_bytes(len);
    if len > MAX_FRAME_BYTES {
        return Err(FrameError::TooLarge(len));
    }
    let mut body = vec![0u8; len as usize];
    r.read_exact(&mut body)?;
    decode(&body)
}

/// Decodes a frame body; trailing bytes are an error.
pub fn decode<T: DeserializeOwned>(body: &[u8]) -> Result<T, FrameError> {
    options().deserialize(body).map_err(|e| FrameError::Malformed(e.to_string()))
}

/// bincode 1.3 options of the protocol: little endian, fixed-width integers, bounded sizes.
fn options() -> impl bincode::Options {
    bincode::DefaultOptions::new().with_fixint_encoding().with_limit(u64::from(MAX_FRAME_BYTES)).reject_trailing_bytes()
}

// Shared checks and paths -------------------------------------------------------------------------

/// The size of BAR `bar`, or an error naming the BARs the card has.
fn bar_size(bar: u8, bar_sizes: &[Option<u64>]) -> Result<u64, String> {
    match bar_sizes.get(bar as usize).copied().flatten() {
        Some(size) => Ok(size),
        None => {
            let implemented: Vec<String> = bar_sizes.iter().enumerate().filter_map(|(i, s)| s.map(|_| format!("BAR{i}"))).collect();
            Err(format!("BAR{bar} is not implemented by the card; it has {}", implemented.join(", ")))
        }
    }
}

/// Checks a BAR access before anything reaches the card. `bar_sizes` as in HelloInfo.
pub fn check_mmio(bar: u8, offset: u64, width: u8, bar_sizes: &[Option<u64>]) -> Result<(), String> {
    let size = bar_size(bar, bar_sizes)?;
    if !matches!(width, 1 | 2 | 4 | 8) {
        return Err(format!("access width must be 1, 2, 4 or 8 bytes, not {width}"));
    }
    if !offset.is_multiple_of(u64::from(width)) {
        return Err(format!("offset {offset:#x} is not aligned to the access width of {width} bytes: accesses must be naturally aligned"));
    }
    if offset.checked_add(u64::from(width)).is_none_or(|end| end > size) {
        return Err(format!("offset {offset:#x} + {width} bytes is outside BAR{bar} of {size:#x} bytes"));
    }
    Ok(())
}

/// Checks a block BAR access (`MmioReadBlock`, `MmioWriteBlock`): 1..=64 bytes at any byte
/// offset, not crossing a 4 KiB boundary, inside the BAR.
pub fn check_mmio_block(bar: u8, offset: u64, len: usize, bar_sizes: &[Option<u64>]) -> Result<(), String> {
    let size = bar_size(bar, bar_sizes)?;
    if !(1..=MAX_BLOCK_BYTES).contains(&len) {
        return Err(format!("a block access moves 1..={MAX_BLOCK_BYTES} bytes, not {len}"));
    }
    let Some(end) = offset.checked_add(len as u64) else {
        return Err(format!("offset {offset:#x} + {len} bytes is outside BAR{bar} of {size:#x} bytes"));
    };
    if offset / 4096 != (end - 1) / 4096 {
        return Err(format!("a block access of {len} bytes at 0x{offset:x} would cross a 4 KiB boundary"));
    }
    if end > size {
        return Err(format!("offset {offset:#x} + {len} bytes is outside BAR{bar} of {size:#x} bytes"));
    }
    Ok(())
}

/// The socket path tlpx-sim uses when none is given: `$XDG_RUNTIME_DIR/tlpx/sim.sock`, or
/// `/tmp/tlpx-<uid>/sim.sock` when XDG_RUNTIME_DIR is unset or empty.
pub fn default_socket_path() -> PathBuf {
    match std::env::var_os("XDG_RUNTIME_DIR") {
        Some(dir) if !dir.is_empty() => PathBuf::from(dir).join("tlpx").join("sim.sock"),
        _ => {
            // SAFETY: getuid has no preconditions and cannot fail.
            let uid = unsafe { libc::getuid() };
            PathBuf::from(format!("/tmp/tlpx-{uid}")).join("sim.sock")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_round_trip() {
        let reqs = vec![
            Request::Hello { protocol_version: PROTOCOL_VERSION, client_name: "t".into() },
            Request::MmioWrite { bar: 0, offset: 0x20, width: 4, value: 0xdead_beef },
            Request::InjectTlp { dwords: vec![1, 2, 3], wait_cycles: 10 },
            Request::Shutdown,
            Request::MmioReadBlock { bar: 0, offset: 0x10001, len: 64 },
            Request::MmioWriteBlock { bar: 0, offset: 0x10000, data: vec![7; 64] },
            Request::SetDmaFaults(DmaFaults { ur_every: 1, ca_every: 2, poison_every: 3, drop_every: 4 }),
            Request::SetLive { live: true },
        ];
        let mut wire = Vec::new();
        for r in &reqs {
            write_frame(&mut wire, r).unwrap();
        }
        let mut cursor = std::io::Cursor::new(wire);
        for r in &reqs {
            let got: Request = read_frame(&mut cursor).unwrap();
            assert_eq!(&got, r);
        }
        assert!(matches!(read_frame::<_, Request>(&mut cursor), Err(FrameError::Closed)));
    }

    #[test]
    fn malformed_frames_are_errors_not_panics() {
        // Huge length prefix.
        let mut c = std::io::Cursor::new(vec![0xff, 0xff, 0xff, 0x7f]);
        assert!(matches!(read_frame::<_, Request>(&mut c), Err(FrameError::TooLarge(_))));
        // Unknown enum variant.
        let mut c = std::io::Cursor::new(vec![4, 0, 0, 0, 99, 0, 0, 0]);
        assert!(matches!(read_frame::<_, Request>(&mut c), Err(FrameError::Malformed(_))));
        // Vec length claiming more than the frame holds.
        let mut body = vec![];
        body.extend_from_slice(&9u32.to_le_bytes()); // InjectTlp
        body.extend_from_slice(&u64::MAX.to_le_bytes());
        let mut frame = (body.len() as u32).to_le_bytes().to_vec();
        frame.extend_from_slice(&body);
        let mut c = std::io::Cursor::new(frame);
        assert!(matches!(read_frame::<_, Request>(&mut c), Err(FrameError::Malformed(_))));
        // Trailing bytes.
        let mut wire = Vec::new();
        write_frame(&mut wire, &Request::Stats).unwrap();
        wire[0] += 1;
        wire.push(0);
        let mut c = std::io::Cursor::new(wire);
        assert!(matches!(read_frame::<_, Request>(&mut c), Err(FrameError::Malformed(_))));
        // Truncated body.
        let mut c = std::io::Cursor::new(vec![8, 0, 0, 0, 1]);
        assert!(read_frame::<_, Request>(&mut c).is_err());
    }

    #[test]
    fn mmio_checks_name_the_bad_value() {
        let bars = [Some(BAR0_SIZE), None, None, None, None, None];
        assert!(check_mmio(0, 0, 4, &bars).is_ok());
        assert!(check_mmio(0, BAR0_SIZE - 8, 8, &bars).is_ok());
        let e = check_mmio(0, 2, 4, &bars).unwrap_err();
        assert!(e.contains("0x2") && e.contains("aligned"), "{e}");
        let e = check_mmio(0, BAR0_SIZE, 4, &bars).unwrap_err();
        assert!(e.contains("outside BAR0"), "{e}");
        let e = check_mmio(1, 0, 4, &bars).unwrap_err();
        assert!(e.contains("BAR1") && e.contains("BAR0"), "{e}");
        let e = check_mmio(0, 0, 3, &bars).unwrap_err();
        assert!(e.contains("not 3"), "{e}");
    }

    #[test]
    fn block_checks_name_the_bad_value() {
        let bars = [Some(BAR0_SIZE), None, None, None, None, None];
        assert!(check_mmio_block(0, 0x10001, 64, &bars).is_ok(), "any byte offset");
        assert!(check_mmio_block(0, BAR0_SIZE - 64, 64, &bars).is_ok());
        assert!(check_mmio_block(0, 0xFC0, 64, &bars).is_ok(), "ends at the 4 KiB boundary");
        let e = check_mmio_block(0, 0, 0, &bars).unwrap_err();
        assert!(e.contains("1..=64 bytes, not 0"), "{e}");
        let e = check_mmio_block(0, 0, 65, &bars).unwrap_err();
        assert!(e.contains("not 65"), "{e}");
        let e = check_mmio_block(0, 0xFC1, 64, &bars).unwrap_err();
        assert!(e.contains("4 KiB") && e.contains("0xfc1"), "{e}");
        let e = check_mmio_block(0, BAR0_SIZE, 1, &bars).unwrap_err();
        assert!(e.contains("outside BAR0"), "{e}");
        let e = check_mmio_block(0, u64::MAX, 2, &bars).unwrap_err();
        assert!(e.contains("outside BAR0"), "{e}");
        let e = check_mmio_block(3, 0, 4, &bars).unwrap_err();
        assert!(e.contains("BAR3"), "{e}");
    }

    #[test]
    fn faults_pick_one_per_read_in_priority_order() {
        let f = DmaFaults { ur_every: 2, ca_every: 3, poison_every: 5, drop_every: 7 };
        let got: Vec<Option<DmaFault>> = (1..=7).map(|n| f.fault_for_read(n)).collect();
        use DmaFault::*;
        assert_eq!(
            got,
            vec![
                None,
                Some(UnsupportedRequest),
                Some(CompleterAbort),
                Some(UnsupportedRequest),
                Some(Poisoned),
                Some(UnsupportedRequest),
                Some(Dropped)
            ]
        );
        assert!(DmaFaults::default().is_off());
        assert_eq!(DmaFaults::default().fault_for_read(1), None);
    }

    #[test]
    fn traffic_counts_requests_and_completions_and_diffs() {
        let mut t = TrafficStats::default();
        // A 4DW MRd of 16 DWs with RO and NS, asking for 62 bytes (First BE 1100, Last BE 1111).
        let rd = tlp::mem_read(0x0100, 130, 0x1_0000_0002, 16, 0b1100, 0xF, false);
        let rd0 = tlp::with_attributes(rd[0], true, true);
        t.card_reads.add(rd0, 62);
        assert_eq!(
            t.card_reads,
            RequestCounts { tlps: 1, bytes: 62, dw_bytes: 64, header_4dw: 1, relaxed_ordering: 1, no_snoop: 1, ..Default::default() }
        );
        let earlier = t;
        // A CplD of 2 DWs answering a 2-byte read at offset 1 (Lower Address 1, Byte Count 2).
        let (d1, d2) = tlp::cpl_dw12(0, tlp::CPL_SC, 2, 0x0100, 5, 1);
        t.host_completions.add(&[tlp::dw0(tlp::FMT_3DW_DATA, tlp::TYPE_CPL, 1, true), d1, d2, 0]);
        let (d1, d2) = tlp::cpl_dw12(0, tlp::CPL_UR, 4, 0x0100, 6, 0);
        t.host_completions.add(&[tlp::dw0(tlp::FMT_3DW_NO_DATA, tlp::TYPE_CPL, 0, false), d1, d2]);
        let c = t.host_completions;
        assert_eq!((c.cpld, c.cpl, c.payload_bytes, c.data_bytes, c.poisoned, c.ur), (1, 1, 4, 2, 1, 1));
        let d = t.since(&earlier);
        assert_eq!(d.card_reads, RequestCounts::default());
        assert_eq!(d.host_completions, t.host_completions);
        // An older snapshot minus a newer one saturates at zero instead of panicking.
        assert_eq!(earlier.since(&t).host_completions.cpld, 0);
    }

    #[test]
    fn host_time_parses_and_names() {
        assert_eq!("real".parse::<HostTime>().unwrap(), HostTime::Real);
        assert_eq!("virtual".parse::<HostTime>().unwrap(), HostTime::Virtual);
        assert_eq!(HostTime::default(), HostTime::Virtual);
        let e = "wall".parse::<HostTime>().unwrap_err();
        assert!(e.contains("\"wall\"") && e.contains("virtual") && e.contains("real"), "{e}");
        assert_eq!(HostTime::Real.to_string(), "real");
    }

    #[test]
    fn default_socket_path_ends_in_sim_sock() {
        assert!(default_socket_path().ends_with("tlpx/sim.sock") || default_socket_path().to_string_lossy().contains("/tmp/tlpx-"));
    }
}
