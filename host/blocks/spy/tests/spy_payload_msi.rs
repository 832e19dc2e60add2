//! Record format 2 through the real tlpx-sim: payload capture and MSI records.
//!
//!   host ──bar_write_block (known bytes)──► card ──generator MWr (pattern)──► host buffer
//!              └──── spy: TLP record + payload records, MSI records ────► ring ──► entries()
//!
//! The payload bytes the spy records must be the bytes the TLPs carried, in address order:
//! the host's block write as it was written, the card's writes as they landed in the host's
//! buffer. The generator's run ends with its MSI: one MSI record per MSI the simulator saw,
//! with the generator's source bit and the vector LitePCIe's MSI block sends.

use std::time::Duration;

use tlpx_device::backends::sim::SimDevice;
use tlpx_device::card::Card;
use tlpx_device::generator::{self, GenConfig, LinkLimits, Operation};
use tlpx_device::spy::{self, Capture, Filters, Trigger, TriggerMode};
use tlpx_regs::{constants, ident};
use tlpx_testkit::SimProcess;
use tlpx_trace::{Body, Direction, Record};

/// tlpx-sim started by the shared test kit, with this file's two ways in.
struct Sim(SimProcess);

impl Sim {
    fn start(args: &[&str]) -> Sim {
        Sim(SimProcess::start(args))
    }

    fn card(&self) -> Card {
        Card::open(Box::new(SimDevice::connect(self.0.socket()).expect("connect"))).expect("tlpx card")
    }

    fn control(&self) -> SimDevice {
        SimDevice::connect(self.0.socket()).expect("connect")
    }
}

fn decode(raw: &[[u8; 32]]) -> Vec<Record> {
    raw.iter().enumerate().map(|(i, r)| Record::from_bytes(r).unwrap_or_else(|e| panic!("record #{i}: {e}"))).collect()
}

/// Memory writes of `direction` with the payload the spy captured: (address, Length, bytes).
fn writes(records: &[Record], direction: Direction) -> Vec<(u64, u16, Vec<u8>, bool)> {
    tlpx_trace::entries(records)
        .into_iter()
        .filter_map(|e| match e.record.body {
            Body::Request(r) if r.direction == direction && r.has_data() && !r.own => {
                Some((r.address, r.length_dw, e.payload, e.payload_complete))
            }
            _ => None,
        })
        .collect()
}

#[test]
fn payload_of_host_writes_is_the_written_bytes_in_address_order() {
    for width in ["64", "128", "256"] {
        let sim = Sim::start(&["--data-width", width]);
        let mut card = sim.card();
        let f = Filters { payload_dws: 4, ..Filters::default() };
        let cap = Capture::start(&mut card, 1024, &f, &Trigger::default()).expect("start");
        // Bytes 0x10, 0x11, ...: any swap within or between DWs shows.
        let bytes: Vec<u8> = (0..64u8).map(|i| 0x10 + i).collect();
        card.device().bar_write_block(0, tlpx_device::pio::WINDOW_OFFSET + 0x40, &bytes).expect("block write");
        let end = cap.stop(&mut card).expect("stop");
        assert_eq!(end.records_lost, 0);
        let block: Vec<_> = writes(&decode(&end.remaining), Direction::Down).into_iter().filter(|w| w.1 > 1).collect();
        assert!(!block.is_empty(), "dw{width}: the block write's TLPs were recorded");
        let base = block.iter().map(|w| w.0).min().expect("one");
        let mut covered = 0;
        for (address, length, payload, complete) in &block {
            let at = (address - base) as usize;
            let n = 4 * usize::from(*length).min(4);
            assert!(complete, "dw{width}: every payload record of the TLP at {address:#x} arrived");
            assert_eq!(payload, &bytes[at..at + n], "dw{width}: payload of the write at {address:#x} (Length {length})");
            covered += usize::from(*length) * 4;
        }
        assert_eq!(covered, bytes.len(), "dw{width}: the block's TLPs cover it");
        assert_eq!(block.iter().find(|w| w.0 == base).map(|w| w.2[0]), Some(0x10), "dw{width}: byte 0 first");
    }
}

#[test]
fn payload_of_generator_writes_is_what_reached_host_memory() {
    let sim = Sim::start(&["--data-width", "128"]);
    let mut card = sim.card();
    let buffer = card.device().alloc_dma(1 << 14).expect("buffer");
    buffer.write_bytes(0, &vec![0u8; buffer.len]).expect("zero");
    let f = Filters { payload_dws: 16, payload_directions: 0b10, ..Filters::default() };
    let cap = Capture::start(&mut card, 4096, &f, &Trigger::default()).expect("start");
    let mut cfg = GenConfig::new(Operation::Write, 256, 8);
    cfg.window = 1 << 14;
    cfg.payload_size = 128;
    let valid = cfg.validate(LinkLimits::LARGEST, buffer.len as u64).expect("valid run");
    generator::run(&mut card, &buffer, &valid, Duration::from_millis(50)).expect("run");
    let end = cap.stop(&mut card).expect("stop");
    assert_eq!(end.records_lost, 0);
    let mut memory = vec![0u8; buffer.len];
    buffer.read_bytes(0, &mut memory).expect("read back");
    let up = writes(&decode(&end.remaining), Direction::Up);
    assert_eq!(up.len(), 8 * 256 / 128, "one MWr per 128 bytes");
    for (address, length, payload, complete) in &up {
        assert_eq!((*length, payload.len(), *complete), (32, 64, true), "16 DWs of a 32-DW write");
        let at = (address - buffer.bus_addr) as usize;
        assert!(memory[at..at + 64].iter().any(|&b| b != 0), "the generator wrote its pattern there");
        assert_eq!(payload, &memory[at..at + 64], "payload of the write at {address:#x}");
    }
    // The down direction was not asked for: the host's MMIO writes carry no payload records.
    assert!(writes(&decode(&end.remaining), Direction::Down).iter().all(|w| w.2.is_empty()));
    card.device().free_dma(buffer).expect("free");
}

#[test]
fn msi_records_carry_the_generator_source_and_match_the_link() {
    let sim = Sim::start(&["--data-width", "256"]);
    let mut card = sim.card();
    let mut control = sim.control();
    let buffer = card.device().alloc_dma(1 << 14).expect("buffer");
    let cap = Capture::start(&mut card, 4096, &Filters::default(), &Trigger::default()).expect("start");
    let before = control.traffic().expect("traffic");
    let mut cfg = GenConfig::new(Operation::Write, 256, 3);
    cfg.window = 1 << 14;
    let valid = cfg.validate(LinkLimits::LARGEST, buffer.len as u64).expect("valid run");
    for _ in 0..2 {
        generator::run(&mut card, &buffer, &valid, Duration::from_millis(50)).expect("run");
    }
    card.read(ident::SCRATCH).expect("let everything land");
    let msis_on_link = control.traffic().expect("traffic").since(&before).card_msis;
    let end = cap.stop(&mut card).expect("stop");
    let records = decode(&end.remaining);
    let msis: Vec<_> = records
        .iter()
        .filter_map(|r| match r.body {
            Body::Msi(m) => Some((r.sequence, m)),
            _ => None,
        })
        .collect();
    assert_eq!(msis_on_link, 2, "one MSI per run");
    assert_eq!(msis.len() as u64, msis_on_link, "one MSI record per MSI");
    assert_eq!(end.msi_count, msis_on_link);
    for (seq, m) in &msis {
        assert_eq!(m.vector, 0, "LitePCIe's MSI block sends vector 0");
        assert_ne!(m.sources & (1 << constants::MSI_GENERATOR), 0, "record {seq}: the generator's source, {:#b}", m.sources);
        // After the generator's last write of its run: its MSI follows its TLPs.
        let last_write = records
            .iter()
            .filter(|r| r.sequence < *seq)
            .filter_map(|r| match r.body {
                Body::Request(q) if q.direction == Direction::Up && q.has_data() => Some(q.timing.timestamp),
                _ => None,
            })
            .max()
            .expect("writes before the MSI");
        assert!(m.timestamp >= last_write, "record {seq}: MSI at {} before the run's last write at {last_write}", m.timestamp);
    }
    // With the msi class off, the same run gives no MSI record, and the count still counts.
    let f = Filters { class_mask: spy::ALL_FILTER_CLASSES & !spy::CLASS_MSI, ..Filters::default() };
    let cap = Capture::start(&mut card, 4096, &f, &Trigger::default()).expect("start");
    generator::run(&mut card, &buffer, &valid, Duration::from_millis(50)).expect("run");
    let end = cap.stop(&mut card).expect("stop");
    assert!(!decode(&end.remaining).iter().any(|r| matches!(r.body, Body::Msi(_))));
    assert_eq!(end.msi_count, 1);
    // The capture's own ring writes were counted, though not recorded.
    assert!(end.own.tlps > 0 && end.own.bytes >= end.own.tlps * (12 + 32));
    card.device().free_dma(buffer).expect("free");
}

#[test]
fn trigger_sequence_is_the_matching_record() {
    let sim = Sim::start(&[]);
    let mut card = sim.card();
    let writes_only = Filters { up: false, class_mask: spy::class_mask(&["mwr"]).expect("mwr"), ..Filters::default() };
    // A start trigger on pio.read_delay (BAR0 offset bits; BAR0 is aligned beyond them).
    let target = tlpx_regs::pio::READ_DELAY.offset;
    let t = Trigger { mode: TriggerMode::Start, address_base: target, address_mask: 0xFFFC, pre: 1, post: 2, ..Trigger::default() };
    let cap = Capture::start(&mut card, 256, &writes_only, &t).expect("start");
    for i in 0..3 {
        card.write(ident::SCRATCH, i).expect("write");
    }
    card.write(tlpx_regs::pio::READ_DELAY, 0).expect("the trigger");
    for i in 0..3 {
        card.write(ident::SCRATCH, i).expect("write");
    }
    let end = cap.stop(&mut card).expect("stop");
    let records = decode(&end.remaining);
    assert!(end.triggered, "{end:?}");
    let addresses: Vec<u64> = records
        .iter()
        .map(|r| match r.body {
            Body::Request(q) => q.address & 0xFFFC,
            _ => panic!("a request: {r:?}"),
        })
        .collect();
    assert_eq!(addresses, vec![ident::SCRATCH.offset & 0xFFFC, target, ident::SCRATCH.offset & 0xFFFC]);
    // The trigger is record 3 (after three scratch writes, two of them discarded as beyond
    // `pre`): the footer's trigger_sequence names it.
    assert_eq!(records[1].sequence, 3);
    assert_eq!(end.trigger_sequence, Some(records[1].sequence));
}
