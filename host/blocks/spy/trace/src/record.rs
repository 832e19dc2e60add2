//! The typed view of a 32-byte record.
//!
//! Decoding is lenient about reserved bits (PCIe's rule: set to 0 by the sender, ignored
//! by the receiver) and strict about reserved kinds (fmt 7 with a type other than 1..=5, and
//! 3, the interrupt timer's sample, which never belongs in a spy trace), which the reader
//! rejects. `to_bytes(from_bytes(b)) == b` for every record whose
//! reserved bits are 0, which is every record the spy and [`crate::TraceWriter`] produce;
//! `from_bytes(to_bytes(r)) == r` for every record whose values fit their fields.

use std::fmt;

use crate::error::TraceError;
use crate::fields::{field as f, RawRecord, RECORD_SIZE};

/// Which way the TLP went on the link.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Direction {
    /// Host to card (received by the card).
    Down,
    /// Card to host (sent by the card).
    Up,
}

impl Direction {
    pub fn from_bit(bit: u32) -> Self {
        if bit & 1 == 0 {
            Direction::Down
        } else {
            Direction::Up
        }
    }

    pub fn bit(self) -> u32 {
        match self {
            Direction::Down => 0,
            Direction::Up => 1,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Direction::Down => "down",
            Direction::Up => "up",
        }
    }

    /// The opposite direction: the one of the request a completion answers.
    pub fn other(self) -> Direction {
        match self {
            Direction::Down => Direction::Up,
            Direction::Up => Direction::Down,
        }
    }
}

impl fmt::Display for Direction {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad(self.name())
    }
}

/// When a TLP was on the link and how it flowed, in card cycles.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Hash)]
pub struct Timing {
    /// Card cycle of the first beat.
    pub timestamp: u64,
    /// Cycles from first to last beat (0 for a one-beat TLP), saturating at 65535.
    pub duration: u16,
    /// Cycles with valid high and ready low (back-pressure), saturating at 255.
    pub wait_cycles: u8,
    /// Cycles with valid low inside the TLP (sender paused), saturating at 255.
    pub gap_cycles: u8,
}

/// The transaction a request TLP carries, from its Fmt and Type (PCIe Base spec, 2.2.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RequestKind {
    MRd32,
    MRd64,
    MWr32,
    MWr64,
    MRdLk,
    IORd,
    IOWr,
    CfgRd0,
    CfgWr0,
    CfgRd1,
    CfgWr1,
    Msg,
    MsgD,
    FetchAdd,
    Swap,
    Cas,
    /// Any other Fmt/Type combination (reserved, deprecated or a TLP prefix).
    Other,
}

impl RequestKind {
    pub fn from_fmt_type(fmt: u8, tlp_type: u8) -> Self {
        use RequestKind::*;
        match (fmt, tlp_type) {
            (0, 0b00000) => MRd32,
            (1, 0b00000) => MRd64,
            (0 | 1, 0b00001) => MRdLk,
            (2, 0b00000) => MWr32,
            (3, 0b00000) => MWr64,
            (0, 0b00010) => IORd,
            (2, 0b00010) => IOWr,
            (0, 0b00100) => CfgRd0,
            (2, 0b00100) => CfgWr0,
            (0, 0b00101) => CfgRd1,
            (2, 0b00101) => CfgWr1,
            (1, t) if t & 0b11000 == 0b10000 => Msg,
            (3, t) if t & 0b11000 == 0b10000 => MsgD,
            (2 | 3, 0b01100) => FetchAdd,
            (2 | 3, 0b01101) => Swap,
            (2 | 3, 0b01110) => Cas,
            _ => Other,
        }
    }

    pub fn name(self) -> &'static str {
        use RequestKind::*;
        match self {
            MRd32 => "MRd32",
            MRd64 => "MRd64",
            MWr32 => "MWr32",
            MWr64 => "MWr64",
            MRdLk => "MRdLk",
            IORd => "IORd",
            IOWr => "IOWr",
            CfgRd0 => "CfgRd0",
            CfgWr0 => "CfgWr0",
            CfgRd1 => "CfgRd1",
            CfgWr1 => "CfgWr1",
            Msg => "Msg",
            MsgD => "MsgD",
            FetchAdd => "FetchAdd",
            Swap => "Swap",
            Cas => "CAS",
            Other => "Other",
        }
    }

    /// A read that the completer answers with data (the spy matches its completions).
    pub fn is_non_posted_read(self) -> bool {
        use RequestKind::*;
        matches!(self, MRd32 | MRd64 | MRdLk | IORd | CfgRd0 | CfgRd1 | FetchAdd | Swap | Cas)
    }
}

impl fmt::Display for RequestKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad(self.name())
    }
}

/// Completion Status (PCIe Base spec, 2.2.9).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CplStatus {
    /// Successful Completion.
    Sc,
    /// Unsupported Request.
    Ur,
    /// Configuration Request Retry Status.
    Crs,
    /// Completer Abort.
    Ca,
    /// A reserved status value (3, 5, 6, 7), recorded as seen on the link.
    Reserved(u8),
}

impl CplStatus {
    pub fn from_bits(bits: u32) -> Self {
        match bits & 7 {
            0 => CplStatus::Sc,
            1 => CplStatus::Ur,
            2 => CplStatus::Crs,
            4 => CplStatus::Ca,
            other => CplStatus::Reserved(other as u8),
        }
    }

    pub fn bits(self) -> u32 {
        match self {
            CplStatus::Sc => 0,
            CplStatus::Ur => 1,
            CplStatus::Crs => 2,
            CplStatus::Ca => 4,
            CplStatus::Reserved(v) => u32::from(v) & 7,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            CplStatus::Sc => "SC",
            CplStatus::Ur => "UR",
            CplStatus::Crs => "CRS",
            CplStatus::Ca => "CA",
            CplStatus::Reserved(3) => "rsv3",
            CplStatus::Reserved(5) => "rsv5",
            CplStatus::Reserved(6) => "rsv6",
            CplStatus::Reserved(_) => "rsv7",
        }
    }
}

impl fmt::Display for CplStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad(self.name())
    }
}

/// A request TLP: memory, I/O, configuration, message or atomic.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Request {
    pub direction: Direction,
    pub timing: Timing,
    /// TLP Fmt field, 0..=6.
    pub fmt: u8,
    /// TLP Type field, 5 bits.
    pub tlp_type: u8,
    pub requester_id: u16,
    pub tag: u8,
    pub first_be: u8,
    pub last_be: u8,
    /// Address bits 63:0 (bits 63:32 are 0 for 3DW headers).
    pub address: u64,
    /// Length in DWs, 1..=1024.
    pub length_dw: u16,
    /// Bit 0 No Snoop, bit 1 Relaxed Ordering.
    pub attr: u8,
    pub tc: u8,
    /// Poisoned.
    pub ep: bool,
    /// The spy's own DMA traffic.
    pub own: bool,
}

impl Request {
    pub fn kind(&self) -> RequestKind {
        RequestKind::from_fmt_type(self.fmt, self.tlp_type)
    }

    /// The TLP carries a data payload (Fmt bit 1).
    pub fn has_data(&self) -> bool {
        self.fmt & 0b010 != 0
    }

    /// The header is 4 DWs (64-bit address).
    pub fn is_4dw(&self) -> bool {
        self.fmt & 0b001 != 0
    }

    /// Bytes of payload the request carries: the enabled bytes for writes (byte enables
    /// taken into account), the whole payload for messages and atomics, 0 without data.
    pub fn payload_bytes(&self) -> u32 {
        if !self.has_data() {
            return 0;
        }
        let len = u32::from(self.length_dw.clamp(1, 1024));
        match self.kind() {
            RequestKind::MWr32 | RequestKind::MWr64 | RequestKind::IOWr | RequestKind::CfgWr0 | RequestKind::CfgWr1 => {
                let first = (self.first_be & 0xf).count_ones();
                if len == 1 {
                    first
                } else {
                    first + (len - 2) * 4 + (self.last_be & 0xf).count_ones()
                }
            }
            _ => len * 4,
        }
    }

    /// Bytes a read asks for (byte enables taken into account), 0 for other requests.
    pub fn read_bytes(&self) -> u32 {
        if self.has_data() || !self.kind().is_non_posted_read() {
            return 0;
        }
        let len = u32::from(self.length_dw.clamp(1, 1024));
        let first = (self.first_be & 0xf).count_ones();
        if len == 1 {
            first
        } else {
            first + (len - 2) * 4 + (self.last_be & 0xf).count_ones()
        }
    }
}

/// A completion TLP (Cpl, CplD, CplLk, CplDLk).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Completion {
    pub direction: Direction,
    pub timing: Timing,
    /// TLP Fmt field: 0 without data, 2 with data (others are malformed but recorded).
    pub fmt: u8,
    /// TLP Type field: 0b01010, or 0b01011 for locked completions.
    pub tlp_type: u8,
    pub requester_id: u16,
    pub tag: u8,
    /// Lower Address, 7 bits.
    pub lower_address: u8,
    /// Byte Count Modified.
    pub bcm: bool,
    pub completer_id: u16,
    pub status: CplStatus,
    /// Remaining byte count including this completion's, 1..=4096.
    pub byte_count: u16,
    /// Length in DWs, 1..=1024 (meaningful with data).
    pub length_dw: u16,
    /// Cycles from the read request's first beat to this completion's first beat, when the
    /// spy matched the completion to a read it saw.
    pub latency: Option<u32>,
    /// 1-based index of this completion among its read's (15 = 15 or more); 0 if unmatched.
    pub split_index: u8,
    /// The last completion of its read.
    pub last: bool,
    pub attr: u8,
    pub tc: u8,
    pub ep: bool,
    pub own: bool,
}

impl Completion {
    pub fn with_data(&self) -> bool {
        self.fmt & 0b010 != 0
    }

    pub fn locked(&self) -> bool {
        self.tlp_type & 1 != 0
    }

    pub fn name(&self) -> &'static str {
        match (self.with_data(), self.locked()) {
            (false, false) => "Cpl",
            (true, false) => "CplD",
            (false, true) => "CplLk",
            (true, true) => "CplDLk",
        }
    }

    /// Useful payload bytes: the data this completion returns for its read.
    pub fn payload_bytes(&self) -> u32 {
        if !self.with_data() {
            return 0;
        }
        let carried = (u32::from(self.length_dw.clamp(1, 1024)) * 4).saturating_sub(u32::from(self.lower_address & 3));
        carried.min(u32::from(self.byte_count.clamp(1, 4096)))
    }
}

/// A read the spy saw got no (last) completion within the spy's timeout.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Timeout {
    /// Direction of the read.
    pub direction: Direction,
    /// The read was the spy's own DMA traffic.
    pub own: bool,
    pub requester_id: u16,
    pub tag: u8,
    /// Card cycle of the read's first beat.
    pub timestamp: u64,
    /// Cycles waited before the spy gave up.
    pub waited: u32,
}

/// The file's last record, written by the host when the capture ended cleanly.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Hash)]
pub struct Footer {
    /// Records the spy created (after filters) during the capture.
    pub records_created: u64,
    /// Records the spy could not deliver (ring full).
    pub records_lost: u64,
    /// Sequence of the record that matched the trigger, when it matched (record format 2;
    /// None in version 1 footers: no trigger information).
    pub trigger_sequence: Option<u32>,
}

/// An MSI the card handed to its PCIe hard IP (record format 2, fmt 7 type 4). On hardware
/// the hard IP turns it into a memory write the PHY stream never carries, so the spy records
/// the hand-over itself. Always direction up.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Msi {
    /// Card cycle the hard IP accepted it (valid and ready).
    pub timestamp: u64,
    /// The vector field as sent (LitePCIe's MSI block sends 0).
    pub vector: u8,
    /// Bit per MSI source pending when it was sent (the gateware's MSI_SOURCES order).
    pub sources: u32,
    /// Cycles the hard IP held it off (valid high before ready), saturating.
    pub wait_cycles: u32,
}

/// Up to six payload DWs of the TLP record before it (record format 2, fmt 7 type 5).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct PayloadChunk {
    /// The TLP's direction.
    pub direction: Direction,
    /// Index in the TLP's payload of the first DW carried (0, 6, 12).
    pub first_dw: u8,
    /// DWs carried, 1..=6 (the rest of `dws` is 0).
    pub count: u8,
    /// The last payload record of its TLP.
    pub last: bool,
    /// The payload DWs; each holds 4 payload bytes in wire order as a little-endian word.
    pub dws: [u32; 6],
}

impl PayloadChunk {
    /// The payload bytes this chunk carries, in wire (address) order.
    pub fn bytes(&self) -> Vec<u8> {
        self.dws.iter().take(usize::from(self.count.min(6))).flat_map(|d| d.to_le_bytes()).collect()
    }
}

/// What a record describes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Body {
    Request(Request),
    Completion(Completion),
    Timeout(Timeout),
    Footer(Footer),
    /// Record format 2.
    Msi(Msi),
    /// Record format 2.
    Payload(PayloadChunk),
}

/// One decoded 32-byte record.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Record {
    /// The spy's record sequence number; for the footer, the sequence the spy's next
    /// record would have carried.
    pub sequence: u32,
    pub body: Body,
}

const FMT_EVENT: u32 = 7;
const EVENT_TIMEOUT: u32 = 1;
const EVENT_FOOTER: u32 = 2;
// Type 3 is the interrupt timer's sample record: same family, never in a spy trace (reserved).
const EVENT_MSI: u32 = 4;
const EVENT_PAYLOAD: u32 = 5;

/// The payload DW fields of a payload record, in payload order.
const PAYLOAD_DWS: [crate::fields::FieldSpec; 6] =
    [f::PAYLOAD_DW0, f::PAYLOAD_DW1, f::PAYLOAD_DW2, f::PAYLOAD_DW3, f::PAYLOAD_DW4, f::PAYLOAD_DW5];

fn length_from_field(v: u32) -> u16 {
    if v == 0 {
        1024
    } else {
        v as u16
    }
}

fn byte_count_from_field(v: u32) -> u16 {
    if v == 0 {
        4096
    } else {
        v as u16
    }
}

impl Record {
    /// Decodes a record; an error offset is relative to the record's first byte.
    pub fn from_bytes(bytes: &[u8; RECORD_SIZE]) -> Result<Record, TraceError> {
        Record::from_bytes_at(bytes, 0)
    }

    /// Decodes a record found at file offset `offset` (used in error messages).
    pub fn from_bytes_at(bytes: &[u8; RECORD_SIZE], offset: u64) -> Result<Record, TraceError> {
        Record::from_raw_at(&RawRecord::from_bytes(bytes), offset)
    }

    pub fn from_raw_at(raw: &RawRecord, offset: u64) -> Result<Record, TraceError> {
        let sequence = raw.get(&f::SEQUENCE);
        let fmt = raw.get(&f::FMT);
        let tlp_type = raw.get(&f::TYPE);
        let direction = Direction::from_bit(raw.get(&f::DIRECTION));
        let own = raw.get(&f::OWN) != 0;
        let timestamp = raw.get64(&f::TIMESTAMP_LO, &f::TIMESTAMP_HI);
        let body = if fmt == FMT_EVENT {
            match tlp_type {
                EVENT_TIMEOUT => Body::Timeout(Timeout {
                    direction,
                    own,
                    requester_id: raw.get(&f::REQUESTER_ID) as u16,
                    tag: raw.get(&f::TAG) as u8,
                    timestamp,
                    waited: raw.get(&f::LATENCY),
                }),
                EVENT_FOOTER => Body::Footer(Footer {
                    records_created: timestamp,
                    records_lost: raw.get64(&f::ADDRESS_LO, &f::ADDRESS_HI),
                    trigger_sequence: (raw.get(&f::TRIGGERED) != 0).then(|| raw.get(&f::TRIGGER_SEQUENCE)),
                }),
                EVENT_MSI => Body::Msi(Msi {
                    timestamp,
                    vector: raw.get(&f::VECTOR) as u8,
                    sources: raw.get(&f::SOURCES),
                    wait_cycles: raw.get(&f::MSI_WAIT_CYCLES),
                }),
                EVENT_PAYLOAD => {
                    let mut dws = [0u32; 6];
                    for (dw, field) in dws.iter_mut().zip(&PAYLOAD_DWS) {
                        *dw = raw.get(field);
                    }
                    Body::Payload(PayloadChunk {
                        direction,
                        first_dw: raw.get(&f::FIRST_DW) as u8,
                        count: raw.get(&f::COUNT) as u8,
                        last: raw.get(&f::FINAL) != 0,
                        dws,
                    })
                }
                other => return Err(TraceError::ReservedKind { offset, tlp_type: other as u8 }),
            }
        } else {
            let timing = Timing {
                timestamp,
                duration: raw.get(&f::DURATION) as u16,
                wait_cycles: raw.get(&f::WAIT_CYCLES) as u8,
                gap_cycles: raw.get(&f::GAP_CYCLES) as u8,
            };
            let length_dw = length_from_field(raw.get(&f::LENGTH));
            let attr = raw.get(&f::ATTR) as u8;
            let tc = raw.get(&f::TC) as u8;
            let ep = raw.get(&f::EP) != 0;
            let requester_id = raw.get(&f::REQUESTER_ID) as u16;
            let tag = raw.get(&f::TAG) as u8;
            if tlp_type & 0b11110 == 0b01010 {
                let matched = raw.get(&f::MATCHED) != 0;
                Body::Completion(Completion {
                    direction,
                    timing,
                    fmt: fmt as u8,
                    tlp_type: tlp_type as u8,
                    requester_id,
                    tag,
                    lower_address: raw.get(&f::LOWER_ADDRESS) as u8,
                    bcm: raw.get(&f::BCM) != 0,
                    completer_id: raw.get(&f::COMPLETER_ID) as u16,
                    status: CplStatus::from_bits(raw.get(&f::STATUS)),
                    byte_count: byte_count_from_field(raw.get(&f::BYTE_COUNT)),
                    length_dw,
                    latency: matched.then(|| raw.get(&f::LATENCY)),
                    split_index: raw.get(&f::SPLIT_INDEX) as u8,
                    last: raw.get(&f::LAST) != 0,
                    attr,
                    tc,
                    ep,
                    own,
                })
            } else {
                Body::Request(Request {
                    direction,
                    timing,
                    fmt: fmt as u8,
                    tlp_type: tlp_type as u8,
                    requester_id,
                    tag,
                    first_be: raw.get(&f::FIRST_BE) as u8,
                    last_be: raw.get(&f::LAST_BE) as u8,
                    address: raw.get64(&f::ADDRESS_LO, &f::ADDRESS_HI),
                    length_dw,
                    attr,
                    tc,
                    ep,
                    own,
                })
            }
        };
        Ok(Record { sequence, body })
    }

    /// Encodes the record. Values wider than their field are truncated (a length of 1024
    /// DWs and a byte count of 4096 encode as 0, as on the link); reserved bits are 0.
    pub fn to_raw(&self) -> RawRecord {
        let mut raw = RawRecord::default();
        raw.set(&f::SEQUENCE, self.sequence);
        match &self.body {
            Body::Request(r) => {
                set_common(&mut raw, r.direction, &r.timing, r.fmt, r.tlp_type, r.length_dw, r.attr, r.tc, r.ep, r.own);
                raw.set(&f::REQUESTER_ID, u32::from(r.requester_id));
                raw.set(&f::TAG, u32::from(r.tag));
                raw.set(&f::FIRST_BE, u32::from(r.first_be));
                raw.set(&f::LAST_BE, u32::from(r.last_be));
                raw.set64(&f::ADDRESS_LO, &f::ADDRESS_HI, r.address);
            }
            Body::Completion(c) => {
                set_common(&mut raw, c.direction, &c.timing, c.fmt, c.tlp_type, c.length_dw, c.attr, c.tc, c.ep, c.own);
                raw.set(&f::REQUESTER_ID, u32::from(c.requester_id));
                raw.set(&f::TAG, u32::from(c.tag));
                raw.set(&f::LOWER_ADDRESS, u32::from(c.lower_address));
                raw.set(&f::BCM, u32::from(c.bcm));
                raw.set(&f::COMPLETER_ID, u32::from(c.completer_id));
                raw.set(&f::STATUS, c.status.bits());
                raw.set(&f::BYTE_COUNT, u32::from(c.byte_count));
                if let Some(latency) = c.latency {
                    raw.set(&f::MATCHED, 1);
                    raw.set(&f::LATENCY, latency);
                }
                raw.set(&f::SPLIT_INDEX, u32::from(c.split_index));
                raw.set(&f::LAST, u32::from(c.last));
            }
            Body::Timeout(t) => {
                raw.set(&f::DIRECTION, t.direction.bit());
                raw.set(&f::FMT, FMT_EVENT);
                raw.set(&f::TYPE, EVENT_TIMEOUT);
                raw.set(&f::OWN, u32::from(t.own));
                raw.set(&f::REQUESTER_ID, u32::from(t.requester_id));
                raw.set(&f::TAG, u32::from(t.tag));
                raw.set64(&f::TIMESTAMP_LO, &f::TIMESTAMP_HI, t.timestamp);
                raw.set(&f::LATENCY, t.waited);
            }
            Body::Footer(ft) => {
                raw.set(&f::FMT, FMT_EVENT);
                raw.set(&f::TYPE, EVENT_FOOTER);
                raw.set64(&f::TIMESTAMP_LO, &f::TIMESTAMP_HI, ft.records_created);
                raw.set64(&f::ADDRESS_LO, &f::ADDRESS_HI, ft.records_lost);
                if let Some(seq) = ft.trigger_sequence {
                    raw.set(&f::TRIGGER_SEQUENCE, seq);
                    raw.set(&f::TRIGGERED, 1);
                }
            }
            Body::Msi(m) => {
                raw.set(&f::DIRECTION, Direction::Up.bit());
                raw.set(&f::FMT, FMT_EVENT);
                raw.set(&f::TYPE, EVENT_MSI);
                raw.set64(&f::TIMESTAMP_LO, &f::TIMESTAMP_HI, m.timestamp);
                raw.set(&f::VECTOR, u32::from(m.vector));
                raw.set(&f::SOURCES, m.sources);
                raw.set(&f::MSI_WAIT_CYCLES, m.wait_cycles);
            }
            Body::Payload(p) => {
                raw.set(&f::DIRECTION, p.direction.bit());
                raw.set(&f::FMT, FMT_EVENT);
                raw.set(&f::TYPE, EVENT_PAYLOAD);
                raw.set(&f::FIRST_DW, u32::from(p.first_dw));
                raw.set(&f::COUNT, u32::from(p.count));
                raw.set(&f::FINAL, u32::from(p.last));
                for (dw, field) in p.dws.iter().zip(&PAYLOAD_DWS) {
                    raw.set(field, *dw);
                }
            }
        }
        raw
    }

    pub fn to_bytes(&self) -> [u8; RECORD_SIZE] {
        self.to_raw().to_bytes()
    }

    /// Card cycle of the TLP's first beat (of the read, for a timeout); none for a footer.
    pub fn timestamp(&self) -> Option<u64> {
        match &self.body {
            Body::Request(r) => Some(r.timing.timestamp),
            Body::Completion(c) => Some(c.timing.timestamp),
            Body::Timeout(t) => Some(t.timestamp),
            Body::Msi(m) => Some(m.timestamp),
            Body::Footer(_) | Body::Payload(_) => None,
        }
    }

    /// When the record's event happened on the card, for ordering records in time: the first
    /// beat of a TLP, the hand-over of an MSI, and for a completion timeout the moment the
    /// spy gave up (the read's time plus the cycles waited), not the read's own time.
    pub fn event_time(&self) -> Option<u64> {
        match &self.body {
            Body::Timeout(t) => Some(t.timestamp.saturating_add(u64::from(t.waited))),
            _ => self.timestamp(),
        }
    }

    /// Timing of a TLP record.
    pub fn timing(&self) -> Option<&Timing> {
        match &self.body {
            Body::Request(r) => Some(&r.timing),
            Body::Completion(c) => Some(&c.timing),
            _ => None,
        }
    }

    pub fn direction(&self) -> Option<Direction> {
        match &self.body {
            Body::Request(r) => Some(r.direction),
            Body::Completion(c) => Some(c.direction),
            Body::Timeout(t) => Some(t.direction),
            Body::Msi(_) => Some(Direction::Up),
            Body::Payload(p) => Some(p.direction),
            Body::Footer(_) => None,
        }
    }

    pub fn requester_id(&self) -> Option<u16> {
        match &self.body {
            Body::Request(r) => Some(r.requester_id),
            Body::Completion(c) => Some(c.requester_id),
            Body::Timeout(t) => Some(t.requester_id),
            Body::Footer(_) | Body::Msi(_) | Body::Payload(_) => None,
        }
    }

    pub fn tag(&self) -> Option<u8> {
        match &self.body {
            Body::Request(r) => Some(r.tag),
            Body::Completion(c) => Some(c.tag),
            Body::Timeout(t) => Some(t.tag),
            Body::Footer(_) | Body::Msi(_) | Body::Payload(_) => None,
        }
    }

    /// Short name of the record's kind: `MRd32`, `CplD`, `Timeout`, `Footer`, ...
    pub fn kind_name(&self) -> &'static str {
        match &self.body {
            Body::Request(r) => r.kind().name(),
            Body::Completion(c) => c.name(),
            Body::Timeout(_) => "Timeout",
            Body::Footer(_) => "Footer",
            Body::Msi(_) => "MSI",
            Body::Payload(_) => "Payload",
        }
    }

    pub fn is_footer(&self) -> bool {
        matches!(self.body, Body::Footer(_))
    }

    /// A kind record format version 1 does not have (MSI, payload).
    pub fn is_version_2_kind(&self) -> bool {
        matches!(self.body, Body::Msi(_) | Body::Payload(_))
    }

    /// Payload bytes of a TLP record (see [`Request::payload_bytes`],
    /// [`Completion::payload_bytes`]); 0 for events.
    pub fn payload_bytes(&self) -> u32 {
        match &self.body {
            Body::Request(r) => r.payload_bytes(),
            Body::Completion(c) => c.payload_bytes(),
            _ => 0,
        }
    }
}

#[allow(clippy::too_many_arguments)]
fn set_common(
    raw: &mut RawRecord,
    direction: Direction,
    timing: &Timing,
    fmt: u8,
    tlp_type: u8,
    length_dw: u16,
    attr: u8,
    tc: u8,
    ep: bool,
    own: bool,
) {
    raw.set64(&f::TIMESTAMP_LO, &f::TIMESTAMP_HI, timing.timestamp);
    raw.set(&f::DIRECTION, direction.bit());
    raw.set(&f::FMT, u32::from(fmt));
    raw.set(&f::TYPE, u32::from(tlp_type));
    raw.set(&f::EP, u32::from(ep));
    raw.set(&f::ATTR, u32::from(attr));
    raw.set(&f::TC, u32::from(tc));
    raw.set(&f::LENGTH, u32::from(length_dw));
    raw.set(&f::OWN, u32::from(own));
    raw.set(&f::DURATION, u32::from(timing.duration));
    raw.set(&f::WAIT_CYCLES, u32::from(timing.wait_cycles));
    raw.set(&f::GAP_CYCLES, u32::from(timing.gap_cycles));
}

/// Builders for the common record shapes, used by tests, examples and the simulator.
pub mod build {
    use super::*;

    /// A memory read request (`MRd32` below 4 GiB, else `MRd64`).
    pub fn mem_read(
        sequence: u32,
        direction: Direction,
        timestamp: u64,
        requester_id: u16,
        tag: u8,
        address: u64,
        length_dw: u16,
    ) -> Record {
        mem(sequence, direction, timestamp, requester_id, tag, address, length_dw, false)
    }

    /// A memory write request (`MWr32` below 4 GiB, else `MWr64`), all bytes enabled.
    pub fn mem_write(
        sequence: u32,
        direction: Direction,
        timestamp: u64,
        requester_id: u16,
        tag: u8,
        address: u64,
        length_dw: u16,
    ) -> Record {
        mem(sequence, direction, timestamp, requester_id, tag, address, length_dw, true)
    }

    #[allow(clippy::too_many_arguments)]
    fn mem(
        sequence: u32,
        direction: Direction,
        timestamp: u64,
        requester_id: u16,
        tag: u8,
        address: u64,
        length_dw: u16,
        write: bool,
    ) -> Record {
        let four_dw = address > u64::from(u32::MAX);
        Record {
            sequence,
            body: Body::Request(Request {
                direction,
                timing: Timing { timestamp, ..Timing::default() },
                fmt: u8::from(write) << 1 | u8::from(four_dw),
                tlp_type: 0,
                requester_id,
                tag,
                first_be: 0xf,
                last_be: if length_dw > 1 { 0xf } else { 0 },
                address,
                length_dw,
                attr: 0,
                tc: 0,
                ep: false,
                own: false,
            }),
        }
    }

    /// A successful completion with data, matched to its read with `latency`.
    #[allow(clippy::too_many_arguments)]
    pub fn completion(
        sequence: u32,
        direction: Direction,
        timestamp: u64,
        requester_id: u16,
        tag: u8,
        completer_id: u16,
        byte_count: u16,
        length_dw: u16,
        latency: Option<u32>,
        split_index: u8,
        last: bool,
    ) -> Record {
        Record {
            sequence,
            body: Body::Completion(Completion {
                direction,
                timing: Timing { timestamp, ..Timing::default() },
                fmt: 0b010,
                tlp_type: 0b01010,
                requester_id,
                tag,
                lower_address: 0,
                bcm: false,
                completer_id,
                status: CplStatus::Sc,
                byte_count,
                length_dw,
                latency,
                split_index,
                last,
                attr: 0,
                tc: 0,
                ep: false,
                own: false,
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_follow_pcie_fmt_type() {
        let cases = [
            (0, 0, "MRd32"),
            (1, 0, "MRd64"),
            (2, 0, "MWr32"),
            (3, 0, "MWr64"),
            (0, 1, "MRdLk"),
            (0, 2, "IORd"),
            (2, 2, "IOWr"),
            (0, 4, "CfgRd0"),
            (2, 4, "CfgWr0"),
            (0, 5, "CfgRd1"),
            (2, 5, "CfgWr1"),
            (1, 0b10100, "Msg"),
            (3, 0b10000, "MsgD"),
            (2, 0b01100, "FetchAdd"),
            (3, 0b01101, "Swap"),
            (2, 0b01110, "CAS"),
            (4, 0, "Other"),
            (2, 1, "Other"),
        ];
        for (fmt, ty, name) in cases {
            assert_eq!(RequestKind::from_fmt_type(fmt, ty).name(), name, "fmt {fmt} type {ty}");
        }
    }

    #[test]
    fn write_payload_counts_enabled_bytes() {
        let mut r = match build::mem_write(0, Direction::Up, 0, 0, 0, 0x1000, 4).body {
            Body::Request(r) => r,
            _ => unreachable!(),
        };
        assert_eq!(r.payload_bytes(), 16);
        r.first_be = 0b1100;
        r.last_be = 0b0011;
        assert_eq!(r.payload_bytes(), 12);
        r.length_dw = 1;
        r.last_be = 0;
        assert_eq!(r.payload_bytes(), 2);
    }

    #[test]
    fn completion_payload_is_limited_by_byte_count() {
        let Body::Completion(mut c) = build::completion(0, Direction::Down, 0, 0, 0, 0, 8, 4, None, 1, true).body else { unreachable!() };
        assert_eq!(c.payload_bytes(), 8);
        c.byte_count = 4096;
        c.lower_address = 2;
        assert_eq!(c.payload_bytes(), 14);
    }
}
