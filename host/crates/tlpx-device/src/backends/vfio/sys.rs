//! The system calls of the vfio backend: ioctls, the device fd's pread/pwrite, and the
//! VFIO queries (regions, IOMMU info, interrupt eventfds), each failure with the context
//! [`DeviceError::Io`] names.

use std::ffi::CString;
use std::os::fd::{FromRawFd, OwnedFd, RawFd};
use std::path::Path;

use super::ffi::*;
use super::{BarAccess, Region};
use crate::DeviceError;

pub(super) fn errno() -> std::io::Error {
    std::io::Error::last_os_error()
}

pub(super) fn io_err(context: String, source: std::io::Error) -> DeviceError {
    DeviceError::Io { context, source }
}

/// ioctl with a pointer argument.
///
/// # Safety
/// `arg` must point to what the kernel expects for `request`, valid for its `argsz`.
pub(super) unsafe fn ioctl_ptr<T>(fd: RawFd, request: u64, arg: *mut T) -> std::io::Result<i32> {
    // SAFETY: the caller's promise.
    let r = unsafe { libc::ioctl(fd, request as libc::c_ulong, arg) };
    if r < 0 {
        Err(errno())
    } else {
        Ok(r)
    }
}

/// ioctl with an integer (or no) argument.
pub(super) fn ioctl_val(fd: RawFd, request: u64, arg: u64) -> std::io::Result<i32> {
    // SAFETY: these requests take their argument by value; no memory is passed.
    let r = unsafe { libc::ioctl(fd, request as libc::c_ulong, arg as libc::c_ulong) };
    if r < 0 {
        Err(errno())
    } else {
        Ok(r)
    }
}

pub(super) fn open_rw(path: &Path) -> std::io::Result<OwnedFd> {
    let c = CString::new(path.as_os_str().as_encoded_bytes()).map_err(|_| std::io::Error::from(std::io::ErrorKind::InvalidInput))?;
    // SAFETY: c is a valid NUL-terminated path.
    let fd = unsafe { libc::open(c.as_ptr(), libc::O_RDWR | libc::O_CLOEXEC) };
    if fd < 0 {
        return Err(errno());
    }
    // SAFETY: fd was just returned by open and is owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

pub(super) fn page_size() -> u64 {
    // SAFETY: sysconf has no memory effects.
    let p = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    if p > 0 {
        p as u64
    } else {
        4096
    }
}

/// Runs `step` (one pread or pwrite of the part from byte `done` on, returning what the call
/// returned) until `len` bytes are moved, again after EINTR; a call that moves nothing fails
/// with `short` (the end of the region on a read, nothing taken on a write).
fn transfer_all(
    len: usize,
    short: std::io::ErrorKind,
    what: &dyn Fn() -> String,
    mut step: impl FnMut(usize) -> isize,
) -> Result<(), DeviceError> {
    let mut done = 0;
    while done < len {
        let n = step(done);
        if n < 0 {
            let e = errno();
            if e.kind() == std::io::ErrorKind::Interrupted {
                continue;
            }
            return Err(io_err(what(), e));
        }
        if n == 0 {
            return Err(io_err(what(), std::io::Error::from(short)));
        }
        done += n as usize;
    }
    Ok(())
}

pub(super) fn pread_exact(fd: RawFd, buf: &mut [u8], offset: u64, what: &dyn Fn() -> String) -> Result<(), DeviceError> {
    let len = buf.len();
    transfer_all(len, std::io::ErrorKind::UnexpectedEof, what, |done| {
        // SAFETY: the pointer and length describe the unfilled tail of buf.
        unsafe { libc::pread(fd, buf[done..].as_mut_ptr() as *mut libc::c_void, len - done, (offset + done as u64) as libc::off_t) }
    })
}

pub(super) fn pwrite_all(fd: RawFd, buf: &[u8], offset: u64, what: &dyn Fn() -> String) -> Result<(), DeviceError> {
    transfer_all(buf.len(), std::io::ErrorKind::WriteZero, what, |done| {
        // SAFETY: the pointer and length describe the unwritten tail of buf.
        unsafe { libc::pwrite(fd, buf[done..].as_ptr() as *const libc::c_void, buf.len() - done, (offset + done as u64) as libc::off_t) }
    })
}

pub(super) fn region_info(fd: RawFd, index: u32, addr: &str) -> Result<Region, DeviceError> {
    let mut info = vfio_region_info { argsz: argsz::<vfio_region_info>(), index, ..Default::default() };
    // SAFETY: VFIO_DEVICE_GET_REGION_INFO fills a vfio_region_info of argsz bytes (capability
    // chains beyond it are not requested: argsz is the bare structure).
    unsafe { ioctl_ptr(fd, VFIO_DEVICE_GET_REGION_INFO, &mut info) }
        .map_err(|e| io_err(format!("VFIO_DEVICE_GET_REGION_INFO index {index} of {addr}"), e))?;
    Ok(Region { size: info.size, offset: info.offset, flags: info.flags, access: BarAccess::ReadWrite, map: None })
}

/// Page sizes and valid IOVA ranges of the container's IOMMU.
pub(super) fn iommu_info(cfd: RawFd) -> Result<(u64, Vec<(u64, u64)>), DeviceError> {
    let mut info = vfio_iommu_type1_info { argsz: argsz::<vfio_iommu_type1_info>(), ..Default::default() };
    // SAFETY: VFIO_IOMMU_GET_INFO fills argsz bytes of a vfio_iommu_type1_info and raises
    // argsz when capabilities need more room.
    unsafe { ioctl_ptr(cfd, VFIO_IOMMU_GET_INFO, &mut info) }.map_err(|e| io_err("VFIO_IOMMU_GET_INFO".into(), e))?;
    let pgsizes = if info.flags & VFIO_IOMMU_INFO_PGSIZES != 0 { info.iova_pgsizes } else { 0 };
    if info.flags & VFIO_IOMMU_INFO_CAPS == 0 || info.argsz as usize <= std::mem::size_of::<vfio_iommu_type1_info>() {
        return Ok((pgsizes, Vec::new()));
    }
    // Again with room for the capability chain (u64 words keep the buffer aligned).
    let len = info.argsz as usize;
    let mut words = vec![0u64; len.div_ceil(8)];
    let head = vfio_iommu_type1_info { argsz: len as u32, ..Default::default() };
    // SAFETY: words has at least size_of::<vfio_iommu_type1_info>() bytes, 8-byte aligned.
    unsafe { std::ptr::write(words.as_mut_ptr() as *mut vfio_iommu_type1_info, head) };
    // SAFETY: the buffer holds `len` bytes, the argsz the kernel asked for.
    unsafe { ioctl_ptr(cfd, VFIO_IOMMU_GET_INFO, words.as_mut_ptr() as *mut vfio_iommu_type1_info) }
        .map_err(|e| io_err("VFIO_IOMMU_GET_INFO with capabilities".into(), e))?;
    // SAFETY: viewing the u64 buffer as the bytes it holds.
    let bytes = unsafe { std::slice::from_raw_parts(words.as_ptr() as *const u8, len) };
    Ok((pgsizes, parse_iova_ranges(bytes)))
}

/// The IOVA ranges in a VFIO_IOMMU_GET_INFO buffer's capability chain.
pub fn parse_iova_ranges(buf: &[u8]) -> Vec<(u64, u64)> {
    let Some(info) = read_struct::<vfio_iommu_type1_info>(buf, 0) else { return Vec::new() };
    if info.flags & VFIO_IOMMU_INFO_CAPS == 0 {
        return Vec::new();
    }
    let mut at = info.cap_offset as usize;
    let mut hops = 0;
    while at != 0 && hops < 64 {
        hops += 1;
        let Some(h) = read_struct::<vfio_info_cap_header>(buf, at) else { break };
        if h.id == VFIO_IOMMU_TYPE1_INFO_CAP_IOVA_RANGE {
            let Some(cap) = read_struct::<vfio_iommu_type1_info_cap_iova_range>(buf, at) else { break };
            let first = at + std::mem::size_of::<vfio_iommu_type1_info_cap_iova_range>();
            return (0..cap.nr_iovas as usize)
                .map_while(|i| read_struct::<vfio_iova_range>(buf, first + i * std::mem::size_of::<vfio_iova_range>()))
                .map(|r| (r.start, r.end))
                .collect();
        }
        at = h.next as usize;
    }
    Vec::new()
}

/// Returns 0 when every vector was enabled, or the positive number the kernel says it could
/// give instead: vfio-pci then enabled none (it frees a partial allocation and returns the
/// count available, e.g. MSI on x86 without interrupt remapping: one), and the caller asks again.
pub(super) fn set_irqs_eventfd(dfd: RawFd, index: u32, fds: &[i32]) -> std::io::Result<u32> {
    let head = std::mem::size_of::<vfio_irq_set>();
    let len = head + 4 * fds.len();
    let mut words = vec![0u32; len.div_ceil(4)];
    let set = vfio_irq_set {
        argsz: len as u32,
        flags: if fds.is_empty() { VFIO_IRQ_SET_DATA_NONE } else { VFIO_IRQ_SET_DATA_EVENTFD } | VFIO_IRQ_SET_ACTION_TRIGGER,
        index,
        start: 0,
        count: fds.len() as u32,
    };
    // SAFETY: words holds `len` >= size_of::<vfio_irq_set>() bytes, 4-byte aligned as the
    // structure (all u32) requires.
    unsafe { std::ptr::write(words.as_mut_ptr() as *mut vfio_irq_set, set) };
    words[head / 4..].copy_from_slice(&fds.iter().map(|&f| f as u32).collect::<Vec<_>>());
    // SAFETY: the buffer is a vfio_irq_set followed by `count` eventfds, `argsz` bytes long.
    let r = unsafe { ioctl_ptr(dfd, VFIO_DEVICE_SET_IRQS, words.as_mut_ptr() as *mut vfio_irq_set) }?;
    Ok(r as u32)
}
