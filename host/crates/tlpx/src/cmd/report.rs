//! `tlpx report RESULTS...`: one self-contained HTML page from result documents (issue 7).
//!
//! ```text
//!   bw.json lat.json irq.json ... ──► read + check (schema, version, kind) ──► the kind's own
//!        types (results::AnyResult: the structs the commands wrote the documents from)
//!        ──► one section each: parameters, environment, SIMULATED badge, compact tables,
//!            inline SVG figures (crate::plot) ──► report.html
//! ```
//!
//! The page loads nothing: CSS and SVG are inline, links are in-page anchors only. Every
//! figure comes from [`crate::plot`]: the plain x/y charts (bandwidth with the model's line,
//! latency CDFs) from [`plot::render_svg`], the log-scale histograms and the rule-30
//! landscape from [`plot::render_log_svg`]. Every string from a document is escaped. A
//! document is read into the types that wrote it; one missing a field is refused with that
//! field's path (results::read).

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{bail, Context};
use clap::Args;
use serde::Serialize;
use serde_json::Value;
use tlpx_device::generator::Operation;
use tlpx_model::link::LinkConfig;
use tlpx_model::stats::Summary as Stats;

use crate::cmd::bw::BwPoint;
use crate::cmd::characterize::{self, TableRow};
use crate::cmd::irq::{self, RunReport};
use crate::cmd::lat::LatPoint;
use crate::cmd::pio::PioPoint;
use crate::cmd::{bw_driver, model, rt_loop, rule30, script};
use crate::input;
use crate::output::{bytes, ns_text as fmt_ns, print_json, truncate, xml_escape as esc};
use crate::plot::{self, Chart, LogChart, LogSeries, Mark, Series, Style, Ticks, XAxis};
use crate::realtime::Comparison;
use crate::results::{self, diff, AnyResult, ResultDoc, SpyStats, SCHEMA};

/// The kinds this report draws (every kind tlpx writes).
const REPORT_KINDS: &[&str] = &["bw", "bw_driver", "lat", "pio", "characterize", "model", "irq", "loop", "rule30", "spy", "script"];

/// Largest result document read (bytes). The format has no bound of its own, so this is a
/// generous one: tlpx's largest documents hold per-request samples, and a `lat` point at
/// `--repeat 1000` (its maximum; 1,024,000 samples from the card's 1024-sample FIFO) is about
/// 14 MiB of pretty-printed JSON. Parsed, a document takes a few times its size in memory.
pub const MAX_RESULT_BYTES: u64 = 64 << 20;

#[derive(Debug, Args)]
pub struct Cmd {
    /// Result documents (JSON) written by tlpx bw, lat, pio, characterize, model, irq, loop, rule30;
    /// at most 64 MiB each.
    #[arg(required = true, value_name = "RESULTS")]
    results: Vec<PathBuf>,

    /// The HTML file to write.
    #[arg(long, short = 'o', default_value = "report.html")]
    output: PathBuf,

    /// The page's title.
    #[arg(long, default_value = "tlpx report")]
    title: String,
}

#[derive(Debug, Serialize)]
struct SectionSummary {
    file: String,
    kind: String,
    figures: usize,
}

#[derive(Debug, Serialize)]
struct Summary {
    path: String,
    sections: Vec<SectionSummary>,
    figures: usize,
}

pub fn run(cmd: &Cmd, json: bool) -> anyhow::Result<ExitCode> {
    // The page replaces the file at --output: never one of the results it is drawn from.
    for path in &cmd.results {
        crate::args::refuse_same_file("--output", &cmd.output, "RESULTS", path)?;
    }
    let mut docs = Vec::new();
    let mut errors = Vec::new();
    for path in &cmd.results {
        match load(path) {
            Ok(d) => docs.push((path.display().to_string(), d)),
            Err(e) => errors.push(e),
        }
    }
    if !errors.is_empty() {
        bail!("{}", errors.join("\n  "));
    }
    let mut sections = Vec::new();
    let mut summaries = Vec::new();
    // Results of the same kind are compared first: overlays and difference tables.
    let mut compared = Vec::new();
    for (kind, members) in comparable_groups(&docs) {
        let section = comparison_section(sections.len() + 1, kind, &members, &docs)
            .map_err(|e| anyhow::anyhow!("the comparison of the {kind:?} results cannot be drawn: {e}"))?;
        compared.push(section.heading.trim_start_matches("Comparison of ").to_string());
        summaries.push(SectionSummary { file: String::new(), kind: format!("comparison of {kind}"), figures: section.figures });
        sections.push(section);
    }
    for (i, (file, d)) in docs.iter().enumerate() {
        let kind = d.kind();
        let section = render_section(sections.len() + 1, i + 1, file, d)
            .map_err(|e| anyhow::anyhow!("{file}: this {kind:?} result cannot be drawn: {e}"))?;
        summaries.push(SectionSummary { file: file.clone(), kind: kind.to_string(), figures: section.figures });
        sections.push(section);
    }
    let html = page(&cmd.title, &sections, docs.len(), &compared);
    if let Some(dir) = cmd.output.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).with_context(|| format!("creating the folder {}", dir.display()))?;
    }
    std::fs::write(&cmd.output, html).with_context(|| format!("writing the report to {}", cmd.output.display()))?;
    let figures = summaries.iter().map(|s| s.figures).sum();
    let path = cmd.output.display().to_string();
    if json {
        print_json(&Summary { path, sections: summaries, figures })?;
    } else {
        crate::outln!("wrote {path} ({} sections, {figures} figures)", sections.len());
    }
    Ok(ExitCode::SUCCESS)
}

/// Reads and checks one document into its kind's types; the error names the file and what is
/// accepted.
fn load(path: &Path) -> Result<AnyResult, String> {
    load_as(path, "tlpx report", REPORT_KINDS)
}

/// Reads and checks one document of one of `kinds` for `command`; the error names the file
/// and what `command` accepts.
pub(crate) fn load_as(path: &Path, command: &str, kinds: &[&str]) -> Result<AnyResult, String> {
    let name = path.display();
    let what = format!(
        "{command} reads the result documents tlpx writes (schema \"{SCHEMA}\", kinds {}; at most {} each)",
        kinds.join(", "),
        input::size_text(MAX_RESULT_BYTES)
    );
    let v = results::read_value(path, MAX_RESULT_BYTES).map_err(|e| format!("{e}; {what}"))?;
    if !v.is_object() || v.get("schema").and_then(Value::as_str) != Some(SCHEMA) {
        let found = v.get("schema").map_or("no \"schema\" field".to_string(), |s| format!("\"schema\" is {s}"));
        return Err(format!("{name}: not a tlpx result ({found}); {what}"));
    }
    results::check_version(&v).map_err(|e| format!("{name}: {e}"))?;
    let kind = match v.get("kind") {
        Some(Value::String(k)) => k.as_str(),
        Some(other) => return Err(format!("{name}: \"kind\" is {other}, not a string; accepted kinds: {}", kinds.join(", "))),
        None => return Err(format!("{name}: a tlpx result without the field \"kind\"; accepted kinds: {}", kinds.join(", "))),
    };
    if !kinds.contains(&kind) {
        return Err(format!("{name}: {command} does not take results of kind {kind:?}; accepted kinds: {}", kinds.join(", ")));
    }
    let kind = kind.to_string();
    results::check_document(&v).map_err(|e| format!("{name}: this {kind:?} result is incomplete or malformed: {e}"))?;
    match AnyResult::from_value(v) {
        Some(Ok(d)) => Ok(d),
        Some(Err(e)) => Err(format!("{name}: this {kind:?} result is incomplete: {e}")),
        None => Err(format!("{name}: unknown result kind {kind:?}; accepted kinds: {}", kinds.join(", "))),
    }
}

// Values as text ---------------------------------------------------------------------------

type R<T> = Result<T, String>;

/// A value as a table cell shows it: what it is in the document, strings without quotes,
/// null as "–", anything else as compact JSON.
fn text<T: Serialize + ?Sized>(v: &T) -> String {
    serde_json::to_value(v).map_or_else(|e| format!("({e})"), |v| plain(&v))
}

fn plain(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Null => "–".into(),
        Value::Number(_) | Value::Array(_) | Value::Object(_) => rounded(v),
        other => other.to_string(),
    }
}

/// A number for people: whole numbers as they are, others to 6 significant digits without
/// trailing zeros (a float's last bits, `199999.99999999997`, read as `200000`).
fn round_number(n: &serde_json::Number) -> String {
    if n.is_i64() || n.is_u64() {
        return n.to_string();
    }
    let Some(f) = n.as_f64() else { return n.to_string() };
    if f == 0.0 || !f.is_finite() {
        return format!("{f}");
    }
    let digits = (5 - f.abs().log10().floor() as i32).clamp(0, 12) as usize;
    let s = format!("{f:.digits$}");
    let s = if s.contains('.') { s.trim_end_matches('0').trim_end_matches('.').to_string() } else { s };
    if s == "-0" {
        "0".into()
    } else {
        s
    }
}

/// Compact JSON text with every number rounded for people ([`round_number`]).
fn rounded(v: &Value) -> String {
    match v {
        Value::Number(n) => round_number(n),
        Value::Array(items) => format!("[{}]", items.iter().map(rounded).collect::<Vec<_>>().join(", ")),
        Value::Object(m) => {
            format!("{{{}}}", m.iter().map(|(k, v)| format!("{}: {}", Value::String(k.clone()), rounded(v))).collect::<Vec<_>>().join(", "))
        }
        other => other.to_string(),
    }
}

// HTML ---------------------------------------------------------------------------------

struct Section {
    anchor: String,
    heading: String,
    body: String,
    figures: usize,
}

/// A table: header cells and rows of cells, all escaped here.
fn table(head: &[&str], rows: &[Vec<String>]) -> String {
    let mut t = String::from("<table><thead><tr>");
    for h in head {
        let _ = write!(t, "<th>{}</th>", esc(h));
    }
    t.push_str("</tr></thead><tbody>");
    for r in rows {
        t.push_str("<tr>");
        for c in r {
            let _ = write!(t, "<td>{}</td>", esc(c));
        }
        t.push_str("</tr>");
    }
    t.push_str("</tbody></table>");
    t
}

fn mbs(bps: f64) -> String {
    format!("{:.1}", bps / 1e6)
}

fn stats_cells(s: Option<&Stats>, f: fn(f64) -> String) -> Vec<String> {
    match s {
        Some(s) => vec![s.count.to_string(), f(s.min), f(s.median), f(s.p99), f(s.p999), f(s.max)],
        None => vec!["0".into(), "–".into(), "–".into(), "–".into(), "–".into(), "–".into()],
    }
}

const STATS_HEAD: [&str; 6] = ["n", "min", "median", "p99", "p99.9", "max"];

fn with_stats_head<'a>(first: &[&'a str]) -> Vec<&'a str> {
    first.iter().copied().chain(STATS_HEAD).collect()
}

/// An SVG for inline use: no namespace URL (HTML needs none), scaled to the page width.
fn inline_svg(svg: &str) -> String {
    let svg = svg.replacen(" xmlns=\"http://www.w3.org/2000/svg\"", "", 1);
    if svg.starts_with("<svg class=") {
        svg
    } else {
        svg.replacen("<svg ", "<svg class=\"chart\" ", 1)
    }
}

struct Figures {
    html: String,
    count: usize,
}

impl Figures {
    fn new() -> Self {
        Figures { html: String::new(), count: 0 }
    }
    /// Adds a figure if it has data; otherwise a line saying there was none.
    fn add(&mut self, caption: &str, has_data: bool, svg: impl FnOnce() -> R<String>) -> R<()> {
        if !has_data {
            let _ = write!(self.html, "<p class=\"nodata\">{}: no samples to draw.</p>", esc(caption));
            return Ok(());
        }
        let svg = svg()?;
        self.count += 1;
        let _ = write!(self.html, "<figure>{}<figcaption>{}</figcaption></figure>", inline_svg(&svg), esc(caption));
        Ok(())
    }
    fn chart(&mut self, caption: &str, chart: &Chart) -> R<()> {
        let has = chart.series.iter().any(|s| !s.points.is_empty());
        self.add(caption, has, || plot::render_svg(chart).map_err(|e| format!("{e:#}")))
    }
    fn log_chart(&mut self, caption: &str, chart: &LogChart) -> R<()> {
        let has = chart.series.iter().any(LogSeries::has_data);
        self.add(caption, has, || Ok(plot::render_log_svg(chart)))
    }
}

// Sections -----------------------------------------------------------------------------

fn render_section(n: usize, doc_number: usize, file: &str, d: &AnyResult) -> R<Section> {
    let mut figs = Figures::new();
    let mut tables = String::new();
    let (environment, partial) = match d {
        AnyResult::Bw(d) => (environment_html(d), partial_text(d)),
        AnyResult::BwDriver(d) => (environment_html(d), partial_text(d)),
        AnyResult::Lat(d) => (environment_html(d), partial_text(d)),
        AnyResult::Pio(d) => (environment_html(d), partial_text(d)),
        AnyResult::Characterize(d) => (environment_html(d), partial_text(d)),
        AnyResult::Model(d) => (environment_html(d), partial_text(d)),
        AnyResult::Irq(d) => (environment_html(d), partial_text(d)),
        AnyResult::Loop(d) => (environment_html(d), partial_text(d)),
        AnyResult::Rule30(d) => (environment_html(d), partial_text(d)),
        AnyResult::Spy(d) => (environment_html(d), partial_text(d)),
        AnyResult::Script(d) => (environment_html(d), partial_text(d)),
    };
    match d {
        AnyResult::Bw(d) => bw_section(d.model.as_ref().map(|m| &m.link), &d.body.points, d.environment.simulated, &mut tables, &mut figs)?,
        AnyResult::BwDriver(d) => bw_driver_section(&d.parameters, &d.body, &mut tables),
        AnyResult::Lat(d) => lat_section(&d.body.points, d.environment.simulated, &mut tables, &mut figs)?,
        AnyResult::Pio(d) => pio_section(&d.body.points, d.environment.simulated, &mut tables, &mut figs)?,
        AnyResult::Characterize(d) => {
            let (sim, b) = (d.environment.simulated, &d.body);
            characterize_table(&b.table, sim, &mut tables);
            bw_section(d.model.as_ref().map(|m| &m.link), &b.points, sim, &mut tables, &mut figs)?;
            lat_section(&b.latency, sim, &mut tables, &mut figs)?;
            pio_section(&b.pio, sim, &mut tables, &mut figs)?;
        }
        AnyResult::Model(d) => model_section(&d.body, &mut tables, &mut figs)?,
        AnyResult::Irq(d) => {
            comparison_html(d.body.comparison.as_ref(), None, &mut tables);
            irq_section(&d.body.points, d.body.time_basis.clock, &mut tables, &mut figs)?
        }
        AnyResult::Loop(d) => {
            comparison_html(d.body.comparison.as_ref(), d.body.detection.as_deref(), &mut tables);
            loop_section(&d.body.points, d.body.time_basis.clock, &mut tables, &mut figs)?
        }
        AnyResult::Rule30(d) => rule30_section(&d.body, &mut tables, &mut figs)?,
        AnyResult::Spy(d) => spy_section(&d.body.points, &mut tables, &mut figs)?,
        AnyResult::Script(d) => script_section(&d.parameters, &d.body, &mut tables, &mut figs)?,
    }
    let mut body = environment?;
    body.push_str(&figs.html);
    body.push_str(&tables);
    // A partial result says so in its heading (and the page's contents), not only in its badge.
    let partial = if partial.is_some() { " (PARTIAL)" } else { "" };
    Ok(Section {
        anchor: format!("r{n}"),
        heading: format!("#{doc_number} {} — {file}{partial}", kind_title(d.kind())),
        body,
        figures: figs.count,
    })
}

/// An irq or loop document's statements of what its comparisons show (when it has them).
fn comparison_html(comparison: Option<&Comparison>, detection: Option<&str>, tables: &mut String) {
    if let Some(c) = comparison {
        let _ = write!(tables, "<p class=\"note\"><b>Idle vs loaded:</b> {}</p>", esc(&c.statement));
    }
    if let Some(d) = detection {
        let _ = write!(tables, "<p class=\"note\"><b>irq vs poll:</b> {}</p>", esc(d));
    }
}

/// An efficiency fraction as the report shows it: "99.9 %".
fn percent(fraction: f64) -> String {
    format!("{:.1} %", fraction * 100.0)
}

/// The sentence beside every efficiency figure of a simulated document.
const SIM_EFFICIENCY_NOTE: &str = "Efficiency = achieved / model, in %. SIMULATED: tlpx-sim paces its link with this same model, \
                                   so efficiency cannot exceed 100 % by construction; it shows how near the card's gateware \
                                   comes to the model, not how good a host is.";

/// The start of [`SIM_EFFICIENCY_NOTE`] as it stands in the page (no character in it is escaped).
const SIM_EFFICIENCY_NOTE_HTML: &str = "Efficiency = achieved / model, in %.";

fn kind_title(kind: &str) -> &'static str {
    match kind {
        "bw" => "DMA bandwidth (bw)",
        "lat" => "DMA read latency (lat)",
        "pio" => "PIO (pio)",
        "characterize" => "Characterization (characterize)",
        "model" => "Bandwidth model (model)",
        "irq" => "Interrupt latency (irq)",
        "loop" => "Real-time loop (loop)",
        "rule30" => "Rule-30 accelerator (rule30)",
        "spy" => "Spy statistics (spy)",
        "script" => "Exerciser script on the card's CPU (script run)",
        _ => "Result",
    }
}

fn environment_html<P: Serialize, B: Serialize>(doc: &ResultDoc<P, B>) -> R<String> {
    let env = &doc.environment;
    let mut h = String::new();
    if env.simulated {
        let sim = env.sim.as_ref().ok_or("a simulated result without environment.sim")?;
        let lm = &sim.link_model;
        let link = format!("Gen{} x{}, MPS {}, MRRS {}", lm.generation, lm.lanes, lm.mps, lm.mrrs);
        let _ = write!(
            h,
            "<p class=\"badge sim\">SIMULATED (link model {}; host time {}; seed {}): card-time figures come from the simulator, not hardware</p>",
            esc(&link),
            esc(&sim.host_time),
            esc(&sim.seed.to_string())
        );
    } else {
        h.push_str("<p class=\"badge hw\">measured on hardware</p>");
    }
    if let Some(text) = partial_text(doc) {
        let _ = write!(h, "<p class=\"badge warn\">{}</p>", esc(&text));
    }
    let mut rows = vec![
        vec!["created".to_string(), doc.created.clone()],
        vec!["command".into(), doc.command.join(" ")],
        vec!["host".into(), text(&env.host_name)],
        vec!["kernel".into(), text(&env.kernel)],
        vec!["CPU".into(), format!("{} ({} CPUs)", text(&env.cpu_model), env.cpus)],
        vec!["backend".into(), text(&env.backend)],
        vec!["device".into(), text(&env.device)],
        vec!["tlpx".into(), env.tlpx_version.clone()],
    ];
    if let Some(card) = &env.card {
        rows.push(vec![
            "card".into(),
            format!(
                "version {}, {}-bit data path at {} Hz; features: {}",
                card.version,
                card.data_width,
                card.clock_hz,
                card.features.join(", ")
            ),
        ]);
    }
    if let Some(link) = &doc.link {
        rows.push(vec![
            "link".into(),
            format!(
                "Gen{} x{} ({} GT/s), MPS {}, MRRS {}, RCB {} (from {})",
                link.generation,
                link.lanes,
                text(&link.speed_gt_s),
                link.mps,
                link.mrrs,
                link.rcb,
                link.source,
            ),
        ]);
    }
    rows.push(vec!["wall time".into(), format!("{:.2} s", doc.wall_seconds)]);
    h.push_str("<div class=\"cols\"><div><h3>Environment</h3>");
    h.push_str(&table(&["", ""], &rows));
    h.push_str("</div><div><h3>Parameters</h3>");
    let params: Vec<Vec<String>> = match serde_json::to_value(&doc.parameters).map_err(|e| e.to_string())? {
        Value::Object(m) => m.iter().map(|(k, v)| vec![k.clone(), truncate(&plain(v), 160)]).collect(),
        other => vec![vec!["".into(), plain(&other)]],
    };
    h.push_str(&table(&["", ""], &params));
    h.push_str("</div></div>");
    // What the simulator fixes by construction for these figures (documents of this tlpx;
    // older ones have none): a box of its own, and not repeated among the notes.
    let mut limit_notes = Vec::new();
    if !doc.simulator_limits.is_empty() {
        h.push_str("<div class=\"limits\"><h3>What the simulator fixes here (not findings)</h3><ul>");
        for l in &doc.simulator_limits {
            let _ = write!(h, "<li>{} <span class=\"concerns\">({})</span></li>", esc(&l.statement), esc(&l.concerns.join(", ")));
            limit_notes.push(l.note());
        }
        h.push_str("</ul></div>");
    }
    let notes: Vec<&String> = doc.notes.iter().filter(|n| !limit_notes.contains(n)).collect();
    if !notes.is_empty() {
        h.push_str("<ul class=\"notes\">");
        for n in notes {
            let _ = write!(h, "<li>{}</li>", esc(n));
        }
        h.push_str("</ul>");
    }
    Ok(h)
}

/// What a document that holds less than its run planned says of itself (`interrupted`, and
/// `partial` in documents of this tlpx); `None` for a whole run.
fn partial_text<P: Serialize, B: Serialize>(doc: &ResultDoc<P, B>) -> Option<String> {
    if !doc.interrupted {
        return None;
    }
    let Some(p) = &doc.partial else {
        return Some("PARTIAL: the run was interrupted before its end; what it finished is below".into());
    };
    let (done, planned) = (p.points_done, p.points_planned);
    Some(if p.state == "checkpoint" {
        format!(
            "PARTIAL: {done} of {planned} points finished, written while the run went on (a checkpoint): the run was killed, \
             or had not ended when this document was read"
        )
    } else {
        format!("PARTIAL: {done} of {planned} points finished: the run was interrupted (Ctrl-C, SIGTERM or SIGHUP) and kept what it had finished")
    })
}

fn op_label(name: &str) -> &str {
    match name {
        "read" => "BW_RD",
        "write" => "BW_WR",
        "read_write" | "rdwr" => "BW_RDWR",
        "write_then_read" | "wrrd" => "LAT_WRRD",
        other => other,
    }
}

/// One operation's measured series of a bandwidth figure.
#[derive(Default)]
struct OpSeries {
    operation: Option<Operation>,
    /// Per (pattern, window, offset): (transfer size, median MB/s).
    measured: BTreeMap<String, Vec<(f64, f64)>>,
    /// The document's model figure at each measured size, MB/s.
    model: Vec<(f64, f64)>,
}

fn bw_section(model: Option<&LinkConfig>, points: &[BwPoint], sim: bool, tables: &mut String, figs: &mut Figures) -> R<()> {
    // Per operation (by its name in the document): series per (pattern, window, offset); the
    // model line from the document's model.
    let mut by_op: BTreeMap<String, OpSeries> = BTreeMap::new();
    let mut rows = Vec::new();
    for p in points {
        let op = text(&p.config.operation);
        let size = f64::from(p.transfer_size);
        let a = &p.achieved_bytes_per_second;
        let series = format!("{}, window {}, offset {}", p.pattern, bytes(p.window), p.offset);
        let entry = by_op.entry(op.clone()).or_default();
        entry.operation = Some(p.config.operation);
        entry.measured.entry(series).or_default().push((size, a.median / 1e6));
        if let Some(m) = p.model_bytes_per_second {
            entry.model.push((size, m / 1e6));
        }
        let model_bps = p.model_bytes_per_second;
        rows.push(vec![
            op_label(&op).to_string(),
            bytes(u64::from(p.transfer_size)),
            p.pattern.to_string(),
            bytes(p.window),
            mbs(a.min),
            mbs(a.median),
            mbs(a.max),
            model_bps.map_or("–".into(), mbs),
            model_bps.map_or("–".into(), |m| if m > 0.0 { percent(a.median / m) } else { "–".into() }),
            p.transfers.to_string(),
            p.card_error_total.to_string(),
        ]);
    }
    for (op, s) in &by_op {
        let lo = s.measured.values().flatten().map(|p| p.0).fold(f64::MAX, f64::min).max(1.0) as u64;
        let hi = s.measured.values().flatten().map(|p| p.0).fold(0.0, f64::max) as u64;
        let mut chart_series = Vec::new();
        let model_line = match (model, s.operation) {
            (Some(m), Some(gop)) => characterize::model_series(m, gop, lo, hi.max(lo)),
            _ => None,
        };
        match model_line {
            Some(s) => chart_series.push(s),
            None if !s.model.is_empty() => {
                let mut mp = s.model.clone();
                mp.sort_by(|a, b| a.0.total_cmp(&b.0));
                chart_series.push(Series { label: "model (at the measured sizes)".into(), points: mp, style: Style::Line });
            }
            None => {}
        }
        let single = s.measured.len() == 1;
        for (label, pts) in &s.measured {
            let mut pts = pts.clone();
            pts.sort_by(|a, b| a.0.total_cmp(&b.0));
            chart_series.push(Series {
                label: if single { "measured (median)".into() } else { label.clone() },
                points: pts,
                style: Style::Points,
            });
        }
        let chart = Chart {
            title: format!("{} bandwidth against transfer size", op_label(op)),
            x_label: "transfer size".into(),
            y_label: if sim { "payload MB/s (card time, simulated)".into() } else { "payload MB/s (card time)".into() },
            x_axis: XAxis::Log2Bytes,
            y_range: None,
            series: chart_series,
        };
        figs.chart(&format!("{}: achieved payload bandwidth (points) and the model's limit (line)", op_label(op)), &chart)?;
    }
    if !rows.is_empty() {
        tables.push_str(if sim {
            "<h3>Bandwidth (payload MB/s of card time, simulated)</h3>"
        } else {
            "<h3>Bandwidth (payload MB/s of card time)</h3>"
        });
        tables.push_str(&table(
            &["op", "size", "pattern", "window", "min", "median", "max", "model", "efficiency (% of model)", "transfers", "errors"],
            &rows,
        ));
        // Said once per section: a characterization says it under its table already.
        if sim && !tables.contains(SIM_EFFICIENCY_NOTE_HTML) {
            let _ = write!(tables, "<p class=\"note\">{}</p>", esc(SIM_EFFICIENCY_NOTE));
        }
    }
    Ok(())
}

fn lat_section(points: &[LatPoint], sim: bool, tables: &mut String, figs: &mut Figures) -> R<()> {
    let clock = if sim { "card time, simulated" } else { "card time" };
    let mut series = Vec::new();
    let mut rows = Vec::new();
    for p in points {
        let clock = f64::from(p.clock_hz).max(1.0);
        let samples: Vec<f64> = p.samples_cycles.iter().map(|&c| f64::from(c) * 1e9 / clock).collect();
        let label = format!("{} {}", p.measurement, bytes(u64::from(p.transfer_size)));
        let mut row = vec![label.clone()];
        row.extend(stats_cells(p.latency_ns.as_ref(), fmt_ns));
        row.push(p.samples_dropped.to_string());
        rows.push(row);
        series.push(Series { label, points: plot::cdf_points(&samples, 400), style: Style::Line });
    }
    if !points.is_empty() {
        let chart = Chart {
            title: "DMA read latency CDF".into(),
            x_label: format!("latency (ns of {clock})"),
            y_label: "fraction of requests".into(),
            x_axis: XAxis::Linear,
            y_range: Some((0.0, 1.0)),
            series,
        };
        figs.chart("Latency CDFs: fraction of requests at or below each latency (card samples)", &chart)?;
        let _ = write!(tables, "<h3>Latency ({clock})</h3>");
        tables.push_str(&table(&with_stats_head(&["measurement"]).into_iter().chain(["dropped"]).collect::<Vec<_>>(), &rows));
    }
    Ok(())
}

fn pio_section(points: &[PioPoint], sim: bool, tables: &mut String, figs: &mut Figures) -> R<()> {
    let (mut wr, mut rd) = (Vec::new(), Vec::new());
    let mut rows = Vec::new();
    for p in points {
        let width = f64::from(p.width);
        // A card that saw no write has no write bandwidth: no point, "–" in its row.
        let cw = p.card_write_bytes_per_second;
        let cr = p.card_read_bytes_per_second;
        if let Some(cw) = cw {
            wr.push((width, cw / 1e6));
        }
        rd.push((width, cr / 1e6));
        for (dir, wall, card) in [("write", &p.write_wall_ns, cw), ("read", &p.read_wall_ns, Some(cr))] {
            let mut row = vec![format!("{dir} {}", bytes(u64::from(p.width)))];
            row.extend(stats_cells(Some(wall), fmt_ns));
            row.push(card.map_or("–".into(), mbs));
            rows.push(row);
        }
    }
    if !points.is_empty() {
        let chart = Chart {
            title: "PIO bandwidth against access width (card time)".into(),
            x_label: "access width".into(),
            y_label: "MB/s".into(),
            x_axis: XAxis::Log2Bytes,
            y_range: None,
            series: vec![
                Series { label: "PIO write".into(), points: wr, style: Style::Points },
                Series { label: "PIO read".into(), points: rd, style: Style::Points },
            ],
        };
        if sim {
            figs.chart("PIO (SIMULATED): the card's PIO window, per access width, in card time; no host CPU is simulated", &chart)?;
            tables.push_str(
                "<h3>PIO (SIMULATED): tlpx-sim socket round trip per access (host wall time), and the card window's MB/s (card time)</h3>",
            );
        } else {
            figs.chart("PIO: bandwidth the card saw, per access width", &chart)?;
            tables.push_str("<h3>PIO: host wall time per access, and card bandwidth (MB/s of card time)</h3>");
        }
        tables.push_str(&table(&with_stats_head(&["access"]).into_iter().chain(["card MB/s"]).collect::<Vec<_>>(), &rows));
    }
    Ok(())
}

fn characterize_table(rows_in: &[TableRow], sim: bool, tables: &mut String) {
    let mb = |v: Option<f64>| v.map_or("–".into(), mbs);
    let rows: Vec<Vec<String>> = rows_in
        .iter()
        .map(|r| {
            vec![
                r.label.to_string(),
                mb(r.best_bytes_per_second),
                r.at_bytes.map_or("–".into(), bytes),
                mb(r.model_at_size_bytes_per_second),
                r.efficiency.map_or("–".into(), percent),
                mb(r.model_best_bytes_per_second),
                r.how.clone(),
            ]
        })
        .collect();
    tables.push_str(if sim {
        "<h3>Maximum sustained bandwidth (payload MB/s of card time, simulated)</h3>"
    } else {
        "<h3>Maximum sustained bandwidth (payload MB/s of card time)</h3>"
    });
    tables.push_str(&table(&["", "best", "at", "model at size", "efficiency (% of model)", "model best", "how"], &rows));
    if sim {
        let _ = write!(tables, "<p class=\"note\">{}</p>", esc(SIM_EFFICIENCY_NOTE));
    }
}

fn model_section(body: &model::Body, tables: &mut String, figs: &mut Figures) -> R<()> {
    let mut by_op: BTreeMap<String, Vec<(f64, f64)>> = BTreeMap::new();
    let mut rows = Vec::new();
    for p in &body.points {
        let op = text(&p.operation);
        let size = p.transfer_size as f64;
        by_op.entry(op.clone()).or_default().push((size, p.bytes_per_second / 1e6));
        rows.push(vec![op, bytes(p.transfer_size), mbs(p.bytes_per_second), percent(p.efficiency)]);
    }
    let series: Vec<Series> = by_op
        .into_iter()
        .map(|(op, mut pts)| {
            pts.sort_by(|a, b| a.0.total_cmp(&b.0));
            Series { label: format!("model {op}"), points: pts, style: Style::Points }
        })
        .collect();
    let chart = Chart {
        title: "Model: payload bandwidth against transfer size".into(),
        x_label: "transfer size".into(),
        y_label: "payload MB/s".into(),
        x_axis: XAxis::Log2Bytes,
        y_range: None,
        series,
    };
    figs.chart("The analytic model's bandwidth limit per operation", &chart)?;
    tables.push_str("<h3>Model</h3>");
    tables.push_str(&table(&["operation", "size", "MB/s", "link efficiency (payload / raw bytes, %)"], &rows));
    Ok(())
}

/// `tlpx script run`: the records the firmware wrote (card-cycle timestamps), and the DMA
/// runs' durations along card time.
/// `tlpx bw` through LitePCIe's driver: its DMA in loopback, one row per run, both clocks.
fn bw_driver_section(params: &bw_driver::Parameters, body: &bw_driver::Body, tables: &mut String) {
    tables.push_str(&format!(
        "<h3>Bandwidth through LitePCIe's driver: its DMA in loopback over the driver's {} buffers of {} bytes, \
         both directions at once (figures per direction; host MB/s in host wall time, card MB/s in card cycles)</h3>",
        params.ring_buffers, params.buffer_bytes
    ));
    let rows: Vec<Vec<String>> = body
        .points
        .iter()
        .enumerate()
        .map(|(i, r)| {
            vec![
                (i + 1).to_string(),
                r.buffers.to_string(),
                r.bytes_per_direction.to_string(),
                format!("{:.3}", r.host_seconds),
                format!("{:.1}", r.host_mb_per_s_per_direction),
                r.card_cycles.to_string(),
                format!("{:.1}", r.card_mb_per_s_per_direction),
                if !params.check { "not checked".into() } else { format!("{} of {} buffers differ", r.bad_buffers, r.checked_buffers) },
            ]
        })
        .collect();
    tables.push_str(&table(&["run", "buffers", "bytes/dir", "host s", "host MB/s", "card cycles", "card MB/s", "check"], &rows));
}

fn script_section(params: &script::RunParameters, body: &script::RunBody, tables: &mut String, figs: &mut Figures) -> R<()> {
    let clock = f64::from(params.clock_hz);
    let end = &body.end;
    tables.push_str(&table(
        &["script", "end status", "records", "instructions executed"],
        &[vec![params.file.clone(), end.status_name.to_string(), end.records.to_string(), end.instructions.to_string()]],
    ));
    let mut rows = Vec::new();
    let mut dma = Vec::new();
    for p in &body.points {
        let delta = p.delta_cycles as f64;
        rows.push(vec![
            p.index.to_string(),
            p.name.clone(),
            p.kind.clone(),
            p.status_name.to_string(),
            format!("{delta:.0}"),
            format!("{:.3}", delta / clock * 1e6),
            p.value.to_string(),
            p.aux.to_string(),
        ]);
        if p.kind == "dma" {
            dma.push((delta / clock * 1e6, p.value as f64 / clock * 1e6));
        }
    }
    figs.chart(
        "DMA runs of the script: each run's duration (generator.cycles) at the card time it ended, from the card's own timestamps",
        &Chart {
            title: "Script: DMA runs along card time".into(),
            x_label: "card time since the first record (µs)".into(),
            y_label: "run duration (µs)".into(),
            x_axis: XAxis::Linear,
            y_range: None,
            series: vec![Series { label: "dma".into(), points: dma, style: Style::Points }],
        },
    )?;
    tables.push_str("<h3>Records (card cycles from the first record; values as the firmware recorded them)</h3>");
    tables.push_str(&table(&["#", "name", "kind", "status", "Δ cycles", "Δ µs", "value", "aux"], &rows));
    Ok(())
}

fn spy_section(points: &[SpyStats], tables: &mut String, figs: &mut Figures) -> R<()> {
    for p in points {
        let c = &p.counters;
        let mut rows = Vec::new();
        for (dir, classes) in [("down", &c.down), ("up", &c.up)] {
            for (i, cls) in classes.iter().enumerate() {
                if cls.tlps > 0 {
                    rows.push(vec![
                        dir.to_string(),
                        p.classes.get(i).cloned().unwrap_or_else(|| i.to_string()),
                        cls.tlps.to_string(),
                        bytes(cls.bytes),
                        bytes(cls.payload_bytes),
                        cls.wait_cycles.to_string(),
                    ]);
                }
            }
        }
        tables.push_str("<h3>TLPs seen by the spy (every TLP since the last clear)</h3>");
        tables.push_str(&table(&["direction", "type", "TLPs", "bytes", "payload", "wait cycles"], &rows));
        tables.push_str(&table(
            &["records numbered", "lost", "written to the ring"],
            &[vec![c.sequence.to_string(), c.lost.to_string(), c.wr_index.to_string()]],
        ));
        let series = vec![LogSeries {
            label: "matched reads".into(),
            kind: Mark::Bars(plot::log2_buckets(&p.latency_histogram, p.clock_hz)),
            points: Vec::new(),
        }];
        figs.log_chart(
            "Read latency seen by the spy, request to last completion: log2 buckets of card cycles, log count",
            &LogChart {
                title: "Spy: read latency histogram".into(),
                x_label: "latency (log scale)".into(),
                y_label: "reads (log scale)".into(),
                x_ticks: Ticks::Ns,
                y_ticks: Ticks::Count,
                series,
            },
        )?;
    }
    Ok(())
}

fn irq_section(points: &[RunReport], clock: &str, tables: &mut String, figs: &mut Figures) -> R<()> {
    let mut rows = Vec::new();
    // A run Ctrl-C cut short holds fewer interrupts than asked: its rows say so.
    let label = |p: &RunReport, s: &irq::StageReport| {
        let mut condition = text(&p.condition);
        if p.interrupted {
            condition = format!("{condition} (interrupted after {} interrupts)", p.interrupts_waited);
        }
        format!("{condition} {}", text(&s.stage))
    };
    for p in points {
        for s in p.stages.iter().filter(|s| s.measured) {
            let mut row = vec![label(p, s)];
            row.extend(stats_cells(s.latency_ns.as_ref(), fmt_ns));
            rows.push(row);
        }
    }
    let (series, x_label) = irq::stage_histograms(points, label);
    let caption = format!(
        "{}: {}, log count",
        if clock.contains("simulated") {
            "Interrupt latency per stage and condition (SIMULATED: no interrupt controller or kernel dispatch in it)"
        } else {
            "Interrupt dispatch latency per stage and condition"
        },
        x_label.trim_start_matches("latency (").trim_end_matches(')')
    );
    figs.log_chart(
        &caption,
        &LogChart {
            title: "Interrupt latency histogram".into(),
            x_label,
            y_label: "interrupts (log scale)".into(),
            x_ticks: Ticks::Ns,
            y_ticks: Ticks::Count,
            series,
        },
    )?;
    if !rows.is_empty() {
        let _ = write!(tables, "<h3>Interrupt latency ({})</h3>", esc(clock));
        tables.push_str(&table(&with_stats_head(&["condition, stage"]), &rows));
    }
    Ok(())
}

fn loop_section(points: &[rt_loop::Point], clock: &str, tables: &mut String, figs: &mut Figures) -> R<()> {
    // One histogram per (condition, detection, return), one series per size.
    let mut groups: BTreeMap<String, Vec<rt_loop::Point>> = BTreeMap::new();
    let mut rows = Vec::new();
    let mut medians: BTreeMap<String, Vec<(f64, f64)>> = BTreeMap::new();
    for p in points {
        let group = format!("{}, {}, {} return", text(&p.condition), text(&p.detect), text(&p.ret));
        let size = f64::from(p.size_bytes);
        let mut row = vec![group.clone(), bytes(u64::from(p.size_bytes))];
        row.extend(stats_cells(p.loop_ns.as_ref(), fmt_ns));
        row.push(p.host_compute_ns.as_ref().map_or("–".into(), |h| fmt_ns(h.median)));
        rows.push(row);
        if let Some(s) = &p.loop_ns {
            medians.entry(group.clone()).or_default().push((size, s.median));
        }
        groups.entry(group).or_default().push(p.clone());
    }
    if medians.values().any(|m| m.len() > 1) {
        let series: Vec<LogSeries> =
            medians.into_iter().map(|(label, pts)| LogSeries { label, kind: Mark::LinePoints, points: pts }).collect();
        figs.add("Loop time (median) against buffer size", true, || {
            Ok(plot::render_log_svg(&LogChart {
                title: "Real-time loop: median loop time against size".into(),
                x_label: "buffer size (log scale)".into(),
                y_label: "loop time (log scale)".into(),
                x_ticks: Ticks::Bytes,
                y_ticks: Ticks::Ns,
                series,
            }))
        })?;
    }
    for (group, members) in groups {
        let (series, x_label) = rt_loop::loop_histograms(&members, |p| bytes(u64::from(p.size_bytes)));
        figs.log_chart(
            &format!("Loop time histogram ({group}): {}, log count", x_label.trim_start_matches("loop time (").trim_end_matches(')')),
            &LogChart {
                title: format!("Loop time: {group}"),
                x_label,
                y_label: "iterations (log scale)".into(),
                x_ticks: Ticks::Ns,
                y_ticks: Ticks::Count,
                series,
            },
        )?;
    }
    if !rows.is_empty() {
        let _ = write!(tables, "<h3>Loop time ({})</h3>", esc(clock));
        tables.push_str(&table(
            &with_stats_head(&["condition, detection, return", "size"])
                .into_iter()
                .chain(["host compute (median, real host time)"])
                .collect::<Vec<_>>(),
            &rows,
        ));
    }
    Ok(())
}

fn rule30_section(body: &rule30::Body, tables: &mut String, figs: &mut Figures) -> R<()> {
    let mut series: BTreeMap<String, Vec<(f64, f64)>> = BTreeMap::new();
    let mut rows = Vec::new();
    for p in body.points.iter() {
        let mode = p.mode.name();
        let s = &p.per_line_ns;
        let label = if p.mode.is_hw() { format!("{mode}, latency {}", fmt_ns(p.latency_ns)) } else { mode.to_string() };
        series.entry(label.clone()).or_default().push((f64::from(p.length_bits), s.median));
        let mut row = vec![label, p.length_bits.to_string(), p.clock.to_string()];
        row.extend(stats_cells(Some(s), fmt_ns));
        row.push(format!("{:.2}", p.jitter));
        row.push(p.mismatches.to_string());
        rows.push(row);
    }
    let series: Vec<LogSeries> = series
        .into_iter()
        .map(|(label, mut pts)| {
            pts.sort_by(|a, b| a.0.total_cmp(&b.0));
            LogSeries { label, kind: Mark::LinePoints, points: pts }
        })
        .collect();
    figs.log_chart(
        "The rule-30 landscape: time per line (median) against line length, per mode",
        &LogChart {
            title: "Rule 30: time per line against length".into(),
            x_label: "line length, bits (log scale)".into(),
            y_label: "time per line (log scale)".into(),
            x_ticks: Ticks::Plain,
            y_ticks: Ticks::Ns,
            series,
        },
    )?;
    let _ = write!(tables, "<p class=\"note\">{}</p>", esc(&body.clock_statement));
    if let Some(c) = &body.crossover_claim {
        let _ = write!(tables, "<p class=\"note\"><b>Two clocks:</b> {}</p>", esc(c));
    }
    if !rows.is_empty() {
        tables.push_str("<h3>Time per line</h3>");
        tables.push_str(&table(
            &with_stats_head(&["mode", "length (bits)", "clock"]).into_iter().chain(["jitter", "mismatches"]).collect::<Vec<_>>(),
            &rows,
        ));
    }
    // Documents before the clocks were recorded have no hw_clock / sw_clock: "–".
    let clock = |c: &str| if c.is_empty() { "–".to_string() } else { c.to_string() };
    let rows: Vec<Vec<String>> = body
        .crossovers
        .iter()
        .map(|c| {
            vec![
                c.hw_mode.to_string(),
                clock(c.hw_clock),
                c.sw_mode.to_string(),
                clock(c.sw_clock),
                fmt_ns(c.latency_ns),
                c.length_bits.map_or("never".into(), |l| l.to_string()),
            ]
        })
        .collect();
    if !rows.is_empty() {
        tables.push_str("<h3>Crossovers: hardware faster from this length on (each mode in its own clock)</h3>");
        tables.push_str(&table(&["hardware mode", "its clock", "software mode", "its clock", "latency", "length (bits)"], &rows));
    }
    Ok(())
}

// Comparisons ------------------------------------------------------------------------------

/// The kinds whose results are overlaid when the report is given more than one of them.
const OVERLAY_KINDS: &[&str] = &["bw", "lat", "pio", "characterize", "irq", "loop"];

/// Groups of at least two documents of one overlaid kind (indices into `docs`), in the order
/// the kinds first appear.
fn comparable_groups(docs: &[(String, AnyResult)]) -> Vec<(&'static str, Vec<usize>)> {
    let mut groups: Vec<(&'static str, Vec<usize>)> = Vec::new();
    for (i, (_, d)) in docs.iter().enumerate() {
        let kind = d.kind();
        if !OVERLAY_KINDS.contains(&kind) {
            continue;
        }
        match groups.iter_mut().find(|(k, _)| *k == kind) {
            Some((_, members)) => members.push(i),
            None => groups.push((kind, vec![i])),
        }
    }
    groups.retain(|(_, m)| m.len() > 1);
    groups
}

fn bw_points_of(d: &AnyResult) -> &[BwPoint] {
    match d {
        AnyResult::Bw(d) => &d.body.points,
        AnyResult::Characterize(d) => &d.body.points,
        _ => &[],
    }
}

fn lat_points_of(d: &AnyResult) -> &[LatPoint] {
    match d {
        AnyResult::Lat(d) => &d.body.points,
        AnyResult::Characterize(d) => &d.body.latency,
        _ => &[],
    }
}

fn pio_points_of(d: &AnyResult) -> &[PioPoint] {
    match d {
        AnyResult::Pio(d) => &d.body.points,
        AnyResult::Characterize(d) => &d.body.pio,
        _ => &[],
    }
}

/// Histogram buckets: (from ns, to ns, count).
type Buckets = Vec<(f64, f64, f64)>;

/// One histogram of a result: its samples in ns when the result keeps them (bins are then
/// chosen from the samples), and the card's log2 buckets.
struct Histogram {
    samples: Option<Vec<f64>>,
    log2: Buckets,
}

/// The histograms of an irq or loop result, by what they measure ("idle user",
/// "loop 64 B, idle, poll, register return").
fn histograms_of(d: &AnyResult) -> Vec<(String, Histogram)> {
    match d {
        AnyResult::Irq(d) => d
            .body
            .points
            .iter()
            .flat_map(|p| {
                p.stages.iter().filter(|s| s.measured).map(move |s| {
                    let samples = p.user_samples_ns();
                    (
                        format!("interrupt latency, {} {}", text(&p.condition), text(&s.stage)),
                        Histogram {
                            samples: (s.stage == tlpx_device::irq_timer::Stage::User && !samples.is_empty()).then_some(samples),
                            log2: plot::log2_buckets(&s.card.histogram, p.clock_hz),
                        },
                    )
                })
            })
            .collect(),
        AnyResult::Loop(d) => d
            .body
            .points
            .iter()
            .map(|p| {
                (
                    format!(
                        "loop time {}, {}, {}, {} return",
                        bytes(u64::from(p.size_bytes)),
                        text(&p.condition),
                        text(&p.detect),
                        text(&p.ret)
                    ),
                    Histogram {
                        samples: (!p.loop_cycles.is_empty()).then(|| p.loop_samples_ns()),
                        log2: plot::log2_buckets(&p.card.histogram, p.clock_hz),
                    },
                )
            })
            .collect(),
        _ => Vec::new(),
    }
}

fn model_of(d: &AnyResult) -> Option<&LinkConfig> {
    match d {
        AnyResult::Bw(d) => d.model.as_ref().map(|m| &m.link),
        AnyResult::Characterize(d) => d.model.as_ref().map(|m| &m.link),
        _ => None,
    }
}

/// Each compared document's label in figures: "#n" and what tells it apart from the others
/// (the link, the host, the parameters, the time), most telling first.
fn overlay_labels(members: &[usize], docs: &[(String, AnyResult)]) -> Vec<String> {
    let contexts: Vec<diff::Context> = members.iter().map(|&i| diff::context(&docs[i].1)).collect();
    let params: Vec<BTreeMap<String, String>> = members.iter().map(|&i| parameters_of(&docs[i].1)).collect();
    let differs = |f: &dyn Fn(usize) -> String| members.iter().enumerate().any(|(k, _)| f(k) != f(0));
    let mut differing_params: Vec<&String> = params[0].keys().filter(|k| k.as_str() != "out_dir").collect();
    differing_params.retain(|key| differs(&|k| params[k].get(*key).cloned().unwrap_or_default()));
    members
        .iter()
        .enumerate()
        .map(|(k, &i)| {
            let c = &contexts[k];
            let mut parts = vec![format!("#{}", i + 1)];
            if differs(&|k| contexts[k].link.clone()) {
                parts.push(c.link.split(", MRRS").next().unwrap_or(&c.link).to_string());
            }
            if differs(&|k| contexts[k].host.clone()) {
                parts.push(c.host.clone());
            }
            for key in &differing_params {
                parts.push(format!("{key} {}", params[k].get(*key).map_or("–", String::as_str)));
            }
            if parts.len() == 1 {
                parts.push(c.created.clone());
            }
            parts.join(", ")
        })
        .collect()
}

/// A document's parameters as rounded text, by name.
fn parameters_of(d: &AnyResult) -> BTreeMap<String, String> {
    let v = match d {
        AnyResult::Bw(d) => serde_json::to_value(&d.parameters),
        AnyResult::Lat(d) => serde_json::to_value(&d.parameters),
        AnyResult::Pio(d) => serde_json::to_value(&d.parameters),
        AnyResult::Characterize(d) => serde_json::to_value(&d.parameters),
        _ => Ok(Value::Null),
    };
    match v {
        Ok(Value::Object(m)) => m.iter().map(|(k, v)| (k.clone(), plain(v))).collect(),
        _ => BTreeMap::new(),
    }
}

fn comparison_section(n: usize, kind: &str, members: &[usize], docs: &[(String, AnyResult)]) -> R<Section> {
    let labels = overlay_labels(members, docs);
    let first = &docs[members[0]].1;
    let mut body = String::new();
    let mut figs = Figures::new();
    // What was compared, and whether the clocks allow it.
    let c0 = diff::context(first);
    let mut mismatch = None;
    let mut rows = Vec::new();
    for (&i, label) in members.iter().zip(&labels) {
        let c = diff::context(&docs[i].1);
        if mismatch.is_none() {
            mismatch = diff::clock_mismatch(&c0, &c);
        }
        rows.push(vec![label.clone(), docs[i].0.clone(), c.card, c.time_mode, c.link, c.host, c.created]);
    }
    if let Some(m) = &mismatch {
        let _ = write!(
            body,
            "<p class=\"badge warn\">CLOCKS DIFFER: {}. The figures are overlaid for reading, but no difference is judged.</p>",
            esc(m)
        );
    }
    body.push_str("<h3>Results compared</h3>");
    body.push_str(&table(&["label", "file", "card", "time mode", "link", "host", "created"], &rows));
    let sim = members.iter().all(|&i| diff::context(&docs[i].1).card.starts_with("simulated"));
    let clock = if sim { "card time, simulated" } else { "card time" };

    // Bandwidth against size: one figure per operation, a colour per result.
    let mut ops: Vec<Operation> = Vec::new();
    for &i in members {
        for p in bw_points_of(&docs[i].1) {
            if !ops.contains(&p.config.operation) {
                ops.push(p.config.operation);
            }
        }
    }
    for op in ops {
        let mut series = Vec::new();
        let models: Vec<Option<&LinkConfig>> = members.iter().map(|&i| model_of(&docs[i].1)).collect();
        let one_model = models.iter().all(|m| m == &models[0]);
        for (k, (&i, label)) in members.iter().zip(&labels).enumerate() {
            let mine: Vec<&BwPoint> = bw_points_of(&docs[i].1).iter().filter(|p| p.config.operation == op).collect();
            let lo = mine.iter().map(|p| u64::from(p.transfer_size)).min().unwrap_or(64);
            let hi = mine.iter().map(|p| u64::from(p.transfer_size)).max().unwrap_or(lo);
            if let Some(mut m) = models[k].and_then(|m| characterize::model_series(m, op, lo, hi)) {
                if !one_model || k == 0 {
                    if !one_model {
                        m.label = format!("model, {label}");
                    }
                    series.push(m);
                }
            }
            let mut pts: Vec<(f64, f64)> =
                mine.iter().map(|p| (f64::from(p.transfer_size), p.achieved_bytes_per_second.median / 1e6)).collect();
            pts.sort_by(|a, b| a.0.total_cmp(&b.0));
            series.push(Series { label: label.clone(), points: pts, style: Style::Points });
        }
        let title = format!("{} bandwidth against transfer size, {} results", op_label(&text(&op)), members.len());
        figs.chart(
            &format!("{}: achieved payload bandwidth (median) of each result, with the model's limit", op_label(&text(&op))),
            &Chart {
                title,
                x_label: "transfer size".into(),
                y_label: format!("payload MB/s ({clock})"),
                x_axis: XAxis::Log2Bytes,
                y_range: None,
                series,
            },
        )?;
    }

    // Latency CDFs: one figure per measurement, a line per result.
    let mut measurements: Vec<String> = Vec::new();
    for &i in members {
        for p in lat_points_of(&docs[i].1) {
            if !measurements.contains(&p.label()) {
                measurements.push(p.label());
            }
        }
    }
    for m in measurements {
        let series: Vec<Series> = members
            .iter()
            .zip(&labels)
            .filter_map(|(&i, label)| {
                let p = lat_points_of(&docs[i].1).iter().find(|p| p.label() == m)?;
                Some(Series { label: label.clone(), points: plot::cdf_points(&p.samples_ns(), 400), style: Style::Line })
            })
            .collect();
        figs.chart(
            &format!("{m}: latency CDF of each result (fraction of requests at or below each latency)"),
            &Chart {
                title: format!("{m} latency CDF, {} results", members.len()),
                x_label: format!("latency (ns of {clock})"),
                y_label: "fraction of requests".into(),
                x_axis: XAxis::Linear,
                y_range: Some((0.0, 1.0)),
                series,
            },
        )?;
    }

    // PIO: card bandwidth per width, a colour per result and direction.
    let mut series = Vec::new();
    for (&i, label) in members.iter().zip(&labels) {
        let pts = pio_points_of(&docs[i].1);
        if pts.is_empty() {
            continue;
        }
        let w: Vec<(f64, f64)> = pts.iter().filter_map(|p| p.card_write_bytes_per_second.map(|b| (f64::from(p.width), b / 1e6))).collect();
        let r: Vec<(f64, f64)> = pts.iter().map(|p| (f64::from(p.width), p.card_read_bytes_per_second / 1e6)).collect();
        series.push(Series { label: format!("write, {label}"), points: w, style: Style::Points });
        series.push(Series { label: format!("read, {label}"), points: r, style: Style::Points });
    }
    if !series.is_empty() {
        figs.chart(
            "PIO: the card's bandwidth per access width of each result (card time)",
            &Chart {
                title: format!("PIO bandwidth against access width, {} results", members.len()),
                x_label: "access width".into(),
                y_label: "MB/s (card time)".into(),
                x_axis: XAxis::Log2Bytes,
                y_range: None,
                series,
            },
        )?;
    }
    // Histograms (irq stages, loop times): one figure per stage or loop, a colour per result,
    // bars side by side in each bucket.
    let mut hists: Vec<(String, Vec<(String, Histogram)>)> = Vec::new();
    for (&i, label) in members.iter().zip(&labels) {
        for (key, h) in histograms_of(&docs[i].1) {
            match hists.iter_mut().find(|(k, _)| *k == key) {
                Some((_, list)) => list.push((label.clone(), h)),
                None => hists.push((key, vec![(label.clone(), h)])),
            }
        }
    }
    for (key, list) in hists {
        // Bins chosen from the samples when every result keeps them (one binning for all),
        // else the card's log2 buckets.
        let sets: Option<Vec<(String, Vec<f64>)>> = list.iter().map(|(l, h)| h.samples.clone().map(|v| (l.clone(), v))).collect();
        let (series, bins) = match sets.as_deref().and_then(plot::binned_series) {
            Some((series, bins)) => (series, format!("{bins} from the samples")),
            None => (
                list.into_iter().map(|(label, h)| LogSeries { label, kind: Mark::Bars(h.log2), points: Vec::new() }).collect(),
                "log scale; the card's log2 buckets of cycles".to_string(),
            ),
        };
        figs.log_chart(
            &format!("{key}: the histogram of each result ({bins}, in ns)"),
            &LogChart {
                title: format!("{key}, {} results", members.len()),
                x_label: format!("latency ({bins})"),
                y_label: "count (log scale)".into(),
                x_ticks: Ticks::Ns,
                y_ticks: Ticks::Count,
                series,
            },
        )?;
    }
    body.push_str(&figs.html);

    // Differences against the first, by tlpx diff's rules.
    for (&i, label) in members.iter().zip(&labels).skip(1) {
        if !diff::DIFF_KINDS.contains(&kind) {
            let _ = write!(
                body,
                "<p class=\"note\">No table of differences: tlpx diff judges {} results, not {kind}.</p>",
                diff::DIFF_KINDS.join(", ")
            );
            break;
        }
        let d = diff::compare(first, &docs[i].1, diff::DEFAULT_THRESHOLD, true)?;
        let _ = write!(
            body,
            "<h3>Differences: {} against {} ({} of {} figures changed)</h3>",
            esc(label),
            esc(&labels[0]),
            d.changed,
            d.rows.len()
        );
        let _ = write!(
            body,
            "<p class=\"note\">As <code>tlpx diff</code> judges them: a figure changed when it moved by more than {} % of the first \
             result's value and, where the results record a spread (runs' min..max, a 95 % interval from the samples), the \
             spreads do not overlap; without a recorded spread the {} % alone decides.</p>",
            diff::DEFAULT_THRESHOLD * 100.0,
            diff::DEFAULT_THRESHOLD * 100.0
        );
        let rows: Vec<Vec<String>> = d.rows.iter().map(diff::Row::cells).collect();
        body.push_str(&table(&diff::HEAD, &rows));
    }
    let files: Vec<String> = members.iter().map(|&i| format!("#{} {}", i + 1, docs[i].0)).collect();
    Ok(Section {
        anchor: format!("r{n}"),
        heading: format!("Comparison of {} {} results: {}", members.len(), kind, files.join(", ")),
        body,
        figures: figs.count,
    })
}

// Page ---------------------------------------------------------------------------------

const CSS: &str = "
body { font-family: system-ui, sans-serif; margin: 0 auto; max-width: 1200px; padding: 1em 2em; color: #222; }
h1 { border-bottom: 2px solid #444; }
section { border-top: 1px solid #bbb; margin-top: 2em; }
table { border-collapse: collapse; margin: 0.5em 0 1em; font-size: 0.9em; }
th, td { border: 1px solid #ccc; padding: 0.2em 0.5em; text-align: right; vertical-align: top; }
td:first-child, th:first-child { text-align: left; }
.cols { display: flex; flex-wrap: wrap; gap: 2em; }
.cols td { text-align: left; max-width: 40em; word-break: break-word; }
.badge { display: inline-block; padding: 0.3em 0.8em; border-radius: 4px; font-weight: bold; }
.badge.sim { background: #fff3cd; border: 2px solid #d39e00; color: #6b4f00; }
.badge.hw { background: #d4edda; border: 2px solid #28a745; }
.badge.warn { background: #f8d7da; border: 2px solid #dc3545; }
figure { margin: 1em 0; }
svg.chart { max-width: 100%; height: auto; border: 1px solid #ddd; }
figcaption, .note, .nodata { color: #555; font-size: 0.9em; }
ul.notes { color: #6b4f00; }
.limits { background: #fff8e1; border-left: 4px solid #d39e00; padding: 0.2em 1em; margin: 0.8em 0; }
.limits h3 { margin: 0.4em 0; font-size: 1em; }
.limits .concerns { color: #777; font-size: 0.85em; }
";

fn page(title: &str, sections: &[Section], documents: usize, compared: &[String]) -> String {
    let mut h = String::from("<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n");
    let _ = writeln!(h, "<meta name=\"generator\" content=\"tlpx {}\">", esc(env!("CARGO_PKG_VERSION")));
    let _ = writeln!(h, "<title>{}</title>\n<style>{CSS}</style>\n</head>\n<body>", esc(title));
    let _ = writeln!(h, "<h1>{}</h1>", esc(title));
    let (created, _) = results::utc_now();
    let _ =
        writeln!(h, "<p>Written by tlpx {} at {} from {} result documents.</p>", esc(env!("CARGO_PKG_VERSION")), esc(&created), documents);
    if compared.is_empty() {
        h.push_str(
            "<p>Nothing compared: no two results of the same kind that can be overlaid (bw, lat, pio, characterize, irq, loop).</p>",
        );
    } else {
        h.push_str("<p class=\"compared\">Compared: ");
        h.push_str(&compared.iter().map(|c| esc(c)).collect::<Vec<_>>().join("; "));
        h.push_str(". Their figures are overlaid, one colour per result, with a table of differences against the first.</p>");
    }
    h.push_str("<nav><ol>");
    for s in sections {
        let _ = write!(h, "<li><a href=\"#{}\">{}</a></li>", esc(&s.anchor), esc(&s.heading));
    }
    h.push_str("</ol></nav>\n");
    for s in sections {
        let _ = write!(h, "<section id=\"{}\">\n<h2>{}</h2>\n{}\n</section>\n", esc(&s.anchor), esc(&s.heading), s.body);
    }
    h.push_str("</body>\n</html>\n");
    h
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escapes_html() {
        assert_eq!(esc("<b>\"x\" & 'y'</b>"), "&lt;b&gt;&quot;x&quot; &amp; &#39;y&#39;&lt;/b&gt;");
    }

    #[test]
    fn partial_documents_say_how_much_they_hold() {
        let fixture: Value = serde_json::from_str(include_str!("../../tests/fixtures/results/pio.json")).expect("JSON");
        let text = |change: &dyn Fn(&mut Value)| {
            let mut v = fixture.clone();
            change(&mut v);
            let Some(Ok(AnyResult::Pio(d))) = AnyResult::from_value(v) else { panic!("a pio document") };
            partial_text(&d)
        };
        assert_eq!(text(&|_| {}), None);
        let old = text(&|v| v["interrupted"] = true.into()).expect("partial");
        assert!(old.starts_with("PARTIAL: the run was interrupted"), "{old}");
        let p = |state: &'static str| {
            move |v: &mut Value| {
                v["interrupted"] = true.into();
                v["partial"] = serde_json::json!({"state": state, "points_done": 3, "points_planned": 40});
            }
        };
        let stopped = text(&p("interrupted")).expect("partial");
        assert!(stopped.starts_with("PARTIAL: 3 of 40 points finished") && stopped.contains("Ctrl-C"), "{stopped}");
        let checkpoint = text(&p("checkpoint")).expect("partial");
        assert!(checkpoint.contains("3 of 40 points") && checkpoint.contains("killed"), "{checkpoint}");
    }

    #[test]
    fn a_point_missing_a_field_is_refused_with_its_path() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut v: Value = serde_json::from_str(include_str!("../../tests/fixtures/results/loop.json")).expect("JSON");
        v["points"][1]["card"].as_object_mut().expect("card").remove("histogram");
        let path = dir.path().join("loop.json");
        std::fs::write(&path, serde_json::to_string(&v).expect("JSON")).expect("write");
        let e = load(&path).expect_err("no histogram");
        assert!(e.starts_with(&format!("{}: ", path.display())), "{e}");
        assert!(e.ends_with("field points[1].card.histogram is missing"), "{e}");
    }

    #[test]
    fn numbers_in_tables_are_rounded_for_people() {
        let v =
            serde_json::json!({"interval_ns": [199999.99999999997, 300000.00000000006], "count": 1000, "x": 0.1234567891, "y": -2.5e-7});
        assert_eq!(plain(&v["interval_ns"]), "[200000, 300000]");
        assert_eq!(plain(&v["count"]), "1000");
        assert_eq!(plain(&v["x"]), "0.123457");
        assert_eq!(plain(&v["y"]), "-0.00000025");
        assert_eq!(plain(&v), "{\"count\": 1000, \"interval_ns\": [200000, 300000], \"x\": 0.123457, \"y\": -0.00000025}");
    }

    #[test]
    fn values_read_as_they_stand_in_the_document() {
        assert_eq!(text(&Some(8.0_f64)), "8");
        assert_eq!(text(&None::<String>), "–");
        assert_eq!(text(&tlpx_device::generator::Operation::ReadWrite), "read_write");
        assert_eq!(plot::log2_buckets(&[0, 2, 0, 1], 1_000_000_000), vec![(2.0, 4.0, 2.0), (8.0, 16.0, 1.0)]);
    }
}
