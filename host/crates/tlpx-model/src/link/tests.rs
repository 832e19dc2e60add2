//! Tests of the link model against numbers worked out by hand.
//!
//! ```text
//!   device ──MWr, MRd (upstream, "TX")────────▶ root complex
//!   device ◀─CplD (downstream, "RX")─────────── root complex
//!
//!   one TLP on the wire = 8 framing + 12/16 header + payload
//!   each direction: capacity = raw × (1 − 16/ack_interval − 4/1538)
//! ```
//!
//! Every expected value is computed in the comment above its assertion from
//! pcie-bench's formulas (pcie-model `model/pcie.py`, `model/mem_bw.py`),
//! not from this crate, so a wrong constant, split or limit makes a test
//! fail. The split tests check the completion rules the simulator relies on.

use super::*;

/// Relative comparison for model outputs; the hand values carry 10 digits.
#[track_caller]
fn assert_close(actual: f64, expected: f64) {
    let tolerance = expected.abs() * 1e-9;
    assert!((actual - expected).abs() <= tolerance, "expected {expected}, got {actual}");
}

fn link(generation: u8, lanes: u8, mps: u32, mrrs: u32, rcb: u32, addr64: bool) -> LinkConfig {
    match LinkConfig::new(generation, lanes, mps, mrrs, rcb, addr64) {
        Ok(cfg) => cfg,
        Err(e) => panic!("test link is invalid: {e}"),
    }
}

/// pcie-bench's default link: Gen3 x8, MPS 256, MRRS 512, RCB 64, 64-bit.
fn gen3_x8() -> LinkConfig {
    link(3, 8, 256, 512, 64, true)
}

/// Gen3 x8 MPS 256 capacity for TLPs, from the first test below.
const GEN3_X8_MPS256_CAPACITY: f64 = 7.235_595_703e9;

// Link rates ---------------------------------------------------------------------

#[test]
fn test_raw_rate_gen3_x8() {
    // 8 GT/s × 128/130 × 8 lanes / 8 bits = 7.876923077e9 B/s (63.015 Gb/s).
    let cfg = gen3_x8();
    assert_eq!(cfg.transfer_rate_gt_s(), 8.0);
    assert_close(cfg.raw_bytes_per_second(), 7.876_923_077e9);
}

#[test]
fn test_raw_rate_8b10b_and_gen5() {
    // Gen1 x1: 2.5 GT/s × 8/10 / 8 = 250e6 B/s.
    assert_close(link(1, 1, 128, 128, 64, false).raw_bytes_per_second(), 250e6);
    // Gen2 x4: 5 GT/s × 8/10 × 4 / 8 = 2e9 B/s.
    assert_close(link(2, 4, 128, 128, 64, false).raw_bytes_per_second(), 2e9);
    // Gen5 x16: 32 GT/s × 128/130 × 16 / 8 = 63.01538462e9 B/s.
    assert_close(link(5, 16, 256, 512, 64, true).raw_bytes_per_second(), 63.015_384_62e9);
    assert_eq!(link(4, 1, 128, 128, 64, true).transfer_rate_gt_s(), 16.0);
}

#[test]
fn test_tlp_capacity_gen3_x8_mps256() {
    // Ack_Limits = FC_Guide = 203 for Gen3 x8 MPS 256.
    // 7.876923077e9 × (1 − 8/203 − 8/203 − 4/1538) = 7.235595703e9 B/s = 57.885 Gb/s.
    let cfg = gen3_x8();
    assert_eq!(cfg.dllp_interval_bytes(), 203);
    assert_close(cfg.dllp_overhead_fraction(), 16.0 / 203.0);
    assert_close(cfg.tlp_bytes_per_second(), GEN3_X8_MPS256_CAPACITY);
}

#[test]
fn test_tlp_capacity_gen1_x1_mps128() {
    // Ack interval 237: 250e6 × (1 − 16/237 − 4/1538) = 232.4721678e6 B/s.
    assert_close(link(1, 1, 128, 128, 64, true).tlp_bytes_per_second(), 232.472_167_8e6);
}

#[test]
fn test_dllp_intervals_follow_pcie_bench_tables() {
    // Gen4 and Gen5 reuse Gen3's table in pcie-model.
    assert_eq!(link(5, 8, 256, 512, 64, true).dllp_interval_bytes(), 203);
    assert_eq!(link(4, 16, 4096, 512, 64, true).dllp_interval_bytes(), 630);
    // The spec's AckFactor changes at x8 MPS 512, so the interval falls: 107 → 86.
    assert_eq!(link(1, 8, 256, 512, 64, true).dllp_interval_bytes(), 107);
    assert_eq!(link(1, 8, 512, 512, 64, true).dllp_interval_bytes(), 86);
    assert_eq!(link(2, 2, 1024, 512, 64, true).dllp_interval_bytes(), 596);
}

#[test]
fn test_dllp_bytes_per_tlp_gen3_x8() {
    // Full-MPS MWr, 64-bit: 8 + 16 + 256 = 280 wire bytes; × 16/203 = 22.06896552.
    let cfg = gen3_x8();
    assert_close(cfg.dllp_bytes_per_tlp(), 22.068_965_52);
    // A 24-byte MRd (8 + 16) causes 24 × 16/203 = 1.891625616.
    assert_close(cfg.dllp_bytes_for_tlp(24), 1.891_625_616);
}

#[test]
fn test_framing_and_headers() {
    for generation in 1..=5 {
        assert_eq!(link(generation, 1, 128, 128, 64, true).tlp_framing_bytes(), 8);
    }
    assert_eq!(gen3_x8().request_header_bytes(), 16);
    assert_eq!(link(3, 8, 256, 512, 64, false).request_header_bytes(), 12);
    assert_eq!(gen3_x8().completion_header_bytes(), 12);
}

#[test]
fn test_wire_bytes_rounds_payload_to_dw() {
    let cfg = gen3_x8();
    // 8 framing + 16 header + 64 payload.
    assert_eq!(cfg.wire_bytes(16, 64), 88);
    // A 1-byte payload still travels as one DW: 8 + 16 + 4.
    assert_eq!(cfg.wire_bytes(16, 1), 28);
    // A 12-byte header with no payload (32-bit MRd): 8 + 12.
    assert_eq!(cfg.wire_bytes(12, 0), 20);
    assert_eq!(cfg.wire_bytes(12, 256), 276);
}

// Writes -------------------------------------------------------------------------

#[test]
fn test_write_64b_addr64_gen3_x8() {
    // One MWr of 8 + 16 + 64 = 88 bytes: 64/88 × 7.235595703e9 = 5.262251420e9 B/s.
    // Efficiency = 64/88 × (1 − 16/203 − 4/1538) = 0.6680592624.
    let bw = write_bandwidth(&gen3_x8(), 64);
    assert_close(bw.bytes_per_second, 5.262_251_420e9);
    assert_close(bw.efficiency, 0.668_059_262_4);
    assert_close(bw.gbit_per_second(), 42.098_011_36);
}

#[test]
fn test_write_64b_addr32_gen3_x8() {
    // 3 DW header: 64/(8 + 12 + 64) × 7.235595703e9 = 5.512834821e9 B/s.
    let bw = write_bandwidth(&link(3, 8, 256, 512, 64, false), 64);
    assert_close(bw.bytes_per_second, 5.512_834_821e9);
}

#[test]
fn test_write_sawtooth_at_mps_256() {
    let cfg = gen3_x8();
    // 256 B: one MWr, 256/280 × C = 6.615401786e9.
    assert_close(write_bandwidth(&cfg, 256).bytes_per_second, 6.615_401_786e9);
    // 257 B: two MWr, 257/(2 × 24 + 257) = 257/305 × C = 6.096879002e9.
    assert_close(write_bandwidth(&cfg, 257).bytes_per_second, 6.096_879_002e9);
    // 512 B: two full MWr, back to 512/560 = 256/280.
    assert_close(write_bandwidth(&cfg, 512).bytes_per_second, 6.615_401_786e9);
    // The tooth repeats after every multiple of MPS.
    for k in 1..16u64 {
        let at = write_bandwidth(&cfg, k * 256).bytes_per_second;
        let after = write_bandwidth(&cfg, k * 256 + 1).bytes_per_second;
        assert!(after < at, "no drop after {} bytes: {at} then {after}", k * 256);
    }
}

#[test]
fn test_write_sawtooth_follows_mps_not_mrrs() {
    // MPS 128: 129 B needs two MWr, 129/(2 × 24 + 129) = 129/177.
    // Capacity with MPS 128 (interval 163): 7.876923077e9 × (1 − 16/163 − 4/1538)
    // = 7.083242028e9; × 129/177 = 5.162362834e9 B/s.
    let cfg = link(3, 8, 128, 4096, 64, true);
    assert_close(cfg.tlp_bytes_per_second(), 7.083_242_028e9);
    assert_close(write_bandwidth(&cfg, 129).bytes_per_second, 5.162_362_834e9);
}

#[test]
fn test_zero_size_has_zero_bandwidth() {
    let cfg = gen3_x8();
    for bw in [write_bandwidth(&cfg, 0), read_bandwidth(&cfg, 0), read_write_bandwidth(&cfg, 0)] {
        assert_eq!(bw.bytes_per_second, 0.0);
        assert_eq!(bw.efficiency, 0.0);
    }
}

// Reads --------------------------------------------------------------------------

#[test]
fn test_read_4k_mrrs512_gen3_x8() {
    // Upstream: 4096/512 = 8 MRd × 24 = 192 bytes.
    // Downstream: 4096/256 = 16 CplD × (8 + 12) + 4096 = 4416 bytes: the limit.
    // 4096/4416 × 7.235595703e9 = 6.711277174e9 B/s; efficiency 0.8520176100.
    let cfg = gen3_x8();
    let bw = read_bandwidth(&cfg, 4096);
    assert_close(bw.bytes_per_second, 6.711_277_174e9);
    assert_close(bw.efficiency, 0.852_017_610_0);

    let a = analyse(&cfg, Operation::Read, 4096, CompletionSplit::Mps);
    assert_eq!((a.upstream_tlps, a.downstream_tlps), (8, 16));
    assert_eq!((a.upstream_wire_bytes, a.downstream_wire_bytes), (192, 4416));
    assert_eq!(a.limited_by, Direction::Downstream);
    assert_close(a.downstream_utilisation, 1.0);
    assert_close(a.upstream_utilisation, 192.0 / 4416.0);
}

#[test]
fn test_read_4k_rcb_completions() {
    // Completions in 64-byte pieces: 64 × 20 + 4096 = 5376 bytes downstream.
    // 4096/5376 × 7.235595703e9 = 5.512834821e9 B/s.
    let a = analyse(&gen3_x8(), Operation::Read, 4096, CompletionSplit::Rcb);
    assert_eq!(a.downstream_wire_bytes, 5376);
    assert_close(a.bandwidth.bytes_per_second, 5.512_834_821e9);
}

#[test]
fn test_read_tiny_is_limited_by_requests_with_addr64() {
    // 1 byte, 64-bit: MRd 24 bytes up, CplD 20 + 1 = 21 down; upstream limits.
    // 7.235595703e9 / 24 = 301.4831543e6 B/s.
    let cfg = gen3_x8();
    assert_close(read_bandwidth(&cfg, 1).bytes_per_second, 301.483_154_3e6);
    assert_eq!(analyse(&cfg, Operation::Read, 1, CompletionSplit::Mps).limited_by, Direction::Upstream);
    // 32-bit: MRd 20 bytes up, 21 down; downstream limits: C / 21 = 344.5521763e6.
    let cfg32 = link(3, 8, 256, 512, 64, false);
    assert_close(read_bandwidth(&cfg32, 1).bytes_per_second, 344.552_176_3e6);
}

#[test]
fn test_read_sawtooth_at_mrrs_does_not_cost_downstream() {
    // 513 B: 2 MRd up (48), 3 CplD down (60 + 513 = 573). Downstream limits:
    // 513/573 × C = 6.477941703e9; MRRS only adds upstream bytes.
    assert_close(read_bandwidth(&gen3_x8(), 513).bytes_per_second, 6.477_941_703e9);
}

#[test]
fn test_read_mrrs_below_mps_needs_a_completion_per_request() {
    // MPS 512, MRRS 128, 512 B: 4 MRd, and each gets its own CplD, so
    // downstream is 4 × 20 + 512 = 592 bytes (pcie-bench counts
    // ceil(512 / MPS) = 1 CplD here, which no completer can send).
    // Capacity (interval 182): 7.876923077e9 × (1 − 16/182 − 4/1538) = 7.163960177e9;
    // × 512/592 = 6.195857450e9 B/s.
    let cfg = link(3, 8, 512, 128, 64, true);
    let a = analyse(&cfg, Operation::Read, 512, CompletionSplit::Mps);
    assert_eq!((a.upstream_tlps, a.downstream_tlps), (4, 4));
    assert_close(a.bandwidth.bytes_per_second, 6.195_857_450e9);
}

// Reads and writes together ------------------------------------------------------

#[test]
fn test_read_write_4k_gen3_x8() {
    // Upstream: 16 MWr (16 × 24 + 4096 = 4480) + 8 MRd (192) = 4672 bytes: the limit.
    // Downstream: 4416 bytes.
    // 4096/4672 × 7.235595703e9 = 6.343535959e9 B/s in each direction.
    let cfg = gen3_x8();
    assert_close(read_write_bandwidth(&cfg, 4096).bytes_per_second, 6.343_535_959e9);
    let a = analyse(&cfg, Operation::ReadWrite, 4096, CompletionSplit::Mps);
    assert_eq!((a.upstream_wire_bytes, a.downstream_wire_bytes), (4672, 4416));
    assert_eq!(a.limited_by, Direction::Upstream);
}

#[test]
fn test_read_write_64b_gen3_x8() {
    // Upstream: MWr 88 + MRd 24 = 112; downstream CplD 84.
    // 64/112 × 7.235595703e9 = 4.134626116e9 B/s.
    assert_close(read_write_bandwidth(&gen3_x8(), 64).bytes_per_second, 4.134_626_116e9);
}

#[test]
fn test_read_write_is_below_write_alone() {
    let cfg = gen3_x8();
    for size in [1u64, 64, 100, 256, 1500, 4096, 65536] {
        let rw = read_write_bandwidth(&cfg, size).bytes_per_second;
        assert!(rw < write_bandwidth(&cfg, size).bytes_per_second, "size {size}");
        assert!(rw <= read_bandwidth(&cfg, size).bytes_per_second, "size {size}");
    }
}

// Configuration ------------------------------------------------------------------

#[test]
fn test_validation_messages() {
    let err = |r: Result<LinkConfig, ModelError>| match r {
        Ok(cfg) => panic!("accepted {cfg}"),
        Err(e) => e.to_string(),
    };
    assert_eq!(err(LinkConfig::new(7, 8, 256, 512, 64, true)), "PCIe generation must be 1..5, not 7");
    assert_eq!(err(LinkConfig::new(0, 8, 256, 512, 64, true)), "PCIe generation must be 1..5, not 0");
    assert_eq!(err(LinkConfig::new(3, 3, 256, 512, 64, true)), "link width must be 1, 2, 4, 8 or 16 lanes, not 3");
    assert_eq!(err(LinkConfig::new(3, 32, 256, 512, 64, true)), "link width must be 1, 2, 4, 8 or 16 lanes, not 32");
    assert_eq!(
        err(LinkConfig::new(3, 8, 384, 512, 64, true)),
        "maximum payload size (MPS) must be 128, 256, 512, 1024, 2048 or 4096 bytes, not 384"
    );
    assert_eq!(
        err(LinkConfig::new(3, 8, 8192, 512, 64, true)),
        "maximum payload size (MPS) must be 128, 256, 512, 1024, 2048 or 4096 bytes, not 8192"
    );
    assert_eq!(
        err(LinkConfig::new(3, 8, 256, 64, 64, true)),
        "maximum read request size (MRRS) must be 128, 256, 512, 1024, 2048 or 4096 bytes, not 64"
    );
    assert_eq!(err(LinkConfig::new(3, 8, 256, 512, 256, true)), "read completion boundary (RCB) must be 64 or 128 bytes, not 256");
    assert!(LinkConfig::new(5, 16, 4096, 4096, 128, false).is_ok());
    assert!(LinkConfig::new(1, 1, 128, 128, 64, true).is_ok());
}

#[test]
fn test_validate_catches_hand_built_config() {
    let cfg = LinkConfig { rcb: 32, ..LinkConfig::PCIE_BENCH_DEFAULT };
    assert!(cfg.validate().is_err());
    assert_eq!(LinkConfig::PCIE_BENCH_DEFAULT, gen3_x8());
}

#[test]
fn test_serde_round_trip_and_validation() {
    let cfg = gen3_x8();
    let json = serde_json::to_string(&cfg).unwrap_or_default();
    assert_eq!(json, r#"{"generation":3,"lanes":8,"mps":256,"mrrs":512,"rcb":64,"addr64":true}"#);
    let back: LinkConfig = serde_json::from_str(&json).unwrap_or(LinkConfig { generation: 0, ..cfg });
    assert_eq!(back, cfg);

    let bad = r#"{"generation":7,"lanes":8,"mps":256,"mrrs":512,"rcb":64,"addr64":true}"#;
    match serde_json::from_str::<LinkConfig>(bad) {
        Ok(cfg) => panic!("accepted {cfg}"),
        Err(e) => assert!(e.to_string().contains("PCIe generation must be 1..5, not 7"), "{e}"),
    }
}

#[test]
fn test_display() {
    assert_eq!(gen3_x8().to_string(), "Gen3 x8, MPS 256, MRRS 512, RCB 64, 64-bit addresses");
}

// Completion and request splitting -----------------------------------------------

#[test]
fn test_completions_aligned() {
    let cfg = gen3_x8(); // MPS 256, RCB 64
    assert_eq!(completions_for_read(&cfg, 0x1000, 512), vec![(0x1000, 256), (0x1100, 256)]);
    assert_eq!(completions_for_read(&cfg, 0x1000, 100), vec![(0x1000, 100)]);
}

#[test]
fn test_completions_unaligned_start() {
    // 0x1010 is 16 bytes into an RCB: first completion 0x1010..0x1040 (48 bytes),
    // then MPS pieces from the RCB boundary, then the rest: 48 + 256 + 256 + 40 = 600.
    let cfg = gen3_x8();
    assert_eq!(completions_for_read(&cfg, 0x1010, 600), vec![(0x1010, 48), (0x1040, 256), (0x1140, 256), (0x1240, 40)]);
    // With RCB 128 the first piece runs to 0x1080.
    let cfg128 = link(3, 8, 256, 512, 128, true);
    assert_eq!(completions_for_read(&cfg128, 0x1010, 600), vec![(0x1010, 112), (0x1080, 256), (0x1180, 232)]);
}

#[test]
fn test_completions_exactly_rcb() {
    let cfg = gen3_x8();
    // One RCB, aligned: a single completion.
    assert_eq!(completions_for_read(&cfg, 0x40, 64), vec![(0x40, 64)]);
    // One RCB's worth straddling a boundary: cut at 0x40.
    assert_eq!(completions_for_read(&cfg, 0x20, 64), vec![(0x20, 32), (0x40, 32)]);
    // RCB 128: 0x40 is not aligned, but the request ends on the boundary 0x80.
    let cfg128 = link(3, 8, 256, 512, 128, true);
    assert_eq!(completions_for_read(&cfg128, 0x40, 64), vec![(0x40, 64)]);
}

#[test]
fn test_completions_cross_4k() {
    let cfg = gen3_x8();
    // RCB-aligned 0xF80 + 256 would reach 0x1080: cut at the page boundary.
    assert_eq!(completions_for_read(&cfg, 0xF80, 256), vec![(0xF80, 128), (0x1000, 128)]);
    // MPS 4096, aligned but not page-aligned: still cut at 0x2000.
    let big = link(3, 8, 4096, 4096, 64, true);
    assert_eq!(completions_for_read(&big, 0x1C00, 4096), vec![(0x1C00, 1024), (0x2000, 3072)]);
}

#[test]
fn test_completions_edges() {
    let cfg = gen3_x8();
    assert!(completions_for_read(&cfg, 0x1234, 0).is_empty());
    // Last bytes of the address space: no overflow, 16 + 48.
    assert_eq!(completions_for_read(&cfg, u64::MAX - 63, 64), vec![(u64::MAX - 63, 64)]);
    assert_eq!(completions_for_read(&cfg, u64::MAX - 79, 64), vec![(u64::MAX - 79, 16), (u64::MAX - 63, 48)]);
}

#[test]
fn test_completion_rules_hold_everywhere() {
    for (mps, rcb) in [(128, 64), (256, 64), (256, 128), (4096, 128)] {
        let cfg = link(2, 4, mps, 4096, rcb, true);
        let (mps, rcb) = (u64::from(mps), u64::from(rcb));
        for addr in [0u64, 4, 60, 64, 100, 0xFC0, 0xFFC, 0x1F40, 0x7_0000_0F10] {
            for len in [1u32, 3, 64, 65, 127, 128, 500, 4096, 9000] {
                let pieces = completions_for_read(&cfg, addr, len);
                let mut next = addr;
                for (i, &(a, n)) in pieces.iter().enumerate() {
                    let end = a + u64::from(n);
                    assert_eq!(a, next, "gap at {addr:#x}+{len}");
                    assert!(n > 0 && u64::from(n) <= mps, "size {n} at {a:#x}");
                    assert_eq!(a / 4096, (end - 1) / 4096, "crosses 4 KiB at {a:#x}");
                    if i > 0 {
                        assert_eq!(a % rcb, 0, "unaligned start {a:#x}");
                    }
                    if i + 1 < pieces.len() {
                        assert_eq!(end % rcb, 0, "unaligned end {end:#x}");
                    }
                    next = end;
                }
                assert_eq!(next, addr + u64::from(len), "lost bytes at {addr:#x}+{len}");
            }
        }
    }
}

#[test]
fn test_rcb_completions() {
    let cfg = gen3_x8();
    assert_eq!(completions_for_read_rcb(&cfg, 0x30, 150), vec![(0x30, 16), (0x40, 64), (0x80, 64), (0xC0, 6)]);
    // 4096 bytes aligned: 64 completions, pcie-bench's ceil(4096 / 64).
    assert_eq!(completions_for_read_rcb(&cfg, 0, 4096).len(), 64);
}

#[test]
fn test_read_and_write_requests() {
    let cfg = gen3_x8(); // MPS 256, MRRS 512
                         // Unaligned read: to the MRRS boundary, then MRRS pieces: 496 + 512 + 16 = 1024.
    assert_eq!(read_requests(&cfg, 0x1010, 1024), vec![(0x1010, 496), (0x1200, 512), (0x1400, 16)]);
    // Aligned 4 KiB: pcie-bench's ceil(4096 / 512) = 8 MRd.
    assert_eq!(read_requests(&cfg, 0x10000, 4096).len(), 8);
    assert_eq!(write_requests(&cfg, 0xFF0, 300), vec![(0xFF0, 16), (0x1000, 256), (0x1100, 28)]);
}

#[test]
fn test_model_wire_bytes_match_sum_of_tlps() {
    // For aligned, DW-multiple transfers the model's per-transfer wire bytes
    // are exactly the TLPs the splitting functions produce.
    let cfg = gen3_x8();
    for size in [64u32, 256, 260, 1500, 4096] {
        let a = analyse(&cfg, Operation::Read, u64::from(size), CompletionSplit::Mps);
        let up: u64 = read_requests(&cfg, 0x10_0000, size).iter().map(|_| u64::from(cfg.wire_bytes(cfg.request_header_bytes(), 0))).sum();
        let down: u64 = read_requests(&cfg, 0x10_0000, size)
            .iter()
            .flat_map(|&(addr, len)| completions_for_read(&cfg, addr, len))
            .map(|(_, n)| u64::from(cfg.wire_bytes(cfg.completion_header_bytes(), n)))
            .sum();
        assert_eq!((a.upstream_wire_bytes, a.downstream_wire_bytes), (up, down), "size {size}");

        let w = analyse(&cfg, Operation::Write, u64::from(size), CompletionSplit::Mps);
        let wire: u64 =
            write_requests(&cfg, 0x10_0000, size).iter().map(|&(_, n)| u64::from(cfg.wire_bytes(cfg.request_header_bytes(), n))).sum();
        assert_eq!(w.upstream_wire_bytes, wire, "size {size}");
    }
}
