//! `tlpx fw`: the card's soft CPU and its firmware (docs/firmware.md, "The soft CPU").
//!
//! ```text
//!  load FILE [--no-start]       check the image file, hold the CPU in reset, write it, start it, print the self-test
//!  start | stop                 release the CPU (the card checks the loaded image first) / hold it in reset
//!  status                       the loader (state, refusal reason, CRCs, starts, refusals) and the mailbox
//!  console [--follow] [--duration T]   what the firmware printed
//! ```
//!
//! A bad image file is refused before anything is written to the card, with the field, the
//! value found and what is accepted (exit 2); so is a card without the CPU.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::Context;
use clap::{Args, Subcommand};
use serde::Serialize;
use tlpx_device::card::Card;
use tlpx_device::cpu::{self, Cpu, CpuState, CpuStatus, Mailbox};
use tlpx_device::lease::Block;
use tlpx_script::{firmware, FirmwareImage, FirmwareImageError};

use crate::input::CappedReadError;

#[derive(Debug, Args)]
pub struct Cmd {
    #[command(subcommand)]
    action: Action,
}

#[derive(Debug, Subcommand)]
enum Action {
    /// Check a firmware image file (tlpx-fw.img), load it into the CPU's SRAM and start it.
    Load {
        /// The image (make firmware: build/firmware/tlpx-fw.img; at most 32,544 bytes: the
        /// header and the SRAM's firmware area).
        file: PathBuf,
        /// Only load it: leave the CPU held in reset (`tlpx fw start` later).
        #[arg(long)]
        no_start: bool,
        /// How long to wait for the firmware to say it is ready (wall time), e.g. 10s.
        #[arg(long, default_value = "10s")]
        timeout: String,
    },
    /// Have the card check the loaded image and release the CPU; wait for the firmware.
    Start {
        /// How long to wait for the firmware to say it is ready (wall time), e.g. 10s.
        #[arg(long, default_value = "10s")]
        timeout: String,
    },
    /// Hold the CPU in reset.
    Stop,
    /// The CPU's loader registers and the firmware's mailbox.
    Status,
    /// Print what the firmware wrote on its console.
    Console {
        /// Keep reading until Ctrl-C (or --duration).
        #[arg(long)]
        follow: bool,
        /// With --follow: stop after this long (wall time), e.g. 2s.
        #[arg(long, requires = "follow")]
        duration: Option<String>,
    },
}

/// An error whose message is all that needs saying, with exit status 2 (bad input, no CPU).
pub(crate) fn refuse(message: String) -> anyhow::Error {
    anyhow::anyhow!(message)
}

/// Opens the card `device` names and its CPU; a card without one is refused with how to get it.
pub(crate) fn open_cpu(device: &str) -> anyhow::Result<(Card, Cpu)> {
    let opened = tlpx_device::selector::open(device)?;
    let mut card = Card::open(opened.device).context("opening the card")?;
    let cpu = Cpu::open(&mut card)?;
    Ok((card, cpu))
}

/// [`open_cpu`] for a command that changes what the CPU runs or takes its console's output
/// (`fw load`, `start`, `stop`, `console`): it claims the CPU's lease for its run, so a
/// `tlpx script run` (which owns the CPU) is answered "busy", naming it, instead of having
/// its script stopped or replaced under it. A dead owner's CPU is taken over (said).
fn open_cpu_owned(device: &str) -> anyhow::Result<(Card, Cpu)> {
    let (mut card, cpu) = open_cpu(device)?;
    card.claim(Block::Cpu)?;
    for note in card.take_notes() {
        eprintln!("tlpx: note: {note}");
    }
    Ok((card, cpu))
}

/// Largest firmware image file: its header and the largest payload the format allows, the
/// SRAM's firmware area below the mailbox (0x40000..0x47F00).
pub(crate) const MAX_IMAGE_FILE: u64 = firmware::HEADER_LEN as u64 + firmware::MAX_PAYLOAD as u64;

/// Reads and checks a firmware image file (all the checks that need no card). A file larger
/// than an image can be is refused unread, and an endless one (/dev/zero) after that many
/// bytes, as the format's own refusals are: field, value found, what is accepted.
pub(crate) fn read_image(path: &Path) -> anyhow::Result<FirmwareImage> {
    let name = path.display();
    let bytes = crate::input::read_capped(path, MAX_IMAGE_FILE).map_err(|e| {
        let found = match e {
            CappedReadError::Larger { len, .. } => format!("{len} bytes"),
            CappedReadError::Endless { .. } => format!("more than {MAX_IMAGE_FILE} bytes (it did not end, and was read no further)"),
            other => return refuse(format!("cannot read the firmware image {name}: {other}; nothing was written to the card")),
        };
        let accepted = format!(
            "at most {MAX_IMAGE_FILE} bytes: a {}-byte header and a payload of at most 0x{:x} bytes, the SRAM's firmware area",
            firmware::HEADER_LEN,
            firmware::MAX_PAYLOAD
        );
        refuse(format!("{name}: {}; nothing was written to the card", FirmwareImageError { field: "file", found, accepted }))
    })?;
    FirmwareImage::parse(&bytes).map_err(|e| refuse(format!("{name}: {e}; nothing was written to the card")))
}

/// Where `make firmware` puts the image: build/firmware/tlpx-fw.img, found by walking up from
/// the executable's directory, then from the current directory (as tlpx-sim finds the card
/// libraries). The expected path when it is nowhere.
pub(crate) fn default_firmware_path() -> PathBuf {
    tlpx_device::paths::find_built_file(Path::new("build/firmware/tlpx-fw.img"))
}

/// Checks `image` against the card and loads it (the CPU held in reset meanwhile).
pub(crate) fn load_checked(card: &mut Card, cpu: &Cpu, image: &FirmwareImage, path: &Path) -> anyhow::Result<()> {
    image
        .check_card(card.identity().map_hash, cpu.sram_base())
        .map_err(|e| refuse(format!("{}: {e}; nothing was written to the card", path.display())))?;
    cpu.load(card, &image.payload, image.crc)?;
    Ok(())
}

fn parse_wall(flag: &str, text: &str) -> anyhow::Result<Duration> {
    crate::sizes::parse_duration(flag, text).map(Duration::from_secs_f64).map_err(refuse)
}

/// Writes console bytes to stdout as they come.
fn echo(bytes: &[u8]) {
    let mut out = std::io::stdout().lock();
    let _ = out.write_all(bytes);
    let _ = out.flush();
}

#[derive(Serialize)]
struct StatusDoc {
    cpu: CpuStatus,
    mailbox: Option<Mailbox>,
    ready: bool,
    firmware_version: Option<String>,
}

fn print_status(s: &CpuStatus, m: Option<&Mailbox>) {
    crate::outln!("cpu: {}", s.state.name());
    if s.state == CpuState::Refused {
        crate::outln!("  refused: {}", s.reason);
    }
    crate::outln!(
        "  image: {} bytes at 0x{:x}, claimed CRC-32 0x{:08x}, computed 0x{:08x}",
        s.image_length,
        s.sram_base,
        s.claimed_crc,
        s.computed_crc
    );
    crate::outln!("  starts {}, refusals {}", s.starts, s.refusals);
    match m {
        Some(m) if m.ready() => {
            crate::outln!(
                "firmware: ready (magic ok), version {}, state {}, heartbeat {}",
                m.version_string(),
                m.state_name(),
                m.heartbeat
            );
            crate::outln!(
                "  commands: sequence {} (done {}), last command {}, last status {} ({})",
                m.cmd_seq,
                m.done_seq,
                m.command,
                m.status,
                status_name(m.status)
            );
            crate::outln!(
                "  records written {}, consumed {}; console characters dropped {}",
                m.records_written,
                m.records_consumed,
                m.console_dropped
            );
        }
        Some(m) => crate::outln!("firmware: not ready (mailbox word 0x{:08x}, no magic)", m.magic),
        None => crate::outln!("firmware: not running"),
    }
}

/// The name of a result / command status code (tlpx_script::status).
pub(crate) fn status_name(code: u32) -> &'static str {
    match code {
        0 => "ok",
        1 => "compare_failed",
        2 => "assert_failed",
        3 => "event_timeout",
        4 => "dma_limit",
        5 => "bad_image",
        6 => "buffer_too_small",
        7 => "stopped",
        0x100 => "selftest_failed",
        0x101 => "unknown_command",
        _ => "unknown",
    }
}

/// The console of a boot says the self-test failed (or the firmware trapped).
fn self_test_failed(console: &str) -> bool {
    console.contains("self-test: FAIL") || console.contains("trap: ")
}

/// Starts the CPU and prints what its console said (to stdout unless `json`).
pub(crate) fn start_and_report(card: &mut Card, cpu: &Cpu, json: bool) -> anyhow::Result<cpu::Started> {
    let started = cpu.start(card)?;
    if !json {
        echo(&started.console);
        if !started.console.is_empty() && !started.console.ends_with(b"\n") {
            crate::outln!();
        }
        crate::outln!(
            "tlpx: firmware {} ready (CPU running; starts {}, image CRC-32 0x{:08x} checked by the card)",
            started.mailbox.version_string(),
            started.status.starts,
            started.status.computed_crc
        );
    }
    Ok(started)
}

pub fn run(cmd: &Cmd, device: &str, json: bool) -> anyhow::Result<ExitCode> {
    match &cmd.action {
        Action::Load { file, no_start, timeout } => {
            let timeout = parse_wall("--timeout", timeout)?;
            // the file first: a bad one is refused before the card is even opened
            let image = read_image(file)?;
            let (mut card, mut cpu) = open_cpu_owned(device)?;
            cpu.timeout = timeout;
            load_checked(&mut card, &cpu, &image, file)?;
            if !json {
                crate::outln!(
                    "tlpx: loaded {} ({} bytes, firmware {}, CRC-32 0x{:08x}) at 0x{:x}",
                    file.display(),
                    image.payload.len(),
                    image.version_string(),
                    image.crc,
                    cpu.sram_base()
                );
            }
            if *no_start {
                if json {
                    crate::outln!(
                        "{}",
                        serde_json::json!({ "loaded": file.display().to_string(), "bytes": image.payload.len(), "crc": image.crc, "started": false })
                    );
                }
                return Ok(ExitCode::SUCCESS);
            }
            let started = start_and_report(&mut card, &cpu, json)?;
            let console = String::from_utf8_lossy(&started.console).into_owned();
            if json {
                crate::outln!(
                    "{}",
                    serde_json::to_string_pretty(&serde_json::json!({
                        "loaded": file.display().to_string(),
                        "bytes": image.payload.len(),
                        "crc": image.crc,
                        "started": true,
                        "cpu": started.status,
                        "mailbox": started.mailbox,
                        "console": console,
                    }))?
                );
            }
            if self_test_failed(&console) {
                eprintln!("tlpx: the firmware started but its self-test did not pass (its console above)");
                return Ok(ExitCode::from(1));
            }
            Ok(ExitCode::SUCCESS)
        }
        Action::Start { timeout } => {
            let (mut card, mut cpu) = open_cpu_owned(device)?;
            cpu.timeout = parse_wall("--timeout", timeout)?;
            let started = start_and_report(&mut card, &cpu, json)?;
            if json {
                let console = String::from_utf8_lossy(&started.console).into_owned();
                crate::outln!(
                    "{}",
                    serde_json::to_string_pretty(
                        &serde_json::json!({ "cpu": started.status, "mailbox": started.mailbox, "console": console })
                    )?
                );
            }
            Ok(ExitCode::SUCCESS)
        }
        Action::Stop => {
            let (mut card, cpu) = open_cpu_owned(device)?;
            cpu.stop(&mut card)?;
            let s = cpu.status(&mut card)?;
            if json {
                crate::outln!("{}", serde_json::to_string_pretty(&s)?);
            } else {
                crate::outln!("tlpx: CPU held in reset (state {})", s.state.name());
            }
            Ok(ExitCode::SUCCESS)
        }
        Action::Status => {
            let (mut card, cpu) = open_cpu(device)?;
            let s = cpu.status(&mut card)?;
            let m = if s.state == CpuState::Running { Some(cpu.mailbox(&mut card)?) } else { None };
            if json {
                let doc = StatusDoc {
                    ready: m.as_ref().is_some_and(Mailbox::ready),
                    firmware_version: m.as_ref().filter(|m| m.ready()).map(Mailbox::version_string),
                    cpu: s,
                    mailbox: m,
                };
                crate::outln!("{}", serde_json::to_string_pretty(&doc)?);
            } else {
                print_status(&s, m.as_ref());
            }
            Ok(ExitCode::SUCCESS)
        }
        Action::Console { follow, duration } => {
            let limit = duration.as_deref().map(|d| parse_wall("--duration", d)).transpose()?;
            let (mut card, cpu) = open_cpu_owned(device)?;
            let mut all = Vec::new();
            if !*follow {
                // what is there now (the console keeps at most a few hundred characters)
                loop {
                    let chunk = cpu.console_read(&mut card, cpu::CONSOLE_CHUNK)?;
                    if chunk.is_empty() {
                        break;
                    }
                    if !json {
                        echo(&chunk);
                    }
                    all.extend(chunk);
                }
            } else {
                crate::progress::install_stop_handler();
                let began = Instant::now();
                while !crate::progress::stop_requested() && limit.is_none_or(|l| began.elapsed() < l) {
                    let chunk = cpu.console_read(&mut card, cpu::CONSOLE_CHUNK)?;
                    if chunk.is_empty() {
                        // lets card time pass on the simulator; a sleep on hardware
                        card.device().idle(Duration::from_millis(1))?;
                        continue;
                    }
                    if !json {
                        echo(&chunk);
                    }
                    all.extend(chunk);
                }
            }
            if json {
                crate::outln!("{}", serde_json::json!({ "console": String::from_utf8_lossy(&all) }));
            }
            Ok(ExitCode::SUCCESS)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_codes_have_names() {
        assert_eq!(status_name(0), "ok");
        assert_eq!(status_name(u32::from(tlpx_script::status::ASSERT_FAILED)), "assert_failed");
        assert_eq!(status_name(u32::from(tlpx_script::status::STOPPED)), "stopped");
        assert_eq!(status_name(0x100), "selftest_failed");
        assert_eq!(status_name(99), "unknown");
    }

    #[test]
    fn a_failed_boot_is_recognised_on_the_console() {
        assert!(!self_test_failed("tlpx-fw 1.0: self-test\nself-test: PASS\n"));
        assert!(self_test_failed("self-test: FAIL (scratch)\n"));
        assert!(self_test_failed("trap: mcause 0x2 at pc 0x00040074\n"));
    }

    #[test]
    fn an_image_file_is_at_most_its_header_and_the_firmware_area() {
        // the format's largest payload is the SRAM's firmware area, below the mailbox
        assert_eq!(firmware::MAX_PAYLOAD as usize, cpu::FIRMWARE_AREA);
        assert_eq!(MAX_IMAGE_FILE, 32 + 0x7F00);
    }

    #[test]
    fn the_default_firmware_is_where_make_puts_it() {
        assert!(default_firmware_path().ends_with("build/firmware/tlpx-fw.img"));
    }
}
