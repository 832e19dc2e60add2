//! One owner for the accelerator slot, end to end: the card with Linux's pci_epf_test in its
//! slot (placement bar0), the real tlpx binary and simulator.
//!
//!   tlpx slot run A ──claim──► slot.lease ◄──claim── tlpx slot run B: "busy: ... PID A ..."
//!   A killed mid-COPY ──► B finds A gone: releases its lease (the slot fences the DUT's DMA
//!                          until it is quiet), waits for it, runs its own COPY on clean state
//!   tlpx bw, loop, irq, selftest ──set/clear their own MSI bit──► the slot's stays on for a
//!                          stock driver of the DUT, which claims nothing
//!
//! Before the slot had a lease, two sessions took each other's interrupts and the second
//! poisoned later ones, a killed session's DUT kept copying into freed buffers, and any run of
//! the generator (or the loop, the timer, LitePCIe's DMA) turned the slot's interrupt off
//! until the card's reset.

use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;
use tlpx_device::backends::sim::SimDevice;
use tlpx_device::{Device, Width};
use tlpx_testkit::SimProcess as Sim;

use crate::common;
use common::{dut_card, epf_regs, epf_script, text, tlpx, tlpx_bin};

fn sim() -> Sim {
    let card = dut_card();
    Sim::start(&["--card", card.to_str().expect("utf-8 path")])
}

fn ok(out: &Output) -> String {
    assert!(out.status.success(), "tlpx failed ({:?}): {}\n{}", out.status.code(), text(&out.stderr), text(&out.stdout));
    text(&out.stdout)
}

fn json(out: &Output) -> Value {
    serde_json::from_str(&ok(out)).expect("tlpx printed JSON")
}

/// `tlpx reg read NAME` (with the DUT's names) as a number.
fn reg(dev: &str, name: &str) -> u64 {
    let regs = epf_regs();
    json(&tlpx(dev, &["--json", "reg", "--regs", &regs, "read", name]))["value"].as_u64().expect("a value")
}

/// A COPY of `size` bytes by copy.slot, with its source and destination dumped.
fn copy_args(size: usize, dumps: bool) -> Vec<String> {
    let regs = epf_regs();
    let mut args: Vec<String> =
        ["--json", "slot", "run", "--regs", &regs, &epf_script("copy.slot"), "--set", &format!("size={size}"), "--seed", "5"]
            .iter()
            .map(|s| s.to_string())
            .collect();
    if dumps {
        for line in [format!("dump src {size}"), format!("dump dst {size}")] {
            args.push("-e".into());
            args.push(line);
        }
    }
    args
}

fn copy(dev: &str, size: usize) -> Value {
    let args = copy_args(size, true);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let doc = json(&tlpx(dev, &args));
    assert_eq!(doc["ok"], true, "{doc:#}");
    let hex = |prefix: &str| {
        doc["steps"].as_array().expect("steps").iter().find(|s| s["run"].as_str().is_some_and(|t| t.starts_with(prefix))).expect("dump")
            ["hex"]
            .as_str()
            .expect("hex")
            .to_string()
    };
    assert_eq!(hex("dump src"), hex("dump dst"), "size {size}: dst differs from src");
    assert_eq!(doc["msis"], 1, "{doc:#}");
    doc
}

fn spawn(dev: &str, args: &[String]) -> Child {
    Command::new(tlpx_bin()).arg("--device").arg(dev).args(args).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().expect("spawn")
}

/// Waits (wall time, bounded) until `block` is owned by `pid` and, with `busy`, the DUT works.
fn wait_owned(dev: &str, block: &str, pid: u32, busy: bool) {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let owners = json(&tlpx(dev, &["--json", "owners"]));
        let owner = owners.as_array().expect("rows").iter().find(|r| r["block"] == block).and_then(|r| r["owner"]["pid"].as_u64());
        if owner == Some(u64::from(pid)) && (!busy || reg(dev, "slot.status.busy") == 1) {
            return;
        }
        assert!(Instant::now() < deadline, "{block} never became PID {pid}'s (busy: {busy}): {owners}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn a_second_session_is_refused_naming_the_first_and_no_later_session_inherits_anything() {
    let sim = sim();
    let dev = sim.selector();
    let first = spawn(&dev, &copy_args(2_000_000, false));
    wait_owned(&dev, "slot", first.id(), false);
    let second = tlpx(&dev, &["slot", "run", "--regs", &epf_regs(), &epf_script("copy.slot"), "--set", "size=1025"]);
    assert_eq!(second.status.code(), Some(3), "{}", text(&second.stderr));
    let err = text(&second.stderr);
    assert!(err.contains("busy: the accelerator slot is owned by PID") && err.contains(&first.id().to_string()), "{err}");
    assert!(err.contains("--force"), "what overrides it is named: {err}");
    let out = first.wait_with_output().expect("first session");
    let doc: Value = serde_json::from_slice(&out.stdout).expect("JSON");
    assert_eq!(doc["ok"], true, "the first session ran undisturbed: {doc:#} {}", text(&out.stderr));
    assert_eq!(doc["msis"], 1, "{doc:#}");
    // Every later session alone is right: nothing of the refused one was left on the card.
    for size in [1025, 4097] {
        copy(&dev, size);
    }
}

#[test]
fn a_session_killed_mid_copy_is_fenced_and_the_next_one_copies_right_on_a_quiet_dut() {
    let sim = sim();
    let dev = sim.selector();
    let victim = spawn(&dev, &copy_args(4_000_000, false));
    wait_owned(&dev, "slot", victim.id(), true);
    // SAFETY: kill(2) on our own child's PID.
    assert_eq!(unsafe { libc::kill(victim.id() as libc::pid_t, libc::SIGKILL) }, 0);
    let gone = victim.wait_with_output().expect("killed");
    assert!(!gone.status.success());
    assert_eq!(reg(&dev, "slot.status.busy"), 1, "the killed session's COPY is still running");
    let fenced_before = reg(&dev, "slot.dma_fenced");
    let args = copy_args(1025, true);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let out = tlpx(&dev, &args);
    let err = text(&out.stderr);
    assert!(err.contains("the accelerator slot was left running by PID") && err.contains("(no longer running)"), "{err}");
    let doc: Value = serde_json::from_str(&ok(&out)).expect("JSON");
    assert_eq!(doc["ok"], true, "{doc:#}");
    assert!(reg(&dev, "slot.dma_fenced") > fenced_before, "the dead session's DMA was fenced");
    // The DUT is quiet and stays so: nothing of the dead session's command moves.
    assert_eq!(reg(&dev, "slot.status.busy"), 0);
    let moved = (reg(&dev, "slot.dma_read_bytes"), reg(&dev, "slot.dma_write_bytes"));
    copy(&dev, 1025);
    let after = (reg(&dev, "slot.dma_read_bytes"), reg(&dev, "slot.dma_write_bytes"));
    assert_eq!(((after.0 - moved.0) & 0xFFFF_FFFF, (after.1 - moved.1) & 0xFFFF_FFFF), (1025, 1025), "only the new copy moved data");
}

#[test]
fn the_slots_msi_enable_survives_every_driver_and_a_stock_drivers_interrupt_arrives() {
    let sim = sim();
    let dev = sim.selector();
    let slot_bit = 1u64 << tlpx_regs::constants::MSI_SLOT;
    let enable = |dev: &str| reg(dev, "pcie_msi.enable");
    assert_eq!(enable(&dev), slot_bit, "on at reset");
    for args in [
        &["bw", "--op", "read", "--sizes", "256", "--count", "20"][..],
        &["bw", "--op", "write", "--sizes", "256", "--count", "20"][..],
        &["loop", "--iterations", "20"][..],
        &["irq", "--samples", "20"][..],
        &["selftest"][..],
    ] {
        let out = tlpx(&dev, args);
        assert!(out.status.success(), "{args:?}: {}", text(&out.stderr));
        assert_eq!(enable(&dev) & slot_bit, slot_bit, "after {args:?} the slot's MSI bit is off: {:#x}", enable(&dev));
    }
    // A stock driver of the DUT (pci_endpoint_test) claims nothing: it writes the DUT's
    // registers at BAR0 0 and waits for the card's MSI.
    let mut raw = SimDevice::connect(sim.socket()).expect("connect");
    // The offsets and bits of Linux's drivers/misc/pci_endpoint_test.c, as that driver has them.
    const IRQ_TYPE: u64 = 0x24;
    const IRQ_NUMBER: u64 = 0x28;
    const COMMAND: u64 = 0x04;
    const STATUS: u64 = 0x08;
    raw.bar_write(0, IRQ_TYPE, Width::W32, 1).expect("irq_type MSI");
    raw.bar_write(0, IRQ_NUMBER, Width::W32, 1).expect("irq_number 1");
    raw.bar_write(0, COMMAND, Width::W32, 1 << 1).expect("command RAISE_MSI_IRQ");
    let irq = raw.wait_interrupt(1, Duration::from_millis(1)).expect("wait");
    assert!(irq.is_some(), "the stock driver's interrupt did not arrive (pcie_msi.enable {:#x})", enable(&dev));
    assert_eq!(raw.bar_read(0, STATUS, Width::W32).expect("status") & (1 << 6), 1 << 6, "IRQ_RAISED");
}

#[test]
fn a_session_leaves_the_msi_enable_as_it_found_it_and_allocates_before_it_writes() {
    let sim = Sim::start(&["--card", dut_card().to_str().expect("utf-8"), "--host-mem-mib", "16"]);
    let dev = sim.selector();
    let regs = epf_regs();
    let slot_bit = tlpx_regs::constants::MSI_SLOT;
    ok(&tlpx(&dev, &["reg", "write", "pcie_msi.enable_clear", &(1u64 << slot_bit).to_string()]));
    let doc = copy(&dev, 1025);
    let notes = doc["notes"].to_string();
    assert!(notes.contains("the slot's bit off: turned on for the session"), "{notes}");
    assert_eq!(reg(&dev, "pcie_msi.enable") >> slot_bit & 1, 0, "the session turned it back off");
    ok(&tlpx(&dev, &["reg", "write", "pcie_msi.enable_set", &(1u64 << slot_bit).to_string()]));
    // A buffer the host cannot give: the run ends before anything reaches the card, its
    // first line's write included.
    ok(&tlpx(&dev, &["reg", "--regs", &regs, "write", "pci_epf_test.magic", "0x11"]));
    let out = tlpx(&dev, &["slot", "run", "--regs", &regs, "-e", "write pci_epf_test.magic 0x22", "-e", "buffer big 64MiB zero"]);
    let err = text(&out.stderr);
    // The simulator's refusal names the size and its host memory: bad input, exit 2.
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("-e 2 `buffer big 64MiB zero`") && err.contains("before anything was written to the card"), "{err}");
    assert_eq!(reg(&dev, "pci_epf_test.magic"), 0x11, "the first line did not run");
    let owners = json(&tlpx(&dev, &["--json", "owners"]));
    assert!(owners.as_array().expect("rows").iter().all(|r| r["owner"].is_null()), "nothing left owned: {owners}");
}

#[test]
fn register_writes_into_the_dut_honour_the_slots_owner_and_a_command_started_by_hand_is_fenced() {
    let sim = sim();
    let dev = sim.selector();
    let regs = epf_regs();
    let session = spawn(&dev, &copy_args(2_000_000, false));
    wait_owned(&dev, "slot", session.id(), false);
    let out = tlpx(&dev, &["reg", "--regs", &regs, "write", "pci_epf_test.magic", "7"]);
    assert_eq!(out.status.code(), Some(3));
    let err = text(&out.stderr);
    assert!(err.contains("refusing to write pci_epf_test.magic into the accelerator slot") && err.contains("busy"), "{err}");
    let out = session.wait_with_output().expect("session");
    assert!(out.status.success(), "{}", text(&out.stderr));
    // Free again: a command written by hand runs with this process as the slot's owner, and
    // ends fenced when the command does (its buffers are nobody's).
    for (name, value) in [("pci_epf_test.size", "20000"), ("pci_epf_test.src_addr_lo", "0"), ("pci_epf_test.dst_addr_lo", "0")] {
        ok(&tlpx(&dev, &["reg", "--regs", &regs, "write", name, value]));
    }
    let fenced = reg(&dev, "slot.dma_fenced");
    let out = tlpx(&dev, &["reg", "--regs", &regs, "write", "pci_epf_test.command.copy", "1"]);
    let err = text(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(err.contains("the accelerator slot was working when this command ended") && err.contains("fenced its DMA"), "{err}");
    // Its DMA refused, the DUT ends the command at once (card time runs while tlpx waits).
    ok(&tlpx(&dev, &["reg", "watch", "--count", "2", "--interval", "1ms", "slot.status"]));
    let deadline = Instant::now() + Duration::from_secs(60);
    while reg(&dev, "slot.status.busy") == 1 {
        assert!(Instant::now() < deadline, "the fenced DUT never became quiet");
    }
    assert!(reg(&dev, "slot.dma_fenced") > fenced);
    copy(&dev, 1025);
}
