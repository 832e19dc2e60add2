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

pub mod tlp;

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::path::PathBuf;

use bincode::Options;
use serde::{de::DeserializeOwned, Deserialize, Serialize};
pub use tlpx_model::link::LinkConfig;

/// Bumped whenever a message changes shape or meaning.
pub const PROTOCOL_VERSION: u32 = 1;

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
    HelloRefused { sim_protocol_version: u32, message: String },
    ConfigData { data: Vec<u8> },
    ConfigWritten,
    /// The value of an `MmioRead`, zero-extended, and the card cycle its completion arrived.
    MmioValue { value: u64, card_cycle: u64 },
    DmaAllocated(DmaAllocation),
    DmaFreed,
    Irq { vector: u32, card_cycle: u64 },
    IrqTimedOut { card_cycle: u64 },
    Advanced { now: u64 },
    /// The completion of an injected non-posted TLP (header + payload DWs; the tag is the
    /// one the client sent).
    InjectCompletion { dwords: Vec<u32>, card_cycle: u64 },
    /// An injected posted TLP (or completion) was accepted by the card.
    InjectDelivered { card_cycle: u64 },
    /// Nothing came back within `wait_cycles` (or a posted TLP was not accepted in time).
    InjectTimedOut { card_cycle: u64 },
    Stats(Box<SimStats>),
    ShuttingDown,
    Error { kind: ErrorKind, message: String },
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
    /// Bus address of byte 0 of the host-memory file.
    pub host_memory_bus_base: u64,
    pub seed: u64,
    /// Root complex read completion latency and jitter (ns of card time).
    pub dma_latency_ns: u64,
    pub dma_jitter_ns: u64,
    pub completion_timeout_cycles: u64,
    /// True when in-flight traffic also advances time with no client waiting (--free-run).
    pub free_run: bool,
    /// Client id the sim gave this connection (appears in stats and logs).
    pub client_id: u64,
}

/// A DMA allocation: bytes `file_offset..file_offset+len` of the host-memory file, which the
/// card sees at `bus_addr`.
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
    /// Card reads of host memory that no client allocated, answered with UR.
    pub dma_read_faults: u64,
    /// Card writes to host memory that no client allocated, dropped.
    pub dma_write_faults: u64,
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
    /// Bytes the card read from / wrote to host memory.
    pub dma_read_bytes: u64,
    pub dma_write_bytes: u64,
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
    bincode::DefaultOptions::new()
        .with_fixint_encoding()
        .with_limit(u64::from(MAX_FRAME_BYTES))
        .reject_trailing_bytes()
}

// Shared checks and paths -------------------------------------------------------------------------

/// Checks a BAR access before anything reaches the card. `bar_sizes` as in HelloInfo.
pub fn check_mmio(bar: u8, offset: u64, width: u8, bar_sizes: &[Option<u64>]) -> Result<(), String> {
    let size = match bar_sizes.get(bar as usize).copied().flatten() {
        Some(size) => size,
        None => {
            let implemented: Vec<String> = bar_sizes
                .iter()
                .enumerate()
                .filter_map(|(i, s)| s.map(|_| format!("BAR{i}")))
                .collect();
            return Err(format!("BAR{bar} is not implemented by the card; it has {}", implemented.join(", ")));
        }
    };
    if !matches!(width, 1 | 2 | 4 | 8) {
        return Err(format!("access width must be 1, 2, 4 or 8 bytes, not {width}"));
    }
    if !offset.is_multiple_of(u64::from(width)) {
        return Err(format!(
            "offset {offset:#x} is not aligned to the access width of {width} bytes: accesses must be naturally aligned"
        ));
    }
    if offset.checked_add(u64::from(width)).is_none_or(|end| end > size) {
        return Err(format!("offset {offset:#x} + {width} bytes is outside BAR{bar} of {size:#x} bytes"));
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
    fn default_socket_path_ends_in_sim_sock() {
        assert!(default_socket_path().ends_with("tlpx/sim.sock") || default_socket_path().to_string_lossy().contains("/tmp/tlpx-"));
    }
}
