//! The must-show of issue 17 for a user's accelerator: the card built with the Verilog
//! pci_epf_test DUT in its slot (placement bar0), driven by `tlpx reg` and `tlpx slot run`
//! with the example scripts of accelerators/pci_epf_test/, its DMA result and interrupt
//! checked, and the spy's trace of the session attributing its TLPs to it.
//!
//!   tlpx reg / tlpx slot run ──► tlpx-sim ──► card (dw64-pci_epf_test) ──► slot: pci_epf_test.v
//!                                                         ▲ spy: every TLP of the session
//!
//! Data is checked by this test itself where it can be: the CRC-32 is computed here (an
//! implementation of its own, checked against the standard check value), the copy's and the
//! write's data come back through `dump`, and the fault switch's flipped byte is the one the
//! DUT's README names (byte size/2).

use std::process::Output;

use serde_json::Value;
use tlpx_testkit::SimProcess as Sim;

use crate::common;
use common::{dut_card, epf_regs as regs, epf_script as script, text, tlpx};

fn ok(out: &Output) -> String {
    assert!(out.status.success(), "tlpx failed ({:?}): {}\n{}", out.status.code(), text(&out.stderr), text(&out.stdout));
    text(&out.stdout)
}

fn json(out: &Output) -> Value {
    serde_json::from_str(&ok(out)).expect("tlpx printed JSON")
}

/// zlib's CRC-32, bit by bit (independent of tlpx's table-free one only in being written
/// here; checked against the standard check value in `the_test_s_crc32_is_zlib_s`).
fn crc32(data: &[u8]) -> u32 {
    let mut crc = !0u32;
    for &b in data {
        crc ^= u32::from(b);
        for _ in 0..8 {
            let lsb = crc & 1;
            crc >>= 1;
            if lsb != 0 {
                crc ^= 0xEDB8_8320;
            }
        }
    }
    !crc
}

#[test]
fn the_test_s_crc32_is_zlib_s() {
    assert_eq!(crc32(b"123456789"), 0xCBF4_3926);
}

/// The step of a `slot run --json` document whose line, as it ran, starts with `prefix`.
fn step<'a>(doc: &'a Value, prefix: &str) -> &'a Value {
    doc["steps"]
        .as_array()
        .expect("steps")
        .iter()
        .find(|s| s["run"].as_str().is_some_and(|t| t.starts_with(prefix)))
        .unwrap_or_else(|| panic!("no step {prefix:?} in {doc:#}"))
}

fn hex_bytes(doc: &Value, prefix: &str) -> Vec<u8> {
    let hex = step(doc, prefix)["hex"].as_str().expect("hex");
    (0..hex.len()).step_by(2).map(|i| u8::from_str_radix(&hex[i..i + 2], 16).expect("hex byte")).collect()
}

fn run_script(dev: &str, file: &str, size: usize, extra: &[&str]) -> Output {
    let size_arg = format!("size={size}");
    let regs = regs();
    // A fixed seed: a failure replays with the same data.
    let mut args = vec!["--json", "slot", "run", "--regs", &regs, file, "--set", &size_arg, "--seed", "17"];
    args.extend_from_slice(extra);
    tlpx(dev, &args)
}

#[test]
fn pci_epf_test_in_the_slot_through_tlpx_reg_and_slot_run_with_the_spy() {
    let card = dut_card();
    let sim = Sim::start(&["--card", card.to_str().expect("utf-8 path")]);
    let dev = sim.selector();
    let regs = regs();

    // tlpx info: who is in the slot, where.
    let info = ok(&tlpx(&dev, &["info"]));
    assert!(info.contains("slot        pci_epf_test 1.0 ") && info.contains("placement bar0"), "{info}");
    let info = json(&tlpx(&dev, &["--json", "info"]));
    assert_eq!(info["slot"]["dut_name"], "pci_epf_test", "{info:#}");
    assert_eq!(info["slot"]["placement"], "bar0", "{info:#}");

    // tlpx reg: the DUT's register by name (its manifest's), and one of tlpx's own on the
    // relocated map.
    ok(&tlpx(&dev, &["reg", "--regs", &regs, "write", "pci_epf_test.magic", "0xA0A0A0A0"]));
    let magic = json(&tlpx(&dev, &["--json", "reg", "--regs", &regs, "read", "pci_epf_test.magic"]));
    assert_eq!(magic["value"], 0xA0A0_A0A0u64, "{magic:#}");
    ok(&tlpx(&dev, &["reg", "write", "ident.scratch", "0x5a5a1234"]));
    let scratch = json(&tlpx(&dev, &["--json", "reg", "read", "ident.scratch"]));
    assert_eq!(scratch["value"], 0x5a5a_1234u64, "{scratch:#}");
    // The DUT's magic is not tlpx's scratch: two registers, two values.
    let magic = json(&tlpx(&dev, &["--json", "reg", "--regs", &regs, "read", "pci_epf_test.magic"]));
    assert_eq!(magic["value"], 0xA0A0_A0A0u64, "{magic:#}");

    // COPY at four sizes (pcitest's 1 MB one too): COPY_SUCCESS, dst == src (bytes checked here), one MSI; the
    // 1025-byte one under the spy.
    let trace = sim.path("copy.tlpx");
    for size in [1usize, 1025, 4097, 1_024_001] {
        let len = size.to_string();
        let dump_src = format!("dump src {len}");
        let dump_dst = format!("dump dst {len}");
        let mut extra = vec!["-e", &dump_src, "-e", &dump_dst];
        let trace_arg = trace.display().to_string();
        if size == 1025 {
            extra.extend_from_slice(&["--spy", &trace_arg]);
        }
        let doc = json(&run_script(&dev, &script("copy.slot"), size, &extra));
        assert_eq!(doc["ok"], true, "{doc:#}");
        assert_eq!(step(&doc, "expect pci_epf_test.status.copy_success")["found"], 1, "{doc:#}");
        let (src, dst) = (hex_bytes(&doc, "dump src"), hex_bytes(&doc, "dump dst"));
        assert_eq!(src.len(), size);
        assert_eq!(src, dst, "size {size}: dst differs from src");
        assert!(size < 16 || src.iter().any(|&b| b != 0), "size {size}: the random source is not all zero");
        // The DUT's checksum after COPY is crc32_le(~0) of the data: the NOT of zlib's.
        assert_eq!(step(&doc, "expect pci_epf_test.checksum")["found"], u64::from(!crc32(&src)), "{doc:#}");
        assert_eq!(doc["msis"], 1, "{doc:#}");
        assert_eq!(doc["msis_not_waited_for"], 0, "{doc:#}");
        assert_eq!(doc["slot_counters"]["irqs"], 1, "{doc:#}");
        assert_eq!(doc["slot_counters"]["dma_read_bytes"], size as u64, "{doc:#}");
        assert_eq!(doc["slot_counters"]["dma_write_bytes"], size as u64, "{doc:#}");
        assert_eq!(doc["slot_counters"]["dma_errors"], 0, "{doc:#}");
        if size == 1025 {
            assert_eq!(doc["spy"]["records_lost"], 0, "{doc:#}");
            check_trace(&trace, &doc, size);
        }
    }

    // READ with the right checksum (the host's crc32_le(~0)) and a wrong one.
    let doc = json(&run_script(&dev, &script("read.slot"), 4097, &["-e", "dump src 4097"]));
    assert_eq!(step(&doc, "expect pci_epf_test.status.read_success")["found"], 1, "{doc:#}");
    let src = hex_bytes(&doc, "dump src");
    assert_eq!(step(&doc, "write pci_epf_test.checksum")["value"], u64::from(!crc32(&src)), "{doc:#}");
    let doc = json(&run_script(&dev, &script("read.slot"), 1025, &["--set", "checksum=0x12345678", "--set", "result=read_fail"]));
    assert_eq!(step(&doc, "expect pci_epf_test.status.read_fail")["found"], 1, "{doc:#}");
    assert_eq!(doc["msis"], 1, "{doc:#}");
    // The same wrong checksum against the default expectation: a failed check, exit 1.
    let out = run_script(&dev, &script("read.slot"), 1025, &["--set", "checksum=0x12345678"]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    let err = text(&out.stderr);
    assert!(err.contains("expected pci_epf_test.status.read_success = 1, found 0"), "{err}");

    // WRITE: the DUT's checksum is the CRC (crc32_le(~0)) this test computes of what arrived.
    let doc = json(&run_script(&dev, &script("write.slot"), 4100, &["-e", "dump dst 4100"]));
    assert_eq!(step(&doc, "expect pci_epf_test.status.write_success")["found"], 1, "{doc:#}");
    let dst = hex_bytes(&doc, "dump dst");
    assert!(dst.iter().any(|&b| b != 0), "the DUT wrote its pseudo-random bytes");
    assert_eq!(step(&doc, "expect pci_epf_test.checksum")["found"], u64::from(!crc32(&dst)), "{doc:#}");

    // The fault switch on: the copy's compare fails at the flipped byte (size/2), exit 1.
    ok(&tlpx(&dev, &["reg", "--regs", &regs, "write", "pci_epf_test.fault", "1"]));
    let out = run_script(&dev, &script("copy.slot"), 1025, &[]);
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("copy.slot:17 `compare src dst`: src and dst differ at offset 512 (0x200)"), "{err}");
    assert!(err.contains("1 of 1025 bytes differ"), "{err}");
    let doc: Value = serde_json::from_slice(&out.stdout).expect("JSON even when a check fails");
    assert_eq!(doc["ok"], false);
    assert_eq!(doc["failed"]["line"], "copy.slot:17 `compare src dst`", "{doc:#}");
    ok(&tlpx(&dev, &["reg", "--regs", &regs, "write", "pci_epf_test.fault", "0"]));
    let doc = json(&run_script(&dev, &script("copy.slot"), 1025, &[]));
    assert_eq!(doc["ok"], true, "the fault switch off again: {doc:#}");
}

/// The spy's trace of the 1025-byte copy: the DUT's reads attributed to it by the slot's
/// tags, their completions too, its writes covering dst, and the host's register writes
/// named by the DUT's register names.
fn check_trace(trace: &std::path::Path, doc: &Value, size: usize) {
    let csv = trace.with_extension("csv");
    let out = tlpx("sim", &["spy", "convert", &trace.display().to_string(), "--csv", &csv.display().to_string()]);
    ok(&out);
    let text = std::fs::read_to_string(&csv).expect("CSV written");
    let mut lines = text.lines();
    let head: Vec<&str> = lines.next().expect("header row").split(',').collect();
    let col = |name: &str| head.iter().position(|h| *h == name).unwrap_or_else(|| panic!("no column {name}"));
    let rows: Vec<Vec<&str>> = lines.map(|l| l.split(',').collect()).collect();
    let (kind, dir, tag, addr, payload, register, source) =
        (col("kind"), col("direction"), col("tag"), col("address"), col("payload_bytes"), col("register"), col("source"));
    let number = |s: &str| u64::from_str_radix(s.trim_start_matches("0x"), 16).expect("hex");
    let slot_tags = tlpx_regs::constants::SLOT_TAG_BASE..tlpx_regs::constants::SLOT_TAG_BASE + tlpx_regs::constants::SLOT_TAGS;
    let src_bus = step(doc, "buffer src")["bus_addr"].as_u64().expect("src bus address");
    let dst_bus = step(doc, "buffer dst")["bus_addr"].as_u64().expect("dst bus address");

    // The DUT's reads: MRd up with the slot's tags, attributed to it, covering src.
    let reads: Vec<&Vec<&str>> = rows.iter().filter(|r| r[kind].starts_with("MRd") && r[dir] == "up").collect();
    assert!(!reads.is_empty(), "no MRd of the card in the trace");
    for r in &reads {
        assert!(slot_tags.contains(&number(r[tag])), "a card read with tag {} (not the slot's): {r:?}", r[tag]);
        assert_eq!(r[source], "pci_epf_test", "{r:?}");
        let a = number(r[addr]);
        assert!((src_bus..src_bus + size as u64).contains(&a), "a read outside src: {r:?}");
    }
    // Their completions, attributed too, carrying at least the bytes of src.
    let cpl: Vec<&Vec<&str>> = rows.iter().filter(|r| r[kind] == "CplD" && r[dir] == "down").collect();
    assert!(cpl.iter().all(|r| r[source] == "pci_epf_test"), "{cpl:?}");
    let cpl_bytes: u64 = cpl.iter().map(|r| r[payload].parse::<u64>().expect("payload")).sum();
    assert!(cpl_bytes >= size as u64, "completions carried {cpl_bytes} of {size} bytes");
    // The DUT's writes: MWr up into dst, exactly its bytes.
    let writes: Vec<&Vec<&str>> = rows.iter().filter(|r| r[kind].starts_with("MWr") && r[dir] == "up").collect();
    for r in &writes {
        assert!((dst_bus..dst_bus + size as u64).contains(&number(r[addr])), "a card write outside dst: {r:?}");
        // The slot's DMA mover stamps the slot's first tag into its posted writes: attributed.
        assert_eq!(number(r[tag]), tlpx_regs::constants::SLOT_TAG_BASE, "{r:?}");
        assert_eq!(r[source], "pci_epf_test", "{r:?}");
    }
    let written: u64 = writes.iter().map(|r| r[payload].parse::<u64>().expect("payload")).sum();
    assert_eq!(written, size as u64, "the DUT's writes carry dst's bytes (byte enables trim the last DW)");
    // The host's accesses to the DUT by its register names.
    let host_writes: Vec<&str> = rows.iter().filter(|r| r[kind].starts_with("MWr") && r[dir] == "down").map(|r| r[register]).collect();
    for name in ["pci_epf_test.src_addr_lo", "pci_epf_test.dst_addr_lo", "pci_epf_test.size", "pci_epf_test.command"] {
        assert!(host_writes.contains(&name), "{name} not among the host's writes: {host_writes:?}");
    }
    let host_reads: Vec<&str> = rows.iter().filter(|r| r[kind].starts_with("MRd") && r[dir] == "down").map(|r| r[register]).collect();
    assert!(host_reads.contains(&"pci_epf_test.status"), "{host_reads:?}");
}
