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
    per_cpu_section(points, clock, tables, figs)
}

/// Per CPU (runs of `--cpus`): a row per condition and CPU, and the CPUs' user stages overlaid.
fn per_cpu_section(points: &[RunReport], clock: &str, tables: &mut String, figs: &mut Figures) -> R<()> {
    let mut rows = Vec::new();
    for p in points {
        for c in &p.per_cpu {
            let role = if c.role.is_empty() { String::new() } else { format!(" ({})", c.role) };
            let mut row = vec![format!("{} CPU {}{role}", text(&p.condition), c.cpu), c.fires.to_string(), c.woke_elsewhere.to_string()];
            row.extend(stats_cells(c.user_ns.as_ref(), fmt_ns));
            rows.push(row);
        }
    }
    if rows.is_empty() {
        return Ok(());
    }
    let simulated = clock.contains("simulated");
    let _ = write!(
        tables,
        "<h3>Interrupt latency per CPU, user stage ({}{})</h3>",
        esc(clock),
        if simulated { "; SIMULATED: the thread's wake-up on that CPU from the simulator's socket reply, no kernel interrupt" } else { "" }
    );
    tables.push_str(&table(&with_stats_head(&["condition, CPU", "fires", "woke elsewhere"]), &rows));
    if let Some((series, bins)) = irq::percpu::per_cpu_histograms(points) {
        figs.log_chart(
            &format!(
                "User stage per CPU{}: {bins}, log count",
                if simulated { " (SIMULATED: socket wake-up, no kernel dispatch)" } else { "" }
            ),
            &LogChart {
                title: "Interrupt latency per CPU".into(),
                x_label: format!("latency ({bins} from the samples)"),
                y_label: "interrupts (log scale)".into(),
                x_ticks: Ticks::Ns,
                y_ticks: Ticks::Count,
                series,
            },
        )?;
    }
    Ok(())
}
