//! The `Device` trait: everything host tools need from a tlpx card, whatever carries it.
//!
//! Backends (one module each under `backends/`):
//! - `sim`: the simulated card in a `tlpx-sim` process (Unix socket + shared host memory);
//! - `vfio` and `litepcie`: a real card through /dev/vfio or LitePCIe's driver.
//!
//! `selector` turns a `--device` text into an open `Device` and lists what can be opened.
//! Callers hold a `Box<dyn Device>` and never learn which backend they drive. Optional
//! capabilities that only some backends have are reached through `try_as_*` methods.

pub mod backends;
pub mod block_table;
pub mod card;
#[path = "../../../blocks/cpu/driver.rs"]
pub mod cpu;
pub mod error;
#[path = "../../../blocks/generator/driver.rs"]
pub mod generator;
pub mod host_memory;
#[path = "../../../blocks/irq_timer/driver.rs"]
pub mod irq_timer;
#[path = "../../../blocks/irq_timer/isr_trace/mod.rs"]
pub mod isr_trace;
pub mod lease;
#[path = "../../../blocks/litepcie_dma/driver.rs"]
pub mod litepcie_dma;
pub mod msi;
pub mod pci;
pub mod perf;
#[path = "../../../blocks/pio/driver.rs"]
pub mod pio;
pub mod relocate;
#[path = "../../../blocks/rt_loop/driver.rs"]
pub mod rt_loop;
#[path = "../../../blocks/rule30/driver.rs"]
pub mod rule30;
pub mod selector;
#[path = "../../../blocks/spy/driver.rs"]
pub mod spy;
pub mod stop;

use std::time::Duration;

pub use error::DeviceError;
/// Where the build puts what the tools load; it lives in tlpx-sim-protocol so the simulator
/// finds its card libraries without depending on this crate.
pub use tlpx_sim_protocol::paths;

/// Width of one BAR access. A 64-bit access is one 2-DW TLP on the wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum Width {
    W8,
    W16,
    W32,
    W64,
}

impl Width {
    pub fn bytes(self) -> u64 {
        match self {
            Width::W8 => 1,
            Width::W16 => 2,
            Width::W32 => 4,
            Width::W64 => 8,
        }
    }
    pub fn from_bits(bits: u32) -> Result<Width, DeviceError> {
        match bits {
            8 => Ok(Width::W8),
            16 => Ok(Width::W16),
            32 => Ok(Width::W32),
            64 => Ok(Width::W64),
            other => Err(DeviceError::InvalidArgument(format!("access width must be 8, 16, 32 or 64 bits, not {other}"))),
        }
    }
}

/// What a backend knows about the card it drives.
#[derive(Debug, Clone, serde::Serialize)]
pub struct DeviceDescription {
    /// "sim", "vfio", "litepcie".
    pub backend: String,
    /// Where the card is: a PCI address ("0000:03:00.0") or a sim socket path.
    pub location: String,
    /// PCI address as the host's config space presents it (the sim has one too).
    pub pci_address: String,
    /// Size in bytes of each implemented BAR, index = BAR number.
    pub bar_sizes: Vec<Option<u64>>,
}

/// A DMA-able buffer of host memory: the CPU sees it at `host_ptr`, the card at `bus_addr`.
///
/// The memory stays mapped while the buffer lives; `Device::free_dma` returns it. Access
/// goes through volatile reads/writes because the card writes it behind the compiler's back.
#[derive(Debug)]
pub struct DmaBuffer {
    /// Backend-specific handle, used by `free_dma`.
    pub id: u64,
    /// Address the card uses in its TLPs.
    pub bus_addr: u64,
    /// Length in bytes.
    pub len: usize,
    host_ptr: *mut u8,
    // Keeps the mapping that backs `host_ptr` alive.
    _backing: std::sync::Arc<dyn std::any::Any + Send + Sync>,
}

// SAFETY: the buffer is plain memory shared with a device; synchronisation is the caller's
// job exactly as with any DMA buffer, and all accessors are volatile.
unsafe impl Send for DmaBuffer {}

impl DmaBuffer {
    /// # Safety
    /// `host_ptr..host_ptr+len` must stay mapped and writable while `backing` lives.
    pub unsafe fn new(
        id: u64,
        bus_addr: u64,
        len: usize,
        host_ptr: *mut u8,
        backing: std::sync::Arc<dyn std::any::Any + Send + Sync>,
    ) -> DmaBuffer {
        DmaBuffer { id, bus_addr, len, host_ptr, _backing: backing }
    }

    pub fn host_ptr(&self) -> *mut u8 {
        self.host_ptr
    }

    fn check(&self, offset: usize, n: usize) -> Result<(), DeviceError> {
        if offset.checked_add(n).is_none_or(|end| end > self.len) {
            return Err(DeviceError::InvalidArgument(format!(
                "DMA buffer access at offset {offset} of {n} bytes is outside the buffer of {} bytes",
                self.len
            )));
        }
        Ok(())
    }

    /// Copies `dst.len()` bytes from the buffer at `offset`.
    pub fn read_bytes(&self, offset: usize, dst: &mut [u8]) -> Result<(), DeviceError> {
        self.check(offset, dst.len())?;
        for (i, b) in dst.iter_mut().enumerate() {
            // SAFETY: bounds checked above; the mapping is alive while self lives.
            *b = unsafe { std::ptr::read_volatile(self.host_ptr.add(offset + i)) };
        }
        Ok(())
    }

    /// Copies `src` into the buffer at `offset`.
    pub fn write_bytes(&self, offset: usize, src: &[u8]) -> Result<(), DeviceError> {
        self.check(offset, src.len())?;
        for (i, b) in src.iter().enumerate() {
            // SAFETY: bounds checked above; the mapping is alive while self lives.
            unsafe { std::ptr::write_volatile(self.host_ptr.add(offset + i), *b) };
        }
        Ok(())
    }

    pub fn read_u32(&self, offset: usize) -> Result<u32, DeviceError> {
        let mut b = [0u8; 4];
        self.read_bytes(offset, &mut b)?;
        Ok(u32::from_le_bytes(b))
    }

    pub fn write_u32(&self, offset: usize, value: u32) -> Result<(), DeviceError> {
        self.write_bytes(offset, &value.to_le_bytes())
    }
}

/// How the card's interrupts are delivered to this process: the capability the host enabled.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum InterruptMode {
    /// One MSI vector: every source of the card arrives as vector 0 (its bit in
    /// `pcie_msi.vector` names the source). What stock drivers expect.
    Msi,
    /// Multi-message MSI: up to 32 vectors, a power of two, contiguous data values.
    MsiMulti,
    /// MSI-X: a table entry (address, data, mask) per vector, each steerable on its own.
    MsiX,
}

/// The vectors a backend obtained for this process (`Device::request_vectors`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct InterruptVectors {
    pub mode: InterruptMode,
    /// Vectors 0..count are usable: card vector n arrives as `Interrupt::vector` n.
    pub count: u32,
}

impl InterruptVectors {
    /// The one-vector MSI every backend has.
    pub const SINGLE_MSI: InterruptVectors = InterruptVectors { mode: InterruptMode::Msi, count: 1 };
}

/// One interrupt as the host received it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct Interrupt {
    /// MSI vector number.
    pub vector: u32,
    /// Card cycle at which the interrupt reached the host, when the backend knows it
    /// (the sim does; real hardware does not).
    pub card_cycle: Option<u64>,
}

/// How BAR accesses reach the card: the difference between the seed's mmap driver (rule
/// 30's hw-poll) and its char driver (hw-syscall).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum BarPath {
    /// CPU loads and stores on a mapping of the BAR (vfio's region mmap).
    Mapped,
    /// A system call per access (vfio's pread/pwrite on the device fd; LitePCIe's register ioctl).
    Syscall,
    /// A request to the simulator per access: there the two above are the same thing.
    SimMessage,
}

impl BarPath {
    pub fn name(self) -> &'static str {
        match self {
            BarPath::Mapped => "mapped",
            BarPath::Syscall => "syscall",
            BarPath::SimMessage => "sim_message",
        }
    }
}

/// Whose time [`Device::clock_ns`] tells.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ClockSource {
    /// The host's CLOCK_MONOTONIC: on hardware, host-side latencies are real host time.
    Host,
    /// The simulated card's time: on the simulator the host's wall clock measures the
    /// simulator (its speed), not the card, so host-side latencies are taken in card time
    /// (modelled only, or with real host gaps charged: the sim's `host_time` mode says which).
    SimulatedCard,
}

/// Which clock a measurement ran in (docs/sim-protocol.md, "Time").
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TimeMode {
    /// The simulator's deterministic virtual time: card time ran only while a client waited,
    /// so the same requests and seed give the same figures.
    Virtual,
    /// The simulator ran in live time during the measurement (this or another client asked
    /// for it): card time ran continuously, never ahead of wall time. Card-time figures are
    /// still exact in card cycles, but the run is not reproducible.
    Live,
    /// A real card: time is the card's and the host's own, always live.
    Hardware,
    /// The simulator started with `--host-time real` (or `--free-run`): the host's wall time
    /// between a client's messages (or in-flight traffic with nobody waiting) becomes card
    /// time, so the figures hold this machine's scheduling and are not reproducible.
    RealHostTime,
}

impl TimeMode {
    /// `virtual`, `live` or `hardware`, as results spell it.
    pub fn name(self) -> &'static str {
        match self {
            TimeMode::Virtual => "virtual",
            TimeMode::Live => "live",
            TimeMode::Hardware => "hardware",
            TimeMode::RealHostTime => "real_host_time",
        }
    }
}

impl std::fmt::Display for TimeMode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// A reading of a backend's time mode, taken before and after a measurement to tell which
/// clock it ran in ([`TimeMark::mode_since`]). Reading one moves no TLP and lets no card time
/// pass.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TimeMark {
    /// A real card.
    Hardware,
    /// The simulator's cumulative cycles run in live time, and the clients holding live time
    /// when it was read.
    Simulator { live_cycles: u64, live_clients: u32 },
}

impl TimeMark {
    /// The mode of what ran between `earlier` and this mark: `Live` when the simulator ran any
    /// cycle in live time in between, `Virtual` when it ran none.
    pub fn mode_since(&self, earlier: &TimeMark) -> TimeMode {
        match (earlier, self) {
            (TimeMark::Simulator { live_cycles: before, .. }, TimeMark::Simulator { live_cycles: after, .. }) => {
                if after > before {
                    TimeMode::Live
                } else {
                    TimeMode::Virtual
                }
            }
            _ => TimeMode::Hardware,
        }
    }

    /// The mode time runs in now: `Live` while some client holds live time on the simulator.
    pub fn mode_now(&self) -> TimeMode {
        match self {
            TimeMark::Hardware => TimeMode::Hardware,
            TimeMark::Simulator { live_clients, .. } if *live_clients > 0 => TimeMode::Live,
            TimeMark::Simulator { .. } => TimeMode::Virtual,
        }
    }
}

/// The host's CLOCK_MONOTONIC in ns.
pub fn host_clock_ns() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: clock_gettime writes the timespec it is given; CLOCK_MONOTONIC always exists.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// Everything host tools need from a card. Object safe; implemented by every backend.
pub trait Device: Send {
    /// Backend, location and BARs of the card.
    fn description(&self) -> DeviceDescription;

    /// Reads `width` at `offset` of BAR `bar`. The value is zero-extended.
    fn bar_read(&mut self, bar: u8, offset: u64, width: Width) -> Result<u64, DeviceError>;

    /// Writes the low `width` bits of `value` at `offset` of BAR `bar` (a posted write).
    fn bar_write(&mut self, bar: u8, offset: u64, width: Width, value: u64) -> Result<(), DeviceError>;

    /// Reads `len` bytes (1..=64) at `offset` of BAR `bar` as one access where the backend
    /// can (the simulator sends one MRd; a real mapping uses the widest load it has),
    /// otherwise as naturally aligned accesses of up to 8 bytes.
    fn bar_read_block(&mut self, bar: u8, offset: u64, len: usize) -> Result<Vec<u8>, DeviceError> {
        check_block(offset, len)?;
        let mut out = Vec::with_capacity(len);
        let mut at = offset;
        while out.len() < len {
            let width = block_piece(at, len - out.len());
            let v = self.bar_read(bar, at, width)?;
            out.extend_from_slice(&v.to_le_bytes()[..width.bytes() as usize]);
            at += width.bytes();
        }
        Ok(out)
    }

    /// Writes `data` (1..=64 bytes) at `offset` of BAR `bar` as one posted write where the
    /// backend can (one MWr on the simulator; a write-combining store burst on hardware),
    /// otherwise as naturally aligned writes of up to 8 bytes.
    fn bar_write_block(&mut self, bar: u8, offset: u64, data: &[u8]) -> Result<(), DeviceError> {
        check_block(offset, data.len())?;
        let mut done = 0;
        while done < data.len() {
            let at = offset + done as u64;
            let width = block_piece(at, data.len() - done);
            let n = width.bytes() as usize;
            let mut v = [0u8; 8];
            v[..n].copy_from_slice(&data[done..done + n]);
            self.bar_write(bar, at, width, u64::from_le_bytes(v))?;
            done += n;
        }
        Ok(())
    }

    /// Reads `len` bytes of configuration space from `offset` (both within 0..4096).
    fn config_read(&mut self, offset: u16, len: u16) -> Result<Vec<u8>, DeviceError>;

    /// Writes bytes of configuration space at `offset`.
    fn config_write(&mut self, offset: u16, data: &[u8]) -> Result<(), DeviceError>;

    /// Allocates `len` bytes of DMA-able host memory visible to the card.
    fn alloc_dma(&mut self, len: usize) -> Result<DmaBuffer, DeviceError>;

    /// Returns a buffer from `alloc_dma`; the card must not touch it afterwards.
    fn free_dma(&mut self, buffer: DmaBuffer) -> Result<(), DeviceError>;

    /// The IOVA page sizes the IOMMU between the card and host memory offers (a bitmap, bit n
    /// = pages of 2^n bytes), when the backend maps its buffers through one.
    fn iova_page_sizes(&self) -> Option<u64> {
        None
    }

    /// Where later `alloc_dma` buffers go in host memory: a NUMA node, a page size (and so the
    /// largest IOVA page size their mapping can use). Backends whose buffers the kernel
    /// allocates (the LitePCIe driver) cannot place them; they refuse anything but the default.
    fn set_dma_placement(&mut self, placement: host_memory::DmaPlacement) -> Result<(), DeviceError> {
        if placement == host_memory::DmaPlacement::default() {
            return Ok(());
        }
        Err(DeviceError::Unsupported {
            backend: self.description().backend,
            what: "place DMA buffers on a NUMA node or on huge pages".into(),
            instead: "its DMA buffers are allocated where it allocates them; use the vfio backend (--device vfio:ADDRESS)".into(),
        })
    }

    /// Asks for `count` interrupt vectors (MSI-X where the card and host offer it, else
    /// multi-message MSI) and returns what was granted, which may be fewer. Backends that can
    /// only take the card's single MSI vector grant that (the default).
    fn request_vectors(&mut self, count: u32) -> Result<InterruptVectors, DeviceError> {
        let _ = count;
        Ok(InterruptVectors::SINGLE_MSI)
    }

    /// The host kernel's interrupt number (the first column of /proc/interrupts, the
    /// directory under /proc/irq) on which card vector `vector` arrives, where a kernel
    /// dispatches it (vfio, LitePCIe's driver); `None` where none does (the simulator's
    /// socket) or the vector is not granted. Steering a vector to a CPU writes
    /// /proc/irq/N/smp_affinity_list.
    fn vector_host_irq(&self, vector: u32) -> Option<u32> {
        let _ = vector;
        None
    }

    /// Waits for an interrupt on one of the vectors in `vector_mask` (bit n = vector n).
    /// Returns `Ok(None)` on timeout. On the sim the timeout is card (virtual) time.
    fn wait_interrupt(&mut self, vector_mask: u32, timeout: Duration) -> Result<Option<Interrupt>, DeviceError>;

    /// Lets `duration` of card time pass without doing anything else. On hardware this is a
    /// sleep; on the sim it advances virtual time, which does not run on its own while every
    /// client is busy elsewhere (see docs/sim-protocol.md).
    fn idle(&mut self, duration: Duration) -> Result<(), DeviceError>;

    /// The clock that host-side latencies of this backend are measured in (ns; see
    /// [`ClockSource`]). Reading it moves no TLP.
    fn clock_ns(&mut self) -> Result<u64, DeviceError> {
        Ok(host_clock_ns())
    }

    /// Whose time [`Device::clock_ns`] tells.
    fn clock_source(&self) -> ClockSource {
        ClockSource::Host
    }

    /// Asks for live time (`true`) or gives this connection's claim up (`false`). On the
    /// simulator, while any client holds a claim, card time runs continuously (not only while
    /// a client waits), never ahead of wall time, so another process's traffic runs while
    /// this one computes or sleeps; the claim ends with the connection. On hardware time is
    /// always live: nothing to do.
    fn set_live(&mut self, live: bool) -> Result<(), DeviceError> {
        let _ = live;
        Ok(())
    }

    /// A reading of the time mode, to tell afterwards which clock a measurement ran in
    /// ([`TimeMark::mode_since`]). Hardware by default.
    fn time_mark(&mut self) -> Result<TimeMark, DeviceError> {
        Ok(TimeMark::Hardware)
    }

    /// Called between two polls of host memory that the card writes. On hardware the poll is
    /// a plain spin (a CPU pause hint; `step` is ignored); on the simulator, where card time
    /// only runs when a client asks, it runs the card for `step` so the memory can change.
    fn poll_pause(&mut self, step: Duration) -> Result<(), DeviceError> {
        let _ = step;
        std::hint::spin_loop();
        Ok(())
    }

    /// How BAR accesses reach the card now.
    fn bar_path(&self) -> BarPath {
        BarPath::Mapped
    }

    /// Chooses how BAR accesses reach the card; a backend that has only one way refuses the
    /// other with `Unsupported`.
    fn set_bar_path(&mut self, path: BarPath) -> Result<(), DeviceError> {
        let now = self.bar_path();
        if path == now {
            return Ok(());
        }
        Err(DeviceError::Unsupported {
            backend: self.description().backend,
            what: format!("reach BARs by {}", path.name()),
            instead: format!("this backend reaches them by {} only", now.name()),
        })
    }

    /// Raw TLP injection, for tests of the card's error handling (the sim only).
    fn try_as_tlp_injector(&mut self) -> Option<&mut dyn TlpInjector> {
        None
    }

    /// The LitePCIe driver's own DMA rings (the litepcie backend only: there the driver owns
    /// the DMA buffers and their bus addresses, so [`Device::alloc_dma`] is unsupported).
    fn try_as_driver_dma(&mut self) -> Option<&mut dyn backends::litepcie::DriverDma> {
        None
    }
}

/// Checks a block access: 1..=64 bytes, not crossing a 4 KiB boundary (every backend's rule).
pub(crate) fn check_block(offset: u64, len: usize) -> Result<(), DeviceError> {
    if !(1..=64).contains(&len) {
        return Err(DeviceError::InvalidArgument(format!("a block access moves 1..=64 bytes, not {len}")));
    }
    let last = offset.checked_add(len as u64 - 1).ok_or_else(|| {
        DeviceError::InvalidArgument(format!("a block access of {len} bytes at 0x{offset:x} runs past the end of the address space"))
    })?;
    if offset / 4096 != last / 4096 {
        return Err(DeviceError::InvalidArgument(format!("a block access of {len} bytes at 0x{offset:x} would cross a 4 KiB boundary")));
    }
    Ok(())
}

/// Widest naturally aligned access (up to 8 bytes) at `at` that fits in `left` bytes.
fn block_piece(at: u64, left: usize) -> Width {
    for width in [Width::W64, Width::W32, Width::W16] {
        let n = width.bytes();
        if at.is_multiple_of(n) && left as u64 >= n {
            return width;
        }
    }
    Width::W8
}

/// Sends hand-made TLPs to the card: the only way to exercise requests a CPU cannot
/// produce (configuration requests, I/O, MRd64 below 4 GiB, poisoned writes).
pub trait TlpInjector {
    /// Sends one TLP (header and payload DWs as in tlpx_card.h) to the card. For a
    /// non-posted request, waits up to `timeout` of card time for the completion with the
    /// same tag and returns its DWs; for a posted one returns `Ok(None)` once it was delivered.
    fn inject_tlp(&mut self, dwords: &[u32], timeout: Duration) -> Result<Option<Vec<u32>>, DeviceError>;
}

#[cfg(test)]
mod time_tests {
    use super::*;

    #[test]
    fn the_mode_of_a_measurement_follows_the_live_cycles_run_in_it() {
        let sim = |live_cycles, live_clients| TimeMark::Simulator { live_cycles, live_clients };
        assert_eq!(sim(100, 0).mode_since(&sim(100, 0)), TimeMode::Virtual);
        assert_eq!(sim(150, 0).mode_since(&sim(100, 1)), TimeMode::Live, "live time ended during the run");
        assert_eq!(sim(150, 1).mode_since(&sim(100, 0)), TimeMode::Live, "live time began during the run");
        assert_eq!(TimeMark::Hardware.mode_since(&TimeMark::Hardware), TimeMode::Hardware);
        assert_eq!(sim(7, 2).mode_now(), TimeMode::Live);
        assert_eq!(sim(7, 0).mode_now(), TimeMode::Virtual);
        assert_eq!(serde_json::to_string(&TimeMode::Live).expect("json"), "\"live\"");
        assert_eq!(TimeMode::Virtual.to_string(), "virtual");
    }
}
