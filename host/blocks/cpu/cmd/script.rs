//! `tlpx script`: the exerciser script language (docs/firmware.md).
//!
//! ```text
//!  check FILE              compile, print the program's summary or every error (file:line:col: reason)
//!  compile FILE -o OUT     write the binary image the card's soft CPU runs (--disassemble: the listing too)
//!
//!  run FILE                compile for the card (its map hash and clock), run it on the card's soft CPU,
//!                          print its result records as they come and the end status
//! ```
//!
//! `check` and `compile` work without a card: the register names come from the map this tlpx
//! was built with. Exit status 0 when the script compiles, 2 when it does not, when its image
//! and the firmware's value table do not fit the card's script area (16 KiB), or when the file
//! cannot be read (a script source is at most [`MAX_SOURCE_BYTES`], 1 MiB). `run` exits 0 when
//! the script ended OK, 1 when it failed (an assert, an event timeout, a DMA limit, stopped by
//! Ctrl-C), 2 on bad input (a script error, a script too large, no CPU).
//!
//! While a script runs, a progress bar counts its result records against those it sends
//! when it runs to its end ([`expected_records`]), with an estimate of the time left.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context;
use clap::{Args, Subcommand};
use serde::Serialize;
use tlpx_device::cpu::{SCRIPT_AREA, SCRIPT_AREA_LEN};
use tlpx_script::image::Insn;
use tlpx_script::{lex::parse_clock, AreaError, Diagnostic, Options, Program};

/// The document's types are tlpx-results'.
pub use tlpx_results::script::{EndDoc, HostSideDoc, RecordDoc, RunBody, RunParameters};

use crate::input;

/// Largest script source read (bytes). The language has no bound of its own on a file's
/// length (comments, blank lines); what a script may compile to is bounded by the card's 16 KiB
/// script area, a few hundred statements, so 1 MiB leaves room for over 1 KiB of text per
/// statement while an endless input (/dev/zero) stops at once.
pub const MAX_SOURCE_BYTES: u64 = 1 << 20;

#[derive(Debug, Args)]
pub struct Cmd {
    #[command(subcommand)]
    action: Action,
}

#[derive(Debug, Subcommand)]
enum Action {
    /// Compile a script and print its summary, or its errors (exit 2); the image and the
    /// firmware's value table must fit the card's 16 KiB script area.
    Check(Source),
    /// Compile a script into the binary image the card's soft CPU interprets.
    Compile {
        #[command(flatten)]
        source: Source,
        /// Where to write the image.
        #[arg(short = 'o', long = "output", value_name = "OUT.bin")]
        output: PathBuf,
        /// Also print the image's listing (instructions, DMA descriptors, events, result slots).
        #[arg(long)]
        disassemble: bool,
    },
    /// Compile a script for the card and run it on its soft CPU; print the result records.
    Run {
        /// The script (.tlpxs; at most 1 MiB).
        file: PathBuf,
        /// Firmware image to load when the CPU is not running a ready firmware [default:
        /// build/firmware/tlpx-fw.img, found above the executable or the current directory].
        #[arg(long, value_name = "IMG", env = "TLPX_FIRMWARE")]
        firmware: Option<PathBuf>,
        /// Host DMA buffer for the script's `dma` runs, e.g. 1MiB [default: what the script
        /// needs (its largest base + window), at least 4 KiB].
        #[arg(long, value_name = "SIZE")]
        buffer: Option<String>,
        /// Also write the result document (JSON) to this file.
        #[arg(long, short = 'o', value_name = "FILE.json")]
        output: Option<PathBuf>,
        /// The host side of what the script drives, served while it runs: `loop[:SIZE]` answers
        /// the real-time loop's iterations the CPU starts (buffer of SIZE bytes, default 1KiB;
        /// polling, register return), `irq` acknowledges the interrupt timer's fires (user
        /// stage) and collects their samples. Repeat or comma-separate for both.
        #[arg(long, value_name = "SIDE", value_delimiter = ',')]
        serve: Vec<String>,
    },
}

#[derive(Debug, Args)]
struct Source {
    /// The script (.tlpxs; at most 1 MiB).
    file: PathBuf,
    /// Card clock the script's times (ns, us, ms, s) are converted with, e.g. 125MHz, 250MHz.
    #[arg(long, default_value = "125MHz")]
    clock: String,
}

#[derive(Serialize)]
struct CheckDoc<'a> {
    file: String,
    ok: bool,
    errors: Vec<ErrorDoc>,
    #[serde(skip_serializing_if = "Option::is_none")]
    program: Option<&'a Program>,
    #[serde(skip_serializing_if = "Option::is_none")]
    image_bytes: Option<usize>,
}

#[derive(Serialize)]
struct ErrorDoc {
    /// 0 (with col 0) for an error of the whole script: it does not fit the script area.
    line: usize,
    col: usize,
    message: String,
}

/// Reads a script source: UTF-8 text of at most [`MAX_SOURCE_BYTES`].
fn read_source(path: &Path) -> anyhow::Result<String> {
    let file = path.display();
    let text = input::read_capped(path, MAX_SOURCE_BYTES).map_err(|e| {
        anyhow::anyhow!("cannot read script {file}: {e}; a script source is text of at most {}", input::size_text(MAX_SOURCE_BYTES))
    })?;
    String::from_utf8(text).map_err(|e| anyhow::anyhow!("script {file} is not UTF-8 text (byte {})", e.utf8_error().valid_up_to()))
}

fn load(source: &Source) -> anyhow::Result<(String, Result<Program, Vec<Diagnostic>>)> {
    let clock_hz = parse_clock(&source.clock).map_err(|e| anyhow::anyhow!("--clock: {e}"))?;
    let text = read_source(&source.file)?;
    Ok((source.file.display().to_string(), tlpx_script::compile(&text, &Options { clock_hz })))
}

/// The image of `program` when it fits the card's script area; else the refusal, naming
/// both sizes (the area is the firmware's SCRIPT_AREA..SCRIPT_AREA_END, firmware/src/hw.h,
/// as tlpx_device::cpu has it).
fn image_for_card(file: &str, program: &Program) -> Result<Vec<u8>, String> {
    program.encode_for_area(SCRIPT_AREA_LEN).map_err(|e| area_refusal(file, &e))
}

fn area_refusal(file: &str, e: &AreaError) -> String {
    format!(
        "{file}: the script does not fit the card's script area (0x{SCRIPT_AREA:x}..0x{:x}): {e}; \
         split the script, or repeat statements with a loop",
        SCRIPT_AREA + SCRIPT_AREA_LEN as u64
    )
}

fn print_errors(file: &str, errors: &[Diagnostic]) {
    for d in errors {
        eprintln!("{}", d.render(file));
    }
    eprintln!("{file}: {} error(s); the script was not compiled", errors.len());
}

pub fn run(cmd: &Cmd, device: &str, json: bool) -> anyhow::Result<ExitCode> {
    match &cmd.action {
        Action::Run { file, firmware, buffer, output, serve } => {
            run_on_card(file, firmware.as_deref(), buffer.as_deref(), output.as_deref(), serve, device, json)
        }
        Action::Check(source) => {
            let (file, result) = load(source)?;
            // a script that compiles must also fit the card's script area
            if let Some(Err(e)) = result.as_ref().ok().map(|p| p.encode_for_area(SCRIPT_AREA_LEN)) {
                let message = area_refusal(&file, &e);
                if json {
                    let errors = vec![ErrorDoc { line: 0, col: 0, message }];
                    let doc = CheckDoc { file, ok: false, errors, program: None, image_bytes: Some(e.image_len) };
                    crate::outln!("{}", serde_json::to_string_pretty(&doc)?);
                } else {
                    eprintln!("{message}");
                }
                return Ok(ExitCode::from(2));
            }
            if json {
                let (errors, program) = match &result {
                    Ok(p) => (Vec::new(), Some(p)),
                    Err(ds) => (ds.iter().map(|d| ErrorDoc { line: d.line, col: d.col, message: d.message.clone() }).collect(), None),
                };
                let doc = CheckDoc { file, ok: program.is_some(), errors, image_bytes: program.map(|p| p.encode().len()), program };
                crate::outln!("{}", serde_json::to_string_pretty(&doc)?);
                return Ok(if result.is_ok() { ExitCode::SUCCESS } else { ExitCode::from(2) });
            }
            match result {
                Ok(p) => {
                    crate::outln!("{file}: ok: {}", tlpx_script::summary(&p));
                    Ok(ExitCode::SUCCESS)
                }
                Err(errors) => {
                    print_errors(&file, &errors);
                    Ok(ExitCode::from(2))
                }
            }
        }
        Action::Compile { source, output, disassemble } => {
            crate::args::refuse_same_file("--output", output, "SOURCE", &source.file)?;
            let (file, result) = load(source)?;
            let program = match result {
                Ok(p) => p,
                Err(errors) => {
                    print_errors(&file, &errors);
                    return Ok(ExitCode::from(2));
                }
            };
            let image = match image_for_card(&file, &program) {
                Ok(image) => image,
                Err(e) => {
                    eprintln!("{e}");
                    return Ok(ExitCode::from(2));
                }
            };
            // the image must read back as the same program, as the card will read it
            let back = tlpx_script::decode(&image, tlpx_regs::MAP_HASH)
                .map_err(|e| anyhow::anyhow!("internal: the image does not decode: {e}"))?;
            anyhow::ensure!(back == program, "internal: the image decodes to another program");
            write_file(output, &image)?;
            if *disassemble {
                crate::outln!("{}", tlpx_script::disassemble(&program).trim_end_matches('\n'));
            }
            if json {
                crate::outln!(
                    "{}",
                    serde_json::json!({ "file": file, "output": output.display().to_string(), "image_bytes": image.len() })
                );
            } else {
                crate::outln!("{file}: wrote {} ({} bytes): {}", output.display(), image.len(), tlpx_script::summary(&program));
            }
            Ok(ExitCode::SUCCESS)
        }
    }
}

fn write_file(path: &Path, bytes: &[u8]) -> anyhow::Result<()> {
    std::fs::write(path, bytes).with_context(|| format!("cannot write {}", path.display()))
}

// `script run` ------------------------------------------------------------------------------

/// Smallest host buffer a run gets.
const MIN_BUFFER: u64 = 4096;

fn record_doc(program: &Program, index: u64, first_cycle: u64, r: &tlpx_script::ResultRecord) -> RecordDoc {
    let (name, kind) = match program.slots.get(usize::from(r.slot)) {
        _ if r.slot == tlpx_script::image::NO_SLOT => ("(end)".to_string(), "end".to_string()),
        Some(slot) => (slot.name.clone(), slot.kind.name().to_string()),
        None => (format!("slot {}", r.slot), format!("kind {}", r.kind)),
    };
    RecordDoc {
        index,
        slot: r.slot,
        name,
        kind,
        status: r.status,
        status_name: super::fw::status_name(u32::from(r.status)),
        pc: r.pc,
        cycle: r.cycle,
        delta_cycles: r.cycle.wrapping_sub(first_cycle),
        value: r.value,
        aux: r.aux,
    }
}

/// Width of the slot column: the longest slot name (at least "(end)"), at most 40.
fn name_width(program: &Program) -> usize {
    program.slots.iter().map(|s| s.name.chars().count()).max().unwrap_or(0).clamp(5, 40)
}

fn table_header(w: usize) -> String {
    format!(
        "{:>4}  {:<w$}  {:<5}  {:<16}  {:>12}  {:>11}  {:>19}  {:>19}",
        "#", "slot", "kind", "status", "cycle", "Δcycles", "value", "aux"
    )
}

fn record_line(d: &RecordDoc, w: usize) -> String {
    format!(
        "{:>4}  {:<w$}  {:<5}  {:<16}  {:>12}  {:>11}  {:>19}  {:>19}",
        d.index, d.name, d.kind, d.status_name, d.cycle, d.delta_cycles, d.value, d.aux
    )
}

/// Compiles `source` with `opts`; prints its errors (file:line:col: reason) when it does not.
fn compile_or_report(file: &str, text: &str, opts: &Options) -> Option<Program> {
    match tlpx_script::compile(text, opts) {
        Ok(p) => Some(p),
        Err(errors) => {
            print_errors(file, &errors);
            None
        }
    }
}

/// What `--serve` asked for.
#[derive(Debug, Default, PartialEq)]
struct HostSides {
    /// The real-time loop's buffer bytes.
    loop_size: Option<u32>,
    irq: bool,
}

fn parse_serve(values: &[String]) -> anyhow::Result<HostSides> {
    let mut sides = HostSides::default();
    for v in values {
        let (name, arg) = v.split_once(':').map_or((v.as_str(), None), |(n, a)| (n, Some(a)));
        match (name, arg) {
            ("loop", size) => {
                let size = match size {
                    None => 1024,
                    Some(a) => crate::sizes::parse_size(a)
                        .and_then(|n| u32::try_from(n).ok())
                        .filter(|n| (8..=4096).contains(n) && n % 4 == 0)
                        .ok_or_else(|| {
                            anyhow::anyhow!("--serve {v:?}: the loop's buffer must be 8..=4096 bytes, a multiple of 4 (e.g. loop:1K)")
                        })?,
                };
                sides.loop_size = Some(size);
            }
            ("irq", None) => sides.irq = true,
            _ => anyhow::bail!("--serve {v:?}: accepted are loop, loop:SIZE (e.g. loop:256) and irq"),
        }
    }
    Ok(sides)
}

/// The interrupt timer's sample ring when `--serve irq` collects the samples.
const IRQ_RING_RECORDS: u32 = 1024;
/// Longest a turn of the run loop waits for the timer's interrupt (card time on the simulator).
const IRQ_WAIT: std::time::Duration = std::time::Duration::from_micros(20);

#[allow(clippy::too_many_arguments)]
fn run_on_card(
    path: &Path,
    firmware: Option<&Path>,
    buffer: Option<&str>,
    output: Option<&Path>,
    serve: &[String],
    device: &str,
    json: bool,
) -> anyhow::Result<ExitCode> {
    refuse_output_over_inputs(path, firmware, output)?;
    let sides = match parse_serve(serve) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("tlpx: {e:#}");
            return Ok(ExitCode::from(2));
        }
    };
    let started = std::time::Instant::now();
    let file = path.display().to_string();
    let text = read_source(path)?;
    // errors first, without a card (at the default clock; the clock changes cycle counts,
    // not the image's size, so a script that does not fit is refused here too)
    let Some(program) = compile_or_report(&file, &text, &Options::default()) else {
        return Ok(ExitCode::from(2));
    };
    if let Err(e) = image_for_card(&file, &program) {
        eprintln!("{e}");
        return Ok(ExitCode::from(2));
    }
    let buffer_asked = buffer.map(parse_buffer).transpose()?;

    // A firmware file given is read (and checked) before the card is opened.
    let given_firmware = firmware.map(|p| super::fw::read_image(p).map(|image| (p.to_path_buf(), image))).transpose()?;

    let mut session = crate::session::Session::open(device)?;
    let card = &mut session.card;
    let mut cpu = tlpx_device::cpu::Cpu::open(card)?;
    // The CPU's lease before anything is loaded into it: a script another process runs is
    // not replaced under it (the run below keeps the claim).
    card.claim(tlpx_device::lease::Block::Cpu)?;
    let id = card.identity().clone();
    let Some((program, image)) = card_program(&file, &text, id.clock_hz, id.map_hash)? else {
        return Ok(ExitCode::from(2));
    };
    let buffer_len = buffer_size(buffer_asked, &program)?;

    // a ready firmware, or the default one loaded
    let firmware_used = ensure_firmware(card, &mut cpu, given_firmware, json)?;

    let dma = host_buffer(card, buffer_len)?;
    let width = name_width(&program);
    if !json {
        print_start(&file, &program, &dma, width);
    }
    crate::progress::install_stop_handler();
    let expected = expected_records(&program);
    let progress = crate::progress::Progress::units(expected, "records", json);
    progress.start(&file);
    let mut records: Vec<RecordDoc> = Vec::new();
    let mut first_cycle = None;
    let mut console = Vec::new();
    // Console lines go to stderr whole, so that they never cut a record line in two.
    let mut console_printed = 0;
    let mut loop_side = match sides.loop_size {
        Some(size) => Some(tlpx_device::rt_loop::Responder::attach(card, size)?),
        None => None,
    };
    let mut irq_side = if sides.irq { Some(tlpx_device::irq_timer::Responder::attach(card, IRQ_RING_RECORDS)?) } else { None };
    let result = cpu.run_script(
        card,
        &image,
        &dma,
        tlpx_device::cpu::ScriptIo {
            stop: &mut crate::progress::stop_requested,
            host_side: &mut |card| {
                let mut did = false;
                if let Some(side) = loop_side.as_mut() {
                    did |= side.serve(card)?;
                }
                if let Some(side) = irq_side.as_mut() {
                    did |= side.serve(card, if did { std::time::Duration::ZERO } else { IRQ_WAIT })?;
                }
                Ok(did)
            },
            on_record: &mut |raw| {
                let r = tlpx_script::ResultRecord::decode(raw);
                let first = *first_cycle.get_or_insert(r.cycle);
                let d = record_doc(&program, records.len() as u64, first, &r);
                if !json {
                    progress.println(&record_line(&d, width));
                }
                records.push(d);
                progress.done_one();
            },
            on_console: &mut |bytes| {
                console.extend_from_slice(bytes);
                if !json {
                    if let Some(end) = console[console_printed..].iter().rposition(|&b| b == b'\n') {
                        let lines = &console[console_printed..console_printed + end + 1];
                        progress.suspend(|| eprint!("{}", String::from_utf8_lossy(lines)));
                        console_printed += end + 1;
                    }
                }
            },
        },
    );
    progress.finish();
    if !json && console_printed < console.len() {
        eprintln!("{}", String::from_utf8_lossy(&console[console_printed..]));
    }
    let freed = card.device().free_dma(dma);
    let loop_finished = loop_side.map(|side| side.finish(card));
    let irq_finished = irq_side.map(|side| side.finish(card));
    let end = result?;
    freed?;
    let host_side = host_side_doc(loop_finished, irq_finished)?;

    let ok = end.status == u32::from(tlpx_script::status::OK);
    if !json {
        print_end(&end, &host_side, id.clock_hz);
    }
    let parameters = RunParameters {
        file: file.clone(),
        firmware: firmware_used,
        buffer_bytes: buffer_len as u64,
        clock_hz: id.clock_hz,
        map_hash: id.map_hash,
        image_bytes: image.len(),
    };
    let body = run_body(records, &end, &console, host_side);
    // the common result fields (schema tlpx-result v1), kind "script"
    let records_came = body.points.len();
    let mut doc = crate::results::ResultDoc::new(
        "script",
        parameters,
        session.environment.clone(),
        session.link.clone(),
        None,
        body,
        started.elapsed().as_secs_f64(),
        session.notes.clone(),
    );
    if crate::progress::stop_requested() {
        // The records that came, of those a run to the end sends (more if the count is short).
        doc.stopped_at(records_came, expected.max(records_came as u64) as usize);
    }
    // 130 after Ctrl-C (the records that came are kept), 1 if the script failed, else 0.
    doc.emit(output, json, !ok)
}

/// The script compiled for the card: its clock converts the times, its map hash goes into
/// the image; the image is checked to decode to the same program. None when the compiler
/// refused it (its diagnostics are printed).
fn card_program(file: &str, text: &str, clock_hz: u32, map_hash: u32) -> anyhow::Result<Option<(Program, Vec<u8>)>> {
    let Some(mut program) = compile_or_report(file, text, &Options { clock_hz }) else {
        return Ok(None);
    };
    program.map_hash = map_hash;
    let image = image_for_card(file, &program).map_err(|e| anyhow::anyhow!(e))?;
    let back = tlpx_script::decode(&image, map_hash).map_err(|e| anyhow::anyhow!("internal: the image does not decode: {e}"))?;
    anyhow::ensure!(back == program, "internal: the image decodes to another program");
    Ok(Some((program, image)))
}

/// The lines before a run's records: the script's summary, the host buffer, the table header.
fn print_start(file: &str, program: &Program, dma: &tlpx_device::DmaBuffer, width: usize) {
    crate::outln!("{file}: {}", tlpx_script::summary(program));
    crate::outln!("running on the card's CPU with a host buffer of {} at bus 0x{:x}", crate::output::bytes(dma.len as u64), dma.bus_addr);
    crate::outln!("{}", table_header(width));
}

/// The host buffer of a run, `len` bytes, holding the generator's default pattern.
fn host_buffer(card: &mut tlpx_device::card::Card, len: usize) -> anyhow::Result<tlpx_device::DmaBuffer> {
    let dma = card.device().alloc_dma(len)?;
    // As for tlpx bw: the buffer holds the generator's default pattern (counter, seed 1), so a
    // read with the default pattern checks out wherever the script has not written; a read
    // with another pattern or seed checks what an earlier write of that pattern left.
    if let Err(e) = tlpx_device::generator::fill_pattern(&dma, tlpx_device::generator::DataPattern::Counter, 1) {
        let _ = card.device().free_dma(dma);
        return Err(e.into());
    }
    Ok(dma)
}

/// Refuses an --output that would overwrite the script's source or the firmware given.
fn refuse_output_over_inputs(path: &Path, firmware: Option<&Path>, output: Option<&Path>) -> anyhow::Result<()> {
    if let Some(out) = output {
        crate::args::refuse_same_file("--output", out, "SOURCE", path)?;
        if let Some(fw) = firmware {
            crate::args::refuse_same_file("--output", out, "--firmware", fw)?;
        }
    }
    Ok(())
}

/// `--buffer`'s size in bytes (more than zero).
fn parse_buffer(b: &str) -> anyhow::Result<u64> {
    crate::sizes::parse_size(b)
        .filter(|n| *n > 0)
        .ok_or_else(|| anyhow::anyhow!("--buffer {b:?} is not a size in bytes such as 64K or 1MiB"))
}

/// The host buffer's length: what --buffer asked (refused below what the script's dma runs
/// need), else what they need; at least [`MIN_BUFFER`], in whole 4 KiB pages.
fn buffer_size(buffer_asked: Option<u64>, program: &Program) -> anyhow::Result<usize> {
    let needed = u64::from(program.buffer_len).max(MIN_BUFFER);
    let buffer_len = match buffer_asked {
        Some(n) if n < u64::from(program.buffer_len) => {
            anyhow::bail!(
                "--buffer {n} bytes is smaller than the {} bytes the script's dma runs need (largest base + window)",
                program.buffer_len
            )
        }
        Some(n) => n.max(MIN_BUFFER),
        None => needed,
    };
    Ok(usize::try_from(buffer_len.div_ceil(4096) * 4096)?)
}

/// Leaves the card's CPU running a ready firmware: the one given (loaded in any case), else
/// the default one when the CPU is not running a ready one. The path of the firmware loaded.
fn ensure_firmware(
    card: &mut tlpx_device::card::Card,
    cpu: &mut tlpx_device::cpu::Cpu,
    given_firmware: Option<(PathBuf, tlpx_script::FirmwareImage)>,
    json: bool,
) -> anyhow::Result<Option<String>> {
    let status = cpu.status(card)?;
    let ready = status.state == tlpx_device::cpu::CpuState::Running && cpu.mailbox(card)?.ready();
    let mut firmware_used = None;
    if !ready || given_firmware.is_some() {
        let (fw_path, fw) = match given_firmware {
            Some(given) => given,
            None => {
                let fw_path = super::fw::default_firmware_path();
                if !fw_path.exists() {
                    anyhow::bail!(
                        "the CPU is not running a ready firmware and there is no image at {}: build it with `make firmware`, or pass --firmware IMG",
                        fw_path.display()
                    );
                }
                let fw = super::fw::read_image(&fw_path)?;
                (fw_path, fw)
            }
        };
        super::fw::load_checked(card, cpu, &fw, &fw_path)?;
        cpu.timeout = tlpx_device::cpu::DEFAULT_BOOT_TIMEOUT;
        let s = cpu.start(card)?;
        if !json {
            eprint!("{}", String::from_utf8_lossy(&s.console));
            eprintln!("tlpx: loaded firmware {} ({}) and started it", s.mailbox.version_string(), fw_path.display());
        }
        firmware_used = Some(fw_path.display().to_string());
    }
    Ok(firmware_used)
}

/// What the host side served during the run (`--serve loop`, `--serve irq`).
fn host_side_doc(
    loop_finished: Option<Result<(u64, u64), tlpx_device::DeviceError>>,
    irq_finished: Option<Result<(u64, Vec<tlpx_device::irq_timer::Sample>), tlpx_device::DeviceError>>,
) -> anyhow::Result<HostSideDoc> {
    let mut host_side = HostSideDoc::default();
    if let Some(finished) = loop_finished {
        let (served, data_errors) = finished?;
        host_side.loop_served = Some(served);
        host_side.loop_data_errors = Some(data_errors);
    }
    if let Some(finished) = irq_finished {
        let (acked, samples) = finished?;
        let user: Vec<f64> = samples.iter().filter_map(|s| s.user_cycles).map(f64::from).collect();
        host_side.irq_acked = Some(acked);
        host_side.irq_samples = Some(samples.len());
        host_side.irq_user_cycles = tlpx_model::stats::Summary::of(&user);
    }
    Ok(host_side)
}

/// The text lines after a run: how the script ended, and what the host side served.
fn print_end(end: &tlpx_device::cpu::CommandEnd, host_side: &HostSideDoc, clock_hz: u32) {
    crate::outln!(
        "end: {} ({}){}; {} record(s), {} instruction(s) executed",
        super::fw::status_name(end.status),
        end.status,
        if end.aborted { ", stopped by Ctrl-C" } else { "" },
        end.records,
        end.instructions
    );
    if let (Some(served), Some(errors)) = (host_side.loop_served, host_side.loop_data_errors) {
        crate::outln!(
            "host side, real-time loop: {served} iteration(s) answered (register return, polling), {errors} buffer(s) with wrong data"
        );
    }
    if let (Some(acked), Some(samples)) = (host_side.irq_acked, host_side.irq_samples) {
        let stage = host_side.irq_user_cycles.as_ref().map_or("no user-stage samples".to_string(), |u| {
            let us = |c: f64| c / f64::from(clock_hz) * 1e6;
            format!(
                "user stage (fire to ack_user, card time) min {:.2} / median {:.2} / p99 {:.2} / max {:.2} µs over {} samples",
                us(u.min),
                us(u.median),
                us(u.p99),
                us(u.max),
                u.count
            )
        });
        crate::outln!("host side, interrupt timer: {acked} interrupt(s) acknowledged, {samples} sample(s); {stage}");
    }
}

/// The body of a run's result document.
fn run_body(records: Vec<RecordDoc>, end: &tlpx_device::cpu::CommandEnd, console: &[u8], host_side: HostSideDoc) -> RunBody {
    let ok = end.status == u32::from(tlpx_script::status::OK);
    RunBody {
        points: records,
        end: EndDoc {
            status: end.status,
            status_name: super::fw::status_name(end.status),
            ok,
            records: end.records,
            instructions: end.instructions,
            aborted: end.aborted,
        },
        console: String::from_utf8_lossy(console).into_owned(),
        host_side,
    }
}

/// The result records a run of `program` sends when it runs to its end: each recording
/// instruction (mark, peek, check; a dma that waits, an event wait, with a slot) times the
/// counts of the loops around it, and the end record. A script that fails or is stopped
/// sends fewer; the progress bar then ends short of its length.
pub fn expected_records(program: &Program) -> u64 {
    // Loop counts multiply: the top of the stack is how often the present instruction runs.
    let mut runs = vec![1u64];
    let mut total = 1u64;
    for insn in &program.insns {
        let times = runs.last().copied().unwrap_or(1);
        match insn {
            Insn::Loop { count } => runs.push(times.saturating_mul(u64::from(*count))),
            Insn::EndLoop { .. } if runs.len() > 1 => {
                runs.pop();
            }
            Insn::Mark { .. } | Insn::Peek { .. } | Insn::Check { .. } => total = total.saturating_add(times),
            Insn::Dma { slot: Some(_), nowait: false, .. } | Insn::WaitEvent { slot: Some(_), .. } => {
                total = total.saturating_add(times);
            }
            _ => {}
        }
    }
    total
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn expected_records_count_loops_and_the_end_record() {
        let p = |src: &str| tlpx_script::compile(src, &Options::default()).expect("compiles");
        assert_eq!(expected_records(&p("mark a\nmark b\n")), 3);
        assert_eq!(expected_records(&p("loop 4 {\n  mark a\n  loop 3 {\n    mark b\n  }\n}\nmark c\n")), 4 + 12 + 1 + 1);
        // A dma that does not wait records nothing.
        assert_eq!(expected_records(&p("dma write size=64B count=1 nowait\nmark a\n")), 2);
    }

    #[test]
    fn serve_values_are_parsed_or_refused_by_name() {
        let p = |v: &[&str]| parse_serve(&v.iter().map(|s| s.to_string()).collect::<Vec<_>>());
        assert_eq!(p(&[]).expect("no side"), HostSides::default());
        assert_eq!(p(&["loop"]).expect("loop"), HostSides { loop_size: Some(1024), irq: false });
        assert_eq!(p(&["loop:256", "irq"]).expect("both"), HostSides { loop_size: Some(256), irq: true });
        assert_eq!(p(&["loop:4KiB"]).expect("4KiB").loop_size, Some(4096));
        for bad in ["loop:6", "loop:0", "loop:8K", "loop:x", "irq:3", "spy", ""] {
            assert!(p(&[bad]).is_err(), "{bad}");
        }
    }

    #[test]
    fn records_are_named_from_the_programs_slots() {
        let program = tlpx_script::compile("mark first\nmark second_with_a_long_name\n", &Options::default()).expect("compiles");
        let rec = |slot: u16, cycle: u64| tlpx_script::ResultRecord { slot, kind: 1, status: 0, pc: 0, cycle, value: 0, aux: 0 };
        let d = record_doc(&program, 1, 100, &rec(1, 150));
        assert_eq!((d.name.as_str(), d.kind.as_str(), d.delta_cycles, d.status_name), ("second_with_a_long_name", "mark", 50, "ok"));
        let end = record_doc(&program, 2, 100, &tlpx_script::ResultRecord { slot: 0xFFFF, kind: 0, status: 7, ..rec(0, 200) });
        assert_eq!((end.name.as_str(), end.kind.as_str(), end.status_name), ("(end)", "end", "stopped"));
        let w = name_width(&program);
        assert_eq!(w, "second_with_a_long_name".len());
        assert_eq!(table_header(w).len(), record_line(&d, w).len() + "Δ".len() - 1, "columns line up");
    }
}
