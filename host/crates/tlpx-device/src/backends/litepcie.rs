//! A real tlpx card through LitePCIe's stock Linux driver (/dev/litepcieN).
//!
//! What the driver (litepcie/software/kernel/main.c, built for the card by
//! `make litepcie-driver`) gives user space, and so what this backend can do
//! (docs/litepcie-driver.md has the whole table against vfio and the simulator):
//!
//! - **BAR0**: only through `LITEPCIE_IOCTL_REG`, one 32-bit word per call (the driver maps BAR0
//!   in the kernel and does not offer it to mmap; Debian's `CONFIG_IO_STRICT_DEVMEM` also refuses
//!   sysfs `resource0` mmaps while the driver holds the BAR). So 32-bit accesses are exact,
//!   64-bit ones are two 32-bit accesses, low DW first (the card's 64-bit registers are built for
//!   that: `timebase.cycles_lo` latches the high half), and 8/16-bit ones are refused rather
//!   than widened (a figure of what the card saw would be wrong). The driver does not bound
//!   the offset: this backend checks it against BAR0's size from sysfs before every call.
//! - **DMA**: the driver allocates 2 x 256 buffers of 8 KiB at probe and keeps their bus
//!   addresses in the kernel; it programs the card's `pcie_dma0` itself (loop mode, an MSI every
//!   32 buffers) and lets user space mmap the buffers, start/stop the engines and loopback, and
//!   follow the hardware/software buffer counts. [`Device::alloc_dma`] is therefore
//!   [`DeviceError::Unsupported`] (no bus address to give); the driver's own DMA is the optional
//!   [`DriverDma`] capability.
//! - **Interrupts**: the driver takes the card's MSI and handles only the DMA writer/reader
//!   vectors (it updates the buffer counts and wakes poll()). [`Device::wait_interrupt`] reports
//!   those two vectors, while the driver's DMA of that direction runs through this handle, as
//!   "the driver's interrupt handler ran for it" (its hardware count moved; several MSIs may
//!   be seen as one); every other vector (software, generator, irq_timer, rt_loop, rule30) is
//!   Unsupported: the driver neither clears nor reports them.
//! - **Config space**: sysfs `/sys/bus/pci/devices/ADDR/config` (beyond 64 bytes reading needs
//!   root; writing always does).
//!
//! Which /dev/litepcieN is which card: the driver creates its nodes with `device_create`
//! without a parent, so sysfs does not link a node to its PCI function (see [`SysfsLayout`]).
//! With one card bound to the driver the link is unambiguous; with several, name both.

use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use memmap2::{MmapMut, MmapOptions};

use crate::{ClockSource, Device, DeviceDescription, DeviceError, DmaBuffer, Interrupt, Width};

const BACKEND: &str = "litepcie";
const DOC: &str = "docs/litepcie-driver.md";

pub mod abi;
mod sysfs;

use sysfs::not_loaded;
pub use sysfs::{canonical_address, parse_resource, Node, SysfsLayout};

/// Buffer counts of one DMA engine, as the driver keeps them: `hw` buffers the card has done
/// (updated by the driver's interrupt handler, every 32 buffers), `sw` buffers user space has
/// consumed (writer) or submitted (reader).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct DmaCounts {
    pub hw: i64,
    pub sw: i64,
}

/// What poll() on the node said.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct DmaReadiness {
    /// More than 2 writer buffers (card -> host) wait to be consumed.
    pub writer_data: bool,
    /// The reader (host -> card) has room for more buffers (fewer than half submitted ahead).
    pub reader_room: bool,
}

/// Which DMA engine: the card's writer (card -> host memory) or reader (host memory -> card).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Engine {
    Writer,
    Reader,
}

impl Engine {
    fn name(self) -> &'static str {
        match self {
            Engine::Writer => "writer",
            Engine::Reader => "reader",
        }
    }
}

/// The LitePCIe driver's own DMA: its ring of buffers per direction, which it programs into the
/// card's `pcie_dma0` in loop mode, and which user space maps (no bus addresses: the card's
/// own DMA-programming blocks cannot use them). Reached through
/// [`crate::Device::try_as_driver_dma`].
pub trait DriverDma {
    /// Where and how big the buffers are (the driver's LITEPCIE_IOCTL_MMAP_DMA_INFO).
    fn layout(&mut self) -> Result<abi::MmapDmaInfo, DeviceError>;
    /// Turns the card's DMA loopback (reader -> writer) on or off.
    fn set_loopback(&mut self, on: bool) -> Result<(), DeviceError>;
    /// Takes the driver's lock on an engine (and with it its ring) for this handle, or says who
    /// holds it: take it before touching the engine's buffers, which another process's running
    /// engine may be using. Released when the engine is stopped or the handle closed.
    fn claim(&mut self, engine: Engine) -> Result<(), DeviceError>;
    /// Starts (taking the driver's lock on the engine first) or stops an engine. Starting
    /// programs all the driver's buffers into the card's table and enables the engine's MSI.
    fn set_enabled(&mut self, engine: Engine, on: bool) -> Result<DmaCounts, DeviceError>;
    /// The engine's buffer counts, for the handle that started it (no change to its state;
    /// refused otherwise: the driver's count ioctl also sets the engine's enable).
    fn counts(&mut self, engine: Engine) -> Result<DmaCounts, DeviceError>;
    /// Tells the driver user space has consumed (writer) or filled (reader) buffers up to
    /// `sw_count` through the mapping.
    fn set_sw_count(&mut self, engine: Engine, sw_count: i64) -> Result<(), DeviceError>;
    /// Copies bytes out of buffer `index` (of the engine's ring) at `offset`.
    fn read_buffer(&mut self, engine: Engine, index: usize, offset: usize, dst: &mut [u8]) -> Result<(), DeviceError>;
    /// Copies bytes into buffer `index` at `offset`.
    fn write_buffer(&mut self, engine: Engine, index: usize, offset: usize, src: &[u8]) -> Result<(), DeviceError>;
    /// poll() on the node: returns when writer data or reader room is there, or after `timeout`
    /// (then both are false unless already true).
    fn poll(&mut self, timeout: Duration) -> Result<DmaReadiness, DeviceError>;
}

/// A tlpx card through /dev/litepcieN.
pub struct LitePcieDevice {
    node: PathBuf,
    file: File,
    layout: SysfsLayout,
    pci_address: String,
    bar_sizes: Vec<Option<u64>>,
    /// Engines this handle started (and holds the driver's lock on).
    writer_on: bool,
    reader_on: bool,
    locked_writer: bool,
    locked_reader: bool,
    info: Option<abi::MmapDmaInfo>,
    /// The reader's (tx, host -> card) and writer's (rx, card -> host) buffer mappings.
    maps: [Option<MmapMut>; 2],
    /// MSI vectors of the card's DMA writer and reader (tlpx-regs' constants).
    writer_vector: u32,
    reader_vector: u32,
}

impl std::fmt::Debug for LitePcieDevice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LitePcieDevice").field("node", &self.node).field("pci_address", &self.pci_address).finish()
    }
}

impl LitePcieDevice {
    /// Opens the card through the driver's node at `node` (e.g. /dev/litepcie0); its PCI
    /// function is the one bound to litepcie (an error if several are: use `open_with`).
    pub fn open(node: impl AsRef<Path>) -> Result<LitePcieDevice, DeviceError> {
        Self::open_in(SysfsLayout::default(), node.as_ref(), None)
    }

    /// Opens the card at PCI address `address` (e.g. 0000:03:00.0) through its node.
    pub fn open_pci(address: &str) -> Result<LitePcieDevice, DeviceError> {
        let layout = SysfsLayout::default();
        let node = layout.node_for(address)?;
        let address = canonical_address(address)?;
        Self::open_in(layout, &node.path, Some(address))
    }

    /// Opens `node` as the card at `address` (when several cards are bound to the driver).
    pub fn open_with(node: impl AsRef<Path>, address: &str) -> Result<LitePcieDevice, DeviceError> {
        let address = canonical_address(address)?;
        Self::open_in(SysfsLayout::default(), node.as_ref(), Some(address))
    }

    /// The first node of the driver, whichever card it is.
    pub fn open_first() -> Result<LitePcieDevice, DeviceError> {
        let layout = SysfsLayout::default();
        let Some(node) = layout.nodes()?.into_iter().next() else {
            return Err(DeviceError::NoSuchDevice(not_loaded(&layout)));
        };
        Self::open_in(layout, &node.path, None)
    }

    /// `open`/`open_with` against another /dev and /sys (tests).
    pub fn open_in(layout: SysfsLayout, node: &Path, address: Option<String>) -> Result<LitePcieDevice, DeviceError> {
        let file = open_node(&layout, node)?;
        let pci_address = match address {
            Some(a) => a,
            None => layout.function_for(node)?,
        };
        let bar_sizes = layout.bar_sizes(&pci_address)?;
        if bar_sizes.first().copied().flatten().is_none() {
            return Err(DeviceError::Backend(format!(
                "{pci_address} has no BAR0 in sysfs: it is not a LitePCIe card (node {})",
                node.display()
            )));
        }
        Ok(LitePcieDevice {
            node: node.to_owned(),
            file,
            layout,
            pci_address,
            bar_sizes,
            writer_on: false,
            reader_on: false,
            locked_writer: false,
            locked_reader: false,
            info: None,
            maps: [None, None],
            writer_vector: tlpx_regs::constants::MSI_PCIE_DMA0_WRITER as u32,
            reader_vector: tlpx_regs::constants::MSI_PCIE_DMA0_READER as u32,
        })
    }

    /// The node this device was opened through.
    pub fn node(&self) -> &Path {
        &self.node
    }

    fn ioctl<T>(&self, what: &str, request: u64, arg: &mut T) -> Result<(), DeviceError> {
        // SAFETY: `arg` is a live, exclusively borrowed #[repr(C)] struct of the size encoded in
        // `request` (tests/litepcie_abi.rs checks both against litepcie.h); the driver copies at
        // most that many bytes in and out.
        let rc = unsafe { libc::ioctl(self.file.as_raw_fd(), request as _, arg as *mut T) };
        if rc < 0 {
            let e = std::io::Error::last_os_error();
            let hint = if e.raw_os_error() == Some(libc::ENOTTY) {
                " (this driver does not implement it: was it built for this card by `make litepcie-driver`?)"
            } else {
                ""
            };
            return Err(DeviceError::Io { context: format!("{}: {what}{hint}", self.node.display()), source: e });
        }
        Ok(())
    }

    fn check_bar(&self, bar: u8, offset: u64, bytes: u64) -> Result<(), DeviceError> {
        if bar != 0 {
            return Err(DeviceError::Unsupported {
                backend: BACKEND.into(),
                what: format!("access BAR{bar}"),
                instead: "the LitePCIe driver maps BAR0 only (the tlpx card has no other BAR)".into(),
            });
        }
        let size = self.bar_sizes[0].unwrap_or(0);
        if offset.checked_add(bytes).is_none_or(|end| end > size) {
            return Err(DeviceError::InvalidArgument(format!(
                "BAR0 offset 0x{offset:x} + {bytes} bytes is outside BAR0 of {size} bytes (0x0..0x{size:x})"
            )));
        }
        if !offset.is_multiple_of(4) {
            return Err(DeviceError::InvalidArgument(format!(
                "BAR0 offset 0x{offset:x} is not 4-byte aligned: the LitePCIe driver's register ioctl moves aligned 32-bit words"
            )));
        }
        Ok(())
    }

    fn narrow(width: Width, what: &str) -> DeviceError {
        DeviceError::Unsupported {
            backend: BACKEND.into(),
            what: format!("make a {}-bit BAR {what}", width.bytes() * 8),
            instead: "the LitePCIe driver's register ioctl (LITEPCIE_IOCTL_REG) moves whole 32-bit words; use 32- \
                      or 64-bit accesses, or the vfio backend for byte and half-word accesses"
                .into(),
        }
    }

    fn reg_read(&self, offset: u64) -> Result<u32, DeviceError> {
        let mut m = abi::Reg { addr: offset as u32, val: 0, is_write: 0 };
        self.ioctl(&format!("register read at BAR0 0x{offset:x}"), abi::LITEPCIE_IOCTL_REG, &mut m)?;
        Ok(m.val)
    }

    fn reg_write(&self, offset: u64, value: u32) -> Result<(), DeviceError> {
        let mut m = abi::Reg { addr: offset as u32, val: value, is_write: 1 };
        self.ioctl(&format!("register write at BAR0 0x{offset:x}"), abi::LITEPCIE_IOCTL_REG, &mut m)
    }

    fn engine_ioctl(&self, engine: Engine, enable: bool) -> Result<DmaCounts, DeviceError> {
        let mut m = abi::DmaEngine { enable: enable as u8, hw_count: 0, sw_count: 0 };
        let request = match engine {
            Engine::Writer => abi::LITEPCIE_IOCTL_DMA_WRITER,
            Engine::Reader => abi::LITEPCIE_IOCTL_DMA_READER,
        };
        self.ioctl(&format!("DMA {} ioctl", engine.name()), request, &mut m)?;
        Ok(DmaCounts { hw: m.hw_count, sw: m.sw_count })
    }

    fn is_on(&self, engine: Engine) -> bool {
        match engine {
            Engine::Writer => self.writer_on,
            Engine::Reader => self.reader_on,
        }
    }

    fn lock(&mut self, engine: Engine, take: bool) -> Result<bool, DeviceError> {
        let mut m = abi::Lock::default();
        match (engine, take) {
            (Engine::Writer, true) => m.dma_writer_request = 1,
            (Engine::Writer, false) => m.dma_writer_release = 1,
            (Engine::Reader, true) => m.dma_reader_request = 1,
            (Engine::Reader, false) => m.dma_reader_release = 1,
        }
        self.ioctl(&format!("DMA {} lock", engine.name()), abi::LITEPCIE_IOCTL_LOCK, &mut m)?;
        Ok(match engine {
            Engine::Writer => m.dma_writer_status != 0,
            Engine::Reader => m.dma_reader_status != 0,
        })
    }

    fn mapping(&mut self, engine: Engine) -> Result<&mut MmapMut, DeviceError> {
        let info = self.layout()?;
        // The driver maps the reader's buffers ("tx") at offset 0, the writer's ("rx") after them.
        let (slot, offset, size, count) = match engine {
            Engine::Reader => (0, info.dma_tx_buf_offset, info.dma_tx_buf_size, info.dma_tx_buf_count),
            Engine::Writer => (1, info.dma_rx_buf_offset, info.dma_rx_buf_size, info.dma_rx_buf_count),
        };
        if self.maps[slot].is_none() {
            let len = size
                .checked_mul(count)
                .filter(|&l| l > 0 && l <= 1 << 30)
                .ok_or_else(|| DeviceError::Backend(format!("the driver reports {count} DMA buffers of {size} bytes: not mappable")))?;
            // SAFETY: the driver's mmap maps its DMA buffers (kernel memory that stays allocated
            // while the device is bound); they are shared with the card, and every access here
            // is a volatile copy through `read_buffer`/`write_buffer`.
            let map = unsafe { MmapOptions::new().offset(offset).len(len as usize).map_mut(&self.file) }.map_err(|e| DeviceError::Io {
                context: format!("{}: cannot mmap the driver's {} DMA buffers", self.node.display(), engine.name()),
                source: e,
            })?;
            self.maps[slot] = Some(map);
        }
        Ok(self.maps[slot].as_mut().expect("mapped just above"))
    }

    fn buffer_range(&mut self, engine: Engine, index: usize, offset: usize, n: usize) -> Result<usize, DeviceError> {
        let info = self.layout()?;
        let (size, count) = match engine {
            Engine::Reader => (info.dma_tx_buf_size as usize, info.dma_tx_buf_count as usize),
            Engine::Writer => (info.dma_rx_buf_size as usize, info.dma_rx_buf_count as usize),
        };
        if index >= count {
            return Err(DeviceError::InvalidArgument(format!(
                "DMA {} buffer {index} does not exist: the driver has buffers 0..{count}",
                engine.name()
            )));
        }
        if offset.checked_add(n).is_none_or(|end| end > size) {
            return Err(DeviceError::InvalidArgument(format!("{n} bytes at offset {offset} are outside a DMA buffer of {size} bytes")));
        }
        Ok(index * size + offset)
    }

    fn unsupported_dma() -> DeviceError {
        DeviceError::Unsupported {
            backend: BACKEND.into(),
            what: "allocate DMA buffers with bus addresses".into(),
            instead: "the LitePCIe driver owns its DMA buffers and keeps their bus addresses in the kernel, so the \
                      card's blocks that write or read host memory cannot be given one: selftest's dma-loopback, bw, \
                      lat, bench, spy capture, irq, loop and rule30's batch mode need the vfio backend. The driver's \
                      own DMA (its buffer rings, loopback) is Device::try_as_driver_dma"
                .into(),
        }
    }
}

fn open_node(layout: &SysfsLayout, node: &Path) -> Result<File, DeviceError> {
    match OpenOptions::new().read(true).write(true).custom_flags(libc::O_CLOEXEC).open(node) {
        Ok(f) => Ok(f),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            let others = layout.nodes().unwrap_or_default();
            if others.is_empty() {
                Err(DeviceError::NoSuchDevice(format!("{}: {}", node.display(), not_loaded(layout))))
            } else {
                Err(DeviceError::NoSuchDevice(format!(
                    "{} does not exist; the LitePCIe driver's nodes are {}",
                    node.display(),
                    others.iter().map(|n| n.path.display().to_string()).collect::<Vec<_>>().join(", ")
                )))
            }
        }
        Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied => Err(DeviceError::Io {
            context: format!(
                "cannot open {}: the driver creates its nodes root-only; run as root, chmod them (init.sh does) or \
                 add the udev rule of {DOC}",
                node.display()
            ),
            source: e,
        }),
        Err(e) => Err(DeviceError::Io { context: format!("cannot open {}", node.display()), source: e }),
    }
}

impl Drop for LitePcieDevice {
    fn drop(&mut self) {
        // Closing the node makes the driver stop the engines this handle locked; stop the ones it
        // started without a lock too, so the card never keeps writing host memory for nobody.
        for engine in [Engine::Writer, Engine::Reader] {
            if self.is_on(engine) {
                let _ = self.engine_ioctl(engine, false);
            }
        }
    }
}

impl DriverDma for LitePcieDevice {
    fn layout(&mut self) -> Result<abi::MmapDmaInfo, DeviceError> {
        if let Some(info) = self.info {
            return Ok(info);
        }
        let mut info = abi::MmapDmaInfo::default();
        self.ioctl("DMA buffer information", abi::LITEPCIE_IOCTL_MMAP_DMA_INFO, &mut info)?;
        self.info = Some(info);
        Ok(info)
    }

    fn set_loopback(&mut self, on: bool) -> Result<(), DeviceError> {
        let mut m = abi::Dma { loopback_enable: on as u8 };
        self.ioctl("DMA loopback", abi::LITEPCIE_IOCTL_DMA, &mut m)
    }

    fn claim(&mut self, engine: Engine) -> Result<(), DeviceError> {
        let locked = match engine {
            Engine::Writer => self.locked_writer,
            Engine::Reader => self.locked_reader,
        };
        if !locked {
            if !self.lock(engine, true)? {
                return Err(DeviceError::Backend(format!(
                    "the LitePCIe driver's DMA {} of {} is locked by another process: stop it first",
                    engine.name(),
                    self.node.display()
                )));
            }
            match engine {
                Engine::Writer => self.locked_writer = true,
                Engine::Reader => self.locked_reader = true,
            }
        }
        Ok(())
    }

    fn set_enabled(&mut self, engine: Engine, on: bool) -> Result<DmaCounts, DeviceError> {
        if on {
            self.claim(engine)?;
        }
        let counts = self.engine_ioctl(engine, on)?;
        match engine {
            Engine::Writer => self.writer_on = on,
            Engine::Reader => self.reader_on = on,
        }
        if !on {
            let locked = match engine {
                Engine::Writer => std::mem::take(&mut self.locked_writer),
                Engine::Reader => std::mem::take(&mut self.locked_reader),
            };
            if locked {
                self.lock(engine, false)?;
            }
        }
        Ok(counts)
    }

    fn counts(&mut self, engine: Engine) -> Result<DmaCounts, DeviceError> {
        // The driver's ioctl starts or stops the engine whenever the enable it is given differs
        // from the engine's state: only the handle that started the engine may ask (asking with
        // "off" from another handle would stop someone else's DMA).
        if !self.is_on(engine) {
            return Err(DeviceError::Unsupported {
                backend: BACKEND.into(),
                what: format!("read the DMA {} counts of an engine this handle did not start", engine.name()),
                instead: "the driver's count ioctl also sets the engine's enable: start it with set_enabled first".into(),
            });
        }
        self.engine_ioctl(engine, true)
    }

    fn set_sw_count(&mut self, engine: Engine, sw_count: i64) -> Result<(), DeviceError> {
        let mut m = abi::MmapDmaUpdate { sw_count };
        let request = match engine {
            Engine::Writer => abi::LITEPCIE_IOCTL_MMAP_DMA_WRITER_UPDATE,
            Engine::Reader => abi::LITEPCIE_IOCTL_MMAP_DMA_READER_UPDATE,
        };
        self.ioctl(&format!("DMA {} software count", engine.name()), request, &mut m)
    }

    fn read_buffer(&mut self, engine: Engine, index: usize, offset: usize, dst: &mut [u8]) -> Result<(), DeviceError> {
        let at = self.buffer_range(engine, index, offset, dst.len())?;
        let base = self.mapping(engine)?.as_ptr();
        for (i, b) in dst.iter_mut().enumerate() {
            // SAFETY: `buffer_range` checked at+i lies inside the mapping, which lives in self.
            *b = unsafe { std::ptr::read_volatile(base.add(at + i)) };
        }
        Ok(())
    }

    fn write_buffer(&mut self, engine: Engine, index: usize, offset: usize, src: &[u8]) -> Result<(), DeviceError> {
        let at = self.buffer_range(engine, index, offset, src.len())?;
        let base = self.mapping(engine)?.as_mut_ptr();
        for (i, b) in src.iter().enumerate() {
            // SAFETY: as in read_buffer.
            unsafe { std::ptr::write_volatile(base.add(at + i), *b) };
        }
        Ok(())
    }

    fn poll(&mut self, timeout: Duration) -> Result<DmaReadiness, DeviceError> {
        let mut fd = libc::pollfd { fd: self.file.as_raw_fd(), events: libc::POLLIN | libc::POLLOUT, revents: 0 };
        let ms = timeout.as_millis().min(i32::MAX as u128) as i32;
        // SAFETY: one valid pollfd, the count says so.
        let rc = unsafe { libc::poll(&mut fd, 1, ms) };
        if rc < 0 {
            let e = std::io::Error::last_os_error();
            if e.kind() == std::io::ErrorKind::Interrupted {
                return Ok(DmaReadiness { writer_data: false, reader_room: false });
            }
            return Err(DeviceError::Io { context: format!("poll on {}", self.node.display()), source: e });
        }
        Ok(DmaReadiness { writer_data: fd.revents & libc::POLLIN != 0, reader_room: fd.revents & libc::POLLOUT != 0 })
    }
}

impl Device for LitePcieDevice {
    /// The stock driver offers BAR0 only through its register ioctl.
    fn bar_path(&self) -> crate::BarPath {
        crate::BarPath::Syscall
    }

    /// The driver's own DMA: always there on this backend.
    fn try_as_driver_dma(&mut self) -> Option<&mut dyn DriverDma> {
        Some(self)
    }

    fn description(&self) -> DeviceDescription {
        DeviceDescription {
            backend: BACKEND.into(),
            location: self.node.display().to_string(),
            pci_address: self.pci_address.clone(),
            bar_sizes: self.bar_sizes.clone(),
        }
    }

    fn bar_read(&mut self, bar: u8, offset: u64, width: Width) -> Result<u64, DeviceError> {
        match width {
            Width::W32 => {
                self.check_bar(bar, offset, 4)?;
                Ok(u64::from(self.reg_read(offset)?))
            }
            Width::W64 => {
                // Two words, low first: what the card's 64-bit registers expect of a split read.
                self.check_bar(bar, offset, 8)?;
                let low = self.reg_read(offset)?;
                let high = self.reg_read(offset + 4)?;
                Ok(u64::from(high) << 32 | u64::from(low))
            }
            narrow => Err(Self::narrow(narrow, "read")),
        }
    }

    fn bar_write(&mut self, bar: u8, offset: u64, width: Width, value: u64) -> Result<(), DeviceError> {
        match width {
            Width::W32 => {
                self.check_bar(bar, offset, 4)?;
                self.reg_write(offset, value as u32)
            }
            Width::W64 => {
                self.check_bar(bar, offset, 8)?;
                self.reg_write(offset, value as u32)?;
                self.reg_write(offset + 4, (value >> 32) as u32)
            }
            narrow => Err(Self::narrow(narrow, "write")),
        }
    }

    fn bar_read_block(&mut self, bar: u8, offset: u64, len: usize) -> Result<Vec<u8>, DeviceError> {
        block_check(offset, len)?;
        self.check_bar(bar, offset, len as u64)?;
        let mut out = Vec::with_capacity(len);
        for i in 0..len as u64 / 4 {
            out.extend_from_slice(&self.reg_read(offset + 4 * i)?.to_le_bytes());
        }
        Ok(out)
    }

    fn bar_write_block(&mut self, bar: u8, offset: u64, data: &[u8]) -> Result<(), DeviceError> {
        block_check(offset, data.len())?;
        self.check_bar(bar, offset, data.len() as u64)?;
        for (i, word) in data.chunks_exact(4).enumerate() {
            let v = u32::from_le_bytes([word[0], word[1], word[2], word[3]]);
            self.reg_write(offset + 4 * i as u64, v)?;
        }
        Ok(())
    }

    fn config_read(&mut self, offset: u16, len: u16) -> Result<Vec<u8>, DeviceError> {
        config_check(offset, len as usize)?;
        let path = self.layout.config_path(&self.pci_address);
        let mut file = File::open(&path).map_err(|e| DeviceError::Io { context: format!("cannot open {}", path.display()), source: e })?;
        file.seek(SeekFrom::Start(u64::from(offset)))
            .map_err(|e| DeviceError::Io { context: format!("cannot seek in {}", path.display()), source: e })?;
        let mut out = vec![0u8; len as usize];
        let mut got = 0;
        while got < out.len() {
            match file.read(&mut out[got..]) {
                Ok(0) => break,
                Ok(n) => got += n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(DeviceError::Io { context: format!("cannot read {}", path.display()), source: e }),
            }
        }
        if got < out.len() {
            return Err(DeviceError::Io {
                context: format!(
                    "{} gave {} of the {len} bytes at 0x{offset:x}: beyond the first 64 bytes, config space is readable by \
                     root only",
                    path.display(),
                    got
                ),
                source: std::io::Error::from(std::io::ErrorKind::PermissionDenied),
            });
        }
        Ok(out)
    }

    fn config_write(&mut self, offset: u16, data: &[u8]) -> Result<(), DeviceError> {
        config_check(offset, data.len())?;
        let path = self.layout.config_path(&self.pci_address);
        let mut file = OpenOptions::new().write(true).open(&path).map_err(|e| DeviceError::Io {
            context: format!("cannot open {} for writing (writing config space needs root)", path.display()),
            source: e,
        })?;
        let n = file
            .write_at(data, u64::from(offset))
            .map_err(|e| DeviceError::Io { context: format!("cannot write {}", path.display()), source: e })?;
        file.flush().ok();
        if n != data.len() {
            return Err(DeviceError::Backend(format!("{} took {n} of the {} bytes at 0x{offset:x}", path.display(), data.len())));
        }
        Ok(())
    }

    fn alloc_dma(&mut self, len: usize) -> Result<DmaBuffer, DeviceError> {
        let _ = len;
        Err(Self::unsupported_dma())
    }

    fn free_dma(&mut self, buffer: DmaBuffer) -> Result<(), DeviceError> {
        Err(DeviceError::InvalidArgument(format!("DMA buffer {} was not allocated by the litepcie backend (it allocates none)", buffer.id)))
    }

    fn wait_interrupt(&mut self, vector_mask: u32, timeout: Duration) -> Result<Option<Interrupt>, DeviceError> {
        let mut watched = Vec::new();
        for vector in 0..32u32 {
            if vector_mask & (1 << vector) == 0 {
                continue;
            }
            let engine = if vector == self.writer_vector {
                Engine::Writer
            } else if vector == self.reader_vector {
                Engine::Reader
            } else {
                return Err(DeviceError::Unsupported {
                    backend: BACKEND.into(),
                    what: format!("wait for MSI vector {vector}"),
                    instead: format!(
                        "the LitePCIe driver takes the card's MSI itself and handles only the DMA writer and reader \
                         vectors ({} and {}); it neither reports nor clears the others. Use the vfio backend for the \
                         interrupts of the tlpx blocks",
                        self.writer_vector, self.reader_vector
                    ),
                });
            };
            if !self.is_on(engine) {
                return Err(DeviceError::Unsupported {
                    backend: BACKEND.into(),
                    what: format!("wait for MSI vector {vector} (DMA {}) while its DMA is stopped", engine.name()),
                    instead: format!(
                        "the driver enables that vector only while its own DMA {} runs: start it with \
                         try_as_driver_dma().set_enabled(Engine::{}, true); for DMA you program yourself use the vfio backend",
                        engine.name(),
                        if engine == Engine::Writer { "Writer" } else { "Reader" }
                    ),
                });
            }
            watched.push((vector, engine, self.counts(engine)?.hw));
        }
        if watched.is_empty() {
            return Err(DeviceError::InvalidArgument("wait_interrupt needs at least one vector in its mask, got 0".into()));
        }
        // The hardware count moves only in the driver's interrupt handler, when it took that
        // engine's MSI: a change is an interrupt the host received (one or more).
        let start = Instant::now();
        loop {
            for &(vector, engine, before) in &watched {
                if self.counts(engine)?.hw != before {
                    return Ok(Some(Interrupt { vector, card_cycle: None }));
                }
            }
            let left = timeout.saturating_sub(start.elapsed());
            if left.is_zero() {
                return Ok(None);
            }
            std::thread::sleep(left.min(Duration::from_micros(50)));
        }
    }

    fn idle(&mut self, duration: Duration) -> Result<(), DeviceError> {
        std::thread::sleep(duration);
        Ok(())
    }

    fn clock_source(&self) -> ClockSource {
        ClockSource::Host
    }
}

fn block_check(offset: u64, len: usize) -> Result<(), DeviceError> {
    if !(1..=64).contains(&len) {
        return Err(DeviceError::InvalidArgument(format!("a block access moves 1..=64 bytes, not {len}")));
    }
    if !len.is_multiple_of(4) || !offset.is_multiple_of(4) {
        return Err(DeviceError::Unsupported {
            backend: BACKEND.into(),
            what: format!("make a {len}-byte block access at BAR0 0x{offset:x}"),
            instead: "the LitePCIe driver's register ioctl moves aligned 32-bit words, one per call: blocks must be \
                      whole aligned words (and become one TLP per word); use the vfio backend for byte-exact or \
                      single-TLP blocks"
                .into(),
        });
    }
    Ok(())
}

fn config_check(offset: u16, len: usize) -> Result<(), DeviceError> {
    if len == 0 || usize::from(offset) + len > 4096 {
        return Err(DeviceError::InvalidArgument(format!(
            "config space access of {len} bytes at 0x{offset:x}: must be 1.. bytes within 0..4096"
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ioctl_numbers_have_the_asm_generic_layout() {
        // _IOWR('S', 0, 12-byte struct) = 3<<30 | 12<<16 | 'S'<<8 | 0
        assert_eq!(abi::LITEPCIE_IOCTL_REG, 0xC00C_5300);
        assert_eq!(abi::LITEPCIE_IOCTL_MMAP_DMA_INFO, (2 << 30) | (48 << 16) | (0x53 << 8) | 24);
    }

    #[test]
    fn narrow_blocks_are_refused_not_widened() {
        assert!(block_check(0x100, 8).is_ok());
        let e = block_check(0x101, 4).expect_err("an error").to_string();
        assert!(e.contains("cannot make a 4-byte block access at BAR0 0x101"), "{e}");
        assert!(block_check(0x100, 6).is_err());
        assert!(block_check(0x100, 0).is_err());
    }
}
