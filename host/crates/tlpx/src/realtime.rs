//! What `tlpx irq` and `tlpx loop` share: where the measuring thread runs (CPU affinity,
//! SCHED_FIFO when permitted), the built-in load generator, idle/loaded comparisons, the time
//! basis of the figures (hardware, or the simulator in virtual or real host time), and the
//! terminal log2 histograms and percentile lines.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;

use anyhow::{bail, Context};
use clap::Args;
use tlpx_device::backends::sim::SimDevice;
use tlpx_device::card::Card;
use tlpx_model::stats::Summary;

/// The result types irq and loop share are tlpx-results'.
pub use tlpx_results::realtime::{Comparison, Condition, HostGaps, LoadKind, Placement, TimeBasis};

use crate::args::{refuse_duplicate_values, refuse_duplicates, whole};
use crate::session::Session;

/// Where the measuring thread runs and what load runs beside it (flattened into the
/// commands' arguments).
#[derive(Debug, Clone, Args)]
pub struct PlacementArgs {
    /// Pin the measuring thread to this CPU.
    #[arg(long, value_parser = whole(0, usize::MAX), allow_negative_numbers = true)]
    pub cpu: Option<usize>,
    /// Run the measuring thread SCHED_FIFO at this priority (1..=99) when permitted.
    #[arg(long, value_parser = whole(1i32, 99), allow_negative_numbers = true)]
    pub fifo: Option<i32>,
    /// Load to run during the measurement (or the loaded run of --compare): cpu, mem, syscall.
    #[arg(long, value_enum, value_delimiter = ',')]
    pub load: Vec<LoadKind>,
    /// CPUs the load threads run on (one thread per kind and CPU); default: every CPU.
    #[arg(long, value_delimiter = ',', value_parser = whole(0, usize::MAX), allow_negative_numbers = true)]
    pub load_cpus: Vec<usize>,
    /// Run these conditions one after the other and print them side by side: idle,loaded.
    #[arg(long, value_enum, value_delimiter = ',')]
    pub compare: Vec<Condition>,
}

/// Checks the arguments; every error names the bad value and what is accepted.
pub fn parse_placement(args: &PlacementArgs) -> anyhow::Result<Placement> {
    let allowed = allowed_cpus();
    if let Some(c) = args.cpu {
        check_cpu("--cpu", c, &allowed)?;
    }
    for c in &args.load_cpus {
        check_cpu("--load-cpus", *c, &allowed)?;
    }
    // A kind, CPU or condition named twice would start two load threads or measure twice.
    refuse_duplicates("--load-cpus", &args.load_cpus, usize::to_string).map_err(anyhow::Error::msg)?;
    refuse_duplicate_values("--load", &args.load).map_err(anyhow::Error::msg)?;
    refuse_duplicate_values("--compare", &args.compare).map_err(anyhow::Error::msg)?;
    let mut conditions = args.compare.clone();
    if conditions.is_empty() {
        conditions.push(if args.load.is_empty() { Condition::Idle } else { Condition::Loaded });
    }
    let mut load = args.load.clone();
    if conditions.contains(&Condition::Loaded) && load.is_empty() {
        load = vec![LoadKind::Cpu, LoadKind::Mem, LoadKind::Syscall];
    }
    if !args.load_cpus.is_empty() && load.is_empty() {
        bail!("--load-cpus says where to run load, but no --load says which: give --load cpu,mem,syscall");
    }
    let load_cpus = if args.load_cpus.is_empty() { allowed } else { args.load_cpus.clone() };
    Ok(Placement { cpu: args.cpu, fifo: args.fifo, load, load_cpus, conditions })
}

/// Starts the load of `condition` (none when idle); it stops when dropped.
pub fn load_for(placement: &Placement, condition: Condition) -> anyhow::Result<Option<Load>> {
    match condition {
        Condition::Loaded => Ok(Some(Load::start(&placement.load, &placement.load_cpus)?)),
        Condition::Idle => Ok(None),
    }
}

/// Runs `work` on a thread of its own, pinned and SCHED_FIFO as `placement` asks, with the
/// card lent to it; returns its result and the notes (e.g. SCHED_FIFO refused) it made.
pub fn on_measuring_thread<T: Send>(
    card: &mut Card,
    name: &str,
    placement: &Placement,
    work: impl FnOnce(&mut Card) -> anyhow::Result<T> + Send,
) -> (anyhow::Result<T>, Vec<String>) {
    let (cpu, fifo) = (placement.cpu, placement.fifo);
    std::thread::scope(|scope| {
        let handle = std::thread::Builder::new().name(name.into()).spawn_scoped(scope, move || {
            let mut notes = Vec::new();
            if let Some(c) = cpu {
                if let Err(e) = pin_to(c).with_context(|| format!("--cpu {c}")) {
                    return (Err(e), notes);
                }
            }
            if let Some(p) = fifo {
                if let Err(e) = make_fifo(p) {
                    eprintln!("tlpx: {e}");
                    notes.push(e);
                }
            }
            let label = format!("measuring thread ({})", std::thread::current().name().unwrap_or("tlpx"));
            (crate::pmc::around(&label, || work(card)), notes)
        });
        match handle {
            Ok(h) => h.join().unwrap_or_else(|_| (Err(anyhow::anyhow!("the measuring thread panicked")), Vec::new())),
            Err(e) => (Err(anyhow::Error::new(e).context("starting the measuring thread")), Vec::new()),
        }
    })
}

/// "idle", or "loaded [cpu+mem on CPUs 0,1]".
pub fn condition_text(condition: Condition, load: &[LoadKind], load_cpus: &[usize]) -> String {
    match condition {
        Condition::Idle => "idle".into(),
        Condition::Loaded => format!(
            "loaded [{} on CPUs {}]",
            load.iter().map(|l| format!("{l:?}").to_lowercase()).collect::<Vec<_>>().join("+"),
            cpu_list(load_cpus)
        ),
    }
}

/// "measuring thread: CPU 3, SCHED_FIFO 80" (the priority only when it was granted).
pub fn thread_line(cpu: Option<usize>, fifo_granted: Option<i32>) -> String {
    match (cpu, fifo_granted) {
        (Some(c), Some(p)) => format!("measuring thread: CPU {c}, SCHED_FIFO {p}"),
        (Some(c), None) => format!("measuring thread: CPU {c}, normal scheduler"),
        (None, Some(p)) => format!("measuring thread: any CPU, SCHED_FIFO {p}"),
        (None, None) => "measuring thread: any CPU, normal scheduler".into(),
    }
}

// CPUs ---------------------------------------------------------------------------------------

/// The CPUs this process may run on (its affinity mask).
pub fn allowed_cpus() -> Vec<usize> {
    // SAFETY: a zeroed cpu_set_t is a valid empty set; sched_getaffinity fills it.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        if libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) != 0 {
            let n = std::thread::available_parallelism().map_or(1, |n| n.get());
            return (0..n).collect();
        }
        (0..libc::CPU_SETSIZE as usize).filter(|&c| libc::CPU_ISSET(c, &set)).collect()
    }
}

pub fn cpu_list(cpus: &[usize]) -> String {
    cpus.iter().map(ToString::to_string).collect::<Vec<_>>().join(",")
}

pub fn check_cpu(flag: &str, cpu: usize, allowed: &[usize]) -> anyhow::Result<()> {
    if allowed.contains(&cpu) {
        Ok(())
    } else {
        Err(anyhow::Error::msg(format!(
            "{flag}: CPU {cpu} does not exist or is not allowed for this process; the CPUs are {}",
            cpu_list(allowed)
        )))
    }
}

// Thread placement ---------------------------------------------------------------------------

/// Pins the calling thread to `cpu`.
pub fn pin_to(cpu: usize) -> anyhow::Result<()> {
    // SAFETY: a zeroed cpu_set_t is a valid empty set; CPU_SET stays within CPU_SETSIZE.
    unsafe {
        if cpu >= libc::CPU_SETSIZE as usize {
            bail!("CPU {cpu} does not exist; the CPUs are {}", cpu_list(&allowed_cpus()));
        }
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut set);
        if libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) != 0 {
            let e = std::io::Error::last_os_error();
            bail!("cannot pin to CPU {cpu} ({e}); the CPUs are {}", cpu_list(&allowed_cpus()));
        }
    }
    Ok(())
}

/// Makes the calling thread SCHED_FIFO at `priority`; `Err` carries why not.
pub fn make_fifo(priority: i32) -> Result<(), String> {
    let param = libc::sched_param { sched_priority: priority };
    // SAFETY: plain system call on the calling thread with a valid parameter block.
    if unsafe { libc::sched_setscheduler(0, libc::SCHED_FIFO, &param) } != 0 {
        let e = std::io::Error::last_os_error();
        return Err(format!(
            "SCHED_FIFO priority {priority} not permitted ({e}): carrying on with the normal scheduler \
             (run as root, with CAP_SYS_NICE, or raise RLIMIT_RTPRIO)"
        ));
    }
    Ok(())
}

// Load generator -----------------------------------------------------------------------------

/// Load threads; stopped and joined on drop.
pub struct Load {
    stop: Arc<AtomicBool>,
    threads: Vec<JoinHandle<()>>,
}

fn load_loop(kind: LoadKind, stop: &AtomicBool) {
    match kind {
        LoadKind::Cpu => {
            let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
            while !stop.load(Ordering::Relaxed) {
                for _ in 0..10_000 {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                }
                std::hint::black_box(x);
            }
        }
        LoadKind::Mem => {
            let mut buf = vec![1u64; 8 << 20];
            let mut sum = 0u64;
            while !stop.load(Ordering::Relaxed) {
                for chunk in buf.chunks_mut(4096) {
                    for v in chunk.iter_mut() {
                        sum = sum.wrapping_add(*v);
                        *v = sum;
                    }
                    if stop.load(Ordering::Relaxed) {
                        break;
                    }
                }
            }
            std::hint::black_box(sum);
        }
        LoadKind::Syscall => {
            while !stop.load(Ordering::Relaxed) {
                for _ in 0..1000 {
                    // SAFETY: getppid has no preconditions.
                    std::hint::black_box(unsafe { libc::getppid() });
                }
            }
        }
    }
}

impl Load {
    /// Starts one thread per kind and CPU, each pinned to its CPU.
    pub fn start(kinds: &[LoadKind], cpus: &[usize]) -> anyhow::Result<Load> {
        let stop = Arc::new(AtomicBool::new(false));
        let mut load = Load { stop: stop.clone(), threads: Vec::new() };
        for &cpu in cpus {
            for &kind in kinds {
                let stop = stop.clone();
                let (tx, rx) = std::sync::mpsc::channel();
                let handle = std::thread::Builder::new()
                    .name(format!("load-{kind:?}-{cpu}"))
                    .spawn(move || {
                        let pinned = pin_to(cpu);
                        let ok = pinned.is_ok();
                        let _ = tx.send(pinned.map_err(|e| e.to_string()));
                        if ok {
                            load_loop(kind, &stop);
                        }
                    })
                    .context("starting a load thread")?;
                load.threads.push(handle);
                if let Ok(Err(e)) = rx.recv() {
                    bail!("load thread: {e}");
                }
            }
        }
        Ok(load)
    }
}

impl Drop for Load {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

// Time basis ---------------------------------------------------------------------------------

/// The clock of figures the card measures, for a time basis `kind`.
pub fn basis_clock(kind: &str) -> &'static str {
    match kind {
        "hardware" => "card time",
        "sim_real_host_time" => "card time (simulated; this host's wall time between messages charged to it)",
        "sim_live" => "card time (simulated, live: it ran on its own, at the simulator's speed, while tlpx worked)",
        _ => "card time (simulated, virtual: it runs only while tlpx waits on tlpx-sim)",
    }
}

/// What comparing idle and loaded runs means on `basis`, on a machine of `cpus` CPUs.
pub fn comparison(basis: &TimeBasis, cpus: usize) -> Comparison {
    match basis.kind {
        "hardware" => Comparison {
            shows_host_load: true,
            statement: "idle vs loaded: the same measurement without and with the --load threads on this host".into(),
        },
        "sim_real_host_time" | "sim_live" => Comparison {
            shows_host_load: false,
            statement: format!(
                "idle vs loaded on the simulator with real host time is how this machine's {cpus} CPU(s) schedule tlpx-sim, \
                 tlpx and the load threads (the simulator runs on the same CPUs), not a host's interrupt dispatch or PCIe: \
                 a loaded run can come out faster than an idle one; compare idle and loaded on hardware"
            ),
        },
        _ => Comparison {
            shows_host_load: false,
            statement: "idle and loaded are the same by construction in virtual time: card time does not run while tlpx or \
                        the load runs, so load cannot change these figures; compare idle and loaded on hardware"
                .into(),
        },
    }
}

/// The simulator limit an idle/loaded comparison carries on the simulator (`None` on hardware).
pub fn comparison_limit(basis: &TimeBasis, c: &Comparison) -> Option<crate::results::SimLimit> {
    let id = match basis.kind {
        "hardware" => return None,
        "sim_real_host_time" | "sim_live" => "idle_vs_loaded_is_this_machines_scheduling",
        _ => "idle_vs_loaded_identical_in_virtual_time",
    };
    Some(crate::results::SimLimit::new(id, &["points[].condition", "comparison"], c.statement.clone()))
}

/// Reads the simulator's `host_time` mode from its Hello, whatever the field's shape.
fn sim_host_time(socket: &str) -> Option<String> {
    let sim = SimDevice::connect(socket).ok()?;
    let v = serde_json::to_value(sim.hello()).ok()?;
    match v.get("host_time")? {
        serde_json::Value::Null => None,
        serde_json::Value::String(s) => Some(s.clone()),
        other => Some(other.to_string()),
    }
}

/// The simulator's host-time counters now (gaps charged, gaps capped), on a short-lived
/// connection; `None` on hardware or when the simulator cannot be asked. A run is judged by
/// the difference of two readings: a capped gap means a host latency was under-stated.
pub fn sim_host_time_stats(session: &Session) -> Option<tlpx_sim_protocol::HostTimeStats> {
    let sim = session.environment.sim.as_ref()?;
    SimDevice::connect(&sim.socket).ok()?.stats().ok().map(|s| s.host_time)
}

/// The gaps between two readings of the simulator's host-time counters.
pub fn host_gaps_between(
    before: &Option<tlpx_sim_protocol::HostTimeStats>,
    after: &Option<tlpx_sim_protocol::HostTimeStats>,
) -> Option<HostGaps> {
    let (b, a) = (before.as_ref()?, after.as_ref()?);
    Some(HostGaps {
        gaps: a.gaps.saturating_sub(b.gaps),
        capped_gaps: a.capped_gaps.saturating_sub(b.capped_gaps),
        longest_gap_ns: a.longest_gap_ns,
    })
}

/// Where the figures come from: "hardware", "sim_virtual", "sim_live" (another client holds
/// the simulator's live time as the command starts: card time runs on its own, so the host's
/// own time between messages passes on the card too) or "sim_real_host_time", and the
/// simulator's `host_time` mode. Each command words its own statement from it.
pub fn basis_kind(session: &Session) -> (&'static str, Option<String>) {
    let Some(sim) = &session.environment.sim else {
        return ("hardware", None);
    };
    let mode = sim_host_time(&sim.socket);
    let real = mode.as_deref().is_some_and(|m| m.to_ascii_lowercase().contains("real"));
    let live = session.environment.time_mode_at_start() == Some(tlpx_device::TimeMode::Live);
    (
        if real {
            "sim_real_host_time"
        } else if live {
            "sim_live"
        } else {
            "sim_virtual"
        },
        mode,
    )
}
// Output -------------------------------------------------------------------------------------

pub fn fmt_ns(ns: f64) -> String {
    if ns >= 1e6 {
        format!("{:.2} ms", ns / 1e6)
    } else if ns >= 1e3 {
        format!("{:.2} us", ns / 1e3)
    } else {
        format!("{ns:.0} ns")
    }
}

/// The terminal histogram of a log2 histogram in cycles: one row per bucket from the first
/// to the last non-empty one, with a bar on a log scale of the count.
pub fn text_histogram(hist: &[u64], clock_hz: u32, width: usize) -> Vec<String> {
    let ns = 1e9 / f64::from(clock_hz.max(1));
    let (Some(lo), Some(hi)) = (hist.iter().position(|&c| c > 0), hist.iter().rposition(|&c| c > 0)) else {
        return vec!["    (no samples)".into()];
    };
    let top = hist.iter().copied().max().unwrap_or(1).max(1) as f64;
    (lo..=hi)
        .map(|k| {
            let c = hist[k];
            let bar = if c == 0 { 0 } else { ((1.0 + (c as f64).log10()) / (1.0 + top.log10()) * width as f64).round().max(1.0) as usize };
            let from = if k == 0 { 0.0 } else { (1u64 << k) as f64 * ns };
            let to = (1u64 << (k + 1)) as f64 * ns;
            format!("    {:>10} .. {:<10} {:>8} |{}", fmt_ns(from), fmt_ns(to), c, "#".repeat(bar))
        })
        .collect()
}

pub fn summary_line(s: &Option<Summary>) -> String {
    match s {
        Some(s) => format!(
            "p50 {}  p99 {}  p99.9 {}  max {}  (min {}, {} samples)",
            fmt_ns(s.median),
            fmt_ns(s.p99),
            fmt_ns(s.p999),
            fmt_ns(s.max),
            fmt_ns(s.min),
            s.count
        ),
        None => "no samples".into(),
    }
}

/// The head of `tlpx irq` / `tlpx loop` output: the card, the session's notes, and what the
/// figures are (the time basis statement).
pub fn print_header(session: &Session, basis: &TimeBasis) {
    crate::outln!("{}", session.describe());
    for n in &session.notes {
        crate::outln!("note: {n}");
    }
    crate::outln!("what these figures are: {}", basis.statement);
    crate::outln!("clock: figures below are {} unless they say real host time", basis.clock);
}

/// Writes a figure to `path` as SVG, its title ending with where the figures come from
/// ("simulated, sim_virtual" or "hardware"); `svg` draws it from that title.
pub fn write_svg(
    path: &std::path::Path,
    session: &Session,
    basis: &TimeBasis,
    title: &str,
    svg: impl FnOnce(String) -> anyhow::Result<String>,
) -> anyhow::Result<()> {
    let what = if session.environment.simulated { format!("simulated, {}", basis.kind) } else { "hardware".into() };
    let svg = svg(format!("{title} ({what})"))?;
    std::fs::write(path, svg).with_context(|| format!("writing {}", path.display()))?;
    eprintln!("tlpx: wrote {}", path.display());
    Ok(())
}
