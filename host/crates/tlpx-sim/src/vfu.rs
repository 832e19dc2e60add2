//! `tlpx-sim --vfio-user SOCKET`: the simulated card as a vfio-user device server, for QEMU's
//! `vfio-user-pci` client (docs/virtual-platform.md).
//!
//! The card engine is the one `tlpx-sim` always runs ([`Sim`]: the Verilated card, the link
//! and root-complex model, the config space of [`crate::config_space`]). The vfio-user side
//! talks to it as two in-process clients of the sim protocol, over socket pairs instead of
//! the listening socket, so every message takes the path a tlpx client's does:
//!
//! - the *vCPU* client (the vfio-user thread): region 7 (config space) becomes ConfigRead /
//!   ConfigWrite, BAR0 becomes MmioRead (blocks until the card's completion, as the vCPU
//!   blocks on the message) and posted MmioWrite;
//! - the *interrupt* client (a thread of its own): holds a claim on live time, so card time
//!   runs continuously while the guest runs (paced never to pass wall time), and waits for
//!   the card's MSIs, each of which it turns into a write of the vector's eventfd.
//!
//! The card's DMA does not cross a socket: the sim thread reads and writes the guest's RAM
//! directly through the memfd regions of DMA_MAP ([`GuestMemory`]), gated on Bus Master
//! Enable; an access outside every mapping is refused (UR for a read, dropped write) and
//! counted, as tlpx-sim's IOMMU does for its own host memory.
//!
//! Callbacks of the `vfio_user` crate run on one thread in socket order, which is also the
//! order of the guest's accesses: writes are posted (no reply), and a later read returns only
//! after the engine processed them, so a BAR read is the flush it is on real PCIe.

use std::fs::File;
use std::io::{BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::mpsc::{self, Sender};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use tlpx_sim_protocol::{read_frame, Reply, Request, SimStats, BAR0_SIZE, PROTOCOL_VERSION};
use vfio_bindings::bindings::vfio::{
    vfio_region_info, VFIO_IRQ_INFO_EVENTFD, VFIO_IRQ_SET_ACTION_TRIGGER, VFIO_IRQ_SET_DATA_EVENTFD, VFIO_IRQ_SET_DATA_NONE,
    VFIO_PCI_BAR0_REGION_INDEX, VFIO_PCI_CONFIG_REGION_INDEX, VFIO_PCI_MSIX_IRQ_INDEX, VFIO_PCI_MSI_IRQ_INDEX, VFIO_PCI_NUM_IRQS,
    VFIO_PCI_NUM_REGIONS, VFIO_REGION_INFO_FLAG_READ, VFIO_REGION_INFO_FLAG_WRITE,
};
use vfio_user::{DmaMapFlags, DmaUnmapFlags, IrqInfo, Server, ServerBackend, ServerRegion};

use crate::config_space::{CAP_MSI, CAP_MSIX, COMMAND, MSI_DEFAULT_ADDRESS, SIZE as CONFIG_SIZE};
use crate::engine::{Event, Sim};
use crate::guestmem::GuestMemory;
use crate::hostmem::HostMemory;
use crate::rundir::{RewrittenFile, RuntimeDir};
use crate::server::{block_signals, engine_params, hello_info, prepare, spawn_signal_thread, RuntimeFiles, SimError, SimOptions};

/// Client ids of the two in-process clients (the acceptor of `serve` is not running here).
const VCPU_CLIENT: u64 = 1;
const IRQ_CLIENT: u64 = 2;
/// Log lines of each kind before they are only counted (a guest can make millions).
const LOG_LIMIT: u64 = 20;

/// What the server counts, shared by its threads; printed in the stop line.
#[derive(Debug, Default)]
pub struct VfuCounters {
    pub config_reads: AtomicU64,
    pub config_writes: AtomicU64,
    pub bar_reads: AtomicU64,
    pub bar_writes: AtomicU64,
    /// BAR reads answered with all ones because the engine refused or the card failed them.
    pub bar_read_errors: AtomicU64,
    pub other_region_accesses: AtomicU64,
    pub dma_maps: AtomicU64,
    /// DMA_MAPs without a file descriptor (QEMU without `share=on` memory): not reachable.
    pub dma_maps_without_fd: AtomicU64,
    pub dma_unmaps: AtomicU64,
    pub msis_signalled: AtomicU64,
    /// MSIs of the card while the guest had no eventfd for the vector (MSI off in the guest).
    pub msis_without_eventfd: AtomicU64,
    pub resets: AtomicU64,
}

fn bump(c: &AtomicU64) -> u64 {
    c.fetch_add(1, Relaxed) + 1
}

/// One in-process client of the engine: requests go on the sim's channel, replies come back
/// framed on a socket pair (the engine writes every reply to a socket).
struct Bridge {
    id: u64,
    tx: Sender<Event>,
    replies: BufReader<UnixStream>,
}

impl Bridge {
    fn connect(id: u64, tx: Sender<Event>, name: &str) -> Result<Bridge, String> {
        let (ours, engine_end) = UnixStream::pair().map_err(|e| format!("cannot make a socket pair: {e}"))?;
        // One request at a time (call waits for its reply): no credits needed.
        tx.send(Event::Connected { id, writer: engine_end, credits: None }).map_err(|_| "the sim thread is gone".to_string())?;
        let mut b = Bridge { id, tx, replies: BufReader::new(ours) };
        match b.call(Request::Hello { protocol_version: PROTOCOL_VERSION, client_name: name.into() })? {
            Reply::HelloOk(_) => Ok(b),
            other => Err(format!("the engine refused Hello: {other:?}")),
        }
    }

    fn send(&self, request: Request) -> Result<(), String> {
        self.tx.send(Event::Request { id: self.id, request, at: Instant::now() }).map_err(|_| "the sim thread is gone".to_string())
    }

    fn call(&mut self, request: Request) -> Result<Reply, String> {
        self.send(request)?;
        read_frame::<_, Reply>(&mut self.replies).map_err(|e| format!("no reply from the sim thread: {e}"))
    }
}

/// The interrupt eventfds the guest gave with SET_IRQS, by vector: MSI's and MSI-X's, and
/// which of the two the card sends now (MSI-X Enable in its config space).
#[derive(Default)]
struct IrqTables {
    msi: Vec<Option<File>>,
    msix: Vec<Option<File>>,
    msix_on: bool,
}

type Eventfds = Arc<Mutex<IrqTables>>;

/// The device the `vfio_user` crate's server calls back.
struct VfuCard {
    vcpu: Bridge,
    guest: Arc<GuestMemory>,
    msi: Eventfds,
    n: Arc<VfuCounters>,
    t0: Instant,
    quiet: bool,
    /// The command register as last seen, to log Memory / Bus Master changes.
    command: u16,
    /// MSI-X table size the config space presents (0: no MSI-X).
    msix_vectors: u32,
}

impl VfuCard {
    fn log(&self, msg: &str) {
        if !self.quiet {
            eprintln!("[{:9.3}] tlpx-sim vfio-user: {msg}", self.t0.elapsed().as_secs_f64());
        }
    }

    fn config_read(&mut self, offset: u64, data: &mut [u8]) -> Result<(), String> {
        let (Ok(offset), Ok(len)) = (u16::try_from(offset), u16::try_from(data.len())) else {
            return Err(format!("config read of {} bytes at {offset:#x}: outside config space", data.len()));
        };
        match self.vcpu.call(Request::ConfigRead { offset, len })? {
            Reply::ConfigData { data: d } if d.len() == data.len() => {
                data.copy_from_slice(&d);
                Ok(())
            }
            Reply::Error { message, .. } => Err(message),
            other => Err(format!("unexpected reply {other:?}")),
        }
    }

    fn config_write(&mut self, offset: u64, data: &[u8]) -> Result<(), String> {
        let offset = u16::try_from(offset).map_err(|_| format!("config write at {offset:#x}: outside config space"))?;
        let control = CAP_MSIX as u16 + 2;
        if offset < control + 2 && offset as usize + data.len() > control as usize && self.msix_vectors > 0 {
            // MSI-X Message Control: QEMU emulates the table the guest sees and tells the
            // device only that MSI-X is on (SET_IRQS gives an eventfd per vector). The card's
            // own table is programmed here, as a host kernel would, before the card may send:
            // entry v writes v to the interrupt window, and tlpx-sim delivers data v as vector
            // v to eventfd v.
            let mut now = [0u8; 2];
            self.config_read(u64::from(control), &mut now)?;
            let mut new = now;
            for (i, b) in data.iter().enumerate() {
                let at = offset as usize + i;
                if (control as usize..control as usize + 2).contains(&at) {
                    new[at - control as usize] = *b;
                }
            }
            let (was_on, on) = (u16::from_le_bytes(now) & (1 << 15) != 0, u16::from_le_bytes(new) & (1 << 15) != 0);
            if on && !was_on {
                self.program_msix_table()?;
            }
            self.forward_config_write(offset, data)?;
            if let Ok(mut t) = self.msi.lock() {
                t.msix_on = on;
            }
            if on != was_on {
                self.log(&format!("MSI-X {}", if on { "on: the card's table programmed, one eventfd per vector" } else { "off" }));
            }
            return Ok(());
        }
        self.forward_config_write(offset, data)
    }

    /// The MSI-X table's size the config space presents (0: no MSI-X capability).
    fn msix_table_size(&mut self) -> Result<u32, String> {
        let mut next = [0u8; 1];
        self.config_read((CAP_MSI + 1) as u64, &mut next)?;
        if usize::from(next[0]) != CAP_MSIX {
            return Ok(0);
        }
        let mut control = [0u8; 2];
        self.config_read((CAP_MSIX + 2) as u64, &mut control)?;
        Ok(u32::from(u16::from_le_bytes(control) & 0x7FF) + 1)
    }

    /// Entry v of the card's MSI-X table: the interrupt window's address, data v, unmasked.
    fn program_msix_table(&mut self) -> Result<(), String> {
        let mut t = [0u8; 4];
        self.config_read((CAP_MSIX + 4) as u64, &mut t)?;
        let table = u64::from(u32::from_le_bytes(t) & !7);
        for v in 0..self.msix_vectors {
            let entry = table + 16 * u64::from(v);
            for (k, value) in [MSI_DEFAULT_ADDRESS, 0, v, 0].into_iter().enumerate() {
                self.bar_write(entry + 4 * k as u64, &value.to_le_bytes())?;
            }
        }
        Ok(())
    }

    fn forward_config_write(&mut self, offset: u16, data: &[u8]) -> Result<(), String> {
        match self.vcpu.call(Request::ConfigWrite { offset, data: data.to_vec() })? {
            Reply::ConfigWritten => Ok(()),
            Reply::Error { message, .. } => Err(message),
            other => Err(format!("unexpected reply {other:?}")),
        }
    }

    /// Logs a change of the command register's Memory Space / Bus Master bits: when DMA is
    /// allowed is worth knowing when a DMA is refused.
    fn note_command(&mut self) {
        let mut b = [0u8; 2];
        if self.config_read(COMMAND as u64, &mut b).is_ok() {
            let cmd = u16::from_le_bytes(b);
            if cmd & 0x6 != self.command & 0x6 {
                self.log(&format!(
                    "command register {cmd:#06x}: memory space {}, bus master {}",
                    if cmd & 2 != 0 { "on" } else { "off" },
                    if cmd & 4 != 0 { "on (the card may DMA)" } else { "off (the card's DMA is refused)" }
                ));
            }
            self.command = cmd;
        }
    }

    fn bar_read(&mut self, offset: u64, data: &mut [u8]) -> Result<(), String> {
        let len = data.len();
        let reply = if matches!(len, 1 | 2 | 4 | 8) && offset.is_multiple_of(len as u64) {
            self.vcpu.call(Request::MmioRead { bar: 0, offset, width: len as u8 })?
        } else {
            let len = u8::try_from(len).map_err(|_| format!("a BAR read of {len} bytes is longer than 64"))?;
            self.vcpu.call(Request::MmioReadBlock { bar: 0, offset, len })?
        };
        match reply {
            Reply::MmioValue { value, .. } => {
                data.copy_from_slice(&value.to_le_bytes()[..len]);
                Ok(())
            }
            Reply::MmioBlock { data: d, .. } if d.len() == len => {
                data.copy_from_slice(&d);
                Ok(())
            }
            Reply::Error { message, .. } => Err(message),
            other => Err(format!("unexpected reply {other:?}")),
        }
    }

    fn bar_write(&mut self, offset: u64, data: &[u8]) -> Result<(), String> {
        let len = data.len();
        if matches!(len, 1 | 2 | 4 | 8) && offset.is_multiple_of(len as u64) {
            let mut v = [0u8; 8];
            v[..len].copy_from_slice(data);
            self.vcpu.send(Request::MmioWrite { bar: 0, offset, width: len as u8, value: u64::from_le_bytes(v) })
        } else {
            self.vcpu.send(Request::MmioWriteBlock { bar: 0, offset, data: data.to_vec() })
        }
    }

    /// DEVICE_RESET, and the state before the guest's first access: what the card's config
    /// space holds after a reset as far as the guest can tell — no memory decoding, no bus
    /// mastering, MSI off (tlpx-sim starts its own clients with them on, as a set-up card).
    fn reset_config(&mut self) -> Result<(), String> {
        self.config_write(COMMAND as u64, &[0, 0])?;
        let mut ctl = [0u8; 2];
        self.config_read((CAP_MSI + 2) as u64, &mut ctl)?;
        ctl[0] &= !1;
        self.config_write((CAP_MSI + 2) as u64, &ctl)?;
        if self.msix_vectors > 0 {
            self.config_read((CAP_MSIX + 2) as u64, &mut ctl)?;
            ctl[1] &= !0xC0; // MSI-X Enable and Function Mask off
            self.config_write((CAP_MSIX + 2) as u64, &ctl)?;
        }
        self.command = 0;
        if let Ok(mut m) = self.msi.lock() {
            *m = IrqTables::default();
        }
        Ok(())
    }
}

fn io_err(msg: String) -> std::io::Error {
    std::io::Error::new(std::io::ErrorKind::InvalidInput, msg)
}

impl ServerBackend for VfuCard {
    fn region_read(&mut self, region: u32, offset: u64, data: &mut [u8]) -> Result<(), std::io::Error> {
        // A read is always answered with data, never with an error reply: the crate's client
        // (and a vCPU) expects the bytes; a failed read reads all ones, as a master abort does.
        let r = match region {
            VFIO_PCI_CONFIG_REGION_INDEX => {
                bump(&self.n.config_reads);
                self.config_read(offset, data)
            }
            VFIO_PCI_BAR0_REGION_INDEX => {
                bump(&self.n.bar_reads);
                self.bar_read(offset, data)
            }
            _ => {
                bump(&self.n.other_region_accesses);
                Err(format!("region {region} is not implemented (BAR0 = 0 and config space = 7 are)"))
            }
        };
        if let Err(e) = r {
            data.fill(0xFF);
            let k = if region == VFIO_PCI_BAR0_REGION_INDEX { bump(&self.n.bar_read_errors) } else { 1 };
            if k <= LOG_LIMIT {
                self.log(&format!("read of region {region} at {offset:#x} ({} bytes) reads all ones: {e}", data.len()));
            }
        }
        Ok(())
    }

    fn region_write(&mut self, region: u32, offset: u64, data: &[u8]) -> Result<(), std::io::Error> {
        let r = match region {
            VFIO_PCI_CONFIG_REGION_INDEX => {
                bump(&self.n.config_writes);
                let r = self.config_write(offset, data);
                if offset < COMMAND as u64 + 2 && offset + data.len() as u64 > COMMAND as u64 {
                    self.note_command();
                }
                r
            }
            VFIO_PCI_BAR0_REGION_INDEX => {
                bump(&self.n.bar_writes);
                self.bar_write(offset, data)
            }
            _ => {
                bump(&self.n.other_region_accesses);
                Err(format!("region {region} is not implemented (BAR0 = 0 and config space = 7 are)"))
            }
        };
        if let Err(e) = r {
            self.log(&format!("write of region {region} at {offset:#x} ({} bytes) dropped: {e}", data.len()));
        }
        Ok(())
    }

    fn dma_map(&mut self, flags: DmaMapFlags, offset: u64, address: u64, size: u64, fd: Option<File>) -> Result<(), std::io::Error> {
        bump(&self.n.dma_maps);
        let writable = flags.contains(DmaMapFlags::WRITE);
        let Some(fd) = fd else {
            // QEMU maps ROMs (and all RAM without `share=on`) without a descriptor: such memory
            // is reachable only through DMA_READ/WRITE messages, which this server does not
            // send. The card's DMA there is refused like any unmapped address.
            bump(&self.n.dma_maps_without_fd);
            self.log(&format!("DMA_MAP {address:#x}..{:#x} without a file descriptor: not reachable by the card", address + size));
            return Ok(());
        };
        self.guest.map(address, size, &fd, offset, writable).map_err(|e| {
            self.log(&e);
            io_err(e)
        })?;
        if self.n.dma_maps.load(Relaxed) <= LOG_LIMIT * 2 {
            self.log(&format!(
                "DMA_MAP {address:#x}..{:#x} ({}) fd offset {offset:#x}",
                address + size,
                if writable { "read/write" } else { "read-only" }
            ));
        }
        Ok(())
    }

    fn dma_unmap(&mut self, flags: DmaUnmapFlags, address: u64, size: u64) -> Result<(), std::io::Error> {
        bump(&self.n.dma_unmaps);
        // Blocks until the sim thread has finished the TLP it is moving (the table's lock).
        let removed = self.guest.unmap(address, size, flags.contains(DmaUnmapFlags::UNMAP_ALL));
        if self.n.dma_unmaps.load(Relaxed) <= LOG_LIMIT * 2 {
            self.log(&format!("DMA_UNMAP {address:#x}..{:#x}: {removed} mapping(s) removed", address.saturating_add(size)));
        }
        Ok(())
    }

    fn reset(&mut self) -> Result<(), std::io::Error> {
        bump(&self.n.resets);
        self.log("DEVICE_RESET: command register and MSI enable cleared");
        self.reset_config().map_err(io_err)
    }

    fn set_irqs(&mut self, index: u32, flags: u32, start: u32, count: u32, fds: Vec<File>) -> Result<(), std::io::Error> {
        if index != VFIO_PCI_MSI_IRQ_INDEX && index != VFIO_PCI_MSIX_IRQ_INDEX {
            // MSI and MSI-X are offered (GET_IRQ_INFO count 0 elsewhere: no INTx).
            self.log(&format!("SET_IRQS for index {index} ignored: the card has MSI and MSI-X only"));
            return Ok(());
        }
        let kind = if index == VFIO_PCI_MSIX_IRQ_INDEX { "MSI-X" } else { "MSI" };
        let mut tables = self.msi.lock().map_err(|_| io_err("the eventfd table is poisoned".into()))?;
        let msi = if index == VFIO_PCI_MSIX_IRQ_INDEX { &mut tables.msix } else { &mut tables.msi };
        if flags & VFIO_IRQ_SET_DATA_EVENTFD != 0 && flags & VFIO_IRQ_SET_ACTION_TRIGGER != 0 {
            let need = (start + count) as usize;
            if msi.len() < need {
                msi.resize_with(need, || None);
            }
            // One descriptor per vector; a vector without one (fd -1 in the message) is removed.
            let mut fds = fds.into_iter();
            for v in start..start + count {
                msi[v as usize] = fds.next();
            }
        } else if flags & VFIO_IRQ_SET_DATA_NONE != 0 && count == 0 {
            msi.clear();
        }
        let n = msi.iter().filter(|f| f.is_some()).count();
        drop(tables);
        self.log(&format!("SET_IRQS {kind} start {start} count {count} flags {flags:#x}: {n} vector(s) with an eventfd"));
        Ok(())
    }
}

/// The interrupt thread: holds live time (card time runs while the guest runs), waits for the
/// card's MSIs and signals their eventfds. The data of a DMA before an MSI is already in guest
/// memory: the sim thread wrote it before it delivered the MSI, and the eventfd write is a
/// system call after both.
fn interrupt_thread(mut irq: Bridge, msi: Eventfds, n: Arc<VfuCounters>, timeout_cycles: u64, quiet: bool) {
    if irq.call(Request::SetLive { live: true }).is_err() {
        return;
    }
    loop {
        match irq.call(Request::WaitIrq { vector_mask: u32::MAX, timeout_cycles }) {
            Ok(Reply::Irq { vector, .. }) => {
                let (signalled, kind) = msi.lock().ok().map_or((None, "MSI"), |t| {
                    let (table, kind) = if t.msix_on { (&t.msix, "MSI-X") } else { (&t.msi, "MSI") };
                    (table.get(vector as usize).and_then(|f| f.as_ref()).map(|mut f| f.write_all(&1u64.to_le_bytes()).is_ok()), kind)
                });
                if signalled == Some(true) {
                    bump(&n.msis_signalled);
                } else if bump(&n.msis_without_eventfd) <= LOG_LIMIT && !quiet {
                    eprintln!("tlpx-sim vfio-user: the card's {kind} (vector {vector}) dropped: the guest has no eventfd for it ({kind} off or the vector not enabled)");
                }
            }
            Ok(Reply::IrqTimedOut { .. }) => {}
            _ => return,
        }
    }
}

/// The regions and interrupts the device offers: BAR0 and config space, MSI with
/// `msi_vectors` vectors (the capability's Multiple Message Capable), MSI-X with
/// `msix_vectors` (0: no MSI-X capability).
fn device_layout(msi_vectors: u32, msix_vectors: u32) -> (Vec<ServerRegion>, Vec<IrqInfo>) {
    let regions = (0..VFIO_PCI_NUM_REGIONS)
        .map(|index| {
            let mut info = vfio_region_info { argsz: std::mem::size_of::<vfio_region_info>() as u32, index, ..Default::default() };
            let size = match index {
                VFIO_PCI_BAR0_REGION_INDEX => BAR0_SIZE,
                VFIO_PCI_CONFIG_REGION_INDEX => CONFIG_SIZE as u64,
                _ => 0,
            };
            if size > 0 {
                info.size = size;
                info.flags = VFIO_REGION_INFO_FLAG_READ | VFIO_REGION_INFO_FLAG_WRITE;
            }
            ServerRegion { region_info: info, sparse_areas: Vec::new(), mmap_fd: None }
        })
        .collect();
    // MSI with the capability's vectors (the card sends vector n of the MME the guest
    // enabled; with one, vector 0 for every source, named in pcie_msi.vector); each vector an
    // eventfd of its own (SET_IRQS); MSI-X likewise when tlpx-sim presents it (--msix). No
    // INTx (interrupt pin 0).
    let irqs = (0..VFIO_PCI_NUM_IRQS)
        .map(|index| {
            let count = match index {
                VFIO_PCI_MSI_IRQ_INDEX => msi_vectors,
                VFIO_PCI_MSIX_IRQ_INDEX => msix_vectors,
                _ => 0,
            };
            IrqInfo { index, count, flags: if count > 0 { VFIO_IRQ_INFO_EVENTFD } else { 0 } }
        })
        .collect();
    (regions, irqs)
}

/// A private runtime directory for the engine's files (config dump, an unused host-memory
/// file): made 0700 under $TMPDIR, removed at the end.
fn private_dir() -> Result<PathBuf, SimError> {
    let base = std::env::var_os("TMPDIR").filter(|d| !d.is_empty()).map(PathBuf::from).unwrap_or_else(|| PathBuf::from("/tmp"));
    let template = base.join("tlpx-vfu-XXXXXX");
    let mut bytes = std::ffi::CString::new(template.as_os_str().as_encoded_bytes())
        .map_err(|_| SimError::Invalid(format!("TMPDIR {} holds a NUL byte", base.display())))?
        .into_bytes_with_nul();
    // SAFETY: a writable NUL-terminated template ending in XXXXXX, as mkdtemp requires.
    let p = unsafe { libc::mkdtemp(bytes.as_mut_ptr().cast()) };
    if p.is_null() {
        return Err(SimError::Io {
            context: format!("cannot make a directory {}", template.display()),
            source: std::io::Error::last_os_error(),
        });
    }
    bytes.pop();
    Ok(PathBuf::from(String::from_utf8_lossy(&bytes).into_owned()))
}

/// Serves the card to one vfio-user client on `socket` until it disconnects (or a signal).
pub fn serve_vfio_user(opts: &SimOptions, socket: &Path) -> Result<(), SimError> {
    let p = prepare(opts)?;
    if socket.exists() {
        return Err(SimError::Invalid(format!(
            "--vfio-user {}: something exists at that path; the vfio-user socket must not exist yet (remove a stale one)",
            socket.display()
        )));
    }
    let dir_path = private_dir()?;
    let dir = Arc::new(RuntimeDir::open(&dir_path).map_err(SimError::Invalid)?);
    let files = RuntimeFiles::for_socket(&dir_path.join("card.sock"));
    // The engine wants host memory for its allocations; vfio-user clients allocate none (the
    // guest's RAM comes with DMA_MAP), so one page of it is enough.
    let mem_file = dir
        .create(RuntimeFiles::name(&files.host_memory)?, 0o600)
        .map_err(|source| SimError::Io { context: format!("cannot create {}", files.host_memory.display()), source })?;
    let mem = HostMemory::new(mem_file, &files.host_memory, 4096, opts.dma_base, 4096)
        .map_err(|source| SimError::Io { context: format!("cannot map {}", files.host_memory.display()), source })?;

    let msix_vectors = p.config.msix_vectors();
    let (regions, irqs) = device_layout(p.config.msi_vectors_capable(), msix_vectors);
    let server = Server::new(socket, true, irqs, regions)
        .map_err(|e| SimError::Invalid(format!("--vfio-user {}: cannot listen there: {e}", socket.display())))?;

    let hello = hello_info(&p, opts, &files);
    let clock_hz = p.clock_hz;
    let params = engine_params(&p, opts, hello, RewrittenFile::new(dir.clone(), RuntimeFiles::name(&files.dump)?));
    let data_width = p.lib.data_width();
    let mut sim = Sim::new(p.card, data_width, p.config, mem, params);
    let guest = Arc::new(GuestMemory::new());
    sim.set_guest_memory(guest.clone());

    let set = block_signals();
    let (tx, rx) = mpsc::channel();
    spawn_signal_thread(set, tx.clone());
    let n = Arc::new(VfuCounters::default());
    // How the vfio-user side ended (or failed to start); the sim thread is this one (the card
    // is not Send), the vfio-user side runs beside it.
    let end: Arc<Mutex<Option<Result<String, String>>>> = Arc::new(Mutex::new(None));
    let banner = (!opts.quiet).then(|| {
        format!(
            "tlpx-sim {} — the simulated card as a vfio-user device: {} ({}-bit), {}, {:.3} MHz; 10ee:7c01, BAR0 {} KiB, MSI; socket {}",
            env!("CARGO_PKG_VERSION"),
            p.lib.path().display(),
            data_width,
            p.link,
            clock_hz / 1e6,
            BAR0_SIZE >> 10,
            socket.display()
        )
    });
    {
        let (n, end, guest, quiet) = (n.clone(), end.clone(), guest.clone(), opts.quiet);
        std::thread::spawn(move || {
            let r = vfio_user_side(server, tx.clone(), guest, n, clock_hz, quiet, banner);
            let failed = r.is_err();
            if let Ok(mut e) = end.lock() {
                *e = Some(r);
            }
            if failed {
                // Nobody else will stop the sim thread.
                let _ = tx.send(Event::Signal(libc::SIGTERM));
            }
        });
    }
    sim.run(&rx);
    sim.close_all("tlpx-sim is shutting down");
    let s = sim.stats();
    drop(sim);
    let _ = std::fs::remove_file(socket);
    dir.remove_ours();
    let _ = std::fs::remove_dir(&dir_path);
    // After a signal the vfio-user thread may still wait for QEMU: the stop line is printed
    // and the process ends without it.
    let end = end.lock().ok().and_then(|mut e| e.take());
    let why = match end {
        Some(Err(e)) => return Err(SimError::Invalid(e)),
        Some(Ok(why)) => why,
        None => "a signal".to_string(),
    };
    eprintln!("{}", stop_line(&s, &n, &why, guest.regions().len()));
    Ok(())
}

/// The vfio-user side: the two in-process clients, the interrupt thread, then the crate's
/// server until the client leaves (then it asks the engine to shut down).
fn vfio_user_side(
    server: Server,
    tx: Sender<Event>,
    guest: Arc<GuestMemory>,
    n: Arc<VfuCounters>,
    clock_hz: f64,
    quiet: bool,
    banner: Option<String>,
) -> Result<String, String> {
    let msi: Eventfds = Arc::new(Mutex::new(IrqTables::default()));
    let vcpu = Bridge::connect(VCPU_CLIENT, tx.clone(), "vfio-user vCPU")?;
    let irq = Bridge::connect(IRQ_CLIENT, tx, "vfio-user interrupts")?;
    let mut card = VfuCard { vcpu, guest, msi: msi.clone(), n: n.clone(), t0: Instant::now(), quiet, command: 0, msix_vectors: 0 };
    card.msix_vectors = card.msix_table_size()?;
    card.reset_config()?;
    {
        // A second of card time per wait: the wait is re-armed, it only bounds a lost wake-up.
        let timeout = clock_hz as u64;
        std::thread::spawn(move || interrupt_thread(irq, msi, n, timeout, quiet));
    }
    if let Some(b) = banner {
        // Printed once the device is ready (the socket listens since Server::new).
        println!("{b}");
        let _ = std::io::stdout().flush();
    }
    let r = server.run(&mut card);
    let end = match r {
        Ok(()) => "the client closed the connection".to_string(),
        Err(e) => format!("vfio-user error: {e}"),
    };
    card.log(&end);
    drop(server);
    let _ = card.vcpu.call(Request::Shutdown);
    Ok(end)
}

/// The one line that says what happened, refusals included (vplat's checks read it).
pub fn stop_line(s: &SimStats, n: &VfuCounters, end: &str, live_maps: usize) -> String {
    let l = |c: &AtomicU64| c.load(Relaxed);
    format!(
        "tlpx-sim vfio-user: stopped ({end}) at card cycle {} ({:.2} M cycles/s): config {} reads {} writes; BAR0 {} reads ({} read all ones) {} writes; DMA {} bytes read {} bytes written; refused DMA: {} reads {} writes; DMA_MAP {} ({} without fd) DMA_UNMAP {}, {live_maps} live; MSI {} signalled, {} without eventfd, {} while MSI disabled; resets {}",
        s.cycles,
        s.cycles_per_second / 1e6,
        l(&n.config_reads),
        l(&n.config_writes),
        l(&n.bar_reads),
        l(&n.bar_read_errors),
        l(&n.bar_writes),
        s.dma_read_bytes,
        s.dma_write_bytes,
        s.dma_read_faults,
        s.dma_write_faults,
        l(&n.dma_maps),
        l(&n.dma_maps_without_fd),
        l(&n.dma_unmaps),
        l(&n.msis_signalled),
        l(&n.msis_without_eventfd),
        s.msis_while_disabled,
        l(&n.resets),
    )
}
