//! `tlpx spy convert` never destroys its input and never leaves half an output: an output that
//! is the trace itself (the same name, another spelling, a hard link) is refused before
//! anything is written, and a trace that fails half-way leaves no output file behind.

use std::path::Path;
use std::process::{Command, Output};

mod common;
use common::{text, tlpx_bin};

fn golden() -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../traces/golden/mmio_and_dma_v2.tlpx")
}

fn convert(dir: &Path, trace: &str, args: &[&str]) -> Output {
    Command::new(tlpx_bin()).current_dir(dir).args(["spy", "convert", trace]).args(args).output().expect("run tlpx")
}

#[test]
fn an_output_that_is_the_trace_itself_is_refused_and_the_trace_kept() {
    let dir = tempfile::tempdir().expect("temp dir");
    let original = std::fs::read(golden()).expect("golden trace");
    std::fs::write(dir.path().join("cap.tlpx"), &original).expect("copy");
    std::fs::hard_link(dir.path().join("cap.tlpx"), dir.path().join("hard.csv")).expect("hard link");
    for args in [&["--pcapng", "cap.tlpx"][..], &["--pcapng", "./cap.tlpx"], &["--csv", "hard.csv"], &["--vcd", "../{}/cap.tlpx"]] {
        let mut args: Vec<String> = args.iter().map(|s| s.to_string()).collect();
        let name = dir.path().file_name().expect("name").to_string_lossy().into_owned();
        args[1] = args[1].replace("{}", &name);
        let refs: Vec<&str> = args.iter().map(String::as_str).collect();
        let out = convert(dir.path(), "cap.tlpx", &refs);
        let err = text(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains("that is the trace being converted"), "{args:?}: {err}");
        assert_eq!(std::fs::read(dir.path().join("cap.tlpx")).expect("trace"), original, "{args:?} changed the trace");
    }
    // A real conversion still works beside it.
    let out = convert(dir.path(), "cap.tlpx", &["--pcapng", "cap.pcapng"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(std::fs::metadata(dir.path().join("cap.pcapng")).expect("pcapng").len() > 100);
}

#[test]
fn a_trace_that_fails_half_way_leaves_no_output_and_keeps_an_older_one() {
    let dir = tempfile::tempdir().expect("temp dir");
    let original = std::fs::read(golden()).expect("golden trace");
    // Cut inside a record: the reader fails at the end of the record area, after earlier
    // records were converted.
    let cut = original.len() - 40;
    std::fs::write(dir.path().join("cut.tlpx"), &original[..cut]).expect("write");
    let out = convert(dir.path(), "cut.tlpx", &["--pcapng", "new.pcapng"]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    assert!(text(&out.stderr).contains("truncated"), "{}", text(&out.stderr));
    let left: Vec<String> =
        std::fs::read_dir(dir.path()).expect("dir").map(|e| e.expect("entry").file_name().to_string_lossy().into_owned()).collect();
    assert_eq!(left, vec!["cut.tlpx".to_string()], "a failed conversion left files behind");
    std::fs::write(dir.path().join("old.csv"), b"an older file\n").expect("write");
    let out = convert(dir.path(), "cut.tlpx", &["--csv", "old.csv"]);
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(std::fs::read(dir.path().join("old.csv")).expect("old"), b"an older file\n");
}
