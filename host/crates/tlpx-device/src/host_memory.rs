//! The host side of a DMA buffer, as pcie-bench varies it: which NUMA node its pages are on,
//! which page size backs it (and so which IOVA page size an IOMMU can map it with), and the
//! CPU cache state of its lines. What the host reports about itself (its nodes, the card's
//! node, its IOMMU mode, its last-level cache) is read here too, from the kernel's own files.
//!
//! Backends that own the host memory of their buffers (vfio, the simulator) place them through
//! [`crate::Device::set_dma_placement`]; the kernel's answer to "where is each page" comes
//! from `move_pages(2)` ([`page_nodes`]), never from what was asked. See docs/bandwidth.md,
//! "The host's knobs".

use std::collections::BTreeMap;
use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::DeviceError;

/// The page size backing a DMA buffer: the base page, or a hugetlbfs page of 2 MiB or 1 GiB.
/// An IOMMU maps a buffer with pages no larger than the host pages behind it, so this is
/// also the largest IOVA page size the mapping can use.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PageSize {
    #[default]
    #[serde(rename = "4k")]
    Base4k,
    #[serde(rename = "2m")]
    Huge2m,
    #[serde(rename = "1g")]
    Huge1g,
}

impl PageSize {
    pub fn bytes(self) -> u64 {
        match self {
            PageSize::Base4k => 4096,
            PageSize::Huge2m => 2 << 20,
            PageSize::Huge1g => 1 << 30,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            PageSize::Base4k => "4k",
            PageSize::Huge2m => "2m",
            PageSize::Huge1g => "1g",
        }
    }

    /// The sysfs directory of this huge page size's pool (None for the base page).
    pub fn hugepages_dir(self) -> Option<String> {
        match self {
            PageSize::Base4k => None,
            other => Some(format!("/sys/kernel/mm/hugepages/hugepages-{}kB", other.bytes() >> 10)),
        }
    }
}

/// Where a backend puts the buffers of later `alloc_dma` calls.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DmaPlacement {
    /// Bind the pages to this NUMA node (MPOL_BIND); None: the kernel's default policy.
    pub numa_node: Option<u32>,
    /// The pages behind the buffer, and so the largest IOVA page size of its mapping.
    pub page_size: PageSize,
}

/// What the host says about its memory, its IOMMU and the card's place among its nodes.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct HostReport {
    /// The online NUMA nodes (/sys/devices/system/node/online); [0] on a kernel without NUMA.
    pub numa_nodes: Vec<u32>,
    /// The card's node as sysfs gives it (`numa_node` of the PCI function; -1 = the firmware
    /// names none); None when the card is not a PCI function of this host (the simulator).
    pub card_numa_node: Option<i32>,
    /// "off", "passthrough", "translated" or "none (...)": how the card's DMA addresses reach
    /// memory, and `iommu_source` where that was read.
    pub iommu: String,
    pub iommu_source: String,
    /// The largest CPU cache the kernel reports (bytes) and its level; None when it reports none.
    pub llc_bytes: Option<u64>,
    pub llc_level: Option<u32>,
    /// The CPU's cache line (bytes), the unit of a flush.
    pub cache_line_bytes: u32,
}

/// Where the kernel says a buffer's pages are.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct BufferPlacement {
    pub bytes: u64,
    /// The host page size behind the buffer.
    pub page_bytes: u64,
    /// Pages per NUMA node ("0", "1": JSON object keys), from move_pages(2).
    pub pages_by_node: BTreeMap<String, u64>,
    /// Pages the kernel gave no node for, per errno name ("ENOENT": not faulted in).
    pub page_errors: BTreeMap<String, u64>,
    /// The IOVA page sizes the IOMMU offers for this mapping (vfio's iova_pgsizes), when the
    /// backend maps through one.
    pub iova_page_sizes: Option<Vec<u64>>,
}

// The kernel's NUMA ABI (include/uapi/linux/mempolicy.h).
const MPOL_BIND: libc::c_int = 2;
const MPOL_MF_STRICT: libc::c_uint = 1;
const MPOL_MF_MOVE: libc::c_uint = 1 << 1;

/// A node list as the kernel prints it ("0", "0-1,3").
pub fn parse_node_list(text: &str) -> Result<Vec<u32>, String> {
    let mut out = Vec::new();
    for part in text.trim().split(',').filter(|p| !p.is_empty()) {
        let (lo, hi) = part.split_once('-').unwrap_or((part, part));
        let lo: u32 = lo.trim().parse().map_err(|_| format!("bad node list {text:?}"))?;
        let hi: u32 = hi.trim().parse().map_err(|_| format!("bad node list {text:?}"))?;
        if hi < lo || hi > 4095 {
            return Err(format!("bad node list {text:?}"));
        }
        out.extend(lo..=hi);
    }
    Ok(out)
}

/// The online NUMA nodes; [0] when the kernel has no NUMA support (no node directory).
pub fn online_nodes() -> Vec<u32> {
    std::fs::read_to_string("/sys/devices/system/node/online")
        .ok()
        .and_then(|t| parse_node_list(&t).ok())
        .filter(|n| !n.is_empty())
        .unwrap_or_else(|| vec![0])
}

/// Checks that `node` is an online node of this host.
pub fn check_node(node: u32) -> Result<(), DeviceError> {
    let nodes = online_nodes();
    if nodes.contains(&node) {
        return Ok(());
    }
    Err(DeviceError::InvalidArgument(format!(
        "--numa-node {node}: this host's online NUMA nodes are {} (/sys/devices/system/node/online)",
        nodes.iter().map(u32::to_string).collect::<Vec<_>>().join(", ")
    )))
}

/// Binds the pages of `ptr..ptr+len` to `node` and moves those already there (mbind(2) with
/// MPOL_BIND | MPOL_MF_MOVE | MPOL_MF_STRICT). `ptr` must be page-aligned.
pub fn bind_to_node(ptr: *mut u8, len: usize, node: u32) -> Result<(), DeviceError> {
    check_node(node)?;
    let bits = usize::BITS as usize;
    let mut mask = vec![0 as libc::c_ulong; node as usize / bits + 1];
    mask[node as usize / bits] |= 1 << (node as usize % bits);
    // maxnode counts bits, and the kernel reads one fewer than it is given.
    let maxnode = (mask.len() * bits + 1) as libc::c_ulong;
    // SAFETY: mbind reads `mask` (maxnode - 1 bits long) and changes the policy of our own
    // mapping; it touches no memory of ours otherwise.
    let r = unsafe {
        libc::syscall(
            libc::SYS_mbind,
            ptr as libc::c_ulong,
            len as libc::c_ulong,
            MPOL_BIND,
            mask.as_ptr(),
            maxnode,
            MPOL_MF_MOVE | MPOL_MF_STRICT,
        )
    };
    if r != 0 {
        let e = std::io::Error::last_os_error();
        return Err(DeviceError::Io { context: format!("mbind of a DMA buffer of {len} bytes to NUMA node {node}"), source: e });
    }
    Ok(())
}

/// Where the kernel says each page of `ptr..ptr+len` is (move_pages(2) without a target: a
/// query). Pages not yet faulted in come back as errors (ENOENT).
pub fn page_nodes(ptr: *const u8, len: usize, page_bytes: u64) -> Result<BufferPlacement, DeviceError> {
    let page = page_bytes.max(4096) as usize;
    let start = ptr as usize & !(page - 1);
    let pages: Vec<*mut libc::c_void> = (start..ptr as usize + len).step_by(page).map(|a| a as *mut libc::c_void).collect();
    let mut status = vec![0 as libc::c_int; pages.len()];
    // SAFETY: move_pages with nodes = NULL only reads `pages` and fills `status` (same length).
    let r = unsafe {
        libc::syscall(
            libc::SYS_move_pages,
            0 as libc::c_int,
            pages.len() as libc::c_ulong,
            pages.as_ptr(),
            std::ptr::null::<libc::c_int>(),
            status.as_mut_ptr(),
            0 as libc::c_int,
        )
    };
    if r < 0 {
        let e = std::io::Error::last_os_error();
        return Err(DeviceError::Io { context: format!("move_pages (where are the {} pages of a DMA buffer)", pages.len()), source: e });
    }
    let mut out = BufferPlacement { bytes: len as u64, page_bytes: page as u64, ..BufferPlacement::default() };
    for s in status {
        if s >= 0 {
            *out.pages_by_node.entry(s.to_string()).or_default() += 1;
        } else {
            *out.page_errors.entry(errno_name(-s)).or_default() += 1;
        }
    }
    Ok(out)
}

impl BufferPlacement {
    /// An error unless every page is on `node`.
    pub fn check_on(&self, node: u32) -> Result<(), DeviceError> {
        let total: u64 = self.pages_by_node.values().sum::<u64>() + self.page_errors.values().sum::<u64>();
        let on = self.pages_by_node.get(&node.to_string()).copied().unwrap_or(0);
        if on == total {
            return Ok(());
        }
        Err(DeviceError::Backend(format!(
            "asked for NUMA node {node}, the kernel (move_pages) has {on} of the buffer's {total} pages there: {}",
            self.describe()
        )))
    }

    /// "256 pages on node 0" or "128 on node 0, 128 on node 1, 2 not present".
    pub fn describe(&self) -> String {
        let mut parts: Vec<String> = self.pages_by_node.iter().map(|(n, c)| format!("{c} on node {n}")).collect();
        for (errno, c) in &self.page_errors {
            parts.push(format!("{c} without a node ({errno})"));
        }
        format!(
            "{} pages of {} bytes: {}",
            self.pages_by_node.values().sum::<u64>() + self.page_errors.values().sum::<u64>(),
            self.page_bytes,
            parts.join(", ")
        )
    }
}

/// Faults in every page of our fresh mapping `ptr..ptr+len` under its NUMA policy, as an
/// error rather than a signal when the node has no page to give: MADV_POPULATE_WRITE (Linux
/// 5.14) returns ENOMEM where a write to a huge page the bound node lacks would end the
/// process with SIGBUS (the huge page pool's reservation is not per node).
///
/// # Safety
/// `ptr..ptr+len` must be a fresh writable mapping of ours that nobody else writes meanwhile.
pub unsafe fn populate(ptr: *mut u8, len: usize, page: PageSize, node: u32) -> Result<(), DeviceError> {
    // SAFETY: madvise on our own mapping; it only faults pages in.
    let r = unsafe { libc::madvise(ptr as *mut libc::c_void, len, libc::MADV_POPULATE_WRITE) };
    if r == 0 {
        return Ok(());
    }
    let e = std::io::Error::last_os_error();
    if e.raw_os_error() == Some(libc::EINVAL) && page == PageSize::Base4k {
        // A kernel older than 5.14: base pages can always be had (or the OOM killer decides).
        // SAFETY: the caller's contract.
        unsafe { touch_pages(ptr, len, page.bytes()) };
        return Ok(());
    }
    let free = page.hugepages_dir().map_or(String::new(), |_| {
        let f = format!("/sys/devices/system/node/node{node}/hugepages/hugepages-{}kB/free_hugepages", page.bytes() >> 10);
        let n = std::fs::read_to_string(&f).map(|t| t.trim().to_string()).unwrap_or_else(|_| "?".into());
        format!(" ({f}: {n}; reserve pages on that node as root by writing its nr_hugepages)")
    });
    Err(DeviceError::Io {
        context: format!("placing a DMA buffer of {len} bytes in {} pages on NUMA node {node}{free}", page.name()),
        source: e,
    })
}

/// The errno move_pages gives a page without a node, by name.
fn errno_name(e: i32) -> String {
    match e {
        libc::ENOENT => "ENOENT (not faulted in)".into(),
        libc::EFAULT => "EFAULT (not mapped)".into(),
        libc::EACCES => "EACCES".into(),
        libc::EBUSY => "EBUSY".into(),
        other => format!("errno {other}"),
    }
}

/// Writes every page of `ptr..ptr+len` once (its first byte, unchanged), so that the kernel
/// allocates each under the mapping's policy before a device pins it.
///
/// # Safety
/// `ptr..ptr+len` must be a writable mapping of ours that nobody else writes meanwhile.
pub unsafe fn touch_pages(ptr: *mut u8, len: usize, page_bytes: u64) {
    let mut off = 0usize;
    while off < len {
        // SAFETY: inside the mapping (the caller's contract).
        unsafe {
            let p = ptr.add(off);
            p.write_volatile(p.read_volatile());
        }
        off += page_bytes as usize;
    }
}

/// The card's NUMA node as sysfs gives it for PCI function `address` (e.g. "0000:01:00.0").
pub fn card_numa_node(address: &str) -> Option<i32> {
    let path = format!("/sys/bus/pci/devices/{address}/numa_node");
    std::fs::read_to_string(path).ok()?.trim().parse().ok()
}

/// How the host's IOMMU treats PCI function `address` (None: the card is not a PCI function
/// of this host). Read from the function's IOMMU group: its `type` file (identity =
/// passthrough; DMA, DMA-FQ = translated) and vfio's no-IOMMU mode.
pub fn iommu_mode(address: Option<&str>) -> (String, String) {
    let Some(address) = address else {
        return (
            "none (simulated card: tlpx-sim checks each DMA address against the buffers it allocated; it translates nothing)".into(),
            "tlpx-sim".into(),
        );
    };
    let dev = format!("/sys/bus/pci/devices/{address}");
    let group_link = format!("{dev}/iommu_group");
    let noiommu = std::fs::read_to_string("/sys/module/vfio/parameters/enable_unsafe_noiommu_mode").is_ok_and(|t| t.trim() == "Y");
    let Ok(group) = std::fs::read_link(&group_link) else {
        return ("off".into(), format!("{group_link} absent (no IOMMU group: the IOMMU is off or absent)"));
    };
    let group_dir = Path::new(&dev).join(&group);
    if noiommu && std::fs::read_to_string(group_dir.join("name")).is_ok_and(|n| n.trim() == "vfio-noiommu") {
        return ("off".into(), "vfio no-IOMMU mode (enable_unsafe_noiommu_mode=Y, group vfio-noiommu)".into());
    }
    let type_file = group_dir.join("type");
    let default_type = std::fs::read_to_string(&type_file).map(|t| t.trim().to_string());
    // vfio-pci's user maps its buffers through a domain of its own (type1), translated
    // whatever the group's default domain (its `type` file) is for the kernel's drivers.
    let driver = std::fs::read_link(format!("{dev}/driver")).ok().and_then(|d| d.file_name().map(|n| n.to_string_lossy().into_owned()));
    if driver.as_deref() == Some("vfio-pci") {
        let default = default_type.as_deref().unwrap_or("unreadable");
        return (
            "translated".into(),
            format!("vfio-pci owns the group: its type1 domain translates (the group's default domain: {default})"),
        );
    }
    match default_type {
        Ok(t) if t == "identity" => ("passthrough".into(), format!("{}: identity", type_file.display())),
        Ok(t) if t.starts_with("DMA") || t == "unmanaged" => ("translated".into(), format!("{}: {t}", type_file.display())),
        Ok(t) => (format!("unknown ({t})"), type_file.display().to_string()),
        Err(_) => ("translated".into(), format!("{} has an IOMMU group ({} unreadable)", dev, type_file.display())),
    }
}

/// The largest CPU cache of CPU 0 (bytes, level) from sysfs, and the line size of its L1 data
/// cache (64 when the kernel does not say).
pub fn caches() -> (Option<(u64, u32)>, u32) {
    let mut largest: Option<(u64, u32)> = None;
    let mut line = None;
    for i in 0..16 {
        let dir = format!("/sys/devices/system/cpu/cpu0/cache/index{i}");
        let Ok(size) = std::fs::read_to_string(format!("{dir}/size")) else { break };
        let level: u32 = std::fs::read_to_string(format!("{dir}/level")).ok().and_then(|t| t.trim().parse().ok()).unwrap_or(0);
        let bytes = parse_cache_size(size.trim());
        if line.is_none() {
            line = std::fs::read_to_string(format!("{dir}/coherency_line_size")).ok().and_then(|t| t.trim().parse().ok());
        }
        if let Some(b) = bytes {
            if largest.is_none_or(|(_, l)| level > l) {
                largest = Some((b, level));
            }
        }
    }
    (largest, line.filter(|l: &u32| l.is_power_of_two()).unwrap_or(64))
}

/// "32768K", "8M" or "512" as sysfs prints cache sizes.
fn parse_cache_size(t: &str) -> Option<u64> {
    let (num, mult) = match t.chars().last()? {
        'K' => (&t[..t.len() - 1], 1 << 10),
        'M' => (&t[..t.len() - 1], 1 << 20),
        'G' => (&t[..t.len() - 1], 1 << 30),
        _ => (t, 1),
    };
    num.parse::<u64>().ok().map(|n| n * mult)
}

/// The whole report for a card at `pci_address` (None: the simulated card).
pub fn host_report(pci_address: Option<&str>) -> HostReport {
    let (llc, line) = caches();
    let (iommu, iommu_source) = iommu_mode(pci_address);
    HostReport {
        numa_nodes: online_nodes(),
        card_numa_node: pci_address.and_then(card_numa_node),
        iommu,
        iommu_source,
        llc_bytes: llc.map(|l| l.0),
        llc_level: llc.map(|l| l.1),
        cache_line_bytes: line,
    }
}

/// Whether this CPU can flush a cache line from user space ([`flush_lines`]).
pub const CAN_FLUSH: bool = cfg!(any(target_arch = "x86_64", target_arch = "aarch64"));

/// Writes back and invalidates every cache line of `ptr..ptr+len` from every level of the
/// CPU's caches (x86 CLFLUSH; Arm DC CIVAC to the point of coherency), then waits for the
/// flushes to finish. A memory-side cache beyond the point of coherency keeps what it holds.
///
/// # Safety
/// `ptr..ptr+len` must be a mapping of ours.
pub unsafe fn flush_lines(ptr: *const u8, len: usize, line: u32) -> Result<(), DeviceError> {
    let line = line.max(32) as usize;
    let start = ptr as usize & !(line - 1);
    let end = ptr as usize + len;
    #[cfg(target_arch = "x86_64")]
    {
        let mut a = start;
        while a < end {
            // SAFETY: a lies in (the line of) our mapping; CLFLUSH is in every x86_64 CPU.
            unsafe { std::arch::x86_64::_mm_clflush(a as *const u8) };
            a += line;
        }
        // SAFETY: MFENCE orders the flushes before what follows (the card's run).
        unsafe { std::arch::x86_64::_mm_mfence() };
        Ok(())
    }
    #[cfg(target_arch = "aarch64")]
    {
        let mut a = start;
        while a < end {
            // SAFETY: a lies in our mapping; DC CIVAC is allowed at EL0 under Linux (SCTLR_EL1.UCI).
            unsafe { std::arch::asm!("dc civac, {0}", in(reg) a) };
            a += line;
        }
        // SAFETY: a barrier.
        unsafe { std::arch::asm!("dsb sy") };
        Ok(())
    }
    #[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
    {
        let _ = (start, end);
        Err(DeviceError::Unsupported {
            backend: "host".into(),
            what: "flush cache lines from user space on this CPU architecture".into(),
            instead: "use --cache thrash (evicts by a sweep larger than the last-level cache)".into(),
        })
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn node_lists_parse_as_the_kernel_prints_them() {
        assert_eq!(parse_node_list("0\n").unwrap(), vec![0]);
        assert_eq!(parse_node_list("0-1,3").unwrap(), vec![0, 1, 3]);
        assert!(parse_node_list("1-0").is_err());
        assert!(parse_node_list("x").is_err());
        assert_eq!(parse_cache_size("32768K"), Some(32 << 20));
        assert_eq!(parse_cache_size("8M"), Some(8 << 20));
    }

    #[test]
    fn the_kernel_places_bound_pages_on_the_node_asked_and_says_so() {
        let node = online_nodes()[0];
        let len = 16 * 4096;
        // SAFETY: a fresh private anonymous mapping, unmapped below.
        let ptr = unsafe {
            libc::mmap(std::ptr::null_mut(), len, libc::PROT_READ | libc::PROT_WRITE, libc::MAP_PRIVATE | libc::MAP_ANONYMOUS, -1, 0)
        } as *mut u8;
        assert_ne!(ptr as *mut libc::c_void, libc::MAP_FAILED);
        let before = page_nodes(ptr, len, 4096).unwrap();
        assert_eq!(before.page_errors.get("ENOENT (not faulted in)"), Some(&16), "not faulted in yet: {}", before.describe());
        bind_to_node(ptr, len, node).unwrap();
        // SAFETY: our fresh mapping.
        unsafe { populate(ptr, len, PageSize::Base4k, node).unwrap() };
        let after = page_nodes(ptr, len, 4096).unwrap();
        after.check_on(node).unwrap();
        assert_eq!(after.pages_by_node.get(&node.to_string()), Some(&16));
        // SAFETY: our mapping.
        unsafe { flush_lines(ptr, len, 64).unwrap() };
        assert!(check_node(4095).unwrap_err().to_string().contains("online NUMA nodes are"));
        // SAFETY: unmapping what we mapped.
        unsafe { libc::munmap(ptr as *mut libc::c_void, len) };
    }
}
