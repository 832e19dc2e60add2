//! The exerciser script image's DMA descriptor: one generator run as the card's soft CPU
//! replays it (firmware/src/script.c writes each word to its generator register, adding the
//! script buffer's bus address to `base_offset`).
//!
//! Its layout is generated (`tlpx_regs::generator::run_descriptor`, the firmware's
//! `TLPX_GENERATOR_DESC_*`); its values are encoded from a [`ValidGenConfig`] by the same code
//! that programs the registers from the host, so a script's run and a `tlpx bw` run of the same
//! configuration program the same values.

use serde::Serialize;
use tlpx_regs::generator::run_descriptor as desc;

use crate::generator::ValidGenConfig;

/// Bytes of one descriptor.
pub const LEN: usize = desc::LEN;

/// The generator's registers for one run, in register order; the firmware writes them as they
/// are, except `base_offset`, added to the bus address of the script's host buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
pub struct DmaDescriptor {
    pub config: u32,
    pub transfer_size: u32,
    pub count: u64,
    pub duration: u64,
    pub request_size_log2: u32,
    pub payload_size_log2: u32,
    pub idle_cycles: u32,
    pub max_outstanding: u32,
    pub window_mask: u32,
    pub stride_log2: u32,
    pub offset: u32,
    pub seed: u32,
    pub timeout: u32,
    pub base_offset: u32,
}

impl DmaDescriptor {
    /// The descriptor of `config`'s run at `base_offset` in the script's buffer, with a
    /// completion timeout of `timeout_cycles` (the script's own, or its default of 1 ms). The script's window is at most
    /// 2 GiB (its buffer's size), so the window mask fits the register's 32 bits.
    pub fn of(config: &ValidGenConfig, base_offset: u32, timeout_cycles: u32) -> DmaDescriptor {
        DmaDescriptor {
            config: config.config_word() as u32,
            transfer_size: config.transfer_size,
            count: config.count,
            duration: config.duration_cycles,
            request_size_log2: config.request_size_log2(),
            payload_size_log2: config.payload_size_log2(),
            idle_cycles: config.idle_cycles,
            max_outstanding: config.max_outstanding,
            window_mask: config.window_mask() as u32,
            stride_log2: config.stride_log2(),
            offset: config.offset,
            seed: config.seed,
            timeout: timeout_cycles,
            base_offset,
        }
    }

    /// The descriptor's bytes, each field at its generated offset (little-endian, 64-bit
    /// values as two words, low first).
    pub fn to_bytes(self) -> [u8; LEN] {
        let mut b = [0u8; LEN];
        let mut put = |at: usize, v: &[u8]| b[at..at + v.len()].copy_from_slice(v);
        put(desc::CONFIG, &self.config.to_le_bytes());
        put(desc::TRANSFER_SIZE, &self.transfer_size.to_le_bytes());
        put(desc::COUNT, &self.count.to_le_bytes());
        put(desc::DURATION, &self.duration.to_le_bytes());
        put(desc::REQUEST_SIZE_LOG2, &self.request_size_log2.to_le_bytes());
        put(desc::PAYLOAD_SIZE_LOG2, &self.payload_size_log2.to_le_bytes());
        put(desc::IDLE_CYCLES, &self.idle_cycles.to_le_bytes());
        put(desc::MAX_OUTSTANDING, &self.max_outstanding.to_le_bytes());
        put(desc::WINDOW_MASK, &self.window_mask.to_le_bytes());
        put(desc::STRIDE_LOG2, &self.stride_log2.to_le_bytes());
        put(desc::OFFSET, &self.offset.to_le_bytes());
        put(desc::SEED, &self.seed.to_le_bytes());
        put(desc::TIMEOUT, &self.timeout.to_le_bytes());
        put(desc::BASE_OFFSET, &self.base_offset.to_le_bytes());
        b
    }

    /// The inverse of [`to_bytes`](DmaDescriptor::to_bytes) (an image's decoder checks the
    /// values it reads; any bytes decode).
    pub fn from_bytes(b: &[u8; LEN]) -> DmaDescriptor {
        let w = |at: usize| u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]]);
        let d = |at: usize| u64::from(w(at)) | u64::from(w(at + 4)) << 32;
        DmaDescriptor {
            config: w(desc::CONFIG),
            transfer_size: w(desc::TRANSFER_SIZE),
            count: d(desc::COUNT),
            duration: d(desc::DURATION),
            request_size_log2: w(desc::REQUEST_SIZE_LOG2),
            payload_size_log2: w(desc::PAYLOAD_SIZE_LOG2),
            idle_cycles: w(desc::IDLE_CYCLES),
            max_outstanding: w(desc::MAX_OUTSTANDING),
            window_mask: w(desc::WINDOW_MASK),
            stride_log2: w(desc::STRIDE_LOG2),
            offset: w(desc::OFFSET),
            seed: w(desc::SEED),
            timeout: w(desc::TIMEOUT),
            base_offset: w(desc::BASE_OFFSET),
        }
    }

    /// Bytes of the host buffer this run touches: base_offset + window.
    pub fn buffer_end(&self) -> u64 {
        u64::from(self.base_offset) + u64::from(self.window_mask) + 1
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::generator::{completion_timeout_cycles, AddressPattern, GenConfig, Operation};
    use crate::LinkLimits;

    fn valid(c: &GenConfig) -> ValidGenConfig {
        c.validate(LinkLimits::LARGEST, 1 << 31).expect("valid")
    }

    #[test]
    fn descriptor_holds_what_the_registers_get() {
        let mut c = GenConfig::new(Operation::Read, 300, 9);
        c.address_pattern = AddressPattern::Fixed;
        c.window = 1 << 16;
        c.offset = 3;
        c.request_size = 1024;
        c.payload_size = 128;
        c.max_outstanding = 7;
        c.idle_cycles = 11;
        c.seed = 0xabcd;
        c.duration_cycles = 500;
        let v = valid(&c);
        let d = DmaDescriptor::of(&v, 4096, completion_timeout_cycles(250_000_000));
        // Every value the host would write to the same register (all but base, which the
        // firmware adds to its buffer's bus address).
        let writes = v.register_writes(0, 250_000_000);
        let reg = |name: &str| writes.iter().find(|w| w.register.name == name).map(|w| w.value).expect(name);
        assert_eq!(u64::from(d.config), reg("config"));
        assert_eq!(u64::from(d.transfer_size), reg("transfer_size"));
        assert_eq!((d.count, d.duration), (reg("count"), reg("duration")));
        assert_eq!(u64::from(d.request_size_log2), reg("request_size_log2"));
        assert_eq!(u64::from(d.payload_size_log2), reg("payload_size_log2"));
        assert_eq!(u64::from(d.idle_cycles), reg("idle_cycles"));
        assert_eq!(u64::from(d.max_outstanding), reg("max_outstanding"));
        assert_eq!(u64::from(d.window_mask), reg("window_mask"));
        assert_eq!(u64::from(d.stride_log2), reg("stride_log2"));
        assert_eq!(u64::from(d.offset), reg("offset"));
        assert_eq!(u64::from(d.seed), reg("seed"));
        assert_eq!(u64::from(d.timeout), reg("timeout"));
        assert_eq!(d.buffer_end(), 4096 + (1 << 16));
    }

    #[test]
    fn bytes_sit_at_the_generated_offsets_and_round_trip() {
        let d = DmaDescriptor {
            config: 0x0102_0304,
            count: 0x1111_2222_3333_4444,
            duration: 0x5555_6666_7777_8888,
            seed: 0xdead_beef,
            base_offset: 0x8000_0000,
            ..DmaDescriptor::default()
        };
        let b = d.to_bytes();
        assert_eq!(b.len(), desc::LEN);
        assert_eq!(&b[desc::CONFIG..desc::CONFIG + 4], &[4, 3, 2, 1]);
        // 64-bit values: two words, low first.
        assert_eq!(&b[desc::COUNT..desc::COUNT + 4], &0x3333_4444u32.to_le_bytes());
        assert_eq!(&b[desc::COUNT + 4..desc::COUNT + 8], &0x1111_2222u32.to_le_bytes());
        assert_eq!(&b[desc::SEED..desc::SEED + 4], &0xdead_beefu32.to_le_bytes());
        assert_eq!(&b[desc::BASE_OFFSET..desc::BASE_OFFSET + 4], &0x8000_0000u32.to_le_bytes());
        assert_eq!(DmaDescriptor::from_bytes(&b), d);
        // Every field word is 4-byte aligned (the rv32 firmware loads them as words).
        for at in [desc::CONFIG, desc::TRANSFER_SIZE, desc::COUNT, desc::DURATION, desc::TIMEOUT, desc::BASE_OFFSET] {
            assert_eq!(at % 4, 0);
        }
    }
}
