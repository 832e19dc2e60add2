//! One owner per block, and nothing that outlives its owner, end to end with the real binary.
//!
//!   tlpx A ──claim(spy|generator)──► card lease ◄──claim── tlpx B: "busy: ... PID A ..."
//!   tlpx A killed (SIGKILL, SIGPIPE, Ctrl-C) ──► tlpx B finds A gone: stops A's job, goes on
//!
//! Every test here failed before leases existed: a capture killed by SIGPIPE kept writing
//! its ring into memory the next tool was given, two `bw` at once corrupted each other's
//! figures, and a killed `bw` left its job running under the next one.

use std::io::{BufRead, BufReader, Read};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use tlpx_testkit::SimProcess as Sim;
use tlpx_trace::TraceReader;

use crate::common;
use common::{text, tlpx, tlpx_bin};

fn spawn(device: &str, args: &[&str]) -> Child {
    Command::new(tlpx_bin())
        .arg("--device")
        .arg(device)
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn tlpx")
}

fn json(out: &Output) -> serde_json::Value {
    assert!(out.status.success(), "tlpx failed ({:?}): {}", out.status, text(&out.stderr));
    serde_json::from_slice(&out.stdout).expect("tlpx printed JSON")
}

/// The owners table as JSON: block name -> owner PID (None when free).
fn owners(device: &str) -> Vec<(String, Option<u64>)> {
    let v = json(&tlpx(device, &["--json", "owners"]));
    v.as_array()
        .expect("array")
        .iter()
        .map(|row| (row["block"].as_str().expect("name").to_string(), row["owner"]["pid"].as_u64()))
        .collect()
}

fn owner_of(device: &str, block: &str) -> Option<u64> {
    owners(device).into_iter().find(|(b, _)| b == block).and_then(|(_, pid)| pid)
}

/// Waits (wall time, bounded) until `block` is owned by `pid`.
fn wait_owned(device: &str, block: &str, pid: u32) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while owner_of(device, block) != Some(u64::from(pid)) {
        assert!(Instant::now() < deadline, "{block} never became owned by PID {pid}: {:?}", owners(device));
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn kill(child: &Child, signal: libc::c_int) {
    // SAFETY: kill(2) on our own child's PID.
    let r = unsafe { libc::kill(child.id() as libc::pid_t, signal) };
    assert_eq!(r, 0, "kill");
}

/// (transfers, errors) of the first point of a `bw --json` result: the card's error counters
/// (its data checks of reads included) and the host's check of written bytes.
fn bw_figures(out: &Output) -> (u64, u64) {
    let v = json(out);
    let point = &v["points"][0];
    let transfers = point["transfers"].as_u64().expect("transfers");
    let mut errors = point["card_error_total"].as_u64().expect("card_error_total");
    if let Some(check) = point["host_check"].as_object() {
        for k in ["corrupt_bytes", "missing_bytes", "stray_bytes"] {
            errors += check[k].as_u64().expect(k);
        }
    }
    (transfers, errors)
}

#[test]
fn a_capture_killed_by_sigpipe_stops_and_a_later_bw_reads_clean_data() {
    let sim = Sim::start(&[]);
    let dev = sim.selector();
    let trace = sim.path("x.tlpx");
    // `tlpx spy capture -o x.tlpx --duration 50ms | head -3`: the reader leaves after 3 lines.
    let mut child = Command::new(tlpx_bin())
        .args(["--device", &dev, "spy", "capture", "-o", trace.to_str().expect("path"), "--duration", "50ms"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn");
    {
        let mut lines = BufReader::new(child.stdout.take().expect("stdout")).lines();
        for _ in 0..3 {
            lines.next().expect("a line").expect("utf-8");
        }
    } // the pipe closes here, as `head -3` exits
    let status = child.wait().expect("wait");
    let mut err = String::new();
    child.stderr.take().expect("stderr").read_to_string(&mut err).expect("stderr");
    assert_eq!(status.code(), Some(141), "exit as after SIGPIPE, after cleaning up: {status:?} {err}");
    assert!(!err.contains("panicked"), "{err}");
    // The trace is readable: header first, the records the host received, and a footer (the
    // capture stopped cleanly).
    let reader = TraceReader::open(&trace).expect("a readable trace");
    assert!(reader.footer().is_some(), "the capture ended cleanly");
    // The spy is off and free: nothing writes into the ring that is gone.
    let stats = json(&tlpx(&dev, &["--json", "spy", "stats"]));
    assert_eq!(stats["counters"]["capturing"], false, "{stats}");
    assert_eq!(owner_of(&dev, "spy"), None);
    // The next tool's buffers hold exactly its own data.
    let out = tlpx(&dev, &["--json", "bw", "--op", "read", "--sizes", "4096", "--count", "200"]);
    let (transfers, errors) = bw_figures(&out);
    assert_eq!((transfers, errors), (200, 0), "{}", text(&out.stdout));
}

#[test]
fn a_capture_killed_by_sigkill_leaves_a_readable_trace_and_the_next_tool_takes_the_spy_back() {
    let sim = Sim::start(&[]);
    let dev = sim.selector();
    let trace = sim.path("k.tlpx");
    let child = spawn(&dev, &["spy", "capture", "-q", "-o", trace.to_str().expect("path"), "--duration", "10s", "--poll", "20us"]);
    wait_owned(&dev, "spy", child.id());
    // Traffic for it to record, then enough wall time for a flush (every 100 ms).
    let out = tlpx(&dev, &["bw", "--op", "write", "--sizes", "256", "--count", "50"]);
    assert!(out.status.success() || out.status.code() == Some(1), "{}", text(&out.stderr));
    std::thread::sleep(Duration::from_millis(400));
    let mut child = child;
    kill(&child, libc::SIGKILL);
    child.wait().expect("wait");
    // What reached the host is on disk: the header and whole records, no footer.
    let reader = TraceReader::open(&trace).expect("a readable trace after SIGKILL");
    assert!(reader.footer().is_none());
    assert!(reader.record_count() > 0, "records flushed before the kill");
    // The dead owner's capture is found, stopped and said so, by the next command that opens
    // the card; `spy stats` then tells the truth.
    let out = tlpx(&dev, &["--json", "spy", "stats"]);
    let stats = json(&out);
    assert_eq!(stats["counters"]["capturing"], false, "{stats}");
    let note = text(&out.stderr);
    assert!(note.contains("was left running by PID") && note.contains("no longer running"), "{note}");
    assert_eq!(owner_of(&dev, "spy"), None);
}

#[test]
fn a_second_bw_is_told_who_owns_the_generator_and_the_first_is_not_disturbed() {
    let sim = Sim::start(&[]);
    let dev = sim.selector();
    // 4,000 transfers: the simulator takes about 7 s (20,000 took 37 s), and the refused second
    // bw needs well under one; the first must still hold the generator when it asks.
    let first = spawn(&dev, &["--json", "bw", "--op", "write", "--sizes", "4096", "--count", "4000"]);
    wait_owned(&dev, "generator", first.id());
    let out = tlpx(&dev, &["bw", "--op", "write", "--sizes", "4096", "--count", "100"]);
    assert!(!out.status.success());
    let err = text(&out.stderr);
    assert!(err.contains("busy: the traffic generator is owned by PID") && err.contains(&first.id().to_string()), "{err}");
    assert!(err.contains("`tlpx stop generator`"), "{err}");
    let out = first.wait_with_output().expect("first bw");
    let (transfers, errors) = bw_figures(&out);
    assert_eq!((transfers, errors), (4000, 0));
}

#[test]
fn after_a_sigkilled_bw_the_next_bw_runs_exactly_its_own_transfers() {
    let sim = Sim::start(&[]);
    let dev = sim.selector();
    let mut first = spawn(&dev, &["bw", "--op", "read", "--sizes", "4096", "--count", "1000000"]);
    wait_owned(&dev, "generator", first.id());
    kill(&first, libc::SIGKILL);
    first.wait().expect("wait");
    let out = tlpx(&dev, &["--json", "bw", "--op", "read", "--sizes", "4096", "--count", "100"]);
    let (transfers, errors) = bw_figures(&out);
    assert_eq!((transfers, errors), (100, 0), "{}", text(&out.stdout));
    let note = text(&out.stderr);
    assert!(note.contains("was left running by PID") && note.contains("stopped and freed"), "{note}");
}

#[test]
fn a_busy_spy_leaves_the_output_file_alone_and_stop_takes_it_back() {
    let sim = Sim::start(&[]);
    let dev = sim.selector();
    let first = spawn(&dev, &["spy", "capture", "-q", "-o", sim.path("a.tlpx").to_str().expect("path"), "--duration", "10s"]);
    wait_owned(&dev, "spy", first.id());
    let keep = sim.path("keep.tlpx");
    std::fs::write(&keep, b"precious").expect("write");
    let out = tlpx(&dev, &["spy", "capture", "-o", keep.to_str().expect("path"), "--duration", "1ms"]);
    assert!(!out.status.success());
    assert!(text(&out.stderr).contains("busy: the spy is owned by PID"), "{}", text(&out.stderr));
    assert_eq!(std::fs::read(&keep).expect("read"), b"precious", "the refused capture truncated its --output");
    // `tlpx stop spy` asks the capture to stop (it is a `tlpx spy capture` of this host) and
    // waits until it let the spy go: it ends as after Ctrl-C, its --duration cut short (130),
    // with a complete trace.
    let out = tlpx(&dev, &["stop", "spy"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let said = text(&out.stdout);
    assert!(said.contains(&format!("PID {}", first.id())) && said.contains("asked to stop and ended its capture"), "{said}");
    let out = first.wait_with_output().expect("first capture");
    assert_eq!(out.status.code(), Some(130), "{}", text(&out.stderr));
    assert!(tlpx_trace::TraceReader::open(sim.path("a.tlpx")).expect("trace").footer().is_some(), "the trace has its footer");
    assert_eq!(owner_of(&dev, "spy"), None);
}

#[test]
fn a_measurement_beside_another_tools_capture_says_it_is_perturbed() {
    let sim = Sim::start(&[]);
    let dev = sim.selector();
    let mut capture = spawn(&dev, &["spy", "capture", "-q", "-o", sim.path("p.tlpx").to_str().expect("path"), "--duration", "10s"]);
    wait_owned(&dev, "spy", capture.id());
    let out = tlpx(&dev, &["--json", "bw", "--op", "write", "--sizes", "1024", "--count", "20"]);
    let v = json(&out);
    let perturbed = v["environment"]["perturbed_by"].as_array().expect("perturbed_by").clone();
    assert_eq!(perturbed.len(), 1, "{v}");
    assert!(perturbed[0].as_str().expect("text").contains(&format!("PID {}", capture.id())), "{perturbed:?}");
    assert!(text(&out.stderr).contains("perturbed by a spy capture"), "{}", text(&out.stderr));
    kill(&capture, libc::SIGINT);
    let status = capture.wait().expect("wait");
    assert_eq!(status.code(), Some(130));
    // Alone again: nothing recorded.
    let v = json(&tlpx(&dev, &["--json", "bw", "--op", "write", "--sizes", "1024", "--count", "20"]));
    assert_eq!(v["environment"]["perturbed_by"], serde_json::json!([]), "{v}");
}

#[test]
fn single_rule30_operations_are_refused_while_another_process_runs_a_batch_and_the_batch_stays_right() {
    // Before: hw-poll beside a running hw-batch rewrote the core's registers under it (20 of
    // 20 packets wrong with --verify, the batch failed with "result record 0 ... is not this
    // batch's"), and without --verify printed wrong figures with exit 0.
    let sim = Sim::start(&[]);
    let dev = sim.selector();
    let batch = spawn(&dev, &["--json", "rule30", "run", "--mode", "hw-batch", "--packets", "20000", "--verify"]);
    wait_owned(&dev, "rule30_batch", batch.id());
    for mode in ["hw-poll", "hw-irq"] {
        let out = tlpx(&dev, &["rule30", "run", "--mode", mode, "--packets", "5", "--verify"]);
        assert_eq!(out.status.code(), Some(3), "{mode}: {}", text(&out.stderr));
        let err = text(&out.stderr);
        assert!(err.contains("busy: the rule-30 accelerator is owned by PID") && err.contains(&batch.id().to_string()), "{err}");
    }
    let out = batch.wait_with_output().expect("batch");
    let v = json(&out);
    let point = &v["points"][0];
    assert_eq!((point["mismatches"].as_u64(), point["verified_packets"].as_u64()), (Some(0), Some(20000)), "{point}");
    // Free again: a single operation runs and verifies.
    let out = tlpx(&dev, &["rule30", "run", "--mode", "hw-poll", "--packets", "5", "--verify"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(owner_of(&dev, "rule30_batch"), None);
}

#[test]
fn a_result_never_replaces_a_symlink_or_a_device_node() {
    let sim = Sim::start(&[]);
    let dev = sim.selector();
    let target = sim.path("target.txt");
    std::fs::write(&target, "kept\n").expect("write");
    let link = sim.path("link.json");
    std::os::unix::fs::symlink(&target, &link).expect("symlink");
    let out = tlpx(&dev, &["bw", "--op", "read", "--sizes", "4096", "--count", "10", "--output", link.to_str().expect("path")]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    assert!(text(&out.stderr).contains("that is a symbolic link"), "{}", text(&out.stderr));
    assert!(std::fs::symlink_metadata(&link).expect("link").file_type().is_symlink());
    assert_eq!(std::fs::read_to_string(&target).expect("target"), "kept\n");
    let out = tlpx(&dev, &["bw", "--op", "read", "--sizes", "4096", "--count", "10", "--output", "/dev/null"]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    assert!(text(&out.stderr).contains("/dev/null: that is a character device"), "{}", text(&out.stderr));
    use std::os::unix::fs::FileTypeExt;
    assert!(std::fs::metadata("/dev/null").expect("/dev/null").file_type().is_char_device());
}

#[test]
fn tlpx_stop_generator_ends_a_multi_point_bw_with_its_finished_points_and_the_next_bw_is_clean() {
    // Before: the stopped bw ran its remaining points on a generator it no longer owned (the
    // next bw then counted UR errors it did not cause), and ended with exit 3 and no result.
    let sim = Sim::start(&[]);
    let dev = sim.selector();
    let file = sim.path("stopped.json");
    let first = spawn(
        &dev,
        &["bw", "--op", "read,write", "--sizes", "64,256,1024,4096", "--count", "2000", "--output", file.to_str().expect("path")],
    );
    wait_owned(&dev, "generator", first.id());
    let out = tlpx(&dev, &["stop", "generator"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let out = first.wait_with_output().expect("first bw");
    let err = text(&out.stderr);
    assert!(err.contains("is no longer this process's") && err.contains("keeping the points measured before"), "{err}");
    let v: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&file).expect("partial result")).expect("JSON");
    assert_eq!(v["interrupted"], true, "{}", v["partial"]);
    assert!(v["points"].as_array().expect("points").len() < 8, "{}", v["partial"]);
    for _ in 0..3 {
        let out = tlpx(&dev, &["--json", "bw", "--op", "read", "--sizes", "4096", "--count", "100"]);
        assert_eq!(bw_figures(&out), (100, 0), "{}", text(&out.stdout));
    }
}

/// `tlpx reg write` and a session's `write` lines honour leases on tlpx's own blocks: a
/// write into a block another process owns is refused with the owner named, unless --force,
/// which says what it breaks. Before: `reg write spy.control.enable 0` during another's
/// capture was accepted (the capture then missed every TLP and reported "lost 0"), and
/// `generator.control.stop 1` during a bw wrote start again with it and did not stop it.
#[test]
fn register_writes_into_an_owned_block_are_refused_naming_the_owner_unless_forced() {
    let sim = Sim::start(&[]);
    let dev = sim.selector();
    let bw = spawn(&dev, &["--json", "bw", "--op", "read", "--sizes", "4096", "--count", "200000"]);
    wait_owned(&dev, "generator", bw.id());
    let out = tlpx(&dev, &["reg", "write", "generator.control.stop", "1"]);
    assert_eq!(out.status.code(), Some(3), "{}", text(&out.stderr));
    let err = text(&out.stderr);
    assert!(err.contains("busy: the traffic generator is owned by PID") && err.contains(&bw.id().to_string()), "{err}");
    assert!(err.contains("--force writes anyway (it breaks its owner's run"), "{err}");
    // A session's write line is refused the same way.
    let out = tlpx(&dev, &["slot", "run", "-e", "write generator.config.operation write"]);
    assert_eq!(out.status.code(), Some(3), "{}", text(&out.stderr));
    assert!(text(&out.stderr).contains("busy: the traffic generator"), "{}", text(&out.stderr));
    // Forced: said, and the stop acts (it no longer writes start back with it).
    let out = tlpx(&dev, &["reg", "write", "--force", "generator.control.stop", "1"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(text(&out.stderr).contains("warning: --force: writing generator.control.stop into the traffic generator while PID"));
    let out = bw.wait_with_output().expect("bw");
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    assert_eq!(v["points"][0]["runs"][0]["ended_by"], "stopped", "{v}");
    assert!(v["points"][0]["transfers"].as_u64().expect("transfers") < 200000);

    let mut capture = spawn(&dev, &["spy", "capture", "-q", "-o", sim.path("c.tlpx").to_str().expect("utf-8")]);
    wait_owned(&dev, "spy", capture.id());
    let out = tlpx(&dev, &["reg", "write", "spy.control.enable", "0"]);
    assert_eq!(out.status.code(), Some(3), "{}", text(&out.stderr));
    assert!(text(&out.stderr).contains("busy: the spy is owned by PID"), "{}", text(&out.stderr));
    assert!(tlpx(&dev, &["spy", "stop"]).status.success());
    assert!(capture.wait().expect("capture").success());
}

/// The High finding of issue 26: after a run, `reg write generator.control.clear 1` read the
/// control register back with start = 1 and wrote start and clear: a run nobody owned went to
/// the earlier run's freed buffer. The same for rule 30's batch control.
#[test]
fn a_field_write_after_a_run_starts_nothing_and_a_job_started_by_hand_ends_with_the_command() {
    let sim = Sim::start(&[]);
    let dev = sim.selector();
    assert!(tlpx(&dev, &["bw", "--op", "read", "--sizes", "256", "--count", "1000"]).status.success());
    let before = json(&tlpx(&dev, &["--json", "reg", "read", "generator.read_requests"]))["value"].as_u64();
    let out = tlpx(&dev, &["reg", "write", "generator.control.clear", "1"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let control = json(&tlpx(&dev, &["--json", "reg", "read", "generator.control"]));
    assert_eq!(control["value"], 0, "write-1-to-act bits read back 0: {control}");
    let status = json(&tlpx(&dev, &["--json", "reg", "read", "generator.status"]));
    let running = status["fields"].as_array().expect("fields").iter().find(|f| f["name"] == "running").expect("running")["value"].clone();
    assert_eq!(running, 0, "{status}");
    let after = json(&tlpx(&dev, &["--json", "reg", "read", "generator.read_requests"]))["value"].as_u64();
    assert!(after.is_some() && after <= before, "no request after the clear ({before:?} -> {after:?}: clear zeroes them)");
    assert_eq!(owner_of(&dev, "generator"), None);

    assert!(tlpx(&dev, &["rule30", "run", "--mode", "hw-batch", "--packets", "20"]).status.success());
    let batches = json(&tlpx(&dev, &["--json", "reg", "read", "rule30_batch.batches"]))["value"].as_u64().expect("batches");
    let out = tlpx(&dev, &["reg", "write", "rule30_batch.control.clear", "1"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let status = json(&tlpx(&dev, &["--json", "reg", "read", "rule30_batch.status"]));
    assert_eq!(status["fields"][0]["value"], 0, "no batch runs: {status}");
    let now = json(&tlpx(&dev, &["--json", "reg", "read", "rule30_batch.batches"]))["value"].as_u64().expect("batches");
    assert!(now <= batches, "no batch started ({batches} -> {now})");

    // A run started by hand has this process as its owner only for the write: it ends with it.
    assert!(tlpx(&dev, &["reg", "write", "generator.duration", "100000000"]).status.success());
    assert!(tlpx(&dev, &["reg", "write", "generator.count", "0"]).status.success());
    let out = tlpx(&dev, &["--json", "reg", "write", "generator.control.start", "1"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let err = text(&out.stderr);
    assert!(err.contains("the traffic generator was working when this command ended") && err.contains("the card stopped it"), "{err}");
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    assert_eq!(doc["leases_held"], serde_json::json!(["generator"]), "{doc}");
    let status = json(&tlpx(&dev, &["--json", "reg", "read", "generator.status"]));
    let running = status["fields"].as_array().expect("fields").iter().find(|f| f["name"] == "running").expect("running")["value"].clone();
    assert_eq!(running, 0, "no run without an owner: {status}");
}
