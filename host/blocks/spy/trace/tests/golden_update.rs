//! `golden::check` with TLPX_UPDATE_GOLDEN=1 rewrites the golden trace (own test binary:
//! it sets a process-wide environment variable).
#![allow(clippy::unwrap_used)]

mod common;

use tlpx_trace::golden::{check, UPDATE_ENV};

#[test]
fn check_compares_or_updates() {
    let dir = tempfile::tempdir().unwrap();
    let actual = dir.path().join("actual.tlpx");
    let golden = dir.path().join("golden").join("scenario.tlpx");
    std::fs::write(&actual, common::scenario_bytes()).unwrap();

    std::env::remove_var(UPDATE_ENV);
    let msg = check(&actual, &golden).unwrap_err();
    assert!(msg.contains("cannot read golden trace"), "{msg}");

    std::env::set_var(UPDATE_ENV, "1");
    check(&actual, &golden).unwrap();
    // An invalid actual trace never replaces a golden one.
    let bad = dir.path().join("bad.tlpx");
    std::fs::write(&bad, b"TLPXTRC\0").unwrap();
    let msg = check(&bad, &golden).unwrap_err();
    assert!(msg.contains("not updating golden trace"), "{msg}");
    std::env::remove_var(UPDATE_ENV);

    check(&actual, &golden).unwrap();
    assert_eq!(std::fs::read(&golden).unwrap(), std::fs::read(&actual).unwrap());
}
