//! Two results side by side: every figure of one against the same figure of the other, and
//! whether the change is more than the run-to-run spread the documents record (`tlpx diff`,
//! and the difference tables of `tlpx report`).
//!
//! ```text
//!   AnyResult A, B ──figures()──► [Figure { key, unit, clock, value, spread }] each
//!        ──compare()──► context rows (clock, card, link, host: what differs) + one Row per key
//!                       (A, B, change, both spreads, the rule used, changed or not)
//! ```
//!
//! What spread each kind records, and the rule a figure is judged by (`Spread`):
//! - `bw` points, characterize's DMA points and best rows: the median of `--repeat` runs with
//!   the runs' [min, max] (`Runs`, from 2 runs); one run records no spread.
//! - `lat` points: the card's own per-request samples are in the document, so the median and
//!   p99 get a 95 % confidence interval from the samples' order statistics (`Samples`).
//! - `pio` host wall times: [min, max] of the accesses (`Range`); on the simulator they are
//!   socket round trips to tlpx-sim, shown but never counted (`Info`). The card-time PIO
//!   figures are one burst each: no spread.
//! - `model`: computed, exact: no spread.
//! - `irq` stage latencies and `loop` times (median, p99): the user stage's samples are in the
//!   document (`Samples`); the other stages and the loop keep only a summary: its [min, max]
//!   (`Range`).
//!
//! A figure counts as changed when its change is more than `threshold` of A's value (the
//! noise floor, `--threshold`, 2 % unless given) and, where either side records a spread, the
//! two intervals do not overlap. Without any spread the threshold alone decides, and the row
//! says so ("no spread recorded"). Figures are only compared on the same clock: documents
//! from the simulator and from hardware, or from different time modes, are refused unless the
//! caller accepts it, and then every row says the clocks differ and none counts as changed.

use std::collections::BTreeMap;

use serde::Serialize;
use serde_json::Value;
use tlpx_model::stats::Summary;
use tlpx_results::bw::BwPoint;
use tlpx_results::lat::LatPoint;
use tlpx_results::pio::PioPoint;

use super::{AnyResult, ResultDoc};
use crate::output::bytes;

/// The kinds `tlpx diff` compares.
pub const DIFF_KINDS: &[&str] = &["bw", "lat", "pio", "characterize", "model", "irq", "loop"];

/// The noise floor used when none is given: 2 % of A's value.
pub const DEFAULT_THRESHOLD: f64 = 0.02;

/// The z of a two-sided 95 % interval.
const Z95: f64 = 1.96;

/// How far a figure is known to move between runs, as the document records it.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Spread {
    /// The figure is the median of `n` ≥ 2 runs; [lo, hi] is their range.
    Runs { n: usize, lo: f64, hi: f64 },
    /// A 95 % confidence interval of a quantile from the `n` samples in the document.
    Samples { n: usize, lo: f64, hi: f64 },
    /// [min, max] of the `n` samples a summary was made of (the samples themselves are not kept).
    Range { n: usize, lo: f64, hi: f64 },
    /// The document records no spread for this figure (one run, one burst, or computed).
    None,
    /// Shown for information only, never counted as a change (the reason is the figure's note).
    Info,
}

impl Spread {
    fn interval(&self) -> Option<(f64, f64)> {
        match *self {
            Spread::Runs { lo, hi, .. } | Spread::Samples { lo, hi, .. } | Spread::Range { lo, hi, .. } => Some((lo, hi)),
            Spread::None | Spread::Info => None,
        }
    }

    /// The spread as a table shows it, in the figure's unit.
    pub fn text(&self, fmt: impl Fn(f64) -> String) -> String {
        match *self {
            Spread::Runs { n, lo, hi } => format!("{}..{} ({n} runs)", fmt(lo), fmt(hi)),
            Spread::Samples { n, lo, hi } => format!("{}..{} (95 % CI, {n} samples)", fmt(lo), fmt(hi)),
            Spread::Range { n, lo, hi } => format!("{}..{} (min..max, {n} samples)", fmt(lo), fmt(hi)),
            Spread::None => "none recorded".into(),
            Spread::Info => "not compared".into(),
        }
    }
}

/// One figure of a result, in the unit and on the clock it names.
#[derive(Debug, Clone, Serialize)]
pub struct Figure {
    /// What it is, unique within the document: "DMA read 1 KiB, seq, window 1 MiB: payload bandwidth (median)".
    pub key: String,
    /// "MB/s" (10^6 payload bytes per second), "ns", "%".
    pub unit: &'static str,
    /// The clock the figure was measured on: "card time", "host wall time", "computed (model)".
    pub clock: &'static str,
    pub value: f64,
    pub spread: Spread,
    /// Why a figure is `Info`, or anything else a reader must know.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub note: Option<&'static str>,
}

fn mbs(bps: f64) -> f64 {
    bps / 1e6
}

/// The spread a summary over runs records: their range when there were at least two.
fn runs_spread(s: &Summary, scale: f64) -> Spread {
    if s.count >= 2 {
        Spread::Runs { n: s.count, lo: s.min * scale, hi: s.max * scale }
    } else {
        Spread::None
    }
}

/// A distribution-free 95 % confidence interval of the `q` quantile of sorted samples: the
/// order statistics at ranks n·q ∓ 1.96·√(n·q·(1−q)) (the normal approximation of the
/// binomial count of samples below the quantile).
pub fn quantile_ci(sorted: &[f64], q: f64) -> Option<(f64, f64)> {
    let n = sorted.len();
    if n == 0 {
        return None;
    }
    let nf = n as f64;
    let half = Z95 * (nf * q * (1.0 - q)).sqrt();
    let lo = ((nf * q - half).floor() as isize).clamp(1, n as isize) as usize;
    let hi = ((nf * q + half).ceil() as isize + 1).clamp(1, n as isize) as usize;
    Some((sorted[lo - 1], sorted[hi - 1]))
}

fn bw_point_key(p: &BwPoint) -> String {
    format!(
        "DMA {} {}, {}, window {}{}",
        crate::cmd::bw::op_label(p.config.operation),
        bytes(u64::from(p.transfer_size)),
        p.pattern,
        bytes(p.window),
        if p.offset == 0 { String::new() } else { format!(", offset {}", p.offset) }
    )
}

fn bw_figures(points: &[BwPoint], out: &mut Vec<Figure>) {
    for p in points {
        let key = bw_point_key(p);
        let a = &p.achieved_bytes_per_second;
        out.push(Figure {
            key: format!("{key}: payload bandwidth (median)"),
            unit: "MB/s",
            clock: "card time",
            value: mbs(a.median),
            spread: runs_spread(a, 1e-6),
            note: None,
        });
        if let Some(e) = &p.efficiency {
            out.push(Figure {
                key: format!("{key}: efficiency (% of model)"),
                unit: "%",
                clock: "card time",
                value: e.median * 100.0,
                spread: runs_spread(e, 100.0),
                note: None,
            });
        }
        if let Some(m) = p.model_bytes_per_second {
            out.push(Figure {
                key: format!("{key}: model limit"),
                unit: "MB/s",
                clock: "computed (model)",
                value: mbs(m),
                spread: Spread::None,
                note: None,
            });
        }
    }
}

fn lat_figures(points: &[LatPoint], out: &mut Vec<Figure>) {
    for p in points {
        let Some(s) = &p.latency_ns else { continue };
        let mut samples = p.samples_ns();
        samples.sort_by(f64::total_cmp);
        for (name, q, value) in [("median", 0.5, s.median), ("p99", 0.99, s.p99)] {
            let spread = match quantile_ci(&samples, q) {
                Some((lo, hi)) => Spread::Samples { n: samples.len(), lo, hi },
                None => Spread::Range { n: s.count, lo: s.min, hi: s.max },
            };
            out.push(Figure { key: format!("{}: latency ({name})", p.label()), unit: "ns", clock: "card time", value, spread, note: None });
        }
    }
}

const SIM_WALL_NOTE: &str = "SIMULATED: host wall time of socket round trips to tlpx-sim, not a property of the card";

fn pio_figures(points: &[PioPoint], simulated: bool, out: &mut Vec<Figure>) {
    for p in points {
        let w = bytes(u64::from(p.width));
        if let Some(cw) = p.card_write_bytes_per_second {
            out.push(Figure {
                key: format!("PIO write {w}: card bandwidth"),
                unit: "MB/s",
                clock: "card time",
                value: mbs(cw),
                spread: Spread::None,
                note: None,
            });
        }
        out.push(Figure {
            key: format!("PIO read {w}: card bandwidth"),
            unit: "MB/s",
            clock: "card time",
            value: mbs(p.card_read_bytes_per_second),
            spread: Spread::None,
            note: None,
        });
        for (dir, s) in [("write", &p.write_wall_ns), ("read", &p.read_wall_ns)] {
            out.push(Figure {
                key: format!("PIO {dir} {w}: host time per access (median)"),
                unit: "ns",
                clock: "host wall time",
                value: s.median,
                spread: if simulated { Spread::Info } else { Spread::Range { n: s.count, lo: s.min, hi: s.max } },
                note: simulated.then_some(SIM_WALL_NOTE),
            });
        }
    }
}

/// A value's name as the document spells it ("idle", "user").
fn name<T: Serialize>(v: &T) -> String {
    match serde_json::to_value(v) {
        Ok(Value::String(s)) => s,
        other => format!("{other:?}"),
    }
}

/// The median and p99 of a summary of samples: a 95 % interval from the samples when the
/// document keeps them (sorted, in ns), else the samples' min..max.
fn quantile_figures(key: &str, s: &Summary, samples: Option<&[f64]>, out: &mut Vec<Figure>) {
    for (what, q, value) in [("median", 0.5, s.median), ("p99", 0.99, s.p99)] {
        let spread = match samples.and_then(|x| quantile_ci(x, q).map(|ci| (x.len(), ci))) {
            Some((n, (lo, hi))) => Spread::Samples { n, lo, hi },
            None => Spread::Range { n: s.count, lo: s.min, hi: s.max },
        };
        out.push(Figure { key: format!("{key} ({what})"), unit: "ns", clock: "card time", value, spread, note: None });
    }
}

/// Every figure of a document, in the order it holds them.
pub fn figures(d: &AnyResult) -> Result<Vec<Figure>, String> {
    let mut out = Vec::new();
    match d {
        AnyResult::Bw(d) => bw_figures(&d.body.points, &mut out),
        AnyResult::Lat(d) => lat_figures(&d.body.points, &mut out),
        AnyResult::Pio(d) => pio_figures(&d.body.points, d.environment.simulated, &mut out),
        AnyResult::Characterize(d) => {
            let b = &d.body;
            for r in &b.table {
                let Some(best) = r.best_bytes_per_second else { continue };
                // The spread of the point that achieved the best (DMA rows); PIO rows are one burst.
                let point =
                    b.points.iter().find(|p| Some(u64::from(p.transfer_size)) == r.at_bytes && p.achieved_bytes_per_second.median == best);
                out.push(Figure {
                    key: format!("{}: best sustained bandwidth", r.label),
                    unit: "MB/s",
                    clock: "card time",
                    value: mbs(best),
                    spread: point.map_or(Spread::None, |p| runs_spread(&p.achieved_bytes_per_second, 1e-6)),
                    note: None,
                });
            }
            bw_figures(&b.points, &mut out);
            lat_figures(&b.latency, &mut out);
            pio_figures(&b.pio, d.environment.simulated, &mut out);
        }
        AnyResult::Model(d) => {
            for p in &d.body.points {
                let op = match serde_json::to_value(p.operation) {
                    Ok(Value::String(s)) => s,
                    other => format!("{other:?}"),
                };
                out.push(Figure {
                    key: format!("model {op} {}: payload bandwidth", bytes(p.transfer_size)),
                    unit: "MB/s",
                    clock: "computed (model)",
                    value: mbs(p.bytes_per_second),
                    spread: Spread::None,
                    note: None,
                });
            }
        }
        AnyResult::Irq(d) => {
            for p in d.body.points.iter() {
                let ns = 1e9 / f64::from(p.clock_hz.max(1));
                let mut user: Vec<f64> = p.user_cycles.iter().filter(|&&c| c != u32::MAX).map(|&c| f64::from(c) * ns).collect();
                user.sort_by(f64::total_cmp);
                for st in p.stages.iter().filter(|st| st.measured) {
                    let Some(s) = &st.latency_ns else { continue };
                    let stage = name(&st.stage);
                    // The user stage's samples are in the document; the others' only as a summary.
                    let samples = (stage == "user" && !user.is_empty()).then_some(user.as_slice());
                    quantile_figures(&format!("interrupt latency, {} {stage}", name(&p.condition)), s, samples, &mut out);
                }
                // Per CPU (runs of --cpus): each CPU's user stage, from its samples.
                for c in &p.per_cpu {
                    if let Some((s, v)) = cpu_user_samples(p, c.cpu) {
                        quantile_figures(&format!("interrupt latency, {} user, CPU {}", name(&p.condition), c.cpu), &s, Some(&v), &mut out);
                    }
                }
            }
        }
        AnyResult::Loop(d) => {
            for p in d.body.points.iter() {
                let Some(s) = &p.loop_ns else { continue };
                let key = format!(
                    "loop time {}, {}, {}, {} return",
                    bytes(u64::from(p.size_bytes)),
                    name(&p.condition),
                    name(&p.detect),
                    name(&p.ret)
                );
                quantile_figures(&key, s, None, &mut out);
            }
        }
        other => {
            return Err(format!("tlpx diff compares results of kinds {}, not {:?}", DIFF_KINDS.join(", "), other.kind()));
        }
    }
    Ok(out)
}

// Context -----------------------------------------------------------------------------------

/// What a document was measured on: the clock, the card, the link and the host.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Context {
    /// "simulated" or "hardware" (none when no card was opened).
    pub card: String,
    /// The time mode: "virtual", "live", "real_host_time", "hardware" or "none".
    pub time_mode: String,
    pub link: String,
    pub host: String,
    /// pcie-bench's host knobs as the document records them: the cache state, the node asked
    /// and the nodes the kernel put the buffers on, the IOMMU page size and mode.
    pub host_memory: String,
    pub created: String,
}

impl Context {
    pub fn of<P: Serialize, B: Serialize>(d: &ResultDoc<P, B>) -> Context {
        let env = &d.environment;
        let card = match (&env.backend, env.simulated) {
            (None, _) => "none (no card opened)".to_string(),
            (Some(_), true) => "simulated (tlpx-sim)".to_string(),
            (Some(b), false) => format!("hardware ({b})"),
        };
        let time_mode = match serde_json::to_value(d.time_mode) {
            Ok(Value::String(s)) => s,
            _ => "none".into(),
        };
        let link = match (&d.link, env.sim.as_ref()) {
            (Some(l), _) => l.to_string(),
            (None, Some(s)) => {
                let m = &s.link_model;
                format!("Gen{} x{}, MPS {}, MRRS {} (simulator's model)", m.generation, m.lanes, m.mps, m.mrrs)
            }
            (None, None) => "unknown".into(),
        };
        Context {
            card,
            time_mode,
            link,
            host: env.host_name.clone().unwrap_or_else(|| "unknown".into()),
            host_memory: host_memory_context(&serde_json::to_value(&d.parameters).unwrap_or(Value::Null), env),
            created: d.created.clone(),
        }
    }
}

/// "cache cold, buffers on any node (kernel: node 0), IOMMU pages default, IOMMU none".
fn host_memory_context(parameters: &Value, env: &crate::results::Environment) -> String {
    let cache = parameters.get("cache").and_then(Value::as_str).unwrap_or("host-warm");
    let asked = parameters.get("numa_node").and_then(Value::as_u64).map_or("any node".to_string(), |n| format!("node {n}"));
    let seen: std::collections::BTreeSet<&str> = env.dma_buffers.iter().flat_map(|b| b.pages_by_node.keys().map(String::as_str)).collect();
    let seen =
        if seen.is_empty() { "none recorded".to_string() } else { format!("node {}", seen.into_iter().collect::<Vec<_>>().join(",")) };
    let pages = parameters.get("iommu_pages").and_then(Value::as_str).unwrap_or("default");
    let iommu = env.host_memory.as_ref().map_or("unknown", |r| r.iommu.split(" (").next().unwrap_or("unknown"));
    format!("cache {cache}, buffers on {asked} (kernel: {seen}), IOMMU pages {pages}, IOMMU {iommu}")
}

/// The context of any document.
pub fn context(d: &AnyResult) -> Context {
    match d {
        AnyResult::Bw(d) => Context::of(d),
        AnyResult::BwDriver(d) => Context::of(d),
        AnyResult::Lat(d) => Context::of(d),
        AnyResult::Pio(d) => Context::of(d),
        AnyResult::Characterize(d) => Context::of(d),
        AnyResult::Model(d) => Context::of(d),
        AnyResult::Irq(d) => Context::of(d),
        AnyResult::Loop(d) => Context::of(d),
        AnyResult::Rule30(d) => Context::of(d),
        AnyResult::Spy(d) => Context::of(d),
        AnyResult::Script(d) => Context::of(d),
    }
}

// Comparing -----------------------------------------------------------------------------------

#[derive(Debug, Clone, Serialize)]
pub struct ContextRow {
    pub what: &'static str,
    pub a: String,
    pub b: String,
    pub differs: bool,
}

/// One figure of A against the same figure of B.
#[derive(Debug, Clone, Serialize)]
pub struct Row {
    pub figure: String,
    pub unit: &'static str,
    pub clock: &'static str,
    pub a: Option<f64>,
    pub b: Option<f64>,
    /// B − A, in the unit.
    pub change: Option<f64>,
    /// (B − A) / |A| in %.
    pub change_percent: Option<f64>,
    pub spread_a: Option<Spread>,
    pub spread_b: Option<Spread>,
    /// The rule the verdict comes from, in words.
    pub rule: String,
    pub changed: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

#[derive(Debug, Clone, Serialize)]
pub struct Diff {
    pub kind: &'static str,
    /// The noise floor, a fraction of A's value.
    pub threshold: f64,
    pub context: Vec<ContextRow>,
    /// The documents' clocks or cards differ (compared only because the caller accepted it).
    pub clocks_differ: bool,
    pub rows: Vec<Row>,
    /// Rows that changed.
    pub changed: usize,
    /// Rows with a value in both documents: the figures compared (the others are only in one).
    pub compared: usize,
}

/// Why two documents cannot be compared figure by figure.
pub fn clock_mismatch(a: &Context, b: &Context) -> Option<String> {
    if a.card != b.card {
        return Some(format!("measured on different cards: A on {}, B on {}", a.card, b.card));
    }
    if a.time_mode != b.time_mode {
        return Some(format!("measured on different clocks: A in time mode {:?}, B in {:?}", a.time_mode, b.time_mode));
    }
    None
}

/// Compares B against A. Both must be of the same kind (checked by the caller, which names
/// the files); `accept_clocks` compares documents of different clocks or cards, flagged.
/// A CPU's user-stage summary and sorted samples (ns) in a per-CPU run; `None` without samples.
fn cpu_user_samples(p: &tlpx_results::irq::RunReport, cpu: u32) -> Option<(Summary, Vec<f64>)> {
    let mut v = p.user_samples_ns_of(cpu);
    v.sort_by(f64::total_cmp);
    Some((Summary::of(&v)?, v))
}

/// The CPUs of one per-CPU `irq` document against each other: every CPU's user stage (median,
/// p99, with the samples' confidence intervals) against the baseline CPU's (`baseline`, else
/// the first measured), per condition. Rows are keyed "<condition> user, CPU <c>"; A is the
/// baseline CPU's figure, B that CPU's.
pub fn compare_cpus(d: &AnyResult, baseline: Option<u32>, threshold: f64) -> Result<Diff, String> {
    let AnyResult::Irq(doc) = d else {
        return Err(format!(
            "comparing the CPUs of one document needs an irq result of a per-CPU run (--cpus), not a {:?} result",
            d.kind()
        ));
    };
    let mut fa = Vec::new();
    let mut fb = Vec::new();
    for p in doc.body.points.iter() {
        let Some(first) = p.per_cpu.first() else { continue };
        let base = baseline.unwrap_or(first.cpu);
        if !p.per_cpu.iter().any(|c| c.cpu == base) {
            let cpus: Vec<String> = p.per_cpu.iter().map(|c| c.cpu.to_string()).collect();
            return Err(format!("--baseline-cpu {base} was not measured in this run; its CPUs are {}", cpus.join(",")));
        }
        let Some((bs, bv)) = cpu_user_samples(p, base) else { continue };
        for c in p.per_cpu.iter().filter(|c| c.cpu != base) {
            let Some((s, v)) = cpu_user_samples(p, c.cpu) else { continue };
            let key = format!("interrupt latency, {} user, CPU {} against CPU {base}", name(&p.condition), c.cpu);
            quantile_figures(&key, &bs, Some(&bv), &mut fa);
            quantile_figures(&key, &s, Some(&v), &mut fb);
        }
    }
    if fa.is_empty() {
        return Err("this document has no per-CPU samples of two CPUs or more (a run of tlpx irq --cpus LIST keeps them)".into());
    }
    let ctx = context(d);
    let context = [("card", &ctx.card), ("time mode", &ctx.time_mode), ("link", &ctx.link), ("host", &ctx.host)]
        .into_iter()
        .map(|(what, x)| ContextRow { what, a: x.clone(), b: x.clone(), differs: false })
        .collect();
    let rows: Vec<Row> = fa.iter().zip(&fb).map(|(a, b)| judge(Some(a), Some(b), threshold, false)).collect();
    let changed = rows.iter().filter(|r| r.changed).count();
    let compared = rows.len();
    Ok(Diff { kind: d.kind(), threshold, context, clocks_differ: false, rows, changed, compared })
}

pub fn compare(a: &AnyResult, b: &AnyResult, threshold: f64, accept_clocks: bool) -> Result<Diff, String> {
    if a.kind() != b.kind() {
        return Err(format!("A is a {:?} result and B a {:?} result: tlpx diff compares results of the same kind", a.kind(), b.kind()));
    }
    let (ca, cb) = (context(a), context(b));
    let mismatch = clock_mismatch(&ca, &cb);
    if let (Some(m), false) = (&mismatch, accept_clocks) {
        return Err(format!("{m}; their figures are not comparable (pass --across-clocks to see them side by side, flagged)"));
    }
    let context = [
        ("card", &ca.card, &cb.card),
        ("time mode", &ca.time_mode, &cb.time_mode),
        ("link", &ca.link, &cb.link),
        ("host", &ca.host, &cb.host),
        ("host memory", &ca.host_memory, &cb.host_memory),
        ("created", &ca.created, &cb.created),
    ]
    .into_iter()
    .map(|(what, x, y)| ContextRow { what, a: x.clone(), b: y.clone(), differs: x != y })
    .collect();
    let (fa, fb) = (figures(a)?, figures(b)?);
    let mut by_key: BTreeMap<&str, &Figure> = fb.iter().map(|f| (f.key.as_str(), f)).collect();
    let mut rows = Vec::new();
    for f in &fa {
        let other = by_key.remove(f.key.as_str());
        rows.push(judge(Some(f), other, threshold, mismatch.is_some()));
    }
    // Figures only B has, in B's order.
    for f in &fb {
        if by_key.contains_key(f.key.as_str()) {
            rows.push(judge(None, Some(f), threshold, mismatch.is_some()));
        }
    }
    let changed = rows.iter().filter(|r| r.changed).count();
    let compared = rows.iter().filter(|r| r.a.is_some() && r.b.is_some()).count();
    Ok(Diff { kind: a.kind(), threshold, context, clocks_differ: mismatch.is_some(), rows, changed, compared })
}

fn overlap(a: (f64, f64), b: (f64, f64)) -> bool {
    a.0 <= b.1 && b.0 <= a.1
}

fn judge(a: Option<&Figure>, b: Option<&Figure>, threshold: f64, clocks_differ: bool) -> Row {
    let f = a.or(b).expect("one side at least");
    let mut row = Row {
        figure: f.key.clone(),
        unit: f.unit,
        clock: f.clock,
        a: a.map(|x| x.value),
        b: b.map(|x| x.value),
        change: None,
        change_percent: None,
        spread_a: a.map(|x| x.spread),
        spread_b: b.map(|x| x.spread),
        rule: String::new(),
        changed: false,
        note: a.and_then(|x| x.note).or(b.and_then(|x| x.note)).map(str::to_string),
    };
    let (Some(a), Some(b)) = (a, b) else {
        row.rule = format!("only in {}: not compared", if row.a.is_some() { "A" } else { "B" });
        return row;
    };
    let change = b.value - a.value;
    row.change = Some(change);
    row.change_percent = (a.value != 0.0).then(|| change / a.value.abs() * 100.0);
    let floor = threshold * a.value.abs();
    let pct = format!("{:.3}", threshold * 100.0);
    let pct = pct.trim_end_matches('0').trim_end_matches('.');
    if clocks_differ {
        row.rule = "CLOCKS DIFFER: shown, not judged".into();
        return row;
    }
    if a.spread == Spread::Info || b.spread == Spread::Info {
        row.rule = "information only: never counted".into();
        return row;
    }
    let (ia, ib) = (a.spread.interval(), b.spread.interval());
    if ia.is_none() && ib.is_none() {
        row.rule = format!("no spread recorded: changed when |change| > {pct} % of A");
        row.changed = change.abs() > floor;
        return row;
    }
    let ia = ia.unwrap_or((a.value, a.value));
    let ib = ib.unwrap_or((b.value, b.value));
    row.rule = format!("changed when the spreads do not overlap and |change| > {pct} % of A");
    row.changed = !overlap(ia, ib) && change.abs() > floor;
    row
}

/// A value in a figure's unit for tables: three significant digits at most, whole units kept.
pub fn value_text(v: f64, unit: &str) -> String {
    let a = v.abs();
    let s = if a >= 100.0 || a == 0.0 {
        format!("{v:.0}")
    } else if a >= 10.0 {
        format!("{v:.1}")
    } else if a >= 1.0 {
        format!("{v:.2}")
    } else {
        format!("{v:.3}")
    };
    if unit.is_empty() {
        s
    } else {
        format!("{s} {unit}")
    }
}

impl Row {
    /// The cells of the row as `tlpx diff` and the report show them.
    pub fn cells(&self) -> Vec<String> {
        let v = |x: Option<f64>| x.map_or("–".into(), |x| value_text(x, ""));
        let change = match (self.change, self.change_percent) {
            (Some(c), Some(p)) => format!("{}{} ({:+.1} %)", if c >= 0.0 { "+" } else { "" }, value_text(c, ""), p),
            (Some(c), None) => format!("{}{}", if c >= 0.0 { "+" } else { "" }, value_text(c, "")),
            _ => "–".into(),
        };
        let spread = |s: Option<Spread>| s.map_or("–".into(), |s| s.text(|x| value_text(x, "")));
        let mut rule = self.rule.clone();
        if let Some(n) = &self.note {
            rule = format!("{rule} ({n})");
        }
        vec![
            self.figure.clone(),
            format!("{}, {}", self.unit, self.clock),
            v(self.a),
            v(self.b),
            change,
            spread(self.spread_a),
            spread(self.spread_b),
            if self.changed { "CHANGED".into() } else { "no".into() },
            rule,
        ]
    }
}

/// The heads of [`Row::cells`].
pub const HEAD: [&str; 9] = ["figure", "unit, clock", "A", "B", "change (B − A)", "spread A", "spread B", "changed", "rule"];

#[cfg(test)]
mod tests {
    use super::*;

    fn doc(kind: &str) -> Value {
        let text = match kind {
            "characterize" => include_str!("../../tests/fixtures/results/characterize.json"),
            "lat" => include_str!("../../tests/fixtures/results/lat.json"),
            "pio" => include_str!("../../tests/fixtures/results/pio.json"),
            "irq" => include_str!("../../tests/fixtures/results/irq.json"),
            "loop" => include_str!("../../tests/fixtures/results/loop.json"),
            _ => include_str!("../../tests/fixtures/results/bw.json"),
        };
        serde_json::from_str(text).expect("JSON")
    }

    fn read(v: Value) -> AnyResult {
        AnyResult::from_value(v).expect("a kind").expect("read")
    }

    #[test]
    fn a_document_against_itself_has_no_change() {
        for kind in ["characterize", "lat", "pio", "bw", "irq", "loop"] {
            let a = read(doc(kind));
            let b = read(doc(kind));
            let d = compare(&a, &b, DEFAULT_THRESHOLD, false).expect("compared");
            assert!(!d.rows.is_empty(), "{kind}: figures");
            assert_eq!(d.changed, 0, "{kind}");
            assert!(d.rows.iter().all(|r| r.change == Some(0.0) || r.rule.starts_with("information")), "{kind}");
        }
    }

    #[test]
    fn a_change_beyond_the_spread_counts_and_one_within_it_does_not() {
        let mut v = doc("bw");
        let base = v["points"][0]["achieved_bytes_per_second"]["median"].as_f64().expect("median");
        // 10 % faster, the single run recording no spread: the threshold decides.
        v["points"][0]["achieved_bytes_per_second"]["median"] = (base * 1.1).into();
        let d = compare(&read(doc("bw")), &read(v.clone()), DEFAULT_THRESHOLD, false).expect("compared");
        let r = &d.rows[0];
        assert!(r.changed && r.rule.starts_with("no spread recorded"), "{r:?}");
        assert_eq!(d.changed, 1);
        // The same change inside a spread of runs [0.8, 1.2] × base on both sides: not a change.
        let s = &mut v["points"][0]["achieved_bytes_per_second"];
        s["count"] = 3.into();
        s["min"] = (base * 0.8).into();
        s["max"] = (base * 1.2).into();
        let mut a = doc("bw");
        let s = &mut a["points"][0]["achieved_bytes_per_second"];
        s["count"] = 3.into();
        s["min"] = (base * 0.9).into();
        s["max"] = (base * 1.05).into();
        let d = compare(&read(a), &read(v), DEFAULT_THRESHOLD, false).expect("compared");
        assert!(!d.rows[0].changed && d.rows[0].rule.contains("spreads do not overlap"), "{:?}", d.rows[0]);
        // A change below the threshold never counts.
        let mut v = doc("bw");
        v["points"][0]["achieved_bytes_per_second"]["median"] = (base * 1.01).into();
        let d = compare(&read(doc("bw")), &read(v), DEFAULT_THRESHOLD, false).expect("compared");
        assert!(!d.rows[0].changed);
    }

    #[test]
    fn different_kinds_and_clocks_are_refused() {
        let e = compare(&read(doc("bw")), &read(doc("lat")), DEFAULT_THRESHOLD, false).expect_err("kinds");
        assert!(e.contains("\"bw\"") && e.contains("\"lat\""), "{e}");
        let mut hw = doc("bw");
        hw["environment"]["simulated"] = false.into();
        hw["environment"]["backend"] = "vfio".into();
        hw["time_mode"] = "hardware".into();
        let e = compare(&read(doc("bw")), &read(hw.clone()), DEFAULT_THRESHOLD, false).expect_err("cards");
        assert!(e.contains("simulated") && e.contains("hardware") && e.contains("--across-clocks"), "{e}");
        let d = compare(&read(doc("bw")), &read(hw), DEFAULT_THRESHOLD, true).expect("accepted");
        assert!(d.clocks_differ && d.changed == 0 && d.rows.iter().all(|r| r.rule.starts_with("CLOCKS DIFFER")));
        let mut live = doc("bw");
        live["time_mode"] = "live".into();
        let e = compare(&read(doc("bw")), &read(live), DEFAULT_THRESHOLD, false).expect_err("time modes");
        assert!(e.contains("\"virtual\"") && e.contains("\"live\""), "{e}");
    }

    #[test]
    fn latency_intervals_come_from_the_samples() {
        let sorted: Vec<f64> = (1..=100).map(f64::from).collect();
        let (lo, hi) = quantile_ci(&sorted, 0.5).expect("ci");
        // n = 100: ranks 50 ∓ 9.8 → 40 and 61.
        assert_eq!((lo, hi), (40.0, 61.0));
        assert_eq!(quantile_ci(&[5.0], 0.5), Some((5.0, 5.0)));
        assert_eq!(quantile_ci(&[], 0.5), None);
        let d = compare(&read(doc("lat")), &read(doc("lat")), DEFAULT_THRESHOLD, false).expect("compared");
        assert!(d.rows.iter().all(|r| matches!(r.spread_a, Some(Spread::Samples { .. }))), "{:?}", d.rows);
    }

    #[test]
    fn interrupt_and_loop_figures_carry_the_spread_their_documents_keep() {
        let d = compare(&read(doc("irq")), &read(doc("irq")), DEFAULT_THRESHOLD, false).expect("compared");
        let user = d.rows.iter().find(|r| r.figure.ends_with(" user (median)")).expect("the user stage");
        assert!(matches!(user.spread_a, Some(Spread::Samples { .. })), "{user:?}");
        assert!(d.rows.iter().all(|r| r.unit == "ns" && r.clock == "card time"));
        let mut v = doc("loop");
        let s = &mut v["points"][0]["loop_ns"];
        let (median, max) = (s["median"].as_f64().expect("median"), s["max"].as_f64().expect("max"));
        // Twice as slow, beyond the range of A's samples: changed.
        s["median"] = (median * 2.0).into();
        s["min"] = (max * 1.5).into();
        s["max"] = (max * 3.0).into();
        let d = compare(&read(doc("loop")), &read(v), DEFAULT_THRESHOLD, false).expect("compared");
        let r = &d.rows[0];
        assert!(r.figure.starts_with("loop time ") && r.figure.ends_with("(median)") && r.changed, "{r:?}");
        assert!(matches!(r.spread_a, Some(Spread::Range { .. })));
    }

    #[test]
    fn simulated_host_wall_times_are_shown_not_counted() {
        let mut v = doc("pio");
        v["points"][0]["write_wall_ns"]["median"] = 1e9.into();
        let d = compare(&read(doc("pio")), &read(v), DEFAULT_THRESHOLD, false).expect("compared");
        let r = d.rows.iter().find(|r| r.figure.contains("host time per access")).expect("a wall row");
        assert!(!r.changed && r.note.as_deref().is_some_and(|n| n.contains("tlpx-sim")), "{r:?}");
        assert_eq!(d.changed, 0);
    }
}
