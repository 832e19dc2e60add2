//! SVG figures of results: every chart tlpx draws, for its commands' `--svg` files and for
//! `tlpx report`.
//!
//! - [`render_svg`] (plotters, SVG backend only: no font or image libraries needed): bandwidth
//!   against transfer size (log2 x axis) with the model's line on the same axes, and latency
//!   CDFs ([`cdf_points`]) on linear axes. A chart is a list of series; a series is drawn as a
//!   line, as points, or both.
//! - [`render_log_svg`] ([`logscale`]): log-log charts, histogram bars over log2 buckets
//!   (or over bins chosen from the samples, [`bins`]) and lines with points, several series
//!   with a legend.

pub mod bins;
pub mod legend;
mod logscale;
pub mod palette;

pub use bins::Binning;
pub use logscale::{log2_buckets, render_log_svg, LogChart, LogSeries, Mark, Ticks};

use plotters::prelude::*;

use crate::output::bytes;

/// Bar series of sample sets over one binning chosen from all of them ([`Binning::choose`]):
/// the series' labels with their bars, and how the bins read ("linear bins of 20 ns"); `None`
/// when no set has a sample.
pub fn binned_series(sets: &[(String, Vec<f64>)]) -> Option<(Vec<LogSeries>, String)> {
    let binning = Binning::choose(sets.iter().map(|(_, v)| v.as_slice()))?;
    let series = sets
        .iter()
        .map(|(label, v)| LogSeries {
            label: label.clone(),
            kind: Mark::Binned { bars: binning.count(v), linear: binning.is_linear() },
            points: Vec::new(),
        })
        .collect();
    Some((series, binning.describe()))
}

/// How a series is drawn.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Style {
    /// A line through the points (the model, CDFs).
    Line,
    /// Points joined by a thin line (measurements).
    Points,
}

#[derive(Debug, Clone)]
pub struct Series {
    pub label: String,
    pub points: Vec<(f64, f64)>,
    pub style: Style,
}

/// How the x axis is scaled and labelled.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum XAxis {
    /// Bytes on a log2 scale, labelled "64 B", "4 KiB".
    Log2Bytes,
    /// A plain linear axis.
    Linear,
}

#[derive(Debug, Clone)]
pub struct Chart {
    pub title: String,
    pub x_label: String,
    pub y_label: String,
    pub x_axis: XAxis,
    /// Fixed y range; `None` = 0 to 110 % of the largest value.
    pub y_range: Option<(f64, f64)>,
    pub series: Vec<Series>,
}

const WIDTH: u32 = 1040;
const HEIGHT: u32 = 560;
/// The strip right of the plot that holds the legend: legends never sit on the data.
const LEGEND_WIDTH: u32 = 290;

fn rgb(hex: &str) -> RGBColor {
    let v = u32::from_str_radix(hex.trim_start_matches('#'), 16).unwrap_or(0);
    RGBColor((v >> 16) as u8, (v >> 8) as u8, v as u8)
}

fn plot_error<E: std::fmt::Debug>(e: E) -> anyhow::Error {
    anyhow::anyhow!("drawing the SVG figure failed: {e:?}")
}

/// The colour of each series of a chart: a lone model line is black, every other series takes
/// the next colour of the palette, so no colour appears twice in a figure.
fn series_colours(series: &[Series]) -> Vec<String> {
    let models = series.iter().filter(|s| s.style == Style::Line && s.label.starts_with("model")).count();
    let mut next = 0;
    series
        .iter()
        .map(|s| {
            if models == 1 && s.style == Style::Line && s.label.starts_with("model") {
                palette::MODEL.to_string()
            } else {
                next += 1;
                palette::colour(next - 1)
            }
        })
        .collect()
}

/// Renders `chart` as an SVG document.
pub fn render_svg(chart: &Chart) -> anyhow::Result<String> {
    let map_x = |x: f64| match chart.x_axis {
        XAxis::Log2Bytes => x.max(1.0).log2(),
        XAxis::Linear => x,
    };
    let all: Vec<(f64, f64)> = chart.series.iter().flat_map(|s| s.points.iter().map(|&(x, y)| (map_x(x), y))).collect();
    let finite = |v: f64| v.is_finite();
    let (mut x0, mut x1) = all.iter().map(|p| p.0).filter(|v| finite(*v)).fold((f64::MAX, f64::MIN), |(a, b), v| (a.min(v), b.max(v)));
    if x0 > x1 {
        (x0, x1) = (0.0, 1.0);
    }
    if chart.x_axis == XAxis::Log2Bytes {
        (x0, x1) = (x0.floor(), x1.ceil());
    }
    if x1 <= x0 {
        x1 = x0 + 1.0;
    }
    let (y0, y1) = chart.y_range.unwrap_or_else(|| {
        let top = all.iter().map(|p| p.1).filter(|v| finite(*v)).fold(0.0_f64, f64::max);
        (0.0, if top > 0.0 { top * 1.1 } else { 1.0 })
    });
    let colours = series_colours(&chart.series);

    let mut svg = String::new();
    let plot_box;
    {
        let root = SVGBackend::with_string(&mut svg, (WIDTH, HEIGHT)).into_drawing_area();
        root.fill(&WHITE).map_err(plot_error)?;
        let mut ctx = ChartBuilder::on(&root)
            .caption(&chart.title, ("sans-serif", 22))
            .margin(16)
            .margin_right(LEGEND_WIDTH)
            .x_label_area_size(48)
            .y_label_area_size(80)
            .build_cartesian_2d(x0..x1, y0..y1)
            .map_err(plot_error)?;
        let x_axis = chart.x_axis;
        let x_fmt = move |v: &f64| match x_axis {
            XAxis::Log2Bytes => bytes(v.exp2().round() as u64),
            XAxis::Linear => format_number(*v),
        };
        let labels = match x_axis {
            XAxis::Log2Bytes => (x1 - x0) as usize + 1,
            XAxis::Linear => 10,
        };
        ctx.configure_mesh()
            .x_desc(&chart.x_label)
            .y_desc(&chart.y_label)
            .x_labels(labels.clamp(2, 16))
            .x_label_formatter(&x_fmt)
            .y_label_formatter(&|v: &f64| format_number(*v))
            .draw()
            .map_err(plot_error)?;

        for (s, hex) in chart.series.iter().zip(&colours) {
            let points: Vec<(f64, f64)> = s.points.iter().map(|&(x, y)| (map_x(x), y)).filter(|(x, y)| finite(*x) && finite(*y)).collect();
            let c = rgb(hex);
            match s.style {
                Style::Line => {
                    ctx.draw_series(LineSeries::new(points, ShapeStyle::from(&c).stroke_width(2))).map_err(plot_error)?;
                }
                Style::Points => {
                    ctx.draw_series(LineSeries::new(points.clone(), ShapeStyle::from(&c).stroke_width(1))).map_err(plot_error)?;
                    ctx.draw_series(points.iter().map(|&p| Circle::new(p, 4, c.filled()))).map_err(plot_error)?;
                }
            }
        }
        plot_box = ctx.plotting_area().get_pixel_range();
        root.present().map_err(plot_error)?;
    }
    // The legend, drawn here in the strip right of the plot (plotters draws its own inside it).
    let entries: Vec<legend::Entry> = chart
        .series
        .iter()
        .zip(&colours)
        .map(|(s, c)| legend::Entry {
            label: s.label.clone(),
            colour: c.clone(),
            mark: if s.style == Style::Line { legend::Swatch::Line } else { legend::Swatch::LinePoint },
            dashed: false,
        })
        .collect();
    let g = legend::svg(&entries, f64::from(plot_box.0.end) + 16.0, f64::from(plot_box.1.start), f64::from(LEGEND_WIDTH) - 24.0);
    match svg.rfind("</svg>") {
        Some(end) => svg.insert_str(end, &g),
        None => anyhow::bail!("drawing the SVG figure failed: plotters wrote no </svg>"),
    }
    Ok(svg)
}

/// Compact axis numbers: 1500 → "1500", 2.5e9 → "2.5e9", 0.25 → "0.25".
fn format_number(v: f64) -> String {
    let a = v.abs();
    if a == 0.0 {
        "0".into()
    } else if a >= 1e6 {
        let s = format!("{v:.2e}");
        s.replace(".00e", "e").replace("0e", "e")
    } else if a >= 10.0 || v.fract() == 0.0 {
        format!("{v:.0}")
    } else {
        format!("{v:.2}")
    }
}

/// The empirical CDF of `samples` as (value, fraction ≤ value), at most `max_points` points.
pub fn cdf_points(samples: &[f64], max_points: usize) -> Vec<(f64, f64)> {
    let mut sorted: Vec<f64> = samples.iter().copied().filter(|v| v.is_finite()).collect();
    sorted.sort_by(f64::total_cmp);
    let n = sorted.len();
    if n == 0 {
        return Vec::new();
    }
    let step = n.div_ceil(max_points.max(2)).max(1);
    let mut out: Vec<(f64, f64)> = (0..n).step_by(step).map(|i| (sorted[i], (i + 1) as f64 / n as f64)).collect();
    if out.last().map(|p| p.1) != Some(1.0) {
        out.push((sorted[n - 1], 1.0));
    }
    out
}

/// A text CDF: `rows` latency values evenly spaced from min to max, each with the fraction
/// of samples at or below it and a bar of that length.
pub fn text_cdf(samples: &[f64], rows: usize, unit: &str) -> Vec<String> {
    let mut sorted: Vec<f64> = samples.iter().copied().filter(|v| v.is_finite()).collect();
    sorted.sort_by(f64::total_cmp);
    let (Some(&lo), Some(&hi)) = (sorted.first(), sorted.last()) else {
        return vec!["(no samples)".into()];
    };
    let rows = rows.max(2);
    let mut out = Vec::new();
    for r in 0..rows {
        let x = if hi > lo { lo + (hi - lo) * r as f64 / (rows - 1) as f64 } else { hi };
        let at_or_below = sorted.partition_point(|v| *v <= x);
        let frac = at_or_below as f64 / sorted.len() as f64;
        let bar = "#".repeat((frac * 40.0).round() as usize);
        out.push(format!("  {:>10.1} {unit} {:>7.3} |{bar}", x, frac));
        if hi <= lo {
            break;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bw_chart() -> Chart {
        let model: Vec<(f64, f64)> = (1..=64).map(|i| (f64::from(i * 64), 1000.0 * f64::from(i).sqrt())).collect();
        Chart {
            title: "DMA read, Gen3 x8".into(),
            x_label: "transfer size".into(),
            y_label: "MB/s".into(),
            x_axis: XAxis::Log2Bytes,
            y_range: None,
            series: vec![
                Series { label: "model (tlpx-model)".into(), points: model, style: Style::Line },
                Series {
                    label: "measured".into(),
                    points: vec![(64.0, 900.0), (256.0, 1900.0), (1024.0, 3900.0), (4096.0, 7800.0)],
                    style: Style::Points,
                },
            ],
        }
    }

    #[test]
    fn bandwidth_svg_has_axes_model_line_and_points() {
        let svg = render_svg(&bw_chart()).expect("rendered");
        assert!(svg.starts_with("<svg"), "{}", &svg[..80.min(svg.len())]);
        assert!(svg.trim_end().ends_with("</svg>"));
        // Axis descriptions and tick labels in bytes on the log2 axis.
        assert!(svg.contains("transfer size") && svg.contains("MB/s"), "axis descriptions");
        for tick in ["64 B", "256 B", "1 KiB", "4 KiB"] {
            assert!(svg.contains(&format!(">\n{tick}\n</text>")), "tick {tick}");
        }
        // The model line (a polyline of its 64 points), the legend, and 4 measured points.
        assert!(svg.contains("model (tlpx-model)") && svg.contains("measured"));
        let polylines: Vec<&str> = svg.split("<polyline").skip(1).collect();
        assert!(polylines.iter().any(|p| p.split("points=\"").nth(1).is_some_and(|pts| pts.split(' ').count() >= 60)), "model polyline");
        assert!(polylines.iter().any(|p| p.contains("stroke=\"#000000\"")), "model line is black");
        // 4 points + 1 legend marker.
        assert_eq!(svg.matches("<circle").count(), 5);
    }

    #[test]
    fn cdf_svg_and_points() {
        let samples: Vec<f64> = (1..=1000).map(f64::from).collect();
        let pts = cdf_points(&samples, 100);
        assert!(pts.len() <= 101);
        assert_eq!(pts.first(), Some(&(1.0, 0.001)));
        assert_eq!(pts.last(), Some(&(1000.0, 1.0)));
        assert!(pts.windows(2).all(|w| w[0].0 <= w[1].0 && w[0].1 <= w[1].1));
        let chart = Chart {
            title: "latency".into(),
            x_label: "latency (ns)".into(),
            y_label: "fraction of requests".into(),
            x_axis: XAxis::Linear,
            y_range: Some((0.0, 1.0)),
            series: vec![Series { label: "LAT_RD 64 B".into(), points: pts, style: Style::Line }],
        };
        let svg = render_svg(&chart).expect("rendered");
        assert!(svg.contains("latency (ns)") && svg.contains("LAT_RD 64 B") && svg.contains("<polyline"));
    }

    #[test]
    fn empty_and_flat_series_render() {
        let chart = Chart {
            title: "empty".into(),
            x_label: "x".into(),
            y_label: "y".into(),
            x_axis: XAxis::Log2Bytes,
            y_range: None,
            series: vec![Series { label: "measured".into(), points: vec![(64.0, 0.0)], style: Style::Points }],
        };
        assert!(render_svg(&chart).expect("rendered").contains("<svg"));
    }

    #[test]
    fn text_cdf_rows() {
        let rows = text_cdf(&[100.0, 200.0, 300.0, 400.0], 4, "ns");
        assert_eq!(rows.len(), 4);
        assert!(rows[0].contains("100.0 ns") && rows[0].contains("0.250"), "{}", rows[0]);
        assert!(rows[3].contains("400.0 ns") && rows[3].contains("1.000"), "{}", rows[3]);
        assert_eq!(text_cdf(&[5.0, 5.0], 10, "ns").len(), 1);
        assert_eq!(text_cdf(&[], 10, "ns"), vec!["(no samples)".to_string()]);
    }

    #[test]
    fn numbers() {
        assert_eq!(format_number(0.0), "0");
        assert_eq!(format_number(1500.0), "1500");
        assert_eq!(format_number(0.25), "0.25");
        assert_eq!(format_number(2.5e9), "2.5e9");
    }
}
