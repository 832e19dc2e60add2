//! The vfio backend: a PCI function bound to vfio-pci, driven from user space through the
//! Linux VFIO ioctls (written on libc; the ABI is in [`ffi`]).
//!
//! Opening a function ([`VfioDevice::open_with`]):
//! 1. its IOMMU group from /sys/bus/pci/devices/ADDR/iommu_group (none: the IOMMU is off);
//! 2. /dev/vfio/GROUP, which must be *viable* (every function of the group bound to
//!    vfio-pci, pci-stub or nothing; bridges excepted);
//! 3. a container (/dev/vfio/vfio) holding the group, with the type1 IOMMU (v2 preferred);
//! 4. the device fd (VFIO_GROUP_GET_DEVICE_FD), its regions (BARs, config space) and IRQs.
//!
//! BARs are mmapped through the device fd's region (uncached), or — for a prefetchable BAR
//! the caller asks for in [`VfioOptions::write_combining`] — through sysfs' resourceN_wc
//! (write-combining; vfio itself only maps uncached). A region vfio will not mmap is
//! reached with pread/pwrite on the device fd. DMA buffers are anonymous memory mapped
//! into the IOMMU at IOVAs from [`iova::IovaAllocator`]; the card sees the IOVA as bus
//! address. Interrupts are MSI or MSI-X vectors signalled through one eventfd each.
//! See docs/vfio.md.

pub mod bind;
pub mod ffi;
pub mod iova;
mod mmio;
mod sys;
mod vectors;

use std::collections::HashMap;
use std::ffi::CString;
use std::ops::Range;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::host_memory::{DmaPlacement, PageSize};
use crate::{BarPath, ClockSource, Device, DeviceDescription, DeviceError, DmaBuffer, Interrupt, Width};
use bind::Sysfs;
use ffi::*;
use iova::IovaAllocator;
use mmio::{load, load16, piece, store, store16, store_fence, width_of};
pub use sys::parse_iova_ranges;
use sys::{errno, io_err, ioctl_ptr, ioctl_val, iommu_info, open_rw, page_size, pread_exact, pwrite_all, region_info, set_irqs_eventfd};

const BACKEND: &str = "vfio";

/// How the interrupts of the function are set up.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum IrqMode {
    /// MSI-X when the function has it, else MSI, else none.
    Auto,
    Msi,
    MsiX,
    /// No interrupts (wait_interrupt says so).
    None,
}

/// Options of [`VfioDevice::open_with`].
#[derive(Debug, Clone)]
pub struct VfioOptions {
    /// BARs to map write-combining (each must be a prefetchable memory BAR; asking for a
    /// non-prefetchable one is an `Unsupported` error). The others are mapped uncached.
    pub write_combining: Vec<u8>,
    /// The IOVAs DMA buffers may get (end exclusive), intersected with what the IOMMU
    /// reports. Narrow it for devices that cannot address everything (edu: below 2^28).
    pub iova_window: Range<u64>,
    pub irq_mode: IrqMode,
    /// At most this many vectors are enabled.
    pub max_vectors: u32,
}

impl Default for VfioOptions {
    fn default() -> VfioOptions {
        VfioOptions {
            write_combining: Vec::new(),
            // From 1 MiB (no buffer at bus address 0, nothing in the legacy low megabyte) to
            // 4 GiB: the tlpx card's requesters (LitePCIe endpoint and DMA, generator, spy and
            // timer rings) are built with 32-bit addresses. The IOMMU lets us choose.
            iova_window: 0x10_0000..1 << 32,
            irq_mode: IrqMode::Auto,
            max_vectors: 32,
        }
    }
}

/// How a BAR is reached.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum BarAccess {
    /// mmap of the vfio region: uncached.
    MmapUncached,
    /// mmap of sysfs' resourceN_wc: write-combining.
    MmapWriteCombining,
    /// pread/pwrite on the device fd (I/O BARs, regions vfio does not let us mmap).
    ReadWrite,
}

/// An mmap of device memory, unmapped on drop.
struct Mapping {
    ptr: *mut u8,
    len: usize,
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: ptr/len are exactly what mmap returned; nothing uses the mapping after drop.
        unsafe { libc::munmap(self.ptr as *mut libc::c_void, self.len) };
    }
}

struct Region {
    size: u64,
    /// Offset of the region in the device fd.
    offset: u64,
    flags: u32,
    access: BarAccess,
    map: Option<Mapping>,
}

/// Anonymous memory behind a DMA buffer, unmapped when the last reference goes.
struct AnonMemory {
    ptr: *mut u8,
    len: usize,
}

// SAFETY: plain memory owned by this value; it is only unmapped in drop.
unsafe impl Send for AnonMemory {}
// SAFETY: as above; concurrent access to the bytes goes through DmaBuffer's volatile accessors.
unsafe impl Sync for AnonMemory {}

impl Drop for AnonMemory {
    fn drop(&mut self) {
        // SAFETY: ptr/len are what mmap returned; the IOMMU mapping was removed by free_dma
        // (or by closing the container, which drops after every buffer it could reach).
        unsafe { libc::munmap(self.ptr as *mut libc::c_void, self.len) };
    }
}

/// Anonymous memory for a DMA buffer of `size` bytes (a multiple of the page size asked),
/// on the pages and the node `placement` asks for, every page faulted in before the IOMMU
/// mapping pins it.
fn map_dma_memory(size: u64, placement: DmaPlacement) -> Result<AnonMemory, DeviceError> {
    let page = placement.page_size;
    let huge = match page {
        PageSize::Base4k => 0,
        // MAP_HUGE_SHIFT is 26: the page size's log2 goes in the flags' bits 26..31.
        PageSize::Huge2m => libc::MAP_HUGETLB | (21 << 26),
        PageSize::Huge1g => libc::MAP_HUGETLB | (30 << 26),
    };
    // Pages are faulted in after the NUMA policy is set (touch_pages), not by MAP_POPULATE.
    let populate = if placement.numa_node.is_some() { 0 } else { libc::MAP_POPULATE };
    // SAFETY: a fresh private anonymous mapping; the result is checked.
    let ptr = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            size as usize,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | populate | huge,
            -1,
            0,
        )
    };
    if ptr == libc::MAP_FAILED {
        let e = errno();
        if let Some(dir) = page.hugepages_dir() {
            let count =
                |f: &str| std::fs::read_to_string(format!("{dir}/{f}")).map(|t| t.trim().to_string()).unwrap_or_else(|_| "?".into());
            return Err(DeviceError::Backend(format!(
                "no {} huge pages for a DMA buffer of {size} bytes ({e}): {dir} has nr_hugepages {} and free_hugepages {}; \
                 reserve them as root (echo N > {dir}/nr_hugepages, or hugepagesz= hugepages= on the kernel command line)",
                page.name(),
                count("nr_hugepages"),
                count("free_hugepages")
            )));
        }
        return Err(io_err(format!("mmap of {size} bytes for a DMA buffer"), e));
    }
    let memory = AnonMemory { ptr: ptr as *mut u8, len: size as usize };
    if let Some(node) = placement.numa_node {
        crate::host_memory::bind_to_node(memory.ptr, memory.len, node)?;
        // SAFETY: our fresh mapping, written by nobody else yet.
        unsafe { crate::host_memory::populate(memory.ptr, memory.len, page, node) }?;
    }
    Ok(memory)
}

/// "4 KiB, 2 MiB, 1 GiB" from an iova_pgsizes bitmap.
fn page_sizes_text(bitmap: u64) -> String {
    let sizes: Vec<String> = [4096u64, 2 << 20, 1 << 30].iter().filter(|&&p| bitmap & p != 0).map(|&p| human_size(p)).collect();
    if sizes.is_empty() {
        format!("none of 4 KiB, 2 MiB, 1 GiB (bitmap {bitmap:#x})")
    } else {
        sizes.join(", ")
    }
}

struct DmaMapping {
    iova: u64,
    size: u64,
}

struct Irqs {
    index: u32,
    kind: &'static str,
    fds: Vec<OwnedFd>,
    /// Signals counted by an eventfd read but not yet returned (interrupts that coalesced).
    pending: Vec<u64>,
}

/// A PCI function bound to vfio-pci.
pub struct VfioDevice {
    // Field order is drop order: mappings and eventfds go before the device, the device
    // before its group, the group before the container.
    regions: Vec<Option<Region>>,
    config: Region,
    irqs: Option<Irqs>,
    device: OwnedFd,
    /// Held open: closing the group fd would release the group from the container.
    _group: OwnedFd,
    container: OwnedFd,
    address: String,
    group_id: u32,
    device_flags: u32,
    iommu_type: u64,
    iova_ranges: Vec<(u64, u64)>,
    iova: IovaAllocator,
    dma: HashMap<u64, DmaMapping>,
    next_dma_id: u64,
    /// BAR accesses by pread/pwrite even where a mapping exists ([`BarPath::Syscall`]).
    syscall_path: bool,
    /// The IOVA page sizes the IOMMU offers (VFIO_IOMMU_GET_INFO's iova_pgsizes bitmap).
    iova_pgsizes: u64,
    /// Where later buffers go: NUMA node and page size (`set_dma_placement`).
    placement: DmaPlacement,
}

// SAFETY: the raw pointers are mappings owned by this value; the device is used from one
// thread at a time (&mut self), as the Device trait requires.
unsafe impl Send for VfioDevice {}

fn human_size(n: u64) -> String {
    if n >= 1 << 30 && n.is_multiple_of(1 << 30) {
        format!("{} GiB", n >> 30)
    } else if n >= 1 << 20 && n.is_multiple_of(1 << 20) {
        format!("{} MiB", n >> 20)
    } else if n >= 1 << 10 && n.is_multiple_of(1 << 10) {
        format!("{} KiB", n >> 10)
    } else {
        format!("{n} B")
    }
}

/// Flags of a BAR from sysfs' `resource` file (IORESOURCE_*), if readable.
fn resource_flags(sysfs: &Sysfs, addr: &str, bar: u8) -> Option<u64> {
    let text = std::fs::read_to_string(sysfs.device_dir(addr).join("resource")).ok()?;
    let line = text.lines().nth(bar as usize)?;
    let flags = line.split_whitespace().nth(2)?;
    u64::from_str_radix(flags.trim_start_matches("0x"), 16).ok()
}

const IORESOURCE_IO: u64 = 0x100;
const IORESOURCE_MEM: u64 = 0x200;
const IORESOURCE_PREFETCH: u64 = 0x2000;

/// The function's IOMMU group (/dev/vfio/GROUP), refused unless it is viable (every
/// function in it bound to vfio-pci or to no driver), each failure with what to do.
fn open_group(sysfs: &Sysfs, addr: &str, group_id: u32) -> Result<OwnedFd, DeviceError> {
    let group_path = format!("/dev/vfio/{group_id}");
    let group = open_rw(Path::new(&group_path)).map_err(|e| match e.kind() {
        std::io::ErrorKind::PermissionDenied => DeviceError::Backend(format!(
            "permission denied opening {group_path} (IOMMU group {group_id} of {addr}): run as root, or give \
             your user the device node (e.g. a udev rule: SUBSYSTEM==\"vfio\", OWNER=\"you\") and a memlock \
             limit (ulimit -l) large enough for the DMA buffers"
        )),
        std::io::ErrorKind::NotFound => DeviceError::Backend(format!(
            "{group_path} does not exist although {addr} is in IOMMU group {group_id}: is the vfio module loaded \
             (modprobe vfio-pci) and /dev populated (devtmpfs/udev)?"
        )),
        _ if e.raw_os_error() == Some(libc::EBUSY) => DeviceError::Backend(format!(
            "{group_path} is busy: another process (QEMU, another tlpx) holds IOMMU group {group_id} of {addr}; \
             vfio lets one process own a group at a time"
        )),
        _ => io_err(format!("opening {group_path} (IOMMU group of {addr})"), e),
    })?;
    let mut status = vfio_group_status { argsz: argsz::<vfio_group_status>(), flags: 0 };
    // SAFETY: VFIO_GROUP_GET_STATUS fills a vfio_group_status of argsz bytes.
    unsafe { ioctl_ptr(group.as_raw_fd(), VFIO_GROUP_GET_STATUS, &mut status) }
        .map_err(|e| io_err(format!("VFIO_GROUP_GET_STATUS on {group_path}"), e))?;
    if status.flags & VFIO_GROUP_FLAGS_VIABLE == 0 {
        let members = sysfs.group_members(group_id);
        let blocking: Vec<String> = members
            .iter()
            .filter(|m| m.address != addr && m.blocks_vfio())
            .map(|m| format!("{} ({})", m.address, m.driver.as_deref().unwrap_or("no driver")))
            .collect();
        return Err(DeviceError::Backend(format!(
            "IOMMU group {group_id} of {addr} is not viable: every function in a group must be bound to vfio-pci \
             (or to no driver) before vfio lets one of them be used. Bound to host drivers: {}. Bind them with \
             `tlpx vfio bind ADDR` (they are unusable by the host meanwhile), or put the card in a slot with its \
             own group (behind a port with ACS)",
            if blocking.is_empty() { "none found in sysfs (see /sys/kernel/iommu_groups/N/devices)".into() } else { blocking.join(", ") }
        )));
    }
    Ok(group)
}

/// A container (/dev/vfio/vfio) holding `group`, with the type1 IOMMU (v2 preferred); its
/// fd and the IOMMU type set.
fn open_container(group: &OwnedFd, group_id: u32) -> Result<(OwnedFd, u64), DeviceError> {
    let container = open_rw(Path::new("/dev/vfio/vfio")).map_err(|e| match e.kind() {
        std::io::ErrorKind::PermissionDenied => DeviceError::Backend(
            "permission denied opening /dev/vfio/vfio (the vfio container): run as root or give your user access".into(),
        ),
        _ => io_err("opening /dev/vfio/vfio (is the vfio module loaded?)".into(), e),
    })?;
    let cfd = container.as_raw_fd();
    let api = ioctl_val(cfd, VFIO_GET_API_VERSION, 0).map_err(|e| io_err("VFIO_GET_API_VERSION".into(), e))?;
    if api != VFIO_API_VERSION {
        return Err(DeviceError::Backend(format!("the kernel's vfio speaks API version {api}, this tlpx speaks {VFIO_API_VERSION}")));
    }
    let iommu_type = if ioctl_val(cfd, VFIO_CHECK_EXTENSION, VFIO_TYPE1V2_IOMMU).unwrap_or(0) == 1 {
        VFIO_TYPE1V2_IOMMU
    } else if ioctl_val(cfd, VFIO_CHECK_EXTENSION, VFIO_TYPE1_IOMMU).unwrap_or(0) == 1 {
        VFIO_TYPE1_IOMMU
    } else {
        return Err(DeviceError::Backend(
            "the kernel's vfio has no type1 IOMMU backend: load vfio_iommu_type1 (modprobe vfio_iommu_type1)".into(),
        ));
    };
    let mut cfd_arg: i32 = cfd;
    // SAFETY: VFIO_GROUP_SET_CONTAINER reads one int (the container fd).
    unsafe { ioctl_ptr(group.as_raw_fd(), VFIO_GROUP_SET_CONTAINER, &mut cfd_arg) }
        .map_err(|e| io_err(format!("VFIO_GROUP_SET_CONTAINER for group {group_id}"), e))?;
    ioctl_val(cfd, VFIO_SET_IOMMU, iommu_type).map_err(|e| io_err(format!("VFIO_SET_IOMMU type {iommu_type}"), e))?;
    Ok((container, iommu_type))
}

impl VfioDevice {
    /// Opens `addr` (e.g. "0000:03:00.0") with the default options.
    pub fn open(addr: &str) -> Result<VfioDevice, DeviceError> {
        VfioDevice::open_with(addr, &VfioOptions::default())
    }

    /// Opens `addr`, which must be bound to vfio-pci (see [`bind::bind`]).
    pub fn open_with(addr: &str, options: &VfioOptions) -> Result<VfioDevice, DeviceError> {
        let sysfs = Sysfs::system();
        let addr = bind::normalize_address(addr)?;
        for &bar in &options.write_combining {
            if bar > 5 {
                return Err(DeviceError::InvalidArgument(format!("write-combining BAR {bar}: a BAR number is 0..5")));
            }
        }
        if !sysfs.device_dir(&addr).exists() {
            return Err(DeviceError::NoSuchDevice(bind::no_device_message(&sysfs, &addr)));
        }
        let Some(group_id) = sysfs.iommu_group_of(&addr) else {
            return Err(DeviceError::Backend(bind::iommu_off_message(&addr, sysfs.iommu_on())));
        };
        let driver = sysfs.driver_of(&addr);
        if driver.as_deref() != Some(bind::VFIO_PCI) {
            return Err(DeviceError::Backend(format!(
                "{addr} is bound to {}, not vfio-pci: run `tlpx vfio bind {addr}` as root first (`tlpx vfio unbind \
                 {addr}` gives it back later)",
                driver.map(|d| format!("the {d} driver")).unwrap_or_else(|| "no driver".into())
            )));
        }

        let group = open_group(&sysfs, &addr, group_id)?;
        let (container, iommu_type) = open_container(&group, group_id)?;
        let cfd = container.as_raw_fd();

        // The IOMMU: page sizes and valid IOVA ranges.
        let (pgsizes, ranges) = iommu_info(cfd)?;
        let align = if pgsizes != 0 { 1u64 << pgsizes.trailing_zeros() } else { page_size() }.max(page_size());
        let valid = if ranges.is_empty() { vec![(0, u64::MAX)] } else { ranges.clone() };
        let iova = IovaAllocator::new(&valid, options.iova_window.clone(), &[iova::MSI_WINDOW], align)?;

        // The device.
        let caddr = CString::new(addr.clone()).map_err(|_| DeviceError::InvalidArgument(format!("bad address {addr:?}")))?;
        // SAFETY: VFIO_GROUP_GET_DEVICE_FD reads a NUL-terminated device name.
        let dfd = unsafe { ioctl_ptr(group.as_raw_fd(), VFIO_GROUP_GET_DEVICE_FD, caddr.as_ptr() as *mut libc::c_char) }
            .map_err(|e| io_err(format!("VFIO_GROUP_GET_DEVICE_FD for {addr}"), e))?;
        // SAFETY: the ioctl returned a new fd that nobody else owns.
        let device = unsafe { OwnedFd::from_raw_fd(dfd) };
        let mut info = vfio_device_info { argsz: argsz::<vfio_device_info>(), ..Default::default() };
        // SAFETY: VFIO_DEVICE_GET_INFO fills a vfio_device_info of argsz bytes.
        unsafe { ioctl_ptr(device.as_raw_fd(), VFIO_DEVICE_GET_INFO, &mut info) }
            .map_err(|e| io_err(format!("VFIO_DEVICE_GET_INFO for {addr}"), e))?;
        if info.flags & VFIO_DEVICE_FLAGS_PCI == 0 || info.num_regions <= VFIO_PCI_CONFIG_REGION_INDEX {
            return Err(DeviceError::Backend(format!(
                "{addr} is not a vfio-pci device (flags {:#x}, {} regions)",
                info.flags, info.num_regions
            )));
        }

        let config = region_info(device.as_raw_fd(), VFIO_PCI_CONFIG_REGION_INDEX, &addr)?;
        let mut regions = Vec::new();
        for index in VFIO_PCI_BAR0_REGION_INDEX..VFIO_PCI_BAR0_REGION_INDEX + 6 {
            let r = region_info(device.as_raw_fd(), index, &addr)?;
            regions.push(if r.size == 0 { None } else { Some(r) });
        }

        let mut dev = VfioDevice {
            regions,
            config,
            irqs: None,
            device,
            _group: group,
            container,
            address: addr.clone(),
            group_id,
            device_flags: info.flags,
            iommu_type,
            iova_ranges: ranges,
            iova,
            dma: HashMap::new(),
            next_dma_id: 1,
            syscall_path: false,
            iova_pgsizes: pgsizes,
            placement: DmaPlacement::default(),
        };

        // Write-combining mappings first: vfio claims a BAR's resource (busy) once it maps
        // or accesses it, after which a kernel with CONFIG_IO_STRICT_DEVMEM refuses the
        // sysfs mapping.
        for &bar in &options.write_combining {
            dev.map_write_combining(&sysfs, bar)?;
        }
        for bar in 0..6u8 {
            dev.map_uncached(bar);
        }
        // Memory space and bus mastering on (vfio-pci leaves bus mastering to the user).
        let cmd = dev.config_read(0x04, 2)?;
        let cmd = u16::from_le_bytes([cmd[0], cmd[1]]) | 0x0006;
        dev.config_write(0x04, &cmd.to_le_bytes())?;
        dev.setup_irqs(options)?;
        Ok(dev)
    }

    fn map_write_combining(&mut self, sysfs: &Sysfs, bar: u8) -> Result<(), DeviceError> {
        let addr = self.address.clone();
        let unsupported = |instead: String| DeviceError::Unsupported {
            backend: BACKEND.into(),
            what: format!("map BAR{bar} of {addr} write-combining"),
            instead,
        };
        let Some(region) = self.regions[bar as usize].as_mut() else {
            return Err(DeviceError::InvalidArgument(format!("BAR{bar} of {addr} is not implemented (size 0)")));
        };
        let flags = resource_flags(sysfs, &addr, bar).unwrap_or(0);
        if flags & IORESOURCE_IO != 0 {
            return Err(unsupported(format!("BAR{bar} is an I/O BAR; it is reached with pread/pwrite")));
        }
        if flags & IORESOURCE_MEM == 0 {
            return Err(unsupported(format!("sysfs gives no memory resource flags for BAR{bar} (flags {flags:#x})")));
        }
        if flags & IORESOURCE_PREFETCH == 0 {
            return Err(unsupported(format!(
                "BAR{bar} is not prefetchable, so write-combining could merge or reorder side-effecting register \
                 accesses; map it uncached (leave it out of the write-combining BARs)"
            )));
        }
        let path = sysfs.device_dir(&addr).join(format!("resource{bar}_wc"));
        let fd = open_rw(&path).map_err(|e| match e.kind() {
            std::io::ErrorKind::NotFound => unsupported(format!("the kernel offers no {} for it", path.display())),
            std::io::ErrorKind::PermissionDenied => DeviceError::Backend(format!(
                "permission denied opening {}: a write-combining mapping through sysfs needs root",
                path.display()
            )),
            _ => io_err(format!("opening {}", path.display()), e),
        })?;
        let len = region.size as usize;
        // SAFETY: mapping `len` bytes of the BAR's sysfs file, shared; the result is checked.
        let ptr = unsafe { libc::mmap(std::ptr::null_mut(), len, libc::PROT_READ | libc::PROT_WRITE, libc::MAP_SHARED, fd.as_raw_fd(), 0) };
        if ptr == libc::MAP_FAILED {
            let e = errno();
            return Err(io_err(
                format!(
                    "mmap of {} (write-combining BAR{bar}; a kernel with CONFIG_IO_STRICT_DEVMEM refuses it once \
                     another mapping claimed the BAR)",
                    path.display()
                ),
                e,
            ));
        }
        region.map = Some(Mapping { ptr: ptr as *mut u8, len });
        region.access = BarAccess::MmapWriteCombining;
        Ok(())
    }

    /// Maps a BAR through vfio's region mmap when vfio allows; otherwise it stays pread/pwrite.
    fn map_uncached(&mut self, bar: u8) {
        let dfd = self.device.as_raw_fd();
        let Some(region) = self.regions[bar as usize].as_mut() else { return };
        if region.map.is_some() || region.flags & VFIO_REGION_INFO_FLAG_MMAP == 0 {
            return;
        }
        let len = region.size as usize;
        // SAFETY: mapping the region's `len` bytes at its offset in the device fd, shared;
        // the result is checked.
        let ptr = unsafe {
            libc::mmap(std::ptr::null_mut(), len, libc::PROT_READ | libc::PROT_WRITE, libc::MAP_SHARED, dfd, region.offset as libc::off_t)
        };
        if ptr != libc::MAP_FAILED {
            region.map = Some(Mapping { ptr: ptr as *mut u8, len });
            region.access = BarAccess::MmapUncached;
        }
    }

    fn num_irqs(&self) -> Result<u32, DeviceError> {
        let mut info = vfio_device_info { argsz: argsz::<vfio_device_info>(), ..Default::default() };
        // SAFETY: VFIO_DEVICE_GET_INFO fills a vfio_device_info of argsz bytes.
        unsafe { ioctl_ptr(self.device.as_raw_fd(), VFIO_DEVICE_GET_INFO, &mut info) }
            .map_err(|e| io_err("VFIO_DEVICE_GET_INFO".into(), e))?;
        Ok(info.num_irqs)
    }

    /// The PCI address.
    pub fn address(&self) -> &str {
        &self.address
    }

    /// The IOMMU group.
    pub fn iommu_group(&self) -> u32 {
        self.group_id
    }

    /// "type1v2" or "type1".
    pub fn iommu_type(&self) -> &'static str {
        if self.iommu_type == VFIO_TYPE1V2_IOMMU {
            "type1v2"
        } else {
            "type1"
        }
    }

    /// The valid IOVA ranges the IOMMU reported (start, inclusive end); empty if it did not.
    pub fn iova_ranges(&self) -> &[(u64, u64)] {
        &self.iova_ranges
    }

    /// The interrupt kind ("MSI", "MSI-X") and vector count enabled, if any.
    pub fn interrupts(&self) -> Option<(&'static str, usize)> {
        self.irqs.as_ref().map(|i| (i.kind, i.fds.len()))
    }

    /// How BAR `bar` is reached, if implemented.
    pub fn bar_access(&self, bar: u8) -> Option<BarAccess> {
        self.regions.get(bar as usize)?.as_ref().map(|r| r.access)
    }

    /// True when vfio-pci can reset the function (it found FLR, a PM reset, or a bus/slot
    /// reset it may use).
    pub fn can_reset(&self) -> bool {
        self.device_flags & VFIO_DEVICE_FLAGS_RESET != 0
    }

    /// Function-level reset through VFIO_DEVICE_RESET (the method vfio-pci picked).
    pub fn reset(&mut self) -> Result<(), DeviceError> {
        if !self.can_reset() {
            return Err(DeviceError::Unsupported {
                backend: BACKEND.into(),
                what: format!("reset {}", self.address),
                instead: "vfio-pci found no reset method for this function (no FLR, no PM D3hot reset, no bus or \
                          slot reset it may use: e.g. a root-complex integrated endpoint, or other functions on \
                          the same bus); power-cycle or rescan it instead"
                    .into(),
            });
        }
        ioctl_val(self.device.as_raw_fd(), VFIO_DEVICE_RESET, 0)
            .map_err(|e| io_err(format!("VFIO_DEVICE_RESET of {}", self.address), e))?;
        Ok(())
    }

    fn region(&self, bar: u8) -> Result<&Region, DeviceError> {
        if bar > 5 {
            return Err(DeviceError::InvalidArgument(format!("BAR number must be 0..5, not {bar}")));
        }
        self.regions[bar as usize].as_ref().ok_or_else(|| {
            let have: Vec<String> = self
                .regions
                .iter()
                .enumerate()
                .filter_map(|(i, r)| r.as_ref().map(|r| format!("BAR{i} ({})", human_size(r.size))))
                .collect();
            DeviceError::InvalidArgument(format!(
                "BAR{bar} of {} is not implemented; it has {}",
                self.address,
                if have.is_empty() { "no BARs".into() } else { have.join(", ") }
            ))
        })
    }

    fn bar0_mapped(&self) -> bool {
        self.regions.first().and_then(|r| r.as_ref()).is_some_and(|r| r.map.is_some())
    }

    fn check_access(&self, bar: u8, offset: u64, len: u64, align: u64) -> Result<&Region, DeviceError> {
        let r = self.region(bar)?;
        if offset.checked_add(len).is_none_or(|end| end > r.size) {
            return Err(DeviceError::InvalidArgument(format!(
                "BAR{bar} access of {len} bytes at {offset:#x} is outside BAR{bar} of {} bytes",
                r.size
            )));
        }
        if !offset.is_multiple_of(align) {
            return Err(DeviceError::InvalidArgument(format!(
                "BAR{bar} access of {len} bytes at {offset:#x} is not aligned to {align} bytes"
            )));
        }
        Ok(r)
    }
}

impl Drop for VfioDevice {
    fn drop(&mut self) {
        if let Some(irqs) = &self.irqs {
            let _ = set_irqs_eventfd(self.device.as_raw_fd(), irqs.index, &[]);
        }
        for m in self.dma.values() {
            let mut unmap =
                vfio_iommu_type1_dma_unmap { argsz: argsz::<vfio_iommu_type1_dma_unmap>(), flags: 0, iova: m.iova, size: m.size };
            // SAFETY: VFIO_IOMMU_UNMAP_DMA reads and updates a vfio_iommu_type1_dma_unmap.
            let _ = unsafe { ioctl_ptr(self.container.as_raw_fd(), VFIO_IOMMU_UNMAP_DMA, &mut unmap) };
        }
    }
}

impl Device for VfioDevice {
    /// Mapped where BAR0 is mapped, unless pread/pwrite was chosen.
    fn bar_path(&self) -> BarPath {
        if self.bar0_mapped() && !self.syscall_path {
            BarPath::Mapped
        } else {
            BarPath::Syscall
        }
    }

    /// Mapped (loads and stores) or Syscall (pread/pwrite on the device fd: every access
    /// crosses the kernel, as with the seed's char driver).
    fn set_bar_path(&mut self, path: BarPath) -> Result<(), DeviceError> {
        match path {
            BarPath::Syscall => self.syscall_path = true,
            BarPath::Mapped if self.bar0_mapped() => self.syscall_path = false,
            other => {
                return Err(DeviceError::Unsupported {
                    backend: BACKEND.into(),
                    what: format!("reach BAR0 of {} by {}", self.address, other.name()),
                    instead: "vfio does not let BAR0 be mapped here: it is reached by pread/pwrite".into(),
                })
            }
        }
        Ok(())
    }

    fn description(&self) -> DeviceDescription {
        DeviceDescription {
            backend: BACKEND.into(),
            location: self.address.clone(),
            pci_address: self.address.clone(),
            bar_sizes: self.regions.iter().map(|r| r.as_ref().map(|r| r.size)).collect(),
        }
    }

    fn bar_read(&mut self, bar: u8, offset: u64, width: Width) -> Result<u64, DeviceError> {
        let n = width.bytes();
        let r = self.check_access(bar, offset, n, n)?;
        if let Some(m) = r.map.as_ref().filter(|_| !self.syscall_path) {
            // SAFETY: offset+n is within the mapping (checked) and aligned to n.
            return Ok(unsafe { load(m.ptr.add(offset as usize), width) });
        }
        let mut b = [0u8; 8];
        let at = r.offset + offset;
        pread_exact(self.device.as_raw_fd(), &mut b[..n as usize], at, &|| format!("reading BAR{bar} at {offset:#x}"))?;
        Ok(u64::from_le_bytes(b))
    }

    fn bar_write(&mut self, bar: u8, offset: u64, width: Width, value: u64) -> Result<(), DeviceError> {
        let n = width.bytes();
        let r = self.check_access(bar, offset, n, n)?;
        if let Some(m) = r.map.as_ref().filter(|_| !self.syscall_path) {
            // SAFETY: offset+n is within the mapping (checked) and aligned to n.
            unsafe { store(m.ptr.add(offset as usize), width, value) };
            if r.access == BarAccess::MmapWriteCombining {
                store_fence();
            }
            return Ok(());
        }
        let at = r.offset + offset;
        pwrite_all(self.device.as_raw_fd(), &value.to_le_bytes()[..n as usize], at, &|| format!("writing BAR{bar} at {offset:#x}"))
    }

    fn bar_read_block(&mut self, bar: u8, offset: u64, len: usize) -> Result<Vec<u8>, DeviceError> {
        crate::check_block(offset, len)?;
        let r = self.check_access(bar, offset, len as u64, 1)?;
        let mut out = vec![0u8; len];
        let Some(m) = r.map.as_ref().filter(|_| !self.syscall_path) else {
            let at = r.offset + offset;
            pread_exact(self.device.as_raw_fd(), &mut out, at, &|| format!("reading {len} bytes of BAR{bar} at {offset:#x}"))?;
            return Ok(out);
        };
        let mut done = 0;
        while done < len {
            let at = offset + done as u64;
            let n = piece(at, len - done);
            // SAFETY: at..at+n lies within the mapping (checked) and is aligned to n.
            unsafe {
                let p = m.ptr.add(at as usize);
                #[cfg(target_arch = "x86_64")]
                if n == 16 {
                    out[done..done + 16].copy_from_slice(&load16(p));
                    done += 16;
                    continue;
                }
                let v = load(p, width_of(n));
                out[done..done + n].copy_from_slice(&v.to_le_bytes()[..n]);
            }
            done += n;
        }
        Ok(out)
    }

    fn bar_write_block(&mut self, bar: u8, offset: u64, data: &[u8]) -> Result<(), DeviceError> {
        crate::check_block(offset, data.len())?;
        let r = self.check_access(bar, offset, data.len() as u64, 1)?;
        let Some(m) = r.map.as_ref().filter(|_| !self.syscall_path) else {
            let at = r.offset + offset;
            return pwrite_all(self.device.as_raw_fd(), data, at, &|| format!("writing {} bytes of BAR{bar} at {offset:#x}", data.len()));
        };
        let mut done = 0;
        while done < data.len() {
            let at = offset + done as u64;
            let n = piece(at, data.len() - done);
            // SAFETY: at..at+n lies within the mapping (checked) and is aligned to n.
            unsafe {
                let p = m.ptr.add(at as usize);
                #[cfg(target_arch = "x86_64")]
                if n == 16 {
                    let mut chunk = [0u8; 16];
                    chunk.copy_from_slice(&data[done..done + 16]);
                    store16(p, &chunk);
                    done += 16;
                    continue;
                }
                let mut v = [0u8; 8];
                v[..n].copy_from_slice(&data[done..done + n]);
                store(p, width_of(n), u64::from_le_bytes(v));
            }
            done += n;
        }
        if r.access == BarAccess::MmapWriteCombining {
            store_fence();
        }
        Ok(())
    }

    fn config_read(&mut self, offset: u16, len: u16) -> Result<Vec<u8>, DeviceError> {
        let end = offset as u64 + len as u64;
        if end > self.config.size.min(4096) {
            return Err(DeviceError::InvalidArgument(format!(
                "config read of {len} bytes at {offset:#x} is outside the {} bytes of config space vfio gives for {}",
                self.config.size, self.address
            )));
        }
        let mut out = vec![0u8; len as usize];
        let at = self.config.offset + offset as u64;
        pread_exact(self.device.as_raw_fd(), &mut out, at, &|| format!("reading config space at {offset:#x}"))?;
        Ok(out)
    }

    fn config_write(&mut self, offset: u16, data: &[u8]) -> Result<(), DeviceError> {
        let end = offset as u64 + data.len() as u64;
        if end > self.config.size.min(4096) {
            return Err(DeviceError::InvalidArgument(format!(
                "config write of {} bytes at {offset:#x} is outside the {} bytes of config space vfio gives for {}",
                data.len(),
                self.config.size,
                self.address
            )));
        }
        let at = self.config.offset + offset as u64;
        pwrite_all(self.device.as_raw_fd(), data, at, &|| format!("writing config space at {offset:#x}"))
    }

    fn alloc_dma(&mut self, len: usize) -> Result<DmaBuffer, DeviceError> {
        if len == 0 {
            return Err(DeviceError::InvalidArgument("a DMA buffer needs at least 1 byte, not 0".into()));
        }
        let page = self.placement.page_size;
        // A huge page's buffer starts on an IOVA of its size, so that the IOMMU can map it
        // with pages of that size.
        let align = self.iova.align().max(page.bytes());
        let size = (len as u64)
            .checked_next_multiple_of(align)
            .ok_or_else(|| DeviceError::InvalidArgument(format!("a DMA buffer of {len} bytes is too large")))?;
        let memory = map_dma_memory(size, self.placement)?;
        let ptr = memory.ptr as *mut libc::c_void;
        // No mlock: VFIO_IOMMU_MAP_DMA pins the pages (never swapped or migrated while mapped)
        // and charges them to RLIMIT_MEMLOCK itself; an mlock would charge them twice.
        let iova = self.iova.alloc_aligned(size, align)?;
        let mut map = vfio_iommu_type1_dma_map {
            argsz: argsz::<vfio_iommu_type1_dma_map>(),
            flags: VFIO_DMA_MAP_FLAG_READ | VFIO_DMA_MAP_FLAG_WRITE,
            vaddr: ptr as u64,
            iova,
            size,
        };
        // SAFETY: VFIO_IOMMU_MAP_DMA reads a vfio_iommu_type1_dma_map; vaddr..+size is our mapping.
        if let Err(e) = unsafe { ioctl_ptr(self.container.as_raw_fd(), VFIO_IOMMU_MAP_DMA, &mut map) } {
            self.iova.free(iova, size);
            let hint = if e.raw_os_error() == Some(libc::ENOMEM) {
                " (pinning the pages exceeds the locked-memory limit: raise it with `ulimit -l` or run as root)"
            } else {
                ""
            };
            return Err(io_err(format!("VFIO_IOMMU_MAP_DMA of {size} bytes at IOVA {iova:#x}{hint}"), e));
        }
        let id = self.next_dma_id;
        self.next_dma_id += 1;
        self.dma.insert(id, DmaMapping { iova, size });
        let host_ptr = memory.ptr;
        // SAFETY: the memory stays mapped while the Arc lives, and DmaBuffer keeps it.
        Ok(unsafe { DmaBuffer::new(id, iova, len, host_ptr, Arc::new(memory)) })
    }

    fn iova_page_sizes(&self) -> Option<u64> {
        Some(self.iova_pgsizes)
    }

    fn set_dma_placement(&mut self, placement: DmaPlacement) -> Result<(), DeviceError> {
        let page = placement.page_size;
        if self.iova_pgsizes & page.bytes() == 0 {
            return Err(DeviceError::Unsupported {
                backend: BACKEND.into(),
                what: format!("map DMA buffers with {} IOVA pages", page.name()),
                instead: format!(
                    "this IOMMU offers IOVA pages of {} (VFIO_IOMMU_GET_INFO); choose one of those",
                    page_sizes_text(self.iova_pgsizes)
                ),
            });
        }
        if let Some(node) = placement.numa_node {
            crate::host_memory::check_node(node)?;
        }
        self.placement = placement;
        Ok(())
    }

    fn free_dma(&mut self, buffer: DmaBuffer) -> Result<(), DeviceError> {
        // The id alone could be another device's buffer: the IOVA must be this mapping's too.
        let ours = self.dma.get(&buffer.id).is_some_and(|m| m.iova == buffer.bus_addr && buffer.len as u64 <= m.size);
        let Some(m) = self.dma.remove(&buffer.id).filter(|_| ours) else {
            return Err(DeviceError::InvalidArgument(format!(
                "DMA buffer {} (bus address {:#x}) was not allocated by this vfio device or was freed already",
                buffer.id, buffer.bus_addr
            )));
        };
        let mut unmap = vfio_iommu_type1_dma_unmap { argsz: argsz::<vfio_iommu_type1_dma_unmap>(), flags: 0, iova: m.iova, size: m.size };
        // SAFETY: VFIO_IOMMU_UNMAP_DMA reads and updates a vfio_iommu_type1_dma_unmap.
        let r = unsafe { ioctl_ptr(self.container.as_raw_fd(), VFIO_IOMMU_UNMAP_DMA, &mut unmap) };
        if let Err(e) = r {
            // Keep the IOVA reserved and the mapping on record (unmapped again at close): it
            // may still be live.
            self.dma.insert(buffer.id, DmaMapping { iova: m.iova, size: m.size });
            return Err(io_err(format!("VFIO_IOMMU_UNMAP_DMA of IOVA {:#x} ({} bytes)", m.iova, m.size), e));
        }
        self.iova.free(m.iova, m.size);
        drop(buffer);
        Ok(())
    }

    /// The vectors enabled when the device was opened (MSI-X preferred, up to the options'
    /// `max_vectors`, 32 by default): vfio-pci's kernel side programmed the table or MSI's MME.
    fn request_vectors(&mut self, count: u32) -> Result<crate::InterruptVectors, DeviceError> {
        vectors::granted(self.irqs.as_ref(), &self.address, count)
    }

    /// The Linux interrupt vfio-pci requested for vector `vector` (vectors.rs).
    fn vector_host_irq(&self, vector: u32) -> Option<u32> {
        vectors::host_irq(self.irqs.as_ref()?, &self.address, vector)
    }

    fn wait_interrupt(&mut self, vector_mask: u32, timeout: Duration) -> Result<Option<Interrupt>, DeviceError> {
        let address = self.address.clone();
        let Some(irqs) = self.irqs.as_mut() else {
            return Err(DeviceError::Unsupported {
                backend: BACKEND.into(),
                what: format!("wait for interrupts of {address}"),
                instead: "no MSI or MSI-X vector is enabled (the function has none, or it was opened with irq mode \
                          none); tlpx does not use INTx"
                    .into(),
            });
        };
        let n = irqs.fds.len();
        let vectors: Vec<usize> = (0..n.min(32)).filter(|v| vector_mask & (1 << v) != 0).collect();
        if vectors.is_empty() {
            return Err(DeviceError::InvalidArgument(format!(
                "vector mask {vector_mask:#x} names none of the {n} {} vector(s) enabled (bits 0..{})",
                irqs.kind,
                n - 1
            )));
        }
        if let Some(&v) = vectors.iter().find(|&&v| irqs.pending[v] > 0) {
            irqs.pending[v] -= 1;
            return Ok(Some(Interrupt { vector: v as u32, card_cycle: None }));
        }
        let mut pfds: Vec<libc::pollfd> =
            vectors.iter().map(|&v| libc::pollfd { fd: irqs.fds[v].as_raw_fd(), events: libc::POLLIN, revents: 0 }).collect();
        let deadline = Instant::now() + timeout;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let ts = libc::timespec { tv_sec: left.as_secs() as libc::time_t, tv_nsec: left.subsec_nanos() as libc::c_long };
            // SAFETY: pfds is a valid array of pollfd; ts a valid timespec; no signal mask.
            let r = unsafe { libc::ppoll(pfds.as_mut_ptr(), pfds.len() as libc::nfds_t, &ts, std::ptr::null()) };
            if r < 0 {
                let e = errno();
                if e.kind() == std::io::ErrorKind::Interrupted {
                    continue;
                }
                return Err(io_err("ppoll on the interrupt eventfds".into(), e));
            }
            if r == 0 {
                return Ok(None);
            }
            for (i, p) in pfds.iter().enumerate() {
                if p.revents & libc::POLLIN == 0 {
                    continue;
                }
                let v = vectors[i];
                let mut count: u64 = 0;
                // SAFETY: reading the 8-byte eventfd counter into count.
                let got = unsafe { libc::read(p.fd, &mut count as *mut u64 as *mut libc::c_void, 8) };
                if got == 8 && count > 0 {
                    irqs.pending[v] += count;
                }
            }
            if let Some(&v) = vectors.iter().find(|&&v| irqs.pending[v] > 0) {
                irqs.pending[v] -= 1;
                return Ok(Some(Interrupt { vector: v as u32, card_cycle: None }));
            }
            if Instant::now() >= deadline {
                return Ok(None);
            }
            for p in pfds.iter_mut() {
                p.revents = 0;
            }
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

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    /// The real sysfs of this machine. Here (a VM without an IOMMU) there are PCI functions
    /// but no IOMMU groups: opening one must say the IOMMU is off and how to turn it on. On a
    /// machine with an IOMMU, opening a function not bound to vfio-pci must say so instead.
    #[test]
    fn open_on_this_machine_gives_the_real_reason() {
        let sysfs = Sysfs::system();
        let mut all: Vec<String> =
            std::fs::read_dir("/sys/bus/pci/devices").unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
        all.sort();
        assert!(!all.is_empty(), "this machine has PCI functions");
        if !sysfs.iommu_on() {
            // The brief names 0000:00:02.0 (this VM's virtio disk); any function shows the same.
            let addr = if all.iter().any(|a| a == "0000:00:02.0") { "0000:00:02.0".to_string() } else { all[0].clone() };
            let err = VfioDevice::open(&addr).err().expect("open must fail without an IOMMU").to_string();
            assert!(err.contains(&format!("{addr} has no IOMMU group")), "{err}");
            assert!(err.contains("the IOMMU is off"), "{err}");
            assert!(err.contains("intel_iommu=on"), "{err}");
            assert!(err.contains("amd_iommu=on"), "{err}");
            assert!(err.contains("no-IOMMU mode"), "{err}");
        } else {
            let addr = all
                .iter()
                .find(|a| sysfs.iommu_group_of(a).is_some() && sysfs.driver_of(a).as_deref() != Some(bind::VFIO_PCI))
                .expect("a machine with an IOMMU has a function in a group not bound to vfio-pci");
            let err = VfioDevice::open(addr).err().expect("open must fail").to_string();
            assert!(err.contains("not vfio-pci"), "{err}");
            assert!(err.contains(&format!("tlpx vfio bind {addr}")), "{err}");
        }
    }

    #[test]
    fn open_of_a_missing_function_says_so() {
        let err = VfioDevice::open("0000:ff:1f.7").err().unwrap();
        assert!(matches!(err, DeviceError::NoSuchDevice(_)), "{err}");
        let msg = err.to_string();
        assert!(msg.contains("no PCI function 0000:ff:1f.7"), "{msg}");
    }

    #[test]
    fn open_refuses_bad_input() {
        let err = VfioDevice::open("03:00").err().unwrap().to_string();
        assert!(err.contains("\"03:00\""), "{err}");
        let opts = VfioOptions { write_combining: vec![6], ..Default::default() };
        let err = VfioDevice::open_with("0000:00:02.0", &opts).err().unwrap().to_string();
        assert!(err.contains("write-combining BAR 6"), "{err}");
    }

    #[test]
    fn iova_ranges_are_parsed_from_the_capability_chain() {
        // vfio_iommu_type1_info (24 bytes) + cap at 24: header, nr_iovas 2, two ranges.
        let mut buf = vec![0u8; 24 + 16 + 32];
        let put32 = |b: &mut Vec<u8>, at: usize, v: u32| b[at..at + 4].copy_from_slice(&v.to_le_bytes());
        let put64 = |b: &mut Vec<u8>, at: usize, v: u64| b[at..at + 8].copy_from_slice(&v.to_le_bytes());
        put32(&mut buf, 0, 72);
        put32(&mut buf, 4, VFIO_IOMMU_INFO_PGSIZES | VFIO_IOMMU_INFO_CAPS);
        put64(&mut buf, 8, 0x4020_1000);
        put32(&mut buf, 16, 24);
        buf[24..26].copy_from_slice(&VFIO_IOMMU_TYPE1_INFO_CAP_IOVA_RANGE.to_le_bytes());
        buf[26..28].copy_from_slice(&1u16.to_le_bytes());
        put32(&mut buf, 28, 0);
        put32(&mut buf, 32, 2);
        put64(&mut buf, 40, 0);
        put64(&mut buf, 48, 0xfedf_ffff);
        put64(&mut buf, 56, 0xfef0_0000);
        put64(&mut buf, 64, 0x7f_ffff_ffff);
        assert_eq!(parse_iova_ranges(&buf), vec![(0, 0xfedf_ffff), (0xfef0_0000, 0x7f_ffff_ffff)]);
        // A truncated buffer yields what fits, never a panic.
        assert_eq!(parse_iova_ranges(&buf[..56]), vec![(0, 0xfedf_ffff)]);
        // A chain that loops on itself ends.
        put32(&mut buf, 16, 24);
        buf[24] = 9;
        put32(&mut buf, 28, 24);
        assert!(parse_iova_ranges(&buf).is_empty());
    }

    #[test]
    fn block_pieces_are_as_wide_as_alignment_allows() {
        assert_eq!(piece(0x80, 24), if cfg!(target_arch = "x86_64") { 16 } else { 8 });
        assert_eq!(piece(0x90, 8), 8);
        assert_eq!(piece(0x94, 12), 4);
        assert_eq!(piece(0x96, 2), 2);
        assert_eq!(piece(0x97, 9), 1);
    }
}
