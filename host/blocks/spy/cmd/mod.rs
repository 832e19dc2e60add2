//! `tlpx spy`: the passive spy. `capture` streams every TLP's summary into a trace file
//! (traces/FORMAT.md) and prints a running log; `stats` prints the live counters and
//! histograms; `convert` turns a trace into CSV, VCD (GTKWave) or the log.
//!
//! ```text
//! tlpx spy capture --duration 2ms --types mrd,cpld --output cap.tlpx
//! tlpx spy capture -o cap.tlpx        # until Ctrl-C, SIGTERM or `tlpx spy stop`
//! tlpx spy stats
//! tlpx spy convert cap.tlpx --vcd cap.vcd
//! tlpx spy convert cap.tlpx --pcapng cap.pcapng   # Wireshark, with wireshark/tlpx.lua
//! ```
//!
//! On the simulator a capture holds live time for its whole life (docs/sim-protocol.md): card
//! time runs while it sleeps between polls and while other processes compute, so it records
//! the traffic another terminal starts after it, with no race to win.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context};
use clap::{Args, Subcommand};
use serde::Serialize;

use tlpx_device::card::Feature;
use tlpx_device::lease::Block;
use tlpx_device::spy::{self, Capture, CaptureEnd, Direction, Filters, Trigger, TriggerMode, CLASSES, RECORD_BYTES};
use tlpx_results::spy::OwnTraffic as StatsOwn;
pub use tlpx_results::spy::{Stats, StatsBody, StatsParameters};
use tlpx_trace::{CardInfo, Footer, GapDetector, HeaderInfo, LinkInfo, Record, TraceReader, TraceWriter};

use crate::args::{check_output_file, refuse_duplicates, whole, whole_as};
use crate::output::print_json;
use crate::progress;
use crate::session::Session;
use crate::sizes::parse_duration;

mod capture;
mod convert;
mod filters;

use capture::capture;
pub(crate) use capture::{bar0_address, bar0_names, trace_header};
use convert::convert;
use filters::Plan;

/// `spy capture --ring` when not given (records).
const DEFAULT_RING_RECORDS: u32 = 4096;

#[derive(Debug, Args)]
pub struct Cmd {
    #[command(subcommand)]
    action: Action,
}

#[derive(Debug, Subcommand)]
enum Action {
    /// Capture every TLP's summary into a trace file, printing a running log.
    ///
    /// Without --duration or --records it captures until stopped: Ctrl-C, SIGTERM or `tlpx spy
    /// stop` (from another terminal) end it cleanly, with every record and the footer in the
    /// trace. On the simulator it holds live time for its whole life, so traffic that another
    /// terminal starts after it is recorded.
    Capture(Box<CaptureArgs>),
    /// Print the spy's live counters per direction and TLP type, and its histograms.
    Stats(StatsArgs),
    /// Convert a trace file to CSV, VCD (GTKWave), pcapng (Wireshark) or the text log.
    Convert(ConvertArgs),
    /// Turn capture off and free the spy, whoever started it (the same as `tlpx stop spy`); a
    /// running `tlpx spy capture` then drains what the spy still holds and ends cleanly.
    Stop,
}

#[derive(Debug, Args)]
pub struct CaptureArgs {
    /// Trace file to write (format: traces/FORMAT.md).
    #[arg(long, short = 'o', default_value = "spy.tlpx")]
    output: PathBuf,
    /// How long to capture, in card time (e.g. 500us, 2ms) [default: until stopped by Ctrl-C,
    /// SIGTERM or `tlpx spy stop`, unless --records].
    #[arg(long, conflicts_with = "records", allow_hyphen_values = true)]
    duration: Option<String>,
    /// Stop once this many records have arrived [default: until stopped, unless --duration].
    #[arg(long, value_parser = whole(1, u64::MAX), allow_negative_numbers = true)]
    records: Option<u64>,
    /// Ring size in records (a power of two, 16..=16777216; 32 bytes each).
    #[arg(
        long,
        default_value_t = DEFAULT_RING_RECORDS,
        value_parser = whole_as(spy::MIN_RING_RECORDS, spy::MAX_RING_RECORDS, "a power of two in 16..=16777216 records"),
        allow_negative_numbers = true
    )]
    ring: u32,
    /// Card time between two polls of the ring (each poll is itself 2-3 TLPs on the link).
    #[arg(long, default_value = "50us", allow_hyphen_values = true)]
    poll: String,
    /// Directions to record: down (host to card), up (card to host), or both.
    #[arg(long, default_value = "down,up")]
    dir: String,
    /// Types to record: mrd, mwr, cpl, cpld, msg, cfg, io, other, msi (the card's MSIs), or
    /// all.
    #[arg(long, default_value = "all")]
    types: String,
    /// Record requests whose address matches BASE under MASK (BASE alone: that DW).
    #[arg(long, value_name = "BASE[/MASK]", allow_hyphen_values = true)]
    address: Option<String>,
    /// Record TLPs whose requester ID matches ID under MASK (ID alone: exactly it).
    #[arg(long, value_name = "ID[/MASK]", allow_hyphen_values = true)]
    requester: Option<String>,
    /// Also record the spy's own ring writes.
    #[arg(long)]
    include_own: bool,
    /// Capture the first N data DWs of every TLP with data (0..=16; 0: off), in payload
    /// records after the TLP's record.
    #[arg(long, value_name = "N", default_value_t = 0, value_parser = whole(0, spy::PAYLOAD_DWS_MAX), allow_negative_numbers = true)]
    payload: u8,
    /// TLP types whose payload --payload captures (as --types, without msi).
    #[arg(long, default_value = "all")]
    payload_types: String,
    /// Directions whose payload --payload captures (as --dir).
    #[arg(long, default_value = "down,up")]
    payload_dir: String,
    /// Trigger: `start` keeps --pre records before the first match and records from it on;
    /// `stop` records until the match and --post records after.
    #[arg(long, value_name = "start|stop")]
    trigger: Option<String>,
    /// TLP types that can trigger (as --types).
    #[arg(long, default_value = "all")]
    trigger_types: String,
    /// Directions that can trigger (as --dir).
    #[arg(long, default_value = "down,up")]
    trigger_dir: String,
    /// Requests trigger when their address matches BASE under MASK.
    #[arg(long, value_name = "BASE[/MASK]", allow_hyphen_values = true)]
    trigger_address: Option<String>,
    /// Records kept before the trigger (start trigger, 0..=2047: the spy's record FIFO).
    #[arg(long, default_value_t = 0, value_parser = whole(0, (spy::RECORD_FIFO_DEPTH - 1) as u16), allow_negative_numbers = true)]
    pre: u16,
    /// Records kept from the trigger on, the trigger's included [default: all until the end
    /// for a start trigger, 1 for a stop trigger].
    #[arg(long, value_parser = whole(1, u32::MAX), allow_negative_numbers = true)]
    post: Option<u32>,
    /// Do not print the running log.
    #[arg(long, short = 'q')]
    quiet: bool,
    /// Also write the capture as pcapng for Wireshark (docs/wireshark.md), converted from the
    /// trace file (--output, which is written in any case) when the capture ends.
    #[arg(long, value_name = "OUT")]
    pcapng: Option<PathBuf>,
    /// A card build's csr.json (as `tlpx reg --regs`): the accelerator's registers go into the
    /// trace's header, so its log and every conversion name the host's accesses to them
    /// (checked against the card's slot.dut_map_hash).
    #[arg(long, value_name = "FILE")]
    regs: Option<PathBuf>,
}

#[derive(Debug, Args)]
pub struct StatsArgs {
    /// Zero the counters and histograms after reading them (refused while a capture runs).
    #[arg(long)]
    clear: bool,
    /// Also write them as a result document (JSON, kind `spy`, for `tlpx report`).
    #[arg(long, value_name = "FILE.json")]
    output: Option<PathBuf>,
}

#[derive(Debug, Args)]
pub struct ConvertArgs {
    /// Trace file to read.
    file: PathBuf,
    /// Write CSV to this file.
    #[arg(long, group = "format", value_name = "OUT")]
    csv: Option<PathBuf>,
    /// Write VCD (GTKWave) to this file.
    #[arg(long, group = "format", value_name = "OUT")]
    vcd: Option<PathBuf>,
    /// Write pcapng (Wireshark, tshark; open it with the dissector wireshark/tlpx.lua, see
    /// docs/wireshark.md) to this file.
    #[arg(long, group = "format", value_name = "OUT")]
    pcapng: Option<PathBuf>,
    /// Print the text log on stdout.
    #[arg(long, group = "format")]
    log: bool,
}

pub fn run(cmd: &Cmd, device: &str, json: bool) -> anyhow::Result<ExitCode> {
    match &cmd.action {
        Action::Capture(a) => capture(a, device, json),
        Action::Stats(a) => stats(a, device, json),
        Action::Convert(a) => convert(a, json),
        Action::Stop => force_stop(device, json),
    }
}

fn force_stop(device: &str, json: bool) -> anyhow::Result<ExitCode> {
    crate::cmd::stop::stop_blocks(device, &[Block::Spy], json)
}

// Stats ---------------------------------------------------------------------------------------

fn stats_own(c: &spy::SpyCounters, own_counted: bool) -> StatsOwn {
    let framing = u64::from(tlpx_model::link::TLP_FRAMING_BYTES);
    let wire_bytes = c.own.bytes + c.own.tlps * framing;
    let up = c.total(Direction::Up);
    // The class counters hold the spy's writes only while a capture includes them.
    let up_wire = up.bytes + up.tlps * framing + if own_counted { 0 } else { wire_bytes };
    let share_of_up_traffic = if up_wire == 0 { 0.0 } else { wire_bytes as f64 / up_wire as f64 };
    StatsOwn { tlps: c.own.tlps, bytes: c.own.bytes, wire_bytes, share_of_up_traffic }
}

fn bar(n: u64, max: u64, width: usize) -> String {
    if max == 0 || n == 0 {
        return String::new();
    }
    let len = ((n as f64 / max as f64) * width as f64).ceil() as usize;
    "#".repeat(len.clamp(1, width))
}

fn print_histogram(title: &str, unit: &str, buckets: &[u64]) {
    crate::outln!("{title}");
    let total: u64 = buckets.iter().sum();
    if total == 0 {
        crate::outln!("  (empty)");
        return;
    }
    let max = buckets.iter().copied().max().unwrap_or(0);
    let first = buckets.iter().position(|&b| b != 0).unwrap_or(0);
    let last = buckets.iter().rposition(|&b| b != 0).unwrap_or(0);
    for (k, &n) in buckets.iter().enumerate().take(last + 1).skip(first) {
        let lo = if k == 0 { 0 } else { 1u64 << k };
        let range = format!("{lo}..{}", (1u64 << (k + 1)) - 1);
        crate::outln!("  {range:>21} {unit:<6} {n:>10}  {}", bar(n, max, 40));
    }
}

fn stats(a: &StatsArgs, device: &str, json: bool) -> anyhow::Result<ExitCode> {
    let started = std::time::Instant::now();
    let mut session = Session::open_observer(device)?;
    let card = &mut session.card;
    let counters = spy::counters(card)?;
    let own_counted = tlpx_regs::spy::control::INCLUDE_OWN.get(card.read(tlpx_regs::spy::CONTROL)?) != 0;
    let owner = tlpx_device::lease::owner(card, Block::Spy)?;
    let latency_histogram = spy::latency_histogram(card)?;
    let (payload_histogram_down, payload_histogram_up) = spy::payload_histograms(card)?;
    if a.clear {
        if spy::is_capturing(card)? {
            bail!("--clear: a capture is running on this card; clearing would stop it. Stop the capture first");
        }
        spy::clear(card)?;
    }
    let own_traffic = stats_own(&counters, own_counted);
    let stats = Stats {
        counters,
        own_traffic: Some(own_traffic.clone()),
        classes: CLASSES.iter().map(ToString::to_string).collect(),
        latency_histogram,
        payload_histogram_down,
        payload_histogram_up,
        clock_hz: session.clock_hz,
    };
    if let Some(path) = &a.output {
        let doc = crate::results::ResultDoc::new(
            "spy",
            StatsParameters { clear: a.clear },
            session.environment.clone(),
            session.link.clone(),
            None,
            StatsBody { points: vec![stats.clone()] },
            started.elapsed().as_secs_f64(),
            session.notes.clone(),
        );
        crate::results::write_json(path, &doc)?;
    }
    if json {
        print_json(&stats)?;
        return Ok(ExitCode::SUCCESS);
    }
    crate::outln!("{}", session.describe());
    let c = &stats.counters;
    let capture = match (&owner, c.capturing) {
        (Some(o), true) => format!("on, by {} (`tlpx stop spy` ends it)", o.describe()),
        (None, true) => "on, without an owner (started by the card's firmware or by register writes; `tlpx stop spy` ends it)".to_string(),
        (_, false) => "off".to_string(),
    };
    crate::outln!(
        "capture: {}; records created {} (next sequence), lost {}, written to the ring {}{}{}",
        capture,
        c.sequence,
        c.lost,
        c.wr_index,
        if c.triggered { ", triggered" } else { "" },
        if c.stopped { ", stopped" } else { "" }
    );
    crate::outln!("counters since the last clear (every TLP; filters do not apply):");
    crate::outln!("  {:<5} {:<6} {:>12} {:>14} {:>14} {:>12}", "dir", "type", "TLPs", "bytes", "payload", "wait cyc");
    for d in Direction::BOTH {
        for (i, cls) in c.direction(d).iter().enumerate() {
            if cls.tlps != 0 {
                crate::outln!(
                    "  {:<5} {:<6} {:>12} {:>14} {:>14} {:>12}",
                    d.name(),
                    CLASSES[i],
                    cls.tlps,
                    cls.bytes,
                    cls.payload_bytes,
                    cls.wait_cycles
                );
            }
        }
        let t = c.total(d);
        crate::outln!("  {:<5} {:<6} {:>12} {:>14} {:>14} {:>12}", d.name(), "total", t.tlps, t.bytes, t.payload_bytes, t.wait_cycles);
    }
    let own = &own_traffic;
    crate::outln!(
        "the spy's own ring writes: {} TLPs, {} bytes ({} on the wire, {:.2}% of the card-to-host bytes on the wire); MSIs sent by the card: {}",
        own.tlps,
        own.bytes,
        own.wire_bytes,
        own.share_of_up_traffic * 100.0,
        c.msi_count
    );
    if let Some(seq) = c.trigger_sequence {
        crate::outln!("the trigger matched record {seq}");
    }
    print_histogram("read latency, request to last completion (matched reads seen while capturing):", "cycles", &stats.latency_histogram);
    print_histogram("payload per TLP with data, down:", "bytes", &stats.payload_histogram_down);
    print_histogram("payload per TLP with data, up:", "bytes", &stats.payload_histogram_up);
    if a.clear {
        crate::outln!("cleared");
    }
    Ok(ExitCode::SUCCESS)
}
