//! pcapng export, for Wireshark and tshark (with the dissector `wireshark/tlpx.lua`).
//!
//! The layout is specified in traces/FORMAT.md, "pcapng export"; in short:
//!
//! ```text
//! SHB  byte-order magic, version 1.0; shb_comment: card time, clock, time mode; shb_userappl
//! IDB  link type LINKTYPE_USER15 (162), snaplen 0, if_tsresol 9 (ns), if_name, if_description
//!      (card clock Hz, time mode, card time), if_hardware (card: map hash, width)
//! EPB  one per entry (a TLP with its payload, a completion timeout, an MSI, an orphan payload
//!      record), in file order: timestamp in ns of card time, epb_flags direction (down =
//!      inbound to the card, up = outbound), opt_comment on the trigger record;
//!      data = pseudo-header (PSEUDO_HEADER_LEN bytes, little-endian) + TLP header as on the
//!      wire (3 or 4 DWs, big-endian, rebuilt from the record) + captured payload
//! ISB  the footer: isb_ifrecv = records created, isb_ifdrop = records lost, isb_usrdeliv =
//!      records in the file, isb_starttime / isb_endtime, comment with the next sequence
//! ```
//!
//! One interface for both directions, with a direction flag per packet: the spy numbers both
//! directions in one sequence and cannot tell a lost record's direction, so its loss counters
//! (the ISB) belong to one interface, as they do in the trace's footer.
//!
//! Every block is written little-endian (the SHB's byte-order magic says so); readers of any
//! byte order handle it.

use std::io::{Read, Seek, Write};

use crate::entry::{EntryBuilder, EntryInfo};
use crate::error::TraceError;
use crate::file::TraceReader;
use crate::header::Header;
use crate::record::{Body, Record};

/// LINKTYPE_USER15: the last of the sixteen link types tcpdump.org reserves for private use
/// (147..162). The last, because tools and sites that use one for their own experiments
/// usually start at USER0; a file of ours opened where USER0 means something else is then less
/// likely to be misread. PCIe TLPs have a registered LINKTYPE_PCI_EXP (125) with no defined
/// layout yet; the bytes after our pseudo-header are the TLP exactly as on the wire, so a
/// later move to it (or to a layout defined for it) drops or maps the pseudo-header only.
pub const LINKTYPE: u16 = 162;

/// Version of the per-packet pseudo-header (byte 0 of every packet).
pub const PSEUDO_HEADER_VERSION: u8 = 1;
/// Bytes of the pseudo-header (byte 1 of every packet says so, so that a later version can
/// grow it and an older dissector still finds the TLP).
pub const PSEUDO_HEADER_LEN: usize = 48;

/// `kind` byte of the pseudo-header.
pub mod kind {
    /// A request TLP (memory, I/O, configuration, message, atomic).
    pub const REQUEST: u8 = 0;
    /// A completion TLP.
    pub const COMPLETION: u8 = 1;
    /// A read the spy saw got no (last) completion in time: no TLP bytes follow.
    pub const TIMEOUT: u8 = 2;
    /// An MSI the card handed to its hard IP: the MSI body follows (vector, sources, wait).
    pub const MSI: u8 = 3;
    /// Payload whose TLP record was lost: only payload bytes follow.
    pub const ORPHAN_PAYLOAD: u8 = 4;
}

/// `flags` bits of the pseudo-header.
pub mod flags {
    /// A completion the spy matched to a read it saw (latency valid).
    pub const MATCHED: u32 = 1 << 0;
    /// The last completion of its read.
    pub const LAST: u32 = 1 << 1;
    /// The spy's own DMA traffic.
    pub const OWN: u32 = 1 << 2;
    /// A TLP all of whose payload records arrived (see [`crate::entry::Entry::payload_complete`]);
    /// never set for events.
    pub const PAYLOAD_COMPLETE: u32 = 1 << 3;
    /// This record matched the trigger (the footer's trigger sequence).
    pub const TRIGGER: u32 = 1 << 4;
    /// Poisoned (EP), also in the TLP header.
    pub const POISONED: u32 = 1 << 5;
}

// Block types and option codes (pcapng, draft-ietf-opsawg-pcapng).
const SHB: u32 = 0x0A0D_0D0A;
const IDB: u32 = 0x0000_0001;
const ISB: u32 = 0x0000_0005;
const EPB: u32 = 0x0000_0006;
const BYTE_ORDER_MAGIC: u32 = 0x1A2B_3C4D;
const OPT_ENDOFOPT: u16 = 0;
const OPT_COMMENT: u16 = 1;
const SHB_HARDWARE: u16 = 2;
const SHB_USERAPPL: u16 = 4;
const IF_NAME: u16 = 2;
const IF_DESCRIPTION: u16 = 3;
const IF_TSRESOL: u16 = 9;
const IF_HARDWARE: u16 = 15;
const EPB_FLAGS: u16 = 2;
const ISB_STARTTIME: u16 = 2;
const ISB_ENDTIME: u16 = 3;
const ISB_IFRECV: u16 = 4;
const ISB_IFDROP: u16 = 5;
const ISB_USRDELIV: u16 = 8;
/// epb_flags direction (bits 1:0): inbound to / outbound from the capture point, the card.
const INBOUND: u32 = 1;
const OUTBOUND: u32 = 2;

/// Options as bytes: code, length, value padded to 32 bits, then opt_endofopt.
#[derive(Default)]
struct Options(Vec<u8>);

impl Options {
    fn add(&mut self, code: u16, value: &[u8]) -> &mut Self {
        self.0.extend(code.to_le_bytes());
        self.0.extend((value.len() as u16).to_le_bytes());
        self.0.extend(value);
        self.0.resize(self.0.len().next_multiple_of(4), 0);
        self
    }

    fn text(&mut self, code: u16, value: &str) -> &mut Self {
        // An option holds at most 65535 bytes; ours are short, but cut safely at a char.
        let mut end = value.len().min(60_000);
        while !value.is_char_boundary(end) {
            end -= 1;
        }
        self.add(code, &value.as_bytes()[..end])
    }

    fn finish(mut self) -> Vec<u8> {
        if !self.0.is_empty() {
            self.0.extend(OPT_ENDOFOPT.to_le_bytes());
            self.0.extend(0u16.to_le_bytes());
        }
        self.0
    }
}

/// One block: type, total length, body (padded to 32 bits), total length again.
fn block(block_type: u32, body: &[u8]) -> Vec<u8> {
    let padded = body.len().next_multiple_of(4);
    let total = (12 + padded) as u32;
    let mut b = Vec::with_capacity(total as usize);
    b.extend(block_type.to_le_bytes());
    b.extend(total.to_le_bytes());
    b.extend(body);
    b.resize(8 + padded, 0);
    b.extend(total.to_le_bytes());
    b
}

/// Card cycles in ns of card time (rounded down), the unit of if_tsresol 9.
fn cycles_to_ns(cycles: u64, clock_hz: u64) -> u64 {
    u64::try_from(u128::from(cycles) * 1_000_000_000 / u128::from(clock_hz.max(1))).unwrap_or(u64::MAX)
}

fn split_ts(ns: u64) -> [u8; 8] {
    let mut b = [0u8; 8];
    b[..4].copy_from_slice(&((ns >> 32) as u32).to_le_bytes());
    b[4..].copy_from_slice(&(ns as u32).to_le_bytes());
    b
}

/// The TLP header of a request or completion record, rebuilt in wire order (PCIe Base spec,
/// 2.2.1 and 2.2.9: 3 or 4 DWs, each big-endian). What a record does not keep is written as
/// 0: TD (digest), TH, LN, Attr[2] (ID-based ordering), AT, the tag's extra bits T8/T9, a
/// processing hint (PH, the address's bits 1:0), the completion's reserved bit, and for 4DW
/// messages bits 1:0 of DW3. Everything else is exact.
pub fn tlp_header(record: &Record) -> Option<Vec<u8>> {
    let (fmt, tlp_type, tc, attr, ep, length) = match &record.body {
        Body::Request(r) => (r.fmt, r.tlp_type, r.tc, r.attr, r.ep, r.length_dw),
        Body::Completion(c) => (c.fmt, c.tlp_type, c.tc, c.attr, c.ep, c.length_dw),
        _ => return None,
    };
    let length_field = u32::from(length) & 0x3FF; // 1024 DWs is 0 on the wire
    let dw0 = u32::from(fmt & 7) << 29
        | u32::from(tlp_type & 0x1F) << 24
        | u32::from(tc & 7) << 20
        | u32::from(ep) << 14
        | u32::from(attr & 3) << 12
        | length_field;
    let mut dws = vec![dw0];
    match &record.body {
        Body::Request(r) => {
            dws.push(
                u32::from(r.requester_id) << 16 | u32::from(r.tag) << 8 | u32::from(r.last_be & 0xF) << 4 | u32::from(r.first_be & 0xF),
            );
            if r.is_4dw() {
                dws.push((r.address >> 32) as u32);
            }
            dws.push(r.address as u32 & !3);
        }
        Body::Completion(c) => {
            dws.push(
                u32::from(c.completer_id) << 16 | c.status.bits() << 13 | u32::from(c.bcm) << 12 | u32::from(c.byte_count) & 0xFFF, // 4096 bytes is 0 on the wire
            );
            dws.push(u32::from(c.requester_id) << 16 | u32::from(c.tag) << 8 | u32::from(c.lower_address & 0x7F));
        }
        _ => {}
    }
    Some(dws.iter().flat_map(|d| d.to_be_bytes()).collect())
}

/// The pseudo-header of an entry (traces/FORMAT.md, "pcapng export").
pub fn pseudo_header(info: &EntryInfo, trigger_sequence: Option<u32>) -> [u8; PSEUDO_HEADER_LEN] {
    let record = &info.entry.record;
    let mut h = [0u8; PSEUDO_HEADER_LEN];
    let mut fl = 0u32;
    let (kind, latency, timing, requester, completer, split) = match &record.body {
        Body::Request(r) => {
            fl |= if r.own { flags::OWN } else { 0 } | if r.ep { flags::POISONED } else { 0 };
            (kind::REQUEST, 0, Some(r.timing), r.requester_id, 0, 0)
        }
        Body::Completion(c) => {
            fl |= if c.own { flags::OWN } else { 0 }
                | if c.ep { flags::POISONED } else { 0 }
                | if c.latency.is_some() { flags::MATCHED } else { 0 }
                | if c.last { flags::LAST } else { 0 };
            (kind::COMPLETION, c.latency.unwrap_or(0), Some(c.timing), c.requester_id, c.completer_id, c.split_index)
        }
        Body::Timeout(t) => {
            fl |= if t.own { flags::OWN } else { 0 };
            (kind::TIMEOUT, t.waited, None, t.requester_id, 0, 0)
        }
        Body::Msi(_) => (kind::MSI, 0, None, 0, 0, 0),
        Body::Payload(_) | Body::Footer(_) => (kind::ORPHAN_PAYLOAD, 0, None, 0, 0, 0),
    };
    // Only a TLP has payload to be complete or not (an MSI or a timeout has none).
    if info.entry.payload_complete && matches!(record.body, Body::Request(_) | Body::Completion(_)) {
        fl |= flags::PAYLOAD_COMPLETE;
    }
    if trigger_sequence == Some(record.sequence) {
        fl |= flags::TRIGGER;
    }
    let timing = timing.unwrap_or_default();
    let tlp_payload_bytes = match &record.body {
        Body::Request(r) if r.has_data() => u32::from(r.length_dw) * 4,
        Body::Completion(c) if c.with_data() => u32::from(c.length_dw) * 4,
        _ => 0,
    };
    h[0] = PSEUDO_HEADER_VERSION;
    h[1] = PSEUDO_HEADER_LEN as u8;
    h[2] = record.direction().map_or(0, |d| d.bit() as u8);
    h[3] = kind;
    h[4..8].copy_from_slice(&fl.to_le_bytes());
    h[8..12].copy_from_slice(&record.sequence.to_le_bytes());
    h[12..16].copy_from_slice(&u32::try_from(info.lost_before).unwrap_or(u32::MAX).to_le_bytes());
    h[16..24].copy_from_slice(&record.timestamp().unwrap_or(0).to_le_bytes());
    h[24..28].copy_from_slice(&latency.to_le_bytes());
    h[28..30].copy_from_slice(&timing.duration.to_le_bytes());
    h[30] = timing.wait_cycles;
    h[31] = timing.gap_cycles;
    h[32..34].copy_from_slice(&requester.to_le_bytes());
    h[34..36].copy_from_slice(&completer.to_le_bytes());
    h[36] = record.tag().unwrap_or(0);
    h[37] = split;
    h[38..40].copy_from_slice(&(info.entry.payload.len().min(usize::from(u16::MAX)) as u16).to_le_bytes());
    h[40..44].copy_from_slice(&tlp_payload_bytes.to_le_bytes());
    h[44] = info.payload_records;
    h
}

/// The bytes of an entry's packet: pseudo-header, then the TLP header and captured payload (a
/// TLP), the MSI body (vector u8, 3 zero bytes, sources u32, wait cycles u32, little-endian),
/// or the orphan's payload bytes.
pub fn packet(info: &EntryInfo, trigger_sequence: Option<u32>) -> Vec<u8> {
    let mut p = pseudo_header(info, trigger_sequence).to_vec();
    match &info.entry.record.body {
        Body::Request(_) | Body::Completion(_) => {
            p.extend(tlp_header(&info.entry.record).unwrap_or_default());
            p.extend(&info.entry.payload);
        }
        Body::Msi(m) => {
            p.extend([m.vector, 0, 0, 0]);
            p.extend(m.sources.to_le_bytes());
            p.extend(m.wait_cycles.to_le_bytes());
        }
        Body::Payload(_) => p.extend(&info.entry.payload),
        Body::Timeout(_) | Body::Footer(_) => {}
    }
    p
}

/// What a pcapng file says about its trace, beyond the packets.
#[derive(Debug, Clone, Default)]
pub struct Description {
    pub clock_hz: u64,
    /// `virtual`, `live`, `hardware` or None (not recorded).
    pub time_mode: Option<String>,
    pub simulated: bool,
    /// `tlpx 0.1.0`.
    pub tool: String,
    /// Card, link and capture description for the section comment.
    pub card: String,
}

impl Description {
    pub fn from_header(header: &Header) -> Description {
        let mut card = Vec::new();
        if let Some(h) = &header.card.map_hash {
            card.push(format!("map {h}"));
        }
        if let Some(w) = header.card.data_width {
            card.push(format!("{w}-bit datapath"));
        }
        if let Some(a) = &header.card.pci_address {
            card.push(format!("at {a}"));
        }
        if let Some(l) = &header.link {
            card.push(format!("link gen{} x{}, MPS {}, MRRS {}", l.generation, l.lanes, l.mps, l.mrrs));
        }
        if header.simulated {
            card.push("simulated".into());
        }
        if !header.created_utc.is_empty() {
            card.push(format!("trace created {}", header.created_utc));
        }
        Description {
            clock_hz: header.card.clock_hz,
            time_mode: header.time_mode.clone(),
            simulated: header.simulated,
            tool: header.tool.clone(),
            card: card.join(", "),
        }
    }

    fn time_text(&self) -> String {
        format!(
            "timestamps are card time: the card's cycle counter at {} Hz, converted to ns (not wall-clock time; \
             Wireshark shows them as dates in 1970), time mode {}",
            self.clock_hz,
            self.time_mode.as_deref().unwrap_or("not recorded")
        )
    }
}

/// Writes pcapng blocks: [`PcapngWriter::new`] writes the section and interface, then one
/// packet per entry, then [`PcapngWriter::finish`] the statistics.
pub struct PcapngWriter<W: Write> {
    out: W,
    clock_hz: u64,
    trigger_sequence: Option<u32>,
    packets: u64,
    records: u64,
    first_ns: Option<u64>,
    last_ns: u64,
    trigger_written: bool,
}

impl<W: Write> PcapngWriter<W> {
    /// Writes the SHB and the IDB; `trigger_sequence` (the footer's) marks its record.
    pub fn new(mut out: W, desc: &Description, trigger_sequence: Option<u32>) -> std::io::Result<Self> {
        let mut shb = Vec::new();
        shb.extend(BYTE_ORDER_MAGIC.to_le_bytes());
        shb.extend(1u16.to_le_bytes()); // major
        shb.extend(0u16.to_le_bytes()); // minor
        shb.extend((-1i64).to_le_bytes()); // section length: not given
        let mut opts = Options::default();
        opts.text(
            OPT_COMMENT,
            &format!(
                "tlpx spy trace of the card's transaction layer (TLPs the card sent and received, MSIs it handed to its \
                 hard IP); {}. Packets: pseudo-header v{PSEUDO_HEADER_VERSION} then the TLP as on the wire \
                 (traces/FORMAT.md, dissector wireshark/tlpx.lua).",
                desc.time_text()
            ),
        );
        if !desc.card.is_empty() {
            opts.text(SHB_HARDWARE, &format!("tlpx card: {}", desc.card));
        }
        opts.text(SHB_USERAPPL, &format!("tlpx-trace {} (trace written by {})", env!("CARGO_PKG_VERSION"), desc.tool));
        shb.extend(opts.finish());
        out.write_all(&block(SHB, &shb))?;

        let mut idb = Vec::new();
        idb.extend(LINKTYPE.to_le_bytes());
        idb.extend(0u16.to_le_bytes());
        idb.extend(0u32.to_le_bytes()); // snaplen: no limit
        let mut opts = Options::default();
        opts.text(IF_NAME, "tlpx-spy");
        opts.text(
            IF_DESCRIPTION,
            &format!(
                "tlpx spy, both directions (epb_flags inbound = down, host to card; outbound = up, card to host); \
                 card clock {} Hz; time mode {}; card time",
                desc.clock_hz,
                desc.time_mode.as_deref().unwrap_or("not recorded")
            ),
        );
        opts.add(IF_TSRESOL, &[9]);
        if !desc.card.is_empty() {
            opts.text(IF_HARDWARE, &desc.card);
        }
        idb.extend(opts.finish());
        out.write_all(&block(IDB, &idb))?;
        Ok(PcapngWriter {
            out,
            clock_hz: desc.clock_hz,
            trigger_sequence,
            packets: 0,
            records: 0,
            first_ns: None,
            last_ns: 0,
            trigger_written: false,
        })
    }

    /// One entry as an EPB. An orphan payload record, which has no time, takes the time of
    /// the packet before it.
    pub fn write_entry(&mut self, info: &EntryInfo) -> std::io::Result<()> {
        let record = &info.entry.record;
        let ns = record.event_time().map_or(self.last_ns, |c| cycles_to_ns(c, self.clock_hz));
        self.first_ns.get_or_insert(ns);
        self.last_ns = self.last_ns.max(ns);
        let data = packet(info, self.trigger_sequence);
        let mut epb = Vec::with_capacity(data.len() + 64);
        epb.extend(0u32.to_le_bytes()); // interface 0
        epb.extend(split_ts(ns));
        epb.extend((data.len() as u32).to_le_bytes());
        epb.extend((data.len() as u32).to_le_bytes());
        epb.extend(&data);
        epb.resize(epb.len().next_multiple_of(4), 0);
        let mut opts = Options::default();
        let direction = match record.direction() {
            Some(crate::Direction::Down) => INBOUND,
            Some(crate::Direction::Up) => OUTBOUND,
            None => 0,
        };
        opts.add(EPB_FLAGS, &direction.to_le_bytes());
        if self.trigger_sequence == Some(record.sequence) {
            opts.text(OPT_COMMENT, &format!("trigger: this record (seq {}) matched the spy's trigger", record.sequence));
            self.trigger_written = true;
        }
        if info.entry.is_orphan() {
            opts.text(OPT_COMMENT, "payload of a TLP whose record was lost");
        }
        epb.extend(opts.finish());
        self.out.write_all(&block(EPB, &epb))?;
        self.packets += 1;
        self.records += 1 + u64::from(info.payload_records);
        Ok(())
    }

    /// Writes the ISB from the footer (when the capture ended cleanly) and flushes.
    pub fn finish(mut self, footer: Option<&Record>) -> std::io::Result<W> {
        let mut isb = Vec::new();
        isb.extend(0u32.to_le_bytes());
        isb.extend(split_ts(self.last_ns));
        let mut opts = Options::default();
        match footer {
            Some(Record { sequence, body: Body::Footer(ft) }) => {
                let mut comment = format!(
                    "spy footer: {} records created, {} lost (ring full), {} in the file as {} packets; next sequence {}",
                    ft.records_created, ft.records_lost, self.records, self.packets, sequence
                );
                if let Some(t) = ft.trigger_sequence {
                    comment.push_str(&format!(
                        "; triggered by seq {t}{}",
                        if self.trigger_written { "" } else { " (its record is not in the file: held or lost)" }
                    ));
                }
                opts.text(OPT_COMMENT, &comment);
                opts.add(ISB_STARTTIME, &split_ts(self.first_ns.unwrap_or(0)));
                opts.add(ISB_ENDTIME, &split_ts(self.last_ns));
                opts.add(ISB_IFRECV, &ft.records_created.to_le_bytes());
                opts.add(ISB_IFDROP, &ft.records_lost.to_le_bytes());
                opts.add(ISB_USRDELIV, &self.records.to_le_bytes());
            }
            _ => {
                opts.text(OPT_COMMENT, "no footer: the capture did not end cleanly; the spy's counters are unknown");
                opts.add(ISB_USRDELIV, &self.records.to_le_bytes());
            }
        }
        isb.extend(opts.finish());
        self.out.write_all(&block(ISB, &isb))?;
        self.out.flush()?;
        Ok(self.out)
    }

    /// Packets written so far.
    pub fn packets(&self) -> u64 {
        self.packets
    }
}

/// Writes `records` (file order, footer excluded) and the `footer` as pcapng to `out`;
/// returns the packets written.
pub fn write<W: Write>(out: W, header: &Header, records: &[Record], footer: Option<&Record>) -> std::io::Result<u64> {
    let trigger = match footer {
        Some(Record { body: Body::Footer(ft), .. }) => ft.trigger_sequence,
        _ => None,
    };
    let mut w = PcapngWriter::new(out, &Description::from_header(header), trigger)?;
    let mut b = EntryBuilder::new();
    for r in records.iter().filter(|r| !r.is_footer()) {
        if let Some(info) = b.push(*r) {
            w.write_entry(&info)?;
        }
    }
    if let Some(info) = b.finish(footer.map(|f| f.sequence)) {
        w.write_entry(&info)?;
    }
    let packets = w.packets();
    w.finish(footer)?;
    Ok(packets)
}

/// Converts a whole trace, streaming (constant memory); returns the packets written.
pub fn trace_to_pcapng<R: Read + Seek, W: Write>(reader: TraceReader<R>, out: W) -> Result<u64, TraceError> {
    let io = |e| TraceError::io(0, "writing pcapng", e);
    let footer = reader.footer_record().copied();
    let trigger = match footer {
        Some(Record { body: Body::Footer(ft), .. }) => ft.trigger_sequence,
        _ => None,
    };
    let mut w = PcapngWriter::new(out, &Description::from_header(reader.header()), trigger).map_err(io)?;
    let mut b = EntryBuilder::new();
    for record in reader {
        if let Some(info) = b.push(record?) {
            w.write_entry(&info).map_err(io)?;
        }
    }
    if let Some(info) = b.finish(footer.map(|f| f.sequence)) {
        w.write_entry(&info).map_err(io)?;
    }
    let packets = w.packets();
    w.finish(footer.as_ref()).map_err(io)?;
    Ok(packets)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::{build, Direction};

    #[test]
    fn blocks_are_padded_and_carry_their_length_twice() {
        let b = block(EPB, &[1, 2, 3, 4, 5]);
        assert_eq!(b.len(), 20);
        assert_eq!(&b[4..8], &20u32.to_le_bytes());
        assert_eq!(&b[16..20], &20u32.to_le_bytes());
        assert_eq!(&b[8..16], &[1, 2, 3, 4, 5, 0, 0, 0]);
    }

    #[test]
    fn options_pad_and_end() {
        let mut o = Options::default();
        o.text(OPT_COMMENT, "abcde");
        assert_eq!(o.finish(), vec![1, 0, 5, 0, b'a', b'b', b'c', b'd', b'e', 0, 0, 0, 0, 0, 0, 0]);
        assert!(Options::default().finish().is_empty(), "no options: no opt_endofopt");
    }

    #[test]
    fn tlp_headers_in_wire_order() {
        // MRd32, 1 DW, requester 0x0100, tag 0x85, first BE 0xF, address 0x4000_1004.
        let r = build::mem_read(0, Direction::Up, 0, 0x0100, 0x85, 0x4000_1004, 1);
        let Body::Request(mut q) = r.body else { unreachable!() };
        q.last_be = 0;
        let h = tlp_header(&Record { sequence: 0, body: Body::Request(q) }).expect("a request has a header");
        assert_eq!(h, [0x00, 0x00, 0x00, 0x01, 0x01, 0x00, 0x85, 0x0F, 0x40, 0x00, 0x10, 0x04]);
        // MWr64 of 1024 DWs: Length 0, 4 DWs, address high first.
        let w = build::mem_write(0, Direction::Up, 0, 0x0100, 0, 0x1_2345_6780, 1024);
        let h = tlp_header(&w).expect("a request has a header");
        assert_eq!(&h[..4], &[0x60, 0x00, 0x00, 0x00]);
        assert_eq!(&h[8..16], &[0x00, 0x00, 0x00, 0x01, 0x23, 0x45, 0x67, 0x80]);
        // CplD SC, completer 0x0100, byte count 4096 (0), requester 0x0000, tag 3, lower address 0x44.
        let c = build::completion(0, Direction::Down, 0, 0x0000, 3, 0x0100, 4096, 32, None, 0, true);
        let Body::Completion(mut cc) = c.body else { unreachable!() };
        cc.lower_address = 0x44;
        cc.status = crate::CplStatus::Ca;
        let h = tlp_header(&Record { sequence: 0, body: Body::Completion(cc) }).expect("a completion has a header");
        assert_eq!(h, [0x4A, 0x00, 0x00, 0x20, 0x01, 0x00, 0x80, 0x00, 0x00, 0x00, 0x03, 0x44]);
    }
}
