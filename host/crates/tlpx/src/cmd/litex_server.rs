//! `tlpx litex-server`: LiteX's tools against the card, through any tlpx backend.
//!
//! ```text
//! litex_cli --regs ──TCP, Etherbone (litex_server's protocol)──► tlpx litex-server ──Device──► BAR0
//!     └── build/card/dw64/litex-csr.csv (LiteX's csr.csv of the same card)
//! ```
//!
//! What `litex_server --pcie` is for a LitePCIe card, on the sim, vfio and litepcie backends
//! alike: each Etherbone read or write of a 32-bit word at address A is a BAR0 access at
//! offset A. The card's CSR region is at LiteX address 0 (soc.py's `mem_map`), so the
//! addresses of the exported litex-csr.csv are BAR0 offsets as they are.
//!
//! Up to [`MAX_CLIENTS`] clients at once (litex_server serves four); each record's accesses
//! run under one lock, so records of two clients never interleave. What is refused:
//! - a malformed message (bad magic, version, sizes, config space, byte enables): the stream
//!   cannot be resynchronised, so the connection is closed and the reason printed;
//! - a client that starts a message and stalls: closed after [`MESSAGE_TIMEOUT`];
//! - an access outside BAR0, misaligned, or that the card answers with an error (UR): a read
//!   returns 0xffffffff (what a PCIe host reads then), a write is dropped; Etherbone has no
//!   error field in its replies, so the bridge prints each refused record on stderr;
//! - a device that fails (the simulator ended, the card fell off the bus): the bridge exits
//!   with the error.

use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::process::ExitCode;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{anyhow, bail, Context};
use clap::Args;
use tlpx_device::card::Card;
use tlpx_device::DeviceError;

use crate::etherbone::{read_reply, Header, Record, HEADER_LEN, MAX_BODY};
use crate::session::Session;

/// litex_server's default port, so that litex_cli's defaults reach the bridge.
const DEFAULT_LISTEN: &str = "127.0.0.1:1234";
/// Clients served at once; more are closed at once with a message on stderr.
const MAX_CLIENTS: usize = 4;
/// A message's remaining bytes must arrive within this once its first byte has.
const MESSAGE_TIMEOUT: Duration = Duration::from_secs(10);
/// What a read that failed returns: PCIe's answer to a host read that found nothing.
const FAILED_READ: u32 = 0xffff_ffff;

#[derive(Debug, Args)]
pub struct Cmd {
    /// Address to listen on (HOST:PORT; litex_server's default 127.0.0.1:1234; port 0 picks one
    /// and prints it).
    #[arg(long, default_value = DEFAULT_LISTEN, value_name = "HOST:PORT")]
    listen: String,
}

fn parse_listen(text: &str) -> anyhow::Result<SocketAddr> {
    let accepted = "write HOST:PORT, e.g. 127.0.0.1:1234 or 0.0.0.0:1234 (every interface)";
    let Some((host, port)) = text.rsplit_once(':') else { bail!("--listen {text:?} has no port: {accepted}") };
    if host.is_empty() || port.parse::<u16>().is_err() {
        bail!("--listen {text:?} is not HOST:PORT with a port 0..65535: {accepted}");
    }
    text.to_socket_addrs()
        .with_context(|| format!("--listen {text:?}: cannot resolve {host:?}; {accepted}"))?
        .next()
        .ok_or_else(|| anyhow!("--listen {text:?}: {host} has no address; {accepted}"))
}

pub fn run(cmd: &Cmd, device: &str) -> anyhow::Result<ExitCode> {
    let address = parse_listen(&cmd.listen)?;
    let session = Session::open_as_is(device)?;
    let listener = TcpListener::bind(address).with_context(|| format!("--listen {}: cannot listen on {address}", cmd.listen))?;
    let local = listener.local_addr().context("the bridge's address")?;
    if !local.ip().to_canonical().is_loopback() {
        eprintln!(
            "tlpx: warning: the bridge listens on {local}, not on a loopback address: anyone who can reach it can read \
             and write the card's registers (Etherbone has no authentication)"
        );
    }
    crate::outln!(
        "tlpx litex-server: Etherbone (litex_server's protocol) on {local} for {device}: LiteX address = BAR0 offset \
         (0x0..{:#x}); use litex_cli --port {} --csr-csv <card build>/litex-csr.csv",
        tlpx_regs::BAR_SIZE,
        local.port()
    );
    let card = Arc::new(Mutex::new(session.card));
    // Set by a connection whose device failed: the bridge then stops accepting and exits.
    let failure: Arc<Mutex<Option<anyhow::Error>>> = Arc::new(Mutex::new(None));
    let clients = Arc::new(AtomicUsize::new(0));
    // Non-blocking accept, so that a device failure in a connection ends the bridge.
    listener.set_nonblocking(true).context("the listening socket")?;
    loop {
        if let Some(e) = failure.lock().map_err(|_| anyhow!("a connection thread panicked"))?.take() {
            return Err(e);
        }
        let (stream, peer) = match listener.accept() {
            Ok(c) => c,
            Err(e) if e.kind() == ErrorKind::WouldBlock || e.kind() == ErrorKind::Interrupted => {
                std::thread::sleep(Duration::from_millis(20));
                continue;
            }
            Err(e) => return Err(e).context("accepting a connection"),
        };
        if clients.load(Ordering::SeqCst) >= MAX_CLIENTS {
            eprintln!("tlpx litex-server: {peer}: refused, {MAX_CLIENTS} clients are connected already");
            drop(stream);
            continue;
        }
        clients.fetch_add(1, Ordering::SeqCst);
        let (card, failure, clients) = (Arc::clone(&card), Arc::clone(&failure), Arc::clone(&clients));
        std::thread::spawn(move || {
            eprintln!("tlpx litex-server: {peer}: connected");
            match serve(stream, local, &card) {
                Ok(()) => eprintln!("tlpx litex-server: {peer}: disconnected"),
                Err(Closed::Client(reason)) => eprintln!("tlpx litex-server: {peer}: closed the connection: {reason}"),
                Err(Closed::Device(e)) => {
                    if let Ok(mut f) = failure.lock() {
                        *f = Some(e.context("the card failed while serving litex clients"));
                    }
                }
            }
            clients.fetch_sub(1, Ordering::SeqCst);
        });
    }
}

/// Why a connection ended before its client closed it.
enum Closed {
    /// The client sent something this bridge cannot serve (or stalled, or the socket failed).
    Client(String),
    /// The device failed: the bridge cannot serve anyone.
    Device(anyhow::Error),
}

/// Reads exactly `buf`, the first byte with no time limit (an idle client may stay), the rest
/// within [`MESSAGE_TIMEOUT`]. `Ok(false)`: the client closed the connection between messages.
fn read_message_part(stream: &mut TcpStream, buf: &mut [u8], first: bool) -> Result<bool, Closed> {
    let io = |e: std::io::Error| Closed::Client(format!("reading from the client: {e}"));
    let mut got = 0;
    if first {
        stream.set_read_timeout(None).map_err(io)?;
        loop {
            match stream.read(&mut buf[..1]) {
                Ok(0) => return Ok(false),
                Ok(_) => break,
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) => return Err(io(e)),
            }
        }
        got = 1;
        stream.set_read_timeout(Some(MESSAGE_TIMEOUT)).map_err(io)?;
    }
    while got < buf.len() {
        match stream.read(&mut buf[got..]) {
            Ok(0) => {
                return Err(Closed::Client(format!("the client closed the connection inside a message ({got} of {} bytes)", buf.len())))
            }
            Ok(n) => got += n,
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                return Err(Closed::Client(format!("the client sent part of a message and nothing for {} s", MESSAGE_TIMEOUT.as_secs())));
            }
            Err(e) => return Err(io(e)),
        }
    }
    Ok(true)
}

/// Serves one client until it closes the connection.
fn serve(mut stream: TcpStream, local: SocketAddr, card: &Mutex<Card>) -> Result<(), Closed> {
    let io = |e: std::io::Error| Closed::Client(format!("writing to the client: {e}"));
    stream.set_nodelay(true).map_err(io)?;
    // LiteX's RemoteClient reads up to 128 bytes of server information first. Not "CommPCIe"
    // (that makes the client subtract the csr region's base, which is 0 here anyway): the
    // addresses it sends are used as they are.
    stream.write_all(format!("TlpxBridge:{}:{}", local.ip(), local.port()).as_bytes()).map_err(io)?;
    let mut head = [0u8; HEADER_LEN];
    let mut body = [0u8; MAX_BODY];
    loop {
        if !read_message_part(&mut stream, &mut head, true)? {
            return Ok(());
        }
        let h = Header::parse(&head).map_err(|r| Closed::Client(r.to_string()))?;
        let body = &mut body[..h.body_len()];
        read_message_part(&mut stream, body, false)?;
        let record = Record::parse(&h, body);
        let values = execute(card, &h, &record)?;
        if h.rcount > 0 {
            stream.write_all(&read_reply(&h, record.return_base, &values)).map_err(io)?;
        }
    }
}

/// Runs a record's writes, then its reads, under the card's lock; returns the read values.
fn execute(card: &Mutex<Card>, h: &Header, record: &Record) -> Result<Vec<u32>, Closed> {
    let mut card = card.lock().map_err(|_| Closed::Device(anyhow!("another connection's thread panicked")))?;
    let device = card.device();
    let mut refused = Refused::default();
    for (i, &word) in record.write_data.iter().enumerate() {
        let address = record.write_address(h, i);
        match checked(address, h) {
            Ok(offset) => match device.bar_write(tlpx_regs::BAR, offset, h.lanes.width, h.lanes.take(word)) {
                Ok(()) => {}
                Err(e) => refused.note(address, "write", e)?,
            },
            Err(why) => refused.note_text(address, "write", why),
        }
    }
    let mut values = Vec::with_capacity(record.read_addresses.len());
    for &address in &record.read_addresses {
        let value = match checked(address, h) {
            Ok(offset) => match device.bar_read(tlpx_regs::BAR, offset, h.lanes.width) {
                Ok(v) => h.lanes.place(v),
                Err(e) => {
                    refused.note(address, "read", e)?;
                    FAILED_READ
                }
            },
            Err(why) => {
                refused.note_text(address, "read", why);
                FAILED_READ
            }
        };
        values.push(value);
    }
    refused.report();
    Ok(values)
}

/// The BAR0 offset of the access a record makes at `address`, or why there is none.
fn checked(address: u64, h: &Header) -> Result<u64, String> {
    if !address.is_multiple_of(4) {
        return Err(format!("address {address:#x} is not word-aligned"));
    }
    let offset = address + h.lanes.offset;
    if address >= tlpx_regs::BAR_SIZE {
        return Err(format!("address {address:#x} is outside BAR0 (0x0..{:#x})", tlpx_regs::BAR_SIZE));
    }
    Ok(offset)
}

/// The refused accesses of one record, reported in one line (a burst of 255 bad reads is
/// one line, not 255).
#[derive(Default)]
struct Refused {
    count: usize,
    first: Option<String>,
}

impl Refused {
    fn note_text(&mut self, address: u64, what: &str, why: String) {
        self.count += 1;
        self.first.get_or_insert_with(|| format!("{what} at {address:#x}: {why}"));
    }

    /// A device error: the card's answer to one access (refused), or a failed device (fatal).
    fn note(&mut self, address: u64, what: &str, e: DeviceError) -> Result<(), Closed> {
        match e {
            DeviceError::CompletionError { .. } | DeviceError::InvalidArgument(_) => {
                self.note_text(address, what, e.to_string());
                Ok(())
            }
            other => Err(Closed::Device(anyhow::Error::new(other).context(format!("{what} at BAR0 offset {address:#x}")))),
        }
    }

    fn report(&self) {
        if let Some(first) = &self.first {
            eprintln!(
                "tlpx litex-server: refused {} access(es) of a record (reads answered {FAILED_READ:#x}, writes dropped); first: {first}",
                self.count
            );
        }
    }
}
