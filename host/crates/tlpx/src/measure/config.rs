//! The generator's sweep: its shared options ([`GenArgs`]), their checks, and the validated
//! configuration of every point (op, window, offset, pattern, size) for the link.

use clap::Args;
use tlpx_device::generator::{AddressPattern, GenConfig, LinkLimits, Operation, TransferSize, ValidGenConfig, MAX_TRANSFER_BYTES, TAGS};
use tlpx_model::link::{self, LinkConfig};

use crate::args::{refuse_duplicate_values, whole, whole_as};
use crate::cmd::bw::{CacheState, Common, DataArg, HostKnobs, IommuPages, PatternArg};
use crate::output::bytes;
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

/// The host-side state of the DMA buffers (pcie-bench's knobs), for `bw`, `lat` and
/// `characterize`.
#[derive(Debug, Clone, Default, Args)]
pub struct HostMemoryArgs {
    /// CPU cache state of the window before each run: host-warm (the CPU wrote it),
    /// device-warm (the card wrote it), cold (its lines flushed), thrash (evicted by a sweep
    /// larger than the last-level cache). docs/bandwidth.md says how each is produced.
    #[arg(long, value_enum, default_value_t = CacheState::HostWarm)]
    pub cache: CacheState,
    /// Put the DMA buffers on this NUMA node (checked afterwards with move_pages).
    #[arg(long, value_name = "NODE", value_parser = whole(0u32, 4095), allow_negative_numbers = true)]
    pub numa_node: Option<u32>,
    /// Back the DMA buffers with pages of this size and map them with IOVA pages of it (vfio backend).
    #[arg(long, value_enum)]
    pub iommu_pages: Option<IommuPages>,
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
    /// The host's knobs: cache state, NUMA node, IOMMU page size.
    #[command(flatten)]
    pub host: HostMemoryArgs,
}

fn power_of_two_in(flag: &str, v: u32, lo: u32, hi: u32, what: &str) -> Result<(), String> {
    if v.is_power_of_two() && (lo..=hi).contains(&v) {
        Ok(())
    } else {
        Err(format!("{flag} must be a power of two in {lo}..={hi} bytes{what}, not {v}"))
    }
}

/// Parses and checks what can be checked without the card.
pub fn parse_common(a: &GenArgs) -> Result<Common, String> {
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
        host: HostKnobs { cache: a.host.cache, numa_node: a.host.numa_node, iommu_pages: a.host.iommu_pages },
    })
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

/// The model configuration of a session for requests with or without 64-bit addresses.
pub fn session_model(session: &Session, addr64: bool) -> Option<LinkConfig> {
    session.link.as_ref().and_then(|l| l.model(addr64))
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// `bw`'s generator options at their defaults.
    pub(crate) fn args() -> GenArgs {
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
            host: HostMemoryArgs::default(),
        }
    }

    fn err_of(a: GenArgs) -> String {
        match parse_common(&a) {
            Ok(c) => panic!("accepted {c:?}"),
            Err(e) => e,
        }
    }

    #[test]
    fn defaults_give_1000_transfers_over_1_mib() {
        let c = parse_common(&args()).expect("valid");
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
    fn link_limits_are_checked_with_the_link_named() {
        let mut c = parse_common(&args()).expect("valid");
        c.request_size = Some(1024);
        let e = build_configs(&[Operation::Read], &[64], 32, &c, LinkLimits { mps: 256, mrrs: 512 }, 1).expect_err("above MRRS");
        assert!(e.contains("--request-size 1024") && e.contains("MRRS of 512"), "{e}");
        let mut c = parse_common(&args()).expect("valid");
        c.payload_size = Some(512);
        let e = build_configs(&[Operation::Write], &[64], 32, &c, LinkLimits { mps: 256, mrrs: 512 }, 1).expect_err("above MPS");
        assert!(e.contains("--payload-size 512") && e.contains("MPS of 256"), "{e}");
        let c = parse_common(&args()).expect("valid");
        let e = build_configs(&[Operation::Read], &[64], TAGS + 1, &c, LinkLimits { mps: 256, mrrs: 512 }, 1).expect_err("tags");
        assert!(e.contains(&format!("--outstanding must be 1..={TAGS}")) && e.contains(&format!("not {}", TAGS + 1)), "{e}");
        let mut a = args();
        a.window = "1K".into();
        let c = parse_common(&a).expect("valid");
        let e = build_configs(&[Operation::Read], &[4096], 32, &c, LinkLimits { mps: 256, mrrs: 512 }, 1).expect_err("window");
        assert!(e.contains("--window 1024") && e.contains("4096") && e.contains("--window 4K"), "{e}");
    }

    #[test]
    fn duration_becomes_card_cycles() {
        let mut a = args();
        a.duration = Some("2ms".into());
        let c = parse_common(&a).expect("valid");
        assert_eq!(c.count, 0);
        let cfgs = build_configs(&[Operation::Write], &[256], 32, &c, LinkLimits { mps: 256, mrrs: 512 }, 125_000_000).expect("valid");
        assert_eq!(cfgs[0].duration_cycles, 250_000);
        assert_eq!(cfgs[0].count, 0);
    }
}
