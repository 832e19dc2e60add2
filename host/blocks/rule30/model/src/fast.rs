//! `sw-fast`: bit-sliced. A 64-bit word holds 64 cells; its left and right neighbours are the
//! same word shifted by one with the edge cells carried in from the adjacent words (and, at the
//! ends of the ring, from the other end). The rule is then one boolean expression of the three
//! words, 64 cells at once:
//!
//! - rule 30: `left ^ (centre | right)`;
//! - any rule: the sum of the 8 minterms, minterm `k` kept when bit `k` of the rule is set.
//!
//! [`fast_run_many`] goes one step further and runs 4 packets side by side, one per 64-bit lane
//! of a `[u64; 4]`: the same operations on 256 cells at once. Plain Rust arrays, which the
//! compiler turns into SSE2 (the x86-64 baseline) or, when the CPU has it (detected at run
//! time), AVX2 instructions; other targets get the portable code.

use std::ops::{BitAnd, BitOr, BitXor, Not, Shl, Shr};

use crate::{BitLine, RULE30, WORDS64};

/// How the fast variant runs on this CPU.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum FastBackend {
    /// Plain Rust, compiled for the target's baseline instruction set.
    Portable,
    /// The same code compiled with AVX2 enabled, chosen because the CPU has AVX2.
    Avx2,
}

impl FastBackend {
    pub fn name(self) -> &'static str {
        match self {
            FastBackend::Portable => "portable",
            FastBackend::Avx2 => "avx2",
        }
    }
}

/// The best backend this CPU supports.
pub fn fast_backend() -> FastBackend {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx2") {
        return FastBackend::Avx2;
    }
    FastBackend::Portable
}

/// One generation of `source` into `dest` under `rule`.
pub fn fast_step(source: &BitLine, dest: &mut BitLine, rule: u8) {
    *dest = fast_run(source, rule, 1);
}

/// `generations` successive generations of `source` under `rule`: the last line.
pub fn fast_run(source: &BitLine, rule: u8, generations: usize) -> BitLine {
    run_single_with(fast_backend(), source, rule, generations)
}

/// Runs every line of `lines` for `generations` generations under `rule`, in place. Lines are
/// taken four at a time and run side by side when the four have the same length (the seed's
/// experiment truncates all packets to the length under test); others run one by one.
pub fn fast_run_many(lines: &mut [BitLine], rule: u8, generations: usize) {
    run_many_with(fast_backend(), lines, rule, generations);
}

pub(crate) fn run_single_with(backend: FastBackend, source: &BitLine, rule: u8, generations: usize) -> BitLine {
    let mut line = *source;
    match backend {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: Avx2 is only chosen (fast_backend, or tests that check it) when the CPU has AVX2.
        FastBackend::Avx2 if std::arch::is_x86_feature_detected!("avx2") => unsafe {
            run_avx2(&mut line.words, line.line_length, rule, generations)
        },
        _ => run_kernel(&mut line.words, line.line_length, rule, generations),
    }
    line
}

pub(crate) fn run_many_with(backend: FastBackend, lines: &mut [BitLine], rule: u8, generations: usize) {
    for group in lines.chunks_mut(LANES) {
        let line_length = group[0].line_length;
        if group.len() < LANES || group.iter().any(|l| l.line_length != line_length) {
            for line in group.iter_mut() {
                *line = run_single_with(backend, line, rule, generations);
            }
            continue;
        }
        let mut lanes: [U64x4; WORDS64] = std::array::from_fn(|k| U64x4(std::array::from_fn(|p| group[p].words[k])));
        match backend {
            #[cfg(target_arch = "x86_64")]
            // SAFETY: as in run_single_with.
            FastBackend::Avx2 if std::arch::is_x86_feature_detected!("avx2") => unsafe {
                run_avx2_lanes(&mut lanes, line_length, rule, generations)
            },
            _ => run_kernel(&mut lanes, line_length, rule, generations),
        }
        for (p, line) in group.iter_mut().enumerate() {
            for (k, lane) in lanes.iter().enumerate() {
                line.words[k] = lane.0[p];
            }
        }
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn run_avx2(words: &mut [u64; WORDS64], line_length: usize, rule: u8, generations: usize) {
    run_kernel(words, line_length, rule, generations);
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn run_avx2_lanes(words: &mut [U64x4; WORDS64], line_length: usize, rule: u8, generations: usize) {
    run_kernel(words, line_length, rule, generations);
}

// Kernel -----------------------------------------------------------------------------------------

/// Runs `words` (a valid line of `line_length` cells per lane) for `generations` generations.
#[inline(always)]
fn run_kernel<W: Word>(words: &mut [W; WORDS64], line_length: usize, rule: u8, generations: usize) {
    if rule == RULE30 {
        run_rule(words, line_length, generations, |l, c, r| l ^ (c | r));
    } else {
        let minterms: [W; 8] = std::array::from_fn(|k| W::splat(0u64.wrapping_sub(u64::from((rule >> k) & 1))));
        run_rule(words, line_length, generations, |l, c, r| minterm_form(&minterms, l, c, r));
    }
}

/// The rule as the sum of its minterms: minterm `k` (k = left * 4 + centre * 2 + right) is kept
/// where `minterms[k]` is all ones.
#[inline(always)]
fn minterm_form<W: Word>(minterms: &[W; 8], l: W, c: W, r: W) -> W {
    let (nl, nc, nr) = (!l, !c, !r);
    (minterms[0] & nl & nc & nr)
        | (minterms[1] & nl & nc & r)
        | (minterms[2] & nl & c & nr)
        | (minterms[3] & nl & c & r)
        | (minterms[4] & l & nc & nr)
        | (minterms[5] & l & nc & r)
        | (minterms[6] & l & c & nr)
        | (minterms[7] & l & c & r)
}

#[inline(always)]
fn run_rule<W: Word, F: Fn(W, W, W) -> W>(words: &mut [W; WORDS64], line_length: usize, generations: usize, f: F) {
    let n = line_length.div_ceil(64);
    let last_bit = ((line_length - 1) % 64) as u32;
    let mask = W::splat(BitLine::last_word_mask(line_length));
    let one = W::splat(1);
    let mut spare = [W::splat(0); WORDS64];
    let (mut cur, mut next) = (&mut *words, &mut spare);
    for _ in 0..generations {
        let first_cell = cur[0] & one;
        let last_cell = (cur[n - 1] >> last_bit) & one;
        if n == 1 {
            let c = cur[0];
            next[0] = f((c << 1) | last_cell, c, (c >> 1) | (first_cell << last_bit)) & mask;
        } else {
            next[0] = f((cur[0] << 1) | last_cell, cur[0], (cur[0] >> 1) | (cur[1] << 63));
            for k in 1..n - 1 {
                next[k] = f((cur[k] << 1) | (cur[k - 1] >> 63), cur[k], (cur[k] >> 1) | (cur[k + 1] << 63));
            }
            let c = cur[n - 1];
            next[n - 1] = f((c << 1) | (cur[n - 2] >> 63), c, (c >> 1) | (first_cell << last_bit)) & mask;
        }
        std::mem::swap(&mut cur, &mut next);
    }
    if generations % 2 == 1 {
        // The last generation landed in `spare`.
        *words = spare;
    }
}

// Words and lanes --------------------------------------------------------------------------------

/// The operations the kernel needs from a word of 64 cells (or of several lanes of 64 cells).
trait Word:
    Copy
    + BitAnd<Output = Self>
    + BitOr<Output = Self>
    + BitXor<Output = Self>
    + Not<Output = Self>
    + Shl<u32, Output = Self>
    + Shr<u32, Output = Self>
{
    fn splat(value: u64) -> Self;
}

impl Word for u64 {
    #[inline(always)]
    fn splat(value: u64) -> u64 {
        value
    }
}

const LANES: usize = 4;

/// Four packets' words side by side: lane `p` is packet `p`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(C, align(32))]
struct U64x4([u64; LANES]);

impl Word for U64x4 {
    #[inline(always)]
    fn splat(value: u64) -> U64x4 {
        U64x4([value; LANES])
    }
}

macro_rules! lanewise {
    ($trait:ident, $method:ident, $op:tt) => {
        impl $trait for U64x4 {
            type Output = U64x4;
            #[inline(always)]
            fn $method(self, rhs: U64x4) -> U64x4 {
                let (a, b) = (self.0, rhs.0);
                U64x4([a[0] $op b[0], a[1] $op b[1], a[2] $op b[2], a[3] $op b[3]])
            }
        }
    };
    (shift $trait:ident, $method:ident, $op:tt) => {
        impl $trait<u32> for U64x4 {
            type Output = U64x4;
            #[inline(always)]
            fn $method(self, by: u32) -> U64x4 {
                let a = self.0;
                U64x4([a[0] $op by, a[1] $op by, a[2] $op by, a[3] $op by])
            }
        }
    };
}

lanewise!(BitAnd, bitand, &);
lanewise!(BitOr, bitor, |);
lanewise!(BitXor, bitxor, ^);
lanewise!(shift Shl, shl, <<);
lanewise!(shift Shr, shr, >>);

impl Not for U64x4 {
    type Output = U64x4;
    #[inline(always)]
    fn not(self) -> U64x4 {
        let a = self.0;
        U64x4([!a[0], !a[1], !a[2], !a[3]])
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{char_run, test_packets, CharLine};

    fn backends() -> Vec<FastBackend> {
        let mut all = vec![FastBackend::Portable];
        if fast_backend() == FastBackend::Avx2 {
            all.push(FastBackend::Avx2);
        }
        all
    }

    #[test]
    fn minterm_form_is_the_rule_table() {
        for rule in 0..=255u8 {
            let minterms: [u64; 8] = std::array::from_fn(|k| 0u64.wrapping_sub(u64::from((rule >> k) & 1)));
            // Bit j of (l, c, r) = the 3 bits of neighbourhood j, for j in 0..8.
            let (l, c, r) = (0b1111_0000u64, 0b1100_1100u64, 0b1010_1010u64);
            assert_eq!(minterm_form(&minterms, l, c, r) & 0xff, u64::from(rule), "rule {rule}");
        }
        // The rule-30 expression is the same function.
        let (l, c, r) = (0b1111_0000u64, 0b1100_1100u64, 0b1010_1010u64);
        assert_eq!((l ^ (c | r)) & 0xff, 30);
    }

    #[test]
    fn fast_step_wraps_like_figure_4() {
        for backend in backends() {
            for (from, to) in [("10000", "11001"), ("00001", "10011"), ("1", "0"), ("10", "10"), ("11", "00")] {
                let line = BitLine::from(&CharLine::parse(from).expect("valid"));
                let next = run_single_with(backend, &line, 30, 1);
                assert_eq!(next.to_string(), to, "{from} with {backend:?}");
                let mut dest = BitLine::zeros(1).expect("valid");
                fast_step(&line, &mut dest, 30);
                assert_eq!(dest, next);
            }
        }
    }

    #[test]
    fn generic_minterm_path_agrees_with_the_rule_30_expression() {
        let minterms: [u64; 8] = std::array::from_fn(|k| 0u64.wrapping_sub(u64::from((30u8 >> k) & 1)));
        for line_length in [1, 2, 3, 64, 65, 129, 1024] {
            for packet in test_packets(3, line_length, 30).expect("valid") {
                let line = BitLine::from(&packet);
                let mut generic = line.words;
                run_rule(&mut generic, line_length, 11, |l, c, r| minterm_form(&minterms, l, c, r));
                let mut special = line.words;
                run_kernel(&mut special, line_length, 30, 11);
                assert_eq!(generic, special, "length {line_length}");
            }
        }
    }

    #[test]
    fn lanes_and_single_lines_agree_for_every_backend() {
        for backend in backends() {
            for line_length in [1, 2, 63, 64, 65, 200, 1024] {
                for rule in [30, 110, 90, 0, 255, 57] {
                    let packets: Vec<BitLine> =
                        test_packets(7, line_length, u64::from(rule)).expect("valid").iter().map(BitLine::from).collect();
                    let mut many = packets.clone();
                    run_many_with(backend, &mut many, rule, 9);
                    for (packet, got) in packets.iter().zip(&many) {
                        let golden = char_run(&CharLine::from(packet), rule, 9);
                        assert_eq!(CharLine::from(got), golden, "{backend:?} rule {rule} length {line_length}");
                        assert_eq!(run_single_with(backend, packet, rule, 9), *got);
                    }
                }
            }
        }
    }

    #[test]
    fn mixed_lengths_in_a_group_run_one_by_one() {
        let mut lines: Vec<BitLine> =
            [5usize, 64, 65, 1024, 3].iter().map(|&n| BitLine::from(&test_packets(1, n, 9).expect("valid")[0])).collect();
        let expect: Vec<CharLine> = lines.iter().map(|l| char_run(&CharLine::from(l), 30, 4)).collect();
        fast_run_many(&mut lines, 30, 4);
        let got: Vec<CharLine> = lines.iter().map(CharLine::from).collect();
        assert_eq!(got, expect);
    }

    #[test]
    fn zero_generations_leave_the_line() {
        let line = BitLine::from(&test_packets(1, 100, 3).expect("valid")[0]);
        assert_eq!(fast_run(&line, 30, 0), line);
        let mut many = vec![line; 4];
        fast_run_many(&mut many, 77, 0);
        assert_eq!(many, vec![line; 4]);
        fast_run_many(&mut [], 30, 5);
    }
}
