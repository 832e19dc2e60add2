//! Sample summaries as every tlpx result reports them: count, min, median, p99, p99.9, max.

use serde::{Deserialize, Serialize};

/// Summary of a set of samples. Percentiles use the nearest-rank method on sorted samples.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Summary {
    pub count: usize,
    pub min: f64,
    pub median: f64,
    pub mean: f64,
    pub p99: f64,
    pub p999: f64,
    pub max: f64,
}

/// Nearest-rank percentile (`q` in 0..=1) of sorted samples; `None` when empty.
pub fn percentile(sorted: &[f64], q: f64) -> Option<f64> {
    if sorted.is_empty() || !(0.0..=1.0).contains(&q) {
        return None;
    }
    let rank = (q * sorted.len() as f64).ceil() as usize;
    Some(sorted[rank.clamp(1, sorted.len()) - 1])
}

impl Summary {
    /// Summarises `samples` (NaNs are ignored); `None` when no sample remains.
    pub fn of(samples: &[f64]) -> Option<Summary> {
        let mut sorted: Vec<f64> = samples.iter().copied().filter(|v| !v.is_nan()).collect();
        if sorted.is_empty() {
            return None;
        }
        sorted.sort_by(|a, b| a.total_cmp(b));
        let mean = sorted.iter().sum::<f64>() / sorted.len() as f64;
        Some(Summary {
            count: sorted.len(),
            min: sorted[0],
            median: percentile(&sorted, 0.5)?,
            mean,
            p99: percentile(&sorted, 0.99)?,
            p999: percentile(&sorted, 0.999)?,
            max: sorted[sorted.len() - 1],
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn summary_of_1_to_1000() {
        let samples: Vec<f64> = (1..=1000).rev().map(f64::from).collect();
        let s = Summary::of(&samples).expect("non-empty");
        assert_eq!((s.count, s.min, s.max), (1000, 1.0, 1000.0));
        assert_eq!(s.median, 500.0);
        assert_eq!(s.p99, 990.0);
        assert_eq!(s.p999, 999.0);
        assert!((s.mean - 500.5).abs() < 1e-9);
    }

    #[test]
    fn summary_ignores_nan_and_rejects_empty() {
        assert!(Summary::of(&[]).is_none());
        assert!(Summary::of(&[f64::NAN]).is_none());
        let s = Summary::of(&[3.0, f64::NAN, 1.0]).expect("two samples");
        assert_eq!((s.count, s.min, s.median, s.max), (2, 1.0, 1.0, 3.0));
    }

    #[test]
    fn percentile_bounds() {
        assert_eq!(percentile(&[1.0, 2.0], 0.0), Some(1.0));
        assert_eq!(percentile(&[1.0, 2.0], 1.0), Some(2.0));
        assert_eq!(percentile(&[1.0], 1.5), None);
    }
}
