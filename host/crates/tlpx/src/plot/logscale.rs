//! Log-log charts: histogram bars over log2 buckets and lines with points, on log axes, several
//! series each with a legend entry (the report's interrupt, loop, spy and rule-30 figures).
//!
//! ```text
//!   LogChart { series: [LogSeries { Mark::Bars([(from, to, count)]) | Mark::LinePoints, points }] }
//!      ──render_log_svg──► <svg class="chart">: title, 1-2-5 (or power-of-two) ticks, bars
//!                          from the bottom edge, polylines with circles, legend at the right
//! ```
//!
//! Drawn by hand rather than with plotters (plot.rs's linear and log2-bytes charts): plotters'
//! SVG backend has no log-scaled bars, and these figures must look the same as before the move.
//! Values at or below zero have no place on a log axis and are left out.

use std::fmt::Write as _;

use super::{legend, palette};
use crate::output::{bytes, ns_text, xml_escape};

/// How a series is drawn.
#[derive(Debug, Clone, PartialEq)]
pub enum Mark {
    /// Histogram bars over [from, to) with a count: outlined, translucent fill.
    Bars(Vec<(f64, f64, f64)>),
    /// Histogram bars over bins chosen from the samples ([`super::bins::Binning`]): drawn as
    /// [`Mark::Bars`], on a linear x axis when `linear` (linear bins), else a log one.
    Binned { bars: Vec<(f64, f64, f64)>, linear: bool },
    /// A line through the points, with a circle on each.
    LinePoints,
}

#[derive(Debug, Clone)]
pub struct LogSeries {
    pub label: String,
    pub kind: Mark,
    pub points: Vec<(f64, f64)>,
}

impl LogSeries {
    /// True when the series has something to draw.
    pub fn has_data(&self) -> bool {
        match &self.kind {
            Mark::Bars(b) | Mark::Binned { bars: b, .. } => !b.is_empty(),
            Mark::LinePoints => self.points.iter().any(|(x, y)| *x > 0.0 && *y > 0.0),
        }
    }
}

/// How the labels of a log axis read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ticks {
    Ns,
    Bytes,
    Count,
    Plain,
}

#[derive(Debug, Clone)]
pub struct LogChart {
    pub title: String,
    pub x_label: String,
    pub y_label: String,
    pub x_ticks: Ticks,
    pub y_ticks: Ticks,
    pub series: Vec<LogSeries>,
}

/// Software modes of rule 30 are dashed, so that they stand apart from the hardware ones.
fn is_dashed(label: &str) -> bool {
    label.starts_with("sw-")
}

fn dash(label: &str) -> &'static str {
    if is_dashed(label) {
        " stroke-dasharray=\"6 4\""
    } else {
        ""
    }
}

/// Log2 buckets of card cycles as (from ns, to ns, count), empty buckets left out: bucket k
/// counts [2^k, 2^(k+1)) cycles (bucket 0 from half a cycle, so that it has a width on a log axis).
pub fn log2_buckets(hist: &[u64], clock_hz: u32) -> Vec<(f64, f64, f64)> {
    let ns = 1e9 / f64::from(clock_hz).max(1.0);
    let mut out = Vec::new();
    for (k, &c) in hist.iter().enumerate() {
        if c > 0 {
            let from = if k == 0 { 0.5 } else { (1u64 << k.min(62)) as f64 };
            out.push((from * ns, (1u64 << (k + 1).min(63)) as f64 * ns, c as f64));
        }
    }
    out
}

/// Histograms whose buckets span less than this ratio (max / min edge) get a linear x axis:
/// a log axis would spread a few buckets thin; wider spans need the log axis to show both ends.
pub const LINEAR_SPAN: f64 = 16.0;

/// Linear tick values in [lo, hi]: 1-2-5 steps, about six of them.
fn linear_ticks(lo: f64, hi: f64) -> Vec<f64> {
    let span = (hi - lo).max(1e-12);
    let raw = span / 6.0;
    let mag = 10f64.powf(raw.log10().floor());
    let step = [1.0, 2.0, 5.0, 10.0].iter().map(|m| m * mag).find(|s| *s >= raw).unwrap_or(10.0 * mag);
    let mut v = (lo / step).ceil() * step;
    let mut out = Vec::new();
    while v <= hi + step * 1e-9 {
        out.push(v);
        v += step;
    }
    out
}

pub fn tick_label(v: f64, t: Ticks) -> String {
    match t {
        // Tick values are 1-2-5 steps: "1 µs", not "1.00 µs".
        Ticks::Ns => {
            let f = ns_text(v);
            f.replace(".00 ", " ").replace(".0 ", " ")
        }
        Ticks::Bytes => bytes(v.round() as u64),
        Ticks::Count | Ticks::Plain => {
            if v >= 1e6 {
                format!("{v:.0e}")
            } else {
                format!("{v:.0}")
            }
        }
    }
}

/// Tick values in [lo, hi] on a log axis: 1-2-5 per decade, or powers of two for bytes and bits.
pub fn log_ticks(lo: f64, hi: f64, t: Ticks) -> Vec<f64> {
    let mut out = Vec::new();
    if matches!(t, Ticks::Bytes | Ticks::Plain) {
        let mut k = lo.log2().ceil() as i32;
        while f64::from(k).exp2() <= hi * 1.0001 {
            out.push(f64::from(k).exp2());
            k += 1;
        }
        if out.len() > 12 {
            let step = out.len().div_ceil(12);
            out = out.into_iter().step_by(step).collect();
        }
        return out;
    }
    let mut decade = lo.log10().floor() as i32;
    while 10f64.powi(decade) <= hi * 1.0001 {
        for m in [1.0, 2.0, 5.0] {
            let v = m * 10f64.powi(decade);
            if v >= lo * 0.9999 && v <= hi * 1.0001 {
                out.push(v);
            }
        }
        decade += 1;
    }
    if matches!(t, Ticks::Count) {
        out.retain(|v| *v >= 1.0);
    }
    if out.len() > 10 {
        out.retain(|v| (v.log10() - v.log10().round()).abs() < 1e-9);
    }
    out
}

/// The data's extent (x0, x1, y0, y1): bars from their bucket edges and counts (down to 0.5,
/// so that a bucket of one shows), lines from their positive points; 1..10 on an axis without
/// data.
fn data_extent(c: &LogChart) -> (f64, f64, f64, f64) {
    let (mut x0, mut x1, mut y0, mut y1) = (f64::MAX, f64::MIN, f64::MAX, f64::MIN);
    for s in &c.series {
        match &s.kind {
            Mark::Bars(bars) | Mark::Binned { bars, .. } => {
                for &(from, to, n) in bars {
                    x0 = x0.min(from);
                    x1 = x1.max(to);
                    y1 = y1.max(n);
                }
                y0 = y0.min(0.5);
            }
            Mark::LinePoints => {
                for &(x, y) in s.points.iter().filter(|(x, y)| *x > 0.0 && *y > 0.0) {
                    x0 = x0.min(x);
                    x1 = x1.max(x);
                    y0 = y0.min(y);
                    y1 = y1.max(y);
                }
            }
        }
    }
    if x0 > x1 {
        (x0, x1) = (1.0, 10.0);
    }
    if y0 > y1 {
        (y0, y1) = (1.0, 10.0);
    }
    (x0, x1, y0, y1)
}

/// A log-log chart as an SVG element (no namespace needed inline in HTML).
pub fn render_log_svg(c: &LogChart) -> String {
    const W: f64 = 900.0;
    const H: f64 = 440.0;
    let (l, r, t, b) = (90.0, 230.0, 40.0, 60.0);
    let (x0, x1, y0, y1) = data_extent(c);
    // Histograms over a narrow span get a linear x axis (the data choose, LINEAR_SPAN).
    let all_bars = !c.series.is_empty() && c.series.iter().all(|s| matches!(s.kind, Mark::Bars(_) | Mark::Binned { .. }));
    // Bins chosen from the samples say themselves which axis they need.
    let binned = c.series.iter().find_map(|s| match s.kind {
        Mark::Binned { linear, .. } => Some(linear),
        _ => None,
    });
    let linear_x = binned.unwrap_or(all_bars && x0 > 0.0 && x1 / x0 < LINEAR_SPAN);
    // Some room around the data, and never a zero-width range.
    let (lx0, mut lx1) = ((x0 / 1.3).log10(), (x1 * 1.3).log10());
    let (ly0, mut ly1) = ((y0 / 1.5).log10(), (y1 * 1.5).log10());
    if lx1 - lx0 < 0.3 {
        lx1 = lx0 + 0.3;
    }
    if ly1 - ly0 < 0.3 {
        ly1 = ly0 + 0.3;
    }
    let (lin0, lin1) = (0.0_f64.max(x0 - (x1 - x0) * 0.05), x1 + (x1 - x0) * 0.05);
    let px = |x: f64| {
        if linear_x {
            l + (x - lin0) / (lin1 - lin0).max(1e-12) * (W - l - r)
        } else {
            l + (x.max(1e-300).log10() - lx0) / (lx1 - lx0) * (W - l - r)
        }
    };
    let py = |y: f64| H - b - (y.max(1e-300).log10() - ly0) / (ly1 - ly0) * (H - t - b);
    let mut s = String::new();
    let _ = write!(
        s,
        "<svg xmlns=\"http://www.w3.org/2000/svg\" class=\"chart\" width=\"{W}\" height=\"{H}\" viewBox=\"0 0 {W} {H}\" role=\"img\">"
    );
    let _ = write!(s, "<rect x=\"0\" y=\"0\" width=\"{W}\" height=\"{H}\" fill=\"#ffffff\"/>");
    let _ = write!(
        s,
        "<text x=\"{}\" y=\"24\" text-anchor=\"middle\" font-size=\"18\" font-family=\"sans-serif\">{}</text>",
        (l + W - r) / 2.0,
        xml_escape(&c.title)
    );
    // Grid, ticks and labels.
    let x_ticks = if linear_x { linear_ticks(lin0, lin1) } else { log_ticks(10f64.powf(lx0), 10f64.powf(lx1), c.x_ticks) };
    for v in x_ticks {
        let x = px(v);
        let _ = write!(s, "<line x1=\"{x:.1}\" y1=\"{t}\" x2=\"{x:.1}\" y2=\"{}\" stroke=\"#000\" stroke-opacity=\"0.12\"/>", H - b);
        let _ = write!(
            s,
            "<text x=\"{x:.1}\" y=\"{}\" text-anchor=\"middle\" font-size=\"12\" font-family=\"sans-serif\">{}</text>",
            H - b + 18.0,
            xml_escape(&tick_label(v, c.x_ticks))
        );
    }
    for v in log_ticks(10f64.powf(ly0), 10f64.powf(ly1), c.y_ticks) {
        let y = py(v);
        let _ = write!(s, "<line x1=\"{l}\" y1=\"{y:.1}\" x2=\"{}\" y2=\"{y:.1}\" stroke=\"#000\" stroke-opacity=\"0.12\"/>", W - r);
        let _ = write!(
            s,
            "<text x=\"{}\" y=\"{:.1}\" text-anchor=\"end\" font-size=\"12\" font-family=\"sans-serif\">{}</text>",
            l - 6.0,
            y + 4.0,
            xml_escape(&tick_label(v, c.y_ticks))
        );
    }
    let _ = write!(s, "<rect x=\"{l}\" y=\"{t}\" width=\"{}\" height=\"{}\" fill=\"none\" stroke=\"#000\"/>", W - l - r, H - t - b);
    let _ = write!(
        s,
        "<text x=\"{}\" y=\"{}\" text-anchor=\"middle\" font-size=\"14\" font-family=\"sans-serif\">{}</text>",
        (l + W - r) / 2.0,
        H - 14.0,
        xml_escape(&if linear_x { c.x_label.replace(" (log scale)", "") } else { c.x_label.clone() })
    );
    let _ = write!(
        s,
        "<text x=\"18\" y=\"{0}\" transform=\"rotate(-90 18 {0})\" text-anchor=\"middle\" font-size=\"14\" font-family=\"sans-serif\">{1}</text>",
        (t + H - b) / 2.0,
        xml_escape(&c.y_label)
    );
    // Data. Bars of several series share a bucket side by side (each its own slice of the
    // bucket), so that no series hides another.
    let base = py(10f64.powf(ly0));
    let bar_series = c.series.iter().filter(|s| matches!(s.kind, Mark::Bars(_) | Mark::Binned { .. })).count().max(1);
    let mut bar_index = 0;
    let mut entries = Vec::new();
    for (i, series) in c.series.iter().enumerate() {
        let colour = palette::colour(i);
        match &series.kind {
            Mark::Bars(bars) | Mark::Binned { bars, .. } => {
                let mut d = String::new();
                for &(from, to, n) in bars {
                    let (xa, xb, y) = (px(from), px(to), py(n));
                    let w = (xb - xa) / bar_series as f64;
                    let (xa, xb) = (xa + w * bar_index as f64, xa + w * (bar_index + 1) as f64);
                    let _ = write!(d, "M{xa:.1},{base:.1}V{y:.1}H{xb:.1}V{base:.1}Z");
                }
                bar_index += 1;
                if !d.is_empty() {
                    let _ = write!(
                        s,
                        "<path class=\"data\" d=\"{d}\" fill=\"{colour}\" fill-opacity=\"0.6\" stroke=\"{colour}\" stroke-width=\"1\"/>"
                    );
                }
                entries.push(legend::Entry { label: series.label.clone(), colour, mark: legend::Swatch::Bar, dashed: false });
            }
            Mark::LinePoints => {
                let pts: Vec<(f64, f64)> =
                    series.points.iter().filter(|(x, y)| *x > 0.0 && *y > 0.0).map(|&(x, y)| (px(x), py(y))).collect();
                if pts.len() > 1 {
                    let list: Vec<String> = pts.iter().map(|(x, y)| format!("{x:.1},{y:.1}")).collect();
                    let _ = write!(
                        s,
                        "<polyline class=\"data\" points=\"{}\" fill=\"none\" stroke=\"{colour}\" stroke-width=\"2\"{}/>",
                        list.join(" "),
                        dash(&series.label)
                    );
                }
                for (x, y) in pts {
                    let _ = write!(s, "<circle class=\"data\" cx=\"{x:.1}\" cy=\"{y:.1}\" r=\"3.5\" fill=\"{colour}\"/>");
                }
                entries.push(legend::Entry {
                    label: series.label.clone(),
                    colour,
                    mark: legend::Swatch::LinePoint,
                    dashed: is_dashed(&series.label),
                });
            }
        }
    }
    // Legend, right of the plot.
    s.push_str(&legend::svg(&entries, W - r + 12.0, t, r - 20.0));
    s.push_str("</svg>");
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The numbers of an attribute of every element `tag` of `svg` with class "data".
    fn attr_values<'a>(svg: &'a str, tag: &str, attr: &str) -> Vec<&'a str> {
        svg.split(&format!("<{tag} class=\"data\""))
            .skip(1)
            .filter_map(|e| e.split(&format!(" {attr}=\"")).nth(1))
            .map(|v| v.split('"').next().unwrap_or_default())
            .collect()
    }

    fn chart(series: Vec<LogSeries>) -> LogChart {
        LogChart { title: "t <&>".into(), x_label: "x".into(), y_label: "y".into(), x_ticks: Ticks::Ns, y_ticks: Ticks::Count, series }
    }

    #[test]
    fn log_ticks_are_1_2_5_per_decade_or_powers_of_two() {
        assert_eq!(log_ticks(90.0, 1100.0, Ticks::Ns), vec![100.0, 200.0, 500.0, 1000.0]);
        assert_eq!(log_ticks(8.0, 256.0, Ticks::Plain), vec![8.0, 16.0, 32.0, 64.0, 128.0, 256.0]);
        assert_eq!(log_ticks(3.0, 70.0, Ticks::Bytes), vec![4.0, 8.0, 16.0, 32.0, 64.0]);
        // Counts below one are no counts.
        assert_eq!(log_ticks(0.3, 60.0, Ticks::Count), vec![1.0, 2.0, 5.0, 10.0, 20.0, 50.0]);
        // Many decades: the decades alone.
        assert_eq!(log_ticks(1.0, 1e6, Ticks::Ns), vec![1.0, 10.0, 100.0, 1e3, 1e4, 1e5, 1e6]);
        // Many powers of two: at most 12, evenly thinned.
        let many = log_ticks(1.0, 1048576.0, Ticks::Bytes);
        assert!(many.len() <= 12 && many.first() == Some(&1.0), "{many:?}");
        assert!(many.windows(2).all(|w| w[1] / w[0] == 4.0), "{many:?}");
    }

    #[test]
    fn tick_labels_read_as_their_unit() {
        assert_eq!(tick_label(1000.0, Ticks::Ns), "1 µs");
        assert_eq!(tick_label(2e6, Ticks::Ns), "2 ms");
        assert_eq!(tick_label(500.0, Ticks::Ns), "500 ns");
        assert_eq!(tick_label(4096.0, Ticks::Bytes), "4 KiB");
        assert_eq!(tick_label(20.0, Ticks::Count), "20");
        assert_eq!(tick_label(1e7, Ticks::Count), "1e7");
    }

    #[test]
    fn bars_stand_on_the_bottom_edge_and_span_their_buckets() {
        // Two buckets [100, 200) and [200, 400) ns with 10 and 1000 samples, and one far
        // away (so that the span asks for a log axis).
        let c = chart(vec![LogSeries {
            label: "a".into(),
            kind: Mark::Bars(vec![(100.0, 200.0, 10.0), (200.0, 400.0, 1000.0), (1600.0, 3200.0, 1.0)]),
            points: vec![],
        }]);
        let svg = render_log_svg(&c);
        let paths = attr_values(&svg, "path", "d");
        assert_eq!(paths.len(), 1, "one path per series");
        // "M{x0},{base}V{top}H{x1}V{base}Z" per bar.
        let bars: Vec<Vec<f64>> = paths[0]
            .split('Z')
            .filter(|b| !b.is_empty())
            .map(|b| b.split(['M', ',', 'V', 'H']).filter(|t| !t.is_empty()).map(|t| t.parse().expect("a number")).collect())
            .collect();
        assert_eq!(bars.len(), 3);
        let (a, b) = (&bars[0], &bars[1]);
        // Both stand on the same base line, the taller count reaching higher (SVG y grows down).
        assert_eq!(a[1], a[4]);
        assert_eq!(a[1], b[1]);
        assert!(b[2] < a[2] && a[2] < a[1], "{a:?} {b:?}");
        // Adjacent buckets share an edge, and a doubling is as wide as the next (log x).
        assert_eq!(a[3], b[0]);
        assert!(((a[3] - a[0]) - (b[3] - b[0])).abs() < 0.2, "{a:?} {b:?}");
        // The count axis is logarithmic from a third of 1 (the room below the bars' 0.5): the
        // bar of 10 is 1 + log10(3) decades tall, the bar of 1000 two decades taller.
        let (ha, hb) = (a[1] - a[2], b[1] - b[2]);
        let decade = (hb - ha) / 2.0;
        assert!((ha / (1.0 + 3f64.log10()) - decade).abs() < 0.3, "{ha} {hb}");
        // The data sit inside the plot area (90..670 x, 40..380 y).
        for bar in &bars {
            assert!(bar[0] >= 90.0 && bar[3] <= 670.0 && bar[2] >= 40.0 && bar[1] <= 380.0, "{bar:?}");
        }
    }

    #[test]
    fn lines_leave_out_what_a_log_axis_cannot_show_and_every_series_has_a_legend_entry() {
        let c = chart(vec![
            LogSeries {
                label: "hw-poll".into(),
                kind: Mark::LinePoints,
                points: vec![(8.0, 100.0), (0.0, 5.0), (64.0, -1.0), (256.0, 400.0)],
            },
            LogSeries { label: "sw-char".into(), kind: Mark::LinePoints, points: vec![(8.0, 50.0), (256.0, 5000.0)] },
            LogSeries { label: "empty".into(), kind: Mark::Bars(vec![]), points: vec![] },
        ]);
        assert!(c.series[0].has_data() && !c.series[2].has_data());
        let svg = render_log_svg(&c);
        assert!(svg.starts_with("<svg xmlns=\"http://www.w3.org/2000/svg\" class=\"chart\"") && svg.ends_with("</svg>"));
        // Two points each (zero and negative values have no place on a log axis).
        assert_eq!(attr_values(&svg, "circle", "cx").len(), 4);
        let lines = attr_values(&svg, "polyline", "points");
        assert_eq!(lines.len(), 2);
        assert!(lines.iter().all(|l| l.split(' ').count() == 2), "{lines:?}");
        // Software modes are dashed, in the plot and in the legend; hardware ones are not.
        assert_eq!(svg.matches("stroke-dasharray").count(), 2);
        assert_eq!(svg.split("<polyline").filter(|p| p.split("/>").next().is_some_and(|e| e.contains("stroke-dasharray"))).count(), 1);
        // A legend entry per series, the title escaped.
        for label in ["hw-poll", "sw-char", "empty"] {
            assert!(svg.contains(&format!(">{label}</text>")), "{label}");
        }
        assert!(svg.contains("t &lt;&amp;&gt;"));
    }

    /// The (x0, x1) pixel edges of every bar of every series.
    fn bar_edges(svg: &str) -> Vec<Vec<(f64, f64)>> {
        attr_values(svg, "path", "d")
            .iter()
            .map(|d| {
                d.split('Z')
                    .filter(|b| !b.is_empty())
                    .map(|b| {
                        let v: Vec<f64> = b.split(['M', ',', 'V', 'H']).filter(|t| !t.is_empty()).map(|t| t.parse().expect("n")).collect();
                        (v[0], v[3])
                    })
                    .collect()
            })
            .collect()
    }

    #[test]
    fn a_narrow_histogram_gets_a_linear_axis_in_time_units() {
        // [100, 200) and [200, 400) ns: a span of 4, under LINEAR_SPAN: linear x, so the second
        // bucket is twice as wide as the first; ticks read in ns, the label loses "(log scale)".
        let mut c = chart(vec![LogSeries {
            label: "a".into(),
            kind: Mark::Bars(vec![(100.0, 200.0, 10.0), (200.0, 400.0, 1000.0)]),
            points: vec![],
        }]);
        c.x_label = "latency (log scale)".into();
        let svg = render_log_svg(&c);
        let bars = &bar_edges(&svg)[0];
        let (wa, wb) = (bars[0].1 - bars[0].0, bars[1].1 - bars[1].0);
        assert!((wb / wa - 2.0).abs() < 0.02, "{bars:?}");
        assert!(svg.contains(">latency</text>") && svg.contains(">200 ns</text>"), "{svg}");
        assert!(!svg.contains("log2"));
    }

    #[test]
    fn bars_of_several_series_stand_side_by_side_in_a_bucket() {
        // 8 B and 64 B loops in the same buckets: neither hides the other.
        let bars = vec![(100.0, 200.0, 50.0), (200.0, 400.0, 5.0)];
        let c = chart(vec![
            LogSeries { label: "8 B".into(), kind: Mark::Bars(bars.clone()), points: vec![] },
            LogSeries { label: "64 B".into(), kind: Mark::Bars(bars), points: vec![] },
        ]);
        let edges = bar_edges(&render_log_svg(&c));
        assert_eq!(edges.len(), 2);
        for (k, (&a, &b)) in edges[0].iter().zip(&edges[1]).enumerate() {
            assert!(a.1 <= b.0 + 0.11 && a.1 - a.0 > 1.0 && b.1 - b.0 > 1.0, "bucket {k}: {a:?} {b:?}");
        }
        // Two colours, one per series.
        let svg = render_log_svg(&c);
        let fills: Vec<&str> = attr_values(&svg, "path", "fill");
        assert_eq!(fills.len(), 2);
        assert_ne!(fills[0], fills[1]);
    }

    #[test]
    fn an_empty_chart_still_has_axes() {
        let svg = render_log_svg(&chart(vec![]));
        assert!(svg.contains("<rect") && svg.contains(">x</text>") && !svg.contains("class=\"data\""));
    }

    #[test]
    fn bins_chosen_from_samples_set_the_axis_themselves() {
        // Linear bins from 0 (no place on a log axis): a linear axis, equal bins equally wide.
        let bars = vec![(0.0, 20.0, 3.0), (20.0, 40.0, 30.0), (40.0, 60.0, 5.0)];
        let c = chart(vec![LogSeries { label: "a".into(), kind: Mark::Binned { bars: bars.clone(), linear: true }, points: vec![] }]);
        let svg = render_log_svg(&c);
        let edges = &bar_edges(&svg)[0];
        assert_eq!(edges.len(), 3);
        let w: Vec<f64> = edges.iter().map(|e| e.1 - e.0).collect();
        assert!(w.iter().all(|x| x.is_finite() && (x - w[0]).abs() < 0.2 && *x > 10.0), "{edges:?}");
        assert!(svg.contains(">20 ns</text>") || svg.contains(">10 ns</text>"), "{svg}");
        // The same bars as log bins: a log axis, although their span (3x) would be linear
        // for the card's buckets: [1, 2) is then wider than [2, 3).
        let bars = vec![(1000.0, 2000.0, 3.0), (2000.0, 3000.0, 30.0)];
        let c = chart(vec![LogSeries { label: "a".into(), kind: Mark::Binned { bars, linear: false }, points: vec![] }]);
        let edges = &bar_edges(&render_log_svg(&c))[0];
        assert!((edges[0].1 - edges[0].0) > 1.5 * (edges[1].1 - edges[1].0), "{edges:?}");
    }
}
