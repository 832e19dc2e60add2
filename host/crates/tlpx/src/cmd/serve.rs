//! `tlpx serve`: a long-running Prometheus exporter of the card's measurements (issue 7).
//!
//!   card registers ──(every --interval)──► collector ──► metrics::Registry ◄── GET /metrics
//!   tlpx-sim Stats (second connection) ──┘
//!
//! The collector only watches: it never starts, stops or clears a block, so it can run next
//! to a capture, a bandwidth run or an interrupt measurement by another process. On the
//! simulator `tlpx serve` holds live time for its whole life (docs/sim-protocol.md): card time
//! runs while nobody else waits on the card, so a scrape sees time move
//! (`tlpx_sim_card_cycles_total`, `tlpx_sim_live_cycles_total`). `--metrics-listen` beside a
//! measuring command does not: it must not turn the command's measurement into a live one. The card's
//! own counters restart at each run (the generator, the interrupt timer) or capture (the
//! spy); the collector folds them into monotonic totals (see [`Monotonic`]), as Prometheus
//! counters must be.
//!
//! Three readings go through a select register (a write, then a read): the spy's per-class
//! counters, and the log2 histograms of the generator and the interrupt timer. A process
//! that reads the same select register at the same moment could see another bucket. The
//! histograms are therefore read only once a run has ended and stayed unchanged for a whole
//! interval (the process that ran it has read its result by then), once per run; the spy's
//! class counters, which have no other source, are read at every interval.

use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::Context;
use clap::Args;
use tlpx_device::backends::sim::SimDevice;
use tlpx_device::card::{Card, Feature};
use tlpx_device::{generator, irq_timer, rule30, spy};

use crate::metrics::{self, HistogramValue, Registry};
use crate::progress;
use crate::session::Session;

// Each block's reading for the exporter is in its block's folder.
#[path = "../../../../blocks/generator/metrics.rs"]
mod generator_metrics;
#[path = "../../../../blocks/irq_timer/metrics.rs"]
mod irq_timer_metrics;
#[path = "../../../../blocks/rule30/metrics.rs"]
mod rule30_metrics;
#[path = "../../../../blocks/spy/metrics.rs"]
mod spy_metrics;

#[derive(Debug, Args)]
pub struct Cmd {
    /// How often to read the card (ms, s, m or h; at least 10ms).
    #[arg(long, default_value = "1s")]
    interval: String,

    /// Stop after this long (ms, s, m or h); without it, serve until Ctrl-C.
    #[arg(long)]
    duration: Option<String>,
}

/// Parses a wall-clock duration such as `500ms`, `1s`, `5m`, `2h`.
fn parse_wall(flag: &str, text: &str) -> anyhow::Result<Duration> {
    let t = text.trim();
    let split = t.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(t.len());
    let (number, unit) = t.split_at(split);
    let scale = match unit {
        "ms" => 1e-3,
        "s" => 1.0,
        "m" => 60.0,
        "h" => 3600.0,
        _ => anyhow::bail!("{flag}: {t:?} is not a duration; write a number and a unit: ms, s, m or h (e.g. 1s)"),
    };
    match number.parse::<f64>() {
        Ok(v) if v.is_finite() && v * scale >= 0.01 && v * scale <= 1e7 => Ok(Duration::from_secs_f64(v * scale)),
        _ => anyhow::bail!("{flag}: {t:?} must be between 10ms and 115 days (e.g. 1s)"),
    }
}

pub fn run(cmd: &Cmd, device: &str, json: bool, metrics_listen: Option<&str>) -> anyhow::Result<ExitCode> {
    let interval = parse_wall("--interval", &cmd.interval)?;
    let duration = cmd.duration.as_deref().map(|d| parse_wall("--duration", d)).transpose()?;
    // The address is checked before the card is opened: a typo is reported as such.
    let listen = metrics_listen.unwrap_or(metrics::DEFAULT_LISTEN);
    metrics::parse_listen(listen)?;

    let mut session = Session::open_observer(device)?;
    // Live time on the simulator while this process lives (on hardware time is always live).
    session.hold_live_time()?;
    let registry = metrics::global();
    let mut collector = Collector::new(session, registry)?;
    let mut exporter = metrics::bind(listen)?;
    collector.collect(registry);
    exporter.serve(registry)?;
    progress::install_stop_handler();

    if json {
        crate::outln!(
            "{}",
            serde_json::json!({
                "kind": "serve", "url": exporter.url(), "address": exporter.address.to_string(),
                "card": collector.card_label, "interval_seconds": interval.as_secs_f64(),
                "duration_seconds": duration.map(|d| d.as_secs_f64()),
            })
        );
    } else {
        crate::outln!(
            "tlpx serve: metrics of {} at {} (read every {:?}; {})",
            collector.card_label,
            exporter.url(),
            interval,
            duration.map_or("Ctrl-C to stop".to_string(), |d| format!("for {d:?}"))
        );
    }
    let started = Instant::now();
    let mut next = started + interval;
    loop {
        let now = Instant::now();
        if progress::stop_requested() || duration.is_some_and(|d| now >= started + d) {
            break;
        }
        if now >= next {
            collector.collect(registry);
            next += interval;
            if next < Instant::now() {
                next = Instant::now() + interval;
            }
        }
        std::thread::sleep(Duration::from_millis(20).min(next.saturating_duration_since(Instant::now())).max(Duration::from_millis(1)));
    }
    if !json {
        crate::outln!("tlpx serve: stopped after {:.1} s, {} readings", started.elapsed().as_secs_f64(), collector.readings);
    }
    Ok(ExitCode::SUCCESS)
}

// Monotonic totals of counters that restart -------------------------------------------------

/// Folds successive readings of a block's counters into running totals: a reading where a
/// value went down, or that the block says is a new run, starts over from zero (its whole
/// value is new); otherwise the increase is added. A restart followed by growth past the
/// previous value within one interval is seen as growth (the card gives no run number).
#[derive(Debug, Default)]
struct Monotonic {
    previous: Option<Vec<u64>>,
    totals: Vec<u64>,
}

impl Monotonic {
    /// Adds `reading`; returns whether it was taken as a restart.
    fn update(&mut self, reading: &[u64], new_run: bool) -> bool {
        self.totals.resize(reading.len(), 0);
        let restart = match &self.previous {
            None => true,
            Some(p) => new_run || p.len() != reading.len() || p.iter().zip(reading).any(|(a, b)| b < a),
        };
        for (i, v) in reading.iter().enumerate() {
            let base = if restart { 0 } else { self.previous.as_ref().map_or(0, |p| p[i]) };
            self.totals[i] += v - base;
        }
        self.previous = Some(reading.to_vec());
        restart
    }
}

/// A log2 histogram of card cycles accumulated run by run.
#[derive(Debug)]
struct CycleHistogram {
    counts: Vec<u64>,
    sum_cycles: u64,
    /// The run now on the card was added (or had nothing to add).
    taken: bool,
}

impl CycleHistogram {
    fn new(buckets: usize) -> CycleHistogram {
        CycleHistogram { counts: vec![0; buckets + 1], sum_cycles: 0, taken: false }
    }

    fn add(&mut self, buckets: &[u64], sum_cycles: u64) {
        for (t, c) in self.counts.iter_mut().zip(buckets) {
            *t += c;
        }
        self.sum_cycles += sum_cycles;
        self.taken = true;
    }

    fn value(&self, clock_hz: u32) -> HistogramValue {
        HistogramValue { counts: self.counts.clone(), sum: self.sum_cycles as f64 / f64::from(clock_hz.max(1)) }
    }
}

/// `--metrics-listen` on a long-running command: the same readings as `tlpx serve`, from a
/// connection of their own, every second on a background thread for as long as the command
/// runs. Only registers are read, so the command's measurement is not changed (on the
/// simulator the reads are a second client's: they share card time with the command's).
pub fn export_alongside(device: &str, listen: &str) -> anyhow::Result<()> {
    metrics::parse_listen(listen)?;
    let session = Session::open_observer(device)?;
    let registry = metrics::global();
    let mut collector = Collector::new(session, registry)?;
    let mut exporter = metrics::bind(listen)?;
    collector.collect(registry);
    exporter.serve(registry)?;
    eprintln!("tlpx: metrics of {} at {} (read every second while this command runs)", collector.card_label, exporter.url());
    std::thread::Builder::new().name("tlpx-metrics".into()).spawn(move || loop {
        std::thread::sleep(Duration::from_secs(1));
        collector.collect(registry);
    })?;
    Ok(())
}

// Collector ----------------------------------------------------------------------------------

struct Collector {
    card: Card,
    clock_hz: u32,
    /// Card identity labels on every series: card (sim socket or PCI address), gen, lanes.
    base: Vec<(String, String)>,
    card_label: String,
    sim_socket: Option<String>,
    readings: u64,
    read_errors: u64,
    spy: Monotonic,
    generator: Monotonic,
    /// The last whole reading (counters and latency registers), to see a run end.
    generator_last: Option<Vec<u64>>,
    generator_done: bool,
    generator_runs: u64,
    read_latency: CycleHistogram,
    irq: Monotonic,
    irq_stages: [CycleHistogram; 2],
    irq_stable: Option<Vec<u64>>,
    /// The card's PCI address, whose interrupts /proc/interrupts counts per CPU (hardware);
    /// `None` on the simulator, whose interrupts come over its socket.
    host_irq_address: Option<String>,
    rule30: Monotonic,
    sim_last: Option<(Instant, u64)>,
}

fn describe(r: &Registry, clock_hz: u32) -> anyhow::Result<()> {
    let counters: &[(&str, &str)] = &[
        ("tlpx_exporter_card_read_errors_total", "Readings of the card or simulator that failed."),
        ("tlpx_spy_tlps_total", "TLPs the spy saw, by direction (down: host to card, up: card to host) and type."),
        ("tlpx_spy_bytes_total", "Header and payload bytes on the card's datapath the spy saw, by direction and type."),
        ("tlpx_spy_payload_bytes_total", "Payload bytes the spy saw, by direction and type."),
        ("tlpx_spy_wait_seconds_total", "Card time TLPs waited with valid high and ready low (backpressure), by direction and type."),
        ("tlpx_spy_records_total", "Capture records the spy numbered (a record per captured TLP)."),
        ("tlpx_spy_records_dropped_total", "Capture records lost: ring full or spy too slow."),
        ("tlpx_generator_runs_total", "Traffic generator runs seen by the exporter."),
        (
            "tlpx_generator_bytes_total",
            "Bytes the traffic generator moved, by operation (read: completed read requests, write: payload written).",
        ),
        ("tlpx_generator_tlps_total", "TLPs of the traffic generator, by type (mrd and mwr sent, completion received)."),
        ("tlpx_generator_transfers_total", "Transfers the traffic generator completed."),
        ("tlpx_generator_errors_total", "Errors the traffic generator counted, by kind."),
        ("tlpx_generator_busy_seconds_total", "Card time of traffic generator runs."),
        ("tlpx_irq_fires_total", "Interrupts the interrupt timer fired."),
        ("tlpx_irq_overruns_total", "Interrupt timer fires while the previous one was still pending."),
        ("tlpx_irq_stray_acks_total", "Acknowledgements with no interrupt pending, by stage."),
        (
            "tlpx_irq_host_interrupts_total",
            "The card's interrupts the host kernel dispatched, per CPU (/proc/interrupts); 0 on every CPU on the simulator, whose interrupts come over its socket.",
        ),
        ("tlpx_irq_records_dropped_total", "Interrupt timer records lost (ring full)."),
        (
            "tlpx_rule30_operations_total",
            "Operations the rule-30 accelerator completed (all host modes together: the card does not know the mode).",
        ),
        ("tlpx_rule30_busy_seconds_total", "Card time the rule-30 accelerator was busy."),
        ("tlpx_rule30_refused_starts_total", "Rule-30 starts refused for a bad line length or generation count."),
        ("tlpx_rule30_ignored_starts_total", "Rule-30 starts ignored because the core was busy."),
        ("tlpx_sim_card_cycles_total", "Card cycles the simulator has run."),
        ("tlpx_sim_live_cycles_total", "Card cycles the simulator has run in live time (while a client held it: not reproducible)."),
        ("tlpx_sim_cycle_loop_seconds_total", "Wall time the simulator spent running card cycles."),
        ("tlpx_sim_tlps_total", "TLPs on the simulated link, by direction and TLP type."),
        ("tlpx_sim_wire_bytes_total", "Bytes on the simulated link's wire (framing, header, payload), by direction."),
        ("tlpx_sim_payload_bytes_total", "Payload bytes on the simulated link, by direction."),
        ("tlpx_sim_dma_bytes_total", "Bytes the card read from or wrote to simulated host memory, by operation."),
        ("tlpx_sim_msis_total", "MSIs the simulated card raised."),
        ("tlpx_sim_completion_timeouts_total", "MMIO reads or injected requests whose completion did not come in time."),
    ];
    for (name, help) in counters {
        r.describe_counter(name, help)?;
    }
    let gauges: &[(&str, &str)] = &[
        ("tlpx_card_info", "The card: identity in labels, always 1."),
        (
            "tlpx_card_up",
            "1 when the last reading of the card succeeded, 0 when it failed.",
        ),
        (
            "tlpx_card_clock_hertz",
            "The card's clock: the unit of every cycle count.",
        ),
        (
            "tlpx_link_max_payload_bytes",
            "The link's Max Payload Size.",
        ),
        (
            "tlpx_link_model_limit_bytes_per_second",
            "The pcie-bench model's payload bandwidth limit of this link for 4 KiB DMA transfers (the reference line of the bandwidth dashboard).",
        ),
        (
            "tlpx_link_max_read_request_bytes",
            "The link's Max Read Request Size.",
        ),
        ("tlpx_spy_capturing", "1 while a spy capture is on."),
        (
            "tlpx_generator_running",
            "1 while a traffic generator run is in progress.",
        ),
        (
            "tlpx_generator_outstanding_reads",
            "Generator reads in flight now.",
        ),
        ("tlpx_irq_running", "1 while the interrupt timer runs."),
        (
            "tlpx_rule30_busy",
            "1 while the rule-30 accelerator computes.",
        ),
        (
            "tlpx_sim_speed_cycles_per_second",
            "Card cycles the simulator ran per wall second over the last interval.",
        ),
        ("tlpx_sim_clients", "Clients connected to the simulator."),
        ("tlpx_sim_live_clients", "Clients holding live time on the simulator (card time runs on its own while this is not 0)."),
        (
            "tlpx_exporter_last_read_timestamp_seconds",
            "Unix time of the last successful reading of the card.",
        ),
    ];
    for (name, help) in gauges {
        r.describe_gauge(name, help)?;
    }
    let bounds = metrics::log2_cycle_bounds(generator::HISTOGRAM_BUCKETS, clock_hz);
    r.describe_histogram(
        "tlpx_generator_read_latency_seconds",
        "Traffic generator read latency (request to last completion, card time), added when a run ends.",
        &bounds,
    )?;
    let bounds = metrics::log2_cycle_bounds(irq_timer::HISTOGRAM_BUCKETS, clock_hz);
    r.describe_histogram(
        "tlpx_irq_latency_seconds",
        "Interrupt latency from the timer's fire to the acknowledgement of a stage (isr: the handler, user: the woken thread), card time, added when a run ends.",
        &bounds,
    )?;
    Ok(())
}

impl Collector {
    fn new(session: Session, registry: &Registry) -> anyhow::Result<Collector> {
        let env = &session.environment;
        let sim_socket = env.sim.as_ref().map(|s| s.socket.clone());
        let card_label = match &sim_socket {
            Some(s) => format!("sim:{s}"),
            None => env.pci_address.clone().or_else(|| env.device.clone()).unwrap_or_else(|| "unknown".into()),
        };
        let (gen, lanes) =
            session.link.as_ref().map_or(("unknown".into(), "unknown".into()), |l| (l.generation.to_string(), l.lanes.to_string()));
        let base = vec![("card".to_string(), card_label.clone()), ("gen".to_string(), gen), ("lanes".to_string(), lanes)];
        let clock_hz = session.clock_hz;
        describe(registry, clock_hz).context("declaring the metrics")?;
        let c = Collector {
            card: session.card,
            clock_hz,
            base,
            card_label,
            sim_socket,
            readings: 0,
            read_errors: 0,
            spy: Monotonic::default(),
            generator: Monotonic::default(),
            generator_last: None,
            generator_done: false,
            generator_runs: 0,
            read_latency: CycleHistogram::new(generator::HISTOGRAM_BUCKETS),
            irq: Monotonic::default(),
            irq_stages: [CycleHistogram::new(irq_timer::HISTOGRAM_BUCKETS), CycleHistogram::new(irq_timer::HISTOGRAM_BUCKETS)],
            irq_stable: None,
            host_irq_address: if env.simulated { None } else { env.pci_address.clone() },
            rule30: Monotonic::default(),
            sim_last: None,
        };
        let id = c.card.identity().clone();
        let mut info = c.labels(&[]);
        let mut extra = vec![
            ("pci_address".to_string(), env.pci_address.clone().unwrap_or_default()),
            ("backend".to_string(), env.backend.clone().unwrap_or_default()),
            ("version".to_string(), format!("{}.{}", id.version_major, id.version_minor)),
            ("map_hash".to_string(), format!("0x{:08x}", id.map_hash)),
            ("data_width".to_string(), id.data_width.to_string()),
            ("features".to_string(), id.feature_names().join(",")),
            ("simulated".to_string(), env.simulated.to_string()),
        ];
        info.append(&mut extra);
        let info_refs: Vec<(&str, &str)> = info.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        registry.gauge_set("tlpx_card_info", &info_refs, 1.0);
        c.gauge(registry, "tlpx_card_clock_hertz", &[], f64::from(clock_hz));
        if let Some(l) = &session.link {
            c.gauge(registry, "tlpx_link_max_payload_bytes", &[], f64::from(l.mps));
            c.gauge(registry, "tlpx_link_max_read_request_bytes", &[], f64::from(l.mrrs));
            // The model's limit for large transfers, per operation (a write is the card's
            // MWr stream up; a read its completions down).
            if let Some(model) = l.model(false) {
                for (op, bw) in
                    [("write", tlpx_model::link::write_bandwidth(&model, 4096)), ("read", tlpx_model::link::read_bandwidth(&model, 4096))]
                {
                    c.gauge(registry, "tlpx_link_model_limit_bytes_per_second", &[("operation", op)], bw.bytes_per_second);
                }
            }
        }
        Ok(c)
    }

    fn labels(&self, extra: &[(&str, &str)]) -> Vec<(String, String)> {
        let mut v = self.base.clone();
        v.extend(extra.iter().map(|(k, val)| ((*k).to_string(), (*val).to_string())));
        v
    }

    fn with_labels(&self, extra: &[(&str, &str)], f: impl FnOnce(&[(&str, &str)])) {
        let owned = self.labels(extra);
        let refs: Vec<(&str, &str)> = owned.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        f(&refs);
    }

    fn counter(&self, r: &Registry, name: &str, extra: &[(&str, &str)], total: f64) {
        self.with_labels(extra, |l| r.counter_set(name, l, total));
    }

    fn gauge(&self, r: &Registry, name: &str, extra: &[(&str, &str)], value: f64) {
        self.with_labels(extra, |l| r.gauge_set(name, l, value));
    }

    fn seconds(&self, cycles: u64) -> f64 {
        cycles as f64 / f64::from(self.clock_hz.max(1))
    }

    /// Reads every block the card has and updates the registry; a failed reading is
    /// counted and reported once, and the next interval tries again.
    fn collect(&mut self, r: &Registry) {
        self.readings += 1;
        let result = (|| -> anyhow::Result<()> {
            if self.card.has_feature(Feature::Spy) {
                self.collect_spy(r)?;
            }
            if self.card.has_feature(Feature::Generator) {
                self.collect_generator(r)?;
            }
            if self.card.has_feature(Feature::IrqTimer) {
                self.collect_irq(r)?;
            }
            if self.card.has_feature(Feature::Rule30) {
                self.collect_rule30(r)?;
            }
            Ok(())
        })();
        let sim = self.collect_sim(r);
        let ok = result.is_ok() && sim.is_ok();
        for e in [result.err(), sim.err()].into_iter().flatten() {
            if self.read_errors == 0 {
                eprintln!("tlpx serve: warning: reading the card failed (counted in tlpx_exporter_card_read_errors_total): {e:#}");
            }
            self.read_errors += 1;
        }
        self.counter(r, "tlpx_exporter_card_read_errors_total", &[], self.read_errors as f64);
        self.gauge(r, "tlpx_card_up", &[], if ok { 1.0 } else { 0.0 });
        if ok {
            let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0.0, |d| d.as_secs_f64());
            self.gauge(r, "tlpx_exporter_last_read_timestamp_seconds", &[], now);
        }
    }

    /// The simulator's own counters, on a short-lived second connection (the card's stays
    /// free for register reads). Cumulative since the simulator started: no folding needed.
    fn collect_sim(&mut self, r: &Registry) -> anyhow::Result<()> {
        let Some(socket) = self.sim_socket.clone() else {
            return Ok(());
        };
        let stats = SimDevice::connect_as(&socket, "tlpx serve (stats)")
            .and_then(|mut s| s.stats())
            .with_context(|| format!("reading the simulator's statistics at {socket}"))?;
        let now = Instant::now();
        if let Some((t, cycles)) = self.sim_last {
            let wall = now.duration_since(t).as_secs_f64();
            if wall > 0.0 {
                self.gauge(r, "tlpx_sim_speed_cycles_per_second", &[], stats.cycles.saturating_sub(cycles) as f64 / wall);
            }
        }
        self.sim_last = Some((now, stats.cycles));
        self.counter(r, "tlpx_sim_card_cycles_total", &[], stats.cycles as f64);
        self.counter(r, "tlpx_sim_live_cycles_total", &[], stats.live_cycles as f64);
        self.counter(r, "tlpx_sim_cycle_loop_seconds_total", &[], stats.wall_seconds_in_cycle_loop);
        for (direction, d) in [("down", &stats.host_to_card), ("up", &stats.card_to_host)] {
            for (kind, n) in &d.by_type {
                self.counter(r, "tlpx_sim_tlps_total", &[("direction", direction), ("type", kind)], *n as f64);
            }
            self.counter(r, "tlpx_sim_wire_bytes_total", &[("direction", direction)], d.wire_bytes as f64);
            self.counter(r, "tlpx_sim_payload_bytes_total", &[("direction", direction)], d.payload_bytes as f64);
        }
        self.counter(r, "tlpx_sim_dma_bytes_total", &[("operation", "read")], stats.dma_read_bytes as f64);
        self.counter(r, "tlpx_sim_dma_bytes_total", &[("operation", "write")], stats.dma_write_bytes as f64);
        self.counter(r, "tlpx_sim_msis_total", &[], stats.msis as f64);
        self.counter(r, "tlpx_sim_completion_timeouts_total", &[], stats.completion_timeouts as f64);
        self.gauge(r, "tlpx_sim_clients", &[], stats.clients.iter().filter(|c| c.connected).count() as f64);
        self.gauge(r, "tlpx_sim_live_clients", &[], f64::from(stats.live_clients));
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metrics_monotonic_folds_restarts() {
        let mut m = Monotonic::default();
        assert!(m.update(&[10, 5], false), "the first reading counts whole");
        assert!(!m.update(&[15, 5], false));
        assert_eq!(m.totals, vec![15, 5]);
        assert!(m.update(&[3, 7], false), "a value went down: a new run");
        assert_eq!(m.totals, vec![18, 12]);
        assert!(m.update(&[3, 7], true), "the block says a new run");
        assert_eq!(m.totals, vec![21, 19]);
    }

    #[test]
    fn metrics_serve_durations() {
        assert_eq!(parse_wall("--interval", "1s").ok(), Some(Duration::from_secs(1)));
        assert_eq!(parse_wall("--interval", "250ms").ok(), Some(Duration::from_millis(250)));
        assert_eq!(parse_wall("--duration", "2m").ok(), Some(Duration::from_secs(120)));
        for bad in ["1", "1ms", "x", "-1s", "1 s"] {
            let e = parse_wall("--interval", bad).err().map(|e| e.to_string()).unwrap_or_default();
            assert!(e.contains("--interval") && e.contains(bad), "{bad}: {e}");
        }
    }
}
