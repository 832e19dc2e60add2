//! `tlpx report`'s section for the kind `pio`.
//!
//! Compiled into the `tlpx` crate as a child of `cmd::report` (its `#[path]` declaration is in
//! host/crates/tlpx/src/cmd/report/mod.rs); the page's shared pieces are there and in `sections.rs`.

use super::*;

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
