//! The data check: the pattern the host puts in a buffer, what the card should have written
//! over it, what the host finds there after the run, and the card's own error counts.

use tlpx_device::generator::{self, AddressPattern, DataPattern, ErrorCounts, GenConfig};

use crate::cmd::bw::HostCheck;

/// The pattern's bytes for a buffer at `bus_addr` (length rounded down to whole DWs).
pub fn pattern_bytes(len: usize, bus_addr: u64, pattern: DataPattern, seed: u32, complement: bool) -> Vec<u8> {
    let mut out = Vec::with_capacity(len);
    for i in 0..len / 4 {
        let w = generator::pattern_word(pattern, seed, bus_addr + 4 * i as u64);
        out.extend_from_slice(&(if complement { !w } else { w }).to_le_bytes());
    }
    out
}

/// Which window bytes `transfers` sequential or fixed transfers of `cfg` write; `None` for
/// random addresses (the card's LFSR picks the slots).
pub fn expected_written(cfg: &GenConfig, transfers: u64) -> Option<Vec<bool>> {
    let window = usize::try_from(cfg.window).ok()?;
    let stride = cfg.stride();
    let slots = match cfg.address_pattern {
        AddressPattern::Random => return None,
        AddressPattern::Fixed => transfers.min(1),
        AddressPattern::Sequential => transfers.min(cfg.window / stride),
    };
    let mut map = vec![false; window];
    for n in 0..slots {
        let start = ((n * stride) % cfg.window) as usize + cfg.offset as usize;
        let end = (start + cfg.transfer_size as usize).min(window);
        map[start..end].iter_mut().for_each(|b| *b = true);
    }
    Some(map)
}

/// Compares `got` (the window after a run) with `pattern` (what the card writes) and
/// `before` (what the window held before the run: the pattern's complement written by the
/// host, or another seed's pattern written by the card under `--cache device-warm`).
/// `expected` says which bytes must have been written, when known. A byte equal in `pattern`
/// and `before` proves nothing either way and counts as neither written nor bad.
pub fn check_written(got: &[u8], pattern: &[u8], before: &[u8], expected: Option<&[bool]>) -> HostCheck {
    let mut c = HostCheck { checked_bytes: got.len() as u64, ..HostCheck::default() };
    for (i, ((&g, &p), &b)) in got.iter().zip(pattern).zip(before).enumerate() {
        let should = expected.map(|e| e[i]);
        let bad = if p == b {
            g != p && {
                c.corrupt_bytes += 1;
                true
            }
        } else if g == p {
            c.written_bytes += 1;
            if should == Some(false) {
                c.stray_bytes += 1;
                true
            } else {
                false
            }
        } else if g == b {
            if should == Some(true) {
                c.missing_bytes += 1;
                true
            } else {
                false
            }
        } else {
            c.corrupt_bytes += 1;
            true
        };
        if bad && c.first_bad_offset.is_none() {
            c.first_bad_offset = Some(i as u64);
        }
    }
    c
}

/// Every byte must hold the pattern (read+write: the reads check the pattern and the writes
/// write the same pattern, so nothing else may appear).
pub fn check_unchanged(got: &[u8], pattern: &[u8]) -> HostCheck {
    let mut c = HostCheck { checked_bytes: got.len() as u64, ..HostCheck::default() };
    for (i, (&g, &p)) in got.iter().zip(pattern).enumerate() {
        if g == p {
            c.written_bytes += 1;
        } else {
            c.corrupt_bytes += 1;
            c.first_bad_offset.get_or_insert(i as u64);
        }
    }
    c
}

/// The card's error counters by name, as the text output shows them: the ones that counted
/// something, e.g. "5 unsupported request (UR), 2 data mismatches"; "none" when all are 0.
pub fn error_counts_text(e: &ErrorCounts) -> String {
    let named = [
        (e.unsupported_request, "unsupported request (UR)"),
        (e.completer_abort, "completer abort (CA)"),
        (e.other_status, "other completion status"),
        (e.poisoned, "poisoned"),
        (e.completion_timeouts, "completion timeouts"),
        (e.unexpected_completions, "unexpected completions"),
        (e.data_mismatches, "data mismatches"),
    ];
    let counted: Vec<String> = named.iter().filter(|(n, _)| *n > 0).map(|(n, what)| format!("{n} {what}")).collect();
    if counted.is_empty() {
        "none".to_string()
    } else {
        counted.join(", ")
    }
}

/// Total of the card's error counters.
pub fn error_total(e: &ErrorCounts) -> u64 {
    e.unsupported_request
        + e.completer_abort
        + e.other_status
        + e.poisoned
        + e.completion_timeouts
        + e.unexpected_completions
        + e.data_mismatches
}

/// Adds the error counts of one run to `sum`.
pub fn add_errors(sum: &mut ErrorCounts, e: &ErrorCounts) {
    sum.unsupported_request += e.unsupported_request;
    sum.completer_abort += e.completer_abort;
    sum.other_status += e.other_status;
    sum.poisoned += e.poisoned;
    sum.completion_timeouts += e.completion_timeouts;
    sum.unexpected_completions += e.unexpected_completions;
    sum.data_mismatches += e.data_mismatches;
}

#[cfg(test)]
mod tests {
    use super::*;
    use tlpx_device::generator::Operation;

    #[test]
    fn expected_written_maps_sequential_and_fixed_slots() {
        let mut g = GenConfig::new(Operation::Write, 40, 3);
        g.window = 256;
        g.offset = 4;
        // stride 64: slots at 0, 64, 128, bytes 4..44 of each.
        let m = expected_written(&g, 3).expect("sequential");
        assert_eq!(m.iter().filter(|b| **b).count(), 120);
        assert!(m[4] && m[43] && !m[44] && !m[3] && m[68] && !m[192 + 4]);
        // Wrapping: 10 transfers over 4 slots cover all 4.
        assert_eq!(expected_written(&g, 10).expect("seq").iter().filter(|b| **b).count(), 160);
        g.address_pattern = AddressPattern::Fixed;
        assert_eq!(expected_written(&g, 10).expect("fixed").iter().filter(|b| **b).count(), 40);
        g.address_pattern = AddressPattern::Random;
        assert!(expected_written(&g, 10).is_none());
    }

    #[test]
    fn write_check_finds_corrupt_missing_and_stray_bytes() {
        let pattern = pattern_bytes(256, 0x4000_0000, DataPattern::Prbs, 7, false);
        let mut g = GenConfig::new(Operation::Write, 64, 2);
        g.window = 256;
        let expected = expected_written(&g, 2).expect("seq");
        // The card wrote slots 0 and 1 exactly.
        let mut got: Vec<u8> = pattern.iter().map(|b| !b).collect();
        got[..128].copy_from_slice(&pattern[..128]);
        let c = check_written(&got, &pattern, &complement(&pattern), Some(&expected));
        assert_eq!((c.written_bytes, c.bad()), (128, 0));
        // One corrupt byte, one missing, one stray.
        got[5] ^= 0x10;
        got[100] = !pattern[100];
        got[200] = pattern[200];
        let c = check_written(&got, &pattern, &complement(&pattern), Some(&expected));
        assert_eq!((c.corrupt_bytes, c.missing_bytes, c.stray_bytes), (1, 1, 1));
        assert_eq!(c.first_bad_offset, Some(5));
        // Random addresses: only corruption is visible.
        let c = check_written(&got, &pattern, &complement(&pattern), None);
        assert_eq!((c.corrupt_bytes, c.missing_bytes, c.stray_bytes), (1, 0, 0));
        // Read+write: the buffer holds the pattern throughout; any other byte is corrupt.
        let mut same = pattern.clone();
        same[7] ^= 1;
        same[9] = !same[9];
        let c = check_unchanged(&same, &pattern);
        assert_eq!((c.corrupt_bytes, c.written_bytes, c.first_bad_offset), (2, 254, Some(7)));
    }

    fn complement(b: &[u8]) -> Vec<u8> {
        b.iter().map(|x| !x).collect()
    }

    #[test]
    fn after_a_device_warm_pass_the_check_compares_with_what_the_card_wrote_there() {
        // Before the run: another seed's pattern (the device-warm pass); bytes equal in both
        // prove nothing and count as neither written nor bad.
        let pattern = vec![1u8, 2, 3, 4];
        let before = vec![9u8, 2, 9, 9];
        let expected = [true, true, false, false];
        let c = check_written(&[1, 2, 9, 9], &pattern, &before, Some(&expected));
        assert_eq!((c.written_bytes, c.bad()), (1, 0));
        let c = check_written(&[9, 2, 3, 7], &pattern, &before, Some(&expected));
        assert_eq!((c.missing_bytes, c.stray_bytes, c.corrupt_bytes, c.first_bad_offset), (1, 1, 1, Some(0)));
    }

    #[test]
    fn pattern_bytes_match_the_generator_s_pattern() {
        let b = pattern_bytes(16, 0x1000, DataPattern::Counter, 5, false);
        assert_eq!(&b[4..8], &(0x1000u32 / 4 + 1 + 5).to_le_bytes());
        let c = pattern_bytes(16, 0x1000, DataPattern::Counter, 5, true);
        assert!(b.iter().zip(&c).all(|(x, y)| *x == !*y));
    }
}
