//! DMA and interrupts through the root-complex model, with the card's LitePCIe DMA in
//! loopback (reader: host memory → card → writer: card → host memory) and its software MSI.
//!
//!   src buffer ──MRd/CplD──► DMA reader ─loopback─► DMA writer ──MWr──► dst buffer ──MSI──►
//!
//! Also: card accesses outside any allocation are faulted and counted, and MSIs while MSI
//! is disabled in config space are counted, not delivered.

#![allow(clippy::unwrap_used)]

use crate::common;

use common::litepcie::{
    IRQ_DISABLE, LOOPBACK_ENABLE, MSI_CLEAR, MSI_ENABLE, MSI_VECTOR, READER_ENABLE, READER_LOOP_PROG_N, READER_RESET, READER_VALUE,
    READER_WE, WRITER_ENABLE, WRITER_LOOP_PROG_N, WRITER_RESET, WRITER_VALUE, WRITER_WE,
};

use std::time::Duration;

use common::Sim;
use tlpx_device::backends::sim::SimDevice;
use tlpx_device::{Device, Width};

const MSI_WRITER: u32 = 0;
const MSI_SOFTWARE: u32 = 2;

fn w(dev: &mut SimDevice, off: u64, v: u32) {
    dev.bar_write(0, off, Width::W32, u64::from(v)).unwrap();
}

/// Programs one reader and one writer descriptor of `len` bytes and starts both. The writer
/// raises MSI vector 0 when done.
fn start_loopback(dev: &mut SimDevice, src: u64, dst: u64, len: u32) {
    w(dev, WRITER_ENABLE, 0);
    w(dev, READER_ENABLE, 0);
    w(dev, WRITER_RESET, 1);
    w(dev, READER_RESET, 1);
    w(dev, WRITER_LOOP_PROG_N, 0);
    w(dev, READER_LOOP_PROG_N, 0);
    // 64-bit CSRs: the lower address holds bits 31:0 (the address), then length and flags.
    w(dev, WRITER_VALUE, dst as u32);
    w(dev, WRITER_VALUE + 4, len);
    w(dev, WRITER_WE, (dst >> 32) as u32);
    w(dev, READER_VALUE, src as u32);
    w(dev, READER_VALUE + 4, len | IRQ_DISABLE);
    w(dev, READER_WE, (src >> 32) as u32);
    w(dev, LOOPBACK_ENABLE, 1);
    w(dev, MSI_ENABLE, 1 << MSI_WRITER);
    w(dev, WRITER_ENABLE, 1);
    w(dev, READER_ENABLE, 1);
}

#[test]
fn dma_loopback_copies_host_memory_and_raises_an_msi() {
    let sim = Sim::start(&[]);
    let mut dev = sim.connect();
    let len = 8192usize;
    let src = dev.alloc_dma(len).unwrap();
    let dst = dev.alloc_dma(len).unwrap();
    let pattern: Vec<u8> = (0..len).map(|i| (i * 7 + i / 256) as u8).collect();
    src.write_bytes(0, &pattern).unwrap();
    start_loopback(&mut dev, src.bus_addr, dst.bus_addr, len as u32);
    let irq = dev.wait_interrupt(u32::MAX, Duration::from_millis(2)).unwrap().expect("writer MSI");
    let sources = dev.bar_read(0, MSI_VECTOR, Width::W32).unwrap();
    assert_ne!(sources & (1 << MSI_WRITER), 0, "MSI vector status {sources:#x}, irq {irq:?}");
    let mut got = vec![0u8; len];
    dst.read_bytes(0, &mut got).unwrap();
    assert!(got == pattern, "destination differs from source");
    let s = dev.stats().unwrap();
    assert_eq!((s.dma_read_faults, s.dma_write_faults), (0, 0));
    assert_eq!(s.dma_read_bytes, len as u64);
    assert_eq!(s.dma_write_bytes, len as u64);
    assert!(s.card_to_host.by_type.get("MRd32").copied().unwrap_or(0) >= (len / 512) as u64, "{:?}", s.card_to_host);
    assert!(s.host_to_card.by_type.get("CplD").copied().unwrap_or(0) >= (len / 256) as u64, "{:?}", s.host_to_card);
    assert_eq!(s.msis, 1);
    dev.free_dma(src).unwrap();
    dev.free_dma(dst).unwrap();
}

#[test]
fn dma_outside_allocations_is_faulted_and_counted() {
    let sim = Sim::start(&[]);
    let mut dev = sim.connect();
    let base = dev.hello().host_memory_bus_base;
    let unallocated = base + (64 << 20);
    // Reads of memory nobody allocated get UR.
    let dst = dev.alloc_dma(4096).unwrap();
    start_loopback(&mut dev, unallocated, dst.bus_addr, 1024);
    dev.idle(Duration::from_micros(50)).unwrap();
    let s = dev.stats().unwrap();
    assert!(s.dma_read_faults >= 1, "read faults {}", s.dma_read_faults);
    // Writes to memory nobody allocated are dropped.
    let sim2 = Sim::start(&[]);
    let mut dev2 = sim2.connect();
    let src = dev2.alloc_dma(4096).unwrap();
    start_loopback(&mut dev2, src.bus_addr, unallocated, 1024);
    dev2.idle(Duration::from_micros(50)).unwrap();
    let s = dev2.stats().unwrap();
    assert!(s.dma_write_faults >= 1, "write faults {}", s.dma_write_faults);
    assert_eq!(s.dma_write_bytes, 0);
}

#[test]
fn software_msi_reaches_every_client_and_not_when_disabled() {
    let sim = Sim::start(&[]);
    let mut a = sim.connect();
    let mut b = sim.connect();
    w(&mut a, MSI_ENABLE, 1 << MSI_SOFTWARE);
    w(&mut a, tlpx_regs::ident::SOFTWARE_IRQ.offset, 1);
    // LitePCIe's MSI block sends one message (vector 0); its vector register says which
    // source raised it.
    let irq = a.wait_interrupt(u32::MAX, Duration::from_micros(100)).unwrap().expect("software MSI");
    let c = irq.card_cycle.unwrap();
    let sources = a.bar_read(0, MSI_VECTOR, Width::W32).unwrap();
    assert_ne!(sources & (1 << MSI_SOFTWARE), 0, "MSI vector status {sources:#x}");
    // b was connected: it sees the same interrupt, already queued, at the same cycle.
    let irq_b = b.wait_interrupt(1 << irq.vector, Duration::ZERO).unwrap().expect("queued for b");
    assert_eq!(irq_b.card_cycle, Some(c));
    // No more interrupts: a short wait times out.
    assert_eq!(a.wait_interrupt(u32::MAX, Duration::from_micros(5)).unwrap(), None);

    // MSI disabled in config space (MSI control at 0x52, bit 0): counted, not delivered.
    let ctl = a.config_read(0x52, 2).unwrap();
    a.config_write(0x52, &[ctl[0] & !1, ctl[1]]).unwrap();
    w(&mut a, MSI_CLEAR, 1 << MSI_SOFTWARE);
    w(&mut a, tlpx_regs::ident::SOFTWARE_IRQ.offset, 1);
    assert_eq!(a.wait_interrupt(u32::MAX, Duration::from_micros(20)).unwrap(), None);
    let s = a.stats().unwrap();
    assert_eq!(s.msis, 1);
    assert!(s.msis_while_disabled >= 1, "{}", s.msis_while_disabled);
}
