//! The micro benchmark behind `make bench`: sw-fast against sw-char at one line length, as a
//! ratio. The seed's shape: every packet truncated to the length, run for the generations.

use std::hint::black_box;
use std::time::{Duration, Instant};

use serde::Serialize;

use crate::fast::{fast_backend, fast_run, fast_run_many, FastBackend};
use crate::{bit_step, char_step, check_line_length, test_packets, BitLine, CharLine, Rule30Error, RulesArray, RULE30};

/// Repetitions of each measurement; the minimum and the median are reported.
pub const BENCH_REPETITIONS: usize = 5;

/// Seed of the packet set the benchmark runs.
const BENCH_SEED: u64 = 30;

/// Time for the whole run (every packet, every generation) of one variant.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Timing {
    /// Fastest repetition, seconds.
    pub min_s: f64,
    /// Median repetition, seconds.
    pub median_s: f64,
    /// Median time per generated line, nanoseconds.
    pub median_ns_per_line: f64,
}

/// What [`bench_ratio`] measured, with its parameters.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct BenchResult {
    pub line_length: usize,
    pub packets: usize,
    pub generations: usize,
    pub rule: u8,
    pub repetitions: usize,
    /// How sw-fast ran on this CPU.
    pub fast_backend: FastBackend,
    pub sw_char: Timing,
    pub sw_bit: Timing,
    /// sw-fast, one packet at a time (as `tlpx rule30 run --mode sw-fast` times packets).
    pub sw_fast: Timing,
    /// sw-fast, four packets side by side ([`crate::fast_run_many`]).
    pub sw_fast_batch: Timing,
    /// sw-char median / sw-fast median: how many times faster sw-fast is.
    pub ratio: f64,
    /// sw-char minimum / sw-fast minimum.
    pub ratio_min: f64,
    /// sw-char median / sw-fast batch median.
    pub ratio_batch: f64,
}

impl BenchResult {
    /// One line for the terminal, with the parameters.
    pub fn summary(&self) -> String {
        let ms = |t: &Timing| t.median_s * 1e3;
        format!(
            "sw-fast is {:.1}x as fast as sw-char at {} bits ({:.1}x with 4 packets per pass); \
             rule {}, {} packets x {} generations, median of {} ({}): \
             sw-char {:.2} ms, sw-bit {:.2} ms, sw-fast {:.3} ms, sw-fast batch {:.3} ms",
            self.ratio,
            self.line_length,
            self.ratio_batch,
            self.rule,
            self.packets,
            self.generations,
            self.repetitions,
            self.fast_backend.name(),
            ms(&self.sw_char),
            ms(&self.sw_bit),
            ms(&self.sw_fast),
            ms(&self.sw_fast_batch),
        )
    }
}

/// Times sw-char, sw-bit and sw-fast on `packets` packets of `len_bits` cells for `generations`
/// generations of rule 30, [`BENCH_REPETITIONS`] times each (interleaved, so a slow moment of
/// the machine hits every variant alike). Only the generations are timed: each variant's packets
/// are prepared in its own representation beforehand, as the seed's were compiled in. The final
/// lines of every variant are checked against sw-char.
pub fn bench_ratio(len_bits: usize, packets: usize, generations: usize) -> Result<BenchResult, Rule30Error> {
    check_line_length(len_bits)?;
    if packets == 0 {
        return Err(Rule30Error::Zero { what: "the number of packets" });
    }
    if generations == 0 {
        return Err(Rule30Error::Zero { what: "the number of generations" });
    }
    let rule = RULE30;
    let char_packets = test_packets(packets, len_bits, BENCH_SEED)?;
    let bit_packets: Vec<BitLine> = char_packets.iter().map(BitLine::from).collect();

    let mut samples = [const { Vec::new() }; 4];
    let mut finals: [Vec<BitLine>; 4] = Default::default();
    for _ in 0..BENCH_REPETITIONS {
        let runs: [&dyn Fn() -> Vec<BitLine>; 4] = [
            &|| run_char(&char_packets, rule, generations),
            &|| run_bit(&bit_packets, rule, generations),
            &|| bit_packets.iter().map(|p| fast_run(black_box(p), rule, generations)).collect(),
            &|| {
                let mut lines = bit_packets.clone();
                fast_run_many(black_box(&mut lines), rule, generations);
                lines
            },
        ];
        for (variant, run) in runs.iter().enumerate() {
            let start = Instant::now();
            let out = black_box(run());
            samples[variant].push(start.elapsed());
            finals[variant] = out;
        }
    }
    for (variant, name) in [(1, "sw-bit"), (2, "sw-fast"), (3, "sw-fast batch")] {
        if finals[variant] != finals[0] {
            return Err(Rule30Error::Disagreement(name));
        }
    }

    let lines = (packets * generations) as f64;
    let [sw_char, sw_bit, sw_fast, sw_fast_batch] = samples.map(|s| timing(s, lines));
    Ok(BenchResult {
        line_length: len_bits,
        packets,
        generations,
        rule,
        repetitions: BENCH_REPETITIONS,
        fast_backend: fast_backend(),
        ratio: sw_char.median_s / sw_fast.median_s,
        ratio_min: sw_char.min_s / sw_fast.min_s,
        ratio_batch: sw_char.median_s / sw_fast_batch.median_s,
        sw_char,
        sw_bit,
        sw_fast,
        sw_fast_batch,
    })
}

/// sw-char as the seed's program runs it: two line buffers per packet, swapped each generation.
fn run_char(packets: &[CharLine], rule: u8, generations: usize) -> Vec<BitLine> {
    let rules = RulesArray::new(rule);
    packets
        .iter()
        .map(|packet| {
            let (mut line, mut next) = (packet.clone(), packet.clone());
            for _ in 0..generations {
                char_step(black_box(&line), &mut next, &rules);
                std::mem::swap(&mut line, &mut next);
            }
            BitLine::from(&line)
        })
        .collect()
}

fn run_bit(packets: &[BitLine], rule: u8, generations: usize) -> Vec<BitLine> {
    packets
        .iter()
        .map(|packet| {
            let (mut line, mut next) = (*packet, *packet);
            for _ in 0..generations {
                bit_step(black_box(&line), &mut next, rule);
                std::mem::swap(&mut line, &mut next);
            }
            line
        })
        .collect()
}

fn timing(mut samples: Vec<Duration>, lines: f64) -> Timing {
    samples.sort();
    let median = samples[samples.len() / 2].as_secs_f64();
    Timing { min_s: samples[0].as_secs_f64(), median_s: median, median_ns_per_line: median * 1e9 / lines }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bench_ratio_refuses_bad_parameters() {
        assert_eq!(bench_ratio(0, 10, 10), Err(Rule30Error::LineLength(0)));
        assert_eq!(bench_ratio(1025, 10, 10), Err(Rule30Error::LineLength(1025)));
        let err = bench_ratio(64, 0, 10).expect_err("no packets");
        assert_eq!(err.to_string(), "the number of packets must be at least 1, not 0");
        assert!(bench_ratio(64, 10, 0).is_err());
    }

    #[test]
    fn bench_ratio_measures_sw_fast_well_ahead_of_sw_char_at_1024_bits() {
        let result = bench_ratio(1024, 40, 20).expect("valid parameters");
        assert_eq!((result.line_length, result.packets, result.generations, result.rule), (1024, 40, 20, 30));
        for t in [result.sw_char, result.sw_bit, result.sw_fast, result.sw_fast_batch] {
            assert!(t.min_s > 0.0 && t.min_s <= t.median_s, "{t:?}");
        }
        // 64 cells per operation against one: even a loaded machine keeps sw-fast far ahead.
        assert!(result.ratio > 5.0, "{}", result.summary());
        assert!(result.summary().contains("at 1024 bits"));
        let json = serde_json::to_value(&result).expect("serialisable");
        assert_eq!(json["sw_fast"]["median_s"].as_f64(), Some(result.sw_fast.median_s));
        assert!(json["fast_backend"].is_string());
    }

    #[test]
    fn bench_ratio_runs_one_cell_lines() {
        let result = bench_ratio(1, 3, 2).expect("valid parameters");
        assert!(result.ratio.is_finite() && result.ratio > 0.0);
    }
}
