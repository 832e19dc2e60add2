//! The correlation of the host's clock with the card's cycle counter: pairs (t_a, card
//! counter, t_b) taken over MMIO bracket the instant the card latched its counter; a least
//! squares line through the fastest pairs gives the conversion, and the polygon of every
//! line the brackets allow gives a bound on its error (docs/interrupts.md, last section).

use std::time::Duration;

use serde::Serialize;

use super::error::IsrTraceError;
use super::trace::TraceClock;
use crate::card::Card;
use crate::DeviceError;

/// Fewest (t_a, cycles, t_b) pairs a fit accepts.
pub const MIN_PAIRS: usize = 4;
/// Most pairs a fit accepts (the bound's polygon costs O(pairs × its vertices)).
pub const MAX_PAIRS: usize = 20_000;

/// The host/card clock correlation: see [`ClockCorrelation::fit`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClockCorrelation;

/// A fitted line card_cycles = f(host_ns), with the bound of its error.
///
/// Cycle positions are continuous: the counter reads `c` while the card's time is in
/// [c, c+1). [`ClockFit::host_ns_to_cycles`] gives the integer the counter would have read.
#[derive(Debug, Clone, PartialEq, Serialize, serde::Deserialize)]
pub struct ClockFit {
    /// Host time the line is anchored at (ns, the clock of the pairs).
    pub ref_host_ns: u64,
    /// Integer part of the card's time at `ref_host_ns` …
    pub ref_cycles: u64,
    /// … and the rest (cycles, small).
    pub offset_cycles: f64,
    /// Slope: card cycles per host ns (clock_hz / 1e9 for clocks that agree).
    pub cycles_per_ns: f64,
    /// Bound on |true slope − `cycles_per_ns`|.
    pub rate_uncertainty: f64,
    /// Bound on the error of the card time given for any host time in the window
    /// (continuous cycles; an integer conversion adds up to 1).
    pub bound_cycles: f64,
    /// The host times the pairs span.
    pub window_from_ns: u64,
    pub window_to_ns: u64,
    pub pairs_total: usize,
    pub pairs_used: usize,
    pub round_trip_min_ns: u64,
    pub round_trip_median_ns: u64,
    /// Pairs with a longer round trip were left out.
    pub round_trip_limit_ns: u64,
    /// Residuals of the pairs used (their midpoints against the line), cycles.
    pub residual_rms_cycles: f64,
    pub residual_max_cycles: f64,
    /// Some straight line passes through every bracket. When false the bound is the
    /// fallback (largest residual + half the longest round trip used) and not rigorous.
    pub consistent: bool,
    /// The card's nominal clock (for `drift_ppm`).
    pub nominal_hz: Option<u32>,
    /// For an interpolated fit: the change of slope between its two fits (ppm of the
    /// first), and the curvature allowance added to the bound for it.
    pub rate_change_ppm: Option<f64>,
    pub curvature_cycles: f64,
    /// Corners of every (offset, slope) the brackets allow, relative to the fit.
    #[serde(skip)]
    feasible: Vec<(f64, f64)>,
    /// The pairs used.
    #[serde(skip)]
    used: Vec<(u64, u64, u64)>,
}

impl ClockCorrelation {
    /// Fits card_cycles = a + b · host_ns through `pairs` (t_a, card cycles, t_b): host
    /// time before a read of the card's counter, the value read, host time after.
    ///
    /// The card latched the counter somewhere in [t_a, t_b]; the midpoint is taken as its
    /// time, off by at most half the round trip. Only the fastest half of the pairs (at least
    /// [`MIN_PAIRS`]) is used: a long round trip (an interrupt, a preemption, a busy link
    /// between t_a and the read) only widens a bracket. The bound comes from the brackets,
    /// not from the residuals: every line that passes through all of them (C(t_a) ≤ c + 1 and
    /// C(t_b) ≥ c) is a candidate for the true one, and the bound is the furthest any of them
    /// is from the fitted line over the window. Pairs must be in the order they were taken:
    /// host times and card cycles both increasing.
    pub fn fit(pairs: &[(u64, u64, u64)]) -> Result<ClockFit, DeviceError> {
        check_pairs(pairs)?;
        let mut round_trips: Vec<u64> = pairs.iter().map(|&(a, _, b)| b - a).collect();
        round_trips.sort_unstable();
        let keep = MIN_PAIRS.max(pairs.len().div_ceil(2)).min(pairs.len());
        let limit = round_trips[keep - 1];
        let used: Vec<(u64, u64, u64)> = pairs.iter().copied().filter(|&(a, _, b)| b - a <= limit).collect();
        let mut fit = fit_used(used, pairs.len())?;
        fit.round_trip_min_ns = round_trips[0];
        fit.round_trip_median_ns = round_trips[round_trips.len() / 2];
        fit.round_trip_limit_ns = limit;
        Ok(fit)
    }

    /// Takes `n` pairs from `card` back to back and fits them (see [`ClockCorrelation::fit`]).
    /// The window is short (n round trips), so the slope is only loosely known: to convert
    /// times of a run, correlate before and after it and [`ClockCorrelation::interpolate`].
    pub fn measure(card: &mut Card, n: usize) -> Result<ClockFit, DeviceError> {
        ClockCorrelation::measure_spaced(card, n, Duration::ZERO)
    }

    /// As [`ClockCorrelation::measure`], sleeping `spacing` between pairs (a longer window
    /// pins the slope down better).
    pub fn measure_spaced(card: &mut Card, n: usize, spacing: Duration) -> Result<ClockFit, DeviceError> {
        let pairs = ClockCorrelation::measure_pairs(card, n, spacing, TraceClock::MonotonicRaw)?;
        let hz = card.identity().clock_hz;
        Ok(ClockCorrelation::fit(&pairs)?.with_nominal_hz(hz))
    }

    /// Takes `n` pairs (t_a, card cycles, t_b) in `clock`: each is a clock_gettime, one
    /// 64-bit read of the card's timebase (one 2-DW MRd, never torn), a clock_gettime.
    pub fn measure_pairs(card: &mut Card, n: usize, spacing: Duration, clock: TraceClock) -> Result<Vec<(u64, u64, u64)>, DeviceError> {
        if !(MIN_PAIRS..=MAX_PAIRS).contains(&n) {
            return Err(IsrTraceError::PairCount(n).into());
        }
        let mut pairs = Vec::with_capacity(n);
        for i in 0..n {
            if i > 0 && !spacing.is_zero() {
                std::thread::sleep(spacing);
            }
            let a = clock.now_ns()?;
            let c = card.cycles()?;
            let b = clock.now_ns()?;
            pairs.push((a, c, b));
        }
        Ok(pairs)
    }

    /// One line through the pairs of `before` and `after` (two correlations around a run),
    /// valid for the whole time between them. It assumes the ratio of the two clocks does
    /// not change between the fits; when their own slopes show a change larger than their
    /// uncertainties, `curvature_cycles` (the chord's error for a slope changing steadily,
    /// |Δb|·T/8) is added to the bound and `rate_change_ppm` says how large the change was.
    pub fn interpolate(before: &ClockFit, after: &ClockFit) -> Result<ClockFit, DeviceError> {
        if after.window_from_ns < before.window_to_ns {
            return Err(IsrTraceError::FitsOutOfOrder { after_from: after.window_from_ns, before_to: before.window_to_ns }.into());
        }
        if before.used.is_empty() || after.used.is_empty() {
            return Err(IsrTraceError::FitsWithoutPairs.into());
        }
        let (c_end, c_start) = (before.used[before.used.len() - 1].1, after.used[0].1);
        if c_start <= c_end {
            return Err(IsrTraceError::CardCounterRestarted { after_start: c_start, before_end: c_end }.into());
        }
        let mut used = before.used.clone();
        used.extend_from_slice(&after.used);
        let mut fit = fit_used(used, before.pairs_total + after.pairs_total)?;
        fit.round_trip_min_ns = before.round_trip_min_ns.min(after.round_trip_min_ns);
        fit.round_trip_median_ns = before.round_trip_median_ns.max(after.round_trip_median_ns);
        fit.round_trip_limit_ns = before.round_trip_limit_ns.max(after.round_trip_limit_ns);
        fit.nominal_hz = before.nominal_hz.or(after.nominal_hz);
        let change = after.cycles_per_ns - before.cycles_per_ns;
        fit.rate_change_ppm = Some(change / before.cycles_per_ns * 1e6);
        let noise = before.rate_uncertainty + after.rate_uncertainty;
        if change.abs() > noise {
            let span = after.center_ns() - before.center_ns();
            fit.curvature_cycles = (change.abs() + noise) * span / 8.0;
            if !fit.consistent {
                fit.bound_cycles = before.bound_cycles.max(after.bound_cycles);
            }
            fit.bound_cycles += fit.curvature_cycles;
        }
        Ok(fit)
    }
}

fn check_pairs(pairs: &[(u64, u64, u64)]) -> Result<(), DeviceError> {
    if pairs.len() < MIN_PAIRS {
        return Err(IsrTraceError::TooFewPairs(pairs.len()).into());
    }
    if pairs.len() > MAX_PAIRS {
        return Err(IsrTraceError::TooManyPairs(pairs.len()).into());
    }
    for (i, &(a, _, b)) in pairs.iter().enumerate() {
        if b < a {
            return Err(IsrTraceError::PairReversed { pair: i, host_a: a, host_b: b }.into());
        }
    }
    for (i, w) in pairs.windows(2).enumerate() {
        let ((_, c0, b0), (a1, c1, _)) = (w[0], w[1]);
        if a1 < b0 {
            return Err(IsrTraceError::PairsOverlap { pair: i + 1, host_a: a1, previous_host_b: b0 }.into());
        }
        if c1 <= c0 {
            return Err(IsrTraceError::CardCounterNotIncreasing { pair: i + 1, cycles: c1, previous_cycles: c0 }.into());
        }
    }
    Ok(())
}

/// Signed difference a − b of two u64 as f64.
pub(super) fn diff(a: u64, b: u64) -> f64 {
    (i128::from(a) - i128::from(b)) as f64
}

/// Least squares through the midpoints of `used`, and the polygon of the lines the brackets allow.
fn fit_used(used: Vec<(u64, u64, u64)>, pairs_total: usize) -> Result<ClockFit, DeviceError> {
    let (first, last) = (used[0], used[used.len() - 1]);
    let ref_host = first.0 + (first.2 - first.0) / 2;
    let ref_cycles = first.1;
    let n = used.len() as f64;
    // The counter reads c during [c, c+1): the mean card time of a read is c + 0.5.
    let pts: Vec<(f64, f64)> =
        used.iter().map(|&(a, c, b)| ((diff(a, ref_host) + diff(b, ref_host)) / 2.0, diff(c, ref_cycles) + 0.5)).collect();
    let mx = pts.iter().map(|p| p.0).sum::<f64>() / n;
    let my = pts.iter().map(|p| p.1).sum::<f64>() / n;
    let sxx: f64 = pts.iter().map(|p| (p.0 - mx) * (p.0 - mx)).sum();
    let sxy: f64 = pts.iter().map(|p| (p.0 - mx) * (p.1 - my)).sum();
    if sxx <= 0.0 {
        return Err(IsrTraceError::SameHostTime.into());
    }
    let rate = sxy / sxx;
    if !(rate.is_finite() && rate > 0.0) {
        return Err(IsrTraceError::NoAdvance(rate).into());
    }
    let offset = my - rate * mx;
    let residuals: Vec<f64> = pts.iter().map(|p| p.1 - (offset + rate * p.0)).collect();
    let residual_rms = (residuals.iter().map(|r| r * r).sum::<f64>() / n).sqrt();
    let residual_max = residuals.iter().fold(0.0f64, |m, r| m.max(r.abs()));

    // Slopes the first and last brackets allow: b ∈ [(Δc − 1)/(t_b,l − t_a,f), (Δc + 1)/(t_a,l − t_b,f)].
    let dc = diff(last.1, first.1);
    let rate_lo = ((dc - 1.0) / diff(last.2, first.0)).max(0.0);
    let rate_hi = if last.0 > first.2 { (dc + 1.0) / diff(last.0, first.2) } else { 2.0 * rate };
    let max_round_trip = used.iter().map(|&(a, _, b)| b - a).max().unwrap_or(0) as f64;

    // The feasible (Δoffset, Δslope) polygon: start from the box the first pair and the
    // slope range allow, clip by both half-planes of every bracket.
    let xa0 = diff(first.0, ref_host);
    let xb0 = diff(first.2, ref_host);
    let (db_lo, db_hi) = (rate_lo - rate, rate_hi - rate);
    let r1 = |x: f64, y: f64| y + 1.0 - offset - rate * x; // Δa + Δb·x_a ≤ r1
    let r2 = |x: f64, y: f64| y - offset - rate * x; // Δa + Δb·x_b ≥ r2
    let y0 = 0.0;
    let da_hi = (r1(xa0, y0) - db_lo * xa0).max(r1(xa0, y0) - db_hi * xa0) + 1.0;
    let da_lo = (r2(xb0, y0) - db_lo * xb0).min(r2(xb0, y0) - db_hi * xb0) - 1.0;
    let mut poly = vec![(da_lo, db_lo), (da_hi, db_lo), (da_hi, db_hi), (da_lo, db_hi)];
    for &(a, c, b) in &used {
        let (xa, xb, y) = (diff(a, ref_host), diff(b, ref_host), diff(c, ref_cycles));
        poly = clip(&poly, 1.0, xa, r1(xa, y));
        poly = clip(&poly, -1.0, -xb, -r2(xb, y));
        if poly.is_empty() {
            break;
        }
    }
    let consistent = !poly.is_empty();
    let (window_from_ns, window_to_ns) = (first.0, last.2);
    let mut fit = ClockFit {
        ref_host_ns: ref_host,
        ref_cycles,
        offset_cycles: offset,
        cycles_per_ns: rate,
        rate_uncertainty: 0.0,
        bound_cycles: 0.0,
        window_from_ns,
        window_to_ns,
        pairs_total,
        pairs_used: used.len(),
        round_trip_min_ns: 0,
        round_trip_median_ns: 0,
        round_trip_limit_ns: 0,
        residual_rms_cycles: residual_rms,
        residual_max_cycles: residual_max,
        consistent,
        nominal_hz: None,
        rate_change_ppm: None,
        curvature_cycles: 0.0,
        feasible: poly,
        used,
    };
    if consistent {
        fit.rate_uncertainty = fit.feasible.iter().fold(0.0f64, |m, v| m.max(v.1.abs()));
        fit.bound_cycles = fit.polygon_error(diff(window_from_ns, ref_host)).max(fit.polygon_error(diff(window_to_ns, ref_host)));
    } else {
        fit.rate_uncertainty = (rate_hi - rate).max(rate - rate_lo);
        fit.bound_cycles = residual_max + rate * max_round_trip / 2.0 + 1.0;
    }
    Ok(fit)
}

/// Clips a convex polygon by p·x + q·y ≤ r (Sutherland–Hodgman, one plane).
fn clip(poly: &[(f64, f64)], p: f64, q: f64, r: f64) -> Vec<(f64, f64)> {
    let scale = r.abs().max(1.0);
    let inside = |v: (f64, f64)| p * v.0 + q * v.1 <= r + 1e-9 * scale;
    let mut out = Vec::with_capacity(poly.len() + 1);
    for i in 0..poly.len() {
        let cur = poly[i];
        let next = poly[(i + 1) % poly.len()];
        let (ci, ni) = (inside(cur), inside(next));
        if ci {
            out.push(cur);
        }
        if ci != ni {
            let fc = p * cur.0 + q * cur.1 - r;
            let fn_ = p * next.0 + q * next.1 - r;
            let t = fc / (fc - fn_);
            out.push((cur.0 + t * (next.0 - cur.0), cur.1 + t * (next.1 - cur.1)));
        }
    }
    out
}

impl ClockFit {
    /// Sets the card's nominal clock, for [`ClockFit::drift_ppm`].
    pub fn with_nominal_hz(mut self, hz: u32) -> ClockFit {
        self.nominal_hz = Some(hz);
        self
    }

    /// How far the card's clock runs from its nominal rate, measured against the host clock
    /// (ppm; positive: the card counts faster). `None` without a nominal clock.
    pub fn drift_ppm(&self) -> Option<f64> {
        self.nominal_hz.filter(|&hz| hz > 0).map(|hz| (self.cycles_per_ns / (f64::from(hz) / 1e9) - 1.0) * 1e6)
    }

    /// [`ClockFit::rate_uncertainty`] in ppm of the fitted rate.
    pub fn rate_uncertainty_ppm(&self) -> f64 {
        self.rate_uncertainty / self.cycles_per_ns * 1e6
    }

    /// The error bound inside the window (cycles of card time).
    pub fn uncertainty_cycles(&self) -> f64 {
        self.bound_cycles
    }

    /// The error bound at `host_ns`: inside the window [`ClockFit::uncertainty_cycles`];
    /// outside, it grows with the distance by the slope's uncertainty.
    pub fn uncertainty_cycles_at(&self, host_ns: u64) -> f64 {
        let outside = if host_ns < self.window_from_ns {
            diff(self.window_from_ns, host_ns)
        } else if host_ns > self.window_to_ns {
            diff(host_ns, self.window_to_ns)
        } else {
            0.0
        };
        if outside == 0.0 {
            return self.bound_cycles;
        }
        if self.consistent && self.curvature_cycles == 0.0 {
            self.polygon_error(diff(host_ns, self.ref_host_ns))
        } else {
            self.bound_cycles + self.rate_uncertainty * outside
        }
    }

    /// Furthest any allowed line is from the fit at host time ref + dt.
    fn polygon_error(&self, dt: f64) -> f64 {
        self.feasible.iter().fold(0.0f64, |m, &(da, db)| m.max((da + db * dt).abs()))
    }

    fn center_ns(&self) -> f64 {
        (self.window_from_ns as f64 + self.window_to_ns as f64) / 2.0
    }

    /// The pairs the fit used (the fastest ones), in the order taken.
    pub fn used_pairs(&self) -> &[(u64, u64, u64)] {
        &self.used
    }

    /// The card's time at `host_ns` minus `cycle` (continuous cycles; negative before it).
    pub fn cycles_since(&self, host_ns: u64, cycle: u64) -> f64 {
        diff(self.ref_cycles, cycle) + self.offset_cycles + self.cycles_per_ns * diff(host_ns, self.ref_host_ns)
    }

    /// The value the card's counter had at `host_ns`.
    pub fn host_ns_to_cycles(&self, host_ns: u64) -> Result<u64, DeviceError> {
        let v = self.offset_cycles + self.cycles_per_ns * diff(host_ns, self.ref_host_ns);
        let c = i128::from(self.ref_cycles) + v.floor() as i128;
        u64::try_from(c).map_err(|_| IsrTraceError::HostTimeOutOfRange(host_ns).into())
    }

    /// The host time at the middle of card cycle `cycles`.
    pub fn cycles_to_host_ns(&self, cycles: u64) -> Result<u64, DeviceError> {
        let dt = (diff(cycles, self.ref_cycles) + 0.5 - self.offset_cycles) / self.cycles_per_ns;
        let t = i128::from(self.ref_host_ns) + dt.round() as i128;
        u64::try_from(t).map_err(|_| IsrTraceError::CycleOutOfRange(cycles).into())
    }
}
#[cfg(test)]
mod tests {
    use super::super::testdata::{pairs, worst_error, Lcg, TrueClock, BOOT, NOMINAL};
    use super::*;

    #[test]
    fn a_known_offset_and_rate_are_recovered_within_the_bound() {
        let clock = TrueClock { t_start: BOOT, c0: 987_654_321.0, rate: 0.125 * (1.0 + 37e-6), accel: 0.0 };
        let mut rng = Lcg(1);
        // 64 back-to-back reads of ~900 ns, as on a Gen2 link.
        let p = pairs(clock, BOOT + 1000, 64, 1000, 900, 0, &mut rng);
        let fit = ClockCorrelation::fit(&p).expect("fits").with_nominal_hz(NOMINAL);
        assert!(fit.consistent, "{fit:?}");
        let err = worst_error(&fit, clock, fit.window_from_ns, fit.window_to_ns);
        assert!(err <= fit.uncertainty_cycles(), "error {err} > bound {}", fit.uncertainty_cycles());
        // The bound is of the order of a round trip (900 ns = 112 cycles), not more.
        assert!(fit.uncertainty_cycles() < 112.0, "bound {} cycles", fit.uncertainty_cycles());
        assert_eq!((fit.pairs_total, fit.pairs_used), (64, 32));
        // A short window pins the rate only roughly; the truth lies inside what it says.
        assert!((fit.cycles_per_ns - clock.rate).abs() <= fit.rate_uncertainty, "{fit:?}");
        // Conversions are inverse of each other, and agree with the counter.
        let t = (fit.window_from_ns + fit.window_to_ns) / 2;
        let c = fit.host_ns_to_cycles(t).expect("in range");
        assert!((diff(c, 0) - clock.at(t)).abs() <= fit.uncertainty_cycles() + 1.0);
        let back = fit.cycles_to_host_ns(c).expect("in range");
        assert!(back.abs_diff(t) <= 8, "{t} -> {c} -> {back}");
        // Outside the window the bound grows with the distance.
        let later = fit.window_to_ns + 1_000_000;
        assert!(fit.uncertainty_cycles_at(later) > fit.uncertainty_cycles());
        assert!((fit.cycles_since(later, 0) - clock.at(later)).abs() <= fit.uncertainty_cycles_at(later));
        // The card's counter started long after host time 0: no cycle to give there.
        let e = fit.host_ns_to_cycles(0).expect_err("before the counter's zero").to_string();
        assert!(e.contains("before its zero"), "{e}");
    }

    #[test]
    fn long_round_trips_are_left_out_and_the_bound_still_holds() {
        let clock = TrueClock { t_start: BOOT, c0: 5e9, rate: 0.25, accel: 0.0 };
        let mut rng = Lcg(7);
        // Every 3rd read is preempted for 40 µs: a third of the pairs are outliers.
        let p = pairs(clock, BOOT, 90, 1000, 600, 3, &mut rng);
        let fit = ClockCorrelation::fit(&p).expect("fits");
        assert!(fit.round_trip_limit_ns < 40_000, "an outlier was used: {fit:?}");
        assert_eq!(fit.pairs_used, 45);
        assert!(fit.consistent);
        let err = worst_error(&fit, clock, fit.window_from_ns, fit.window_to_ns);
        assert!(err <= fit.uncertainty_cycles(), "error {err} > bound {}", fit.uncertainty_cycles());
        assert!(fit.uncertainty_cycles() < 600.0 * 0.25 * 1.3, "bound {}", fit.uncertainty_cycles());
        // Fitting every pair (outliers in) would be far worse: the bound would have to grow.
        let naive = pairs(clock, BOOT, 90, 1000, 600, 3, &mut Lcg(7));
        assert_eq!(naive, p);
        assert!(fit.residual_max_cycles < 100.0, "{fit:?}");
    }

    #[test]
    fn a_rate_error_shows_as_drift_with_its_uncertainty() {
        // A card 50 ppm fast; pairs spread over one second (every 10 ms).
        let clock = TrueClock { t_start: BOOT, c0: 1e6, rate: 0.125 * (1.0 + 50e-6), accel: 0.0 };
        let p = pairs(clock, BOOT, 100, 10_000_000, 1000, 0, &mut Lcg(3));
        let fit = ClockCorrelation::fit(&p).expect("fits").with_nominal_hz(NOMINAL);
        let drift = fit.drift_ppm().expect("nominal given");
        assert!((drift - 50.0).abs() <= fit.rate_uncertainty_ppm() + 1e-6, "drift {drift} ± {}", fit.rate_uncertainty_ppm());
        assert!(fit.rate_uncertainty_ppm() < 3.0, "±{} ppm", fit.rate_uncertainty_ppm());
        assert!(worst_error(&fit, clock, fit.window_from_ns, fit.window_to_ns) <= fit.uncertainty_cycles());
        assert_eq!(ClockCorrelation::fit(&p).expect("fits").drift_ppm(), None);
    }

    #[test]
    fn interpolation_between_two_short_correlations_covers_the_run() {
        // Short correlations 10 s apart around a run; the card is 30 ppm fast.
        let clock = TrueClock { t_start: BOOT, c0: 42.0, rate: 0.125 * (1.0 + 30e-6), accel: 0.0 };
        let mut rng = Lcg(11);
        let before = ClockCorrelation::fit(&pairs(clock, BOOT, 64, 1000, 900, 0, &mut rng)).expect("before").with_nominal_hz(NOMINAL);
        let after = ClockCorrelation::fit(&pairs(clock, BOOT + 10_000_000_000, 64, 1000, 900, 0, &mut rng)).expect("after");
        // Alone, the first fit is useless 5 s later: its slope is only known to a few %.
        let mid = BOOT + 5_000_000_000;
        assert!(before.uncertainty_cycles_at(mid) > 1e6, "{}", before.uncertainty_cycles_at(mid));
        let run = ClockCorrelation::interpolate(&before, &after).expect("interpolates");
        assert!(run.consistent && run.curvature_cycles == 0.0, "{run:?}");
        let err = worst_error(&run, clock, run.window_from_ns, run.window_to_ns);
        assert!(err <= run.uncertainty_cycles(), "error {err} > bound {}", run.uncertainty_cycles());
        assert!(run.uncertainty_cycles() <= before.uncertainty_cycles().max(after.uncertainty_cycles()) + 1.0);
        let drift = run.drift_ppm().expect("nominal from before");
        assert!((drift - 30.0).abs() < 0.05 && run.rate_uncertainty_ppm() < 0.2, "drift {drift} ± {}", run.rate_uncertainty_ppm());
        assert_eq!(run.pairs_total, 128);
        let e = ClockCorrelation::interpolate(&after, &before).expect_err("reversed").to_string();
        assert!(e.contains("time order"), "{e}");
    }

    #[test]
    fn interpolation_across_a_rate_change_adds_the_chord_error() {
        // Over 20 s the card's rate goes from +30 to +130 ppm (a fast warm-up); 2-second
        // correlations (pairs every 20 ms) see it, and the bound widens for the chord.
        let r0 = 0.125 * (1.0 + 30e-6);
        let accel = 0.125 * 100e-6 / 20e9;
        let clock = TrueClock { t_start: BOOT, c0: 0.0, rate: r0, accel };
        let mut rng = Lcg(5);
        let before = ClockCorrelation::fit(&pairs(clock, BOOT, 100, 20_000_000, 1000, 0, &mut rng)).expect("before");
        let after = ClockCorrelation::fit(&pairs(clock, BOOT + 18_000_000_000, 100, 20_000_000, 1000, 0, &mut rng)).expect("after");
        let run = ClockCorrelation::interpolate(&before, &after).expect("interpolates");
        let change = run.rate_change_ppm.expect("reported");
        assert!((change - 90.0).abs() < 10.0, "rate change {change} ppm");
        assert!(run.curvature_cycles > 0.0, "{run:?}");
        let err = worst_error(&run, clock, run.window_from_ns, run.window_to_ns);
        assert!(err <= run.uncertainty_cycles(), "error {err} > bound {}", run.uncertainty_cycles());
        assert!(err > 1000.0, "the chord really is off by {err} cycles mid-run");
    }

    #[test]
    fn too_few_or_disordered_pairs_are_refused_clearly() {
        let ok: Vec<(u64, u64, u64)> = (0..8).map(|i| (1000 * i, 100 * i + 5, 1000 * i + 500)).collect();
        assert!(ClockCorrelation::fit(&ok).is_ok());
        let e = ClockCorrelation::fit(&ok[..3]).expect_err("3 pairs").to_string();
        assert!(e.contains("at least 4") && e.contains("not 3"), "{e}");
        let mut backwards = ok.clone();
        backwards[2] = (2500, 205, 2000);
        let e = ClockCorrelation::fit(&backwards).expect_err("host_b < host_a").to_string();
        assert!(e.contains("pair 2") && e.contains("host_b 2000 is before host_a 2500"), "{e}");
        let mut reset = ok.clone();
        reset[5].1 = 10;
        let e = ClockCorrelation::fit(&reset).expect_err("counter went back").to_string();
        assert!(e.contains("pair 5") && e.contains("card cycles 10 do not follow"), "{e}");
        let mut shuffled = ok.clone();
        shuffled.swap(3, 4);
        let e = ClockCorrelation::fit(&shuffled).expect_err("out of order").to_string();
        assert!(e.contains("order they were taken"), "{e}");
        let too_many = vec![(0, 0, 0); MAX_PAIRS + 1];
        assert!(ClockCorrelation::fit(&too_many).expect_err("too many").to_string().contains("at most"));
    }

    // Pairs recorded from the simulated card -------------------------------------------------

    /// Where the recording lives (blocks/irq_timer/tests/fixtures/sim_pairs.txt: `t_a cycles t_b`
    /// per line, host CLOCK_MONOTONIC_RAW ns and the sim card's timebase).
    const SIM_PAIRS: &str = include_str!("../tests/fixtures/sim_pairs.txt");

    fn recorded_pairs() -> Vec<(u64, u64, u64)> {
        SIM_PAIRS
            .lines()
            .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
            .map(|l| {
                let v: Vec<u64> = l.split_whitespace().map(|x| x.parse().expect("a number")).collect();
                (v[0], v[1], v[2])
            })
            .collect()
    }

    /// Re-records the fixture: real host times and real round trips over the sim's socket
    /// (two correlations of 64 pairs, 50 ms apart), as `ClockCorrelation::measure` takes them.
    /// `cargo test --release -p tlpx-device -- --ignored record_sim_pairs`
    #[test]
    #[ignore = "writes blocks/irq_timer/tests/fixtures/sim_pairs.txt; run by hand to re-record"]
    fn record_sim_pairs() {
        let sim = tlpx_testkit::SimProcess::start(&[]);
        let dev = crate::backends::sim::SimDevice::connect(sim.socket()).expect("connect to the sim");
        let mut card = Card::open(Box::new(dev)).expect("a tlpx card");
        let mut text = String::from("# t_a cycles t_b: two correlations of 64 pairs against the simulated card, 50 ms apart\n");
        for i in 0..2 {
            if i > 0 {
                std::thread::sleep(Duration::from_millis(50));
            }
            for (a, c, b) in ClockCorrelation::measure_pairs(&mut card, 64, Duration::ZERO, TraceClock::MonotonicRaw).expect("pairs") {
                text.push_str(&format!("{a} {c} {b}\n"));
            }
        }
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../blocks/irq_timer/tests/fixtures/sim_pairs.txt");
        std::fs::write(&path, text).expect("write the fixture");
    }

    /// The fit on pairs with real jitter: each used bracket agrees with the line within the
    /// bound, the fastest half is used, and the figures are the ones the fit gave when the
    /// pairs were recorded (a change of the fit shows here first).
    #[test]
    fn fits_of_pairs_recorded_from_the_simulated_card() {
        let all = recorded_pairs();
        assert_eq!(all.len(), 128);
        let (before, after) = all.split_at(64);
        let fits = [ClockCorrelation::fit(before).expect("before"), ClockCorrelation::fit(after).expect("after")];
        for fit in &fits {
            assert_eq!((fit.pairs_total, fit.pairs_used), (64, 32));
            if fit.consistent {
                let u = fit.uncertainty_cycles();
                for &(a, c, b) in fit.used_pairs() {
                    // The card latched c somewhere in [a, b]: some point of the bracket is
                    // within the bound of the line.
                    assert!(fit.cycles_since(a, c) <= 1.0 + u && fit.cycles_since(b, c) >= -u, "({a}, {c}, {b}) outside ±{u}: {fit:?}");
                }
            }
        }
        let run = ClockCorrelation::interpolate(&fits[0], &fits[1]).expect("interpolates");
        assert_eq!(run.pairs_used, 64);
        // In virtual time the card's counter stands still while no client waits, so across
        // the 50 ms pause no straight line passes through every bracket: the fit must say so
        // (and fall back to its non-rigorous bound) rather than claim a bound.
        assert_eq!((fits[0].consistent, fits[1].consistent, run.consistent), (true, true, false));
        let close = |got: f64, want: f64| (got - want).abs() <= 1e-9 * want.abs();
        let figures =
            [fits[0].cycles_per_ns, fits[0].bound_cycles, fits[1].cycles_per_ns, fits[1].bound_cycles, run.cycles_per_ns, run.bound_cycles];
        let recorded =
            [0.0009615976977789618, 11.419917591037134, 0.0013154804704962168, 13.031735687681664, 2.806991664294527e-5, 2529.101351712016];
        assert!(figures.iter().zip(recorded).all(|(&g, w)| close(g, w)), "{figures:?} vs {recorded:?}");
        let trips = [fits[0].round_trip_min_ns, fits[0].round_trip_limit_ns, fits[1].round_trip_min_ns, fits[1].round_trip_limit_ns];
        assert_eq!(trips, [21860, 23179, 17123, 17358]);
    }

    // The simulated card --------------------------------------------------------------------

    /// In the simulator card time is virtual: it moves only while the sim works for a
    /// client, not with the host's clock, so the fitted rate means nothing there. What holds:
    /// the fits succeed on real reads, the counter increases, and a read between two
    /// correlations lies between their card readings.
    #[test]
    fn clock_correlation_against_the_simulated_card() {
        let sim = tlpx_testkit::SimProcess::start(&[]);
        let dev = crate::backends::sim::SimDevice::connect(sim.socket()).expect("connect to the sim");
        let mut card = Card::open(Box::new(dev)).expect("a tlpx card");
        let before = ClockCorrelation::measure(&mut card, 16).expect("fit before");
        let c = card.cycles().expect("timebase");
        let after = ClockCorrelation::measure(&mut card, 16).expect("fit after");
        let (last_before, first_after) = (before.used_pairs()[before.pairs_used - 1], after.used_pairs()[0]);
        assert!(last_before.1 < c && c < first_after.1, "{before:?} {c} {after:?}");
        assert_eq!((before.pairs_total, before.pairs_used, before.nominal_hz), (16, 8, Some(card.identity().clock_hz)));
        assert!(before.cycles_per_ns > 0.0 && before.uncertainty_cycles().is_finite());
        let run = ClockCorrelation::interpolate(&before, &after).expect("interpolates");
        assert_eq!(run.pairs_used, 16);
        eprintln!(
            "sim (virtual time): {:.6} cycles per host ns against a nominal {} (drift {:.0} ppm: meaningless here), \
             round trip min {} ns, consistent {}",
            run.cycles_per_ns,
            f64::from(card.identity().clock_hz) / 1e9,
            run.drift_ppm().unwrap_or(f64::NAN),
            run.round_trip_min_ns,
            run.consistent
        );
        let e = ClockCorrelation::measure(&mut card, 2).expect_err("too few").to_string();
        assert!(e.contains("4..="), "{e}");
    }
}
