//! pcie-bench's table layout for `bw` and `lat` points (`--format pciebench`, and
//! `pciebench-csv`), so that tlpx's figures sit beside published ones column for column.
//!
//! The layout is the one pcie-bench's NFP host tool prints (its `.txt` and `.csv` files in
//! the pcie-bench/data repository): per row Test, PAT, Cache, HO, DO, WinSZ, SZ, then for
//! latency TAvg/Avg/Med/Min/Max/95%/99.9% in cycles and in ns, #outliers and #samples, and
//! for bandwidth Time(cyc), Time, Bytes, Trans, "BW (GB/s)" and Trans/s. Its conventions are
//! kept where a script reading its files depends on them, and said where tlpx differs
//! (docs/bandwidth.md, "pcie-bench's layout"):
//! - cycles are the card's clock (pcie-bench: the NFP's ME cycles × 16);
//! - "BW (GB/s)" is 8 × bytes / ns, i.e. gigabits per second, as pcie-bench computes it
//!   under that heading;
//! - percentiles interpolate linearly at (n − 1) · p / 100 of the sorted samples, the median
//!   of an even count is the mean of the middle two, and an outlier is a sample above three
//!   times the 95th percentile (pcie-bench's definitions, not tlpx's nearest rank);
//! - DO, the offset into the device's buffer, is 0: the generator has none;
//! - TAvg is the runs' card time over every request; the other latency columns are of the
//!   samples the card kept (#samples, fewer than the requests when its FIFO dropped some);
//! - BW_DMA_RW's bytes and transfers are per stream, as every tlpx read+write figure.

use crate::bw::BwPoint;
use crate::host_memory::CacheState;
use crate::lat::LatPoint;

/// The text table or the CSV.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Style {
    Text,
    Csv,
}

/// pcie-bench's test names.
fn bw_test(operation: &str) -> &'static str {
    match operation {
        "read" => "BW_DMA_RD",
        "write" => "BW_DMA_WR",
        "rdwr" => "BW_DMA_RW",
        _ => "BW_DMA_?",
    }
}

fn lat_test(measurement: &str) -> &'static str {
    match measurement {
        "LAT_WRRD" => "LAT_DMA_WRRD",
        _ => "LAT_DMA_RD",
    }
}

/// PAT: pcie-bench's Seq and Rand; tlpx's fixed address is Fix.
fn pattern(p: &str) -> &'static str {
    match p {
        "seq" => "Seq",
        "random" => "Rand",
        _ => "Fix",
    }
}

/// 1024-based sizes as pcie-bench's tables print them (4KB, 512MB).
fn size_text(n: u64) -> String {
    let (v, unit) = if n >= 1 << 30 {
        (n as f64 / f64::from(1u32 << 30), "GB")
    } else if n >= 1 << 20 {
        (n as f64 / f64::from(1u32 << 20), "MB")
    } else if n >= 1 << 10 {
        (n as f64 / 1024.0, "KB")
    } else {
        return format!("{n}B");
    };
    if v.fract() == 0.0 {
        format!("{v:.0}{unit}")
    } else {
        format!("{v:.1}{unit}")
    }
}

/// A time in ns as pcie-bench's tables print it (159.53ms).
fn time_text(ns: f64) -> String {
    if ns >= 1e9 {
        format!("{:.2}s", ns / 1e9)
    } else if ns >= 1e6 {
        format!("{:.2}ms", ns / 1e6)
    } else if ns >= 1e3 {
        format!("{:.2}us", ns / 1e3)
    } else {
        format!("{ns:.0}ns")
    }
}

/// A column: its heading, its least width in the text table, whether a group starts at it.
struct Col {
    name: &'static str,
    width: usize,
    group: bool,
}

const fn col(name: &'static str, width: usize, group: bool) -> Col {
    Col { name, width, group }
}

const KEY: [Col; 7] = [
    col("Test", 12, false),
    col("PAT", 4, false),
    col("Cache", 7, false),
    col("HO", 2, false),
    col("DO", 2, false),
    col("WinSZ", 5, false),
    col("SZ", 4, false),
];

const LAT: [Col; 16] = [
    col("TAvg", 6, true),
    col("Avg", 6, false),
    col("Med", 5, false),
    col("Min", 5, false),
    col("Max", 5, false),
    col("95%", 5, false),
    col("99.9%", 5, false),
    col("TAvg(ns)", 8, true),
    col("Avg(ns)", 7, false),
    col("Med(ns)", 7, false),
    col("Min(ns)", 7, false),
    col("Max(ns)", 7, false),
    col("95%(ns)", 7, false),
    col("99.9%(ns)", 9, false),
    col("#outliers", 10, true),
    col("#samples", 10, false),
];

const BW: [Col; 6] = [
    col("Time(cyc)", 11, true),
    col("Time", 9, false),
    col("Bytes", 8, false),
    col("Trans", 9, false),
    col("BW (GB/s)", 9, true),
    col("Trans/s", 10, false),
];

fn render(style: Style, key_width: usize, cols: &[Col], rows: &[Vec<String>]) -> String {
    let mut heads: Vec<&Col> = KEY.iter().collect();
    heads.extend(cols);
    let mut out = String::new();
    match style {
        Style::Csv => {
            // Python's csv module, as pcie-bench writes its .csv files: commas, CRLF.
            let line = |cells: Vec<String>| cells.into_iter().map(|c| csv_cell(&c)).collect::<Vec<_>>().join(",") + "\r\n";
            out += &line(heads.iter().map(|c| c.name.to_string()).collect());
            for r in rows {
                out += &line(r.clone());
            }
        }
        Style::Text => {
            let line = |cells: Vec<&str>| {
                let mut s = String::new();
                for (i, (c, text)) in heads.iter().zip(cells).enumerate() {
                    let width = if i == 0 { key_width } else { c.width };
                    if i > 0 {
                        s.push_str(if c.group { "   " } else { " " });
                    }
                    s.push_str(&format!("{text:>width$}"));
                }
                s + "\n"
            };
            out += &line(heads.iter().map(|c| c.name).collect());
            for r in rows {
                out += &line(r.iter().map(String::as_str).collect());
            }
        }
    }
    out
}

fn csv_cell(c: &str) -> String {
    if c.contains([',', '"', '\n', '\r']) {
        format!("\"{}\"", c.replace('"', "\"\""))
    } else {
        c.to_string()
    }
}

fn key_cells(style: Style, test: &str, pat: &str, cache: CacheState, offset: u32, window: u64, size: u32) -> Vec<String> {
    let win = if style == Style::Text { size_text(window) } else { window.to_string() };
    vec![test.into(), pat.into(), cache.pciebench().into(), offset.to_string(), "0".into(), win, size.to_string()]
}

/// pcie-bench's statistics of samples in cycles: (avg, median, min, max, p95, p99.9,
/// outliers), or None without samples.
pub fn sample_stats(samples: &[u32]) -> Option<[f64; 7]> {
    if samples.is_empty() {
        return None;
    }
    let mut s: Vec<f64> = samples.iter().map(|&c| f64::from(c)).collect();
    s.sort_by(f64::total_cmp);
    let n = s.len();
    let pct = |p: f64| {
        let k = (n - 1) as f64 * p / 100.0;
        let (lo, hi) = (k.floor() as usize, k.ceil() as usize);
        if lo == hi {
            s[lo]
        } else {
            s[lo] * (hi as f64 - k) + s[hi] * (k - lo as f64)
        }
    };
    let median = if n % 2 == 1 { s[n / 2] } else { (s[n / 2 - 1] + s[n / 2]) / 2.0 };
    let p95 = pct(95.0);
    let outliers = s.iter().filter(|&&v| v > 3.0 * p95).count() as f64;
    Some([s.iter().sum::<f64>() / n as f64, median, s[0], s[n - 1], p95, pct(99.9), outliers])
}

/// The latency table: one row per point.
pub fn lat_table(points: &[LatPoint], cache: CacheState, style: Style) -> String {
    let rows: Vec<Vec<String>> = points
        .iter()
        .map(|p| {
            let c = &p.config;
            let pat = pattern(match c.address_pattern {
                tlpx_device::generator::AddressPattern::Sequential => "seq",
                tlpx_device::generator::AddressPattern::Random => "random",
                tlpx_device::generator::AddressPattern::Fixed => "fixed",
            });
            let mut row = key_cells(style, lat_test(p.measurement), pat, cache, c.offset, c.window, p.transfer_size);
            let ns = 1e9 / f64::from(p.clock_hz.max(1));
            let n = p.samples_cycles.len();
            // The runs' time over every request (pcie-bench's samples are all its requests; the
            // card may keep fewer samples than it made requests).
            let tavg = (p.cycles > 0 && p.transfers > 0).then(|| p.cycles as f64 / p.transfers as f64);
            let stats = sample_stats(&p.samples_cycles);
            let fmt = |v: Option<f64>, decimals: bool| match (v, style) {
                (None, _) => "-".to_string(),
                (Some(v), Style::Csv) => v.to_string(),
                (Some(v), Style::Text) if decimals => format!("{v:.1}"),
                (Some(v), Style::Text) => format!("{v:.0}"),
            };
            let get = |i: usize| stats.map(|s| s[i]);
            row.push(fmt(tavg, true));
            row.push(fmt(get(0), true));
            for i in [1, 2, 3, 4, 5] {
                row.push(fmt(get(i), false));
            }
            row.push(fmt(tavg.map(|t| t * ns), true));
            row.push(fmt(get(0).map(|v| v * ns), true));
            for i in [1, 2, 3, 4, 5] {
                row.push(fmt(get(i).map(|v| v * ns), false));
            }
            row.push(get(6).map_or("0".into(), |o| format!("{o:.0}")));
            row.push(n.to_string());
            row
        })
        .collect();
    render(style, 12, &LAT, &rows)
}

/// The bandwidth table: one row per run (pcie-bench prints one per test run).
pub fn bw_table(points: &[BwPoint], cache: CacheState, clock_hz: u32, style: Style) -> String {
    let mut rows = Vec::new();
    for p in points {
        for r in &p.runs {
            let mut row = key_cells(style, bw_test(p.operation), pattern(p.pattern), cache, p.offset, p.window, p.transfer_size);
            let ns = r.cycles as f64 * 1e9 / f64::from(clock_hz.max(1));
            let bytes = r.transfers * u64::from(p.transfer_size);
            let gbit = if ns > 0.0 { 8.0 * bytes as f64 / ns } else { 0.0 };
            let per_s = if ns > 0.0 { r.transfers as f64 / (ns / 1e9) } else { 0.0 };
            match style {
                Style::Csv => row.extend([
                    r.cycles.to_string(),
                    ns.to_string(),
                    bytes.to_string(),
                    r.transfers.to_string(),
                    gbit.to_string(),
                    per_s.to_string(),
                ]),
                Style::Text => row.extend([
                    r.cycles.to_string(),
                    time_text(ns),
                    size_text(bytes),
                    r.transfers.to_string(),
                    format!("{gbit:.3}"),
                    format!("{per_s:.1}"),
                ]),
            }
            rows.push(row);
        }
    }
    render(style, 10, &BW, &rows)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statistics_follow_pcie_benchs_definitions() {
        // n = 4: median is the mean of the middle two; p95 interpolates at 2.85.
        let [avg, med, min, max, p95, _, out] = sample_stats(&[10, 20, 30, 40]).expect("samples");
        assert_eq!((avg, med, min, max), (25.0, 25.0, 10.0, 40.0));
        assert!((p95 - 38.5).abs() < 1e-9, "{p95}");
        assert_eq!(out, 0.0);
        // One sample far above 3 x p95 of the rest is an outlier.
        let mut s = vec![100u32; 999];
        s.push(1000);
        assert_eq!(sample_stats(&s).expect("samples")[6], 1.0);
        assert!(sample_stats(&[]).is_none());
    }

    #[test]
    fn sizes_and_times_read_as_in_pcie_benchs_tables() {
        assert_eq!(size_text(8192), "8KB");
        assert_eq!(size_text(512 << 20), "512MB");
        assert_eq!(size_text(64), "64B");
        assert_eq!(time_text(159_525_400.0), "159.53ms");
    }

    #[test]
    fn the_text_header_lines_up_as_pcie_benchs_does() {
        let t = render(Style::Text, 12, &LAT, &[]);
        assert!(t.starts_with("        Test  PAT   Cache HO DO WinSZ   SZ     TAvg    Avg   Med"), "{t}");
        assert!(t.trim_end().ends_with("99.9%(ns)    #outliers   #samples"), "{t}");
        let c = render(Style::Csv, 10, &BW, &[]);
        assert_eq!(c, "Test,PAT,Cache,HO,DO,WinSZ,SZ,Time(cyc),Time,Bytes,Trans,BW (GB/s),Trans/s\r\n");
    }
}
