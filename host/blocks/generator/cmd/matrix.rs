//! `tlpx characterize --matrix`: pcie-bench's host matrix. Every cell is one combination of
//! CPU cache state × NUMA node of the buffers × IOMMU page size; in each, BW_RD and BW_WR at
//! the sizes asked over every window (random addresses, as pcie-bench's window sweeps), and
//! LAT_RD. Each cell is written as ordinary `bw` and `lat` documents (so `tlpx diff` compares
//! any two cells, `tlpx report` shows any one), and three figures are drawn: bandwidth
//! against window per IOMMU page size, the latency CDF per node, and bandwidth per cache state,
//! each with the model's line. docs/bandwidth.md, "The pcie-bench matrix".

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Instant;

use anyhow::Context;
use tlpx_device::card::Feature;
use tlpx_device::generator::{LinkLimits, Operation, ValidGenConfig};
use tlpx_device::host_memory::PageSize;
use tlpx_device::DmaBuffer;
use tlpx_model::link::{self as model_link, CompletionSplit};

use super::Cmd;
use crate::args::check_output_dir;
use crate::cmd::bw::{self, BwPoint, CacheState, Common, HostKnobs, IommuPages, PatternArg};
use crate::cmd::lat::{self as lat_cmd, LatPoint};
use crate::measure::latency::{self, LatOp};
use crate::measure::{config, figures, host_memory, runner};
use crate::plot::{self, Chart, Series, Style, XAxis};
use crate::progress::{self, Progress};
use crate::results::{ModelConfig, ResultDoc, SimLimit};
use crate::session::Session;

/// One cell of the matrix: the host's knobs it runs with (its name: [`HostKnobs::name`]).
pub type Cell = HostKnobs;

/// The cells: every cache state asked × every node (all online nodes when the host has more
/// than one, else the kernel's choice) × every IOMMU page size the backend can map with and
/// the host has pages for (vfio), or the backend's default.
pub fn cells(caches: &[CacheState], session: &mut Session, windows: &[u64], notes: &mut Vec<String>) -> Vec<Cell> {
    let nodes: Vec<Option<u32>> = match session.environment.host_memory.as_ref().map(|r| r.numa_nodes.clone()) {
        Some(n) if n.len() > 1 => n.into_iter().map(Some).collect(),
        _ => vec![None],
    };
    let pages: Vec<Option<IommuPages>> = match session.card.device().iova_page_sizes() {
        None => vec![None],
        Some(bits) => [IommuPages::K4, IommuPages::M2, IommuPages::G1]
            .into_iter()
            .filter(|p| bits & p.page_size().bytes() != 0 && enough_huge_pages(p.page_size(), windows, notes))
            .map(Some)
            .collect(),
    };
    let mut out = Vec::new();
    for &cache in caches {
        for &node in &nodes {
            for &p in &pages {
                out.push(Cell { cache, numa_node: node, iommu_pages: p });
            }
        }
    }
    out
}

/// True for the base page, and for a huge page size whose pool has free pages enough for
/// every window's buffer at once (a sweep keeps them all until its end); else a note says
/// why the size is left out.
fn enough_huge_pages(size: PageSize, windows: &[u64], notes: &mut Vec<String>) -> bool {
    let Some(dir) = size.hugepages_dir() else { return true };
    let needed: u64 = windows.iter().map(|w| w.div_ceil(size.bytes())).sum();
    let free = std::fs::read_to_string(format!("{dir}/free_hugepages")).ok().and_then(|t| t.trim().parse::<u64>().ok()).unwrap_or(0);
    if free >= needed {
        return true;
    }
    notes.push(format!(
        "IOMMU pages {} left out of the matrix: its buffers need {needed} free pages of {dir}, the pool has {free}",
        size.name()
    ));
    false
}

/// What one cell measured.
struct CellResult {
    cell: Cell,
    bw: Vec<BwPoint>,
    lat: Vec<LatPoint>,
}

pub fn run(cmd: &Cmd, device: &str, json: bool) -> anyhow::Result<ExitCode> {
    let started = Instant::now();
    if json {
        anyhow::bail!(
            "--matrix writes one bw and one lat document per cell into --out-dir; --json has no single document to print: leave it out"
        );
    }
    let mut gen_args = super::gen_args(cmd);
    // pcie-bench's window sweeps: random addresses over each window, at 64 and 512 bytes
    // unless --sizes says otherwise.
    gen_args.pattern = vec![PatternArg::Random];
    gen_args.window = cmd.matrix_windows.clone();
    let sizes_text = if cmd.sizes == "64..4096" { "64,512" } else { cmd.sizes.as_str() };
    // The windows are --matrix-windows here, whatever parse_common calls them.
    let common = config::parse_common(&gen_args).map_err(|e| anyhow::Error::msg(e.replace("--window", "--matrix-windows")))?;
    let sizes = config::transfer_sizes("--sizes", sizes_text).map_err(anyhow::Error::msg)?;
    let lat_sizes = config::transfer_sizes("--lat-sizes", &cmd.lat_sizes).map_err(anyhow::Error::msg)?;
    let caches = if cmd.matrix_cache.is_empty() {
        vec![CacheState::HostWarm, CacheState::DeviceWarm, CacheState::Cold, CacheState::Thrash]
    } else {
        crate::args::refuse_duplicate_values("--matrix-cache", &cmd.matrix_cache).map_err(anyhow::Error::msg)?;
        cmd.matrix_cache.clone()
    };
    if cmd.host.cache != CacheState::HostWarm || cmd.host.numa_node.is_some() || cmd.host.iommu_pages.is_some() {
        anyhow::bail!(
            "--matrix sweeps the cache state, the NUMA node and the IOMMU page size itself: leave out --cache, --numa-node and \
             --iommu-pages (choose the cache states with --matrix-cache)"
        );
    }
    let ops = [Operation::Read, Operation::Write];
    let lat_common = Common { count: cmd.lat_count, duration_seconds: None, repeat: 1, ..common.clone() };
    config::build_configs(&ops, &sizes, cmd.outstanding, &common, LinkLimits::LARGEST, 1).map_err(anyhow::Error::msg)?;
    latency::build_configs(&[LatOp::Read], &lat_sizes, &lat_common, LinkLimits::LARGEST, 1).map_err(anyhow::Error::msg)?;
    let out_dir = cmd.out_dir.clone().unwrap_or_else(|| PathBuf::from("results").join(crate::results::utc_now().1));
    check_output_dir("--out-dir", &out_dir)?;

    let mut session = Session::open(device)?;
    let (mps, mrrs) = session.mps_mrrs();
    let link = LinkLimits { mps, mrrs };
    let bw_configs = config::build_configs(&ops, &sizes, cmd.outstanding, &common, link, session.clock_hz).map_err(anyhow::Error::msg)?;
    let lat_configs =
        latency::build_configs(&[LatOp::Read], &lat_sizes, &lat_common, link, session.clock_hz).map_err(anyhow::Error::msg)?;
    session.card.require(Feature::Generator, "traffic generator")?;
    let mut skipped = Vec::new();
    let cells = cells(&caches, &mut session, &common.windows, &mut skipped);
    std::fs::create_dir_all(&out_dir).with_context(|| format!("creating {}", out_dir.display()))?;
    progress::install_stop_handler();
    let model = config::session_model(&session, cmd.addr64);
    crate::outln!("tlpx characterize --matrix: {}", session.describe());
    crate::outln!(
        "{} cells (cache state x NUMA node x IOMMU pages), each BW_RD and BW_WR at {} over windows {}, random addresses, and LAT_RD",
        cells.len(),
        sizes.iter().map(|s| crate::output::bytes(u64::from(*s))).collect::<Vec<_>>().join(","),
        common.windows.iter().map(|w| crate::output::bytes(*w)).collect::<Vec<_>>().join(",")
    );
    for n in &skipped {
        crate::outln!("note: {n}");
    }
    let progress = Progress::new((cells.len() * (bw_configs.len() + lat_configs.len())) as u64, false);
    let mut results = Vec::new();
    let mut files = Vec::new();
    let mut interrupted = false;
    for cell in &cells {
        let cell_common = Common { host: *cell, ..common.clone() };
        let cell_lat = Common { host: *cell, ..lat_common.clone() };
        host_memory::prepare(&mut session, &cell_common).with_context(|| format!("cell {}", cell.name()))?;
        session.environment.dma_buffers.clear();
        let cell_started = Instant::now();
        let repeat = common.repeat;
        let (bw_points, stopped) = runner::sweep(
            &mut session,
            &bw_configs,
            &progress,
            |s: &mut Session, b: &DmaBuffer, c: &ValidGenConfig| runner::measure_point(s, b, c, repeat),
            |_: &BwPoint| {},
        )?;
        let (lat_points, lat_stopped) = if stopped {
            (Vec::new(), true)
        } else {
            runner::sweep(
                &mut session,
                &lat_configs,
                &progress,
                |s: &mut Session, b: &DmaBuffer, c: &ValidGenConfig| latency::measure_point(s, b, c, 1),
                |_: &LatPoint| {},
            )?
        };
        let limits = if session.environment.simulated { cell_limits(&session, &cell_common) } else { Vec::new() };
        let plan = CellPlan {
            sizes: &sizes,
            lat_sizes: &lat_sizes,
            outstanding: cmd.outstanding,
            link,
            bw_planned: bw_configs.len(),
            lat_planned: lat_configs.len(),
            stopped: stopped || lat_stopped,
        };
        files.push(write_cell_docs(
            &session,
            &out_dir,
            cell,
            &cell_common,
            &cell_lat,
            &plan,
            &bw_points,
            &lat_points,
            &limits,
            cell_started,
        )?);
        results.push(CellResult { cell: *cell, bw: bw_points, lat: lat_points });
        if stopped || lat_stopped {
            interrupted = true;
            break;
        }
    }
    progress.finish();
    for line in summary(&results, session.environment.simulated) {
        crate::outln!("{line}");
    }
    let mut figures_written = Vec::new();
    for (name, chart) in charts(&results, model.as_ref(), &common.windows, session.environment.simulated) {
        let path = out_dir.join(name);
        std::fs::write(&path, plot::render_svg(&chart)?).with_context(|| format!("writing {}", path.display()))?;
        figures_written.push(path.display().to_string());
    }
    crate::outln!(
        "wrote {} cell documents and {} figures in {} ({:.1} s host wall time)",
        files.len() * 2,
        figures_written.len(),
        out_dir.display(),
        started.elapsed().as_secs_f64()
    );
    crate::outln!("compare two cells: tlpx diff {}/bw-CELL-A.json {}/bw-CELL-B.json", out_dir.display(), out_dir.display());
    let failed = results.iter().any(|r| r.bw.iter().any(BwPoint::failed) || r.lat.iter().any(LatPoint::failed));
    Ok(runner::exit_status(interrupted || progress::stop_requested(), failed))
}

fn cell_limits(session: &Session, common: &Common) -> Vec<SimLimit> {
    let mut out = vec![figures::efficiency_limit()];
    out.extend(figures::knob_limits(common));
    out.extend(figures::read_latency_limit(&session.environment));
    out
}

/// What a cell's sweeps were to measure, and whether they were stopped before the end.
struct CellPlan<'a> {
    sizes: &'a [u32],
    lat_sizes: &'a [u32],
    outstanding: u32,
    link: LinkLimits,
    bw_planned: usize,
    lat_planned: usize,
    stopped: bool,
}

/// Writes the cell's `bw-CELL.json` and `lat-CELL.json` (marked interrupted, with the points
/// done and planned, when the matrix was stopped in this cell); returns the cell's name.
#[allow(clippy::too_many_arguments)]
fn write_cell_docs(
    session: &Session,
    dir: &Path,
    cell: &Cell,
    common: &Common,
    lat_common: &Common,
    plan: &CellPlan,
    bw_points: &[BwPoint],
    lat_points: &[LatPoint],
    limits: &[SimLimit],
    started: Instant,
) -> anyhow::Result<String> {
    let name = cell.name();
    let model = config::session_model(session, common.addr64);
    let parameters = bw::parameters(vec!["read", "write"], plan.sizes.to_vec(), plan.outstanding, common.clone(), None, plan.link);
    let mut notes = session.notes.clone();
    notes.push(format!("cell {name} of tlpx characterize --matrix"));
    let mut doc = ResultDoc::new(
        "bw",
        parameters,
        session.environment.clone(),
        session.link.clone(),
        model.map(|link| ModelConfig { link, completion_split: CompletionSplit::Mps }),
        bw::Body { points: bw_points.to_vec() },
        started.elapsed().as_secs_f64(),
        notes.clone(),
    );
    for l in limits {
        doc.add_sim_limit(l.clone());
    }
    if plan.stopped {
        doc.stopped_at(bw_points.len(), plan.bw_planned);
    }
    crate::results::write_json(&dir.join(format!("bw-{name}.json")), &doc)?;
    let mut lat_doc = ResultDoc::new(
        "lat",
        lat_cmd::Parameters { measurements: vec!["LAT_RD"], sizes: plan.lat_sizes.to_vec(), common: lat_common.clone() },
        session.environment.clone(),
        session.link.clone(),
        None,
        lat_cmd::Body { points: lat_points.to_vec() },
        started.elapsed().as_secs_f64(),
        notes,
    );
    for l in limits {
        lat_doc.add_sim_limit(l.clone());
    }
    if plan.stopped {
        lat_doc.stopped_at(lat_points.len(), plan.lat_planned);
    }
    crate::results::write_json(&dir.join(format!("lat-{name}.json")), &lat_doc)?;
    Ok(name)
}

/// One line per cell: the best BW_RD and BW_WR over its points and LAT_RD's median.
fn summary(results: &[CellResult], simulated: bool) -> Vec<String> {
    let mut out = vec![format!(
        "\n{:<34} {:>12} {:>12} {:>14}   ({})",
        "CELL",
        "BW_RD MB/s",
        "BW_WR MB/s",
        "LAT_RD med ns",
        if simulated { "card time, SIMULATED: every cell is the same host to the simulator" } else { "card time" }
    )];
    for r in results {
        let best = |op: Operation| {
            r.bw.iter()
                .filter(|p| p.config.operation == op)
                .map(|p| p.achieved_bytes_per_second.median / 1e6)
                .max_by(f64::total_cmp)
                .map_or("-".to_string(), |v| format!("{v:.1}"))
        };
        let lat = r.lat.first().and_then(|p| p.latency_ns.as_ref()).map_or("-".to_string(), |s| format!("{:.1}", s.median));
        out.push(format!("{:<34} {:>12} {:>12} {:>14}", r.cell.name(), best(Operation::Read), best(Operation::Write), lat));
    }
    out
}

/// The model's flat line over the windows at `size` (the model has no window).
fn model_line(model: Option<&tlpx_model::link::LinkConfig>, op: Operation, size: u32, windows: &[u64]) -> Option<Series> {
    let m = model?;
    let mop = config::model_operation(op)?;
    let v = model_link::analyse(m, mop, u64::from(size), CompletionSplit::Mps).bandwidth.bytes_per_second / 1e6;
    let lo = *windows.iter().min()? as f64;
    let hi = *windows.iter().max()? as f64;
    Some(Series {
        label: format!("model, {} {size} B", config::op_label(op)),
        points: vec![(lo, v), (hi.max(lo * 2.0), v)],
        style: Style::Line,
    })
}

/// Bandwidth against window of one op at one size, for the cells `pick` keeps, one series each.
fn window_series(
    results: &[CellResult],
    op: Operation,
    size: u32,
    pick: impl Fn(&Cell) -> bool,
    label: impl Fn(&Cell) -> String,
) -> Vec<Series> {
    results
        .iter()
        .filter(|r| pick(&r.cell))
        .map(|r| Series {
            label: label(&r.cell),
            points: r
                .bw
                .iter()
                .filter(|p| p.config.operation == op && p.transfer_size == size)
                .map(|p| (p.window as f64, p.achieved_bytes_per_second.median / 1e6))
                .collect(),
            style: Style::Points,
        })
        .collect()
}

fn charts(results: &[CellResult], model: Option<&tlpx_model::link::LinkConfig>, windows: &[u64], simulated: bool) -> Vec<(String, Chart)> {
    // On the simulator every cell is the same host: the titles say so.
    let tag = if simulated { " (SIMULATED: no host caches, NUMA or IOTLB)" } else { "" };
    let Some(first) = results.first() else { return Vec::new() };
    let size = first.bw.iter().map(|p| p.transfer_size).min().unwrap_or(64);
    let base = first.cell;
    let chart = |title: String, x_label: &str, series: Vec<Series>| Chart {
        title,
        x_label: x_label.into(),
        y_label: "payload MB/s (card time)".into(),
        x_axis: XAxis::Log2Bytes,
        y_range: None,
        series,
    };
    let pages_label = |c: &Cell| format!("IOMMU pages {}", c.iommu_pages.map_or("(backend default)", |p| p.name()));
    let mut out = Vec::new();
    // 1. Bandwidth against window per IOMMU page size (host-warm, the first node).
    let mut s: Vec<Series> = model_line(model, Operation::Read, size, windows).into_iter().collect();
    s.extend(window_series(results, Operation::Read, size, |c| c.cache == base.cache && c.numa_node == base.numa_node, pages_label));
    out.push((
        "matrix-bw-window-pages.svg".to_string(),
        chart(format!("BW_RD {size} B, random addresses: bandwidth against window per IOMMU page size{tag}"), "window", s),
    ));
    // 2. LAT_RD CDF per node (the first cache state and page size).
    let cdf = results
        .iter()
        .filter(|r| r.cell.cache == base.cache && r.cell.iommu_pages == base.iommu_pages)
        .filter_map(|r| {
            let p = r.lat.first()?;
            Some(Series {
                label: format!("{} ({})", p.label(), r.cell.numa_node.map_or("the kernel's node".to_string(), |n| format!("node {n}"))),
                points: plot::cdf_points(&p.samples_ns(), 400),
                style: Style::Line,
            })
        })
        .collect();
    out.push((
        "matrix-lat-cdf-nodes.svg".to_string(),
        Chart {
            title: format!("LAT_RD CDF per NUMA node of the buffer{tag}"),
            x_label: "latency (ns of card time)".into(),
            y_label: "fraction of requests at or below".into(),
            x_axis: XAxis::Linear,
            y_range: Some((0.0, 1.0)),
            series: cdf,
        },
    ));
    // 3. Read and write bandwidth per cache state (the first node and page size).
    let mut s: Vec<Series> = [Operation::Read, Operation::Write].iter().filter_map(|&op| model_line(model, op, size, windows)).collect();
    for op in [Operation::Read, Operation::Write] {
        s.extend(window_series(
            results,
            op,
            size,
            |c| c.numa_node == base.numa_node && c.iommu_pages == base.iommu_pages,
            |c| format!("{} {}", config::op_label(op), c.cache.name()),
        ));
    }
    out.push(("matrix-bw-cache.svg".to_string(), chart(format!("BW_RD and BW_WR {size} B per cache state{tag}"), "window", s)));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cell_names_say_every_axis() {
        let c = Cell { cache: CacheState::DeviceWarm, numa_node: Some(1), iommu_pages: Some(IommuPages::M2) };
        assert_eq!(c.name(), "device-warm-node1-2m");
        let d = Cell { cache: CacheState::Cold, numa_node: None, iommu_pages: None };
        assert_eq!(d.name(), "cold-anynode-pages-default");
    }
}
