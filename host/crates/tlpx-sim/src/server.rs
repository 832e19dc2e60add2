//! The process around the engine: runtime files, the listening socket, one reader thread per
//! client, signals, the banner. `serve` is everything `tlpx-sim` does after parsing options.

use std::io::{BufReader, Write};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::mpsc::{self, Sender};
use std::sync::Arc;

use tlpx_model::link::LinkConfig;
use tlpx_sim_protocol::{read_frame, DmaFaults, FrameError, HelloInfo, HostTime, Request, BAR0_SIZE, PROTOCOL_VERSION};

use crate::card::{built_library_path, env_library, CardLibrary};
use crate::config_space::{ConfigParams, ConfigSpace, MsixParams, DEVICE_ID, VENDOR_ID};
use crate::datapath::{choose_data_width, datapath_warning, default_lanes};
use crate::engine::{Credits, EngineParams, Event, Sim};
use crate::hostmem::HostMemory;
use crate::rundir::{EntryKind, RewrittenFile, RuntimeDir};

/// Bus address of BAR0 (fixed; a config write may move it).
pub const BAR0_BUS_ADDRESS: u32 = 0xF000_0000;
/// PCI address of the simulated card: 0000:01:00.0.
pub const PCI_ADDRESS: (u16, u8, u8, u8) = (0, 1, 0, 0);

#[derive(Debug, thiserror::Error)]
pub enum SimError {
    #[error(transparent)]
    Card(#[from] crate::card::CardError),
    #[error("{0}")]
    Invalid(String),
    #[error("{context}: {source}")]
    Io { context: String, source: std::io::Error },
}

fn io(context: impl Into<String>) -> impl FnOnce(std::io::Error) -> SimError {
    let context = context.into();
    move |source| SimError::Io { context, source }
}

/// Everything `tlpx-sim` was asked to do.
#[derive(Debug, Clone)]
pub struct SimOptions {
    pub socket: PathBuf,
    /// The card library; None: env TLPX_CARD_LIB, else the built card of `data_width`, else
    /// the smallest built card that keeps up with the link (see [`choose_card`]).
    pub card: Option<PathBuf>,
    /// `--with-cpu`: the built card with the soft CPU, `build/card/dw<N>-cpu` (N: `data_width`,
    /// else 64), instead of the default card search (TLPX_CARD_LIB included).
    pub with_cpu: bool,
    /// The data width asked for on the command line, checked against the library.
    pub data_width: Option<u32>,
    pub generation: u8,
    /// None: 1, 4, 8 lanes for a 64, 128, 256-bit card.
    pub lanes: Option<u8>,
    pub mps: u32,
    pub mrrs: u32,
    pub rcb: u32,
    /// None: the card's build info, else 125 MHz.
    pub clock_mhz: Option<f64>,
    pub dma_latency_ns: u64,
    pub dma_jitter_ns: u64,
    pub seed: u64,
    pub host_mem_mib: u64,
    /// MSI vectors asked for the capability (--msi-vectors).
    pub msi_vectors: u32,
    /// MSI-X table size the capability presents (--msix), 0: no MSI-X capability.
    pub msix_vectors: u32,
    pub dma_base: u64,
    pub completion_timeout_us: u64,
    pub corrupt_read: Vec<(u64, u32)>,
    pub dma_faults: DmaFaults,
    pub free_run: bool,
    /// `Real`: a client's wall time between its messages becomes card time (not deterministic).
    pub host_time: HostTime,
    /// The most wall time one gap is charged as, µs (1..=10 s).
    pub host_time_cap_us: u64,
    /// The board whose hard IP config space presents (boards.json beside the card library);
    /// None: the card's default (the board of its width and clock, else generic).
    pub board: Option<String>,
    pub quiet: bool,
}

/// Files a sim keeps beside its socket. Named after the socket's stem, so two sims with
/// different sockets can share a directory.
#[derive(Debug, Clone)]
pub struct RuntimeFiles {
    pub dir: PathBuf,
    pub socket: PathBuf,
    pub host_memory: PathBuf,
    pub dump: PathBuf,
    pub pid: PathBuf,
}

impl RuntimeFiles {
    pub fn for_socket(socket: &Path) -> RuntimeFiles {
        let dir = socket.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new(".")).to_owned();
        let stem = socket.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_else(|| "sim".into());
        RuntimeFiles {
            socket: socket.to_owned(),
            host_memory: dir.join(format!("{stem}.hostmem")),
            dump: dir.join(format!("{stem}.lspci")),
            pid: dir.join(format!("{stem}.pid")),
            dir,
        }
    }

    /// The name of `path` in the runtime directory.
    pub(crate) fn name(path: &Path) -> Result<&str, SimError> {
        path.file_name()
            .and_then(|n| n.to_str())
            .ok_or_else(|| SimError::Invalid(format!("--socket {} must end in a file name of UTF-8 characters", path.display())))
    }

    /// Names of the socket and of the files beside it (the dump's temporary file too: a
    /// crash in the middle of rewriting the dump leaves it), and whether each is the socket.
    fn names(&self) -> Result<Vec<(String, bool)>, SimError> {
        let dump = Self::name(&self.dump)?;
        let names = vec![
            (Self::name(&self.socket)?.to_owned(), true),
            (Self::name(&self.host_memory)?.to_owned(), false),
            (dump.to_owned(), false),
            (format!("{dump}.tmp"), false),
            (Self::name(&self.pid)?.to_owned(), false),
        ];
        if names[1..].iter().any(|(n, _)| *n == names[0].0) {
            return Err(SimError::Invalid(format!(
                "--socket {} has the name of one of the files tlpx-sim keeps beside its socket (.hostmem, .lspci, .lspci.tmp, .pid): give it another name, e.g. sim.sock",
                self.socket.display()
            )));
        }
        Ok(names)
    }

    /// Opens the runtime directory, creating it 0700 if missing, and checks it is safe
    /// ([`RuntimeDir::open`]).
    pub fn open_dir(&self) -> Result<RuntimeDir, SimError> {
        self.names()?;
        RuntimeDir::open(&self.dir).map_err(SimError::Invalid)
    }

    /// Makes sure no live sim serves the socket, then removes the stale files of a dead sim:
    /// a socket nobody answers on and regular files of this stem, all owned by this user.
    /// Anything else where one of them belongs — a symlink, a regular file at the socket's
    /// name, a directory, someone else's file — is refused by name and left as it is.
    /// Everything is checked before anything is removed. Call with the directory locked.
    pub fn claim(&self, dir: &RuntimeDir) -> Result<(), SimError> {
        let me = crate::rundir::euid();
        let names = self.names()?;
        let mut stale = Vec::new();
        for (name, is_socket) in &names {
            let (name, is_socket) = (name.as_str(), *is_socket);
            let shown = dir.show(name);
            let entry = dir.entry(name).map_err(io(format!("cannot look at {shown}")))?;
            let Some(e) = entry else { continue };
            if e.kind == EntryKind::Symlink {
                return Err(SimError::Invalid(format!(
                    "{shown} is a symbolic link (to {}): tlpx-sim never follows nor removes a symlink among its files; remove it if it is yours, or give another --socket",
                    dir.link_target(name)
                )));
            }
            if is_socket && e.kind != EntryKind::Socket {
                return Err(SimError::Invalid(format!(
                    "--socket {shown} exists and is {}, not a socket: tlpx-sim replaces only a stale socket (one no live sim answers on); remove it or give another --socket",
                    e.kind.describe()
                )));
            }
            if !is_socket && e.kind != EntryKind::File {
                return Err(SimError::Invalid(format!(
                    "{shown} is {}, not a stale tlpx-sim file (a regular file): tlpx-sim replaces only its own stale files; remove it or give another --socket",
                    e.kind.describe()
                )));
            }
            if is_socket && UnixStream::connect(&self.socket).is_ok() {
                let pid = dir.read_small(Self::name(&self.pid)?).map(|p| p.trim().to_owned()).unwrap_or_else(|| "unknown".into());
                return Err(SimError::Invalid(format!(
                    "another tlpx-sim (pid {pid}) is serving {}: stop it first (send it Shutdown or SIGTERM), or give this one another --socket",
                    self.socket.display()
                )));
            }
            if e.uid != me {
                return Err(SimError::Invalid(format!(
                    "{shown} is owned by uid {}, not by uid {me} (this user): tlpx-sim removes only its own stale files; remove it or give another --socket",
                    e.uid
                )));
            }
            stale.push(name);
        }
        for name in stale {
            dir.unlink(name).map_err(io(format!("cannot remove the stale {}", dir.show(name))))?;
        }
        Ok(())
    }

    /// Listens on the socket (mode 0600 from the start: made under umask 0177, as ssh-agent
    /// does) and checks it landed in the directory that was checked.
    pub fn bind(&self, dir: &RuntimeDir) -> Result<UnixListener, SimError> {
        // SAFETY: umask only swaps the process's file creation mask; restored right after.
        let old = unsafe { libc::umask(0o177) };
        let bound = UnixListener::bind(&self.socket);
        // SAFETY: as above.
        unsafe { libc::umask(old) };
        let listener = bound.map_err(io(format!(
            "cannot listen on {} (paths longer than 107 bytes do not work for Unix sockets)",
            self.socket.display()
        )))?;
        let name = Self::name(&self.socket)?;
        match dir.entry(name) {
            Ok(Some(e)) if e.kind == EntryKind::Socket && dir.still_at_path() => {
                dir.mark_ours(name, e.dev, e.ino);
                Ok(listener)
            }
            _ => Err(SimError::Invalid(format!(
                "the runtime directory {} changed while tlpx-sim started (a symlink on its path replaced?): not serving there",
                dir.path().display()
            ))),
        }
    }
}

/// Blocks the termination signals in this thread and every thread it spawns afterwards, and
/// returns the set so one thread can sigwait on it.
pub(crate) fn block_signals() -> libc::sigset_t {
    // SAFETY: plain libc calls on a local sigset.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGINT);
        libc::sigaddset(&mut set, libc::SIGTERM);
        libc::sigaddset(&mut set, libc::SIGHUP);
        libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
        set
    }
}

pub(crate) fn spawn_signal_thread(set: libc::sigset_t, tx: Sender<Event>) {
    std::thread::spawn(move || loop {
        let mut sig: libc::c_int = 0;
        // SAFETY: set is a valid sigset; sig is a valid out pointer.
        let r = unsafe { libc::sigwait(&set, &mut sig) };
        if r == 0 && tx.send(Event::Signal(sig)).is_err() {
            return;
        }
    });
}

fn spawn_acceptor(listener: UnixListener, tx: Sender<Event>, quiet: bool) {
    std::thread::spawn(move || {
        let mut next_id = 1u64;
        for stream in listener.incoming() {
            let Ok(stream) = stream else { continue };
            let id = next_id;
            next_id += 1;
            let Ok(writer) = stream.try_clone() else { continue };
            let credits = Credits::new();
            if tx.send(Event::Connected { id, writer, credits: Some(credits.clone()) }).is_err() {
                return;
            }
            let tx = tx.clone();
            std::thread::spawn(move || read_client(id, stream, tx, &credits, quiet));
        }
    });
}

/// Reads a client's requests for the sim thread, each after a credit (engine::Credits): a
/// client whose requests the sim has not executed yet waits in its own socket.
fn read_client(id: u64, stream: UnixStream, tx: Sender<Event>, credits: &Credits, quiet: bool) {
    let mut reader = BufReader::with_capacity(64 * 1024, &stream);
    loop {
        if !credits.acquire() {
            return; // the sim closed the client
        }
        match read_frame::<_, Request>(&mut reader) {
            Ok(request) => {
                let at = std::time::Instant::now();
                if tx.send(Event::Request { id, request, at }).is_err() {
                    return;
                }
            }
            Err(FrameError::Closed) => {
                let _ = tx.send(Event::Closed { id, reason: "disconnected".into() });
                return;
            }
            Err(e) => {
                let reason = match e {
                    FrameError::Io(ref io) if io.kind() == std::io::ErrorKind::ConnectionReset => "connection reset".to_string(),
                    FrameError::Io(_) if quiet => e.to_string(),
                    _ => {
                        eprintln!("tlpx-sim: client {id}: {e}; closing the connection");
                        e.to_string()
                    }
                };
                let _ = stream.shutdown(std::net::Shutdown::Both);
                let _ = tx.send(Event::Closed { id, reason });
                return;
            }
        }
    }
}

/// The MSI vectors the capability offers: `--msi-vectors`, refused when not a power of two up
/// to 32 or above what the board's hard IP (its profile) offers.
fn msi_vectors(asked: u32, board: &str, profile: &HardIpProfile) -> Result<u32, SimError> {
    if !asked.is_power_of_two() || asked > 32 {
        return Err(SimError::Invalid(format!("--msi-vectors must be 1, 2, 4, 8, 16 or 32, not {asked}")));
    }
    if asked > profile.msi_vectors {
        return Err(SimError::Invalid(format!(
            "--msi-vectors {asked}: --board {board} ({}) offers {} MSI vector(s); the card library's boards.json says so \
             (a card built before multi-vector MSI offers 1)",
            profile.hard_ip, profile.msi_vectors
        )));
    }
    Ok(asked)
}

/// The MSI-X capability `--msix N` asks for: N vectors (0: none), at most what the board's hard
/// IP and the card's table offer, the table and PBA where the card's build info says.
fn msix_params(asked: u32, board: &str, profile: &HardIpProfile, build_info: &str) -> Result<Option<MsixParams>, SimError> {
    if asked == 0 {
        return Ok(None);
    }
    let card_vectors = build_info_number(build_info, "msix_vectors").unwrap_or(0.0) as u32;
    let offered = card_vectors.min(profile.msix_vectors);
    if asked > offered {
        return Err(SimError::Invalid(format!(
            "--msix {asked}: {} offers {offered} MSI-X vectors (the card's table: {card_vectors}; --board {board} ({}): {}); \
             0 turns MSI-X off",
            if card_vectors == 0 { "this card library (built before MSI-X)" } else { "the card" },
            profile.hard_ip,
            profile.msix_vectors
        )));
    }
    // Under MSI-X the card sends any of its vectors through its own table (cores/msix.py: no
    // folding, the grant is the table), so a capability naming fewer entries would leave the
    // sources above them unreachable: the table's whole size or nothing.
    if asked != card_vectors {
        return Err(SimError::Invalid(format!(
            "--msix {asked}: the card's MSI-X table has {card_vectors} entries and its vectors use all of them; \
             --msix takes {card_vectors} (MSI-X on) or 0 (off)"
        )));
    }
    let offset = |key: &str| build_info_number(build_info, key).map(|v| v as u32);
    match (offset("msix_table_bar0_offset"), offset("msix_pba_bar0_offset")) {
        (Some(table_offset), Some(pba_offset)) => Ok(Some(MsixParams { vectors: asked, table_offset, pba_offset })),
        _ => Err(SimError::Invalid("--msix: the card's build info does not say where its MSI-X table is".into())),
    }
}

/// Reads a number field from the card's build info JSON.
fn build_info_number(info: &str, key: &str) -> Option<f64> {
    let v: serde_json::Value = serde_json::from_str(info).ok()?;
    v.get(key)?.as_f64()
}

/// The card clock in Hz: `--clock-mhz`, else the card's build info, else 125 MHz.
fn card_clock_hz(lib: &CardLibrary, clock_mhz: Option<f64>) -> Result<f64, SimError> {
    match clock_mhz {
        Some(mhz) if mhz.is_finite() && (1.0..=1000.0).contains(&mhz) => Ok(mhz * 1e6),
        Some(mhz) => Err(SimError::Invalid(format!("--clock-mhz must be 1..1000, not {mhz}"))),
        None => Ok(build_info_number(lib.build_info(), "clock_hz").filter(|c| *c >= 1e6).unwrap_or(125e6)),
    }
}

/// The card and the link width for `opts`, and the warning to print when the card's
/// datapath is slower than the link.
///
/// - `--card` or env TLPX_CARD_LIB: that library (`--data-width`, if given, must match);
/// - else `--data-width N`: the built card `build/card/dwN`;
/// - else `--lanes`: the smallest built card (64, 128, 256 bits) whose datapath bytes/s is
///   at least the link's raw bytes/s, else the widest (with the warning);
/// - else the 64-bit card.
///
/// Without `--lanes`, the link is x1, x4, x8 for a 64, 128, 256-bit card.
pub fn choose_card(opts: &SimOptions) -> Result<(CardLibrary, u8, Option<String>), SimError> {
    let lanes_for = |w: u32| opts.lanes.unwrap_or(default_lanes(w));
    let lib = if opts.with_cpu && opts.card.is_none() {
        let w = opts.data_width.unwrap_or(64);
        let path = built_cpu_library_path(w);
        if !path.exists() {
            return Err(SimError::Invalid(format!(
                "--with-cpu: no card library with the soft CPU at {} (looked above the executable and the current directory): build it with `make gateware CPU=1{}`",
                path.display(),
                if w == 64 { String::new() } else { format!(" DATA_WIDTH={w}") }
            )));
        }
        CardLibrary::load(&path)?
    } else if let Some(path) = opts.card.clone().or_else(env_library) {
        CardLibrary::load(&path)?
    } else if let Some(w) = opts.data_width {
        CardLibrary::load(&built_library_path(w))?
    } else if let Some(lanes) = opts.lanes {
        let raw = LinkConfig::new(opts.generation, lanes, opts.mps, opts.mrrs, opts.rcb, false)
            .map_err(|e| SimError::Invalid(e.to_string()))?
            .raw_bytes_per_second();
        let mut built = Vec::new();
        for w in [64u32, 128, 256] {
            let path = built_library_path(w);
            if path.exists() {
                let lib = CardLibrary::load(&path)?;
                let clock = card_clock_hz(&lib, opts.clock_mhz)?;
                built.push((lib.data_width(), clock, lib));
            }
        }
        let candidates: Vec<(u32, f64)> = built.iter().map(|(w, c, _)| (*w, *c)).collect();
        let Some(choice) = choose_data_width(raw, &candidates) else {
            return Err(SimError::Invalid(format!(
                "no card library found (looked for build/card/dw64, dw128, dw256/libtlpxcard.so above the executable and the current directory, e.g. {}): build them with `make gateware-all`, or pass --card",
                built_library_path(64).display()
            )));
        };
        match built.into_iter().find(|(w, _, _)| *w == choice.data_width) {
            Some((_, _, lib)) => lib,
            None => return Err(SimError::Invalid(format!("no {}-bit card library", choice.data_width))),
        }
    } else {
        CardLibrary::load(&built_library_path(64))?
    };
    if let Some(w) = opts.data_width {
        if w != lib.data_width() {
            return Err(SimError::Invalid(format!(
                "--data-width {w} does not match the card library {}, which is {} bits wide: pass --data-width {} or the library of the {w}-bit card (build/card/dw{w}/libtlpxcard.so)",
                lib.path().display(),
                lib.data_width(),
                lib.data_width()
            )));
        }
    }
    let lanes = lanes_for(lib.data_width());
    let link =
        LinkConfig::new(opts.generation, lanes, opts.mps, opts.mrrs, opts.rcb, false).map_err(|e| SimError::Invalid(e.to_string()))?;
    let warning = datapath_warning(&link, lib.data_width(), card_clock_hz(&lib, opts.clock_mhz)?);
    Ok((lib, lanes, warning))
}

/// Where `make gateware CPU=1` puts the card with the soft CPU: `build/card/dw<N>-cpu/libtlpxcard.so`,
/// found as [`built_library_path`] finds the card without it (walking up from the executable's
/// directory, then from the current directory); the expected path when it is nowhere.
pub fn built_cpu_library_path(data_width: u32) -> PathBuf {
    tlpx_sim_protocol::paths::find_built_file(Path::new(&format!("build/card/dw{data_width}-cpu/libtlpxcard.so")))
}

/// The size of the IOVA window that starts at `--dma-base`: the bus addresses DMA
/// allocations get. It runs up to BAR0 from below it, up to 4 GiB from above it (the card's
/// DMA uses 32-bit addresses), and above 4 GiB (reachable only by 64-bit requests, such as
/// injected MRd64s) for 4 GiB or four times the host memory, whichever is more. It must hold
/// the host memory at least; the rest is room for fresh IOVAs, which are reused only once
/// the window is used up.
pub fn iova_window(dma_base: u64, host_mem_bytes: u64) -> Result<u64, String> {
    const FOUR_GIB: u64 = 1 << 32;
    let bar0 = u64::from(BAR0_BUS_ADDRESS);
    if !dma_base.is_multiple_of(4096) {
        return Err(format!("--dma-base must be 4096-aligned (a page: the IOMMU maps pages), not {dma_base:#x}"));
    }
    let end = if dma_base < bar0 {
        bar0
    } else if dma_base < bar0 + BAR0_SIZE {
        return Err(format!(
            "--dma-base {dma_base:#x} overlaps BAR0 at {bar0:#x}..{:#x}: choose a base below it (the default is 0x40000000) or above it",
            bar0 + BAR0_SIZE
        ));
    } else if dma_base < FOUR_GIB {
        FOUR_GIB
    } else {
        dma_base
            .checked_add(FOUR_GIB.max(host_mem_bytes.saturating_mul(4)))
            .ok_or_else(|| format!("--dma-base {dma_base:#x} leaves no room for an IOVA window below 2^64"))?
    };
    let size = end - dma_base;
    if size < host_mem_bytes {
        return Err(format!(
            "the IOVA window {dma_base:#x}..{end:#x} (from --dma-base up to {}) is smaller than the host memory ({} MiB, --host-mem-mib): choose a lower --dma-base or less host memory",
            if end == bar0 { "BAR0" } else { "4 GiB" },
            host_mem_bytes >> 20
        ));
    }
    Ok(size)
}

/// What both servers (`serve`, the tlpx-sim socket, and `vfu::serve_vfio_user`) build from
/// the options before they differ: the card, its link and clock, and its config space — one
/// source for what the card presents, whoever asks.
pub struct Prepared {
    pub lib: Arc<CardLibrary>,
    pub card: crate::card::Card,
    pub link: LinkConfig,
    pub clock_hz: f64,
    pub config: ConfigSpace,
    pub host_mem_bytes: u64,
    pub iova_size: u64,
    pub completion_timeout_cycles: u64,
    /// The board whose hard IP the config space presents (`--board`), and that IP.
    pub board: String,
    pub profile: HardIpProfile,
}

/// Checks the options, loads and instantiates the card, builds its config space.
pub fn prepare(opts: &SimOptions) -> Result<Prepared, SimError> {
    let (lib, lanes, warning) = choose_card(opts)?;
    let lib = Arc::new(lib);
    if let Some(w) = warning {
        eprintln!("tlpx-sim: warning: {w}");
    }
    let link =
        LinkConfig::new(opts.generation, lanes, opts.mps, opts.mrrs, opts.rcb, false).map_err(|e| SimError::Invalid(e.to_string()))?;
    let clock_hz = card_clock_hz(&lib, opts.clock_mhz)?;
    let (board, profile) = board_profile(lib.path(), opts.board.as_deref(), (opts.generation, lanes))?;
    // A board's hard IP advertises the fastest link it trains (a narrower slot shows in LnkSta);
    // the generic card's IP is configured for whatever link was asked, so that is its capability.
    let (max_link_generation, max_link_lanes) =
        if board == GENERIC_BOARD { (opts.generation, lanes) } else { (profile.max_link_gen, profile.max_link_lanes) };
    let config = ConfigSpace::new(ConfigParams {
        generation: opts.generation,
        lanes,
        mps: opts.mps,
        mrrs: opts.mrrs,
        mps_supported: profile.mps_supported,
        max_link_generation,
        max_link_lanes,
        msi_64bit: profile.msi_64bit,
        msi_vectors: msi_vectors(opts.msi_vectors, &board, &profile)?,
        msix: msix_params(opts.msix_vectors, &board, &profile, lib.build_info())?,
        bar0_address: BAR0_BUS_ADDRESS,
        bar0_size: BAR0_SIZE as u32,
    })
    .map_err(|e| SimError::Invalid(format!("--board {board} ({}): {e}", profile.hard_ip)))?;
    if opts.host_mem_mib == 0 || opts.host_mem_mib > 65536 {
        return Err(SimError::Invalid(format!("--host-mem-mib must be 1..65536, not {}", opts.host_mem_mib)));
    }
    let host_mem_bytes = opts.host_mem_mib << 20;
    let iova_size = iova_window(opts.dma_base, host_mem_bytes).map_err(SimError::Invalid)?;
    if !(1..=10_000_000).contains(&opts.host_time_cap_us) {
        return Err(SimError::Invalid(format!("--host-time-cap-us must be 1..10000000 (10 s), not {}", opts.host_time_cap_us)));
    }
    if opts.completion_timeout_us == 0 {
        return Err(SimError::Invalid("--completion-timeout-us must be at least 1".into()));
    }
    for (off, _) in &opts.corrupt_read {
        if !off.is_multiple_of(4) || *off >= BAR0_SIZE {
            return Err(SimError::Invalid(format!(
                "--corrupt-read offset {off:#x} must be a DW-aligned offset inside BAR0 (0..{BAR0_SIZE:#x})"
            )));
        }
    }
    let card = lib.instantiate()?;
    let completion_timeout_cycles = ((opts.completion_timeout_us as f64) * clock_hz / 1e6).ceil() as u64;
    Ok(Prepared { lib, card, link, clock_hz, config, host_mem_bytes, iova_size, completion_timeout_cycles, board, profile })
}

/// A board's hard IP as the gateware describes it: what config space presents with `--board`
/// (tlpx_gateware.targets, written by the card's build into boards.json beside the library).
#[derive(Debug, Clone, PartialEq, serde::Deserialize)]
pub struct HardIpProfile {
    pub title: String,
    /// "pcie_7x", "pcie3_ultrascale", or "generic" (the simulated card's own).
    pub hard_ip: String,
    pub max_link_gen: u8,
    pub max_link_lanes: u8,
    pub mps_supported: u32,
    pub msi_64bit: bool,
    pub msi_vectors: u32,
    /// MSI-X vectors the hard IP offers (0: none; absent in an older boards.json).
    #[serde(default)]
    pub msix_vectors: u32,
    pub extended_tags: bool,
}

/// The board of no particular hard IP: LitePCIe's payload limit with any link (boards.json).
pub const GENERIC_BOARD: &str = "generic";

#[derive(Debug, serde::Deserialize)]
struct BoardsFile {
    default: String,
    boards: std::collections::BTreeMap<String, HardIpProfile>,
}

/// The board `requested` among those the card library's boards.json lists: its name
/// and profile. None: the card's default board when its hard IP trains the `link`
/// (generation, lanes) asked for, else generic (the link is the user's explicit choice,
/// the board only a default; an explicit --board beyond its IP is refused later).
pub fn board_profile(library: &Path, requested: Option<&str>, link: (u8, u8)) -> Result<(String, HardIpProfile), SimError> {
    let path = library.with_file_name("boards.json");
    let text = std::fs::read_to_string(&path).map_err(|e| {
        SimError::Invalid(format!(
            "cannot read {} ({e}): the card's build writes it beside the library; rebuild the card (make gateware)",
            path.display()
        ))
    })?;
    if text.len() > 1 << 20 {
        return Err(SimError::Invalid(format!("{} is larger than 1 MiB: not a card's boards.json", path.display())));
    }
    let mut file: BoardsFile =
        serde_json::from_str(&text).map_err(|e| SimError::Invalid(format!("{}: not a card's boards.json: {e}", path.display())))?;
    let default_fits = file.boards.get(&file.default).is_some_and(|p| link.0 <= p.max_link_gen && link.1 <= p.max_link_lanes);
    let name = match requested {
        Some(name) => name.to_string(),
        None if default_fits => file.default.clone(),
        None => GENERIC_BOARD.to_string(),
    };
    match file.boards.remove(&name) {
        Some(profile) => Ok((name, profile)),
        None => Err(SimError::Invalid(format!(
            "--board {name:?}: this {} card stands for {} (the boards of its datapath width and clock, and generic)",
            library.display(),
            file.boards.keys().cloned().collect::<Vec<_>>().join(", ")
        ))),
    }
}

/// HelloOk's fields for this run (without the per-client ones).
pub fn hello_info(p: &Prepared, opts: &SimOptions, files: &RuntimeFiles) -> HelloInfo {
    let (domain, bus, dev, func) = PCI_ADDRESS;
    HelloInfo {
        protocol_version: PROTOCOL_VERSION,
        sim_version: env!("CARGO_PKG_VERSION").to_string(),
        card_build_info: p.lib.build_info().to_string(),
        card_library: p.lib.path().display().to_string(),
        data_width: p.lib.data_width(),
        card_clock_hz: p.clock_hz.round() as u64,
        link: p.link,
        pci_address: format!("{domain:04x}:{bus:02x}:{dev:02x}.{func:x}"),
        bar_sizes: vec![Some(BAR0_SIZE), None, None, None, None, None],
        config_dump_path: files.dump.display().to_string(),
        host_memory_path: files.host_memory.display().to_string(),
        host_memory_size: p.host_mem_bytes,
        host_memory_bus_base: opts.dma_base,
        iova_window_size: p.iova_size,
        seed: opts.seed,
        dma_latency_ns: opts.dma_latency_ns,
        dma_jitter_ns: opts.dma_jitter_ns,
        completion_timeout_cycles: p.completion_timeout_cycles,
        free_run: opts.free_run,
        host_time: opts.host_time,
        host_time_cap_ns: opts.host_time_cap_us * 1000,
        board: p.board.clone(),
        hard_ip: p.profile.hard_ip.clone(),
        client_id: 0,
    }
}

/// The engine's parameters for this run.
pub fn engine_params(p: &Prepared, opts: &SimOptions, hello: HelloInfo, dump: RewrittenFile) -> EngineParams {
    EngineParams {
        link: p.link,
        clock_hz: p.clock_hz,
        dma_latency_ns: opts.dma_latency_ns,
        dma_jitter_ns: opts.dma_jitter_ns,
        seed: opts.seed,
        completion_timeout_cycles: p.completion_timeout_cycles,
        corrupt_read: opts.corrupt_read.clone(),
        dma_faults: opts.dma_faults,
        free_run: opts.free_run,
        host_time: opts.host_time,
        host_time_cap: std::time::Duration::from_micros(opts.host_time_cap_us),
        quiet: opts.quiet,
        dump,
        hello,
        pci_address: PCI_ADDRESS,
    }
}

/// Loads the card, sets everything up, serves clients until shutdown, removes the files.
pub fn serve(opts: &SimOptions) -> Result<(), SimError> {
    let p = prepare(opts)?;
    let (host_mem_bytes, iova_size, clock_hz) = (p.host_mem_bytes, p.iova_size, p.clock_hz);

    let files = RuntimeFiles::for_socket(&opts.socket);
    let dir = Arc::new(files.open_dir()?);
    // Locked from the stale check until the socket is bound: a second sim starting at the
    // same time then finds this one live instead of taking its files as stale.
    let lock = dir.lock().map_err(io(format!("cannot lock the runtime directory {}", files.dir.display())))?;
    files.claim(&dir)?;
    let hostmem_name = RuntimeFiles::name(&files.host_memory)?;
    let mem_file =
        dir.create(hostmem_name, 0o600).map_err(io(format!("cannot create the host-memory file {}", files.host_memory.display())))?;
    let mem = HostMemory::new(mem_file, &files.host_memory, host_mem_bytes, opts.dma_base, iova_size)
        .map_err(io(format!("cannot size and map the host-memory file {}", files.host_memory.display())))?;
    let listener = files.bind(&dir)?;
    let mut pid_file = dir.create(RuntimeFiles::name(&files.pid)?, 0o644).map_err(io(format!("cannot create {}", files.pid.display())))?;
    pid_file.write_all(format!("{}\n", std::process::id()).as_bytes()).map_err(io(format!("cannot write {}", files.pid.display())))?;
    drop(lock);

    let hello = hello_info(&p, opts, &files);
    if !opts.quiet {
        print_banner(&hello, &files, clock_hz, opts);
    }
    let params = engine_params(&p, opts, hello, RewrittenFile::new(dir.clone(), RuntimeFiles::name(&files.dump)?));
    let data_width = p.lib.data_width();
    let mut sim = Sim::new(p.card, data_width, p.config, mem, params);

    let set = block_signals();
    let (tx, rx) = mpsc::channel();
    spawn_signal_thread(set, tx.clone());
    spawn_acceptor(listener, tx, opts.quiet);
    sim.run(&rx);
    sim.close_all("tlpx-sim is shutting down");
    let s = sim.stats();
    drop(sim);
    dir.remove_ours();
    if !opts.quiet {
        eprintln!(
            "tlpx-sim: stopped at card cycle {} ({:.2} M cycles/s while running; {} cycles in live time, {:.2} s waited for wall time)",
            s.cycles,
            s.cycles_per_second / 1e6,
            s.live_cycles,
            s.live_paced_seconds
        );
    }
    Ok(())
}

fn print_banner(h: &HelloInfo, files: &RuntimeFiles, clock_hz: f64, opts: &SimOptions) {
    let bpc = h.link.raw_bytes_per_second() / clock_hz;
    let tlp_bpc = h.link.tlp_bytes_per_second() / clock_hz;
    let info: String = h.card_build_info.chars().take(300).collect();
    println!("tlpx-sim {} — simulated tlpx card (protocol {})", h.sim_version, h.protocol_version);
    println!("  card    {} ({}-bit datapath)", h.card_library, h.data_width);
    println!("          {info}");
    println!(
        "  link    {} — {:.2} raw bytes per card cycle each way, {:.2} for TLPs (DLLP and SKP share out, as pcie-bench)",
        h.link, bpc, tlp_bpc
    );
    println!(
        "  width   {}-bit datapath: {:.2} bytes per card cycle each way{}",
        h.data_width,
        f64::from(h.data_width) / 8.0,
        if f64::from(h.data_width) / 8.0 < bpc { " — slower than the link" } else { "" }
    );
    let f = opts.dma_faults;
    if !f.is_off() {
        println!(
            "  faults  card reads: UR every {}, CA every {}, poisoned every {}, dropped every {} (0 = off)",
            f.ur_every, f.ca_every, f.poison_every, f.drop_every
        );
    }
    println!(
        "  clock   {:.3} MHz card clock; DMA read latency {} ns + 0..{} ns jitter, seed {}",
        clock_hz / 1e6,
        h.dma_latency_ns,
        h.dma_jitter_ns,
        h.seed
    );
    println!(
        "  card    {} {:04x}:{:04x}, BAR0 {} KiB at {BAR0_BUS_ADDRESS:#x}; config dump {}",
        h.pci_address,
        VENDOR_ID,
        DEVICE_ID,
        BAR0_SIZE >> 10,
        files.dump.display()
    );
    println!(
        "  memory  {} MiB host memory, mapped by an IOMMU at fresh bus addresses in {:#x}..{:#x}: {}",
        h.host_memory_size >> 20,
        h.host_memory_bus_base,
        h.host_memory_bus_base + h.iova_window_size,
        files.host_memory.display()
    );
    println!(
        "  time    {}",
        if opts.free_run {
            "runs while a client waits or traffic is in flight (--free-run), and continuously (never ahead of wall time) while a client asks for live time"
        } else {
            "runs only while a client waits on the sim, or continuously (never ahead of wall time) while a client asks for live time (docs/sim-protocol.md)"
        }
    );
    if opts.host_time == HostTime::Real {
        println!(
            "  host    --host-time real: a client's wall time between its messages becomes card time (at most {} us per gap); runs are not deterministic",
            opts.host_time_cap_us
        );
    }
    println!("  socket  {}", files.socket.display());
}

#[cfg(test)]
mod tests {
    use super::*;

    fn profile(msi_vectors: u32, msix_vectors: u32) -> HardIpProfile {
        HardIpProfile {
            title: "t".into(),
            hard_ip: "pcie_7x".into(),
            max_link_gen: 2,
            max_link_lanes: 4,
            mps_supported: 512,
            msi_64bit: false,
            msi_vectors,
            msix_vectors,
            extended_tags: true,
        }
    }

    #[test]
    fn vector_counts_are_held_to_what_the_board_and_the_card_offer() {
        let card = r#"{"msix_vectors":32,"msix_table_bar0_offset":327680,"msix_pba_bar0_offset":329728}"#;
        // A board whose IP offers one MSI vector and no MSI-X refuses more, naming itself.
        let e = msi_vectors(4, "kc705", &profile(1, 0)).unwrap_err().to_string();
        assert!(e.contains("--board kc705") && e.contains("offers 1 MSI vector"), "{e}");
        let e = msix_params(4, "kc705", &profile(1, 0), card).unwrap_err().to_string();
        assert!(e.contains("--msix 4") && e.contains("kc705"), "{e}");
        // A card built before MSI-X says so.
        let e = msix_params(4, "generic", &profile(32, 32), "{}").unwrap_err().to_string();
        assert!(e.contains("built before MSI-X"), "{e}");
        assert_eq!(msix_params(0, "kc705", &profile(1, 0), card).unwrap(), None);
        assert_eq!(
            msix_params(32, "generic", &profile(32, 32), card).unwrap(),
            Some(MsixParams { vectors: 32, table_offset: 0x50000, pba_offset: 0x50800 })
        );
        // Fewer entries than the card's table would strand the vectors above them.
        let e = msix_params(8, "generic", &profile(32, 32), card).unwrap_err().to_string();
        assert!(e.contains("--msix 8") && e.contains("takes 32 (MSI-X on) or 0 (off)"), "{e}");
        assert_eq!(msi_vectors(32, "generic", &profile(32, 32)).unwrap(), 32);
        assert!(msi_vectors(0, "generic", &profile(32, 32)).is_err());
    }

    #[test]
    fn the_iova_window_stays_below_bar0_and_4_gib_and_holds_the_host_memory() {
        const MIB: u64 = 1 << 20;
        assert_eq!(iova_window(0x4000_0000, 256 * MIB), Ok(0xB000_0000), "default: 0x40000000 up to BAR0");
        assert_eq!(iova_window(0xF010_0000, 16 * MIB), Ok(0x0FF0_0000), "above BAR0: up to 4 GiB");
        assert_eq!(iova_window(1 << 32, 256 * MIB), Ok(1 << 32));
        assert_eq!(iova_window(1 << 32, 2048 * MIB), Ok(8 << 30));
        let e = iova_window(0xF000_0000, MIB).unwrap_err();
        assert!(e.contains("overlaps BAR0") && e.contains("0xf0000000"), "{e}");
        let e = iova_window(0x4000_0001, MIB).unwrap_err();
        assert!(e.contains("4096-aligned") && e.contains("0x40000001"), "{e}");
        let e = iova_window(0xE000_0000, 512 * MIB).unwrap_err();
        assert!(e.contains("smaller than the host memory (512 MiB") && e.contains("BAR0"), "{e}");
        assert!(iova_window(u64::MAX - 4095, MIB).is_err());
    }

    #[test]
    fn the_board_comes_from_the_cards_boards_json_and_an_unknown_one_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let lib = dir.path().join("libtlpxcard.so");
        let e = board_profile(&lib, None, (1, 1)).unwrap_err().to_string();
        assert!(e.contains("boards.json") && e.contains("make gateware"), "{e}");
        let profile = r#"{"title": "t", "hard_ip": "pcie3_ultrascale", "max_link_gen": 3, "max_link_lanes": 8,
                          "mps_supported": 512, "msi_64bit": true, "msi_vectors": 1, "extended_tags": true}"#;
        std::fs::write(
            dir.path().join("boards.json"),
            format!(r#"{{"default": "kcu105", "boards": {{"kcu105": {profile}, "generic": {profile}}}}}"#),
        )
        .unwrap();
        let (name, p) = board_profile(&lib, None, (3, 8)).unwrap();
        assert_eq!((name.as_str(), p.mps_supported, p.max_link_gen), ("kcu105", 512, 3));
        // A link beyond the default board's IP, asked for without --board: generic.
        assert_eq!(board_profile(&lib, None, (4, 8)).unwrap().0, "generic");
        assert_eq!(board_profile(&lib, None, (3, 16)).unwrap().0, "generic");
        // An explicit board is kept (the config space refuses the link later).
        assert_eq!(board_profile(&lib, Some("kcu105"), (4, 8)).unwrap().0, "kcu105");
        assert_eq!(board_profile(&lib, Some("generic"), (1, 1)).unwrap().0, "generic");
        let e = board_profile(&lib, Some("acorn"), (1, 1)).unwrap_err().to_string();
        assert!(e.contains("\"acorn\"") && e.contains("generic, kcu105"), "{e}");
        std::fs::write(dir.path().join("boards.json"), "[1, 2").unwrap();
        let e = board_profile(&lib, None, (1, 1)).unwrap_err().to_string();
        assert!(e.contains("not a card's boards.json"), "{e}");
    }
}
