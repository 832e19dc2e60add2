//! Input files that tlpx reads whole are capped ("Unbounded inputs"): `tlpx report`, `tlpx
//! script check|compile|run` and `tlpx fw load` on /dev/zero, an endless pipe, a file larger
//! than the cap or a directory end at once with exit status 2 and a message naming the file
//! and the cap, under a 1 GiB address-space limit (the old code read /dev/zero until the
//! allocator gave up). A script whose image does not fit the card's script area is refused
//! by check, compile and run, naming both sizes. No card is needed: every refusal comes before
//! a card is opened (the device named does not exist, so reaching for it would fail
//! differently).

use std::io::Write;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::common;
use common::text;

/// The address space a child may use: enough for tlpx and a capped input, far from what
/// reading /dev/zero whole needs.
const MEMORY_LIMIT: u64 = 1 << 30;
/// A refusal is quick: it reads at most the cap (64 MiB for result documents).
const QUICK: Duration = Duration::from_secs(20);
/// No simulator listens here: a command that opened a card would fail with another message.
const NO_CARD: &str = "sim:/nonexistent/tlpx-inputs-test.sock";

fn tlpx_command(args: &[&str]) -> Command {
    let mut c = Command::new(PathBuf::from(env!("CARGO_BIN_EXE_tlpx")));
    c.arg("--device").arg(NO_CARD).args(args);
    // SAFETY: setrlimit is async-signal-safe; nothing else runs between fork and exec.
    unsafe {
        c.pre_exec(|| {
            let limit = libc::rlimit { rlim_cur: MEMORY_LIMIT, rlim_max: MEMORY_LIMIT };
            if libc::setrlimit(libc::RLIMIT_AS, &limit) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    c
}

/// Waits for `child` at most [`QUICK`]; a child still running then is killed and the test fails.
fn wait_quickly(mut child: Child, what: &str) -> Output {
    let began = Instant::now();
    loop {
        if child.try_wait().expect("wait").is_some() {
            return child.wait_with_output().expect("output");
        }
        if began.elapsed() > QUICK {
            let _ = child.kill();
            let out = child.wait_with_output().expect("output");
            panic!("{what}: still running after {QUICK:?}; stderr so far: {}", text(&out.stderr));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn run(args: &[&str]) -> Output {
    let child = tlpx_command(args).stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().expect("run tlpx");
    wait_quickly(child, &args.join(" "))
}

fn s(p: &Path) -> &str {
    p.to_str().expect("UTF-8 path")
}

/// Exit status 2, every needle in stderr, no panic, no allocator abort.
fn refused(out: &Output, what: &str, needles: &[&str]) -> String {
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{what}: exit status {:?}; stderr: {err}", out.status);
    for n in needles {
        assert!(err.contains(n), "{what}: {n:?} is not in the message: {err}");
    }
    assert!(!err.contains("panicked") && !err.contains("memory allocation"), "{what}: {err}");
    err
}

#[test]
fn report_refuses_endless_oversized_and_directory_inputs_naming_the_cap() {
    let dir = tempfile::tempdir().expect("tempdir");
    let html = dir.path().join("r.html");

    let out = run(&["report", "-o", s(&html), "/dev/zero"]);
    refused(&out, "report /dev/zero", &["/dev/zero", "64 MiB"]);
    assert!(!html.exists(), "no report from /dev/zero");

    // An endless stream of JSON whitespace: only the cap ends it.
    let mut child = tlpx_command(&["report", "-o", s(&html), "/dev/stdin"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run tlpx");
    let mut stdin = child.stdin.take().expect("stdin");
    let writer = std::thread::spawn(move || {
        let spaces = vec![b' '; 1 << 16];
        let mut sent = 0u64;
        // ends when tlpx closes the pipe (EPIPE); bounded so that a tlpx that never stops
        // reading does not keep this thread forever
        while sent < 4 << 30 && stdin.write_all(&spaces).is_ok() {
            sent += spaces.len() as u64;
        }
        sent
    });
    let out = wait_quickly(child, "report of an endless pipe");
    refused(&out, "report of an endless pipe", &["/dev/stdin", "64 MiB"]);
    let sent = writer.join().expect("writer");
    assert!(sent < 1 << 30, "tlpx stopped reading the pipe soon after the cap ({sent} bytes sent)");

    // A regular file larger than the cap is refused by its size, without reading it.
    let big = dir.path().join("big.json");
    std::fs::File::create(&big).expect("create").set_len((64 << 20) + 1).expect("sparse file");
    let out = run(&["report", "-o", s(&html), s(&big)]);
    refused(&out, "report of a 64 MiB + 1 file", &[s(&big), "67108865 bytes", "64 MiB"]);

    let out = run(&["report", "-o", s(&html), s(dir.path())]);
    refused(&out, "report of a directory", &[s(dir.path()), "directory"]);
    assert!(!html.exists());
}

#[test]
fn script_commands_refuse_endless_and_oversized_sources_before_any_card() {
    let dir = tempfile::tempdir().expect("tempdir");
    let bin = dir.path().join("x.bin");
    for args in [
        vec!["script", "check", "/dev/zero"],
        vec!["script", "compile", "/dev/zero", "-o", s(&bin)],
        vec!["script", "run", "/dev/zero"],
        vec!["--json", "script", "check", "/dev/zero"],
    ] {
        let out = run(&args);
        refused(&out, &args.join(" "), &["cannot read script /dev/zero", "1 MiB"]);
    }
    assert!(!bin.exists(), "no image from /dev/zero");

    let big = dir.path().join("big.tlpxs");
    std::fs::File::create(&big).expect("create").set_len((1 << 20) + 1).expect("sparse file");
    let out = run(&["script", "check", s(&big)]);
    refused(&out, "script check of a 1 MiB + 1 file", &[s(&big), "1048577 bytes", "1 MiB"]);

    let out = run(&["script", "check", s(dir.path())]);
    refused(&out, "script check of a directory", &[s(dir.path()), "directory"]);
}

#[test]
fn fw_load_refuses_endless_and_oversized_images_before_opening_the_card() {
    let dir = tempfile::tempdir().expect("tempdir");
    // header (32 bytes) + the SRAM's firmware area (0x7F00 bytes)
    let cap = 32 + 0x7F00;
    let out = run(&["fw", "load", "/dev/zero"]);
    let err = refused(&out, "fw load /dev/zero", &["/dev/zero", &format!("{cap} bytes"), "nothing was written to the card"]);
    assert!(!err.contains("nonexistent"), "the card was reached for: {err}");

    let big = dir.path().join("big.img");
    std::fs::File::create(&big).expect("create").set_len(cap + 1).expect("file");
    let out = run(&["fw", "load", s(&big)]);
    refused(&out, "fw load of an image one byte too long", &[s(&big), &format!("{} bytes", cap + 1), &format!("{cap} bytes")]);

    let out = run(&["fw", "load", s(dir.path())]);
    refused(&out, "fw load of a directory", &[s(dir.path()), "directory"]);
}

/// A script of `marks` mark statements (one instruction and one result slot each).
fn marks_script(marks: usize) -> String {
    (0..marks).map(|i| format!("mark m{i}\n")).collect()
}

/// Script-area bytes of a program: its image padded to 8 and 8 bytes of value table a slot
/// (the firmware keeps the table after the image: firmware/src/script.c).
fn area_bytes(source: &str) -> usize {
    let program = tlpx_script::compile(source, &tlpx_script::Options::default()).expect("compiles");
    program.encode().len().next_multiple_of(8) + 8 * program.slots.len()
}

#[test]
fn a_script_that_does_not_fit_the_script_area_is_refused_by_check_compile_and_run() {
    let dir = tempfile::tempdir().expect("tempdir");
    // the card's script area: 0x48000..0x4C000 (firmware/src/hw.h, tlpx_device::cpu)
    let area = tlpx_device::cpu::SCRIPT_AREA_LEN;
    assert_eq!(area, 16384);
    let fits = (1..2000).take_while(|&n| area_bytes(&marks_script(n)) <= area).last().expect("a script that fits");
    assert!(area_bytes(&marks_script(fits + 1)) > area);

    let good = dir.path().join("fits.tlpxs");
    std::fs::write(&good, marks_script(fits)).expect("write");
    let out = run(&["script", "check", s(&good)]);
    assert_eq!(out.status.code(), Some(0), "{fits} marks fit: {}", text(&out.stderr));

    let big = dir.path().join("big.tlpxs");
    let source = marks_script(fits + 1);
    std::fs::write(&big, &source).expect("write");
    let program = tlpx_script::compile(&source, &tlpx_script::Options::default()).expect("compiles");
    let image_len = program.encode().len();
    let needs = area_bytes(&source);
    let bin = dir.path().join("big.bin");
    for args in [vec!["script", "check", s(&big)], vec!["script", "compile", s(&big), "-o", s(&bin)], vec!["script", "run", s(&big)]] {
        let out = run(&args);
        refused(&out, &args.join(" "), &[s(&big), &format!("{image_len}-byte image"), &format!("{needs} bytes"), "16384 bytes"]);
    }
    assert!(!bin.exists(), "no image written for a script that does not fit");

    let out = run(&["--json", "script", "check", s(&big)]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    let doc: Value = serde_json::from_slice(&out.stdout).expect("JSON");
    assert_eq!(doc["ok"], false, "{doc}");
    assert_eq!(doc["image_bytes"], image_len, "{doc}");
    let message = doc["errors"][0]["message"].as_str().expect("a message");
    assert!(message.contains("16384 bytes") && message.contains(&format!("{needs} bytes")), "{doc}");
}

fn fifo(dir: &Path, name: &str) -> PathBuf {
    let path = dir.join(name);
    let c = std::ffi::CString::new(s(&path)).expect("path");
    // SAFETY: mkfifo reads the NUL-terminated path only.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0, "mkfifo");
    path
}

/// Every file option of every command ends at once on /dev/zero and on a FIFO nobody writes
/// to (before: `reg --regs /dev/zero` read until memory ran out, a FIFO given to `spy
/// convert` or `--regs` waited for ever), exit 2, the option or file and what is accepted
/// named, before a card is reached for.
#[test]
fn every_file_option_is_bounded_and_never_waits_for_a_fifo() {
    let dir = tempfile::tempdir().expect("tempdir");
    let fifo = fifo(dir.path(), "fifo");
    let zero = "/dev/zero";
    let out_csv = dir.path().join("o.csv");
    let out = |p: &PathBuf| p.to_str().expect("utf-8").to_owned();
    let csv = out(&out_csv);
    let script = dir.path().join("ok.tlpxs");
    std::fs::write(&script, "mark m\n").expect("write");
    let script = out(&script);
    for input in [zero, s(&fifo)] {
        let cases: Vec<(Vec<&str>, Vec<String>)> = vec![
            (vec!["reg", "--regs", input, "read", "ident.magic"], vec![format!("--regs {input}")]),
            (vec!["reg", "--regs", input, "list"], vec![format!("--regs {input}")]),
            (vec!["slot", "run", "--regs", input, "-e", "read ident.magic"], vec![format!("--regs {input}")]),
            // A FIFO nobody writes to is an empty script.
            (vec!["slot", "check", input], vec![if input == zero { format!("the script {input}") } else { "no lines to run".into() }]),
            (vec!["slot", "run", input], vec![if input == zero { format!("the script {input}") } else { "no lines to run".into() }]),
            (vec!["spy", "capture", "--regs", input, "-o", &csv], vec![format!("--regs {input}")]),
            (vec!["spy", "convert", input, "--csv", &csv], vec![input.to_owned()]),
            (vec!["diff", input, input], vec![input.to_owned()]),
            (vec!["script", "run", "--firmware", input, &script], vec![input.to_owned()]),
        ];
        for (args, needles) in cases {
            let out = run(&args);
            let err = text(&out.stderr);
            assert_eq!(out.status.code(), Some(2), "{args:?}: exit {:?}; {err}", out.status);
            for n in &needles {
                assert!(err.contains(n.as_str()), "{args:?}: {n:?} is not in {err}");
            }
            assert!(!err.contains("nonexistent") && !err.contains("panicked"), "{args:?}: {err}");
        }
    }
    // What is accepted is named: the cap for the files read whole, a regular file for a trace.
    let err = text(&run(&["reg", "--regs", zero, "list"]).stderr);
    assert!(err.contains("16 MiB"), "{err}");
    let err = text(&run(&["spy", "convert", zero, "--csv", &csv]).stderr);
    assert!(err.contains("character device, not a regular file"), "{err}");
    let err = text(&run(&["spy", "convert", s(&fifo), "--csv", &csv]).stderr);
    assert!(err.contains("a FIFO (named pipe), not a regular file"), "{err}");
    assert!(!out_csv.exists());
}
