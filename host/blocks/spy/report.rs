//! `tlpx report`'s section for the kind `spy` (stats).
//!
//! Compiled into the `tlpx` crate as a child of `cmd::report` (its `#[path]` declaration is in
//! host/crates/tlpx/src/cmd/report/mod.rs); the page's shared pieces are there and in `sections.rs`.

use super::*;

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
