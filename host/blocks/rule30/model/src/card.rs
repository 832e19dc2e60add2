//! The card's register layout: `input[32]` and `output[32]`, 32-bit words at BAR0 + 0x20 and
//! + 0xa0. Cell `i` is bit `i % 32` of word `i / 32` (the gateware's `chars_to_words`).

use crate::{check_line_length, BitLine, Rule30Error, CARD_WORDS, WORDS64};

/// The 32 register words that hold `line`; words and bits beyond the line are zero.
pub fn to_card_words(line: &BitLine) -> [u32; CARD_WORDS] {
    let words = &line.words;
    std::array::from_fn(|k| (words[k / 2] >> (32 * (k % 2))) as u32)
}

/// The first `line_length` cells held in the register `words`; bits beyond are ignored, as the
/// card ignores them.
pub fn from_card_words(words: &[u32; CARD_WORDS], line_length: usize) -> Result<BitLine, Rule30Error> {
    check_line_length(line_length)?;
    let packed: [u64; WORDS64] = std::array::from_fn(|k| u64::from(words[2 * k]) | u64::from(words[2 * k + 1]) << 32);
    BitLine::from_words64(&packed[..line_length.div_ceil(64)], line_length)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::CharLine;

    #[test]
    fn card_words_put_cell_i_at_bit_i_mod_32_of_word_i_div_32() {
        // The gateware's test_reference_bit_order_cell_i_is_bit_i_mod_32_of_word_i_div_32.
        let mut text = vec![b'0'; 1024];
        for i in [0, 31, 32, 33, 1023] {
            text[i] = b'1';
        }
        let line = BitLine::from(&CharLine::from_bytes(&text).expect("valid"));
        let words = to_card_words(&line);
        assert_eq!(words[0], 1 | 1 << 31);
        assert_eq!(words[1], 0b11);
        assert_eq!(words[31], 1 << 31);
        assert_eq!(words.iter().map(|w| w.count_ones()).sum::<u32>(), 5);
        assert_eq!(from_card_words(&words, 1024), Ok(line));

        let short = BitLine::from(&CharLine::parse("101").expect("valid"));
        let mut expect = [0u32; CARD_WORDS];
        expect[0] = 0b101;
        assert_eq!(short.to_card_words(), expect);
    }

    #[test]
    fn from_card_words_ignores_bits_beyond_the_line() {
        let all = [u32::MAX; CARD_WORDS];
        assert_eq!(from_card_words(&all, 3).expect("valid").to_string(), "111");
        let line = from_card_words(&all, 33).expect("valid");
        assert_eq!(line.count_ones(), 33);
        let words = to_card_words(&line);
        assert_eq!((words[0], words[1], words[2]), (u32::MAX, 1, 0));
    }

    #[test]
    fn from_card_words_refuses_bad_lengths() {
        let words = [0u32; CARD_WORDS];
        assert_eq!(from_card_words(&words, 0), Err(Rule30Error::LineLength(0)));
        assert_eq!(from_card_words(&words, 1025), Err(Rule30Error::LineLength(1025)));
    }

    #[test]
    fn card_words_round_trip_every_length() {
        let mut state = 0x1234_5678_9abc_def0u64;
        for line_length in 1..=1024 {
            let words: [u32; CARD_WORDS] = std::array::from_fn(|_| {
                state = state.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                (state >> 32) as u32
            });
            let line = from_card_words(&words, line_length).expect("valid");
            let back = to_card_words(&line);
            for i in 0..1024 {
                let bit = |w: &[u32; CARD_WORDS]| (w[i / 32] >> (i % 32)) & 1;
                let expect = if i < line_length { bit(&words) } else { 0 };
                assert_eq!(bit(&back), expect, "cell {i} of a {line_length}-cell line");
                if i < line_length {
                    assert_eq!(line.cell(i), Some(expect == 1));
                }
            }
        }
    }
}
