//! tlpx: drive a tlpx card (real or simulated) from the command line.

mod args;
mod checkpoint;
mod cmd;
mod defaults;
mod etherbone;
mod exit;
mod input;
mod measure;
mod metrics;
mod output;
mod plot;
mod pmc;
mod progress;
mod realtime;
mod regmap;
mod results;
mod session;
mod sizes;
#[path = "../../../blocks/slot/driver.rs"]
mod slot;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// tlpx, an open PCIe bus exerciser and spy.
///
/// Without --device, tlpx drives the simulated card of a running `tlpx-sim`.
#[derive(Debug, Parser)]
#[command(name = "tlpx", version, about, long_about = None, after_long_help = exit::HELP)]
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
    /// Read and write the card's registers by name (region.register) or BAR0 offset.
    Reg(cmd::reg::Cmd),
    /// Exercise the accelerator in the card's slot with a session script: DMA buffers,
    /// register writes and reads by name, waits for its MSI, checks of registers and buffers.
    Slot(cmd::slot::Cmd),
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
    /// Serve the card's BAR0 to LiteX's tools (litex_cli, RemoteClient): Etherbone over TCP,
    /// as litex_server does.
    LitexServer(cmd::litex_server::Cmd),
    /// Turn result documents (bw, lat, pio, spy, irq, loop, rule30) into one HTML report.
    Report(cmd::report::Cmd),
    /// Compare two results of the same kind figure by figure; exit 1 when a figure changed
    /// more than the run-to-run spread the results record.
    Diff(cmd::diff::Cmd),
    /// Bind a PCI function to vfio-pci, give it back, or show its driver and IOMMU group.
    Vfio(cmd::vfio::Cmd),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    // A process that owns a block of the card must not die of SIGPIPE in the middle of its
    // job (`tlpx spy capture | head`): tlpx ignores it, sees the failed write (output.rs),
    // stops what it runs and exits 141 after cleaning up.
    // SAFETY: setting the disposition of SIGPIPE before any thread starts.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_IGN);
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
            return ExitCode::from(exit::status_of(&e));
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
        Command::Reg(c) => cmd::reg::run(c, &cli.device, cli.json),
        Command::Slot(c) => cmd::slot::run(c, &cli.device, cli.json),
        Command::Top(c) => cmd::top::run(c, &cli.device, cli.json),
        Command::Irq(c) => cmd::irq::run(c, &cli.device, cli.json),
        Command::Loop(c) => cmd::rt_loop::run(c, &cli.device, cli.json),
        Command::Rule30(c) => cmd::rule30::run(c, &cli.device, cli.json),
        Command::Script(c) => cmd::script::run(c, &cli.device, cli.json),
        Command::Fw(c) => cmd::fw::run(c, &cli.device, cli.json),
        Command::Serve(c) => cmd::serve::run(c, &cli.device, cli.json, cli.metrics_listen.as_deref()),
        Command::LitexServer(c) => cmd::litex_server::run(c, &cli.device),
        Command::Report(c) => cmd::report::run(c, cli.json),
        Command::Diff(c) => cmd::diff::run(c, cli.json),
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
        // A write to a closed standard output that went through `?` rather than outln!.
        Err(e) if e.chain().any(|c| c.downcast_ref::<std::io::Error>().is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe)) => {
            ExitCode::from(output::OUTPUT_CLOSED_EXIT)
        }
        Err(e) => {
            eprintln!("tlpx: error: {e:#}");
            ExitCode::from(exit::status_of(&e))
        }
    }
}

#[cfg(test)]
mod tests {
    use std::any::TypeId;

    use clap::error::ErrorKind;
    use clap::{CommandFactory, Parser};

    use super::Cli;

    /// Every option taking a value, with the subcommand path that reaches it.
    fn options(cmd: &clap::Command, path: &mut Vec<String>, out: &mut Vec<(Vec<String>, clap::Arg)>) {
        for arg in cmd.get_arguments() {
            if arg.get_long().is_some() && arg.get_action().takes_values() {
                out.push((path.clone(), arg.clone()));
            }
        }
        for sub in cmd.get_subcommands() {
            path.push(sub.get_name().to_string());
            options(sub, path, out);
            path.pop();
        }
    }

    fn is_integer(arg: &clap::Arg) -> bool {
        let t = arg.get_value_parser().type_id();
        [
            TypeId::of::<u8>(),
            TypeId::of::<u16>(),
            TypeId::of::<u32>(),
            TypeId::of::<u64>(),
            TypeId::of::<usize>(),
            TypeId::of::<i32>(),
            TypeId::of::<i64>(),
        ]
        .iter()
        .any(|id| t == *id)
    }

    #[test]
    fn every_numeric_option_refuses_a_negative_number_by_name_and_range() {
        let mut all = Vec::new();
        options(&Cli::command(), &mut Vec::new(), &mut all);
        let numeric: Vec<_> = all.iter().filter(|(_, a)| is_integer(a)).collect();
        // The walk finds them (bw, lat, pio, characterize, irq, loop, rule30, spy, top, ...).
        assert!(numeric.len() >= 50, "only {} numeric options found", numeric.len());
        for (path, arg) in numeric {
            let long = format!("--{}", arg.get_long().unwrap_or_default());
            for value in ["-1", "-64"] {
                let mut argv = vec!["tlpx".to_string()];
                argv.extend(path.iter().cloned());
                argv.push(long.clone());
                argv.push(value.to_string());
                // No numeric option of tlpx takes a negative number.
                let Err(e) = Cli::try_parse_from(&argv) else { panic!("{argv:?} was accepted") };
                let text = e.to_string();
                assert_eq!(e.kind(), ErrorKind::ValueValidation, "{argv:?}: {text}");
                assert!(text.contains(&long) && text.contains(value), "{argv:?}: {text}");
                // The range (or, for --lanes, the list) of what is accepted.
                assert!(text.contains("accepted: ") || text.contains("1, 2, 4, 8 or 16"), "{argv:?}: {text}");
            }
        }
    }

    #[test]
    fn options_whose_text_holds_numbers_take_a_leading_minus_as_their_value() {
        for argv in [
            &["bw", "--sizes", "-64"][..],
            &["bw", "--window", "-1M"],
            &["bw", "--offset", "-4"],
            &["bw", "--duration", "-2ms"],
            &["lat", "--sizes", "-64"],
            &["characterize", "--lat-sizes", "-64"],
            &["characterize", "--widths", "-4"],
            &["pio", "--widths", "-4"],
            &["model", "--sizes", "-64"],
            &["loop", "--size", "-64"],
            &["irq", "--min", "-10us"],
            &["irq", "--period", "-1ms"],
            &["rule30", "run", "--latency", "-10ns"],
            &["rule30", "sweep", "--lengths", "-8"],
            &["rule30", "sweep", "--latencies", "-1us"],
            &["spy", "capture", "--duration", "-2ms"],
            &["spy", "capture", "--poll", "-50us"],
            &["spy", "capture", "--address", "-4"],
            &["top", "--interval", "-100ms"],
        ] {
            let mut full = vec!["tlpx"];
            full.extend_from_slice(argv);
            // The command's own parser then names the option and what it accepts (tests/args_cli.rs).
            if let Err(e) = Cli::try_parse_from(&full) {
                panic!("{argv:?}: {e}");
            }
        }
    }

    #[test]
    fn defaults_that_depend_on_the_backend_are_in_the_help_as_the_commands_use_them() {
        use crate::cmd::{irq, rule30};
        let cases = [
            (&["rule30", "run"][..], "packets", rule30::RUN_PACKETS.help()),
            (&["rule30", "sweep"], "packets", rule30::SWEEP_PACKETS.help()),
            (&["rule30", "sweep"], "lengths", rule30::SWEEP_LENGTHS.help()),
            (&["irq"], "samples", irq::SAMPLES.help()),
        ];
        for (path, long, wanted) in cases {
            let mut cmd = Cli::command();
            for name in path {
                cmd = cmd.find_subcommand(name).unwrap_or_else(|| panic!("no subcommand {name}")).clone();
            }
            let arg = cmd.get_arguments().find(|a| a.get_long() == Some(long)).unwrap_or_else(|| panic!("{path:?} has no --{long}"));
            let help = arg.get_help().map(ToString::to_string).unwrap_or_default();
            assert!(help.contains(&wanted), "{path:?} --{long}: {help:?} does not say {wanted:?}");
            // clap must not add a default of its own: the command picks it from the backend.
            assert!(arg.get_default_values().is_empty(), "{path:?} --{long} has a clap default");
        }
    }

    #[test]
    fn the_long_help_lists_the_exit_statuses() {
        let help = Cli::command().render_long_help().to_string();
        for line in ["Exit status:", "  2 ", "  3 ", "130"] {
            assert!(help.contains(line), "{line:?} missing from:\n{help}");
        }
    }
}
