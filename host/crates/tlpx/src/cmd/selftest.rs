//! `tlpx selftest`: checks a card end to end and says PASS or FAIL for each part.
//!
//! 1. scratch: patterns and walking ones through the scratch register;
//! 2. counter: the 64-bit cycle counter increases and its halves are latched together;
//! 3. msi: a software interrupt reaches the host; the time from the trigger write to the
//!    interrupt's delivery is taken at both ends from one clock, the backend's (card time on
//!    the simulator, the host's CLOCK_MONOTONIC on hardware) and labelled with it and with the
//!    time mode it ran in (on the simulator in live time, which another client's capture
//!    turns on, the host's wake-up is counted in card cycles); the card's own part, from the
//!    trigger write at the card to the MSI handed to the PCIe core, is measured apart by the
//!    card's stamps (`ident.trigger_cycle`, `pcie_msi.msi_cycle`), the same in every mode;
//! 4. ur: unsupported requests (CfgRd0, MRd64) are answered with UR and counted
//!    (needs a backend that can inject TLPs: the simulator);
//! 5. dma: a buffer goes host -> card -> host through LitePCIe's DMA loopback, data checked;
//!    a completion that was poisoned or carried an error status fails it even when the data
//!    looks right (the card's dma_guard counts them: LitePCIe passes such data on as good),
//!    and a loopback that never completes leaves LitePCIe's DMA reset for the next run.

use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use clap::Args;
use rand::{RngCore, SeedableRng};
use serde::Serialize;
use tlpx_device::card::Card;
use tlpx_device::{litepcie_dma, msi, ClockSource, DeviceError, DmaBuffer, TimeMode};
use tlpx_regs::{dma_guard, ident, pcie_msi, request_path};

use crate::args::{whole, whole_as};
use crate::output::print_json;

/// What --dma-bytes accepts (one LitePCIe DMA descriptor).
pub const DMA_BYTES: &str = "a multiple of 4 in 4..=16777212";
use tlpx_device::selector;

#[derive(Debug, Args)]
pub struct Cmd {
    /// Bytes moved through the DMA loopback (4..=16777212, multiple of 4).
    #[arg(long, default_value_t = 4096, value_parser = whole_as(4u32, 0xFF_FFFC, DMA_BYTES), allow_negative_numbers = true)]
    pub dma_bytes: u32,
    /// Seed of the DMA data pattern.
    #[arg(long, default_value_t = 1, value_parser = whole(0, u64::MAX), allow_negative_numbers = true)]
    pub seed: u64,
}

#[derive(Debug, Serialize)]
pub struct Check {
    pub name: &'static str,
    /// "pass", "fail" or "not-run" (the backend cannot do it).
    pub result: &'static str,
    pub detail: String,
}

#[derive(Debug, Serialize)]
struct Report {
    device: String,
    passed: bool,
    checks: Vec<Check>,
    wall_seconds: f64,
}

type CheckResult = anyhow::Result<Result<String, String>>;
type Step<'a> = (&'static str, &'a dyn Fn(&mut Card) -> CheckResult);

pub fn run(cmd: &Cmd, device: &str, json: bool) -> anyhow::Result<ExitCode> {
    if cmd.dma_bytes < 4 || !cmd.dma_bytes.is_multiple_of(4) || cmd.dma_bytes > 0xFF_FFFC {
        bail!("--dma-bytes must be {DMA_BYTES}, not {}", cmd.dma_bytes);
    }
    let started = Instant::now();
    let opened = selector::open(device)?;
    let location = opened.device.description().location;
    let mut card = Card::open(opened.device)?;
    let mut checks = Vec::new();
    // A check that ended with an error of the card, its backend or the simulator (one that
    // died mid-run): exit 3 as every command does, not 1 (a check that ran and failed).
    let mut device_failed = false;
    let steps: [Step; 5] = [
        ("scratch", &check_scratch),
        ("counter", &check_counter),
        ("msi", &check_msi),
        ("ur", &check_ur),
        ("dma-loopback", &|c: &mut Card| check_dma(c, cmd.dma_bytes, cmd.seed)),
    ];
    for (name, step) in steps {
        let check = match step(&mut card) {
            Ok(Ok(detail)) if detail.starts_with("not run") => Check { name, result: "not-run", detail },
            Ok(Ok(detail)) => Check { name, result: "pass", detail },
            Ok(Err(detail)) => Check { name, result: "fail", detail },
            Err(e) => {
                device_failed |= crate::exit::status_of(&e) == crate::exit::DEVICE;
                Check { name, result: "fail", detail: format!("{e:#}") }
            }
        };
        if !json {
            crate::outln!("{:<13} {:<7} {}", check.name, check.result.to_uppercase(), check.detail);
        }
        checks.push(check);
    }
    let passed = checks.iter().all(|c| c.result != "fail");
    let report = Report { device: location, passed, checks, wall_seconds: started.elapsed().as_secs_f64() };
    if json {
        print_json(&report)?;
    } else {
        crate::outln!("selftest      {}", if passed { "PASS" } else { "FAIL" });
    }
    Ok(match (passed, device_failed) {
        (true, _) => ExitCode::SUCCESS,
        (false, true) => ExitCode::from(crate::exit::DEVICE),
        (false, false) => ExitCode::from(crate::exit::CHECK_FAILED),
    })
}

fn check_scratch(card: &mut Card) -> CheckResult {
    let saved = card.read(ident::SCRATCH)?;
    let mut patterns = vec![0u32, 0xFFFF_FFFF, 0xA5A5_A5A5, 0x5A5A_5A5A, 0xDEAD_BEEF];
    patterns.extend((0..32).map(|i| 1u32 << i));
    for &p in &patterns {
        card.write(ident::SCRATCH, u64::from(p))?;
        let got = card.read(ident::SCRATCH)? as u32;
        if got != p {
            return Ok(Err(format!("wrote 0x{p:08x}, read back 0x{got:08x}")));
        }
    }
    // Sub-DW writes: one byte and one half-word, honoured with their byte enables. A backend
    // that moves whole words only (LitePCIe's register ioctl) cannot make them: said, not failed.
    card.write(ident::SCRATCH, 0x1122_3344)?;
    let dev = card.device();
    match dev.bar_write(tlpx_regs::BAR, ident::SCRATCH.offset + 1, tlpx_device::Width::W8, 0xAB) {
        Err(DeviceError::Unsupported { backend, .. }) => {
            card.write(ident::SCRATCH, saved)?;
            return Ok(Ok(format!(
                "{} patterns read back (byte/half-word writes not run: the {backend} backend moves whole 32-bit words)",
                patterns.len()
            )));
        }
        r => r?,
    }
    dev.bar_write(tlpx_regs::BAR, ident::SCRATCH.offset + 2, tlpx_device::Width::W16, 0xCDEF)?;
    let got = card.read(ident::SCRATCH)? as u32;
    if got != 0xCDEF_AB44 {
        return Ok(Err(format!("byte-enable writes gave 0x{got:08x}, expected 0xcdefab44")));
    }
    card.write(ident::SCRATCH, saved)?;
    Ok(Ok(format!("{} patterns and byte/half-word writes read back", patterns.len())))
}

fn check_counter(card: &mut Card) -> CheckResult {
    let mut last = card.cycles()?;
    for _ in 0..8 {
        let now = card.cycles()?;
        if now <= last {
            return Ok(Err(format!("cycle counter went from {last} to {now}")));
        }
        last = now;
    }
    let lo = card.read(tlpx_regs::timebase::CYCLES_LO)?;
    let hi = card.read(tlpx_regs::timebase::CYCLES_HI)?;
    let split = (hi << 32) | lo;
    let after = card.cycles()?;
    if !(last < split && split < after) {
        return Ok(Err(format!("32-bit halves read {split}, not between {last} and {after}")));
    }
    Ok(Ok(format!("monotonic over 10 reads, now at cycle {after}")))
}

fn check_msi(card: &mut Card) -> CheckResult {
    if card.device().try_as_driver_dma().is_some() {
        // LitePCIe's driver takes the card's MSI itself and handles only its DMA's vectors:
        // the MSI is shown by the driver's handler counting its DMA's buffers.
        return driver_loopback(card, 0x6d73_6900, true);
    }
    let bit = tlpx_regs::constants::MSI_SOFTWARE as u32;
    msi::clear_latched(card, bit)?;
    let found = msi::switch(card, bit, true)?;
    // A read, so the writes above have reached the card: the figure is the trigger's alone.
    card.read(pcie_msi::ENABLE)?;
    let mark = card.device().time_mark()?;
    // Both ends from the backend's one clock: on the simulator, card time (the posted trigger
    // write leaves when time next runs, i.e. from `before`); on hardware, the host's clock.
    let before = card.device().clock_ns()?;
    card.write(ident::SOFTWARE_IRQ, 1)?;
    // 10 ms of card time (the card's counter on hardware: a card slower than its clock, as
    // the Verilated one behind vfio-user, gets its 10 ms; see Card::wait_interrupt_card_time).
    let irq = match card.device().clock_source() {
        ClockSource::SimulatedCard => card.device().wait_interrupt(u32::MAX, Duration::from_millis(10))?,
        ClockSource::Host => card.wait_interrupt_card_time(u32::MAX, Duration::from_millis(10))?,
    };
    let after = card.device().clock_ns()?;
    let mode = card.device().time_mark()?.mode_since(&mark);
    let Some(irq) = irq else {
        found.restore(card)?;
        return Ok(Err(format!("no interrupt within 10 ms after the software trigger ({mode} time)")));
    };
    let vector = card.read(pcie_msi::VECTOR)?;
    // The card's part, from its own stamps: the trigger write entering the card (its request
    // path) to the MSI handed to the PCIe core. No host time is in it, whatever the time mode.
    // Read before any further write (the request path stamps every host write).
    let card_part = card.read(pcie_msi::MSI_CYCLE)?.wrapping_sub(card.read(request_path::LAST_WRITE_CYCLE)?);
    msi::clear_latched(card, bit)?;
    found.restore(card)?;
    if vector & (1 << bit) == 0 {
        return Ok(Err(format!("interrupt arrived but pcie_msi.vector is 0x{vector:x}")));
    }
    let ns = after.saturating_sub(before);
    let latency = match card.device().clock_source() {
        ClockSource::SimulatedCard => {
            let cycles = (ns as f64 * f64::from(card.identity().clock_hz) / 1e9).round();
            format!("{cycles} card cycles ({ns} ns of card time, {mode} time)")
        }
        ClockSource::Host => format!("{:.1} us of host time (CLOCK_MONOTONIC, includes the host's wake-up)", ns as f64 / 1e3),
    };
    let live = if mode == TimeMode::Live {
        " (in live time the simulator ran while this process woke up: the host's wake-up is in that figure)"
    } else {
        ""
    };
    Ok(Ok(format!(
        "MSI vector {} received {latency} after the trigger write was sent{live}; the card's part (trigger write at the card \
         to MSI request, its own stamps): {card_part} cycles",
        irq.vector
    )))
}

fn check_ur(card: &mut Card) -> CheckResult {
    let ur_before = card.read(request_path::UR_SENT)?;
    let cfg_before = card.read(request_path::CFG_REQUESTS)?;
    let m64_before = card.read(request_path::MEM64_REQUESTS)?;
    let Some(injector) = card.device().try_as_tlp_injector() else {
        return Ok(Ok("not run: this backend cannot inject TLPs (only the simulator can)".to_string()));
    };
    // CfgRd0 of register 0 (2.2.7), then MRd64 of BAR0 offset 0 (4DW header, 2.2.4).
    let requests: [(&str, Vec<u32>); 2] =
        [("CfgRd0", vec![0x0400_0001, 0x0000_5A0F, 0x0100_0000]), ("MRd64", vec![0x2000_0001, 0x0000_5B0F, 0x0000_0000, 0x0000_0000])];
    for (name, dws) in &requests {
        let cpl = injector.inject_tlp(dws, Duration::from_micros(100))?.with_context(|| format!("{name}: no completion"))?;
        let status = cpl.get(1).map(|dw1| (dw1 >> 13) & 7);
        if status != Some(1) {
            return Ok(Err(format!("{name} answered with completion status {status:?}, expected 1 (UR)")));
        }
    }
    let ur = card.read(request_path::UR_SENT)? - ur_before;
    let cfg = card.read(request_path::CFG_REQUESTS)? - cfg_before;
    let m64 = card.read(request_path::MEM64_REQUESTS)? - m64_before;
    if (ur, cfg, m64) != (2, 1, 1) {
        return Ok(Err(format!("counters moved by ur_sent {ur}, cfg_requests {cfg}, mem64_requests {m64}; expected 2, 1, 1")));
    }
    Ok(Ok("CfgRd0 and MRd64 answered with UR, counted in request_path".to_string()))
}

fn check_dma(card: &mut Card, bytes: u32, seed: u64) -> CheckResult {
    if card.device().try_as_driver_dma().is_some() {
        // No buffers of ours with bus addresses through LitePCIe's driver: its own rings.
        return driver_loopback(card, seed, false);
    }
    let len = bytes as usize;
    let src = card.device().alloc_dma(len)?;
    let dst = match card.device().alloc_dma(len) {
        Ok(b) => b,
        Err(e) => {
            card.device().free_dma(src)?;
            return Err(e.into());
        }
    };
    let result = dma_loopback(card, &src, &dst, seed);
    card.device().free_dma(src)?;
    card.device().free_dma(dst)?;
    result
}

/// The card's counts of LitePCIe completions that were poisoned or carried an error status,
/// and of its DMA's timeout resets (zero on a card without the guard).
fn guard_counts(card: &mut Card) -> anyhow::Result<[u64; 3]> {
    Ok([card.read(dma_guard::CPL_POISONED)?, card.read(dma_guard::CPL_ERRORS)?, card.read(dma_guard::RESETS)?])
}

fn dma_loopback(card: &mut Card, src: &DmaBuffer, dst: &DmaBuffer, seed: u64) -> CheckResult {
    // A DMA left stuck by an earlier run (a lost completion) is reset first.
    if card.read(dma_guard::OUTSTANDING)? != 0 {
        card.write(dma_guard::CONTROL, dma_guard::control::RESET.set(1))?;
    }
    let before = guard_counts(card)?;
    let mut data = vec![0u8; src.len];
    rand_chacha::ChaCha8Rng::seed_from_u64(seed).fill_bytes(&mut data);
    src.write_bytes(0, &data)?;
    dst.write_bytes(0, &vec![0u8; dst.len])?;
    // Budget: 1 ms + 100 ns per byte of card time, far above any link this card can have.
    let budget = Duration::from_millis(1) + Duration::from_nanos(100 * data.len() as u64);
    let result = litepcie_dma::loopback(card, src, dst, budget)?;
    let after = guard_counts(card)?;
    if !result.completed {
        // Do now what the card's guard would do after its timeout: the next run starts clean.
        card.write(dma_guard::CONTROL, dma_guard::control::RESET.set(1))?;
        return Ok(Err(format!(
            "no DMA writer interrupt within {budget:?} of card time ({} poisoned, {} error completions; LitePCIe's DMA reset)",
            after[0] - before[0],
            after[1] - before[1]
        )));
    }
    let [poisoned, errors, resets] = [after[0] - before[0], after[1] - before[1], after[2] - before[2]];
    if poisoned + errors + resets > 0 {
        return Ok(Err(format!(
            "the loopback's reads got {poisoned} poisoned and {errors} error completions ({resets} DMA resets): its data cannot be trusted"
        )));
    }
    let mut got = vec![0u8; dst.len];
    dst.read_bytes(0, &mut got)?;
    if let Some(i) = got.iter().zip(&data).position(|(a, b)| a != b) {
        return Ok(Err(format!("byte {i} of {} differs: wrote 0x{:02x}, got back 0x{:02x}", data.len(), data[i], got[i])));
    }
    let seconds = card.cycles_to_duration(result.cycles).as_secs_f64();
    Ok(Ok(format!(
        "{} bytes host -> card -> host checked, {} card cycles ({:.1} MB/s of card time)",
        data.len(),
        result.cycles,
        data.len() as f64 / seconds.max(1e-12) / 1e6
    )))
}

/// The buffer pattern of ring buffer `index` for `seed`.
fn ring_pattern(seed: u64, index: usize, len: usize) -> Vec<u8> {
    let mut v = vec![0u8; len];
    rand_chacha::ChaCha8Rng::seed_from_u64(seed ^ ((index as u64) << 40)).fill_bytes(&mut v);
    v
}

/// Through LitePCIe's driver (its `DriverDma`): its 256 reader buffers are filled with a
/// pattern per buffer, its DMA runs in loopback (reader -> card -> writer, both rings in loop
/// mode, as LitePCIe's own dma_test) until the writer has completed two interrupts' worth of
/// buffers, then the writer's buffers are compared with the reader's. The writer's hardware
/// count moves only in the driver's interrupt handler: a count that moved is an MSI the
/// kernel took. `msi`: report that; else the data.
fn driver_loopback(card: &mut Card, seed: u64, msi: bool) -> CheckResult {
    use tlpx_device::backends::litepcie::Engine;
    let Some(d) = card.device().try_as_driver_dma() else {
        return Ok(Ok("not run: this backend has no driver DMA".to_string()));
    };
    let l = d.layout()?;
    let (n, size) = (l.dma_tx_buf_count as usize, l.dma_tx_buf_size as usize);
    if n == 0 || size == 0 || l.dma_rx_buf_count as usize != n || l.dma_rx_buf_size as usize != size {
        return Ok(Err(format!("the driver's rings differ or are empty: {l:?}")));
    }
    // Both rings are the engines': take them before touching their buffers (another
    // process's running DMA may be using them).
    d.claim(Engine::Writer)?;
    d.claim(Engine::Reader)?;
    for k in 0..n {
        d.write_buffer(Engine::Reader, k, 0, &ring_pattern(seed, k, size))?;
    }
    // Two interrupts' worth: the driver raises one every 32 buffers (DMA_BUFFER_PER_IRQ).
    let want = 64.min(n as i64);
    d.set_loopback(true)?;
    let started = Instant::now();
    let w0 = d.set_enabled(Engine::Writer, true)?.hw;
    let run = (|| -> Result<i64, DeviceError> {
        d.set_enabled(Engine::Reader, true)?;
        // Wall time: the driver counts in its handler, whatever clock the card runs at; 30 s
        // is far more than the ~0.5 ms of card time this takes on any card.
        loop {
            let hw = d.counts(Engine::Writer)?.hw - w0;
            if hw >= want || started.elapsed() > Duration::from_secs(30) {
                return Ok(hw);
            }
            d.poll(Duration::from_millis(100))?;
        }
    })();
    let _ = d.set_enabled(Engine::Reader, false);
    let _ = d.set_enabled(Engine::Writer, false);
    let _ = d.set_loopback(false);
    let hw = run?;
    let secs = started.elapsed().as_secs_f64();
    if hw < want {
        return Ok(Err(format!(
            "the driver's DMA writer completed {hw} of {want} buffers within {secs:.1} s: its interrupt handler did not count them"
        )));
    }
    if msi {
        return Ok(Ok(format!(
            "LitePCIe's interrupt handler counted {hw} writer buffers ({} MSIs of 32 buffers) in {secs:.2} s of host time",
            hw / 32
        )));
    }
    let check = (hw as usize).min(n);
    let mut got = vec![0u8; size];
    for k in 0..check {
        d.read_buffer(Engine::Writer, k, 0, &mut got)?;
        let want = ring_pattern(seed, k, size);
        if got != want {
            let at = got.iter().zip(&want).position(|(a, b)| a != b).unwrap_or(0);
            return Ok(Err(format!(
                "writer buffer {k} differs from reader buffer {k} at byte {at}: 0x{:02x}, expected 0x{:02x}",
                got[at], want[at]
            )));
        }
    }
    Ok(Ok(format!("{check} buffers of {size} bytes host -> card -> host through LitePCIe's driver (its rings, loopback), checked")))
}
