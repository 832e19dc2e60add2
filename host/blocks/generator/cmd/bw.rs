//! `tlpx bw`: DMA bandwidth with the card's traffic generator, against the model.
//!
//! BW_RD, BW_WR and BW_RDWR (generator operations Read, Write, ReadWrite), swept over transfer
//! size, window, offset within a cache line and address pattern. For every point: the
//! payload throughput the card measured (card time: its cycle counter from the first request
//! to the last completion), the pcie-bench model's limit for the link libpci reports, the
//! efficiency achieved / model, the errors the card counted, and a data check: the card
//! checks what it reads, the host checks what the card wrote.
//!
//! For read+write, throughput and model are per stream (each direction carries one).

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

use clap::Args;
use tlpx_device::card::Feature;
use tlpx_device::generator::{LinkLimits, Operation, ValidGenConfig, MAX_TRANSFER_BYTES, TAGS};
use tlpx_device::DmaBuffer;
use tlpx_model::link::CompletionSplit;

use super::bw_driver;
use crate::args::{check_optional_output, refuse_duplicate_values, whole};
use crate::measure::config::{build_configs, op_short, parse_common, session_model, transfer_sizes, GenArgs};
use crate::measure::figures::{efficiency_limit, header_line, knob_limits, legend, point_line, TableFormat};
use crate::measure::host_memory;
use crate::measure::runner::{measure_point, sweep};
use crate::progress::{self, Progress};
use crate::results::{ModelConfig, ResultDoc, SimLimit};
use crate::session::Session;

/// The pcie-bench name of an operation, where `results::diff` looks for it.
pub use crate::measure::config::op_label;
/// The document's types (and the option values they record) are tlpx-results'.
pub use tlpx_results::bw::{
    Body, BwOp, BwPoint, CacheState, Common, DataArg, HostCheck, HostKnobs, IommuPages, Parameters, PatternArg, RunRecord,
};

// Arguments ------------------------------------------------------------------------------

#[derive(Debug, Args)]
pub struct Cmd {
    /// Operations: read, write, rdwr (comma-separated).
    #[arg(long, value_enum, value_delimiter = ',', default_value = "read,write,rdwr")]
    pub op: Vec<BwOp>,
    // Help from sizes_help(): the limit is the generator's, from the register map.
    #[arg(long, default_value = "64..4096", allow_hyphen_values = true, help = sizes_help())]
    pub sizes: String,
    /// Reads in flight at most: 1..=32, the generator's tags (the default keeps them all available).
    #[arg(long, default_value_t = TAGS, value_parser = whole(1, TAGS), allow_negative_numbers = true)]
    pub outstanding: u32,
    #[command(flatten)]
    pub gen: GenArgs,
    /// Also write the result document (JSON) to this file.
    #[arg(long, value_name = "FILE.json")]
    pub output: Option<PathBuf>,
    /// How the points are printed: tlpx's lines, or pcie-bench's table (text or CSV).
    #[arg(long, value_enum, default_value_t = TableFormat::Tlpx)]
    pub format: TableFormat,
}

/// `--sizes`' help, with the largest transfer the generator moves (tlpx_regs' constant).
fn sizes_help() -> &'static str {
    static HELP: std::sync::LazyLock<String> = std::sync::LazyLock::new(|| {
        format!("Transfer sizes: 64,256,4K or 64..4096 (doubling) or 64..512+64 (step); 1..{MAX_TRANSFER_BYTES} bytes.")
    });
    HELP.as_str()
}

// The command ---------------------------------------------------------------------------

/// The sweep's parameters: the sizes are the first configuration's (the link's when there
/// is none), as the generator ran them.
pub(crate) fn parameters(
    operations: Vec<&'static str>,
    sizes: Vec<u32>,
    outstanding: u32,
    common: Common,
    first: Option<&ValidGenConfig>,
    link: LinkLimits,
) -> Parameters {
    // Every field named, so that a new option in Common does not go unrecorded.
    let Common {
        windows,
        offsets,
        patterns,
        count,
        duration_seconds,
        request_size: _,
        payload_size: _,
        idle_cycles,
        addr64,
        data,
        seed,
        check,
        relaxed_ordering,
        no_snoop,
        repeat,
        host,
    } = common;
    Parameters {
        operations,
        sizes,
        outstanding,
        windows,
        offsets,
        patterns,
        count,
        duration_seconds,
        request_size: first.map_or(link.mrrs, |c| c.request_size),
        payload_size: first.map_or(link.mps, |c| c.payload_size),
        duration_cycles: first.map_or(0, |c| c.duration_cycles),
        idle_cycles,
        addr64,
        data,
        seed,
        check,
        relaxed_ordering,
        no_snoop,
        repeat,
        host,
    }
}

/// `cmd` as a run through LitePCIe's driver sees it: the options that apply there, and the
/// generator's options set away from their defaults (which it refuses rather than ignores).
fn driver_request(cmd: &Cmd) -> bw_driver::Request<'_> {
    let g = &cmd.gen;
    let mut set = Vec::new();
    if cmd.op != [BwOp::Read, BwOp::Write, BwOp::Rdwr] && cmd.op != [BwOp::Rdwr] {
        set.push("--op (only rdwr: the driver's DMA runs reader and writer together, in loopback)");
    }
    for (flag, changed) in [
        ("--sizes", cmd.sizes != "64..4096"),
        ("--outstanding", cmd.outstanding != tlpx_device::generator::TAGS),
        ("--window", g.window != "1M"),
        ("--offset", g.offset != "0"),
        ("--pattern", g.pattern.len() != 1 || g.pattern[0] != PatternArg::Seq),
        ("--duration", g.duration.is_some()),
        ("--request-size", g.request_size.is_some()),
        ("--payload-size", g.payload_size.is_some()),
        ("--idle", g.idle != 0),
        ("--addr64", g.addr64),
        ("--ro", g.ro),
        ("--ns", g.ns),
        ("--cache", g.host.cache != CacheState::HostWarm),
        ("--numa-node", g.host.numa_node.is_some()),
        ("--iommu-pages", g.host.iommu_pages.is_some()),
        ("--format", cmd.format != TableFormat::Tlpx),
    ] {
        if changed {
            set.push(flag);
        }
    }
    bw_driver::Request {
        count: g.count,
        repeat: g.repeat,
        seed: g.seed,
        check: !g.no_check,
        output: cmd.output.as_deref(),
        generator_options: set,
    }
}

pub fn run(cmd: &Cmd, device: &str, json: bool) -> anyhow::Result<ExitCode> {
    let started = Instant::now();
    let text = cmd.format.tlpx_text(json)?;
    let common = parse_common(&cmd.gen).map_err(anyhow::Error::msg)?;
    let sizes = transfer_sizes("--sizes", &cmd.sizes).map_err(anyhow::Error::msg)?;
    refuse_duplicate_values("--op", &cmd.op).map_err(anyhow::Error::msg)?;
    let ops: Vec<Operation> = cmd.op.iter().map(|o| o.operation()).collect();
    // Everything that does not need the link is checked before touching the card, the output
    // path included (a long sweep must not end in "cannot write").
    build_configs(&ops, &sizes, cmd.outstanding, &common, LinkLimits::LARGEST, 1).map_err(anyhow::Error::msg)?;
    check_optional_output("--output", cmd.output.as_deref())?;

    let mut session = Session::open(device)?;
    if session.card.device().try_as_driver_dma().is_some() {
        // LitePCIe's driver owns the DMA buffers: its own DMA runs instead of the generator.
        return bw_driver::run(&driver_request(cmd), session, json, started);
    }
    let (mps, mrrs) = session.mps_mrrs();
    let configs =
        build_configs(&ops, &sizes, cmd.outstanding, &common, LinkLimits { mps, mrrs }, session.clock_hz).map_err(anyhow::Error::msg)?;
    session.card.require(Feature::Generator, "traffic generator")?;
    host_memory::prepare(&mut session, &common)?;
    progress::install_stop_handler();

    let model = session_model(&session, common.addr64);
    let simulated = session.environment.simulated;
    let limits: Vec<SimLimit> =
        if simulated { model.iter().map(|_| efficiency_limit()).chain(knob_limits(&common)).collect() } else { Vec::new() };
    if text {
        crate::outln!("{}", session.describe());
        match &model {
            Some(m) => crate::outln!("model: tlpx-model (pcie-bench) for {m}, completions up to MPS; rdwr figures are per stream"),
            None => crate::outln!("model: none for this link"),
        }
        for n in &session.notes {
            crate::outln!("note: {n}");
        }
        for line in legend(&session.environment).into_iter().chain(host_memory::describe(&session)) {
            crate::outln!("{line}");
        }
        // The efficiency's footnote is the legend; the knobs' notes are said once each.
        for l in limits.iter().filter(|l| l.id != "efficiency_paced_by_the_model") {
            crate::outln!("note: {}", l.note());
        }
        crate::outln!("{}", header_line(simulated));
    }
    let progress = Progress::new(configs.len() as u64, json);
    let repeat = common.repeat;
    let measure = |s: &mut Session, b: &DmaBuffer, c: &ValidGenConfig| measure_point(s, b, c, repeat);
    let (points, interrupted) = sweep(&mut session, &configs, &progress, measure, |p: &BwPoint| {
        if text {
            progress.println(&point_line(p));
        }
    })?;
    progress.finish();
    if text {
        for line in host_memory::placement_lines(&session) {
            crate::outln!("{line}");
        }
    }
    if let Some(style) = cmd.format.pciebench() {
        crate::output::out_text(&tlpx_results::pciebench::bw_table(&points, common.host.cache, session.clock_hz, style));
        // pcie-bench's table has no column for errors: say on stderr why the exit status is 1.
        for p in points.iter().filter(|p| p.failed()) {
            eprintln!("tlpx: FAILED: {}", point_line(p).trim_end());
        }
    }
    let failed = points.iter().any(BwPoint::failed);
    let operations = ops.iter().map(|o| op_short(*o)).collect();
    let parameters = parameters(operations, sizes, cmd.outstanding, common, configs.first(), LinkLimits { mps, mrrs });
    let mut doc = ResultDoc::new(
        "bw",
        parameters,
        session.environment.clone(),
        session.link.clone(),
        model.map(|link| ModelConfig { link, completion_split: CompletionSplit::Mps }),
        Body { points },
        started.elapsed().as_secs_f64(),
        session.notes.clone(),
    );
    if interrupted {
        doc.stopped_at(doc.body.points.len(), configs.len());
    }
    for l in limits {
        doc.add_sim_limit(l);
    }
    let measured = doc.body.points.len();
    let status = doc.emit(cmd.output.as_deref(), json, failed)?;
    if text && interrupted {
        crate::outln!("interrupted: {measured} of {} points measured", configs.len());
    }
    Ok(status)
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    /// `bw`'s options as the command line gives them (so that the defaults compared with are
    /// clap's real ones).
    #[derive(Parser)]
    struct Line {
        #[command(flatten)]
        cmd: Cmd,
    }

    fn cmd(args: &[&str]) -> Cmd {
        Line::try_parse_from(std::iter::once("bw").chain(args.iter().copied())).expect("valid bw options").cmd
    }

    #[test]
    fn the_sizes_help_names_the_generators_limit() {
        use clap::CommandFactory;
        let command = Line::command();
        let sizes = command.get_arguments().find(|a| a.get_id() == "sizes").expect("--sizes");
        let help = sizes.get_help().expect("help").to_string();
        assert!(help.ends_with(&format!("; 1..{} bytes.", tlpx_regs::constants::GENERATOR_MAX_TRANSFER_BYTES)), "{help}");
    }

    #[test]
    fn the_defaults_and_the_drivers_own_options_are_accepted() {
        for args in [&[][..], &["--op", "rdwr"], &["--count", "64", "--repeat", "3", "--seed", "9", "--no-check"]] {
            bw_driver::refuse_generator_options(&driver_request(&cmd(args))).unwrap_or_else(|e| panic!("{args:?} refused: {e}"));
        }
    }

    #[test]
    fn a_generator_option_is_refused_naming_it_and_the_vfio_backend() {
        for (args, named) in [
            (&["--sizes", "256"][..], "--sizes"),
            (&["--op", "read"], "--op"),
            (&["--window", "64K"], "--window"),
            (&["--pattern", "random"], "--pattern"),
            (&["--duration", "1ms"], "--duration"),
            (&["--idle", "3"], "--idle"),
            (&["--outstanding", "4"], "--outstanding"),
            (&["--cache", "cold"], "--cache"),
            (&["--numa-node", "0"], "--numa-node"),
            (&["--iommu-pages", "2m"], "--iommu-pages"),
            (&["--format", "pciebench"], "--format"),
        ] {
            let e = bw_driver::refuse_generator_options(&driver_request(&cmd(args))).expect_err("refused").to_string();
            assert!(e.contains(named) && e.contains("vfio:"), "{args:?}: {e}");
        }
    }
}
