//! Measuring one point: the software run on the host's CPU, the card's run through the chosen
//! mode, the check of the outputs against each other, and the point's figures.

use super::*;

pub(super) fn thread_cpu_ns() -> (u64, u64) {
    // SAFETY: getrusage fills the struct it is given.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    unsafe { libc::getrusage(libc::RUSAGE_THREAD, &mut ru) };
    let ns = |t: libc::timeval| t.tv_sec as u64 * 1_000_000_000 + t.tv_usec as u64 * 1000;
    (ns(ru.ru_utime), ns(ru.ru_stime))
}

pub(super) struct Workload {
    pub(super) packets: Vec<BitLine>,
    pub(super) golden: Option<Vec<BitLine>>,
}

pub(super) fn workload(plan: &Plan, length: u32) -> anyhow::Result<Workload> {
    let chars = test_packets(plan.packets as usize, length as usize, plan.seed)?;
    let packets: Vec<BitLine> = chars.iter().map(BitLine::from).collect();
    let golden =
        plan.verify.then(|| chars.iter().map(|c: &CharLine| BitLine::from(&char_run(c, plan.rule, plan.generations as usize))).collect());
    Ok(Workload { packets, golden })
}

pub(super) fn summarise(per_packet: &[f64], per_line: &[f64]) -> anyhow::Result<(Summary, Summary, f64)> {
    let pp = Summary::of(per_packet).context("no packets measured")?;
    let pl = Summary::of(per_line).context("no lines measured")?;
    let jitter = if pp.mean > 0.0 { pp.max / pp.mean } else { 0.0 };
    Ok((pp, pl, jitter))
}

pub(super) fn run_sw(plan: &Plan, variant: Variant, length: u32, work: &Workload) -> anyhow::Result<Point> {
    let g = plan.generations as usize;
    let mut per_packet = Vec::with_capacity(work.packets.len());
    let mut mismatches = 0u32;
    let cpu0 = thread_cpu_ns();
    for (i, p) in work.packets.iter().enumerate() {
        let t0 = Instant::now();
        let out = std::hint::black_box(variant.run(std::hint::black_box(p), plan.rule, g));
        per_packet.push(t0.elapsed().as_nanos() as f64);
        if let Some(golden) = &work.golden {
            mismatches += u32::from(golden[i] != out);
        }
    }
    let cpu1 = thread_cpu_ns();
    let per_line: Vec<f64> = per_packet.iter().map(|t| t / g as f64).collect();
    let (pp, pl, jitter) = summarise(&per_packet, &per_line)?;
    Ok(Point {
        mode: Mode::Sw(variant),
        length_bits: length,
        latency_ns: 0.0,
        latency_cycles: None,
        packets: plan.packets,
        generations: plan.generations,
        clock: "host",
        per_packet_ns: pp,
        per_line_ns: pl,
        jitter,
        user_ns: cpu1.0 - cpu0.0,
        kernel_ns: cpu1.1 - cpu0.1,
        busy_ns: None,
        efficiency: None,
        overhead_per_op_ns: None,
        operations: None,
        verified_packets: work.golden.as_ref().map(|_| plan.packets - mismatches),
        missing_outputs: 0,
        mismatches,
        bar_path: None,
    })
}

/// One hardware point; `tick(n)` says that `n` packets of it are done (the progress bar).
pub(super) fn run_hw(
    session: &mut Session,
    plan: &Plan,
    mode: Mode,
    length: u32,
    latency_ns: f64,
    work: &Workload,
    tick: &dyn Fn(u64),
) -> anyhow::Result<Point> {
    let clock_hz = session.clock_hz;
    // Worded as the driver's refusal ("invalid argument: ...").
    let latency_cycles = accel::latency_cycles(latency_ns, clock_hz).map_err(tlpx_device::DeviceError::from)?;
    let op = OpConfig { rule: plan.rule, line_length: length, latency_cycles };
    let card = &mut session.card;
    let clock = match card.device().clock_source() {
        ClockSource::Host => "host",
        ClockSource::SimulatedCard => "simulated_card",
    };
    let cycle_ns = 1e9 / f64::from(clock_hz.max(1));
    let cpu0 = thread_cpu_ns();
    let t_start = card.device().clock_ns()?;
    let mut per_packet = Vec::with_capacity(work.packets.len());
    let mut per_line = Vec::with_capacity(work.packets.len() * plan.generations as usize);
    let mut mismatches = 0u32;
    let mut outputs = Vec::with_capacity(work.packets.len());
    let (busy_cycles, operations);
    let path;
    match mode {
        Mode::Hw(m) => {
            // The core is one block with one owner: single operations rewrite the registers a
            // batch (or another process's single operations) relies on. Claimed per point, as
            // the batch engine's run does (accel::batch::run), and refreshed between packets.
            card.claim(Block::Rule30Batch)?;
            let per_start = if m == HwMode::Multi { plan.generations } else { 1 };
            if let Err(e) = accel::configure(card, &op, m, per_start) {
                let _ = card.release(Block::Rule30Batch);
                return Err(e.into());
            }
            // hw-syscall: every access crosses the kernel (the seed's char driver) where the
            // backend has a mapping to avoid; the others use the backend's usual path.
            let usual = card.device().bar_path();
            if m == HwMode::Syscall && usual == BarPath::Mapped {
                card.device().set_bar_path(BarPath::Syscall)?;
            }
            path = Some(card.device().bar_path());
            let run = (|| -> anyhow::Result<(u64, u32)> {
                let c0 = accel::counters(card)?;
                for p in &work.packets {
                    // A point of a thousand packets takes minutes on the simulator: Ctrl-C
                    // ends it here, between packets (the point is then dropped, unfinished).
                    if progress::stop_requested() {
                        return Err(tlpx_device::DeviceError::Interrupted.into());
                    }
                    let input = p.to_card_words();
                    let t0 = card.device().clock_ns()?;
                    let out = accel::run_packet(card, m, &op, &input, plan.generations, &mut per_line)?;
                    per_packet.push((card.device().clock_ns()? - t0) as f64);
                    outputs.push(out);
                    tick(outputs.len() as u64);
                    // Outside the timed packet: a lease refresh when one is due.
                    card.keep_leases()?;
                }
                let c1 = accel::counters(card)?;
                Ok((c1.busy_cycles - c0.busy_cycles, c1.operations.wrapping_sub(c0.operations)))
            })();
            let restored = card.device().set_bar_path(usual);
            let released = card.release(Block::Rule30Batch);
            (busy_cycles, operations) = run?;
            restored?;
            released?;
        }
        Mode::Batch => {
            path = Some(card.device().bar_path());
            let r = accel::batch::run(card, &op, &work.packets.iter().map(BitLine::to_card_words).collect::<Vec<_>>(), plan.generations)?;
            per_packet = r.per_packet_ns.clone();
            per_line = per_packet.iter().map(|t| t / f64::from(plan.generations)).collect();
            busy_cycles = r.busy_cycles;
            operations = r.operations;
            outputs = r.outputs;
            tick(outputs.len() as u64);
        }
        Mode::Sw(_) => unreachable!("software modes are run by run_sw"),
    }
    let total_ns = (card.device().clock_ns()? - t_start) as f64;
    let cpu1 = thread_cpu_ns();
    let verification = work.golden.as_ref().map(|golden| verify_outputs(golden, &outputs, length)).transpose()?;
    if let Some(v) = verification {
        mismatches = v.mismatches;
    }
    let (pp, pl, jitter) = summarise(&per_packet, &per_line)?;
    let busy_ns = busy_cycles as f64 * cycle_ns;
    Ok(Point {
        mode,
        length_bits: length,
        latency_ns,
        latency_cycles: Some(op.latency_cycles),
        packets: plan.packets,
        generations: plan.generations,
        clock,
        per_packet_ns: pp,
        per_line_ns: pl,
        jitter,
        user_ns: cpu1.0 - cpu0.0,
        kernel_ns: cpu1.1 - cpu0.1,
        busy_ns: Some(busy_ns),
        efficiency: (total_ns > 0.0).then(|| busy_ns / total_ns),
        overhead_per_op_ns: (operations > 0).then(|| (total_ns - busy_ns) / f64::from(operations)),
        operations: Some(operations),
        verified_packets: verification.map(|v| v.verified),
        missing_outputs: verification.map_or(0, |v| v.missing),
        mismatches,
        bar_path: path,
    })
}

/// What --verify found for the outputs of one hardware mode.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Verification {
    /// Outputs compared with their packet's golden line and equal to it.
    pub(super) verified: u32,
    /// Outputs that differ, plus packets without an output and outputs without a packet.
    pub(super) mismatches: u32,
    /// |packets - outputs|: a count that differs is a failure of every unpaired packet.
    pub(super) missing: u32,
}

/// Compares the outputs with the golden lines, packet by packet. Only comparisons actually
/// made count as verified; the two lists must be as long as each other, and every packet
/// or output without a partner is a mismatch (zip alone would stop at the shorter one and
/// leave the packets it never compared looking verified).
pub(super) fn verify_outputs(golden: &[BitLine], outputs: &[[u32; CARD_WORDS]], length: u32) -> anyhow::Result<Verification> {
    let (mut verified, mut mismatches) = (0u32, 0u32);
    for (g, out) in golden.iter().zip(outputs) {
        if *g == from_card_words(out, length as usize)? {
            verified += 1;
        } else {
            mismatches += 1;
        }
    }
    let missing = golden.len().abs_diff(outputs.len()) as u32;
    Ok(Verification { verified, mismatches: mismatches + missing, missing })
}

/// Measures `tasks` in order with a progress bar; `each` sees the points so far after every
/// finished one, and the session (checkpoints, the sweep's line per length). Stops on Ctrl-C after the point
/// in progress, or within it for the hardware modes (that point is dropped); returns the
/// finished points.
pub(super) fn measure(
    mut session: Option<&mut Session>,
    plan: &Plan,
    tasks: &[Task],
    progress: &Progress,
    mut each: impl FnMut(&[Point], &Task, Option<&Session>) -> anyhow::Result<()>,
) -> anyhow::Result<Vec<Point>> {
    let mut points = Vec::new();
    let mut work: Option<(u32, Workload)> = None;
    let mut base = 0u64;
    for (i, task) in tasks.iter().enumerate() {
        if progress::stop_requested() {
            break;
        }
        progress.start(&format!("{} (point {} of {})", task.describe(), i + 1, tasks.len()));
        if work.as_ref().is_none_or(|(l, _)| *l != task.length) {
            work = Some((task.length, workload(plan, task.length)?));
        }
        let Some((_, w)) = &work else { unreachable!("made above") };
        let weight = plan.packet_weight(task.mode, task.length);
        let point = match (task.mode, session.as_deref_mut()) {
            (Mode::Sw(v), _) => run_sw(plan, v, task.length, w),
            (_, Some(s)) => run_hw(s, plan, task.mode, task.length, task.latency_ns, w, &|n| progress.set_done(base + n * weight)),
            (_, None) => unreachable!("hardware modes open a session"),
        };
        match point {
            Ok(p) => {
                export_point(&p);
                points.push(p);
                base += u64::from(plan.packets) * weight;
                progress.set_done(base);
                each(&points, task, session.as_deref())?;
            }
            Err(e) if progress::is_interrupt(&e) => break,
            Err(e) => return Err(e),
        }
    }
    Ok(points)
}

/// Per mode, into the process's metrics (served with `--metrics-listen`): lines computed and
/// the mean time per line of the last point. The card counts operations of all modes together
/// (`tlpx_rule30_operations_total`); the mode is the host's notion, so it is counted here.
pub(super) fn export_point(p: &Point) {
    let r = crate::metrics::global();
    let ok = r
        .describe_counter("tlpx_rule30_mode_lines_total", "Rule-30 lines (generations) computed by `tlpx rule30`, per mode.")
        .and_then(|_| {
            r.describe_gauge(
                "tlpx_rule30_mode_line_seconds",
                "Mean time per line of the last `tlpx rule30` point, per mode (simulated card time for hardware modes on the simulator).",
            )
        });
    if ok.is_err() {
        return;
    }
    let lines = f64::from(p.packets) * f64::from(p.generations);
    r.counter_inc("tlpx_rule30_mode_lines_total", &[("mode", p.mode.name())], lines);
    r.gauge_set("tlpx_rule30_mode_line_seconds", &[("mode", p.mode.name())], p.per_line_ns.mean / 1e9);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn verify_counts_only_the_comparisons_it_made_and_a_missing_output_fails() {
        let golden: Vec<BitLine> = test_packets(3, 40, 9).expect("packets").iter().map(BitLine::from).collect();
        let words: Vec<[u32; CARD_WORDS]> = golden.iter().map(BitLine::to_card_words).collect();
        let v = |verified, mismatches, missing| Verification { verified, mismatches, missing };
        assert_eq!(verify_outputs(&golden, &words, 40).expect("compared"), v(3, 0, 0));
        // One output for three packets: one verified, two missing are failures, not passes.
        assert_eq!(verify_outputs(&golden, &words[..1], 40).expect("compared"), v(1, 2, 2));
        // No output at all: nothing verified.
        assert_eq!(verify_outputs(&golden, &[], 40).expect("compared"), v(0, 3, 3));
        // More outputs than packets is as wrong as fewer.
        let mut extra = words.clone();
        extra.push(words[0]);
        assert_eq!(verify_outputs(&golden, &extra, 40).expect("compared"), v(3, 1, 1));
        // A wrong output is a mismatch, the others still verified.
        let mut wrong = words;
        wrong[1][0] ^= 1;
        assert_eq!(verify_outputs(&golden, &wrong, 40).expect("compared"), v(2, 1, 0));
    }
}
