//! The card's soft CPU (docs/firmware.md, "The soft CPU"): load and start its firmware, read
//! its console, run exerciser scripts through the mailbox it shares with the host.
//!
//! ```text
//!  host ──BAR0 0x40000..──► SRAM: firmware (0x40000) │ mailbox (0x47F00) │ script (0x48000) │ result ring (0x4C000)
//!       ──cpu_ctrl (0x5800)─► run / stop, image length + CRC the card checks before it lets the CPU run
//!       ◄─uart (0x6000)────── the firmware's console (crossover UART)
//! ```
//!
//! The CPU's address space is BAR0's, so every address here is a BAR0 offset. [`Cpu::load`]
//! holds the CPU in reset and writes the payload word by word; [`Cpu::start`] asks the card to
//! check it (it computes the CRC-32 itself and refuses a mismatch with a reason) and waits for
//! the firmware's mailbox magic. [`Cpu::run_script`] hands a compiled script image to the
//! firmware and streams its 32-byte result records back while it runs (the firmware waits when
//! the ring is full, so the host keeps reading and advancing `records consumed`).

use std::time::{Duration, Instant};

use serde::Serialize;
use tlpx_regs::{cpu_ctrl as regs, ident, uart, Register};

use crate::card::Card;
use crate::lease::Block;
use crate::{DeviceError, DmaBuffer, Width};

/// Where the SRAM is (CPU address == BAR0 offset) on the CPU card.
pub const SRAM_BASE: u64 = 0x4_0000;
/// Bytes of the firmware area (code, data, stack), below the mailbox.
pub const FIRMWARE_AREA: usize = 0x7F00;
/// The mailbox shared with the firmware: 64 little-endian words.
pub const MAILBOX: u64 = 0x4_7F00;
/// Bytes of the mailbox (the host zeroes them before it starts the CPU).
pub const MAILBOX_LEN: u64 = 256;
/// What the firmware writes in the mailbox's first word once it is ready ("TLFW").
pub const MAILBOX_MAGIC: u32 = 0x5746_4C54;
/// Where the host puts a script image for RUN_SCRIPT.
pub const SCRIPT_AREA: u64 = 0x4_8000;
/// Largest script image (bytes).
pub const SCRIPT_AREA_LEN: usize = 16 * 1024;
/// The result ring: [`RING_RECORDS`] records of [`RECORD_LEN`] bytes.
pub const RESULT_RING: u64 = 0x4_C000;
/// Records the result ring holds.
pub const RING_RECORDS: u32 = 512;
/// Bytes of one result record (decoded by `tlpx_script::ResultRecord`).
pub const RECORD_LEN: usize = 32;
/// How long [`Cpu::start`] waits for the firmware's magic, by default (wall time).
pub const DEFAULT_BOOT_TIMEOUT: Duration = Duration::from_secs(10);
/// Console bytes one [`Cpu::console_read`] call takes at most by default.
pub const CONSOLE_CHUNK: usize = 1024;

/// Byte offsets of the mailbox's words (from [`MAILBOX`]).
pub mod mailbox {
    /// fw: [`super::MAILBOX_MAGIC`] once ready.
    pub const MAGIC: u64 = 0x00;
    /// fw: firmware version, major << 16 | minor.
    pub const VERSION: u64 = 0x04;
    /// fw: 0 booting, 1 ready, 2 busy.
    pub const STATE: u64 = 0x08;
    /// fw: +1 per ~1 ms of card time while idle.
    pub const HEARTBEAT: u64 = 0x0C;
    /// host: command sequence; the host fills command and args, then writes cmd_seq + 1.
    pub const CMD_SEQ: u64 = 0x10;
    /// host: the command (see [`super::command`]).
    pub const COMMAND: u64 = 0x14;
    /// host: nonzero stops a running script (it ends with status STOPPED).
    pub const ABORT: u64 = 0x18;
    /// host: args[0..8], one word each.
    pub const ARGS: u64 = 0x20;
    /// fw: = cmd_seq when the command is finished.
    pub const DONE_SEQ: u64 = 0x40;
    /// fw: status of the last command (0 OK, else its end record's status).
    pub const STATUS: u64 = 0x44;
    /// fw: records written by the current / last command (record i at ring[i % capacity]).
    pub const RECORDS_WRITTEN: u64 = 0x48;
    /// host: records consumed (the firmware waits while the ring is full; zeroed when a RUN_SCRIPT starts).
    pub const RECORDS_CONSUMED: u64 = 0x4C;
    /// fw: console characters dropped (nobody read them in time).
    pub const CONSOLE_DROPPED: u64 = 0x50;
    /// fw: instructions executed (of the script).
    pub const INSTRUCTIONS: u64 = 0x54;
    /// fw: the script's current pc.
    pub const PC: u64 = 0x58;
}

/// Commands of the mailbox.
pub mod command {
    /// Run the script image at args[0] (length args[1]) with the host buffer args[2..5], results in the ring args[5..7].
    pub const RUN_SCRIPT: u32 = 1;
    /// Run the firmware's self-test again (on the console).
    pub const SELFTEST: u32 = 2;
}

/// `cpu_ctrl.status.state`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum CpuState {
    /// Held in reset.
    Stopped,
    /// The card is checking the image.
    Checking,
    Running,
    /// The card refused the image (see the reason).
    Refused,
}

impl CpuState {
    fn from_code(code: u64) -> CpuState {
        match code & 3 {
            0 => CpuState::Stopped,
            1 => CpuState::Checking,
            2 => CpuState::Running,
            _ => CpuState::Refused,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            CpuState::Stopped => "stopped",
            CpuState::Checking => "checking",
            CpuState::Running => "running",
            CpuState::Refused => "refused",
        }
    }
}

/// `cpu_ctrl.status.reason`: why the card refused the last image.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum RefusalReason {
    None,
    /// image_length is 0.
    Empty,
    /// image_length is larger than the SRAM.
    TooLong,
    /// image_length is not a multiple of 4.
    Unaligned,
    /// The CRC-32 the card computed is not the one the host claimed.
    Crc,
    /// A code this host does not know.
    Other(u8),
}

impl RefusalReason {
    fn from_code(code: u64) -> RefusalReason {
        match code {
            0 => RefusalReason::None,
            1 => RefusalReason::Empty,
            2 => RefusalReason::TooLong,
            3 => RefusalReason::Unaligned,
            4 => RefusalReason::Crc,
            other => RefusalReason::Other(other as u8),
        }
    }

    pub fn name(self) -> String {
        match self {
            RefusalReason::None => "none".into(),
            RefusalReason::Empty => "empty".into(),
            RefusalReason::TooLong => "too_long".into(),
            RefusalReason::Unaligned => "unaligned".into(),
            RefusalReason::Crc => "crc".into(),
            RefusalReason::Other(c) => format!("reason {c}"),
        }
    }

    /// What the reason means, for a person.
    pub fn explain(self) -> String {
        match self {
            RefusalReason::None => "no reason given".into(),
            RefusalReason::Empty => "the image is empty (image_length 0)".into(),
            RefusalReason::TooLong => "the image is longer than the SRAM".into(),
            RefusalReason::Unaligned => "the image length is not a multiple of 4".into(),
            RefusalReason::Crc => "the CRC-32 the card computed over the SRAM is not the one claimed: the transfer went wrong".into(),
            RefusalReason::Other(c) => format!("unknown reason code {c}"),
        }
    }
}

impl std::fmt::Display for RefusalReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} ({})", self.name(), self.explain())
    }
}

/// The loader's registers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct CpuStatus {
    pub state: CpuState,
    pub reason: RefusalReason,
    pub image_length: u32,
    pub claimed_crc: u32,
    pub computed_crc: u32,
    pub sram_base: u32,
    pub sram_size: u32,
    pub starts: u32,
    pub refusals: u32,
}

/// The mailbox, as read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Mailbox {
    pub magic: u32,
    pub version: u32,
    /// 0 booting, 1 ready, 2 busy.
    pub state: u32,
    pub heartbeat: u32,
    pub cmd_seq: u32,
    pub command: u32,
    pub abort: u32,
    pub done_seq: u32,
    pub status: u32,
    pub records_written: u32,
    pub records_consumed: u32,
    pub console_dropped: u32,
    pub instructions: u32,
    pub pc: u32,
}

impl Mailbox {
    /// The firmware wrote its magic.
    pub fn ready(&self) -> bool {
        self.magic == MAILBOX_MAGIC
    }

    /// The firmware is ready and not running a command.
    pub fn idle(&self) -> bool {
        self.ready() && self.state == 1 && self.done_seq == self.cmd_seq
    }

    pub fn state_name(&self) -> &'static str {
        match self.state {
            0 => "booting",
            1 => "ready",
            2 => "busy",
            _ => "unknown",
        }
    }

    /// "major.minor".
    pub fn version_string(&self) -> String {
        format!("{}.{}", self.version >> 16, self.version & 0xFFFF)
    }
}

/// What [`Cpu::run_script`] calls while the script runs.
pub struct ScriptIo<'a> {
    /// Polled: true asks the firmware to stop the script (the abort word).
    pub stop: &'a mut dyn FnMut() -> bool,
    /// Each result record, in order.
    pub on_record: &'a mut dyn FnMut(&[u8; RECORD_LEN]),
    /// Console bytes as they come.
    pub on_console: &'a mut dyn FnMut(&[u8]),
    /// The host side of the script's work, at every turn; true if it did something.
    pub host_side: &'a mut dyn FnMut(&mut Card) -> Result<bool, DeviceError>,
}

/// Why a CPU operation failed.
#[derive(Debug, thiserror::Error)]
pub enum CpuError {
    #[error(transparent)]
    Device(#[from] DeviceError),
    #[error("this card has no CPU (ident.features 0x{features:03x} has no `cpu` bit; register map 0x{map_hash:08x}): build it with CPU=1 (make gateware CPU=1; make bitstream BOARD=... CPU=1) or start the simulator with tlpx-sim --with-cpu")]
    NoCpu { features: u32, map_hash: u32 },
    #[error("the card refused the firmware image: {reason}; image_length {length} bytes, claimed CRC-32 0x{claimed:08x}, the card computed 0x{computed:08x}")]
    Refused { reason: RefusalReason, length: u32, claimed: u32, computed: u32 },
    #[error("timed out after {timeout:?} (wall time) waiting for {what}")]
    Timeout { what: String, timeout: Duration },
    #[error("{0}")]
    Invalid(String),
    #[error("the firmware is not ready for commands: {0}")]
    NotReady(String),
}

/// What [`Cpu::start`] saw.
#[derive(Debug, Clone)]
pub struct Started {
    pub status: CpuStatus,
    pub mailbox: Mailbox,
    /// The console's output while the firmware booted (its self-test).
    pub console: Vec<u8>,
}

/// How a command of the mailbox ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct CommandEnd {
    /// The mailbox's status word (0 OK, else the end record's status).
    pub status: u32,
    /// Records read from the ring.
    pub records: u64,
    /// The host asked the script to stop (abort written).
    pub aborted: bool,
    /// Instructions executed, as the mailbox says.
    pub instructions: u32,
}

/// The soft CPU of a card. Its methods take the card, like the other drivers.
#[derive(Debug, Clone)]
pub struct Cpu {
    sram_base: u32,
    sram_size: u32,
    /// How long [`Cpu::start`] (and a command) waits for the firmware, in wall time.
    pub timeout: Duration,
}

/// True when the card says it has the CPU (ident.features.cpu).
pub fn has_cpu(card: &Card) -> bool {
    ident::features::CPU.get(u64::from(card.identity().feature_bits)) != 0
}

fn bar_r32(card: &mut Card, offset: u64) -> Result<u32, DeviceError> {
    card.device().bar_read(tlpx_regs::BAR, offset, Width::W32).map(|v| v as u32)
}

fn bar_w32(card: &mut Card, offset: u64, value: u32) -> Result<(), DeviceError> {
    card.device().bar_write(tlpx_regs::BAR, offset, Width::W32, u64::from(value))
}

fn reg32(card: &mut Card, reg: Register) -> Result<u32, DeviceError> {
    card.read(reg).map(|v| v as u32)
}

/// Card time the host lets pass between two polls of the mailbox that found nothing new.
const POLL_STEP: Duration = Duration::from_micros(50);

impl Cpu {
    /// The CPU of `card`; refuses a card without one ([`CpuError::NoCpu`]).
    pub fn open(card: &mut Card) -> Result<Cpu, CpuError> {
        if !has_cpu(card) {
            let id = card.identity();
            return Err(CpuError::NoCpu { features: id.feature_bits, map_hash: id.map_hash });
        }
        let sram_base = reg32(card, regs::SRAM_BASE)?;
        let sram_size = reg32(card, regs::SRAM_SIZE)?;
        if u64::from(sram_base) != SRAM_BASE || u64::from(sram_size) < (RESULT_RING - SRAM_BASE) + (RING_RECORDS as u64 * RECORD_LEN as u64)
        {
            return Err(CpuError::Invalid(format!(
                "the card's SRAM is at 0x{sram_base:x} ({sram_size} bytes); this tlpx expects 0x{SRAM_BASE:x} and 64 KiB: use the tlpx built with the card's gateware"
            )));
        }
        Ok(Cpu { sram_base, sram_size, timeout: DEFAULT_BOOT_TIMEOUT })
    }

    pub fn sram_base(&self) -> u32 {
        self.sram_base
    }

    pub fn sram_size(&self) -> u32 {
        self.sram_size
    }

    /// The loader's registers.
    pub fn status(&self, card: &mut Card) -> Result<CpuStatus, CpuError> {
        let status = card.read(regs::STATUS)?;
        Ok(CpuStatus {
            state: CpuState::from_code(regs::status::STATE.get(status)),
            reason: RefusalReason::from_code(regs::status::REASON.get(status)),
            image_length: reg32(card, regs::IMAGE_LENGTH)?,
            claimed_crc: reg32(card, regs::IMAGE_CRC)?,
            computed_crc: reg32(card, regs::COMPUTED_CRC)?,
            sram_base: self.sram_base,
            sram_size: self.sram_size,
            starts: reg32(card, regs::STARTS)?,
            refusals: reg32(card, regs::REFUSALS)?,
        })
    }

    /// Reads one mailbox word.
    pub fn mailbox_word(&self, card: &mut Card, offset: u64) -> Result<u32, CpuError> {
        Ok(bar_r32(card, MAILBOX + offset)?)
    }

    fn set_mailbox_word(&self, card: &mut Card, offset: u64, value: u32) -> Result<(), CpuError> {
        Ok(bar_w32(card, MAILBOX + offset, value)?)
    }

    /// The whole mailbox.
    pub fn mailbox(&self, card: &mut Card) -> Result<Mailbox, CpuError> {
        let mut w = |o| self.mailbox_word(card, o);
        Ok(Mailbox {
            magic: w(mailbox::MAGIC)?,
            version: w(mailbox::VERSION)?,
            state: w(mailbox::STATE)?,
            heartbeat: w(mailbox::HEARTBEAT)?,
            cmd_seq: w(mailbox::CMD_SEQ)?,
            command: w(mailbox::COMMAND)?,
            abort: w(mailbox::ABORT)?,
            done_seq: w(mailbox::DONE_SEQ)?,
            status: w(mailbox::STATUS)?,
            records_written: w(mailbox::RECORDS_WRITTEN)?,
            records_consumed: w(mailbox::RECORDS_CONSUMED)?,
            console_dropped: w(mailbox::CONSOLE_DROPPED)?,
            instructions: w(mailbox::INSTRUCTIONS)?,
            pc: w(mailbox::PC)?,
        })
    }

    /// Holds the CPU in reset (control.run = 0).
    pub fn stop(&self, card: &mut Card) -> Result<(), CpuError> {
        card.write(regs::CONTROL, regs::control::RUN.set(0))?;
        Ok(())
    }

    /// Stops the CPU, writes `payload` into the SRAM at its base word by word, claims
    /// `image_length` = its length and `image_crc` = `claimed_crc`, and zeroes the mailbox.
    /// The payload must be a nonzero multiple of 4 bytes that fits below the mailbox. The CPU
    /// stays stopped: [`Cpu::start`] has the card check the image and run it.
    pub fn load(&self, card: &mut Card, payload: &[u8], claimed_crc: u32) -> Result<(), CpuError> {
        if payload.is_empty() || payload.len() & 3 != 0 || payload.len() > FIRMWARE_AREA {
            return Err(CpuError::Invalid(format!(
                "a firmware payload is a nonzero multiple of 4 of at most {FIRMWARE_AREA} bytes (below the mailbox), not {} bytes",
                payload.len()
            )));
        }
        self.stop(card)?;
        self.write_words(card, u64::from(self.sram_base), payload)?;
        card.write(regs::IMAGE_LENGTH, payload.len() as u64)?;
        card.write(regs::IMAGE_CRC, u64::from(claimed_crc))?;
        self.clear_mailbox(card)
    }

    /// Zeroes the mailbox (the CPU must be stopped): the magic then means "this boot is ready".
    fn clear_mailbox(&self, card: &mut Card) -> Result<(), CpuError> {
        for o in (0..MAILBOX_LEN).step_by(4) {
            bar_w32(card, MAILBOX + o, 0)?;
        }
        Ok(())
    }

    /// Writes `bytes` (zero-padded to a multiple of 4) as 32-bit words from BAR0 `offset`.
    fn write_words(&self, card: &mut Card, offset: u64, bytes: &[u8]) -> Result<(), CpuError> {
        for (i, chunk) in bytes.chunks(4).enumerate() {
            let mut w = [0u8; 4];
            w[..chunk.len()].copy_from_slice(chunk);
            bar_w32(card, offset + 4 * i as u64, u32::from_le_bytes(w))?;
        }
        Ok(())
    }

    /// Has the card check the loaded image and release the CPU (control.run = 1), then waits
    /// (at most [`Cpu::timeout`], wall time) for the firmware's mailbox magic, collecting the
    /// console meanwhile. A refusal is [`CpuError::Refused`] with the reason and both CRCs.
    pub fn start(&self, card: &mut Card) -> Result<Started, CpuError> {
        // A (re)start boots the image from the beginning: the previous boot's mailbox (its
        // magic above all) must not be taken for this one's.
        self.stop(card)?;
        self.clear_mailbox(card)?;
        let before = self.status(card)?;
        card.write(regs::CONTROL, regs::control::RUN.set(1))?;
        let deadline = Instant::now() + self.timeout;
        let status = loop {
            let s = self.status(card)?;
            let decided = s.starts != before.starts || s.refusals != before.refusals;
            match s.state {
                CpuState::Refused if decided => {
                    return Err(CpuError::Refused {
                        reason: s.reason,
                        length: s.image_length,
                        claimed: s.claimed_crc,
                        computed: s.computed_crc,
                    })
                }
                CpuState::Running if decided => break s,
                _ => {}
            }
            if Instant::now() > deadline {
                return Err(CpuError::Timeout {
                    what: format!("the card to check the image (status: {})", s.state.name()),
                    timeout: self.timeout,
                });
            }
            card.device().poll_pause(Duration::from_micros(5))?;
        };
        let mut console = Vec::new();
        let mailbox = loop {
            console.extend(self.console_read(card, CONSOLE_CHUNK)?);
            let m = self.mailbox(card)?;
            if m.ready() {
                // what the firmware printed just before it said so
                console.extend(self.console_read(card, CONSOLE_CHUNK)?);
                break m;
            }
            if Instant::now() > deadline {
                let s = self.status(card)?;
                return Err(CpuError::Timeout {
                    what: format!(
                        "the firmware to write the mailbox magic 0x{MAILBOX_MAGIC:08x} at 0x{MAILBOX:x} (CPU {}, mailbox word 0x{:08x}; console so far: {:?})",
                        s.state.name(),
                        m.magic,
                        String::from_utf8_lossy(&console)
                    ),
                    timeout: self.timeout,
                });
            }
            card.device().idle(POLL_STEP * 4)?;
        };
        Ok(Started { status, mailbox, console })
    }

    /// Reads what the firmware printed on its console: pops `uart.xover_rxtx` while
    /// `uart.xover_rxempty` is 0, at most `max` bytes per call.
    pub fn console_read(&self, card: &mut Card, max: usize) -> Result<Vec<u8>, CpuError> {
        let mut out = Vec::new();
        while out.len() < max {
            if card.read(uart::XOVER_RXEMPTY)? & 1 != 0 {
                break;
            }
            out.push(card.read(uart::XOVER_RXTX)? as u8);
        }
        Ok(out)
    }

    fn require_idle_firmware(&self, card: &mut Card) -> Result<Mailbox, CpuError> {
        let s = self.status(card)?;
        if s.state != CpuState::Running {
            return Err(CpuError::NotReady(format!("the CPU is {} (load and start a firmware: tlpx fw load)", s.state.name())));
        }
        let m = self.mailbox(card)?;
        if !m.ready() {
            return Err(CpuError::NotReady(format!("no mailbox magic (word 0x{:08x}): the firmware is still booting or hung", m.magic)));
        }
        if !m.idle() {
            return Err(CpuError::NotReady(format!(
                "it is {} (command {} of sequence {}, done {}); stop it or wait",
                m.state_name(),
                m.command,
                m.cmd_seq,
                m.done_seq
            )));
        }
        Ok(m)
    }

    /// Writes command and args, then cmd_seq + 1; returns the new sequence number.
    fn issue(&self, card: &mut Card, m: &Mailbox, cmd: u32, args: &[u32]) -> Result<u32, CpuError> {
        self.set_mailbox_word(card, mailbox::ABORT, 0)?;
        self.set_mailbox_word(card, mailbox::COMMAND, cmd)?;
        for i in 0..8u64 {
            self.set_mailbox_word(card, mailbox::ARGS + 4 * i, args.get(i as usize).copied().unwrap_or(0))?;
        }
        let seq = m.cmd_seq.wrapping_add(1);
        self.set_mailbox_word(card, mailbox::CMD_SEQ, seq)?;
        Ok(seq)
    }

    /// Runs the firmware's self-test again; its output goes to `on_console`. Returns the
    /// command's status (0: passed).
    pub fn selftest(&self, card: &mut Card, on_console: &mut dyn FnMut(&[u8])) -> Result<u32, CpuError> {
        let m = self.require_idle_firmware(card)?;
        let seq = self.issue(card, &m, command::SELFTEST, &[])?;
        let deadline = Instant::now() + self.timeout;
        loop {
            let done = self.mailbox_word(card, mailbox::DONE_SEQ)?;
            let text = self.console_read(card, CONSOLE_CHUNK)?;
            if !text.is_empty() {
                on_console(&text);
            }
            if done == seq {
                let text = self.console_read(card, CONSOLE_CHUNK)?;
                if !text.is_empty() {
                    on_console(&text);
                }
                return self.mailbox_word(card, mailbox::STATUS);
            }
            if Instant::now() > deadline {
                return Err(CpuError::Timeout { what: "the firmware's self-test".into(), timeout: self.timeout });
            }
            card.device().idle(POLL_STEP)?;
        }
    }

    /// Runs a compiled script image (`tlpx_script` format) on the firmware: checks it fits the
    /// script area, writes it, the arguments (the host `buffer`, the result ring) and the
    /// command, then until the firmware says it is done: reads the new records (each to
    /// `on_record`, in order), advances `records consumed`, and drains the console (to
    /// `on_console`). When `stop()` turns true, writes the mailbox's abort word once: the
    /// script ends with status STOPPED and its records still come. `host_side` runs at every
    /// turn of that loop (the host half of what the script drives, e.g. the real-time loop's
    /// answers: [`crate::rt_loop::Responder`]); it says whether it did something.
    pub fn run_script(&self, card: &mut Card, image: &[u8], buffer: &DmaBuffer, io: ScriptIo<'_>) -> Result<CommandEnd, CpuError> {
        let ScriptIo { stop, on_record, on_console, host_side } = io;
        if image.is_empty() || image.len() > SCRIPT_AREA_LEN {
            return Err(CpuError::Invalid(format!(
                "the script image is {} bytes; the card's script area (0x{SCRIPT_AREA:x}) holds 1..={SCRIPT_AREA_LEN} bytes (16 KiB): split the script",
                image.len()
            )));
        }
        let buffer_len = u32::try_from(buffer.len).map_err(|_| {
            CpuError::Invalid(format!("a host buffer of {} bytes is too large for the firmware (at most 4 GiB - 1)", buffer.len))
        })?;
        // The script drives the card's DMA blocks for this host: it holds their leases (and
        // the CPU's), so another tool gets "busy", and if this process dies the leases expire
        // and the card stops the CPU and those blocks by itself.
        for block in [Block::Cpu, Block::Generator, Block::RtLoop, Block::IrqTimer] {
            if card.has_feature(block.feature()) {
                card.claim(block).map_err(CpuError::Device)?;
            }
        }
        let ended = self.run_script_held(card, image, buffer, buffer_len, ScriptIo { stop, on_record, on_console, host_side });
        let released = card.release(Block::Generator).and_then(|_| card.release(Block::Cpu));
        let end = ended?;
        released.map_err(CpuError::Device)?;
        Ok(end)
    }

    fn run_script_held(
        &self,
        card: &mut Card,
        image: &[u8],
        buffer: &DmaBuffer,
        buffer_len: u32,
        io: ScriptIo<'_>,
    ) -> Result<CommandEnd, CpuError> {
        let ScriptIo { stop, on_record, on_console, host_side } = io;
        let m = self.require_idle_firmware(card)?;
        self.write_words(card, SCRIPT_AREA, image)?;
        // the counts of a command start from 0 (the firmware zeroes them too when it takes the
        // command): zeroed here, the previous command's count is never read as this one's
        self.set_mailbox_word(card, mailbox::RECORDS_WRITTEN, 0)?;
        self.set_mailbox_word(card, mailbox::RECORDS_CONSUMED, 0)?;
        let args = [
            SCRIPT_AREA as u32,
            image.len() as u32,
            buffer.bus_addr as u32,
            (buffer.bus_addr >> 32) as u32,
            buffer_len,
            RESULT_RING as u32,
            RING_RECORDS,
        ];
        let seq = self.issue(card, &m, command::RUN_SCRIPT, &args)?;
        let mut next = 0u32;
        let mut records = 0u64;
        let mut aborted = false;
        let mut abort_deadline = None;
        let mut checks = 0u32;
        loop {
            let done = self.mailbox_word(card, mailbox::DONE_SEQ)? == seq;
            let written = self.mailbox_word(card, mailbox::RECORDS_WRITTEN)?;
            let fresh = written.wrapping_sub(next);
            if fresh > RING_RECORDS {
                return Err(CpuError::NotReady(format!(
                    "the firmware says it wrote {written} records, the host has read {next}: more than the ring's {RING_RECORDS} (a mailbox protocol mismatch)"
                )));
            }
            for _ in 0..fresh {
                let at = RESULT_RING + u64::from(next % RING_RECORDS) * RECORD_LEN as u64;
                let mut rec = [0u8; RECORD_LEN];
                for (i, w) in rec.chunks_mut(4).enumerate() {
                    w.copy_from_slice(&bar_r32(card, at + 4 * i as u64)?.to_le_bytes());
                }
                on_record(&rec);
                next = next.wrapping_add(1);
                records += 1;
            }
            if fresh > 0 {
                self.set_mailbox_word(card, mailbox::RECORDS_CONSUMED, next)?;
            }
            let text = self.console_read(card, CONSOLE_CHUNK)?;
            if !text.is_empty() {
                on_console(&text);
            }
            if done {
                return Ok(CommandEnd {
                    status: self.mailbox_word(card, mailbox::STATUS)?,
                    records,
                    aborted,
                    instructions: self.mailbox_word(card, mailbox::INSTRUCTIONS)?,
                });
            }
            if !aborted && stop() {
                self.set_mailbox_word(card, mailbox::ABORT, 1)?;
                aborted = true;
                abort_deadline = Some(Instant::now() + self.timeout);
            }
            if abort_deadline.is_some_and(|d| Instant::now() > d) {
                return Err(CpuError::Timeout { what: "the firmware to end the script after the abort".into(), timeout: self.timeout });
            }
            checks = checks.wrapping_add(1);
            if checks & 63 == 0 {
                let s = self.status(card)?;
                if s.state != CpuState::Running {
                    return Err(CpuError::NotReady(format!("the CPU is {} in the middle of the script", s.state.name())));
                }
            }
            let served = host_side(card)?;
            card.keep_leases()?;
            if fresh == 0 && text.is_empty() && !served {
                card.device().idle(POLL_STEP)?;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_sram_layout_fits() {
        assert_eq!(SRAM_BASE + FIRMWARE_AREA as u64, MAILBOX);
        assert_eq!(MAILBOX + MAILBOX_LEN, SCRIPT_AREA);
        assert_eq!(SCRIPT_AREA + SCRIPT_AREA_LEN as u64, RESULT_RING);
        assert_eq!(RESULT_RING + u64::from(RING_RECORDS) * RECORD_LEN as u64, SRAM_BASE + 0x1_0000);
        assert_eq!(mailbox::PC, 0x58);
        assert_eq!(&MAILBOX_MAGIC.to_le_bytes(), b"TLFW");
    }

    #[test]
    fn status_codes_decode() {
        assert_eq!(CpuState::from_code(2), CpuState::Running);
        assert_eq!(CpuState::from_code(3).name(), "refused");
        assert_eq!(RefusalReason::from_code(4), RefusalReason::Crc);
        assert_eq!(RefusalReason::from_code(6).name(), "reason 6");
        assert!(RefusalReason::Crc.to_string().starts_with("crc ("));
        let m = Mailbox {
            magic: MAILBOX_MAGIC,
            version: (1 << 16) | 3,
            state: 1,
            heartbeat: 0,
            cmd_seq: 4,
            command: 1,
            abort: 0,
            done_seq: 4,
            status: 0,
            records_written: 0,
            records_consumed: 0,
            console_dropped: 0,
            instructions: 0,
            pc: 0,
        };
        assert!(m.ready() && m.idle());
        assert_eq!(m.version_string(), "1.3");
        assert!(!Mailbox { done_seq: 3, ..m }.idle());
    }
}
