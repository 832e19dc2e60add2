//! `tlpx report`'s sections for the generator's kinds: `bw`, `lat`, `characterize`'s table, `bw_driver`.
//!
//! Compiled into the `tlpx` crate as a child of `cmd::report` (its `#[path]` declaration is in
//! host/crates/tlpx/src/cmd/report/mod.rs); the page's shared pieces are there and in `sections.rs`.

use super::*;

/// One operation's measured series of a bandwidth figure.
#[derive(Default)]
struct OpSeries {
    operation: Option<Operation>,
    /// Per (pattern, window, offset): (transfer size, median MB/s).
    measured: BTreeMap<String, Vec<(f64, f64)>>,
    /// The document's model figure at each measured size, MB/s.
    model: Vec<(f64, f64)>,
}

pub(super) fn bw_section(model: Option<&LinkConfig>, points: &[BwPoint], sim: bool, tables: &mut String, figs: &mut Figures) -> R<()> {
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

pub(super) fn lat_section(points: &[LatPoint], sim: bool, tables: &mut String, figs: &mut Figures) -> R<()> {
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

pub(super) fn characterize_table(rows_in: &[TableRow], sim: bool, tables: &mut String) {
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

/// `tlpx bw` through LitePCIe's driver: its DMA in loopback, one row per run, both clocks.
pub(super) fn bw_driver_section(params: &bw_driver::Parameters, body: &bw_driver::Body, tables: &mut String) {
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
