//! The mmap ring of a sampling event: a header page (struct perf_event_mmap_page) and 2^n
//! pages of records the kernel writes at `data_head` and user space frees by moving
//! `data_tail`. This file knows the mapping and the head/tail protocol; what the records
//! mean is the caller's (the ISR trace walks them in `isr_trace::records`).

use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::atomic::{AtomicU64, Ordering};

use perf_event_open_sys::bindings::perf_event_mmap_page;

use super::event;

/// Offsets in struct perf_event_mmap_page (the crate's bindings of the kernel's header).
const MMAP_DATA_HEAD: usize = std::mem::offset_of!(perf_event_mmap_page, data_head);
const MMAP_DATA_TAIL: usize = std::mem::offset_of!(perf_event_mmap_page, data_tail);
const MMAP_DATA_OFFSET: usize = std::mem::offset_of!(perf_event_mmap_page, data_offset);
const MMAP_DATA_SIZE: usize = std::mem::offset_of!(perf_event_mmap_page, data_size);

/// A perf event and its mapped ring. Dropping it stops the event, unmaps the ring and
/// closes the fd, in that order.
pub struct MappedRing {
    fd: OwnedFd,
    base: *mut u8,
    map_len: usize,
    data_offset: usize,
    data_size: usize,
}

// SAFETY: the mapping belongs to this value alone; the kernel is the only other writer and
// the head/tail protocol (atomics with acquire/release) orders the accesses.
unsafe impl Send for MappedRing {}

/// The system's page size (the ring is counted in pages).
pub fn page_size() -> usize {
    // SAFETY: sysconf has no preconditions.
    usize::try_from(unsafe { libc::sysconf(libc::_SC_PAGESIZE) }).unwrap_or(4096).max(4096)
}

impl MappedRing {
    /// Maps `map_len` bytes (the header page and the data pages) of the event `fd`. On
    /// failure the fd is closed and the error is mmap's.
    pub fn map(fd: OwnedFd, map_len: usize) -> io::Result<MappedRing> {
        // SAFETY: a fresh shared mapping of the perf fd; checked for MAP_FAILED below.
        let base =
            unsafe { libc::mmap(std::ptr::null_mut(), map_len, libc::PROT_READ | libc::PROT_WRITE, libc::MAP_SHARED, fd.as_raw_fd(), 0) };
        if base == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let base = base.cast::<u8>();
        // SAFETY: the header page is mapped; these fields are plain u64s the kernel set at mmap.
        let (data_offset, data_size) = unsafe {
            (
                std::ptr::read_volatile(base.add(MMAP_DATA_OFFSET) as *const u64) as usize,
                std::ptr::read_volatile(base.add(MMAP_DATA_SIZE) as *const u64) as usize,
            )
        };
        // Kernels before 4.1 leave both 0: the data follows the header page.
        let page = page_size();
        let (data_offset, data_size) =
            if data_size == 0 || data_offset + data_size > map_len { (page, map_len - page) } else { (data_offset, data_size) };
        Ok(MappedRing { fd, base, map_len, data_offset, data_size })
    }

    /// The event's fd (ioctls, read, poll).
    pub fn fd(&self) -> &OwnedFd {
        &self.fd
    }

    /// Bytes of the data area.
    pub fn data_size(&self) -> usize {
        self.data_size
    }

    fn head(&self) -> u64 {
        // SAFETY: base is a live, page-aligned mapping of at least one page; the field is 8-aligned.
        let head = unsafe { &*(self.base.add(MMAP_DATA_HEAD) as *const AtomicU64) };
        // Acquire: the record bytes the kernel wrote before publishing head are visible (smp_rmb).
        head.load(Ordering::Acquire)
    }

    fn tail(&self) -> u64 {
        // SAFETY: as in head(); only this process writes data_tail.
        unsafe { &*(self.base.add(MMAP_DATA_TAIL) as *const AtomicU64) }.load(Ordering::Relaxed)
    }

    fn set_tail(&self, tail: u64) {
        // SAFETY: as in head().
        let t = unsafe { &*(self.base.add(MMAP_DATA_TAIL) as *const AtomicU64) };
        // Release: every read of the records finishes before the kernel may reuse their space (smp_mb).
        t.store(tail, Ordering::Release);
    }

    /// Copies the live bytes [tail, head) to their ring positions in `scratch` (resized to
    /// the data area) and hands `walk` the copy, the tail and the head (free-running byte
    /// counters: position = counter mod size). `walk` returns the end of the last whole
    /// record it took, which becomes the new tail. Nothing new: `walk` is not called.
    /// Positions no ring can have (head behind tail, or further ahead than the ring holds)
    /// give the error `inconsistent(tail, head, size)` makes, so the caller's message names them.
    pub fn read<E>(
        &self,
        scratch: &mut Vec<u8>,
        inconsistent: impl FnOnce(u64, u64, u64) -> E,
        walk: impl FnOnce(&[u8], u64, u64) -> Result<u64, E>,
    ) -> Result<(), E> {
        let head = self.head();
        let tail = self.tail();
        if head == tail {
            return Ok(());
        }
        let size = self.data_size as u64;
        if head < tail || head - tail > size {
            return Err(inconsistent(tail, head, size));
        }
        scratch.resize(self.data_size, 0);
        let start = (tail % size) as usize;
        let n = (head - tail) as usize;
        let first = n.min(self.data_size - start);
        // SAFETY: [data_offset, data_offset + data_size) lies inside the mapping; the kernel
        // does not write [tail, head) until data_tail moves past it.
        unsafe {
            let data = self.base.add(self.data_offset);
            std::ptr::copy_nonoverlapping(data.add(start), scratch.as_mut_ptr().add(start), first);
            std::ptr::copy_nonoverlapping(data, scratch.as_mut_ptr(), n - first);
        }
        let new_tail = walk(scratch, tail, head)?;
        self.set_tail(new_tail);
        Ok(())
    }
}

impl Drop for MappedRing {
    fn drop(&mut self) {
        // Stop the event first, so the kernel no longer writes into the ring being unmapped.
        let _ = event::disable(&self.fd, 0);
        // SAFETY: base/map_len is the mapping made in map and nothing refers to it any more.
        unsafe { libc::munmap(self.base.cast(), self.map_len) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The head/tail words are where the kernel's header puts them (the first four u64 of the
    /// second KiB of the header page): the ring fixtures of the ISR trace were read this way.
    #[test]
    fn the_mmap_page_words_are_the_kernels() {
        assert_eq!((MMAP_DATA_HEAD, MMAP_DATA_TAIL, MMAP_DATA_OFFSET, MMAP_DATA_SIZE), (1024, 1032, 1040, 1048));
    }
}
