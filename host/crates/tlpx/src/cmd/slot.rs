//! `tlpx slot run`: exercise the accelerator in the card's slot with a short line-based
//! session script (docs/registers-cli.md, "Exercising the accelerator: tlpx slot run").
//!
//! ```text
//! tlpx slot run --regs build/card/dw64-pci_epf_test/csr.json accelerators/pci_epf_test/copy.slot --set size=1025
//! tlpx slot run --regs FILE -e 'write pci_epf_test.magic 0x1234' -e 'expect pci_epf_test.magic 0x1234'
//! ```
//!
//! The script names registers as `tlpx reg` does ([`crate::regmap`]), allocates DMA buffers
//! through the backend's `alloc_dma`, waits for the slot's MSI, and checks registers and
//! buffers. Nothing here knows any accelerator: what a script does is the script's. The whole
//! script is parsed and checked (names, access, value widths, buffers) before the card is
//! opened, so a bad line never leaves half a session on the card.
//!
//! Ownership of host memory: a buffer is freed on every exit path, but the card may still
//! be moving data into it if the script started a transfer and did not wait for its end. No
//! generic "stop" exists for an accelerator, so before freeing after such a script (or an
//! error after a write) the run waits for the slot's DMA counters to stand still, and says
//! which lines wrote to the card after the last completed wait.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{anyhow, bail};
use clap::{Args, Subcommand};
use rand::{RngCore, SeedableRng};
use serde::Serialize;
use serde_json::json;
use tlpx_device::card::{Card, Feature};
use tlpx_device::lease::{self, Block, OwnerProcess};
use tlpx_device::msi;
use tlpx_device::spy::{Capture, Filters, Trigger, RECORD_BYTES};
use tlpx_device::DmaBuffer;
use tlpx_regs::{pcie_msi, slot as slot_regs};
use tlpx_trace::{Footer, TraceWriter};

use crate::cmd::reg::{self, RegValue};
use crate::regmap::{parse_number, Access, RegDef, RegMap, Target};
use crate::session::Session;

/// Largest script read (bytes): a session script is tens of lines; 1 MiB stops an endless
/// input at once.
pub const MAX_SCRIPT_BYTES: u64 = 1 << 20;
/// Largest buffer one `buffer` line may ask for. The DUT's size registers are 32-bit and the
/// simulator's host memory is 64 MiB by default; 256 MiB is beyond any test transfer.
pub const MAX_BUFFER_BYTES: u64 = 256 << 20;
/// Spy ring for `--spy` (records of 32 bytes: 2 MiB). Polled after every line and every
/// slice of a wait, so a few MiB of DMA per wait slice fit.
const SPY_RING_RECORDS: u32 = 1 << 16;
/// Card time between two polls of the spy's ring during a wait.
const WAIT_SLICE: Duration = Duration::from_micros(50);
/// `dump NAME` without a length shows at most this many bytes.
const DUMP_DEFAULT: usize = 256;

#[derive(Debug, Args)]
pub struct Cmd {
    #[command(subcommand)]
    action: Action,
}

#[derive(Debug, Subcommand)]
enum Action {
    /// Run a session script against the accelerator in the slot: buffers, register writes
    /// and reads, waits for its interrupt, checks.
    Run(RunArgs),
    /// Parse and check a session script without a card (names, access, values, buffers).
    Check(RunArgs),
}

#[derive(Debug, Args)]
pub struct RunArgs {
    /// The session script (e.g. accelerators/pci_epf_test/copy.slot); lines of `-e` run after it.
    script: Option<PathBuf>,
    /// A script line (repeatable; after the file's lines, numbered `-e 1`, `-e 2`, ...).
    #[arg(short = 'e', long = "line", value_name = "LINE", allow_hyphen_values = true)]
    lines: Vec<String>,
    /// A script variable: `$NAME` in the script is VALUE (repeatable; overrides `default`).
    #[arg(long = "set", value_name = "NAME=VALUE")]
    set: Vec<String>,
    /// A card build's csr.json (build/card/<name>/csr.json): the accelerator's registers by
    /// name, as `tlpx reg --regs`; checked against the card's slot.dut_map_hash.
    #[arg(long, value_name = "FILE")]
    regs: Option<PathBuf>,
    /// Capture the whole session with the spy into this trace (traces/FORMAT.md).
    #[arg(long, value_name = "OUT.tlpx")]
    spy: Option<PathBuf>,
    /// Seed of `random` buffers [default: from the clock; printed, so a run can be repeated].
    #[arg(long, value_parser = crate::args::whole(0u64, u64::MAX), allow_negative_numbers = true)]
    seed: Option<u64>,
    /// Run even when another process owns the slot (or a block a `write` line writes into):
    /// the other session's command and checks may then fail (what it breaks is said).
    #[arg(long)]
    force: bool,
}

// The script -------------------------------------------------------------------------------

/// What a buffer starts with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Fill {
    Random,
    Zero,
    Byte(u8),
}

/// Which part of a buffer's bus address.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AddrPart {
    Full,
    Lo,
    Hi,
}

/// A value on a line; buffer-dependent ones are computed when the line runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Value {
    Number(u64),
    Addr(usize, AddrPart),
    Crc { buffer: usize, inverted: bool },
    Size(usize),
}

#[derive(Debug, Clone)]
pub enum Op {
    Buffer { name: String, size: usize, fill: Fill },
    Write { target: Target, value: Value },
    Read { target: Target },
    WaitIrq { timeout: Duration },
    WaitReg { target: Target, value: Value, timeout: Duration },
    Expect { target: Target, value: Value },
    Compare { a: usize, b: usize, len: usize },
    Crc32 { buffer: usize },
    Dump { buffer: usize, len: usize },
}

/// One line of the script that does something.
#[derive(Debug, Clone)]
pub struct Step {
    /// `copy.slot:12` or `-e 2`.
    pub place: String,
    /// The line as written (comments and surrounding blanks removed).
    pub text: String,
    /// The line as it runs: its variables replaced by their values.
    pub expanded: String,
    pub op: Op,
}

/// A checked script: every step, and the buffers it allocates (name, size).
#[derive(Debug)]
pub struct Script {
    pub steps: Vec<Step>,
    pub buffers: Vec<(String, usize)>,
    pub variables: Vec<(String, String)>,
}

const GRAMMAR: &str = "buffer NAME SIZE random|zero|0xBB, write REG[.FIELD] VALUE, read REG[.FIELD], wait irq TIMEOUT, \
     wait REG[.FIELD] VALUE TIMEOUT, expect REG[.FIELD] VALUE, compare A B [LEN], crc32 NAME, dump NAME [LEN], default VAR VALUE";
const VALUES: &str = "a number (decimal or 0x hex), @BUF, @BUF.lo, @BUF.hi, crc32(BUF), ~crc32(BUF), size(BUF) or $VAR";

fn valid_name(name: &str) -> bool {
    let mut chars = name.chars();
    chars.next().is_some_and(|c| c.is_ascii_alphabetic() || c == '_') && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// Parses `NAME=VALUE` of `--set`.
fn parse_set(text: &str) -> anyhow::Result<(String, String)> {
    let (name, value) = text.split_once('=').ok_or_else(|| anyhow!("--set {text:?}: give NAME=VALUE (e.g. --set size=1025)"))?;
    if !valid_name(name) {
        bail!("--set {text:?}: {name:?} is not a variable name (letters, digits, _; not starting with a digit)");
    }
    if value.is_empty() || value.chars().any(char::is_whitespace) {
        bail!("--set {text:?}: the value must be one word without blanks (a number, a size such as 4KiB)");
    }
    Ok((name.to_owned(), value.to_owned()))
}

/// Replaces `$NAME` and `${NAME}` with the variables' values.
fn expand(text: &str, vars: &[(String, String)], used: &mut Vec<String>) -> Result<String, String> {
    let mut out = String::new();
    let mut rest = text;
    while let Some(i) = rest.find('$') {
        out.push_str(&rest[..i]);
        let after = &rest[i + 1..];
        let (name, len) = if let Some(braced) = after.strip_prefix('{') {
            let end = braced.find('}').ok_or_else(|| "`${` without its `}`".to_string())?;
            (&braced[..end], end + 2)
        } else {
            let end = after.find(|c: char| !(c.is_ascii_alphanumeric() || c == '_')).unwrap_or(after.len());
            (&after[..end], end)
        };
        if name.is_empty() {
            return Err("a `$` without a variable name after it".into());
        }
        let value = vars
            .iter()
            .rev()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.clone())
            .ok_or_else(|| format!("${name} is not set: give --set {name}=VALUE, or a line `default {name} VALUE` before this one"))?;
        if !used.iter().any(|u| u == name) {
            used.push(name.to_owned());
        }
        out.push_str(&value);
        rest = &after[len..];
    }
    out.push_str(rest);
    Ok(out)
}

struct Parser<'a> {
    map: &'a RegMap,
    /// Whether `--regs` was given (an unknown region then needs no hint about it).
    with_regs: bool,
    buffers: Vec<(String, usize)>,
}

impl Parser<'_> {
    fn buffer(&self, name: &str) -> Result<usize, String> {
        self.buffers.iter().position(|(n, _)| n == name).ok_or_else(|| {
            if self.buffers.is_empty() {
                format!("no buffer {name:?}: a `buffer {name} SIZE FILL` line must come first")
            } else {
                format!(
                    "no buffer {name:?} (buffers so far: {}); a `buffer {name} SIZE FILL` line must come first",
                    self.buffers.iter().map(|(n, _)| n.as_str()).collect::<Vec<_>>().join(", ")
                )
            }
        })
    }

    fn target(&self, text: &str) -> Result<Target, String> {
        self.map.resolve(text).map_err(|e| {
            let hint = if !self.with_regs && e.to_string().starts_with("no region") {
                " (an accelerator's registers need --regs build/card/<card>/csr.json)"
            } else {
                ""
            };
            format!("{e}{hint}")
        })
    }

    /// The width a value for `target` may have, in bits.
    fn bits(target: &Target) -> u32 {
        match target {
            Target::Field(_, f) => f.width,
            Target::Register(r) => r.size_bits,
        }
    }

    fn value(&self, target: &Target, text: &str) -> Result<Value, String> {
        let bits = Parser::bits(target);
        let name = target.name();
        let fits = |v: u64| bits >= 64 || v >> bits == 0;
        let need = |want: u32, what: &str| -> Result<(), String> {
            if bits < want {
                Err(format!("{text} is {what} ({want} bits) and {name} has {bits} bits"))
            } else {
                Ok(())
            }
        };
        if let Some(rest) = text.strip_prefix('@') {
            let (buf, part) = match rest.rsplit_once('.') {
                Some((b, "lo")) => (b, AddrPart::Lo),
                Some((b, "hi")) => (b, AddrPart::Hi),
                Some((_, other)) => return Err(format!("{text}: .{other} is not a part of an address: give @BUF, @BUF.lo or @BUF.hi")),
                None => (rest, AddrPart::Full),
            };
            let i = self.buffer(buf)?;
            match part {
                AddrPart::Full => {
                    need(64, "a 64-bit bus address").map_err(|e| format!("{e}: write @{buf}.lo and @{buf}.hi to two 32-bit registers"))?
                }
                _ => need(32, "half of a bus address")?,
            }
            return Ok(Value::Addr(i, part));
        }
        for (prefix, inverted) in [("~crc32(", true), ("crc32(", false)] {
            if let Some(rest) = text.strip_prefix(prefix) {
                let buf = rest.strip_suffix(')').ok_or_else(|| format!("{text}: missing `)`"))?;
                let buffer = self.buffer(buf)?;
                need(32, "a CRC-32")?;
                return Ok(Value::Crc { buffer, inverted });
            }
        }
        if let Some(rest) = text.strip_prefix("size(") {
            let buf = rest.strip_suffix(')').ok_or_else(|| format!("{text}: missing `)`"))?;
            let i = self.buffer(buf)?;
            let size = self.buffers[i].1 as u64;
            if !fits(size) {
                return Err(format!("size({buf}) = {size} does not fit {name} ({bits} bits)"));
            }
            return Ok(Value::Size(i));
        }
        if let Target::Field(reg, f) = target {
            if !f.values.is_empty() || !text.starts_with(|c: char| c.is_ascii_digit()) {
                return f.parse_value(reg, text).map(Value::Number).map_err(|e| e.to_string());
            }
        }
        let v = parse_number(text).map_err(|_| format!("{text:?} is not a value: give {VALUES}"))?;
        if !fits(v) {
            return Err(format!("{v:#x} does not fit {name}, {bits} bits wide"));
        }
        Ok(Value::Number(v))
    }

    fn len(&self, text: &str, buffers: &[usize]) -> Result<usize, String> {
        let n = crate::sizes::parse_size(text).ok_or_else(|| format!("{text:?} is not a length in bytes (e.g. 64, 1K)"))?;
        for &b in buffers {
            let (name, size) = &self.buffers[b];
            if n == 0 || n > *size as u64 {
                return Err(format!("length {n} is not within buffer {name} (1..={size} bytes)"));
            }
        }
        Ok(n as usize)
    }

    fn readable(target: &Target) -> Result<(), String> {
        let r = target.register();
        if r.access == Access::Wo {
            return Err(format!("{} is write-only: a read returns nothing of it", r.full_name()));
        }
        if r.size_bits > 64 {
            return Err(format!("{} is {} bits wide: only registers of up to 64 bits can be read here", r.full_name(), r.size_bits));
        }
        Ok(())
    }

    fn line(&mut self, words: &[&str]) -> Result<Op, String> {
        let wrong = |usage: &str| format!("takes {usage}");
        match words {
            ["buffer", name, size, fill] => {
                if !valid_name(name) {
                    return Err(format!("{name:?} is not a buffer name (letters, digits, _; not starting with a digit)"));
                }
                if self.buffers.iter().any(|(n, _)| n == name) {
                    return Err(format!("buffer {name} is already defined"));
                }
                let size = crate::sizes::parse_size(size)
                    .filter(|s| (1..=MAX_BUFFER_BYTES).contains(s))
                    .ok_or_else(|| format!("size {size:?} is not 1..={MAX_BUFFER_BYTES} bytes (e.g. 1025, 4KiB, 1MiB)"))?;
                let fill = match *fill {
                    "random" => Fill::Random,
                    "zero" => Fill::Zero,
                    other => match parse_number(other) {
                        Ok(b) if b <= 0xff => Fill::Byte(b as u8),
                        _ => return Err(format!("fill {other:?}: give random, zero or a byte (0x00..0xff)")),
                    },
                };
                self.buffers.push(((*name).to_owned(), size as usize));
                Ok(Op::Buffer { name: (*name).to_owned(), size: size as usize, fill })
            }
            ["buffer", ..] => Err(wrong("NAME SIZE random|zero|0xBB")),
            ["write", reg, value] => {
                let target = self.target(reg)?;
                let r = target.register();
                if r.access == Access::Ro {
                    return Err(format!("{} is read-only (ro): it cannot be written", r.full_name()));
                }
                if r.size_bits > 64 {
                    return Err(format!("{} is {} bits wide: write it a word at a time by offset", r.full_name(), r.size_bits));
                }
                if matches!(target, Target::Field(..)) && r.access != Access::Rw {
                    return Err(format!(
                        "{} is write-only: a field write needs a read-modify-write; write the whole register",
                        r.full_name()
                    ));
                }
                let value = self.value(&target, value)?;
                Ok(Op::Write { target, value })
            }
            ["write", ..] => Err(wrong("REG[.FIELD] VALUE")),
            ["read", reg] => {
                let target = self.target(reg)?;
                Parser::readable(&target)?;
                Ok(Op::Read { target })
            }
            ["read", ..] => Err(wrong("REG[.FIELD]")),
            ["wait", "irq", timeout] => Ok(Op::WaitIrq { timeout: duration(timeout)? }),
            ["wait", "irq", ..] => Err(wrong("irq TIMEOUT (e.g. wait irq 10ms)")),
            ["wait", reg, value, timeout] => {
                let target = self.target(reg)?;
                Parser::readable(&target)?;
                let value = self.value(&target, value)?;
                Ok(Op::WaitReg { target, value, timeout: duration(timeout)? })
            }
            ["wait", ..] => Err(wrong("irq TIMEOUT, or REG[.FIELD] VALUE TIMEOUT (polls until equal)")),
            ["expect", reg, value] => {
                let target = self.target(reg)?;
                Parser::readable(&target)?;
                let value = self.value(&target, value)?;
                Ok(Op::Expect { target, value })
            }
            ["expect", ..] => Err(wrong("REG[.FIELD] VALUE")),
            ["compare", a, b, rest @ ..] if rest.len() <= 1 => {
                let (a, b) = (self.buffer(a)?, self.buffer(b)?);
                let len = match rest {
                    [len] => self.len(len, &[a, b])?,
                    _ => {
                        let ((na, sa), (nb, sb)) = (&self.buffers[a], &self.buffers[b]);
                        if sa != sb {
                            return Err(format!("{na} has {sa} bytes and {nb} {sb}: give the length to compare (compare {na} {nb} LEN)"));
                        }
                        *sa
                    }
                };
                Ok(Op::Compare { a, b, len })
            }
            ["compare", ..] => Err(wrong("A B [LEN] (two buffers)")),
            ["crc32", buf] => Ok(Op::Crc32 { buffer: self.buffer(buf)? }),
            ["crc32", ..] => Err(wrong("NAME (a buffer)")),
            ["dump", buf, rest @ ..] if rest.len() <= 1 => {
                let buffer = self.buffer(buf)?;
                let len = match rest {
                    [len] => self.len(len, &[buffer])?,
                    _ => self.buffers[buffer].1.min(DUMP_DEFAULT),
                };
                Ok(Op::Dump { buffer, len })
            }
            ["dump", ..] => Err(wrong("NAME [LEN]")),
            [other, ..] => Err(format!("{other:?} is not a command; a line is one of: {GRAMMAR}")),
            [] => Err("empty line".into()),
        }
    }
}

fn duration(text: &str) -> Result<Duration, String> {
    crate::sizes::parse_duration("TIMEOUT", text).map(Duration::from_secs_f64)
}

/// Parses and checks a script: `lines` are (place, text). Every bad line is reported, each
/// with its place, its text and what is accepted.
pub fn parse(lines: &[(String, String)], set: &[(String, String)], map: &RegMap, with_regs: bool) -> anyhow::Result<Script> {
    let mut vars: Vec<(String, String)> = set.to_vec();
    let mut used = Vec::new();
    let mut parser = Parser { map, with_regs, buffers: Vec::new() };
    let mut steps = Vec::new();
    let mut errors = Vec::new();
    for (place, raw) in lines {
        let text = raw.split('#').next().unwrap_or("").trim();
        if text.is_empty() {
            continue;
        }
        let words: Vec<&str> = text.split_whitespace().collect();
        if words[0] == "default" {
            match words.as_slice() {
                ["default", name, value] if valid_name(name) => {
                    if !set.iter().any(|(n, _)| n == name) {
                        vars.push(((*name).to_owned(), (*value).to_owned()));
                    }
                    if !used.iter().any(|u| u == name) {
                        used.push((*name).to_owned());
                    }
                }
                _ => errors.push(format!("{place}: `{text}`: takes VAR VALUE (a variable name and one word)")),
            }
            continue;
        }
        let result = expand(text, &vars, &mut used).and_then(|expanded| {
            let words: Vec<&str> = expanded.split_whitespace().collect();
            match parser.line(&words) {
                Ok(op) => Ok((op, expanded)),
                Err(e) if expanded != text => Err(format!("{e} (the line reads `{expanded}`)")),
                Err(e) => Err(e),
            }
        });
        match result {
            Ok((op, expanded)) => steps.push(Step { place: place.clone(), text: text.to_owned(), expanded, op }),
            Err(e) => errors.push(format!("{place}: `{text}`: {e}")),
        }
    }
    for (name, _) in set {
        if !used.iter().any(|u| u == name) {
            errors.push(format!("--set {name}=...: the script uses no ${name}"));
        }
    }
    if steps.is_empty() && errors.is_empty() {
        errors.push(format!("the script has no lines to run; a line is one of: {GRAMMAR}"));
    }
    if !errors.is_empty() {
        let n = errors.len();
        bail!("{} bad line{}; nothing was run:\n  {}", n, if n == 1 { "" } else { "s" }, errors.join("\n  "));
    }
    let variables = vars.into_iter().filter(|(n, _)| used.contains(n)).collect();
    Ok(Script { steps, buffers: parser.buffers, variables })
}

/// The script's lines: the file's, then `-e`'s.
fn read_lines(args: &RunArgs) -> anyhow::Result<Vec<(String, String)>> {
    let mut lines = Vec::new();
    if let Some(path) = &args.script {
        let bytes = crate::input::read_capped(path, MAX_SCRIPT_BYTES).map_err(|e| anyhow!("reading the script {}: {e}", path.display()))?;
        let text = String::from_utf8(bytes).map_err(|_| anyhow!("the script {} is not UTF-8 text", path.display()))?;
        let name = path.file_name().map_or_else(|| path.display().to_string(), |n| n.to_string_lossy().into_owned());
        for (i, line) in text.lines().enumerate() {
            lines.push((format!("{name}:{}", i + 1), line.to_owned()));
        }
    }
    for (i, line) in args.lines.iter().enumerate() {
        lines.push((format!("-e {}", i + 1), line.clone()));
    }
    if args.script.is_none() && args.lines.is_empty() {
        bail!("give a script file or lines with -e (e.g. -e 'read pci_epf_test.status')");
    }
    Ok(lines)
}

// Running ----------------------------------------------------------------------------------

/// zlib's CRC-32 (the one tlpx-script uses for its images).
fn crc32(data: &[u8]) -> u32 {
    tlpx_script::image::crc32(data)
}

struct Buffers {
    held: Vec<(String, DmaBuffer)>,
    /// Each buffer's CRC-32 as filled.
    crcs: Vec<u32>,
}

impl Buffers {
    /// Allocates and fills every buffer of `script`, in the script's order (the random fills
    /// take the seeded generator's bytes in that order), before the session writes anything to
    /// the card: a backend that cannot allocate (LitePCIe's driver owns its buffers) or a host
    /// out of DMA memory stops the run with the card untouched. On an error the buffers
    /// already allocated are freed.
    fn allocate(card: &mut Card, script: &Script, rng: &mut rand_chacha::ChaCha8Rng) -> anyhow::Result<Buffers> {
        let mut buffers = Buffers { held: Vec::new(), crcs: Vec::new() };
        for step in &script.steps {
            let Op::Buffer { name, size, fill } = &step.op else { continue };
            let data: Vec<u8> = match fill {
                Fill::Random => {
                    let mut d = vec![0u8; *size];
                    rng.fill_bytes(&mut d);
                    d
                }
                Fill::Zero => vec![0; *size],
                Fill::Byte(b) => vec![*b; *size],
            };
            let allocated = card.device().alloc_dma(*size).map_err(anyhow::Error::new).and_then(|buf| match buf.write_bytes(0, &data) {
                Ok(()) => Ok(buf),
                Err(e) => {
                    let _ = card.device().free_dma(buf);
                    Err(e.into())
                }
            });
            match allocated {
                Ok(buf) => {
                    buffers.held.push((name.clone(), buf));
                    buffers.crcs.push(crc32(&data));
                }
                Err(e) => {
                    buffers.free(card);
                    return Err(e.context(format!(
                        "{} `{}`: allocating the buffer (before anything was written to the card)",
                        step.place, step.text
                    )));
                }
            }
        }
        Ok(buffers)
    }

    fn index(&self, name: &str) -> anyhow::Result<usize> {
        self.held.iter().position(|(n, _)| n == name).ok_or_else(|| anyhow!("internal: buffer {name} was not allocated"))
    }

    /// Frees every buffer; the failures as text.
    fn free(&mut self, card: &mut Card) -> Vec<String> {
        let mut errors = Vec::new();
        for (name, buf) in self.held.drain(..) {
            if let Err(e) = card.device().free_dma(buf) {
                errors.push(format!("{name}: {e}"));
            }
        }
        self.crcs.clear();
        errors
    }

    fn get(&self, i: usize) -> &DmaBuffer {
        &self.held[i].1
    }
    fn bytes(&self, i: usize, len: usize) -> anyhow::Result<Vec<u8>> {
        let mut out = vec![0u8; len];
        self.held[i].1.read_bytes(0, &mut out)?;
        Ok(out)
    }
}

/// The spy capture of `--spy`: its trace and the capture itself.
struct SpySession {
    path: PathBuf,
    writer: TraceWriter<std::io::BufWriter<std::fs::File>>,
    capture: Capture,
    batch: Vec<[u8; RECORD_BYTES]>,
}

impl SpySession {
    fn poll(&mut self, card: &mut Card) -> anyhow::Result<()> {
        self.capture.poll(card, &mut self.batch)?;
        for raw in self.batch.drain(..) {
            self.writer.write_raw(&raw).map_err(|e| anyhow!("writing {}: {e}", self.path.display()))?;
        }
        Ok(())
    }

    /// Stops the capture and finishes the trace; the records written and lost.
    fn finish(mut self, card: &mut Card) -> anyhow::Result<(u64, u64)> {
        let end = self.capture.stop_into(card, &mut self.batch);
        for raw in self.batch.drain(..) {
            self.writer.write_raw(&raw).map_err(|e| anyhow!("writing {}: {e}", self.path.display()))?;
        }
        let end = match end {
            Ok(end) => end,
            Err(e) => {
                let _ = self.writer.finish_without_footer();
                return Err(e.into());
            }
        };
        let written = self.writer.records_written();
        self.writer
            .finish(
                end.next_sequence,
                Footer { records_created: end.records_created, records_lost: end.records_lost, trigger_sequence: None },
            )
            .map_err(|e| anyhow!("finishing {}: {e}", self.path.display()))?;
        Ok((written, end.records_lost))
    }
}

/// The slot block's counters (to report what the session made the accelerator do).
#[derive(Debug, Clone, Copy, Default, Serialize)]
struct SlotCounters {
    dma_reads: u64,
    dma_writes: u64,
    dma_read_bytes: u64,
    dma_write_bytes: u64,
    dma_errors: u64,
    irqs: u64,
}

fn slot_counters(card: &mut Card) -> anyhow::Result<SlotCounters> {
    Ok(SlotCounters {
        dma_reads: card.read(slot_regs::DMA_READS)?,
        dma_writes: card.read(slot_regs::DMA_WRITES)?,
        dma_read_bytes: card.read(slot_regs::DMA_READ_BYTES)?,
        dma_write_bytes: card.read(slot_regs::DMA_WRITE_BYTES)?,
        dma_errors: card.read(slot_regs::DMA_ERRORS)?,
        irqs: card.read(slot_regs::IRQS)?,
    })
}

impl SlotCounters {
    fn since(&self, before: &SlotCounters) -> SlotCounters {
        let d = |a: u64, b: u64| a.wrapping_sub(b) & 0xFFFF_FFFF;
        SlotCounters {
            dma_reads: d(self.dma_reads, before.dma_reads),
            dma_writes: d(self.dma_writes, before.dma_writes),
            dma_read_bytes: d(self.dma_read_bytes, before.dma_read_bytes),
            dma_write_bytes: d(self.dma_write_bytes, before.dma_write_bytes),
            dma_errors: d(self.dma_errors, before.dma_errors),
            irqs: d(self.irqs, before.irqs),
        }
    }
}

/// Whether the accelerator is working (the DUT busy, its DMA or interrupt in flight).
fn slot_busy(card: &mut Card) -> anyhow::Result<bool> {
    Ok(slot_regs::status::BUSY.get(card.read(slot_regs::STATUS)?) != 0)
}

/// Wait slices the end of a session gives a command still running to end (100 ms of card time).
const QUIET_SLICES: u32 = 2000;

/// The MSI of the slot: LitePCIe's MSI block sends vector 0 for every source; the source is
/// the bit of `pcie_msi.vector`.
const MSI_WAIT_MASK: u32 = 1;

fn slot_bit() -> u64 {
    1 << tlpx_regs::constants::MSI_SLOT
}

/// A check that failed (exit status 1), as opposed to an error of the card or the input.
#[derive(Debug)]
struct CheckFailed(String);

impl std::fmt::Display for CheckFailed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for CheckFailed {}

struct Runner<'a> {
    card: &'a mut Card,
    script: &'a Script,
    buffers: Buffers,
    spy: Option<SpySession>,
    json: bool,
    seed: u64,
    /// Every step's JSON record.
    records: Vec<serde_json::Value>,
    msis: u64,
    /// Places of the lines that wrote to the card since the last completed wait.
    unwaited: Vec<String>,
}

impl Runner<'_> {
    fn say(&self, line: std::fmt::Arguments<'_>) {
        if !self.json {
            crate::outln!("{line}");
        }
    }

    fn value(&self, v: &Value) -> anyhow::Result<u64> {
        Ok(match *v {
            Value::Number(n) => n,
            Value::Addr(i, part) => {
                let a = self.buffers.get(i).bus_addr;
                match part {
                    AddrPart::Full => a,
                    AddrPart::Lo => a & 0xFFFF_FFFF,
                    AddrPart::Hi => a >> 32,
                }
            }
            Value::Crc { buffer, inverted } => {
                let c = crc32(&self.buffers.bytes(buffer, self.buffers.get(buffer).len)?);
                u64::from(if inverted { !c } else { c })
            }
            Value::Size(i) => self.buffers.get(i).len as u64,
        })
    }

    fn read_target(&mut self, target: &Target) -> anyhow::Result<u64> {
        let reg = target.register();
        let v = match reg::read_value(self.card, reg)? {
            RegValue::Number(v) => v,
            RegValue::Words(_) => bail!("{} is wider than 64 bits", reg.full_name()),
        };
        Ok(match target {
            Target::Field(_, f) => f.get(v),
            Target::Register(_) => v,
        })
    }

    fn show(target: &Target, v: u64) -> String {
        match target {
            Target::Field(_, f) => f.show(v),
            Target::Register(r) => format!("{} ({v})", RegValue::Number(v).hex(r)),
        }
    }

    fn step(&mut self, step: &Step) -> anyhow::Result<serde_json::Value> {
        let mut rec = json!({"line": step.place, "text": step.text, "run": step.expanded});
        match &step.op {
            Op::Buffer { name, size, fill } => {
                // Allocated and filled before the session touched the card (Buffers::allocate).
                let i = self.buffers.index(name)?;
                let bus_addr = self.buffers.get(i).bus_addr;
                let crc = self.buffers.crcs[i];
                let fill_text = match fill {
                    Fill::Random => format!("random (seed {})", self.seed),
                    Fill::Zero => "zero".into(),
                    Fill::Byte(b) => format!("0x{b:02x}"),
                };
                self.say(format_args!("    buffer {name}: {size} bytes at bus 0x{bus_addr:x}, {fill_text}, crc32 0x{crc:08x}"));
                rec["bus_addr"] = json!(bus_addr);
                rec["size"] = json!(size);
                rec["crc32"] = json!(crc);
            }
            Op::Write { target, value } => {
                let reg = target.register().clone();
                let v = self.value(value)?;
                let bits = Parser::bits(target);
                if bits < 64 && v >> bits != 0 {
                    bail!("{v:#x} does not fit {}, {bits} bits wide", target.name());
                }
                let written = match target {
                    Target::Register(_) => v,
                    Target::Field(_, f) => reg::field_write(&reg, f, reg::read_number(self.card, &reg)?, v),
                };
                reg::write_number(self.card, &reg, written)?;
                reg::flush(self.card)?;
                self.unwaited.push(step.place.clone());
                self.say(format_args!("    {} <- {}", target.name(), Runner::show(target, v)));
                rec["value"] = json!(v);
                rec["written"] = json!(written);
            }
            Op::Read { target } => {
                let v = self.read_target(target)?;
                match target {
                    Target::Register(r) => {
                        self.say(format_args!("    {} = {}", r.full_name(), Runner::show(target, v)));
                        let w = r.fields.iter().map(|f| f.name.len()).max().unwrap_or(0);
                        for f in &r.fields {
                            self.say(format_args!("      {:<w$} = {}", f.name, f.show(f.get(v))));
                        }
                        rec["fields"] = json!(r
                            .fields
                            .iter()
                            .map(|f| json!({"name": f.name, "value": f.get(v), "value_name": f.value_name(f.get(v))}))
                            .collect::<Vec<_>>());
                    }
                    Target::Field(..) => self.say(format_args!("    {} = {}", target.name(), Runner::show(target, v))),
                }
                rec["value"] = json!(v);
            }
            Op::WaitIrq { timeout } => {
                let start = self.card.cycles()?;
                let deadline = start + (timeout.as_secs_f64() * f64::from(self.card.identity().clock_hz)) as u64;
                loop {
                    let got = self.card.wait_interrupt_card_time(MSI_WAIT_MASK, WAIT_SLICE.min(*timeout))?;
                    if let Some(spy) = self.spy.as_mut() {
                        spy.poll(self.card)?;
                    }
                    // The slot's latched bit says its MSI came, also when another process's wait
                    // took the interrupt itself (the simulator gives each to one waiter); with no
                    // other source enabled, every MSI is the slot's (two share one latched bit).
                    let vector = self.card.read(pcie_msi::VECTOR)?;
                    if got.is_some() || vector & slot_bit() != 0 {
                        let enable = self.card.read(pcie_msi::ENABLE)?;
                        if vector & slot_bit() != 0 || (got.is_some() && enable & !slot_bit() == 0) {
                            self.card.write(pcie_msi::CLEAR, slot_bit())?;
                            self.msis += 1;
                            let after = self.card.cycles()?.saturating_sub(start);
                            let us = after as f64 / f64::from(self.card.identity().clock_hz) * 1e6;
                            self.say(format_args!("    MSI of the slot after {us:.2} us of card time (pcie_msi.vector 0x{vector:x})"));
                            rec["card_us"] = json!(us);
                            break;
                        }
                    }
                    if self.card.cycles()? >= deadline {
                        return Err(crate::exit::card_failure(format!(
                            "no interrupt from the slot within {timeout:?} of card time (pcie_msi.vector 0x{:x}, enable 0x{:x})",
                            self.card.read(pcie_msi::VECTOR)?,
                            self.card.read(pcie_msi::ENABLE)?
                        )));
                    }
                }
                self.unwaited.clear();
            }
            Op::WaitReg { target, value, timeout } => {
                let want = self.value(value)?;
                let start = self.card.cycles()?;
                let deadline = start + (timeout.as_secs_f64() * f64::from(self.card.identity().clock_hz)) as u64;
                loop {
                    let v = self.read_target(target)?;
                    if v == want {
                        let us = self.card.cycles()?.saturating_sub(start) as f64 / f64::from(self.card.identity().clock_hz) * 1e6;
                        self.say(format_args!("    {} = {} after {us:.2} us of card time", target.name(), Runner::show(target, v)));
                        rec["card_us"] = json!(us);
                        break;
                    }
                    if self.card.cycles()? >= deadline {
                        return Err(crate::exit::card_failure(format!(
                            "{} did not become {} within {timeout:?} of card time: it reads {}",
                            target.name(),
                            Runner::show(target, want),
                            Runner::show(target, v)
                        )));
                    }
                    self.card.idle(WAIT_SLICE)?;
                    if let Some(spy) = self.spy.as_mut() {
                        spy.poll(self.card)?;
                    }
                }
                self.unwaited.clear();
            }
            Op::Expect { target, value } => {
                let want = self.value(value)?;
                let found = self.read_target(target)?;
                rec["expected"] = json!(want);
                rec["found"] = json!(found);
                if found != want {
                    return Err(CheckFailed(format!(
                        "expected {} = {}, found {}",
                        target.name(),
                        Runner::show(target, want),
                        Runner::show(target, found)
                    ))
                    .into());
                }
                self.say(format_args!("    ok: {} = {}", target.name(), Runner::show(target, found)));
            }
            Op::Compare { a, b, len } => {
                let (x, y) = (self.buffers.bytes(*a, *len)?, self.buffers.bytes(*b, *len)?);
                let (na, nb) = (&self.buffers.held[*a].0, &self.buffers.held[*b].0);
                if let Some(i) = x.iter().zip(&y).position(|(p, q)| p != q) {
                    let differ = x.iter().zip(&y).filter(|(p, q)| p != q).count();
                    rec["first_difference"] = json!(i);
                    rec["bytes_differing"] = json!(differ);
                    return Err(CheckFailed(format!(
                        "{na} and {nb} differ at offset {i} (0x{i:x}): {na} has 0x{:02x}, {nb} 0x{:02x}; {differ} of {len} bytes differ",
                        x[i], y[i]
                    ))
                    .into());
                }
                self.say(format_args!("    ok: {na} and {nb} are equal ({len} bytes)"));
            }
            Op::Crc32 { buffer } => {
                let c = crc32(&self.buffers.bytes(*buffer, self.buffers.get(*buffer).len)?);
                self.say(format_args!("    crc32({}) = 0x{c:08x} (~crc32 0x{:08x})", self.buffers.held[*buffer].0, !c));
                rec["crc32"] = json!(c);
            }
            Op::Dump { buffer, len } => {
                let bytes = self.buffers.bytes(*buffer, *len)?;
                let total = self.buffers.get(*buffer).len;
                self.say(format_args!("    {} ({len} of {total} bytes):", self.buffers.held[*buffer].0));
                for (row, chunk) in bytes.chunks(16).enumerate() {
                    let hex: Vec<String> = chunk.iter().map(|b| format!("{b:02x}")).collect();
                    self.say(format_args!("    {:08x}  {}", row * 16, hex.join(" ")));
                }
                rec["hex"] = json!(bytes.iter().map(|b| format!("{b:02x}")).collect::<String>());
            }
        }
        Ok(rec)
    }

    /// Waits at most `slices` wait slices (card time) for the accelerator to be quiet:
    /// `slot.status.busy` low (the DUT idle, its DMA and interrupt done). True when it is.
    fn wait_quiet(&mut self, slices: u32) -> anyhow::Result<bool> {
        for _ in 0..slices {
            if !slot_busy(self.card)? {
                return Ok(true);
            }
            // The device's own idle: a Ctrl-C that ended the run must not end this bounded
            // wait (the leases are refreshed between slices all the same).
            self.card.keep_leases()?;
            self.card.device().idle(WAIT_SLICE)?;
            if let Some(spy) = self.spy.as_mut() {
                spy.poll(self.card)?;
            }
        }
        slot_busy(self.card).map(|b| !b)
    }

    /// Before the buffers are freed: the accelerator quiet, so nothing of it reaches them
    /// after. A command still running gets `QUIET_SLICES` of card time to end; then the slot's
    /// lease is given back, which fences its DMA (the card refuses and cuts short every request
    /// of the slot's mover until the DUT is quiet), and it gets as long again. Returns what
    /// happened, for a note; None when it was quiet at once.
    fn quiesce(&mut self, holds_slot: bool) -> anyhow::Result<Option<String>> {
        if !slot_busy(self.card)? {
            return Ok(None);
        }
        if self.wait_quiet(QUIET_SLICES)? {
            return Ok(Some(
                "the accelerator was still working when the session ended: it finished (slot.status.busy 0) before the buffers were freed"
                    .into(),
            ));
        }
        if !holds_slot {
            return Ok(Some("the accelerator is still working (slot.status.busy 1) and this session does not own the slot (--force): its buffers are freed under it".into()));
        }
        self.card.release(Block::Slot)?;
        let fenced = self.card.read(slot_regs::DMA_FENCED)?;
        if self.wait_quiet(QUIET_SLICES)? {
            return Ok(Some(format!(
                "the accelerator was still working {} of card time after the session ended: the slot's lease was given back, which fenced its DMA, and it became quiet (slot.dma_fenced {fenced}) before the buffers were freed",
                crate::output::ns_text((WAIT_SLICE * QUIET_SLICES).as_nanos() as f64)
            )));
        }
        Ok(Some("the accelerator is still busy (slot.status.busy 1) with its DMA fenced: nothing of it reaches the freed buffers, but it holds a command it does not finish".into()))
    }
}

pub fn run(cmd: &Cmd, device: &str, json: bool) -> anyhow::Result<ExitCode> {
    match &cmd.action {
        Action::Check(args) => {
            let (script, _) = prepare(args)?;
            if json {
                crate::output::print_json(&json!({"steps": script.steps.len(), "buffers": script.buffers, "variables": script.variables}))?;
            } else {
                crate::outln!("{} lines to run, buffers: {}; no errors", script.steps.len(), buffer_list(&script));
            }
            Ok(ExitCode::SUCCESS)
        }
        Action::Run(args) => run_script(args, device, json),
    }
}

fn buffer_list(script: &Script) -> String {
    if script.buffers.is_empty() {
        return "none".into();
    }
    script.buffers.iter().map(|(n, s)| format!("{n} ({s} bytes)")).collect::<Vec<_>>().join(", ")
}

fn prepare(args: &RunArgs) -> anyhow::Result<(Script, reg::Loaded)> {
    let set = args.set.iter().map(|s| parse_set(s)).collect::<anyhow::Result<Vec<_>>>()?;
    let lines = read_lines(args)?;
    let loaded = reg::load_map(args.regs.as_ref())?;
    let script = parse(&lines, &set, &loaded.map, args.regs.is_some())?;
    Ok((script, loaded))
}

fn run_script(args: &RunArgs, device: &str, json: bool) -> anyhow::Result<ExitCode> {
    // Everything about the input first: nothing reaches the card from a bad script.
    let (script, loaded) = prepare(args)?;
    if let Some(path) = &args.spy {
        crate::args::check_output_file("--spy", path)?;
    }
    let seed = args.seed.unwrap_or_else(|| {
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos() as u64 & 0xFFFF_FFFF)
    });
    let mut session = Session::open_observer(device)?;
    let targets: Vec<&RegDef> = script
        .steps
        .iter()
        .filter_map(|s| match &s.op {
            Op::Write { target, .. } | Op::Read { target } | Op::Expect { target, .. } | Op::WaitReg { target, .. } => {
                Some(target.register())
            }
            _ => None,
        })
        .collect();
    loaded.check(&mut session.card, &targets)?;
    let info = crate::slot::read(&mut session.card)?;
    let waits_irq = script.steps.iter().any(|s| matches!(s.op, Op::WaitIrq { .. }));
    let source = args.script.as_ref().map_or_else(|| "-e lines".to_string(), |p| p.display().to_string());
    if !json {
        crate::outln!("# {}", session.describe());
        crate::outln!(
            "# slot: {} {} (placement {}); script {source}, {} lines; seed {seed}{}",
            info.dut_name,
            info.dut_version,
            info.placement,
            script.steps.len(),
            script.variables.iter().map(|(n, v)| format!("; ${n} = {v}")).collect::<String>()
        );
    }
    // Ctrl-C ends the run between lines (or a wait within a slice), so the buffers are freed.
    crate::progress::install_stop_handler();
    let card = &mut session.card;
    // Host memory first: every buffer is allocated and filled before anything is written to
    // the card, so a backend without per-line allocation (LitePCIe's driver) or a host out of
    // DMA memory ends the run with the card untouched.
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
    let mut buffers = Buffers::allocate(card, &script, &mut rng)?;
    let owned = match own_the_slot(card, &script, args.force, waits_irq) {
        Ok(o) => o,
        Err(e) => {
            let _ = buffers.free(card);
            return Err(e);
        }
    };
    for n in &owned.notes {
        if !json {
            crate::outln!("# {n}");
        }
    }
    let spy = match &args.spy {
        Some(path) => match start_spy(&mut session, path, &loaded, &info) {
            Ok(spy) => Some(spy),
            Err(e) => {
                let card = &mut session.card;
                let _ = buffers.free(card);
                let _ = owned.restore(card);
                return Err(e);
            }
        },
        None => None,
    };
    let card = &mut session.card;
    let before = slot_counters(card)?;
    let mut runner = Runner { card, script: &script, buffers, spy, json, seed, records: Vec::new(), msis: 0, unwaited: Vec::new() };
    let mut failure: Option<(String, anyhow::Error)> = None;
    for step in &runner.script.steps {
        if step.expanded == step.text {
            runner.say(format_args!("{:<16} {}", step.place, step.text));
        } else {
            runner.say(format_args!("{:<16} {}    # {}", step.place, step.text, step.expanded));
        }
        let result = runner.step(step);
        if let Some(spy) = runner.spy.as_mut() {
            if let Err(e) = spy.poll(runner.card) {
                failure.get_or_insert((step.place.clone(), e));
            }
        }
        match result {
            Ok(rec) => runner.records.push(rec),
            Err(e) => {
                failure = Some((format!("{} `{}`", step.place, step.text), e));
                break;
            }
        }
        if crate::output::output_closed() {
            break;
        }
        if crate::progress::stop_requested() {
            failure = Some((format!("after {}", step.place), anyhow::Error::new(tlpx_device::DeviceError::Interrupted)));
            break;
        }
    }
    // The end of every run, whatever happened: the accelerator quiet before its buffers are
    // freed, the trace finished, the MSI enable as the session found it, the leases given back.
    let mut notes = Vec::new();
    match runner.quiesce(owned.holds_slot) {
        Ok(None) => {}
        Ok(Some(what)) if runner.unwaited.is_empty() => notes.push(what),
        Ok(Some(what)) => notes.push(format!("{} wrote to the card after the last completed wait; {what}", runner.unwaited.join(", "))),
        Err(e) => {
            notes.push(format!("whether the accelerator was quiet could not be read ({e:#}): it may still use buffers that are now freed"))
        }
    }
    let after = slot_counters(runner.card);
    // MSIs that came and nobody waited for (a second interrupt of one command).
    let mut unclaimed = 0u64;
    if waits_irq {
        while let Ok(Some(_)) = runner.card.device().wait_interrupt(MSI_WAIT_MASK, Duration::ZERO) {
            unclaimed += 1;
        }
    }
    let mut trace = None;
    if let Some(spy) = runner.spy.take() {
        let path = spy.path.clone();
        match spy.finish(runner.card) {
            Ok(t) => trace = Some((path, t)),
            Err(e) => notes.push(format!("the spy capture did not end cleanly: {e:#}")),
        }
    }
    let freed_errors = runner.buffers.free(runner.card);
    if !freed_errors.is_empty() {
        notes.push(format!("freeing buffers failed: {}", freed_errors.join("; ")));
    }
    if let Err(e) = owned.restore(runner.card) {
        notes.push(format!("the slot's MSI enable could not be put back as the session found it: {e:#}"));
    }
    let delta = after.as_ref().map(|a| a.since(&before)).ok();
    if json {
        let doc = json!({
            "ok": failure.is_none(),
            "seed": seed,
            "slot": info,
            "variables": script.variables.iter().map(|(n, v)| json!({"name": n, "value": v})).collect::<Vec<_>>(),
            "steps": runner.records,
            "msis": runner.msis,
            "msis_not_waited_for": unclaimed,
            "slot_counters": delta,
            "owned": {"slot": owned.holds_slot, "blocks": owned.others.iter().map(|b| b.name()).collect::<Vec<_>>()},
            "spy": trace.as_ref().map(|(p, (w, l))| json!({"output": p.display().to_string(), "records_written": w, "records_lost": l})),
            "failed": failure.as_ref().map(|(place, e)| json!({"line": place, "error": format!("{e:#}")})),
            "notes": owned.notes.iter().chain(&notes).collect::<Vec<_>>(),
        });
        crate::output::print_json(&doc)?;
    } else {
        if let Some(d) = delta {
            crate::outln!(
                "# slot counters over the session: irqs +{}, DMA reads +{} ({} bytes), writes +{} ({} bytes), errors +{}; MSIs waited for {}, not waited for {unclaimed}",
                d.irqs,
                d.dma_reads,
                d.dma_read_bytes,
                d.dma_writes,
                d.dma_write_bytes,
                d.dma_errors,
                runner.msis
            );
        }
        if let Some((p, (w, l))) = &trace {
            crate::outln!("# spy: {w} records written to {}{}", p.display(), if *l > 0 { format!(", {l} LOST") } else { String::new() });
        }
    }
    for n in &notes {
        eprintln!("tlpx: note: {n}");
    }
    match failure {
        None if trace.as_ref().is_some_and(|(_, (_, lost))| *lost > 0) => {
            eprintln!("tlpx: the spy lost records: the trace is incomplete");
            Ok(ExitCode::from(crate::exit::CHECK_FAILED))
        }
        None => Ok(ExitCode::SUCCESS),
        Some((place, e)) => {
            if let Some(c) = e.downcast_ref::<CheckFailed>() {
                eprintln!("tlpx: check failed: {place}: {c}");
                return Ok(ExitCode::from(crate::exit::CHECK_FAILED));
            }
            Err(e.context(place))
        }
    }
}

/// What a session owns and changed on the card before its first line, to give back at its end.
struct Owned {
    /// This session holds the slot's lease (not with --force while another session held it).
    holds_slot: bool,
    /// The other blocks its `write` lines write into, held for the session.
    others: Vec<Block>,
    /// The slot's MSI enable as the session found it (a script that waits for interrupts
    /// turns it on), put back at the end.
    msi: Option<msi::Found>,
    /// What taking the slot did, said at the start.
    notes: Vec<String>,
}

impl Owned {
    fn restore(&self, card: &mut Card) -> anyhow::Result<()> {
        if let Some(found) = &self.msi {
            found.restore(card)?;
        }
        Ok(())
    }
}

/// Waits at most `slices` wait slices of card time for `slot.status.busy` to fall.
fn wait_slot_quiet(card: &mut Card, slices: u32) -> anyhow::Result<bool> {
    for _ in 0..slices {
        if !slot_busy(card)? {
            return Ok(true);
        }
        card.idle(WAIT_SLICE)?;
    }
    Ok(!slot_busy(card)?)
}

/// Takes the slot for a session: its lease (a live owner refused, naming it, unless `force`;
/// a dead one's command fenced and waited for, said), the leases of the blocks the script's
/// `write` lines write into, an accelerator that is still busy with a command no one owns
/// made quiet (the session never inherits another's command), and, for a script that waits
/// for interrupts, the slot's MSI enabled, its latched bit and the queued interrupts dropped.
fn own_the_slot(card: &mut Card, script: &Script, force: bool, waits_irq: bool) -> anyhow::Result<Owned> {
    let mut owned = Owned { holds_slot: false, others: Vec::new(), msi: None, notes: Vec::new() };
    match lease::owner(card, Block::Slot)? {
        Some(o) if o.process != OwnerProcess::Gone => {
            if !force {
                return Err(anyhow::Error::new(tlpx_device::DeviceError::Busy { block: Block::Slot, owner: o.describe() }).context(
                    format!("another session drives the accelerator; --force runs anyway (it breaks {})", Block::Slot.force_breaks()),
                ));
            }
            eprintln!("tlpx: warning: --force: running while {} owns the slot: this breaks {}", o.describe(), Block::Slot.force_breaks());
        }
        _ => {
            card.claim(Block::Slot)?;
            owned.holds_slot = true;
        }
    }
    owned.notes.extend(card.take_notes());
    let blocks: Vec<Block> = script
        .steps
        .iter()
        .filter_map(|s| match &s.op {
            Op::Write { target, .. } => Some(reg::write_blocks(target.register())),
            _ => None,
        })
        .flatten()
        .filter(|b| *b != Block::Slot)
        .fold(Vec::new(), |mut all, b| {
            if !all.contains(&b) {
                all.push(b);
            }
            all
        });
    owned.others = reg::write_leases(card, &blocks, "the script's write lines", force)?;
    if owned.holds_slot && slot_busy(card)? && !wait_slot_quiet(card, QUIET_SLICES)? {
        // A command nobody owns (a forced register write, a driver's): fenced by a lease
        // ending while the DUT is busy, as a dead owner's is, then waited for.
        card.release(Block::Slot)?;
        card.claim(Block::Slot)?;
        if !wait_slot_quiet(card, QUIET_SLICES)? {
            bail!(
                "the accelerator is busy (slot.status.busy) with a command this session did not start, and stays busy with its DMA fenced: \
                 reset the card (restart tlpx-sim) before running a session"
            );
        }
        owned.notes.push("the accelerator was busy with a command no session owned: its DMA was fenced and it is quiet now".into());
    }
    if waits_irq {
        // The slot's MSI must be enabled (it is at reset; another tool may have masked it), its
        // latched bit clear, and interrupts queued before the session dropped.
        let bit = tlpx_regs::constants::MSI_SLOT as u32;
        let found = msi::switch(card, bit, true)?;
        if !found.was_on {
            owned.notes.push("pcie_msi.enable had the slot's bit off: turned on for the session".into());
        }
        owned.msi = Some(found);
        msi::clear_latched(card, bit)?;
        while card.device().wait_interrupt(MSI_WAIT_MASK, Duration::ZERO)?.is_some() {}
    }
    Ok(owned)
}

/// Starts `--spy`'s capture: the trace's header (with the DUT's registers from --regs) and the
/// spy's capture of the whole session.
fn start_spy(
    session: &mut Session,
    path: &std::path::Path,
    loaded: &reg::Loaded,
    info: &crate::slot::SlotInfo,
) -> anyhow::Result<SpySession> {
    {
        let card = &mut session.card;
        card.require(Feature::Spy, "spy")?;
    }
    let time_mode = session.environment.time_mode_at_start().unwrap_or(tlpx_device::TimeMode::Hardware);
    let (filters, trigger) = (Filters::default(), Trigger::default());
    let (mut header, _) = crate::cmd::spy::trace_header(session, &filters, &trigger, time_mode)?;
    // The DUT's registers from --regs: the trace names its window's accesses by them.
    header.card.slot_registers = reg::slot_registers(&loaded.map, &info.dut_name);
    let (mps, _) = session.mps_mrrs();
    let card = &mut session.card;
    let mut writer = TraceWriter::create(path, &header).map_err(|e| anyhow!("creating {}: {e}", path.display()))?;
    writer.flush().map_err(|e| anyhow!("writing {}: {e}", path.display()))?;
    let capture = Capture::start_with_mps(card, SPY_RING_RECORDS, mps, &filters, &trigger)?;
    Ok(SpySession { path: path.to_path_buf(), writer, capture, batch: Vec::new() })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lines(text: &str) -> Vec<(String, String)> {
        text.lines().enumerate().map(|(i, l)| (format!("t:{}", i + 1), l.to_owned())).collect()
    }

    fn check(text: &str, set: &[(&str, &str)]) -> anyhow::Result<Script> {
        let set: Vec<(String, String)> = set.iter().map(|(a, b)| ((*a).to_owned(), (*b).to_owned())).collect();
        parse(&lines(text), &set, &RegMap::card(), false)
    }

    #[test]
    fn a_good_script_parses_with_its_variables_and_buffers() {
        let s = check(
            "default size 64\nbuffer src $size random # a comment\nbuffer dst ${size} zero\nwrite ident.scratch 0x12\n\
             write ident.scratch @src.lo\nwrite ident.scratch crc32(src)\nexpect ident.scratch ~crc32(src)\ncompare src dst\n\
             dump src 16\ncrc32 dst\nwait irq 1ms\nwait ident.scratch size(src) 1ms",
            &[("size", "1025")],
        )
        .expect("parses");
        assert_eq!(s.buffers, vec![("src".to_owned(), 1025), ("dst".to_owned(), 1025)]);
        assert_eq!(s.variables, vec![("size".to_owned(), "1025".to_owned())]);
        assert_eq!(s.steps.len(), 11);
        assert!(matches!(s.steps[4].op, Op::Write { value: Value::Crc { buffer: 0, inverted: false }, .. }));
        assert!(matches!(s.steps[5].op, Op::Expect { value: Value::Crc { buffer: 0, inverted: true }, .. }));
        // Without --set the default applies.
        assert_eq!(check("default size 64\nbuffer a $size zero", &[]).expect("parses").buffers[0].1, 64);
    }

    #[test]
    fn every_bad_line_is_named_with_its_text_and_what_is_accepted() {
        let e = check(
            "buffer c 16 sideways\nbuffer b 16 random\nwrite ident.magic 1\nwrite ident.scratch @b\nwrite ident.scratch 0x1_0000_0000\n\
             frobnicate\ncompare b nosuch\nbuffer x $nope zero\nwait irq soon\nread ident.nosuch\nwrite ident.scratch @c.lo",
            &[("unused", "1")],
        )
        .expect_err("bad")
        .to_string();
        for want in [
            "11 bad lines; nothing was run",
            "t:1: `buffer c 16 sideways`: fill \"sideways\": give random, zero or a byte",
            "t:3: `write ident.magic 1`: ident.magic is read-only",
            "t:4: `write ident.scratch @b`: @b is a 64-bit bus address (64 bits) and ident.scratch has 32 bits: write @b.lo and @b.hi",
            "t:5: `write ident.scratch 0x1_0000_0000`: 0x100000000 does not fit ident.scratch",
            "t:6: `frobnicate`: \"frobnicate\" is not a command; a line is one of: buffer NAME SIZE",
            "t:7: `compare b nosuch`: no buffer \"nosuch\" (buffers so far: b)",
            "t:8: `buffer x $nope zero`: $nope is not set: give --set nope=VALUE",
            "t:9: `wait irq soon`: TIMEOUT: \"soon\" is not a duration",
            "t:10: `read ident.nosuch`: no register \"nosuch\" in region ident",
            // A buffer whose line was bad is not defined for the lines after it.
            "t:11: `write ident.scratch @c.lo`: no buffer \"c\"",
            "--set unused=...: the script uses no $unused",
        ] {
            assert!(e.contains(want), "missing {want:?} in:\n{e}");
        }
    }

    #[test]
    fn sizes_must_agree_and_names_need_regs() {
        let e = check("buffer a 4 zero\nbuffer b 8 zero\ncompare a b", &[]).expect_err("sizes").to_string();
        assert!(e.contains("a has 4 bytes and b 8: give the length"), "{e}");
        assert!(check("buffer a 4 zero\nbuffer b 8 zero\ncompare a b 4", &[]).is_ok());
        let e = check("read pci_epf_test.magic", &[]).expect_err("no regs").to_string();
        assert!(e.contains("need --regs"), "{e}");
        let e = check("buffer a 4 zero\nbuffer a 4 zero", &[]).expect_err("twice").to_string();
        assert!(e.contains("already defined"), "{e}");
        assert!(check("# nothing\n", &[]).expect_err("empty").to_string().contains("no lines to run"));
    }

    #[test]
    fn crc32_is_zlib_s() {
        // zlib.crc32(b"123456789") == 0xcbf43926 (the CRC-32 check value).
        assert_eq!(crc32(b"123456789"), 0xcbf4_3926);
    }
}
