//! `tlpx report`'s section for the kind `loop`.
//!
//! Compiled into the `tlpx` crate as a child of `cmd::report` (its `#[path]` declaration is in
//! host/crates/tlpx/src/cmd/report/mod.rs); the page's shared pieces are there and in `sections.rs`.

use super::*;

pub(super) fn loop_section(points: &[LoopPoint], clock: &str, tables: &mut String, figs: &mut Figures) -> R<()> {
    // One histogram per (condition, detection, return), one series per size.
    let mut groups: BTreeMap<String, Vec<LoopPoint>> = BTreeMap::new();
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
