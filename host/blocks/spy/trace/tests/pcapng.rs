//! The pcapng writer checked against the pcapng specification (draft-ietf-opsawg-pcapng) at
//! the byte level: a small independent block walker reads what the writer wrote, and every
//! block, option and packet is compared with what the spec and traces/FORMAT.md require.
//! tlpx's own tshark round trip (host/blocks/spy/tests/pcapng_tshark.rs) checks that Wireshark
//! reads the same.
#![allow(clippy::unwrap_used)]

use crate::common;

use tlpx_trace::pcapng::{self, flags, kind, LINKTYPE, PSEUDO_HEADER_LEN};
use tlpx_trace::{build, entries, Body, Direction, Footer, Msi, PayloadChunk, Record, TraceReader};

#[derive(Debug)]
struct Block {
    block_type: u32,
    body: Vec<u8>,
}

fn u16_at(b: &[u8], i: usize) -> u16 {
    u16::from_le_bytes([b[i], b[i + 1]])
}
fn u32_at(b: &[u8], i: usize) -> u32 {
    u32::from_le_bytes(b[i..i + 4].try_into().unwrap())
}
fn u64_at(b: &[u8], i: usize) -> u64 {
    u64::from_le_bytes(b[i..i + 8].try_into().unwrap())
}

/// Splits a pcapng file into blocks, checking each block's framing: total length a multiple
/// of 4, at least 12, the same at both ends, within the file.
fn blocks(file: &[u8]) -> Vec<Block> {
    let mut out = Vec::new();
    let mut at = 0;
    while at < file.len() {
        assert!(file.len() - at >= 12, "a block of at least 12 bytes at offset {at}");
        let block_type = u32_at(file, at);
        let total = u32_at(file, at + 4) as usize;
        assert!(total >= 12 && total % 4 == 0, "block at {at}: total length {total}");
        assert!(at + total <= file.len(), "block at {at} runs past the end");
        assert_eq!(u32_at(file, at + total - 4) as usize, total, "block at {at}: trailing length");
        out.push(Block { block_type, body: file[at + 8..at + total - 4].to_vec() });
        at += total;
    }
    out
}

/// Options from `start` in a block body: (code, value), up to opt_endofopt, each padded to 4.
fn options(body: &[u8], start: usize) -> Vec<(u16, Vec<u8>)> {
    let mut out = Vec::new();
    let mut at = start;
    while at < body.len() {
        let code = u16_at(body, at);
        let len = usize::from(u16_at(body, at + 2));
        if code == 0 {
            assert_eq!(len, 0, "opt_endofopt has length 0");
            assert_eq!(at + 4, body.len(), "opt_endofopt is the last option");
            return out;
        }
        out.push((code, body[at + 4..at + 4 + len].to_vec()));
        at += 4 + len.next_multiple_of(4);
    }
    assert!(out.is_empty(), "options end with opt_endofopt");
    out
}

fn text(options: &[(u16, Vec<u8>)], code: u16) -> Vec<String> {
    options.iter().filter(|(c, _)| *c == code).map(|(_, v)| String::from_utf8(v.clone()).unwrap()).collect()
}

fn convert(bytes: Vec<u8>) -> Vec<u8> {
    let mut out = Vec::new();
    pcapng::trace_to_pcapng(TraceReader::from_bytes(bytes).unwrap(), &mut out).unwrap();
    out
}

#[test]
fn section_interface_packets_and_statistics_follow_the_spec() {
    let records = common::scenario();
    let (next, footer) = common::scenario_footer(&records);
    let file = convert(common::trace_bytes(&records, Some((next, footer))));
    let blocks = blocks(&file);
    // SHB, IDB, one EPB per record (no payload records here), ISB.
    assert_eq!(blocks.len(), 2 + records.len() + 1);
    let shb = &blocks[0];
    assert_eq!(shb.block_type, 0x0A0D_0D0A);
    assert_eq!(u32_at(&shb.body, 0), 0x1A2B_3C4D, "byte-order magic");
    assert_eq!((u16_at(&shb.body, 4), u16_at(&shb.body, 6)), (1, 0), "version 1.0");
    assert_eq!(u64_at(&shb.body, 8), u64::MAX, "section length -1: not given");
    let shb_opts = options(&shb.body, 16);
    let comment = text(&shb_opts, 1).join("");
    assert!(comment.contains("card time") && comment.contains("125000000 Hz"), "{comment}");
    assert!(text(&shb_opts, 4)[0].starts_with("tlpx-trace "), "shb_userappl");

    let idb = &blocks[1];
    assert_eq!(idb.block_type, 1);
    assert_eq!(u16_at(&idb.body, 0), LINKTYPE);
    assert_eq!(LINKTYPE, 162, "LINKTYPE_USER15");
    assert_eq!(u16_at(&idb.body, 2), 0, "reserved");
    assert_eq!(u32_at(&idb.body, 4), 0, "snaplen 0: no limit");
    let idb_opts = options(&idb.body, 8);
    assert_eq!(idb_opts.iter().find(|(c, _)| *c == 9).map(|(_, v)| v.clone()), Some(vec![9]), "if_tsresol 9: ns");
    let desc = text(&idb_opts, 3).join("");
    assert!(desc.contains("card clock 125000000 Hz") && desc.contains("time mode") && desc.contains("card time"), "{desc}");

    let clock = common::CLOCK_HZ;
    for (i, (block, record)) in blocks[2..blocks.len() - 1].iter().zip(&records).enumerate() {
        assert_eq!(block.block_type, 6, "EPB #{i}");
        assert_eq!(u32_at(&block.body, 0), 0, "interface 0");
        let ts = u64::from(u32_at(&block.body, 4)) << 32 | u64::from(u32_at(&block.body, 8));
        let expected = u128::from(record.event_time().unwrap()) * 1_000_000_000 / u128::from(clock);
        assert_eq!(u128::from(ts), expected, "EPB #{i}: ns of card time (a timeout at the moment it happened)");
        let caplen = u32_at(&block.body, 12) as usize;
        assert_eq!(u32_at(&block.body, 16) as usize, caplen, "nothing cut");
        let data = &block.body[20..20 + caplen];
        assert_eq!((data[0], usize::from(data[1])), (1, PSEUDO_HEADER_LEN), "pseudo-header version and length");
        assert_eq!(u32_at(data, 8), record.sequence);
        assert_eq!(u64_at(data, 16), record.timestamp().unwrap(), "exact cycles in the pseudo-header");
        let opts = options(&block.body, 20 + caplen.next_multiple_of(4));
        let flags_opt = opts.iter().find(|(c, _)| *c == 2).map(|(_, v)| u32_at(v, 0)).unwrap();
        let dir = record.direction().unwrap();
        assert_eq!(flags_opt & 3, if dir == Direction::Down { 1 } else { 2 }, "epb_flags: down inbound, up outbound");
        assert_eq!(data[2], dir.bit() as u8);
        match &record.body {
            Body::Request(r) => {
                assert_eq!(data[3], kind::REQUEST);
                assert_eq!(caplen, PSEUDO_HEADER_LEN + if r.is_4dw() { 16 } else { 12 });
                assert_eq!(&data[PSEUDO_HEADER_LEN..], &pcapng::tlp_header(record).unwrap()[..]);
            }
            Body::Completion(c) => {
                assert_eq!(data[3], kind::COMPLETION);
                assert_eq!(u32_at(data, 4) & flags::MATCHED != 0, c.latency.is_some());
                assert_eq!(u32_at(data, 24), c.latency.unwrap_or(0));
                assert_eq!(data[37], c.split_index);
            }
            Body::Timeout(t) => {
                assert_eq!((data[3], caplen), (kind::TIMEOUT, PSEUDO_HEADER_LEN), "no TLP bytes");
                assert_eq!(u32_at(data, 24), t.waited);
            }
            _ => unreachable!(),
        }
    }
    // Sequence 9..=11 lost: the record after the gap says 3.
    let lost: Vec<u32> = blocks[2..blocks.len() - 1].iter().map(|b| u32_at(&b.body[20..], 12)).collect();
    assert_eq!(lost.iter().sum::<u32>(), 3);
    assert_eq!(lost[records.iter().position(|r| r.sequence == 12).unwrap()], 3);

    let isb = blocks.last().unwrap();
    assert_eq!(isb.block_type, 5);
    let opts = options(&isb.body, 12);
    let u64_opt = |code: u16| opts.iter().find(|(c, _)| *c == code).map(|(_, v)| u64_at(v, 0));
    assert_eq!(u64_opt(4), Some(footer.records_created), "isb_ifrecv");
    assert_eq!(u64_opt(5), Some(3), "isb_ifdrop = records lost");
    assert_eq!(u64_opt(8), Some(records.len() as u64), "isb_usrdeliv = records in the file");
    assert!(text(&opts, 1)[0].contains(&format!("next sequence {next}")));
}

#[test]
fn payload_msi_orphans_and_the_trigger_become_packets() {
    let mut w = build::mem_write(0, Direction::Up, 1000, 0x0100, 0, 0x4000_0000, 8);
    if let Body::Request(r) = &mut w.body {
        r.timing.duration = 3;
    }
    let chunk = |seq: u32, first_dw: u8, count: u8, last: bool, fill: u32| Record {
        sequence: seq,
        body: Body::Payload(PayloadChunk { direction: Direction::Up, first_dw, count, last, dws: [fill; 6] }),
    };
    let msi = Record { sequence: 3, body: Body::Msi(Msi { timestamp: 1100, vector: 0, sources: 1 << 3, wait_cycles: 7 }) };
    // seq 4 (a TLP record) lost: its payload record at seq 5 is an orphan.
    let records = vec![w, chunk(1, 0, 6, false, 0x0403_0201), chunk(2, 6, 2, true, 0xa5a5_a5a5), msi, chunk(5, 0, 1, true, 0x1122_3344)];
    let footer = Footer { records_created: 6, records_lost: 1, trigger_sequence: Some(3) };
    let file = convert(common::trace_bytes(&records, Some((6, footer))));
    let blocks = blocks(&file);
    let epbs: Vec<&Block> = blocks.iter().filter(|b| b.block_type == 6).collect();
    assert_eq!(epbs.len(), entries(&records).len());
    assert_eq!(epbs.len(), 3, "the write with its payload, the MSI, the orphan");
    let data = |b: &Block| b.body[20..20 + u32_at(&b.body, 12) as usize].to_vec();
    let write = data(epbs[0]);
    assert_eq!(u16_at(&write, 38), 32, "payload captured");
    assert_eq!(u32_at(&write, 40), 32, "TLP payload: Length 8 DWs");
    assert_eq!(write[44], 2, "payload records");
    assert!(u32_at(&write, 4) & flags::PAYLOAD_COMPLETE != 0);
    let payload = &write[PSEUDO_HEADER_LEN + 12..];
    assert_eq!(&payload[..4], &[1, 2, 3, 4], "wire order: w1's bytes little-endian first");
    assert_eq!(payload.len(), 32);
    assert_eq!(&payload[24..], &[0xa5; 8]);
    let m = data(epbs[1]);
    assert_eq!((m[2], m[3]), (1, kind::MSI));
    assert_eq!(&m[PSEUDO_HEADER_LEN..], &[0, 0, 0, 0, 8, 0, 0, 0, 7, 0, 0, 0], "vector, sources, wait");
    assert!(u32_at(&m, 4) & flags::TRIGGER != 0, "the trigger record");
    let opts = options(&epbs[1].body, 20 + m.len().next_multiple_of(4));
    assert!(text(&opts, 1)[0].contains("trigger"), "trigger as a packet comment");
    let o = data(epbs[2]);
    assert_eq!(o[3], kind::ORPHAN_PAYLOAD);
    assert_eq!(u32_at(&o, 12), 1, "one record lost before it");
    assert_eq!(&o[PSEUDO_HEADER_LEN..], &[0x44, 0x33, 0x22, 0x11]);
    let opts = options(&epbs[2].body, 20 + o.len().next_multiple_of(4));
    assert!(text(&opts, 1)[0].contains("lost"), "{opts:?}");
}

#[test]
fn a_trace_without_footer_says_so_in_the_statistics() {
    let records = common::scenario();
    let file = convert(common::trace_bytes(&records, None));
    let isb = blocks(&file).pop().unwrap();
    assert_eq!(isb.block_type, 5);
    let opts = options(&isb.body, 12);
    assert!(text(&opts, 1)[0].contains("did not end cleanly"));
    assert!(opts.iter().all(|(c, _)| *c != 5), "no isb_ifdrop when the spy's counter is unknown");
}

#[test]
fn a_write_error_is_reported_with_what_was_being_written() {
    struct Full;
    impl std::io::Write for Full {
        fn write(&mut self, _: &[u8]) -> std::io::Result<usize> {
            Err(std::io::Error::new(std::io::ErrorKind::StorageFull, "disk full"))
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let e = pcapng::trace_to_pcapng(TraceReader::from_bytes(common::scenario_bytes()).unwrap(), Full).unwrap_err();
    assert!(e.to_string().contains("writing pcapng") && e.to_string().contains("disk full"), "{e}");
}
