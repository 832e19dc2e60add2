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
use tlpx_trace::{CardInfo, Footer, GapDetector, HeaderInfo, LinkInfo, Record, TraceReader, TraceWriter};

use crate::args::{check_output_file, refuse_duplicates, whole, whole_as};
use crate::output::print_json;
use crate::progress;
use crate::session::Session;
use crate::sizes::parse_duration;

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

// Argument parsing ---------------------------------------------------------------------------

fn parse_number(flag: &str, text: &str) -> anyhow::Result<u64> {
    let t = text.trim().replace('_', "");
    let parsed = match t.strip_prefix("0x").or_else(|| t.strip_prefix("0X")) {
        Some(hex) => u64::from_str_radix(hex, 16),
        None => t.parse::<u64>(),
    };
    parsed.map_err(|_| anyhow!("{flag}: {text:?} is not a number (decimal, or hex with 0x)"))
}

/// `BASE[/MASK]`; without a mask, every bit of `full` is compared.
fn parse_base_mask(flag: &str, text: &str, full: u64) -> anyhow::Result<(u64, u64)> {
    let (base, mask) = match text.split_once('/') {
        Some((b, m)) => (parse_number(flag, b)?, parse_number(flag, m)?),
        None => (parse_number(flag, text)?, full),
    };
    if base & !full != 0 || mask & !full != 0 {
        bail!("{flag}: {text:?} has bits outside 0x{full:x}");
    }
    Ok((base, mask))
}

fn parse_directions(flag: &str, text: &str) -> anyhow::Result<(bool, bool)> {
    let (mut down, mut up) = (false, false);
    let parts: Vec<String> = text.split(',').map(|p| p.trim().to_ascii_lowercase()).filter(|p| !p.is_empty()).collect();
    refuse_duplicates(flag, &parts, String::clone).map_err(anyhow::Error::msg)?;
    for part in &parts {
        match Direction::parse(part).map_err(|e| anyhow!("{flag}: {e}"))? {
            Direction::Down => down = true,
            Direction::Up => up = true,
        }
    }
    if !down && !up {
        bail!("{flag}: {text:?} names no direction; write down, up or down,up");
    }
    Ok((down, up))
}

/// The names of a type list, checked for emptiness and duplicates.
fn type_names<'a>(flag: &str, text: &'a str, accepted: &[&str]) -> anyhow::Result<Vec<&'a str>> {
    let names: Vec<&str> = text.split(',').filter(|p| !p.trim().is_empty()).collect();
    if names.is_empty() {
        bail!("{flag}: give some of {}, or all", accepted.join(", "));
    }
    let lower: Vec<String> = names.iter().map(|n| n.trim().to_ascii_lowercase()).collect();
    refuse_duplicates(flag, &lower, String::clone).map_err(anyhow::Error::msg)?;
    Ok(names)
}

/// The record filter's types (TLP types and `msi`).
fn parse_types(flag: &str, text: &str) -> anyhow::Result<u16> {
    let names = type_names(flag, text, &spy::FILTER_CLASSES)?;
    spy::class_mask(&names).map_err(|e| anyhow!("{flag}: {e}"))
}

/// TLP types only (the trigger, payload capture).
fn parse_tlp_types(flag: &str, text: &str) -> anyhow::Result<u8> {
    let names = type_names(flag, text, &CLASSES)?;
    spy::tlp_class_mask(&names).map_err(|e| anyhow!("{flag}: {e}"))
}

/// --payload, --payload-types, --payload-dir into the filters.
fn parse_payload(a: &CaptureArgs, filters: &mut Filters) -> anyhow::Result<()> {
    let given = a.payload_types != "all" || a.payload_dir != "down,up";
    if a.payload == 0 && given {
        bail!("--payload-types and --payload-dir need --payload N (1..={})", spy::PAYLOAD_DWS_MAX);
    }
    filters.payload_dws = a.payload;
    filters.payload_classes = parse_tlp_types("--payload-types", &a.payload_types)?;
    let (down, up) = parse_directions("--payload-dir", &a.payload_dir)?;
    filters.payload_directions = u8::from(down) | u8::from(up) << 1;
    Ok(())
}

/// The spy set-up a capture command asks for.
#[derive(Debug, Clone, Serialize)]
struct Plan {
    filters: Filters,
    trigger: Trigger,
    duration_s: Option<f64>,
    records: Option<u64>,
    ring: u32,
    poll_s: f64,
}

impl Plan {
    fn parse(a: &CaptureArgs) -> anyhow::Result<Plan> {
        let (down, up) = parse_directions("--dir", &a.dir)?;
        let mut filters =
            Filters { down, up, class_mask: parse_types("--types", &a.types)?, include_own: a.include_own, ..Filters::default() };
        if let Some(text) = &a.address {
            (filters.address_base, filters.address_mask) = parse_base_mask("--address", text, !3)?;
        }
        if let Some(text) = &a.requester {
            let (id, mask) = parse_base_mask("--requester", text, 0xFFFF)?;
            (filters.requester_id, filters.requester_mask) = (id as u16, mask as u16);
        }
        parse_payload(a, &mut filters)?;
        let mut trigger = Trigger::default();
        let trigger_flags =
            a.trigger_address.is_some() || a.pre != 0 || a.post.is_some() || a.trigger_types != "all" || a.trigger_dir != "down,up";
        match a.trigger.as_deref() {
            None if trigger_flags => {
                bail!("--trigger-types, --trigger-dir, --trigger-address, --pre and --post need --trigger start or --trigger stop")
            }
            None => {}
            Some(mode) => {
                trigger.mode = match mode.trim() {
                    "start" => TriggerMode::Start,
                    "stop" => TriggerMode::Stop,
                    other => bail!("--trigger: must be start or stop, not {other:?}"),
                };
                (trigger.down, trigger.up) = parse_directions("--trigger-dir", &a.trigger_dir)?;
                trigger.class_mask = parse_tlp_types("--trigger-types", &a.trigger_types)?;
                if let Some(text) = &a.trigger_address {
                    (trigger.address_base, trigger.address_mask) = parse_base_mask("--trigger-address", text, !3)?;
                }
                trigger.pre = a.pre;
                trigger.post = a.post.unwrap_or(if trigger.mode == TriggerMode::Start { u32::MAX } else { 1 });
            }
        }
        // Checked before the card is touched, worded as the capture's own refusal would be.
        spy::SpyConfig::new(&filters, &trigger).map_err(|e| anyhow!("{}", tlpx_device::DeviceError::from(e)))?;
        if !a.ring.is_power_of_two() || !(spy::MIN_RING_RECORDS..=spy::MAX_RING_RECORDS).contains(&a.ring) {
            bail!("--ring: must be a power of two in {}..={} records, not {}", spy::MIN_RING_RECORDS, spy::MAX_RING_RECORDS, a.ring);
        }
        if a.records == Some(0) {
            bail!("--records: must be at least 1, not 0");
        }
        // Neither --duration nor --records: until stopped. A capture watches traffic that comes
        // from elsewhere (another terminal, a driver), so its natural end is the user's, as
        // tcpdump's is; a fixed default of card time would end at a wall time nobody can
        // predict (on the simulator card time runs tens to hundreds of times slower than wall
        // time, depending on the card and its traffic).
        let duration_s = match &a.duration {
            Some(d) => Some(parse_duration("--duration", d).map_err(anyhow::Error::msg)?),
            None => None,
        };
        let poll_s = parse_duration("--poll", &a.poll).map_err(anyhow::Error::msg)?;
        // Before the card is touched: a trace that cannot be written fails at once.
        check_output_file("--output", &a.output)?;
        if let Some(path) = &a.pcapng {
            check_output_file("--pcapng", path)?;
            if path == &a.output || crate::args::same_file(path, &a.output) {
                bail!("--pcapng {}: that is the --output file {}; give the pcapng file another name", path.display(), a.output.display());
            }
        }
        Ok(Plan { filters, trigger, duration_s, records: a.records, ring: a.ring, poll_s })
    }
}

// Capture -------------------------------------------------------------------------------------

/// What `tlpx spy capture` reports at the end (its --json output).
#[derive(Debug, Serialize)]
struct CaptureSummary {
    output: String,
    /// The pcapng file written from the trace at the end (--pcapng), and its packets.
    #[serde(skip_serializing_if = "Option::is_none")]
    pcapng: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pcapng_packets: Option<u64>,
    /// The records travelled through LitePCIe's DMA writer into its driver's ring (the
    /// litepcie backend), not through the spy's own ring.
    through_driver_writer: bool,
    records_written: u64,
    records_created: u64,
    records_lost: u64,
    records_held_before_trigger: u64,
    sequence_gaps: Vec<String>,
    /// Card time from the start of the capture to its end.
    card_seconds: f64,
    wall_seconds: f64,
    triggered: bool,
    /// A capture with an end of its own (--duration, --records, a trigger) was stopped before it.
    interrupted: bool,
    /// What ended it: duration, records, trigger, signal (Ctrl-C, SIGTERM, SIGHUP; `tlpx spy
    /// stop` on this host sends SIGTERM), spy_stop (the spy was taken back from it: `tlpx spy
    /// stop` from another host, or after the capture did not end on SIGTERM) or output_closed.
    ended_by: EndedBy,
    /// The clock that stamped the records: live on the simulator (the capture holds live
    /// time), hardware on a card.
    time_mode: tlpx_device::TimeMode,
    plan: Plan,
    /// Sequence number of the record that matched the trigger (also in the trace's footer).
    trigger_sequence: Option<u32>,
    /// The capture's own ring writes on the link it observes.
    own_traffic: OwnTrafficSummary,
    /// MSIs the card sent during the capture (recorded or not).
    msis: u64,
}

/// The spy's own ring writes over a span of card time, and their share of the link.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct OwnTrafficSummary {
    pub tlps: u64,
    /// Header and payload bytes (the datapath's, as the spy's byte counters).
    pub bytes: u64,
    /// On the wire: plus the link's framing per TLP (tlpx-model's TLP_FRAMING_BYTES).
    pub wire_bytes: u64,
    /// `wire_bytes` over what the card-to-host direction carries for TLPs in the span (the
    /// link model's TLP bandwidth for the link libpci reports); None without a link model.
    pub link_share: Option<f64>,
}

/// The own-traffic figures of `own` over `seconds` of card time on `link`.
pub(crate) fn own_traffic(own: &spy::OwnTraffic, link: Option<&tlpx_model::link::LinkConfig>, seconds: f64) -> OwnTrafficSummary {
    let wire_bytes = own.bytes + own.tlps * u64::from(tlpx_model::link::TLP_FRAMING_BYTES);
    let link_share =
        link.map(|l| l.tlp_bytes_per_second() * seconds).filter(|carried| *carried > 0.0).map(|carried| wire_bytes as f64 / carried);
    OwnTrafficSummary { tlps: own.tlps, bytes: own.bytes, wire_bytes, link_share }
}

impl OwnTrafficSummary {
    /// "N TLPs, B bytes (W on the wire, X% of the link's card-to-host direction)".
    pub(crate) fn describe(&self) -> String {
        let share = match self.link_share {
            Some(s) => format!(", {:.2}% of the link's card-to-host direction", s * 100.0),
            None => String::new(),
        };
        format!("{} TLPs, {} bytes ({} on the wire{share})", self.tlps, self.bytes, self.wire_bytes)
    }
}

/// What ended a capture.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
enum EndedBy {
    Duration,
    Records,
    Trigger,
    Signal,
    SpyStop,
    OutputClosed,
}

/// Records reach the disk at least this often (and every [`FLUSH_RECORDS`]): a capture killed
/// outright (SIGKILL) leaves a readable trace up to what the host had received.
const FLUSH_EVERY: Duration = Duration::from_millis(100);
const FLUSH_RECORDS: u64 = 1024;

struct Sink {
    writer: TraceWriter<BufWriter<File>>,
    gaps: GapDetector,
    gap_texts: Vec<String>,
    /// The running log: records folded into entries (a TLP with its payload), then put in
    /// time order across directions within a bounded window (tlpx_trace::log::TimeSorter says
    /// why the window suffices); the last line printed, for its delta.
    entries: tlpx_trace::EntryBuilder,
    sorter: tlpx_trace::log::TimeSorter,
    previous: Option<Record>,
    clock_hz: u64,
    /// BAR0's address: the running log names the registers host requests hit.
    names: Option<tlpx_trace::Bar0Names>,
    log: bool,
    stdout: std::io::StdoutLock<'static>,
    /// The reader of the running log went away (EPIPE): the capture stops as after Ctrl-C.
    output_closed: bool,
    unflushed: u64,
    flushed_at: Instant,
}

impl Sink {
    /// A line of the running log; a closed stdout stops the log and asks the capture to stop.
    fn say(&mut self, line: std::fmt::Arguments<'_>) {
        if !self.log || self.output_closed {
            return;
        }
        if writeln!(self.stdout, "{line}").is_err() {
            self.output_closed = true;
            self.log = false;
            crate::output::mark_output_closed();
        }
    }

    /// Prints log lines the time sorter released.
    fn log_sorted(&mut self, held: Vec<tlpx_trace::log::Held>) {
        if held.is_empty() {
            return;
        }
        let mut text = Vec::new();
        let _ = tlpx_trace::log::write_sorted(&mut text, held, &mut self.previous, self.clock_hz, self.names.as_ref());
        for line in String::from_utf8_lossy(&text).lines() {
            self.say(format_args!("{line}"));
        }
    }

    /// The end of the capture: the log lines still held, in time order. `next_sequence` is the
    /// spy's next (a payload record lost at the very end marks its TLP's payload incomplete).
    fn end_log(&mut self, next_sequence: u32) {
        if self.log {
            if let Some(info) = self.entries.finish(Some(next_sequence)) {
                let held = self.sorter.push(info);
                self.log_sorted(held);
            }
            let held = self.sorter.finish();
            self.log_sorted(held);
        }
    }

    fn take(&mut self, batch: &[[u8; RECORD_BYTES]]) -> anyhow::Result<()> {
        for raw in batch {
            self.writer.write_raw(raw).context("writing the trace")?;
            self.unflushed += 1;
            let record = Record::from_bytes(raw).map_err(|e| anyhow!("the spy delivered a record this tlpx cannot decode: {e}"))?;
            if let Some(gap) = self.gaps.push(record.sequence) {
                let text = gap.to_string();
                // The running log says it in time order, before the record after the gap.
                if !self.log {
                    eprintln!("tlpx: warning: {text} (ring full)");
                }
                self.gap_texts.push(text);
            }
            if self.log {
                if let Some(info) = self.entries.push(record) {
                    let held = self.sorter.push(info);
                    self.log_sorted(held);
                }
            }
        }
        if self.unflushed >= FLUSH_RECORDS || (self.unflushed > 0 && self.flushed_at.elapsed() >= FLUSH_EVERY) {
            self.writer.flush().context("writing the trace")?;
            self.unflushed = 0;
            self.flushed_at = Instant::now();
        }
        Ok(())
    }
}

/// BAR0's bus address from config space (the trace header records it, `top` hides its own
/// accesses with it; both name BAR0 registers with it) (memory BAR, 32- or 64-bit).
pub(crate) fn bar0_address(card: &mut tlpx_device::card::Card) -> Option<u64> {
    let cfg = card.device().config_read(0x10, 8).ok()?;
    let low = u32::from_le_bytes(cfg[0..4].try_into().ok()?);
    if low & 1 != 0 {
        return None; // an I/O BAR: not ours
    }
    let high = if (low >> 1) & 3 == 2 { u32::from_le_bytes(cfg[4..8].try_into().ok()?) } else { 0 };
    Some(u64::from(high) << 32 | u64::from(low & !0xf))
}

/// The names for this card's BAR0 (`spy.wr_index`) and slot tags: BAR0's bus address, where
/// tlpx's map is in it, and the slot's DUT. None when BAR0's address cannot be read.
pub(crate) fn bar0_names(card: &mut tlpx_device::card::Card) -> Option<tlpx_trace::Bar0Names> {
    let base = bar0_address(card)?;
    let dut = crate::slot::dut_name(card).ok();
    Some(tlpx_trace::Bar0Names::new(base).with_slot(card.tlpx_base(), dut))
}

/// The trace header of a capture on this session's card (its identity, BAR0's address, where
/// tlpx's map is and who is in the slot, so that readers name registers and attribute tags),
/// and the names the running log uses. `tlpx slot run --spy` writes the same header.
pub(crate) fn trace_header(
    session: &mut Session,
    filters: &Filters,
    trigger: &Trigger,
    time_mode: tlpx_device::TimeMode,
) -> anyhow::Result<(HeaderInfo, Option<tlpx_trace::Bar0Names>)> {
    let id = session.card.identity().clone();
    let clock_hz = u64::from(session.clock_hz);
    let names = bar0_names(&mut session.card);
    let mut info = HeaderInfo::new(
        format!("tlpx {}", env!("CARGO_PKG_VERSION")),
        CardInfo {
            map_hash: Some(format!("0x{:08x}", id.map_hash)),
            data_width: Some(id.data_width),
            clock_hz,
            pci_address: session.environment.pci_address.clone(),
            bar0_address: names.as_ref().map(|n| format!("{:#x}", n.base)),
            tlpx_map_offset: names.as_ref().filter(|n| n.tlpx_base != 0).map(|n| format!("{:#x}", n.tlpx_base)),
            slot_dut: names.as_ref().and_then(|n| n.dut.clone()),
            slot_registers: Vec::new(),
        },
    );
    info.simulated = session.environment.simulated;
    info.time_mode = Some(time_mode.name().to_string());
    info.link =
        session.link.as_ref().map(|l| LinkInfo { generation: l.generation, lanes: l.lanes, mps: l.mps as u16, mrrs: l.mrrs as u16 });
    info.capture.filters = serde_json::to_value(filters)?;
    info.capture.trigger = serde_json::to_value(trigger)?;
    info.capture.include_own_traffic = filters.include_own;
    Ok((info, names))
}

fn capture(a: &CaptureArgs, device: &str, json: bool) -> anyhow::Result<ExitCode> {
    let plan = Plan::parse(a)?;
    // A bad --regs file is refused before the card is opened.
    let loaded = crate::cmd::reg::load_map(a.regs.as_ref())?;
    let started = Instant::now();
    let mut session = Session::open_observer(device)?;
    let (mps, _) = session.mps_mrrs();
    session.card.require(Feature::Spy, "spy")?;
    if a.regs.is_some() {
        loaded.check(&mut session.card, &[])?;
    }
    // Live time for the whole capture (it ends with this process's connection): the traffic
    // another process starts while this one sleeps between polls runs and is recorded.
    session.hold_live_time()?;
    let time_mode = session.environment.time_mode_at_start().unwrap_or(tlpx_device::TimeMode::Hardware);
    let clock_hz = u64::from(session.clock_hz);
    let link_model = session.link.as_ref().and_then(|l| l.model(false));
    let (mut info, mut names) = trace_header(&mut session, &plan.filters, &plan.trigger, time_mode)?;
    if a.regs.is_some() {
        let dut = crate::slot::dut_name(&mut session.card)?;
        info.card.slot_registers = crate::cmd::reg::slot_registers(&loaded.map, &dut);
        names = names.map(|n| n.with_dut_registers(info.card.slot_registers.clone()));
    }
    // The spy first: a capture refused because another owns the spy leaves --output as it was.
    session.card.claim(Block::Spy)?;
    for note in session.card.take_notes() {
        eprintln!("tlpx: note: {note}");
    }
    let mut writer = TraceWriter::create(&a.output, &info).with_context(|| format!("creating {}", a.output.display()))?;
    // The header is on disk before the first record: a capture killed at any moment leaves a
    // trace that reads (up to its last flushed record, without footer).
    writer.flush().with_context(|| format!("writing {}", a.output.display()))?;
    let log = !a.quiet && !json;
    let mut sink = Sink {
        writer,
        gaps: GapDetector::new(),
        gap_texts: Vec::new(),
        entries: tlpx_trace::EntryBuilder::new(),
        sorter: tlpx_trace::log::TimeSorter::new(),
        previous: None,
        clock_hz,
        names,
        log,
        stdout: std::io::stdout().lock(),
        output_closed: false,
        unflushed: 0,
        flushed_at: Instant::now(),
    };
    let until = match (plan.duration_s, plan.records) {
        (Some(_), _) => format!("for {} of card time", a.duration.as_deref().unwrap_or_default().trim()),
        (None, Some(n)) => format!("until {n} records have arrived"),
        (None, None) => "until Ctrl-C, SIGTERM or `tlpx spy stop`".to_string(),
    };
    sink.say(format_args!("{}", session.describe()));
    progress::install_stop_handler();
    let card = &mut session.card;
    let mut cap = Capture::start_with_mps(card, plan.ring, mps, &plan.filters, &plan.trigger)?;
    let transport = if cap.through_driver_writer() {
        // LitePCIe's driver owns the DMA buffers: the records travel in its writer ring. Said
        // on stderr too when --ring was given, which does not apply there (-q or not).
        if a.ring != DEFAULT_RING_RECORDS {
            eprintln!(
                "tlpx: note: --ring {} does not apply through LitePCIe's driver: the records go into its ring of {} records",
                a.ring,
                cap.ring_records()
            );
        }
        format!("through LitePCIe's DMA writer into its driver's ring of {} records; --ring does not apply", cap.ring_records())
    } else {
        format!("ring {} records", cap.ring_records())
    };
    sink.say(format_args!("capturing to {} ({transport}) {until}; times are card time, dur/lat in cycles", a.output.display()));
    sink.say(format_args!("{}", tlpx_trace::log_title()));
    let poll = Duration::from_secs_f64(plan.poll_s);
    // Card time from the device's clock (the simulator's cycle count, which moves no TLP; the
    // host's on hardware, where they are the same time): in live time card time runs while
    // this process computes too, not only during its waits.
    let t0 = card.device().clock_ns()?;
    let mut elapsed = Duration::ZERO;
    let mut batch = Vec::new();
    let result = (|| -> anyhow::Result<EndedBy> {
        loop {
            cap.poll(card, &mut batch)?;
            sink.take(&batch)?;
            batch.clear();
            if sink.output_closed {
                return Ok(EndedBy::OutputClosed);
            }
            if plan.records.is_some_and(|n| cap.delivered() >= n) {
                return Ok(EndedBy::Records);
            }
            elapsed = Duration::from_nanos(card.device().clock_ns()?.saturating_sub(t0));
            if plan.duration_s.is_some_and(|d| elapsed.as_secs_f64() >= d) {
                return Ok(EndedBy::Duration);
            }
            if progress::stop_requested() || tlpx_device::stop::requested() {
                return Ok(EndedBy::Signal);
            }
            if plan.trigger.mode != TriggerMode::Off && tlpx_regs::spy::status::STOPPED.get(card.read(tlpx_regs::spy::STATUS)?) != 0 {
                return Ok(EndedBy::Trigger);
            }
            match card.idle(poll) {
                Err(tlpx_device::DeviceError::Interrupted) => return Ok(EndedBy::Signal),
                // The spy was taken back (`tlpx spy stop` where this process could not be
                // signalled): it stopped recording and wrote what it could into the ring
                // before the lease went; drain that and finish.
                Err(tlpx_device::DeviceError::LeaseLost { .. }) => return Ok(EndedBy::SpyStop),
                other => other?,
            }
        }
    })();
    // Stop in any case, so the card is not left capturing into a freed ring; whatever went
    // wrong, what was received is flushed to the trace (without footer if the capture failed).
    let through_driver_writer = cap.through_driver_writer();
    let end = cap.stop_into(card, &mut batch).context("stopping the capture");
    elapsed = card.device().clock_ns().map_or(elapsed, |t| Duration::from_nanos(t.saturating_sub(t0)));
    let (ended_by, end): (EndedBy, CaptureEnd) = match (result, end) {
        (Ok(why), Ok(end)) => (why, end),
        (Err(e), _) | (Ok(_), Err(e)) => {
            let _ = sink.take(&batch);
            let _ = sink.writer.finish_without_footer();
            return Err(e);
        }
    };
    sink.take(&batch)?;
    sink.end_log(end.next_sequence);
    if let Some(gap) = sink.gaps.push(end.next_sequence) {
        let text = format!("{gap} (at the end of the capture)");
        if !json {
            eprintln!("tlpx: warning: {text}");
        }
        sink.gap_texts.push(text);
    }
    let written = sink.writer.records_written();
    sink.writer
        .finish(
            end.next_sequence,
            Footer { records_created: end.records_created, records_lost: end.records_lost, trigger_sequence: end.trigger_sequence },
        )
        .context("finishing the trace")?;
    // pcapng from the finished trace: the trace is the capture's record (it is on disk as the
    // capture runs, a killed capture leaves it readable); pcapng is a view of it.
    let pcapng_packets = match &a.pcapng {
        Some(path) => Some(write_pcapng(&a.output, path)?),
        None => None,
    };
    // Being stopped is the end of a capture that has none of its own; one with an end of its
    // own (--duration, --records, a trigger) was cut short.
    let planned_end = plan.duration_s.is_some() || plan.records.is_some() || plan.trigger.mode != TriggerMode::Off;
    let interrupted = planned_end && matches!(ended_by, EndedBy::Signal | EndedBy::SpyStop);
    let summary = CaptureSummary {
        output: a.output.display().to_string(),
        pcapng: a.pcapng.as_ref().map(|p| p.display().to_string()),
        pcapng_packets,
        through_driver_writer,
        records_written: written,
        records_created: end.records_created,
        records_lost: end.records_lost,
        records_held_before_trigger: end.records_held,
        sequence_gaps: sink.gap_texts.clone(),
        card_seconds: elapsed.as_secs_f64(),
        wall_seconds: started.elapsed().as_secs_f64(),
        triggered: end.triggered,
        interrupted,
        ended_by,
        time_mode,
        plan,
        trigger_sequence: end.trigger_sequence,
        own_traffic: own_traffic(&end.own, link_model.as_ref(), elapsed.as_secs_f64()),
        msis: end.msi_count,
    };

    if sink.output_closed {
        // Nobody reads the log any more: the trace is complete; say nothing, exit as a
        // process killed by SIGPIPE would (128 + 13), after cleaning up.
        return Ok(ExitCode::from(141));
    }
    if json {
        print_json(&summary)?;
    } else {
        let why = match summary.ended_by {
            EndedBy::Signal => " (stopped by Ctrl-C, SIGTERM or `tlpx spy stop`)",
            EndedBy::SpyStop => " (the spy was taken back from it: `tlpx spy stop`)",
            _ => "",
        };
        crate::outln!(
            "{} records written to {} in {:.3} ms of card time ({}; {:.2} s wall){why}; the spy created {}, lost {}",
            summary.records_written,
            summary.output,
            summary.card_seconds * 1e3,
            match summary.time_mode {
                tlpx_device::TimeMode::Live => "live time: not reproducible",
                tlpx_device::TimeMode::Virtual => "virtual time",
                tlpx_device::TimeMode::RealHostTime => "real host time: not reproducible",
                tlpx_device::TimeMode::Hardware => "hardware",
            },
            summary.wall_seconds,
            summary.records_created,
            summary.records_lost
        );
        crate::outln!("the spy's own ring writes: {}; MSIs sent by the card: {}", summary.own_traffic.describe(), summary.msis);
        if let Some(seq) = summary.trigger_sequence {
            crate::outln!("the trigger matched record {seq}");
        }
        if let (Some(path), Some(n)) = (&summary.pcapng, summary.pcapng_packets) {
            crate::outln!("{n} packets written to {path} (pcapng; open it with wireshark/tlpx.lua: docs/wireshark.md)");
        }
        if summary.records_held_before_trigger > 0 {
            crate::outln!(
                "the start trigger never matched: {} pre-trigger records were held and not written",
                summary.records_held_before_trigger
            );
        }
        if summary.records_lost > 0 {
            eprintln!(
                "tlpx: {} records lost ({} sequence gaps): the ring was full; use {}a shorter --poll, or filters",
                summary.records_lost,
                summary.sequence_gaps.len(),
                if summary.through_driver_writer { "" } else { "a larger --ring, " }
            );
        }
    }
    Ok(if summary.records_lost > 0 {
        ExitCode::from(1)
    } else if interrupted {
        ExitCode::from(progress::INTERRUPTED_EXIT)
    } else {
        ExitCode::SUCCESS
    })
}

// Stats ---------------------------------------------------------------------------------------

#[derive(Debug, Serialize)]
struct Stats {
    counters: spy::SpyCounters,
    /// The spy's own ring writes since the last clear (also in `counters.own`), with their
    /// share of the card-to-host bytes the spy counted.
    own_traffic: StatsOwn,
    classes: [&'static str; 8],
    /// Bucket k counts latencies in [2^k, 2^(k+1)) card cycles.
    latency_histogram: Vec<u64>,
    /// Bucket k counts payloads in [2^k, 2^(k+1)) bytes.
    payload_histogram_down: Vec<u64>,
    payload_histogram_up: Vec<u64>,
    clock_hz: u32,
}

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
        own_traffic,
        classes: CLASSES,
        latency_histogram,
        payload_histogram_down,
        payload_histogram_up,
        clock_hz: session.clock_hz,
    };
    if let Some(path) = &a.output {
        #[derive(Serialize)]
        struct Body<'a> {
            points: [&'a Stats; 1],
        }
        #[derive(Serialize)]
        struct Params {
            clear: bool,
        }
        let doc = crate::results::ResultDoc::new(
            "spy",
            Params { clear: a.clear },
            session.environment.clone(),
            session.link.clone(),
            None,
            Body { points: [&stats] },
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
    let own = &stats.own_traffic;
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

// Convert -------------------------------------------------------------------------------------

/// Writes a converter's output `out` (given with `flag`) from the trace `input`: checked as a
/// capture checks its outputs (folder created, not a folder or a special file), refused when it
/// is the input itself (which it would destroy), written into a temporary file beside it and
/// renamed over it only when the conversion succeeded, so a trace that fails half-way leaves
/// no partial output behind (and an older file of that name whole).
fn write_converted<T>(
    flag: &str,
    input: &std::path::Path,
    out: &std::path::Path,
    write: impl FnOnce(BufWriter<File>) -> anyhow::Result<T>,
) -> anyhow::Result<T> {
    check_output_file(flag, out)?;
    if crate::args::same_file(input, out) {
        bail!("{flag} {}: that is the trace being converted ({}); give the output another name", out.display(), input.display());
    }
    let name = out.file_name().map_or_else(|| "output".into(), |n| n.to_string_lossy().into_owned());
    let tmp = out.with_file_name(format!(".{name}.{}.tmp", std::process::id()));
    let file =
        File::create(&tmp).map(BufWriter::new).with_context(|| format!("{flag} {}: cannot create {}", out.display(), tmp.display()))?;
    // A second Ctrl-C (or SIGTERM) quits at once: it removes the temporary file first.
    progress::partial_output(&tmp);
    let result = write(file).and_then(|v| {
        std::fs::rename(&tmp, out).with_context(|| format!("{flag} {}: cannot rename {} to it", out.display(), tmp.display()))?;
        Ok(v)
    });
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    progress::forget_partial(&tmp);
    result
}

/// A trace file's bytes for a conversion that a signal (Ctrl-C, SIGTERM, SIGHUP) coming after
/// it began ends: the next read fails, the conversion stops, its partial output is removed.
struct StopOnSignal {
    file: File,
    signals_at_start: u32,
}

impl std::io::Read for StopOnSignal {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        if progress::signals() > self.signals_at_start {
            // Not ErrorKind::Interrupted: read_exact would retry that.
            return Err(std::io::Error::other("stopped by a signal (Ctrl-C, SIGTERM or SIGHUP)"));
        }
        self.file.read(buf)
    }
}

impl std::io::Seek for StopOnSignal {
    fn seek(&mut self, pos: std::io::SeekFrom) -> std::io::Result<u64> {
        self.file.seek(pos)
    }
}

/// Opens the trace at `path` for a conversion: a regular file (a trace is read with seeks,
/// from its end too: /dev/zero or a FIFO are refused, not read or waited for without end),
/// read through [`StopOnSignal`].
fn open_trace(path: &std::path::Path) -> anyhow::Result<TraceReader<std::io::BufReader<StopOnSignal>>> {
    crate::input::regular_file(path).map_err(|e| anyhow!("{}: {e}", path.display()))?;
    progress::install_stop_handler();
    let file = File::open(path).with_context(|| format!("opening {}", path.display()))?;
    let inner = std::io::BufReader::with_capacity(1 << 16, StopOnSignal { file, signals_at_start: progress::signals() });
    TraceReader::new(inner).map_err(|e| anyhow!("{}: {e}", path.display()))
}

/// The exit of a conversion that failed: 130 when a signal stopped it (said, no output),
/// else the error.
fn conversion_failed(e: anyhow::Error, signals_at_start: u32) -> anyhow::Result<ExitCode> {
    if progress::signals() > signals_at_start {
        eprintln!("tlpx: conversion stopped by a signal; no output was written ({e:#})");
        return Ok(ExitCode::from(progress::INTERRUPTED_EXIT));
    }
    Err(e)
}

/// Converts the trace at `trace` to pcapng at `out`; returns the packets written.
fn write_pcapng(trace: &std::path::Path, out: &std::path::Path) -> anyhow::Result<u64> {
    let reader = open_trace(trace)?;
    write_converted("--pcapng", trace, out, |file| {
        tlpx_trace::pcapng::trace_to_pcapng(reader, file).map_err(|e| anyhow!("writing {} from {}: {e}", out.display(), trace.display()))
    })
}

fn convert(a: &ConvertArgs, json: bool) -> anyhow::Result<ExitCode> {
    if a.csv.is_none() && a.vcd.is_none() && a.pcapng.is_none() && !a.log {
        bail!("say what to write: --csv OUT, --vcd OUT, --pcapng OUT or --log");
    }
    let signals_at_start = progress::signals();
    match convert_trace(a, json) {
        Ok(code) => Ok(code),
        Err(e) => conversion_failed(e, signals_at_start),
    }
}

fn convert_trace(a: &ConvertArgs, json: bool) -> anyhow::Result<ExitCode> {
    let reader = open_trace(&a.file)?;
    let input = &a.file;
    let failed = |e: tlpx_trace::TraceError| anyhow!("{}: {e}", input.display());
    let (what, rows) = if let Some(out) = &a.csv {
        ("CSV", write_converted("--csv", input, out, |f| tlpx_trace::csv::trace_to_csv(reader, f).map_err(failed))?)
    } else if let Some(out) = &a.vcd {
        ("VCD", write_converted("--vcd", input, out, |f| tlpx_trace::vcd::trace_to_vcd(reader, f).map_err(failed))?)
    } else if let Some(out) = &a.pcapng {
        ("pcapng", write_converted("--pcapng", input, out, |f| tlpx_trace::pcapng::trace_to_pcapng(reader, f).map_err(failed))?)
    } else if a.log {
        let clock = reader.clock_hz();
        let footer = reader.footer_record().copied();
        let names = tlpx_trace::Bar0Names::from_header(reader.header());
        let mut out = std::io::stdout().lock();
        writeln!(out, "{}", tlpx_trace::log_title())?;
        // In time order across directions, within the bounded window of TimeSorter.
        let mut entries = tlpx_trace::EntryBuilder::new();
        let mut sorter = tlpx_trace::log::TimeSorter::new();
        let mut previous: Option<Record> = None;
        let mut rows = 0;
        for record in reader {
            let record = record.map_err(|e| anyhow!("{}: {e}", a.file.display()))?;
            if let Some(info) = entries.push(record) {
                rows += 1;
                tlpx_trace::log::write_sorted(&mut out, sorter.push(info), &mut previous, clock, names.as_ref())?;
            }
        }
        if let Some(info) = entries.finish(footer.map(|f| f.sequence)) {
            rows += 1;
            tlpx_trace::log::write_sorted(&mut out, sorter.push(info), &mut previous, clock, names.as_ref())?;
        }
        tlpx_trace::log::write_sorted(&mut out, sorter.finish(), &mut previous, clock, names.as_ref())?;
        if let Some(f) = footer {
            let lost = entries.end_gap(f.sequence);
            if lost > 0 {
                writeln!(out, "{:>12}  *** {lost} record{} lost at the end of the capture", "", if lost == 1 { "" } else { "s" })?;
            }
            writeln!(out, "{}", tlpx_trace::log_line(&f, previous.as_ref(), clock))?;
        } else {
            writeln!(out, "{:>12}  (no footer: the capture did not end cleanly)", "")?;
        }
        ("log", rows)
    } else {
        bail!("say what to write: --csv OUT, --vcd OUT, --pcapng OUT or --log");
    };
    if json {
        print_json(&serde_json::json!({ "format": what, "rows": rows }))?;
    } else if !a.log {
        let unit = match what {
            "pcapng" => "pcapng packets",
            "VCD" => "VCD records",
            _ => "CSV rows",
        };
        eprintln!("{rows} {unit} written");
    }
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base_mask_parsing() {
        assert_eq!(parse_base_mask("--address", "0x1000/0xF000", !3).expect("ok"), (0x1000, 0xF000));
        assert_eq!(parse_base_mask("--address", "0x18", !3).expect("ok"), (0x18, !3));
        assert!(parse_base_mask("--address", "0x1001/0xFFFF", !3).expect_err("unaligned").to_string().contains("bits outside"));
        assert!(parse_base_mask("--requester", "zz", 0xFFFF).expect_err("bad").to_string().contains("not a number"));
        assert_eq!(parse_types("--types", "mrd,cpld").expect("ok"), 0b1001);
        assert!(parse_directions("--dir", "sideways").is_err());
    }
}
