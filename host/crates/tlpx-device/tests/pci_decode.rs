//! The pure-Rust decoders through the public API, on hand-built config spaces: hostile
//! capability lists must end (run under a watchdog so a hang fails instead of blocking the
//! suite), and `PciFunction::from_config` must agree with the decoders.

use std::sync::mpsc;
use std::time::Duration;

use tlpx_device::pci::{decode, PciFunction};

/// Runs `f` on a thread and fails if it does not finish within a few seconds.
fn within_watchdog<T: Send + 'static>(what: &str, f: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    rx.recv_timeout(Duration::from_secs(2)).unwrap_or_else(|_| panic!("{what} did not finish: a loop?"))
}

fn with_caps(first: u8) -> Vec<u8> {
    let mut c = vec![0u8; 4096];
    c[0x06] = 0x10; // Status: capabilities list
    c[0x34] = first;
    c
}

#[test]
fn pci_decode_self_pointing_capability_ends() {
    let mut c = with_caps(0x50);
    c[0x50] = 0x10;
    c[0x51] = 0x50;
    let caps = within_watchdog("capability walk", move || decode::capabilities(&c));
    assert_eq!(caps.len(), 1);
    assert_eq!((caps[0].id, caps[0].offset, caps[0].name), (0x10, 0x50, "PCI Express"));
}

#[test]
fn pci_decode_every_single_byte_cycle_ends() {
    // Every capability points to the next dword, the last back to the first: the longest
    // possible loop (48 entries).
    let mut c = with_caps(0x40);
    for off in (0x40..0x100).step_by(4) {
        c[off] = 0x09;
        c[off + 1] = if off == 0xfc { 0x40 } else { (off + 4) as u8 };
    }
    let caps = within_watchdog("capability walk", move || decode::capabilities(&c));
    assert_eq!(caps.len(), 48);
}

#[test]
fn pci_decode_self_pointing_extended_capability_ends() {
    let mut c = with_caps(0);
    c[0x100..0x104].copy_from_slice(&(0x0001u32 | 1 << 16 | 0x100 << 20).to_le_bytes());
    let ext = within_watchdog("extended capability walk", move || decode::extended_capabilities(&c));
    assert_eq!(ext.len(), 1);
    assert_eq!(ext[0].name, "Advanced Error Reporting");
}

#[test]
fn pci_decode_looping_lists_do_not_hang_the_other_decoders() {
    let mut c = with_caps(0x40);
    c[0x40] = 0x01;
    c[0x41] = 0x40;
    let f = PciFunction::from_config(0, 1, 0, 0, c);
    let (pcie, msi) = within_watchdog("pcie/msi decode", move || (f.pcie(), f.msi()));
    assert!(pcie.is_none() && msi.is_none());
}

#[test]
fn pci_decode_function_from_config_agrees_with_the_decoders() {
    let mut c = with_caps(0x60);
    c[0..4].copy_from_slice(&[0x34, 0x12, 0x01, 0x7c]);
    c[0x08..0x0c].copy_from_slice(&[0x01, 0x00, 0x80, 0x11]);
    c[0x10..0x14].copy_from_slice(&0xf000_0000u32.to_le_bytes());
    c[0x60] = 0x10; // PCIe, endpoint, 2.5 GT/s x1 link
    c[0x62] = 0x02;
    c[0x6c] = 0x11;
    c[0x72] = 0x11;
    let f = PciFunction::from_config(0, 3, 0, 0, c.clone());
    assert_eq!((f.vendor_id, f.device_id, f.class, f.revision), (0x1234, 0x7c01, 0x118000, 1));
    assert_eq!(f.capabilities(), decode::capabilities(&c));
    let p = f.pcie().expect("PCIe capability");
    assert_eq!((p.generation, p.link_width, p.link_speed_gt_s), (1, 1, 2.5));
    assert_eq!(f.bars().len(), 1);
    assert!(f.to_dump().starts_with("0000:03:00.0 1180: 1234:7c01 (rev 01)\n00: 34 12 01 7c"));
}
