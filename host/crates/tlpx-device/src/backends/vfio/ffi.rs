//! The VFIO ABI (linux/vfio.h), written out in Rust: ioctl numbers, flags and the structures
//! the backend passes to the kernel. Only what tlpx uses. The unit tests compare every size
//! and number with the C header compiled at test time.

#![allow(non_camel_case_types)]

/// `VFIO_TYPE` (';') and `VFIO_BASE`: every VFIO ioctl is `_IO(VFIO_TYPE, VFIO_BASE + n)`,
/// i.e. no direction and no size bits — the structures carry their own `argsz`.
pub const VFIO_TYPE: u64 = b';' as u64;
pub const VFIO_BASE: u64 = 100;

/// `_IO(VFIO_TYPE, VFIO_BASE + n)` (asm-generic/ioctl.h: dir 0, size 0).
pub const fn vfio_io(n: u64) -> u64 {
    (VFIO_TYPE << 8) | (VFIO_BASE + n)
}

pub const VFIO_API_VERSION: i32 = 0;
pub const VFIO_TYPE1_IOMMU: u64 = 1;
pub const VFIO_TYPE1V2_IOMMU: u64 = 3;

pub const VFIO_GET_API_VERSION: u64 = vfio_io(0);
pub const VFIO_CHECK_EXTENSION: u64 = vfio_io(1);
pub const VFIO_SET_IOMMU: u64 = vfio_io(2);
pub const VFIO_GROUP_GET_STATUS: u64 = vfio_io(3);
pub const VFIO_GROUP_SET_CONTAINER: u64 = vfio_io(4);
pub const VFIO_GROUP_UNSET_CONTAINER: u64 = vfio_io(5);
pub const VFIO_GROUP_GET_DEVICE_FD: u64 = vfio_io(6);
pub const VFIO_DEVICE_GET_INFO: u64 = vfio_io(7);
pub const VFIO_DEVICE_GET_REGION_INFO: u64 = vfio_io(8);
pub const VFIO_DEVICE_GET_IRQ_INFO: u64 = vfio_io(9);
pub const VFIO_DEVICE_SET_IRQS: u64 = vfio_io(10);
pub const VFIO_DEVICE_RESET: u64 = vfio_io(11);
pub const VFIO_IOMMU_GET_INFO: u64 = vfio_io(12);
pub const VFIO_IOMMU_MAP_DMA: u64 = vfio_io(13);
pub const VFIO_IOMMU_UNMAP_DMA: u64 = vfio_io(14);

pub const VFIO_GROUP_FLAGS_VIABLE: u32 = 1 << 0;
pub const VFIO_GROUP_FLAGS_CONTAINER_SET: u32 = 1 << 1;

pub const VFIO_DEVICE_FLAGS_RESET: u32 = 1 << 0;
pub const VFIO_DEVICE_FLAGS_PCI: u32 = 1 << 1;

pub const VFIO_REGION_INFO_FLAG_READ: u32 = 1 << 0;
pub const VFIO_REGION_INFO_FLAG_WRITE: u32 = 1 << 1;
pub const VFIO_REGION_INFO_FLAG_MMAP: u32 = 1 << 2;
pub const VFIO_REGION_INFO_FLAG_CAPS: u32 = 1 << 3;

pub const VFIO_PCI_BAR0_REGION_INDEX: u32 = 0;
pub const VFIO_PCI_ROM_REGION_INDEX: u32 = 6;
pub const VFIO_PCI_CONFIG_REGION_INDEX: u32 = 7;

pub const VFIO_PCI_INTX_IRQ_INDEX: u32 = 0;
pub const VFIO_PCI_MSI_IRQ_INDEX: u32 = 1;
pub const VFIO_PCI_MSIX_IRQ_INDEX: u32 = 2;

pub const VFIO_IRQ_INFO_EVENTFD: u32 = 1 << 0;

pub const VFIO_IRQ_SET_DATA_NONE: u32 = 1 << 0;
pub const VFIO_IRQ_SET_DATA_BOOL: u32 = 1 << 1;
pub const VFIO_IRQ_SET_DATA_EVENTFD: u32 = 1 << 2;
pub const VFIO_IRQ_SET_ACTION_MASK: u32 = 1 << 3;
pub const VFIO_IRQ_SET_ACTION_UNMASK: u32 = 1 << 4;
pub const VFIO_IRQ_SET_ACTION_TRIGGER: u32 = 1 << 5;

pub const VFIO_IOMMU_INFO_PGSIZES: u32 = 1 << 0;
pub const VFIO_IOMMU_INFO_CAPS: u32 = 1 << 1;
pub const VFIO_IOMMU_TYPE1_INFO_CAP_IOVA_RANGE: u16 = 1;

pub const VFIO_DMA_MAP_FLAG_READ: u32 = 1 << 0;
pub const VFIO_DMA_MAP_FLAG_WRITE: u32 = 1 << 1;

#[repr(C)]
#[derive(Debug, Default, Clone, Copy)]
pub struct vfio_group_status {
    pub argsz: u32,
    pub flags: u32,
}

#[repr(C)]
#[derive(Debug, Default, Clone, Copy)]
pub struct vfio_device_info {
    pub argsz: u32,
    pub flags: u32,
    pub num_regions: u32,
    pub num_irqs: u32,
    pub cap_offset: u32,
}

#[repr(C)]
#[derive(Debug, Default, Clone, Copy)]
pub struct vfio_region_info {
    pub argsz: u32,
    pub flags: u32,
    pub index: u32,
    pub cap_offset: u32,
    pub size: u64,
    pub offset: u64,
}

#[repr(C)]
#[derive(Debug, Default, Clone, Copy)]
pub struct vfio_irq_info {
    pub argsz: u32,
    pub flags: u32,
    pub index: u32,
    pub count: u32,
}

/// The fixed part of `struct vfio_irq_set`; `data[]` (here: one i32 eventfd per vector)
/// follows it directly (offset 20, see the tests).
#[repr(C)]
#[derive(Debug, Default, Clone, Copy)]
pub struct vfio_irq_set {
    pub argsz: u32,
    pub flags: u32,
    pub index: u32,
    pub start: u32,
    pub count: u32,
}

#[repr(C)]
#[derive(Debug, Default, Clone, Copy)]
pub struct vfio_info_cap_header {
    pub id: u16,
    pub version: u16,
    pub next: u32,
}

#[repr(C)]
#[derive(Debug, Default, Clone, Copy)]
pub struct vfio_iommu_type1_info {
    pub argsz: u32,
    pub flags: u32,
    pub iova_pgsizes: u64,
    pub cap_offset: u32,
}

/// The fixed part of `struct vfio_iommu_type1_info_cap_iova_range`; `nr_iovas`
/// `vfio_iova_range`s follow it.
#[repr(C)]
#[derive(Debug, Default, Clone, Copy)]
pub struct vfio_iommu_type1_info_cap_iova_range {
    pub header: vfio_info_cap_header,
    pub nr_iovas: u32,
    pub reserved: u32,
}

#[repr(C)]
#[derive(Debug, Default, Clone, Copy)]
pub struct vfio_iova_range {
    pub start: u64,
    /// Inclusive.
    pub end: u64,
}

#[repr(C)]
#[derive(Debug, Default, Clone, Copy)]
pub struct vfio_iommu_type1_dma_map {
    pub argsz: u32,
    pub flags: u32,
    pub vaddr: u64,
    pub iova: u64,
    pub size: u64,
}

#[repr(C)]
#[derive(Debug, Default, Clone, Copy)]
pub struct vfio_iommu_type1_dma_unmap {
    pub argsz: u32,
    pub flags: u32,
    pub iova: u64,
    pub size: u64,
}

/// `argsz` of a structure: its size as a u32.
pub const fn argsz<T>() -> u32 {
    std::mem::size_of::<T>() as u32
}

/// Reads a `T` at `offset` of a kernel-filled byte buffer (capability chains), or `None`
/// when it would not fit.
pub fn read_struct<T: Copy>(buf: &[u8], offset: usize) -> Option<T> {
    let end = offset.checked_add(std::mem::size_of::<T>())?;
    if end > buf.len() {
        return None;
    }
    // SAFETY: bounds checked above; T is a plain-old-data repr(C) struct of integers, valid
    // for any bit pattern, and read_unaligned accepts any alignment.
    Some(unsafe { std::ptr::read_unaligned(buf.as_ptr().add(offset) as *const T) })
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use std::mem::{offset_of, size_of};

    /// Every size and number this module writes out, as the C header says it.
    const C_PROGRAM: &str = r#"
#include <stdio.h>
#include <stddef.h>
#include <linux/vfio.h>
#define P(name, value) printf("%s %llu\n", name, (unsigned long long)(value))
int main(void) {
    P("VFIO_GET_API_VERSION", VFIO_GET_API_VERSION);
    P("VFIO_CHECK_EXTENSION", VFIO_CHECK_EXTENSION);
    P("VFIO_SET_IOMMU", VFIO_SET_IOMMU);
    P("VFIO_GROUP_GET_STATUS", VFIO_GROUP_GET_STATUS);
    P("VFIO_GROUP_SET_CONTAINER", VFIO_GROUP_SET_CONTAINER);
    P("VFIO_GROUP_UNSET_CONTAINER", VFIO_GROUP_UNSET_CONTAINER);
    P("VFIO_GROUP_GET_DEVICE_FD", VFIO_GROUP_GET_DEVICE_FD);
    P("VFIO_DEVICE_GET_INFO", VFIO_DEVICE_GET_INFO);
    P("VFIO_DEVICE_GET_REGION_INFO", VFIO_DEVICE_GET_REGION_INFO);
    P("VFIO_DEVICE_GET_IRQ_INFO", VFIO_DEVICE_GET_IRQ_INFO);
    P("VFIO_DEVICE_SET_IRQS", VFIO_DEVICE_SET_IRQS);
    P("VFIO_DEVICE_RESET", VFIO_DEVICE_RESET);
    P("VFIO_IOMMU_GET_INFO", VFIO_IOMMU_GET_INFO);
    P("VFIO_IOMMU_MAP_DMA", VFIO_IOMMU_MAP_DMA);
    P("VFIO_IOMMU_UNMAP_DMA", VFIO_IOMMU_UNMAP_DMA);
    P("VFIO_API_VERSION", VFIO_API_VERSION);
    P("VFIO_TYPE1_IOMMU", VFIO_TYPE1_IOMMU);
    P("VFIO_TYPE1v2_IOMMU", VFIO_TYPE1v2_IOMMU);
    P("VFIO_GROUP_FLAGS_VIABLE", VFIO_GROUP_FLAGS_VIABLE);
    P("VFIO_DEVICE_FLAGS_RESET", VFIO_DEVICE_FLAGS_RESET);
    P("VFIO_DEVICE_FLAGS_PCI", VFIO_DEVICE_FLAGS_PCI);
    P("VFIO_REGION_INFO_FLAG_MMAP", VFIO_REGION_INFO_FLAG_MMAP);
    P("VFIO_PCI_CONFIG_REGION_INDEX", VFIO_PCI_CONFIG_REGION_INDEX);
    P("VFIO_PCI_ROM_REGION_INDEX", VFIO_PCI_ROM_REGION_INDEX);
    P("VFIO_PCI_MSI_IRQ_INDEX", VFIO_PCI_MSI_IRQ_INDEX);
    P("VFIO_PCI_MSIX_IRQ_INDEX", VFIO_PCI_MSIX_IRQ_INDEX);
    P("VFIO_IRQ_INFO_EVENTFD", VFIO_IRQ_INFO_EVENTFD);
    P("VFIO_IRQ_SET_DATA_NONE", VFIO_IRQ_SET_DATA_NONE);
    P("VFIO_IRQ_SET_DATA_EVENTFD", VFIO_IRQ_SET_DATA_EVENTFD);
    P("VFIO_IRQ_SET_ACTION_TRIGGER", VFIO_IRQ_SET_ACTION_TRIGGER);
    P("VFIO_IOMMU_INFO_CAPS", VFIO_IOMMU_INFO_CAPS);
    P("VFIO_IOMMU_TYPE1_INFO_CAP_IOVA_RANGE", VFIO_IOMMU_TYPE1_INFO_CAP_IOVA_RANGE);
    P("VFIO_DMA_MAP_FLAG_READ", VFIO_DMA_MAP_FLAG_READ);
    P("VFIO_DMA_MAP_FLAG_WRITE", VFIO_DMA_MAP_FLAG_WRITE);
    P("sizeof vfio_group_status", sizeof(struct vfio_group_status));
    P("sizeof vfio_device_info", sizeof(struct vfio_device_info));
    P("sizeof vfio_region_info", sizeof(struct vfio_region_info));
    P("offsetof vfio_region_info.size", offsetof(struct vfio_region_info, size));
    P("offsetof vfio_region_info.offset", offsetof(struct vfio_region_info, offset));
    P("sizeof vfio_irq_info", sizeof(struct vfio_irq_info));
    P("offsetof vfio_irq_set.data", offsetof(struct vfio_irq_set, data));
    P("sizeof vfio_info_cap_header", sizeof(struct vfio_info_cap_header));
    P("sizeof vfio_iommu_type1_info", sizeof(struct vfio_iommu_type1_info));
    P("offsetof vfio_iommu_type1_info.cap_offset", offsetof(struct vfio_iommu_type1_info, cap_offset));
    P("offsetof vfio_iommu_type1_info_cap_iova_range.iova_ranges", offsetof(struct vfio_iommu_type1_info_cap_iova_range, iova_ranges));
    P("sizeof vfio_iova_range", sizeof(struct vfio_iova_range));
    P("sizeof vfio_iommu_type1_dma_map", sizeof(struct vfio_iommu_type1_dma_map));
    P("offsetof vfio_iommu_type1_dma_map.iova", offsetof(struct vfio_iommu_type1_dma_map, iova));
    P("sizeof vfio_iommu_type1_dma_unmap", sizeof(struct vfio_iommu_type1_dma_unmap));
    return 0;
}
"#;

    fn ours() -> Vec<(&'static str, u64)> {
        vec![
            ("VFIO_GET_API_VERSION", VFIO_GET_API_VERSION),
            ("VFIO_CHECK_EXTENSION", VFIO_CHECK_EXTENSION),
            ("VFIO_SET_IOMMU", VFIO_SET_IOMMU),
            ("VFIO_GROUP_GET_STATUS", VFIO_GROUP_GET_STATUS),
            ("VFIO_GROUP_SET_CONTAINER", VFIO_GROUP_SET_CONTAINER),
            ("VFIO_GROUP_UNSET_CONTAINER", VFIO_GROUP_UNSET_CONTAINER),
            ("VFIO_GROUP_GET_DEVICE_FD", VFIO_GROUP_GET_DEVICE_FD),
            ("VFIO_DEVICE_GET_INFO", VFIO_DEVICE_GET_INFO),
            ("VFIO_DEVICE_GET_REGION_INFO", VFIO_DEVICE_GET_REGION_INFO),
            ("VFIO_DEVICE_GET_IRQ_INFO", VFIO_DEVICE_GET_IRQ_INFO),
            ("VFIO_DEVICE_SET_IRQS", VFIO_DEVICE_SET_IRQS),
            ("VFIO_DEVICE_RESET", VFIO_DEVICE_RESET),
            ("VFIO_IOMMU_GET_INFO", VFIO_IOMMU_GET_INFO),
            ("VFIO_IOMMU_MAP_DMA", VFIO_IOMMU_MAP_DMA),
            ("VFIO_IOMMU_UNMAP_DMA", VFIO_IOMMU_UNMAP_DMA),
            ("VFIO_API_VERSION", VFIO_API_VERSION as u64),
            ("VFIO_TYPE1_IOMMU", VFIO_TYPE1_IOMMU),
            ("VFIO_TYPE1v2_IOMMU", VFIO_TYPE1V2_IOMMU),
            ("VFIO_GROUP_FLAGS_VIABLE", VFIO_GROUP_FLAGS_VIABLE as u64),
            ("VFIO_DEVICE_FLAGS_RESET", VFIO_DEVICE_FLAGS_RESET as u64),
            ("VFIO_DEVICE_FLAGS_PCI", VFIO_DEVICE_FLAGS_PCI as u64),
            ("VFIO_REGION_INFO_FLAG_MMAP", VFIO_REGION_INFO_FLAG_MMAP as u64),
            ("VFIO_PCI_CONFIG_REGION_INDEX", VFIO_PCI_CONFIG_REGION_INDEX as u64),
            ("VFIO_PCI_ROM_REGION_INDEX", VFIO_PCI_ROM_REGION_INDEX as u64),
            ("VFIO_PCI_MSI_IRQ_INDEX", VFIO_PCI_MSI_IRQ_INDEX as u64),
            ("VFIO_PCI_MSIX_IRQ_INDEX", VFIO_PCI_MSIX_IRQ_INDEX as u64),
            ("VFIO_IRQ_INFO_EVENTFD", VFIO_IRQ_INFO_EVENTFD as u64),
            ("VFIO_IRQ_SET_DATA_NONE", VFIO_IRQ_SET_DATA_NONE as u64),
            ("VFIO_IRQ_SET_DATA_EVENTFD", VFIO_IRQ_SET_DATA_EVENTFD as u64),
            ("VFIO_IRQ_SET_ACTION_TRIGGER", VFIO_IRQ_SET_ACTION_TRIGGER as u64),
            ("VFIO_IOMMU_INFO_CAPS", VFIO_IOMMU_INFO_CAPS as u64),
            ("VFIO_IOMMU_TYPE1_INFO_CAP_IOVA_RANGE", VFIO_IOMMU_TYPE1_INFO_CAP_IOVA_RANGE as u64),
            ("VFIO_DMA_MAP_FLAG_READ", VFIO_DMA_MAP_FLAG_READ as u64),
            ("VFIO_DMA_MAP_FLAG_WRITE", VFIO_DMA_MAP_FLAG_WRITE as u64),
            ("sizeof vfio_group_status", size_of::<vfio_group_status>() as u64),
            ("sizeof vfio_device_info", size_of::<vfio_device_info>() as u64),
            ("sizeof vfio_region_info", size_of::<vfio_region_info>() as u64),
            ("offsetof vfio_region_info.size", offset_of!(vfio_region_info, size) as u64),
            ("offsetof vfio_region_info.offset", offset_of!(vfio_region_info, offset) as u64),
            ("sizeof vfio_irq_info", size_of::<vfio_irq_info>() as u64),
            ("offsetof vfio_irq_set.data", size_of::<vfio_irq_set>() as u64),
            ("sizeof vfio_info_cap_header", size_of::<vfio_info_cap_header>() as u64),
            ("sizeof vfio_iommu_type1_info", size_of::<vfio_iommu_type1_info>() as u64),
            ("offsetof vfio_iommu_type1_info.cap_offset", offset_of!(vfio_iommu_type1_info, cap_offset) as u64),
            ("offsetof vfio_iommu_type1_info_cap_iova_range.iova_ranges", size_of::<vfio_iommu_type1_info_cap_iova_range>() as u64),
            ("sizeof vfio_iova_range", size_of::<vfio_iova_range>() as u64),
            ("sizeof vfio_iommu_type1_dma_map", size_of::<vfio_iommu_type1_dma_map>() as u64),
            ("offsetof vfio_iommu_type1_dma_map.iova", offset_of!(vfio_iommu_type1_dma_map, iova) as u64),
            ("sizeof vfio_iommu_type1_dma_unmap", size_of::<vfio_iommu_type1_dma_unmap>() as u64),
        ]
    }

    /// Known values from linux/vfio.h, independent of any compiler.
    #[test]
    fn known_constants() {
        assert_eq!(VFIO_GET_API_VERSION, 0x3b64);
        assert_eq!(VFIO_GROUP_GET_DEVICE_FD, 0x3b6a);
        assert_eq!(VFIO_IOMMU_MAP_DMA, 0x3b71);
        assert_eq!(VFIO_IOMMU_UNMAP_DMA, 0x3b72);
        assert_eq!(size_of::<vfio_region_info>(), 32);
        assert_eq!(size_of::<vfio_device_info>(), 20);
        assert_eq!(size_of::<vfio_iommu_type1_info>(), 24);
        assert_eq!(size_of::<vfio_iommu_type1_dma_map>(), 32);
        assert_eq!(size_of::<vfio_irq_set>(), 20);
    }

    /// Compiles the C program above against the system's linux/vfio.h (linux-libc-dev, part
    /// of build-essential) and compares every line with ours.
    #[test]
    fn matches_the_c_header() {
        let dir = tempfile::tempdir().unwrap();
        let src = dir.path().join("vfio_abi.c");
        let exe = dir.path().join("vfio_abi");
        std::fs::write(&src, C_PROGRAM).unwrap();
        let cc = std::env::var("CC").unwrap_or_else(|_| "cc".to_string());
        let out = std::process::Command::new(&cc).arg("-o").arg(&exe).arg(&src).output().unwrap();
        assert!(out.status.success(), "{cc} failed: {}", String::from_utf8_lossy(&out.stderr));
        let out = std::process::Command::new(&exe).output().unwrap();
        assert!(out.status.success());
        let text = String::from_utf8(out.stdout).unwrap();
        let theirs: Vec<(String, u64)> = text
            .lines()
            .map(|l| {
                let (name, value) = l.rsplit_once(' ').unwrap();
                (name.to_string(), value.parse().unwrap())
            })
            .collect();
        let ours = ours();
        assert_eq!(theirs.len(), ours.len(), "the C program and the Rust list differ in length");
        for ((cn, cv), (rn, rv)) in theirs.iter().zip(ours.iter()) {
            assert_eq!(cn, rn);
            assert_eq!(cv, rv, "{cn}: C says {cv:#x}, Rust says {rv:#x}");
        }
    }

    #[test]
    fn read_struct_checks_bounds() {
        let buf = [1u8, 0, 2, 0, 8, 0, 0, 0];
        let h: vfio_info_cap_header = read_struct(&buf, 0).unwrap();
        assert_eq!((h.id, h.version, h.next), (1, 2, 8));
        assert!(read_struct::<vfio_info_cap_header>(&buf, 1).is_none());
        assert!(read_struct::<vfio_info_cap_header>(&buf, usize::MAX).is_none());
    }
}
