//! Properties of elementary rules under Wolfram's numbering and the ring's wrap-around, which
//! the implementations must all show (checked on every variant against each other and against
//! the definitions, not against the reference code).
//!
//! Cell 0 is drawn leftmost. Rule 170 (new = right neighbour) moves the pattern one cell left,
//! towards cell 0, and cell 0 comes back at the right end; in the packed words that is a
//! rotation of the line towards bit 0, for a 64-cell line `word.rotate_right(1)`. Rule 240
//! (new = left neighbour) moves it right: `word.rotate_left(1)`.

use tlpx_rule30::{char_run, fast_run_many, test_packets, BitLine, CharLine, Variant};

const LENGTHS: [usize; 14] = [1, 2, 3, 5, 31, 32, 33, 63, 64, 65, 127, 500, 1023, 1024];

fn packets(line_length: usize, seed: u64) -> Vec<BitLine> {
    test_packets(4, line_length, seed).expect("valid length").iter().map(BitLine::from).collect()
}

fn cells(line: &BitLine) -> Vec<bool> {
    (0..line.line_length()).map(|i| line.cell(i) == Some(true)).collect()
}

fn from_cells(cells: &[bool]) -> BitLine {
    let text: Vec<u8> = cells.iter().map(|&c| if c { b'1' } else { b'0' }).collect();
    BitLine::from(&CharLine::from_bytes(&text).expect("valid line"))
}

/// Checks that one generation of `rule` is `f(left, centre, right)` cell by cell, wrapping.
fn check_rule_is(rule: u8, f: impl Fn(bool, bool, bool) -> bool) {
    for line_length in LENGTHS {
        for packet in packets(line_length, u64::from(rule)) {
            let c = cells(&packet);
            let n = c.len();
            let expect: Vec<bool> = (0..n).map(|i| f(c[(i + n - 1) % n], c[i], c[(i + 1) % n])).collect();
            for variant in Variant::ALL {
                assert_eq!(cells(&variant.run(&packet, rule, 1)), expect, "rule {rule} {variant} {n} cells");
            }
        }
    }
}

#[test]
fn rule_204_is_identity_and_rule_51_is_not() {
    check_rule_is(204, |_, c, _| c);
    check_rule_is(51, |_, c, _| !c);
}

#[test]
fn rule_0_kills_and_rule_255_fills() {
    check_rule_is(0, |_, _, _| false);
    check_rule_is(255, |_, _, _| true);
}

#[test]
fn rule_30_is_left_xor_centre_or_right_and_90_150_are_xors() {
    check_rule_is(30, |l, c, r| l ^ (c | r));
    check_rule_is(90, |l, _, r| l ^ r);
    check_rule_is(150, |l, c, r| l ^ c ^ r);
    check_rule_is(110, |l, c, r| (c ^ r) | (!l & c));
}

#[test]
fn rule_170_takes_the_right_neighbour_and_240_the_left() {
    check_rule_is(170, |_, _, r| r);
    check_rule_is(240, |l, _, _| l);
}

#[test]
fn rule_170_rotates_the_packed_line_towards_bit_0_and_240_away() {
    for packet in packets(64, 170) {
        let word = packet.words()[0];
        for variant in Variant::ALL {
            assert_eq!(variant.run(&packet, 170, 1).words()[0], word.rotate_right(1), "{variant}");
            assert_eq!(variant.run(&packet, 240, 1).words()[0], word.rotate_left(1), "{variant}");
        }
    }
    // A lone cell 0 under rule 170 goes to the last cell; under 240 to cell 1.
    let mut line = BitLine::zeros(100).expect("valid");
    line.set_cell(0, true).expect("in line");
    for variant in Variant::ALL {
        assert_eq!(variant.run(&line, 170, 1).cell(99), Some(true), "{variant}");
        assert_eq!(variant.run(&line, 240, 1).cell(1), Some(true), "{variant}");
    }
    // Going round the ring: line_length shifts are the identity, and 170 undoes 240.
    for line_length in LENGTHS {
        for packet in packets(line_length, 3) {
            for variant in Variant::ALL {
                assert_eq!(variant.run(&packet, 170, line_length), packet, "{variant} {line_length}");
                assert_eq!(variant.run(&variant.run(&packet, 240, 7), 170, 7), packet, "{variant} {line_length}");
            }
        }
    }
}

#[test]
fn every_rule_commutes_with_rotating_the_ring() {
    for rule in 0..=255u8 {
        for line_length in [1, 2, 3, 64, 65, 1024] {
            for packet in packets(line_length, u64::from(rule)) {
                let c = cells(&packet);
                let by = (usize::from(rule) * 7 + 1) % line_length;
                let mut rotated = c.clone();
                rotated.rotate_left(by);
                for variant in Variant::ALL {
                    let mut after = cells(&variant.run(&packet, rule, 2));
                    after.rotate_left(by);
                    let before = cells(&variant.run(&from_cells(&rotated), rule, 2));
                    assert_eq!(before, after, "rule {rule} {variant} {line_length} cells, rotated by {by}");
                }
            }
        }
    }
}

/// Bit k' of the mirror image of `rule` is bit k with left and right swapped.
fn mirror(rule: u8) -> u8 {
    (0..8).map(|k: u8| ((rule >> k) & 1) << ((k & 1) << 2 | (k & 2) | (k >> 2))).sum()
}

/// The rule that does to the complemented line what `rule` does to the line.
fn complement(rule: u8) -> u8 {
    (0..8).map(|k: u8| (1 - ((rule >> (7 - k)) & 1)) << k).sum()
}

#[test]
fn every_rule_has_its_mirror_and_complement_images() {
    assert_eq!(mirror(30), 86);
    assert_eq!(complement(30), 135);
    assert_eq!((mirror(110), complement(110), mirror(complement(110))), (124, 137, 193));
    for rule in 0..=255u8 {
        for line_length in [1, 2, 33, 64, 129, 1024] {
            for packet in packets(line_length, u64::from(rule) + 7) {
                let c = cells(&packet);
                let reversed: Vec<bool> = c.iter().rev().copied().collect();
                let inverted: Vec<bool> = c.iter().map(|&x| !x).collect();
                for variant in Variant::ALL {
                    let out = cells(&variant.run(&packet, rule, 3));
                    let mut mirrored = cells(&variant.run(&from_cells(&reversed), mirror(rule), 3));
                    mirrored.reverse();
                    assert_eq!(mirrored, out, "mirror of rule {rule} {variant} {line_length}");
                    let complemented: Vec<bool> =
                        cells(&variant.run(&from_cells(&inverted), complement(rule), 3)).iter().map(|&x| !x).collect();
                    assert_eq!(complemented, out, "complement of rule {rule} {variant} {line_length}");
                }
            }
        }
    }
}

#[test]
fn rule_30_grows_a_christmas_tree_with_live_edges() {
    // From a lone cell, generation t lives in [centre - t, centre + t] and both edges are alive
    // (100 -> 1 and 001 -> 1), until the tree meets itself round the ring.
    for line_length in [9, 64, 65, 1024] {
        let centre = line_length / 2;
        let mut line = BitLine::zeros(line_length).expect("valid");
        line.set_cell(centre, true).expect("in line");
        let mut batch = vec![line; 5];
        for t in 0..=(line_length - 1 - centre).min(centre) {
            for variant in Variant::ALL {
                let grown = cells(&variant.run(&line, 30, t));
                let alive: Vec<usize> = (0..line_length).filter(|&i| grown[i]).collect();
                assert_eq!(alive.first(), Some(&(centre - t)), "{variant} t={t} {line_length}");
                assert_eq!(alive.last(), Some(&(centre + t)), "{variant} t={t} {line_length}");
            }
            assert!(batch.iter().all(|b| cells(b)[centre - t] && cells(b)[centre + t]));
            fast_run_many(&mut batch, 30, 1);
        }
    }
}

#[test]
fn zero_generations_return_the_packet() {
    for packet in packets(77, 1) {
        for variant in Variant::ALL {
            assert_eq!(variant.run(&packet, 30, 0), packet);
        }
        assert_eq!(BitLine::from(&char_run(&CharLine::from(&packet), 30, 0)), packet);
    }
}
