//! `tlpx-sim`: serves a simulated tlpx card on a Unix socket (see docs/sim-protocol.md).

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Parser;
use tlpx_sim::server::{serve, SimOptions};

/// Simulated tlpx card: a Verilated card behind a root-complex and PCIe link model, driven by
/// the same host tools as a real card through a Unix socket.
#[derive(Debug, Parser)]
#[command(name = "tlpx-sim", version)]
struct Cli {
    /// Socket to listen on [default: $XDG_RUNTIME_DIR/tlpx/sim.sock, or /tmp/tlpx-<uid>/sim.sock].
    #[arg(long, value_name = "PATH")]
    socket: Option<PathBuf>,
    /// Card library [default: env TLPX_CARD_LIB, else build/card/dw<N>/libtlpxcard.so found above the executable or the current directory].
    #[arg(long, value_name = "PATH")]
    card: Option<PathBuf>,
    /// The card with the soft CPU: build/card/dw<N>-cpu/libtlpxcard.so (make gateware CPU=1), found like the default card.
    #[arg(long, conflicts_with = "card")]
    with_cpu: bool,
    /// Datapath width of the card in bits; picks the card library and must match the library's [default: the library's; without --card, the smallest built card whose datapath keeps up with --gen/--lanes, else 64].
    #[arg(long, value_parser = parse_width)]
    data_width: Option<u32>,
    /// PCIe generation of the link (1..5).
    #[arg(long = "gen", default_value_t = 2, value_parser = clap::value_parser!(u8).range(1..=5))]
    generation: u8,
    /// Lanes (1, 2, 4, 8, 16) [default: 1, 4, 8 for a 64, 128, 256-bit card, as LitePCIe's 7-series PHYs].
    #[arg(long, value_parser = parse_lanes)]
    lanes: Option<u8>,
    /// Max payload size in bytes (128..4096), as Device Control starts.
    #[arg(long, default_value_t = 256, value_parser = parse_size)]
    mps: u32,
    /// Max read request size in bytes (128..4096), as Device Control starts.
    #[arg(long, default_value_t = 512, value_parser = parse_size)]
    mrrs: u32,
    /// Read completion boundary of the root complex in bytes (64 or 128).
    #[arg(long, default_value_t = 64, value_parser = parse_rcb)]
    rcb: u32,
    /// Card clock in MHz: one card cycle of virtual time [default: the card's build info, else 125].
    #[arg(long, value_name = "MHZ")]
    clock_mhz: Option<f64>,
    /// Root complex latency from a card's memory read to its first completion, in ns.
    #[arg(long, default_value_t = 400, value_name = "NS")]
    dma_latency_ns: u64,
    /// Uniform random extra latency 0..=N ns per read (seeded by --seed).
    #[arg(long, default_value_t = 50, value_name = "NS")]
    dma_jitter_ns: u64,
    /// Seed of every random choice of the sim (the latency jitter).
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Host memory that clients can allocate for DMA, in MiB.
    #[arg(long, default_value_t = 256, value_name = "MIB")]
    host_mem_mib: u64,
    /// MSI vectors the card's capability offers (Multiple Message Capable): 1, 2, 4, 8, 16 or
    /// 32, at most what the board's hard IP offers (the generic card: 32, the boards' IPs: 1).
    /// 1 by default, what every driver and test of the card was written against; more lets a
    /// host enable a vector per source and per interrupt-timer CPU.
    #[arg(long, default_value_t = 1, value_name = "N")]
    msi_vectors: u32,
    /// MSI-X: present the capability with an N-vector table (the card's, in BAR0; at most 32,
    /// and only on a board whose hard IP offers MSI-X: the generic card). 0, the default: no
    /// MSI-X capability, as every test and driver of the card so far expects.
    #[arg(long = "msix", default_value_t = 0, value_name = "N")]
    msix_vectors: u32,
    /// Bus address of the host memory (below 4 GiB so the card's 32-bit DMA reaches it).
    #[arg(long, default_value = "0x40000000", value_parser = parse_u64, value_name = "ADDR")]
    dma_base: u64,
    /// How long the root complex waits for the card's completion of an MMIO read, in µs of card time.
    #[arg(long, default_value_t = 1000, value_name = "US")]
    completion_timeout_us: u64,
    /// Fault injection: XOR the DW at BAR0 OFFSET with XORMASK in every MMIO read completion (repeatable).
    #[arg(long, value_name = "OFFSET:XORMASK", value_parser = parse_corrupt)]
    corrupt_read: Vec<(u64, u32)>,
    /// Fault injection: every Nth memory read of the card gets a Cpl with Unsupported Request (0 = off).
    #[arg(long, default_value_t = 0, value_name = "N", value_parser = parse_u64)]
    fault_ur_every: u64,
    /// Fault injection: every Nth memory read of the card gets a Cpl with Completer Abort (0 = off).
    #[arg(long, default_value_t = 0, value_name = "N", value_parser = parse_u64)]
    fault_ca_every: u64,
    /// Fault injection: every Nth memory read of the card gets poisoned CplDs (EP=1, data still sent) (0 = off).
    #[arg(long, default_value_t = 0, value_name = "N", value_parser = parse_u64)]
    fault_poison_every: u64,
    /// Fault injection: every Nth memory read of the card gets no completion at all (0 = off).
    #[arg(long, default_value_t = 0, value_name = "N", value_parser = parse_u64)]
    fault_drop_every: u64,
    /// Let in-flight traffic advance time even when no client waits (not deterministic).
    #[arg(long)]
    free_run: bool,
    /// What a client's own time between its messages costs the card: `virtual` (nothing;
    /// deterministic) or `real` (its wall time — socket, OS wake-up, its code — becomes card
    /// time, up to --host-time-cap-us per gap; not deterministic). See docs/sim-protocol.md.
    #[arg(long, default_value = "virtual", value_name = "virtual|real")]
    host_time: tlpx_sim_protocol::HostTime,
    /// With --host-time real: the most wall time one gap between a client's messages is
    /// charged as, in µs (1..10000000); longer gaps are counted in Stats (host_time.capped_gaps).
    #[arg(long, default_value_t = 10_000, value_name = "US")]
    host_time_cap_us: u64,
    /// The board whose PCIe hard IP the config space presents: its Max_Payload_Size supported,
    /// Link Capabilities (a faster or wider --gen/--lanes is refused), MSI address size. One of
    /// the boards of the card's datapath width and clock (kcu105 for the 256-bit card; kc705,
    /// acorn for the 128-bit one), or generic (LitePCIe's 512-byte payload limit, any link)
    /// [default: the card's board when its hard IP trains the --gen/--lanes asked for, else
    /// generic; generic for the 64-bit card].
    #[arg(long, value_name = "NAME")]
    board: Option<String>,
    /// Print the configuration space this run would present (`lspci -xxxx` form: libpci's dump
    /// format) and exit without serving: what the chosen --board's hard IP shows a host.
    #[arg(long, conflicts_with = "vfio_user")]
    print_config: bool,
    /// Serve the card as a vfio-user device on this socket (for QEMU's `vfio-user-pci`) instead
    /// of serving tlpx clients: one connection; config space, BAR0 and MSI as tlpx-sim presents
    /// them, the card's DMA into the guest's DMA-mapped memory (docs/virtual-platform.md).
    #[arg(long, value_name = "SOCKET", conflicts_with = "socket")]
    vfio_user: Option<PathBuf>,
    /// Print only errors and warnings.
    #[arg(long, short)]
    quiet: bool,
}

fn parse_u64(s: &str) -> Result<u64, String> {
    let t = s.replace('_', "");
    let r = match t.strip_prefix("0x").or_else(|| t.strip_prefix("0X")) {
        Some(hex) => u64::from_str_radix(hex, 16),
        None => t.parse(),
    };
    r.map_err(|_| format!("expected a decimal or 0x-prefixed hex number, not {s:?}"))
}

fn parse_width(s: &str) -> Result<u32, String> {
    match s.parse() {
        Ok(w @ (64 | 128 | 256)) => Ok(w),
        _ => Err(format!("data width must be 64, 128 or 256 bits, not {s:?}")),
    }
}

fn parse_lanes(s: &str) -> Result<u8, String> {
    match s.parse() {
        Ok(l @ (1 | 2 | 4 | 8 | 16)) => Ok(l),
        _ => Err(format!("lanes must be 1, 2, 4, 8 or 16, not {s:?}")),
    }
}

fn parse_size(s: &str) -> Result<u32, String> {
    match s.parse::<u32>() {
        Ok(v) if v.is_power_of_two() && (128..=4096).contains(&v) => Ok(v),
        _ => Err(format!("must be 128, 256, 512, 1024, 2048 or 4096 bytes, not {s:?}")),
    }
}

fn parse_rcb(s: &str) -> Result<u32, String> {
    match s.parse() {
        Ok(v @ (64 | 128)) => Ok(v),
        _ => Err(format!("RCB must be 64 or 128 bytes, not {s:?}")),
    }
}

fn parse_corrupt(s: &str) -> Result<(u64, u32), String> {
    let (o, m) = s.split_once(':').ok_or(format!("expected OFFSET:XORMASK (e.g. 0xc:0xffffffff), not {s:?}"))?;
    let off = parse_u64(o)?;
    let mask = parse_u64(m)?;
    let mask = u32::try_from(mask).map_err(|_| format!("XORMASK must fit in 32 bits, not {m}"))?;
    Ok((off, mask))
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
    let opts = SimOptions {
        socket: cli.socket.unwrap_or_else(tlpx_sim_protocol::default_socket_path),
        card: cli.card,
        with_cpu: cli.with_cpu,
        data_width: cli.data_width,
        generation: cli.generation,
        lanes: cli.lanes,
        mps: cli.mps,
        mrrs: cli.mrrs,
        rcb: cli.rcb,
        clock_mhz: cli.clock_mhz,
        dma_latency_ns: cli.dma_latency_ns,
        dma_jitter_ns: cli.dma_jitter_ns,
        seed: cli.seed,
        host_mem_mib: cli.host_mem_mib,
        msi_vectors: cli.msi_vectors,
        msix_vectors: cli.msix_vectors,
        dma_base: cli.dma_base,
        completion_timeout_us: cli.completion_timeout_us,
        corrupt_read: cli.corrupt_read,
        dma_faults: tlpx_sim_protocol::DmaFaults {
            ur_every: cli.fault_ur_every,
            ca_every: cli.fault_ca_every,
            poison_every: cli.fault_poison_every,
            drop_every: cli.fault_drop_every,
        },
        free_run: cli.free_run,
        host_time: cli.host_time,
        host_time_cap_us: cli.host_time_cap_us,
        board: cli.board,
        quiet: cli.quiet,
    };
    if cli.print_config {
        return match tlpx_sim::server::prepare(&opts) {
            Ok(p) => {
                let (domain, bus, dev, func) = tlpx_sim::server::PCI_ADDRESS;
                print!("{}", tlpx_pci::render_dump(domain, bus, dev, func, p.config.bytes()));
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("tlpx-sim: error: {e}");
                ExitCode::from(1)
            }
        };
    }
    let served = match &cli.vfio_user {
        Some(path) => tlpx_sim::vfu::serve_vfio_user(&opts, path),
        None => serve(&opts),
    };
    match served {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("tlpx-sim: error: {e}");
            ExitCode::from(1)
        }
    }
}
