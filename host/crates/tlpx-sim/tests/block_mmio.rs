//! Block MMIO: a CPU's 16/32/64-byte load or store (or a write-combining burst) is ONE TLP
//! whose Length and First/Last BE cover exactly the bytes, checked against the real card and
//! against the sim's exact traffic counters.
//!
//!   bar_write_block(64 B) ──MmioWriteBlock──► tlpx-sim ──one MWr32, 16 DW──► card
//!   bar_read_block(64 B)  ──MmioReadBlock───► tlpx-sim ──one MRd32, 16 DW──► card ──CplD──►

#![allow(clippy::unwrap_used)]

use crate::common;

use common::{Sim, MAGIC};
use tlpx_device::backends::sim::SimDevice;
use tlpx_device::{Device, DeviceError, Width};

const SCRATCH: u64 = 0x18;
const FEATURES: u64 = 0x8;
const FEATURE_GENERATOR: u64 = 1 << 3;
/// The PIO memory window of cards with the generator feature.
const PIO_WINDOW: u64 = 0x10000;
const WRITER_TABLE_VALUE: u64 = 0x2004;
const REQUEST_PATH_MEM_READS: u64 = 0x1000;
const REQUEST_PATH_MEM_WRITES: u64 = 0x1004;
const REQUEST_PATH_BUS_ERRORS: u64 = 0x1020;

fn has_pio_window(dev: &mut SimDevice) -> bool {
    dev.bar_read(0, FEATURES, Width::W32).unwrap() & FEATURE_GENERATOR != 0
}

fn card_counter(dev: &mut SimDevice, offset: u64) -> u64 {
    dev.bar_read(0, offset, Width::W32).unwrap()
}

#[test]
fn a_64_byte_write_and_read_round_trip_as_one_tlp_each() {
    let sim = Sim::start(&[]);
    let mut dev = sim.connect();
    let pio = has_pio_window(&mut dev);
    let data: Vec<u8> = (0..64u8).map(|i| i.wrapping_mul(37) ^ 0xA5).collect();
    let errors0 = card_counter(&mut dev, REQUEST_PATH_BUS_ERRORS);
    let writes0 = card_counter(&mut dev, REQUEST_PATH_MEM_WRITES);
    let reads0 = card_counter(&mut dev, REQUEST_PATH_MEM_READS);
    let before = dev.traffic().unwrap();
    dev.bar_write_block(0, PIO_WINDOW, &data).unwrap();
    let (got, _) = dev.bar_read_block_stamped(0, PIO_WINDOW, 64).unwrap();
    let t = dev.traffic().unwrap().since(&before);
    let reads1 = card_counter(&mut dev, REQUEST_PATH_MEM_READS);
    let writes1 = card_counter(&mut dev, REQUEST_PATH_MEM_WRITES);
    // One MWr32 of 16 DWs, all bytes enabled; one MRd32 of 16 DWs; one CplD of 16 DWs.
    assert_eq!((t.mmio_writes.tlps, t.mmio_writes.dw_bytes, t.mmio_writes.bytes), (1, 64, 64), "{t:?}");
    assert_eq!((t.mmio_reads.tlps, t.mmio_reads.dw_bytes, t.mmio_reads.bytes), (1, 64, 64), "{t:?}");
    assert_eq!((t.card_completions.cpld, t.card_completions.payload_bytes, t.card_completions.data_bytes), (1, 64, 64));
    assert_eq!((t.mmio_writes.header_3dw, t.mmio_reads.header_3dw), (1, 1));
    // The card saw one write and one read request too.
    assert_eq!(writes1 - writes0, 1);
    assert_eq!(reads1 - reads0, 2, "the block read and one of the two counter reads");
    if pio {
        assert_eq!(got, data, "the PIO window returns what was written");
        assert_eq!(card_counter(&mut dev, REQUEST_PATH_BUS_ERRORS), errors0);
    } else {
        // A card without the PIO window: unmapped BAR0 offsets read zero and count bus errors.
        assert_eq!(got, vec![0; 64]);
        assert!(card_counter(&mut dev, REQUEST_PATH_BUS_ERRORS) > errors0);
    }
}

#[test]
fn partial_multi_dw_block_writes_land_exactly() {
    let sim = Sim::start(&[]);
    let mut dev = sim.connect();
    // Every card `make gateware` builds has the PIO window: a card without it fails here
    // rather than passing with nothing checked.
    assert!(has_pio_window(&mut dev), "this card has no PIO window (no generator feature)");
    let base = PIO_WINDOW + 0x100;
    dev.bar_write_block(0, base, &[0xEE; 48]).unwrap();
    // Posted writes are counted when the card has taken them: a read lets them arrive.
    dev.bar_read(0, 0, Width::W32).unwrap();
    // 13 bytes at offset 3: First BE 1000, then 3 whole DWs → 4 DWs on the wire.
    let before = dev.traffic().unwrap();
    let patch: Vec<u8> = (1..=13).collect();
    dev.bar_write_block(0, base + 3, &patch).unwrap();
    // 2 bytes inside one DW (First BE 0110), and one byte.
    dev.bar_write_block(0, base + 0x21, &[0x51, 0x52]).unwrap();
    dev.bar_write_block(0, base + 0x2F, &[0x77]).unwrap();
    let got = dev.bar_read_block(0, base, 48).unwrap();
    let t = dev.traffic().unwrap().since(&before);
    assert_eq!(t.mmio_writes.tlps, 3);
    assert_eq!(t.mmio_writes.dw_bytes, 16 + 4 + 4);
    assert_eq!(t.mmio_writes.bytes, 13 + 2 + 1);
    let mut want = vec![0xEE; 48];
    want[3..16].copy_from_slice(&patch);
    want[0x21..0x23].copy_from_slice(&[0x51, 0x52]);
    want[0x2F] = 0x77;
    assert_eq!(got, want);
    // An unaligned 64-byte load spans 17 DWs: still one request, exact bytes back.
    let got = dev.bar_read_block(0, base + 1, 47).unwrap();
    assert_eq!(got, want[1..48]);
}

#[test]
fn four_byte_blocks_reach_scratch() {
    let sim = Sim::start(&[]);
    let mut dev = sim.connect();
    dev.bar_write_block(0, SCRATCH, &[0x01, 0x02, 0x03, 0x04]).unwrap();
    assert_eq!(dev.bar_read(0, SCRATCH, Width::W32).unwrap(), 0x0403_0201);
    assert_eq!(dev.bar_read_block(0, SCRATCH, 4).unwrap(), vec![1, 2, 3, 4]);
    // Two bytes in the middle of the DW: First BE 0110.
    dev.bar_write_block(0, SCRATCH + 1, &[0xAA, 0xBB]).unwrap();
    assert_eq!(dev.bar_read(0, SCRATCH, Width::W32).unwrap(), 0x04BB_AA01);
    assert_eq!(dev.bar_read_block(0, SCRATCH + 2, 1).unwrap(), vec![0xBB]);
}

#[test]
fn a_16_byte_store_to_the_dma_table_is_one_mwr() {
    let sim = Sim::start(&[]);
    let mut dev = sim.connect();
    let writes0 = card_counter(&mut dev, REQUEST_PATH_MEM_WRITES);
    let before = dev.traffic().unwrap();
    // writer_table_value (58 bits at 0x2004..0x200b), writer_table_we (0x200c),
    // writer_table_loop_prog_n (0x2010): the writer is off, so the descriptor only queues.
    let value: u64 = 0x0123_4567_89AB_CDEF & ((1 << 58) - 1);
    let mut data = value.to_le_bytes().to_vec();
    data.extend_from_slice(&[0; 8]);
    dev.bar_write_block(0, WRITER_TABLE_VALUE, &data).unwrap();
    assert_eq!(dev.bar_read(0, WRITER_TABLE_VALUE, Width::W32).unwrap(), value & 0xFFFF_FFFF);
    assert_eq!(dev.bar_read(0, WRITER_TABLE_VALUE + 4, Width::W32).unwrap(), value >> 32);
    assert_eq!(dev.bar_read_block(0, WRITER_TABLE_VALUE, 8).unwrap(), value.to_le_bytes());
    let t = dev.traffic().unwrap().since(&before);
    assert_eq!((t.mmio_writes.tlps, t.mmio_writes.dw_bytes), (1, 16), "one MWr of 4 DWs: {t:?}");
    assert_eq!(card_counter(&mut dev, REQUEST_PATH_MEM_WRITES) - writes0, 1, "the card executed one write request");
    let s = dev.stats().unwrap();
    assert_eq!(s.host_to_card.by_type.get("MWr32"), Some(&1));
}

#[test]
fn a_16_byte_load_of_the_ident_block_is_one_mrd() {
    let sim = Sim::start(&[]);
    let mut dev = sim.connect();
    let before = dev.traffic().unwrap();
    let block = dev.bar_read_block(0, 0, 16).unwrap();
    let t = dev.traffic().unwrap().since(&before);
    assert_eq!((t.mmio_reads.tlps, t.mmio_reads.dw_bytes, t.card_completions.cpld), (1, 16, 1));
    let dw = |i: usize| u64::from(u32::from_le_bytes([block[4 * i], block[4 * i + 1], block[4 * i + 2], block[4 * i + 3]]));
    assert_eq!(dw(0), u64::from(MAGIC));
    for (i, off) in [4u64, 8, 12].into_iter().enumerate() {
        assert_eq!(dw(i + 1), dev.bar_read(0, off, Width::W32).unwrap(), "DW at {off:#x}");
    }
}

#[test]
fn bad_block_accesses_are_refused_before_reaching_the_card() {
    let sim = Sim::start(&[]);
    let mut dev = sim.connect();
    let cases: Vec<(u64, usize, &str)> = vec![
        (0, 0, "1..=64 bytes, not 0"),
        (0, 65, "1..=64 bytes, not 65"),
        (0xFF8, 16, "cross a 4 KiB boundary"),
        (1 << 20, 4, "outside BAR0"),
        (u64::MAX - 3, 8, "outside BAR0"),
    ];
    for (offset, len, needle) in cases {
        let e = dev.bar_read_block(0, offset, len).unwrap_err();
        assert!(matches!(e, DeviceError::InvalidArgument(_)) && e.to_string().contains(needle), "read {offset:#x}+{len}: {e}");
        let e = dev.bar_write_block(0, offset, &vec![0; len]).unwrap_err();
        assert!(e.to_string().contains(needle), "write {offset:#x}+{len}: {e}");
    }
    let e = dev.bar_read_block(1, 0, 4).unwrap_err();
    assert!(e.to_string().contains("BAR1"), "{e}");
    let s = dev.stats().unwrap();
    assert_eq!(s.host_to_card.tlps, 0);
    assert_eq!(s.traffic, Default::default());
}

#[test]
fn a_hand_made_client_gets_errors_and_the_sim_survives() {
    use std::io::Write;
    use tlpx_sim_protocol::{encode_frame, read_frame, Reply, Request, PROTOCOL_VERSION};
    let sim = Sim::start(&[]);
    let mut s = std::os::unix::net::UnixStream::connect(&sim.socket).unwrap();
    let mut buf = Vec::new();
    let mut send = |s: &mut std::os::unix::net::UnixStream, r: &Request| {
        encode_frame(r, &mut buf).unwrap();
        s.write_all(&buf).unwrap();
    };
    send(&mut s, &Request::Hello { protocol_version: PROTOCOL_VERSION, client_name: "raw".into() });
    let _: Reply = read_frame(&mut s).unwrap();
    send(&mut s, &Request::MmioReadBlock { bar: 0, offset: 0, len: 200 });
    let r: Reply = read_frame(&mut s).unwrap();
    assert!(matches!(r, Reply::Error { ref message, .. } if message.contains("not 200")), "{r:?}");
    // A bad posted block write has no reply: it is dropped and counted.
    send(&mut s, &Request::MmioWriteBlock { bar: 0, offset: 0xFFC, data: vec![0; 8] });
    send(&mut s, &Request::Stats);
    let Reply::Stats(st) = read_frame(&mut s).unwrap() else { panic!("no stats") };
    assert_eq!(st.rejected_mmio_writes, 1);
    assert_eq!(sim.connect().bar_read(0, 0, Width::W32).unwrap(), u64::from(MAGIC));
}
