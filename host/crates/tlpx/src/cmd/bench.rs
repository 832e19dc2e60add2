//! `tlpx bench`: what the access paths themselves cost (the Gedae seed's overhead table).
//!
//! - `tlpx bench mmio`: round-trip time of a BAR read and cost of a posted write, per access,
//!   on any backend; on the simulator also the card time each read takes.
//! - `tlpx bench sim`: the simulator's own speed, in card cycles per wall second, idle and
//!   under DMA traffic (LitePCIe loopback), plus the MMIO figures. It measures a card of any
//!   tlpx register map (the full card, the CPU card, the card without tlpx's blocks that
//!   `python -m tlpx_gateware.build --litepcie-only` builds): the magic is checked, and only
//!   ident.scratch, timebase, pcie_msi and pcie_dma0 are used, which every tlpx card has at the
//!   same offsets. The report names the card measured (library, map hash, features).

use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::bail;
use clap::{Args, Subcommand};
use serde::Serialize;
use tlpx_device::backends::sim::SimDevice;
use tlpx_device::card::{read_identity, Card};
use tlpx_device::relocate::{self, Located, Relocated};
use tlpx_device::selector::{self, Selector};
use tlpx_device::{litepcie_dma, Device, Width};
use tlpx_model::stats::Summary;
use tlpx_regs::ident;

use crate::args::{whole, whole_as};
use crate::cmd::selftest::DMA_BYTES;
use crate::output::print_json;

#[derive(Debug, Args)]
pub struct Cmd {
    #[command(subcommand)]
    pub what: What,
}

#[derive(Debug, Subcommand)]
pub enum What {
    /// MMIO read round trip and posted write cost.
    Mmio(MmioArgs),
    /// Simulator speed (card cycles per wall second), idle and with DMA traffic.
    Sim(SimArgs),
}

#[derive(Debug, Args)]
pub struct MmioArgs {
    /// Accesses measured per kind (1..=10000000).
    #[arg(long, default_value_t = 10000, value_parser = whole(1u32, 10_000_000), allow_negative_numbers = true)]
    pub count: u32,
}

#[derive(Debug, Args)]
pub struct SimArgs {
    /// Card cycles the idle measurement runs (1000..=10^10).
    #[arg(long, default_value_t = 5_000_000, value_parser = whole(1000u64, 10_000_000_000), allow_negative_numbers = true)]
    pub idle_cycles: u64,
    /// Bytes per DMA loopback transfer (4..=16777212, multiple of 4).
    #[arg(long, default_value_t = 1 << 20, value_parser = whole_as(4u32, 0xFF_FFFC, DMA_BYTES), allow_negative_numbers = true)]
    pub dma_bytes: u32,
    /// DMA loopback transfers measured.
    #[arg(long, default_value_t = 5, value_parser = whole(1, u32::MAX), allow_negative_numbers = true)]
    pub dma_repeats: u32,
    /// MMIO accesses measured per kind.
    #[arg(long, default_value_t = 10000, value_parser = whole(1, u32::MAX), allow_negative_numbers = true)]
    pub mmio_count: u32,
}

#[derive(Debug, Serialize)]
pub struct MmioReport {
    pub count: u32,
    pub read_wall_ns: Summary,
    pub write_wall_ns: Summary,
    /// Card cycles per read, from the card's counter over the whole run (sim only meaningful).
    pub read_card_cycles_mean: f64,
}

#[derive(Debug, Serialize)]
struct SimReport {
    simulated: bool,
    /// The card library tlpx-sim loaded, its build info (JSON) and what its ident block says.
    card_library: String,
    card_build_info: serde_json::Value,
    map_hash: String,
    /// False for a card whose map is not the one this host was built for (measured anyway).
    map_known: bool,
    features: Vec<&'static str>,
    link: String,
    data_width: u32,
    clock_hz: u64,
    idle_cycles: u64,
    idle_cycles_per_second: f64,
    dma_bytes: u32,
    dma_repeats: u32,
    dma_cycles_per_second: Summary,
    dma_card_throughput_mb_s: Summary,
    mmio: MmioReport,
}

pub fn run(cmd: &Cmd, device: &str, json: bool) -> anyhow::Result<ExitCode> {
    match &cmd.what {
        What::Mmio(a) => {
            if !(1..=10_000_000).contains(&a.count) {
                bail!("--count must be 1..=10000000, not {}", a.count);
            }
            let opened = selector::open(device)?;
            let mut card = Card::open(opened.device)?;
            let report = measure_mmio(&mut card, a.count)?;
            if json {
                print_json(&report)?;
            } else {
                print_mmio(&report);
            }
        }
        What::Sim(a) => run_sim(a, device, json)?,
    }
    Ok(ExitCode::SUCCESS)
}

fn ns(d: Duration) -> f64 {
    d.as_secs_f64() * 1e9
}

pub fn measure_mmio(card: &mut Card, count: u32) -> anyhow::Result<MmioReport> {
    let mut reads = Vec::with_capacity(count as usize);
    let mut writes = Vec::with_capacity(count as usize);
    let start_cycles = card.cycles()?;
    for _ in 0..count {
        let t = Instant::now();
        card.device().bar_read(tlpx_regs::BAR, ident::SCRATCH.offset, Width::W32)?;
        reads.push(ns(t.elapsed()));
    }
    let read_cycles = card.cycles()?.saturating_sub(start_cycles);
    for i in 0..count {
        let t = Instant::now();
        card.device().bar_write(tlpx_regs::BAR, ident::SCRATCH.offset, Width::W32, u64::from(i))?;
        writes.push(ns(t.elapsed()));
    }
    card.device().bar_read(tlpx_regs::BAR, ident::SCRATCH.offset, Width::W32)?; // flush the posted writes
    let summary = |v: &[f64]| Summary::of(v).ok_or_else(|| anyhow::anyhow!("no samples"));
    Ok(MmioReport {
        count,
        read_wall_ns: summary(&reads)?,
        write_wall_ns: summary(&writes)?,
        read_card_cycles_mean: read_cycles as f64 / f64::from(count + 1),
    })
}

fn print_mmio(r: &MmioReport) {
    crate::outln!("mmio ({} accesses each; wall-clock time seen by this process)", r.count);
    for (name, s) in [("read (round trip)", &r.read_wall_ns), ("write (posted)", &r.write_wall_ns)] {
        crate::outln!("  {:<18} min {:>8.0} ns  median {:>8.0} ns  p99 {:>8.0} ns  max {:>9.0} ns", name, s.min, s.median, s.p99, s.max);
    }
    crate::outln!("  card time per read {:.1} cycles (mean)", r.read_card_cycles_mean);
}

fn run_sim(a: &SimArgs, device: &str, json: bool) -> anyhow::Result<()> {
    if !(1000..=10_000_000_000).contains(&a.idle_cycles) {
        bail!("--idle-cycles must be 1000..=10000000000, not {}", a.idle_cycles);
    }
    if a.dma_bytes < 4 || !a.dma_bytes.is_multiple_of(4) || a.dma_bytes as usize > litepcie_dma::MAX_DESCRIPTOR_BYTES {
        bail!("--dma-bytes must be {DMA_BYTES}, not {}", a.dma_bytes);
    }
    if a.dma_repeats == 0 || a.mmio_count == 0 {
        bail!("--dma-repeats and --mmio-count must be at least 1");
    }
    let selector = Selector::parse(device)?;
    let Some(socket) = selector.sim_socket() else {
        bail!("`tlpx bench sim` measures the simulator; {selector} is a real card (use `tlpx bench mmio` on real cards)");
    };
    // Idle speed: one client asks for N cycles of nothing.
    let mut sim = SimDevice::connect(&socket)?;
    let hello = sim.hello().clone();
    let t = Instant::now();
    sim.advance(a.idle_cycles)?;
    let idle_cycles_per_second = a.idle_cycles as f64 / t.elapsed().as_secs_f64();

    // DMA: LitePCIe loopback of dma_bytes, repeated. Any tlpx map is measured (see the module
    // doc): the magic is checked, the map hash is only reported.
    let mut device = SimDevice::connect(&socket)?;
    // tlpx's map at BAR0 0, or relocated by a DUT placed there (docs/accelerators.md).
    let base = match relocate::locate(&mut device)? {
        Located::At(base) => base,
        Located::Nowhere { at_zero, .. } => {
            bail!(
                "{} is not a tlpx card: BAR0 offset 0 reads 0x{at_zero:08x} and tlpx's relocated map has no magic either",
                hello.card_library
            )
        }
    };
    let mut device: Box<dyn Device> = if base == 0 { Box::new(device) } else { Box::new(Relocated::new(Box::new(device), base)) };
    let identity = read_identity(device.as_mut())?;
    let map_known = [tlpx_regs::MAP_HASH, tlpx_regs::MAP_HASH_CPU].contains(&identity.map_hash);
    let mut card = Card::open_expecting(device, identity.map_hash)?;
    let src = card.device().alloc_dma(a.dma_bytes as usize)?;
    let dst = card.device().alloc_dma(a.dma_bytes as usize)?;
    let mut rates = Vec::new();
    let mut throughput = Vec::new();
    for _ in 0..a.dma_repeats {
        let c0 = card.cycles()?;
        let t = Instant::now();
        let r = litepcie_dma::loopback(&mut card, &src, &dst, Duration::from_secs(1))?;
        let wall = t.elapsed().as_secs_f64();
        if !r.completed {
            return Err(crate::exit::card_failure(format!(
                "DMA loopback of {} bytes did not complete within 1 s of card time",
                a.dma_bytes
            )));
        }
        let cycles = card.cycles()?.saturating_sub(c0);
        rates.push(cycles as f64 / wall);
        throughput.push(f64::from(a.dma_bytes) / card.cycles_to_duration(r.cycles).as_secs_f64() / 1e6);
    }
    card.device().free_dma(src)?;
    card.device().free_dma(dst)?;
    let mmio = measure_mmio(&mut card, a.mmio_count)?;
    let report = SimReport {
        simulated: true,
        card_library: hello.card_library.clone(),
        card_build_info: serde_json::from_str(&hello.card_build_info).unwrap_or(serde_json::Value::String(hello.card_build_info.clone())),
        map_hash: format!("0x{:08x}", identity.map_hash),
        map_known,
        features: identity.feature_names(),
        link: hello.link.to_string(),
        data_width: hello.data_width,
        clock_hz: hello.card_clock_hz,
        idle_cycles: a.idle_cycles,
        idle_cycles_per_second,
        dma_bytes: a.dma_bytes,
        dma_repeats: a.dma_repeats,
        dma_cycles_per_second: Summary::of(&rates).ok_or_else(|| anyhow::anyhow!("no DMA samples"))?,
        dma_card_throughput_mb_s: Summary::of(&throughput).ok_or_else(|| anyhow::anyhow!("no DMA samples"))?,
        mmio,
    };
    if json {
        print_json(&report)?;
    } else {
        crate::outln!("simulator ({}-bit card at {:.0} MHz, link model {})", report.data_width, report.clock_hz as f64 / 1e6, report.link);
        crate::outln!(
            "  card             {} (map hash {}{}; blocks: {})",
            report.card_library,
            report.map_hash,
            if report.map_known { "" } else { ", not this host's map: only ident, timebase, pcie_msi and pcie_dma0 used" },
            report.features.join(", ")
        );
        crate::outln!("  idle             {:.2} M card cycles/s ({} cycles)", report.idle_cycles_per_second / 1e6, report.idle_cycles);
        let d = &report.dma_cycles_per_second;
        crate::outln!(
            "  DMA loopback     {:.2} M card cycles/s median (min {:.2}, max {:.2}; {} x {} B)",
            d.median / 1e6,
            d.min / 1e6,
            d.max / 1e6,
            report.dma_repeats,
            report.dma_bytes
        );
        crate::outln!("  DMA throughput   {:.0} MB/s of card time (simulated), median", report.dma_card_throughput_mb_s.median);
        print_mmio(&report.mmio);
    }
    Ok(())
}
