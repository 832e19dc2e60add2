//! tlpx: drive a tlpx card (real or simulated) from the command line.

mod cmd;
mod input;
mod metrics;
mod output;
mod plot;
mod pmc;
mod progress;
mod realtime;
mod results;
mod selector;
mod session;
mod sizes;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// tlpx, an open PCIe bus exerciser and spy.
///
/// Without --device, tlpx drives the simulated card of a running `tlpx-sim`.
#[derive(Debug, Parser)]
#[command(name = "tlpx", version, about, long_about = None)]
struct Cli {
    /// Card to drive: `sim` (the default simulator socket), `sim:PATH` (a simulator socket),
    /// a PCI address such as 0000:03:00.0 (the backend follows its bound driver: vfio-pci or
    /// litepcie), `vfio:ADDRESS`, or `litepcie:/dev/litepcieN`. Also read from TLPX_DEVICE.
    #[arg(long, short = 'd', global = true, env = "TLPX_DEVICE", default_value = "sim")]
    device: String,

    /// Print machine-readable JSON instead of text.
    #[arg(long, global = true)]
    json: bool,

    /// Count host CPU events (instructions, cycles, CPI, cache references and misses) of the
    /// measuring threads with perf_event_open, into the output and the result's `pmc` field.
    /// Where the kernel refuses, tlpx says why and carries on without them.
    #[arg(long, global = true)]
    pmc: bool,

    /// Expose Prometheus metrics of the run at this address (HOST:PORT; loopback by default:
    /// 127.0.0.1:9464), for long-running commands and `tlpx serve`.
    #[arg(long, global = true, value_name = "HOST:PORT")]
    metrics_listen: Option<String>,

    /// With --pmc: count kernel time too (user space only by default).
    #[arg(long, global = true, requires = "pmc")]
    pmc_kernel: bool,

    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// List every PCI function libpci sees, and the simulated card if a simulator runs.
    List(cmd::list::Cmd),
    /// Show a card's identification block, link, MPS/MRRS and features.
    Info(cmd::info::Cmd),
    /// Check a card end to end: registers, counter, MSI, UR handling, DMA loopback.
    Selftest(cmd::selftest::Cmd),
    /// Measure the cost of the access paths (and the simulator's speed).
    Bench(cmd::bench::Cmd),
    /// The analytic PCIe bandwidth limit (pcie-bench's model) for a link and transfer sizes.
    Model(cmd::model::Cmd),
    /// DMA bandwidth with the card's traffic generator (BW_RD, BW_WR, BW_RDWR), against the model.
    Bw(cmd::bw::Cmd),
    /// DMA read latency (LAT_RD, LAT_WRRD): min / median / p99 / p99.9 / max and a CDF.
    Lat(cmd::lat::Cmd),
    /// Host-driven reads and writes of the card's PIO window: latency, throughput, TLP sizes.
    Pio(cmd::pio::Cmd),
    /// The Pamette table for this host: best DMA write / read / read+write, PIO write / read.
    Characterize(cmd::characterize::Cmd),
    /// The passive spy: capture every TLP to a trace file, counters, conversions.
    Spy(cmd::spy::Cmd),
    /// Stop blocks and take them back from their owners (a process that was killed, or one
    /// that holds a block you need): generator, spy, irq_timer, rt_loop, rule30_batch, cpu, all.
    Stop(cmd::stop::Cmd),
    /// Who owns each block of the card (PID, command, since when) and how long its lease runs.
    Owners(cmd::stop::OwnersCmd),
    /// Live terminal view of the card's bus: bandwidth, TLP mix, latency, transactions, errors.
    Top(cmd::top::Cmd),
    /// Interrupt dispatch latency with the card's interrupt timer: histograms, idle vs loaded.
    Irq(cmd::irq::Cmd),
    /// The real-time round-trip loop (DataMover): card writes a buffer, the host returns its checksum.
    Loop(cmd::rt_loop::Cmd),
    /// The rule-30 accelerator against software: the Simics paper's experiment (run, sweep).
    Rule30(cmd::rule30::Cmd),
    /// Exerciser scripts: check a script, compile it into the card CPU's binary image, run it on the card.
    Script(cmd::script::Cmd),
    /// The card's soft CPU: load and start its firmware, stop it, its status and console.
    Fw(cmd::fw::Cmd),
    /// Serve the card's live measurements as Prometheus metrics.
    Serve(cmd::serve::Cmd),
    /// Turn result documents (bw, lat, pio, spy, irq, loop, rule30) into one HTML report.
    Report(cmd::report::Cmd),
    /// Bind a PCI function to vfio-pci, give it back, or show its driver and IOMMU group.
    Vfio(cmd::vfio::Cmd),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    // A process that owns a block of the card must not die of SIGPIPE in the middle of its
    // job (`tlpx spy capture | head`): it ignores it, sees the failed write, stops the job and
    // exits 141 (output.rs). Commands that print with println! still end quietly on a closed
    // pipe by dying of it, as Unix tools do.
    let keeps_running = matches!(&cli.command, Command::Spy(c) if c.is_capture());
    // SAFETY: setting the disposition of SIGPIPE before any thread starts.
    unsafe {
        libc::signal(libc::SIGPIPE, if keeps_running { libc::SIG_IGN } else { libc::SIG_DFL });
    }
    if cli.pmc {
        let scope = if cli.pmc_kernel { pmc::PmcScope::UserKernel } else { pmc::PmcScope::User };
        pmc::enable(pmc::PmcOptions { scope });
    }
    if let Some(addr) = &cli.metrics_listen {
        // Long-running commands export the card's metrics while they run; `serve` does it
        // itself; the quick ones have nothing to export over time.
        let long = matches!(
            cli.command,
            Command::Bw(_)
                | Command::Lat(_)
                | Command::Pio(_)
                | Command::Characterize(_)
                | Command::Spy(_)
                | Command::Top(_)
                | Command::Irq(_)
                | Command::Loop(_)
                | Command::Rule30(_)
        );
        let started = match &cli.command {
            Command::Serve(_) => Ok(()),
            _ if long => cmd::serve::export_alongside(&cli.device, addr),
            _ => metrics::parse_listen(addr).and_then(|_| {
                anyhow::bail!(
                    "--metrics-listen {addr} applies to the long-running commands (bw, lat, pio, characterize, spy, top, \
                     irq, loop, rule30) and to `tlpx serve`, not to this one"
                )
            }),
        };
        if let Err(e) = started {
            eprintln!("tlpx: error: {e:#}");
            return ExitCode::from(2);
        }
    }
    let result = match &cli.command {
        Command::List(c) => cmd::list::run(c, &cli.device, cli.json),
        Command::Info(c) => cmd::info::run(c, &cli.device, cli.json),
        Command::Selftest(c) => cmd::selftest::run(c, &cli.device, cli.json),
        Command::Bench(c) => cmd::bench::run(c, &cli.device, cli.json),
        Command::Model(c) => cmd::model::run(c, &cli.device, cli.json),
        Command::Bw(c) => cmd::bw::run(c, &cli.device, cli.json),
        Command::Lat(c) => cmd::lat::run(c, &cli.device, cli.json),
        Command::Pio(c) => cmd::pio::run(c, &cli.device, cli.json),
        Command::Characterize(c) => cmd::characterize::run(c, &cli.device, cli.json),
        Command::Spy(c) => cmd::spy::run(c, &cli.device, cli.json),
        Command::Stop(c) => cmd::stop::run(c, &cli.device, cli.json),
        Command::Owners(c) => cmd::stop::owners(c, &cli.device, cli.json),
        Command::Top(c) => cmd::top::run(c, &cli.device, cli.json),
        Command::Irq(c) => cmd::irq::run(c, &cli.device, cli.json),
        Command::Loop(c) => cmd::rt_loop::run(c, &cli.device, cli.json),
        Command::Rule30(c) => cmd::rule30::run(c, &cli.device, cli.json),
        Command::Script(c) => cmd::script::run(c, &cli.device, cli.json),
        Command::Fw(c) => cmd::fw::run(c, &cli.device, cli.json),
        Command::Serve(c) => cmd::serve::run(c, &cli.device, cli.json, cli.metrics_listen.as_deref()),
        Command::Report(c) => cmd::report::run(c, cli.json),
        Command::Vfio(c) => cmd::vfio::run(c, cli.json),
    };
    pmc::say_main();
    if cli.metrics_listen.is_some() {
        metrics::finish(std::time::Duration::from_secs(2));
    }
    if output::output_closed() {
        return ExitCode::from(output::OUTPUT_CLOSED_EXIT);
    }
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("tlpx: error: {e:#}");
            ExitCode::from(2)
        }
    }
}
