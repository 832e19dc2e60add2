//! Bounded fuzzing in the normal test suite: thousands of mutations (bit flips, byte
//! overwrites, truncations, insertions, deletions, spliced headers) of a valid trace go
//! through the reader and every converter. Each must end in Ok or Err, never a panic.
//! Deterministic (fixed seeds); a failure prints the seed and mutation to reproduce.
//! The open-ended version is the cargo-fuzz target in fuzz/ (see traces/README.md).
#![allow(clippy::unwrap_used)]

use crate::common;

use std::panic::{catch_unwind, AssertUnwindSafe};

use rand::Rng;
use tlpx_trace::fuzzing::read_everything;

const ITERATIONS: u64 = 10_000;

fn mutate(rng: &mut impl Rng, base: &[u8]) -> (Vec<u8>, String) {
    let mut b = base.to_vec();
    let header_end = 20 + u32::from_le_bytes(base[16..20].try_into().unwrap()) as usize;
    let mut what = Vec::new();
    for _ in 0..rng.gen_range(1..=3) {
        if b.is_empty() {
            break;
        }
        // A quarter of the mutations aim at the header, the rest at the records.
        let (lo, hi) = if rng.gen_bool(0.25) { (0, header_end) } else { (header_end, b.len()) };
        let at = rng.gen_range(lo.min(b.len() - 1)..hi.min(b.len()).max(lo.min(b.len() - 1) + 1));
        match rng.gen_range(0..12) {
            0..=3 => {
                let bit = rng.gen_range(0..8);
                b[at] ^= 1 << bit;
                what.push(format!("flip bit {bit} at {at}"));
            }
            4..=5 => {
                let v = rng.gen();
                b[at] = v;
                what.push(format!("set {at} = {v:#04x}"));
            }
            6 => {
                let n = rng.gen_range(0..=b.len());
                b.truncate(n);
                what.push(format!("truncate to {n}"));
            }
            7 => {
                let n = rng.gen_range(1..=40);
                let bytes: Vec<u8> = (0..n).map(|_| rng.gen()).collect();
                b.splice(at..at, bytes);
                what.push(format!("insert {n} random bytes at {at}"));
            }
            8 => {
                let n = rng.gen_range(1..=40).min(b.len() - at);
                b.drain(at..at + n);
                what.push(format!("delete {n} bytes at {at}"));
            }
            9 => {
                // A plausible but wrong JSON length.
                let len: u32 = rng.gen_range(0..(b.len() as u32 + 64));
                if b.len() >= 20 {
                    b[16..20].copy_from_slice(&len.to_le_bytes());
                }
                what.push(format!("json length {len}"));
            }
            _ => {
                // Make a record an event of a random type, or a footer mid-file.
                let rec = at / 32 * 32 + 12;
                if rec < b.len() {
                    b[rec] = (b[rec] & 0x0f) | 0x0e;
                    if rec + 1 < b.len() {
                        b[rec] = (b[rec] & 0x0e) | (rng.gen::<u8>() << 4);
                    }
                }
                what.push(format!("event kind at record byte {rec}"));
            }
        }
    }
    (b, what.join(", "))
}

#[test]
fn mutated_traces_never_panic_the_reader_or_converters() {
    // The scenario plus random records of every kind, so that the record area is larger
    // than the header and all decode paths are hit.
    let mut records = common::scenario();
    let mut rng = common::rng(u64::MAX);
    while records.len() < 150 {
        let r = common::random_record(&mut rng);
        if !r.is_footer() {
            records.push(r);
        }
    }
    let base = common::trace_bytes(&records, Some(common::scenario_footer(&records[..37])));
    assert_eq!(read_everything(&base).unwrap(), 150);
    let mut kinds = std::collections::BTreeMap::<String, u64>::new();
    let start = std::time::Instant::now();
    let (mut ok, mut err) = (0u64, 0u64);
    for seed in 0..ITERATIONS {
        let mut rng = common::rng(seed);
        let (data, what) = mutate(&mut rng, &base);
        match catch_unwind(AssertUnwindSafe(|| read_everything(&data))) {
            Ok(Ok(_)) => ok += 1,
            Ok(Err(e)) => {
                err += 1;
                let msg = e.to_string();
                let kind = format!("{e:?}");
                *kinds.entry(kind[..kind.find([' ', '{']).unwrap_or(kind.len())].to_owned()).or_default() += 1;
                assert!(msg.starts_with("offset "), "seed {seed} ({what}): message without offset: {msg}");
            }
            Err(_) => panic!("seed {seed}: panic on mutation: {what}"),
        }
    }
    eprintln!("{ITERATIONS} mutations: {ok} read, {err} rejected ({kinds:?}), in {:?}", start.elapsed());
    // Both outcomes are exercised, or the mutations are too weak or too strong.
    assert!(ok > ITERATIONS / 5 && err > ITERATIONS / 5, "ok {ok} err {err}");
}

#[test]
fn random_garbage_never_panics() {
    let mut rng = common::rng(99);
    for _ in 0..2000 {
        let n = rng.gen_range(0..300);
        let mut data: Vec<u8> = (0..n).map(|_| rng.gen()).collect();
        if rng.gen_bool(0.5) && data.len() >= 8 {
            data[..8].copy_from_slice(b"TLPXTRC\0");
        }
        let _ = read_everything(&data);
    }
}

#[test]
fn extreme_but_valid_headers_convert() {
    // Clock of 1 Hz and of u64::MAX Hz, timestamps at the top of the range.
    for hz in [1, 3, 133_333_333, u64::MAX] {
        let mut h = common::header();
        h.card.clock_hz = hz;
        let mut w = tlpx_trace::TraceWriter::new(Vec::new(), &h).unwrap();
        let mut r = tlpx_trace::build::mem_read(0, tlpx_trace::Direction::Up, u64::MAX, 0, 0, 0, 1);
        if let tlpx_trace::Body::Request(q) = &mut r.body {
            q.timing.duration = u16::MAX;
        }
        w.write(&r).unwrap();
        let bytes = w.finish_without_footer().unwrap();
        assert_eq!(read_everything(&bytes).unwrap(), 1);
    }
}
