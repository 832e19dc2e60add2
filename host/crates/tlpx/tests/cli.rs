//! End-to-end tests of the tlpx CLI against a real tlpx-sim running the Verilated card.
//!
//!   tlpx (this crate's binary) ──Unix socket + shared memory──► tlpx-sim ──► libtlpxcard.so
//!
//! Each test starts its own simulator on a private socket, so tests run in parallel.

use std::path::Path;
use std::process::Output;
use tlpx_testkit::SimProcess as Sim;

use crate::common;
use common::tlpx;

fn json(out: &Output) -> serde_json::Value {
    assert!(out.status.success(), "tlpx failed: {}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).expect("tlpx printed JSON")
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn list_shows_the_simulated_card_and_this_machines_bus() {
    let sim = Sim::start(&[]);
    let v = json(&tlpx(&sim.selector(), &["--json", "list"]));
    let functions = v["functions"].as_array().expect("functions");
    let cards: Vec<_> = functions.iter().filter(|f| f["tlpx_card"] == true).collect();
    assert_eq!(cards.len(), 1, "{v}");
    assert_eq!(cards[0]["source"], "sim");
    assert_eq!(cards[0]["address"], "0000:01:00.0");
    assert_eq!(cards[0]["selector"], sim.selector());
    let system = functions.iter().filter(|f| f["source"] == "system").count();
    let sysfs = Path::new("/sys/bus/pci/devices");
    if sysfs.exists() {
        assert_eq!(system, std::fs::read_dir(sysfs).expect("sysfs").count());
    }
}

#[test]
fn info_reports_identity_and_the_link_libpci_reads() {
    let sim = Sim::start(&["--data-width", "64", "--gen", "3", "--lanes", "4", "--mps", "128", "--mrrs", "256"]);
    let v = json(&tlpx(&sim.selector(), &["--json", "info"]));
    assert_eq!(v["identity"]["magic"], 0x544C_5058);
    assert_eq!(v["identity"]["map_hash"], tlpx_regs::MAP_HASH);
    assert_eq!(v["identity"]["data_width"], 64);
    assert_eq!(v["pcie"]["generation"], 3);
    assert_eq!(v["pcie"]["link_width"], 4);
    assert_eq!(v["pcie"]["max_payload_size"], 128);
    assert_eq!(v["pcie"]["max_read_request_size"], 256);
    assert_eq!(v["simulated"]["link"]["lanes"], 4);
    let text = tlpx(&sim.selector(), &["info"]);
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(text.contains("Gen3 x4"), "{text}");
    assert!(text.contains("simulated   yes"), "{text}");
}

/// The simulated card presents its board's hard IP (tlpx-sim --board): the KCU105's
/// pcie3_ultrascale supports a 512-byte payload, not the 4096 bytes tlpx-sim once claimed, and
/// `info` names the board both ways.
#[test]
fn info_names_the_board_whose_hard_ip_the_simulated_card_presents() {
    let sim = Sim::start(&["--data-width", "256", "--board", "kcu105", "--gen", "3", "--lanes", "8"]);
    let v = json(&tlpx(&sim.selector(), &["--json", "info"]));
    assert_eq!(v["pcie"]["max_payload_supported"], 512, "{v}");
    assert_eq!((v["simulated"]["board"].as_str(), v["simulated"]["hard_ip"].as_str()), (Some("kcu105"), Some("pcie3_ultrascale")), "{v}");
    let text = tlpx(&sim.selector(), &["info"]);
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(text.contains("(supports 512 B)") && text.contains("hard IP of kcu105 (pcie3_ultrascale)"), "{text}");
}

#[test]
fn selftest_passes_on_the_simulated_card() {
    let sim = Sim::start(&[]);
    let out = tlpx(&sim.selector(), &["--json", "selftest", "--dma-bytes", "8192"]);
    let v = json(&out);
    assert_eq!(v["passed"], true, "{v}");
    let checks = v["checks"].as_array().expect("checks");
    let names: Vec<_> = checks.iter().map(|c| c["name"].as_str().unwrap_or("")).collect();
    assert_eq!(names, ["scratch", "counter", "msi", "ur", "dma-loopback"]);
    assert!(checks.iter().all(|c| c["result"] == "pass"), "{v}");
}

#[test]
fn no_simulator_running_is_a_clear_error() {
    let dir = tempfile::tempdir().expect("temp dir");
    let selector = format!("sim:{}", dir.path().join("absent.sock").display());
    for cmd in [&["info"][..], &["selftest"][..]] {
        let out = tlpx(&selector, cmd);
        assert_eq!(out.status.code(), Some(3), "the device side fails: 3");
        let err = stderr(&out);
        assert!(err.contains("no simulated card at") && err.contains("absent.sock"), "{err}");
        assert!(err.contains("tlpx-sim"), "{err}");
        assert!(!err.contains("panicked"), "{err}");
    }
}

#[test]
fn unknown_device_selector_is_rejected() {
    for bad in ["bogus", "sim:", "0000:zz:00.0"] {
        let out = tlpx(bad, &["info"]);
        assert_eq!(out.status.code(), Some(2), "{bad}");
        let err = stderr(&out);
        assert!(err.contains("device selector") || err.contains("PCI address"), "{bad}: {err}");
    }
}

#[test]
fn pci_address_without_backend_names_the_limitation() {
    let out = tlpx("0000:1f:1f.7", &["info"]);
    assert_eq!(out.status.code(), Some(3), "no such device: the device side");
    let err = stderr(&out);
    assert!(err.contains("0000:1f:1f.7") || err.contains("1f:1f.7"), "{err}");
}

#[test]
fn card_with_unknown_register_map_is_refused() {
    // The simulator flips bit 0 of ident.map_hash (BAR0 0xc) in every read completion.
    let sim = Sim::start(&["--corrupt-read", "0xc:0x1"]);
    for cmd in [&["info"][..], &["selftest"][..]] {
        let out = tlpx(&sim.selector(), cmd);
        assert_eq!(out.status.code(), Some(3), "the card is refused: 3");
        let err = stderr(&out);
        let found = format!("0x{:08x}", tlpx_regs::MAP_HASH ^ 1);
        assert!(err.contains("register map") && err.contains(&found), "{err}");
    }
}

#[test]
fn bad_arguments_name_the_value() {
    let sim = Sim::start(&[]);
    let out = tlpx(&sim.selector(), &["selftest", "--dma-bytes", "6"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("--dma-bytes must be a multiple of 4") && stderr(&out).contains(" 6"));
    let out = tlpx(&sim.selector(), &["bench", "mmio", "--count", "0"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("--count") && stderr(&out).contains("1..=10000000"), "{}", stderr(&out));
}

#[test]
fn bench_mmio_reports_percentiles() {
    let sim = Sim::start(&[]);
    let v = json(&tlpx(&sim.selector(), &["--json", "bench", "mmio", "--count", "200"]));
    assert_eq!(v["count"], 200);
    let r = &v["read_wall_ns"];
    assert!(r["min"].as_f64() <= r["median"].as_f64() && r["median"].as_f64() <= r["max"].as_f64());
    assert!(v["read_card_cycles_mean"].as_f64().unwrap_or(0.0) > 5.0);
}

#[test]
fn selftest_msi_latency_is_taken_on_one_clock() {
    // The path: the trigger write's trip over the modelled link, the card's software IRQ to
    // LitePCIe's MSI, the MSI's trip back. Measured here directly, both ends in the
    // simulator's cycles, and by `tlpx selftest`: the two must agree. (Before, selftest took
    // the start from the card's timebase, which starts after reset, and the end from the
    // simulator's count, which includes it: about twice the real figure.)
    use tlpx_device::backends::sim::SimDevice;
    use tlpx_device::{Device, Width};
    use tlpx_regs::{constants, ident, pcie_msi};
    let sim = Sim::start(&[]);
    let v = json(&tlpx(&sim.selector(), &["--json", "selftest"]));
    let msi = v["checks"].as_array().expect("checks").iter().find(|c| c["name"] == "msi").expect("msi check").clone();
    assert_eq!(msi["result"], "pass", "{msi}");
    let detail = msi["detail"].as_str().expect("detail");
    let reported: f64 = detail
        .split_whitespace()
        .zip(detail.split_whitespace().skip(1))
        .find(|(_, unit)| *unit == "card")
        .and_then(|(n, _)| n.parse().ok())
        .unwrap_or_else(|| panic!("no `N card cycles` in {detail:?}"));
    assert!(detail.contains("of card time, virtual time"), "{detail}");
    let mut dev = SimDevice::connect(sim.socket()).expect("connect");
    let bit = 1u64 << constants::MSI_SOFTWARE;
    dev.bar_write(0, pcie_msi::CLEAR.offset, Width::W32, bit).expect("clear");
    dev.bar_write(0, pcie_msi::ENABLE.offset, Width::W32, bit).expect("enable");
    // As selftest: the writes before the trigger have arrived (a read) when the clock starts.
    dev.bar_read(0, pcie_msi::ENABLE.offset, Width::W32).expect("flush");
    let before = dev.card_cycle().expect("cycle");
    dev.bar_write(0, ident::SOFTWARE_IRQ.offset, Width::W32, 1).expect("trigger");
    let irq = dev.wait_interrupt(u32::MAX, std::time::Duration::from_millis(1)).expect("wait").expect("an MSI");
    let direct = (irq.card_cycle.expect("the sim stamps interrupts") - before) as f64;
    assert!((reported - direct).abs() <= 2.0, "selftest says {reported} cycles, the direct measurement {direct}: {detail}");
}

/// The card's part of selftest's MSI latency (trigger write at the card to the MSI request,
/// from the card's own stamps) is the same whatever clock the host's part ran in; in live
/// time (a concurrent client holding it, as a capture does) the figure says so, since the
/// host's wake-up is then counted in card cycles.
#[test]
fn selftest_says_its_time_mode_and_measures_the_cards_part_apart() {
    use tlpx_device::backends::sim::SimDevice;
    use tlpx_device::Device;
    let sim = Sim::start(&[]);
    let card_part = |v: &serde_json::Value| -> (u64, String) {
        let msi = v["checks"].as_array().expect("checks").iter().find(|c| c["name"] == "msi").expect("msi").clone();
        assert_eq!(msi["result"], "pass", "{msi}");
        let detail = msi["detail"].as_str().expect("detail").to_string();
        let n = detail
            .split("its own stamps): ")
            .nth(1)
            .and_then(|t| t.split_whitespace().next())
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("no card part in {detail:?}"));
        (n, detail)
    };
    let (virtual_part, detail) = card_part(&json(&tlpx(&sim.selector(), &["--json", "selftest"])));
    assert!(detail.contains("virtual time") && virtual_part > 0, "{detail}");
    // Another client holds live time while selftest runs.
    let mut holder = SimDevice::connect(sim.socket()).expect("connect");
    holder.set_live(true).expect("live time");
    let (live_part, detail) = card_part(&json(&tlpx(&sim.selector(), &["--json", "selftest"])));
    holder.set_live(false).expect("virtual time again");
    assert!(detail.contains("in live time") && detail.contains("wake-up"), "{detail}");
    assert_eq!(live_part, virtual_part, "the card's part is the card's, whatever the host's clock: {detail}");
}

/// A simulator that dies during selftest is a failure of the card's side: exit 3, as for every
/// command (it was 1, a check that ran and failed).
#[test]
fn selftest_exits_3_when_the_simulator_dies() {
    use std::io::{BufRead, BufReader};
    let sim = Sim::start(&[]);
    let mut child = std::process::Command::new(common::tlpx_bin())
        .args(["--device", &sim.selector(), "selftest", "--dma-bytes", "16777212"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("run tlpx");
    let stdout = child.stdout.take().expect("stdout");
    let mut lines = BufReader::new(stdout).lines();
    // The DMA loopback of 16 MiB comes last and takes the longest: the simulator dies in it.
    for line in lines.by_ref() {
        if line.expect("line").starts_with("ur ") {
            break;
        }
    }
    drop(sim);
    let rest: Vec<String> = lines.map_while(Result::ok).collect();
    let out = child.wait_with_output().expect("tlpx ends");
    assert_eq!(out.status.code(), Some(3), "{rest:?} {}", stderr(&out));
    assert!(rest.iter().any(|l| l.starts_with("dma-loopback") && l.contains("FAIL")), "{rest:?}");
}
