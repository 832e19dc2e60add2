//! The sim thread: owns the card, virtual time, the root complex and the clients' state.
//!
//! Client reader threads (server.rs) turn frames into [`Event`]s on one channel; this thread
//! handles them between runs of card cycles and writes the replies. Virtual time is the
//! card's cycle count and advances only while [`Sim::busy`] (see docs/sim-protocol.md):
//! while some client waits, or, in live time (a client asked with `SetLive`), always, paced
//! so that it never runs ahead of wall time ([`pace`]).
//!
//! The parts, one module each: [`time`] (the main loop, host clock, live time, deadlines),
//! [`cycle`] (one card cycle on the link), [`dma`] (the card's requests), [`tags`] (the root
//! complex's requests and their completions), [`interrupts`], [`clients`] (connections,
//! replies, blocking), [`requests`] (the command dispatcher) and [`config`]. This module holds
//! the state they share.

mod clients;
mod config;
mod cycle;
mod dma;
mod interrupts;
mod requests;
mod tags;
mod time;

use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap, VecDeque};
use std::os::unix::net::UnixStream;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tlpx_model::link::LinkConfig;
use tlpx_sim_protocol::tlp::Kind;
use tlpx_sim_protocol::{ClientStats, DirectionStats, DmaFaults, HelloInfo, HostTime, HostTimeStats, Request, SimStats, TrafficStats};

use crate::card::{Card, CardInputs, CardOutputs};
use crate::completer::ReadCompleter;
use crate::config_space::{CardView, ConfigSpace};
use crate::guestmem::GuestMemory;
use crate::hostmem::HostMemory;
use crate::link::Link;
use crate::rc::ReadCollector;
use crate::rundir::RewrittenFile;

pub use clients::Credits;
pub use time::{pace, Pace};

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
    /// The client that changed the interrupt mode (MSI's Multiple Message Enable, MSI-X's
    /// control) and the controls before it did: restored when it leaves, however it leaves,
    /// so that the next client finds the card in the mode every driver starts from.
    interrupt_mode_owner: Option<(u64, (u16, u16))>,
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
            interrupt_mode_owner: None,
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
