//! `tlpx report RESULTS...`: one self-contained HTML page from result documents (issue 7).
//!
//! ```text
//!   bw.json lat.json irq.json ... ──► read + check (schema, kind, fields) ──► one section each
//!        parameters, environment, SIMULATED badge, compact tables, inline SVG figures ──► report.html
//! ```
//!
//! The page loads nothing: CSS and SVG are inline, links are in-page anchors only. Figures
//! that are plain x/y charts (bandwidth with the model's line, latency CDFs) come from
//! [`crate::plot`]; log-scale histograms and the rule-30 landscape (log-log axes, which
//! plot.rs does not draw) are built here by hand. Every string from a document is escaped.
//! Documents are read as JSON values, not through the writers' structs, so that a document
//! missing a field is refused with that field's path instead of a serde message.

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

use crate::cmd::characterize;
use crate::input;
use crate::output::{bytes, print_json};
use crate::plot::{self, Chart, Series, Style, XAxis};
use crate::results::{self, SCHEMA, SCHEMA_VERSION};

/// The kinds this report draws (every kind tlpx writes).
const REPORT_KINDS: &[&str] = &["bw", "lat", "pio", "characterize", "model", "irq", "loop", "rule30", "spy", "script"];

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
    let mut docs = Vec::new();
    let mut errors = Vec::new();
    for path in &cmd.results {
        match load(path) {
            Ok(v) => docs.push((path.display().to_string(), v)),
            Err(e) => errors.push(e),
        }
    }
    if !errors.is_empty() {
        bail!("{}", errors.join("\n  "));
    }
    let mut sections = Vec::new();
    let mut summaries = Vec::new();
    for (i, (file, v)) in docs.iter().enumerate() {
        let kind = v["kind"].as_str().unwrap_or_default();
        let section =
            render_section(i + 1, file, kind, v).map_err(|e| anyhow::anyhow!("{file}: this {kind:?} result is incomplete: {e}"))?;
        summaries.push(SectionSummary { file: file.clone(), kind: kind.to_string(), figures: section.figures });
        sections.push(section);
    }
    let html = page(&cmd.title, &sections);
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

/// Reads and checks one document; the error names the file and what is accepted.
fn load(path: &Path) -> Result<Value, String> {
    let name = path.display();
    let what = format!(
        "tlpx report reads the result documents tlpx writes (schema \"{SCHEMA}\", kinds {}; at most {} each)",
        REPORT_KINDS.join(", "),
        input::size_text(MAX_RESULT_BYTES)
    );
    let text = input::read_capped(path, MAX_RESULT_BYTES).map_err(|e| format!("{name}: cannot read it: {e}; {what}"))?;
    let v: Value = serde_json::from_slice(&text).map_err(|e| format!("{name}: not JSON ({e}); {what}"))?;
    drop(text);
    if !v.is_object() || v.get("schema").and_then(Value::as_str) != Some(SCHEMA) {
        let found = v.get("schema").map_or("no \"schema\" field".to_string(), |s| format!("\"schema\" is {s}"));
        return Err(format!("{name}: not a tlpx result ({found}); {what}"));
    }
    if v["schema_version"] != SCHEMA_VERSION {
        return Err(format!("{name}: \"schema_version\" is {}, this tlpx reads version {SCHEMA_VERSION}", v["schema_version"]));
    }
    let kind = match v.get("kind") {
        Some(Value::String(k)) => k.as_str(),
        Some(other) => return Err(format!("{name}: \"kind\" is {other}, not a string; accepted kinds: {}", REPORT_KINDS.join(", "))),
        None => return Err(format!("{name}: a tlpx result without the field \"kind\"; accepted kinds: {}", REPORT_KINDS.join(", "))),
    };
    if !REPORT_KINDS.contains(&kind) {
        return Err(format!("{name}: unknown result kind {kind:?}; accepted kinds: {}", REPORT_KINDS.join(", ")));
    }
    results::check_document(&v).map_err(|e| format!("{name}: this {kind:?} result is incomplete or malformed: {e}"))?;
    Ok(v)
}

// Field access -------------------------------------------------------------------------

type R<T> = Result<T, String>;

/// A value inside a document with its path (`points[2].latency_ns`), so that a missing
/// field is reported by name.
struct Field<'a> {
    v: &'a Value,
    path: String,
}

impl<'a> Field<'a> {
    fn root(v: &'a Value) -> Self {
        Field { v, path: String::new() }
    }
    fn join(&self, k: &str) -> String {
        if self.path.is_empty() {
            k.to_string()
        } else {
            format!("{}.{k}", self.path)
        }
    }
    /// A required field (present, may be null).
    fn key(&self, k: &str) -> R<Field<'a>> {
        match self.v.get(k) {
            Some(v) => Ok(Field { v, path: self.join(k) }),
            None => Err(format!("field {} is missing", self.join(k))),
        }
    }
    /// A field that may be absent or null.
    fn opt(&self, k: &str) -> Option<Field<'a>> {
        self.v.get(k).filter(|v| !v.is_null()).map(|v| Field { v, path: self.join(k) })
    }
    fn num(&self) -> R<f64> {
        self.v.as_f64().ok_or_else(|| format!("field {} is not a number ({})", self.path, short(self.v)))
    }
    fn str(&self) -> R<&'a str> {
        self.v.as_str().ok_or_else(|| format!("field {} is not a string ({})", self.path, short(self.v)))
    }
    fn arr(&self) -> R<Vec<Field<'a>>> {
        let a = self.v.as_array().ok_or_else(|| format!("field {} is not a list ({})", self.path, short(self.v)))?;
        Ok(a.iter().enumerate().map(|(i, v)| Field { v, path: format!("{}[{i}]", self.path) }).collect())
    }
    fn num_at(&self, k: &str) -> R<f64> {
        self.key(k)?.num()
    }
    fn str_at(&self, k: &str) -> R<&'a str> {
        self.key(k)?.str()
    }
    /// A text for a table cell: strings as they are, other values as compact JSON.
    fn text_at(&self, k: &str) -> R<String> {
        Ok(plain(self.key(k)?.v))
    }
    fn summary_at(&self, k: &str) -> R<Stats> {
        let s = self.key(k)?;
        Ok(Stats {
            count: s.num_at("count")?,
            min: s.num_at("min")?,
            median: s.num_at("median")?,
            p99: s.num_at("p99")?,
            p999: s.num_at("p999")?,
            max: s.num_at("max")?,
        })
    }
    fn opt_summary_at(&self, k: &str) -> R<Option<Stats>> {
        match self.opt(k) {
            Some(_) => self.summary_at(k).map(Some),
            None => {
                self.key(k)?;
                Ok(None)
            }
        }
    }
}

fn short(v: &Value) -> String {
    let s = v.to_string();
    if s.chars().count() > 40 {
        format!("{}…", s.chars().take(40).collect::<String>())
    } else {
        s
    }
}

fn plain(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Null => "–".into(),
        other => other.to_string(),
    }
}

#[derive(Debug, Clone, Copy)]
struct Stats {
    count: f64,
    min: f64,
    median: f64,
    p99: f64,
    p999: f64,
    max: f64,
}

// HTML ---------------------------------------------------------------------------------

/// Escapes text for HTML element content and attribute values.
fn esc(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

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

fn fmt_ns(ns: f64) -> String {
    let a = ns.abs();
    if !ns.is_finite() {
        "–".into()
    } else if a >= 1e9 {
        format!("{:.2} s", ns / 1e9)
    } else if a >= 1e6 {
        format!("{:.2} ms", ns / 1e6)
    } else if a >= 1e3 {
        format!("{:.2} µs", ns / 1e3)
    } else if a >= 10.0 || ns.fract() == 0.0 {
        format!("{ns:.0} ns")
    } else {
        format!("{ns:.1} ns")
    }
}

fn mbs(bps: f64) -> String {
    format!("{:.1}", bps / 1e6)
}

fn stats_cells(s: Option<Stats>, f: fn(f64) -> String) -> Vec<String> {
    match s {
        Some(s) => vec![format!("{:.0}", s.count), f(s.min), f(s.median), f(s.p99), f(s.p999), f(s.max)],
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
}

// Sections -----------------------------------------------------------------------------

fn render_section(n: usize, file: &str, kind: &str, v: &Value) -> R<Section> {
    let doc = Field::root(v);
    let mut body = String::new();
    body.push_str(&environment_html(&doc)?);
    let mut figs = Figures::new();
    let mut tables = String::new();
    let sim = doc.key("environment")?.key("simulated")?.v == &Value::Bool(true);
    match kind {
        "bw" => bw_section(&doc, &doc.key("points")?.arr()?, sim, &mut tables, &mut figs)?,
        "lat" => lat_section(&doc.key("points")?.arr()?, sim, &mut tables, &mut figs)?,
        "pio" => pio_section(&doc.key("points")?.arr()?, sim, &mut tables, &mut figs)?,
        "characterize" => {
            characterize_table(&doc.key("table")?.arr()?, sim, &mut tables)?;
            bw_section(&doc, &doc.key("points")?.arr()?, sim, &mut tables, &mut figs)?;
            lat_section(&doc.key("latency")?.arr()?, sim, &mut tables, &mut figs)?;
            pio_section(&doc.key("pio")?.arr()?, sim, &mut tables, &mut figs)?;
        }
        "model" => model_section(&doc, &mut tables, &mut figs)?,
        "irq" => {
            comparison_html(&doc, &mut tables)?;
            irq_section(&doc.key("points")?.arr()?, &clock_of(&doc, sim), &mut tables, &mut figs)?
        }
        "loop" => {
            comparison_html(&doc, &mut tables)?;
            loop_section(&doc.key("points")?.arr()?, &clock_of(&doc, sim), &mut tables, &mut figs)?
        }
        "rule30" => rule30_section(&doc, &mut tables, &mut figs)?,
        "spy" => spy_section(&doc.key("points")?.arr()?, &mut tables, &mut figs)?,
        "script" => script_section(&doc, &mut tables, &mut figs)?,
        other => return Err(format!("unknown kind {other:?}")),
    }
    body.push_str(&figs.html);
    body.push_str(&tables);
    // A partial result says so in its heading (and the page's contents), not only in its badge.
    let partial = if partial_text(&doc)?.is_some() { " (PARTIAL)" } else { "" };
    Ok(Section { anchor: format!("r{n}"), heading: format!("{} — {file}{partial}", kind_title(kind)), body, figures: figs.count })
}

/// The clock of card-measured figures in a document: its time basis's, else card time.
fn clock_of(doc: &Field, sim: bool) -> String {
    match doc.opt("time_basis").and_then(|b| b.opt("clock")) {
        Some(c) => plain(c.v),
        None if sim => "card time (simulated)".into(),
        None => "card time".into(),
    }
}

/// An irq or loop document's statements of what its comparisons show (when it has them).
fn comparison_html(doc: &Field, tables: &mut String) -> R<()> {
    if let Some(c) = doc.opt("comparison") {
        let _ = write!(tables, "<p class=\"note\"><b>Idle vs loaded:</b> {}</p>", esc(c.str_at("statement")?));
    }
    if let Some(d) = doc.opt("detection") {
        let _ = write!(tables, "<p class=\"note\"><b>irq vs poll:</b> {}</p>", esc(d.str()?));
    }
    Ok(())
}

/// An efficiency fraction as the report shows it: "99.9 %".
fn percent(fraction: f64) -> String {
    format!("{:.1} %", fraction * 100.0)
}

/// The sentence beside every efficiency figure of a simulated document.
const SIM_EFFICIENCY_NOTE: &str = "Efficiency = achieved / model, in %. SIMULATED: tlpx-sim paces its link with this same model, \
                                   so efficiency cannot exceed 100 % by construction; it shows how near the card's gateware \
                                   comes to the model, not how good a host is.";

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

fn environment_html(doc: &Field) -> R<String> {
    let env = doc.key("environment")?;
    let mut h = String::new();
    let simulated = env.key("simulated")?.v == &Value::Bool(true);
    if simulated {
        let sim = env.key("sim")?;
        let lm = sim.key("link_model")?;
        let link =
            format!("Gen{} x{}, MPS {}, MRRS {}", lm.text_at("generation")?, lm.text_at("lanes")?, lm.text_at("mps")?, lm.text_at("mrrs")?);
        let _ = write!(
            h,
            "<p class=\"badge sim\">SIMULATED (link model {}; host time {}; seed {}): card-time figures come from the simulator, not hardware</p>",
            esc(&link),
            esc(&sim.text_at("host_time")?),
            esc(&sim.opt("seed").map_or("–".into(), |s| plain(s.v)))
        );
    } else {
        h.push_str("<p class=\"badge hw\">measured on hardware</p>");
    }
    if let Some(text) = partial_text(doc)? {
        let _ = write!(h, "<p class=\"badge warn\">{}</p>", esc(&text));
    }
    let command = match doc.key("command")?.v {
        Value::Array(a) => a.iter().map(plain).collect::<Vec<_>>().join(" "),
        other => plain(other),
    };
    let mut rows = vec![
        vec!["created".to_string(), doc.text_at("created")?],
        vec!["command".into(), command],
        vec!["host".into(), env.text_at("host_name")?],
        vec!["kernel".into(), env.text_at("kernel")?],
        vec!["CPU".into(), format!("{} ({} CPUs)", env.text_at("cpu_model")?, env.opt("cpus").map_or("?".into(), |c| plain(c.v)))],
        vec!["backend".into(), env.text_at("backend")?],
        vec!["device".into(), env.text_at("device")?],
        vec!["tlpx".into(), env.text_at("tlpx_version")?],
    ];
    if let Some(card) = env.opt("card") {
        let features = card.opt("features").map_or(String::new(), |f| match f.v {
            Value::Array(a) => a.iter().map(plain).collect::<Vec<_>>().join(", "),
            other => plain(other),
        });
        rows.push(vec![
            "card".into(),
            format!(
                "version {}, {}-bit data path at {} Hz; features: {features}",
                card.opt("version").map_or("?".into(), |x| plain(x.v)),
                card.opt("data_width").map_or("?".into(), |x| plain(x.v)),
                card.opt("clock_hz").map_or("?".into(), |x| plain(x.v)),
            ),
        ]);
    }
    if let Some(link) = doc.opt("link") {
        rows.push(vec![
            "link".into(),
            format!(
                "Gen{} x{} ({} GT/s), MPS {}, MRRS {}, RCB {} (from {})",
                link.opt("generation").map_or("?".into(), |x| plain(x.v)),
                link.opt("lanes").map_or("?".into(), |x| plain(x.v)),
                link.opt("speed_gt_s").map_or("?".into(), |x| plain(x.v)),
                link.opt("mps").map_or("?".into(), |x| plain(x.v)),
                link.opt("mrrs").map_or("?".into(), |x| plain(x.v)),
                link.opt("rcb").map_or("?".into(), |x| plain(x.v)),
                link.opt("source").map_or("?".into(), |x| plain(x.v)),
            ),
        ]);
    }
    if let Some(w) = doc.opt("wall_seconds") {
        rows.push(vec!["wall time".into(), format!("{:.2} s", w.num()?)]);
    }
    h.push_str("<div class=\"cols\"><div><h3>Environment</h3>");
    h.push_str(&table(&["", ""], &rows));
    h.push_str("</div><div><h3>Parameters</h3>");
    let params: Vec<Vec<String>> = match doc.key("parameters")?.v {
        Value::Object(m) => m.iter().map(|(k, v)| vec![k.clone(), truncate(&plain(v), 160)]).collect(),
        other => vec![vec!["".into(), plain(other)]],
    };
    h.push_str(&table(&["", ""], &params));
    h.push_str("</div></div>");
    // What the simulator fixes by construction for these figures (documents of this tlpx;
    // older ones have none): a box of its own, and not repeated among the notes.
    let mut limit_notes = Vec::new();
    if let Some(limits) = doc.opt("simulator_limits") {
        h.push_str("<div class=\"limits\"><h3>What the simulator fixes here (not findings)</h3><ul>");
        for l in limits.arr()? {
            let statement = l.str_at("statement")?;
            let concerns = match l.key("concerns")?.v {
                Value::Array(a) => a.iter().map(plain).collect::<Vec<_>>().join(", "),
                other => plain(other),
            };
            let _ = write!(h, "<li>{} <span class=\"concerns\">({})</span></li>", esc(statement), esc(&concerns));
            limit_notes.push(format!("SIMULATED: {statement}"));
        }
        h.push_str("</ul></div>");
    }
    let notes: Vec<String> = match doc.key("notes")?.v {
        Value::Array(a) => a.iter().map(plain).filter(|n| !limit_notes.contains(n)).collect(),
        _ => Vec::new(),
    };
    if !notes.is_empty() {
        h.push_str("<ul class=\"notes\">");
        for n in notes {
            let _ = write!(h, "<li>{}</li>", esc(&n));
        }
        h.push_str("</ul>");
    }
    Ok(h)
}

/// What a document that holds less than its run planned says of itself (`interrupted`, and
/// `partial` in documents of this tlpx); `None` for a whole run.
fn partial_text(doc: &Field) -> R<Option<String>> {
    if doc.opt("interrupted").is_none_or(|f| f.v != &Value::Bool(true)) {
        return Ok(None);
    }
    let Some(p) = doc.opt("partial") else {
        return Ok(Some("PARTIAL: the run was interrupted before its end; what it finished is below".into()));
    };
    let (done, planned) = (p.text_at("points_done")?, p.text_at("points_planned")?);
    Ok(Some(if p.str_at("state")? == "checkpoint" {
        format!(
            "PARTIAL: {done} of {planned} points finished, written while the run went on (a checkpoint): the run was killed, \
             or had not ended when this document was read"
        )
    } else {
        format!("PARTIAL: {done} of {planned} points finished: the run was interrupted (Ctrl-C, SIGTERM or SIGHUP) and kept what it had finished")
    }))
}

fn truncate(s: &str, n: usize) -> String {
    if s.chars().count() > n {
        format!("{}…", s.chars().take(n).collect::<String>())
    } else {
        s.to_string()
    }
}

fn generator_operation(name: &str) -> Option<Operation> {
    match name {
        "read" => Some(Operation::Read),
        "write" => Some(Operation::Write),
        "read_write" | "rdwr" => Some(Operation::ReadWrite),
        "write_then_read" | "wrrd" => Some(Operation::WriteThenRead),
        _ => None,
    }
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

fn bw_section(doc: &Field, points: &[Field], sim: bool, tables: &mut String, figs: &mut Figures) -> R<()> {
    let model: Option<LinkConfig> = match doc.opt("model") {
        Some(m) => {
            let link = m.key("link")?;
            Some(serde_json::from_value(link.v.clone()).map_err(|e| format!("field {} is not a link configuration: {e}", link.path))?)
        }
        None => None,
    };
    // Per operation: series per (pattern, window, offset); the model line from the document's model.
    let mut by_op: BTreeMap<String, BTreeMap<String, Vec<(f64, f64)>>> = BTreeMap::new();
    let mut model_pts: BTreeMap<String, Vec<(f64, f64)>> = BTreeMap::new();
    let mut rows = Vec::new();
    for p in points {
        let config = p.key("config")?;
        let op = config.str_at("operation")?.to_string();
        let size = p.num_at("transfer_size")?;
        let a = p.summary_at("achieved_bytes_per_second")?;
        let pattern = p.text_at("pattern")?;
        let window = p.num_at("window")?;
        let offset = p.num_at("offset")?;
        let model_bps = p.opt("model_bytes_per_second").map(|m| m.num()).transpose()?;
        let errors = p.text_at("card_error_total")?;
        let series = format!("{pattern}, window {}, offset {offset}", bytes(window as u64));
        by_op.entry(op.clone()).or_default().entry(series).or_default().push((size, a.median / 1e6));
        if let Some(m) = model_bps {
            model_pts.entry(op.clone()).or_default().push((size, m / 1e6));
        }
        rows.push(vec![
            op_label(&op).to_string(),
            bytes(size as u64),
            pattern,
            bytes(window as u64),
            mbs(a.min),
            mbs(a.median),
            mbs(a.max),
            model_bps.map_or("–".into(), mbs),
            model_bps.map_or("–".into(), |m| if m > 0.0 { percent(a.median / m) } else { "–".into() }),
            p.text_at("transfers")?,
            errors,
        ]);
    }
    for (op, series) in &by_op {
        let lo = series.values().flatten().map(|p| p.0).fold(f64::MAX, f64::min).max(1.0) as u64;
        let hi = series.values().flatten().map(|p| p.0).fold(0.0, f64::max) as u64;
        let mut chart_series = Vec::new();
        let model_line = match (&model, generator_operation(op)) {
            (Some(m), Some(gop)) => characterize::model_series(m, gop, lo, hi.max(lo)),
            _ => None,
        };
        match model_line {
            Some(s) => chart_series.push(s),
            None => {
                if let Some(mp) = model_pts.get(op) {
                    let mut mp = mp.clone();
                    mp.sort_by(|a, b| a.0.total_cmp(&b.0));
                    chart_series.push(Series { label: "model (at the measured sizes)".into(), points: mp, style: Style::Line });
                }
            }
        }
        let single = series.len() == 1;
        for (label, pts) in series {
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
        if sim {
            let _ = write!(tables, "<p class=\"note\">{}</p>", esc(SIM_EFFICIENCY_NOTE));
        }
    }
    Ok(())
}

fn lat_section(points: &[Field], sim: bool, tables: &mut String, figs: &mut Figures) -> R<()> {
    let clock = if sim { "card time, simulated" } else { "card time" };
    let mut series = Vec::new();
    let mut rows = Vec::new();
    for p in points {
        let measurement = p.str_at("measurement")?;
        let size = p.num_at("transfer_size")?;
        let clock = p.num_at("clock_hz")?.max(1.0);
        let samples: Vec<f64> = p.key("samples_cycles")?.arr()?.iter().map(|c| c.num().map(|c| c * 1e9 / clock)).collect::<R<_>>()?;
        let label = format!("{measurement} {}", bytes(size as u64));
        let s = p.opt_summary_at("latency_ns")?;
        let mut row = vec![label.clone()];
        row.extend(stats_cells(s, fmt_ns));
        row.push(p.text_at("samples_dropped")?);
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

fn pio_section(points: &[Field], sim: bool, tables: &mut String, figs: &mut Figures) -> R<()> {
    let (mut wr, mut rd) = (Vec::new(), Vec::new());
    let mut rows = Vec::new();
    for p in points {
        let width = p.num_at("width")?;
        let cw = p.num_at("card_write_bytes_per_second")?;
        let cr = p.num_at("card_read_bytes_per_second")?;
        wr.push((width, cw / 1e6));
        rd.push((width, cr / 1e6));
        for (dir, key, card) in [("write", "write_wall_ns", cw), ("read", "read_wall_ns", cr)] {
            let mut row = vec![format!("{dir} {}", bytes(width as u64))];
            row.extend(stats_cells(p.opt_summary_at(key)?, fmt_ns));
            row.push(mbs(card));
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

fn characterize_table(rows_in: &[Field], sim: bool, tables: &mut String) -> R<()> {
    let opt_mb = |f: &Field, k: &str| -> R<String> { Ok(f.opt(k).map(|v| v.num()).transpose()?.map_or("–".into(), mbs)) };
    let mut rows = Vec::new();
    for r in rows_in {
        rows.push(vec![
            r.text_at("label")?,
            opt_mb(r, "best_bytes_per_second")?,
            r.opt("at_bytes").map(|v| v.num()).transpose()?.map_or("–".into(), |b| bytes(b as u64)),
            opt_mb(r, "model_at_size_bytes_per_second")?,
            r.opt("efficiency").map(|v| v.num()).transpose()?.map_or("–".into(), percent),
            opt_mb(r, "model_best_bytes_per_second")?,
            r.text_at("how")?,
        ]);
    }
    tables.push_str(if sim {
        "<h3>Maximum sustained bandwidth (payload MB/s of card time, simulated)</h3>"
    } else {
        "<h3>Maximum sustained bandwidth (payload MB/s of card time)</h3>"
    });
    tables.push_str(&table(&["", "best", "at", "model at size", "efficiency (% of model)", "model best", "how"], &rows));
    if sim {
        let _ = write!(tables, "<p class=\"note\">{}</p>", esc(SIM_EFFICIENCY_NOTE));
    }
    Ok(())
}

fn model_section(doc: &Field, tables: &mut String, figs: &mut Figures) -> R<()> {
    let mut by_op: BTreeMap<String, Vec<(f64, f64)>> = BTreeMap::new();
    let mut rows = Vec::new();
    for p in doc.key("points")?.arr()? {
        let op = p.text_at("operation")?;
        let size = p.num_at("transfer_size")?;
        let bps = p.num_at("bytes_per_second")?;
        by_op.entry(op.clone()).or_default().push((size, bps / 1e6));
        rows.push(vec![op, bytes(size as u64), mbs(bps), percent(p.num_at("efficiency")?)]);
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

/// Log2 buckets of card cycles as (from ns, to ns, count), empty buckets left out.
fn hist_buckets(hist: &Field, clock_hz: f64) -> R<Vec<(f64, f64, f64)>> {
    let ns = 1e9 / clock_hz.max(1.0);
    let mut out = Vec::new();
    for (k, c) in hist.arr()?.iter().enumerate() {
        let c = c.num()?;
        if c > 0.0 {
            let from = if k == 0 { 0.5 } else { (1u64 << k.min(62)) as f64 };
            out.push((from * ns, (1u64 << (k + 1).min(63)) as f64 * ns, c));
        }
    }
    Ok(out)
}

/// `tlpx script run`: the records the firmware wrote (card-cycle timestamps), and the DMA
/// runs' durations along card time.
fn script_section(doc: &Field, tables: &mut String, figs: &mut Figures) -> R<()> {
    let params = doc.key("parameters")?;
    let clock = params.num_at("clock_hz")?;
    let end = doc.key("end")?;
    tables.push_str(&table(
        &["script", "end status", "records", "instructions executed"],
        &[vec![params.text_at("file")?, end.text_at("status_name")?, end.text_at("records")?, end.text_at("instructions")?]],
    ));
    let points = doc.key("points")?.arr()?;
    let mut rows = Vec::new();
    let mut dma = Vec::new();
    for p in &points {
        let delta = p.num_at("delta_cycles")?;
        rows.push(vec![
            p.text_at("index")?,
            p.text_at("name")?,
            p.text_at("kind")?,
            p.text_at("status_name")?,
            format!("{delta:.0}"),
            format!("{:.3}", delta / clock * 1e6),
            p.text_at("value")?,
            p.text_at("aux")?,
        ]);
        if p.str_at("kind")? == "dma" {
            dma.push((delta / clock * 1e6, p.num_at("value")? / clock * 1e6));
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

fn spy_section(points: &[Field], tables: &mut String, figs: &mut Figures) -> R<()> {
    for p in points {
        let clock = p.num_at("clock_hz")?;
        let classes: Vec<String> = p.key("classes")?.arr()?.iter().map(|c| c.str().map(str::to_string)).collect::<R<_>>()?;
        let c = p.key("counters")?;
        let mut rows = Vec::new();
        for dir in ["down", "up"] {
            for (i, cls) in c.key(dir)?.arr()?.iter().enumerate() {
                let tlps = cls.num_at("tlps")?;
                if tlps > 0.0 {
                    rows.push(vec![
                        dir.to_string(),
                        classes.get(i).cloned().unwrap_or_else(|| i.to_string()),
                        format!("{tlps:.0}"),
                        bytes(cls.num_at("bytes")? as u64),
                        bytes(cls.num_at("payload_bytes")? as u64),
                        format!("{:.0}", cls.num_at("wait_cycles")?),
                    ]);
                }
            }
        }
        tables.push_str("<h3>TLPs seen by the spy (every TLP since the last clear)</h3>");
        tables.push_str(&table(&["direction", "type", "TLPs", "bytes", "payload", "wait cycles"], &rows));
        tables.push_str(&table(
            &["records numbered", "lost", "written to the ring"],
            &[vec![format!("{:.0}", c.num_at("sequence")?), format!("{:.0}", c.num_at("lost")?), format!("{:.0}", c.num_at("wr_index")?)]],
        ));
        let series = vec![LogSeries {
            label: "matched reads".into(),
            kind: Mark::Bars(hist_buckets(&p.key("latency_histogram")?, clock)?),
            points: Vec::new(),
        }];
        let has = series.iter().any(|s| s.has_data());
        figs.add("Read latency seen by the spy, request to last completion: log2 buckets of card cycles, log count", has, || {
            Ok(log_chart(&LogChart {
                title: "Spy: read latency histogram".into(),
                x_label: "latency (log scale)".into(),
                y_label: "reads (log scale)".into(),
                x_ticks: Ticks::Ns,
                y_ticks: Ticks::Count,
                series,
            }))
        })?;
    }
    Ok(())
}

fn irq_section(points: &[Field], clock: &str, tables: &mut String, figs: &mut Figures) -> R<()> {
    let mut series = Vec::new();
    let mut rows = Vec::new();
    for p in points {
        let mut condition = p.text_at("condition")?;
        // A run Ctrl-C cut short holds fewer interrupts than asked: its rows say so.
        if p.opt("interrupted").is_some_and(|f| f.v == &Value::Bool(true)) {
            condition = format!("{condition} (interrupted after {} interrupts)", p.text_at("interrupts_waited")?);
        }
        let clock = p.num_at("clock_hz")?;
        for s in p.key("stages")?.arr()? {
            let stage = s.text_at("stage")?;
            let measured = s.key("measured")?.v == &Value::Bool(true);
            if !measured {
                continue;
            }
            let label = format!("{condition} {stage}");
            let mut row = vec![label.clone()];
            row.extend(stats_cells(s.opt_summary_at("latency_ns")?, fmt_ns));
            rows.push(row);
            series.push(LogSeries { label, kind: Mark::Bars(hist_buckets(&s.key("card")?.key("histogram")?, clock)?), points: Vec::new() });
        }
    }
    let has = series.iter().any(|s| s.has_data());
    let caption = if clock.contains("simulated") {
        "Interrupt latency per stage and condition (SIMULATED: no interrupt controller or kernel dispatch in it): log2 buckets of card cycles, log count"
    } else {
        "Interrupt dispatch latency per stage and condition: log2 buckets of card cycles, log count"
    };
    figs.add(caption, has, || {
        Ok(log_chart(&LogChart {
            title: "Interrupt latency histogram".into(),
            x_label: "latency (log scale)".into(),
            y_label: "interrupts (log scale)".into(),
            x_ticks: Ticks::Ns,
            y_ticks: Ticks::Count,
            series,
        }))
    })?;
    if !rows.is_empty() {
        let _ = write!(tables, "<h3>Interrupt latency ({})</h3>", esc(clock));
        tables.push_str(&table(&with_stats_head(&["condition, stage"]), &rows));
    }
    Ok(())
}

fn loop_section(points: &[Field], clock: &str, tables: &mut String, figs: &mut Figures) -> R<()> {
    // One histogram per (condition, detection, return), one series per size.
    let mut groups: BTreeMap<String, Vec<LogSeries>> = BTreeMap::new();
    let mut rows = Vec::new();
    let mut medians: BTreeMap<String, Vec<(f64, f64)>> = BTreeMap::new();
    for p in points {
        let group = format!("{}, {}, {} return", p.text_at("condition")?, p.text_at("detect")?, p.text_at("return")?);
        let size = p.num_at("size_bytes")?;
        let clock = p.num_at("clock_hz")?;
        let s = p.opt_summary_at("loop_ns")?;
        let hc = p.opt_summary_at("host_compute_ns")?;
        let mut row = vec![group.clone(), bytes(size as u64)];
        row.extend(stats_cells(s, fmt_ns));
        row.push(hc.map_or("–".into(), |h| fmt_ns(h.median)));
        rows.push(row);
        if let Some(s) = s {
            medians.entry(group.clone()).or_default().push((size, s.median));
        }
        groups.entry(group).or_default().push(LogSeries {
            label: bytes(size as u64),
            kind: Mark::Bars(hist_buckets(&p.key("card")?.key("histogram")?, clock)?),
            points: Vec::new(),
        });
    }
    if medians.values().any(|m| m.len() > 1) {
        let series: Vec<LogSeries> =
            medians.into_iter().map(|(label, pts)| LogSeries { label, kind: Mark::LinePoints, points: pts }).collect();
        figs.add("Loop time (median) against buffer size", true, || {
            Ok(log_chart(&LogChart {
                title: "Real-time loop: median loop time against size".into(),
                x_label: "buffer size (log scale)".into(),
                y_label: "loop time (log scale)".into(),
                x_ticks: Ticks::Bytes,
                y_ticks: Ticks::Ns,
                series,
            }))
        })?;
    }
    for (group, series) in groups {
        let has = series.iter().any(|s| s.has_data());
        figs.add(&format!("Loop time histogram ({group}): log2 buckets of card cycles, log count"), has, || {
            Ok(log_chart(&LogChart {
                title: format!("Loop time: {group}"),
                x_label: "loop time (log scale)".into(),
                y_label: "iterations (log scale)".into(),
                x_ticks: Ticks::Ns,
                y_ticks: Ticks::Count,
                series,
            }))
        })?;
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

fn rule30_section(doc: &Field, tables: &mut String, figs: &mut Figures) -> R<()> {
    let mut series: BTreeMap<String, Vec<(f64, f64)>> = BTreeMap::new();
    let mut rows = Vec::new();
    for p in doc.key("points")?.arr()? {
        let mode = p.str_at("mode")?;
        let clock = p.str_at("clock")?;
        let latency = p.num_at("latency_ns")?;
        let length = p.num_at("length_bits")?;
        let s = p.summary_at("per_line_ns")?;
        let label = if mode.starts_with("hw") { format!("{mode}, latency {}", fmt_ns(latency)) } else { mode.to_string() };
        series.entry(label.clone()).or_default().push((length, s.median));
        let mut row = vec![label, format!("{length:.0}"), clock.to_string()];
        row.extend(stats_cells(Some(s), fmt_ns));
        row.push(format!("{:.2}", p.num_at("jitter")?));
        row.push(p.text_at("mismatches")?);
        rows.push(row);
    }
    let series: Vec<LogSeries> = series
        .into_iter()
        .map(|(label, mut pts)| {
            pts.sort_by(|a, b| a.0.total_cmp(&b.0));
            LogSeries { label, kind: Mark::LinePoints, points: pts }
        })
        .collect();
    let has = series.iter().any(|s| s.has_data());
    figs.add("The rule-30 landscape: time per line (median) against line length, per mode", has, || {
        Ok(log_chart(&LogChart {
            title: "Rule 30: time per line against length".into(),
            x_label: "line length, bits (log scale)".into(),
            y_label: "time per line (log scale)".into(),
            x_ticks: Ticks::Plain,
            y_ticks: Ticks::Ns,
            series,
        }))
    })?;
    if let Some(c) = doc.opt("clock_statement") {
        let _ = write!(tables, "<p class=\"note\">{}</p>", esc(&plain(c.v)));
    }
    if let Some(c) = doc.opt("crossover_claim") {
        let _ = write!(tables, "<p class=\"note\"><b>Two clocks:</b> {}</p>", esc(&plain(c.v)));
    }
    if !rows.is_empty() {
        tables.push_str("<h3>Time per line</h3>");
        tables.push_str(&table(
            &with_stats_head(&["mode", "length (bits)", "clock"]).into_iter().chain(["jitter", "mismatches"]).collect::<Vec<_>>(),
            &rows,
        ));
    }
    if let Some(cs) = doc.opt("crossovers") {
        let mut rows = Vec::new();
        // Documents before the clocks were recorded have no hw_clock / sw_clock: "–".
        let clock = |c: &Field, k: &str| c.opt(k).map_or("–".to_string(), |v| plain(v.v));
        for c in cs.arr()? {
            rows.push(vec![
                c.text_at("hw_mode")?,
                clock(&c, "hw_clock"),
                c.text_at("sw_mode")?,
                clock(&c, "sw_clock"),
                fmt_ns(c.num_at("latency_ns")?),
                c.opt("length_bits").map_or("never".into(), |l| plain(l.v)),
            ]);
        }
        if !rows.is_empty() {
            tables.push_str("<h3>Crossovers: hardware faster from this length on (each mode in its own clock)</h3>");
            tables.push_str(&table(&["hardware mode", "its clock", "software mode", "its clock", "latency", "length (bits)"], &rows));
        }
    }
    Ok(())
}

// Hand-built log-scale charts ----------------------------------------------------------

/// How a series is drawn.
enum Mark {
    /// Histogram bars over [from, to) with a count: outlined, translucent fill.
    Bars(Vec<(f64, f64, f64)>),
    /// A line through the points, with a circle on each.
    LinePoints,
}

struct LogSeries {
    label: String,
    kind: Mark,
    points: Vec<(f64, f64)>,
}

impl LogSeries {
    fn has_data(&self) -> bool {
        match &self.kind {
            Mark::Bars(b) => !b.is_empty(),
            Mark::LinePoints => self.points.iter().any(|(x, y)| *x > 0.0 && *y > 0.0),
        }
    }
}

/// How the labels of a log axis read.
#[derive(Clone, Copy)]
enum Ticks {
    Ns,
    Bytes,
    Count,
    Plain,
}

struct LogChart {
    title: String,
    x_label: String,
    y_label: String,
    x_ticks: Ticks,
    y_ticks: Ticks,
    series: Vec<LogSeries>,
}

const COLOURS: [&str; 12] =
    ["#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf", "#7f7f7f", "#bcbd22", "#393b79", "#637939"];

/// Software modes of rule 30 are dashed, so that they stand apart from the hardware ones.
fn dash(label: &str) -> &'static str {
    if label.starts_with("sw-") {
        " stroke-dasharray=\"6 4\""
    } else {
        ""
    }
}

fn tick_label(v: f64, t: Ticks) -> String {
    match t {
        // Tick values are 1-2-5 steps: "1 µs", not "1.00 µs".
        Ticks::Ns => {
            let f = fmt_ns(v);
            f.replace(".00 ", " ").replace(".0 ", " ")
        }
        Ticks::Bytes => bytes(v.round() as u64),
        Ticks::Count | Ticks::Plain => {
            if v >= 1e6 {
                format!("{v:.0e}")
            } else {
                format!("{v:.0}")
            }
        }
    }
}

/// Tick values in [lo, hi] on a log axis: 1-2-5 per decade, or powers of two for bytes and bits.
fn log_ticks(lo: f64, hi: f64, t: Ticks) -> Vec<f64> {
    let mut out = Vec::new();
    if matches!(t, Ticks::Bytes | Ticks::Plain) {
        let mut k = lo.log2().ceil() as i32;
        while f64::from(k).exp2() <= hi * 1.0001 {
            out.push(f64::from(k).exp2());
            k += 1;
        }
        if out.len() > 12 {
            let step = out.len().div_ceil(12);
            out = out.into_iter().step_by(step).collect();
        }
        return out;
    }
    let mut decade = lo.log10().floor() as i32;
    while 10f64.powi(decade) <= hi * 1.0001 {
        for m in [1.0, 2.0, 5.0] {
            let v = m * 10f64.powi(decade);
            if v >= lo * 0.9999 && v <= hi * 1.0001 {
                out.push(v);
            }
        }
        decade += 1;
    }
    if matches!(t, Ticks::Count) {
        out.retain(|v| *v >= 1.0);
    }
    if out.len() > 10 {
        out.retain(|v| (v.log10() - v.log10().round()).abs() < 1e-9);
    }
    out
}

/// A log-log chart as an SVG element (no namespace needed inline in HTML).
fn log_chart(c: &LogChart) -> String {
    const W: f64 = 900.0;
    const H: f64 = 440.0;
    let (l, r, t, b) = (90.0, 230.0, 40.0, 60.0);
    let (mut x0, mut x1, mut y0, mut y1) = (f64::MAX, f64::MIN, f64::MAX, f64::MIN);
    for s in &c.series {
        match &s.kind {
            Mark::Bars(bars) => {
                for &(from, to, n) in bars {
                    x0 = x0.min(from);
                    x1 = x1.max(to);
                    y1 = y1.max(n);
                }
                y0 = y0.min(0.5);
            }
            Mark::LinePoints => {
                for &(x, y) in s.points.iter().filter(|(x, y)| *x > 0.0 && *y > 0.0) {
                    x0 = x0.min(x);
                    x1 = x1.max(x);
                    y0 = y0.min(y);
                    y1 = y1.max(y);
                }
            }
        }
    }
    if x0 > x1 {
        (x0, x1) = (1.0, 10.0);
    }
    if y0 > y1 {
        (y0, y1) = (1.0, 10.0);
    }
    // Some room around the data, and never a zero-width range.
    let (lx0, mut lx1) = ((x0 / 1.3).log10(), (x1 * 1.3).log10());
    let (ly0, mut ly1) = ((y0 / 1.5).log10(), (y1 * 1.5).log10());
    if lx1 - lx0 < 0.3 {
        lx1 = lx0 + 0.3;
    }
    if ly1 - ly0 < 0.3 {
        ly1 = ly0 + 0.3;
    }
    let px = |x: f64| l + (x.max(1e-300).log10() - lx0) / (lx1 - lx0) * (W - l - r);
    let py = |y: f64| H - b - (y.max(1e-300).log10() - ly0) / (ly1 - ly0) * (H - t - b);
    let mut s = String::new();
    let _ = write!(s, "<svg class=\"chart\" width=\"{W}\" height=\"{H}\" viewBox=\"0 0 {W} {H}\" role=\"img\">");
    let _ = write!(s, "<rect x=\"0\" y=\"0\" width=\"{W}\" height=\"{H}\" fill=\"#ffffff\"/>");
    let _ = write!(
        s,
        "<text x=\"{}\" y=\"24\" text-anchor=\"middle\" font-size=\"18\" font-family=\"sans-serif\">{}</text>",
        (l + W - r) / 2.0,
        esc(&c.title)
    );
    // Grid, ticks and labels.
    for v in log_ticks(10f64.powf(lx0), 10f64.powf(lx1), c.x_ticks) {
        let x = px(v);
        let _ = write!(s, "<line x1=\"{x:.1}\" y1=\"{t}\" x2=\"{x:.1}\" y2=\"{}\" stroke=\"#000\" stroke-opacity=\"0.12\"/>", H - b);
        let _ = write!(
            s,
            "<text x=\"{x:.1}\" y=\"{}\" text-anchor=\"middle\" font-size=\"12\" font-family=\"sans-serif\">{}</text>",
            H - b + 18.0,
            esc(&tick_label(v, c.x_ticks))
        );
    }
    for v in log_ticks(10f64.powf(ly0), 10f64.powf(ly1), c.y_ticks) {
        let y = py(v);
        let _ = write!(s, "<line x1=\"{l}\" y1=\"{y:.1}\" x2=\"{}\" y2=\"{y:.1}\" stroke=\"#000\" stroke-opacity=\"0.12\"/>", W - r);
        let _ = write!(
            s,
            "<text x=\"{}\" y=\"{:.1}\" text-anchor=\"end\" font-size=\"12\" font-family=\"sans-serif\">{}</text>",
            l - 6.0,
            y + 4.0,
            esc(&tick_label(v, c.y_ticks))
        );
    }
    let _ = write!(s, "<rect x=\"{l}\" y=\"{t}\" width=\"{}\" height=\"{}\" fill=\"none\" stroke=\"#000\"/>", W - l - r, H - t - b);
    let _ = write!(
        s,
        "<text x=\"{}\" y=\"{}\" text-anchor=\"middle\" font-size=\"14\" font-family=\"sans-serif\">{}</text>",
        (l + W - r) / 2.0,
        H - 14.0,
        esc(&c.x_label)
    );
    let _ = write!(
        s,
        "<text x=\"18\" y=\"{0}\" transform=\"rotate(-90 18 {0})\" text-anchor=\"middle\" font-size=\"14\" font-family=\"sans-serif\">{1}</text>",
        (t + H - b) / 2.0,
        esc(&c.y_label)
    );
    // Data.
    let base = py(10f64.powf(ly0));
    for (i, series) in c.series.iter().enumerate() {
        let colour = COLOURS[i % COLOURS.len()];
        match &series.kind {
            Mark::Bars(bars) => {
                let mut d = String::new();
                for &(from, to, n) in bars {
                    let (xa, xb, y) = (px(from), px(to), py(n));
                    let _ = write!(d, "M{xa:.1},{base:.1}V{y:.1}H{xb:.1}V{base:.1}Z");
                }
                if !d.is_empty() {
                    let _ = write!(
                        s,
                        "<path class=\"data\" d=\"{d}\" fill=\"{colour}\" fill-opacity=\"0.3\" stroke=\"{colour}\" stroke-width=\"1.5\"/>"
                    );
                }
            }
            Mark::LinePoints => {
                let pts: Vec<(f64, f64)> =
                    series.points.iter().filter(|(x, y)| *x > 0.0 && *y > 0.0).map(|&(x, y)| (px(x), py(y))).collect();
                if pts.len() > 1 {
                    let list: Vec<String> = pts.iter().map(|(x, y)| format!("{x:.1},{y:.1}")).collect();
                    let _ = write!(
                        s,
                        "<polyline class=\"data\" points=\"{}\" fill=\"none\" stroke=\"{colour}\" stroke-width=\"2\"{}/>",
                        list.join(" "),
                        dash(&series.label)
                    );
                }
                for (x, y) in pts {
                    let _ = write!(s, "<circle class=\"data\" cx=\"{x:.1}\" cy=\"{y:.1}\" r=\"3.5\" fill=\"{colour}\"/>");
                }
            }
        }
    }
    // Legend, right of the plot.
    for (i, series) in c.series.iter().enumerate() {
        let colour = COLOURS[i % COLOURS.len()];
        let y = t + 10.0 + 18.0 * i as f64;
        let x = W - r + 12.0;
        let _ = write!(s, "<rect x=\"{x}\" y=\"{}\" width=\"14\" height=\"10\" fill=\"{colour}\"/>", y - 9.0);
        let _ = write!(
            s,
            "<text x=\"{}\" y=\"{y}\" font-size=\"12\" font-family=\"sans-serif\">{}</text>",
            x + 20.0,
            esc(&truncate(&series.label, 30))
        );
    }
    s.push_str("</svg>");
    s
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

fn page(title: &str, sections: &[Section]) -> String {
    let mut h = String::from("<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n");
    let _ = writeln!(h, "<meta name=\"generator\" content=\"tlpx {}\">", esc(env!("CARGO_PKG_VERSION")));
    let _ = writeln!(h, "<title>{}</title>\n<style>{CSS}</style>\n</head>\n<body>", esc(title));
    let _ = writeln!(h, "<h1>{}</h1>", esc(title));
    let (created, _) = results::utc_now();
    let _ = writeln!(
        h,
        "<p>Written by tlpx {} at {} from {} result documents.</p>",
        esc(env!("CARGO_PKG_VERSION")),
        esc(&created),
        sections.len()
    );
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
    fn log_ticks_cover_the_range() {
        assert_eq!(log_ticks(90.0, 1100.0, Ticks::Ns), vec![100.0, 200.0, 500.0, 1000.0]);
        assert_eq!(log_ticks(8.0, 256.0, Ticks::Plain), vec![8.0, 16.0, 32.0, 64.0, 128.0, 256.0]);
    }

    #[test]
    fn partial_documents_say_how_much_they_hold() {
        let text = |v: Value| partial_text(&Field::root(&v)).expect("readable");
        assert_eq!(text(serde_json::json!({"interrupted": false})), None);
        let old = text(serde_json::json!({"interrupted": true})).expect("partial");
        assert!(old.starts_with("PARTIAL: the run was interrupted"), "{old}");
        let p = |state: &str| serde_json::json!({"interrupted": true, "partial": {"state": state, "points_done": 3, "points_planned": 40}});
        let stopped = text(p("interrupted")).expect("partial");
        assert!(stopped.starts_with("PARTIAL: 3 of 40 points finished") && stopped.contains("Ctrl-C"), "{stopped}");
        let checkpoint = text(p("checkpoint")).expect("partial");
        assert!(checkpoint.contains("3 of 40 points") && checkpoint.contains("killed"), "{checkpoint}");
        let bad = serde_json::json!({"interrupted": true, "partial": {"state": "checkpoint"}});
        assert!(partial_text(&Field::root(&bad)).expect_err("no counts").contains("points_done"));
    }

    #[test]
    fn missing_fields_are_named() {
        let v = serde_json::json!({"points": [{"latency_ns": {"count": 1}}]});
        let f = Field::root(&v);
        let p = &f.key("points").expect("points").arr().expect("an array")[0];
        assert_eq!(p.summary_at("latency_ns").expect_err("no min"), "field points[0].latency_ns.min is missing");
        assert_eq!(p.num_at("width").expect_err("no width"), "field points[0].width is missing");
    }
}
