//! Shared fixtures: the library's sample scenario and random records.
#![allow(dead_code, clippy::unwrap_used)]

use rand::Rng;
use rand_chacha::rand_core::SeedableRng;
use rand_chacha::ChaCha8Rng;
#[allow(unused_imports)]
pub use tlpx_trace::sample::*;
use tlpx_trace::{Body, Completion, CplStatus, Direction, Footer, Record, Request, Timeout, Timing};

pub fn rng(seed: u64) -> ChaCha8Rng {
    ChaCha8Rng::seed_from_u64(seed)
}

/// A random record whose values all fit their fields (so it round-trips exactly).
pub fn random_record(rng: &mut impl Rng) -> Record {
    let direction = if rng.gen() { Direction::Up } else { Direction::Down };
    let timing = Timing { timestamp: rng.gen(), duration: rng.gen(), wait_cycles: rng.gen(), gap_cycles: rng.gen() };
    let sequence = rng.gen();
    let body = match rng.gen_range(0..4) {
        0 => {
            let fmt = rng.gen_range(0..7u8);
            let mut tlp_type = rng.gen_range(0..32u8);
            if tlp_type & 0b11110 == 0b01010 {
                tlp_type = 0;
            }
            Body::Request(Request {
                direction,
                timing,
                fmt,
                tlp_type,
                requester_id: rng.gen(),
                tag: rng.gen(),
                first_be: rng.gen_range(0..16),
                last_be: rng.gen_range(0..16),
                address: rng.gen(),
                length_dw: rng.gen_range(1..=1024),
                attr: rng.gen_range(0..4),
                tc: rng.gen_range(0..8),
                ep: rng.gen(),
                own: rng.gen(),
            })
        }
        1 => Body::Completion(Completion {
            direction,
            timing,
            fmt: rng.gen_range(0..7u8),
            tlp_type: 0b01010 | rng.gen_range(0..2u8),
            requester_id: rng.gen(),
            tag: rng.gen(),
            lower_address: rng.gen_range(0..128),
            bcm: rng.gen(),
            completer_id: rng.gen(),
            status: CplStatus::from_bits(rng.gen_range(0..8)),
            byte_count: rng.gen_range(1..=4096),
            length_dw: rng.gen_range(1..=1024),
            latency: if rng.gen() { Some(rng.gen()) } else { None },
            split_index: rng.gen_range(0..16),
            last: rng.gen(),
            attr: rng.gen_range(0..4),
            tc: rng.gen_range(0..8),
            ep: rng.gen(),
            own: rng.gen(),
        }),
        2 => Body::Timeout(Timeout {
            direction,
            own: rng.gen(),
            requester_id: rng.gen(),
            tag: rng.gen(),
            timestamp: rng.gen(),
            waited: rng.gen(),
        }),
        _ => Body::Footer(Footer { records_created: rng.gen(), records_lost: rng.gen(), trigger_sequence: None }),
    };
    Record { sequence, body }
}
