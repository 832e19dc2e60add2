//! The comparison of results of one kind: overlaid figures and tables of differences.

use super::*;

/// The kinds whose results are overlaid when the report is given more than one of them.
const OVERLAY_KINDS: &[&str] = &["bw", "lat", "pio", "characterize", "irq", "loop"];

/// Groups of at least two documents of one overlaid kind (indices into `docs`), in the order
/// the kinds first appear.
pub(super) fn comparable_groups(docs: &[(String, AnyResult)]) -> Vec<(&'static str, Vec<usize>)> {
    let mut groups: Vec<(&'static str, Vec<usize>)> = Vec::new();
    for (i, (_, d)) in docs.iter().enumerate() {
        let kind = d.kind();
        if !OVERLAY_KINDS.contains(&kind) {
            continue;
        }
        match groups.iter_mut().find(|(k, _)| *k == kind) {
            Some((_, members)) => members.push(i),
            None => groups.push((kind, vec![i])),
        }
    }
    groups.retain(|(_, m)| m.len() > 1);
    groups
}

fn bw_points_of(d: &AnyResult) -> &[BwPoint] {
    match d {
        AnyResult::Bw(d) => &d.body.points,
        AnyResult::Characterize(d) => &d.body.points,
        _ => &[],
    }
}

fn lat_points_of(d: &AnyResult) -> &[LatPoint] {
    match d {
        AnyResult::Lat(d) => &d.body.points,
        AnyResult::Characterize(d) => &d.body.latency,
        _ => &[],
    }
}

fn pio_points_of(d: &AnyResult) -> &[PioPoint] {
    match d {
        AnyResult::Pio(d) => &d.body.points,
        AnyResult::Characterize(d) => &d.body.pio,
        _ => &[],
    }
}

/// Histogram buckets: (from ns, to ns, count).
type Buckets = Vec<(f64, f64, f64)>;

/// One histogram of a result: its samples in ns when the result keeps them (bins are then
/// chosen from the samples), and the card's log2 buckets.
struct Histogram {
    samples: Option<Vec<f64>>,
    log2: Buckets,
}

/// The histograms of an irq or loop result, by what they measure ("idle user",
/// "loop 64 B, idle, poll, register return").
fn histograms_of(d: &AnyResult) -> Vec<(String, Histogram)> {
    match d {
        AnyResult::Irq(d) => d
            .body
            .points
            .iter()
            .flat_map(|p| {
                p.stages.iter().filter(|s| s.measured).map(move |s| {
                    let samples = p.user_samples_ns();
                    (
                        format!("interrupt latency, {} {}", text(&p.condition), text(&s.stage)),
                        Histogram {
                            samples: (s.stage == tlpx_device::irq_timer::Stage::User && !samples.is_empty()).then_some(samples),
                            log2: plot::log2_buckets(&s.card.histogram, p.clock_hz),
                        },
                    )
                })
            })
            .collect(),
        AnyResult::Loop(d) => d
            .body
            .points
            .iter()
            .map(|p| {
                (
                    format!(
                        "loop time {}, {}, {}, {} return",
                        bytes(u64::from(p.size_bytes)),
                        text(&p.condition),
                        text(&p.detect),
                        text(&p.ret)
                    ),
                    Histogram {
                        samples: (!p.loop_cycles.is_empty()).then(|| p.loop_samples_ns()),
                        log2: plot::log2_buckets(&p.card.histogram, p.clock_hz),
                    },
                )
            })
            .collect(),
        _ => Vec::new(),
    }
}

fn model_of(d: &AnyResult) -> Option<&LinkConfig> {
    match d {
        AnyResult::Bw(d) => d.model.as_ref().map(|m| &m.link),
        AnyResult::Characterize(d) => d.model.as_ref().map(|m| &m.link),
        _ => None,
    }
}

/// Each compared document's label in figures: "#n" and what tells it apart from the others
/// (the link, the host, the parameters, the time), most telling first.
fn overlay_labels(members: &[usize], docs: &[(String, AnyResult)]) -> Vec<String> {
    let contexts: Vec<diff::Context> = members.iter().map(|&i| diff::context(&docs[i].1)).collect();
    let params: Vec<BTreeMap<String, String>> = members.iter().map(|&i| parameters_of(&docs[i].1)).collect();
    let differs = |f: &dyn Fn(usize) -> String| members.iter().enumerate().any(|(k, _)| f(k) != f(0));
    let mut differing_params: Vec<&String> = params[0].keys().filter(|k| k.as_str() != "out_dir").collect();
    differing_params.retain(|key| differs(&|k| params[k].get(*key).cloned().unwrap_or_default()));
    members
        .iter()
        .enumerate()
        .map(|(k, &i)| {
            let c = &contexts[k];
            let mut parts = vec![format!("#{}", i + 1)];
            if differs(&|k| contexts[k].link.clone()) {
                parts.push(c.link.split(", MRRS").next().unwrap_or(&c.link).to_string());
            }
            if differs(&|k| contexts[k].host.clone()) {
                parts.push(c.host.clone());
            }
            for key in &differing_params {
                parts.push(format!("{key} {}", params[k].get(*key).map_or("–", String::as_str)));
            }
            if parts.len() == 1 {
                parts.push(c.created.clone());
            }
            parts.join(", ")
        })
        .collect()
}

/// A document's parameters as rounded text, by name.
fn parameters_of(d: &AnyResult) -> BTreeMap<String, String> {
    let v = match d {
        AnyResult::Bw(d) => serde_json::to_value(&d.parameters),
        AnyResult::Lat(d) => serde_json::to_value(&d.parameters),
        AnyResult::Pio(d) => serde_json::to_value(&d.parameters),
        AnyResult::Characterize(d) => serde_json::to_value(&d.parameters),
        _ => Ok(Value::Null),
    };
    match v {
        Ok(Value::Object(m)) => m.iter().map(|(k, v)| (k.clone(), plain(v))).collect(),
        _ => BTreeMap::new(),
    }
}

pub(super) fn comparison_section(n: usize, kind: &str, members: &[usize], docs: &[(String, AnyResult)]) -> R<Section> {
    let labels = overlay_labels(members, docs);
    let first = &docs[members[0]].1;
    let mut body = String::new();
    let mut figs = Figures::new();
    let clock = compared_table(members, &labels, docs, &mut body);
    bw_overlays(members, &labels, docs, clock, &mut figs)?;
    lat_overlays(members, &labels, docs, clock, &mut figs)?;
    pio_overlay(members, &labels, docs, &mut figs)?;
    histogram_overlays(members, &labels, docs, &mut figs)?;
    body.push_str(&figs.html);
    differences(kind, first, members, &labels, docs, &mut body)?;
    let files: Vec<String> = members.iter().map(|&i| format!("#{} {}", i + 1, docs[i].0)).collect();
    Ok(Section {
        anchor: format!("r{n}"),
        heading: format!("Comparison of {} {} results: {}", members.len(), kind, files.join(", ")),
        body,
        figures: figs.count,
    })
}

/// What was compared, and whether the clocks allow it: a badge when they differ, and a table
/// of the results. Gives the name of the figures' clock.
fn compared_table(members: &[usize], labels: &[String], docs: &[(String, AnyResult)], body: &mut String) -> &'static str {
    let c0 = diff::context(&docs[members[0]].1);
    let mut mismatch = None;
    let mut rows = Vec::new();
    for (&i, label) in members.iter().zip(labels) {
        let c = diff::context(&docs[i].1);
        if mismatch.is_none() {
            mismatch = diff::clock_mismatch(&c0, &c);
        }
        rows.push(vec![label.clone(), docs[i].0.clone(), c.card, c.time_mode, c.link, c.host, c.created]);
    }
    if let Some(m) = &mismatch {
        let _ = write!(
            body,
            "<p class=\"badge warn\">CLOCKS DIFFER: {}. The figures are overlaid for reading, but no difference is judged.</p>",
            esc(m)
        );
    }
    body.push_str("<h3>Results compared</h3>");
    body.push_str(&table(&["label", "file", "card", "time mode", "link", "host", "created"], &rows));
    let sim = members.iter().all(|&i| diff::context(&docs[i].1).card.starts_with("simulated"));
    if sim {
        "card time, simulated"
    } else {
        "card time"
    }
}

/// Bandwidth against size: one figure per operation, a colour per result.
fn bw_overlays(members: &[usize], labels: &[String], docs: &[(String, AnyResult)], clock: &str, figs: &mut Figures) -> R<()> {
    let mut ops: Vec<Operation> = Vec::new();
    for &i in members {
        for p in bw_points_of(&docs[i].1) {
            if !ops.contains(&p.config.operation) {
                ops.push(p.config.operation);
            }
        }
    }
    for op in ops {
        let mut series = Vec::new();
        let models: Vec<Option<&LinkConfig>> = members.iter().map(|&i| model_of(&docs[i].1)).collect();
        let one_model = models.iter().all(|m| m == &models[0]);
        for (k, (&i, label)) in members.iter().zip(labels).enumerate() {
            let mine: Vec<&BwPoint> = bw_points_of(&docs[i].1).iter().filter(|p| p.config.operation == op).collect();
            let lo = mine.iter().map(|p| u64::from(p.transfer_size)).min().unwrap_or(64);
            let hi = mine.iter().map(|p| u64::from(p.transfer_size)).max().unwrap_or(lo);
            if let Some(mut m) = models[k].and_then(|m| characterize::model_series(m, op, lo, hi)) {
                if !one_model || k == 0 {
                    if !one_model {
                        m.label = format!("model, {label}");
                    }
                    series.push(m);
                }
            }
            let mut pts: Vec<(f64, f64)> =
                mine.iter().map(|p| (f64::from(p.transfer_size), p.achieved_bytes_per_second.median / 1e6)).collect();
            pts.sort_by(|a, b| a.0.total_cmp(&b.0));
            series.push(Series { label: label.clone(), points: pts, style: Style::Points });
        }
        let title = format!("{} bandwidth against transfer size, {} results", op_label(&text(&op)), members.len());
        figs.chart(
            &format!("{}: achieved payload bandwidth (median) of each result, with the model's limit", op_label(&text(&op))),
            &Chart {
                title,
                x_label: "transfer size".into(),
                y_label: format!("payload MB/s ({clock})"),
                x_axis: XAxis::Log2Bytes,
                y_range: None,
                series,
            },
        )?;
    }
    Ok(())
}

/// Latency CDFs: one figure per measurement, a line per result.
fn lat_overlays(members: &[usize], labels: &[String], docs: &[(String, AnyResult)], clock: &str, figs: &mut Figures) -> R<()> {
    let mut measurements: Vec<String> = Vec::new();
    for &i in members {
        for p in lat_points_of(&docs[i].1) {
            if !measurements.contains(&p.label()) {
                measurements.push(p.label());
            }
        }
    }
    for m in measurements {
        let series: Vec<Series> = members
            .iter()
            .zip(labels)
            .filter_map(|(&i, label)| {
                let p = lat_points_of(&docs[i].1).iter().find(|p| p.label() == m)?;
                Some(Series { label: label.clone(), points: plot::cdf_points(&p.samples_ns(), 400), style: Style::Line })
            })
            .collect();
        figs.chart(
            &format!("{m}: latency CDF of each result (fraction of requests at or below each latency)"),
            &Chart {
                title: format!("{m} latency CDF, {} results", members.len()),
                x_label: format!("latency (ns of {clock})"),
                y_label: "fraction of requests".into(),
                x_axis: XAxis::Linear,
                y_range: Some((0.0, 1.0)),
                series,
            },
        )?;
    }
    Ok(())
}

/// PIO: card bandwidth per width, a colour per result and direction.
fn pio_overlay(members: &[usize], labels: &[String], docs: &[(String, AnyResult)], figs: &mut Figures) -> R<()> {
    let mut series = Vec::new();
    for (&i, label) in members.iter().zip(labels) {
        let pts = pio_points_of(&docs[i].1);
        if pts.is_empty() {
            continue;
        }
        let w: Vec<(f64, f64)> = pts.iter().filter_map(|p| p.card_write_bytes_per_second.map(|b| (f64::from(p.width), b / 1e6))).collect();
        let r: Vec<(f64, f64)> = pts.iter().map(|p| (f64::from(p.width), p.card_read_bytes_per_second / 1e6)).collect();
        series.push(Series { label: format!("write, {label}"), points: w, style: Style::Points });
        series.push(Series { label: format!("read, {label}"), points: r, style: Style::Points });
    }
    if !series.is_empty() {
        figs.chart(
            "PIO: the card's bandwidth per access width of each result (card time)",
            &Chart {
                title: format!("PIO bandwidth against access width, {} results", members.len()),
                x_label: "access width".into(),
                y_label: "MB/s (card time)".into(),
                x_axis: XAxis::Log2Bytes,
                y_range: None,
                series,
            },
        )?;
    }
    Ok(())
}

/// Histograms (irq stages, loop times): one figure per stage or loop, a colour per result,
/// bars side by side in each bucket.
fn histogram_overlays(members: &[usize], labels: &[String], docs: &[(String, AnyResult)], figs: &mut Figures) -> R<()> {
    let mut hists: Vec<(String, Vec<(String, Histogram)>)> = Vec::new();
    for (&i, label) in members.iter().zip(labels) {
        for (key, h) in histograms_of(&docs[i].1) {
            match hists.iter_mut().find(|(k, _)| *k == key) {
                Some((_, list)) => list.push((label.clone(), h)),
                None => hists.push((key, vec![(label.clone(), h)])),
            }
        }
    }
    for (key, list) in hists {
        // Bins chosen from the samples when every result keeps them (one binning for all),
        // else the card's log2 buckets.
        let sets: Option<Vec<(String, Vec<f64>)>> = list.iter().map(|(l, h)| h.samples.clone().map(|v| (l.clone(), v))).collect();
        let (series, bins) = match sets.as_deref().and_then(plot::binned_series) {
            Some((series, bins)) => (series, format!("{bins} from the samples")),
            None => (
                list.into_iter().map(|(label, h)| LogSeries { label, kind: Mark::Bars(h.log2), points: Vec::new() }).collect(),
                "log scale; the card's log2 buckets of cycles".to_string(),
            ),
        };
        figs.log_chart(
            &format!("{key}: the histogram of each result ({bins}, in ns)"),
            &LogChart {
                title: format!("{key}, {} results", members.len()),
                x_label: format!("latency ({bins})"),
                y_label: "count (log scale)".into(),
                x_ticks: Ticks::Ns,
                y_ticks: Ticks::Count,
                series,
            },
        )?;
    }
    Ok(())
}

/// Differences against the first, by tlpx diff's rules.
fn differences(
    kind: &str,
    first: &AnyResult,
    members: &[usize],
    labels: &[String],
    docs: &[(String, AnyResult)],
    body: &mut String,
) -> R<()> {
    for (&i, label) in members.iter().zip(labels).skip(1) {
        if !diff::DIFF_KINDS.contains(&kind) {
            let _ = write!(
                body,
                "<p class=\"note\">No table of differences: tlpx diff judges {} results, not {kind}.</p>",
                diff::DIFF_KINDS.join(", ")
            );
            break;
        }
        let d = diff::compare(first, &docs[i].1, diff::DEFAULT_THRESHOLD, true)?;
        let _ = write!(
            body,
            "<h3>Differences: {} against {} ({} of {} figures changed)</h3>",
            esc(label),
            esc(&labels[0]),
            d.changed,
            d.rows.len()
        );
        let _ = write!(
            body,
            "<p class=\"note\">As <code>tlpx diff</code> judges them: a figure changed when it moved by more than {} % of the first \
             result's value and, where the results record a spread (runs' min..max, a 95 % interval from the samples), the \
             spreads do not overlap; without a recorded spread the {} % alone decides.</p>",
            diff::DEFAULT_THRESHOLD * 100.0,
            diff::DEFAULT_THRESHOLD * 100.0
        );
        let rows: Vec<Vec<String>> = d.rows.iter().map(diff::Row::cells).collect();
        body.push_str(&table(&diff::HEAD, &rows));
    }
    Ok(())
}
