//! A small scripted capture for examples, docs, tests and fuzz seeds: what the spy would
//! record while the card reads host memory, writes it back, and the host polls a register.

use crate::header::Header;
use crate::{build, Body, CaptureInfo, CardInfo, Direction, Footer, HeaderInfo, LinkInfo, Record, Timeout, TraceError, TraceWriter};

/// Card clock of the scenario.
pub const CLOCK_HZ: u64 = 125_000_000;
/// Fixed creation time of the scenario's header.
pub const CREATED: &str = "2026-11-22T15:04:05Z";

/// A simulated gen2 x4 card at 125 MHz.
pub fn info() -> HeaderInfo {
    HeaderInfo {
        tool: "tlpx-trace tests".into(),
        card: CardInfo {
            map_hash: Some("0x1681c1fd".into()),
            data_width: Some(128),
            clock_hz: CLOCK_HZ,
            pci_address: Some("0000:01:00.0".into()),
            bar0_address: None,
            tlpx_map_offset: None,
            slot_dut: None,
            slot_registers: Vec::new(),
        },
        simulated: true,
        time_mode: None,
        link: Some(LinkInfo { generation: 2, lanes: 4, mps: 256, mrrs: 512 }),
        capture: CaptureInfo {
            filters: serde_json::json!({"address_base": "0x0", "address_mask": "0x0"}),
            trigger: serde_json::json!({"mode": "none"}),
            include_own_traffic: false,
        },
    }
}

/// [`info`]'s header, created at [`CREATED`] (reproducible bytes).
pub fn header() -> Header {
    Header::with_time(&info(), CREATED.into())
}

/// A scripted scenario: the card reads host memory (MRd up, two CplD down each), writes
/// it back (MWr up), the host polls a register (MRd32 down, CplD up), one read times out,
/// and three records are lost (sequence 9..=11 missing).
pub fn scenario() -> Vec<Record> {
    let mut out = Vec::new();
    let mut seq = 0u32;
    let mut t = 1000u64;
    let mut next = |out: &mut Vec<Record>, mut r: Record| {
        r.sequence = seq;
        seq += 1;
        if seq == 9 {
            seq = 12; // ring overflow: 9, 10, 11 lost
        }
        out.push(r);
    };
    for i in 0..6u64 {
        let tag = i as u8;
        let addr = 0x1_0000_0000 + i * 512;
        let read_at = t;
        let mut rd = build::mem_read(0, Direction::Up, read_at, 0x0100, tag, addr, 128);
        set_timing(&mut rd, 1, 0, 0);
        next(&mut out, rd);
        for split in 1..=2u8 {
            let at = read_at + 150 + u64::from(split) * 20;
            let mut c = build::completion(
                0,
                Direction::Down,
                at,
                0x0100,
                tag,
                0x0000,
                if split == 1 { 512 } else { 256 },
                64,
                Some((at - read_at) as u32),
                split,
                split == 2,
            );
            set_timing(&mut c, 16, 2, 1);
            next(&mut out, c);
        }
        let mut wr = build::mem_write(0, Direction::Up, t + 200, 0x0100, 0, 0x2000 + i * 512, 64);
        set_timing(&mut wr, 16, 3, 0);
        next(&mut out, wr);
        let mut poll = build::mem_read(0, Direction::Down, t + 230, 0x0000, 0x10 + tag, 0x8000_0010, 1);
        set_timing(&mut poll, 0, 0, 0);
        next(&mut out, poll);
        let mut reply = build::completion(0, Direction::Up, t + 260, 0x0000, 0x10 + tag, 0x0100, 4, 1, Some(30), 1, true);
        set_timing(&mut reply, 0, 0, 0);
        next(&mut out, reply);
        t += 400;
    }
    next(
        &mut out,
        Record {
            sequence: 0,
            body: Body::Timeout(Timeout {
                direction: Direction::Up,
                own: false,
                requester_id: 0x0100,
                tag: 0x3f,
                timestamp: t,
                waited: 50_000,
            }),
        },
    );
    out
}

fn set_timing(r: &mut Record, duration: u16, wait: u8, gap: u8) {
    let timing = match &mut r.body {
        Body::Request(x) => &mut x.timing,
        Body::Completion(x) => &mut x.timing,
        _ => return,
    };
    timing.duration = duration;
    timing.wait_cycles = wait;
    timing.gap_cycles = gap;
}

/// The footer matching [`scenario`].
pub fn scenario_footer(records: &[Record]) -> (u32, Footer) {
    let next = records.last().map_or(0, |r| r.sequence.wrapping_add(1));
    (next, Footer { records_created: u64::from(next), records_lost: 3, trigger_sequence: None })
}

/// `records` (and the footer, if any) as a trace file's bytes, with [`header`].
pub fn trace_bytes(records: &[Record], footer: Option<(u32, Footer)>) -> Vec<u8> {
    try_trace_bytes(records, footer).unwrap_or_default()
}

fn try_trace_bytes(records: &[Record], footer: Option<(u32, Footer)>) -> Result<Vec<u8>, TraceError> {
    let mut w = TraceWriter::new(Vec::new(), &header())?;
    for r in records {
        w.write(r)?;
    }
    match footer {
        Some((seq, f)) => w.finish(seq, f),
        None => w.finish_without_footer(),
    }
}

/// The scenario as a trace file's bytes, footer included.
pub fn scenario_bytes() -> Vec<u8> {
    let records = scenario();
    let footer = scenario_footer(&records);
    trace_bytes(&records, Some(footer))
}
