//! The host's knobs of a DMA sweep, as pcie-bench varies them: where the buffers' pages are
//! (NUMA node, page size: set up once, before the first buffer, and checked with the kernel's
//! own answer for every buffer) and the CPU cache state of the window (produced before every
//! run). docs/bandwidth.md, "The host's knobs", says what each state can and cannot guarantee.

use anyhow::{bail, Context};
use tlpx_device::generator::{self, GenConfig, LinkLimits, Operation, ValidGenConfig};
use tlpx_device::host_memory::{self, DmaPlacement, PageSize};
use tlpx_device::DmaBuffer;

use super::runner::run_timeout;
use crate::cmd::bw::{CacheState, Common};
use crate::session::Session;

/// The smallest thrash sweep: pcie-bench's 64 MB host buffer.
const MIN_THRASH_BYTES: u64 = 64 << 20;

/// The largest transfer of the device-warm pass (a page: any link splits it in its MPS).
const WARM_TRANSFER_BYTES: u64 = 4096;

/// What a session's DMA sweep set up on the host, and the thrash buffer it sweeps.
#[derive(Default)]
pub struct HostState {
    pub cache: CacheState,
    pub numa_node: Option<u32>,
    pub page: PageSize,
    /// Written before every run under `--cache thrash`; allocated at the first.
    thrash: Vec<u8>,
    /// Changes with every sweep, so that every sweep writes every line.
    thrash_round: u8,
}

/// Bytes the thrash sweep writes: twice the largest cache the kernel reports, and at least
/// pcie-bench's 64 MB (also when the kernel reports no cache).
pub fn thrash_bytes(llc_bytes: Option<u64>) -> u64 {
    llc_bytes.map_or(0, |l| l.saturating_mul(2)).max(MIN_THRASH_BYTES)
}

/// How `state` is produced, for the text output and the documents.
pub fn method(state: CacheState, session: &Session) -> String {
    let report = session.environment.host_memory.as_ref();
    let line = report.map_or(64, |r| r.cache_line_bytes);
    match state {
        CacheState::HostWarm => "before each run the CPU writes the whole window (what the run starts from)".into(),
        CacheState::DeviceWarm => format!(
            "before each run the card writes the whole window (sequential writes of up to {WARM_TRANSFER_BYTES} bytes, not \
             measured): what reads check, or another seed's pattern under writes"
        ),
        CacheState::Cold => format!(
            "before each run the CPU writes the window, then flushes each of its {line}-byte lines from every cache level \
             (x86 CLFLUSH, Arm DC CIVAC) and fences"
        ),
        CacheState::Thrash => format!(
            "before each run the CPU writes the window, then writes every line of a {} MiB buffer (twice the {} the kernel \
             reports, at least 64 MiB)",
            thrash_bytes(report.and_then(|r| r.llc_bytes)) >> 20,
            report.and_then(|r| r.llc_bytes).map_or("last-level cache (none reported)".to_string(), |b| format!(
                "{} KiB L{} cache",
                b >> 10,
                report.and_then(|r| r.llc_level).unwrap_or(0)
            ))
        ),
    }
}

/// Sets the session up for `common`'s knobs before the first buffer is allocated: the
/// placement on the device (refused by backends that cannot place their buffers), the cache
/// state every run will start from.
pub fn prepare(session: &mut Session, common: &Common) -> anyhow::Result<()> {
    if common.host.cache == CacheState::Cold && !host_memory::CAN_FLUSH {
        bail!("--cache cold flushes cache lines from user space, which tlpx does on x86_64 and aarch64 only: use --cache thrash");
    }
    let page = common.host.iommu_pages.map_or(PageSize::Base4k, |p| p.page_size());
    let placement = DmaPlacement { numa_node: common.host.numa_node, page_size: page };
    if let Some(pages) = common.host.iommu_pages {
        if session.card.device().iova_page_sizes().is_none() {
            let backend = session.environment.backend.clone().unwrap_or_default();
            bail!(
                "--iommu-pages {}: the {backend} backend maps no DMA buffer through an IOMMU it controls, so there is no IOVA \
                 page size to choose; use the vfio backend (--device vfio:ADDRESS) on a host with a translating IOMMU",
                pages.name()
            );
        }
    }
    session
        .card
        .device()
        .set_dma_placement(placement)
        .with_context(|| format!("placing the DMA buffers ({})", describe_placement(&placement)))?;
    session.host_memory = HostState { cache: common.host.cache, numa_node: common.host.numa_node, page, ..HostState::default() };
    Ok(())
}

/// The lines the text output says before a sweep: the cache state and how it is produced,
/// and what the host reported about its nodes, the card's node and its IOMMU.
pub fn describe(session: &Session) -> Vec<String> {
    let state = &session.host_memory;
    let mut out = vec![format!("cache: {} ({})", state.cache.name(), method(state.cache, session))];
    if let Some(r) = &session.environment.host_memory {
        let nodes = r.numa_nodes.iter().map(u32::to_string).collect::<Vec<_>>().join(",");
        let card = match r.card_numa_node {
            Some(n) if n >= 0 => format!("the card is on node {n}"),
            Some(_) => "the firmware gives the card no node (numa_node -1)".to_string(),
            None => "the simulated card is on none".to_string(),
        };
        let asked =
            state.numa_node.map_or("buffers where the kernel's policy puts them".to_string(), |n| format!("buffers bound to node {n}"));
        out.push(format!(
            "host memory: NUMA nodes {nodes}, {card}; {asked}, {} pages; IOMMU {} ({})",
            state.page.name(),
            r.iommu,
            r.iommu_source
        ));
    }
    out
}

/// One line per buffer the sweep used: where the kernel says its pages are.
pub fn placement_lines(session: &Session) -> Vec<String> {
    session
        .environment
        .dma_buffers
        .iter()
        .map(|b| {
            let iova = b.iova_page_sizes.as_ref().map_or(String::new(), |p| {
                format!("; IOVA pages offered: {}", p.iter().map(|s| crate::output::bytes(*s)).collect::<Vec<_>>().join(", "))
            });
            format!("buffer of {}: {} (move_pages){iova}", crate::output::bytes(b.bytes), b.describe())
        })
        .collect()
}

fn describe_placement(p: &DmaPlacement) -> String {
    let node = p.numa_node.map_or("any NUMA node".to_string(), |n| format!("NUMA node {n}"));
    format!("{node}, {} pages", p.page_size.name())
}

/// Checks where the kernel put a new buffer's pages (every one on the node asked for) and
/// records it in the session's environment.
pub fn record_buffer(session: &mut Session, buffer: &DmaBuffer) -> anyhow::Result<()> {
    let page = session.host_memory.page.bytes();
    // Every page faulted in first (the simulator's shared memory is mapped lazily): the
    // kernel places a page when it is first touched, and reports none before.
    // SAFETY: the buffer is ours, fresh, and the card does not run meanwhile.
    unsafe { host_memory::touch_pages(buffer.host_ptr(), buffer.len, page) };
    let mut placement = host_memory::page_nodes(buffer.host_ptr(), buffer.len, page)?;
    placement.iova_page_sizes =
        session.card.device().iova_page_sizes().map(|bits| (12..40).map(|n| 1u64 << n).filter(|p| bits & p != 0).collect());
    if let Some(node) = session.host_memory.numa_node {
        placement.check_on(node)?;
    }
    session.environment.dma_buffers.push(placement);
    Ok(())
}

/// The seed of what the device-warm pass writes under a measured write: every byte of its
/// counter pattern differs from the run's (each byte gains 1 or 2), so the host's check
/// still tells the run's writes from what was there.
pub fn warm_seed(seed: u32) -> u32 {
    seed.wrapping_add(0x0101_0101)
}

/// The card writes the whole window with `seed`'s pattern (device-warm), in a generator run
/// of its own that no figure counts.
pub fn device_write_window(session: &mut Session, buffer: &DmaBuffer, cfg: &ValidGenConfig, seed: u32) -> anyhow::Result<()> {
    let size = cfg.window.min(WARM_TRANSFER_BYTES);
    let mut g = GenConfig::new(Operation::Write, size as u32, cfg.window / size);
    g.window = cfg.window;
    g.request_size = cfg.request_size;
    g.payload_size = cfg.payload_size;
    g.addr64 = cfg.addr64;
    g.data_pattern = cfg.data_pattern;
    g.seed = seed;
    g.check_data = false;
    let valid = g
        .validate(LinkLimits { mps: cfg.payload_size, mrrs: cfg.request_size }, buffer.len as u64)
        .map_err(|e| anyhow::anyhow!("the device-warm pass over a window of {} bytes: {e}", cfg.window))?;
    let timeout = run_timeout(&g, None, session.clock_hz);
    let r = generator::run(&mut session.card, buffer, &valid, timeout).context("the device-warm pass (the card writing the window)")?;
    let errors = super::check::error_total(&r.errors);
    if r.ended_by != "count" || errors > 0 || r.write_bytes != cfg.window {
        bail!(
            "the device-warm pass did not write the window: it ended by {}, wrote {} of {} bytes, {errors} card errors",
            r.ended_by,
            r.write_bytes,
            cfg.window
        );
    }
    Ok(())
}

/// After the CPU wrote the window: flush its lines (cold) or sweep the thrash buffer (thrash).
pub fn after_host_write(session: &mut Session, buffer: &DmaBuffer, window: usize) -> anyhow::Result<()> {
    match session.host_memory.cache {
        CacheState::HostWarm | CacheState::DeviceWarm => Ok(()),
        CacheState::Cold => {
            let line = session.environment.host_memory.as_ref().map_or(64, |r| r.cache_line_bytes);
            // SAFETY: the window lies in the buffer, which is ours.
            unsafe { host_memory::flush_lines(buffer.host_ptr(), window.min(buffer.len), line) }?;
            Ok(())
        }
        CacheState::Thrash => {
            let llc = session.environment.host_memory.as_ref().and_then(|r| r.llc_bytes);
            let line = session.environment.host_memory.as_ref().map_or(64, |r| r.cache_line_bytes) as usize;
            let state = &mut session.host_memory;
            if state.thrash.is_empty() {
                state.thrash = vec![0u8; thrash_bytes(llc) as usize];
            }
            state.thrash_round = state.thrash_round.wrapping_add(1);
            let value = state.thrash_round;
            for i in (0..state.thrash.len()).step_by(line.max(1)) {
                // A volatile write per line: the compiler may not skip or merge the sweep.
                // SAFETY: i is inside the vector.
                unsafe { state.thrash.as_mut_ptr().add(i).write_volatile(value) };
            }
            Ok(())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_thrash_sweep_is_twice_the_cache_and_never_below_pcie_benchs_64mb() {
        assert_eq!(thrash_bytes(None), 64 << 20);
        assert_eq!(thrash_bytes(Some(8 << 20)), 64 << 20);
        assert_eq!(thrash_bytes(Some(105 << 20)), 210 << 20);
    }

    #[test]
    fn the_warm_seed_changes_every_byte_of_every_counter_word() {
        use tlpx_device::generator::{pattern_word, DataPattern};
        for seed in [0u32, 1, 0xff, 0xffff_ffff, 0x00ff_ff00] {
            for addr in (0..1u64 << 20).step_by(4 * 997) {
                let a = pattern_word(DataPattern::Counter, seed, addr).to_le_bytes();
                let b = pattern_word(DataPattern::Counter, warm_seed(seed), addr).to_le_bytes();
                assert!(a.iter().zip(&b).all(|(x, y)| x != y), "seed {seed:#x} addr {addr:#x}: {a:?} {b:?}");
            }
        }
    }
}
