//! The test packets: the seed's program "picks up a packet from the test data set and truncates
//! it to the selected line length". Ours are pseudo-random (SplitMix64), 1024 cells each, and
//! truncated the same way, so packet `i` at a shorter length is a prefix of packet `i` at 1024.

use crate::{check_line_length, CharLine, Rule30Error, MAX_LINE_LENGTH};

/// `count` packets of `line_length` cells from the set numbered `seed`.
pub fn test_packets(count: usize, line_length: usize, seed: u64) -> Result<Vec<CharLine>, Rule30Error> {
    check_line_length(line_length)?;
    let mut state = seed;
    let mut next = move || {
        // SplitMix64 (Steele, Lea, Flood, "Fast splittable pseudorandom number generators").
        state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = state;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    };
    Ok((0..count)
        .map(|_| {
            let mut cells: Vec<u8> = (0..MAX_LINE_LENGTH / 64)
                .flat_map(|_| {
                    let word = next();
                    (0..64).map(move |b| b'0' + ((word >> b) & 1) as u8)
                })
                .collect();
            cells.truncate(line_length);
            CharLine::from_valid_cells(cells)
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn packets_are_reproducible_prefixes() {
        let long = test_packets(5, 1024, 7).expect("valid");
        let short = test_packets(5, 100, 7).expect("valid");
        assert_eq!(long, test_packets(5, 1024, 7).expect("valid"));
        assert_ne!(long, test_packets(5, 1024, 8).expect("valid"));
        for (l, s) in long.iter().zip(&short) {
            assert_eq!(&l.as_bytes()[..100], s.as_bytes());
        }
        // Random enough that every packet differs and about half the cells are alive.
        let ones: usize = long.iter().map(|p| p.as_bytes().iter().filter(|&&c| c == b'1').count()).sum();
        assert!((2300..2820).contains(&ones), "{ones} live cells of 5120");
        assert!(long.windows(2).all(|w| w[0] != w[1]));
    }

    #[test]
    fn bad_lengths_are_refused() {
        assert_eq!(test_packets(1, 0, 0), Err(Rule30Error::LineLength(0)));
        assert_eq!(test_packets(1, 1025, 0), Err(Rule30Error::LineLength(1025)));
        assert_eq!(test_packets(0, 8, 0), Ok(vec![]));
    }
}
