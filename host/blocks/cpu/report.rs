//! `tlpx report`'s section for the kind `script`.
//!
//! Compiled into the `tlpx` crate as a child of `cmd::report` (its `#[path]` declaration is in
//! host/crates/tlpx/src/cmd/report/mod.rs); the page's shared pieces are there and in `sections.rs`.

use super::*;

/// `tlpx script run`: the records the firmware wrote (card-cycle timestamps), and the DMA
/// runs' durations along card time.
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
