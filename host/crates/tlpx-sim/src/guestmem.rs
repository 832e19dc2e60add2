//! Guest memory for the vfio-user server (`tlpx-sim --vfio-user`): the regions a vfio-user
//! client (QEMU) shared with DMA_MAP, mapped into this process, and the card's DMA into them.
//!
//! Without a vIOMMU the bus address the card uses is the guest-physical address, and QEMU
//! maps guest RAM at exactly those addresses (IOVA = GPA): the mapping table *is* the IOMMU.
//! A card access must lie inside one mapping (and a write inside a writable one), else it is
//! refused, as an IOMMU would refuse it.
//!
//! Two threads share the table: the vfio-user thread maps and unmaps (QEMU remaps low memory
//! several times during boot), the sim thread reads and writes through it. The sim thread
//! holds the read lock for the whole of one TLP ([`GuestMemory::view`]), so DMA_UNMAP (the
//! write lock) waits for the TLP in progress and no access ever touches an unmapped page.

use std::collections::BTreeMap;
use std::fs::File;
use std::os::fd::AsRawFd;
use std::sync::{RwLock, RwLockReadGuard};

/// One DMA_MAP'd region, mapped here.
#[derive(Debug)]
struct Mapping {
    iova: u64,
    len: u64,
    ptr: *mut u8,
    writable: bool,
}

impl Mapping {
    fn holds(&self, addr: u64, len: u64) -> bool {
        addr >= self.iova && addr.checked_add(len).is_some_and(|end| end <= self.iova + self.len)
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: ptr/len are exactly what mmap returned; nothing uses the mapping after the
        // table dropped it (accesses hold the table's read lock).
        unsafe { libc::munmap(self.ptr.cast(), self.len as usize) };
    }
}

/// The mappings by IOVA (disjoint). Pointers into MAP_SHARED memory are used only under the
/// lock. A map, not a list: with the guest's IOMMU QEMU maps page by page, thousands of them.
#[derive(Debug, Default)]
struct Table {
    maps: BTreeMap<u64, Mapping>,
}

impl Table {
    /// The mapping that holds `addr`, if any (mappings are disjoint: only the last one that
    /// starts at or below it can).
    fn at(&self, addr: u64) -> Option<&Mapping> {
        self.maps.range(..=addr).next_back().map(|(_, m)| m).filter(|m| addr < m.iova + m.len)
    }
}

// SAFETY: the raw pointers point into shared mappings owned by the table; every access goes
// through the RwLock (reads under the read lock, map/unmap under the write lock).
unsafe impl Send for Table {}
// SAFETY: as above.
unsafe impl Sync for Table {}

/// The guest's DMA_MAP'd memory.
#[derive(Debug, Default)]
pub struct GuestMemory {
    table: RwLock<Table>,
}

/// Where a card access lands: one mapping, found under a [`GuestView`].
#[derive(Debug, Clone, Copy)]
pub struct Span {
    iova: u64,
    len: u64,
    ptr: *mut u8,
}

/// The table, read-locked for one TLP.
pub struct GuestView<'a> {
    table: RwLockReadGuard<'a, Table>,
}

impl GuestMemory {
    pub fn new() -> GuestMemory {
        GuestMemory::default()
    }

    fn write_table(&self) -> std::sync::RwLockWriteGuard<'_, Table> {
        // A panic while holding the lock cannot leave the table half-changed (push/retain);
        // keep serving rather than poisoning every later DMA.
        self.table.write().unwrap_or_else(|e| e.into_inner())
    }

    /// Maps `len` bytes of `fd` at `file_offset` for bus addresses `iova..iova+len`
    /// (read-only unless `writable`). A region that overlaps a live mapping is refused:
    /// QEMU unmaps before it remaps, so an overlap means a confused client.
    pub fn map(&self, iova: u64, len: u64, fd: &File, file_offset: u64, writable: bool) -> Result<(), String> {
        if len == 0 || iova.checked_add(len).is_none() {
            return Err(format!("DMA_MAP of {len:#x} bytes at IOVA {iova:#x}: the region must be 1 byte or more and end below 2^64"));
        }
        let size = usize::try_from(len).map_err(|_| format!("DMA_MAP of {len:#x} bytes does not fit this process's address space"))?;
        let off = libc::off_t::try_from(file_offset).map_err(|_| format!("DMA_MAP file offset {file_offset:#x} is too large"))?;
        let mut t = self.write_table();
        let overlap = t.maps.range(..iova + len).next_back().map(|(_, m)| m).filter(|m| m.iova + m.len > iova);
        if let Some(m) = overlap {
            return Err(format!(
                "DMA_MAP {iova:#x}..{:#x} overlaps the live mapping {:#x}..{:#x}: unmap it first",
                iova + len,
                m.iova,
                m.iova + m.len
            ));
        }
        let prot = libc::PROT_READ | if writable { libc::PROT_WRITE } else { 0 };
        // SAFETY: a fresh shared mapping of a descriptor the client gave us; checked below.
        let p = unsafe { libc::mmap(std::ptr::null_mut(), size, prot, libc::MAP_SHARED, fd.as_raw_fd(), off) };
        if p == libc::MAP_FAILED {
            return Err(format!(
                "cannot map the DMA region {iova:#x}..{:#x} (fd offset {file_offset:#x}): {}",
                iova + len,
                std::io::Error::last_os_error()
            ));
        }
        t.maps.insert(iova, Mapping { iova, len, ptr: p.cast(), writable });
        Ok(())
    }

    /// Removes every mapping inside `iova..iova+len` (all of them if `all`); returns how many.
    /// Waits for the TLP the sim thread is moving, if any (the write lock).
    pub fn unmap(&self, iova: u64, len: u64, all: bool) -> usize {
        let end = iova.saturating_add(len);
        let mut t = self.write_table();
        let before = t.maps.len();
        t.maps.retain(|_, m| !(all || (m.iova >= iova && m.iova + m.len <= end)));
        before - t.maps.len()
    }

    /// Live mappings as (iova, len, writable), by IOVA.
    pub fn regions(&self) -> Vec<(u64, u64, bool)> {
        let t = self.table.read().unwrap_or_else(|e| e.into_inner());
        t.maps.values().map(|m| (m.iova, m.len, m.writable)).collect()
    }

    /// Read-locks the table for one card access.
    pub fn view(&self) -> GuestView<'_> {
        GuestView { table: self.table.read().unwrap_or_else(|e| e.into_inner()) }
    }
}

impl GuestView<'_> {
    /// The mapping that holds all of `addr..addr+len` (a writable one if `write`); None is
    /// a refusal. A zero-length access needs a mapping that holds `addr`.
    pub fn find(&self, addr: u64, len: u64, write: bool) -> Option<Span> {
        self.table.at(addr).filter(|m| m.holds(addr, len.max(1)) && (m.writable || !write)).map(|m| Span {
            iova: m.iova,
            len: m.len,
            ptr: m.ptr,
        })
    }

    /// Reads `dst.len()` bytes at bus address `addr` through `s`; bytes outside it read as
    /// zero (a completion's DW may stick out of the region the card asked for).
    pub fn read(&self, s: &Span, addr: u64, dst: &mut [u8]) {
        dst.fill(0);
        let lo = addr.max(s.iova);
        let hi = addr.saturating_add(dst.len() as u64).min(s.iova + s.len);
        if lo >= hi {
            return;
        }
        let (at, from, n) = ((lo - addr) as usize, (lo - s.iova) as usize, (hi - lo) as usize);
        // SAFETY: from..from+n lies inside the mapping (clamped above), which stays mapped
        // while this view holds the read lock; the guest may write the same bytes at the
        // same time, as a device and a CPU race on real memory: plain bytes, no references.
        unsafe { std::ptr::copy_nonoverlapping(s.ptr.add(from), dst.as_mut_ptr().add(at), n) };
    }

    /// Writes `value` at bus address `addr` through `s` (ignored outside it).
    #[inline]
    pub fn write_byte(&self, s: &Span, addr: u64, value: u8) {
        if addr < s.iova || addr >= s.iova + s.len {
            return;
        }
        // SAFETY: inside the (writable: find checked) mapping, kept mapped by the read lock.
        unsafe { s.ptr.add((addr - s.iova) as usize).write_volatile(value) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Seek, SeekFrom, Write};

    fn memfd(len: u64) -> File {
        let f = tempfile::tempfile().unwrap();
        f.set_len(len).unwrap();
        f
    }

    #[test]
    fn accesses_land_in_the_file_at_the_mapped_offset() {
        let g = GuestMemory::new();
        let mut f = memfd(0x3000);
        g.map(0x10_0000, 0x2000, &f, 0x1000, true).unwrap();
        {
            let v = g.view();
            let s = v.find(0x10_0010, 4, true).unwrap();
            for (i, b) in [1u8, 2, 3, 4].iter().enumerate() {
                v.write_byte(&s, 0x10_0010 + i as u64, *b);
            }
        }
        let mut buf = [0u8; 4];
        f.seek(SeekFrom::Start(0x1010)).unwrap();
        f.read_exact(&mut buf).unwrap();
        assert_eq!(buf, [1, 2, 3, 4], "IOVA 0x100010 is file offset 0x1000 + 0x10");
        f.seek(SeekFrom::Start(0x2ffc)).unwrap();
        f.write_all(&[9, 8, 7, 6]).unwrap();
        let v = g.view();
        let s = v.find(0x10_1ffc, 4, false).unwrap();
        let mut out = [0xAAu8; 8];
        v.read(&s, 0x10_1ffc, &mut out);
        assert_eq!(out, [9, 8, 7, 6, 0, 0, 0, 0], "bytes past the mapping read as zero");
    }

    #[test]
    fn outside_every_mapping_or_writing_read_only_memory_is_refused() {
        let g = GuestMemory::new();
        let f = memfd(0x2000);
        g.map(0x1000, 0x1000, &f, 0, false).unwrap();
        g.map(0x2000, 0x1000, &f, 0x1000, true).unwrap();
        let v = g.view();
        assert!(v.find(0x1000, 16, false).is_some());
        assert!(v.find(0x1000, 16, true).is_none(), "a read-only mapping refuses writes");
        assert!(v.find(0x1ff0, 32, false).is_none(), "an access across two mappings is refused (one TLP, one mapping)");
        assert!(v.find(0x3000, 1, false).is_none());
        assert!(v.find(0, 1, false).is_none());
        assert!(v.find(u64::MAX - 2, 8, false).is_none(), "no overflow at the top");
    }

    #[test]
    fn unmap_removes_what_lies_inside_and_overlaps_are_refused() {
        let g = GuestMemory::new();
        let f = memfd(0x4000);
        g.map(0, 0x1000, &f, 0, true).unwrap();
        g.map(0x1000, 0x3000, &f, 0x1000, true).unwrap();
        let e = g.map(0x2000, 0x1000, &f, 0, true).unwrap_err();
        assert!(e.contains("overlaps") && e.contains("0x1000..0x4000"), "{e}");
        assert_eq!(g.unmap(0, 0x1000, false), 1);
        assert_eq!(g.regions(), vec![(0x1000, 0x3000, true)]);
        assert!(g.view().find(0x10, 4, false).is_none(), "unmapped memory is refused at once");
        assert_eq!(g.unmap(0, 0, true), 1);
        assert!(g.regions().is_empty());
        let e = g.map(0, 0, &f, 0, true).unwrap_err();
        assert!(e.contains("0x0 bytes"), "{e}");
    }
}
