//! Per-CPU runs of `tlpx irq` (`--cpus`): every selected CPU measured in one run.
//!
//! ```text
//!  fire n ──► thread of CPU cpus[(n-1) mod k] (pinned there, SCHED_FIFO with --fifo)
//!             waits, acks fire n, records sched_getcpu() ──baton (card + loop state)──► next CPU's thread
//!  hardware: one card vector per CPU, /proc/irq/N/smp_affinity_list = c, checked in /proc/interrupts
//!  simulator: no kernel interrupt: the figure per CPU is that thread's wake-up on the socket reply
//! ```
//!
//! Only one thread waits at a time: the others sleep on their channel, so a fire is taken by
//! the thread of its CPU, and the hand-over (a thread wake-up) happens in the interval
//! between fires, outside the measured path. Output layouts: `rtla timerlat hist`'s and
//! `cyclictest -h`'s, from the samples, with a bucket width of `--bucket-size` ns.

use std::sync::mpsc;

use tlpx_device::isr_trace::{self as kernel, CpuRoles, InterruptCounts, SteeringCheck};
use tlpx_device::{InterruptMode, InterruptVectors};

use super::*;

/// `--layout`: how the histograms are printed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Layout {
    /// Today's text (log2 histogram per stage) plus a per-CPU summary table.
    Tlpx,
    /// `rtla timerlat hist`: an `Index IRQ-000 Thr-000 ...` row per bucket, then over/count/min/avg/max.
    Rtla,
    /// `cyclictest -h`: an index and a count per CPU, then `# Min/Avg/Max Latencies` and overflows.
    Cyclictest,
}

/// Parses `--cpus`: `all` (every online CPU this process may run on) or a kernel CPU list
/// (`0-3,6`). A CPU that is not online, or not in this process's affinity, is refused naming
/// it and the CPUs there are.
pub fn parse_cpus(spec: &str, roles: &CpuRoles, allowed: &[usize]) -> anyhow::Result<Vec<usize>> {
    let online: Vec<usize> = roles.online.iter().map(|&c| c as usize).collect();
    let usable: Vec<usize> = online.iter().copied().filter(|c| allowed.contains(c)).collect();
    let here = || format!("the online CPUs are {}{}", cpu_list_text(&online), affinity_text(&online, &usable));
    if spec.trim() == "all" {
        if usable.is_empty() {
            bail!("--cpus all: no online CPU is in this process's affinity; {}", here());
        }
        return Ok(usable);
    }
    let cpus = kernel::parse_cpu_list(spec)
        .map_err(|e| anyhow::anyhow!("--cpus {spec:?}: {e}; give a list such as 0-3,6 or `all`; {}", here()))?;
    let mut seen = Vec::new();
    for c in cpus {
        let c = c as usize;
        if seen.contains(&c) {
            bail!("--cpus {spec:?} names CPU {c} twice: each CPU is measured once");
        }
        if !online.contains(&c) {
            bail!("--cpus {spec:?}: CPU {c} does not exist or is offline; {}", here());
        }
        if !allowed.contains(&c) {
            bail!("--cpus {spec:?}: CPU {c} is online but not in this process's affinity (taskset, cgroup cpuset); {}", here());
        }
        seen.push(c);
    }
    Ok(seen)
}

fn affinity_text(online: &[usize], usable: &[usize]) -> String {
    if online == usable {
        String::new()
    } else {
        format!(" (this process may run on {})", cpu_list_text(usable))
    }
}

/// `0-3,6`: the kernel's CPU list syntax.
pub fn cpu_list_text(cpus: &[usize]) -> String {
    let mut parts: Vec<String> = Vec::new();
    let mut i = 0;
    while i < cpus.len() {
        let mut j = i;
        while j + 1 < cpus.len() && cpus[j + 1] == cpus[j] + 1 {
            j += 1;
        }
        parts.push(if j > i { format!("{}-{}", cpus[i], cpus[j]) } else { cpus[i].to_string() });
        i = j + 1;
    }
    parts.join(",")
}

/// The CPU of fire `fire` (1-based): the fires are dealt to the CPUs in turn.
pub fn cpu_of_fire(cpus: &[usize], fire: u32) -> u32 {
    cpus[(fire.max(1) as usize - 1) % cpus.len()] as u32
}

// The measuring threads -----------------------------------------------------------------------

/// What travels between the measuring threads.
enum Msg<'c> {
    /// The card and the loop's state: the receiver takes the next interrupt.
    Baton(&'c mut Card, Box<Measuring>),
    Stop,
}

/// What the thread that ended the run hands back.
type Ended<'c> = (&'c mut Card, Box<Measuring>, anyhow::Result<()>);

/// Measures with one thread per CPU of `cpus`, each pinned there (and SCHED_FIFO at `fifo`
/// when permitted), thread i waiting on `masks[i]`; returns what the loop measured and the
/// notes (SCHED_FIFO refused).
pub(super) fn measure_per_cpu(
    card: &mut Card,
    job: &Job,
    cpus: &[usize],
    masks: &[u32],
    fifo: Option<i32>,
    ticker: &Ticker,
) -> (anyhow::Result<Measured>, Vec<String>) {
    let k = cpus.len();
    std::thread::scope(|scope| {
        let (txs, rxs): (Vec<_>, Vec<_>) = (0..k).map(|_| mpsc::channel::<Msg>()).unzip();
        let (setup_tx, setup_rx) = mpsc::channel::<anyhow::Result<Option<String>>>();
        let (done_tx, done_rx) = mpsc::channel::<Ended>();
        let stop_all = |txs: &[mpsc::Sender<Msg>]| {
            for t in txs {
                let _ = t.send(Msg::Stop);
            }
        };
        let mut handles = Vec::new();
        for (i, rx) in rxs.into_iter().enumerate() {
            let (ring, setup_tx, done_tx) = (txs.clone(), setup_tx.clone(), done_tx.clone());
            let (cpu, mask) = (cpus[i], masks[i]);
            let spawned = std::thread::Builder::new().name(format!("tlpx-irq-cpu{cpu}")).spawn_scoped(scope, move || {
                if let Err(e) = realtime::pin_to(cpu).with_context(|| format!("--cpus: CPU {cpu}")) {
                    let _ = setup_tx.send(Err(e));
                    return;
                }
                let _ = setup_tx.send(Ok(fifo.and_then(|p| realtime::make_fifo(p).err())));
                while let Ok(Msg::Baton(card, mut m)) = rx.recv() {
                    let ended = match m.step(card, job, ticker, mask) {
                        Ok(Step::More) => {
                            let next = &ring[(i + 1) % k];
                            match next.send(Msg::Baton(card, m)) {
                                Ok(()) => continue,
                                // The next thread is gone: only after a Stop, which ends this one too.
                                Err(mpsc::SendError(Msg::Baton(card, m))) => {
                                    (card, m, Err(anyhow::anyhow!("a measuring thread ended early")))
                                }
                                Err(_) => return,
                            }
                        }
                        Ok(Step::Done) => (card, m, Ok(())),
                        Err(e) => (card, m, Err(e)),
                    };
                    let _ = done_tx.send(ended);
                    break;
                }
            });
            match spawned {
                Ok(h) => handles.push(h),
                Err(e) => {
                    stop_all(&txs);
                    return (Err(anyhow::Error::new(e).context("starting the measuring threads")), Vec::new());
                }
            }
        }
        drop((setup_tx, done_tx));
        let mut notes = Vec::new();
        for _ in 0..k {
            match setup_rx.recv() {
                Ok(Ok(Some(note))) if !notes.contains(&note) => {
                    eprintln!("tlpx: {note}");
                    notes.push(note);
                }
                Ok(Ok(_)) => {}
                Ok(Err(e)) => {
                    stop_all(&txs);
                    return (Err(e), notes);
                }
                Err(_) => {
                    stop_all(&txs);
                    return (Err(anyhow::anyhow!("a measuring thread panicked while starting")), notes);
                }
            }
        }
        let m = match Measuring::start(card, job) {
            Ok(m) => m,
            Err(e) => {
                stop_all(&txs);
                return (Err(e), notes);
            }
        };
        if txs[0].send(Msg::Baton(card, Box::new(m))).is_err() {
            return (Err(anyhow::anyhow!("the first measuring thread is gone")), notes);
        }
        // The other threads keep the channels open, so a thread that panicked with the baton
        // would leave a plain recv() waiting for ever: a thread that ended without handing the
        // card back ends the wait.
        let ended = loop {
            match done_rx.recv_timeout(Duration::from_millis(200)) {
                Err(mpsc::RecvTimeoutError::Timeout) if handles.iter().any(|h| h.is_finished()) => {
                    break done_rx.try_recv().map_err(|_| ())
                }
                Err(mpsc::RecvTimeoutError::Timeout) => {}
                other => break other.map_err(|_| ()),
            }
        };
        stop_all(&txs);
        match ended {
            Ok((card, m, outcome)) => (m.finish(card, outcome), notes),
            // Every thread is gone without handing the card back: one panicked with it.
            Err(_) => (Err(anyhow::anyhow!("a measuring thread panicked")), notes),
        }
    })
}

// Steering (hardware) ------------------------------------------------------------------------

/// The vectors of a per-CPU run and what to check after it.
pub struct Steering {
    /// The vector mask thread i waits on.
    pub masks: Vec<u32>,
    /// The timer's vectors (`Run::start_on_vectors`; 0: its own source's, one vector for all).
    pub timer_vectors: u32,
    /// Per CPU: (card vector, host irq) where known.
    pub vectors: Vec<(Option<u32>, Option<u32>)>,
    pub report: SteeringReport,
    before: Option<InterruptCounts>,
}

/// The card vector of the i-th CPU: the timer owns the vectors above the card's sources
/// (pcie_msi bits 0..=MSI_SLOT), so CPU i gets FIRST_TIMER_VECTOR + i.
pub const FIRST_TIMER_VECTOR: u32 = 8;

/// The irq timer's vector mask for a per-CPU run: each fire raises the next of `vectors` in
/// turn (`vector_mode` rotate), so fire n lands on vectors[(n-1) mod k] and the thread of the
/// i-th CPU, waiting on vectors[i], takes the fires dealt to it. `Run::start_on_vectors`
/// writes it once the timer is this process's (never before: another run may own it).
pub fn timer_vector_mask(vectors: &[u32]) -> Result<u32, String> {
    if vectors.iter().any(|&v| v >= tlpx_regs::constants::MSI_VECTORS as u32) {
        return Err(format!(
            "{} CPUs need vectors up to {}, the card has {}",
            vectors.len(),
            FIRST_TIMER_VECTOR as usize + vectors.len() - 1,
            tlpx_regs::constants::MSI_VECTORS
        ));
    }
    Ok(vectors.iter().fold(0u32, |m, &v| m | 1 << v))
}

/// Puts the timer back on its own source's vector and disables the other `vectors` in the
/// card's MSI block (after a per-CPU run).
pub fn reset_timer_vectors(card: &mut Card, vectors: &[u32]) -> Result<(), String> {
    let extra = vectors.iter().fold(0u32, |m, &v| m | 1 << v) & !(1 << irq_timer::msi_bit());
    irq_timer::set_vectors(card, 0, false)
        .and_then(|_| card.write(tlpx_regs::pcie_msi::ENABLE_CLEAR, u64::from(extra)))
        .map_err(|e| format!("resetting the timer's vectors: {e}"))
}

/// Asks for one vector per CPU and steers each to its CPU; falls back to the one vector (and
/// says so) when they are not granted or the timer cannot raise them. `kernel_dispatches`: a kernel
/// dispatches the card's interrupts (hardware, vfio), so each vector's host irq is steered
/// through /proc/irq and checked in /proc/interrupts; without one (the simulator, whose
/// messages arrive on its socket) the card still raises vector 8+i for the thread of the
/// i-th CPU, which waits on that vector alone, and nothing is steered.
pub fn steer(card: &mut Card, cpus: &[usize], kernel_dispatches: bool) -> Steering {
    let k = cpus.len() as u32;
    let proc_root = std::path::Path::new(kernel::PROC);
    let mut problems = Vec::new();
    let wanted = FIRST_TIMER_VECTOR + k;
    let granted = card.device().request_vectors(wanted).unwrap_or_else(|e| {
        problems.push(format!("requesting {wanted} vectors failed: {e}"));
        InterruptVectors::SINGLE_MSI
    });
    let vectors: Vec<u32> = (0..k).map(|i| FIRST_TIMER_VECTOR + i).collect();
    let per_cpu = if granted.count < wanted {
        Err(format!("{wanted} vectors asked (the timer's start at {FIRST_TIMER_VECTOR}), {} granted ({:?})", granted.count, granted.mode))
    } else {
        timer_vector_mask(&vectors)
    };
    let before = if kernel_dispatches { InterruptCounts::read(proc_root).map_err(|e| problems.push(e)).ok() } else { None };
    match per_cpu {
        Ok(timer_vectors) => {
            let mut steered = Vec::new();
            for (&v, &cpu) in vectors.iter().zip(cpus) {
                let irq = if kernel_dispatches { card.device().vector_host_irq(v) } else { None };
                if let Some(irq) = irq {
                    if let Err(e) = kernel::steer_irq(proc_root, irq, cpu as u32) {
                        problems.push(e);
                    }
                }
                steered.push((Some(v), irq));
            }
            Steering {
                masks: vectors.iter().map(|&v| 1u32 << v).collect(),
                timer_vectors,
                vectors: steered,
                report: SteeringReport {
                    granted,
                    mode: "per_cpu_vectors".into(),
                    statement: if kernel_dispatches {
                        format!("one vector per CPU ({:?}), vector {FIRST_TIMER_VECTOR}+i steered to the i-th CPU of --cpus", granted.mode)
                    } else {
                        format!(
                            "one vector per CPU ({:?}, {} granted): the card raises vector {FIRST_TIMER_VECTOR}+i for the thread of the i-th CPU of --cpus, which waits on it alone; no kernel dispatches them here (the simulator's socket delivers each message), so nothing is steered",
                            granted.mode, granted.count
                        )
                    },
                    checks: Vec::new(),
                    effective_affinity: None,
                    problems,
                },
                before,
            }
        }
        Err(why) => {
            // Fewer multi-message MSI vectors than asked: the card folds its vectors above the
            // grant into the last one, where the timer's own (MSI_IRQ_TIMER) may not land; one
            // vector again (the stock set-up) brings every source to vector 0.
            let mut why = why;
            if granted.mode == InterruptMode::MsiMulti {
                match card.device().request_vectors(1) {
                    Ok(v) => why = format!("{why}; back to {} vector ({:?})", v.count, v.mode),
                    Err(e) => problems.push(format!("going back to one vector failed: {e}")),
                }
            }
            let irq = if kernel_dispatches { card.device().vector_host_irq(0) } else { None };
            let effective = irq.and_then(|i| kernel::effective_affinity(proc_root, i));
            let statement = if kernel_dispatches {
                format!(
                    "one vector for every CPU ({why}): the kernel dispatches it on {}, and each CPU's thread wakes from there",
                    effective.as_ref().map_or("the CPUs its affinity allows".to_string(), |e| format!(
                        "CPU {} (effective_affinity_list)",
                        cpu_list_text(&e.iter().map(|&c| c as usize).collect::<Vec<_>>())
                    ))
                )
            } else {
                format!("one vector for every CPU ({why}): the simulator's socket delivers it to the thread whose turn it is")
            };
            Steering {
                masks: vec![irq_timer::WAIT_MASK; cpus.len()],
                timer_vectors: 0,
                vectors: vec![(Some(0), irq); cpus.len()],
                report: SteeringReport {
                    granted,
                    mode: "single_vector".into(),
                    statement,
                    checks: Vec::new(),
                    effective_affinity: effective,
                    problems,
                },
                before,
            }
        }
    }
}

impl Steering {
    /// Checks every steered interrupt against /proc/interrupts over the run.
    pub fn finish(mut self, cpus: &[usize]) -> SteeringReport {
        let after = InterruptCounts::read(std::path::Path::new(kernel::PROC));
        if let (Some(before), Ok(after)) = (&self.before, &after) {
            let mut irqs: Vec<(u32, u32)> = Vec::new();
            for (i, (_, irq)) in self.vectors.iter().enumerate() {
                if let Some(irq) = irq {
                    // One vector for all: the check's "CPU" is the first of its effective affinity.
                    let cpu = match &self.report.effective_affinity {
                        Some(e) if self.report.mode == "single_vector" => e.first().copied().unwrap_or(cpus[i] as u32),
                        _ => cpus[i] as u32,
                    };
                    if !irqs.iter().any(|&(q, _)| q == *irq) {
                        irqs.push((*irq, cpu));
                    }
                }
            }
            self.report.checks = irqs.into_iter().filter_map(|(irq, cpu)| SteeringCheck::of(irq, cpu, before, after)).collect();
        }
        self.report
    }
}

// Per-CPU figures ----------------------------------------------------------------------------

/// The per-sample CPUs (asked, woke) and the per-CPU reports of a run.
pub fn per_cpu_reports(
    cpus: &[usize],
    roles: &CpuRoles,
    samples: &[Sample],
    woke: &[u32],
    clock_hz: u32,
    vectors: &[(Option<u32>, Option<u32>)],
) -> (Vec<u32>, Vec<u32>, Vec<CpuReport>) {
    let ns = 1e9 / f64::from(clock_hz.max(1));
    let asked: Vec<u32> = samples.iter().map(|s| cpu_of_fire(cpus, s.fire)).collect();
    let woke_per_sample: Vec<u32> = samples.iter().map(|s| woke.get((s.fire.max(1) - 1) as usize).copied().unwrap_or(NO_CPU)).collect();
    let reports = cpus
        .iter()
        .enumerate()
        .map(|(i, &c)| {
            let c = c as u32;
            let mine: Vec<&Sample> = samples.iter().zip(&asked).filter(|&(_, &a)| a == c).map(|(s, _)| s).collect();
            let user: Vec<f64> = mine.iter().filter_map(|s| s.user_cycles).map(|v| f64::from(v) * ns).collect();
            let isr: Vec<f64> = mine.iter().filter_map(|s| s.isr_cycles).map(|v| f64::from(v) * ns).collect();
            // Interrupt n (0-based) was taken by the thread of cpus[n mod k].
            let elsewhere = woke.iter().enumerate().filter(|&(n, &w)| n % cpus.len() == i && w != c).count();
            let (vector, host_irq) = vectors.get(i).copied().unwrap_or((None, None));
            CpuReport {
                cpu: c,
                role: roles.role(c),
                fires: mine.len() as u64,
                overruns: mine.iter().filter(|s| s.overrun).count() as u64,
                woke_elsewhere: elsewhere as u64,
                user_ns: Summary::of(&user),
                isr_ns: Summary::of(&isr),
                vector,
                host_irq,
            }
        })
        .collect();
    (asked, woke_per_sample, reports)
}

/// The per-CPU summary table under a run's text.
pub fn per_cpu_table(r: &RunReport, what: &str) -> Vec<String> {
    if r.per_cpu.is_empty() {
        return Vec::new();
    }
    let mut out = vec![format!("  per CPU ({what}):")];
    out.push(format!(
        "    {:>4}  {:<20} {:>7} {:>9} {:>9} {:>11} {:>11} {:>11} {:>11} {:>11}  {}",
        "CPU", "role", "fires", "overruns", "woke off", "min", "p50", "p99", "p99.9", "max", "vector"
    ));
    for c in &r.per_cpu {
        let cell = |f: fn(&Summary) -> f64| c.user_ns.as_ref().map_or("-".into(), |s| fmt_ns(f(s)));
        // The card's vector this CPU's thread waited on, and the host irq it was steered as
        // (last, as one token, so the columns before it keep their places for scripts).
        let vector = match (c.vector, c.host_irq) {
            (Some(v), Some(irq)) => format!("{v}:irq{irq}"),
            (Some(v), None) => v.to_string(),
            (None, _) => "-".into(),
        };
        out.push(format!(
            "    {:>4}  {:<20} {:>7} {:>9} {:>9} {:>11} {:>11} {:>11} {:>11} {:>11}  {}",
            c.cpu,
            if c.role.is_empty() { "-" } else { &c.role },
            c.fires,
            c.overruns,
            c.woke_elsewhere,
            cell(|s| s.min),
            cell(|s| s.median),
            cell(|s| s.p99),
            cell(|s| s.p999),
            cell(|s| s.max),
            vector
        ));
        if let Some(s) = &c.isr_ns {
            out.push(format!("    {:>4}  isr stage: {}", "", summary_line(&Some(*s))));
        }
    }
    if let Some(st) = &r.steering {
        out.push(format!("  steering: {}", st.statement));
        for ch in &st.checks {
            let grew: Vec<String> = ch.grew.iter().map(|(c, n)| format!("CPU {c}: {n}")).collect();
            out.push(format!(
                "    irq {} steered to CPU {}: /proc/interrupts grew on {} — {}",
                ch.irq,
                ch.cpu,
                if grew.is_empty() { "no CPU".into() } else { grew.join(", ") },
                if ch.ok { "only there (verified)" } else { "NOT only there" }
            ));
        }
        for p in &st.problems {
            out.push(format!("    problem: {p}"));
        }
    }
    out
}

/// One column of a histogram layout: its label and values (ns).
#[derive(Debug, Clone, PartialEq)]
pub struct Column {
    pub label: String,
    pub values_ns: Vec<f64>,
}

/// The columns of a run for the rtla and cyclictest layouts: per CPU (or the run's one
/// thread) the ISR stage (`IRQ-ccc`, where measured) and the user stage (`Thr-ccc`).
pub fn columns(r: &RunReport) -> Vec<Column> {
    let mut out = Vec::new();
    let isr_measured = r.isr_cycles.iter().any(|&c| c != u32::MAX);
    let groups: Vec<(String, Option<u32>)> = if r.per_cpu.is_empty() {
        vec![(r.pinned_cpu.map_or("any".into(), |c| format!("{c:03}")), None)]
    } else {
        r.per_cpu.iter().map(|c| (format!("{:03}", c.cpu), Some(c.cpu))).collect()
    };
    for (name, cpu) in groups {
        if isr_measured {
            out.push(Column { label: format!("IRQ-{name}"), values_ns: r.isr_samples_ns(cpu) });
        }
        let user = match cpu {
            Some(c) => r.user_samples_ns_of(c),
            None => r.user_samples_ns(),
        };
        out.push(Column { label: format!("Thr-{name}"), values_ns: user });
    }
    out
}

/// Bucket counts (`entries` buckets of `bucket_ns`) and the values past the last.
fn bucketed(values: &[f64], bucket_ns: u64, entries: usize) -> (Vec<u64>, u64) {
    let mut h = vec![0u64; entries];
    let mut over = 0;
    for &v in values {
        let b = (v.max(0.0) / bucket_ns as f64).floor() as usize;
        match h.get_mut(b) {
            Some(n) => *n += 1,
            None => over += 1,
        }
    }
    (h, over)
}

/// `rtla timerlat hist --nano`'s layout: a header, a row per non-empty bucket (`Index` = the
/// bucket's lower edge in ns), then over/count/min/avg/max per column.
pub fn rtla_text(header: &[String], cols: &[Column], bucket_ns: u64, entries: usize) -> Vec<String> {
    let mut out = vec!["# RTLA timerlat histogram".to_string(), "# Time unit is nanoseconds (ns)".to_string()];
    out.extend(header.iter().map(|h| format!("# {h}")));
    let hists: Vec<(Vec<u64>, u64)> = cols.iter().map(|c| bucketed(&c.values_ns, bucket_ns, entries)).collect();
    // rtla's `%-6d`, widened so that wide bucket edges stay a column of their own.
    let iw = (entries as u64 * bucket_ns).to_string().len().max(5) + 1;
    let mut head = format!("{:<iw$}", "Index");
    for c in cols {
        head.push_str(&format!("{:>10}", c.label));
    }
    out.push(head);
    for b in 0..entries {
        if hists.iter().all(|(h, _)| h[b] == 0) {
            continue;
        }
        let mut row = format!("{:<iw$}", b as u64 * bucket_ns);
        for (h, _) in &hists {
            row.push_str(&format!("{:>10}", h[b]));
        }
        out.push(row);
    }
    let stat = |name: &str, f: &dyn Fn(usize) -> String| {
        let mut row = format!("{name:<iw$}");
        for i in 0..cols.len() {
            row.push_str(&format!("{:>10}", f(i)));
        }
        row
    };
    let summary = |i: usize| Summary::of(&cols[i].values_ns);
    out.push(stat("over:", &|i| hists[i].1.to_string()));
    out.push(stat("count:", &|i| cols[i].values_ns.len().to_string()));
    out.push(stat("min:", &|i| summary(i).map_or("-".into(), |s| format!("{:.0}", s.min))));
    out.push(stat("avg:", &|i| summary(i).map_or("-".into(), |s| format!("{:.0}", s.mean))));
    out.push(stat("max:", &|i| summary(i).map_or("-".into(), |s| format!("{:.0}", s.max))));
    out
}

/// `cyclictest -h`'s layout: one row per bucket (the index in buckets; µs with the default
/// bucket of 1000 ns, as cyclictest's), a count per column, then the totals, min/avg/max
/// latencies (in buckets) and the overflows. Only the user stage (`Thr-`) columns: cyclictest
/// has one per thread.
pub fn cyclictest_text(cols: &[Column], bucket_ns: u64, entries: usize) -> Vec<String> {
    let cols: Vec<&Column> = cols.iter().filter(|c| c.label.starts_with("Thr-")).collect();
    let hists: Vec<(Vec<u64>, u64)> = cols.iter().map(|c| bucketed(&c.values_ns, bucket_ns, entries)).collect();
    let mut out = vec!["# Histogram".to_string()];
    for b in 0..entries {
        let cells: Vec<String> = hists.iter().map(|(h, _)| format!("{:06}", h[b])).collect();
        out.push(format!("{b:06} {}", cells.join("\t")));
    }
    let unit = |v: f64| (v / bucket_ns as f64).round() as u64;
    let row = |name: &str, f: &dyn Fn(usize) -> String| {
        let cells: Vec<String> = (0..cols.len()).map(f).collect();
        format!("# {name}: {}", cells.join(" "))
    };
    let summary = |i: usize| Summary::of(&cols[i].values_ns);
    out.push(row("Total", &|i| format!("{:09}", cols[i].values_ns.len())));
    out.push(row("Min Latencies", &|i| format!("{:05}", summary(i).map_or(0, |s| unit(s.min)))));
    out.push(row("Avg Latencies", &|i| format!("{:05}", summary(i).map_or(0, |s| unit(s.mean)))));
    out.push(row("Max Latencies", &|i| format!("{:05}", summary(i).map_or(0, |s| unit(s.max)))));
    out.push(row("Histogram Overflows", &|i| format!("{:05}", hists[i].1)));
    out.push("# Histogram Overflow at cycle number:".to_string());
    for (i, _) in cols.iter().enumerate() {
        out.push(format!("# Thread {i}:"));
    }
    out
}

/// The user stage per CPU and condition, overlaid, binned from the samples (`--svg`, the
/// report); `None` without per-CPU data.
pub fn per_cpu_histograms(runs: &[RunReport]) -> Option<(Vec<LogSeries>, String)> {
    let sets: Vec<(String, Vec<f64>)> = runs
        .iter()
        .flat_map(|r| {
            r.per_cpu.iter().map(move |c| {
                let role = if c.role.is_empty() { String::new() } else { format!(" ({})", c.role) };
                (format!("{} CPU {}{role}", format!("{:?}", r.condition).to_lowercase(), c.cpu), r.user_samples_ns_of(c.cpu))
            })
        })
        .filter(|(_, v)| !v.is_empty())
        .collect();
    crate::plot::binned_series(&sets)
}

/// Per CPU, into the process's metrics (served with `--metrics-listen`): every acknowledged
/// sample's user stage, labelled with its CPU and the run's condition, on the card's log2
/// buckets (seconds of the card clock). `tlpx serve` reads the card, which does not know CPUs,
/// so this series comes from the command itself (no `card` label, as rule30's per-mode ones).
pub fn export_metrics(r: &RunReport) {
    if r.per_cpu.is_empty() {
        return;
    }
    let m = crate::metrics::global();
    let name = "tlpx_irq_cpu_latency_seconds";
    let bounds = crate::metrics::log2_cycle_bounds(irq_timer::HISTOGRAM_BUCKETS, r.clock_hz);
    let help = "Interrupt user stage per CPU of `tlpx irq --cpus` (fire to ack_user at the card, card clock), per condition.";
    if m.describe_histogram(name, help, &bounds).is_err() {
        return;
    }
    let condition = format!("{:?}", r.condition).to_lowercase();
    for c in &r.per_cpu {
        let cpu = c.cpu.to_string();
        for v in r.user_samples_ns_of(c.cpu) {
            m.observe(name, &[("cpu", &cpu), ("condition", &condition)], v / 1e9);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn roles() -> CpuRoles {
        CpuRoles { online: vec![0, 1, 2, 3, 6], isolated: vec![2, 3], nohz_full: vec![3] }
    }

    #[test]
    fn cpu_selection_is_checked_against_online_and_affinity() {
        let allowed = [0, 1, 2, 3, 6];
        assert_eq!(parse_cpus("0-2,6", &roles(), &allowed).expect("ok"), vec![0, 1, 2, 6]);
        assert_eq!(parse_cpus("all", &roles(), &allowed).expect("ok"), vec![0, 1, 2, 3, 6]);
        assert_eq!(parse_cpus("all", &roles(), &[1, 6]).expect("ok"), vec![1, 6]);
        let e = parse_cpus("0,4", &roles(), &allowed).expect_err("offline").to_string();
        assert!(e.contains("CPU 4 does not exist or is offline") && e.contains("online CPUs are 0-3,6"), "{e}");
        let e = parse_cpus("1", &roles(), &[0]).expect_err("not allowed").to_string();
        assert!(e.contains("CPU 1 is online but not in this process's affinity") && e.contains("may run on 0"), "{e}");
        let e = parse_cpus("1,1", &roles(), &allowed).expect_err("twice").to_string();
        assert!(e.contains("CPU 1 twice"), "{e}");
        let e = parse_cpus("3-1", &roles(), &allowed).expect_err("inverted").to_string();
        assert!(e.contains("3-1") && e.contains("0-3,6"), "{e}");
        assert!(parse_cpus("", &roles(), &allowed).is_err());
        assert_eq!(cpu_list_text(&[0, 1, 2, 3, 6, 8, 9]), "0-3,6,8-9");
    }

    #[test]
    fn fires_are_dealt_in_turn_and_wakeups_elsewhere_counted() {
        assert_eq!((1..=5).map(|f| cpu_of_fire(&[2, 5], f)).collect::<Vec<_>>(), vec![2, 5, 2, 5, 2]);
        let sample = |fire: u32, user: Option<u32>| Sample {
            sequence: fire - 1,
            t0: u64::from(fire) * 1000,
            isr_cycles: None,
            user_cycles: user,
            overrun: user.is_none(),
            interval_cycles: 1000,
            fire,
            vector: 0,
        };
        let samples = [sample(1, Some(100)), sample(2, Some(200)), sample(3, None), sample(4, Some(400)), sample(5, Some(300))];
        // Interrupt 4 (CPU 5's) woke on CPU 2; fire 5 has no wake-up (the run ended).
        let woke = [2, 5, 2, 2];
        let (asked, woke_s, reports) = per_cpu_reports(&[2, 5], &roles(), &samples, &woke, 125_000_000, &[]);
        assert_eq!(asked, vec![2, 5, 2, 5, 2]);
        assert_eq!(woke_s, vec![2, 5, 2, 2, NO_CPU]);
        assert_eq!((reports[0].cpu, reports[0].fires, reports[0].overruns, reports[0].woke_elsewhere), (2, 3, 1, 0));
        assert_eq!((reports[1].cpu, reports[1].fires, reports[1].woke_elsewhere), (5, 2, 1));
        assert_eq!(reports[0].role, "isolated");
        // 100 and 300 cycles at 8 ns; 200 and 400.
        let u = reports[0].user_ns.as_ref().expect("user");
        assert_eq!((u.count, u.min, u.max), (2, 800.0, 2400.0));
        assert_eq!(reports[1].user_ns.as_ref().expect("user").median, 1600.0);
    }

    #[test]
    fn per_cpu_samples_are_exported_with_a_cpu_label() {
        let doc: serde_json::Value =
            serde_json::from_str(include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/results/irq.json"))).expect("fixture");
        let mut r: RunReport = serde_json::from_value(doc["points"][0].clone()).expect("a run");
        // An older document: no per-CPU data, nothing exported.
        export_metrics(&r);
        assert!(!crate::metrics::global().render().contains("tlpx_irq_cpu_latency_seconds"));
        let n = r.user_cycles.len();
        r.user_cycles = vec![125; n];
        r.sample_cpus = (0..n).map(|i| (i % 2) as u32 * 7).collect();
        let report = |cpu| CpuReport {
            cpu,
            role: String::new(),
            fires: 0,
            overruns: 0,
            woke_elsewhere: 0,
            user_ns: None,
            isr_ns: None,
            vector: None,
            host_irq: None,
        };
        r.per_cpu = vec![report(0), report(7)];
        export_metrics(&r);
        let text = crate::metrics::global().render();
        let count = |cpu: &str| {
            let key = format!(
                "tlpx_irq_cpu_latency_seconds_count{{condition=\"{}\",cpu=\"{cpu}\"}} ",
                format!("{:?}", r.condition).to_lowercase()
            );
            text.lines().find_map(|l| l.strip_prefix(&key)).unwrap_or_else(|| panic!("{key}: {text}")).trim().parse::<f64>().expect("count")
        };
        assert_eq!((count("0"), count("7")), (n.div_ceil(2) as f64, (n / 2) as f64));
    }

    fn cols() -> Vec<Column> {
        vec![
            Column { label: "IRQ-000".into(), values_ns: vec![500.0, 1500.0] },
            Column { label: "Thr-000".into(), values_ns: vec![1200.0, 1900.0, 2100.0, 9000.0] },
            Column { label: "Thr-001".into(), values_ns: vec![100.0] },
        ]
    }

    #[test]
    fn rtla_layout_has_its_rows() {
        let t = rtla_text(&["Duration: 0 00:00:01".into()], &cols(), 1000, 4);
        assert_eq!(t[0], "# RTLA timerlat histogram");
        assert_eq!(t[2], "# Duration: 0 00:00:01");
        let head: Vec<&str> = t[3].split_whitespace().collect();
        assert_eq!(head, ["Index", "IRQ-000", "Thr-000", "Thr-001"]);
        let rows: Vec<Vec<&str>> = t[4..].iter().map(|l| l.split_whitespace().collect()).collect();
        // Buckets 0, 1 and 2 hold values; 3 is empty and left out; 9000 ns is over.
        assert_eq!(rows[0], ["0", "1", "0", "1"]);
        assert_eq!(rows[1], ["1000", "1", "2", "0"]);
        assert_eq!(rows[2], ["2000", "0", "1", "0"]);
        assert_eq!(rows[3], ["over:", "0", "1", "0"]);
        assert_eq!(rows[4], ["count:", "2", "4", "1"]);
        assert_eq!(rows[5], ["min:", "500", "1200", "100"]);
        assert_eq!(rows[6], ["avg:", "1000", "3550", "100"]);
        assert_eq!(rows[7], ["max:", "1500", "9000", "100"]);
        assert_eq!(rows.len(), 8);
    }

    #[test]
    fn cyclictest_layout_has_its_rows() {
        let t = cyclictest_text(&cols(), 1000, 3);
        assert_eq!(t[0], "# Histogram");
        assert_eq!(t[1], "000000 000000\t000001");
        assert_eq!(t[2], "000001 000002\t000000");
        assert_eq!(t[3], "000002 000001\t000000");
        assert_eq!(t[4], "# Total: 000000004 000000001");
        assert_eq!(t[5], "# Min Latencies: 00001 00000");
        assert_eq!(t[7], "# Max Latencies: 00009 00000");
        assert_eq!(t[8], "# Histogram Overflows: 00001 00000");
        assert_eq!(&t[9..], ["# Histogram Overflow at cycle number:", "# Thread 0:", "# Thread 1:"]);
    }
}
