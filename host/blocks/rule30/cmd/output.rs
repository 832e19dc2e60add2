//! What `tlpx rule30` prints and draws: the point rows, the crossover claim and tables, the
//! overhead table, the clock statement, and the SVG figures.

use super::*;

pub(super) fn point_row(p: &Point) -> String {
    format!(
        "  {:<10} {:<11} {:>5} {:>9} {:>11} {:>11} {:>11} {:>11} {:>7.2} {:>9} {:>9} {:>6} {}",
        p.mode.name(),
        if p.clock == "simulated_card" { "card (sim)" } else { "host wall" },
        p.length_bits,
        if p.mode.is_hw() { fmt_ns(p.latency_ns) } else { "-".into() },
        fmt_ns(p.per_line_ns.min),
        fmt_ns(p.per_line_ns.mean),
        fmt_ns(p.per_line_ns.max),
        fmt_ns(p.per_packet_ns.mean),
        p.jitter,
        fmt_ns(p.user_ns as f64 / f64::from(p.packets)),
        fmt_ns(p.kernel_ns as f64 / f64::from(p.packets)),
        p.efficiency.map_or("-".into(), |e| format!("{:.1}%", e * 100.0)),
        match p.verified_packets {
            Some(v) if p.mismatches == 0 => format!("verified {v}/{}", p.packets),
            Some(_) if p.missing_outputs > 0 => {
                format!("MISMATCH {} of {} ({} outputs missing)", p.mismatches, p.packets, p.missing_outputs)
            }
            Some(_) => format!("MISMATCH {} of {}", p.mismatches, p.packets),
            None => String::new(),
        }
    )
}

pub(super) fn header() -> String {
    format!(
        "  {:<10} {:<11} {:>5} {:>9} {:>11} {:>11} {:>11} {:>11} {:>7} {:>9} {:>9} {:>6}",
        "mode", "clock", "bits", "latency", "line min", "line avg", "line max", "packet avg", "jitter", "user/pkt", "kern/pkt", "eff"
    )
}

/// What the columns' clocks are (the line above the table).
pub(super) const COLUMNS_NOTE: &str =
    "columns: line and packet times in the row's clock (host wall = this host's wall clock; card (sim) = \
                            the simulated card's clock); user/pkt and kern/pkt are the measuring thread's CPU time on this host; \
                            eff = accelerator busy / total, in %";

/// On the simulator with hardware modes: what comparing the modes' times (the crossovers
/// above all) can and cannot claim, the two clocks being different.
pub(super) fn crossover_claim(session: &Session) -> Option<String> {
    let sim = session.environment.sim.as_ref()?;
    let link = format!("Gen{} x{}", sim.link_model.generation, sim.link_model.lanes);
    Some(if sim.host_time == "real" {
        format!(
            "comparing modes compares two clocks: software modes in host wall time on this host's CPU, hardware modes in \
             card time (simulated: the modelled {link} link, root complex and card, plus this host's wall time between \
             register accesses, tlpx-sim's socket round trips included); the socket is no PCIe host's, so these crossovers \
             bound no real host's"
        )
    } else {
        format!(
            "comparing modes compares two clocks: software modes in host wall time on this host's CPU, hardware modes in card \
             time (simulated, virtual host time: the modelled {link} link, root complex ({} ns read latency + 0..{} ns) and \
             card; the driver's own CPU time costs nothing); a crossover here is a lower bound on a real host's only for a \
             host whose link and root complex are no faster than these and whose CPU runs the software modes at least as fast \
             as this one (its driver then only adds time to the hardware modes); a faster link or root complex, or a slower CPU, can bring the crossover \
             below these lengths",
            sim.dma_latency_ns, sim.dma_jitter_ns
        )
    })
}

pub(super) fn clock_statement(session: &Session) -> String {
    if session.environment.simulated {
        let mode = session.environment.sim.as_ref().map_or("virtual".to_string(), |s| s.host_time.clone());
        format!(
            "software modes: host wall time on this host's CPU; hardware modes: SIMULATED card time (host time {mode}: {}), \
             on the simulator every register access of hw-poll and hw-syscall alike is one socket message",
            if mode == "real" {
                "the modelled bus and card plus this host's real time between accesses, socket included"
            } else {
                "only the modelled bus and card; the driver's own CPU time is not in it"
            }
        )
    } else {
        let path = match session.environment.backend.as_deref() {
            Some("litepcie") => "this backend reaches the card's registers by a system call per access only, so hw-poll is one too",
            _ => "hw-poll loads and stores on the mapped BAR; hw-syscall makes every access a system call (pread/pwrite)",
        };
        format!("all modes timed with the host's clock (hardware); {path}")
    }
}

pub(super) fn crossovers(points: &[Point], latencies: &[f64]) -> Vec<Crossover> {
    let mut out = Vec::new();
    let hw: Vec<Mode> = {
        let mut v: Vec<Mode> = points.iter().map(|p| p.mode).filter(|m| m.is_hw()).collect();
        v.dedup();
        v.sort_by_key(|m| m.name());
        v.dedup();
        v
    };
    let sw: Vec<Mode> = {
        let mut v: Vec<Mode> = points.iter().map(|p| p.mode).filter(|m| !m.is_hw()).collect();
        v.sort_by_key(|m| m.name());
        v.dedup();
        v
    };
    for &lat in latencies {
        for h in &hw {
            for s in &sw {
                let mut lengths: Vec<u32> = points.iter().filter(|p| p.mode == *h && p.latency_ns == lat).map(|p| p.length_bits).collect();
                lengths.sort_unstable();
                let mut from = None;
                for &l in lengths.iter().rev() {
                    let hp = points.iter().find(|p| p.mode == *h && p.latency_ns == lat && p.length_bits == l);
                    let sp = points.iter().find(|p| p.mode == *s && p.length_bits == l);
                    match (hp, sp) {
                        (Some(hp), Some(sp)) if hp.per_line_ns.mean < sp.per_line_ns.mean => from = Some(l),
                        _ => break,
                    }
                }
                let clock_of = |m: &Mode| points.iter().find(|p| p.mode == *m).map_or("host", |p| p.clock);
                out.push(Crossover {
                    hw_mode: h.name(),
                    sw_mode: s.name(),
                    hw_clock: clock_of(h),
                    sw_clock: clock_of(s),
                    latency_ns: lat,
                    length_bits: from,
                });
            }
        }
    }
    out
}

/// A point's `clock` in words: "host wall time" or "card time (simulated)".
pub fn clock_text(clock: &str) -> &'static str {
    if clock == "simulated_card" {
        "card time (simulated)"
    } else {
        "host wall time"
    }
}

/// Per latency: a row per hardware mode, a column per software mode, the crossover length;
/// the heading names the clocks of both.
pub fn crossover_table(crossovers: &[Crossover]) -> Vec<String> {
    let mut out = Vec::new();
    let mut latencies: Vec<f64> = crossovers.iter().map(|c| c.latency_ns).collect();
    latencies.dedup();
    let mut sw: Vec<&str> = crossovers.iter().map(|c| c.sw_mode).collect();
    sw.sort_unstable();
    sw.dedup();
    let mut hw: Vec<&str> = crossovers.iter().map(|c| c.hw_mode).collect();
    hw.sort_unstable();
    hw.dedup();
    for lat in latencies {
        let clocks = |f: fn(&Crossover) -> &'static str| {
            let mut v: Vec<&str> = crossovers.iter().map(|c| clock_text(f(c))).collect();
            v.sort_unstable();
            v.dedup();
            v.join(" / ")
        };
        out.push(format!(
            "  crossover (bits from which the hardware mode is faster per line), latency {}; rows (hardware modes) in {}, \
             columns (software modes) in {}:",
            fmt_ns(lat),
            clocks(|c| c.hw_clock),
            clocks(|c| c.sw_clock)
        ));
        out.push(format!("    {:<11}{}", "", sw.iter().map(|s| format!("{s:>10}")).collect::<String>()));
        for h in &hw {
            let cells: String = sw
                .iter()
                .map(|s| {
                    let c = crossovers.iter().find(|c| c.latency_ns == lat && c.hw_mode == *h && c.sw_mode == *s);
                    format!("{:>10}", c.and_then(|c| c.length_bits).map_or("never".to_string(), |l| l.to_string()))
                })
                .collect();
            out.push(format!("    {h:<11}{cells}"));
        }
    }
    out
}

/// The Gedae seed's table per hardware mode and latency, at the longest length measured:
/// efficiency (accelerator busy / total) and overhead per operation.
pub fn overhead_table(points: &[Point]) -> Vec<String> {
    let Some(longest) = points.iter().filter(|p| p.mode.is_hw()).map(|p| p.length_bits).max() else {
        return Vec::new();
    };
    let clock = points.iter().find(|p| p.mode.is_hw()).map_or("host", |p| p.clock);
    let mut out = vec![
        format!("  overhead at {longest} bits, in {} (efficiency = accelerator busy time / total):", clock_text(clock)),
        format!("    {:<11}{:>10}{:>12}{:>14}{:>12}", "mode", "latency", "efficiency", "overhead/op", "time/line"),
    ];
    for p in points.iter().filter(|p| p.mode.is_hw() && p.length_bits == longest) {
        out.push(format!(
            "    {:<11}{:>10}{:>12}{:>14}{:>12}",
            p.mode.name(),
            fmt_ns(p.latency_ns),
            p.efficiency.map_or("-".into(), |e| format!("{:.1}%", e * 100.0)),
            p.overhead_per_op_ns.map_or("-".into(), fmt_ns),
            fmt_ns(p.per_line_ns.mean)
        ));
    }
    out
}

pub(super) fn write_figures(dir: &std::path::Path, points: &[Point], plan: &Plan) -> anyhow::Result<()> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let lat0 = plan.latencies_ns.first().copied().unwrap_or(0.0);
    let series_for = |pred: &dyn Fn(&Point) -> bool, label: String, y: &dyn Fn(&Point) -> f64| Series {
        label,
        points: points.iter().filter(|p| pred(p)).map(|p| (f64::from(p.length_bits), y(p))).collect(),
        style: Style::Line,
    };
    let per_mode = |max_len: u32, lat: f64| -> Vec<Series> {
        plan.modes
            .iter()
            .map(|m| {
                series_for(
                    &|p: &Point| p.mode == *m && p.length_bits <= max_len && (!m.is_hw() || p.latency_ns == lat),
                    m.name().to_string(),
                    &|p: &Point| p.per_line_ns.mean / 1e3,
                )
            })
            .collect()
    };
    let charts = [
        (
            "rule30-landscape.svg",
            Chart {
                title: format!("rule 30: time per line against length (latency {})", fmt_ns(lat0)),
                x_label: "packet length, bits".into(),
                y_label: "time per line, us (mean)".into(),
                x_axis: XAxis::Linear,
                y_range: None,
                series: per_mode(1024, lat0),
            },
        ),
        (
            "rule30-zoom.svg",
            Chart {
                title: "rule 30: below 256 bits".into(),
                x_label: "packet length, bits".into(),
                y_label: "time per line, us (mean)".into(),
                x_axis: XAxis::Linear,
                y_range: None,
                series: per_mode(256, lat0),
            },
        ),
        (
            "rule30-latencies.svg",
            Chart {
                title: "rule 30: hardware latencies overlapped".into(),
                x_label: "packet length, bits".into(),
                y_label: "time per line, us (mean)".into(),
                x_axis: XAxis::Linear,
                y_range: None,
                series: plan
                    .modes
                    .iter()
                    .filter(|m| m.is_hw())
                    .flat_map(|m| plan.latencies_ns.iter().map(move |lat| (*m, *lat)))
                    .map(|(m, lat)| {
                        series_for(
                            &|p: &Point| p.mode == m && p.latency_ns == lat,
                            format!("{} {}", m.name(), fmt_ns(lat)),
                            &|p: &Point| p.per_line_ns.mean / 1e3,
                        )
                    })
                    .collect(),
            },
        ),
        (
            "rule30-jitter.svg",
            Chart {
                title: "rule 30: jitter (max / avg time per packet)".into(),
                x_label: "packet length, bits".into(),
                y_label: "max / avg".into(),
                x_axis: XAxis::Linear,
                y_range: None,
                series: plan
                    .modes
                    .iter()
                    .map(|m| {
                        series_for(&|p: &Point| p.mode == *m && (!m.is_hw() || p.latency_ns == lat0), m.name().to_string(), &|p: &Point| {
                            p.jitter
                        })
                    })
                    .collect(),
            },
        ),
    ];
    for (name, chart) in charts {
        let path = dir.join(name);
        std::fs::write(&path, plot::render_svg(&chart)?).with_context(|| format!("writing {}", path.display()))?;
        eprintln!("tlpx: wrote {}", path.display());
    }
    Ok(())
}
