//! The sections of one result: a table and figures per kind (`tlpx report`).

use super::*;

pub(super) fn comparison_html(comparison: Option<&Comparison>, detection: Option<&str>, tables: &mut String) {
    if let Some(c) = comparison {
        let _ = write!(tables, "<p class=\"note\"><b>Idle vs loaded:</b> {}</p>", esc(&c.statement));
    }
    if let Some(d) = detection {
        let _ = write!(tables, "<p class=\"note\"><b>irq vs poll:</b> {}</p>", esc(d));
    }
}

/// An efficiency fraction as the report shows it: "99.9 %".
pub(super) fn percent(fraction: f64) -> String {
    format!("{:.1} %", fraction * 100.0)
}

/// The sentence beside every efficiency figure of a simulated document.
pub(super) const SIM_EFFICIENCY_NOTE: &str =
    "Efficiency = achieved / model, in %. SIMULATED: tlpx-sim paces its link with this same model, \
                                   so efficiency cannot exceed 100 % by construction; it shows how near the card's gateware \
                                   comes to the model, not how good a host is.";

/// The start of [`SIM_EFFICIENCY_NOTE`] as it stands in the page (no character in it is escaped).
pub(super) const SIM_EFFICIENCY_NOTE_HTML: &str = "Efficiency = achieved / model, in %.";

pub(super) fn op_label(name: &str) -> &str {
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
pub(super) struct OpSeries {
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

pub(super) fn pio_section(points: &[PioPoint], sim: bool, tables: &mut String, figs: &mut Figures) -> R<()> {
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

pub(super) fn model_section(body: &model::Body, tables: &mut String, figs: &mut Figures) -> R<()> {
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

pub(super) fn script_section(params: &script::RunParameters, body: &script::RunBody, tables: &mut String, figs: &mut Figures) -> R<()> {
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

pub(super) fn spy_section(points: &[SpyStats], tables: &mut String, figs: &mut Figures) -> R<()> {
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
