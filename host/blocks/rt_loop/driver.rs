//! The real-time loop (the DataMover experiment, seed 003): the card writes a token-tagged
//! buffer into host memory, the host detects it, checks the token, computes the checksum of
//! the data and returns it; the card times the round trip.
//!
//! ```text
//!  card: data DWs, then the token (DW 0) ──MWr──► host buffer ──(MSI if irq)──┐
//!        ▲                                                                     │ detect: poll DW 0
//!        │ loop time = result arrival - first data beat                        │ or wait for the MSI
//!        └── register return: write `result` ◄── checksum of the data DWs ◄───┘
//!            DMA return: store it in host memory + `doorbell`; the card reads it (MRd, tag 49)
//! ```
//!
//! [`run`] runs a loop of any length in chunks of at most [`CHUNK_ITERATIONS`] (the card's
//! sample FIFO holds 1024): each chunk is started, served iteration by iteration by
//! [`serve`], then its samples, counters and histogram are read while the card is idle, so
//! no host register read ever lands inside a timed iteration. The card checks every returned
//! checksum against the sum of what it wrote (`mismatches`); [`LoopConfig::verify_data`] also
//! checks each data DW against the pattern on the host, inside the timed loop.
//!
//! Data DW at bus address a: `lowbias32(a/4 ^ token)` (the generator's PRBS pattern seeded with
//! the iteration's token), so every iteration carries new data.

use std::time::{Duration, Instant};

use serde::Serialize;
use tlpx_regs::rt_loop as regs;

use crate::card::{Card, Feature};
use crate::generator::{pattern_word, DataPattern};
use crate::lease::Block;
use crate::msi;
use crate::{DeviceError, DmaBuffer};

use tlpx_blocks::rt_loop::{chunk_writes, RESULT_OFFSET};
/// The loop's configuration, its checks and its register writes live in the pure block crate;
/// the driver programs what it encodes.
pub use tlpx_blocks::rt_loop::{Detect, LoopConfig, LoopConfigError, Return, ValidLoopConfig, MAX_SIZE, MIN_SIZE};

/// What can go wrong with the real-time loop; [`DeviceError::RtLoop`] carries it.
#[derive(Debug, thiserror::Error)]
pub enum RtLoopError {
    /// A loop configuration the block cannot run (tlpx-blocks' checks): the caller's input.
    #[error("invalid argument: {0}")]
    Config(LoopConfigError),
    /// The card's buffer with `token` was not seen in time (a missed deadline of the loop).
    #[error("the real-time loop's buffer with token {token} (iteration {iteration}) did not come within {timeout:?}")]
    BufferLate { token: u32, iteration: u64, timeout: Duration },
    #[error("the real-time loop did not end after its last result (status 0x{status:x}, return errors {return_errors})")]
    DidNotEnd { status: u64, return_errors: u64 },
    /// Running, yet nobody holds its lease.
    #[error(
        "the real-time loop runs without an owner (started by the card's firmware or by register writes): \
         `tlpx stop rt_loop` stops it"
    )]
    Unowned,
}

// Not `#[from]`: that would make the configuration error this one's `source` as well as its
// text, and `{:#}` (how the CLI prints an error) would print the message twice.
impl From<LoopConfigError> for RtLoopError {
    fn from(e: LoopConfigError) -> Self {
        RtLoopError::Config(e)
    }
}

impl RtLoopError {
    /// The caller's input was refused (not the card or its backend).
    pub fn is_invalid_argument(&self) -> bool {
        matches!(self, RtLoopError::Config(_))
    }
}
/// Iterations per chunk: the card's sample FIFO depth.
pub const CHUNK_ITERATIONS: u32 = tlpx_regs::constants::RT_LOOP_SAMPLE_FIFO_DEPTH as u32;
/// Buckets of the card's loop-time log2 histogram.
pub const HISTOGRAM_BUCKETS: usize = tlpx_regs::constants::RT_LOOP_HISTOGRAM_BUCKETS as usize;
/// The interrupt mask for `Device::wait_interrupt`: vector 0 (one vector granted: LitePCIe's
/// behaviour) and the loop's own vector (several granted, e.g. vfio's MSI-X: `msi::wait_mask`).
pub const WAIT_MASK: u32 = msi::wait_mask(tlpx_regs::constants::MSI_RT_LOOP as u32);

/// The card's statistics over a run (summed over chunks).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct CardStats {
    /// Iterations the card completed.
    pub count: u64,
    /// Returned checksums that differed from the sum of the data the card wrote.
    pub mismatches: u64,
    pub min_cycles: Option<u64>,
    pub max_cycles: u64,
    pub sum_cycles: u64,
    /// log2 histogram of the loop time in cycles.
    pub histogram: Vec<u64>,
    /// DMA return: cycles from the doorbell's arrival to the read's completion, summed.
    pub read_sum_cycles: u64,
    /// DMA return: reads answered with an error or poisoned, or not answered in time.
    pub return_errors: u64,
    /// Completions with the loop's tag that the card did not expect.
    pub unexpected_completions: u64,
    /// Loop-time samples the card's FIFO could not keep.
    pub samples_dropped: u64,
}

impl CardStats {
    pub fn mean_cycles(&self) -> Option<f64> {
        (self.count > 0).then(|| self.sum_cycles as f64 / self.count as f64)
    }
}

/// Host-side observations of one run.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct HostStats {
    /// Iterations the host served.
    pub served: u64,
    /// Polls of the buffer's first DW (poll detection).
    pub polls: u64,
    /// Interrupts waited for (interrupt detection).
    pub interrupts: u64,
    /// Iterations whose data did not match the pattern (only with `verify_data`).
    pub data_errors: u64,
    /// DMA return: doorbells rung again because the card's read of the result failed
    /// (error completion, poisoned data, no completion); the card counts each failure in
    /// `return_errors`.
    pub doorbell_retries: u64,
    /// `return_errors` of the chunk as the host last saw it.
    #[serde(skip)]
    known_return_errors: u64,
    /// Host wall time from seeing the token to issuing the return, per iteration (ns).
    pub compute_ns: Vec<u64>,
}

/// What a run measured.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LoopRun {
    pub config: LoopConfig,
    pub clock_hz: u32,
    pub card: CardStats,
    /// Every loop time in cycles, in order (from the card's sample FIFO).
    pub loop_cycles: Vec<u32>,
    pub host: HostStats,
}

impl LoopRun {
    /// Passed: every iteration returned the right checksum, nothing was lost.
    pub fn verified(&self) -> bool {
        self.card.count == u64::from(self.config.iterations)
            && self.card.mismatches == 0
            && self.host.data_errors == 0
            && self.card.samples_dropped == 0
            && self.loop_cycles.len() as u64 == self.card.count
    }

    pub fn cycles_to_ns(&self, cycles: f64) -> f64 {
        cycles * 1e9 / f64::from(self.clock_hz.max(1))
    }
}

/// Which MSI bit of `pcie_msi` the loop raises.
pub fn msi_bit() -> u32 {
    tlpx_regs::constants::MSI_RT_LOOP as u32
}

/// The 32-bit sum of the data DWs of a buffer (every DW after the token).
pub fn checksum(buffer: &DmaBuffer, size_bytes: u32) -> Result<u32, DeviceError> {
    let mut bytes = vec![0u8; size_bytes as usize - 4];
    buffer.read_bytes(4, &mut bytes)?;
    Ok(bytes.chunks_exact(4).fold(0u32, |s, c| s.wrapping_add(u32::from_le_bytes([c[0], c[1], c[2], c[3]]))))
}

/// Whether every data DW of the buffer is the pattern of `token`.
pub fn data_matches(buffer: &DmaBuffer, size_bytes: u32, token: u32) -> Result<bool, DeviceError> {
    let mut bytes = vec![0u8; size_bytes as usize - 4];
    buffer.read_bytes(4, &mut bytes)?;
    Ok(bytes.chunks_exact(4).enumerate().all(|(i, c)| {
        u32::from_le_bytes([c[0], c[1], c[2], c[3]]) == pattern_word(DataPattern::Prbs, token, buffer.bus_addr + 4 + 4 * i as u64)
    }))
}

/// Runs the loop: `config.iterations` round trips, in chunks, and reads what the card measured.
/// The calling thread serves every iteration (pin it and set its priority before calling).
pub fn run(card: &mut Card, config: &LoopConfig) -> Result<LoopRun, DeviceError> {
    card.require(Feature::RtLoop, "real-time loop")?;
    let config = ValidLoopConfig::new(config)?;
    card.claim(Block::RtLoop)?;
    refuse_ownerless_run(card)?;
    let buffer = card.device().alloc_dma(RESULT_OFFSET + 64)?;
    let result = run_with(card, &config, &buffer);
    let stopped = stop(card);
    let freed = card.device().free_dma(buffer);
    let released = card.release(Block::RtLoop);
    let r = result?;
    stopped?;
    freed?;
    released?;
    Ok(r)
}

fn run_with(card: &mut Card, valid: &ValidLoopConfig, buffer: &DmaBuffer) -> Result<LoopRun, DeviceError> {
    let config = valid.config();
    let clock_hz = card.identity().clock_hz;
    let mut out = LoopRun {
        config: config.clone(),
        clock_hz,
        card: CardStats { histogram: vec![0; HISTOGRAM_BUCKETS], ..CardStats::default() },
        loop_cycles: Vec::with_capacity(config.iterations as usize),
        host: HostStats::default(),
    };
    for w in valid.setup_writes(buffer.bus_addr) {
        card.write(w.register, w.value)?;
    }
    msi::clear_latched(card, msi_bit())?;
    msi::set(card, msi_bit(), config.detect == Detect::Irq)?;
    let mut done = 0u32;
    while done < config.iterations {
        let n = (config.iterations - done).min(CHUNK_ITERATIONS);
        let seed = config.seed.wrapping_add(done);
        // The token slot must not hold this chunk's first token already (a stale buffer).
        buffer.write_u32(0, seed.wrapping_sub(1))?;
        for w in chunk_writes(n, seed) {
            card.write(w.register, w.value)?;
        }
        // A read so every write above has arrived, then drop interrupts queued before.
        card.read(regs::STATUS)?;
        while card.device().wait_interrupt(WAIT_MASK, Duration::ZERO)?.is_some() {}
        out.host.known_return_errors = 0;
        card.write(regs::CONTROL, regs::control::START.set(1))?;
        for i in 0..n {
            serve(card, config, buffer, seed.wrapping_add(i), &mut out.host)?;
        }
        wait_done(card, config, &mut out.host)?;
        collect(card, &mut out)?;
        done += n;
    }
    Ok(out)
}

/// Serves one iteration: detect the buffer with `token`, checksum it, return the result.
pub fn serve(card: &mut Card, config: &LoopConfig, buffer: &DmaBuffer, token: u32, host: &mut HostStats) -> Result<(), DeviceError> {
    let deadline = Instant::now() + config.detect_timeout;
    let late =
        |host: &HostStats| DeviceError::from(RtLoopError::BufferLate { token, iteration: host.served, timeout: config.detect_timeout });
    match config.detect {
        Detect::Poll => {
            let mut polls = 0u64;
            loop {
                polls += 1;
                if buffer.read_u32(0)? == token {
                    break;
                }
                if Instant::now() > deadline {
                    host.polls += polls;
                    return Err(late(host));
                }
                // A slow buffer after a DMA return may be a failed read of the result.
                if config.ret == Return::Dma && polls.is_multiple_of(1024) {
                    retry_failed_return(card, host)?;
                }
                card.poll_pause(config.poll_step)?;
            }
            host.polls += polls;
        }
        Detect::Irq => loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let slice = if config.ret == Return::Dma { left.min(Duration::from_millis(2)) } else { left };
            if card.wait_interrupt(WAIT_MASK, slice.max(Duration::from_micros(100)))?.is_some() {
                host.interrupts += 1;
                if buffer.read_u32(0)? == token {
                    break;
                }
            } else if config.ret == Return::Dma {
                retry_failed_return(card, host)?;
            }
            if Instant::now() > deadline {
                return Err(late(host));
            }
        },
    }
    let seen = Instant::now();
    let sum = checksum(buffer, config.size_bytes)?;
    if config.verify_data && !data_matches(buffer, config.size_bytes, token)? {
        host.data_errors += 1;
    }
    match config.ret {
        Return::Register => card.write(regs::RESULT, u64::from(sum))?,
        Return::Dma => {
            buffer.write_u32(RESULT_OFFSET, sum)?;
            // The checksum must be in memory before the doorbell can reach the card.
            std::sync::atomic::fence(std::sync::atomic::Ordering::SeqCst);
            card.write(regs::DOORBELL, 1)?;
        }
    }
    host.compute_ns.push(seen.elapsed().as_nanos() as u64);
    host.served += 1;
    Ok(())
}

/// DMA return: when the card counted a failed read of the result since the host last
/// looked, rings the doorbell again (the checksum is still in memory).
fn retry_failed_return(card: &mut Card, host: &mut HostStats) -> Result<(), DeviceError> {
    let errors = card.read(regs::RETURN_ERRORS)?;
    if errors > host.known_return_errors {
        host.known_return_errors = errors;
        host.doorbell_retries += 1;
        card.write(regs::DOORBELL, 1)?;
    }
    Ok(())
}

fn wait_done(card: &mut Card, config: &LoopConfig, host: &mut HostStats) -> Result<(), DeviceError> {
    let deadline = Instant::now() + config.detect_timeout;
    loop {
        let status = card.read(regs::STATUS)?;
        if regs::status::RUNNING.get(status) == 0 {
            return Ok(());
        }
        if config.ret == Return::Dma {
            retry_failed_return(card, host)?;
        }
        if Instant::now() > deadline {
            let errors = card.read(regs::RETURN_ERRORS)?;
            return Err(RtLoopError::DidNotEnd { status, return_errors: errors }.into());
        }
        card.device().idle(Duration::from_micros(20))?;
    }
}

/// Adds the chunk's card statistics and samples to `out`.
fn collect(card: &mut Card, out: &mut LoopRun) -> Result<(), DeviceError> {
    let s = &mut out.card;
    let count = card.read(regs::COUNT)?;
    s.count += count;
    s.mismatches += card.read(regs::MISMATCHES)?;
    if count > 0 {
        let min = card.read(regs::LOOP_MIN)?;
        s.min_cycles = Some(s.min_cycles.map_or(min, |m| m.min(min)));
        s.max_cycles = s.max_cycles.max(card.read(regs::LOOP_MAX)?);
    }
    s.sum_cycles += card.read(regs::LOOP_SUM)?;
    s.read_sum_cycles += card.read(regs::READ_SUM)?;
    s.return_errors += card.read(regs::RETURN_ERRORS)?;
    s.unexpected_completions += card.read(regs::UNEXPECTED)?;
    s.samples_dropped += card.read(regs::SAMPLES_DROPPED)?;
    let hist = crate::generator::read_histogram(card, regs::LOOP_HIST_SELECT, regs::LOOP_HIST_COUNT, HISTOGRAM_BUCKETS)?;
    for (a, b) in s.histogram.iter_mut().zip(hist) {
        *a += b;
    }
    let waiting = card.read(regs::SAMPLES)?;
    for _ in 0..waiting {
        out.loop_cycles.push(card.read(regs::SAMPLE)? as u32);
    }
    Ok(())
}

/// The host side of loop iterations someone else starts — the card's CPU with
/// `tlpx script run --serve loop` (firmware/scripts/datamover_card_side.tlpxs): the loop's
/// buffer and registers are set up for polling detection and register return, the loop is
/// not started; [`Responder::serve`] answers the iteration the card waits for.
pub struct Responder {
    buffer: DmaBuffer,
    size_bytes: u32,
    /// Iterations answered.
    pub served: u64,
    /// Buffers whose data did not match their token's pattern (checked after answering).
    pub data_errors: u64,
}

impl Responder {
    /// Clears the loop and programs a buffer of `size_bytes` (token included) for it.
    pub fn attach(card: &mut Card, size_bytes: u32) -> Result<Responder, DeviceError> {
        card.require(Feature::RtLoop, "real-time loop")?;
        // A responder's loop: polled, checksum by register (the all-zero config).
        let config = ValidLoopConfig::new(&LoopConfig::new(size_bytes, 1, Detect::Poll, Return::Register))?;
        card.claim(Block::RtLoop)?;
        refuse_ownerless_run(card)?;
        let buffer = card.device().alloc_dma(RESULT_OFFSET + 64)?;
        let programmed = (|| {
            for w in config.setup_writes(buffer.bus_addr) {
                card.write(w.register, w.value)?;
            }
            msi::set(card, msi_bit(), false)
        })();
        if let Err(e) = programmed {
            let _ = card.device().free_dma(buffer);
            return Err(e);
        }
        Ok(Responder { buffer, size_bytes, served: 0, data_errors: 0 })
    }

    /// If the card waits for a result: checksums the buffer and writes `rt_loop.result`
    /// (one register read when it does not wait). True if it answered.
    pub fn serve(&mut self, card: &mut Card) -> Result<bool, DeviceError> {
        if regs::status::WAITING.get(card.read(regs::STATUS)?) == 0 {
            return Ok(false);
        }
        let token = card.read(regs::TOKEN)? as u32;
        if self.buffer.read_u32(0)? != token {
            return Ok(false); // the token DW is written last: the buffer is not all there yet
        }
        let sum = checksum(&self.buffer, self.size_bytes)?;
        card.write(regs::RESULT, u64::from(sum))?;
        self.served += 1;
        if !data_matches(&self.buffer, self.size_bytes, token)? {
            self.data_errors += 1;
        }
        Ok(true)
    }

    /// Stops the loop and frees the buffer.
    pub fn finish(self, card: &mut Card) -> Result<(u64, u64), DeviceError> {
        let stopped = stop(card);
        let freed = card.device().free_dma(self.buffer);
        let released = card.release(Block::RtLoop);
        stopped?;
        freed?;
        released?;
        Ok((self.served, self.data_errors))
    }
}

/// A loop that runs although nobody holds its lease was started by the card's firmware or by
/// register writes: not ours to clear under it.
fn refuse_ownerless_run(card: &mut Card) -> Result<(), DeviceError> {
    if regs::status::RUNNING.get(card.read(regs::STATUS)?) != 0 {
        card.release(Block::RtLoop)?;
        return Err(RtLoopError::Unowned.into());
    }
    Ok(())
}

/// Stops the loop (after the current iteration) and disables its MSI.
pub fn stop(card: &mut Card) -> Result<(), DeviceError> {
    card.write(regs::CONTROL, regs::control::STOP.set(1))?;
    msi::set(card, msi_bit(), false)?;
    msi::clear_latched(card, msi_bit())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn configs_are_validated_with_the_bad_value() {
        let ok = LoopConfig::new(256, 10, Detect::Poll, Return::Register);
        ok.validate().expect("valid");
        for size in [0, 4, 6, 4100, 8192] {
            let e = LoopConfig { size_bytes: size, ..ok.clone() }.validate().expect_err("bad size").to_string();
            assert!(e.contains(&format!("not {size}")) && e.contains("8..=4096"), "{e}");
        }
        let e = LoopConfig { iterations: 0, ..ok.clone() }.validate().expect_err("zero").to_string();
        assert!(e.contains("at least 1 iteration"), "{e}");
        let e = LoopConfig { payload_size_log2: 13, ..ok }.validate().expect_err("payload").to_string();
        assert!(e.contains("2^13"), "{e}");
    }
}
