//! The tlpx-sim process: clients coming and going (two at once, one killed mid-read, one
//! sending garbage), determinism of card-cycle stamps, signals, the socket's owner check, and
//! bad command lines that must fail with a clear message and exit code 1.

#![allow(clippy::unwrap_used)]

use crate::common;

use std::io::Write;
use std::os::unix::net::UnixStream;
use std::time::{Duration, Instant};

use common::{run_failing, Sim, MAGIC};
use tlpx_device::backends::sim::SimDevice;
use tlpx_device::{Device, DeviceError, Width};
use tlpx_sim_protocol::{encode_frame, read_frame, Reply, Request, PROTOCOL_VERSION};

const SCRATCH: u64 = tlpx_regs::ident::SCRATCH.offset;

fn raw_hello(sim: &Sim, name: &str) -> UnixStream {
    let mut s = UnixStream::connect(&sim.socket).unwrap();
    let mut buf = Vec::new();
    encode_frame(&Request::Hello { protocol_version: PROTOCOL_VERSION, client_name: name.into() }, &mut buf).unwrap();
    s.write_all(&buf).unwrap();
    let r: Reply = read_frame(&mut s).unwrap();
    assert!(matches!(r, Reply::HelloOk(_)), "{r:?}");
    s
}

fn send(s: &mut UnixStream, req: &Request) {
    let mut buf = Vec::new();
    encode_frame(req, &mut buf).unwrap();
    s.write_all(&buf).unwrap();
}

#[test]
fn two_clients_at_once() {
    let sim = Sim::start(&[]);
    let mut a = sim.connect();
    let b_dev = sim.connect();
    // b waits for an interrupt that never comes while a does MMIO: both make progress.
    let waiter = std::thread::spawn(move || {
        let mut b = b_dev;
        let r = b.wait_interrupt(1 << 31, Duration::from_micros(200)).unwrap();
        (r, b)
    });
    for i in 0..200u64 {
        a.bar_write(0, SCRATCH, Width::W32, i).unwrap();
        assert_eq!(a.bar_read(0, SCRATCH, Width::W32).unwrap(), i);
    }
    let (r, mut b) = waiter.join().unwrap();
    assert_eq!(r, None);
    assert_eq!(b.bar_read(0, 0, Width::W32).unwrap(), u64::from(MAGIC));
    let s = a.stats().unwrap();
    let connected: Vec<_> = s.clients.iter().filter(|c| c.connected).collect();
    assert_eq!(connected.len(), 2, "{:?}", s.clients);
}

#[test]
fn a_client_killed_mid_read_leaves_the_sim_healthy() {
    let sim = Sim::start(&["--host-mem-mib", "1"]);
    {
        let mut s = raw_hello(&sim, "doomed");
        send(&mut s, &Request::AllocDma { len: 1 << 20, align: 0 });
        let r: Reply = read_frame(&mut s).unwrap();
        assert!(matches!(r, Reply::DmaAllocated(_)), "{r:?}");
        // Reads in flight, then the client vanishes without reading the replies.
        for _ in 0..8 {
            send(&mut s, &Request::MmioRead { bar: 0, offset: 0, width: 4 });
        }
        send(&mut s, &Request::WaitIrq { vector_mask: u32::MAX, timeout_cycles: u64::MAX });
    }
    // The sim notices, frees the allocation (all of host memory) and drops late completions.
    let t0 = Instant::now();
    let mut dev = sim.connect();
    loop {
        match dev.alloc_dma(1 << 20) {
            Ok(buf) => {
                dev.free_dma(buf).unwrap();
                break;
            }
            Err(e) => {
                assert!(t0.elapsed() < Duration::from_secs(10), "allocation never freed: {e}");
                std::thread::sleep(Duration::from_millis(10));
            }
        }
    }
    assert_eq!(dev.bar_read(0, 0, Width::W32).unwrap(), u64::from(MAGIC));
    dev.idle(Duration::from_micros(10)).unwrap();
    let s = dev.stats().unwrap();
    assert_eq!(s.unexpected_completions, 0);
    let doomed = s.clients.iter().find(|c| c.name == "doomed").unwrap();
    assert!(!doomed.connected);
    sim.shutdown();
}

#[test]
fn malformed_frames_close_only_that_client() {
    let sim = Sim::start(&[]);
    let mut good = sim.connect();
    let mut bad = UnixStream::connect(&sim.socket).unwrap();
    bad.write_all(&[5, 0, 0, 0, 0xff, 0xff, 0xff, 0xff, 0xff]).unwrap();
    let mut huge = UnixStream::connect(&sim.socket).unwrap();
    huge.write_all(&u32::MAX.to_le_bytes()).unwrap();
    let mut early = UnixStream::connect(&sim.socket).unwrap();
    send(&mut early, &Request::Stats);
    let r: Reply = read_frame(&mut early).unwrap();
    assert!(matches!(r, Reply::Error { ref message, .. } if message.contains("Hello")), "{r:?}");
    // Protocol version mismatch is refused with the sim's version.
    let mut old = UnixStream::connect(&sim.socket).unwrap();
    send(&mut old, &Request::Hello { protocol_version: 999, client_name: "old".into() });
    let r: Reply = read_frame(&mut old).unwrap();
    assert!(matches!(r, Reply::HelloRefused { sim_protocol_version: PROTOCOL_VERSION, .. }), "{r:?}");
    assert_eq!(good.bar_read(0, 0, Width::W32).unwrap(), u64::from(MAGIC));
    sim.shutdown();
}

/// One client's fixed sequence: MMIO, DMA with jittered completions, an interrupt, idle.
fn stamped_run(sim: &Sim) -> Vec<u64> {
    let mut dev = sim.connect();
    let mut stamps = vec![];
    let src = dev.alloc_dma(16384).unwrap();
    let dst = dev.alloc_dma(16384).unwrap();
    src.write_bytes(0, &[0x5a; 16384]).unwrap();
    for i in 0..20u64 {
        dev.bar_write(0, SCRATCH, Width::W32, i).unwrap();
        stamps.push(dev.bar_read_stamped(0, SCRATCH, Width::W32).unwrap().1);
    }
    let w = |dev: &mut SimDevice, o: u64, v: u64| dev.bar_write(0, o, Width::W32, v).unwrap();
    w(&mut dev, 0x201c, 1);
    w(&mut dev, 0x203c, 1);
    w(&mut dev, 0x2004, dst.bus_addr);
    w(&mut dev, 0x2008, 16384);
    w(&mut dev, 0x200c, 0);
    w(&mut dev, 0x2024, src.bus_addr);
    w(&mut dev, 0x2028, 16384 | (1 << 24));
    w(&mut dev, 0x202c, 0);
    w(&mut dev, 0x2040, 1);
    w(&mut dev, 0x1800, 1);
    w(&mut dev, 0x2000, 1);
    w(&mut dev, 0x2020, 1);
    let irq = dev.wait_interrupt(u32::MAX, Duration::from_millis(5)).unwrap().expect("DMA done");
    stamps.push(irq.card_cycle.unwrap());
    stamps.push(dev.bar_read_stamped(0, 0x800, Width::W32).unwrap().0);
    dev.idle(Duration::from_micros(3)).unwrap();
    stamps.push(dev.card_cycle().unwrap());
    stamps
}

#[test]
fn same_requests_same_seed_same_cycles() {
    let a = Sim::start(&["--seed", "42"]);
    let b = Sim::start(&["--seed", "42"]);
    let sa = stamped_run(&a);
    let sb = stamped_run(&b);
    assert_eq!(sa, sb);
    // Another seed changes the DMA completion jitter, so the interrupt comes at another cycle.
    let c = Sim::start(&["--seed", "43"]);
    let sc = stamped_run(&c);
    assert_eq!(sa[..20], sc[..20], "MMIO alone does not depend on the seed");
    assert_ne!(sa[20..], sc[20..], "DMA latency jitter depends on the seed");
}

#[test]
fn sigterm_exits_cleanly_and_removes_files() {
    let mut sim = Sim::start(&[]);
    let _dev = sim.connect();
    let pid = i32::try_from(sim.child.id()).unwrap();
    assert!(sim.dir.path().join("sim.pid").exists());
    // SAFETY: signalling our own child process.
    unsafe { libc::kill(pid, libc::SIGTERM) };
    let status = sim.child.wait().unwrap();
    assert!(status.success(), "{status}");
    for f in ["sim.sock", "sim.hostmem", "sim.lspci", "sim.pid"] {
        assert!(!sim.dir.path().join(f).exists(), "{f} left behind");
    }
}

#[test]
fn a_live_sim_keeps_its_socket_and_a_stale_one_is_replaced() {
    let sim = Sim::start(&[]);
    let card = common::card_library(64);
    let sock = sim.socket.to_str().unwrap();
    let (code, err) = run_failing(&["--socket", sock, "--card", card.to_str().unwrap()]);
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains("another tlpx-sim") && err.contains("pid"), "{err}");
    assert_eq!(sim.connect().bar_read(0, 0, Width::W32).unwrap(), u64::from(MAGIC));
    sim.shutdown();

    // A socket file nobody listens on is removed and reused.
    let dir = tempfile::tempdir().unwrap();
    let stale = dir.path().join("sim.sock");
    drop(std::os::unix::net::UnixListener::bind(&stale).unwrap());
    assert!(stale.exists());
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_tlpx-sim"))
        .args(["--quiet", "--socket", stale.to_str().unwrap(), "--card", card.to_str().unwrap()])
        .spawn()
        .unwrap();
    let t0 = Instant::now();
    let dev = loop {
        match SimDevice::connect(&stale) {
            Ok(d) => break d,
            Err(e) => {
                assert!(t0.elapsed() < Duration::from_secs(30), "{e}");
                std::thread::sleep(Duration::from_millis(10));
            }
        }
    };
    dev.shutdown().unwrap();
    assert!(child.wait().unwrap().success());
}

#[test]
fn bad_command_lines_fail_clearly_with_exit_code_1() {
    let card = common::card_library(64);
    let card = card.to_str().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let sock = dir.path().join("s.sock");
    let sock = sock.to_str().unwrap();
    let cases: Vec<(Vec<&str>, &str)> = vec![
        (vec!["--gen", "9"], "9"),
        (vec!["--lanes", "3"], "lanes must be 1, 2, 4, 8 or 16, not \"3\""),
        (vec!["--mps", "300"], "not \"300\""),
        (vec!["--data-width", "96"], "64, 128 or 256"),
        (vec!["--card", "/nonexistent/libtlpxcard.so", "--socket", sock], "make gateware"),
        (vec!["--card", card, "--data-width", "128", "--socket", sock], "does not match"),
        (vec!["--card", card, "--corrupt-read", "3:1", "--socket", sock], "DW-aligned"),
        (vec!["--card", card, "--corrupt-read", "nonsense", "--socket", sock], "OFFSET:XORMASK"),
        (vec!["--card", card, "--dma-base", "0xF0000000", "--socket", sock], "overlaps BAR0"),
        (vec!["--card", "/etc/hostname", "--socket", sock], "cannot load card library"),
    ];
    for (args, needle) in cases {
        let (code, err) = run_failing(&args);
        assert_eq!(code, Some(1), "{args:?}: {err}");
        assert!(err.contains(needle), "{args:?}: expected {needle:?} in {err}");
        assert!(!err.contains("panicked"), "{args:?}: {err}");
    }
    assert!(!std::path::Path::new(sock).exists());
}

#[test]
fn connecting_without_a_sim_names_the_socket() {
    let dir = tempfile::tempdir().unwrap();
    let e = SimDevice::connect(dir.path().join("nobody.sock")).unwrap_err();
    assert!(matches!(e, DeviceError::SimNotRunning { .. }), "{e}");
    assert!(e.to_string().contains("nobody.sock"), "{e}");
}

#[test]
fn wider_cards_work_the_same() {
    for width in ["128", "256"] {
        let sim = Sim::start_width(width.parse().unwrap(), &["--data-width", width]);
        let mut dev = sim.connect();
        assert_eq!(dev.hello().data_width.to_string(), width);
        assert_eq!(dev.bar_read(0, 0, Width::W64).unwrap() & 0xFFFF_FFFF, u64::from(MAGIC));
        dev.bar_write(0, SCRATCH, Width::W32, 0xC0FFEE).unwrap();
        assert_eq!(dev.bar_read(0, SCRATCH, Width::W32).unwrap(), 0xC0FFEE);
        let src = dev.alloc_dma(4096).unwrap();
        let dst = dev.alloc_dma(4096).unwrap();
        let pattern: Vec<u8> = (0..4096u32).map(|i| (i * 13) as u8).collect();
        src.write_bytes(0, &pattern).unwrap();
        let w = |dev: &mut SimDevice, o: u64, v: u64| dev.bar_write(0, o, Width::W32, v).unwrap();
        w(&mut dev, 0x2004, dst.bus_addr);
        w(&mut dev, 0x2008, 4096);
        w(&mut dev, 0x200c, 0);
        w(&mut dev, 0x2024, src.bus_addr);
        w(&mut dev, 0x2028, 4096 | (1 << 24));
        w(&mut dev, 0x202c, 0);
        w(&mut dev, 0x2040, 1);
        w(&mut dev, 0x1800, 1);
        w(&mut dev, 0x2000, 1);
        w(&mut dev, 0x2020, 1);
        dev.wait_interrupt(u32::MAX, Duration::from_millis(2)).unwrap().expect("DMA done");
        let mut got = vec![0u8; 4096];
        dst.read_bytes(0, &mut got).unwrap();
        assert!(got == pattern, "{width}-bit card: loopback copy differs");
        sim.shutdown();
    }
}

#[test]
fn time_stands_still_unless_a_client_waits_or_free_run_is_on() {
    for (args, expect_progress) in [(vec![], false), (vec!["--free-run"], true)] {
        let sim = Sim::start(&args);
        let mut dev = sim.connect();
        assert_eq!(dev.hello().free_run, expect_progress);
        // A DMA loop started by posted writes: with no client waiting, does it run?
        let src = dev.alloc_dma(65536).unwrap();
        let dst = dev.alloc_dma(65536).unwrap();
        let w = |dev: &mut SimDevice, o: u64, v: u64| dev.bar_write(0, o, Width::W32, v).unwrap();
        for (o, v) in [(0x2010u64, 0u64), (0x2030, 0), (0x2004, dst.bus_addr), (0x2008, 65536 | (1 << 24)), (0x200c, 0)] {
            w(&mut dev, o, v);
        }
        for (o, v) in [(0x2024u64, src.bus_addr), (0x2028, 65536 | (1 << 24)), (0x202c, 0), (0x2010, 1), (0x2030, 1)] {
            w(&mut dev, o, v);
        }
        for (o, v) in [(0x2040u64, 1u64), (0x2000, 1), (0x2020, 1)] {
            w(&mut dev, o, v);
        }
        let c0 = dev.card_cycle().unwrap();
        std::thread::sleep(Duration::from_millis(200));
        let c1 = dev.card_cycle().unwrap();
        assert_eq!(c1 > c0 + 1000, expect_progress, "{args:?}: {c0} -> {c1}");
        w(&mut dev, 0x2020, 0);
        w(&mut dev, 0x2000, 0);
    }
}

#[test]
fn without_data_width_the_smallest_card_that_keeps_up_is_chosen() {
    // (arguments, data width, generation, lanes, datapath warning)
    let cases: Vec<(Vec<&str>, u32, u8, u8, bool)> = vec![
        (vec![], 64, 2, 1, false),
        (vec!["--data-width", "128"], 128, 2, 4, false),
        (vec!["--data-width", "256"], 256, 2, 8, false),
        (vec!["--gen", "1", "--lanes", "4"], 64, 1, 4, false),
        (vec!["--gen", "3", "--lanes", "2"], 128, 3, 2, false),
        (vec!["--gen", "2", "--lanes", "8"], 256, 2, 8, false),
        (vec!["--gen", "3", "--lanes", "8"], 256, 3, 8, false),
        (vec!["--gen", "3", "--lanes", "16"], 256, 3, 16, true),
        (vec!["--data-width", "64", "--lanes", "4"], 64, 2, 4, true),
    ];
    for (args, width, generation, lanes, warns) in cases {
        let sim = Sim::start_card(None, &args);
        let mut dev = sim.connect();
        let h = dev.hello().clone();
        assert_eq!((h.data_width, h.link.generation, h.link.lanes), (width, generation, lanes), "{args:?}");
        assert_eq!(dev.bar_read(0, 0, Width::W32).unwrap(), u64::from(MAGIC), "{args:?}");
        let err = sim.shutdown_stderr();
        assert_eq!(err.contains("the datapath, not the link, limits"), warns, "{args:?}: {err}");
        assert!(!err.contains("error"), "{args:?}: {err}");
    }
}

/// A client that sends large frames behind a request that blocks (an `Advance` of a second
/// of card time) is held back in its own socket: the sim reads at most its credits' worth
/// of its requests (engine::CLIENT_REQUESTS_IN_FLIGHT), so the client's sends stop long
/// before what it tries to send (the sim used to read them all into memory: 1 MiB frames took
/// it from 18 MiB to 2 GiB), and another client is served meanwhile.
#[test]
fn a_client_flooding_behind_a_blocked_request_waits_in_its_own_socket() {
    use std::os::unix::io::AsRawFd;
    let sim = Sim::start(&[]);
    let mut flood = raw_hello(&sim, "flood");
    send(&mut flood, &Request::Advance { cycles: 125_000_000 });
    flood.set_nonblocking(true).unwrap();
    let mut frame = Vec::new();
    // A config write of 1 MiB - 64 bytes: a frame just under the protocol's limit.
    encode_frame(&Request::ConfigWrite { offset: 0, data: vec![0; (1 << 20) - 64] }, &mut frame).unwrap();
    let limit: u64 = 512 << 20;
    let mut sent = 0u64;
    let mut pos = 0usize;
    let held_back = loop {
        match flood.write(&frame[pos..]) {
            Ok(n) => {
                sent += n as u64;
                pos = (pos + n) % frame.len();
                if sent >= limit {
                    break false;
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                // Full: the sim may only be busy decoding; held back when it stays full.
                let mut pfd = libc::pollfd { fd: flood.as_raw_fd(), events: libc::POLLOUT, revents: 0 };
                // SAFETY: poll on one pollfd of this test's own socket.
                if unsafe { libc::poll(&mut pfd, 1, 3000) } == 0 {
                    break true;
                }
            }
            Err(e) => panic!("sending: {e}"),
        }
    };
    assert!(held_back, "the sim read {sent} bytes of one client's requests without executing them");
    assert!(sent < 64 << 20, "held back only after {sent} bytes");
    // Another client is served while the first waits.
    let mut other = sim.connect();
    other.bar_write(0, SCRATCH, Width::W32, 0x1234).unwrap();
    assert_eq!(other.bar_read(0, SCRATCH, Width::W32).unwrap(), 0x1234);
    let s = other.stats().unwrap();
    assert!(s.clients.iter().any(|c| c.connected && c.name == "flood"), "the flooding client is held back, not disconnected");
}

/// A client that does not read its replies keeps them in the sim (up to a bound) while the
/// sim serves the others, and gets every one once it reads: the sim used to block on its
/// socket (the other clients stalled for the 5 s write timeout) and then drop it.
#[test]
fn a_client_that_does_not_read_its_replies_stalls_no_other_and_gets_them_all() {
    let sim = Sim::start(&[]);
    let mut slow = raw_hello(&sim, "slow reader");
    // 4 KiB replies: the socket's buffer holds a few dozen, the sim's outbox a few more.
    let n = 2000;
    let mut writer = slow.try_clone().unwrap();
    let sender = std::thread::spawn(move || {
        for _ in 0..n {
            send(&mut writer, &Request::ConfigRead { offset: 0, len: 4096 });
        }
    });
    let mut other = sim.connect();
    for i in 0..50u64 {
        other.bar_write(0, SCRATCH, Width::W32, i).unwrap();
        assert_eq!(other.bar_read(0, SCRATCH, Width::W32).unwrap(), i);
    }
    for i in 0..n {
        let r: Reply = read_frame(&mut slow).unwrap_or_else(|e| panic!("reply {i} of {n}: {e}"));
        assert!(matches!(r, Reply::ConfigData { ref data } if data.len() == 4096), "reply {i}: {r:?}");
    }
    sender.join().unwrap();
}

#[test]
fn the_board_sets_what_the_config_space_shows_and_a_link_beyond_its_hard_ip_is_refused() {
    // The Device Capabilities (0x74) and Link Capabilities (0x7C) registers of the dump
    // `--print-config` writes in libpci's form; the PCIe capability sits at 0x70.
    fn config_dword(dump: &str, offset: usize) -> u32 {
        let row = dump.lines().find(|l| l.starts_with(&format!("{:02x}: ", offset & !0xF))).expect("row");
        let bytes: Vec<u8> = row[4..].split_whitespace().map(|b| u8::from_str_radix(b, 16).unwrap()).collect();
        let at = offset & 0xF;
        u32::from_le_bytes(bytes[at..at + 4].try_into().unwrap())
    }
    let print = |width: u32, args: &[&str]| {
        let card = common::card_library(width);
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_tlpx-sim"))
            .args(["--card", card.to_str().unwrap(), "--print-config"])
            .args(args)
            .output()
            .unwrap();
        assert!(out.status.success(), "{args:?}: {}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8(out.stdout).unwrap()
    };
    // (card width, arguments, Max_Payload_Size supported code, max link speed, max width)
    let cases: Vec<(u32, Vec<&str>, u32, u32, u32)> = vec![
        (256, vec![], 2, 3, 8),                             // kcu105: 512 B, Gen3 x8
        (128, vec!["--board", "kc705"], 2, 2, 4),           // pcie_7x in the KC705's Gen2 x4
        (128, vec!["--gen", "3", "--lanes", "2"], 2, 3, 2), // beyond kc705 without --board: generic, capable of the link asked
        (64, vec![], 2, 2, 1),                              // the 64-bit card: generic at its default Gen2 x1
    ];
    for (width, args, mps, speed, lanes) in cases {
        let dump = print(width, &args);
        let devcap = config_dword(&dump, 0x74);
        let lnkcap = config_dword(&dump, 0x7C);
        assert_eq!((devcap & 7, lnkcap & 0xF, (lnkcap >> 4) & 0x3F), (mps, speed, lanes), "{width} {args:?}:\n{dump}");
        assert_ne!(devcap & (1 << 5), 0, "{width} {args:?}: Extended Tag Field Supported");
    }
    let card = common::card_library(128);
    let card = card.to_str().unwrap();
    let cases: Vec<(Vec<&str>, &str)> = vec![
        (vec!["--board", "kc705", "--gen", "3"], "beyond the card's hard IP, which trains up to Gen2 x4"),
        (vec!["--board", "kc705", "--lanes", "8"], "Gen2 x4"),
        (vec!["--board", "kcu105"], "\"kcu105\""),
    ];
    for (args, needle) in cases {
        let (code, err) = run_failing(&[&["--card", card, "--print-config"], args.as_slice()].concat());
        assert_eq!(code, Some(1), "{args:?}: {err}");
        assert!(err.contains(needle), "{args:?}: expected {needle:?} in {err}");
    }
}
