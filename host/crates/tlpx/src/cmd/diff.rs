//! `tlpx diff A.json B.json`: every figure of two results of the same kind side by side, with
//! the change and whether it is more than the run-to-run spread the documents record
//! (results/diff.rs has the rules). Exit 0: no significant change; 1: changed; 2: inputs that
//! cannot be compared (not results, different kinds, different clocks or cards, or no figure
//! in common: nothing was compared, which is no evidence of "no change").
//!
//! ```text
//!   A.json B.json ──load + check (report's reader)──► AnyResult ×2 ──results::diff::compare──►
//!        context (card, time mode, link, host: what differs) + one row per figure ──► table | --json
//! ```

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Args;
use serde::Serialize;

use crate::cmd::report;
use crate::output::print_json;
use crate::results::diff::{self, Diff, DEFAULT_THRESHOLD, DIFF_KINDS, HEAD};

#[derive(Debug, Args)]
pub struct Cmd {
    /// The baseline result document (JSON).
    #[arg(value_name = "A.json")]
    a: PathBuf,
    /// The result document compared with it, of the same kind. Without it, an irq result of
    /// a per-CPU run (--cpus) compares its CPUs against one of them (--baseline-cpu).
    #[arg(value_name = "B.json")]
    b: Option<PathBuf>,
    /// With one irq document: the CPU the others are compared against (default: the first
    /// measured).
    #[arg(long, value_name = "CPU", value_parser = crate::args::whole(0u32, u32::MAX), allow_negative_numbers = true)]
    baseline_cpu: Option<u32>,
    /// Noise floor in % of A's value: a smaller change never counts; for a figure whose
    /// documents record no spread it is the whole rule.
    #[arg(long, default_value_t = DEFAULT_THRESHOLD * 100.0, value_parser = threshold, value_name = "PERCENT")]
    threshold: f64,
    /// Compare documents measured on different clocks or cards (simulator against hardware,
    /// different time modes): shown side by side, flagged, and none counted as a change.
    #[arg(long)]
    across_clocks: bool,
    /// Show only the figures that changed (the context and the counts are always shown).
    #[arg(long)]
    changed_only: bool,
}

fn threshold(s: &str) -> Result<f64, String> {
    match s.trim().trim_end_matches('%').trim().parse::<f64>() {
        Ok(v) if (0.0..=1000.0).contains(&v) => Ok(v),
        _ => Err(format!("--threshold takes a percentage 0..=1000 (e.g. 2 or 0.5), not {s:?}")),
    }
}

#[derive(Serialize)]
struct Output<'a> {
    a: String,
    b: String,
    verdict: &'static str,
    #[serde(flatten)]
    diff: &'a Diff,
}

pub fn run(cmd: &Cmd, json: bool) -> anyhow::Result<ExitCode> {
    let Some(b_path) = &cmd.b else {
        return within(cmd, json);
    };
    if cmd.baseline_cpu.is_some() {
        anyhow::bail!("--baseline-cpu compares the CPUs of one document: give A.json alone");
    }
    let mut docs = Vec::new();
    let mut errors = Vec::new();
    for path in [&cmd.a, b_path] {
        match report::load_as(path, "tlpx diff", DIFF_KINDS) {
            Ok(d) => docs.push(d),
            Err(e) => errors.push(e),
        }
    }
    if !errors.is_empty() {
        anyhow::bail!("{}", errors.join("\n  "));
    }
    let (a, b) = (&docs[0], &docs[1]);
    let (na, nb) = (cmd.a.display().to_string(), b_path.display().to_string());
    let d = diff::compare(a, b, cmd.threshold / 100.0, cmd.across_clocks).map_err(|e| anyhow::anyhow!("{na} (A) and {nb} (B): {e}"))?;
    let verdict = match (d.compared, d.changed) {
        (0, _) => "nothing compared",
        (_, 0) => "no significant change",
        _ => "changed",
    };
    if json {
        print_json(&Output { a: na.clone(), b: nb.clone(), verdict, diff: &d })?;
    } else {
        for line in text(&d, &na, &nb, cmd.changed_only) {
            crate::outln!("{line}");
        }
        crate::outln!("{verdict}: {} of {} figures changed", d.changed, d.rows.len());
    }
    if d.compared == 0 {
        eprintln!(
            "tlpx: nothing was compared: no figure of {na} (A) is in {nb} (B) ({} figures, each only in one): give two results \
             of the same measurement (the same sizes, operations, points)",
            d.rows.len()
        );
        return Ok(ExitCode::from(crate::exit::BAD_INPUT));
    }
    Ok(ExitCode::from(if d.changed > 0 { 1 } else { 0 }))
}

/// One per-CPU irq document: its CPUs against the baseline CPU (results::diff::compare_cpus).
fn within(cmd: &Cmd, json: bool) -> anyhow::Result<ExitCode> {
    let doc = report::load_as(&cmd.a, "tlpx diff", &["irq"]).map_err(anyhow::Error::msg)?;
    let na = cmd.a.display().to_string();
    let d = diff::compare_cpus(&doc, cmd.baseline_cpu, cmd.threshold / 100.0).map_err(|e| anyhow::anyhow!("{na}: {e}"))?;
    let verdict = if d.changed == 0 { "no CPU differs significantly from the baseline" } else { "CPUs differ" };
    if json {
        print_json(&Output { a: format!("{na} (baseline CPU)"), b: format!("{na} (each other CPU)"), verdict, diff: &d })?;
    } else {
        for line in text(&d, &format!("{na}, baseline CPU"), &format!("{na}, each other CPU"), cmd.changed_only) {
            crate::outln!("{line}");
        }
        crate::outln!("{verdict}: {} of {} figures differ", d.changed, d.rows.len());
    }
    Ok(ExitCode::from(if d.changed > 0 { 1 } else { 0 }))
}

/// The table as text: the context, then one line per figure in aligned columns.
fn text(d: &Diff, a: &str, b: &str, changed_only: bool) -> Vec<String> {
    let mut out = vec![format!("tlpx diff: {} results; A = {a}, B = {b}", d.kind)];
    for c in &d.context {
        out.push(format!("  {:<11} A: {}  B: {}{}", c.what, c.a, c.b, if c.differs { "  (differs)" } else { "" }));
    }
    if d.clocks_differ {
        out.push("CLOCKS DIFFER: the figures below were measured on different clocks or cards; none is judged".into());
    }
    out.push(format!(
        "rule: a figure changed when |B − A| > {} % of A and, where a spread is recorded (runs' min..max, a 95 % interval \
         from the samples, or the samples' min..max), the spreads of A and B do not overlap; with no spread recorded the \
         threshold alone decides (the rule column says which)",
        d.threshold * 100.0
    ));
    let rows: Vec<Vec<String>> = d.rows.iter().filter(|r| r.changed || !changed_only).map(|r| r.cells()).collect();
    let mut widths: Vec<usize> = HEAD.iter().map(|h| h.chars().count()).collect();
    for r in &rows {
        for (w, c) in widths.iter_mut().zip(r) {
            *w = (*w).max(c.chars().count());
        }
    }
    let line = |cells: &[String]| {
        let n = cells.len();
        cells
            .iter()
            .enumerate()
            .map(|(i, c)| if i + 1 == n { c.clone() } else { format!("{c:<w$}", w = widths[i]) })
            .collect::<Vec<_>>()
            .join("  ")
    };
    out.push(line(&HEAD.map(String::from)));
    for r in &rows {
        out.push(line(r));
    }
    out
}
