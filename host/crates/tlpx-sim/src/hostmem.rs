//! Host memory: one file in the runtime directory, mapped shared by the sim and by every
//! client, so the card's DMA lands directly in the clients' buffers.
//!
//! The root complex is an IOMMU: a client's allocation is a range of the file (its memory)
//! mapped at a bus address of its own (its IOVA), taken from an IOVA window below 4 GiB.
//! IOVAs are handed out in increasing order and come round again only when the window is
//! used up, never while an allocation holds them, so the bus address of a freed buffer is not
//! reused for a long time even though its file bytes are reused at once. The card may only
//! touch bus addresses of live allocations: anything else faults, as with an IOMMU. A card
//! block still doing DMA for a buffer its owner freed (or for a client that died) then
//! faults, instead of reading or writing whoever has those file bytes now.

use std::collections::BTreeMap;
use std::fs::File;
#[cfg(test)]
use std::fs::OpenOptions;
use std::path::{Path, PathBuf};

use memmap2::MmapMut;

/// The IOMMU's page: an allocation gets whole IOVA pages of its own, and its bus address
/// keeps its file offset's offset in the page, as a real IOMMU maps pages.
pub const IOVA_PAGE: u64 = 4096;

/// One allocation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Allocation {
    pub id: u64,
    pub client: u64,
    /// Offset in the file.
    pub offset: u64,
    /// Where the card sees it (the IOVA).
    pub bus_addr: u64,
    pub len: u64,
}

impl Allocation {
    /// Whether the bus addresses `addr..addr+len` all lie in this allocation.
    #[inline]
    fn holds(&self, addr: u64, len: u64) -> bool {
        addr >= self.bus_addr && addr.checked_add(len).is_some_and(|end| end <= self.bus_addr + self.len)
    }
}

/// Why an allocation was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AllocError {
    /// A bad length or alignment.
    Invalid(String),
    /// No room in host memory or in the IOVA window.
    OutOfMemory(String),
}

impl std::fmt::Display for AllocError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            AllocError::Invalid(m) | AllocError::OutOfMemory(m) => f.write_str(m),
        }
    }
}

fn align_up(x: u64, align: u64) -> Option<u64> {
    Some(x.checked_add(align - 1)? & !(align - 1))
}

/// First-fit allocator of the file's bytes `0..size`, with coalescing free ranges.
#[derive(Debug)]
struct FileSpace {
    /// Free ranges: start -> len, never adjacent.
    free: BTreeMap<u64, u64>,
}

impl FileSpace {
    fn new(size: u64) -> FileSpace {
        let mut free = BTreeMap::new();
        if size > 0 {
            free.insert(0, size);
        }
        FileSpace { free }
    }

    fn alloc(&mut self, len: u64, align: u64) -> Option<u64> {
        let (start, flen, aligned) = self.free.iter().find_map(|(&start, &flen)| {
            let aligned = align_up(start, align)?;
            (aligned < start + flen && start + flen - aligned >= len).then_some((start, flen, aligned))
        })?;
        self.free.remove(&start);
        if aligned > start {
            self.free.insert(start, aligned - start);
        }
        let end = aligned + len;
        if end < start + flen {
            self.free.insert(end, start + flen - end);
        }
        Some(aligned)
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
}

/// The IOVA window `base..end`: spans of whole pages handed out in increasing order from a
/// cursor, round to `base` again only when the rest of the window has no room, and never
/// over a live span. Remembers which freed spans have not been handed out again, so that a
/// fault there can be told from one at an address nobody was ever given.
#[derive(Debug)]
pub struct IovaSpace {
    base: u64,
    end: u64,
    /// Where the next search starts: just past the last span handed out.
    next: u64,
    /// Live spans: start -> end.
    live: BTreeMap<u64, u64>,
    /// Freed spans not handed out since: start -> end, never adjacent.
    freed: BTreeMap<u64, u64>,
}

impl IovaSpace {
    pub fn new(base: u64, size: u64) -> IovaSpace {
        IovaSpace { base, end: base.saturating_add(size), next: base, live: BTreeMap::new(), freed: BTreeMap::new() }
    }

    /// Takes a span of `len` bytes aligned to `align` (both multiples of the page).
    pub fn alloc(&mut self, len: u64, align: u64) -> Option<u64> {
        let start = self.fit(self.next, len, align).or_else(|| self.fit(self.base, len, align))?;
        let end = start + len;
        self.live.insert(start, end);
        self.next = end;
        self.unfree(start, end);
        Some(start)
    }

    /// The first place from `from` on where `len` bytes aligned to `align` overlap no live span.
    fn fit(&self, from: u64, len: u64, align: u64) -> Option<u64> {
        let mut at = align_up(from, align)?;
        loop {
            let end = at.checked_add(len)?;
            if end > self.end {
                return None;
            }
            // Spans are disjoint: only the last one starting before `end` can overlap.
            match self.live.range(..end).next_back() {
                Some((_, &live_end)) if live_end > at => at = align_up(live_end, align)?,
                _ => return Some(at),
            }
        }
    }

    /// Gives back the span that starts at `start`.
    pub fn free(&mut self, start: u64) {
        let Some(mut end) = self.live.remove(&start) else { return };
        let mut start = start;
        if let Some((&ps, &pe)) = self.freed.range(..start).next_back() {
            if pe == start {
                self.freed.remove(&ps);
                start = ps;
            }
        }
        if let Some(ne) = self.freed.remove(&end) {
            end = ne;
        }
        self.freed.insert(start, end);
    }

    /// Forgets `start..end` as freed (it is live again).
    fn unfree(&mut self, start: u64, end: u64) {
        let overlapping: Vec<(u64, u64)> = self.freed.range(..end).rev().take_while(|(_, &e)| e > start).map(|(&s, &e)| (s, e)).collect();
        for (s, e) in overlapping {
            self.freed.remove(&s);
            if s < start {
                self.freed.insert(s, start);
            }
            if e > end {
                self.freed.insert(end, e);
            }
        }
    }

    /// Whether any of `addr..addr+len` lies in a span that was handed out and freed since.
    pub fn was_freed(&self, addr: u64, len: u64) -> bool {
        let end = addr.saturating_add(len.max(1));
        self.freed.range(..end).next_back().is_some_and(|(_, &e)| e > addr)
    }

    pub fn size(&self) -> u64 {
        self.end - self.base
    }
}

/// The clients' allocations: file bytes (first fit, reused at once) mapped at fresh IOVAs.
/// Pure bookkeeping (no memory), so it is tested on its own.
#[derive(Debug)]
pub struct Allocator {
    size: u64,
    file: FileSpace,
    iova: IovaSpace,
    /// Live allocations by bus address.
    used: BTreeMap<u64, Allocation>,
    next_id: u64,
}

impl Allocator {
    /// `size` bytes of file, mapped at IOVAs in `iova_base..iova_base+iova_size`.
    pub fn new(size: u64, iova_base: u64, iova_size: u64) -> Allocator {
        Allocator { size, file: FileSpace::new(size), iova: IovaSpace::new(iova_base, iova_size), used: BTreeMap::new(), next_id: 1 }
    }

    pub fn size(&self) -> u64 {
        self.size
    }

    /// Allocates `len` bytes aligned to `align` (a power of two; 0 means 4096), in the file
    /// and on the bus alike.
    pub fn alloc(&mut self, client: u64, len: u64, align: u64) -> Result<Allocation, AllocError> {
        let align = if align == 0 { 4096 } else { align };
        if !align.is_power_of_two() || align > (1 << 30) {
            return Err(AllocError::Invalid(format!("alignment must be a power of two up to 1 GiB (or 0 for 4096), not {align}")));
        }
        if len == 0 || len > self.size {
            return Err(AllocError::Invalid(format!(
                "allocation length must be 1..={} bytes (the host memory size, --host-mem-mib), not {len}",
                self.size
            )));
        }
        let Some(offset) = self.file.alloc(len, align) else {
            return Err(AllocError::OutOfMemory(format!(
                "no free range of {len} bytes aligned to {align} in host memory ({} bytes, {} allocations live): free buffers or start tlpx-sim with a larger --host-mem-mib",
                self.size,
                self.used.len()
            )));
        };
        // Whole pages of IOVA; the bus address keeps the offset in the page (which `align`
        // divides when it is below a page).
        let in_page = offset % IOVA_PAGE;
        let span = (in_page + len).div_ceil(IOVA_PAGE) * IOVA_PAGE;
        let Some(start) = self.iova.alloc(span, align.max(IOVA_PAGE)) else {
            self.file.release(offset, len);
            return Err(AllocError::OutOfMemory(format!(
                "no room for {span} bytes of bus addresses aligned to {align} in the IOVA window ({} bytes from --dma-base, {} allocations live): free buffers",
                self.iova.size(),
                self.used.len()
            )));
        };
        let a = Allocation { id: self.next_id, client, offset, bus_addr: start + in_page, len };
        self.next_id += 1;
        self.used.insert(a.bus_addr, a);
        Ok(a)
    }

    /// Frees allocation `id` if `client` owns it: its file bytes may be handed out again at
    /// once, its bus addresses fault from now on.
    pub fn free(&mut self, client: u64, id: u64) -> Result<Allocation, String> {
        let Some((&bus, &a)) = self.used.iter().find(|(_, a)| a.id == id && a.client == client) else {
            let mine: Vec<String> = self.used.values().filter(|a| a.client == client).map(|a| a.id.to_string()).collect();
            return Err(format!("DMA allocation id {id} is not one of this client's live allocations (live: [{}])", mine.join(", ")));
        };
        self.used.remove(&bus);
        self.file.release(a.offset, a.len);
        self.iova.free(bus - bus % IOVA_PAGE);
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

    /// The live allocation that holds all of the bus addresses `addr..addr+len`, if one does.
    #[inline]
    pub fn find(&self, addr: u64, len: u64) -> Option<&Allocation> {
        let (_, a) = self.used.range(..=addr).next_back()?;
        a.holds(addr, len).then_some(a)
    }

    /// Whether any of the bus addresses `addr..addr+len` belonged to an allocation that was
    /// freed (by its owner, or because its owner disconnected) and not handed out since.
    pub fn was_freed(&self, addr: u64, len: u64) -> bool {
        self.iova.was_freed(addr, len)
    }

    pub fn live(&self) -> usize {
        self.used.len()
    }
}

/// The host-memory file and its mapping in the sim.
pub struct HostMemory {
    path: PathBuf,
    map: MmapMut,
    pub alloc: Allocator,
}

impl HostMemory {
    /// Sizes `file` (new and empty, at `path`) to `size` bytes (sparse) and maps it; its
    /// allocations get bus addresses in `iova_base..iova_base+iova_size`.
    pub fn new(file: File, path: &Path, size: u64, iova_base: u64, iova_size: u64) -> std::io::Result<HostMemory> {
        file.set_len(size)?;
        // SAFETY: the file is ours; clients map it too, which is the point (shared DMA
        // memory): all accesses here go through copies, never references held across cycles.
        let map = unsafe { MmapMut::map_mut(&file)? };
        Ok(HostMemory { path: path.to_owned(), map, alloc: Allocator::new(size, iova_base, iova_size) })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn size(&self) -> u64 {
        self.alloc.size()
    }

    /// The live allocation that holds all of the bus addresses `addr..addr+len`: the
    /// IOMMU's translation. None is a fault.
    #[inline]
    pub fn translate(&self, addr: u64, len: u64) -> Option<Allocation> {
        self.alloc.find(addr, len).copied()
    }

    /// Reads `dst.len()` bytes at bus address `addr` through allocation `a`; bytes outside
    /// it read as zero (a completion's DW may stick out of the allocation; it never shows
    /// another allocation's bytes).
    pub fn read(&self, a: &Allocation, addr: u64, dst: &mut [u8]) {
        dst.fill(0);
        // The part of addr..addr+len that lies in the allocation, copied in one piece.
        let lo = addr.max(a.bus_addr);
        let hi = addr.saturating_add(dst.len() as u64).min(a.bus_addr + a.len);
        if lo >= hi {
            return;
        }
        let (Ok(at), Ok(from), Ok(n)) =
            (usize::try_from(lo - addr), usize::try_from(a.offset + (lo - a.bus_addr)), usize::try_from(hi - lo))
        else {
            return;
        };
        if let (Some(d), Some(src)) = (dst.get_mut(at..at + n), self.map.get(from..from + n)) {
            d.copy_from_slice(src);
        }
    }

    /// Writes byte `value` at bus address `addr` through allocation `a` (ignored outside it).
    #[inline]
    pub fn write_byte(&mut self, a: &Allocation, addr: u64, value: u8) {
        if !a.holds(addr, 1) {
            return;
        }
        if let Some(b) = usize::try_from(a.offset + (addr - a.bus_addr)).ok().and_then(|o| self.map.get_mut(o)) {
            *b = value;
        }
    }

    /// Zeroes the file bytes `off..off+len` (fresh allocations start zeroed).
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

    const BASE: u64 = 0x4000_0000;

    #[test]
    fn file_bytes_are_first_fit_and_coalesce() {
        let mut a = Allocator::new(1 << 20, BASE, 1 << 30);
        let x = a.alloc(1, 100, 0).unwrap();
        assert_eq!(x.offset, 0);
        let y = a.alloc(1, 4096, 4096).unwrap();
        assert_eq!(y.offset, 4096);
        // First fit: the gap after x, aligned up to 64.
        let z = a.alloc(2, 10, 64).unwrap();
        assert_eq!(z.offset, 128);
        assert!(a.free(2, x.id).is_err(), "client 2 does not own x");
        a.free(1, y.id).unwrap();
        assert_eq!(a.free_client(1), 1);
        a.free(2, z.id).unwrap();
        assert_eq!(a.live(), 0);
        // Everything coalesced back: the whole size is allocatable again.
        let all = a.alloc(3, 1 << 20, 0).unwrap();
        assert_eq!(all.offset, 0);
    }

    #[test]
    fn bus_addresses_are_fresh_page_aligned_spans_and_translate_byte_exactly() {
        let mut a = Allocator::new(1 << 20, BASE, 1 << 30);
        let x = a.alloc(1, 100, 0).unwrap();
        assert_eq!(x.bus_addr, BASE);
        let y = a.alloc(1, 4096, 4096).unwrap();
        assert_eq!(y.bus_addr, BASE + 4096, "x has a whole page of IOVA");
        // Below a page of alignment the bus address keeps the file offset's place in the page.
        let z = a.alloc(2, 10, 64).unwrap();
        assert_eq!((z.offset, z.bus_addr), (128, BASE + 2 * 4096 + 128));
        assert_eq!(a.find(BASE + 4096, 4096).map(|r| r.id), Some(y.id));
        assert!(a.find(BASE + 4095, 2).is_none(), "across two allocations");
        assert!(a.find(BASE + 100, 1).is_none(), "the byte after x is in x's page but not x's");
        assert_eq!(a.find(BASE + 99, 1).map(|r| r.id), Some(x.id));
        assert!(a.find(BASE - 1, 1).is_none() && a.find(u64::MAX, 2).is_none());
        // Freed: the same file bytes come back at once, the bus addresses do not.
        a.free(1, y.id).unwrap();
        assert!(a.find(BASE + 4096, 4).is_none());
        assert!(a.was_freed(BASE + 4096, 4) && a.was_freed(BASE + 8191, 1));
        assert!(!a.was_freed(BASE + 3 * 4096, 4), "never handed out");
        assert!(!a.was_freed(BASE + 100, 4), "x is live");
        let w = a.alloc(1, 4096, 4096).unwrap();
        assert_eq!(w.offset, y.offset);
        assert_eq!(w.bus_addr, BASE + 3 * 4096, "the next fresh IOVA, not y's");
    }

    #[test]
    fn the_iova_window_wraps_only_when_used_up_and_never_over_a_live_span() {
        // A window of 8 pages.
        let mut s = IovaSpace::new(BASE, 8 * IOVA_PAGE);
        let p = IOVA_PAGE;
        let a = s.alloc(2 * p, p).unwrap();
        let b = s.alloc(p, p).unwrap();
        let c = s.alloc(3 * p, p).unwrap();
        assert_eq!((a, b, c), (BASE, BASE + 2 * p, BASE + 3 * p));
        s.free(a);
        s.free(c);
        assert!(s.was_freed(BASE, 1) && s.was_freed(BASE + 5 * p, 1) && !s.was_freed(BASE + 2 * p, p));
        // 2 pages are left at the top: taken before anything freed is reused.
        assert_eq!(s.alloc(2 * p, p), Some(BASE + 6 * p));
        // Used up: round to the base, skipping b, which is live.
        assert_eq!(s.alloc(2 * p, p), Some(BASE));
        assert!(!s.was_freed(BASE, 2 * p), "handed out again");
        assert_eq!(s.alloc(3 * p, p), Some(BASE + 3 * p), "over b, not on it");
        assert!(s.alloc(p, p).is_none(), "full: every page is live");
        s.free(b);
        assert_eq!(s.alloc(p, p), Some(BASE + 2 * p));
        // Alignment above a page.
        let mut s = IovaSpace::new(BASE, 64 * p);
        s.alloc(p, p).unwrap();
        assert_eq!(s.alloc(p, 16 * p), Some(BASE + 16 * p));
    }

    #[test]
    fn freed_spans_coalesce_and_split() {
        let p = IOVA_PAGE;
        let mut s = IovaSpace::new(BASE, 16 * p);
        let spans: Vec<u64> = (0..4).map(|_| s.alloc(p, p).unwrap()).collect();
        for &x in &spans {
            s.free(x);
        }
        assert_eq!(s.freed.len(), 1, "{:?}", s.freed);
        s.unfree(BASE + p, BASE + 2 * p);
        assert_eq!(s.freed.iter().map(|(&a, &b)| (a, b)).collect::<Vec<_>>(), vec![(BASE, BASE + p), (BASE + 2 * p, BASE + 4 * p)]);
    }

    #[test]
    fn alloc_errors_name_the_bad_value() {
        let mut a = Allocator::new(1 << 16, BASE, 1 << 20);
        let e = a.alloc(1, 0, 0).unwrap_err();
        assert!(matches!(&e, AllocError::Invalid(m) if m.contains("not 0")), "{e}");
        let e = a.alloc(1, 10, 3).unwrap_err();
        assert!(matches!(&e, AllocError::Invalid(m) if m.contains("not 3")), "{e}");
        a.alloc(1, 1 << 15, 0).unwrap();
        let e = a.alloc(1, 1 << 16, 0).unwrap_err();
        assert!(matches!(&e, AllocError::OutOfMemory(m) if m.contains("--host-mem-mib")), "{e}");
        let e = a.free(1, 99).unwrap_err();
        assert!(e.contains("99") && e.contains("live: [1]"), "{e}");
        // A window that is too fragmented for the request: out of memory, and the file bytes
        // it had taken are given back.
        let mut a = Allocator::new(1 << 16, BASE, 4 * IOVA_PAGE);
        let keep = a.alloc(1, 4096, 0).unwrap();
        let gone = a.alloc(1, 4096, 0).unwrap();
        a.alloc(1, 4096, 0).unwrap();
        a.free(1, gone.id).unwrap();
        let e = a.alloc(1, 8192, 0).unwrap_err();
        assert!(matches!(&e, AllocError::OutOfMemory(m) if m.contains("IOVA window")), "{e}");
        a.free(1, keep.id).unwrap();
        assert_eq!(a.alloc(1, 8192, 0).unwrap().offset, 0, "file bytes not leaked by the failed allocation");
    }

    #[test]
    fn host_memory_reads_and_writes_through_the_translation() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("mem");
        let file = OpenOptions::new().read(true).write(true).create_new(true).open(&path).unwrap();
        let mut m = HostMemory::new(file, &path, 1 << 16, BASE, 1 << 20).unwrap();
        let first = m.alloc.alloc(1, 256, 0).unwrap();
        m.alloc.free(1, first.id).unwrap();
        let a = m.alloc.alloc(1, 256, 0).unwrap();
        assert_eq!((a.offset, a.bus_addr), (0, BASE + 4096));
        assert_eq!(m.translate(a.bus_addr, 256), Some(a));
        assert_eq!(m.translate(a.bus_addr, 257), None);
        assert_eq!(m.translate(first.bus_addr, 4), None, "freed");
        m.write_byte(&a, a.bus_addr + 3, 0xab);
        m.write_byte(&a, a.bus_addr + 256, 0xcd);
        let mut b = [0u8; 4];
        m.read(&a, a.bus_addr, &mut b);
        assert_eq!(b, [0, 0, 0, 0xab]);
        let mut edge = [1u8; 4];
        m.read(&a, a.bus_addr + 254, &mut edge);
        assert_eq!(edge, [0, 0, 0, 0], "bytes past the allocation read as zero; the write past it was dropped");
        let mut before = [1u8; 8];
        m.read(&a, a.bus_addr - 4, &mut before);
        assert_eq!(before, [0, 0, 0, 0, 0, 0, 0, 0xab], "bytes before the allocation read as zero");
        m.zero(0, 256);
        m.read(&a, a.bus_addr, &mut b);
        assert_eq!(b, [0; 4]);
    }
}
