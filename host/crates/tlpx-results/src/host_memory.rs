//! The host-side knobs of a DMA measurement as documents record them (pcie-bench's cache
//! state, NUMA node and IOMMU page size): the option values `bw`, `lat` and `characterize`
//! take and write. What the host reported about itself is the device crate's
//! [`tlpx_device::host_memory::HostReport`], recorded in each document's environment.

use serde::{Deserialize, Serialize};
use tlpx_device::host_memory::PageSize;

/// The CPU cache state of the window before each run (docs/bandwidth.md, "The host's knobs").
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
#[serde(rename_all = "kebab-case")]
pub enum CacheState {
    /// The CPU has just written the window (its lines are in the CPU's caches, dirty).
    #[default]
    HostWarm,
    /// The card has just written the whole window (a generator run before each measured run).
    DeviceWarm,
    /// The CPU wrote the window, then flushed each of its lines from every cache level.
    Cold,
    /// The CPU wrote the window, then wrote a buffer larger than its last-level cache.
    Thrash,
}

impl CacheState {
    pub fn name(self) -> &'static str {
        match self {
            CacheState::HostWarm => "host-warm",
            CacheState::DeviceWarm => "device-warm",
            CacheState::Cold => "cold",
            CacheState::Thrash => "thrash",
        }
    }

    /// The Cache column of pcie-bench's tables: its names where tlpx's procedure is its own
    /// (HWarm, DWarm, and Cold, which pcie-bench produces by a host sweep, tlpx's thrash);
    /// tlpx's flush has no pcie-bench name and prints Flush.
    pub fn pciebench(self) -> &'static str {
        match self {
            CacheState::HostWarm => "HWarm",
            CacheState::DeviceWarm => "DWarm",
            CacheState::Cold => "Flush",
            CacheState::Thrash => "Cold",
        }
    }
}

/// pcie-bench's three host knobs as a document records them (flattened into its parameters:
/// `cache`, `numa_node`, `iommu_pages`; absent in documents older than them: the defaults).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct HostKnobs {
    #[serde(default)]
    pub cache: CacheState,
    /// The NUMA node the buffers were bound to; None: wherever the kernel's policy put them.
    #[serde(default)]
    pub numa_node: Option<u32>,
    /// The page size behind the buffers (vfio); None: the backend's own buffers.
    #[serde(default)]
    pub iommu_pages: Option<IommuPages>,
}

impl HostKnobs {
    /// "cold-node1-2m": a matrix cell's name in file names and legends.
    pub fn name(&self) -> String {
        format!(
            "{}-{}-{}",
            self.cache.name(),
            self.numa_node.map_or("anynode".to_string(), |n| format!("node{n}")),
            self.iommu_pages.map_or("pages-default", |p| p.name())
        )
    }
}

/// `--iommu-pages`: the page size behind the DMA buffers and so of their IOVA mapping.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
pub enum IommuPages {
    #[serde(rename = "4k")]
    #[cfg_attr(feature = "clap", value(name = "4k"))]
    K4,
    #[serde(rename = "2m")]
    #[cfg_attr(feature = "clap", value(name = "2m"))]
    M2,
    #[serde(rename = "1g")]
    #[cfg_attr(feature = "clap", value(name = "1g"))]
    G1,
}

impl IommuPages {
    pub fn page_size(self) -> PageSize {
        match self {
            IommuPages::K4 => PageSize::Base4k,
            IommuPages::M2 => PageSize::Huge2m,
            IommuPages::G1 => PageSize::Huge1g,
        }
    }

    pub fn name(self) -> &'static str {
        self.page_size().name()
    }
}
