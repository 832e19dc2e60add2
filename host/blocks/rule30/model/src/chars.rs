//! The golden reference: the seed's Figure 4 ("Rule 30 char-based implementation"), one byte
//! per cell.
//!
//! The loop in [`char_step`] is Figure 4 line for line. The only change is the cell encoding:
//! the seed keeps the numbers 0 and 1 in its `char`s, these lines hold the characters `'0'` and
//! `'1'` (so a line prints as itself), and the rules array holds characters too; the index is
//! therefore computed from `cell - '0'`.

use crate::{check_line_length, Rule30Error, RULE30};

/// The 8-entry table of an elementary rule, the seed's `g_rules_array`: entry `k` is the new
/// cell (`'0'` or `'1'`) for the neighbourhood `k = left * 4 + centre * 2 + right`, that is bit
/// `k` of the rule number (Wolfram).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct RulesArray([u8; 8]);

impl RulesArray {
    pub fn new(rule: u8) -> RulesArray {
        RulesArray(std::array::from_fn(|k| b'0' + ((rule >> k) & 1)))
    }

    /// The table as characters, entry 0 (`000`) first: rule 30 is `"01111000"`.
    pub fn as_bytes(&self) -> &[u8; 8] {
        &self.0
    }

    /// The rule number the table encodes.
    pub fn rule(&self) -> u8 {
        self.0.iter().enumerate().map(|(k, &c)| (c - b'0') << k).sum()
    }
}

impl Default for RulesArray {
    fn default() -> RulesArray {
        RulesArray::new(RULE30)
    }
}

/// A line of 1..=1024 cells, one byte `'0'` or `'1'` per cell, cell 0 first.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct CharLine {
    cells: Vec<u8>,
}

impl CharLine {
    /// Parses a line written with `'0'` and `'1'`, cell 0 first.
    pub fn parse(text: &str) -> Result<CharLine, Rule30Error> {
        if let Some((index, found)) = text.chars().enumerate().find(|&(_, c)| c != '0' && c != '1') {
            return Err(Rule30Error::BadCell { index, found });
        }
        CharLine::from_bytes(text.as_bytes())
    }

    /// A line from bytes `b'0'` / `b'1'`.
    pub fn from_bytes(cells: &[u8]) -> Result<CharLine, Rule30Error> {
        if let Some((index, &byte)) = cells.iter().enumerate().find(|&(_, &b)| b != b'0' && b != b'1') {
            return Err(Rule30Error::BadCell { index, found: char::from(byte) });
        }
        check_line_length(cells.len())?;
        Ok(CharLine { cells: cells.to_vec() })
    }

    /// A line of `line_length` dead cells.
    pub fn zeros(line_length: usize) -> Result<CharLine, Rule30Error> {
        check_line_length(line_length)?;
        Ok(CharLine { cells: vec![b'0'; line_length] })
    }

    pub(crate) fn from_valid_cells(cells: Vec<u8>) -> CharLine {
        debug_assert!((1..=crate::MAX_LINE_LENGTH).contains(&cells.len()));
        debug_assert!(cells.iter().all(|&c| c == b'0' || c == b'1'));
        CharLine { cells }
    }

    /// Number of cells.
    pub fn line_length(&self) -> usize {
        self.cells.len()
    }

    /// The cells, `b'0'` or `b'1'`.
    pub fn as_bytes(&self) -> &[u8] {
        &self.cells
    }

    /// The cells as text.
    pub fn as_str(&self) -> &str {
        // Invariant: only b'0' and b'1', which are ASCII.
        std::str::from_utf8(&self.cells).unwrap_or_default()
    }

    /// One generation under `rule`.
    pub fn step(&self, rule: u8) -> CharLine {
        let mut dest = CharLine { cells: Vec::with_capacity(self.cells.len()) };
        char_step(self, &mut dest, &RulesArray::new(rule));
        dest
    }
}

impl std::fmt::Display for CharLine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for CharLine {
    type Err = Rule30Error;

    fn from_str(text: &str) -> Result<CharLine, Rule30Error> {
        CharLine::parse(text)
    }
}

/// One generation of `source` into `dest` (resized to `source`'s length), as Figure 4.
// Figure 4 indexes source and dest by i; kept as written, not turned into iterators.
#[allow(clippy::needless_range_loop)]
pub fn char_step(source: &CharLine, dest: &mut CharLine, rules: &RulesArray) {
    let line_length = source.cells.len();
    dest.cells.resize(line_length, b'0');
    let (source, dest, g_rules_array) = (&source.cells[..], &mut dest.cells[..], &rules.0);
    for i in 0..line_length {
        let bit_left_index = if i == 0 { line_length - 1 } else { i - 1 };
        let bit_left = source[bit_left_index] - b'0';
        let bit_mid = source[i] - b'0';
        let bit_right = source[(i + 1) % line_length] - b'0';
        let index = bit_left * 4 + bit_mid * 2 + bit_right;
        dest[i] = g_rules_array[usize::from(index)];
    }
}

/// `generations` successive generations of `source` under `rule`: the last line (the source
/// itself for 0 generations). Two buffers swap roles, as the seed's program does.
pub fn char_run(source: &CharLine, rule: u8, generations: usize) -> CharLine {
    let rules = RulesArray::new(rule);
    let mut line = source.clone();
    let mut next = CharLine { cells: Vec::with_capacity(line.cells.len()) };
    for _ in 0..generations {
        char_step(&line, &mut next, &rules);
        std::mem::swap(&mut line, &mut next);
    }
    line
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line(text: &str) -> CharLine {
        CharLine::parse(text).expect("valid line")
    }

    #[test]
    fn rules_array_of_rule_30_is_figure_4() {
        // Figure 4: g_rules_array = {0, 1, 1, 1, 1, 0, 0, 0} for 000 .. 111.
        assert_eq!(RulesArray::new(30).as_bytes(), b"01111000");
        assert_eq!(RulesArray::default(), RulesArray::new(30));
        for rule in 0..=255u8 {
            assert_eq!(RulesArray::new(rule).rule(), rule);
        }
    }

    #[test]
    fn char_step_wraps_like_figure_4() {
        // Cell 0's left neighbour is the last cell, the last cell's right neighbour is cell 0.
        assert_eq!(line("10000").step(30), line("11001"));
        assert_eq!(line("00001").step(30), line("10011"));
        // A one-cell ring is its own left and right neighbour: 111 -> 0, 000 -> 0.
        assert_eq!(line("1").step(30), line("0"));
        assert_eq!(line("0").step(30), line("0"));
        // Two cells: each is the other's left and right neighbour. 010 -> 1, 101 -> 0, 111 -> 0.
        assert_eq!(line("10").step(30), line("10"));
        assert_eq!(line("11").step(30), line("00"));
    }

    #[test]
    fn char_step_grows_the_christmas_tree() {
        let lines: Vec<String> =
            std::iter::successors(Some(line("000010000")), |l| Some(l.step(30))).take(4).map(|l| l.to_string()).collect();
        assert_eq!(lines, ["000010000", "000111000", "001100100", "011011110"]);
    }

    #[test]
    fn char_run_chains_generations() {
        let start = line("0001000000100");
        assert_eq!(char_run(&start, 30, 0), start);
        assert_eq!(char_run(&start, 30, 3), start.step(30).step(30).step(30));
        assert_eq!(char_run(&start, 110, 5).line_length(), 13);
    }

    #[test]
    fn bad_lines_are_refused_with_the_bad_value() {
        assert_eq!(CharLine::parse(""), Err(Rule30Error::LineLength(0)));
        assert_eq!(CharLine::parse(&"0".repeat(1025)), Err(Rule30Error::LineLength(1025)));
        assert!(CharLine::parse(&"1".repeat(1024)).is_ok());
        assert_eq!(CharLine::parse("0102"), Err(Rule30Error::BadCell { index: 3, found: '2' }));
        assert_eq!(CharLine::parse("01é1"), Err(Rule30Error::BadCell { index: 2, found: 'é' }));
        assert_eq!(CharLine::parse("01 "), Err(Rule30Error::BadCell { index: 2, found: ' ' }));
        assert_eq!(CharLine::from_bytes(&[0, 1]), Err(Rule30Error::BadCell { index: 0, found: '\0' }));
        assert_eq!(CharLine::zeros(0), Err(Rule30Error::LineLength(0)));
        let msg = CharLine::parse("01x").expect_err("bad").to_string();
        assert!(msg.contains("cell 2") && msg.contains("'x'") && msg.contains("'0' and '1'"), "{msg}");
    }
}
