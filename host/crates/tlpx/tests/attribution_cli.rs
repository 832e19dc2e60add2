//! The spy names the source of every TLP, and a relocated card reads as the host sees it.
//!
//!   tlpx spy capture ◄── every TLP of: bw (generator), LitePCIe's loopback (selftest), the
//!   (live, --include-own)   loop, the interrupt timer, rule 30's batch, register accesses
//!        └─► spy convert --csv: `source` of every row (the card's requests by their block's
//!            tag, posted writes included; the host's requests and their completions: host)
//!
//! Before, the generator's and the other blocks' posted writes carried tag 0 and were
//! unattributed; the DUT's registers were named only in `slot run --spy`'s traces, and `reg
//! list` showed a relocated card's offsets as tlpx's map has them, not as the host sees them.

use std::collections::BTreeSet;
use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;
use tlpx_testkit::SimProcess as Sim;

use crate::common;
use common::{dut_card, epf_regs, text, tlpx, tlpx_bin};

fn ok(out: &Output) -> String {
    assert!(out.status.success(), "tlpx failed ({:?}): {}\n{}", out.status.code(), text(&out.stderr), text(&out.stdout));
    text(&out.stdout)
}

fn spawn(dev: &str, args: &[&str]) -> Child {
    Command::new(tlpx_bin()).arg("--device").arg(dev).args(args).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().expect("spawn")
}

/// Starts a capture into `trace` and waits until it owns the spy.
fn start_capture(dev: &str, trace: &Path, extra: &[&str]) -> Child {
    let mut args = vec!["spy", "capture", "-q", "--include-own", "--ring", "1048576", "-o", trace.to_str().expect("utf-8")];
    args.extend_from_slice(extra);
    let child = spawn(dev, &args);
    wait_spy_owned_by(dev, child.id());
    child
}

fn wait_spy_owned_by(dev: &str, pid: u32) {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let owners: Value = serde_json::from_str(&ok(&tlpx(dev, &["--json", "owners"]))).expect("JSON");
        if owners.as_array().expect("rows").iter().any(|r| r["block"] == "spy" && r["owner"]["pid"] == pid) {
            return;
        }
        assert!(Instant::now() < deadline, "the capture never took the spy");
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn stop_capture(dev: &str, capture: Child) {
    ok(&tlpx(dev, &["spy", "stop"]));
    let out = capture.wait_with_output().expect("capture ends");
    assert!(out.status.success(), "{}", text(&out.stderr));
}

/// The CSV rows of `trace` as (kind, register, source).
fn rows(trace: &Path) -> Vec<(String, String, String)> {
    let csv = trace.with_extension("csv");
    ok(&Command::new(tlpx_bin())
        .args(["spy", "convert", trace.to_str().expect("utf-8"), "--csv", csv.to_str().expect("utf-8")])
        .output()
        .expect("convert"));
    let text = std::fs::read_to_string(&csv).expect("CSV");
    let mut lines = text.lines();
    let head: Vec<&str> = lines.next().expect("header").split(',').collect();
    let col = |name: &str| head.iter().position(|c| *c == name).unwrap_or_else(|| panic!("no column {name}"));
    let (kind, register, source) = (col("kind"), col("register"), col("source"));
    lines
        .map(|l| {
            let cells: Vec<&str> = l.split(',').collect();
            (cells[kind].to_owned(), cells[register].to_owned(), cells[source].to_owned())
        })
        .collect()
}

#[test]
fn every_tlp_of_a_mixed_run_is_attributed_to_its_source() {
    let sim = Sim::start(&[]);
    let dev = sim.selector();
    let trace = sim.path("mixed.tlpx");
    let capture = start_capture(&dev, &trace, &[]);
    for args in [
        &["bw", "--op", "read,write", "--sizes", "256", "--count", "20"][..],
        &["selftest"][..],
        &["loop", "--iterations", "10", "--return", "register,dma"][..],
        &["irq", "--samples", "10"][..],
        &["rule30", "run", "--mode", "hw-batch", "--packets", "10"][..],
        &["reg", "write", "ident.scratch", "0x77"][..],
    ] {
        let out = tlpx(&dev, args);
        assert!(out.status.success(), "{args:?}: {}", text(&out.stderr));
    }
    stop_capture(&dev, capture);
    let rows = rows(&trace);
    let records: Vec<&(String, String, String)> = rows.iter().filter(|(k, _, _)| k != "Footer" && k != "Payload").collect();
    assert!(records.len() > 500, "{} records", records.len());
    let unattributed: Vec<_> = records.iter().filter(|(_, _, s)| s.is_empty()).take(5).collect();
    assert!(unattributed.is_empty(), "records without a source: {unattributed:?}");
    let sources: BTreeSet<&str> = records.iter().flat_map(|(_, _, s)| s.split('+')).collect();
    for want in ["host", "generator", "litepcie", "rt_loop", "irq_timer", "rule30", "spy", "software"] {
        assert!(sources.contains(want), "no TLP of {want}: {sources:?}");
    }
}

#[test]
fn a_relocated_card_reads_as_the_host_sees_it_and_every_capture_names_its_dut() {
    let sim = Sim::start(&["--card", dut_card().to_str().expect("utf-8")]);
    let dev = sim.selector();
    let regs = epf_regs();

    // reg list: BAR0 as the host sees this card: the DUT at 0, tlpx's map relocated.
    let list: Value = serde_json::from_str(&ok(&tlpx(&dev, &["--json", "reg", "--regs", &regs, "list"]))).expect("JSON");
    let row = |name: &str| list.as_array().expect("rows").iter().find(|r| r["name"] == name).expect(name).clone();
    assert_eq!(row("pci_epf_test.command")["bar0_offset"], 4);
    assert_eq!(row("ident.magic")["bar0_offset"], tlpx_regs::constants::RELOCATED_TLPX_BASE);
    assert_eq!(row("ident.magic")["offset"], 0, "the offset `reg read` takes is tlpx's own");
    let text_list = ok(&tlpx(&dev, &["reg", "--regs", &regs, "list", "pci_epf_test"]));
    assert!(text_list.contains("placement bar0") && text_list.contains("0x00004  pci_epf_test.command"), "{text_list}");

    // A capture with --regs names the DUT's registers in the trace, outside `slot run` too.
    let trace = sim.path("regs.tlpx");
    let capture = start_capture(&dev, &trace, &["--regs", &regs]);
    ok(&tlpx(&dev, &["reg", "--regs", &regs, "write", "pci_epf_test.magic", "0x5"]));
    ok(&tlpx(&dev, &["slot", "run", "--regs", &regs, "-e", "write pci_epf_test.size 64", "-e", "read pci_epf_test.size"]));
    stop_capture(&dev, capture);
    let rows = rows(&trace);
    let named: BTreeSet<&str> = rows.iter().map(|(_, r, _)| r.as_str()).filter(|r| r.starts_with("pci_epf_test.")).collect();
    assert!(named.contains("pci_epf_test.magic") && named.contains("pci_epf_test.size"), "{named:?}");
    assert!(rows.iter().filter(|(k, _, _)| k != "Footer" && k != "Payload").all(|(_, _, s)| !s.is_empty()), "every TLP attributed");

    // The TLP injector through the relocated card: a read of tlpx's ident.magic reaches it.
    use tlpx_device::backends::sim::SimDevice;
    let mut card = tlpx_device::card::Card::open(Box::new(SimDevice::connect(sim.socket()).expect("connect"))).expect("card");
    assert_eq!(card.tlpx_base(), tlpx_regs::constants::RELOCATED_TLPX_BASE);
    let config = card.device().config_read(0x10, 4).expect("BAR0");
    let bar0 = u32::from_le_bytes([config[0], config[1], config[2], config[3]]) & !0xF;
    let injector = card.device().try_as_tlp_injector().expect("the simulator injects");
    // MRd32, 1 DW, tag 0x21, of BAR0 + ident.magic (tlpx's offset 0).
    let cpl = injector
        .inject_tlp(&[0x0000_0001, 0x0000_210f, bar0 + tlpx_regs::ident::MAGIC.offset as u32], Duration::from_micros(100))
        .expect("inject")
        .expect("a completion");
    assert_eq!(u64::from(cpl[3]), tlpx_regs::constants::IDENT_MAGIC, "{cpl:x?}");
}
