//! Software references of the elementary cellular automaton that the card's rule-30
//! accelerator computes: the modes `sw-char`, `sw-bit` and `sw-fast` of `tlpx rule30 run`.
//!
//! ```text
//!  "0110…" (one byte per cell) ──char_step──► golden reference: the seed's Figure 4, literally
//!      │ CharLine ⇄ BitLine
//!  [u64; 16] (one bit per cell) ──bit_step──► sw-bit: cell by cell from shifted words
//!                               ──fast_step─► sw-fast: 64 cells per operation, bit-sliced
//!                               ──fast_run_many─► sw-fast over 4 packets at once (SIMD lanes)
//!      │ to_card_words ⇄ from_card_words
//!  input[32] / output[32] u32 register words of the card
//! ```
//!
//! Conventions, shared with the gateware's Python model
//! (`gateware/tlpx_gateware/cores/rule30/reference.py`):
//!
//! - **Rule number** (Wolfram): the neighbourhood of cell `i` is
//!   `k = left * 4 + centre * 2 + right`, and bit `k` of the rule is the cell's new value.
//!   Rule 30 gives the table `0,1,1,1,1,0,0,0` of the seed's `g_rules_array`. Any rule 0..=255.
//! - **Wrap-around**: a line is a ring of `line_length` cells; the left neighbour of cell 0 is
//!   the last cell and the right neighbour of the last cell is cell 0 (Figure 4).
//! - **Line length**: 1..=1024 cells ([`MAX_LINE_LENGTH`], the card's 32 × 32-bit window).
//! - **Bit order**: cell `i` is bit `i % 64` of 64-bit word `i / 64` here, and bit `i % 32` of
//!   register word `i / 32` on the card (little-endian, so the two layouts hold the same bits).
//!   Cells at `i >= line_length` are zero in every [`BitLine`] and in [`to_card_words`]' output,
//!   and ignored by [`from_card_words`].
//!
//! "Left" and "right" are the seed's: cell 0 is drawn leftmost. Rule 170 (new = right
//! neighbour) therefore moves the pattern one cell left, towards cell 0, which in the packed
//! words is a logical right shift (bit `i` ← bit `i + 1`); rule 240 moves it right.

mod bench;
mod bit;
mod card;
mod chars;
mod fast;
mod packets;

pub use bench::{bench_ratio, BenchResult, Timing, BENCH_REPETITIONS};
pub use bit::{bit_run, bit_step};
pub use card::{from_card_words, to_card_words};
pub use chars::{char_run, char_step, CharLine, RulesArray};
pub use fast::{fast_backend, fast_run, fast_run_many, fast_step, FastBackend};
pub use packets::test_packets;

/// Longest line the card (and these models) accept, in cells.
pub const MAX_LINE_LENGTH: usize = 1024;
/// Number of 32-bit words in the card's `input` and `output` arrays.
pub const CARD_WORDS: usize = 32;
/// Number of 64-bit words of a [`BitLine`].
pub const WORDS64: usize = MAX_LINE_LENGTH / 64;
/// The rule of the seed, and the card's default.
pub const RULE30: u8 = 30;

/// Bad input to the models; every message names the bad value and what is accepted.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum Rule30Error {
    #[error("line length must be 1..={MAX_LINE_LENGTH} cells, not {0}")]
    LineLength(usize),
    #[error("cell {index} is {found:?}: a line is written with the characters '0' and '1' only")]
    BadCell { index: usize, found: char },
    #[error("a {line_length}-cell line takes {expected} 64-bit words, not {found}")]
    WordCount { line_length: usize, expected: usize, found: usize },
    #[error("cell index {index} is outside a {line_length}-cell line")]
    CellIndex { index: usize, line_length: usize },
    #[error("{what} must be at least 1, not 0")]
    Zero { what: &'static str },
    #[error("the centre column is computed on a line of at most {MAX_LINE_LENGTH} cells, so at most {max} terms, not {terms}", max = MAX_CENTRE_TERMS)]
    CentreTerms { terms: usize },
    #[error("{0} does not agree with sw-char; this is a bug in tlpx-rule30")]
    Disagreement(&'static str),
    /// A latency (tlpx-blocks' `latency_cycles`) that is no whole number of card cycles in 0..=u32::MAX.
    #[error("a latency of {ns} ns is {cycles} cycles of the card's {:.0} MHz clock: it must be 0..={} cycles", f64::from(*.clock_hz) / 1e6, u32::MAX)]
    Latency { ns: f64, cycles: f64, clock_hz: u32 },
    /// A batch descriptor's generations field (tlpx-blocks' `batch::generations`) out of 1..=`max`.
    #[error("a batch descriptor holds 1..={max} generations, not {generations}")]
    Generations { generations: u32, max: u32 },
}

fn check_line_length(line_length: usize) -> Result<(), Rule30Error> {
    if (1..=MAX_LINE_LENGTH).contains(&line_length) {
        Ok(())
    } else {
        Err(Rule30Error::LineLength(line_length))
    }
}

// Packed line ------------------------------------------------------------------------------------

/// A line of 1..=1024 cells packed one cell per bit: cell `i` is bit `i % 64` of word `i / 64`.
///
/// Invariant: every bit at or beyond `line_length` is zero, so equal lines compare equal.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct BitLine {
    line_length: usize,
    words: [u64; WORDS64],
}

impl BitLine {
    /// A line of `line_length` dead cells.
    pub fn zeros(line_length: usize) -> Result<BitLine, Rule30Error> {
        check_line_length(line_length)?;
        Ok(BitLine { line_length, words: [0; WORDS64] })
    }

    /// A line of `line_length` cells taken from `words` (exactly `ceil(line_length / 64)` of
    /// them); bits at or beyond `line_length` are ignored.
    pub fn from_words64(words: &[u64], line_length: usize) -> Result<BitLine, Rule30Error> {
        check_line_length(line_length)?;
        let expected = line_length.div_ceil(64);
        if words.len() != expected {
            return Err(Rule30Error::WordCount { line_length, expected, found: words.len() });
        }
        let mut line = BitLine { line_length, words: [0; WORDS64] };
        line.words[..expected].copy_from_slice(words);
        line.clear_beyond_length();
        Ok(line)
    }

    /// Number of cells.
    pub fn line_length(&self) -> usize {
        self.line_length
    }

    /// The `ceil(line_length / 64)` words that hold the cells.
    pub fn words(&self) -> &[u64] {
        &self.words[..self.word_count()]
    }

    /// Number of 64-bit words that hold cells.
    pub fn word_count(&self) -> usize {
        self.line_length.div_ceil(64)
    }

    /// Cell `index`, or `None` beyond the line.
    pub fn cell(&self, index: usize) -> Option<bool> {
        (index < self.line_length).then(|| (self.words[index / 64] >> (index % 64)) & 1 == 1)
    }

    /// Sets cell `index` to `alive`.
    pub fn set_cell(&mut self, index: usize, alive: bool) -> Result<(), Rule30Error> {
        if index >= self.line_length {
            return Err(Rule30Error::CellIndex { index, line_length: self.line_length });
        }
        let bit = 1u64 << (index % 64);
        if alive {
            self.words[index / 64] |= bit;
        } else {
            self.words[index / 64] &= !bit;
        }
        Ok(())
    }

    /// The first `line_length` cells of this line, as the seed truncates a packet to the
    /// length under test.
    pub fn truncated(&self, line_length: usize) -> Result<BitLine, Rule30Error> {
        check_line_length(line_length)?;
        if line_length > self.line_length {
            return Err(Rule30Error::LineLength(line_length));
        }
        let mut line = BitLine { line_length, words: self.words };
        line.clear_beyond_length();
        Ok(line)
    }

    /// Number of live cells.
    pub fn count_ones(&self) -> u32 {
        self.words.iter().map(|w| w.count_ones()).sum()
    }

    /// The card's 32 register words for this line (see [`to_card_words`]).
    pub fn to_card_words(&self) -> [u32; CARD_WORDS] {
        to_card_words(self)
    }

    /// Mask of the cells held by the last word.
    pub(crate) fn last_word_mask(line_length: usize) -> u64 {
        match line_length % 64 {
            0 => u64::MAX,
            bits => (1u64 << bits) - 1,
        }
    }

    pub(crate) fn clear_beyond_length(&mut self) {
        let used = self.word_count();
        self.words[used - 1] &= Self::last_word_mask(self.line_length);
        self.words[used..].fill(0);
    }
}

impl From<&CharLine> for BitLine {
    fn from(chars: &CharLine) -> BitLine {
        let mut line = BitLine { line_length: chars.line_length(), words: [0; WORDS64] };
        for (i, &cell) in chars.as_bytes().iter().enumerate() {
            line.words[i / 64] |= u64::from(cell == b'1') << (i % 64);
        }
        line
    }
}

impl From<&BitLine> for CharLine {
    fn from(line: &BitLine) -> CharLine {
        let cells = (0..line.line_length).map(|i| if (line.words[i / 64] >> (i % 64)) & 1 == 1 { b'1' } else { b'0' }).collect();
        CharLine::from_valid_cells(cells)
    }
}

impl std::fmt::Display for BitLine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        CharLine::from(self).fmt(f)
    }
}

// Variants ---------------------------------------------------------------------------------------

/// The software implementations, as `tlpx rule30 run` names them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Variant {
    /// `sw-char`: the seed's Figure 4, one byte per cell; the golden reference.
    SwChar,
    /// `sw-bit`: one bit per cell, each cell computed from shifted words.
    SwBit,
    /// `sw-fast`: bit-sliced, 64 cells per boolean operation.
    SwFast,
}

impl Variant {
    pub const ALL: [Variant; 3] = [Variant::SwChar, Variant::SwBit, Variant::SwFast];

    /// The mode name on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Variant::SwChar => "sw-char",
            Variant::SwBit => "sw-bit",
            Variant::SwFast => "sw-fast",
        }
    }

    /// `generations` generations of `packet` under `rule` with this implementation: the last
    /// line. Conversions to and from the variant's own representation are included.
    pub fn run(self, packet: &BitLine, rule: u8, generations: usize) -> BitLine {
        match self {
            Variant::SwChar => BitLine::from(&char_run(&CharLine::from(packet), rule, generations)),
            Variant::SwBit => bit_run(packet, rule, generations),
            Variant::SwFast => fast_run(packet, rule, generations),
        }
    }
}

impl std::fmt::Display for Variant {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for Variant {
    type Err = String;

    fn from_str(s: &str) -> Result<Variant, String> {
        Variant::ALL
            .into_iter()
            .find(|v| v.name() == s)
            .ok_or_else(|| format!("unknown software mode {s:?}; expected one of sw-char, sw-bit, sw-fast"))
    }
}

// Centre column ----------------------------------------------------------------------------------

/// Most terms [`centre_column`] can give: the ring needs `2 * terms - 1` cells.
pub const MAX_CENTRE_TERMS: usize = MAX_LINE_LENGTH.div_ceil(2);

/// The centre cell of the first `terms` generations grown from a single live cell under rule
/// 30 (generation 0 included): OEIS A051023.
pub fn centre_column(terms: usize) -> Result<Vec<u8>, Rule30Error> {
    centre_column_of(RULE30, terms, Variant::SwFast)
}

/// [`centre_column`] for any rule, computed with `variant`.
///
/// The ring has `2 * terms - 1` cells, the seed in its middle: the centre cell of generation
/// `t` depends on the `2t + 1` cells around it, so for `t < terms` the wrap-around never reaches
/// it and the ring behaves as the infinite line.
pub fn centre_column_of(rule: u8, terms: usize, variant: Variant) -> Result<Vec<u8>, Rule30Error> {
    if terms == 0 {
        return Ok(Vec::new());
    }
    if terms > MAX_CENTRE_TERMS {
        return Err(Rule30Error::CentreTerms { terms });
    }
    let width = 2 * terms - 1;
    let centre = terms - 1;
    let mut line = BitLine::zeros(width)?;
    line.set_cell(centre, true)?;
    let mut column = Vec::with_capacity(terms);
    for _ in 0..terms {
        column.push(u8::from(line.cell(centre) == Some(true)));
        line = variant.run(&line, rule, 1);
    }
    Ok(column)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bitline_rejects_bad_lengths_and_word_counts() {
        assert_eq!(BitLine::zeros(0), Err(Rule30Error::LineLength(0)));
        assert_eq!(BitLine::zeros(1025), Err(Rule30Error::LineLength(1025)));
        assert_eq!(BitLine::from_words64(&[0, 0], 64), Err(Rule30Error::WordCount { line_length: 64, expected: 1, found: 2 }));
        assert_eq!(BitLine::from_words64(&[], 1), Err(Rule30Error::WordCount { line_length: 1, expected: 1, found: 0 }));
        let mut line = BitLine::zeros(10).expect("valid");
        assert_eq!(line.set_cell(10, true), Err(Rule30Error::CellIndex { index: 10, line_length: 10 }));
        assert_eq!(line.cell(10), None);
        assert_eq!(line.truncated(11), Err(Rule30Error::LineLength(11)));
        assert_eq!(line.truncated(0), Err(Rule30Error::LineLength(0)));
        let msg = Rule30Error::LineLength(0).to_string();
        assert!(msg.contains("1..=1024") && msg.contains("not 0"), "{msg}");
    }

    #[test]
    fn bitline_from_words64_drops_cells_beyond_the_length() {
        let line = BitLine::from_words64(&[u64::MAX, u64::MAX], 65).expect("valid");
        assert_eq!(line.words(), &[u64::MAX, 1]);
        assert_eq!(line.count_ones(), 65);
        assert_eq!(line, BitLine::from(&CharLine::parse(&"1".repeat(65)).expect("valid")));
        let short = line.truncated(3).expect("valid");
        assert_eq!(short.words(), &[0b111]);
        assert_eq!(short.to_string(), "111");
    }

    #[test]
    fn bitline_bit_order_is_cell_i_at_bit_i_mod_64_of_word_i_div_64() {
        let mut text = vec![b'0'; 1024];
        for i in [0, 63, 64, 65, 1023] {
            text[i] = b'1';
        }
        let chars = CharLine::from_bytes(&text).expect("valid");
        let line = BitLine::from(&chars);
        assert_eq!(line.words()[0], 1 | 1 << 63);
        assert_eq!(line.words()[1], 0b11);
        assert_eq!(line.words()[15], 1 << 63);
        assert_eq!(line.count_ones(), 5);
        assert_eq!(CharLine::from(&line), chars);
    }

    #[test]
    fn variant_names_round_trip() {
        for v in Variant::ALL {
            assert_eq!(v.name().parse::<Variant>(), Ok(v));
            assert_eq!(serde_json::to_string(&v).expect("json"), format!("\"{}\"", v.name()));
        }
        let err = "hw-poll".parse::<Variant>().expect_err("not a software mode");
        assert!(err.contains("\"hw-poll\"") && err.contains("sw-char"), "{err}");
    }

    #[test]
    fn centre_column_rejects_too_many_terms() {
        assert_eq!(centre_column(0), Ok(vec![]));
        assert_eq!(centre_column(1), Ok(vec![1]));
        assert!(centre_column(MAX_CENTRE_TERMS).is_ok());
        let err = centre_column(MAX_CENTRE_TERMS + 1).expect_err("too long");
        assert_eq!(err, Rule30Error::CentreTerms { terms: 513 });
        assert!(err.to_string().contains("at most 512 terms"), "{err}");
    }
}
