//! `tlpx spy convert` never destroys its input and never leaves half an output: an output that
//! is the trace itself (the same name, another spelling, a hard link) is refused before
//! anything is written, and a trace that fails half-way leaves no output file behind.

use std::path::Path;
use std::process::{Command, Output};

use crate::common;
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

/// A trace of `records` generated records, big enough that converting it takes a while.
fn big_trace(path: &Path, records: u32) {
    use tlpx_trace::record::{build, Direction};
    let mut w = tlpx_trace::TraceWriter::create(path, &tlpx_trace::sample::info()).expect("create");
    for i in 0..records {
        let r = if i % 2 == 0 {
            build::mem_write(i, Direction::Down, u64::from(i) * 8, 0, 0, 0xf000_0018, 1)
        } else {
            build::mem_read(i, Direction::Up, u64::from(i) * 8, 0x100, 0x80, 0x4000_0000 + u64::from(i) * 64, 16)
        };
        w.write(&r).expect("write");
    }
    w.finish(records, tlpx_trace::Footer { records_created: u64::from(records), records_lost: 0, trigger_sequence: None }).expect("finish");
}

/// Ctrl-C or SIGTERM during a conversion ends it: exit 130, no output and no temporary file
/// left (before: the first Ctrl-C was ignored, and SIGTERM left a partial `.tmp`).
#[test]
fn a_signal_during_a_conversion_ends_it_leaving_nothing_behind() {
    let dir = tempfile::tempdir().expect("temp dir");
    big_trace(&dir.path().join("big.tlpx"), 3_000_000);
    for signal in [libc::SIGINT, libc::SIGTERM] {
        let child = Command::new(tlpx_bin())
            .current_dir(dir.path())
            .args(["spy", "convert", "big.tlpx", "--csv", "big.csv"])
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("run tlpx");
        // Once its temporary file is there, the conversion runs.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
        let tmp = dir.path().join(format!(".big.csv.{}.tmp", child.id()));
        while !tmp.exists() {
            assert!(std::time::Instant::now() < deadline, "the conversion never started");
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        // SAFETY: kill(2) on our own child's PID.
        assert_eq!(unsafe { libc::kill(child.id() as libc::pid_t, signal) }, 0);
        let out = child.wait_with_output().expect("tlpx ends");
        let err = text(&out.stderr);
        assert_eq!(out.status.code(), Some(130), "signal {signal}: {err}");
        assert!(err.contains("conversion stopped by a signal; no output was written"), "{err}");
        let left: Vec<String> =
            std::fs::read_dir(dir.path()).expect("dir").map(|e| e.expect("entry").file_name().to_string_lossy().into_owned()).collect();
        assert_eq!(left, vec!["big.tlpx".to_string()], "signal {signal} left files behind");
    }
}
