//! `tlpx report`'s section for the kind `rule30`.
//!
//! Compiled into the `tlpx` crate as a child of `cmd::report` (its `#[path]` declaration is in
//! host/crates/tlpx/src/cmd/report/mod.rs); the page's shared pieces are there and in `sections.rs`.

use super::*;

pub(super) fn rule30_section(body: &rule30::Body, tables: &mut String, figs: &mut Figures) -> R<()> {
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
