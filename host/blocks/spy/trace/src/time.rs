//! Card cycles to wall time, exactly (integer arithmetic: converter output is
//! reproducible, which golden files need).

/// Picoseconds in `cycles` at `clock_hz` (rounded down); a clock of 0 is taken as 1 Hz.
pub fn cycles_to_ps(cycles: u64, clock_hz: u64) -> u128 {
    u128::from(cycles) * 1_000_000_000_000 / u128::from(clock_hz.max(1))
}

/// Nanoseconds with three decimals, e.g. `"8.000"`.
pub fn format_ns(cycles: u64, clock_hz: u64) -> String {
    let ps = cycles_to_ps(cycles, clock_hz);
    format!("{}.{:03}", ps / 1000, ps % 1000)
}

/// Signed picoseconds as microseconds with three decimals (rounded to the nearest ns),
/// e.g. `"12.504"`, `"-0.008"`; `plus` adds a `+` to non-negative values.
pub fn format_us_ps(ps: i128, plus: bool) -> String {
    let negative = ps < 0;
    let ns = (ps.unsigned_abs() + 500) / 1000;
    let sign = if negative && ns != 0 {
        "-"
    } else if plus {
        "+"
    } else {
        ""
    };
    format!("{sign}{}.{:03}", ns / 1000, ns % 1000)
}

/// The card's clock period as text, e.g. `"8 ns"`, `"6.4 ns"`.
pub fn period_text(clock_hz: u64) -> String {
    let ps = cycles_to_ps(1, clock_hz);
    if ps % 1000 == 0 {
        format!("{} ns", ps / 1000)
    } else {
        let s = format!("{}.{:03}", ps / 1000, ps % 1000);
        format!("{} ns", s.trim_end_matches('0'))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn conversions() {
        assert_eq!(cycles_to_ps(1, 125_000_000), 8000);
        assert_eq!(format_ns(3, 156_250_000), "19.200");
        assert_eq!(format_us_ps(12_504_000, false), "12.504");
        assert_eq!(format_us_ps(128_000, true), "+0.128");
        assert_eq!(format_us_ps(-8_000, true), "-0.008");
        assert_eq!(format_us_ps(-400, true), "+0.000");
        assert_eq!(period_text(156_250_000), "6.4 ns");
        assert_eq!(period_text(125_000_000), "8 ns");
        // No overflow at the extremes.
        let _ = format_ns(u64::MAX, 1);
        let _ = format_ns(u64::MAX, 0);
    }
}
