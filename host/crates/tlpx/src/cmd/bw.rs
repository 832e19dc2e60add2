//! `tlpx bw`: DMA bandwidth with the card's traffic generator, against the model.
//!
//! BW_RD, BW_WR and BW_RDWR (generator operations Read, Write, ReadWrite), swept over transfer
//! size, window, offset within a cache line and address pattern. For every point: the
//! payload throughput the card measured (card time: its cycle counter from the first request
//! to the last completion), the pcie-bench model's limit for the link libpci reports, the
//! efficiency achieved / model, the errors the card counted, and a data check: the card
//! checks what it reads, the host checks what the card wrote.
//!
//! For read+write, throughput and model are per stream (each direction carries one).

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::Context;
use clap::{Args, ValueEnum};
use serde::Serialize;
use tlpx_device::card::Feature;
use tlpx_device::generator::{
    self, AddressPattern, DataPattern, ErrorCounts, GenConfig, GenResult, LinkLimits, Operation, TransferSize, ValidGenConfig,
    MAX_TRANSFER_BYTES, TAGS,
};
use tlpx_device::DmaBuffer;
use tlpx_model::link::{self, CompletionSplit, LinkConfig};
use tlpx_model::stats::Summary;

use crate::args::{check_optional_output, refuse_duplicate_values, whole, whole_as};
use crate::output::{bytes, print_json};
use crate::progress::{self, Progress};
use crate::results::{self, Environment, ModelConfig, ResultDoc, SimLimit};
use crate::session::Session;
use crate::sizes::{parse_duration, parse_size_list};

/// Largest DMA window (and buffer) a sweep allocates.
pub const MAX_WINDOW: u64 = 64 << 20;
/// The shortest --duration: a run ends at its duration, and a transfer takes longer than a few
/// card cycles (a run of 1 ns moved nothing and passed).
const MIN_DURATION_SECONDS: f64 = 1e-6;
/// Transfers per point when neither --count nor --duration is given.
pub const DEFAULT_COUNT: u64 = 1000;
/// Most transfers one run may ask for.
pub const MAX_COUNT: u64 = 1_000_000_000;
/// Most runs per point.
pub const MAX_REPEAT: u32 = 1000;

// Arguments ------------------------------------------------------------------------------

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum BwOp {
    /// BW_RD: the card reads host memory.
    Read,
    /// BW_WR: the card writes host memory.
    Write,
    /// BW_RDWR: both at once.
    Rdwr,
}

impl BwOp {
    pub fn operation(self) -> Operation {
        match self {
            BwOp::Read => Operation::Read,
            BwOp::Write => Operation::Write,
            BwOp::Rdwr => Operation::ReadWrite,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PatternArg {
    /// Transfer n at (n × slot) mod window.
    Seq,
    /// Every transfer at the same address.
    Fixed,
    /// A slot of the window chosen by the card's LFSR.
    Random,
}

impl PatternArg {
    pub fn pattern(self) -> AddressPattern {
        match self {
            PatternArg::Seq => AddressPattern::Sequential,
            PatternArg::Fixed => AddressPattern::Fixed,
            PatternArg::Random => AddressPattern::Random,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DataArg {
    /// DW at byte address a holds a/4 + seed.
    Counter,
    /// DW at byte address a holds a hash of a/4 and the seed.
    Prbs,
}

impl DataArg {
    pub fn pattern(self) -> DataPattern {
        match self {
            DataArg::Counter => DataPattern::Counter,
            DataArg::Prbs => DataPattern::Prbs,
        }
    }
}

/// Generator options shared by `bw`, `lat` and `characterize`.
#[derive(Debug, Clone, Args)]
pub struct GenArgs {
    /// DMA windows (buffer bytes the transfers move in): powers of two up to 64M; a list or range.
    #[arg(long, default_value = "1M", allow_hyphen_values = true)]
    pub window: String,
    /// Offsets of each transfer within its slot (its cache line): 0..63 bytes; a list or range.
    #[arg(long, default_value = "0", allow_hyphen_values = true)]
    pub offset: String,
    /// Address patterns: seq, fixed, random (comma-separated for a sweep).
    #[arg(long, value_enum, value_delimiter = ',', default_value = "seq")]
    pub pattern: Vec<PatternArg>,
    /// Transfers per run (per stream for rdwr) [default: 1000 unless --duration is given].
    #[arg(long, value_parser = whole(0, MAX_COUNT), allow_negative_numbers = true)]
    pub count: Option<u64>,
    /// Card time per run, e.g. 500us or 2ms (with --count: whichever ends first).
    #[arg(long, allow_hyphen_values = true)]
    pub duration: Option<String>,
    /// Largest read request: a power of two, 4..MRRS [default: the link's MRRS].
    #[arg(long, value_parser = whole_as(4u32, 4096, "a power of two in 4..=4096 bytes"), allow_negative_numbers = true)]
    pub request_size: Option<u32>,
    /// Largest write payload: a power of two, 4..MPS [default: the link's MPS].
    #[arg(long, value_parser = whole_as(4u32, 4096, "a power of two in 4..=4096 bytes"), allow_negative_numbers = true)]
    pub payload_size: Option<u32>,
    /// Idle card cycles after each request.
    #[arg(long, default_value_t = 0, value_parser = whole(0, u32::MAX), allow_negative_numbers = true)]
    pub idle: u32,
    /// Force 64-bit (4 DW) request headers even below 4 GiB.
    #[arg(long)]
    pub addr64: bool,
    /// Data pattern written and checked.
    #[arg(long, value_enum, default_value_t = DataArg::Counter)]
    pub data: DataArg,
    /// Seed of the data pattern (and the card's address LFSR).
    #[arg(long, default_value_t = 1, value_parser = whole(0, u32::MAX), allow_negative_numbers = true)]
    pub seed: u32,
    /// Do not check data (neither the card's read check nor the host's check of writes).
    #[arg(long)]
    pub no_check: bool,
    /// Set the relaxed-ordering attribute on requests.
    #[arg(long)]
    pub ro: bool,
    /// Set the no-snoop attribute on requests.
    #[arg(long)]
    pub ns: bool,
    /// Runs per point; the point reports the summary over them (1..=1000).
    #[arg(long, default_value_t = 1, value_parser = whole(1, MAX_REPEAT), allow_negative_numbers = true)]
    pub repeat: u32,
}

#[derive(Debug, Args)]
pub struct Cmd {
    /// Operations: read, write, rdwr (comma-separated).
    #[arg(long, value_enum, value_delimiter = ',', default_value = "read,write,rdwr")]
    pub op: Vec<BwOp>,
    // Help from sizes_help(): the limit is the generator's, from the register map.
    #[arg(long, default_value = "64..4096", allow_hyphen_values = true, help = sizes_help())]
    pub sizes: String,
    /// Reads in flight at most: 1..=32, the generator's tags (the default keeps them all available).
    #[arg(long, default_value_t = TAGS, value_parser = whole(1, TAGS), allow_negative_numbers = true)]
    pub outstanding: u32,
    #[command(flatten)]
    pub gen: GenArgs,
    /// Also write the result document (JSON) to this file.
    #[arg(long, value_name = "FILE.json")]
    pub output: Option<PathBuf>,
}

/// `--sizes`' help, with the largest transfer the generator moves (tlpx_regs' constant).
fn sizes_help() -> &'static str {
    static HELP: std::sync::LazyLock<String> = std::sync::LazyLock::new(|| {
        format!("Transfer sizes: 64,256,4K or 64..4096 (doubling) or 64..512+64 (step); 1..{MAX_TRANSFER_BYTES} bytes.")
    });
    HELP.as_str()
}

/// The generator options after parsing, checked against everything but the link.
#[derive(Debug, Clone, Serialize, serde::Deserialize)]
pub struct Common {
    pub windows: Vec<u64>,
    pub offsets: Vec<u32>,
    pub patterns: Vec<PatternArg>,
    pub count: u64,
    pub duration_seconds: Option<f64>,
    pub request_size: Option<u32>,
    pub payload_size: Option<u32>,
    pub idle_cycles: u32,
    pub addr64: bool,
    pub data: DataArg,
    pub seed: u32,
    pub check: bool,
    pub relaxed_ordering: bool,
    pub no_snoop: bool,
    pub repeat: u32,
}

fn power_of_two_in(flag: &str, v: u32, lo: u32, hi: u32, what: &str) -> Result<(), String> {
    if v.is_power_of_two() && (lo..=hi).contains(&v) {
        Ok(())
    } else {
        Err(format!("{flag} must be a power of two in {lo}..={hi} bytes{what}, not {v}"))
    }
}

impl Common {
    /// Parses and checks what can be checked without the card.
    pub fn parse(a: &GenArgs) -> Result<Common, String> {
        let windows = parse_size_list("--window", &a.window, "powers of two in 64..=64M bytes")?;
        for &w in &windows {
            if !w.is_power_of_two() || !(64..=MAX_WINDOW).contains(&w) {
                return Err(format!("--window {w} is not a window tlpx sweeps: use a power of two from 64 to {MAX_WINDOW} bytes (64M)"));
            }
        }
        let offsets = parse_size_list("--offset", &a.offset, "0..=63 bytes")?
            .into_iter()
            .map(|o| {
                u32::try_from(o)
                    .ok()
                    .filter(|o| *o <= 63)
                    .ok_or_else(|| format!("--offset {o}: the offset within a cache line must be 0..=63 bytes"))
            })
            .collect::<Result<Vec<u32>, String>>()?;
        let duration_seconds = a.duration.as_deref().map(|d| parse_duration("--duration", d)).transpose()?;
        if let (Some(s), Some(text)) = (duration_seconds, a.duration.as_deref()) {
            if s < MIN_DURATION_SECONDS {
                return Err(format!(
                    "--duration {text}: shorter than 1us, and a run that short ends before its first transfer: give 1us or more"
                ));
            }
        }
        let count = match (a.count, duration_seconds) {
            (Some(0), None) => return Err("--count 0 needs a --duration (a run must end); use --count 1 or more".into()),
            (Some(c), _) if c > MAX_COUNT => return Err(format!("--count must be at most {MAX_COUNT}, not {c}")),
            (Some(c), _) => c,
            (None, Some(_)) => 0,
            (None, None) => DEFAULT_COUNT,
        };
        if let Some(r) = a.request_size {
            power_of_two_in("--request-size", r, 4, 4096, "")?;
        }
        if let Some(p) = a.payload_size {
            power_of_two_in("--payload-size", p, 4, 4096, "")?;
        }
        if !(1..=MAX_REPEAT).contains(&a.repeat) {
            return Err(format!("--repeat must be 1..={MAX_REPEAT}, not {}", a.repeat));
        }
        if a.pattern.is_empty() {
            return Err("--pattern needs at least one of seq, fixed, random".into());
        }
        refuse_duplicate_values("--pattern", &a.pattern)?;
        Ok(Common {
            windows,
            offsets,
            patterns: a.pattern.clone(),
            count,
            duration_seconds,
            request_size: a.request_size,
            payload_size: a.payload_size,
            idle_cycles: a.idle,
            addr64: a.addr64,
            data: a.data,
            seed: a.seed,
            check: !a.no_check,
            relaxed_ordering: a.ro,
            no_snoop: a.ns,
            repeat: a.repeat,
        })
    }
}

/// Parses and checks the transfer sizes given in `flag`.
pub fn transfer_sizes(flag: &str, text: &str) -> Result<Vec<u32>, String> {
    check_sizes(flag, &parse_size_list(flag, text, &format!("1..={MAX_TRANSFER_BYTES} bytes"))?)
}

/// Checks transfer sizes given in `flag` (the range is the block crate's [`TransferSize`]).
pub fn check_sizes(flag: &str, sizes: &[u64]) -> Result<Vec<u32>, String> {
    sizes
        .iter()
        .map(|&s| {
            TransferSize::new(s)
                .map(TransferSize::get)
                .map_err(|_| format!("{flag}: {s} is not a transfer size the generator moves: use 1..={MAX_TRANSFER_BYTES} bytes"))
        })
        .collect()
}

/// Builds and validates one generator configuration per point of the sweep, in the order
/// op, window, offset, pattern, size. `link` is the link's MPS/MRRS; `clock_hz` the card's.
///
/// Commands call it twice: before opening the card with [`LinkLimits::LARGEST`] and a 1 Hz
/// clock, so that every mistake that does not depend on the link is reported before the card is
/// touched (a long sweep must not fail at its first point), then with the link libpci reports.
pub fn build_configs(
    ops: &[Operation],
    sizes: &[u32],
    outstanding: u32,
    c: &Common,
    link: LinkLimits,
    clock_hz: u32,
) -> Result<Vec<ValidGenConfig>, String> {
    let LinkLimits { mps, mrrs } = link;
    if !(1..=TAGS).contains(&outstanding) {
        return Err(format!("--outstanding must be 1..={TAGS} (the card's tags), not {outstanding}"));
    }
    let request_size = c.request_size.unwrap_or(mrrs);
    if request_size > mrrs {
        return Err(format!(
            "--request-size {request_size} is above the link's MRRS of {mrrs} bytes (as libpci reports it): use a power of two in 4..={mrrs}"
        ));
    }
    let payload_size = c.payload_size.unwrap_or(mps);
    if payload_size > mps {
        return Err(format!(
            "--payload-size {payload_size} is above the link's MPS of {mps} bytes (as libpci reports it): use a power of two in 4..={mps}"
        ));
    }
    let duration_cycles = c.duration_seconds.map_or(0, |s| (s * f64::from(clock_hz)).ceil().max(1.0) as u64);
    let mut out = Vec::new();
    for &op in ops {
        for &window in &c.windows {
            for &offset in &c.offsets {
                for &pattern in &c.patterns {
                    for &size in sizes {
                        let mut g = GenConfig::new(op, size, c.count);
                        g.duration_cycles = duration_cycles;
                        g.request_size = request_size;
                        g.payload_size = payload_size;
                        g.idle_cycles = c.idle_cycles;
                        g.max_outstanding = outstanding;
                        g.address_pattern = pattern.pattern();
                        g.window = window;
                        g.offset = offset;
                        g.addr64 = c.addr64;
                        g.data_pattern = c.data.pattern();
                        g.check_data = c.check;
                        g.relaxed_ordering = c.relaxed_ordering;
                        g.no_snoop = c.no_snoop;
                        g.seed = c.seed;
                        if window < g.stride() {
                            return Err(format!(
                                "--window {window} is smaller than one transfer slot of {} bytes (transfer size {size} + offset {offset}, rounded up to a power of two): use --window {} or more",
                                g.stride(),
                                bytes(g.stride()).replace(' ', "").replace("iB", "")
                            ));
                        }
                        // As the driver's InvalidArgument says it ("invalid argument: ...").
                        let valid = g.validate(link, window).map_err(|e| {
                            format!(
                                "{} of {size} bytes, window {window}, offset {offset}: {}",
                                op_label(op),
                                tlpx_device::DeviceError::from(e)
                            )
                        })?;
                        out.push(valid);
                    }
                }
            }
        }
    }
    Ok(out)
}

/// The pcie-bench name of an operation.
pub fn op_label(op: Operation) -> &'static str {
    match op {
        Operation::Read => "BW_RD",
        Operation::Write => "BW_WR",
        Operation::ReadWrite => "BW_RDWR",
        Operation::WriteThenRead => "LAT_WRRD",
    }
}

/// Short name as `--op` spells it.
pub fn op_short(op: Operation) -> &'static str {
    match op {
        Operation::Read => "read",
        Operation::Write => "write",
        Operation::ReadWrite => "rdwr",
        Operation::WriteThenRead => "wrrd",
    }
}

pub fn pattern_short(p: AddressPattern) -> &'static str {
    match p {
        AddressPattern::Sequential => "seq",
        AddressPattern::Fixed => "fixed",
        AddressPattern::Random => "random",
    }
}

/// The model's operation for a generator operation (none for write-then-read).
pub fn model_operation(op: Operation) -> Option<link::Operation> {
    match op {
        Operation::Read => Some(link::Operation::Read),
        Operation::Write => Some(link::Operation::Write),
        Operation::ReadWrite => Some(link::Operation::ReadWrite),
        Operation::WriteThenRead => None,
    }
}

// Data check ---------------------------------------------------------------------------

/// What the host found in the buffer after the card wrote it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct HostCheck {
    /// Bytes examined (the whole window).
    pub checked_bytes: u64,
    /// Bytes that hold the pattern the card writes.
    pub written_bytes: u64,
    /// Bytes that hold neither the pattern nor what the host put there before the run.
    pub corrupt_bytes: u64,
    /// Bytes the card should have written (sequential and fixed patterns) but did not.
    pub missing_bytes: u64,
    /// Bytes outside the transfers that the card wrote anyway.
    pub stray_bytes: u64,
    /// Window offset of the first bad byte.
    pub first_bad_offset: Option<u64>,
}

impl HostCheck {
    pub fn bad(&self) -> u64 {
        self.corrupt_bytes + self.missing_bytes + self.stray_bytes
    }

    /// What was bad, for the text output: "2 corrupt, 0 missing, 1 stray bytes (first at +5)".
    pub fn bad_text(&self) -> String {
        format!(
            "{} corrupt, {} missing, {} stray bytes (first at +{})",
            self.corrupt_bytes,
            self.missing_bytes,
            self.stray_bytes,
            self.first_bad_offset.unwrap_or(0)
        )
    }

    fn add(&mut self, o: &HostCheck) {
        self.checked_bytes += o.checked_bytes;
        self.written_bytes += o.written_bytes;
        self.corrupt_bytes += o.corrupt_bytes;
        self.missing_bytes += o.missing_bytes;
        self.stray_bytes += o.stray_bytes;
        self.first_bad_offset = self.first_bad_offset.or(o.first_bad_offset);
    }
}

/// The pattern's bytes for a buffer at `bus_addr` (length rounded down to whole DWs).
pub fn pattern_bytes(len: usize, bus_addr: u64, pattern: DataPattern, seed: u32, complement: bool) -> Vec<u8> {
    let mut out = Vec::with_capacity(len);
    for i in 0..len / 4 {
        let w = generator::pattern_word(pattern, seed, bus_addr + 4 * i as u64);
        out.extend_from_slice(&(if complement { !w } else { w }).to_le_bytes());
    }
    out
}

/// Which window bytes `transfers` sequential or fixed transfers of `cfg` write; `None` for
/// random addresses (the card's LFSR picks the slots).
pub fn expected_written(cfg: &GenConfig, transfers: u64) -> Option<Vec<bool>> {
    let window = usize::try_from(cfg.window).ok()?;
    let stride = cfg.stride();
    let slots = match cfg.address_pattern {
        AddressPattern::Random => return None,
        AddressPattern::Fixed => transfers.min(1),
        AddressPattern::Sequential => transfers.min(cfg.window / stride),
    };
    let mut map = vec![false; window];
    for n in 0..slots {
        let start = ((n * stride) % cfg.window) as usize + cfg.offset as usize;
        let end = (start + cfg.transfer_size as usize).min(window);
        map[start..end].iter_mut().for_each(|b| *b = true);
    }
    Some(map)
}

/// Compares `got` (the window after a run) with `pattern` (what the card writes) and
/// `before` (what the host put there: the pattern's complement, byte for byte). `expected`
/// says which bytes must have been written, when known.
pub fn check_written(got: &[u8], pattern: &[u8], expected: Option<&[bool]>) -> HostCheck {
    let mut c = HostCheck { checked_bytes: got.len() as u64, ..HostCheck::default() };
    for (i, (&g, &p)) in got.iter().zip(pattern).enumerate() {
        let should = expected.map(|e| e[i]);
        let bad = if g == p {
            c.written_bytes += 1;
            if should == Some(false) {
                c.stray_bytes += 1;
                true
            } else {
                false
            }
        } else if g == !p {
            if should == Some(true) {
                c.missing_bytes += 1;
                true
            } else {
                false
            }
        } else {
            c.corrupt_bytes += 1;
            true
        };
        if bad && c.first_bad_offset.is_none() {
            c.first_bad_offset = Some(i as u64);
        }
    }
    c
}

/// Every byte must hold the pattern (read+write: the reads check the pattern and the writes
/// write the same pattern, so nothing else may appear).
pub fn check_unchanged(got: &[u8], pattern: &[u8]) -> HostCheck {
    let mut c = HostCheck { checked_bytes: got.len() as u64, ..HostCheck::default() };
    for (i, (&g, &p)) in got.iter().zip(pattern).enumerate() {
        if g == p {
            c.written_bytes += 1;
        } else {
            c.corrupt_bytes += 1;
            c.first_bad_offset.get_or_insert(i as u64);
        }
    }
    c
}

// Running ------------------------------------------------------------------------------

/// The card's error counters by name, as the text output shows them: the ones that counted
/// something, e.g. "5 unsupported request (UR), 2 data mismatches"; "none" when all are 0.
pub fn error_counts_text(e: &ErrorCounts) -> String {
    let named = [
        (e.unsupported_request, "unsupported request (UR)"),
        (e.completer_abort, "completer abort (CA)"),
        (e.other_status, "other completion status"),
        (e.poisoned, "poisoned"),
        (e.completion_timeouts, "completion timeouts"),
        (e.unexpected_completions, "unexpected completions"),
        (e.data_mismatches, "data mismatches"),
    ];
    let counted: Vec<String> = named.iter().filter(|(n, _)| *n > 0).map(|(n, what)| format!("{n} {what}")).collect();
    if counted.is_empty() {
        "none".to_string()
    } else {
        counted.join(", ")
    }
}

/// Total of the card's error counters.
pub fn error_total(e: &ErrorCounts) -> u64 {
    e.unsupported_request
        + e.completer_abort
        + e.other_status
        + e.poisoned
        + e.completion_timeouts
        + e.unexpected_completions
        + e.data_mismatches
}

fn add_errors(sum: &mut ErrorCounts, e: &ErrorCounts) {
    sum.unsupported_request += e.unsupported_request;
    sum.completer_abort += e.completer_abort;
    sum.other_status += e.other_status;
    sum.poisoned += e.poisoned;
    sum.completion_timeouts += e.completion_timeouts;
    sum.unexpected_completions += e.unexpected_completions;
    sum.data_mismatches += e.data_mismatches;
}

/// Card time a run may take before the host gives up: twenty times what the model (or, without
/// one, 50 MB/s) predicts, plus the idle cycles, plus 10 ms.
pub fn run_timeout(cfg: &GenConfig, model_bytes_per_second: Option<f64>, clock_hz: u32) -> Duration {
    let base = Duration::from_millis(10);
    if cfg.duration_cycles > 0 && cfg.count == 0 {
        return base + Duration::from_secs_f64(2.0 * cfg.duration_cycles as f64 / f64::from(clock_hz.max(1)));
    }
    let streams = if cfg.operation == Operation::ReadWrite || cfg.operation == Operation::WriteThenRead { 2.0 } else { 1.0 };
    let bytes = cfg.count as f64 * f64::from(cfg.transfer_size);
    let rate = model_bytes_per_second.filter(|r| *r > 0.0).unwrap_or(50e6);
    let idle = cfg.count as f64 * f64::from(cfg.idle_cycles) * (cfg.transfer_size as f64 / 64.0).max(1.0) / f64::from(clock_hz.max(1));
    // Latency-bound runs (one read outstanding): a few µs per transfer at worst.
    let latency = if cfg.max_outstanding <= 2 { cfg.count as f64 * 20e-6 } else { 0.0 };
    base + Duration::from_secs_f64((20.0 * streams * bytes / rate + 2.0 * idle + latency).min(3600.0))
}

/// One run: prepare the buffer, run the generator, check what the card wrote.
pub fn run_once(
    session: &mut Session,
    buffer: &DmaBuffer,
    cfg: &ValidGenConfig,
    timeout: Duration,
) -> anyhow::Result<(GenResult, Option<HostCheck>)> {
    let window = cfg.window as usize;
    let pattern = pattern_bytes(window, buffer.bus_addr, cfg.data_pattern, cfg.seed, false);
    // Writes land on the pattern's complement, so every byte the card wrote is visible; reads
    // need the pattern there to check it.
    let before_complement = matches!(cfg.operation, Operation::Write | Operation::WriteThenRead);
    if before_complement {
        buffer.write_bytes(0, &pattern.iter().map(|b| !b).collect::<Vec<u8>>())?;
    } else {
        buffer.write_bytes(0, &pattern)?;
    }
    let result = generator::run(&mut session.card, buffer, cfg, timeout)
        .with_context(|| format!("running the generator ({} of {} bytes)", op_label(cfg.operation), cfg.transfer_size))?;
    if !cfg.check_data {
        return Ok((result, None));
    }
    let mut got = vec![0u8; window];
    buffer.read_bytes(0, &mut got)?;
    let check = match cfg.operation {
        Operation::Read => None,
        Operation::ReadWrite => Some(check_unchanged(&got, &pattern)),
        Operation::Write | Operation::WriteThenRead => {
            let transfers = result.write_bytes / u64::from(cfg.transfer_size.max(1));
            let expected = expected_written(cfg, transfers);
            Some(check_written(&got, &pattern, expected.as_deref()))
        }
    };
    Ok((result, check))
}

/// One run as the point keeps it.
#[derive(Debug, Clone, Serialize, serde::Deserialize)]
pub struct RunRecord {
    pub cycles: u64,
    pub bytes_per_second: f64,
    pub transfers: u64,
    pub ended_by: String,
}

/// One point of a bandwidth sweep.
#[derive(Debug, Clone, Serialize, serde::Deserialize)]
pub struct BwPoint {
    pub operation: &'static str,
    pub transfer_size: u32,
    pub window: u64,
    pub offset: u32,
    pub pattern: &'static str,
    pub config: GenConfig,
    /// Payload bytes per second of card time (per stream for rdwr), over the runs.
    pub achieved_bytes_per_second: Summary,
    /// The model's limit for the link libpci reports (per stream for rdwr).
    pub model_bytes_per_second: Option<f64>,
    /// achieved / model as a fraction (1.0 = the model's limit), over the runs.
    pub efficiency: Option<Summary>,
    /// What `efficiency` is (unit, and on the simulator that it cannot exceed 1.0); null
    /// without a model.
    pub efficiency_meaning: Option<&'static str>,
    pub runs: Vec<RunRecord>,
    /// Sums over the runs.
    pub transfers: u64,
    pub read_requests: u64,
    pub read_bytes: u64,
    pub completions: u64,
    pub write_requests: u64,
    pub write_bytes: u64,
    pub card_errors: ErrorCounts,
    pub card_error_total: u64,
    /// The host's check of the buffer after writes (null for reads: the card checks those).
    pub host_check: Option<HostCheck>,
}

impl BwPoint {
    /// True when the point is not clean: card errors, bad data, a run that did not end by its
    /// count or duration, or no transfer at all (nothing was measured).
    pub fn failed(&self) -> bool {
        self.transfers == 0
            || self.card_error_total > 0
            || self.host_check.as_ref().is_some_and(|c| c.bad() > 0)
            || self.runs.iter().any(|r| r.ended_by != "count" && r.ended_by != "duration")
    }
}

/// The model configuration of a session for requests with or without 64-bit addresses.
pub fn session_model(session: &Session, addr64: bool) -> Option<LinkConfig> {
    session.link.as_ref().and_then(|l| l.model(addr64))
}

/// Runs one point `repeat` times and summarises it.
pub fn measure_point(session: &mut Session, buffer: &DmaBuffer, cfg: &ValidGenConfig, repeat: u32) -> anyhow::Result<BwPoint> {
    let model = session_model(session, cfg.addr64).and_then(|m| {
        model_operation(cfg.operation)
            .map(|op| link::analyse(&m, op, u64::from(cfg.transfer_size), CompletionSplit::Mps).bandwidth.bytes_per_second)
    });
    let timeout = run_timeout(cfg, model, session.clock_hz);
    let mut runs = Vec::new();
    let mut rates = Vec::new();
    let mut errors = ErrorCounts::default();
    let mut host_check: Option<HostCheck> = None;
    let mut sums = [0u64; 6];
    for i in 0..repeat {
        // Ctrl-C: keep the runs done so far (at least one) and stop.
        if i > 0 && crate::progress::stop_requested() {
            break;
        }
        let (r, check) = run_once(session, buffer, cfg, timeout)?;
        let clock = if r.clock_hz > 0 { r.clock_hz } else { session.clock_hz };
        let secs = r.cycles as f64 / f64::from(clock);
        let payload = match cfg.operation {
            Operation::Read => r.read_bytes as f64,
            Operation::Write => r.write_bytes as f64,
            Operation::ReadWrite | Operation::WriteThenRead => (r.read_bytes + r.write_bytes) as f64 / 2.0,
        };
        let rate = if secs > 0.0 { payload / secs } else { 0.0 };
        rates.push(rate);
        runs.push(RunRecord { cycles: r.cycles, bytes_per_second: rate, transfers: r.transfers_done, ended_by: r.ended_by.clone() });
        add_errors(&mut errors, &r.errors);
        for (s, v) in sums.iter_mut().zip([r.transfers_done, r.read_requests, r.read_bytes, r.completions, r.write_requests, r.write_bytes])
        {
            *s += v;
        }
        if let Some(c) = check {
            host_check.get_or_insert_with(HostCheck::default).add(&c);
        }
    }
    let achieved = Summary::of(&rates).context("no runs")?;
    let efficiency = model.and_then(|m| Summary::of(&rates.iter().map(|r| r / m).collect::<Vec<f64>>()));
    let efficiency_meaning = efficiency.as_ref().map(|_| efficiency_meaning(session.environment.simulated));
    Ok(BwPoint {
        operation: op_short(cfg.operation),
        transfer_size: cfg.transfer_size,
        window: cfg.window,
        offset: cfg.offset,
        pattern: pattern_short(cfg.address_pattern),
        config: cfg.config().clone(),
        achieved_bytes_per_second: achieved,
        model_bytes_per_second: model,
        efficiency,
        efficiency_meaning,
        runs,
        transfers: sums[0],
        read_requests: sums[1],
        read_bytes: sums[2],
        completions: sums[3],
        write_requests: sums[4],
        write_bytes: sums[5],
        card_error_total: error_total(&errors),
        card_errors: errors,
        host_check,
    })
}

/// DMA buffers by window size, allocated on first use and all freed by [`Buffers::free_all`].
#[derive(Default)]
pub struct Buffers {
    buffers: Vec<DmaBuffer>,
}

impl Buffers {
    pub fn get(&mut self, session: &mut Session, len: u64) -> anyhow::Result<&DmaBuffer> {
        let len = usize::try_from(len).context("window too large for this host")?;
        if let Some(i) = self.buffers.iter().position(|b| b.len == len) {
            return Ok(&self.buffers[i]);
        }
        let b = session
            .card
            .device()
            .alloc_dma(len)
            .with_context(|| format!("allocating a DMA buffer of {} for the window", bytes(len as u64)))?;
        self.buffers.push(b);
        Ok(self.buffers.last().expect("just pushed"))
    }

    /// Returns every buffer to the device; the first error is reported after all were tried.
    pub fn free_all(&mut self, session: &mut Session) -> anyhow::Result<()> {
        let mut first = Ok(());
        for b in self.buffers.drain(..) {
            if let Err(e) = session.card.device().free_dma(b) {
                if first.is_ok() {
                    first = Err(anyhow::Error::new(e).context("freeing a DMA buffer"));
                }
            }
        }
        first
    }
}

/// Runs `configs` in order with a progress bar: `measure` runs one point (buffers of the
/// window size are allocated once and all freed at the end, also on errors), `each` sees every
/// point as it completes. Stops early on Ctrl-C; returns the points and whether it did.
pub fn sweep<T>(
    session: &mut Session,
    configs: &[ValidGenConfig],
    progress: &Progress,
    mut measure: impl FnMut(&mut Session, &DmaBuffer, &ValidGenConfig) -> anyhow::Result<T>,
    mut each: impl FnMut(&T),
) -> anyhow::Result<(Vec<T>, bool)> {
    let mut buffers = Buffers::default();
    let mut points = Vec::new();
    let mut interrupted = false;
    let mut outcome = Ok(());
    for cfg in configs {
        if progress::stop_requested() {
            interrupted = true;
            break;
        }
        progress.start(&format!("{} {} window {}", op_short(cfg.operation), bytes(u64::from(cfg.transfer_size)), bytes(cfg.window)));
        let point = match buffers.get(session, cfg.window) {
            Ok(b) => measure(session, b, cfg),
            Err(e) => Err(e),
        };
        match point {
            Ok(p) => {
                each(&p);
                points.push(p);
                progress.done_one();
            }
            Err(e) if progress::is_interrupt(&e) => {
                interrupted = true;
                break;
            }
            Err(e) => {
                outcome = Err(e);
                break;
            }
        }
    }
    let freed = buffers.free_all(session);
    outcome?;
    freed?;
    Ok((points, interrupted))
}

// The command ---------------------------------------------------------------------------

#[derive(Debug, Serialize)]
struct Parameters {
    operations: Vec<&'static str>,
    sizes: Vec<u32>,
    outstanding: u32,
    #[serde(flatten)]
    common: Common,
    /// Resolved from the link when not given.
    request_size: u32,
    payload_size: u32,
    duration_cycles: u64,
}

#[derive(Debug, Serialize)]
struct Body {
    points: Vec<BwPoint>,
}

/// The column header of the point lines; on the simulator the efficiency column is `EFF*`,
/// its footnote being in [`legend`].
pub fn header_line(simulated: bool) -> String {
    format!(
        "{:<6} {:>7} {:>7} {:>3} {:<6} {:>21} {:>11} {:>8} {:>11} {:>6}  DATA",
        "OP",
        "SIZE",
        "WINDOW",
        "OFF",
        "PAT",
        "ACHIEVED MB/s",
        "MODEL MB/s",
        if simulated { "EFF*" } else { "EFF" },
        "TRANSFERS",
        "ERRORS"
    )
}

// What the figures are -------------------------------------------------------------------

/// `efficiency_meaning` of a point or table row: the unit, and on the simulator why it cannot
/// exceed 1.0.
pub fn efficiency_meaning(simulated: bool) -> &'static str {
    if simulated {
        "achieved / model as a fraction (1.0 = 100 % of the model's limit); SIMULATED: tlpx-sim paces its link with this same \
         model, so it cannot exceed 1.0 by construction: it shows how near the card's gateware comes to the model, not how \
         good a host is"
    } else {
        "achieved / model as a fraction (1.0 = 100 % of the model's limit): how near this host and card come to the link's limit"
    }
}

/// The lines above a table of points: the clock of the throughputs and what EFF is.
pub fn legend(env: &Environment) -> Vec<String> {
    let mut out = vec![format!(
        "clock: ACHIEVED is payload MB/s over {}, from the card's cycle counter; MODEL is arithmetic (tlpx-model)",
        env.card_clock()
    )];
    if env.simulated {
        out.push(
            "EFF* = ACHIEVED / MODEL in %. * SIMULATED: tlpx-sim paces its link with this same model, so EFF cannot exceed \
             100 % here (by construction): it shows how near the card's gateware comes to the model, not how good a host is"
                .to_string(),
        );
    } else {
        out.push("EFF = ACHIEVED / MODEL in %: how near this host and card come to the link's limit".to_string());
    }
    out
}

/// The simulator limit of every efficiency figure.
pub fn efficiency_limit() -> SimLimit {
    SimLimit::new(
        "efficiency_paced_by_the_model",
        &["points[].efficiency", "table[].efficiency"],
        "efficiency (achieved / model) cannot exceed 1.0 (100 %) by construction: tlpx-sim paces its link with the same \
         pcie-bench model it is compared with, so it shows how near the card's gateware comes to the model (transfer sizes, \
         datapath beats, the flushing read), not how good a host is; on a real host it is the finding",
    )
}

/// The simulator limit of the root complex's latency (a setting, not a measurement).
pub fn read_latency_limit(env: &Environment) -> Option<SimLimit> {
    let sim = env.sim.as_ref()?;
    Some(SimLimit::new(
        "dma_read_latency_configured",
        &["points[].latency_ns", "latency[].latency_ns"],
        format!(
            "the root complex's part of every DMA read is tlpx-sim's setting, {} ns + 0..{} ns uniform jitter (--dma-latency-ns, \
             --dma-jitter-ns, seed {}), not a measurement of a root complex, its caches or memory; the rest is the modelled link \
             and the card",
            sim.dma_latency_ns, sim.dma_jitter_ns, sim.seed
        ),
    ))
}

/// The knobs of `common` that the simulator cannot vary, when they are set away from their
/// defaults (`--window`, `--pattern`, `--ro`, `--ns`).
pub fn knob_limits(common: &Common) -> Vec<SimLimit> {
    let mut out = Vec::new();
    let window_set = common.windows != [1 << 20];
    let pattern_set = common.patterns != [PatternArg::Seq];
    if window_set || pattern_set {
        let flags: Vec<&str> = [("--window", window_set), ("--pattern", pattern_set)].iter().filter(|f| f.1).map(|f| f.0).collect();
        out.push(SimLimit::new(
            "window_and_address_pattern_not_modelled",
            &flags,
            format!(
                "{} only {} the card's addresses here: tlpx-sim has no host caches (no LLC, no DDIO), charges no IOMMU \
                 translation time (its IOMMU checks addresses only: no IOTLB, no page walks) and has no NUMA, so these \
                 figures cannot depend on {}; sweep {} on a real host",
                flags.join(" and "),
                if flags.len() == 1 { "moves" } else { "move" },
                if flags.len() == 1 { "it" } else { "them" },
                if flags.len() == 1 { "it" } else { "them" }
            ),
        ));
    }
    if common.relaxed_ordering || common.no_snoop {
        let flags: Vec<&str> = [("--ro", common.relaxed_ordering), ("--ns", common.no_snoop)].iter().filter(|f| f.1).map(|f| f.0).collect();
        out.push(SimLimit::new(
            "tlp_attributes_ignored",
            &flags,
            format!(
                "{} {} TLP attributes that tlpx-sim's root complex ignores (it neither reorders nor skips snooping), so \
                 {} nothing here; on a real host {} ordering and snooping",
                flags.join(" and "),
                if flags.len() == 1 { "sets" } else { "set" },
                if flags.len() == 1 { "it changes" } else { "they change" },
                if flags.len() == 1 { "it can change" } else { "they can change" }
            ),
        ));
    }
    out
}

pub fn point_line(p: &BwPoint) -> String {
    let a = &p.achieved_bytes_per_second;
    let achieved = if a.count > 1 {
        format!("{:.1} ({:.1}..{:.1})", a.median / 1e6, a.min / 1e6, a.max / 1e6)
    } else {
        format!("{:.1}", a.median / 1e6)
    };
    let model = p.model_bytes_per_second.map_or("-".to_string(), |m| format!("{:.1}", m / 1e6));
    let eff = p.efficiency.as_ref().map_or("-".to_string(), |e| format!("{:.1} %", e.median * 100.0));
    let data = if !p.config.check_data {
        "not checked".to_string()
    } else {
        let card = if p.read_bytes > 0 { format!("card {} bad DW", p.card_errors.data_mismatches) } else { String::new() };
        let host = p.host_check.as_ref().map(|c| if c.bad() == 0 { "host ok".to_string() } else { format!("host BAD: {}", c.bad_text()) });
        [Some(card).filter(|s| !s.is_empty()), host].into_iter().flatten().collect::<Vec<_>>().join(", ")
    };
    let ended: Vec<&str> = p.runs.iter().map(|r| r.ended_by.as_str()).filter(|e| *e != "count" && *e != "duration").collect();
    let ended = if ended.is_empty() { String::new() } else { format!("  ENDED BY {}", ended.join(",")) };
    let ended = if p.transfers == 0 { format!("{ended}  NO TRANSFER (nothing measured)") } else { ended };
    format!(
        "{:<6} {:>7} {:>7} {:>3} {:<6} {:>21} {:>11} {:>8} {:>11} {:>6}  {data}{ended}",
        p.operation,
        bytes(u64::from(p.transfer_size)),
        bytes(p.window),
        p.offset,
        p.pattern,
        achieved,
        model,
        eff,
        format!("{}x{}", p.runs.len(), p.transfers / p.runs.len().max(1) as u64),
        p.card_error_total
    )
}

pub fn run(cmd: &Cmd, device: &str, json: bool) -> anyhow::Result<ExitCode> {
    let started = Instant::now();
    let common = Common::parse(&cmd.gen).map_err(anyhow::Error::msg)?;
    let sizes = transfer_sizes("--sizes", &cmd.sizes).map_err(anyhow::Error::msg)?;
    refuse_duplicate_values("--op", &cmd.op).map_err(anyhow::Error::msg)?;
    let ops: Vec<Operation> = cmd.op.iter().map(|o| o.operation()).collect();
    // Everything that does not need the link is checked before touching the card, the output
    // path included (a long sweep must not end in "cannot write").
    build_configs(&ops, &sizes, cmd.outstanding, &common, LinkLimits::LARGEST, 1).map_err(anyhow::Error::msg)?;
    check_optional_output("--output", cmd.output.as_deref())?;

    let mut session = Session::open(device)?;
    if session.card.device().try_as_driver_dma().is_some() {
        // LitePCIe's driver owns the DMA buffers: its own DMA runs instead of the generator.
        return super::bw_driver::run(cmd, session, json, started);
    }
    let (mps, mrrs) = session.mps_mrrs();
    let configs =
        build_configs(&ops, &sizes, cmd.outstanding, &common, LinkLimits { mps, mrrs }, session.clock_hz).map_err(anyhow::Error::msg)?;
    session.card.require(Feature::Generator, "traffic generator")?;
    progress::install_stop_handler();

    let model = session_model(&session, common.addr64);
    let simulated = session.environment.simulated;
    let limits: Vec<SimLimit> =
        if simulated { model.iter().map(|_| efficiency_limit()).chain(knob_limits(&common)).collect() } else { Vec::new() };
    if !json {
        crate::outln!("{}", session.describe());
        match &model {
            Some(m) => crate::outln!("model: tlpx-model (pcie-bench) for {m}, completions up to MPS; rdwr figures are per stream"),
            None => crate::outln!("model: none for this link"),
        }
        for n in &session.notes {
            crate::outln!("note: {n}");
        }
        for line in legend(&session.environment) {
            crate::outln!("{line}");
        }
        // The efficiency's footnote is the legend; the knobs' notes are said once each.
        for l in limits.iter().filter(|l| l.id != "efficiency_paced_by_the_model") {
            crate::outln!("note: {}", l.note());
        }
        crate::outln!("{}", header_line(simulated));
    }
    let progress = Progress::new(configs.len() as u64, json);
    let repeat = common.repeat;
    let measure = |s: &mut Session, b: &DmaBuffer, c: &ValidGenConfig| measure_point(s, b, c, repeat);
    let (points, interrupted) = sweep(&mut session, &configs, &progress, measure, |p: &BwPoint| {
        if !json {
            progress.println(&point_line(p));
        }
    })?;
    progress.finish();
    let failed = points.iter().any(BwPoint::failed);
    let first = configs.first();
    let parameters = Parameters {
        operations: ops.iter().map(|o| op_short(*o)).collect(),
        sizes,
        outstanding: cmd.outstanding,
        request_size: first.map_or(mrrs, |c| c.request_size),
        payload_size: first.map_or(mps, |c| c.payload_size),
        duration_cycles: first.map_or(0, |c| c.duration_cycles),
        common,
    };
    let mut doc = ResultDoc::new(
        "bw",
        parameters,
        session.environment.clone(),
        session.link.clone(),
        model.map(|link| ModelConfig { link, completion_split: CompletionSplit::Mps }),
        Body { points },
        started.elapsed().as_secs_f64(),
        session.notes.clone(),
    );
    if interrupted {
        doc.stopped_at(doc.body.points.len(), configs.len());
    }
    for l in limits {
        doc.add_sim_limit(l);
    }
    if let Some(path) = &cmd.output {
        results::write_json(path, &doc)?;
    }
    if json {
        print_json(&doc)?;
    } else if interrupted {
        crate::outln!("interrupted: {} of {} points measured", doc.body.points.len(), configs.len());
    }
    Ok(if interrupted {
        ExitCode::from(progress::INTERRUPTED_EXIT)
    } else if failed {
        ExitCode::from(crate::exit::CHECK_FAILED)
    } else {
        ExitCode::SUCCESS
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args() -> GenArgs {
        GenArgs {
            window: "1M".into(),
            offset: "0".into(),
            pattern: vec![PatternArg::Seq],
            count: None,
            duration: None,
            request_size: None,
            payload_size: None,
            idle: 0,
            addr64: false,
            data: DataArg::Counter,
            seed: 1,
            no_check: false,
            ro: false,
            ns: false,
            repeat: 1,
        }
    }

    fn err_of(a: GenArgs) -> String {
        match Common::parse(&a) {
            Ok(c) => panic!("accepted {c:?}"),
            Err(e) => e,
        }
    }

    #[test]
    fn defaults_give_1000_transfers_over_1_mib() {
        let c = Common::parse(&args()).expect("valid");
        assert_eq!((c.windows.as_slice(), c.count, c.check), (&[1u64 << 20][..], DEFAULT_COUNT, true));
        let cfgs =
            build_configs(&[Operation::Read, Operation::Write], &[64, 4096], 32, &c, LinkLimits { mps: 256, mrrs: 512 }, 125_000_000)
                .expect("valid");
        assert_eq!(cfgs.len(), 4);
        assert_eq!((cfgs[0].request_size, cfgs[0].payload_size), (512, 256));
        assert_eq!((cfgs[3].operation, cfgs[3].transfer_size), (Operation::Write, 4096));
    }

    #[test]
    fn bad_arguments_name_the_flag_and_value() {
        let mut a = args();
        a.window = "3000".into();
        assert!(err_of(a).contains("--window 3000"));
        let mut a = args();
        a.offset = "64".into();
        assert!(err_of(a).contains("--offset 64"));
        let mut a = args();
        a.count = Some(0);
        assert!(err_of(a).contains("--count 0"));
        let mut a = args();
        a.request_size = Some(300);
        assert!(err_of(a).contains("--request-size must be a power of two"));
        let mut a = args();
        a.duration = Some("5 fortnights".into());
        assert!(err_of(a).contains("--duration"));
        let mut a = args();
        a.repeat = 0;
        assert!(err_of(a).contains("--repeat"));
        assert!(check_sizes("--sizes", &[0]).is_err_and(|e| e.contains("--sizes: 0")));
        assert!(check_sizes("--sizes", &[65537]).is_err_and(|e| e.contains("65537") && e.contains("1..=65536")));
    }

    #[test]
    fn the_sizes_help_names_the_generators_limit() {
        use clap::CommandFactory;
        #[derive(clap::Parser)]
        struct Bw {
            #[command(flatten)]
            cmd: Cmd,
        }
        let command = Bw::command();
        let sizes = command.get_arguments().find(|a| a.get_id() == "sizes").expect("--sizes");
        let help = sizes.get_help().expect("help").to_string();
        assert!(help.ends_with(&format!("; 1..{} bytes.", tlpx_regs::constants::GENERATOR_MAX_TRANSFER_BYTES)), "{help}");
    }

    #[test]
    fn link_limits_are_checked_with_the_link_named() {
        let mut c = Common::parse(&args()).expect("valid");
        c.request_size = Some(1024);
        let e = build_configs(&[Operation::Read], &[64], 32, &c, LinkLimits { mps: 256, mrrs: 512 }, 1).expect_err("above MRRS");
        assert!(e.contains("--request-size 1024") && e.contains("MRRS of 512"), "{e}");
        let mut c = Common::parse(&args()).expect("valid");
        c.payload_size = Some(512);
        let e = build_configs(&[Operation::Write], &[64], 32, &c, LinkLimits { mps: 256, mrrs: 512 }, 1).expect_err("above MPS");
        assert!(e.contains("--payload-size 512") && e.contains("MPS of 256"), "{e}");
        let c = Common::parse(&args()).expect("valid");
        let e = build_configs(&[Operation::Read], &[64], TAGS + 1, &c, LinkLimits { mps: 256, mrrs: 512 }, 1).expect_err("tags");
        assert!(e.contains(&format!("--outstanding must be 1..={TAGS}")) && e.contains(&format!("not {}", TAGS + 1)), "{e}");
        let mut a = args();
        a.window = "1K".into();
        let c = Common::parse(&a).expect("valid");
        let e = build_configs(&[Operation::Read], &[4096], 32, &c, LinkLimits { mps: 256, mrrs: 512 }, 1).expect_err("window");
        assert!(e.contains("--window 1024") && e.contains("4096") && e.contains("--window 4K"), "{e}");
    }

    #[test]
    fn knobs_the_simulator_cannot_vary_are_named_only_when_set() {
        assert!(knob_limits(&Common::parse(&args()).expect("defaults")).is_empty());
        let mut a = args();
        a.window = "4K,64M".into();
        a.pattern = vec![PatternArg::Seq, PatternArg::Random];
        a.ns = true;
        let l = knob_limits(&Common::parse(&a).expect("valid"));
        assert_eq!(l.iter().map(|l| l.id).collect::<Vec<_>>(), ["window_and_address_pattern_not_modelled", "tlp_attributes_ignored"]);
        assert_eq!(l[0].concerns, ["--window", "--pattern"]);
        assert!(l[0].statement.starts_with("--window and --pattern only move") && l[0].statement.contains("IOTLB"), "{l:?}");
        assert_eq!(l[1].concerns, ["--ns"]);
    }

    #[test]
    fn duration_becomes_card_cycles() {
        let mut a = args();
        a.duration = Some("2ms".into());
        let c = Common::parse(&a).expect("valid");
        assert_eq!(c.count, 0);
        let cfgs = build_configs(&[Operation::Write], &[256], 32, &c, LinkLimits { mps: 256, mrrs: 512 }, 125_000_000).expect("valid");
        assert_eq!(cfgs[0].duration_cycles, 250_000);
        assert_eq!(cfgs[0].count, 0);
    }

    #[test]
    fn expected_written_maps_sequential_and_fixed_slots() {
        let mut g = GenConfig::new(Operation::Write, 40, 3);
        g.window = 256;
        g.offset = 4;
        // stride 64: slots at 0, 64, 128, bytes 4..44 of each.
        let m = expected_written(&g, 3).expect("sequential");
        assert_eq!(m.iter().filter(|b| **b).count(), 120);
        assert!(m[4] && m[43] && !m[44] && !m[3] && m[68] && !m[192 + 4]);
        // Wrapping: 10 transfers over 4 slots cover all 4.
        assert_eq!(expected_written(&g, 10).expect("seq").iter().filter(|b| **b).count(), 160);
        g.address_pattern = AddressPattern::Fixed;
        assert_eq!(expected_written(&g, 10).expect("fixed").iter().filter(|b| **b).count(), 40);
        g.address_pattern = AddressPattern::Random;
        assert!(expected_written(&g, 10).is_none());
    }

    #[test]
    fn write_check_finds_corrupt_missing_and_stray_bytes() {
        let pattern = pattern_bytes(256, 0x4000_0000, DataPattern::Prbs, 7, false);
        let mut g = GenConfig::new(Operation::Write, 64, 2);
        g.window = 256;
        let expected = expected_written(&g, 2).expect("seq");
        // The card wrote slots 0 and 1 exactly.
        let mut got: Vec<u8> = pattern.iter().map(|b| !b).collect();
        got[..128].copy_from_slice(&pattern[..128]);
        let c = check_written(&got, &pattern, Some(&expected));
        assert_eq!((c.written_bytes, c.bad()), (128, 0));
        // One corrupt byte, one missing, one stray.
        got[5] ^= 0x10;
        got[100] = !pattern[100];
        got[200] = pattern[200];
        let c = check_written(&got, &pattern, Some(&expected));
        assert_eq!((c.corrupt_bytes, c.missing_bytes, c.stray_bytes), (1, 1, 1));
        assert_eq!(c.first_bad_offset, Some(5));
        // Random addresses: only corruption is visible.
        let c = check_written(&got, &pattern, None);
        assert_eq!((c.corrupt_bytes, c.missing_bytes, c.stray_bytes), (1, 0, 0));
        // Read+write: the buffer holds the pattern throughout; any other byte is corrupt.
        let mut same = pattern.clone();
        same[7] ^= 1;
        same[9] = !same[9];
        let c = check_unchanged(&same, &pattern);
        assert_eq!((c.corrupt_bytes, c.written_bytes, c.first_bad_offset), (2, 254, Some(7)));
    }

    #[test]
    fn pattern_bytes_match_the_generator_s_pattern() {
        let b = pattern_bytes(16, 0x1000, DataPattern::Counter, 5, false);
        assert_eq!(&b[4..8], &(0x1000u32 / 4 + 1 + 5).to_le_bytes());
        let c = pattern_bytes(16, 0x1000, DataPattern::Counter, 5, true);
        assert!(b.iter().zip(&c).all(|(x, y)| *x == !*y));
    }

    #[test]
    fn timeouts_grow_with_the_work() {
        let g = GenConfig::new(Operation::Read, 4096, 1000);
        let fast = run_timeout(&g, Some(6e9), 250_000_000);
        let slow = run_timeout(&g, Some(1e8), 250_000_000);
        assert!(fast >= Duration::from_millis(10) && slow > fast);
        let mut d = GenConfig::new(Operation::Write, 64, 0);
        d.duration_cycles = 125_000;
        assert_eq!(run_timeout(&d, None, 125_000_000), Duration::from_millis(12));
    }
}
