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
use tlpx_results::bw::BwPoint;
use tlpx_results::characterize::TableRow;
use tlpx_results::irq::{RunReport, StageReport};
use tlpx_results::lat::LatPoint;
use tlpx_results::pio::PioPoint;
use tlpx_results::rt_loop::Point as LoopPoint;
use tlpx_results::spy::Stats as SpyStats;
use tlpx_results::{bw_driver, model, rule30, script};

use crate::cmd::characterize;
use crate::cmd::irq;
use crate::cmd::rt_loop;
use crate::input;
use crate::output::{bytes, ns_text as fmt_ns, print_json, truncate, xml_escape as esc};
use crate::plot::{self, Chart, LogChart, LogSeries, Mark, Series, Style, Ticks, XAxis};
use crate::realtime::Comparison;
use crate::results::{self, diff, AnyResult, ResultDoc, SCHEMA};

mod compare;
mod page;
mod sections;
// Each block's section of the page is in its block's folder.
#[path = "../../../../../blocks/cpu/report.rs"]
mod cpu_report;
#[path = "../../../../../blocks/generator/report.rs"]
mod generator_report;
#[path = "../../../../../blocks/irq_timer/report.rs"]
mod irq_timer_report;
#[path = "../../../../../blocks/pio/report.rs"]
mod pio_report;
#[path = "../../../../../blocks/rt_loop/report.rs"]
mod rt_loop_report;
#[path = "../../../../../blocks/rule30/report.rs"]
mod rule30_report;
#[path = "../../../../../blocks/spy/report.rs"]
mod spy_report;
use compare::{comparable_groups, comparison_section};
use cpu_report::*;
use generator_report::*;
use irq_timer_report::*;
use page::page;
use pio_report::*;
use rt_loop_report::*;
use rule30_report::*;
use sections::*;
use spy_report::*;

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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escapes_html() {
        assert_eq!(esc("<b>\"x\" & 'y'</b>"), "&lt;b&gt;&quot;x&quot; &amp; &#39;y&#39;&lt;/b&gt;");
    }

    #[test]
    fn partial_documents_say_how_much_they_hold() {
        let fixture: Value = serde_json::from_str(include_str!("../../../tests/fixtures/results/pio.json")).expect("JSON");
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
        let mut v: Value = serde_json::from_str(include_str!("../../../tests/fixtures/results/loop.json")).expect("JSON");
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
