//! The ISR stage of each fire: the card's fire time T0 paired with the kernel's handler
//! entry that follows it, both on the card's clock through a [`ClockFit`].

use super::clock::ClockFit;
use super::error::IsrTraceError;
use super::trace::IrqEntry;
use crate::DeviceError;

/// The ISR stage of each fire, in card cycles: each fire (sequence, T0) is matched with the
/// first handler entry whose card time is at or after T0, less the fit's uncertainty there,
/// and before the next fire's T0 (less its uncertainty); `None` when there is none.
///
/// An entry up to the uncertainty before T0 is taken (clock error, not causality) and
/// counts as 0. `entries` must be of the card's interrupts only; an entry of another source
/// of the same MSI vector after T0 is taken for the fire's (nothing tells them apart), while
/// entries before a window are ignored. Fires must be in T0 order.
pub fn isr_stage_cycles(fires: &[(u32, u64)], entries: &[IrqEntry], fit: &ClockFit) -> Result<Vec<Option<u32>>, DeviceError> {
    for (i, w) in fires.windows(2).enumerate() {
        if w[1].1 <= w[0].1 {
            return Err(IsrTraceError::FiresOutOfOrder { fire: i + 1, sequence: w[1].0, t0: w[1].1, previous_t0: w[0].1 }.into());
        }
    }
    let mut sorted: Vec<&IrqEntry> = entries.iter().collect();
    sorted.sort_by_key(|e| e.host_ns);
    let mut out = Vec::with_capacity(fires.len());
    let mut next_entry = 0;
    for (i, &(_, t0)) in fires.iter().enumerate() {
        let next_t0 = fires.get(i + 1).map(|f| f.1);
        let mut stage = None;
        while let Some(e) = sorted.get(next_entry) {
            let since = fit.cycles_since(e.host_ns, t0);
            let u = fit.uncertainty_cycles_at(e.host_ns);
            if since < -u {
                next_entry += 1; // before this fire's window: spurious or a missed fire's
                continue;
            }
            if let Some(n) = next_t0 {
                if fit.cycles_since(e.host_ns, n) >= -u {
                    break; // the next fire's
                }
            }
            stage = Some(since.max(0.0).floor().min(f64::from(u32::MAX)) as u32);
            next_entry += 1;
            break;
        }
        out.push(stage);
    }
    Ok(out)
}
#[cfg(test)]
mod tests {
    use super::super::testdata::{entry_at, exact_fit, TrueClock};
    use super::*;

    #[test]
    fn each_fire_gets_the_first_handler_entry_after_it() {
        let fit = exact_fit();
        let u = fit.uncertainty_cycles();
        assert!(fit.consistent && u < 8.0, "bound {u}: {fit:?}");
        // Fires every 10 µs (1250 cycles) from cycle 200 000.
        let fires: Vec<(u32, u64)> = (0..5).map(|i| (i, 200_000 + 1250 * u64::from(i))).collect();
        let t0 = |i: usize| fires[i].1;
        let entries = vec![
            entry_at(&fit, t0(0), 300.3), // fire 0: 300 cycles
            entry_at(&fit, t0(0), 500.3), // a second entry in fire 0's window: not the first, ignored
            entry_at(&fit, t0(1), 100.3), // fire 1: 100 cycles
            // fire 2: no entry (the ISR missed, or the trace lost it)
            entry_at(&fit, t0(3), -u / 2.0), // fire 3: before T0, inside the uncertainty: 0
            entry_at(&fit, t0(4), 10_000.3), // fire 4 (the last): no next fire to bound it
        ];
        let stages = isr_stage_cycles(&fires, &entries, &fit).expect("matches");
        let near = |got: Option<u32>, want: u32| got.is_some_and(|g| g.abs_diff(want) <= 1);
        assert!(near(stages[0], 300) && near(stages[1], 100) && near(stages[4], 10_000), "{stages:?}");
        assert_eq!((stages[2], stages[3]), (None, Some(0)), "{stages:?}");
        // Entries in any order give the same answer (the CPUs' rings interleave).
        let mut reversed = entries.clone();
        reversed.reverse();
        assert_eq!(isr_stage_cycles(&fires, &reversed, &fit).expect("matches"), stages);
        // Converted through the fit, the stage agrees with the true clock within the bound.
        let clock = TrueClock { t_start: 0, c0: 0.0, rate: 0.125, accel: 0.0 };
        let true_stage = clock.at(entries[0].host_ns) - t0(0) as f64;
        assert!((f64::from(stages[0].unwrap_or(0)) - true_stage).abs() <= u + 1.0, "{true_stage} vs {stages:?}");
    }

    #[test]
    fn spurious_entries_outside_a_window_are_ignored_and_fires_must_be_ordered() {
        let fit = exact_fit();
        let u = fit.uncertainty_cycles();
        let fires = [(7u32, 300_000u64), (8, 310_000)];
        let entries = vec![
            entry_at(&fit, 300_000, -1000.0),        // well before the first fire: another source
            entry_at(&fit, 300_000, -2.0 * u - 2.0), // before T0 by more than the uncertainty
            entry_at(&fit, 300_000, 500.3),          // fire 7: 500
            entry_at(&fit, 300_000, 9_000.0),        // after fire 7's entry, before fire 8: ignored
        ];
        let stages = isr_stage_cycles(&fires, &entries, &fit).expect("matches");
        assert!(stages[0].is_some_and(|s| s.abs_diff(500) <= 1), "{stages:?}");
        assert_eq!(stages[1], None, "the spurious entry before fire 8 must not be its ISR");
        assert!(isr_stage_cycles(&[], &entries, &fit).expect("no fires").is_empty());
        assert_eq!(isr_stage_cycles(&fires, &[], &fit).expect("no entries"), vec![None, None]);
        let e = isr_stage_cycles(&[(1, 500), (2, 400)], &entries, &fit).expect_err("unordered").to_string();
        assert!(e.contains("sequence 2") && e.contains("T0 order"), "{e}");
    }
}
