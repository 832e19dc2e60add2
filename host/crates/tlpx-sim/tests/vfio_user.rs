//! `tlpx-sim --vfio-user`: the card as a vfio-user device, tested without QEMU. The client is
//! the `vfio_user` crate's own (the protocol QEMU speaks): config space, BAR0, DMA into a
//! DMA_MAP'd memfd with the card's LitePCIe DMA in loopback, the MSI as an eventfd, and DMA
//! refused (Bus Master Enable clear, address outside every mapping) and counted in the stop line.

#![allow(clippy::unwrap_used)]

use crate::common;

use common::litepcie::{
    IRQ_DISABLE, LOOPBACK_ENABLE, MSI_ENABLE, READER_ENABLE, READER_LOOP_PROG_N, READER_RESET, READER_VALUE, READER_WE, WRITER_ENABLE,
    WRITER_LOOP_PROG_N, WRITER_RESET, WRITER_VALUE, WRITER_WE,
};

use std::fs::File;
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::fd::{AsRawFd, FromRawFd};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use vfio_user::Client;

const CONFIG: u32 = 7;
const BAR0: u32 = 0;
const MSI_INDEX: u32 = 1;
const MSI_CONTROL: u64 = 0x52;

/// Guest RAM of the test: a memfd, mapped for the card at IOVA `RAM_IOVA`.
const RAM_IOVA: u64 = 0x10_0000;
const RAM_LEN: u64 = 0x4_0000;

struct Server {
    child: Child,
    _dir: tempfile::TempDir,
    socket: PathBuf,
}

impl Server {
    fn start() -> Server {
        let dir = tempfile::Builder::new().prefix("tlpx-vfu-test").tempdir().unwrap();
        let socket = dir.path().join("dev.sock");
        let child = Command::new(env!("CARGO_BIN_EXE_tlpx-sim"))
            .arg("--card")
            .arg(common::card_library(64))
            .arg("--vfio-user")
            .arg(&socket)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let t0 = Instant::now();
        while !socket.exists() {
            assert!(t0.elapsed() < Duration::from_secs(30), "no socket at {} within 30 s", socket.display());
            std::thread::sleep(Duration::from_millis(10));
        }
        Server { child, _dir: dir, socket }
    }

    /// Waits for the server to end after the client left; returns its stderr.
    fn finish(mut self) -> String {
        let t0 = Instant::now();
        let status = loop {
            if let Some(s) = self.child.try_wait().unwrap() {
                break s;
            }
            assert!(t0.elapsed() < Duration::from_secs(20), "the server did not end after its client left");
            std::thread::sleep(Duration::from_millis(20));
        };
        let mut err = String::new();
        self.child.stderr.take().unwrap().read_to_string(&mut err).unwrap();
        assert!(status.success(), "server exited with {status}: {err}");
        assert!(!self.socket.exists(), "socket left behind");
        err
    }
}

fn cfg16(c: &mut Client, off: u64) -> u16 {
    let mut b = [0u8; 2];
    c.region_read(CONFIG, off, &mut b).unwrap();
    u16::from_le_bytes(b)
}

fn bar_r32(c: &mut Client, off: u64) -> u32 {
    let mut b = [0u8; 4];
    c.region_read(BAR0, off, &mut b).unwrap();
    u32::from_le_bytes(b)
}

fn bar_w32(c: &mut Client, off: u64, v: u32) {
    c.region_write(BAR0, off, &v.to_le_bytes()).unwrap();
}

fn guest_ram() -> File {
    let f = tempfile::tempfile().unwrap();
    f.set_len(RAM_LEN).unwrap();
    f
}

fn eventfd() -> File {
    // SAFETY: plain syscall; the descriptor is owned by the File.
    let fd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC) };
    assert!(fd >= 0);
    // SAFETY: a fresh descriptor we own.
    unsafe { File::from_raw_fd(fd) }
}

/// Waits up to `timeout` for the eventfd to be signalled; returns its count.
fn wait_eventfd(f: &mut File, timeout: Duration) -> Option<u64> {
    let mut p = libc::pollfd { fd: f.as_raw_fd(), events: libc::POLLIN, revents: 0 };
    // SAFETY: one valid pollfd.
    let r = unsafe { libc::poll(&mut p, 1, timeout.as_millis() as i32) };
    if r <= 0 {
        return None;
    }
    let mut b = [0u8; 8];
    f.read_exact(&mut b).unwrap();
    Some(u64::from_le_bytes(b))
}

fn start_loopback(c: &mut Client, src: u64, dst: u64, len: u32) {
    bar_w32(c, WRITER_ENABLE, 0);
    bar_w32(c, READER_ENABLE, 0);
    bar_w32(c, WRITER_RESET, 1);
    bar_w32(c, READER_RESET, 1);
    bar_w32(c, WRITER_LOOP_PROG_N, 0);
    bar_w32(c, READER_LOOP_PROG_N, 0);
    bar_w32(c, WRITER_VALUE, dst as u32);
    bar_w32(c, WRITER_VALUE + 4, len);
    bar_w32(c, WRITER_WE, (dst >> 32) as u32);
    bar_w32(c, READER_VALUE, src as u32);
    bar_w32(c, READER_VALUE + 4, len | IRQ_DISABLE);
    bar_w32(c, READER_WE, (src >> 32) as u32);
    bar_w32(c, LOOPBACK_ENABLE, 1);
    bar_w32(c, MSI_ENABLE, 1);
    bar_w32(c, WRITER_ENABLE, 1);
    bar_w32(c, READER_ENABLE, 1);
}

/// Reads "refused DMA: R reads W writes" from the stop line.
fn refused(stderr: &str) -> (u64, u64) {
    let line = stderr.lines().find(|l| l.contains("stopped (")).unwrap_or_else(|| panic!("no stop line in: {stderr}"));
    let rest = line.split("refused DMA: ").nth(1).unwrap();
    let w: Vec<&str> = rest.split_whitespace().collect();
    (w[0].parse().unwrap(), w[2].parse().unwrap())
}

#[test]
fn config_space_bar0_and_reset_state() {
    let srv = Server::start();
    let mut c = Client::new(&srv.socket).unwrap();
    assert_eq!(c.region(CONFIG).unwrap().size, 4096, "PCIe config space, extended included");
    assert_eq!(c.region(BAR0).unwrap().size, 1 << 20);
    assert_eq!((cfg16(&mut c, 0), cfg16(&mut c, 2)), (0x10ee, 0x7c01), "tlpx-sim's IDs");
    assert_eq!(cfg16(&mut c, 4), 0, "after reset: no memory space, no bus mastering");
    assert_eq!(cfg16(&mut c, MSI_CONTROL) & 1, 0, "MSI off after reset");
    let msi = c.get_irq_info(MSI_INDEX).unwrap();
    assert_eq!(msi.count, 1);
    assert_eq!(c.get_irq_info(0).unwrap().count, 0, "no INTx");
    // The PCIe capability (id 0x10) at 0x70 reports the link tlpx-sim models (Gen2 x1 here).
    assert_eq!(cfg16(&mut c, 0x70) & 0xff, 0x10);
    let lnksta = cfg16(&mut c, 0x82);
    assert_eq!((lnksta & 0xf, (lnksta >> 4) & 0x3f), (2, 1), "LnkSta {lnksta:#x}");
    // BAR0 with memory space off: the root complex does not send the read; all ones.
    assert_eq!(bar_r32(&mut c, 0), 0xffff_ffff);
    c.region_write(CONFIG, 4, &[0x02, 0x00]).unwrap();
    assert_eq!(bar_r32(&mut c, 0), common::MAGIC, "the card's magic through its MMIO");
    // A posted write, then a read of it back: the scratch-like version register is RO, so
    // use the DMA writer's length CSR.
    bar_w32(&mut c, WRITER_VALUE + 4, 0x1234);
    assert_eq!(bar_r32(&mut c, WRITER_VALUE + 4), 0x1234);
    let mut b = [0u8; 1];
    c.region_read(BAR0, 1, &mut b).unwrap();
    assert_eq!(b[0], (common::MAGIC >> 8) as u8, "a 1-byte read at offset 1");
    c.shutdown().unwrap();
    let err = srv.finish();
    assert!(err.contains("the client closed the connection"), "{err}");
}

#[test]
fn card_dma_reaches_mapped_memory_and_the_msi_an_eventfd() {
    let srv = Server::start();
    let mut c = Client::new(&srv.socket).unwrap();
    let mut ram = guest_ram();
    c.dma_map(0, RAM_IOVA, RAM_LEN, ram.as_raw_fd()).unwrap();
    let len = 8192usize;
    let (src, dst) = (RAM_IOVA + 0x1000, RAM_IOVA + 0x2_0000);
    let pattern: Vec<u8> = (0..len).map(|i| (i * 7 + i / 256) as u8).collect();
    ram.seek(SeekFrom::Start(src - RAM_IOVA)).unwrap();
    ram.write_all(&pattern).unwrap();
    let mut ev = eventfd();
    c.set_irqs(MSI_INDEX, 0x24, 0, 1, &[ev.as_raw_fd()]).unwrap();
    c.region_write(CONFIG, 4, &[0x06, 0x00]).unwrap();
    let ctl = cfg16(&mut c, MSI_CONTROL);
    c.region_write(CONFIG, MSI_CONTROL, &(ctl | 1).to_le_bytes()).unwrap();
    start_loopback(&mut c, src, dst, len as u32);
    // Card time runs by itself (live time): nothing but waiting on the eventfd.
    assert_eq!(wait_eventfd(&mut ev, Duration::from_secs(20)), Some(1), "the writer's MSI as an eventfd signal");
    let mut got = vec![0u8; len];
    ram.seek(SeekFrom::Start(dst - RAM_IOVA)).unwrap();
    ram.read_exact(&mut got).unwrap();
    assert!(got == pattern, "the data is in guest memory when the MSI arrives");
    c.dma_unmap(RAM_IOVA, RAM_LEN).unwrap();
    c.shutdown().unwrap();
    let err = srv.finish();
    assert_eq!(refused(&err), (0, 0), "{err}");
    assert!(err.contains("MSI 1 signalled"), "{err}");
    assert!(err.contains(&format!("DMA {len} bytes read {len} bytes written")), "{err}");
}

#[test]
fn dma_without_bus_master_or_outside_every_mapping_is_refused_and_counted() {
    let srv = Server::start();
    let mut c = Client::new(&srv.socket).unwrap();
    let mut ram = guest_ram();
    c.dma_map(0, RAM_IOVA, RAM_LEN, ram.as_raw_fd()).unwrap();
    let (src, dst) = (RAM_IOVA, RAM_IOVA + 0x2_0000);
    ram.write_all(&[0x5a; 1024]).unwrap();
    // Memory space on, bus mastering off: the reader's requests are refused (UR).
    c.region_write(CONFIG, 4, &[0x02, 0x00]).unwrap();
    start_loopback(&mut c, src, dst, 1024);
    std::thread::sleep(Duration::from_millis(300));
    // Bus mastering on, a destination outside the mapping: the writes are dropped.
    c.region_write(CONFIG, 4, &[0x06, 0x00]).unwrap();
    start_loopback(&mut c, src, RAM_IOVA + RAM_LEN + 0x1000, 1024);
    std::thread::sleep(Duration::from_millis(300));
    let _ = bar_r32(&mut c, 0);
    let mut got = vec![0u8; 1024];
    ram.seek(SeekFrom::Start(dst - RAM_IOVA)).unwrap();
    ram.read_exact(&mut got).unwrap();
    assert!(got.iter().all(|&b| b == 0), "nothing landed while bus mastering was off");
    c.shutdown().unwrap();
    let err = srv.finish();
    let (reads, writes) = refused(&err);
    assert!(reads >= 1, "reads refused with BME clear: {err}");
    assert!(writes >= 1, "writes outside every mapping refused: {err}");
}

#[test]
fn bad_socket_path_is_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let existing = dir.path().join("taken");
    std::fs::write(&existing, b"x").unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_tlpx-sim"))
        .arg("--card")
        .arg(common::card_library(64))
        .arg("--vfio-user")
        .arg(&existing)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("taken") && err.contains("must not exist"), "{err}");
}
