//! The IOVA allocator: which I/O virtual addresses DMA buffers get.
//!
//! The IOMMU reports the ranges it can translate (VFIO_IOMMU_GET_INFO's IOVA-range
//! capability; reserved regions such as the x86 MSI window 0xfee00000..0xfeefffff are
//! already holes there, and are cut out again here in case an older kernel does not report
//! ranges). The caller narrows that to a window, for devices that cannot address all of it
//! (QEMU's edu DMA engine only drives 28 address bits). Allocation is first fit over a
//! sorted list of free ranges, aligned to the IOMMU's smallest page; freeing merges
//! neighbours back.

use std::ops::Range;

use crate::DeviceError;

/// The x86 MSI address window: never handed out as an IOVA (a DMA write there is an interrupt).
pub const MSI_WINDOW: Range<u64> = 0xfee0_0000..0xfef0_0000;

#[derive(Debug, Clone)]
pub struct IovaAllocator {
    /// Free ranges, sorted, disjoint, non-adjacent, each aligned to `align` at both ends.
    free: Vec<Range<u64>>,
    align: u64,
    window: Range<u64>,
}

fn align_up(v: u64, align: u64) -> Option<u64> {
    v.checked_add(align - 1).map(|x| x & !(align - 1))
}

impl IovaAllocator {
    /// `valid`: the IOMMU's ranges as the kernel gives them (start, inclusive end);
    /// `window`: the part the device can address; `reserved`: holes to leave out;
    /// `align`: a power of two (the IOMMU's smallest page size).
    pub fn new(valid: &[(u64, u64)], window: Range<u64>, reserved: &[Range<u64>], align: u64) -> Result<IovaAllocator, DeviceError> {
        if !align.is_power_of_two() {
            return Err(DeviceError::InvalidArgument(format!("IOVA alignment must be a power of two, not {align:#x}")));
        }
        if window.start >= window.end {
            return Err(DeviceError::InvalidArgument(format!(
                "the IOVA window {:#x}..{:#x} is empty: give a start below its end",
                window.start, window.end
            )));
        }
        let mut pieces: Vec<Range<u64>> = Vec::new();
        let mut sorted: Vec<(u64, u64)> = valid.to_vec();
        sorted.sort();
        for &(start, end_incl) in &sorted {
            if end_incl < start {
                continue;
            }
            let end = end_incl.saturating_add(1);
            let s = start.max(window.start);
            let e = end.min(window.end);
            if s < e {
                pieces.push(s..e);
            }
        }
        for hole in reserved {
            pieces = pieces
                .into_iter()
                .flat_map(|r| {
                    if hole.end <= r.start || hole.start >= r.end {
                        vec![r]
                    } else {
                        let mut out = Vec::new();
                        if r.start < hole.start {
                            out.push(r.start..hole.start);
                        }
                        if hole.end < r.end {
                            out.push(hole.end..r.end);
                        }
                        out
                    }
                })
                .collect();
        }
        let mut free: Vec<Range<u64>> = Vec::new();
        for r in pieces {
            let Some(s) = align_up(r.start, align) else { continue };
            let e = r.end & !(align - 1);
            if s >= e {
                continue;
            }
            match free.last_mut() {
                Some(last) if last.end >= s => last.end = last.end.max(e),
                _ => free.push(s..e),
            }
        }
        if free.is_empty() {
            return Err(DeviceError::Backend(format!(
                "no usable IOVA in the window {:#x}..{:#x}: the IOMMU's valid ranges are {} \
                 (MSI window and reserved regions left out); choose a window inside them",
                window.start,
                window.end,
                describe_ranges(&sorted)
            )));
        }
        Ok(IovaAllocator { free, align, window })
    }

    /// The smallest unit of allocation.
    pub fn align(&self) -> u64 {
        self.align
    }

    /// Free bytes left.
    pub fn free_bytes(&self) -> u64 {
        self.free.iter().map(|r| r.end - r.start).sum()
    }

    /// The free ranges (for diagnostics and tests).
    pub fn free_ranges(&self) -> &[Range<u64>] {
        &self.free
    }

    /// Allocates `len` bytes (rounded up to the alignment); returns the IOVA.
    pub fn alloc(&mut self, len: u64) -> Result<u64, DeviceError> {
        if len == 0 {
            return Err(DeviceError::InvalidArgument("a DMA buffer needs at least 1 byte, not 0".into()));
        }
        let Some(size) = align_up(len, self.align) else {
            return Err(DeviceError::InvalidArgument(format!("a DMA buffer of {len} bytes is too large")));
        };
        let Some(i) = self.free.iter().position(|r| r.end - r.start >= size) else {
            let largest = self.free.iter().map(|r| r.end - r.start).max().unwrap_or(0);
            return Err(DeviceError::Backend(format!(
                "no free IOVA range of {size} bytes in the window {:#x}..{:#x} (largest free range: {largest} bytes, \
                 {} bytes free in all): free DMA buffers or widen the IOVA window",
                self.window.start,
                self.window.end,
                self.free_bytes()
            )));
        };
        let iova = self.free[i].start;
        self.free[i].start += size;
        if self.free[i].start == self.free[i].end {
            self.free.remove(i);
        }
        Ok(iova)
    }

    /// Allocates `len` bytes starting on a multiple of `align` (a power of two no smaller
    /// than the allocator's), e.g. a huge page's size so that the IOMMU can map the buffer
    /// with pages of that size. The bytes skipped to reach the alignment stay free.
    pub fn alloc_aligned(&mut self, len: u64, align: u64) -> Result<u64, DeviceError> {
        if align <= self.align {
            return self.alloc(len);
        }
        if !align.is_power_of_two() {
            return Err(DeviceError::InvalidArgument(format!("an IOVA alignment must be a power of two, not {align}")));
        }
        let Some(size) = align_up(len, align) else {
            return Err(DeviceError::InvalidArgument(format!("a DMA buffer of {len} bytes is too large")));
        };
        let fits = |r: &Range<u64>| align_up(r.start, align).is_some_and(|s| s.checked_add(size).is_some_and(|e| e <= r.end));
        let Some(i) = self.free.iter().position(fits) else {
            return Err(DeviceError::Backend(format!(
                "no free IOVA range of {size} bytes aligned to {align} in the window {:#x}..{:#x} ({} bytes free in all): \
                 free DMA buffers or widen the IOVA window",
                self.window.start,
                self.window.end,
                self.free_bytes()
            )));
        };
        let r = self.free.remove(i);
        let start = align_up(r.start, align).expect("checked by fits");
        let mut keep = Vec::new();
        if r.start < start {
            keep.push(r.start..start);
        }
        if start + size < r.end {
            keep.push(start + size..r.end);
        }
        for (k, piece) in keep.into_iter().enumerate() {
            self.free.insert(i + k, piece);
        }
        Ok(start)
    }

    /// Returns `len` bytes at `iova` (as given to and returned by `alloc`).
    pub fn free(&mut self, iova: u64, len: u64) {
        let Some(size) = align_up(len, self.align) else { return };
        let r = iova..iova + size;
        let i = self.free.partition_point(|f| f.start < r.start);
        self.free.insert(i, r);
        // Merge with the following and the preceding range.
        if i + 1 < self.free.len() && self.free[i].end == self.free[i + 1].start {
            self.free[i].end = self.free[i + 1].end;
            self.free.remove(i + 1);
        }
        if i > 0 && self.free[i - 1].end == self.free[i].start {
            self.free[i - 1].end = self.free[i].end;
            self.free.remove(i);
        }
    }
}

fn describe_ranges(ranges: &[(u64, u64)]) -> String {
    if ranges.is_empty() {
        return "none".into();
    }
    ranges.iter().map(|(s, e)| format!("{s:#x}..={e:#x}")).collect::<Vec<_>>().join(", ")
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    const PAGE: u64 = 4096;

    #[test]
    fn huge_page_buffers_start_on_their_page_size_and_the_gap_stays_free() {
        let mut a = IovaAllocator::new(&[(0, (1 << 39) - 1)], 0x1000..0x100_0000, &[], PAGE).unwrap();
        let small = a.alloc(PAGE).unwrap();
        assert_eq!(small, 0x1000);
        let huge = a.alloc_aligned(3 << 20, 2 << 20).unwrap();
        assert_eq!(huge, 2 << 20, "the next 2 MiB boundary");
        assert_eq!(a.free_ranges(), &[0x2000..0x20_0000, 0x60_0000..0x100_0000]);
        a.free(huge, 4 << 20);
        a.free(small, PAGE);
        assert_eq!(a.free_ranges(), std::slice::from_ref(&(0x1000..0x100_0000)));
        assert!(a.alloc_aligned(1 << 30, 1 << 30).unwrap_err().to_string().contains("aligned to"));
    }

    #[test]
    fn window_and_msi_hole_are_respected() {
        // An Intel IOMMU with a 39-bit address width reports its valid range with the MSI
        // window already cut out; emulate an older kernel reporting one range.
        let mut a = IovaAllocator::new(&[(0, (1 << 39) - 1)], 0xfed0_0000..0xff00_0000, &[MSI_WINDOW], PAGE).unwrap();
        assert_eq!(a.free_ranges(), &[0xfed0_0000..0xfee0_0000, 0xfef0_0000..0xff00_0000]);
        let first = a.alloc(0x10_0000).unwrap();
        assert_eq!(first, 0xfed0_0000);
        // The next 1 MiB cannot straddle the MSI window: it lands after it.
        let second = a.alloc(0x10_0000).unwrap();
        assert_eq!(second, 0xfef0_0000);
        assert!(!MSI_WINDOW.contains(&second));
    }

    #[test]
    fn rounds_and_aligns_to_pages() {
        let mut a = IovaAllocator::new(&[(0x1234, 0xf_ffff)], 0..1 << 28, &[], PAGE).unwrap();
        assert_eq!(a.free_ranges(), std::slice::from_ref(&(0x2000..0x10_0000)));
        let x = a.alloc(1).unwrap();
        let y = a.alloc(PAGE + 1).unwrap();
        assert_eq!(x, 0x2000);
        assert_eq!(y, 0x3000);
        assert_eq!(a.alloc(10).unwrap(), 0x5000);
        assert_eq!(x % PAGE, 0);
    }

    #[test]
    fn exhaustion_is_a_clear_error_and_free_merges() {
        let mut a = IovaAllocator::new(&[(0, u64::MAX)], 0x10000..0x14000, &[], PAGE).unwrap();
        let b: Vec<u64> = (0..4).map(|_| a.alloc(PAGE).unwrap()).collect();
        let err = a.alloc(1).unwrap_err().to_string();
        assert!(err.contains("no free IOVA range of 4096 bytes"), "{err}");
        assert!(err.contains("0x10000..0x14000"), "{err}");
        assert!(err.contains("widen the IOVA window"), "{err}");
        // Free out of order; everything merges back into one range.
        a.free(b[1], PAGE);
        a.free(b[3], PAGE);
        a.free(b[0], PAGE);
        a.free(b[2], PAGE);
        assert_eq!(a.free_ranges(), std::slice::from_ref(&(0x10000..0x14000)));
        assert_eq!(a.alloc(4 * PAGE).unwrap(), 0x10000);
    }

    #[test]
    fn fragmentation_is_reported_with_the_largest_range() {
        let mut a = IovaAllocator::new(&[(0, u64::MAX)], 0..0x4000, &[], PAGE).unwrap();
        let b: Vec<u64> = (0..4).map(|_| a.alloc(PAGE).unwrap()).collect();
        a.free(b[0], PAGE);
        a.free(b[2], PAGE);
        let err = a.alloc(2 * PAGE).unwrap_err().to_string();
        assert!(err.contains("largest free range: 4096 bytes"), "{err}");
        assert!(err.contains("8192 bytes free"), "{err}");
    }

    #[test]
    fn bad_arguments_are_refused() {
        assert!(IovaAllocator::new(&[(0, 100)], 0..1, &[], 3).unwrap_err().to_string().contains("power of two"));
        assert!(IovaAllocator::new(&[(0, 100)], 5..5, &[], PAGE).unwrap_err().to_string().contains("is empty"));
        let err = IovaAllocator::new(&[(1 << 40, 1 << 41)], 0..1 << 28, &[], PAGE).unwrap_err().to_string();
        assert!(err.contains("no usable IOVA"), "{err}");
        assert!(err.contains("0x10000000000..=0x20000000000"), "{err}");
        let mut a = IovaAllocator::new(&[(0, u64::MAX)], 0..1 << 20, &[], PAGE).unwrap();
        assert!(a.alloc(0).is_err());
        assert!(a.alloc(u64::MAX).is_err());
    }
}
