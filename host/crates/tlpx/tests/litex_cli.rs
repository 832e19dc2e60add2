//! LiteX's own tools against the simulated card: the real `litex_cli` of the pinned litex
//! package (the repository's .venv) through `tlpx litex-server`.
//!
//!   litex_cli --regs ──Etherbone/TCP──► tlpx litex-server ──► tlpx-sim ◄── tlpx reg dump
//!        └── build/card/dw64/litex-csr.csv (LiteX's export of the card's CSRs)
//!
//! `litex_cli --regs` must list every CSR of tlpx's map at the same address, with the value
//! `tlpx reg dump` reads, but for the registers that change by themselves or count the dump's
//! own reads ([`CHANGING`]) and those a dump does not read ([`NOT_READ`]); a write by one tool
//! must be read back by the other; and what is not Etherbone, or not in BAR0, must get an
//! answer (a closed connection, all-ones) while the bridge keeps serving.

use std::collections::BTreeMap;
use std::fs::File;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use tlpx_testkit::SimProcess as Sim;

use crate::common;
use common::{text, tlpx};

/// Registers whose value moves between two reads with nothing else running: the timebase,
/// and the counters of the host requests and TLPs that the two dumps themselves make.
const CHANGING: &[&str] =
    &["timebase_cycles_lo", "timebase_cycles_hi", "request_path_mem_reads", "spy_count_tlps", "spy_count_bytes", "spy_count_wait"];
/// Registers `tlpx reg dump` names without reading (their read pops a FIFO); litex_cli reads them.
const NOT_READ: &[&str] = &["generator_lat_sample", "rt_loop_sample"];

fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../..")
}

/// The pinned litex package's litex_cli; fails (does not skip) when the venv is missing.
fn litex_cli_bin() -> PathBuf {
    let bin = repo_root().join(".venv/bin/litex_cli");
    assert!(bin.exists(), "{} is missing: `make setup` installs the pinned litex package", bin.display());
    bin
}

/// The card's csr.csv in LiteX's format, written by the card's build.
fn litex_csv() -> PathBuf {
    let csv = repo_root().join("build/card/dw64/litex-csr.csv");
    assert!(csv.exists(), "{} is missing: build the card with `make gateware`", csv.display());
    csv
}

/// A running `tlpx litex-server` on a free port, its stderr kept in a file.
struct Bridge {
    child: Child,
    port: u16,
    stderr: PathBuf,
}

impl Bridge {
    fn start(sim: &Sim) -> Bridge {
        let stderr = sim.path("bridge.err");
        let mut child = Command::new(common::tlpx_bin())
            .args(["--device", &sim.selector(), "litex-server", "--listen", "127.0.0.1:0"])
            .stdout(Stdio::piped())
            .stderr(File::create(&stderr).expect("bridge stderr file"))
            .spawn()
            .expect("start tlpx litex-server");
        let stdout = child.stdout.take().expect("stdout");
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                let _ = tx.send(line);
            }
        });
        let line = rx.recv_timeout(Duration::from_secs(30)).expect("tlpx litex-server prints its address");
        let port = line
            .split_whitespace()
            .find_map(|w| w.strip_prefix("127.0.0.1:"))
            .and_then(|p| p.parse().ok())
            .unwrap_or_else(|| panic!("no 127.0.0.1:PORT in {line:?}"));
        assert_ne!(port, 0, "the bound port is printed, not 0: {line}");
        Bridge { child, port, stderr }
    }

    fn litex_cli(&self, args: &[&str]) -> Output {
        let out = Command::new(litex_cli_bin())
            .args(["--host", "127.0.0.1", "--port", &self.port.to_string(), "--csr-csv"])
            .arg(litex_csv())
            .args(args)
            .output()
            .expect("run litex_cli");
        assert!(out.status.success(), "litex_cli {args:?} failed: {}{}", text(&out.stdout), text(&out.stderr));
        out
    }

    fn stderr(&self) -> String {
        std::fs::read_to_string(&self.stderr).unwrap_or_default()
    }

    fn connect(&self) -> TcpStream {
        let mut s = TcpStream::connect(("127.0.0.1", self.port)).expect("connect to the bridge");
        s.set_read_timeout(Some(Duration::from_secs(20))).expect("timeout");
        // The server information LiteX's RemoteClient reads first.
        let mut info = [0u8; 128];
        let n = s.read(&mut info).expect("server information");
        assert!(text(&info[..n]).starts_with("TlpxBridge:"), "server information: {:?}", text(&info[..n]));
        s
    }
}

impl Drop for Bridge {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `litex_cli --regs` lines (`0xADDR : 0xVALUE name`): name -> (address, value).
fn parse_litex_regs(out: &str) -> BTreeMap<String, (u64, u128)> {
    out.lines()
        .map(|l| {
            let w: Vec<&str> = l.split_whitespace().collect();
            assert!(w.len() == 4 && w[1] == ":", "not a litex_cli --regs line: {l:?}");
            let hex = |s: &str| u128::from_str_radix(s.trim_start_matches("0x"), 16).unwrap_or_else(|_| panic!("bad hex in {l:?}"));
            (w[3].to_string(), (hex(w[0]) as u64, hex(w[2])))
        })
        .collect()
}

/// LiteX's csr.csv registers: name -> size in 32-bit words.
fn litex_sizes(csv: &Path) -> BTreeMap<String, u32> {
    std::fs::read_to_string(csv)
        .expect("read litex-csr.csv")
        .lines()
        .filter(|l| l.starts_with("csr_register,"))
        .map(|l| {
            let f: Vec<&str> = l.split(',').collect();
            (f[1].to_string(), f[3].parse().expect("size"))
        })
        .collect()
}

/// `tlpx --json reg dump`, in LiteX's names (region_register): name -> (offset, value or None).
fn tlpx_dump(sim: &Sim) -> BTreeMap<String, (u64, Option<u128>)> {
    let out = tlpx(&sim.selector(), &["--json", "reg", "dump"]);
    assert!(out.status.success(), "tlpx reg dump: {}", text(&out.stderr));
    let rows: Vec<serde_json::Value> = serde_json::from_slice(&out.stdout).expect("dump JSON");
    rows.iter()
        .map(|r| {
            let name = r["name"].as_str().expect("name").replacen('.', "_", 1);
            let value = r["value"].as_str().map(|v| u128::from_str_radix(v.trim_start_matches("0x"), 16).expect("hex value"));
            (name, (r["offset"].as_u64().expect("offset"), value))
        })
        .collect()
}

#[test]
fn litex_cli_regs_equal_tlpx_reg_dump() {
    let sim = Sim::start(&[]);
    let bridge = Bridge::start(&sim);
    let sizes = litex_sizes(&litex_csv());
    let dump = tlpx_dump(&sim);
    let regs = parse_litex_regs(&text(&bridge.litex_cli(&["--regs"]).stdout));

    assert_eq!(regs.keys().collect::<Vec<_>>(), sizes.keys().collect::<Vec<_>>(), "litex_cli lists the registers of litex-csr.csv");
    let mut compared = 0;
    for (name, &(address, litex_value)) in &regs {
        let &(offset, value) = dump.get(name).unwrap_or_else(|| panic!("{name} (LiteX) is not in tlpx reg dump"));
        assert_eq!(address, offset, "{name}: LiteX's address is not tlpx's BAR0 offset");
        if CHANGING.contains(&name.as_str()) || NOT_READ.contains(&name.as_str()) {
            continue;
        }
        let value = value.unwrap_or_else(|| panic!("tlpx reg dump did not read {name}"));
        // LiteX's CSRBuilder joins a CSR's words most significant first (csr_ordering "big");
        // the card orders them least significant first (soc.py: csr_ordering "little").
        // (slot.dut_name has 4 words: the words of any width are reversed.)
        let words = sizes[name];
        assert!((1..=4).contains(&words), "{name}: a {words}-word CSR; this test knows 1..=4");
        let as_litex_reads = (0..words).fold(0u128, |acc, k| (acc << 32) | ((value >> (32 * k)) & 0xffff_ffff));
        assert_eq!(litex_value, as_litex_reads, "{name}: litex_cli {litex_value:#x}, tlpx reg dump {value:#x}");
        compared += 1;
    }
    // Every CSR of tlpx's map is a LiteX register too (the rule-30 window is not a LiteX CSR
    // region: LiteX's file lists it as a memory_region).
    for name in dump.keys().filter(|n| !n.starts_with("rule30_") || n.starts_with("rule30_batch_")) {
        assert!(regs.contains_key(name), "{name} (tlpx) is missing from litex_cli --regs");
    }
    assert!(compared > 200, "only {compared} registers compared");
}

#[test]
fn litex_cli_write_read_round_trip_through_tlpx_reg() {
    let sim = Sim::start(&[]);
    let bridge = Bridge::start(&sim);
    let device = sim.selector();

    bridge.litex_cli(&["--write", "ident_scratch", "0x5a5aa5a5"]);
    // litex_cli's write is posted (no reply): it may reach the card just after litex_cli ends.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let out = tlpx(&device, &["reg", "read", "ident.scratch"]);
        let t = text(&out.stdout);
        if t.contains("0x5a5aa5a5") {
            break;
        }
        assert!(Instant::now() < deadline, "tlpx reg read after litex_cli --write: {t}{}", text(&out.stderr));
        std::thread::sleep(Duration::from_millis(50));
    }

    let out = tlpx(&device, &["reg", "write", "ident.scratch", "0x0badcafe"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let read = text(&bridge.litex_cli(&["--read", "ident_scratch"]).stdout);
    assert_eq!(read.trim(), "0x00000018 : 0x0badcafe");
    // By address too (a LiteX address is a BAR0 offset).
    let read = text(&bridge.litex_cli(&["--read", "0x0"]).stdout);
    assert_eq!(read.trim(), "0x00000000 : 0x544c5058");
}

/// A LiteX read message (EtherbonePacket(32) with one record of reads) of `addresses`.
fn read_message(addresses: &[u32]) -> Vec<u8> {
    let mut m = vec![0x4e, 0x6f, 0x10, 0x44, 0, 0, 0, 0, 0x00, 0x0f, 0, addresses.len() as u8, 0, 0, 0, 0];
    for a in addresses {
        m.extend_from_slice(&a.to_be_bytes());
    }
    m
}

/// The values of a read reply.
fn read_reply(s: &mut TcpStream, n: usize) -> Vec<u32> {
    let mut reply = vec![0u8; 16 + 4 * n];
    s.read_exact(&mut reply).expect("read reply");
    assert_eq!(&reply[..4], &[0x4e, 0x6f, 0x10, 0x44], "reply header");
    assert_eq!(usize::from(reply[10]), n, "reply's write count");
    reply[16..].chunks_exact(4).map(|w| u32::from_be_bytes(w.try_into().expect("4 bytes"))).collect()
}

/// The bridge closed `s`: end of stream, or a reset when it closed with bytes unread.
/// A read cut short by EINTR is asked again: Linux returns it from a socket read with a timeout
/// when the process was stopped and resumed (signal(7)), as happened once in a make test.
fn assert_closed(s: &mut TcpStream, what: &str) {
    let mut rest = [0u8; 64];
    loop {
        match s.read(&mut rest) {
            Ok(0) => return,
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => return,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            other => panic!("{what}: the connection is not closed: {other:?}"),
        }
    }
}

#[test]
fn litex_bridge_refuses_bad_input_and_keeps_serving() {
    let sim = Sim::start(&[]);
    let bridge = Bridge::start(&sim);

    // Reads outside BAR0 or misaligned are answered all-ones, in order with the good ones.
    let mut s = bridge.connect();
    s.write_all(&read_message(&[0x0, 0x10_0000, 0x0])).expect("send");
    assert_eq!(read_reply(&mut s, 3), vec![0x544c5058, 0xffff_ffff, 0x544c5058]);
    s.write_all(&read_message(&[0x2])).expect("send");
    assert_eq!(read_reply(&mut s, 1), vec![0xffff_ffff]);
    // A write outside BAR0 is dropped; the connection stays.
    let mut w = vec![0x4e, 0x6f, 0x10, 0x44, 0, 0, 0, 0, 0x00, 0x0f, 1, 0, 0xff, 0xf0, 0, 0];
    w.extend_from_slice(&1u32.to_be_bytes());
    s.write_all(&w).expect("send");
    s.write_all(&read_message(&[0x0])).expect("send");
    assert_eq!(read_reply(&mut s, 1), vec![0x544c5058]);

    // Not Etherbone: the connection is closed (read returns 0 bytes), with the reason.
    let mut bad = bridge.connect();
    bad.write_all(b"GET / HTTP/1.0\r\n\r\n").expect("send");
    assert_closed(&mut bad, "a bad magic");
    // A probe (UDP Etherbone's), a config-space record, a split byte enable: closed too.
    for (i, v) in [(2, 0x11), (8, 0x02), (9, 0x05)] {
        let mut c = bridge.connect();
        let mut m = read_message(&[0x0]);
        m[i] = v;
        c.write_all(&m).expect("send");
        assert_closed(&mut c, &format!("byte {i} = {v:#x}"));
    }
    // A client that leaves inside a message.
    let mut half = bridge.connect();
    half.write_all(&read_message(&[0x0])[..7]).expect("send");
    drop(half);

    // The bridge still serves, litex_cli included.
    assert_eq!(text(&bridge.litex_cli(&["--read", "ident_magic"]).stdout).trim(), "0x00000000 : 0x544c5058");
    s.write_all(&read_message(&[0x4])).expect("send");
    assert_eq!(read_reply(&mut s, 1).len(), 1);

    let log = bridge.stderr();
    for expected in [
        "outside BAR0",
        "not word-aligned",
        "not an Etherbone packet: magic 4745",
        "probe",
        "config space",
        "byte enable 0x05",
        "inside a message",
    ] {
        assert!(log.contains(expected), "the bridge's stderr says {expected:?}:\n{log}");
    }
}

#[test]
fn litex_server_refuses_a_bad_listen_address() {
    let sim = Sim::start(&[]);
    let out = tlpx(&sim.selector(), &["litex-server", "--listen", "127.0.0.1"]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    assert!(text(&out.stderr).contains("--listen \"127.0.0.1\" has no port"), "{}", text(&out.stderr));
}

#[test]
fn litex_bridge_closes_a_stalled_message_and_caps_its_clients() {
    let sim = Sim::start(&[]);
    let bridge = Bridge::start(&sim);

    // Part of a message, then nothing: closed after the bridge's 10 s, not held for ever.
    let started = Instant::now();
    let mut stalled = bridge.connect();
    stalled.write_all(&read_message(&[0x0])[..5]).expect("send");
    assert_closed(&mut stalled, "a stalled message");
    assert!(started.elapsed() >= Duration::from_secs(9), "closed after {:?}, before the timeout", started.elapsed());

    // Four clients at once (idle ones may stay); a fifth is closed before any server information.
    let idle: Vec<TcpStream> = (0..4).map(|_| bridge.connect()).collect();
    let mut fifth = TcpStream::connect(("127.0.0.1", bridge.port)).expect("connect");
    fifth.set_read_timeout(Some(Duration::from_secs(20))).expect("timeout");
    assert_closed(&mut fifth, "a fifth client");
    drop(idle);
    // Once they have gone, litex_cli is served again.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let out = Command::new(litex_cli_bin())
            .args(["--host", "127.0.0.1", "--port", &bridge.port.to_string(), "--csr-csv"])
            .arg(litex_csv())
            .args(["--read", "ident_magic"])
            .output()
            .expect("run litex_cli");
        if out.status.success() && text(&out.stdout).trim() == "0x00000000 : 0x544c5058" {
            break;
        }
        assert!(Instant::now() < deadline, "litex_cli after the idle clients left: {}{}", text(&out.stdout), text(&out.stderr));
        std::thread::sleep(Duration::from_millis(100));
    }
    let log = bridge.stderr();
    assert!(log.contains("nothing for 10 s"), "{log}");
    assert!(log.contains("4 clients are connected already"), "{log}");
}
