//! Histogram bins chosen by the data, for results that keep their raw samples (the irq user
//! stage's `user_cycles`, the loop's `loop_cycles`); the card's own histograms stay in its log2
//! buckets ([`super::log2_buckets`]).
//!
//! - Samples spanning less than [`LINEAR_SPAN`] (max / min): linear bins, the Freedman–Diaconis
//!   width (2 IQR n^-1/3; at most an eighth of the span) rounded up to a 1-2-5 step of ns, at
//!   most [`MAX_LINEAR_BINS`].
//! - Wider spans: log-spaced bins aligned to decades, 4, 5 or 8 per decade (the
//!   Freedman–Diaconis width of log10 of the samples, rounded to one of those).
//!
//! Several series of a figure share one binning ([`Binning::choose`] over all of them), so
//! that their bars stand side by side in the same bins.

/// Samples spanning less than this ratio (max / min) get linear bins.
pub const LINEAR_SPAN: f64 = 16.0;
/// At most this many linear bins (the width grows to fit).
pub const MAX_LINEAR_BINS: usize = 60;
/// Linear bins over a span are at least about this many (before rounding to 1-2-5).
const MIN_LINEAR_BINS: f64 = 8.0;
/// Log bins per decade to choose from.
const PER_DECADE: [u32; 3] = [4, 5, 8];

/// How the bins of a figure are spaced.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Binning {
    /// Bins `width` ns wide, edges at multiples of it.
    Linear { width: f64 },
    /// `per_decade` bins per decade, edges at 10^(k / per_decade).
    Log { per_decade: u32 },
}

/// The smallest 1-2-5 step (…, 1, 2, 5, 10, …) at or above `v` (> 0).
pub fn nice_step(v: f64) -> f64 {
    let mag = 10f64.powf(v.log10().floor());
    [1.0, 2.0, 5.0, 10.0].iter().map(|m| m * mag).find(|s| *s >= v * (1.0 - 1e-9)).unwrap_or(10.0 * mag)
}

/// The value at fraction `q` of sorted, non-empty `v` (linear interpolation).
fn quantile(v: &[f64], q: f64) -> f64 {
    let pos = q * (v.len() - 1) as f64;
    let (i, f) = (pos.floor() as usize, pos.fract());
    if i + 1 < v.len() {
        v[i] * (1.0 - f) + v[i + 1] * f
    } else {
        v[i]
    }
}

/// Freedman–Diaconis width of sorted `v` (0 when the middle half is one value).
fn fd_width(v: &[f64]) -> f64 {
    2.0 * (quantile(v, 0.75) - quantile(v, 0.25)) / (v.len() as f64).cbrt()
}

fn sorted_finite<'a>(sets: impl IntoIterator<Item = &'a [f64]>) -> Vec<f64> {
    let mut all: Vec<f64> = sets.into_iter().flatten().copied().filter(|v| v.is_finite()).collect();
    all.sort_by(f64::total_cmp);
    all
}

impl Binning {
    /// The bins for these sample sets together; `None` when there is no sample.
    pub fn choose<'a>(sets: impl IntoIterator<Item = &'a [f64]>) -> Option<Binning> {
        let v = sorted_finite(sets);
        let (&lo, &hi) = (v.first()?, v.last()?);
        if lo > 0.0 && hi / lo >= LINEAR_SPAN {
            let logs: Vec<f64> = v.iter().map(|x| x.log10()).collect();
            let h = fd_width(&logs);
            let want = if h > 0.0 { 1.0 / h } else { 8.0 };
            let per_decade = PER_DECADE.iter().copied().find(|&p| f64::from(p) >= want).unwrap_or(8);
            return Some(Binning::Log { per_decade });
        }
        let span = hi - lo;
        let mut width = fd_width(&v);
        if width <= 0.0 {
            // The middle half is one value: about ten bins over the span, or (one value) a
            // tenth of it.
            width = if span > 0.0 { span / 10.0 } else { (hi.abs() / 10.0).max(1.0) };
        }
        if span > 0.0 {
            // Few samples make a wide FD width: keep at least a handful of bins over the span.
            width = width.min(span / MIN_LINEAR_BINS);
        }
        width = width.max(span / MAX_LINEAR_BINS as f64);
        let mut width = nice_step(width);
        while (hi / width).floor() - (lo / width).floor() + 1.0 > MAX_LINEAR_BINS as f64 {
            width = nice_step(width * 1.5);
        }
        Some(Binning::Linear { width })
    }

    /// The bin holding `x`: its index and (from, to) edges.
    fn bin_of(&self, x: f64) -> (i64, f64, f64) {
        match *self {
            Binning::Linear { width } => {
                let k = (x / width).floor();
                (k as i64, k * width, (k + 1.0) * width)
            }
            Binning::Log { per_decade } => {
                let p = f64::from(per_decade);
                let k = (x.max(f64::MIN_POSITIVE).log10() * p + 1e-9).floor();
                (k as i64, 10f64.powf(k / p), 10f64.powf((k + 1.0) / p))
            }
        }
    }

    /// `samples` counted in these bins as (from, to, count), non-empty bins only (as the
    /// card's buckets), in order.
    pub fn count(&self, samples: &[f64]) -> Vec<(f64, f64, f64)> {
        let mut bins: Vec<(i64, f64, f64, f64)> = Vec::new();
        for x in sorted_finite([samples]) {
            let (k, from, to) = self.bin_of(x);
            match bins.last_mut() {
                Some(b) if b.0 == k => b.3 += 1.0,
                _ => bins.push((k, from, to, 1.0)),
            }
        }
        bins.into_iter().map(|(_, from, to, n)| (from, to, n)).collect()
    }

    pub fn is_linear(&self) -> bool {
        matches!(self, Binning::Linear { .. })
    }

    /// How the bins read in an axis label: "linear bins of 20 ns", "log bins, 8 per decade".
    pub fn describe(&self) -> String {
        match *self {
            Binning::Linear { width } => format!("linear bins of {}", super::logscale::tick_label(width, super::Ticks::Ns)),
            Binning::Log { per_decade } => format!("log bins, {per_decade} per decade"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn total(bins: &[(f64, f64, f64)]) -> f64 {
        bins.iter().map(|b| b.2).sum()
    }

    #[test]
    fn steps_are_1_2_5() {
        assert_eq!(nice_step(1.0), 1.0);
        assert_eq!(nice_step(1.3), 2.0);
        assert_eq!(nice_step(3.0), 5.0);
        assert_eq!(nice_step(7.0), 10.0);
        assert_eq!(nice_step(0.04), 0.05);
        assert_eq!(nice_step(120.0), 200.0);
    }

    #[test]
    fn a_narrow_span_gets_linear_bins_of_a_1_2_5_width() {
        // 1000 samples evenly over 1000..2000 ns (span 2): IQR 499.5, FD 2 * 499.5 / 10 = 99.9
        // ns, rounded up to 100.
        let v: Vec<f64> = (0..1000).map(|i| 1000.0 + f64::from(i)).collect();
        let b = Binning::choose([v.as_slice()]).expect("bins");
        assert_eq!(b, Binning::Linear { width: 100.0 });
        let bins = b.count(&v);
        assert_eq!(bins.len(), 10);
        assert_eq!(bins[0], (1000.0, 1100.0, 100.0));
        assert!(bins.windows(2).all(|w| w[0].1 == w[1].0), "adjacent bins share an edge");
        assert_eq!(total(&bins), 1000.0);
        assert_eq!(b.describe(), "linear bins of 100 ns");
        // FD widths that are no 1-2-5 step round up to one: 300 samples over 1000..1299,
        // IQR 149.5, FD 2 * 149.5 / 300^(1/3) = 44.7 → 50.
        let v: Vec<f64> = (0..300).map(|i| 1000.0 + f64::from(i)).collect();
        assert_eq!(Binning::choose([v.as_slice()]), Some(Binning::Linear { width: 50.0 }));
        // Few samples (a wide FD width) still get a handful of bins: 10 samples over 0..900
        // (FD 2 * 450 / 10^(1/3) = 418) → a span of 900 / 8 = 112.5 → 200 ns, 5 bins.
        let v: Vec<f64> = (0..10).map(|i| 100.0 * f64::from(i)).collect();
        let b = Binning::choose([v.as_slice()]).expect("bins");
        assert_eq!(b, Binning::Linear { width: 200.0 });
        assert_eq!(b.count(&v).len(), 5);
        // µs when wide: 5000 samples over 10..20 µs → FD ≈ 587 ns → 1 µs.
        let v: Vec<f64> = (0..5000).map(|i| 10_000.0 + 2.0 * f64::from(i)).collect();
        let b = Binning::choose([v.as_slice()]).expect("bins");
        assert_eq!(b.describe(), "linear bins of 1 µs");
    }

    #[test]
    fn a_wide_span_gets_log_bins_aligned_to_decades() {
        // 100 ns to 1 ms, log-uniform: a span of 10^4.
        let v: Vec<f64> = (0..=400).map(|i| 10f64.powf(2.0 + f64::from(i) / 100.0)).collect();
        let b = Binning::choose([v.as_slice()]).expect("bins");
        // IQR 2 decades, FD 2 * 2 / 401^(1/3) = 0.54 decade → 1.8 bins per decade wanted → 4.
        assert_eq!(b, Binning::Log { per_decade: 4 });
        let bins = b.count(&v);
        assert_eq!(total(&bins), 401.0);
        assert!((bins[0].0 - 100.0).abs() < 1e-9, "the first bin starts on the decade: {:?}", bins[0]);
        assert_eq!(bins.len(), 17, "16 bins over four decades, and the last sample's");
        for (from, to, _) in &bins {
            assert!(((to / from).log10() - 0.25).abs() < 1e-9, "every bin a quarter decade: {from} {to}");
        }
        assert_eq!(b.describe(), "log bins, 4 per decade");
        // Many samples close together, one far: the finest log bins.
        let mut v: Vec<f64> = (0..10_000).map(|i| 1000.0 + f64::from(i % 100)).collect();
        v.push(20_000.0);
        assert_eq!(Binning::choose([v.as_slice()]), Some(Binning::Log { per_decade: 8 }));
    }

    #[test]
    fn one_value_gets_one_bin_and_no_samples_no_bins() {
        let v = vec![1500.0; 7];
        let b = Binning::choose([v.as_slice()]).expect("bins");
        assert_eq!(b, Binning::Linear { width: 200.0 });
        assert_eq!(b.count(&v), vec![(1400.0, 1600.0, 7.0)]);
        assert_eq!(Binning::choose([[].as_slice()]), None);
        assert_eq!(Binning::choose([[f64::NAN].as_slice()]), None);
        assert!(b.count(&[]).is_empty());
        // A lone zero still gets a width.
        assert_eq!(Binning::choose([[0.0].as_slice()]), Some(Binning::Linear { width: 1.0 }));
    }

    #[test]
    fn outliers_are_counted_and_do_not_explode_the_bins() {
        // 990 samples in 1000..1010 ns and ten at 15 µs (span 15: still linear): the FD width
        // of the middle half would give thousands of bins; the cap keeps them few.
        let mut v: Vec<f64> = (0..990).map(|i| 1000.0 + f64::from(i % 10)).collect();
        v.extend([15_000.0; 10]);
        let b = Binning::choose([v.as_slice()]).expect("bins");
        let Binning::Linear { width } = b else { panic!("linear: {b:?}") };
        let bins = b.count(&v);
        assert!(bins.len() <= MAX_LINEAR_BINS && width >= 14_000.0 / MAX_LINEAR_BINS as f64, "{width} {}", bins.len());
        assert_eq!(total(&bins), 1000.0);
        assert_eq!(bins.last().map(|b| b.2), Some(10.0), "the outliers have their bin");
        // One far outlier (span > 16x): log bins, and it is counted too.
        let mut v: Vec<f64> = (0..999).map(|i| 1000.0 + f64::from(i % 50)).collect();
        v.push(1e6);
        let b = Binning::choose([v.as_slice()]).expect("bins");
        assert!(!b.is_linear());
        let bins = b.count(&v);
        assert_eq!(total(&bins), 1000.0);
        assert!(bins.last().is_some_and(|l| l.0 <= 1e6 && 1e6 < l.1 && l.2 == 1.0), "{bins:?}");
    }

    #[test]
    fn several_sets_share_one_binning() {
        let a: Vec<f64> = (0..100).map(|i| 1000.0 + f64::from(i)).collect();
        let b: Vec<f64> = (0..100).map(|i| 1500.0 + f64::from(i)).collect();
        let bins = Binning::choose([a.as_slice(), b.as_slice()]).expect("bins");
        let Binning::Linear { width } = bins else { panic!("linear: {bins:?}") };
        // Every bin of either set sits on the shared grid of `width`.
        for set in [&a, &b] {
            let counted = bins.count(set);
            assert_eq!(total(&counted), 100.0);
            assert!(counted.iter().all(|(from, to, _)| (from / width).fract() == 0.0 && (to - from - width).abs() < 1e-9));
        }
    }
}
