//! `tlpx script check|compile` with the real binary: exit codes, error lines, the image written
//! (it decodes to the program of the script), the listing, the example scripts. No card needed.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;

use crate::common;
use common::text;

fn tlpx(args: &[&str]) -> Output {
    // no simulator is started: scripts compile without a card
    Command::new(PathBuf::from(env!("CARGO_BIN_EXE_tlpx"))).args(args).output().expect("run tlpx")
}

fn example(name: &str) -> String {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../../firmware/scripts").join(name).to_string_lossy().into_owned()
}

fn write(dir: &Path, name: &str, body: &str) -> String {
    let p = dir.join(name);
    std::fs::write(&p, body).expect("write script");
    p.to_string_lossy().into_owned()
}

#[test]
fn check_accepts_the_examples() {
    for name in ["pamette.tlpxs", "burst_torture.tlpxs"] {
        let out = tlpx(&["script", "check", &example(name)]);
        assert_eq!(out.status.code(), Some(0), "{name}: {}", text(&out.stderr));
        let s = text(&out.stdout);
        assert!(s.contains(": ok: ") && s.contains("instructions") && s.contains("register map 0x"), "{s}");
    }
}

#[test]
fn check_reports_every_error_with_file_line_col_and_exits_2() {
    let dir = tempfile::tempdir().expect("tempdir");
    let f = write(dir.path(), "bad.tlpxs", "mark a\n\n# comment\npoke spy.contrl 1\nwait 5\ndma read size=64 count=1 outstanding=99\n");
    let out = tlpx(&["script", "check", &f]);
    assert_eq!(out.status.code(), Some(2));
    let err = text(&out.stderr);
    assert!(err.contains(&format!("{f}:4:6: unknown register \"spy.contrl\": did you mean \"spy.control\"?")), "{err}");
    assert!(err.contains(&format!("{f}:5:6: the wait needs a unit")), "{err}");
    assert!(err.contains(&format!("{f}:6:38: outstanding (reads in flight) must be 1..=32, not 99")), "{err}");
    assert!(err.contains("3 error(s)"), "{err}");
    assert!(text(&out.stdout).is_empty());

    // --json: the same errors as data, still exit 2
    let out = tlpx(&["--json", "script", "check", &f]);
    assert_eq!(out.status.code(), Some(2));
    let doc: Value = serde_json::from_slice(&out.stdout).expect("JSON");
    assert_eq!(doc["ok"], false);
    assert_eq!(doc["errors"][0]["line"], 4);
    assert_eq!(doc["errors"][0]["col"], 6);
    assert_eq!(doc["errors"].as_array().map(Vec::len), Some(3));
}

#[test]
fn compile_writes_an_image_that_decodes_to_the_scripts_program() {
    let dir = tempfile::tempdir().expect("tempdir");
    let out_bin = dir.path().join("bt.bin");
    let out = tlpx(&["script", "compile", &example("burst_torture.tlpxs"), "-o", out_bin.to_str().expect("path"), "--disassemble"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let image = std::fs::read(&out_bin).expect("image written");
    assert_eq!(&image[0..4], b"TLXS");
    let program = tlpx_script::decode(&image, tlpx_regs::MAP_HASH).expect("decodes");
    let source = std::fs::read_to_string(example("burst_torture.tlpxs")).expect("script");
    assert_eq!(program, tlpx_script::compile(&source, &tlpx_script::Options::default()).expect("compiles"));
    let listing = text(&out.stdout);
    assert!(listing.contains("poke        generator.control (0x2800) x1 = 0x4"), "{listing}");
    assert!(listing.contains("wait event  generator.done"), "{listing}");
    assert!(listing.contains("event #0: generator.done (0x2848 bit 1)"), "{listing}");
    assert!(listing.contains(&format!("wrote {} ({} bytes)", out_bin.display(), image.len())), "{listing}");

    // another clock changes the cycles (the times are converted at compile time)
    let slow = dir.path().join("slow.bin");
    let out = tlpx(&["script", "compile", &example("burst_torture.tlpxs"), "-o", slow.to_str().expect("path"), "--clock", "62.5MHz"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let slow = tlpx_script::decode(&std::fs::read(&slow).expect("image"), tlpx_regs::MAP_HASH).expect("decodes");
    assert_eq!(slow.clock_hz, 62_500_000);
    assert_ne!(slow.insns, program.insns);
}

#[test]
fn compile_refuses_bad_scripts_files_and_options_with_exit_2() {
    let dir = tempfile::tempdir().expect("tempdir");
    let out_bin = dir.path().join("x.bin");
    let o = out_bin.to_str().expect("path");
    let bad = write(dir.path(), "bad.tlpxs", "loop 3 {\n  mark m\n");
    let out = tlpx(&["script", "compile", &bad, "-o", o]);
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains(&format!("{bad}:1:1: loop is never closed")), "{}", text(&out.stderr));
    assert!(!out_bin.exists(), "no image for a bad script");

    let out = tlpx(&["script", "check", &dir.path().join("missing.tlpxs").to_string_lossy()]);
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("cannot read script"), "{}", text(&out.stderr));

    let good = write(dir.path(), "good.tlpxs", "mark m\n");
    let out = tlpx(&["script", "check", &good, "--clock", "fast"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("--clock: clock \"fast\""), "{}", text(&out.stderr));

    let binary = dir.path().join("bin.tlpxs");
    std::fs::write(&binary, [0xff, 0xfe, 0x00]).expect("write");
    let out = tlpx(&["script", "check", &binary.to_string_lossy()]);
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("is not UTF-8"), "{}", text(&out.stderr));

    let out = tlpx(&["script", "compile", &good, "-o", &dir.path().join("no/such/dir/x.bin").to_string_lossy()]);
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("cannot write"), "{}", text(&out.stderr));
}
