//! `tlpx report`'s section for the kind `irq`.
//!
//! Compiled into the `tlpx` crate as a child of `cmd::report` (its `#[path]` declaration is in
//! host/crates/tlpx/src/cmd/report/mod.rs); the page's shared pieces are there and in `sections.rs`.

use super::*;

pub(super) fn irq_section(points: &[RunReport], clock: &str, tables: &mut String, figs: &mut Figures) -> R<()> {
    let mut rows = Vec::new();
    // A run Ctrl-C cut short holds fewer interrupts than asked: its rows say so.
    let label = |p: &RunReport, s: &StageReport| {
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
