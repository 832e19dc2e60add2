//! The system call and what is done with the fd it returns, through `perf-event-open-sys2`'s
//! wrappers (the syscall number and the ioctl request numbers are its, from the kernel
//! headers). The fd is an [`OwnedFd`] from the moment the kernel hands it out, so an event is
//! closed on every path, error paths included.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

use perf_event_open_sys::ioctls;

use super::attr::PerfEventAttr;

/// perf_event_open(2): `pid` 0 and `cpu` -1 count the calling thread wherever it runs; `pid`
/// -1 and a CPU number watch that whole CPU; `group_fd` -1 starts a group of its own.
pub fn perf_event_open(
    attr: &PerfEventAttr,
    pid: libc::pid_t,
    cpu: libc::c_int,
    group_fd: RawFd,
    flags: libc::c_ulong,
) -> io::Result<OwnedFd> {
    // The kernel may write the size it expects back into `size` (E2BIG): a copy takes it.
    let mut attr = *attr;
    // SAFETY: `attr` is a valid perf_event_attr at least as large as the `size` it states,
    // alive for the call; the other arguments are plain integers.
    let fd = unsafe { perf_event_open_sys::perf_event_open(&mut attr, pid, cpu, group_fd, flags) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: the kernel returned a new file descriptor that nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as RawFd) })
}

/// The answer of one of the crate's ioctl wrappers.
fn ioctl_result(rc: libc::c_int) -> io::Result<()> {
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Starts counting or sampling; `arg` [`super::PERF_IOC_FLAG_GROUP`] starts the whole group.
pub fn enable(fd: &impl AsRawFd, arg: libc::c_ulong) -> io::Result<()> {
    // SAFETY: an open perf fd; ENABLE takes an integer argument and touches no memory.
    ioctl_result(unsafe { ioctls::ENABLE(fd.as_raw_fd(), arg as libc::c_uint) })
}

/// Stops counting or sampling; what was counted stays readable.
pub fn disable(fd: &impl AsRawFd, arg: libc::c_ulong) -> io::Result<()> {
    // SAFETY: as in enable.
    ioctl_result(unsafe { ioctls::DISABLE(fd.as_raw_fd(), arg as libc::c_uint) })
}

/// Zeroes the count (not time_enabled / time_running, which keep totals since the open).
pub fn reset(fd: &impl AsRawFd, arg: libc::c_ulong) -> io::Result<()> {
    // SAFETY: as in enable.
    ioctl_result(unsafe { ioctls::RESET(fd.as_raw_fd(), arg as libc::c_uint) })
}

/// Sets a tracepoint's filter (`irq == 45 || irq == 46`); an empty one removes it.
pub fn set_filter(fd: &impl AsRawFd, filter: &std::ffi::CStr) -> io::Result<()> {
    // SAFETY: an open perf fd and a NUL-terminated string that outlives the call; the kernel
    // only reads it (the wrapper's argument is `*mut` because the C prototype's is untyped).
    if unsafe { ioctls::SET_FILTER(fd.as_raw_fd(), filter.as_ptr().cast_mut()) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Reads the event's values (the count, then what `read_format` adds) into `values`; a short
/// read is an error, never a partly filled answer.
pub fn read_values(fd: &impl AsRawFd, values: &mut [u64]) -> io::Result<()> {
    let size = std::mem::size_of_val(values);
    // SAFETY: reads at most `size` bytes into `values`, which is that large.
    let got = unsafe { libc::read(fd.as_raw_fd(), values.as_mut_ptr().cast(), size) };
    if got < 0 {
        return Err(io::Error::last_os_error());
    }
    if got as usize != size {
        return Err(io::Error::new(io::ErrorKind::UnexpectedEof, format!("perf counter read gave {got} bytes, expected {size}")));
    }
    Ok(())
}
