//! Host memory: one file in the runtime directory, mapped shared by the sim and by every
//! client, so the card's DMA lands directly in the clients' buffers. The card sees byte 0 of
//! the file at `bus_base`. Clients allocate ranges of it; the card may only touch ranges
//! some live client allocated (everything else faults, like an IOMMU would).

use std::collections::BTreeMap;
use std::fs::File;
#[cfg(test)]
use std::fs::OpenOptions;
use std::path::{Path, PathBuf};

use memmap2::MmapMut;

/// One allocation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Allocation {
    pub id: u64,
    pub client: u64,
    /// Offset in the file.
    pub offset: u64,
    pub len: u64,
}

/// First-fit allocator over `0..size` with coalescing free ranges. Pure bookkeeping (no
/// memory), so it is tested on its own.
#[derive(Debug)]
pub struct Allocator {
    size: u64,
    /// Free ranges: start -> len, never adjacent.
    free: BTreeMap<u64, u64>,
    /// Live allocations: offset -> allocation.
    used: BTreeMap<u64, Allocation>,
    next_id: u64,
}

impl Allocator {
    pub fn new(size: u64) -> Allocator {
        let mut free = BTreeMap::new();
        if size > 0 {
            free.insert(0, size);
        }
        Allocator { size, free, used: BTreeMap::new(), next_id: 1 }
    }

    pub fn size(&self) -> u64 {
        self.size
    }

    /// Allocates `len` bytes aligned to `align` (a power of two; 0 means 4096).
    pub fn alloc(&mut self, client: u64, len: u64, align: u64) -> Result<Allocation, String> {
        let align = if align == 0 { 4096 } else { align };
        if !align.is_power_of_two() || align > (1 << 30) {
            return Err(format!("alignment must be a power of two up to 1 GiB (or 0 for 4096), not {align}"));
        }
        if len == 0 || len > self.size {
            return Err(format!("allocation length must be 1..={} bytes (the host memory size, --host-mem-mib), not {len}", self.size));
        }
        let mut found = None;
        for (&start, &flen) in &self.free {
            let aligned = start.div_ceil(align) * align;
            if aligned >= start + flen {
                continue;
            }
            if start + flen - aligned >= len {
                found = Some((start, flen, aligned));
                break;
            }
        }
        let Some((start, flen, aligned)) = found else {
            return Err(format!(
                "no free range of {len} bytes aligned to {align} in host memory ({} bytes, {} allocations live): free buffers or start tlpx-sim with a larger --host-mem-mib",
                self.size,
                self.used.len()
            ));
        };
        self.free.remove(&start);
        if aligned > start {
            self.free.insert(start, aligned - start);
        }
        let end = aligned + len;
        if end < start + flen {
            self.free.insert(end, start + flen - end);
        }
        let a = Allocation { id: self.next_id, client, offset: aligned, len };
        self.next_id += 1;
        self.used.insert(aligned, a);
        Ok(a)
    }

    /// Frees allocation `id` if `client` owns it.
    pub fn free(&mut self, client: u64, id: u64) -> Result<Allocation, String> {
        let Some((&off, &a)) = self.used.iter().find(|(_, a)| a.id == id && a.client == client) else {
            let mine: Vec<String> = self.used.values().filter(|a| a.client == client).map(|a| a.id.to_string()).collect();
            return Err(format!("DMA allocation id {id} is not one of this client's live allocations (live: [{}])", mine.join(", ")));
        };
        self.used.remove(&off);
        self.release(off, a.len);
        Ok(a)
    }

    /// Frees every allocation of `client`; returns how many.
    pub fn free_client(&mut self, client: u64) -> usize {
        let ids: Vec<u64> = self.used.values().filter(|a| a.client == client).map(|a| a.id).collect();
        for id in &ids {
            let _ = self.free(client, *id);
        }
        ids.len()
    }

    fn release(&mut self, mut start: u64, mut len: u64) {
        if let Some((&pstart, &plen)) = self.free.range(..start).next_back() {
            if pstart + plen == start {
                self.free.remove(&pstart);
                start = pstart;
                len += plen;
            }
        }
        if let Some(&nlen) = self.free.get(&(start + len)) {
            self.free.remove(&(start + len));
            len += nlen;
        }
        self.free.insert(start, len);
    }

    /// The allocation that holds all of `offset..offset+len`, if one does.
    #[inline]
    pub fn find(&self, offset: u64, len: u64) -> Option<&Allocation> {
        let (_, a) = self.used.range(..=offset).next_back()?;
        (offset.checked_add(len)? <= a.offset + a.len).then_some(a)
    }

    pub fn live(&self) -> usize {
        self.used.len()
    }
}

/// The host-memory file and its mapping in the sim.
pub struct HostMemory {
    path: PathBuf,
    map: MmapMut,
    pub bus_base: u64,
    pub alloc: Allocator,
}

impl HostMemory {
    /// Sizes `file` (new and empty, at `path`) to `size` bytes (sparse) and maps it.
    pub fn new(file: File, path: &Path, size: u64, bus_base: u64) -> std::io::Result<HostMemory> {
        file.set_len(size)?;
        // SAFETY: the file is ours; clients map it too, which is the point (shared DMA
        // memory): all accesses here go through copies, never references held across cycles.
        let map = unsafe { MmapMut::map_mut(&file)? };
        Ok(HostMemory { path: path.to_owned(), map, bus_base, alloc: Allocator::new(size) })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn size(&self) -> u64 {
        self.alloc.size()
    }

    /// File offset of bus address `addr` when `addr..addr+len` lies in one live allocation.
    #[inline]
    pub fn translate(&self, addr: u64, len: u64) -> Option<u64> {
        let off = addr.checked_sub(self.bus_base)?;
        self.alloc.find(off, len).map(|_| off)
    }

    /// Reads `dst.len()` bytes at file offset `off`; bytes beyond the file read as zero.
    pub fn read(&self, off: u64, dst: &mut [u8]) {
        for (i, b) in dst.iter_mut().enumerate() {
            *b = usize::try_from(off + i as u64).ok().and_then(|o| self.map.get(o)).copied().unwrap_or(0);
        }
    }

    /// Writes byte `value` at file offset `off` (ignored beyond the file).
    #[inline]
    pub fn write_byte(&mut self, off: u64, value: u8) {
        if let Some(b) = usize::try_from(off).ok().and_then(|o| self.map.get_mut(o)) {
            *b = value;
        }
    }

    /// Zeroes `off..off+len` (fresh allocations start zeroed).
    pub fn zero(&mut self, off: u64, len: u64) {
        let (Ok(s), Ok(e)) = (usize::try_from(off), usize::try_from(off + len)) else { return };
        let end = e.min(self.map.len());
        if let Some(r) = self.map.get_mut(s..end) {
            r.fill(0);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn alloc_aligns_and_frees_coalesce() {
        let mut a = Allocator::new(1 << 20);
        let x = a.alloc(1, 100, 0).unwrap();
        assert_eq!(x.offset, 0);
        let y = a.alloc(1, 4096, 4096).unwrap();
        assert_eq!(y.offset, 4096);
        // First fit: the gap after x, aligned up to 64.
        let z = a.alloc(2, 10, 64).unwrap();
        assert_eq!(z.offset, 128);
        assert_eq!(a.find(4096, 4096).map(|r| r.id), Some(y.id));
        assert!(a.find(4095, 2).is_none());
        assert!(a.find(100, 1).is_none(), "byte after the first allocation is not allocated");
        assert_eq!(a.find(99, 1).map(|r| r.id), Some(x.id));
        a.free(1, y.id).unwrap();
        assert!(a.find(4096, 4).is_none());
        assert!(a.free(2, x.id).is_err(), "client 2 does not own x");
        assert_eq!(a.free_client(1), 1);
        a.free(2, z.id).unwrap();
        assert_eq!(a.live(), 0);
        // Everything coalesced back: the whole size is allocatable again.
        let all = a.alloc(3, 1 << 20, 0).unwrap();
        assert_eq!(all.offset, 0);
    }

    #[test]
    fn alloc_errors_name_the_bad_value() {
        let mut a = Allocator::new(1 << 16);
        let e = a.alloc(1, 0, 0).unwrap_err();
        assert!(e.contains("not 0"), "{e}");
        let e = a.alloc(1, 10, 3).unwrap_err();
        assert!(e.contains("not 3"), "{e}");
        a.alloc(1, 1 << 15, 0).unwrap();
        let e = a.alloc(1, 1 << 16, 0).unwrap_err();
        assert!(e.contains("--host-mem-mib"), "{e}");
        let e = a.free(1, 99).unwrap_err();
        assert!(e.contains("99") && e.contains("live: [1]"), "{e}");
    }

    #[test]
    fn host_memory_translates_bus_addresses() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("mem");
        let file = OpenOptions::new().read(true).write(true).create_new(true).open(&path).unwrap();
        let mut m = HostMemory::new(file, &path, 1 << 16, 0x4000_0000).unwrap();
        let a = m.alloc.alloc(1, 256, 0).unwrap();
        assert_eq!(m.translate(0x4000_0000, 256), Some(a.offset));
        assert_eq!(m.translate(0x4000_0000, 257), None);
        assert_eq!(m.translate(0x3fff_fffc, 4), None);
        m.write_byte(3, 0xab);
        let mut b = [0u8; 4];
        m.read(0, &mut b);
        assert_eq!(b, [0, 0, 0, 0xab]);
        m.zero(0, 256);
        m.read(0, &mut b);
        assert_eq!(b, [0; 4]);
        let mut far = [1u8; 2];
        m.read((1 << 16) - 1, &mut far);
        assert_eq!(far, [0, 0]);
    }
}
