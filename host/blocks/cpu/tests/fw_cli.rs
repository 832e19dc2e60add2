//! `tlpx fw` and `tlpx script run` end to end with the real binary, the real tlpx-sim running
//! the card with the soft CPU (`--with-cpu`) and the real firmware: the firmware loads and
//! passes its self-test, bad image files are refused before anything is written, the card
//! refuses a wrong claimed CRC itself, a script moves exactly the TLPs it asks for (counted by
//! the spy), a malformed script is refused with line:col, a card without the CPU says so.
//!
//! Needs `make gateware CPU=1` (build/card/dw64-cpu) and `make firmware`
//! (build/firmware/tlpx-fw.img): the tests fail, naming the command, when they are missing.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;
use tlpx_device::backends::sim::SimDevice;
use tlpx_device::card::Card;
use tlpx_device::cpu::{Cpu, CpuError, CpuState, RefusalReason};
use tlpx_device::spy;
use tlpx_script::FirmwareImage;
use tlpx_testkit::SimProcess as Sim;

use crate::common;
use common::{repo_root, text};

/// The firmware image; fails (does not skip) when the CPU card or the firmware is not built.
fn firmware() -> PathBuf {
    let lib = repo_root().join("build/card/dw64-cpu/libtlpxcard.so");
    assert!(lib.exists(), "the card with the soft CPU is missing ({}): build it with `make gateware CPU=1`", lib.display());
    let fw = repo_root().join("build/firmware/tlpx-fw.img");
    assert!(fw.exists(), "the firmware image is missing ({}): build it with `make firmware`", fw.display());
    fw
}

fn cpu_sim() -> Sim {
    firmware();
    Sim::start(&["--with-cpu"])
}

fn tlpx(device: &str, args: &[&str]) -> Output {
    Command::new(PathBuf::from(env!("CARGO_BIN_EXE_tlpx"))).arg("--device").arg(device).args(args).output().expect("run tlpx")
}

fn path_str(p: &Path) -> &str {
    p.to_str().expect("UTF-8 path")
}

fn open_card(sim: &Sim) -> Card {
    Card::open(Box::new(SimDevice::connect(sim.socket()).expect("connect"))).expect("a tlpx card")
}

fn status_json(sim: &Sim) -> Value {
    let out = tlpx(&sim.selector(), &["--json", "fw", "status"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    serde_json::from_slice(&out.stdout).expect("JSON")
}

/// Loads the firmware; it must come up ready (its self-test's verdict is checked by the test
/// of the self-test, not by every test that needs a running firmware).
fn load_firmware(sim: &Sim) -> Output {
    let out = tlpx(&sim.selector(), &["fw", "load", path_str(&firmware())]);
    assert!(matches!(out.status.code(), Some(0 | 1)), "fw load: {}{}", text(&out.stdout), text(&out.stderr));
    assert_eq!(status_json(sim)["ready"], true, "fw load: {}{}", text(&out.stdout), text(&out.stderr));
    out
}

#[test]
fn the_firmware_loads_and_its_console_shows_the_self_test() {
    let sim = cpu_sim();
    let out = load_firmware(&sim);
    let stdout = text(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{stdout}{}", text(&out.stderr));
    assert!(stdout.contains("self-test: PASS"), "{stdout}");
    assert!(stdout.contains("ready"), "{stdout}");
    let s = status_json(&sim);
    assert_eq!(s["cpu"]["state"], "running", "{s}");
    assert_eq!(s["cpu"]["starts"], 1, "{s}");
    assert_eq!(s["cpu"]["refusals"], 0, "{s}");
    assert_eq!(s["ready"], true, "{s}");
    let image = FirmwareImage::parse(&std::fs::read(firmware()).expect("image")).expect("a good image");
    assert_eq!(s["cpu"]["computed_crc"], image.crc, "{s}");
    assert_eq!(s["cpu"]["image_length"], image.payload.len(), "{s}");
    assert_eq!(s["firmware_version"], image.version_string(), "{s}");
    // the text form names the same things
    let out = tlpx(&sim.selector(), &["fw", "status"]);
    let t = text(&out.stdout);
    assert!(t.contains("cpu: running") && t.contains("firmware: ready") && t.contains("heartbeat"), "{t}");

    // stop holds it in reset
    let out = tlpx(&sim.selector(), &["fw", "stop"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(status_json(&sim)["cpu"]["state"], "stopped");
    // and start checks the image again and boots it
    let out = tlpx(&sim.selector(), &["fw", "start"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(text(&out.stdout).contains("self-test: PASS"), "{}", text(&out.stdout));
    assert_eq!(status_json(&sim)["cpu"]["starts"], 2);
}

#[test]
fn bad_image_files_are_refused_before_anything_is_written() {
    let sim = cpu_sim();
    let good = std::fs::read(firmware()).expect("image");
    let set32 = |b: &mut Vec<u8>, at: usize, v: u32| b[at..at + 4].copy_from_slice(&v.to_le_bytes());
    let mut cases: Vec<(&str, Vec<u8>, &str)> = Vec::new();
    let mut magic = good.clone();
    magic[0..4].copy_from_slice(b"TLXS");
    cases.push(("magic", magic, "magic"));
    let mut crc = good.clone();
    let last = crc.len() - 1;
    crc[last] ^= 0x40;
    cases.push(("crc", crc, "payload CRC-32"));
    let mut map = good.clone();
    set32(&mut map, 20, tlpx_regs::MAP_HASH);
    cases.push(("map hash", map, "map hash"));
    cases.push(("truncated", good[..good.len() - 8].to_vec(), "payload length"));
    cases.push(("header only", good[..20].to_vec(), "file"));
    let mut long = good[..32].to_vec();
    long.extend(std::iter::repeat_n(0x13u8, 0x8000));
    set32(&mut long, 12, 0x8000);
    let crc = tlpx_script::image::crc32(&long[32..]);
    set32(&mut long, 16, crc);
    // a file longer than any image is refused by its size, unread
    cases.push(("too long", long, "file"));
    // a header claiming more than the firmware area, in a file of ordinary size
    let mut claims = good.clone();
    set32(&mut claims, 12, 0x8000);
    cases.push(("claims too long", claims, "payload length"));
    for (what, bytes, field) in cases {
        let f = sim.path(&format!("{}.img", what.replace(' ', "_")));
        std::fs::write(&f, &bytes).expect("write image");
        let out = tlpx(&sim.selector(), &["fw", "load", path_str(&f)]);
        let err = text(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{what}: {err}");
        assert!(err.contains(&format!("firmware image {field}: found ")) && err.contains("accepted: "), "{what}: {err}");
        assert!(err.contains("nothing was written to the card"), "{what}: {err}");
        if what == "too long" {
            assert!(err.contains("found 32800 bytes") && err.contains("at most 32544 bytes") && err.contains("0x7f00"), "{err}");
        }
        if what == "claims too long" {
            assert!(err.contains("0x7f00"), "{err}");
        }
        if what == "map hash" {
            assert!(err.contains(&format!("0x{:08x}", tlpx_regs::MAP_HASH_CPU)), "{err}");
        }
        // the card was not touched: still stopped, nothing claimed, never started
        let s = status_json(&sim);
        assert_eq!(s["cpu"]["state"], "stopped", "{what}: {s}");
        assert_eq!(s["cpu"]["image_length"], 0, "{what}: {s}");
        assert_eq!(s["cpu"]["starts"], 0, "{what}: {s}");
        assert_eq!(s["cpu"]["refusals"], 0, "{what}: {s}");
    }
    let mut card = open_card(&sim);
    let word = card.device().bar_read(0, 0x40000, tlpx_device::Width::W32).expect("SRAM");
    assert_eq!(word, 0, "the SRAM was written");
}

#[test]
fn the_card_refuses_a_wrong_claimed_crc_itself() {
    let sim = cpu_sim();
    let image = FirmwareImage::parse(&std::fs::read(firmware()).expect("image")).expect("a good image");
    let mut card = open_card(&sim);
    let cpu = Cpu::open(&mut card).expect("a CPU");
    cpu.load(&mut card, &image.payload, image.crc ^ 0x0000_0100).expect("load");
    match cpu.start(&mut card) {
        Err(CpuError::Refused { reason, length, claimed, computed }) => {
            assert_eq!(reason, RefusalReason::Crc);
            assert_eq!(length as usize, image.payload.len());
            assert_eq!(claimed, image.crc ^ 0x100);
            assert_eq!(computed, image.crc, "the card's own CRC of what it holds");
        }
        other => panic!("expected a refusal, got {other:?}"),
    }
    let s = cpu.status(&mut card).expect("status");
    assert_eq!((s.state, s.reason, s.refusals, s.starts), (CpuState::Refused, RefusalReason::Crc, 1, 0));
    // the message says it
    let out = tlpx(&sim.selector(), &["fw", "status"]);
    assert!(text(&out.stdout).contains("refused: crc"), "{}", text(&out.stdout));
    let out = tlpx(&sim.selector(), &["fw", "start"]);
    assert_ne!(out.status.code(), Some(0));
    let err = text(&out.stderr);
    assert!(err.contains("refused") && err.contains(&format!("0x{:08x}", image.crc)), "{err}");

    // the right claim starts it
    cpu.load(&mut card, &image.payload, image.crc).expect("load");
    let started = cpu.start(&mut card).expect("start");
    assert_eq!(started.status.state, CpuState::Running);
    assert!(started.mailbox.ready());
    assert_eq!(started.status.refusals, 2);
}

fn up(c: &spy::SpyCounters, class: usize) -> &spy::ClassCounters {
    &c.up[class]
}

fn down(c: &spy::SpyCounters, class: usize) -> &spy::ClassCounters {
    &c.down[class]
}

const MRD: usize = 0;
const MWR: usize = 1;
const CPLD: usize = 3;

#[test]
fn a_script_moves_exactly_its_tlps_and_records_nondecreasing_cycles() {
    let sim = cpu_sim();
    load_firmware(&sim);
    let script = sim.path("rw.tlpxs");
    std::fs::write(
        &script,
        "# 16 writes of 256 bytes, then 16 reads of them back\nmark start\ndma write size=256 count=16 flush=off -> w\ndma read size=256 count=16 flush=off -> r\nassert generator.err_mismatches == 0 -> clean\nmark end\n",
    )
    .expect("script");
    let mut card = open_card(&sim);
    let before = spy::counters(&mut card).expect("spy counters");
    let json_out = sim.path("run.json");
    let out = tlpx(&sim.selector(), &["script", "run", path_str(&script), "-o", path_str(&json_out)]);
    let stdout = text(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{stdout}{}", text(&out.stderr));
    let after = spy::counters(&mut card).expect("spy counters");

    // card to host: exactly 16 writes of 256 bytes, 16 read requests; host to card: 4 KiB of
    // read completions (the CPU's own register accesses never reach the link)
    let d = |f: fn(&spy::SpyCounters, usize) -> &spy::ClassCounters, class: usize| {
        let (a, b) = (f(&after, class), f(&before, class));
        (a.tlps - b.tlps, a.payload_bytes - b.payload_bytes)
    };
    assert_eq!(d(up, MWR), (16, 16 * 256), "card writes");
    assert_eq!(d(up, MRD).0, 16, "card read requests");
    assert_eq!(d(down, CPLD).1, 16 * 256, "completion payload");

    // the table and the document
    assert!(stdout.contains("end: ok (0)"), "{stdout}");
    for name in ["start", "w", "r", "clean", "end"] {
        assert!(stdout.lines().any(|l| l.split_whitespace().nth(1) == Some(name)), "{name}: {stdout}");
    }
    let doc: Value = serde_json::from_str(&std::fs::read_to_string(&json_out).expect("json written")).expect("JSON");
    assert_eq!(doc["schema"], "tlpx-result");
    assert_eq!(doc["kind"], "script");
    assert_eq!(doc["end"]["status_name"], "ok");
    let records = doc["points"].as_array().expect("records");
    let names: Vec<&str> = records.iter().map(|r| r["name"].as_str().expect("name")).collect();
    assert_eq!(names, ["start", "w", "r", "generator.err_mismatches", "clean", "end", "(end)"]);
    let cycles: Vec<u64> = records.iter().map(|r| r["cycle"].as_u64().expect("cycle")).collect();
    assert!(cycles.windows(2).all(|w| w[0] <= w[1]), "cycles go back: {cycles:?}");
    assert_eq!(records[0]["delta_cycles"], 0);
    for dma in &records[1..3] {
        assert_eq!(dma["kind"], "dma");
        assert_eq!(dma["aux"], 16, "transfers: {dma}");
        assert!(dma["value"].as_u64().expect("cycles") > 0, "{dma}");
    }
    assert_eq!(records[3]["value"], 0, "no mismatches");
    assert_eq!(records[4]["value"], 1, "the assert held");

    // tlpx report takes the document: its records table and the DMA figure
    let html = sim.path("run.html");
    let out = tlpx(&sim.selector(), &["report", path_str(&json_out), "-o", path_str(&html)]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let page = std::fs::read_to_string(&html).expect("report written");
    assert!(page.contains("Exerciser script on the card") && page.contains("DMA runs of the script"), "{page}");
    assert!(page.contains("<svg") && page.contains("generator.err_mismatches"), "the figure and the records table");
}

#[test]
fn a_failing_assert_ends_the_script_with_exit_1() {
    let sim = cpu_sim();
    load_firmware(&sim);
    // a script that passes first: the second run's records are its own
    let ok = sim.path("ok.tlpxs");
    std::fs::write(&ok, "mark a\nmark b\nmark c\n").expect("script");
    let out = tlpx(&sim.selector(), &["--json", "script", "run", path_str(&ok)]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let doc: Value = serde_json::from_slice(&out.stdout).expect("JSON");
    assert_eq!(doc["points"].as_array().map(Vec::len), Some(4), "{doc}");
    let script = sim.path("fail.tlpxs");
    std::fs::write(&script, "mark a\nassert ident.magic == 1 -> wrong\nmark never\n").expect("script");
    let out = tlpx(&sim.selector(), &["--json", "script", "run", path_str(&script)]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    let doc: Value = serde_json::from_slice(&out.stdout).expect("JSON");
    assert_eq!(doc["end"]["status_name"], "assert_failed", "{doc}");
    let names: Vec<&str> = doc["points"].as_array().expect("records").iter().map(|r| r["name"].as_str().expect("name")).collect();
    assert_eq!(names, ["a", "ident.magic", "wrong", "(end)"]);
    assert_eq!(doc["points"][2]["status_name"], "assert_failed", "{doc}");
}

#[test]
fn a_malformed_script_is_refused_with_line_and_column() {
    let sim = cpu_sim();
    let script = sim.path("bad.tlpxs");
    std::fs::write(&script, "mark a\npoke spy.contrl 1\n").expect("script");
    let f = path_str(&script);
    let out = tlpx(&sim.selector(), &["script", "run", f]);
    assert_eq!(out.status.code(), Some(2));
    let err = text(&out.stderr);
    assert!(err.contains(&format!("{f}:2:6: unknown register \"spy.contrl\"")), "{err}");
    // nothing ran: the CPU was not even started
    assert_eq!(status_json(&sim)["cpu"]["starts"], 0);
}

#[test]
fn a_card_without_the_cpu_says_how_to_get_one() {
    let sim = Sim::start(&[]);
    for args in [&["fw", "status"][..], &["fw", "console"][..]] {
        let out = tlpx(&sim.selector(), args);
        assert_eq!(out.status.code(), Some(3), "the card refuses: {args:?}");
        let err = text(&out.stderr);
        assert!(err.contains("this card has no CPU") && err.contains("CPU=1") && err.contains("tlpx-sim --with-cpu"), "{err}");
    }
}

#[test]
fn more_records_than_the_ring_holds_all_arrive_in_order() {
    let sim = cpu_sim();
    load_firmware(&sim);
    let script = sim.path("many.tlpxs");
    std::fs::write(&script, "loop 1500 {\n    mark m\n}\nmark last\n").expect("script");
    let out = tlpx(&sim.selector(), &["--json", "script", "run", path_str(&script)]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let doc: Value = serde_json::from_slice(&out.stdout).expect("JSON");
    let records = doc["points"].as_array().expect("records");
    assert_eq!(records.len(), 1502, "1500 marks, the last, the end record (the ring holds 512)");
    assert!(records[..1500].iter().all(|r| r["name"] == "m"));
    assert_eq!(records[1500]["name"], "last");
    assert_eq!(records[1501]["name"], "(end)");
    let cycles: Vec<u64> = records.iter().map(|r| r["cycle"].as_u64().expect("cycle")).collect();
    assert!(cycles.windows(2).all(|w| w[0] <= w[1]), "cycles go back");
    assert_eq!(doc["end"]["records"], 1502);
}

/// Starts `tlpx script run` of `source` and waits (bounded) until the firmware has written
/// `records` of its records; returns the process and a card and CPU to look at it with.
fn run_script_until(sim: &Sim, source: &str, records: u32) -> (std::process::Child, Card, Cpu) {
    let script = sim.path("running.tlpxs");
    std::fs::write(&script, source).expect("script");
    let child = Command::new(PathBuf::from(env!("CARGO_BIN_EXE_tlpx")))
        .args(["--device", &sim.selector(), "script", "run", path_str(&script)])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("run tlpx");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    let mut card = open_card(sim);
    let cpu = Cpu::open(&mut card).expect("a CPU");
    while cpu.mailbox(&mut card).expect("mailbox").records_written < records {
        assert!(std::time::Instant::now() < deadline, "the script did not start");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    (child, card, cpu)
}

#[test]
fn ctrl_c_stops_a_running_script_and_its_records_still_come() {
    let sim = cpu_sim();
    load_firmware(&sim);
    let (child, mut card, cpu) = run_script_until(&sim, "loop 1000000 {\n    mark m\n    wait 100us\n}\n", 5);
    // it runs: Ctrl-C
    // SAFETY: sending SIGINT to the child this test started.
    unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
    let out = child.wait_with_output().expect("tlpx ends");
    let stdout = text(&out.stdout);
    assert_eq!(out.status.code(), Some(130), "{stdout}{}", text(&out.stderr));
    assert!(stdout.contains("end: stopped (7), stopped by Ctrl-C"), "{stdout}");
    let lines: Vec<&str> = stdout.lines().filter(|l| l.split_whitespace().nth(1) == Some("m")).collect();
    assert!(lines.len() >= 5, "the records before the stop: {stdout}");
    assert!(stdout.lines().any(|l| l.contains("(end)") && l.contains("stopped")), "{stdout}");
    // the firmware is ready for the next command
    let m = cpu.mailbox(&mut card).expect("mailbox");
    assert!(m.idle(), "{m:?}");
    assert_eq!(m.status, 7);
}

/// `fw stop`, `fw load`, `fw start` and `fw console` take the CPU's lease: while `script run`
/// owns the CPU they are refused, naming it, and the script runs on undisturbed (before, they
/// succeeded and the script died with a misleading error).
#[test]
fn fw_commands_are_refused_while_a_script_owns_the_cpu() {
    let sim = cpu_sim();
    load_firmware(&sim);
    let (child, _card, _cpu) = run_script_until(&sim, "loop 200 {\n    mark m\n    wait 50us\n}\n", 3);
    let fw = path_str(&firmware()).to_owned();
    for args in [vec!["fw", "stop"], vec!["fw", "load", &fw], vec!["fw", "start"], vec!["fw", "console"]] {
        let out = tlpx(&sim.selector(), &args);
        let err = text(&out.stderr);
        assert_eq!(out.status.code(), Some(3), "{args:?}: {err}");
        assert!(err.contains("busy: the soft CPU is owned by PID") && err.contains(&child.id().to_string()), "{args:?}: {err}");
    }
    let out = child.wait_with_output().expect("tlpx ends");
    assert_eq!(out.status.code(), Some(0), "the script ran to its end: {}{}", text(&out.stdout), text(&out.stderr));
    // Free again: the commands run.
    assert_eq!(tlpx(&sim.selector(), &["fw", "stop"]).status.code(), Some(0));
}

#[test]
fn the_console_follows_for_a_while_and_selftest_runs_again() {
    let sim = cpu_sim();
    load_firmware(&sim);
    let out = tlpx(&sim.selector(), &["fw", "console", "--follow", "--duration", "300ms"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let mut card = open_card(&sim);
    let cpu = Cpu::open(&mut card).expect("a CPU");
    let mut console = Vec::new();
    let status = cpu.selftest(&mut card, &mut |b| console.extend_from_slice(b)).expect("selftest");
    let console = text(&console);
    assert_eq!(status, 0, "{console}");
    assert!(console.contains("self-test: PASS"), "{console}");
    // what the firmware prints goes to `fw console` when nobody else reads it
    let m = cpu.mailbox(&mut card).expect("mailbox");
    assert_eq!((m.cmd_seq, m.done_seq, m.command), (1, 1, 2), "{m:?}");
}

#[test]
fn script_run_loads_the_default_firmware_and_refuses_bad_input() {
    let sim = cpu_sim();
    // the CPU is stopped: run loads build/firmware/tlpx-fw.img itself
    let script = sim.path("one.tlpxs");
    std::fs::write(&script, "mark only\n").expect("script");
    let out = tlpx(&sim.selector(), &["script", "run", path_str(&script)]);
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert!(err.contains("loaded firmware") && err.contains("tlpx-fw.img"), "{err}");
    assert!(text(&out.stdout).contains("end: ok (0)"), "{}", text(&out.stdout));
    assert_eq!(status_json(&sim)["cpu"]["starts"], 1);
    // now it is running: not loaded again
    let out = tlpx(&sim.selector(), &["script", "run", path_str(&script)]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(!text(&out.stderr).contains("loaded firmware"), "{}", text(&out.stderr));
    assert_eq!(status_json(&sim)["cpu"]["starts"], 1);

    // a bad --firmware is refused before anything is written
    let bad = sim.path("bad.img");
    std::fs::write(&bad, b"TLFW").expect("image");
    let out = tlpx(&sim.selector(), &["script", "run", path_str(&script), "--firmware", path_str(&bad)]);
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("firmware image file: found 4 bytes"), "{}", text(&out.stderr));
    assert_eq!(status_json(&sim)["cpu"]["state"], "running");

    // a buffer smaller than the script's window
    let dma = sim.path("dma.tlpxs");
    std::fs::write(&dma, "dma write size=64 count=1 window=64KiB\n").expect("script");
    let out = tlpx(&sim.selector(), &["script", "run", path_str(&dma), "--buffer", "4K"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("smaller than the 65536 bytes"), "{}", text(&out.stderr));

    // an image larger than the script area
    let big = sim.path("big.tlpxs");
    let body: String = (0..800).map(|i| format!("mark m{i}\n")).collect();
    std::fs::write(&big, body).expect("script");
    let out = tlpx(&sim.selector(), &["script", "run", path_str(&big)]);
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("script area holds 16384 bytes"), "{}", text(&out.stderr));
}

#[test]
fn script_run_on_a_card_without_the_cpu_says_how_to_get_one() {
    let sim = Sim::start(&[]);
    let script = sim.path("one.tlpxs");
    std::fs::write(&script, "mark only\n").expect("script");
    let out = tlpx(&sim.selector(), &["script", "run", path_str(&script)]);
    assert_eq!(out.status.code(), Some(3), "the card refuses");
    let err = text(&out.stderr);
    assert!(err.contains("this card has no CPU") && err.contains("make gateware CPU=1"), "{err}");
}

#[test]
fn the_cpu_runs_the_loops_card_side_and_the_timers_schedule_with_the_host_side_served() {
    let sim = cpu_sim();
    load_firmware(&sim);
    let scripts = repo_root().join("firmware/scripts");

    // DataMover: the CPU starts every iteration; the host answers each with the checksum.
    let json_out = sim.path("loop.json");
    let script = scripts.join("datamover_card_side.tlpxs");
    let out = tlpx(&sim.selector(), &["script", "run", path_str(&script), "--serve", "loop:256", "-o", path_str(&json_out)]);
    let stdout = text(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{stdout}{}", text(&out.stderr));
    assert!(stdout.contains("host side, real-time loop: 100 iteration(s) answered"), "{stdout}");
    let doc: Value = serde_json::from_str(&std::fs::read_to_string(&json_out).expect("json")).expect("JSON");
    assert_eq!(doc["host_side"]["loop_served"], 100);
    assert_eq!(doc["host_side"]["loop_data_errors"], 0);
    let records = doc["points"].as_array().expect("records");
    let buffer_bytes = records.iter().find(|r| r["name"] == "buffer_bytes").expect("buffer_bytes");
    assert_eq!(buffer_bytes["value"], 256, "the card used the host side's buffer");
    // every iteration's loop time is the card's own measurement: nonzero, and each
    // iteration's marks bracket it
    let loop_cycles: Vec<u64> = records.iter().filter(|r| r["name"] == "loop_cycles").map(|r| r["value"].as_u64().expect("u64")).collect();
    assert_eq!(loop_cycles.len(), 100);
    assert!(loop_cycles.iter().all(|&c| c > 0), "{loop_cycles:?}");
    let marks = |name: &str| records.iter().filter(|r| r["name"] == name).map(|r| r["cycle"].as_u64().expect("u64")).collect::<Vec<_>>();
    for ((s, e), c) in marks("it_start").iter().zip(marks("it_end")).zip(&loop_cycles) {
        assert!(e - s >= *c, "an iteration's marks ({s}..{e}) bracket its loop time {c}");
    }

    // Interrupt schedule: 10 bursts of 8 fires, each acknowledged by the host.
    let script = scripts.join("irq_schedule.tlpxs");
    let out = tlpx(&sim.selector(), &["--json", "script", "run", path_str(&script), "--serve", "irq"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let doc: Value = serde_json::from_slice(&out.stdout).expect("JSON on stdout");
    assert_eq!(doc["host_side"]["irq_acked"], 80);
    assert_eq!(doc["host_side"]["irq_samples"], 80);
    assert_eq!(doc["host_side"]["irq_user_cycles"]["count"], 80);
    let fires = doc["points"].as_array().expect("records").iter().find(|r| r["name"] == "fires").expect("fires");
    assert_eq!(fires["value"], 80);

    // a host side that does not exist
    let out = tlpx(&sim.selector(), &["script", "run", path_str(&script), "--serve", "dma"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("--serve \"dma\": accepted are loop, loop:SIZE"), "{}", text(&out.stderr));
    let out = tlpx(&sim.selector(), &["script", "run", path_str(&script), "--serve", "loop:5000"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("8..=4096 bytes"), "{}", text(&out.stderr));
}

#[test]
fn the_shipped_characterisation_and_torture_scripts_pass_on_the_card() {
    let sim = cpu_sim();
    load_firmware(&sim);
    for name in ["pamette", "burst_torture"] {
        let script = repo_root().join(format!("firmware/scripts/{name}.tlpxs"));
        let out = tlpx(&sim.selector(), &["--json", "script", "run", path_str(&script)]);
        assert_eq!(out.status.code(), Some(0), "{name}: {}", text(&out.stderr));
        let doc: Value = serde_json::from_slice(&out.stdout).expect("JSON on stdout");
        assert_eq!(doc["end"]["status_name"], "ok", "{name}");
        let records = doc["points"].as_array().expect("records");
        assert!(records.iter().all(|r| r["status_name"] == "ok"), "{name}: every check held");
        let cycles: Vec<u64> = records.iter().map(|r| r["cycle"].as_u64().expect("cycle")).collect();
        assert!(cycles.windows(2).all(|w| w[0] <= w[1]), "{name}: card time goes forward");
        let dma: Vec<&Value> = records.iter().filter(|r| r["kind"] == "dma").collect();
        assert!(!dma.is_empty() && dma.iter().all(|r| r["value"].as_u64() > Some(0)), "{name}: every recorded run took card time");
    }
}
