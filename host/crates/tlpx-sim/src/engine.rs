//! The sim thread: owns the card, virtual time, the root complex and the clients' state.
//!
//! Client reader threads (server.rs) turn frames into [`Event`]s on one channel; this thread
//! handles them between runs of card cycles and writes the replies. Virtual time is the
//! card's cycle count and advances only while [`Sim::busy`] (see docs/sim-protocol.md):
//! while some client waits, or, in live time (a client asked with `SetLive`), always, paced
//! so that it never runs ahead of wall time ([`pace`]).

use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap, VecDeque};
use std::os::unix::net::UnixStream;
use std::sync::mpsc::{Receiver, RecvTimeoutError, TryRecvError};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use tlpx_model::link::LinkConfig;
use tlpx_sim_protocol::tlp::{self, Kind};
use tlpx_sim_protocol::{
    check_mmio, check_mmio_block, encode_frame, ClientStats, DirectionStats, DmaAllocation, DmaFaults, ErrorKind, HelloInfo, HostTime,
    HostTimeStats, Reply, Request, SimStats, TrafficStats, PROTOCOL_VERSION,
};

use crate::card::{Card, CardInputs, CardOutputs, MAX_DWORDS};
use crate::completer::{ReadCompleter, ReadOutcome};
use crate::config_space::{CardView, ConfigSpace};
use crate::guestmem::GuestMemory;
use crate::hostmem::{AllocError, HostMemory};
use crate::link::{Link, RX_BUFFER_TLPS, TX_BUFFER_TLPS};
use crate::rc::{self, ReadCollector};
use crate::rundir::RewrittenFile;

/// Cycles run between two looks at the event channel while time runs.
const BATCH_CYCLES: u32 = 256;
/// Cycles free-run (and the drain after the last client left) keep running after the last
/// traffic on the link.
const QUIET_GRACE_CYCLES: u64 = 4096;
/// How long the idle sim polls its channel before it blocks.
const SPIN_BEFORE_SLEEP: Duration = Duration::from_micros(50);
/// In live time, once card time has caught up with wall time the sim waits until wall time
/// is this far ahead before it runs on: waking up for every few cycles would cost more than
/// the cycles (it matters only for a sim faster than its card's clock).
const PACE_SLACK: Duration = Duration::from_millis(1);
/// Interrupts kept per client that no WaitIrq took yet; older ones are dropped (counted).
const MAX_QUEUED_IRQS: usize = 4096;
/// Requests a blocked client may queue before it is disconnected.
const MAX_QUEUED_REQUESTS: usize = 1 << 16;
/// Requests of one client read from its socket and not yet executed (on the way to the sim
/// thread or queued behind a blocking one): its reader thread reads no further frame until
/// the sim has executed one (`Credits`). With frames of at most 1 MiB a client holds at most
/// this many MiB of the sim's memory in requests, whatever it sends.
pub const CLIENT_REQUESTS_IN_FLIGHT: usize = 16;
/// Reply bytes the sim keeps for a client whose socket does not take them (it does not read
/// its replies): past this, or past `OUTBOX_FRAMES` replies, the sim executes none of its
/// requests until the client has read some (the others are served meanwhile).
const OUTBOX_BYTES: usize = 4 << 20;
const OUTBOX_FRAMES: usize = 16;
/// How often the sim retries the sockets of clients with unsent replies while idle.
const OUTBOX_RETRY: Duration = Duration::from_millis(1);
/// Requester ID of the root complex (bus 0, device 0, function 0).
const RC_ID: u16 = 0x0000;
/// IOMMU faults logged (unless --quiet) before they are only counted.
const FAULT_LOG_LIMIT: u64 = 16;
/// Kinds counted per direction (indexes of `Kind as usize`).
const KINDS: usize = Kind::Other as usize + 1;

/// Backpressure between a client's reader thread and the sim thread: the requests of the
/// client read and not yet executed, at most `CLIENT_REQUESTS_IN_FLIGHT`. The reader takes a
/// credit before it reads a frame and the sim gives it back when it executes the request, so a
/// client that sends faster than the sim executes (or that is blocked, or does not read its
/// replies) waits in its own socket: the sim's memory and the other clients are not affected.
pub struct Credits {
    state: Mutex<(usize, bool)>,
    freed: Condvar,
}

impl Credits {
    pub fn new() -> Arc<Credits> {
        Arc::new(Credits { state: Mutex::new((0, false)), freed: Condvar::new() })
    }

    /// Waits for a credit; false once the client was closed (the reader then stops).
    pub fn acquire(&self) -> bool {
        let Ok(mut state) = self.state.lock() else { return false };
        loop {
            if state.1 {
                return false;
            }
            if state.0 < CLIENT_REQUESTS_IN_FLIGHT {
                state.0 += 1;
                return true;
            }
            state = match self.freed.wait(state) {
                Ok(s) => s,
                Err(_) => return false,
            };
        }
    }

    fn release(&self) {
        if let Ok(mut state) = self.state.lock() {
            state.0 = state.0.saturating_sub(1);
            self.freed.notify_one();
        }
    }

    fn close(&self) {
        if let Ok(mut state) = self.state.lock() {
            state.1 = true;
            self.freed.notify_all();
        }
    }
}

/// What the reader threads and the signal thread tell the sim thread.
pub enum Event {
    /// `credits`: the reader thread's backpressure (None: an in-process client that sends
    /// one request at a time, vfio-user's bridge).
    Connected {
        id: u64,
        writer: UnixStream,
        credits: Option<Arc<Credits>>,
    },
    /// `at`: when the reader thread had the whole frame (the request's wall-clock arrival).
    Request {
        id: u64,
        request: Request,
        at: Instant,
    },
    Closed {
        id: u64,
        reason: String,
    },
    Signal(i32),
}

/// Fixed parameters of a run.
pub struct EngineParams {
    pub link: LinkConfig,
    pub clock_hz: f64,
    pub dma_latency_ns: u64,
    pub dma_jitter_ns: u64,
    pub seed: u64,
    pub completion_timeout_cycles: u64,
    /// (BAR0 offset of a DW, XOR mask) applied to every MMIO read completion.
    pub corrupt_read: Vec<(u64, u32)>,
    /// Fault injection for the card's reads at start (SetDmaFaults changes it).
    pub dma_faults: DmaFaults,
    pub free_run: bool,
    /// `Real`: a client's wall time between its messages is charged as card time.
    pub host_time: HostTime,
    /// The most one gap is charged as (`--host-time-cap-us`).
    pub host_time_cap: Duration,
    pub quiet: bool,
    /// The config dump (`sim.lspci`), rewritten when config space changes.
    pub dump: RewrittenFile,
    /// HelloOk without the per-client fields.
    pub hello: HelloInfo,
    /// PCI address fields of the card: (domain, bus, device, function).
    pub pci_address: (u16, u8, u8, u8),
}

enum Origin {
    /// A CPU load or store (MMIO): nobody waits for its delivery.
    Mmio,
    /// The root complex's completion of a card request.
    Completion,
    /// An injected TLP; for a posted one the client waits for the card to take it.
    Injected { waiter: Option<(u64, u64)> },
}

struct DownTlp {
    dwords: Vec<u32>,
    origin: Origin,
}

enum TagKind {
    /// A CPU load of `len` bytes at BAR0 `offset`; `block`: answered with MmioBlock.
    Mmio {
        offset: u64,
        len: u8,
        block: bool,
        data: ReadCollector,
    },
    Inject {
        orig_tag: u8,
        collected: Vec<u32>,
    },
}

struct TagUse {
    /// The client waiting for it; None once the client left (late completions are dropped).
    client: Option<u64>,
    serial: u64,
    kind: TagKind,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Blocked {
    MmioRead {
        tag: u8,
        serial: u64,
    },
    WaitIrq {
        mask: u32,
        serial: u64,
    },
    Advance {
        serial: u64,
    },
    InjectNonPosted {
        tag: u8,
        serial: u64,
    },
    InjectPosted {
        token: u64,
        serial: u64,
    },
    /// `--host-time real`: the card runs for the client's host time before its request at
    /// the front of its queue is processed. No reply.
    HostTime {
        serial: u64,
    },
}

impl Blocked {
    fn serial(self) -> u64 {
        match self {
            Blocked::MmioRead { serial, .. }
            | Blocked::WaitIrq { serial, .. }
            | Blocked::Advance { serial }
            | Blocked::InjectNonPosted { serial, .. }
            | Blocked::InjectPosted { serial, .. }
            | Blocked::HostTime { serial } => serial,
        }
    }
}

struct Client {
    writer: UnixStream,
    credits: Option<Arc<Credits>>,
    /// Reply bytes the socket did not take yet (the client is not reading), and how many
    /// replies they hold; written as the socket takes them.
    outbox: VecDeque<u8>,
    outbox_frames: usize,
    hello: bool,
    dead: bool,
    /// Requests behind a blocking one, with their arrival on the host clock.
    queue: VecDeque<(Request, Duration)>,
    blocked: Option<Blocked>,
    irqs: VecDeque<(u32, u64)>,
    stats: ClientStats,
    /// `--host-time real`: the client's mark, (host clock, card cycle) of the last reply
    /// the sim wrote to it or of its last message processed, whichever came later; its
    /// host time runs from there. None before Hello was answered.
    mark: Option<(Duration, u64)>,
    /// The request at the front of `queue` has had its host time charged already.
    charged: bool,
    /// The client holds a claim on live time (`SetLive`).
    live: bool,
}

impl Client {
    /// Its socket does not take its replies (it is not reading them): execute nothing more of
    /// it until it does.
    fn outbox_full(&self) -> bool {
        self.outbox.len() >= OUTBOX_BYTES || self.outbox_frames >= OUTBOX_FRAMES
    }
}

/// Writes what the socket takes now of `bytes` without waiting (MSG_DONTWAIT: the socket is
/// shared with the client's blocking reader thread, so it stays a blocking socket); the count.
fn send_now(socket: &UnixStream, bytes: &[u8]) -> std::io::Result<usize> {
    use std::os::unix::io::AsRawFd;
    let mut sent = 0;
    while sent < bytes.len() {
        // SAFETY: send reads at most len bytes from the pointer, which points into `bytes`.
        let n = unsafe {
            libc::send(socket.as_raw_fd(), bytes[sent..].as_ptr().cast(), bytes.len() - sent, libc::MSG_DONTWAIT | libc::MSG_NOSIGNAL)
        };
        if n < 0 {
            let e = std::io::Error::last_os_error();
            match e.kind() {
                std::io::ErrorKind::WouldBlock => break,
                std::io::ErrorKind::Interrupted => continue,
                _ => return Err(e),
            }
        }
        sent += n as usize;
    }
    Ok(sent)
}

#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Deadline {
    Client { id: u64, serial: u64 },
    Tag { tag: u8, serial: u64 },
}

#[derive(Default)]
struct Counters {
    down: [u64; KINDS],
    up: [u64; KINDS],
    down_dir: DirectionStats,
    up_dir: DirectionStats,
    msi_writes: u64,
    traffic: TrafficStats,
    wall: Duration,
    cycles_run: u64,
    host: HostTimeStats,
    stats: SimStats,
}

pub struct Sim {
    card: Card,
    inp: CardInputs,
    out: CardOutputs,
    now: u64,
    dw_per_beat: usize,
    link: Link,
    config: ConfigSpace,
    view: CardView,
    mem: HostMemory,
    p: EngineParams,
    completer: ReadCompleter,

    // Host to card: the root complex's transmit queue, the TLPs on the wire (with the cycle
    // they have fully arrived), the one the card is taking beat by beat.
    down_queue: VecDeque<DownTlp>,
    down_wire: VecDeque<(u64, DownTlp)>,
    down_cur: Option<DownTlp>,
    down_pos: usize,

    // Card to host.
    up_buf: Vec<u32>,
    up_in_tlp: bool,
    up_end: f64,
    up_arrivals: VecDeque<(u64, Vec<u32>)>,
    msi_arrivals: VecDeque<(u64, u32)>,
    pool: Vec<Vec<u32>>,

    // Tags of the root complex's own non-posted requests.
    tags: Vec<Option<TagUse>>,
    tags_used: usize,
    next_tag: u8,

    clients: BTreeMap<u64, Client>,
    gone: VecDeque<ClientStats>,
    waiting: usize,
    drain_until: u64,
    /// IOMMU faults so far (for the log's limit).
    fault_logs: u64,
    /// Free-run and drain keep time running until this cycle after the last traffic seen.
    quiet_until: u64,
    deadlines: BinaryHeap<Reverse<(u64, Deadline)>>,
    serial: u64,
    dead: Vec<(u64, String)>,
    frame: Vec<u8>,
    shutdown: bool,
    c: Counters,
    /// Host clock (`--host-time real`): wall time since `epoch` less the wall time the sim
    /// spent running card cycles (`busy`, completed batches; `batch_start` while one runs;
    /// `last_batch` the last completed one, to place stamps that fell inside it).
    epoch: Instant,
    busy: Duration,
    batch_start: Option<Instant>,
    last_batch: (Instant, Instant),
    /// The last reply written during the running batch (`--host-time real`).
    batch_reply: Option<Instant>,
    /// Live time: clients holding a claim, and since when time runs live (wall instant, card
    /// cycle): the epoch of the pacing. None while no client holds one.
    live_clients: u32,
    live_since: Option<(Instant, u64)>,
    /// Cycles run in live spans that have ended.
    live_cycles_done: u64,
    /// Wall time spent waiting for wall time to catch up (pacing).
    live_paced: Duration,
    /// Live time started or ended during a batch: the batch stops so the pacing sees it.
    live_changed: bool,
    /// vfio-user (`--vfio-user`): the card's DMA goes to the guest's DMA_MAP'd memory instead
    /// of `mem`'s allocations.
    guest: Option<Arc<GuestMemory>>,
}

/// What the pacing of live time allows now: `now` card cycles, live time having started at
/// card cycle `c0` `elapsed` wall time ago, with a card clock of `clock_hz`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pace {
    /// Run at most this many cycles: card time then reaches, and does not pass, wall time.
    Run(u64),
    /// Card time has caught up with wall time: wait this long (then card time is
    /// [`PACE_SLACK`] behind wall time).
    Wait(Duration),
}

/// The pacing rule of live time: card time never runs ahead of wall time, i.e. the sim runs
/// only while `now - c0 < elapsed × clock_hz` (the card's own clock is the fastest card
/// time can go), and runs no further than `c0 + elapsed × clock_hz`.
pub fn pace(now: u64, c0: u64, elapsed: Duration, clock_hz: f64) -> Pace {
    let allowed = c0.saturating_add((elapsed.as_secs_f64() * clock_hz) as u64);
    if now < allowed {
        return Pace::Run(allowed - now);
    }
    let card = Duration::from_secs_f64(now.saturating_sub(c0) as f64 / clock_hz);
    Pace::Wait((card + PACE_SLACK).saturating_sub(elapsed))
}

impl Sim {
    pub fn new(mut card: Card, data_width: u32, config: ConfigSpace, mem: HostMemory, p: EngineParams) -> Sim {
        card.reset(16);
        let now = card.cycles();
        let cycles_of_ns = |ns: u64| (ns as f64 * p.clock_hz / 1e9).round() as u64;
        let view = config.view();
        let mut completer = ReadCompleter::new(RC_ID, cycles_of_ns(p.dma_latency_ns), cycles_of_ns(p.dma_jitter_ns), p.seed);
        completer.set_faults(p.dma_faults);
        let mut sim = Sim {
            card,
            inp: CardInputs::default(),
            out: CardOutputs::default(),
            now,
            dw_per_beat: (data_width / 32) as usize,
            link: Link::new(p.link, p.clock_hz),
            config,
            view,
            mem,
            p,
            completer,
            down_queue: VecDeque::new(),
            down_wire: VecDeque::new(),
            down_cur: None,
            down_pos: 0,
            up_buf: Vec::with_capacity(1100),
            up_in_tlp: false,
            up_end: 0.0,
            up_arrivals: VecDeque::new(),
            msi_arrivals: VecDeque::new(),
            pool: Vec::new(),
            tags: (0..256).map(|_| None).collect(),
            tags_used: 0,
            next_tag: 0,
            clients: BTreeMap::new(),
            gone: VecDeque::new(),
            waiting: 0,
            drain_until: 0,
            fault_logs: 0,
            quiet_until: 0,
            deadlines: BinaryHeap::new(),
            serial: 0,
            dead: Vec::new(),
            frame: Vec::new(),
            shutdown: false,
            c: Counters::default(),
            epoch: Instant::now(),
            busy: Duration::ZERO,
            batch_start: None,
            last_batch: (Instant::now(), Instant::now()),
            batch_reply: None,
            live_clients: 0,
            live_since: None,
            live_cycles_done: 0,
            live_paced: Duration::ZERO,
            live_changed: false,
            guest: None,
        };
        sim.apply_view();
        sim
    }

    /// Sends the card's DMA to `guest` (the vfio-user server) instead of host memory's
    /// allocations: same BME check, same counting of refusals, another translation.
    pub fn set_guest_memory(&mut self, guest: Arc<GuestMemory>) {
        self.guest = Some(guest);
    }

    /// Card cycles since the card was created.
    pub fn now(&self) -> u64 {
        self.now
    }

    fn info(&self, msg: &str) {
        if !self.p.quiet {
            eprintln!("tlpx-sim: {msg}");
        }
    }

    fn warn(&self, msg: &str) {
        eprintln!("tlpx-sim: warning: {msg}");
    }

    // Main loop -----------------------------------------------------------------------------

    /// Runs until Shutdown, a signal, or the channel closing.
    pub fn run(&mut self, rx: &Receiver<Event>) {
        loop {
            loop {
                match rx.try_recv() {
                    Ok(ev) => self.on_event(ev),
                    Err(TryRecvError::Empty) => break,
                    Err(TryRecvError::Disconnected) => return,
                }
            }
            self.flush_outboxes();
            self.reap_dead();
            if self.shutdown {
                return;
            }
            if !self.busy() {
                // A client that just got its reply usually sends the next request within
                // microseconds: look again for a short while before sleeping, which saves
                // a futex wake-up per round trip.
                let t0 = Instant::now();
                let ev = loop {
                    match rx.try_recv() {
                        Ok(ev) => break Some(ev),
                        Err(TryRecvError::Disconnected) => return,
                        Err(TryRecvError::Empty) if t0.elapsed() < SPIN_BEFORE_SLEEP => std::thread::yield_now(),
                        Err(TryRecvError::Empty) => break None,
                    }
                };
                let ev = match ev {
                    Some(ev) => ev,
                    // Replies a client's socket did not take: look again soon.
                    None if self.clients.values().any(|c| !c.outbox.is_empty()) => match rx.recv_timeout(OUTBOX_RETRY) {
                        Ok(ev) => ev,
                        Err(RecvTimeoutError::Timeout) => continue,
                        Err(RecvTimeoutError::Disconnected) => return,
                    },
                    None => match rx.recv() {
                        Ok(ev) => ev,
                        Err(_) => return,
                    },
                };
                self.on_event(ev);
                continue;
            }
            let mut batch = u64::from(BATCH_CYCLES);
            if let Some((t0, c0)) = self.live_since {
                match pace(self.now, c0, t0.elapsed(), self.p.clock_hz) {
                    Pace::Run(allowed) => batch = batch.min(allowed),
                    Pace::Wait(wait) => {
                        // Ahead of wall time: wait, serving clients meanwhile.
                        let w0 = Instant::now();
                        let ev = rx.recv_timeout(wait);
                        self.live_paced += w0.elapsed();
                        match ev {
                            Ok(ev) => self.on_event(ev),
                            Err(RecvTimeoutError::Timeout) => {}
                            Err(RecvTimeoutError::Disconnected) => return,
                        }
                        continue;
                    }
                }
            }
            self.live_changed = false;
            let t0 = Instant::now();
            let start = self.now;
            self.batch_start = Some(t0);
            for _ in 0..batch {
                self.step();
                if !self.busy() || self.live_changed {
                    break;
                }
            }
            let t1 = Instant::now();
            self.batch_start = None;
            // A batch that stopped time ended, for the host clock, at its last reply: the
            // reply wakes the client, which may take the CPU from the sim before it gets here,
            // and that is the client's time, not the simulator's.
            let reply = self.batch_reply.take();
            let end = if self.busy() { t1 } else { reply.unwrap_or(t1) };
            self.last_batch = (t0, end);
            self.busy += end - t0;
            self.c.wall += t1 - t0;
            self.c.cycles_run += self.now - start;
            self.reap_dead();
        }
    }

    /// The host clock at wall instant `t` (now or a little before: a stamp of a request
    /// that arrived during the running or the last batch): wall time since the sim started,
    /// less the wall time it spent running card cycles. A client's host time is measured on
    /// this clock, so that the wall time the sim needs to simulate one client's host time
    /// (or anything else) does not become host time of another client.
    fn host_clock(&self, t: Instant) -> Duration {
        let busy = match self.batch_start {
            Some(s) if t >= s => self.busy + (t - s),
            Some(s) => self.busy.saturating_sub(s - t),
            None => {
                let (s, e) = self.last_batch;
                self.busy.saturating_sub(e.saturating_duration_since(t.max(s)))
            }
        };
        t.saturating_duration_since(self.epoch).saturating_sub(busy)
    }

    /// Whether virtual time runs now.
    fn busy(&self) -> bool {
        if self.waiting > 0 || self.live_clients > 0 {
            return true;
        }
        if self.p.free_run || (self.clients.is_empty() && self.now < self.drain_until) {
            // The card's engines go quiet for a few cycles between requests: keep running a
            // little after the last traffic so they can issue the next one.
            return self.now < self.quiet_until || self.traffic_in_flight();
        }
        false
    }

    fn traffic_in_flight(&self) -> bool {
        self.down_cur.is_some()
            || !self.down_queue.is_empty()
            || !self.down_wire.is_empty()
            || !self.completer.is_idle()
            || self.up_in_tlp
            || !self.up_arrivals.is_empty()
            || !self.msi_arrivals.is_empty()
            || self.out.tx_valid != 0
            || self.out.msi_valid != 0
            || self.tags_used > 0
    }

    /// Runs `cycles` card cycles regardless of clients (benchmarks and tests of the lib).
    pub fn run_cycles(&mut self, cycles: u64) {
        let t0 = Instant::now();
        for _ in 0..cycles {
            self.step();
        }
        self.c.wall += t0.elapsed();
        self.c.cycles_run += cycles;
    }

    // One card cycle ------------------------------------------------------------------------

    #[inline]
    fn step(&mut self) {
        // Host to card: completions whose latency has passed join the transmit queue; TLPs
        // go on the wire while the direction is free and the card's receive buffer has room;
        // a TLP that has fully arrived is presented to the card beat by beat.
        while let Some(dwords) = self.completer.pop_ready(self.now) {
            self.down_queue.push_back(DownTlp { dwords, origin: Origin::Completion });
        }
        while !self.down_queue.is_empty()
            && self.link.down.is_free(self.now)
            && self.down_wire.len() + usize::from(self.down_cur.is_some()) < RX_BUFFER_TLPS
        {
            self.start_down();
        }
        if self.down_cur.is_none() && self.down_wire.front().is_some_and(|(arrival, _)| *arrival <= self.now) {
            if let Some((_, t)) = self.down_wire.pop_front() {
                self.down_cur = Some(t);
                self.down_pos = 0;
            }
        }
        if self.down_cur.is_some() {
            self.load_rx_beat();
        } else {
            self.inp.rx_valid = 0;
        }
        // Card to host: ready while the transmit buffer has room or a TLP is in its middle
        // (a TLP is never cut); a TLP goes on the wire from its first beat, as soon as the
        // direction is free. MSIs queue in the same buffer.
        let room = self.up_arrivals.len() + self.msi_arrivals.len() < TX_BUFFER_TLPS;
        self.inp.tx_ready = u8::from(self.up_in_tlp || room);
        self.inp.msi_ready = u8::from(!self.up_in_tlp && room);

        self.card.cycle(&self.inp, &mut self.out);
        self.now += 1;

        if self.inp.rx_valid != 0 && self.out.rx_ready != 0 {
            self.rx_beat_taken();
        }
        if self.out.tx_valid != 0 && self.inp.tx_ready != 0 {
            self.tx_beat();
        }
        if self.out.msi_valid != 0 && self.inp.msi_ready != 0 {
            self.msi_taken(u32::from(self.out.msi_vector));
        }
        while self.up_arrivals.front().is_some_and(|(t, _)| *t <= self.now) {
            if let Some((_, dwords)) = self.up_arrivals.pop_front() {
                self.card_tlp(&dwords);
                self.give(dwords);
            }
        }
        while self.msi_arrivals.front().is_some_and(|(t, _)| *t <= self.now) {
            if let Some((_, vector)) = self.msi_arrivals.pop_front() {
                self.deliver_msi(vector);
            }
        }
        while self.deadlines.peek().is_some_and(|Reverse((t, _))| *t <= self.now) {
            if let Some(Reverse((_, d))) = self.deadlines.pop() {
                self.deadline(d);
            }
        }
        if (self.p.free_run || self.clients.is_empty()) && self.traffic_in_flight() {
            self.quiet_until = self.now + QUIET_GRACE_CYCLES;
        }
    }

    fn start_down(&mut self) {
        let Some(t) = self.down_queue.pop_front() else { return };
        let dw0 = t.dwords[0];
        let transfer = self.link.send_down(self.now, tlp::header_dw(dw0), tlp::payload_dw(dw0));
        let k = tlp::kind(dw0);
        self.c.down[k as usize] += 1;
        self.c.down_dir.tlps += 1;
        self.c.down_dir.wire_bytes += u64::from(transfer.wire_bytes);
        self.c.down_dir.payload_bytes += 4 * tlp::payload_dw(dw0) as u64;
        self.down_wire.push_back((transfer.arrival_cycle(), t));
    }

    #[inline]
    fn load_rx_beat(&mut self) {
        let Some(cur) = &self.down_cur else { return };
        let n = cur.dwords.len();
        let end = (self.down_pos + self.dw_per_beat).min(n);
        let beat = &cur.dwords[self.down_pos..end];
        self.inp.rx_dat = [0; MAX_DWORDS];
        self.inp.rx_dat[..beat.len()].copy_from_slice(beat);
        self.inp.rx_be = if beat.len() >= 8 { u32::MAX } else { (1u32 << (4 * beat.len())) - 1 };
        self.inp.rx_valid = 1;
        self.inp.rx_first = u8::from(self.down_pos == 0);
        self.inp.rx_last = u8::from(end == n);
    }

    fn rx_beat_taken(&mut self) {
        let Some(cur) = &self.down_cur else { return };
        self.down_pos += self.dw_per_beat;
        if self.down_pos < cur.dwords.len() {
            return;
        }
        let Some(done) = self.down_cur.take() else { return };
        let t = &done.dwords;
        match done.origin {
            Origin::Mmio => {
                if tlp::payload_dw(t[0]) > 0 {
                    let bytes = rc::write_range(t).map_or(0, |(lo, hi)| hi - lo);
                    self.c.traffic.mmio_writes.add(t[0], bytes);
                } else {
                    self.c.traffic.mmio_reads.add(t[0], u64::from(rc::read_range(t).1));
                }
            }
            Origin::Completion => self.c.traffic.host_completions.add(t),
            Origin::Injected { waiter } => {
                self.c.traffic.injected_tlps += 1;
                if let Some((client, token)) = waiter {
                    let blocked = self.clients.get(&client).and_then(|c| c.blocked);
                    if let Some(Blocked::InjectPosted { token: t, .. }) = blocked {
                        if t == token {
                            self.unblock(client, Reply::InjectDelivered { card_cycle: self.now });
                        }
                    }
                }
            }
        }
        self.give(done.dwords);
    }

    fn tx_beat(&mut self) {
        let o = self.out;
        if o.tx_first != 0 {
            if self.up_in_tlp {
                self.c.stats.malformed_card_tlps += 1;
            }
            self.up_buf.clear();
            self.up_in_tlp = true;
            let dw0 = o.tx_dat[0];
            let t = self.link.send_up(self.now - 1, tlp::header_dw(dw0), tlp::payload_dw(dw0));
            self.up_end = t.end;
            let k = tlp::kind(dw0);
            self.c.up[k as usize] += 1;
            self.c.up_dir.tlps += 1;
            self.c.up_dir.wire_bytes += u64::from(t.wire_bytes);
            self.c.up_dir.payload_bytes += 4 * tlp::payload_dw(dw0) as u64;
        } else if !self.up_in_tlp {
            self.c.stats.malformed_card_tlps += 1;
            return;
        }
        for i in 0..self.dw_per_beat {
            if (o.tx_be >> (4 * i)) & 0xF != 0 && self.up_buf.len() < 4 + 1024 {
                self.up_buf.push(o.tx_dat[i]);
            }
        }
        if o.tx_last != 0 {
            self.up_in_tlp = false;
            if self.up_buf.first().is_none_or(|&dw0| self.up_buf.len() != tlp::total_dw(dw0)) {
                self.c.stats.malformed_card_tlps += 1;
                return;
            }
            // The wire cannot finish before the card handed over the last beat (a datapath
            // slower than the link).
            let end = self.up_end.max(self.now as f64);
            if end > self.link.up.free_at {
                self.link.up.free_at = end;
            }
            let arrival = (end.ceil() as u64).max(self.now);
            let mut v = self.take();
            v.extend_from_slice(&self.up_buf);
            self.up_arrivals.push_back((arrival, v));
        }
    }

    fn msi_taken(&mut self, vector: u32) {
        if !self.view.msi_enable {
            self.c.stats.msis_while_disabled += 1;
            return;
        }
        // The hard IP writes Message Data | vector to Message Address: a MWr on the link.
        let header = if self.view.msi_address >> 32 != 0 { 4 } else { 3 };
        let t = self.link.send_up(self.now - 1, header, 1);
        self.c.msi_writes += 1;
        self.c.traffic.card_msis += 1;
        self.c.up_dir.tlps += 1;
        self.c.up_dir.wire_bytes += u64::from(t.wire_bytes);
        self.c.up_dir.payload_bytes += 4;
        let vector = vector & (self.view.msi_vectors - 1);
        self.msi_arrivals.push_back(((t.end.ceil() as u64).max(self.now), vector));
    }

    fn take(&mut self) -> Vec<u32> {
        self.pool.pop().unwrap_or_else(|| Vec::with_capacity(64))
    }

    fn give(&mut self, mut v: Vec<u32>) {
        if self.pool.len() < 256 {
            v.clear();
            self.pool.push(v);
        }
    }

    // The card's requests -------------------------------------------------------------------

    fn card_tlp(&mut self, t: &[u32]) {
        let k = tlp::kind(t[0]);
        match k {
            Kind::MRd32 | Kind::MRd64 => self.card_read(t),
            Kind::MWr32 | Kind::MWr64 => self.card_write(t),
            Kind::Cpl | Kind::CplD | Kind::CplLk | Kind::CplDLk => {
                self.c.traffic.card_completions.add(t);
                self.card_completion(t);
            }
            Kind::Msg | Kind::MsgD => {
                self.c.traffic.card_messages += 1;
                self.c.stats.unsupported_card_requests += 1;
            }
            Kind::Other => {
                self.c.traffic.card_other += 1;
                self.c.stats.unsupported_card_requests += 1;
            }
            _ => {
                // MRdLk, I/O, configuration, atomics: the root complex does not serve them.
                self.c.traffic.card_other += 1;
                self.c.stats.unsupported_card_requests += 1;
                self.completer.complete_with_status(self.now, tlp::CPL_UR, t);
            }
        }
    }

    fn card_read(&mut self, t: &[u32]) {
        let (start, count) = rc::read_range(t);
        self.c.traffic.card_reads.add(t[0], u64::from(count));
        if self.guest.is_some() {
            self.card_read_guest(t, start, count);
            return;
        }
        // The IOMMU: the read must lie in one live allocation (a zero-length read reads nothing).
        let target = if self.view.bus_master_enable { self.mem.translate(start, u64::from(count)) } else { None };
        let readable = self.view.bus_master_enable && (count == 0 || target.is_some());
        let mem = &self.mem;
        let outcome = self.completer.read(
            self.now,
            self.link.config(),
            t,
            readable,
            |addr, buf| match &target {
                Some(a) => mem.read(a, addr, buf),
                None => buf.fill(0),
            },
            &mut self.c.traffic.faults,
        );
        match outcome {
            ReadOutcome::Completed { bytes, .. } => self.c.stats.dma_read_bytes += u64::from(bytes),
            ReadOutcome::Refused => {
                self.c.stats.dma_read_faults += 1;
                self.iommu_fault(true, start, u64::from(count));
            }
            ReadOutcome::Injected(_) => {}
        }
    }

    fn card_write(&mut self, t: &[u32]) {
        let range = rc::write_range(t);
        self.c.traffic.card_writes.add(t[0], range.map_or(0, |(lo, hi)| hi - lo));
        if tlp::poisoned(t[0]) {
            self.c.stats.dma_poisoned_writes += 1;
            return;
        }
        let Some((lo, hi)) = range else { return };
        if let Some(guest) = &self.guest {
            // vfio-user: the guest's DMA_MAP'd memory, locked for this TLP (DMA_UNMAP waits).
            let view = guest.view();
            let target = if self.view.bus_master_enable { view.find(lo, hi - lo, true) } else { None };
            let Some(s) = target else {
                drop(view);
                self.c.stats.dma_write_faults += 1;
                self.iommu_fault(false, lo, hi - lo);
                return;
            };
            self.c.stats.dma_write_bytes += hi - lo;
            rc::for_each_written_byte(t, |addr, b| view.write_byte(&s, addr, b));
            return;
        }
        let target = if self.view.bus_master_enable { self.mem.translate(lo, hi - lo) } else { None };
        let Some(a) = target else {
            self.c.stats.dma_write_faults += 1;
            self.iommu_fault(false, lo, hi - lo);
            return;
        };
        self.c.stats.dma_write_bytes += hi - lo;
        let mem = &mut self.mem;
        rc::for_each_written_byte(t, |addr, b| mem.write_byte(&a, addr, b));
    }

    /// A card read of guest memory (vfio-user): as [`Sim::card_read`], through the DMA_MAP'd
    /// regions instead of the allocations, read-locked while the completion's data is taken.
    fn card_read_guest(&mut self, t: &[u32], start: u64, count: u32) {
        let Some(guest) = &self.guest else { return };
        let view = guest.view();
        let target = if self.view.bus_master_enable { view.find(start, u64::from(count), false) } else { None };
        let readable = self.view.bus_master_enable && (count == 0 || target.is_some());
        let outcome = self.completer.read(
            self.now,
            self.link.config(),
            t,
            readable,
            |addr, buf| match &target {
                Some(s) => view.read(s, addr, buf),
                None => buf.fill(0),
            },
            &mut self.c.traffic.faults,
        );
        drop(view);
        match outcome {
            ReadOutcome::Completed { bytes, .. } => self.c.stats.dma_read_bytes += u64::from(bytes),
            ReadOutcome::Refused => {
                self.c.stats.dma_read_faults += 1;
                self.iommu_fault(true, start, u64::from(count));
            }
            ReadOutcome::Injected(_) => {}
        }
    }

    /// Counts a card read (`read`) or write that the IOMMU refused, already counted as a
    /// fault, as one to freed memory when it is, and logs the first few, as an IOMMU's fault
    /// log would.
    fn iommu_fault(&mut self, read: bool, addr: u64, len: u64) {
        let why = if !self.view.bus_master_enable {
            "bus mastering is off"
        } else if self.guest.is_some() {
            "outside every region the guest DMA-mapped (vfio-user DMA_MAP), or a write to a read-only one"
        } else if self.mem.alloc.was_freed(addr, len) {
            if read {
                self.c.stats.dma_read_faults_freed += 1;
            } else {
                self.c.stats.dma_write_faults_freed += 1;
            }
            "memory its owner freed (or left behind when it disconnected)"
        } else {
            "no allocation there"
        };
        self.fault_logs += 1;
        if self.fault_logs <= FAULT_LOG_LIMIT {
            self.info(&format!(
                "IOMMU fault at card cycle {}: card DMA {} of {len} bytes at bus address {addr:#x}: {why}; {}{}",
                self.now,
                if read { "read" } else { "write" },
                if read { "answered with UR" } else { "dropped" },
                if self.fault_logs == FAULT_LOG_LIMIT { " (further faults are only counted: Stats)" } else { "" }
            ));
        }
    }

    fn card_completion(&mut self, t: &[u32]) {
        let tag = tlp::cpl_tag(t[2]);
        let status = tlp::cpl_status(t[1]);
        if status != tlp::CPL_SC {
            self.c.stats.error_completions += 1;
        }
        let Some(mut used) = self.tags[usize::from(tag)].take() else {
            self.c.stats.unexpected_completions += 1;
            return;
        };
        match &mut used.kind {
            TagKind::Mmio { offset, len, block, data } => {
                let (offset, len, block) = (*offset, *len, *block);
                let ok = status == tlp::CPL_SC && tlp::kind(t[0]) == Kind::CplD;
                if ok && !data.add(t) {
                    // The card split its completion: wait for the rest.
                    self.tags[usize::from(tag)] = Some(used);
                    return;
                }
                self.free_tag_slot();
                let Some(client) = used.client else { return };
                let reply = if ok {
                    let TagKind::Mmio { data, .. } = used.kind else { return };
                    let mut bytes = data.into_bytes();
                    for (i, b) in bytes.iter_mut().enumerate() {
                        let addr = offset + i as u64;
                        for &(o, x) in &self.p.corrupt_read {
                            if o == addr & !3 {
                                *b ^= (x >> (8 * (addr & 3))) as u8;
                            }
                        }
                    }
                    if block {
                        Reply::MmioBlock { data: bytes, card_cycle: self.now }
                    } else {
                        let mut v = [0u8; 8];
                        v[..bytes.len().min(8)].copy_from_slice(&bytes[..bytes.len().min(8)]);
                        Reply::MmioValue { value: u64::from_le_bytes(v), card_cycle: self.now }
                    }
                } else {
                    let what = if status == tlp::CPL_SC {
                        "a completion without data".to_string()
                    } else {
                        format!("completion status {}", tlp::status_name(status))
                    };
                    Reply::Error {
                        kind: status_kind(status),
                        message: format!("the card answered the {len}-byte read of BAR0 offset {offset:#x} with {what}"),
                    }
                };
                self.unblock(client, reply);
            }
            TagKind::Inject { orig_tag, collected } => {
                let start = collected.len();
                collected.extend_from_slice(t);
                tlp::set_cpl_tag(&mut collected[start..], *orig_tag);
                let len_bytes = 4 * tlp::payload_dw(t[0]) as u32;
                let offset_in_dw = u32::from(tlp::cpl_lower_address(t[2]) & 3);
                let last = status != tlp::CPL_SC || tlp::payload_dw(t[0]) == 0 || tlp::cpl_byte_count(t[1]) + offset_in_dw <= len_bytes;
                if !last {
                    self.tags[usize::from(tag)] = Some(used);
                    return;
                }
                self.free_tag_slot();
                let TagKind::Inject { collected, .. } = used.kind else { return };
                let Some(client) = used.client else { return };
                let blocked = self.clients.get(&client).and_then(|c| c.blocked);
                if let Some(Blocked::InjectNonPosted { tag: bt, .. }) = blocked {
                    if bt == tag {
                        self.unblock(client, Reply::InjectCompletion { dwords: collected, card_cycle: self.now });
                    }
                }
            }
        }
    }

    fn free_tag_slot(&mut self) {
        self.tags_used -= 1;
    }

    fn alloc_tag(&mut self, client: u64, kind: TagKind) -> Option<(u8, u64)> {
        if self.tags_used >= 256 {
            return None;
        }
        loop {
            let t = self.next_tag;
            self.next_tag = self.next_tag.wrapping_add(1);
            if self.tags[usize::from(t)].is_none() {
                self.serial += 1;
                let serial = self.serial;
                self.tags[usize::from(t)] = Some(TagUse { client: Some(client), serial, kind });
                self.tags_used += 1;
                let deadline = self.now.saturating_add(self.p.completion_timeout_cycles);
                self.deadlines.push(Reverse((deadline, Deadline::Tag { tag: t, serial })));
                return Some((t, serial));
            }
        }
    }

    // Interrupts ----------------------------------------------------------------------------

    fn deliver_msi(&mut self, vector: u32) {
        self.c.stats.msis += 1;
        let now = self.now;
        let mut wake = Vec::new();
        for (&id, c) in self.clients.iter_mut() {
            if !c.hello || c.dead {
                continue;
            }
            match c.blocked {
                Some(Blocked::WaitIrq { mask, .. }) if mask & (1u32 << (vector & 31)) != 0 => {
                    wake.push(id);
                }
                _ => {
                    if c.irqs.len() >= MAX_QUEUED_IRQS {
                        c.irqs.pop_front();
                        c.stats.irqs_dropped += 1;
                    }
                    c.irqs.push_back((vector, now));
                }
            }
        }
        for id in wake {
            if let Some(c) = self.clients.get_mut(&id) {
                c.stats.irqs_delivered += 1;
            }
            self.unblock(id, Reply::Irq { vector, card_cycle: now });
        }
    }

    // Deadlines -----------------------------------------------------------------------------

    fn deadline(&mut self, d: Deadline) {
        match d {
            Deadline::Tag { tag, serial } => {
                let slot = &mut self.tags[usize::from(tag)];
                if slot.as_ref().is_none_or(|u| u.serial != serial) {
                    return;
                }
                let Some(used) = slot.take() else { return };
                self.free_tag_slot();
                self.c.stats.completion_timeouts += 1;
                let Some(client) = used.client else { return };
                let blocked = self.clients.get(&client).and_then(|c| c.blocked);
                let timeout_us = self.p.completion_timeout_cycles as f64 / self.p.clock_hz * 1e6;
                match (used.kind, blocked) {
                    (TagKind::Mmio { offset, len, .. }, Some(Blocked::MmioRead { tag: bt, .. })) if bt == tag => {
                        let message = format!(
                            "no completion for the {len}-byte read of BAR0 offset {offset:#x} within {} card cycles ({timeout_us:.0} us, --completion-timeout-us)",
                            self.p.completion_timeout_cycles
                        );
                        self.unblock(client, Reply::Error { kind: ErrorKind::CompletionTimeout, message });
                    }
                    (TagKind::Inject { .. }, Some(Blocked::InjectNonPosted { tag: bt, .. })) if bt == tag => {
                        self.unblock(client, Reply::InjectTimedOut { card_cycle: self.now });
                    }
                    _ => {}
                }
            }
            Deadline::Client { id, serial } => {
                let Some(b) = self.clients.get(&id).and_then(|c| c.blocked) else { return };
                if b.serial() != serial {
                    return;
                }
                if let Blocked::HostTime { .. } = b {
                    // Host time charged: the request at the front of the queue runs now.
                    if let Some(c) = self.clients.get_mut(&id) {
                        c.blocked = None;
                        self.waiting -= 1;
                    }
                    self.pump(id);
                    return;
                }
                let reply = match b {
                    Blocked::WaitIrq { .. } => Reply::IrqTimedOut { card_cycle: self.now },
                    Blocked::Advance { .. } => Reply::Advanced { now: self.now },
                    Blocked::InjectNonPosted { tag, .. } => {
                        // The tag stays reserved until the completion timeout; a late
                        // completion is dropped.
                        if let Some(u) = self.tags[usize::from(tag)].as_mut() {
                            u.client = None;
                        }
                        Reply::InjectTimedOut { card_cycle: self.now }
                    }
                    Blocked::InjectPosted { .. } => Reply::InjectTimedOut { card_cycle: self.now },
                    Blocked::MmioRead { .. } | Blocked::HostTime { .. } => return,
                };
                self.unblock(id, reply);
            }
        }
    }

    // Clients -------------------------------------------------------------------------------

    fn on_event(&mut self, ev: Event) {
        match ev {
            Event::Connected { id, writer, credits } => {
                self.clients.insert(
                    id,
                    Client {
                        writer,
                        credits,
                        outbox: VecDeque::new(),
                        outbox_frames: 0,
                        hello: false,
                        dead: false,
                        queue: VecDeque::new(),
                        blocked: None,
                        irqs: VecDeque::new(),
                        stats: ClientStats { id, connected: true, ..Default::default() },
                        mark: None,
                        charged: false,
                        live: false,
                    },
                );
            }
            Event::Request { id, request, at } => self.on_request(id, request, at),
            Event::Closed { id, reason } => {
                if self.clients.contains_key(&id) {
                    self.close_client(id, &reason);
                }
            }
            Event::Signal(sig) => {
                self.info(&format!("signal {sig}: shutting down"));
                self.shutdown = true;
            }
        }
    }

    fn on_request(&mut self, id: u64, req: Request, at: Instant) {
        // On the host clock now, while the batch the stamp may fall in is still known.
        let at = self.host_clock(at);
        let Some(c) = self.clients.get_mut(&id) else { return };
        if c.dead {
            return;
        }
        c.stats.requests += 1;
        if c.blocked.is_some() || !c.queue.is_empty() || c.outbox_full() {
            if c.queue.len() >= MAX_QUEUED_REQUESTS {
                self.kill(id, format!("more than {MAX_QUEUED_REQUESTS} requests queued behind a blocking one"));
                return;
            }
            c.queue.push_back((req, at));
            return;
        }
        self.start(id, req, at);
    }

    /// Charges the client's host time (`--host-time real`), then executes `req`.
    ///
    /// The rule: the client's gap is the host-clock time (Sim::host_clock) from its mark to `at` (the request's
    /// arrival), capped at `host_time_cap`, in card cycles at the card clock; the card must
    /// reach the mark's card cycle plus the gap before `req` is processed. If it is already
    /// there (time ran meanwhile, e.g. for another client whose gap overlapped), nothing is
    /// added; otherwise the client blocks (time runs, as for `Advance`) until that cycle and
    /// `req` waits at the front of its queue. So overlapping gaps of two clients advance the
    /// card once, by the larger.
    fn start(&mut self, id: u64, req: Request, at: Duration) {
        if self.p.host_time == HostTime::Real {
            let now = self.now;
            let clock_hz = self.p.clock_hz;
            let cap = self.p.host_time_cap;
            let host = at;
            let Some(c) = self.clients.get_mut(&id) else { return };
            if c.charged {
                c.charged = false;
            } else if let Some((mark, cycle)) = c.mark {
                let gap = host.saturating_sub(mark);
                let capped = gap > cap;
                let cycles = (gap.min(cap).as_secs_f64() * clock_hz).round() as u64;
                let h = &mut self.c.host;
                h.gaps += 1;
                h.capped_gaps += u64::from(capped);
                h.gap_cycles += cycles;
                h.longest_gap_ns = h.longest_gap_ns.max(u64::try_from(gap.as_nanos()).unwrap_or(u64::MAX));
                c.stats.host_gaps += 1;
                c.stats.host_gaps_capped += u64::from(capped);
                c.stats.host_gap_cycles += cycles;
                let target = cycle.saturating_add(cycles);
                if target > now {
                    h.charged_cycles += target - now;
                    c.queue.push_front((req, at));
                    c.charged = true;
                    self.block(id, |serial| Blocked::HostTime { serial }, Some(target));
                    return;
                }
            }
            // The message itself is a mark: the client's next gap starts at its arrival.
            let host = c.mark.map_or(host, |(m, _)| m.max(host));
            c.mark = Some((host, now));
        }
        self.execute(id, req);
    }

    /// Runs queued requests of `id` until one blocks.
    fn pump(&mut self, id: u64) {
        loop {
            let Some(c) = self.clients.get_mut(&id) else { return };
            if c.blocked.is_some() || c.dead || c.outbox_full() {
                return;
            }
            let Some((req, at)) = c.queue.pop_front() else { return };
            self.start(id, req, at);
        }
    }

    fn reply(&mut self, id: u64, reply: &Reply) {
        let host = if self.p.host_time == HostTime::Real {
            let t = Instant::now();
            if self.batch_start.is_some() {
                self.batch_reply = Some(t);
            }
            Some(self.host_clock(t))
        } else {
            None
        };
        let Some(c) = self.clients.get_mut(&id) else { return };
        if c.dead {
            return;
        }
        if matches!(reply, Reply::Error { .. }) {
            c.stats.errors += 1;
        }
        if let Err(e) = encode_frame(reply, &mut self.frame) {
            self.dead.push((id, format!("cannot encode a reply: {e}")));
            c.dead = true;
            return;
        }
        if c.outbox.is_empty() {
            match send_now(&c.writer, &self.frame) {
                Ok(sent) if sent == self.frame.len() => {}
                Ok(sent) => {
                    c.outbox.extend(&self.frame[sent..]);
                    c.outbox_frames += 1;
                }
                Err(e) => {
                    c.dead = true;
                    self.dead.push((id, format!("write failed: {e}")));
                }
            }
        } else {
            c.outbox.extend(&self.frame);
            c.outbox_frames += 1;
        }
        if let Some(host) = host {
            // The client's host time starts when its answer has left: socket delivery, the
            // OS waking its thread and its own code until its next message.
            c.mark = Some((host, self.now));
        }
    }

    fn block(&mut self, id: u64, make: impl FnOnce(u64) -> Blocked, deadline: Option<u64>) {
        self.serial += 1;
        let serial = self.serial;
        if let Some(c) = self.clients.get_mut(&id) {
            c.blocked = Some(make(serial));
            self.waiting += 1;
        }
        if let Some(t) = deadline {
            self.deadlines.push(Reverse((t, Deadline::Client { id, serial })));
        }
    }

    fn unblock(&mut self, id: u64, reply: Reply) {
        if let Some(c) = self.clients.get_mut(&id) {
            if c.blocked.take().is_some() {
                self.waiting -= 1;
            }
        }
        self.reply(id, &reply);
        self.pump(id);
    }

    /// Writes what the clients' sockets take of their unsent replies; a client whose outbox
    /// fell below its limit runs its queued requests again.
    fn flush_outboxes(&mut self) {
        let pending: Vec<u64> = self.clients.iter().filter(|(_, c)| !c.outbox.is_empty() && !c.dead).map(|(id, _)| *id).collect();
        for id in pending {
            let Some(c) = self.clients.get_mut(&id) else { continue };
            let was_full = c.outbox_full();
            let (head, _) = c.outbox.as_slices();
            match send_now(&c.writer, head) {
                Ok(sent) => {
                    c.outbox.drain(..sent);
                    if c.outbox.is_empty() {
                        c.outbox_frames = 0;
                    }
                }
                Err(e) => {
                    c.dead = true;
                    self.dead.push((id, format!("write failed: {e}")));
                    continue;
                }
            }
            if was_full && !c.outbox_full() {
                self.pump(id);
            }
        }
    }

    /// Marks a client dead; it is removed (and its socket shut) outside the cycle loop.
    fn kill(&mut self, id: u64, reason: String) {
        if let Some(c) = self.clients.get_mut(&id) {
            c.dead = true;
        }
        self.dead.push((id, reason));
    }

    fn reap_dead(&mut self) {
        while let Some((id, reason)) = self.dead.pop() {
            self.close_client(id, &reason);
        }
    }

    fn close_client(&mut self, id: u64, reason: &str) {
        let Some(mut c) = self.clients.remove(&id) else { return };
        if c.blocked.take().is_some() {
            self.waiting -= 1;
        }
        if c.live {
            // A client that disconnects, or dies, gives its claim on live time up.
            c.live = false;
            c.stats.live = false;
            self.live_claim_ended(id, "it left");
        }
        let _ = c.writer.shutdown(std::net::Shutdown::Both);
        if let Some(credits) = &c.credits {
            credits.close();
        }
        for slot in self.tags.iter_mut().flatten() {
            if slot.client == Some(id) {
                slot.client = None;
            }
        }
        let freed = self.mem.alloc.free_client(id);
        self.info(&format!(
            "client {id} ({}) left: {reason}; {freed} DMA allocation(s) freed",
            if c.stats.name.is_empty() { "no Hello" } else { &c.stats.name }
        ));
        c.stats.connected = false;
        if self.gone.len() >= 64 {
            self.gone.pop_front();
        }
        self.gone.push_back(c.stats);
        if self.clients.is_empty() {
            // Let traffic the client left behind (posted writes, DMA) drain for a while.
            self.drain_until = self.now.saturating_add(self.p.completion_timeout_cycles);
        }
    }

    fn error(&mut self, id: u64, kind: ErrorKind, message: String) {
        self.reply(id, &Reply::Error { kind, message });
    }

    fn execute(&mut self, id: u64, req: Request) {
        let Some(c) = self.clients.get_mut(&id) else { return };
        // Executed: the client's reader may read its next frame.
        if let Some(credits) = &c.credits {
            credits.release();
        }
        if !c.hello {
            match req {
                Request::Hello { protocol_version, client_name } => {
                    if protocol_version != PROTOCOL_VERSION {
                        let message = format!(
                            "client speaks protocol version {protocol_version}, this tlpx-sim speaks {PROTOCOL_VERSION}: use tlpx and tlpx-sim of the same build"
                        );
                        self.reply(id, &Reply::HelloRefused { sim_protocol_version: PROTOCOL_VERSION, message });
                        self.kill(id, format!("protocol version {protocol_version} != {PROTOCOL_VERSION}"));
                        return;
                    }
                    c.hello = true;
                    let name: String = client_name.chars().take(200).collect();
                    c.stats.name = name.clone();
                    self.info(&format!("client {id} ({name}) connected"));
                    let mut hello = self.p.hello.clone();
                    hello.client_id = id;
                    hello.link = *self.link.config();
                    self.reply(id, &Reply::HelloOk(Box::new(hello)));
                }
                other => {
                    self.error(id, ErrorKind::NotAllowed, format!("the first request must be Hello, not {}", other.name()));
                    self.kill(id, format!("sent {} before Hello", other.name()));
                }
            }
            return;
        }
        match req {
            Request::Hello { .. } => self.error(id, ErrorKind::NotAllowed, "Hello was already sent on this connection".into()),
            Request::ConfigRead { offset, len } => match self.config.read(offset, len) {
                Ok(data) => self.reply(id, &Reply::ConfigData { data }),
                Err(e) => self.error(id, ErrorKind::InvalidArgument, e),
            },
            Request::ConfigWrite { offset, data } => match self.config.write(offset, &data) {
                Ok(changed) => {
                    if changed {
                        self.apply_view();
                    }
                    self.reply(id, &Reply::ConfigWritten);
                }
                Err(e) => self.error(id, ErrorKind::InvalidArgument, e),
            },
            Request::MmioRead { bar, offset, width } => {
                c.stats.mmio_reads += 1;
                if let Err(e) = self.mmio_allowed(bar, offset, width) {
                    self.error(id, e.0, e.1);
                    return;
                }
                let kind = TagKind::Mmio { offset, len: width, block: false, data: ReadCollector::new(usize::from(width)) };
                let Some((tag, _)) = self.alloc_tag(id, kind) else {
                    self.error(id, ErrorKind::NotAllowed, "all 256 tags of the root complex are in use; retry later".into());
                    return;
                };
                let t = rc::mmio_read_tlp(RC_ID, tag, self.view.bar0, offset, width);
                self.down_queue.push_back(DownTlp { dwords: t, origin: Origin::Mmio });
                self.block(id, |serial| Blocked::MmioRead { tag, serial }, None);
            }
            Request::MmioReadBlock { bar, offset, len } => {
                c.stats.mmio_reads += 1;
                if let Err(e) = self.mmio_block_allowed(bar, offset, usize::from(len)) {
                    self.error(id, e.0, e.1);
                    return;
                }
                let kind = TagKind::Mmio { offset, len, block: true, data: ReadCollector::new(usize::from(len)) };
                let Some((tag, _)) = self.alloc_tag(id, kind) else {
                    self.error(id, ErrorKind::NotAllowed, "all 256 tags of the root complex are in use; retry later".into());
                    return;
                };
                let t = rc::mmio_read_block_tlp(RC_ID, tag, self.view.bar0, offset, usize::from(len));
                self.down_queue.push_back(DownTlp { dwords: t, origin: Origin::Mmio });
                self.block(id, |serial| Blocked::MmioRead { tag, serial }, None);
            }
            Request::MmioWriteBlock { bar, offset, data } => {
                c.stats.mmio_writes += 1;
                if let Err((_, msg)) = self.mmio_block_allowed(bar, offset, data.len()) {
                    self.reject_mmio_write(id, &msg);
                    return;
                }
                let t = rc::mmio_write_block_tlp(RC_ID, self.view.bar0, offset, &data);
                self.down_queue.push_back(DownTlp { dwords: t, origin: Origin::Mmio });
            }
            Request::SetLive { live } => {
                if c.live != live {
                    c.live = live;
                    c.stats.live = live;
                    if live {
                        self.live_claim_started(id);
                    } else {
                        self.live_claim_ended(id, "it gave its claim up");
                    }
                }
                let reply = Reply::LiveSet { live, live_clients: self.live_clients, card_cycle: self.now };
                self.reply(id, &reply);
            }
            Request::SetDmaFaults(faults) => {
                self.completer.set_faults(faults);
                self.info(&format!(
                    "client {id}: DMA read faults: UR every {}, CA every {}, poison every {}, drop every {} (0 = off)",
                    faults.ur_every, faults.ca_every, faults.poison_every, faults.drop_every
                ));
                self.reply(id, &Reply::DmaFaultsSet);
            }
            Request::MmioWrite { bar, offset, width, value } => {
                c.stats.mmio_writes += 1;
                if let Err((_, msg)) = self.mmio_allowed(bar, offset, width) {
                    self.reject_mmio_write(id, &msg);
                    return;
                }
                let t = rc::mmio_write_tlp(RC_ID, self.view.bar0, offset, width, value);
                self.down_queue.push_back(DownTlp { dwords: t, origin: Origin::Mmio });
            }
            Request::AllocDma { len, align } => match self.mem.alloc.alloc(id, len, align) {
                Ok(a) => {
                    c.stats.dma_allocations += 1;
                    self.mem.zero(a.offset, a.len);
                    let r = DmaAllocation { id: a.id, file_offset: a.offset, bus_addr: a.bus_addr, len: a.len };
                    self.reply(id, &Reply::DmaAllocated(r));
                }
                Err(AllocError::Invalid(e)) => self.error(id, ErrorKind::InvalidArgument, e),
                Err(AllocError::OutOfMemory(e)) => self.error(id, ErrorKind::OutOfMemory, e),
            },
            Request::FreeDma { id: aid } => match self.mem.alloc.free(id, aid) {
                Ok(_) => self.reply(id, &Reply::DmaFreed),
                Err(e) => self.error(id, ErrorKind::InvalidArgument, e),
            },
            Request::WaitIrq { vector_mask, timeout_cycles } => {
                if vector_mask == 0 {
                    self.error(
                        id,
                        ErrorKind::InvalidArgument,
                        "vector_mask 0 selects no vector: set bit n to wait for vector n (0..31)".into(),
                    );
                    return;
                }
                if let Some(pos) = c.irqs.iter().position(|(v, _)| vector_mask & (1u32 << (v & 31)) != 0) {
                    let (vector, card_cycle) = c.irqs.remove(pos).unwrap_or((0, 0));
                    c.stats.irqs_delivered += 1;
                    self.reply(id, &Reply::Irq { vector, card_cycle });
                } else if timeout_cycles == 0 {
                    self.reply(id, &Reply::IrqTimedOut { card_cycle: self.now });
                } else {
                    let deadline = self.now.saturating_add(timeout_cycles);
                    self.block(id, |serial| Blocked::WaitIrq { mask: vector_mask, serial }, Some(deadline));
                }
            }
            Request::Advance { cycles } => {
                if cycles == 0 {
                    self.reply(id, &Reply::Advanced { now: self.now });
                } else {
                    let deadline = self.now.saturating_add(cycles);
                    self.block(id, |serial| Blocked::Advance { serial }, Some(deadline));
                }
            }
            Request::InjectTlp { mut dwords, wait_cycles } => {
                c.stats.injected_tlps += 1;
                let kind = match tlp::check_framing(&dwords) {
                    Ok(k) => k,
                    Err(e) => {
                        self.error(id, ErrorKind::InvalidArgument, e);
                        return;
                    }
                };
                if dwords.len() < 3 {
                    self.error(id, ErrorKind::InvalidArgument, format!("a TLP needs at least 3 header DWs, got {}", dwords.len()));
                    return;
                }
                if wait_cycles == 0 {
                    self.error(id, ErrorKind::InvalidArgument, "wait_cycles must be at least 1 card cycle".into());
                    return;
                }
                let deadline = Some(self.now.saturating_add(wait_cycles));
                if kind.is_non_posted() {
                    let orig_tag = tlp::tag(dwords[1]);
                    let Some((tag, _)) = self.alloc_tag(id, TagKind::Inject { orig_tag, collected: Vec::new() }) else {
                        self.error(id, ErrorKind::NotAllowed, "all 256 tags of the root complex are in use; retry later".into());
                        return;
                    };
                    tlp::set_request_tag(&mut dwords, tag);
                    self.down_queue.push_back(DownTlp { dwords, origin: Origin::Injected { waiter: None } });
                    self.block(id, |serial| Blocked::InjectNonPosted { tag, serial }, deadline);
                } else {
                    self.serial += 1;
                    let token = self.serial;
                    self.down_queue.push_back(DownTlp { dwords, origin: Origin::Injected { waiter: Some((id, token)) } });
                    self.block(id, |serial| Blocked::InjectPosted { token, serial }, deadline);
                }
            }
            Request::Stats => {
                let s = self.stats();
                self.reply(id, &Reply::Stats(Box::new(s)));
            }
            Request::Shutdown => {
                self.info(&format!("client {id} asked for shutdown"));
                self.reply(id, &Reply::ShuttingDown);
                self.shutdown = true;
            }
        }
    }

    // Live time ----------------------------------------------------------------------------

    /// Client `id` took a claim on live time: the first one starts live time, whose pacing
    /// counts from here (this wall instant, this card cycle).
    fn live_claim_started(&mut self, id: u64) {
        self.live_clients += 1;
        if self.live_clients == 1 {
            self.live_since = Some((Instant::now(), self.now));
            self.live_changed = true;
            self.info(&format!(
                "client {id} asked for live time: card time runs continuously from card cycle {}, never ahead of wall time",
                self.now
            ));
        }
    }

    /// A claim on live time ended (`why`: the client gave it up or left); the last one ends
    /// live time and time runs only while a client waits again.
    fn live_claim_ended(&mut self, id: u64, why: &str) {
        self.live_clients = self.live_clients.saturating_sub(1);
        if self.live_clients > 0 {
            return;
        }
        if let Some((t0, c0)) = self.live_since.take() {
            let cycles = self.now - c0;
            self.live_cycles_done += cycles;
            self.live_changed = true;
            self.info(&format!(
                "live time ended (client {id}: {why}) after {cycles} card cycles ({:.3} ms of card time in {:.2} s of wall time): time runs only while a client waits",
                cycles as f64 / self.p.clock_hz * 1e3,
                t0.elapsed().as_secs_f64()
            ));
        }
    }

    /// Card cycles run in live time so far (ended spans and the running one).
    fn live_cycles(&self) -> u64 {
        self.live_cycles_done + self.live_since.map_or(0, |(_, c0)| self.now - c0)
    }

    fn reject_mmio_write(&mut self, id: u64, msg: &str) {
        self.c.stats.rejected_mmio_writes += 1;
        if let Some(c) = self.clients.get_mut(&id) {
            c.stats.errors += 1;
        }
        self.warn(&format!("client {id}: MMIO write dropped: {msg}"));
    }

    fn mmio_allowed(&self, bar: u8, offset: u64, width: u8) -> Result<(), (ErrorKind, String)> {
        check_mmio(bar, offset, width, &self.p.hello.bar_sizes).map_err(|e| (ErrorKind::InvalidArgument, e))?;
        self.memory_enabled()
    }

    fn mmio_block_allowed(&self, bar: u8, offset: u64, len: usize) -> Result<(), (ErrorKind, String)> {
        check_mmio_block(bar, offset, len, &self.p.hello.bar_sizes).map_err(|e| (ErrorKind::InvalidArgument, e))?;
        self.memory_enabled()
    }

    fn memory_enabled(&self) -> Result<(), (ErrorKind, String)> {
        if !self.view.memory_enable {
            return Err((
                ErrorKind::NotAllowed,
                "memory space is disabled in the card's command register (config offset 0x4, bit 1): enable it with a config write".into(),
            ));
        }
        Ok(())
    }

    // Config space --------------------------------------------------------------------------

    /// Hands config space to the card's cfg_* inputs and the link model, rewrites the dump.
    fn apply_view(&mut self) {
        let v = self.config.view();
        self.view = v;
        let (domain, bus, dev, func) = self.p.pci_address;
        self.inp.cfg_bus_master_enable = u8::from(v.bus_master_enable);
        self.inp.cfg_msi_enable = u8::from(v.msi_enable);
        self.inp.cfg_requester_id = (u16::from(bus) << 8) | (u16::from(dev) << 3) | u16::from(func);
        self.inp.cfg_max_payload_size = v.max_payload_size as u16;
        self.inp.cfg_max_request_size = v.max_read_request_size as u16;
        let l = *self.link.config();
        if let Ok(cfg) = LinkConfig::new(l.generation, l.lanes, v.max_payload_size, v.max_read_request_size, l.rcb, l.addr64) {
            self.link.set_config(cfg);
        }
        let dump = tlpx_pci::render_dump(domain, bus, dev, func, self.config.bytes());
        if let Err(e) = self.p.dump.write(dump.as_bytes()) {
            self.warn(&format!("cannot write {}: {e}", self.p.dump.path().display()));
        }
    }

    // Stats ---------------------------------------------------------------------------------

    pub fn stats(&self) -> SimStats {
        let mut s = self.c.stats.clone();
        s.cycles = self.now;
        s.wall_seconds_in_cycle_loop = self.c.wall.as_secs_f64();
        s.cycles_per_second =
            if s.wall_seconds_in_cycle_loop > 0.0 { self.c.cycles_run as f64 / s.wall_seconds_in_cycle_loop } else { 0.0 };
        let by_type = |counts: &[u64; KINDS]| -> BTreeMap<String, u64> {
            ALL_KINDS.iter().filter(|k| counts[**k as usize] > 0).map(|k| (k.name().to_string(), counts[*k as usize])).collect()
        };
        s.host_to_card = DirectionStats { by_type: by_type(&self.c.down), ..self.c.down_dir.clone() };
        s.card_to_host = DirectionStats { by_type: by_type(&self.c.up), ..self.c.up_dir.clone() };
        s.traffic = self.c.traffic;
        s.dma_faults = self.completer.faults();
        s.host_time = self.c.host;
        s.live_clients = self.live_clients;
        s.live_cycles = self.live_cycles();
        s.live_paced_seconds = self.live_paced.as_secs_f64();
        if self.c.msi_writes > 0 {
            s.card_to_host.by_type.insert("MSI (MWr)".into(), self.c.msi_writes);
        }
        s.clients = self.clients.values().map(|c| c.stats.clone()).chain(self.gone.iter().cloned()).collect();
        s.clients.sort_by_key(|c| c.id);
        s
    }

    /// Removes every client (shutdown).
    pub fn close_all(&mut self, reason: &str) {
        let ids: Vec<u64> = self.clients.keys().copied().collect();
        for id in ids {
            self.close_client(id, reason);
        }
    }
}

fn status_kind(status: u8) -> ErrorKind {
    match status {
        tlp::CPL_UR => ErrorKind::UnsupportedRequest,
        tlp::CPL_CA => ErrorKind::CompleterAbort,
        _ => ErrorKind::OtherCompletionStatus,
    }
}

const ALL_KINDS: [Kind; KINDS] = [
    Kind::MRd32,
    Kind::MRd64,
    Kind::MRdLk,
    Kind::MWr32,
    Kind::MWr64,
    Kind::IORd,
    Kind::IOWr,
    Kind::CfgRd0,
    Kind::CfgWr0,
    Kind::CfgRd1,
    Kind::CfgWr1,
    Kind::Cpl,
    Kind::CplD,
    Kind::CplLk,
    Kind::CplDLk,
    Kind::Msg,
    Kind::MsgD,
    Kind::FetchAdd,
    Kind::Swap,
    Kind::Cas,
    Kind::Other,
];

#[cfg(test)]
mod tests {
    use super::*;

    const HZ: f64 = 125e6;

    #[test]
    fn live_time_runs_up_to_wall_time_and_no_further() {
        // 1 ms of wall time since live time began at cycle 1000: up to cycle 1000 + 125,000.
        assert_eq!(pace(1000, 1000, Duration::from_millis(1), HZ), Pace::Run(125_000));
        assert_eq!(pace(100_000, 1000, Duration::from_millis(1), HZ), Pace::Run(26_000));
        // Exactly at wall time: wait until wall time is PACE_SLACK ahead.
        assert_eq!(pace(126_000, 1000, Duration::from_millis(1), HZ), Pace::Wait(PACE_SLACK));
        // Ahead (cannot happen while the sim obeys Run, but the rule holds): wait longer.
        assert_eq!(pace(251_000, 1000, Duration::from_millis(1), HZ), Pace::Wait(Duration::from_millis(1) + PACE_SLACK));
    }

    #[test]
    fn a_slow_simulator_never_waits() {
        // The sim ran 1,000 cycles in a second of a 125 MHz card: far behind wall time.
        let p = pace(1000, 0, Duration::from_secs(1), HZ);
        assert_eq!(p, Pace::Run(125_000_000 - 1000));
        // Live time just started: no cycle is allowed until some wall time has passed.
        assert!(matches!(pace(5, 5, Duration::ZERO, HZ), Pace::Wait(w) if w == PACE_SLACK));
    }
}
