//! Arbitrary bytes through the trace reader and every converter: Ok or Err, never a
//! panic, never unbounded memory. The bounded, deterministic version of this runs in the
//! normal test suite (tests/fuzz.rs).
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = tlpx_trace::fuzzing::read_everything(data);
});
