//! Several interrupt vectors through the simulator (issue 29): MSI's Multiple Message Enable
//! and MSI-X, enabled by a client as a host's OS would (`Device::request_vectors`), the
//! interrupt timer raising a different vector at each fire, and the mode put back when the
//! client leaves.
//!
//!   irq timer ─fire, vector v─► card MSI block ─► MSI (vector v) ────────────────┐
//!                                              └► MSI-X: MWr of entry v ─► RC ──┴─► Irq { vector: v }

#![allow(clippy::unwrap_used)]

use crate::common;

use std::time::Duration;

use common::{run_failing, Sim};
use tlpx_device::backends::sim::SimDevice;
use tlpx_device::{Device, InterruptMode, InterruptVectors, Width};
use tlpx_regs::{irq_timer as timer, pcie_msi};

const TIMER_VECTORS: [u32; 4] = [8, 9, 10, 11];

fn w(dev: &mut SimDevice, reg: tlpx_regs::Register, v: u64) {
    dev.bar_write(0, reg.offset, Width::W32, v).unwrap();
}

fn r(dev: &mut SimDevice, reg: tlpx_regs::Register) -> u64 {
    dev.bar_read(0, reg.offset, Width::W32).unwrap()
}

/// Fires the interrupt timer `fires` times (periodic, 2000 cycles apart) over `vectors`, one
/// after the other, acknowledging each from this thread; returns the vectors that arrived.
fn fire(dev: &mut SimDevice, vectors: &[u32], fires: u32) -> Vec<u32> {
    let ring = dev.alloc_dma(32 * 64).unwrap();
    let mask: u64 = vectors.iter().map(|v| 1u64 << v).sum();
    w(dev, timer::CONTROL, timer::control::CLEAR.set(1));
    w(dev, timer::CONFIG, timer::config::MODE.set(1));
    w(dev, timer::MIN_INTERVAL, 2000);
    w(dev, timer::MAX_INTERVAL, 2000);
    w(dev, timer::COUNT, u64::from(fires));
    w(dev, timer::RING_BASE, ring.bus_addr & 0xFFFF_FFFF);
    dev.bar_write(0, timer::RING_BASE.offset + 4, Width::W32, ring.bus_addr >> 32).unwrap();
    w(dev, timer::RING_SIZE_LOG2, 6);
    w(dev, timer::RD_INDEX, 0);
    w(dev, timer::VECTORS, mask);
    w(dev, timer::VECTOR_MODE, 0);
    w(dev, pcie_msi::ENABLE_SET, mask);
    w(dev, timer::CONTROL, timer::control::START.set(1));
    let mut got = Vec::new();
    for n in 1..=fires {
        let irq = dev.wait_interrupt(u32::MAX, Duration::from_millis(1)).unwrap().expect("the timer's interrupt");
        got.push(irq.vector);
        w(dev, timer::ACK_USER, u64::from(n));
    }
    assert_eq!(r(dev, timer::OVERRUNS), 0);
    // Every fire's sample records the vector it raised (w3 bits 20:16).
    dev.idle(Duration::from_micros(20)).unwrap();
    let mut rec = vec![0u8; 32 * fires as usize];
    ring.read_bytes(0, &mut rec).unwrap();
    let recorded: Vec<u32> = rec.chunks(32).map(|c| (u32::from_le_bytes([c[12], c[13], c[14], c[15]]) >> 16) & 0x1F).collect();
    assert_eq!(recorded, vectors.iter().cycle().take(fires as usize).copied().collect::<Vec<_>>());
    dev.free_dma(ring).unwrap();
    got
}

fn controls(dev: &mut SimDevice) -> (u16, u16) {
    let c = dev.config_read(0x50, 0x14).unwrap();
    (u16::from_le_bytes([c[2], c[3]]), u16::from_le_bytes([c[0x12], c[0x13]]))
}

#[test]
fn msix_delivers_each_vector_and_the_mode_is_restored_when_the_client_leaves() {
    let sim = Sim::start(&["--msi-vectors", "32", "--msix", "32"]);
    let mut dev = sim.connect();
    let (msi_before, msix_before) = controls(&mut dev);
    assert_eq!(msix_before & 0x7FF, 31, "a 32-entry table");
    // Every entry of the table is programmed (the card sends any of its vectors under MSI-X):
    // what is granted is the table, however few were asked.
    let granted = dev.request_vectors(16).unwrap();
    assert_eq!(granted, InterruptVectors { mode: InterruptMode::MsiX, count: 32 });
    assert_eq!(r(&mut dev, pcie_msi::GRANTED), 32, "the card sees MSI-X on: its table's vectors");
    let got = fire(&mut dev, &TIMER_VECTORS, 8);
    assert_eq!(got, [8, 9, 10, 11, 8, 9, 10, 11]);
    let s = dev.stats().unwrap();
    assert_eq!(s.msix_messages, 8, "each interrupt was the card's write into the interrupt window");
    drop(dev);
    // The next client finds MSI with one vector, as every driver expects.
    let mut next = sim.connect();
    std::thread::sleep(Duration::from_millis(100));
    assert_eq!(controls(&mut next), (msi_before, msix_before));
    assert_eq!(r(&mut next, pcie_msi::GRANTED), 1);
    let got = fire(&mut next, &TIMER_VECTORS, 4);
    assert_eq!(got, [0, 0, 0, 0], "one vector: every source as vector 0");
}

#[test]
fn the_interrupt_mode_has_one_owner_a_second_client_is_refused_as_busy() {
    let sim = Sim::start(&["--msi-vectors", "32", "--msix", "32"]);
    let mut owner = sim.connect();
    let mut other = sim.connect();
    assert_eq!(owner.request_vectors(10).unwrap().mode, InterruptMode::MsiX);
    // The other client may not change the mode from under the owner, nor turn it back.
    let e = other.request_vectors(1).unwrap_err().to_string();
    assert!(e.contains("busy") && e.contains("interrupt mode"), "{e}");
    // Asking for the mode the card is already in changes nothing, and is not refused.
    assert_eq!(other.request_vectors(4).unwrap(), InterruptVectors { mode: InterruptMode::MsiX, count: 32 });
    assert_eq!(r(&mut owner, pcie_msi::GRANTED), 32, "the owner's MSI-X is untouched");
    assert_eq!(fire(&mut owner, &TIMER_VECTORS, 4), TIMER_VECTORS);
    // The owner itself may change it again: one vector, MSI-X off.
    assert_eq!(owner.request_vectors(1).unwrap(), InterruptVectors::SINGLE_MSI);
    assert_eq!(fire(&mut owner, &TIMER_VECTORS, 4), [0, 0, 0, 0]);
    // Once the owner has left (the mode restored), the other client may take it.
    drop(owner);
    std::thread::sleep(Duration::from_millis(100));
    assert_eq!(other.request_vectors(1).unwrap(), InterruptVectors::SINGLE_MSI);
    assert_eq!(other.request_vectors(16).unwrap(), InterruptVectors { mode: InterruptMode::MsiX, count: 32 });
    assert_eq!(r(&mut other, pcie_msi::GRANTED), 32);
}

#[test]
fn multi_message_msi_grants_a_power_of_two_and_folds_the_vectors_above() {
    let sim = Sim::start(&["--msi-vectors", "16"]);
    let mut dev = sim.connect();
    let granted = dev.request_vectors(12).unwrap();
    assert_eq!(granted, InterruptVectors { mode: InterruptMode::MsiMulti, count: 16 });
    assert_eq!(fire(&mut dev, &TIMER_VECTORS, 4), TIMER_VECTORS);
    // 8 granted: vectors 8..11 fold into 7.
    assert_eq!(dev.request_vectors(8).unwrap().count, 8);
    assert_eq!(fire(&mut dev, &TIMER_VECTORS, 4), [7, 7, 7, 7]);
    // The capability's limit: more asked than it has gives what it has.
    assert_eq!(dev.request_vectors(32).unwrap().count, 16);
}

#[test]
fn a_card_offering_one_vector_grants_one() {
    let sim = Sim::start(&[]);
    let mut dev = sim.connect();
    assert_eq!(dev.request_vectors(8).unwrap(), InterruptVectors::SINGLE_MSI);
    assert_eq!(fire(&mut dev, &TIMER_VECTORS, 4), [0, 0, 0, 0]);
    assert!(dev.request_vectors(0).unwrap_err().to_string().contains("0 interrupt vectors"));
}

#[test]
fn bad_vector_counts_are_refused_naming_the_value() {
    let (code, err) = run_failing(&["--msi-vectors", "3", "--socket", "/nonexistent/x.sock"]);
    assert_ne!(code, Some(0));
    assert!(err.contains("--msi-vectors must be 1, 2, 4, 8, 16 or 32, not 3"), "{err}");
    let (code, err) = run_failing(&["--msix", "64", "--socket", "/nonexistent/x.sock"]);
    assert_ne!(code, Some(0));
    assert!(err.contains("--msix 64") && err.contains("offers 32 MSI-X vectors"), "{err}");
    // Fewer entries than the card's table: the vectors above them could never be sent.
    let (code, err) = run_failing(&["--msix", "8", "--socket", "/nonexistent/x.sock"]);
    assert_ne!(code, Some(0));
    assert!(err.contains("--msix 8") && err.contains("takes 32 (MSI-X on) or 0 (off)"), "{err}");
}
