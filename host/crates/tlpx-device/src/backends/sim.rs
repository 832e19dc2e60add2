//! The simulated card: a `tlpx-sim` process reached through its Unix socket, with host
//! memory shared through a file both sides map (docs/sim-protocol.md).
//!
//! Every call is one request and (except `bar_write`, which is posted) one reply; the card's
//! time advances only while some client waits on the sim (or continuously while a client
//! holds live time, `set_live`), so `idle` is how a polling loop lets card time pass, and
//! `wait_interrupt`'s timeout is card time.

use std::fs::OpenOptions;
use std::io::{BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use memmap2::MmapMut;
use tlpx_sim_protocol::{
    check_mmio, check_mmio_block, encode_frame, read_frame, ErrorKind, FrameError, HelloInfo, Reply, Request, SimStats, PROTOCOL_VERSION,
};

use crate::host_memory::{DmaPlacement, PageSize};
use crate::{BarPath, ClockSource, Device, DeviceDescription, DeviceError, DmaBuffer, Interrupt, TimeMark, TlpInjector, Width};

pub use tlpx_sim_protocol::HelloInfo as SimInfo;
pub use tlpx_sim_protocol::{DmaFaults, HostTime, HostTimeStats, TrafficStats};

/// The simulator's answer to [`SimDevice::request_live`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LiveState {
    /// Clients holding a claim on live time now (time runs live while this is not 0).
    pub live_clients: u32,
    /// The card cycle when the request took effect.
    pub card_cycle: u64,
}

/// The host-memory mapping, kept alive by every DmaBuffer that points into it.
struct HostMemoryMap(#[allow(dead_code)] MmapMut);

/// A connection to a running `tlpx-sim`.
pub struct SimDevice {
    path: PathBuf,
    writer: UnixStream,
    reader: BufReader<UnixStream>,
    hello: HelloInfo,
    memory: Arc<HostMemoryMap>,
    /// Address of byte 0 of the host-memory mapping (a pointer kept as an integer so the
    /// device stays Send; the mapping lives in `memory`).
    memory_base: usize,
    frame: Vec<u8>,
    /// Where later buffers' pages go (`set_dma_placement`): a NUMA node only; the simulated
    /// card reaches host memory without an IOMMU, so there is no IOVA page size to choose.
    numa_node: Option<u32>,
}

impl std::fmt::Debug for SimDevice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SimDevice").field("path", &self.path).field("client_id", &self.hello.client_id).finish()
    }
}

impl SimDevice {
    /// Where `tlpx-sim` listens by default: `$XDG_RUNTIME_DIR/tlpx/sim.sock`, or
    /// `/tmp/tlpx-<uid>/sim.sock` without XDG_RUNTIME_DIR.
    pub fn default_socket_path() -> PathBuf {
        tlpx_sim_protocol::default_socket_path()
    }

    /// Connects to the sim at `path`, says Hello and maps its host memory.
    pub fn connect(path: impl AsRef<Path>) -> Result<SimDevice, DeviceError> {
        let name = std::env::current_exe()
            .ok()
            .and_then(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()))
            .unwrap_or_else(|| "client".into());
        Self::connect_as(path, &format!("{name}[{}]", std::process::id()))
    }

    /// As `connect`, with the name the sim shows for this client in logs and stats.
    pub fn connect_as(path: impl AsRef<Path>, client_name: &str) -> Result<SimDevice, DeviceError> {
        let path = path.as_ref().to_owned();
        let writer = UnixStream::connect(&path)
            .map_err(|e| DeviceError::SimNotRunning { path: path.display().to_string(), reason: e.to_string() })?;
        let reader = writer.try_clone().map_err(|e| DeviceError::Io { context: "cannot clone the sim socket".into(), source: e })?;
        let mut reader = BufReader::new(reader);
        let mut frame = Vec::new();
        let hello = Request::Hello { protocol_version: PROTOCOL_VERSION, client_name: client_name.to_string() };
        let disconnected = |reason: String| DeviceError::SimDisconnected { path: path.display().to_string(), reason };
        encode_frame(&hello, &mut frame).map_err(|e| DeviceError::Backend(e.to_string()))?;
        (&writer).write_all(&frame).map_err(|e| disconnected(e.to_string()))?;
        let info = match read_frame::<_, Reply>(&mut reader) {
            Ok(Reply::HelloOk(info)) => *info,
            Ok(Reply::HelloRefused { sim_protocol_version, .. }) => {
                return Err(DeviceError::ProtocolMismatch { expected: PROTOCOL_VERSION, found: sim_protocol_version })
            }
            Ok(Reply::Error { message, .. }) => return Err(DeviceError::Backend(format!("the sim refused Hello: {message}"))),
            Ok(other) => return Err(DeviceError::Backend(format!("the sim answered Hello with {other:?}"))),
            Err(FrameError::Malformed(m)) => {
                return Err(DeviceError::Backend(format!(
                    "cannot decode the sim's answer to Hello ({m}): tlpx-sim is probably of another version than this tool"
                )))
            }
            Err(e) => return Err(disconnected(e.to_string())),
        };
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .open(&info.host_memory_path)
            .map_err(|e| DeviceError::Io { context: format!("cannot open the sim's host memory {}", info.host_memory_path), source: e })?;
        // SAFETY: the file is shared DMA memory by design; DmaBuffer accesses it only through
        // volatile reads and writes.
        let mut map = unsafe { MmapMut::map_mut(&file) }
            .map_err(|e| DeviceError::Io { context: format!("cannot map the sim's host memory {}", info.host_memory_path), source: e })?;
        if (map.len() as u64) < info.host_memory_size {
            return Err(DeviceError::Backend(format!(
                "the sim's host memory {} holds {} bytes, the sim announced {}",
                info.host_memory_path,
                map.len(),
                info.host_memory_size
            )));
        }
        let memory_base = map.as_mut_ptr() as usize;
        Ok(SimDevice { path, writer, reader, hello: info, memory: Arc::new(HostMemoryMap(map)), memory_base, frame, numa_node: None })
    }

    /// What the sim told this client at Hello: card, link, clock, files.
    pub fn hello(&self) -> &HelloInfo {
        &self.hello
    }

    /// How the sim charges this client's own time (`--host-time`): `Virtual` (it costs no
    /// card time; deterministic) or `Real` (its wall time between messages becomes card
    /// time, so host latencies such as an interrupt's user-thread wake-up are real host time
    /// in the card's figures; not deterministic). docs/sim-protocol.md, "Host time".
    pub fn host_time(&self) -> HostTime {
        self.hello.host_time
    }

    /// The sim's counters.
    pub fn stats(&mut self) -> Result<SimStats, DeviceError> {
        match self.call(&Request::Stats)? {
            Reply::Stats(s) => Ok(*s),
            other => Err(self.unexpected("Stats", other)),
        }
    }

    /// The exact TLP counters of the link (`stats().traffic`): snapshot before and after,
    /// then `after.since(&before)`.
    pub fn traffic(&mut self) -> Result<TrafficStats, DeviceError> {
        self.stats().map(|s| s.traffic)
    }

    /// Sets the root complex's fault injection for the card's memory reads: every Nth read
    /// (counted from now, the first is 1) gets a Cpl with UR, a Cpl with CA, poisoned CplDs,
    /// or no completion at all; `DmaFaults::default()` turns it off. Deterministic; counted
    /// in `stats().traffic.faults`.
    pub fn set_dma_faults(&mut self, faults: DmaFaults) -> Result<(), DeviceError> {
        match self.call(&Request::SetDmaFaults(faults))? {
            Reply::DmaFaultsSet => Ok(()),
            other => Err(self.unexpected("SetDmaFaults", other)),
        }
    }

    /// A block BAR read (one MRd of `len` bytes) with the card cycle at which its last
    /// completion arrived.
    pub fn bar_read_block_stamped(&mut self, bar: u8, offset: u64, len: usize) -> Result<(Vec<u8>, u64), DeviceError> {
        check_mmio_block(bar, offset, len, &self.hello.bar_sizes).map_err(DeviceError::InvalidArgument)?;
        match self.call(&Request::MmioReadBlock { bar, offset, len: len as u8 })? {
            Reply::MmioBlock { data, card_cycle } => Ok((data, card_cycle)),
            Reply::Error { kind, message } => {
                Err(self.error(kind, message, &format!("{len}-byte block read of BAR{bar} offset {offset:#x}")))
            }
            other => Err(self.unexpected("MmioReadBlock", other)),
        }
    }

    /// Asks the sim to exit (it removes its files).
    pub fn shutdown(mut self) -> Result<(), DeviceError> {
        match self.call(&Request::Shutdown)? {
            Reply::ShuttingDown => Ok(()),
            other => Err(self.unexpected("Shutdown", other)),
        }
    }

    /// Asks for live time (`true`) or gives this client's claim up (`false`). While any
    /// client holds a claim, card time runs continuously, never ahead of wall time; the claim
    /// ends with this connection (docs/sim-protocol.md, "Live time").
    pub fn request_live(&mut self, live: bool) -> Result<LiveState, DeviceError> {
        match self.call(&Request::SetLive { live })? {
            Reply::LiveSet { live_clients, card_cycle, .. } => Ok(LiveState { live_clients, card_cycle }),
            other => Err(self.unexpected("SetLive", other)),
        }
    }

    /// Lets `cycles` card cycles pass; returns the card cycle afterwards.
    pub fn advance(&mut self, cycles: u64) -> Result<u64, DeviceError> {
        match self.call(&Request::Advance { cycles })? {
            Reply::Advanced { now } => Ok(now),
            other => Err(self.unexpected("Advance", other)),
        }
    }

    /// The card cycle now (an Advance of 0 cycles).
    pub fn card_cycle(&mut self) -> Result<u64, DeviceError> {
        self.advance(0)
    }

    /// A BAR read with the card cycle at which its completion arrived.
    pub fn bar_read_stamped(&mut self, bar: u8, offset: u64, width: Width) -> Result<(u64, u64), DeviceError> {
        let w = width.bytes() as u8;
        check_mmio(bar, offset, w, &self.hello.bar_sizes).map_err(DeviceError::InvalidArgument)?;
        match self.call(&Request::MmioRead { bar, offset, width: w })? {
            Reply::MmioValue { value, card_cycle } => Ok((value, card_cycle)),
            Reply::Error { kind, message } => Err(self.error(kind, message, &format!("{w}-byte read of BAR{bar} offset {offset:#x}"))),
            other => Err(self.unexpected("MmioRead", other)),
        }
    }

    /// Card cycles in `d` of card time (rounded up, saturating).
    pub fn cycles_of(&self, d: Duration) -> u64 {
        let c = (d.as_secs_f64() * self.hello.card_clock_hz as f64).ceil();
        if c >= u64::MAX as f64 {
            u64::MAX
        } else {
            c as u64
        }
    }

    fn duration_of(&self, cycles: u64) -> Duration {
        Duration::from_secs_f64(cycles as f64 / self.hello.card_clock_hz.max(1) as f64)
    }

    fn disconnected(&self, reason: String) -> DeviceError {
        DeviceError::SimDisconnected { path: self.path.display().to_string(), reason }
    }

    fn send(&mut self, req: &Request) -> Result<(), DeviceError> {
        encode_frame(req, &mut self.frame).map_err(|e| DeviceError::InvalidArgument(e.to_string()))?;
        (&self.writer).write_all(&self.frame).map_err(|e| self.disconnected(e.to_string()))
    }

    fn call(&mut self, req: &Request) -> Result<Reply, DeviceError> {
        self.send(req)?;
        read_frame::<_, Reply>(&mut self.reader).map_err(|e| self.disconnected(e.to_string()))
    }

    fn error(&self, kind: ErrorKind, message: String, what: &str) -> DeviceError {
        match kind {
            ErrorKind::InvalidArgument => DeviceError::InvalidArgument(message),
            ErrorKind::UnsupportedRequest => DeviceError::CompletionError { what: what.into(), status: "UR (Unsupported Request)".into() },
            ErrorKind::CompleterAbort => DeviceError::CompletionError { what: what.into(), status: "CA (Completer Abort)".into() },
            ErrorKind::OtherCompletionStatus => DeviceError::CompletionError { what: what.into(), status: message },
            ErrorKind::CompletionTimeout => DeviceError::Timeout(self.duration_of(self.hello.completion_timeout_cycles)),
            ErrorKind::NotAllowed | ErrorKind::OutOfMemory => DeviceError::Backend(message),
        }
    }

    fn unexpected(&self, what: &str, reply: Reply) -> DeviceError {
        match reply {
            Reply::Error { kind, message } => self.error(kind, message, what),
            other => DeviceError::Backend(format!("the sim answered {what} with {other:?}")),
        }
    }
}

impl Device for SimDevice {
    fn bar_path(&self) -> BarPath {
        BarPath::SimMessage
    }

    fn description(&self) -> DeviceDescription {
        DeviceDescription {
            backend: "sim".into(),
            location: self.path.display().to_string(),
            pci_address: self.hello.pci_address.clone(),
            bar_sizes: self.hello.bar_sizes.clone(),
        }
    }

    fn bar_read(&mut self, bar: u8, offset: u64, width: Width) -> Result<u64, DeviceError> {
        self.bar_read_stamped(bar, offset, width).map(|(v, _)| v)
    }

    /// tlpx-sim's socket has no kernel to play the OS: this process programs the card's MSI-X
    /// table or MSI's Multiple Message Enable itself, and tlpx-sim restores the mode when it
    /// leaves (crate::msi::enable_vectors_as_host).
    fn request_vectors(&mut self, count: u32) -> Result<crate::InterruptVectors, DeviceError> {
        crate::msi::enable_vectors_as_host(self, count)
    }

    fn bar_write(&mut self, bar: u8, offset: u64, width: Width, value: u64) -> Result<(), DeviceError> {
        let w = width.bytes() as u8;
        check_mmio(bar, offset, w, &self.hello.bar_sizes).map_err(DeviceError::InvalidArgument)?;
        self.send(&Request::MmioWrite { bar, offset, width: w, value })
    }

    /// One MRd32 of exactly `len` bytes (First/Last BE select them), as a CPU's 16/32/64-byte
    /// load produces.
    fn bar_read_block(&mut self, bar: u8, offset: u64, len: usize) -> Result<Vec<u8>, DeviceError> {
        self.bar_read_block_stamped(bar, offset, len).map(|(d, _)| d)
    }

    /// One MWr32 carrying exactly `data` (First/Last BE select the bytes), as a CPU's
    /// 16/32/64-byte store or a write-combining burst produces. Posted.
    fn bar_write_block(&mut self, bar: u8, offset: u64, data: &[u8]) -> Result<(), DeviceError> {
        check_mmio_block(bar, offset, data.len(), &self.hello.bar_sizes).map_err(DeviceError::InvalidArgument)?;
        self.send(&Request::MmioWriteBlock { bar, offset, data: data.to_vec() })
    }

    fn config_read(&mut self, offset: u16, len: u16) -> Result<Vec<u8>, DeviceError> {
        match self.call(&Request::ConfigRead { offset, len })? {
            Reply::ConfigData { data } => Ok(data),
            other => Err(self.unexpected("ConfigRead", other)),
        }
    }

    fn config_write(&mut self, offset: u16, data: &[u8]) -> Result<(), DeviceError> {
        match self.call(&Request::ConfigWrite { offset, data: data.to_vec() })? {
            Reply::ConfigWritten => Ok(()),
            other => Err(self.unexpected("ConfigWrite", other)),
        }
    }

    fn alloc_dma(&mut self, len: usize) -> Result<DmaBuffer, DeviceError> {
        match self.call(&Request::AllocDma { len: len as u64, align: 4096 })? {
            Reply::DmaAllocated(a) => {
                let end = a.file_offset.checked_add(a.len);
                if end.is_none_or(|e| e > self.hello.host_memory_size) || a.len < len as u64 {
                    return Err(DeviceError::Backend(format!("the sim returned an allocation outside its host memory: {a:?}")));
                }
                let ptr = (self.memory_base + a.file_offset as usize) as *mut u8;
                let backing: Arc<dyn std::any::Any + Send + Sync> = self.memory.clone();
                if let Some(node) = self.numa_node {
                    // The shared host memory's pages of this buffer, moved to the node (both
                    // processes map them; the policy is the shared file's).
                    let span = (a.len as usize).next_multiple_of(4096);
                    if let Err(e) = crate::host_memory::bind_to_node(ptr, span, node) {
                        let _ = self.call(&Request::FreeDma { id: a.id });
                        return Err(e);
                    }
                }
                // SAFETY: ptr..ptr+len lies inside the mapping (checked above), which `backing`
                // keeps alive.
                Ok(unsafe { DmaBuffer::new(a.id, a.bus_addr, len, ptr, backing) })
            }
            other => Err(self.unexpected("AllocDma", other)),
        }
    }

    fn set_dma_placement(&mut self, placement: DmaPlacement) -> Result<(), DeviceError> {
        if placement.page_size != PageSize::Base4k {
            return Err(DeviceError::Unsupported {
                backend: "sim".into(),
                what: format!("map DMA buffers with {} IOMMU pages", placement.page_size.name()),
                instead: "the simulated card reaches host memory without an IOMMU (tlpx-sim checks addresses, it translates \
                          nothing), so there is no IOVA page size to choose: --iommu-pages needs the vfio backend on a host \
                          with a translating IOMMU"
                    .into(),
            });
        }
        if let Some(node) = placement.numa_node {
            crate::host_memory::check_node(node)?;
        }
        self.numa_node = placement.numa_node;
        Ok(())
    }

    fn free_dma(&mut self, buffer: DmaBuffer) -> Result<(), DeviceError> {
        match self.call(&Request::FreeDma { id: buffer.id })? {
            Reply::DmaFreed => Ok(()),
            other => Err(self.unexpected("FreeDma", other)),
        }
    }

    fn wait_interrupt(&mut self, vector_mask: u32, timeout: Duration) -> Result<Option<Interrupt>, DeviceError> {
        let timeout_cycles = self.cycles_of(timeout);
        match self.call(&Request::WaitIrq { vector_mask, timeout_cycles })? {
            Reply::Irq { vector, card_cycle } => Ok(Some(Interrupt { vector, card_cycle: Some(card_cycle) })),
            Reply::IrqTimedOut { .. } => Ok(None),
            other => Err(self.unexpected("WaitIrq", other)),
        }
    }

    fn idle(&mut self, duration: Duration) -> Result<(), DeviceError> {
        let cycles = self.cycles_of(duration);
        self.advance(cycles).map(|_| ())
    }

    fn clock_ns(&mut self) -> Result<u64, DeviceError> {
        let cycle = self.card_cycle()?;
        Ok((u128::from(cycle) * 1_000_000_000 / u128::from(self.hello.card_clock_hz.max(1))) as u64)
    }

    fn clock_source(&self) -> ClockSource {
        ClockSource::SimulatedCard
    }

    fn set_live(&mut self, live: bool) -> Result<(), DeviceError> {
        self.request_live(live).map(|_| ())
    }

    fn time_mark(&mut self) -> Result<TimeMark, DeviceError> {
        let s = self.stats()?;
        Ok(TimeMark::Simulator { live_cycles: s.live_cycles, live_clients: s.live_clients })
    }

    fn poll_pause(&mut self, step: Duration) -> Result<(), DeviceError> {
        let cycles = self.cycles_of(step).max(1);
        self.advance(cycles).map(|_| ())
    }

    fn try_as_tlp_injector(&mut self) -> Option<&mut dyn TlpInjector> {
        Some(self)
    }
}

impl TlpInjector for SimDevice {
    fn inject_tlp(&mut self, dwords: &[u32], timeout: Duration) -> Result<Option<Vec<u32>>, DeviceError> {
        tlpx_sim_protocol::tlp::check_framing(dwords).map_err(DeviceError::InvalidArgument)?;
        let wait_cycles = self.cycles_of(timeout).max(1);
        match self.call(&Request::InjectTlp { dwords: dwords.to_vec(), wait_cycles })? {
            Reply::InjectCompletion { dwords, .. } => Ok(Some(dwords)),
            Reply::InjectDelivered { .. } => Ok(None),
            Reply::InjectTimedOut { .. } => Err(DeviceError::Timeout(timeout)),
            other => Err(self.unexpected("InjectTlp", other)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn connecting_to_nothing_says_how_to_start_the_sim() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("none.sock");
        let e = SimDevice::connect(&path).expect_err("nothing listens");
        let msg = e.to_string();
        assert!(matches!(e, DeviceError::SimNotRunning { .. }), "{msg}");
        assert!(msg.contains("none.sock") && msg.contains("tlpx-sim"), "{msg}");
    }

    #[test]
    fn default_socket_path_is_the_protocol_one() {
        assert_eq!(SimDevice::default_socket_path(), tlpx_sim_protocol::default_socket_path());
    }
}
