//! The root complex as an IOMMU: every DMA allocation gets a fresh bus address (IOVA), so a
//! card block still doing DMA for a buffer its owner freed — or for a process that died —
//! faults instead of reading or writing whoever got those host-memory bytes next.
//!
//!   client A: buffer at IOVA x ──freed / A disconnects──► x faults from now on
//!   client B: the same file bytes, at IOVA y ≠ x          ◄── untouched by DMA to x
//!
//! The card's LitePCIe DMA in loopback is the requester (reader: host memory → card →
//! writer: card → host memory), programmed through BAR0 as in tests/dma_irq.rs.

#![allow(clippy::unwrap_used)]

use crate::common;

use common::litepcie::{
    IRQ_DISABLE, LOOPBACK_ENABLE, READER_ENABLE, READER_LOOP_PROG_N, READER_RESET, READER_VALUE, READER_WE, WRITER_ENABLE,
    WRITER_LOOP_PROG_N, WRITER_RESET, WRITER_VALUE, WRITER_WE,
};

use std::io::Write;
use std::os::unix::net::UnixStream;
use std::time::{Duration, Instant};

use common::Sim;
use tlpx_device::backends::sim::SimDevice;
use tlpx_device::{Device, Width};
use tlpx_sim_protocol::{encode_frame, read_frame, DmaAllocation, Reply, Request, BAR0_SIZE, PROTOCOL_VERSION};

const BAR0_BUS: u64 = 0xF000_0000;

fn w(dev: &mut SimDevice, off: u64, v: u32) {
    dev.bar_write(0, off, Width::W32, u64::from(v)).unwrap();
}

/// Starts a loopback of `len` bytes from bus address `src` to `dst`; with `forever` both
/// engines loop over their descriptor, as a capture left running does.
fn start_loopback(dev: &mut SimDevice, src: u64, dst: u64, len: u32, forever: bool) {
    for off in [WRITER_ENABLE, READER_ENABLE, WRITER_LOOP_PROG_N, READER_LOOP_PROG_N] {
        w(dev, off, 0);
    }
    w(dev, WRITER_RESET, 1);
    w(dev, READER_RESET, 1);
    w(dev, WRITER_VALUE, dst as u32);
    w(dev, WRITER_VALUE + 4, len | IRQ_DISABLE);
    w(dev, WRITER_WE, (dst >> 32) as u32);
    w(dev, READER_VALUE, src as u32);
    w(dev, READER_VALUE + 4, len | IRQ_DISABLE);
    w(dev, READER_WE, (src >> 32) as u32);
    if forever {
        w(dev, WRITER_LOOP_PROG_N, 1);
        w(dev, READER_LOOP_PROG_N, 1);
    }
    w(dev, LOOPBACK_ENABLE, 1);
    w(dev, WRITER_ENABLE, 1);
    w(dev, READER_ENABLE, 1);
}

fn stop_dma(dev: &mut SimDevice) {
    for off in [READER_ENABLE, WRITER_ENABLE] {
        w(dev, off, 0);
    }
    for off in [READER_RESET, WRITER_RESET] {
        w(dev, off, 1);
    }
}

/// A client speaking the protocol itself, to see `file_offset` beside `bus_addr`.
struct Raw(UnixStream);

impl Raw {
    fn connect(sim: &Sim, name: &str) -> Raw {
        let mut r = Raw(UnixStream::connect(&sim.socket).unwrap());
        let hello = r.call(&Request::Hello { protocol_version: PROTOCOL_VERSION, client_name: name.into() });
        assert!(matches!(hello, Reply::HelloOk(_)), "{hello:?}");
        r
    }

    fn call(&mut self, req: &Request) -> Reply {
        let mut buf = Vec::new();
        encode_frame(req, &mut buf).unwrap();
        self.0.write_all(&buf).unwrap();
        read_frame(&mut self.0).unwrap()
    }

    fn alloc(&mut self, len: u64) -> DmaAllocation {
        match self.call(&Request::AllocDma { len, align: 0 }) {
            Reply::DmaAllocated(a) => a,
            other => panic!("AllocDma {len}: {other:?}"),
        }
    }

    fn free(&mut self, id: u64) {
        let r = self.call(&Request::FreeDma { id });
        assert!(matches!(r, Reply::DmaFreed), "{r:?}");
    }
}

fn overlaps(a: &DmaAllocation, b: &DmaAllocation) -> bool {
    a.bus_addr < b.bus_addr + b.len && b.bus_addr < a.bus_addr + a.len
}

/// Waits until the sim has noticed that the client named `name` is gone (its allocations
/// are freed when it does).
fn wait_gone(dev: &mut SimDevice, name: &str) {
    let t0 = Instant::now();
    loop {
        let s = dev.stats().unwrap();
        if s.clients.iter().any(|c| c.name == name && !c.connected) {
            return;
        }
        assert!(t0.elapsed() < Duration::from_secs(10), "the sim did not notice that {name} left: {:?}", s.clients);
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// A run of allocations and frees over two clients, one of which disconnects holding a
/// buffer; returns every allocation in order.
fn allocation_run(sim: &Sim) -> Vec<DmaAllocation> {
    let mut a = Raw::connect(sim, "a");
    let mut out = vec![];
    for i in 0..40u64 {
        let x = a.alloc(4096 * (1 + i % 5));
        out.push(x);
        a.free(x.id);
    }
    let held = a.alloc(65536);
    out.push(held);
    drop(a);
    let mut b = Raw::connect(sim, "b");
    let mut dev = sim.connect();
    wait_gone(&mut dev, "a");
    out.push(b.alloc(65536));
    out
}

#[test]
fn every_allocation_gets_a_fresh_bus_address_in_the_iova_window() {
    let sim = Sim::start(&["--host-mem-mib", "1"]);
    let runs = allocation_run(&sim);
    let h = sim.connect().hello().clone();
    let (base, end) = (h.host_memory_bus_base, h.host_memory_bus_base + h.iova_window_size);
    assert!(end <= 1 << 32, "the card's DMA uses 32-bit addresses: window ends at {end:#x}");
    assert!(end <= BAR0_BUS || base >= BAR0_BUS + BAR0_SIZE, "window {base:#x}..{end:#x} overlaps BAR0");
    for (i, x) in runs.iter().enumerate() {
        for (j, y) in runs[..i].iter().enumerate() {
            assert!(!overlaps(x, y), "allocation {i} {x:?} reuses the bus addresses of freed allocation {j} {y:?}");
        }
    }
    assert!(h.iova_window_size >= h.host_memory_size, "window {:#x} smaller than host memory", h.iova_window_size);
    for (i, x) in runs.iter().enumerate() {
        assert!(x.bus_addr >= base && x.bus_addr + x.len <= end, "allocation {i} at {:#x} outside {base:#x}..{end:#x}", x.bus_addr);
        assert_eq!(x.bus_addr % 4096, 0, "{x:?}");
    }
    // The host memory itself is reused: the same file bytes, each time at a new bus address.
    assert!(runs[..40].iter().all(|x| x.file_offset == 0), "freed memory is handed out again: {runs:?}");
    let (held, after) = (runs[40], runs[41]);
    assert_eq!(after.file_offset, held.file_offset, "the disconnected client's memory is reused");
    assert_ne!(after.bus_addr, held.bus_addr);

    // Deterministic: the same requests give the same bus addresses.
    let again = Sim::start(&["--host-mem-mib", "1"]);
    assert_eq!(allocation_run(&again), runs);
}

#[test]
fn a_dead_clients_dma_writes_fault_instead_of_landing_in_the_next_owners_buffer() {
    let sim = Sim::start(&[]);
    let mut b = SimDevice::connect_as(&sim.socket, "survivor").unwrap();
    let len = 4096usize;
    let src = b.alloc_dma(len).unwrap();
    src.write_bytes(0, &vec![0x11; len]).unwrap();
    // The owner starts a DMA into its buffer that never ends (a capture left running) ...
    let mut owner = SimDevice::connect_as(&sim.socket, "owner").unwrap();
    let dst = owner.alloc_dma(len).unwrap();
    start_loopback(&mut owner, src.bus_addr, dst.bus_addr, len as u32, true);
    owner.idle(Duration::from_micros(20)).unwrap();
    let mut seen = vec![0u8; len];
    dst.read_bytes(0, &mut seen).unwrap();
    assert!(seen.iter().all(|&x| x == 0x11), "the loop runs and writes the owner's buffer");
    let old_bus = dst.bus_addr;
    // ... and dies.
    drop(dst);
    drop(owner);
    wait_gone(&mut b, "owner");
    let before = b.stats().unwrap();
    // The survivor gets the freed host memory for a buffer of its own, at another IOVA.
    let mine = b.alloc_dma(len).unwrap();
    mine.write_bytes(0, &vec![0x22; len]).unwrap();
    b.idle(Duration::from_micros(50)).unwrap();
    let mut got = vec![0u8; len];
    mine.read_bytes(0, &mut got).unwrap();
    let bad = got.iter().filter(|&&x| x != 0x22).count();
    assert_eq!(bad, 0, "{bad} of {len} bytes of the survivor's buffer were overwritten by DMA to the dead owner's bus address");
    let s = b.stats().unwrap();
    let writes = s.dma_write_faults - before.dma_write_faults;
    let freed = s.dma_write_faults_freed - before.dma_write_faults_freed;
    assert!(freed > 0, "DMA writes to the freed IOVA are counted as such: {freed} of {writes} write faults");
    assert_eq!(freed, writes, "every write fault hit the freed buffer");
    assert_eq!(s.dma_read_faults, 0, "the reader reads a live buffer");
    assert!(mine.bus_addr + len as u64 <= old_bus || mine.bus_addr >= old_bus + len as u64, "{:#x} vs {old_bus:#x}", mine.bus_addr);
    stop_dma(&mut b);
}

#[test]
fn dma_reads_of_a_freed_buffer_fault_and_do_not_see_the_next_owners_bytes() {
    let sim = Sim::start(&[]);
    let mut a = sim.connect();
    let len = 4096usize;
    let old = a.alloc_dma(len).unwrap();
    old.write_bytes(0, &vec![0x5A; len]).unwrap();
    let old_bus = old.bus_addr;
    a.free_dma(old).unwrap();
    // Another client now holds those host-memory bytes and keeps a secret there.
    let mut b = sim.connect();
    let secret = b.alloc_dma(len).unwrap();
    secret.write_bytes(0, &vec![0x77; len]).unwrap();
    // The card still reads the freed buffer's bus address (a stale descriptor).
    let dst = a.alloc_dma(len).unwrap();
    let before = a.stats().unwrap();
    start_loopback(&mut a, old_bus, dst.bus_addr, len as u32, false);
    a.idle(Duration::from_micros(50)).unwrap();
    let mut got = vec![0u8; len];
    dst.read_bytes(0, &mut got).unwrap();
    let leaked = got.iter().filter(|&&x| x == 0x77).count();
    assert_eq!(leaked, 0, "{leaked} bytes of another client's buffer reached the card through a freed bus address");
    assert!(got.iter().all(|&x| x == 0), "nothing was read at all: the reads got UR");
    let s = a.stats().unwrap();
    let faults = s.dma_read_faults - before.dma_read_faults;
    let freed = s.dma_read_faults_freed - before.dma_read_faults_freed;
    assert!(freed >= 1 && freed == faults, "read faults {faults}, of them on freed memory {freed}");
    assert_eq!(s.dma_read_bytes - before.dma_read_bytes, 0);
    stop_dma(&mut a);
}

#[test]
fn a_bus_address_never_handed_out_faults_but_not_as_freed() {
    // A fresh sim: LitePCIe's DMA reader does not recover from UR completions, even reset.
    let sim = Sim::start(&[]);
    let mut a = sim.connect();
    let used = a.alloc_dma(4096).unwrap();
    a.free_dma(used).unwrap();
    let dst = a.alloc_dma(4096).unwrap();
    let never = a.hello().host_memory_bus_base + a.hello().iova_window_size - (1 << 20);
    start_loopback(&mut a, never, dst.bus_addr, 4096, false);
    a.idle(Duration::from_micros(50)).unwrap();
    let s = a.stats().unwrap();
    assert!(s.dma_read_faults >= 1, "{s:?}");
    assert_eq!(s.dma_read_faults_freed, 0);
    stop_dma(&mut a);
}
