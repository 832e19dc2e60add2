//! `tlpx reg` end to end against a real tlpx-sim: field decode, field reads and
//! read-modify-write field writes, watch, the DUT's registers from a csr.json (`--regs`), and
//! every refusal with its message.
//!
//!   tlpx reg ──► tlpx-sim (the Verilated card) ──► BAR0 registers

use std::path::PathBuf;
use std::process::{Command, Output, Stdio};

use tlpx_regs::generator::config::{AddressPattern, Operation};
use tlpx_testkit::SimProcess as Sim;

use crate::common;
use common::{text, tlpx, tlpx_bin};

fn json(out: &Output) -> serde_json::Value {
    assert!(out.status.success(), "tlpx failed: {}", text(&out.stderr));
    serde_json::from_slice(&out.stdout).expect("tlpx printed JSON")
}

/// A refused command: a failure exit status, no panic, and the message on stderr.
fn refused(out: &Output) -> String {
    let err = text(&out.stderr);
    assert!(!out.status.success(), "should have been refused: {}", text(&out.stdout));
    assert!(!err.contains("panicked"), "{err}");
    err
}

fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../..")
}

#[test]
fn read_decodes_fields_and_field_writes_keep_the_other_fields() {
    let sim = Sim::start(&[]);
    let dev = sim.selector();
    // Two fields written one after the other: the second write must keep the first.
    let out = tlpx(&dev, &["reg", "write", "generator.config.address_pattern", AddressPattern::Random.name()]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let out = tlpx(&dev, &["reg", "write", "generator.config.operation", Operation::Write.name()]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let v = json(&tlpx(&dev, &["--json", "reg", "read", "generator.config"]));
    let value = v["value"].as_u64().expect("value");
    let op = tlpx_regs::generator::config::OPERATION;
    let ap = tlpx_regs::generator::config::ADDRESS_PATTERN;
    assert_eq!(op.get(value), u64::from(Operation::Write.value()), "{v}");
    assert_eq!(ap.get(value), u64::from(AddressPattern::Random.value()), "{v}");
    let fields = v["fields"].as_array().expect("fields");
    let field = |name: &str| fields.iter().find(|f| f["name"] == name).unwrap_or_else(|| panic!("{name} in {v}")).clone();
    assert_eq!(field("operation")["value_name"], "write");
    assert_eq!(field("address_pattern")["value_name"], "random");
    assert_eq!(field("operation")["shift"], op.shift);
    // The text form: the value, then a line per field with its value's name.
    let out = tlpx(&dev, &["reg", "read", "generator.config"]);
    let t = text(&out.stdout);
    assert!(t.starts_with(&format!("generator.config = {value:#05x} ({value})")), "{t}");
    assert!(t.lines().any(|l| l.trim_start().starts_with("operation") && l.ends_with("= write (1)")), "{t}");
    // One field, by number this time, read back alone.
    let out = tlpx(&dev, &["reg", "write", "generator.config.operation", "3"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let out = tlpx(&dev, &["reg", "read", "generator.config.operation"]);
    assert_eq!(text(&out.stdout).trim(), "generator.config.operation = write_then_read (3)");
    let f = json(&tlpx(&dev, &["--json", "reg", "read", "generator.config.address_pattern"]));
    assert_eq!((f["value"].as_u64(), f["value_name"].as_str()), (Some(2), Some("random")), "{f}");
    // A register without named values: a whole-register write and read by name and offset.
    let out = tlpx(&dev, &["reg", "write", "ident.scratch", "0x1234abcd"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let by_offset = json(&tlpx(&dev, &["--json", "reg", "read", &format!("{:#x}", tlpx_regs::ident::SCRATCH.offset)]));
    assert_eq!(by_offset["value"], 0x1234_abcd_u64);
    assert_eq!(by_offset["name"], "ident.scratch");
}

#[test]
fn bad_names_values_and_access_are_refused_with_what_exists() {
    let sim = Sim::start(&[]);
    let dev = sim.selector();
    let cases: &[(&[&str], &[&str])] = &[
        (&["reg", "write", "generator.status", "1"], &["generator.status is read-only"]),
        (&["reg", "write", "generator.status.ended_by", "1"], &["read-only"]),
        (&["reg", "write", "generator.config.operation", "4"], &["does not fit generator.config.operation", "2-bit field"]),
        (&["reg", "write", "generator.config.operation", "sideways"], &["read, write, read_write, write_then_read"]),
        (&["reg", "write", "generator.config", "0x400"], &["does not fit generator.config", "10-bit register"]),
        (&["reg", "read", "generator.config.nosuch"], &["no field \"nosuch\"", "operation", "address_pattern"]),
        (&["reg", "read", "generator.nosuch"], &["no register \"nosuch\" in region generator", "config"]),
        (&["reg", "read", "nosuch.x"], &["no region \"nosuch\"", "ident", "spy"]),
        (&["reg", "read", "status"], &["ambiguous", "generator.status", "spy.status"]),
        (&["reg", "read", "ident.scratch.x"], &["ident.scratch has no fields"]),
        (&["reg", "read", "a.b.c.d"], &["too many dots"]),
        (&["reg", "read", "0x3"], &["DW-aligned"]),
    ];
    for (args, want) in cases {
        let err = refused(&tlpx(&dev, args));
        for w in *want {
            assert!(err.contains(w), "{args:?}: {w:?} not in {err}");
        }
    }
    // A refused write changed nothing.
    let v = json(&tlpx(&dev, &["--json", "reg", "read", "generator.config"]));
    assert_eq!(v["value"], 0, "{v}");
}

#[test]
fn watch_prints_changes_with_times_and_refuses_registers_whose_read_acts() {
    let sim = Sim::start(&[]);
    let dev = sim.selector();
    let err = refused(&tlpx(&dev, &["reg", "watch", "--count", "1", "generator.lat_sample"]));
    assert!(
        err.contains("refusing to watch generator.lat_sample") && err.contains("pops the latency sample FIFO") && err.contains("--force"),
        "{err}"
    );
    let err = refused(&tlpx(&dev, &["reg", "watch", "--count", "0", "ident.scratch"]));
    assert!(err.contains("--count") && err.contains("accepted: a whole number in 1.."), "{err}");
    let err = refused(&tlpx(&dev, &["reg", "watch", "--interval", "soon", "ident.scratch"]));
    assert!(err.contains("--interval"), "{err}");
    // --force polls it: the FIFO is empty, so it reads its empty value.
    let out = tlpx(&dev, &["reg", "watch", "--count", "1", "--force", "generator.lat_sample"]);
    assert!(out.status.success(), "{}", text(&out.stderr));

    // A watch running while another process writes the register: the first poll prints the
    // value, later polls only the change, each line with wall and card time.
    let out = tlpx(&dev, &["reg", "write", "ident.scratch", "0x11"]);
    assert!(out.status.success());
    let watcher = Command::new(tlpx_bin())
        .args(["--device", &dev, "reg", "watch", "--interval", "50ms", "--count", "60", "ident.scratch", "ident.magic"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start the watch");
    std::thread::sleep(std::time::Duration::from_millis(800));
    let out = tlpx(&dev, &["reg", "write", "ident.scratch", "0x22"]);
    assert!(out.status.success());
    let out = watcher.wait_with_output().expect("watch ends after --count polls");
    assert!(out.status.success(), "{}", text(&out.stderr));
    let t = text(&out.stdout);
    let lines: Vec<&str> = t.lines().filter(|l| !l.starts_with('#')).collect();
    assert_eq!(lines.len(), 3, "two first values and one change: {t}");
    assert!(lines[0].contains("ident.scratch = 0x00000011 (17)"), "{t}");
    assert!(lines[1].contains("ident.magic = 0x544c5058"), "{t}");
    assert!(lines[2].contains("ident.scratch = 0x00000022 (34)  (was 0x00000011 (17))"), "{t}");
    assert!(lines.iter().all(|l| l.contains("Z  card ")), "wall time and card time on every line: {t}");
    assert!(t.starts_with("# every 50ms"), "{t}");
}

#[test]
fn watch_json_names_the_fields_that_changed() {
    let sim = Sim::start(&[]);
    let dev = sim.selector();
    let watcher = Command::new(tlpx_bin())
        .args(["--device", &dev, "--json", "reg", "watch", "--interval", "50ms", "--count", "60", "generator.config"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start the watch");
    std::thread::sleep(std::time::Duration::from_millis(800));
    let out = tlpx(&dev, &["reg", "write", "generator.config.operation", "write"]);
    assert!(out.status.success());
    let out = watcher.wait_with_output().expect("watch ends");
    assert!(out.status.success(), "{}", text(&out.stderr));
    let lines: Vec<serde_json::Value> = text(&out.stdout).lines().map(|l| serde_json::from_str(l).expect("a JSON line")).collect();
    assert_eq!(lines.len(), 2, "{lines:?}");
    assert_eq!(lines[1]["value"], 1);
    assert_eq!(lines[1]["previous"], 0);
    assert_eq!(lines[1]["fields_changed"][0], "operation read (0) -> write (1)");
    // Host wall time as a full UTC stamp, e.g. 2026-11-26T12:00:00.123456Z.
    let wall = lines[1]["wall_utc"].as_str().expect("wall_utc");
    assert!(wall.len() == 27 && wall.as_bytes()[10] == b'T' && wall.ends_with('Z'), "{wall}");
    assert!(lines[1]["card_cycles"].as_u64().expect("card time") >= lines[0]["card_cycles"].as_u64().expect("card time"));
}

/// The card build's own csr.json (its DUT-owned regions: rule 30's).
fn card_csr() -> PathBuf {
    repo_root().join("build/card/dw64/csr.json")
}

/// The card's csr.json changed: `edit` applied to its parsed regions.
fn edited_csr(dir: &std::path::Path, name: &str, edit: impl FnOnce(&mut Vec<serde_json::Value>)) -> PathBuf {
    let mut doc: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(card_csr()).expect("build/card/dw64/csr.json (make gateware)")).expect("json");
    edit(doc["regions"].as_array_mut().expect("regions"));
    let out = dir.join(name);
    std::fs::write(&out, serde_json::to_string_pretty(&doc).expect("json")).expect("write");
    out
}

#[test]
fn regs_adds_the_duts_registers_checked_against_the_slot() {
    let sim = Sim::start(&[]);
    let dev = sim.selector();
    let dir = tempfile::tempdir().expect("temp dir");
    // The DUT's region under a name of its own, as an accelerator's csr.json names its
    // window: unknown without the file.
    let renamed = edited_csr(dir.path(), "renamed.json", |regions| {
        for r in regions.iter_mut().filter(|r| r["name"] == "rule30") {
            r["name"] = "mydut".into();
        }
    });
    let err = refused(&tlpx(&dev, &["reg", "read", "mydut.version"]));
    assert!(err.contains("no region \"mydut\""), "{err}");
    // The renamed file's DUT hash is not the slot's: refused, naming both hashes and the slot's DUT.
    let err = refused(&tlpx(&dev, &["reg", "--regs", renamed.to_str().expect("path"), "read", "mydut.version"]));
    assert!(err.contains("hash to 0x") && err.contains(&format!("0x{:08x}", tlpx_regs::RULE30_DUT_MAP_HASH)), "{err}");
    assert!(err.contains("slot holds \"rule30\"") && err.contains("mydut"), "{err}");
    // The card build's own file: its DUT regions (rule 30's) are the slot's.
    let csr = card_csr();
    let csr = csr.to_str().expect("path");
    let mine = json(&tlpx(&dev, &["--json", "reg", "--regs", csr, "read", "rule30.version"]));
    assert_eq!(mine["offset"], tlpx_regs::rule30::VERSION.offset);
    let list = text(&tlpx(&dev, &["reg", "--regs", csr, "list", "rule30"]).stdout);
    assert!(list.contains("rule30.control") && list.contains("irq_enable"), "fields from the file: {list}");
    let out = tlpx(&dev, &["reg", "--regs", csr, "write", "rule30.control.hwo", "1"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let v = json(&tlpx(&dev, &["--json", "reg", "read", "rule30.control.hwo"]));
    assert_eq!(v["value"], 1);
    // Refused: no such file, not JSON, no DUT region (the regions it has are listed).
    let err = refused(&tlpx(&dev, &["reg", "--regs", "/nonexistent/csr.json", "read", "rule30.version"]));
    assert!(err.contains("--regs /nonexistent/csr.json: cannot read it"), "{err}");
    let bad = dir.path().join("bad.json");
    std::fs::write(&bad, "not json").expect("write");
    let err = refused(&tlpx(&dev, &["reg", "--regs", bad.to_str().expect("path"), "read", "rule30.version"]));
    assert!(err.contains("not JSON"), "{err}");
    let card_only = edited_csr(dir.path(), "card-only.json", |regions| {
        for r in regions.iter_mut() {
            r["owner"] = "card".into();
        }
    });
    let err = refused(&tlpx(&dev, &["reg", "--regs", card_only.to_str().expect("path"), "read", "ident.magic"]));
    assert!(err.contains("no region has \"owner\": \"dut\"") && err.contains("ident"), "{err}");
}

#[test]
fn info_prints_the_slot_and_rule30_runs_on_rule30() {
    let sim = Sim::start(&[]);
    let dev = sim.selector();
    let v = json(&tlpx(&dev, &["--json", "info"]));
    let slot = &v["slot"];
    assert_eq!(slot["dut_name"], "rule30", "{v}");
    assert_eq!(slot["placement"], "window");
    assert_eq!(slot["interface_version"], tlpx_regs::constants::SLOT_INTERFACE_VERSION);
    assert_eq!(slot["window_bar0_offset"], tlpx_regs::constants::SLOT_WINDOW_BASE);
    assert_eq!(slot["window_bytes"], tlpx_regs::constants::RULE30_WINDOW_SIZE);
    assert_eq!(slot["dut_map_hash"], format!("0x{:08x}", tlpx_regs::RULE30_DUT_MAP_HASH));
    assert_eq!(v["tlpx_map_bar0_offset"], 0);
    let t = text(&tlpx(&dev, &["info"]).stdout);
    let line = t.lines().find(|l| l.starts_with("slot ")).unwrap_or_else(|| panic!("a slot line: {t}"));
    assert!(line.contains("rule30") && line.contains("placement window") && line.contains("0x20000"), "{line}");
}
