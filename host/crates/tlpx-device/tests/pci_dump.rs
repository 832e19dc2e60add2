//! Config space -> render_dump -> file -> libpci's dump method -> decoders, and the same
//! file through the real `lspci -F`.
//!
//! ```text
//!  hand-built config ──render_dump──► dump file ──libpci "dump"──► scan() ──► decoders
//!                                          └──────► lspci -F <file> -vv / -vmm ──► text
//! ```
//!
//! The card under test looks like the tlpx card: 1234:7c01, class 118000, BAR0 32-bit
//! memory at 0xf0000000, MSI at 0x50 (64-bit, 4 vectors capable, 2 enabled), PCIe
//! capability at 0x70 (endpoint, link 5 GT/s x4 of 5 GT/s x8, MPS 256, MRRS 512). Malformed
//! dumps must come back as errors naming the file, with the test process still alive.

use std::io::Write as _;
use std::path::Path;
use std::process::Command;

use tlpx_device::pci::{self, render_dump, Bar, Capability, MsiInfo, PciSource};
use tlpx_device::DeviceError;

fn put16(c: &mut [u8], off: usize, v: u16) {
    c[off..off + 2].copy_from_slice(&v.to_le_bytes());
}

fn put32(c: &mut [u8], off: usize, v: u32) {
    c[off..off + 4].copy_from_slice(&v.to_le_bytes());
}

/// The tlpx-like card's config space, `len` bytes (256 or 4096).
fn card_config(len: usize) -> Vec<u8> {
    let mut c = vec![0u8; len];
    put16(&mut c, 0x00, 0x1234); // Vendor ID
    put16(&mut c, 0x02, 0x7c01); // Device ID
    put16(&mut c, 0x04, 0x0006); // Command: memory space, bus master
    put16(&mut c, 0x06, 0x0010); // Status: capabilities list
    c[0x08] = 0x01; // Revision ID
    c[0x09] = 0x00; // Class: prog-if
    c[0x0a] = 0x80; //        subclass
    c[0x0b] = 0x11; //        base class
    c[0x0e] = 0x00; // Header type 0
    put32(&mut c, 0x10, 0xf000_0000); // BAR0: 32-bit non-prefetchable memory
    put16(&mut c, 0x2c, 0x1234); // Subsystem vendor
    put16(&mut c, 0x2e, 0x0001); // Subsystem
    c[0x34] = 0x50; // Capabilities pointer
    c[0x3d] = 0x01; // Interrupt pin INTA

    // MSI at 0x50: enabled, 4 vectors capable (log2 2), 2 enabled (log2 1), 64-bit.
    c[0x50] = 0x05;
    c[0x51] = 0x70;
    put16(&mut c, 0x52, 1 | 2 << 1 | 1 << 4 | 1 << 7);
    put32(&mut c, 0x54, 0xfee0_0000);
    put32(&mut c, 0x58, 0x0000_0000);
    put16(&mut c, 0x5c, 0x4021);

    // PCI Express capability at 0x70, version 2, endpoint.
    c[0x70] = 0x10;
    c[0x71] = 0x00;
    put16(&mut c, 0x72, 0x0002);
    put32(&mut c, 0x74, 0x0000_8002); // DevCap: MPS supported 512, role-based error reporting
    put16(&mut c, 0x78, 1 << 5 | 2 << 12 | 1 << 4); // DevCtl: MPS 256, MRRS 512, relaxed ordering
    put32(&mut c, 0x7c, 2 | 8 << 4); // LnkCap: 5 GT/s, x8
    put16(&mut c, 0x82, 2 | 4 << 4); // LnkSta: 5 GT/s, x4
    put32(&mut c, 0x9c, 0b110); // LnkCap2: supported speeds 2.5 and 5 GT/s
    put16(&mut c, 0xa0, 2); // LnkCtl2: target speed 5 GT/s
    c
}

fn write_temp(text: &str) -> tempfile::NamedTempFile {
    let mut f = tempfile::NamedTempFile::new().expect("create a temporary file");
    f.write_all(text.as_bytes()).expect("write the dump");
    f.flush().expect("flush the dump");
    f
}

fn lspci(args: &[&str], dump: &Path) -> String {
    let out = Command::new("lspci").arg("-F").arg(dump).args(args).output().expect("run lspci (apt-get install pciutils)");
    assert!(out.status.success(), "lspci failed: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).expect("lspci prints UTF-8")
}

#[test]
fn pci_dump_of_the_card_scans_and_decodes_every_field() {
    let config = card_config(256);
    let file = write_temp(&render_dump(0, 3, 0, 0, &config));
    let functions = pci::scan(&PciSource::DumpFile(file.path().to_path_buf())).expect("scan the dump");
    assert_eq!(functions.len(), 1);
    let f = &functions[0];

    assert_eq!(f.address(), "0000:03:00.0");
    assert_eq!((f.domain, f.bus, f.device, f.function), (0, 3, 0, 0));
    assert_eq!((f.vendor_id, f.device_id), (0x1234, 0x7c01));
    assert_eq!(f.class, 0x118000);
    assert_eq!(f.revision, 1);
    assert_eq!((f.subsystem_vendor_id, f.subsystem_id), (0x1234, 0x0001));
    assert_eq!(f.config, config, "config bytes survive the round trip");
    assert_eq!(f.class_name.as_deref(), Some("Signal processing controller"));

    assert_eq!(
        f.capabilities(),
        vec![Capability { id: 0x05, offset: 0x50, name: "MSI" }, Capability { id: 0x10, offset: 0x70, name: "PCI Express" },]
    );
    assert!(f.extended_capabilities().is_empty(), "256-byte dump has no extended space");

    let p = f.pcie().expect("PCIe capability");
    assert_eq!(p.device_type, 0);
    assert_eq!(p.device_type_name(), "Endpoint");
    assert_eq!(p.generation, 2);
    assert_eq!(p.link_speed_gt_s, 5.0);
    assert_eq!(p.link_width, 4);
    assert_eq!(p.max_link_speed_gt_s, 5.0);
    assert_eq!(p.max_link_width, 8);
    assert_eq!(p.max_payload_supported, 512);
    assert_eq!(p.max_payload_size, 256);
    assert_eq!(p.max_read_request_size, 512);

    assert_eq!(
        f.msi(),
        Some(MsiInfo {
            enabled: true,
            is_64bit: true,
            multiple_message_capable: 4,
            multiple_message_enabled: 2,
            address: 0xfee0_0000,
            data: 0x4021,
        })
    );
    assert_eq!(f.bars(), vec![Bar { index: 0, address: 0xf000_0000, is_io: false, is_64bit: false, prefetchable: false }]);
}

#[test]
fn pci_dump_of_the_card_is_readable_by_lspci() {
    let file = write_temp(&render_dump(0, 3, 0, 0, &card_config(256)));
    let text = lspci(&["-vv"], file.path());
    let lnksta = text.lines().find(|l| l.contains("LnkSta:")).unwrap_or_else(|| panic!("no LnkSta in:\n{text}"));
    assert!(lnksta.contains("5GT/s"), "{lnksta}");
    assert!(lnksta.contains("Width x4"), "{lnksta}");
    assert!(text.contains("Region 0: Memory at f0000000 (32-bit, non-prefetchable)"), "{text}");
    assert!(text.contains("MSI: Enable+ Count=2/4 Maskable- 64bit+"), "{text}");
    assert!(text.contains("Address: 00000000fee00000  Data: 4021"), "{text}");
    assert!(text.contains("MaxPayload 256 bytes, MaxReadReq 512 bytes"), "{text}");

    let numeric = lspci(&["-n"], file.path());
    assert!(numeric.starts_with("03:00.0 1180: 1234:7c01 (rev 01)"), "{numeric}");
}

#[test]
fn pci_dump_names_match_lspci() {
    // Two functions of a well-known vendor in one file, out of order.
    let mut bridge = vec![0u8; 256];
    bridge[0..4].copy_from_slice(&[0x86, 0x80, 0x37, 0x12]); // 8086:1237 440FX
    bridge[0x08] = 0x02;
    bridge[0x0a] = 0x00;
    bridge[0x0b] = 0x06;
    let text = render_dump(0, 0, 2, 0, &card_config(256)) + &render_dump(0, 0, 0, 0, &bridge);
    let file = write_temp(&text);
    let functions = pci::scan(&PciSource::DumpFile(file.path().to_path_buf())).expect("scan the dump");
    let addresses: Vec<String> = functions.iter().map(|f| f.address()).collect();
    assert_eq!(addresses, vec!["0000:00:00.0", "0000:00:02.0"], "sorted by address");

    // lspci -vmm prints "Vendor:\t<name>" etc. from the same database.
    let mm = lspci(&["-vmm", "-s", "00:00.0"], file.path());
    let field = |name: &str| {
        mm.lines().find_map(|l| l.strip_prefix(&format!("{name}:\t"))).unwrap_or_else(|| panic!("no {name} in:\n{mm}")).to_string()
    };
    let intel = &functions[0];
    assert_eq!(intel.vendor_name.as_deref(), Some(field("Vendor").as_str()));
    assert_eq!(intel.device_name.as_deref(), Some(field("Device").as_str()));
    assert_eq!(intel.class_name.as_deref(), Some(field("Class").as_str()));
    assert_eq!(intel.class, 0x060000);
}

#[test]
fn pci_dump_of_4096_bytes_keeps_extended_space() {
    let mut config = card_config(4096);
    // AER (id 1, version 2) at 0x100, then DSN (id 3, version 1) at 0x148, end of list.
    put32(&mut config, 0x100, 0x0001 | 2 << 16 | 0x148 << 20);
    put32(&mut config, 0x148, 0x0003 | 1 << 16);
    let file = write_temp(&render_dump(0, 0x42, 0x1f, 7, &config));
    let functions = pci::scan(&PciSource::DumpFile(file.path().to_path_buf())).expect("scan the dump");
    let f = &functions[0];
    assert_eq!(f.address(), "0000:42:1f.7");
    assert_eq!(f.config.len(), 4096);
    assert_eq!(f.config, config);
    let ext: Vec<(u16, u8, u16)> = f.extended_capabilities().iter().map(|c| (c.id, c.version, c.offset)).collect();
    assert_eq!(ext, vec![(1, 2, 0x100), (3, 1, 0x148)]);
    let text = lspci(&["-vv"], file.path());
    assert!(text.contains("Advanced Error Reporting"), "{text}");
    assert!(text.contains("Device Serial Number"), "{text}");
}

#[test]
fn pci_dump_accepts_lspci_own_output_with_short_addresses() {
    // `lspci -x` without -D prints "03:00.0 ..." and no domain.
    let rendered = render_dump(0, 3, 0, 0, &card_config(256));
    let short = rendered.strip_prefix("0000:").expect("rendered with a domain").to_string();
    let file = write_temp(&short);
    let functions = pci::scan(&PciSource::DumpFile(file.path().to_path_buf())).expect("scan the dump");
    assert_eq!(functions[0].address(), "0000:03:00.0");
}

/// Asserts a scan of `text` fails with a message naming the file; returns the message.
fn assert_malformed(text: &str) -> String {
    let file = write_temp(text);
    let path = file.path().display().to_string();
    match pci::scan(&PciSource::DumpFile(file.path().to_path_buf())) {
        Err(DeviceError::Pci(msg)) => {
            assert!(msg.contains(&path), "message does not name {path}: {msg}");
            msg
        }
        other => panic!("expected DeviceError::Pci for {text:?}, got {other:?}"),
    }
}

#[test]
fn pci_dump_with_garbage_in_a_data_line_is_an_error() {
    let mut text = render_dump(0, 3, 0, 0, &card_config(256));
    text = text.replacen("10: 00 00 00 f0", "10: 00 00 zz f0", 1);
    let msg = assert_malformed(&text);
    assert!(msg.contains("Malformed line"), "{msg}");
    // The process is alive and libpci still works after the error.
    let good = write_temp(&render_dump(0, 3, 0, 0, &card_config(256)));
    assert!(pci::scan(&PciSource::DumpFile(good.path().to_path_buf())).is_ok());
}

#[test]
fn pci_dump_offset_past_4096_is_an_error() {
    let msg = assert_malformed(&(render_dump(0, 3, 0, 0, &card_config(256)).trim_end().to_string() + "\n1000: 00\n"));
    assert!(msg.contains("4096"), "{msg}");
}

#[test]
fn pci_dump_with_an_overlong_line_is_an_error() {
    let text = format!("0000:03:00.0 {}\n00: 34 12\n", "x".repeat(400));
    let msg = assert_malformed(&text);
    assert!(msg.contains("line too long"), "{msg}");
}

#[test]
fn pci_dump_without_functions_is_an_error() {
    let msg = assert_malformed("this is not a dump\nat all\n");
    assert!(msg.contains("no PCI function"), "{msg}");
    assert_malformed("");
}

#[test]
fn pci_dump_with_a_truncated_function_is_an_error() {
    let config = card_config(256);
    let msg = assert_malformed(&render_dump(0, 3, 0, 0, &config[..32]));
    assert!(msg.contains("0000:03:00.0") && msg.contains("64 bytes"), "{msg}");
}

#[test]
fn pci_dump_file_that_does_not_exist_is_an_error() {
    let dir = tempfile::tempdir().expect("temporary directory");
    let path = dir.path().join("no-such-dump.txt");
    match pci::scan(&PciSource::DumpFile(path.clone())) {
        Err(DeviceError::Pci(msg)) => {
            assert!(msg.contains(&path.display().to_string()), "{msg}");
            assert!(msg.contains("No such file"), "{msg}");
        }
        other => panic!("expected an error, got {other:?}"),
    }
}

#[test]
fn pci_dump_errors_from_many_threads_at_once() {
    // Errors longjmp through a thread-local target: hammer it from several threads.
    let handles: Vec<_> = (0..8)
        .map(|i| {
            std::thread::spawn(move || {
                for _ in 0..20 {
                    if i % 2 == 0 {
                        assert_malformed("0000:03:00.0 x\n00: 34 12 zz\n");
                    } else {
                        let good = write_temp(&render_dump(0, 3, 0, 0, &card_config(256)));
                        assert!(pci::scan(&PciSource::DumpFile(good.path().to_path_buf())).is_ok());
                    }
                }
            })
        })
        .collect();
    for h in handles {
        h.join().expect("thread finished");
    }
}

#[test]
fn pci_find_names_the_missing_address() {
    let file = write_temp(&render_dump(0, 3, 0, 0, &card_config(256)));
    let source = PciSource::DumpFile(file.path().to_path_buf());
    assert_eq!(pci::find(&source, "03:00.0").expect("present").device_id, 0x7c01);
    match pci::find(&source, "0000:04:00.0") {
        Err(DeviceError::NoSuchDevice(msg)) => assert!(msg.contains("04:00.0") && msg.contains("0000:03:00.0"), "{msg}"),
        other => panic!("expected NoSuchDevice, got {other:?}"),
    }
}
