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
