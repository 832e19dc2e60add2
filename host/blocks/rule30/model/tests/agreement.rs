//! Every software variant against the golden reference, the seed's Figure 4 (`char_step`).
//!
//! ```text
//!  packet ──char_run──────────► golden
//!     ├────bit_run──────────► must equal
//!     ├────fast_run─────────► must equal
//!     ├────fast_run_many────► must equal (4 packets side by side)
//!     └────card words ⇄─────► must survive the register layout
//! ```
//!
//! The seed found corner-case bugs in its bit-based variant this way; the corners here are the
//! word edges (31/32/33, 63/64/65, …), the one- and two-cell rings, the full 1024-cell line,
//! all 256 rules and runs of many generations.

use tlpx_rule30::{
    bit_run, bit_step, char_run, char_step, fast_run, fast_run_many, fast_step, from_card_words, test_packets, to_card_words, BitLine,
    CharLine, RulesArray, Variant,
};

const EDGE_LENGTHS: [usize; 22] = [1, 2, 3, 4, 31, 32, 33, 63, 64, 65, 127, 128, 129, 255, 256, 257, 511, 512, 513, 1000, 1023, 1024];

/// Seeded random packets plus the structured lines that break wrap-around code.
fn lines(line_length: usize, seed: u64) -> Vec<CharLine> {
    let mut all = test_packets(3, line_length, seed).expect("valid length");
    let text = |f: &dyn Fn(usize) -> bool| {
        CharLine::from_bytes(&(0..line_length).map(|i| if f(i) { b'1' } else { b'0' }).collect::<Vec<u8>>()).expect("valid line")
    };
    all.push(text(&|_| false));
    all.push(text(&|_| true));
    all.push(text(&|i| i == 0));
    all.push(text(&|i| i == line_length - 1));
    all.push(text(&|i| i % 2 == 0));
    all
}

fn check_all_variants(packet: &CharLine, rule: u8, generations: usize) {
    let golden = char_run(packet, rule, generations);
    let bits = BitLine::from(packet);
    let what = |v: &str| format!("{v}: rule {rule}, {} cells, {generations} generations, packet {packet}", packet.line_length());
    assert_eq!(CharLine::from(&bit_run(&bits, rule, generations)), golden, "{}", what("sw-bit"));
    assert_eq!(CharLine::from(&fast_run(&bits, rule, generations)), golden, "{}", what("sw-fast"));
    for variant in Variant::ALL {
        assert_eq!(CharLine::from(&variant.run(&bits, rule, generations)), golden, "{}", what(variant.name()));
    }
}

#[test]
fn all_variants_match_char_reference_for_all_256_rules_at_edge_lengths() {
    for rule in 0..=255u8 {
        for line_length in EDGE_LENGTHS {
            for packet in lines(line_length, u64::from(rule) << 16 | line_length as u64) {
                check_all_variants(&packet, rule, 1);
                check_all_variants(&packet, rule, 4);
            }
        }
    }
}

#[test]
fn all_variants_match_char_reference_at_every_length_1_to_1024() {
    for line_length in 1..=1024 {
        let packets = test_packets(2, line_length, line_length as u64).expect("valid length");
        check_all_variants(&packets[0], 30, 3);
        check_all_variants(&packets[1], (line_length * 37 % 256) as u8, 2);
    }
}

#[test]
fn all_variants_match_char_reference_over_99_generations_generation_by_generation() {
    // The seed's shape: packets of many lengths, 99 generations each, compared line by line.
    let rules_array = RulesArray::new(30);
    for line_length in [1, 2, 3, 8, 33, 64, 65, 100, 257, 1023, 1024] {
        for packet in test_packets(5, line_length, 99).expect("valid length") {
            let (mut golden, mut next) = (packet.clone(), packet.clone());
            let mut bit = BitLine::from(&packet);
            let mut fast = bit;
            let mut scratch = bit;
            for generation in 1..=99 {
                char_step(&golden, &mut next, &rules_array);
                std::mem::swap(&mut golden, &mut next);
                bit_step(&bit, &mut scratch, 30);
                bit = scratch;
                fast_step(&fast, &mut scratch, 30);
                fast = scratch;
                assert_eq!(CharLine::from(&bit), golden, "sw-bit, {line_length} cells, generation {generation}");
                assert_eq!(CharLine::from(&fast), golden, "sw-fast, {line_length} cells, generation {generation}");
            }
        }
    }
}

#[test]
fn batched_fast_variant_matches_char_reference_over_many_packets_and_rules() {
    for (i, line_length) in EDGE_LENGTHS.into_iter().enumerate() {
        for rule in [30u8, 110, 90, 184, 45, (i * 53 % 256) as u8] {
            // 10 packets: two full groups of four and a remainder of two.
            let packets = test_packets(10, line_length, u64::from(rule) + 1000).expect("valid length");
            let mut lines: Vec<BitLine> = packets.iter().map(BitLine::from).collect();
            fast_run_many(&mut lines, rule, 99);
            for (packet, line) in packets.iter().zip(&lines) {
                assert_eq!(CharLine::from(line), char_run(packet, rule, 99), "rule {rule}, {line_length} cells");
            }
        }
    }
}

#[test]
fn card_words_carry_every_variant_output_unchanged() {
    // A hw-style chain: packet → card words → (model of the card) → card words → packet.
    for line_length in EDGE_LENGTHS {
        for packet in lines(line_length, 7) {
            let words = to_card_words(&BitLine::from(&packet));
            let on_card = from_card_words(&words, line_length).expect("valid length");
            let out = to_card_words(&fast_run(&on_card, 30, 5));
            let back = from_card_words(&out, line_length).expect("valid length");
            assert_eq!(CharLine::from(&back), char_run(&packet, 30, 5), "{line_length} cells");
        }
    }
}
