//! `sw-bit`: one bit per cell, as the seed's bit-based implementation ("requires some more code
//! but is about as fast as the byte-based implementation"). Each cell is computed on its own:
//! its three neighbours are read out of shifted copies of its word, and their index picks the
//! new cell out of the rule number.

use crate::{BitLine, WORDS64};

/// One generation of `source` into `dest` under `rule`.
pub fn bit_step(source: &BitLine, dest: &mut BitLine, rule: u8) {
    let line_length = source.line_length();
    let cell = |j: usize| (source.words[j / 64] >> (j % 64)) & 1;
    *dest = BitLine { line_length, words: [0; WORDS64] };
    let out = &mut dest.words;
    for (k, &centre) in source.words().iter().enumerate() {
        let first = 64 * k;
        let cells = (line_length - first).min(64);
        // Neighbours across the word's edges, with the ring's wrap-around.
        let left_of_first = cell(if first == 0 { line_length - 1 } else { first - 1 });
        let right_of_last = cell((first + cells) % line_length);
        let left = (centre << 1) | left_of_first; // bit b: cell first + b - 1
        let right = (centre >> 1) | (right_of_last << (cells - 1)); // bit b: cell first + b + 1
        let mut new = 0u64;
        for b in 0..cells {
            let index = ((left >> b) & 1) << 2 | ((centre >> b) & 1) << 1 | ((right >> b) & 1);
            new |= u64::from((rule >> index) & 1) << b;
        }
        out[k] = new;
    }
}

/// `generations` successive generations of `source` under `rule`: the last line.
pub fn bit_run(source: &BitLine, rule: u8, generations: usize) -> BitLine {
    let mut line = *source;
    let mut next = *source;
    for _ in 0..generations {
        bit_step(&line, &mut next, rule);
        std::mem::swap(&mut line, &mut next);
    }
    line
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::CharLine;

    fn bits(text: &str) -> BitLine {
        BitLine::from(&CharLine::parse(text).expect("valid"))
    }

    #[test]
    fn bit_step_wraps_like_figure_4() {
        for (from, to) in [("10000", "11001"), ("00001", "10011"), ("1", "0"), ("10", "10"), ("11", "00")] {
            assert_eq!(bit_run(&bits(from), 30, 1), bits(to), "{from}");
        }
    }

    #[test]
    fn bit_step_carries_across_word_edges() {
        // A lone cell at 63 spreads to 62, 63, 64; at 64 to 63, 64, 65; at 127 of 128 to 0.
        for (one, line_length, expect) in [(63, 128, vec![62, 63, 64]), (64, 130, vec![63, 64, 65]), (127, 128, vec![0, 126, 127])] {
            let mut line = BitLine::zeros(line_length).expect("valid");
            line.set_cell(one, true).expect("in line");
            let next = bit_run(&line, 30, 1);
            let alive: Vec<usize> = (0..line_length).filter(|&i| next.cell(i) == Some(true)).collect();
            assert_eq!(alive, expect, "lone cell {one} of {line_length}");
        }
    }
}
