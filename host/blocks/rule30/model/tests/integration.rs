//! The integration tests of tlpx-rule30, one module per test file, built as one test binary
//! (`autotests = false` in Cargo.toml). Apart, each file was a binary of its own that compiled
//! the same dependencies' generic code again and was linked alone: about 5 CPU-seconds each of a
//! fresh `make test` (docs/performance.md, "make test's time"). The tests run as before, on
//! `cargo test`'s threads; a file that changes process-wide state stays a binary of its own.
#![allow(clippy::unwrap_used)]

#[path = "agreement.rs"]
mod agreement;
#[path = "oeis.rs"]
mod oeis;
#[path = "properties.rs"]
mod properties;
