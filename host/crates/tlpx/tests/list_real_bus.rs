//! `tlpx list` on this machine's real PCI bus (libpci over sysfs), checked function by
//! function against sysfs read directly: ids, the bound driver, and the PCI Express link
//! decoded here independently from the raw config bytes (a capability walk of its own).

use std::path::Path;
use std::process::Command;

fn sysfs_hex(dir: &Path, file: &str) -> u32 {
    let text = std::fs::read_to_string(dir.join(file)).unwrap_or_else(|e| panic!("{}: {e}", dir.join(file).display()));
    u32::from_str_radix(text.trim().trim_start_matches("0x"), 16).expect("hex in sysfs")
}

/// (negotiated width, negotiated speed code, max width, MPS bytes) of the PCI Express
/// capability, walking the capability list of `config` (None: no PCIe capability).
fn pcie_link(config: &[u8]) -> Option<(u64, u64, u64, u64)> {
    let status = u16::from_le_bytes([config[6], config[7]]);
    if status & 0x10 == 0 || config.len() < 256 {
        return None;
    }
    let mut at = usize::from(config[0x34] & 0xfc);
    let mut hops = 0;
    while at != 0 && hops < 48 {
        if config[at] == 0x10 {
            let word = |o: usize| u16::from_le_bytes([config[at + o], config[at + o + 1]]);
            let lnkcap = u32::from_le_bytes([config[at + 0x0c], config[at + 0x0d], config[at + 0x0e], config[at + 0x0f]]);
            let lnksta = word(0x12);
            let devctl = word(0x08);
            return Some((
                u64::from((lnksta >> 4) & 0x3f),
                u64::from(lnksta & 0xf),
                u64::from((lnkcap >> 4) & 0x3f),
                128u64 << ((devctl >> 5) & 0x7),
            ));
        }
        at = usize::from(config[at + 1] & 0xfc);
        hops += 1;
    }
    None
}

#[test]
fn list_shows_this_machines_functions_with_their_drivers_and_links() {
    let out = Command::new(env!("CARGO_BIN_EXE_tlpx"))
        .args(["--device", "sim:/nonexistent/tlpx.sock", "--json", "list"])
        .output()
        .expect("run tlpx");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    let system: Vec<&serde_json::Value> =
        v["functions"].as_array().expect("functions").iter().filter(|f| f["source"] == "system").collect();
    let sysfs = Path::new("/sys/bus/pci/devices");
    let mut addresses: Vec<String> = std::fs::read_dir(sysfs)
        .expect("this test needs /sys/bus/pci (a Linux machine with a PCI bus)")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    addresses.sort();
    let listed: Vec<String> = system.iter().map(|f| f["address"].as_str().expect("address").to_string()).collect();
    assert_eq!(listed, addresses, "tlpx list shows every function sysfs has, in bus order");
    // SAFETY: geteuid has no preconditions and cannot fail.
    let root = unsafe { libc::geteuid() } == 0;
    for f in system {
        let address = f["address"].as_str().expect("address");
        let dir = sysfs.join(address);
        assert_eq!(f["vendor_id"].as_str(), Some(format!("{:04x}", sysfs_hex(&dir, "vendor")).as_str()), "{f}");
        assert_eq!(f["device_id"].as_str(), Some(format!("{:04x}", sysfs_hex(&dir, "device")).as_str()), "{f}");
        let driver = std::fs::read_link(dir.join("driver")).ok().map(|l| l.file_name().expect("name").to_string_lossy().into_owned());
        assert_eq!(f["driver"].as_str().map(str::to_string), driver, "{f}");
        let config = std::fs::read(dir.join("config")).expect("config");
        let link = &f["link"];
        if !root && config.len() <= 64 {
            assert_eq!(link["kind"], "unknown", "{f}");
            continue;
        }
        match pcie_link(&config) {
            None => assert_eq!(link["kind"], "conventional_pci", "{address}: {f}"),
            Some((width, speed, max_width, mps)) => {
                assert_eq!(link["kind"], "pcie", "{address}: {f}");
                assert_eq!(link["width"].as_u64(), Some(width), "{address}: {f}");
                assert_eq!(link["generation"].as_u64(), Some(if (1..=6).contains(&speed) { speed } else { 0 }), "{f}");
                assert_eq!(link["max_width"].as_u64(), Some(max_width), "{f}");
                assert_eq!(link["max_payload_size"].as_u64(), Some(mps), "{f}");
            }
        }
    }
    // The text form has the link column.
    let out = Command::new(env!("CARGO_BIN_EXE_tlpx")).args(["--device", "sim:/nonexistent/tlpx.sock", "list"]).output().expect("run tlpx");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("LINK (status, capability, MPS, MRRS)") && text.contains("DRIVER"), "{text}");
}

fn tlpx_on(device: &str, args: &[&str]) -> (Option<i32>, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_tlpx")).arg("--device").arg(device).args(args).output().expect("run tlpx");
    (out.status.code(), String::from_utf8_lossy(&out.stderr).into_owned())
}

#[test]
fn a_real_function_tlpx_cannot_drive_gets_a_message_naming_the_fix() {
    let sysfs = Path::new("/sys/bus/pci/devices");
    let functions: Vec<String> = std::fs::read_dir(sysfs)
        .expect("this test needs /sys/bus/pci")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    assert!(!functions.is_empty(), "a PCI bus with at least one function");
    for address in &functions {
        let driver = std::fs::read_link(sysfs.join(address).join("driver"))
            .ok()
            .map(|l| l.file_name().expect("name").to_string_lossy().into_owned());
        if matches!(driver.as_deref(), Some("vfio-pci" | "litepcie")) {
            continue;
        }
        for command in [&["info"][..], &["selftest"][..], &["bw", "--op", "write"][..]] {
            let (code, err) = tlpx_on(address, command);
            // No backend reaches the device: the device side, as for a backend that fails.
            assert_eq!(code, Some(3), "{address} {command:?}: {err}");
            assert!(err.contains(&format!("tlpx vfio bind {address}")) && err.contains("docs/litepcie-driver.md"), "{err}");
            match &driver {
                Some(d) => assert!(err.contains(&format!("kernel's {d} driver")), "{err}"),
                None => assert!(err.contains("no driver bound"), "{err}"),
            }
            assert!(!err.contains("panicked"), "{err}");
        }
    }
    // Forcing the vfio backend: with no IOMMU (this VM) the message says so and how to turn it
    // on; with one, it says the function is not bound to vfio-pci.
    let address = &functions[0];
    let (code, err) = tlpx_on(&format!("vfio:{address}"), &["info"]);
    assert_eq!(code, Some(3), "{err}");
    let iommu_on = std::fs::read_dir("/sys/kernel/iommu_groups").map(|d| d.count() > 0).unwrap_or(false);
    if iommu_on {
        assert!(err.contains("vfio-pci"), "{err}");
    } else {
        assert!(err.contains("IOMMU is off") && err.contains("intel_iommu=on"), "{err}");
    }
    // LitePCIe's driver through a node that does not exist.
    let (code, err) = tlpx_on("litepcie:/dev/litepcie-absent", &["info"]);
    assert_eq!(code, Some(3), "{err}");
    assert!(err.contains("/dev/litepcie-absent") && err.contains("docs/litepcie-driver.md"), "{err}");
    // Malformed selectors.
    for bad in ["vfio:zz", "litepcie:", "0000:zz:00.0"] {
        let (code, err) = tlpx_on(bad, &["info"]);
        assert_eq!(code, Some(2), "{bad}: {err}");
        assert!(err.contains(bad.trim_end_matches(':')), "{bad}: {err}");
    }
}
