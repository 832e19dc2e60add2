//! Host CPU performance counters for any tlpx measurement (`--pmc`), as the L41 lab's
//! `-P` flag: instructions, cycles, CPI, cache references and misses of the calling thread.
//!
//! ```text
//!  Pmc::open ──perf_event_open(2)×4──► one counter group (pid 0 = this thread, cpu -1, no inherit)
//!     │ refused: Err(PmcUnavailable), a message that says why and what to do
//!     │ partly refused: Ok, the missing events listed (their fields read None)
//!  start ─ work ─ stop ─ read ──► PmcReading { counts scaled for multiplexing, CPI, miss ratio }
//! ```
//!
//! The counters count only the thread that opened them, so a [`Pmc`] stays on that thread (it
//! is not `Send`). Counts are scaled by `time_enabled / time_running` when the kernel had to
//! share the hardware counters with other users (multiplexing); `time_running < time_enabled`
//! in the reading says so.
//!
//! Virtual machines often expose no counters (the kernel answers ENOENT for hardware events),
//! and `kernel.perf_event_paranoid` restricts unprivileged users: the refusal message names the
//! cause, and callers carry on without counters.
//!
//! The kernel interface (the attr struct, the system call, the ioctls, the paranoid level and
//! errno names) is `tlpx_device::perf`, shared with the ISR trace; this file keeps what is about
//! CPU counters: which events, how they are grouped and scaled, and how a refusal of them and
//! their counts are told.

use std::fmt;
use std::io;
use std::marker::PhantomData;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};

use serde::{Deserialize, Serialize};
#[cfg(test)]
use tlpx_device::perf::PERF_TYPE_SOFTWARE;
use tlpx_device::perf::{
    self, PerfEventAttr, PERF_ATTR_SIZE_VER1, PERF_COUNT_HW_CACHE_MISSES, PERF_COUNT_HW_CACHE_REFERENCES, PERF_COUNT_HW_CPU_CYCLES,
    PERF_COUNT_HW_INSTRUCTIONS, PERF_FLAG_FD_CLOEXEC, PERF_FORMAT_TOTAL_TIME_ENABLED, PERF_FORMAT_TOTAL_TIME_RUNNING, PERF_IOC_FLAG_GROUP,
    PERF_TYPE_HARDWARE,
};

// Events and options -----------------------------------------------------------------------------

/// A hardware event of the generic `PERF_TYPE_HARDWARE` set.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum PmcEvent {
    /// Retired instructions (`PERF_COUNT_HW_INSTRUCTIONS`).
    Instructions,
    /// CPU cycles (`PERF_COUNT_HW_CPU_CYCLES`).
    Cycles,
    /// Last-level cache accesses (`PERF_COUNT_HW_CACHE_REFERENCES`).
    CacheReferences,
    /// Last-level cache misses (`PERF_COUNT_HW_CACHE_MISSES`).
    CacheMisses,
}

impl PmcEvent {
    /// The events a [`Pmc`] opens, in group order (the first one available leads the group).
    pub const ALL: [PmcEvent; 4] = [PmcEvent::Instructions, PmcEvent::Cycles, PmcEvent::CacheReferences, PmcEvent::CacheMisses];

    /// The event's name, as `perf stat` spells it.
    pub fn name(self) -> &'static str {
        match self {
            PmcEvent::Instructions => "instructions",
            PmcEvent::Cycles => "cycles",
            PmcEvent::CacheReferences => "cache-references",
            PmcEvent::CacheMisses => "cache-misses",
        }
    }

    fn spec(self) -> EventSpec {
        let config = match self {
            PmcEvent::Cycles => PERF_COUNT_HW_CPU_CYCLES,
            PmcEvent::Instructions => PERF_COUNT_HW_INSTRUCTIONS,
            PmcEvent::CacheReferences => PERF_COUNT_HW_CACHE_REFERENCES,
            PmcEvent::CacheMisses => PERF_COUNT_HW_CACHE_MISSES,
        };
        EventSpec { type_: PERF_TYPE_HARDWARE, config }
    }
}

impl fmt::Display for PmcEvent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Which privilege levels are counted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
pub enum PmcScope {
    /// User space only: allowed to unprivileged users up to `perf_event_paranoid` 2.
    #[default]
    #[serde(rename = "user")]
    User,
    /// User space and the kernel (system calls, interrupts on this thread's behalf): needs
    /// `perf_event_paranoid` <= 1, or CAP_PERFMON.
    #[serde(rename = "user+kernel")]
    UserKernel,
}

impl PmcScope {
    pub fn name(self) -> &'static str {
        match self {
            PmcScope::User => "user",
            PmcScope::UserKernel => "user+kernel",
        }
    }
}

/// How to open the counters.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct PmcOptions {
    pub scope: PmcScope,
}

// Refusals ---------------------------------------------------------------------------------------

/// Where `perf_event_paranoid` is read from.
pub use tlpx_device::perf::PARANOID_PATH;

/// The current `kernel.perf_event_paranoid`, or `None` when it cannot be read (the messages
/// here then say it could not be read, without the reason).
pub fn read_paranoid() -> Option<i32> {
    perf::read_paranoid().ok()
}

/// Why the kernel refused a counter, in words: a pure function of the `errno` of
/// perf_event_open, the `perf_event_paranoid` value (`None` when unreadable) and the scope.
pub fn refusal_message(errno: i32, paranoid: Option<i32>, scope: PmcScope) -> String {
    let code = errno_name(errno);
    match errno {
        libc::ENOENT | libc::EOPNOTSUPP | libc::ENODEV => format!(
            "the CPU, or the hypervisor of this virtual machine, exposes no such hardware counter \
             (perf_event_open: {code}); a VM needs its PMU passed through (KVM/QEMU: -cpu host \
             with the PMU on; VMware: \"virtualize CPU performance counters\"); Firecracker and \
             most cloud VMs offer none"
        ),
        libc::EACCES | libc::EPERM => permission_message(code, paranoid, scope),
        libc::ENOSYS => format!(
            "this kernel has no perf_event_open ({code}): it was built without \
             CONFIG_PERF_EVENTS, or a seccomp filter hides the system call"
        ),
        libc::EBUSY => format!(
            "the counters are taken ({code}): another profiler holds them exclusively; stop it \
             and try again"
        ),
        libc::EMFILE | libc::ENFILE => {
            format!("out of file descriptors ({code}): raise the limit (ulimit -n) and try again")
        }
        libc::EINVAL => format!(
            "the kernel rejected the counter's attributes ({code}); it may not support \
             excluding the hypervisor or kernel on this CPU"
        ),
        _ => format!("perf_event_open failed: {} ({code})", io::Error::from_raw_os_error(errno)),
    }
}

fn permission_message(code: &str, paranoid: Option<i32>, scope: PmcScope) -> String {
    let Some(level) = paranoid else {
        return format!(
            "the kernel refused access ({code}) and {PARANOID_PATH} cannot be read, so this \
             kernel may lack perf events or hide /proc/sys (a container); run as root or with \
             CAP_PERFMON"
        );
    };
    let cap = "or give tlpx CAP_PERFMON (sudo setcap cap_perfmon+ep $(command -v tlpx))";
    if level >= 3 {
        format!(
            "the kernel refused access ({code}): perf_event_paranoid is {level}, which forbids \
             performance counters to unprivileged users altogether; allow user-space counting \
             with `sudo sysctl kernel.perf_event_paranoid=2`, {cap}"
        )
    } else if level == 2 && scope == PmcScope::UserKernel {
        format!(
            "the kernel refused access ({code}): perf_event_paranoid is 2, which lets \
             unprivileged users count user space only; count user space only, allow the kernel \
             with `sudo sysctl kernel.perf_event_paranoid=1`, {cap}"
        )
    } else {
        format!(
            "the kernel refused access ({code}) although perf_event_paranoid is {level}, which \
             allows {} counting: a seccomp filter (containers: Docker's default profile blocks \
             perf_event_open; run with --cap-add PERFMON or a profile that allows it) or a \
             security module (SELinux, AppArmor) refused it",
            scope.name()
        )
    }
}

/// The errno's name for a message; `errno` for one perf never gives.
fn errno_name(errno: i32) -> &'static str {
    perf::errno_name(errno).unwrap_or("errno")
}

/// No counter could be opened. The message says why and what to do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PmcUnavailable {
    /// Each event and the errno the kernel gave for it.
    pub refused: Vec<(PmcEvent, i32)>,
    /// `perf_event_paranoid` at the time, if readable.
    pub paranoid: Option<i32>,
    pub scope: PmcScope,
}

impl PmcUnavailable {
    /// The first refusal's errno, which is the usual single cause.
    #[allow(dead_code)] // API for callers that report the cause as data.
    pub fn errno(&self) -> Option<i32> {
        self.refused.first().map(|&(_, errno)| errno)
    }
}

impl fmt::Display for PmcUnavailable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "host performance counters unavailable ({} scope): ", self.scope.name())?;
        f.write_str(&refusals_text(&self.refused, self.paranoid, self.scope))
    }
}

impl std::error::Error for PmcUnavailable {}

/// "a, b: why; c: why", events that share an errno grouped.
fn refusals_text(refused: &[(PmcEvent, i32)], paranoid: Option<i32>, scope: PmcScope) -> String {
    let mut errnos: Vec<i32> = refused.iter().map(|&(_, e)| e).collect();
    errnos.dedup();
    errnos
        .iter()
        .map(|&errno| {
            let events: Vec<&str> = refused.iter().filter(|&&(_, e)| e == errno).map(|(ev, _)| ev.name()).collect();
            format!("{}: {}", events.join(", "), refusal_message(errno, paranoid, scope))
        })
        .collect::<Vec<_>>()
        .join("; ")
}

// Readings ---------------------------------------------------------------------------------------

/// One reading of the counters. Counts are scaled for multiplexing; `None` is an event this
/// machine did not count (see [`Pmc::missing`]) or that was never scheduled.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct PmcReading {
    pub scope: PmcScope,
    pub instructions: Option<u64>,
    pub cycles: Option<u64>,
    /// Cycles per instruction.
    pub cpi: Option<f64>,
    pub cache_references: Option<u64>,
    pub cache_misses: Option<u64>,
    /// Cache misses per cache reference.
    pub miss_ratio: Option<f64>,
    /// Time the counters were enabled, ns (the longest of the counters).
    pub time_enabled_ns: u64,
    /// Time the counters were really counting, ns (the shortest): below `time_enabled_ns`, the
    /// kernel multiplexed them and the counts are scaled estimates.
    pub time_running_ns: u64,
}

impl PmcReading {
    /// Builds a reading from (event, raw count, time enabled, time running) samples.
    fn from_samples(scope: PmcScope, samples: &[(PmcEvent, u64, u64, u64)]) -> PmcReading {
        let count =
            |event| samples.iter().find(|s| s.0 == event).and_then(|&(_, raw, enabled, running)| scale_count(raw, enabled, running));
        let (instructions, cycles) = (count(PmcEvent::Instructions), count(PmcEvent::Cycles));
        let (cache_references, cache_misses) = (count(PmcEvent::CacheReferences), count(PmcEvent::CacheMisses));
        PmcReading {
            scope,
            instructions,
            cycles,
            cpi: ratio(cycles, instructions),
            cache_references,
            cache_misses,
            miss_ratio: ratio(cache_misses, cache_references),
            time_enabled_ns: samples.iter().map(|s| s.2).max().unwrap_or(0),
            time_running_ns: samples.iter().map(|s| s.3).min().unwrap_or(0),
        }
    }

    /// Whether the counts are scaled estimates (the counters were multiplexed).
    pub fn scaled(&self) -> bool {
        self.time_running_ns < self.time_enabled_ns
    }
}

/// A count corrected for multiplexing: `raw * time_enabled / time_running`. `None` when the
/// counter was enabled but never ran (nothing is known); the raw count when it ran all along
/// or was never enabled.
pub fn scale_count(raw: u64, time_enabled: u64, time_running: u64) -> Option<u64> {
    if time_running >= time_enabled {
        return Some(raw);
    }
    if time_running == 0 {
        return None;
    }
    let scaled = u128::from(raw) * u128::from(time_enabled) / u128::from(time_running);
    Some(u64::try_from(scaled).unwrap_or(u64::MAX))
}

fn ratio(numerator: Option<u64>, denominator: Option<u64>) -> Option<f64> {
    match (numerator, denominator) {
        (Some(n), Some(d)) if d > 0 => Some(n as f64 / d as f64),
        _ => None,
    }
}

/// One line for the terminal, e.g.
/// `pmc (user): 1.20 G instructions, 2.41 G cycles, CPI 2.01, 15.3 M cache refs, 1.02 M misses (6.7%)`.
pub fn describe(reading: &PmcReading) -> String {
    let count = |value: Option<u64>, what: &str| match value {
        Some(v) => format!("{} {what}", si(v)),
        None => format!("{what} n/a"),
    };
    let mut line = format!(
        "pmc ({}): {}, {}, CPI {}, {}, {}",
        reading.scope.name(),
        count(reading.instructions, "instructions"),
        count(reading.cycles, "cycles"),
        reading.cpi.map_or_else(|| "n/a".to_string(), |c| format!("{c:.2}")),
        count(reading.cache_references, "cache refs"),
        count(reading.cache_misses, "misses"),
    );
    if let Some(r) = reading.miss_ratio {
        line.push_str(&format!(" ({:.1}%)", 100.0 * r));
    }
    if reading.scaled() {
        let share = reading.time_running_ns as f64 / reading.time_enabled_ns as f64;
        line.push_str(&format!(", multiplexed: counted {:.0}% of the time, scaled", 100.0 * share));
    }
    line
}

fn si(value: u64) -> String {
    let v = value as f64;
    if value < 10_000 {
        value.to_string()
    } else if value < 1_000_000 {
        format!("{:.1} k", v / 1e3)
    } else if value < 1_000_000_000 {
        format!("{:.2} M", v / 1e6)
    } else {
        format!("{:.2} G", v / 1e9)
    }
}

// The counter group ------------------------------------------------------------------------------

/// Open host counters of the calling thread. See the module documentation.
pub struct Pmc {
    set: CounterSet<PmcEvent>,
    missing: Vec<(PmcEvent, i32)>,
    paranoid: Option<i32>,
    scope: PmcScope,
    /// The counters count the thread that opened them: keep the handle on that thread.
    _not_send: PhantomData<*const ()>,
}

impl fmt::Debug for Pmc {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Pmc").field("counting", &self.counting()).field("missing", &self.missing).field("scope", &self.scope).finish()
    }
}

impl Pmc {
    /// Opens instructions, cycles, cache references and cache misses for the calling thread,
    /// disabled until [`Pmc::start`]. Events the machine refuses are left out and listed by
    /// [`Pmc::missing`]; when it refuses them all, the error says why.
    pub fn open(options: &PmcOptions) -> Result<Pmc, PmcUnavailable> {
        let specs: Vec<(PmcEvent, EventSpec)> = PmcEvent::ALL.iter().map(|&e| (e, e.spec())).collect();
        let (set, missing) = CounterSet::open_with(&specs, options.scope, perf_event_open);
        let paranoid = read_paranoid();
        if set.is_empty() {
            return Err(PmcUnavailable { refused: missing, paranoid, scope: options.scope });
        }
        Ok(Pmc { set, missing, paranoid, scope: options.scope, _not_send: PhantomData })
    }

    /// Resets the counts to zero and starts counting.
    pub fn start(&mut self) -> io::Result<()> {
        self.set.start()
    }

    /// Stops counting; the counts stay readable.
    pub fn stop(&mut self) -> io::Result<()> {
        self.set.stop()
    }

    /// The counts since the last [`Pmc::start`] (counting or stopped).
    pub fn read(&self) -> io::Result<PmcReading> {
        Ok(PmcReading::from_samples(self.scope, &self.set.read()?))
    }

    /// Starts, runs `work`, stops and reads.
    #[cfg_attr(not(test), allow(dead_code))] // the CLI uses `around`; kept for callers of one stretch
    pub fn measure<T>(&mut self, work: impl FnOnce() -> T) -> io::Result<(T, PmcReading)> {
        self.start()?;
        let out = work();
        self.stop()?;
        Ok((out, self.read()?))
    }

    /// The events being counted.
    pub fn counting(&self) -> Vec<PmcEvent> {
        self.set.events()
    }

    /// The events this machine refused, with the kernel's errno.
    #[allow(dead_code)] // API for callers that report the missing events as data.
    pub fn missing(&self) -> &[(PmcEvent, i32)] {
        &self.missing
    }

    /// Why some events are missing, for the terminal; `None` when all four are counted.
    pub fn missing_text(&self) -> Option<String> {
        (!self.missing.is_empty()).then(|| format!("not counted: {}", refusals_text(&self.missing, self.paranoid, self.scope)))
    }
}

/// Counters opened as one group where the kernel allows it. An event the group cannot take
/// (EINVAL: it does not fit beside the others) opens as its own group, scheduled and scaled
/// separately; an event the machine refuses is returned as missing with its errno.
struct CounterSet<E> {
    counters: Vec<Counter<E>>,
}

struct Counter<E> {
    event: E,
    fd: OwnedFd,
    /// Leads a group: enabled, disabled and reset for the whole group.
    leader: bool,
    /// time_enabled and time_running at the last start: PERF_EVENT_IOC_RESET zeroes the count
    /// but not these, which keep running totals since the open.
    times_at_start: (u64, u64),
}

impl<E: Copy> CounterSet<E> {
    fn open_with(
        specs: &[(E, EventSpec)],
        scope: PmcScope,
        mut open: impl FnMut(&PerfEventAttr, RawFd) -> Result<OwnedFd, i32>,
    ) -> (CounterSet<E>, Vec<(E, i32)>) {
        let mut counters: Vec<Counter<E>> = Vec::new();
        let mut missing = Vec::new();
        for &(event, spec) in specs {
            let group = counters.first().map(|c| c.fd.as_raw_fd());
            let opened = match group {
                None => open(&spec.attr(scope, true), -1).map(|fd| (fd, true)),
                Some(leader) => match open(&spec.attr(scope, false), leader) {
                    Ok(fd) => Ok((fd, false)),
                    Err(libc::EINVAL) => open(&spec.attr(scope, true), -1).map(|fd| (fd, true)),
                    Err(errno) => Err(errno),
                },
            };
            match opened {
                Ok((fd, leader)) => counters.push(Counter { event, fd, leader, times_at_start: (0, 0) }),
                Err(errno) => missing.push((event, errno)),
            }
        }
        (CounterSet { counters }, missing)
    }

    fn is_empty(&self) -> bool {
        self.counters.is_empty()
    }

    fn events(&self) -> Vec<E> {
        self.counters.iter().map(|c| c.event).collect()
    }

    fn start(&mut self) -> io::Result<()> {
        self.for_leaders(perf::disable)?;
        self.for_leaders(perf::reset)?;
        for counter in &mut self.counters {
            let [_, enabled, running] = read_counter(&counter.fd)?;
            counter.times_at_start = (enabled, running);
        }
        self.for_leaders(perf::enable)
    }

    fn stop(&mut self) -> io::Result<()> {
        self.for_leaders(perf::disable)
    }

    /// Applies `request` (enable, disable, reset) to each group as a whole, through its leader.
    fn for_leaders(&self, request: fn(&OwnedFd, libc::c_ulong) -> io::Result<()>) -> io::Result<()> {
        for counter in self.counters.iter().filter(|c| c.leader) {
            request(&counter.fd, PERF_IOC_FLAG_GROUP)?;
        }
        Ok(())
    }

    /// (event, raw count, time enabled, time running) of each counter since the last start.
    fn read(&self) -> io::Result<Vec<(E, u64, u64, u64)>> {
        self.counters
            .iter()
            .map(|counter| {
                let [count, enabled, running] = read_counter(&counter.fd)?;
                let (enabled_at_start, running_at_start) = counter.times_at_start;
                Ok((counter.event, count, enabled.saturating_sub(enabled_at_start), running.saturating_sub(running_at_start)))
            })
            .collect()
    }
}

/// The value, time_enabled and time_running of one counter (read_format TOTAL_TIME_*).
fn read_counter(fd: &OwnedFd) -> io::Result<[u64; 3]> {
    let mut values = [0u64; 3];
    perf::read_values(fd, &mut values)?;
    Ok(values)
}

// The CLI's shared facility (`tlpx --pmc ...`) ------------------------------------------------------

/// One counted stretch of work, as it goes into a result document's `pmc` field.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct PmcRecord {
    /// What was counted: "main thread", "measuring thread (tlpx-loop)".
    pub label: String,
    /// The counts; `None` when the counters could not be opened.
    pub reading: Option<PmcReading>,
    /// Why there are no counts, or which events are missing.
    pub note: Option<String>,
}

static ENABLED: std::sync::OnceLock<PmcOptions> = std::sync::OnceLock::new();
static RECORDS: std::sync::Mutex<Vec<PmcRecord>> = std::sync::Mutex::new(Vec::new());
static REFUSAL_SAID: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

thread_local! {
    static MAIN: std::cell::RefCell<Option<(Pmc, Option<String>)>> = const { std::cell::RefCell::new(None) };
}

fn say_refusal_once(text: &str) {
    if !REFUSAL_SAID.swap(true, std::sync::atomic::Ordering::Relaxed) {
        eprintln!("tlpx: {text}; carrying on without counters");
    }
}

/// Turns the counters on for this process (`--pmc`): counts the calling (main) thread from now
/// on; other threads count what they run inside [`around`]. A refusal is said once on stderr
/// and recorded; the measurement goes on without counters.
pub fn enable(options: PmcOptions) {
    if ENABLED.set(options).is_err() {
        return;
    }
    match Pmc::open(&options) {
        Ok(mut pmc) => {
            let missing = pmc.missing_text();
            if let Some(m) = &missing {
                say_refusal_once(m);
            }
            if let Err(e) = pmc.start() {
                say_refusal_once(&format!("cannot start the counters: {e}"));
                return;
            }
            MAIN.with(|m| *m.borrow_mut() = Some((pmc, missing)));
        }
        Err(e) => {
            let text = e.to_string();
            say_refusal_once(&text);
            RECORDS.lock().unwrap_or_else(|p| p.into_inner()).push(PmcRecord {
                label: "main thread".into(),
                reading: None,
                note: Some(text),
            });
        }
    }
}

/// Whether `--pmc` is on.
pub fn enabled() -> bool {
    ENABLED.get().is_some()
}

/// Runs `work`, counting it on the calling thread when `--pmc` is on, and records the reading
/// under `label` (also printed on stderr).
pub fn around<T>(label: &str, work: impl FnOnce() -> T) -> T {
    let Some(options) = ENABLED.get() else {
        return work();
    };
    let mut pmc = match Pmc::open(options) {
        Ok(p) => p,
        Err(e) => {
            let text = e.to_string();
            say_refusal_once(&text);
            RECORDS.lock().unwrap_or_else(|p| p.into_inner()).push(PmcRecord { label: label.into(), reading: None, note: Some(text) });
            return work();
        }
    };
    let note = pmc.missing_text();
    let (out, record) = match pmc.start() {
        Ok(()) => {
            let out = work();
            let reading = pmc.stop().and_then(|_| pmc.read());
            match reading {
                Ok(r) => {
                    eprintln!("tlpx: {label}: {}", describe(&r));
                    (out, PmcRecord { label: label.into(), reading: Some(r), note })
                }
                Err(e) => (out, PmcRecord { label: label.into(), reading: None, note: Some(format!("reading the counters failed: {e}")) }),
            }
        }
        Err(e) => (work(), PmcRecord { label: label.into(), reading: None, note: Some(format!("starting the counters failed: {e}")) }),
    };
    RECORDS.lock().unwrap_or_else(|p| p.into_inner()).push(record);
    out
}

/// What `--pmc` counted so far: the main thread's counters up to now, then every [`around`].
/// Empty when `--pmc` is off. Call it on the main thread.
pub fn records() -> Vec<PmcRecord> {
    if !enabled() {
        return Vec::new();
    }
    let mut out = Vec::new();
    MAIN.with(|m| {
        if let Some((pmc, missing)) = m.borrow().as_ref() {
            match pmc.read() {
                Ok(r) => out.push(PmcRecord { label: "main thread".into(), reading: Some(r), note: missing.clone() }),
                Err(e) => out.push(PmcRecord {
                    label: "main thread".into(),
                    reading: None,
                    note: Some(format!("reading the counters failed: {e}")),
                }),
            }
        }
    });
    out.extend(RECORDS.lock().unwrap_or_else(|p| p.into_inner()).iter().cloned());
    out
}

/// Prints the main thread's counts so far on stderr (at the end of a command).
pub fn say_main() {
    MAIN.with(|m| {
        if let Some((pmc, _)) = m.borrow().as_ref() {
            if let Ok(r) = pmc.read() {
                eprintln!("tlpx: main thread: {}", describe(&r));
            }
        }
    });
}

// perf_event_open(2) -----------------------------------------------------------------------------

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct EventSpec {
    type_: u32,
    config: u64,
}

impl EventSpec {
    /// Attributes of a counting (not sampling) event of this thread; a group leader starts
    /// disabled, members follow their leader. Inherit stays off: child threads not counted.
    fn attr(self, scope: PmcScope, leader: bool) -> PerfEventAttr {
        let mut attr = PerfEventAttr::default();
        attr.type_ = self.type_;
        // Every field set here is in VER1, which every kernel since 2.6.39 takes.
        attr.size = PERF_ATTR_SIZE_VER1;
        attr.config = self.config;
        attr.read_format = PERF_FORMAT_TOTAL_TIME_ENABLED | PERF_FORMAT_TOTAL_TIME_RUNNING;
        attr.set_exclude_hv(1);
        attr.set_exclude_kernel(u64::from(scope == PmcScope::User));
        attr.set_disabled(u64::from(leader));
        attr
    }
}

/// perf_event_open for the calling thread on any CPU; the errno on failure (the messages
/// here are chosen by errno, and the tests stand in for the kernel with errnos).
fn perf_event_open(attr: &PerfEventAttr, group_fd: RawFd) -> Result<OwnedFd, i32> {
    perf::perf_event_open(attr, 0, -1, group_fd, PERF_FLAG_FD_CLOEXEC).map_err(|e| e.raw_os_error().unwrap_or(libc::EINVAL))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::hint::black_box;

    fn spin(iterations: u64) -> u64 {
        let mut acc = 1u64;
        for i in 0..iterations {
            acc = black_box(acc.wrapping_mul(6364136223846793005).wrapping_add(i));
        }
        acc
    }

    // Messages ------------------------------------------------------------------------------

    #[test]
    fn refusal_for_a_missing_counter_blames_the_cpu_or_hypervisor() {
        for errno in [libc::ENOENT, libc::EOPNOTSUPP, libc::ENODEV] {
            let msg = refusal_message(errno, Some(2), PmcScope::User);
            assert!(msg.contains("exposes no such hardware counter"), "{msg}");
            assert!(msg.contains("hypervisor") && msg.contains(errno_name(errno)), "{msg}");
            assert!(!msg.contains("paranoid"), "not a permission problem: {msg}");
        }
    }

    #[test]
    fn refusal_for_permissions_explains_the_paranoid_level_and_the_fix() {
        let msg = refusal_message(libc::EACCES, Some(3), PmcScope::User);
        assert!(msg.contains("EACCES") && msg.contains("perf_event_paranoid is 3"), "{msg}");
        assert!(msg.contains("sysctl kernel.perf_event_paranoid=2") && msg.contains("CAP_PERFMON"), "{msg}");

        let msg = refusal_message(libc::EACCES, Some(4), PmcScope::UserKernel);
        assert!(msg.contains("is 4") && msg.contains("altogether"), "{msg}");

        let msg = refusal_message(libc::EACCES, Some(2), PmcScope::UserKernel);
        assert!(msg.contains("perf_event_paranoid is 2") && msg.contains("user space only"), "{msg}");
        assert!(msg.contains("sysctl kernel.perf_event_paranoid=1"), "{msg}");

        // Allowed by the paranoid level, refused anyway: something else (seccomp, LSM).
        for (paranoid, scope) in [(2, PmcScope::User), (1, PmcScope::UserKernel), (-1, PmcScope::User)] {
            let msg = refusal_message(libc::EPERM, Some(paranoid), scope);
            assert!(msg.contains("EPERM") && msg.contains(&format!("is {paranoid}")), "{msg}");
            assert!(msg.contains("seccomp") && msg.contains(scope.name()), "{msg}");
        }

        let msg = refusal_message(libc::EPERM, None, PmcScope::User);
        assert!(msg.contains(PARANOID_PATH) && msg.contains("cannot be read"), "{msg}");
    }

    #[test]
    fn refusal_for_other_errors_names_them() {
        assert!(refusal_message(libc::ENOSYS, Some(2), PmcScope::User).contains("CONFIG_PERF_EVENTS"));
        assert!(refusal_message(libc::EBUSY, Some(2), PmcScope::User).contains("another profiler"));
        assert!(refusal_message(libc::EMFILE, Some(2), PmcScope::User).contains("ulimit -n"));
        let msg = refusal_message(libc::ESRCH, Some(2), PmcScope::User);
        assert!(msg.starts_with("perf_event_open failed: No such process") && msg.contains("ESRCH"), "{msg}");
    }

    #[test]
    fn unavailable_groups_events_by_cause() {
        let all = PmcUnavailable {
            refused: PmcEvent::ALL.iter().map(|&e| (e, libc::ENOENT)).collect(),
            paranoid: Some(2),
            scope: PmcScope::User,
        };
        let msg = all.to_string();
        assert!(
            msg.starts_with(
                "host performance counters unavailable (user scope): instructions, cycles, cache-references, cache-misses: the CPU"
            ),
            "{msg}"
        );
        assert_eq!(msg.matches("exposes no").count(), 1, "{msg}");
        assert_eq!(all.errno(), Some(libc::ENOENT));

        let mixed = PmcUnavailable {
            refused: vec![(PmcEvent::Instructions, libc::EACCES), (PmcEvent::CacheMisses, libc::ENOENT)],
            paranoid: Some(3),
            scope: PmcScope::UserKernel,
        };
        let msg = mixed.to_string();
        assert!(msg.contains("(user+kernel scope): instructions: the kernel refused access (EACCES)"), "{msg}");
        assert!(msg.contains("; cache-misses: the CPU"), "{msg}");
    }

    // Scaling and readings -------------------------------------------------------------------

    #[test]
    fn scale_count_corrects_for_multiplexing() {
        assert_eq!(scale_count(1000, 500, 500), Some(1000), "ran all the time");
        assert_eq!(scale_count(1000, 500, 501), Some(1000), "clock skew: running > enabled");
        assert_eq!(scale_count(1000, 1000, 500), Some(2000), "ran half the time");
        assert_eq!(scale_count(1000, 1000, 333), Some(3003), "rounds down");
        assert_eq!(scale_count(1000, 1000, 0), None, "never scheduled: unknown, not zero");
        assert_eq!(scale_count(0, 0, 0), Some(0), "never enabled");
        assert_eq!(scale_count(u64::MAX / 2, u64::MAX, u64::MAX / 4), Some(u64::MAX), "saturates");
        assert_eq!(scale_count(u64::MAX / 4, 4_000_000_000, 2_000_000_000), Some(u64::MAX / 4 * 2));
    }

    #[test]
    fn readings_derive_cpi_and_miss_ratio_and_leave_missing_events_empty() {
        let samples = [
            (PmcEvent::Instructions, 1_000_000, 100, 100),
            (PmcEvent::Cycles, 1_500_000, 100, 100),
            (PmcEvent::CacheReferences, 2_000, 100, 50),
            (PmcEvent::CacheMisses, 100, 100, 50),
        ];
        let r = PmcReading::from_samples(PmcScope::User, &samples);
        assert_eq!((r.instructions, r.cycles), (Some(1_000_000), Some(1_500_000)));
        assert_eq!(r.cpi, Some(1.5));
        assert_eq!((r.cache_references, r.cache_misses), (Some(4_000), Some(200)));
        assert_eq!(r.miss_ratio, Some(0.05));
        assert_eq!((r.time_enabled_ns, r.time_running_ns), (100, 50));
        assert!(r.scaled());
        let line = describe(&r);
        assert_eq!(
            line,
            "pmc (user): 1.00 M instructions, 1.50 M cycles, CPI 1.50, 4000 cache refs, 200 misses (5.0%), \
             multiplexed: counted 50% of the time, scaled"
        );

        let partial = PmcReading::from_samples(PmcScope::UserKernel, &samples[..2]);
        assert_eq!((partial.cache_references, partial.cache_misses, partial.miss_ratio), (None, None, None));
        assert!(!partial.scaled());
        assert_eq!(describe(&partial), "pmc (user+kernel): 1.00 M instructions, 1.50 M cycles, CPI 1.50, cache refs n/a, misses n/a");
        let json = serde_json::to_value(partial).expect("serialisable");
        assert_eq!(json["scope"], "user+kernel");
        assert_eq!(json["cpi"], 1.5);
        assert!(json["cache_misses"].is_null());

        let no_instructions = PmcReading::from_samples(PmcScope::User, &[(PmcEvent::Instructions, 0, 10, 10)]);
        assert_eq!((no_instructions.instructions, no_instructions.cpi), (Some(0), None));
        assert!(describe(&no_instructions).contains("CPI n/a"));
    }

    #[test]
    fn si_prefixes() {
        assert_eq!(si(0), "0");
        assert_eq!(si(9_999), "9999");
        assert_eq!(si(12_345), "12.3 k");
        assert_eq!(si(12_345_678), "12.35 M");
        assert_eq!(si(4_200_000_000), "4.20 G");
    }

    // Opening ---------------------------------------------------------------------------------

    #[test]
    fn attributes_count_this_thread_in_the_requested_scope() {
        // The struct is the kernel's whole one now (tlpx_device::perf); what is sent is VER1.
        assert!(std::mem::size_of::<PerfEventAttr>() >= PERF_ATTR_SIZE_VER1 as usize);
        let user = PmcEvent::Cycles.spec().attr(PmcScope::User, true);
        assert_eq!((user.type_, user.config, user.size), (PERF_TYPE_HARDWARE, 0, 72));
        assert_eq!((user.disabled(), user.exclude_kernel(), user.exclude_hv(), user.exclude_user()), (1, 1, 1, 0));
        assert_eq!(user.inherit(), 0, "inherit off");
        let member = PmcEvent::CacheMisses.spec().attr(PmcScope::UserKernel, false);
        assert_eq!((member.config, member.disabled(), member.exclude_kernel(), member.exclude_hv()), (3, 0, 0, 1));
        assert_eq!(member.read_format, 0b11);
        // SAFETY: both members of the union are u64: any bits are a valid value.
        assert_eq!(unsafe { member.__bindgen_anon_1.sample_period }, 0, "counting, not sampling");
    }

    /// (config, group fd, disabled) of each open call.
    type CallLog = std::rc::Rc<std::cell::RefCell<Vec<(u64, RawFd, bool)>>>;

    /// A stand-in for the kernel: answers each event from `answers`, with real (harmless) fds.
    fn fake_open(answers: Vec<Result<(), i32>>) -> (impl FnMut(&PerfEventAttr, RawFd) -> Result<OwnedFd, i32>, CallLog) {
        let calls = CallLog::default();
        let log = calls.clone();
        let mut answers = answers.into_iter();
        let open = move |attr: &PerfEventAttr, group: RawFd| {
            log.borrow_mut().push((attr.config, group, attr.disabled() != 0));
            answers.next().unwrap_or(Err(libc::ENOENT))?;
            Ok(OwnedFd::from(std::fs::File::open("/dev/null").map_err(|_| libc::EMFILE)?))
        };
        (open, calls)
    }

    fn hardware_specs() -> Vec<(PmcEvent, EventSpec)> {
        PmcEvent::ALL.iter().map(|&e| (e, e.spec())).collect()
    }

    #[test]
    fn partial_availability_keeps_what_opens_and_lists_the_rest() {
        // instructions and cycles open; the cache events are not exposed.
        let (open, calls) = fake_open(vec![Ok(()), Ok(()), Err(libc::ENOENT), Err(libc::EOPNOTSUPP)]);
        let (set, missing) = CounterSet::open_with(&hardware_specs(), PmcScope::User, open);
        assert_eq!(set.events(), [PmcEvent::Instructions, PmcEvent::Cycles]);
        assert_eq!(missing, [(PmcEvent::CacheReferences, libc::ENOENT), (PmcEvent::CacheMisses, libc::EOPNOTSUPP)]);
        let leader = set.counters[0].fd.as_raw_fd();
        let calls = calls.borrow();
        assert_eq!(calls[0], (1, -1, true), "instructions leads, disabled");
        assert_eq!(calls[1], (0, leader, false), "cycles joins the group");
        assert_eq!(calls[2].1, leader);
        let pmc = Pmc { set, missing, paranoid: Some(2), scope: PmcScope::User, _not_send: PhantomData };
        let text = pmc.missing_text().expect("two missing");
        assert!(text.starts_with("not counted: cache-references: the CPU"), "{text}");
        assert!(text.contains("; cache-misses: the CPU") && text.contains("EOPNOTSUPP"), "{text}");
    }

    #[test]
    fn a_refused_first_event_lets_the_next_lead_and_a_misfit_opens_alone() {
        // instructions refused; cycles leads; cache-references does not fit the group (EINVAL)
        // and opens as its own group; cache-misses joins the first group.
        let answers = vec![Err(libc::ENOENT), Ok(()), Err(libc::EINVAL), Ok(()), Ok(())];
        let (open, calls) = fake_open(answers);
        let (set, missing) = CounterSet::open_with(&hardware_specs(), PmcScope::UserKernel, open);
        assert_eq!(missing, [(PmcEvent::Instructions, libc::ENOENT)]);
        assert_eq!(set.events(), [PmcEvent::Cycles, PmcEvent::CacheReferences, PmcEvent::CacheMisses]);
        let leaders: Vec<bool> = set.counters.iter().map(|c| c.leader).collect();
        assert_eq!(leaders, [true, true, false]);
        let calls = calls.borrow();
        assert_eq!(calls.len(), 5);
        assert_eq!((calls[3].1, calls[3].2), (-1, true), "the misfit retried alone, disabled");
        assert_eq!(calls[4].1, set.counters[0].fd.as_raw_fd());
    }

    #[test]
    fn nothing_opens_gives_every_refusal() {
        let (open, _) = fake_open(vec![Err(libc::EACCES); 4]);
        let (set, missing) = CounterSet::open_with(&hardware_specs(), PmcScope::User, open);
        assert!(set.is_empty());
        assert_eq!(missing.len(), 4);
    }

    // The kernel of this machine -------------------------------------------------------------

    /// Touches `pages` fresh anonymous pages (no huge pages), one page fault each.
    fn touch_fresh_pages(pages: usize) {
        let len = pages * 4096;
        // SAFETY: a private anonymous mapping of `len` bytes, written within bounds, unmapped
        // before returning.
        unsafe {
            let p =
                libc::mmap(std::ptr::null_mut(), len, libc::PROT_READ | libc::PROT_WRITE, libc::MAP_PRIVATE | libc::MAP_ANONYMOUS, -1, 0);
            assert_ne!(p, libc::MAP_FAILED, "mmap {len} bytes");
            libc::madvise(p, len, libc::MADV_NOHUGEPAGE);
            for page in 0..pages {
                std::ptr::write_volatile(p.cast::<u8>().add(page * 4096), 1);
            }
            libc::munmap(p, len);
        }
    }

    /// Software counters (page faults: exact, whatever the CPU) exercise the real open, group,
    /// start, stop and read path on any machine with perf events, including VMs without a PMU.
    #[test]
    fn software_counters_count_page_faults_and_stop_counting() {
        const PERF_COUNT_SW_PAGE_FAULTS: u64 = 2;
        const PERF_COUNT_SW_PAGE_FAULTS_MIN: u64 = 5;
        let specs = [
            ("page-faults", EventSpec { type_: PERF_TYPE_SOFTWARE, config: PERF_COUNT_SW_PAGE_FAULTS }),
            ("minor-faults", EventSpec { type_: PERF_TYPE_SOFTWARE, config: PERF_COUNT_SW_PAGE_FAULTS_MIN }),
        ];
        let (mut set, missing) = CounterSet::open_with(&specs, PmcScope::User, perf_event_open);
        if let Some(&(_, errno)) = missing.first() {
            // Refused outright (perf events absent or forbidden): the reason must be a clear one.
            assert!(set.is_empty(), "software events open together or not at all");
            assert!([libc::ENOSYS, libc::EACCES, libc::EPERM].contains(&errno), "errno {errno}");
            let msg = refusal_message(errno, read_paranoid(), PmcScope::User);
            assert!(msg.contains(errno_name(errno)), "{msg}");
            return;
        }
        assert_eq!(set.counters.iter().map(|c| c.leader).collect::<Vec<_>>(), [true, false], "one group");

        // The counts grow with the work, 10x the pages: 10x the faults.
        let mut faults_for = |pages: usize| {
            set.start().expect("start");
            touch_fresh_pages(pages);
            set.stop().expect("stop");
            set.read().expect("read")
        };
        let short = faults_for(50);
        let long = faults_for(500);
        for (pages, reading) in [(50, &short), (500, &long)] {
            let (faults, minor) = (reading[0].1, reading[1].1);
            assert!((pages..pages + 40).contains(&(faults as usize)), "{faults} faults for {pages} pages");
            assert!(minor <= faults && minor + 5 >= faults, "{minor} minor of {faults}");
            assert_eq!(scale_count(faults, reading[0].2, reading[0].3), Some(faults), "not multiplexed");
        }

        // Stopped: more work is not counted, and the times stand still.
        touch_fresh_pages(100);
        assert_eq!(set.read().expect("read"), long);

        // Times are per start, not totals since the open (which RESET leaves running).
        set.start().expect("start");
        set.stop().expect("stop");
        let empty = set.read().expect("read");
        assert!(empty[0].1 < 10, "{empty:?}");
        assert!(empty[0].2 < long[0].2, "time_enabled of an empty interval {empty:?} vs {long:?}");
    }

    /// Hardware counters, whichever way this machine answers: the numbers when it counts, the
    /// clear refusal when it does not.
    #[test]
    fn hardware_counters_count_instructions_or_refuse_clearly() {
        for scope in [PmcScope::User, PmcScope::UserKernel] {
            match Pmc::open(&PmcOptions { scope }) {
                Ok(mut pmc) => {
                    let events = pmc.counting();
                    let (_, short) = pmc.measure(|| spin(black_box(100_000))).expect("measure");
                    let (_, long) = pmc.measure(|| spin(black_box(1_000_000))).expect("measure");
                    let text = describe(&long);
                    assert!(text.starts_with(&format!("pmc ({})", scope.name())), "{text}");
                    if events.contains(&PmcEvent::Instructions) {
                        let (short, long) = (short.instructions.expect("counted"), long.instructions.expect("counted"));
                        // 10x the loop: 10x the instructions, give or take the fixed overhead.
                        assert!(short >= 100_000 && long > 5 * short && long < 20 * short, "{short} -> {long}");
                    }
                    if let Some(cpi) = long.cpi {
                        assert!((0.05..50.0).contains(&cpi), "CPI {cpi}: {text}");
                    }
                    for (event, errno) in pmc.missing() {
                        assert!(!events.contains(event));
                        assert!(pmc.missing_text().expect("missing").contains(errno_name(*errno)));
                    }
                }
                Err(refused) => {
                    let errno = refused.errno().expect("an errno");
                    assert_eq!(refused.refused.len(), 4, "every event tried: {refused}");
                    let msg = refused.to_string();
                    assert!(msg.starts_with("host performance counters unavailable"), "{msg}");
                    assert!(msg.contains(&refusal_message(errno, refused.paranoid, scope)), "{msg}");
                    assert!(msg.contains(errno_name(errno)) || msg.contains("os error"), "{msg}");
                    eprintln!("{msg}");
                }
            }
        }
    }
}
