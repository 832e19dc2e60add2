//! `tlpx-sim-bench`: how fast a running tlpx-sim is. Connects to its socket and measures
//! card cycles per wall second with the card idle and with the card's DMA in loopback
//! (continuous MRd/CplD/MWr traffic), and the MMIO read round trip a client sees.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use clap::Parser;
use serde::Serialize;
use tlpx_device::backends::sim::SimDevice;
use tlpx_device::{Device, DeviceError, Width};

/// Measures a running tlpx-sim: cycles/s idle and under DMA, MMIO round trip.
#[derive(Debug, Parser)]
#[command(name = "tlpx-sim-bench", version)]
struct Cli {
    /// Socket of the sim [default: the default tlpx-sim socket].
    #[arg(long)]
    socket: Option<PathBuf>,
    /// Card cycles to run for each cycles/s figure.
    #[arg(long, default_value_t = 2_000_000)]
    cycles: u64,
    /// MMIO reads to time.
    #[arg(long, default_value_t = 20_000)]
    reads: u32,
    /// Also write the results as JSON to this file.
    #[arg(long)]
    json: Option<PathBuf>,
}

#[derive(Debug, Serialize)]
struct Results {
    schema: &'static str,
    data_width: u32,
    link: String,
    card_clock_hz: u64,
    idle_cycles_per_second: f64,
    dma_cycles_per_second: f64,
    /// DMA loopback payload throughput in card time (bytes per simulated second), per direction.
    dma_read_bytes_per_card_second: f64,
    dma_write_bytes_per_card_second: f64,
    /// Raw bytes per second of one link direction (after line encoding).
    link_raw_bytes_per_second: f64,
    /// What the sim's link carries for TLPs (framing included) per direction: the raw rate
    /// less pcie-bench's DLLP and SKP share (tlpx_model's `tlp_bytes_per_second`).
    link_tlp_bytes_per_second: f64,
    mmio_reads: u32,
    mmio_round_trip_wall_us: f64,
    mmio_round_trip_card_cycles: f64,
    /// A request that runs no card cycle (Advance 0): the socket and thread cost alone.
    protocol_round_trip_wall_us: f64,
}

fn w(dev: &mut SimDevice, off: u64, v: u64) -> Result<(), DeviceError> {
    dev.bar_write(0, off, Width::W32, v)
}

fn run(cli: &Cli) -> Result<Results, DeviceError> {
    let socket = cli.socket.clone().unwrap_or_else(SimDevice::default_socket_path);
    let mut dev = SimDevice::connect_as(&socket, "tlpx-sim-bench")?;
    let hello = dev.hello().clone();

    // Idle card: only the clock runs.
    let t0 = Instant::now();
    dev.advance(cli.cycles)?;
    let idle = cli.cycles as f64 / t0.elapsed().as_secs_f64();

    // DMA loopback in loop mode: the reader streams a buffer in, the writer streams it out.
    let len: u64 = 256 * 1024;
    let src = dev.alloc_dma(len as usize)?;
    let dst = dev.alloc_dma(len as usize)?;
    // As LitePCIe's driver: descriptors are written in prog mode, then the table loops.
    for (off, v) in [(0x2000u64, 0u64), (0x2020, 0), (0x201c, 1), (0x203c, 1), (0x2010, 0), (0x2030, 0)] {
        w(&mut dev, off, v)?;
    }
    // 64-bit descriptor CSRs: address (bits 31:0), then length | IRQ disable (bit 56).
    w(&mut dev, 0x2004, dst.bus_addr & 0xFFFF_FFFF)?;
    w(&mut dev, 0x2008, len | (1 << 24))?;
    w(&mut dev, 0x200c, dst.bus_addr >> 32)?;
    w(&mut dev, 0x2024, src.bus_addr & 0xFFFF_FFFF)?;
    w(&mut dev, 0x2028, len | (1 << 24))?;
    w(&mut dev, 0x202c, src.bus_addr >> 32)?;
    w(&mut dev, 0x2010, 1)?;
    w(&mut dev, 0x2030, 1)?;
    w(&mut dev, 0x2040, 1)?;
    w(&mut dev, 0x2000, 1)?;
    w(&mut dev, 0x2020, 1)?;
    dev.advance(20_000)?; // reach steady state
    let s0 = dev.stats()?;
    let t0 = Instant::now();
    dev.advance(cli.cycles)?;
    let wall = t0.elapsed().as_secs_f64();
    let s1 = dev.stats()?;
    w(&mut dev, 0x2020, 0)?;
    w(&mut dev, 0x2000, 0)?;
    dev.idle(Duration::from_micros(20))?;
    let card_seconds = cli.cycles as f64 / hello.card_clock_hz as f64;
    let dma = cli.cycles as f64 / wall;
    let rd = (s1.dma_read_bytes - s0.dma_read_bytes) as f64 / card_seconds;
    let wr = (s1.dma_write_bytes - s0.dma_write_bytes) as f64 / card_seconds;
    dev.free_dma(src)?;
    dev.free_dma(dst)?;

    // Protocol round trip alone (no card cycles): Advance by 0.
    let t0 = Instant::now();
    for _ in 0..cli.reads {
        dev.advance(0)?;
    }
    let ipc = t0.elapsed().as_secs_f64() / f64::from(cli.reads.max(1));

    // MMIO round trip.
    let c0 = dev.card_cycle()?;
    let t0 = Instant::now();
    for _ in 0..cli.reads {
        dev.bar_read(0, 0, Width::W32)?;
    }
    let rt_wall = t0.elapsed().as_secs_f64() / f64::from(cli.reads.max(1));
    let rt_cycles = (dev.card_cycle()? - c0) as f64 / f64::from(cli.reads.max(1));

    Ok(Results {
        schema: "tlpx-sim-bench/1",
        data_width: hello.data_width,
        link: hello.link.to_string(),
        card_clock_hz: hello.card_clock_hz,
        idle_cycles_per_second: idle,
        dma_cycles_per_second: dma,
        dma_read_bytes_per_card_second: rd,
        dma_write_bytes_per_card_second: wr,
        link_raw_bytes_per_second: hello.link.raw_bytes_per_second(),
        link_tlp_bytes_per_second: hello.link.tlp_bytes_per_second(),
        mmio_reads: cli.reads,
        mmio_round_trip_wall_us: rt_wall * 1e6,
        mmio_round_trip_card_cycles: rt_cycles,
        protocol_round_trip_wall_us: ipc * 1e6,
    })
}

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(c) => c,
        Err(e) => {
            let code = if e.use_stderr() { ExitCode::from(1) } else { ExitCode::SUCCESS };
            let _ = e.print();
            return code;
        }
    };
    let r = match run(&cli) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("tlpx-sim-bench: error: {e}");
            return ExitCode::from(1);
        }
    };
    println!("tlpx-sim bench: {}-bit card, {}, {:.0} MHz card clock", r.data_width, r.link, r.card_clock_hz as f64 / 1e6);
    println!("  card cycles/s, idle card:        {:>8.2} M", r.idle_cycles_per_second / 1e6);
    println!("  card cycles/s, DMA loopback:     {:>8.2} M", r.dma_cycles_per_second / 1e6);
    println!(
        "  DMA loopback (card time):        {:>8.1} MB/s read, {:.1} MB/s write (link {:.1} MB/s raw, {:.1} MB/s for TLPs, per direction)",
        r.dma_read_bytes_per_card_second / 1e6,
        r.dma_write_bytes_per_card_second / 1e6,
        r.link_raw_bytes_per_second / 1e6,
        r.link_tlp_bytes_per_second / 1e6
    );
    println!(
        "  MMIO read round trip:            {:>8.2} us wall, {:.1} card cycles ({} reads)",
        r.mmio_round_trip_wall_us, r.mmio_round_trip_card_cycles, r.mmio_reads
    );
    println!("  protocol round trip (no cycles):  {:>8.2} us wall", r.protocol_round_trip_wall_us);
    if let Some(path) = &cli.json {
        let text = serde_json::to_string_pretty(&r).unwrap_or_default();
        if let Err(e) = std::fs::write(path, text + "\n") {
            eprintln!("tlpx-sim-bench: error: cannot write {}: {e}", path.display());
            return ExitCode::from(1);
        }
    }
    ExitCode::SUCCESS
}
