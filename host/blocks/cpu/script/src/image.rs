//! The compact binary image the card's soft CPU interprets (docs/firmware.md, "Binary format").
//!
//! ```text
//!  header (48 B) │ instructions (24 B each) │ DMA descriptors (64 B) │ events (8 B) │ result slots (8 B) │ strings
//! ```
//!
//! Every field is little-endian and every field of 4 bytes or more sits at a multiple of 4 in
//! the image, so a C interpreter on rv32 reads them with aligned 32-bit loads (64-bit values
//! are two words, low first). [`Program::encode`] and [`decode`] are exact inverses;
//! [`decode`] refuses any image the firmware should refuse, with the reason.

use std::fmt;

use serde::Serialize;

/// "TLXS" in the first four bytes of an image.
pub const MAGIC: [u8; 4] = *b"TLXS";
/// Version of the binary format this crate writes and reads.
pub const FORMAT_VERSION: u16 = 1;
/// Bytes of the header.
pub const HEADER_LEN: usize = 48;
/// Bytes of one instruction.
pub const INSN_LEN: usize = 24;
/// Bytes of one DMA descriptor (the generator's registers for one run, in register order, then
/// the offset in the host buffer: its layout is generated, `tlpx_regs::generator::run_descriptor`,
/// and the firmware replays it with the same offsets, `TLPX_GENERATOR_DESC_*`).
pub const DMA_LEN: usize = tlpx_blocks::run_descriptor::LEN;
/// Bytes of one event entry.
pub const EVENT_LEN: usize = 8;
/// Bytes of one result slot entry.
pub const SLOT_LEN: usize = 8;

/// Most instructions in a program (the firmware's program memory is small).
pub const MAX_INSNS: usize = 16384;
/// Most DMA descriptors.
pub const MAX_DMAS: usize = 1024;
/// Most distinct events (one bit each in a wait's mask).
pub const MAX_EVENTS: usize = 32;
/// Most result slots (marks, peeks, checks, DMA results, event results).
pub const MAX_SLOTS: usize = 4096;
/// Deepest loop nesting: the size of the firmware's counter stack.
pub const MAX_LOOP_DEPTH: usize = 8;
/// Most bytes of the string table.
pub const MAX_STRINGS: usize = 65536;
/// "No result slot" in an instruction's slot field.
pub const NO_SLOT: u16 = 0xFFFF;
/// Bytes of one entry of the firmware's value table (the latest value of a result slot, a
/// u64). The firmware keeps the table in the card's script area right after the image, from
/// the next multiple of 8, and refuses an image whose table does not fit below the area's end
/// (firmware/src/script.c, `validate`): a program needs its image and its table in the area.
pub const VALUE_LEN: usize = 8;

/// Opcodes (byte 0 of an instruction).
pub mod op {
    pub const END: u8 = 0x00;
    pub const DMA: u8 = 0x01;
    pub const POKE: u8 = 0x02;
    pub const PEEK: u8 = 0x03;
    pub const WAIT: u8 = 0x04;
    pub const WAIT_EVENT: u8 = 0x05;
    pub const LOOP: u8 = 0x06;
    pub const END_LOOP: u8 = 0x07;
    pub const MARK: u8 = 0x08;
    pub const CHECK: u8 = 0x09;
}

/// A comparison of a check (flags bits 0..2 of CHECK).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum CmpOp {
    Eq = 0,
    Ne = 1,
    Lt = 2,
    Le = 3,
    Gt = 4,
    Ge = 5,
}

impl CmpOp {
    pub const ALL: [CmpOp; 6] = [CmpOp::Eq, CmpOp::Ne, CmpOp::Lt, CmpOp::Le, CmpOp::Gt, CmpOp::Ge];

    pub fn symbol(self) -> &'static str {
        match self {
            CmpOp::Eq => "==",
            CmpOp::Ne => "!=",
            CmpOp::Lt => "<",
            CmpOp::Le => "<=",
            CmpOp::Gt => ">",
            CmpOp::Ge => ">=",
        }
    }

    fn from_code(code: u8) -> Option<CmpOp> {
        CmpOp::ALL.get(usize::from(code)).copied()
    }

    /// What the firmware computes: `(value & mask) OP constant`, unsigned 64-bit.
    pub fn holds(self, left: u64, right: u64) -> bool {
        match self {
            CmpOp::Eq => left == right,
            CmpOp::Ne => left != right,
            CmpOp::Lt => left < right,
            CmpOp::Le => left <= right,
            CmpOp::Gt => left > right,
            CmpOp::Ge => left >= right,
        }
    }
}

/// One instruction. Encoded in 24 bytes: `op u8, flags u8, slot u16, a u32, b u64, c u64`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(tag = "insn", rename_all = "snake_case")]
pub enum Insn {
    /// The program ends (successfully). Always the last instruction, and only there.
    End,
    /// Program the generator from descriptor `desc` and start it; unless `nowait`, wait for
    /// generator.status.done at most `limit_cycles`, then record generator.cycles in `slot`.
    Dma { desc: u16, slot: Option<u16>, nowait: bool, limit_cycles: u64 },
    /// Write `value` to BAR0 `offset` as `words` 32-bit words, low word first.
    Poke { offset: u32, words: u8, value: u64 },
    /// Read `words` 32-bit words at BAR0 `offset` (low word first) into `slot`, and record it.
    Peek { offset: u32, words: u8, slot: u16 },
    /// Busy-wait `cycles` card cycles.
    Wait { cycles: u64 },
    /// Wait until any event of `mask` (bits into the event table) is set, at most `timeout_cycles`.
    WaitEvent { mask: u32, timeout_cycles: u64, slot: Option<u16> },
    /// Push `count` (>= 1) on the counter stack.
    Loop { count: u32 },
    /// Decrement the top counter; if it is not zero jump to instruction `target` (the first of
    /// the body), else pop it and go on.
    EndLoop { target: u32 },
    /// Record the cycle counter in `slot`.
    Mark { slot: u16 },
    /// `(value of source & mask) OP constant`: record the outcome in `slot`; a failing `stop`
    /// check (assert) ends the program as failed.
    Check { op: CmpOp, stop: bool, slot: u16, source: u16, constant: u64, mask: u64 },
}

/// What a result slot holds (its records' kind).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum SlotKind {
    Mark = 1,
    Peek = 2,
    Check = 3,
    Dma = 4,
    Event = 5,
}

impl SlotKind {
    fn from_code(code: u8) -> Option<SlotKind> {
        Some(match code {
            1 => SlotKind::Mark,
            2 => SlotKind::Peek,
            3 => SlotKind::Check,
            4 => SlotKind::Dma,
            5 => SlotKind::Event,
            _ => return None,
        })
    }

    pub fn name(self) -> &'static str {
        match self {
            SlotKind::Mark => "mark",
            SlotKind::Peek => "peek",
            SlotKind::Check => "check",
            SlotKind::Dma => "dma",
            SlotKind::Event => "event",
        }
    }
}

/// One entry of the result table: what records of this slot mean, and its name for the host.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Slot {
    pub kind: SlotKind,
    /// Source line that defined the slot (saturated at 65535).
    pub line: u16,
    pub name: String,
}

/// An event: bit `bit` of the register at BAR0 `offset` reads 1.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Event {
    pub offset: u32,
    pub bit: u8,
}

/// The generator's registers for one run: the block crate's descriptor, encoded there from a
/// validated generator configuration (tlpx_blocks::run_descriptor).
pub use tlpx_blocks::run_descriptor::DmaDescriptor;

/// A compiled program: what the image holds.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Program {
    /// tlpx_regs::MAP_HASH of the register map the offsets come from.
    pub map_hash: u32,
    /// Card clock the times were converted with (Hz).
    pub clock_hz: u32,
    /// Bytes of host buffer the DMA runs need (largest base_offset + window).
    pub buffer_len: u32,
    /// Deepest loop nesting (counter stack entries needed).
    pub max_loop_depth: u16,
    pub insns: Vec<Insn>,
    pub dmas: Vec<DmaDescriptor>,
    pub events: Vec<Event>,
    pub slots: Vec<Slot>,
}

/// Why an image was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DecodeError(pub String);

impl fmt::Display for DecodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for DecodeError {}

/// CRC-32 (IEEE 802.3, reflected, polynomial 0xEDB88320, init and final XOR 0xFFFFFFFF: zlib's).
pub fn crc32(data: &[u8]) -> u32 {
    let mut crc = 0xFFFF_FFFFu32;
    for &byte in data {
        crc ^= u32::from(byte);
        for _ in 0..8 {
            crc = if crc & 1 != 0 { (crc >> 1) ^ 0xEDB8_8320 } else { crc >> 1 };
        }
    }
    !crc
}

fn put32(out: &mut Vec<u8>, v: u32) {
    out.extend_from_slice(&v.to_le_bytes());
}

fn put64(out: &mut Vec<u8>, v: u64) {
    out.extend_from_slice(&v.to_le_bytes());
}

fn opt_slot(slot: Option<u16>) -> u16 {
    slot.unwrap_or(NO_SLOT)
}

impl Insn {
    /// (op, flags, slot, a, b, c) as encoded.
    pub fn fields(&self) -> (u8, u8, u16, u32, u64, u64) {
        match *self {
            Insn::End => (op::END, 0, NO_SLOT, 0, 0, 0),
            Insn::Dma { desc, slot, nowait, limit_cycles } => (op::DMA, u8::from(nowait), opt_slot(slot), u32::from(desc), limit_cycles, 0),
            Insn::Poke { offset, words, value } => (op::POKE, words, NO_SLOT, offset, value, 0),
            Insn::Peek { offset, words, slot } => (op::PEEK, words, slot, offset, 0, 0),
            Insn::Wait { cycles } => (op::WAIT, 0, NO_SLOT, 0, cycles, 0),
            Insn::WaitEvent { mask, timeout_cycles, slot } => (op::WAIT_EVENT, 0, opt_slot(slot), mask, timeout_cycles, 0),
            Insn::Loop { count } => (op::LOOP, 0, NO_SLOT, count, 0, 0),
            Insn::EndLoop { target } => (op::END_LOOP, 0, NO_SLOT, target, 0, 0),
            Insn::Mark { slot } => (op::MARK, 0, slot, 0, 0, 0),
            Insn::Check { op: cmp, stop, slot, source, constant, mask } => {
                (op::CHECK, cmp as u8 | if stop { 0x80 } else { 0 }, slot, u32::from(source), constant, mask)
            }
        }
    }

    fn encode(&self, out: &mut Vec<u8>) {
        let (opcode, flags, slot, a, b, c) = self.fields();
        out.push(opcode);
        out.push(flags);
        out.extend_from_slice(&slot.to_le_bytes());
        put32(out, a);
        put64(out, b);
        put64(out, c);
    }
}

/// A program that does not fit the card's script area: what it needs, what the area holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AreaError {
    /// Bytes of the image.
    pub image_len: usize,
    /// Result slots (each an entry of the firmware's value table after the image).
    pub slots: usize,
    /// Bytes of the area the program needs: the image padded to 8, then the value table.
    pub needed: usize,
    /// Bytes of the card's script area.
    pub area_len: usize,
}

impl fmt::Display for AreaError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "its {}-byte image and the firmware's value table after it ({} result slot(s), {VALUE_LEN} bytes each) need {} bytes; \
             the card's script area holds {} bytes",
            self.image_len, self.slots, self.needed, self.area_len
        )
    }
}

impl std::error::Error for AreaError {}

/// Bytes of the script area a program with an image of `image_len` bytes and `slots` result
/// slots takes on the card: the image, padded to a multiple of 8, then the value table.
pub fn area_bytes(image_len: usize, slots: usize) -> usize {
    image_len.next_multiple_of(VALUE_LEN) + slots * VALUE_LEN
}

impl Program {
    /// The image, when it and the firmware's value table fit a script area of `area_len`
    /// bytes (the card's: `tlpx_device::cpu::SCRIPT_AREA_LEN`, the firmware's
    /// `SCRIPT_AREA..SCRIPT_AREA_END`). An image that does not is refused here, on the host,
    /// with both sizes: the firmware would only refuse it on the card.
    pub fn encode_for_area(&self, area_len: usize) -> Result<Vec<u8>, AreaError> {
        let image = self.encode();
        let needed = area_bytes(image.len(), self.slots.len());
        if needed > area_len {
            return Err(AreaError { image_len: image.len(), slots: self.slots.len(), needed, area_len });
        }
        Ok(image)
    }

    /// The image: header, then the body whose CRC-32 the header carries.
    pub fn encode(&self) -> Vec<u8> {
        let mut strings = Vec::new();
        let mut name_offsets = Vec::with_capacity(self.slots.len());
        for slot in &self.slots {
            name_offsets.push(strings.len() as u32);
            strings.extend_from_slice(slot.name.as_bytes());
            strings.push(0);
        }
        let strings_len = strings.len() as u32;
        while strings.len() % 4 != 0 {
            strings.push(0);
        }
        let mut body = Vec::new();
        for insn in &self.insns {
            insn.encode(&mut body);
        }
        for d in &self.dmas {
            body.extend_from_slice(&d.to_bytes());
        }
        for e in &self.events {
            put32(&mut body, e.offset);
            body.extend_from_slice(&[e.bit, 0, 0, 0]);
        }
        for (slot, name) in self.slots.iter().zip(&name_offsets) {
            body.push(slot.kind as u8);
            body.push(0);
            body.extend_from_slice(&slot.line.to_le_bytes());
            put32(&mut body, *name);
        }
        body.extend_from_slice(&strings);

        let mut out = Vec::with_capacity(HEADER_LEN + body.len());
        out.extend_from_slice(&MAGIC);
        out.extend_from_slice(&FORMAT_VERSION.to_le_bytes());
        out.extend_from_slice(&(HEADER_LEN as u16).to_le_bytes());
        put32(&mut out, self.map_hash);
        put32(&mut out, self.clock_hz);
        put32(&mut out, self.insns.len() as u32);
        out.extend_from_slice(&(self.dmas.len() as u16).to_le_bytes());
        out.extend_from_slice(&(self.events.len() as u16).to_le_bytes());
        out.extend_from_slice(&(self.slots.len() as u16).to_le_bytes());
        out.extend_from_slice(&self.max_loop_depth.to_le_bytes());
        put32(&mut out, strings_len);
        put32(&mut out, body.len() as u32);
        put32(&mut out, crc32(&body));
        put32(&mut out, self.buffer_len);
        put32(&mut out, 0);
        out.extend_from_slice(&body);
        out
    }
}

/// Little-endian reader over a byte slice; every read is bounds-checked by the caller's sizes.
struct Reader<'a> {
    data: &'a [u8],
    pos: usize,
}

impl Reader<'_> {
    fn bytes<const N: usize>(&mut self) -> [u8; N] {
        let mut out = [0u8; N];
        if let Some(src) = self.data.get(self.pos..self.pos + N) {
            out.copy_from_slice(src);
        }
        self.pos += N;
        out
    }
    fn u8(&mut self) -> u8 {
        self.bytes::<1>()[0]
    }
    fn u16(&mut self) -> u16 {
        u16::from_le_bytes(self.bytes())
    }
    fn u32(&mut self) -> u32 {
        u32::from_le_bytes(self.bytes())
    }
    fn u64(&mut self) -> u64 {
        u64::from_le_bytes(self.bytes())
    }
}

fn bad<T>(msg: String) -> Result<T, DecodeError> {
    Err(DecodeError(msg))
}

/// Header fields of an image, as read (before the body is checked).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    pub version: u16,
    pub map_hash: u32,
    pub clock_hz: u32,
    pub insn_count: u32,
    pub dma_count: u16,
    pub event_count: u16,
    pub slot_count: u16,
    pub max_loop_depth: u16,
    pub strings_len: u32,
    pub body_len: u32,
    pub body_crc: u32,
    pub buffer_len: u32,
}

/// Decodes and validates an image built for the register map `map_hash` (normally
/// tlpx_regs::MAP_HASH): magic, version, lengths, CRC, map hash, then every instruction
/// (opcodes, flags, slot / descriptor / event indices, loop structure, the final END).
pub fn decode(image: &[u8], map_hash: u32) -> Result<Program, DecodeError> {
    let h = read_header(image)?;
    let body = &image[HEADER_LEN..];
    check_body(&h, body, map_hash)?;

    let mut r = Reader { data: body, pos: 0 };
    let mut raw = Vec::with_capacity(h.insn_count as usize);
    for _ in 0..h.insn_count {
        raw.push((r.u8(), r.u8(), r.u16(), r.u32(), r.u64(), r.u64()));
    }
    let mut dmas = Vec::with_capacity(usize::from(h.dma_count));
    for _ in 0..h.dma_count {
        dmas.push(DmaDescriptor::from_bytes(&r.bytes::<DMA_LEN>()));
    }
    let events = read_events(&mut r, h.event_count)?;
    let slots = read_slots(&mut r, &h)?;

    let tables = Tables { dmas: dmas.len(), events: events.len(), slots: &slots };
    let mut loops = Loops::default();
    let last = raw.len() - 1;
    let mut insns = Vec::with_capacity(raw.len());
    for (i, &raw_insn) in raw.iter().enumerate() {
        insns.push(decode_insn(i, raw_insn, last, &tables, &mut loops)?);
    }
    if let Some(open) = loops.open.last() {
        return bad(format!("instruction {open}: LOOP without END_LOOP"));
    }
    if insns.last() != Some(&Insn::End) {
        return bad("the last instruction is not END".to_string());
    }
    if loops.depth_seen != usize::from(h.max_loop_depth) {
        return bad(format!("header says loops nest {} deep, the program nests {}", h.max_loop_depth, loops.depth_seen));
    }
    Ok(Program {
        map_hash: h.map_hash,
        clock_hz: h.clock_hz,
        buffer_len: h.buffer_len,
        max_loop_depth: h.max_loop_depth,
        insns,
        dmas,
        events,
        slots,
    })
}

/// Reads the header: magic, version, header length, the fields, the zero reserved word.
fn read_header(image: &[u8]) -> Result<Header, DecodeError> {
    if image.len() < HEADER_LEN {
        return bad(format!("image is {} bytes, shorter than its {HEADER_LEN}-byte header", image.len()));
    }
    if image[0..4] != MAGIC {
        return bad(format!("bad magic {:02x?}: not a tlpx script image (expected \"TLXS\")", &image[0..4]));
    }
    let mut r = Reader { data: image, pos: 4 };
    let version = r.u16();
    if version != FORMAT_VERSION {
        return bad(format!("format version {version}; this tlpx reads version {FORMAT_VERSION}"));
    }
    let header_len = r.u16();
    if usize::from(header_len) != HEADER_LEN {
        return bad(format!("header length {header_len}; version {FORMAT_VERSION} headers are {HEADER_LEN} bytes"));
    }
    let h = Header {
        version,
        map_hash: r.u32(),
        clock_hz: r.u32(),
        insn_count: r.u32(),
        dma_count: r.u16(),
        event_count: r.u16(),
        slot_count: r.u16(),
        max_loop_depth: r.u16(),
        strings_len: r.u32(),
        body_len: r.u32(),
        body_crc: r.u32(),
        buffer_len: r.u32(),
    };
    let reserved = r.u32();
    if reserved != 0 {
        return bad(format!("reserved header word is 0x{reserved:08x}, not 0"));
    }
    Ok(h)
}

/// Checks the header against the body and this card: body length, CRC, map hash, clock, the
/// format's limits, the body's size from the counts, at least one instruction.
fn check_body(h: &Header, body: &[u8], map_hash: u32) -> Result<(), DecodeError> {
    if body.len() != h.body_len as usize {
        return bad(format!("header says the body is {} bytes, the image has {}", h.body_len, body.len()));
    }
    let crc = crc32(body);
    if crc != h.body_crc {
        return bad(format!("body CRC-32 is 0x{crc:08x}, the header says 0x{:08x}: the image is corrupt", h.body_crc));
    }
    if h.map_hash != map_hash {
        return bad(format!(
            "image was compiled for register map 0x{:08x}, this card's map is 0x{map_hash:08x}: recompile the script",
            h.map_hash
        ));
    }
    if h.clock_hz == 0 {
        return bad("clock is 0 Hz".to_string());
    }
    let limits = [
        ("instructions", h.insn_count as usize, MAX_INSNS),
        ("DMA descriptors", usize::from(h.dma_count), MAX_DMAS),
        ("events", usize::from(h.event_count), MAX_EVENTS),
        ("result slots", usize::from(h.slot_count), MAX_SLOTS),
        ("loop depth", usize::from(h.max_loop_depth), MAX_LOOP_DEPTH),
        ("string bytes", h.strings_len as usize, MAX_STRINGS),
    ];
    for (what, n, max) in limits {
        if n > max {
            return bad(format!("{n} {what}, more than the {max} the format allows"));
        }
    }
    let padded_strings = (h.strings_len as usize).next_multiple_of(4);
    let want = h.insn_count as usize * INSN_LEN
        + usize::from(h.dma_count) * DMA_LEN
        + usize::from(h.event_count) * EVENT_LEN
        + usize::from(h.slot_count) * SLOT_LEN
        + padded_strings;
    if want != body.len() {
        return bad(format!("the header's counts make a {want}-byte body, the image has {} bytes", body.len()));
    }
    if h.insn_count == 0 {
        return bad("no instructions (a program ends with END)".to_string());
    }
    Ok(())
}

/// Reads the event table: a BAR0 word offset and a bit (0..=31) each.
fn read_events(r: &mut Reader, count: u16) -> Result<Vec<Event>, DecodeError> {
    let mut events = Vec::with_capacity(usize::from(count));
    for i in 0..count {
        let offset = r.u32();
        let [bit, p0, p1, p2] = r.bytes::<4>();
        if bit > 31 || (p0, p1, p2) != (0, 0, 0) {
            return bad(format!("event {i}: bit {bit} (0..=31) with padding {p0},{p1},{p2} (must be 0)"));
        }
        check_offset(offset, 1).map_err(|m| DecodeError(format!("event {i}: {m}")))?;
        events.push(Event { offset, bit });
    }
    Ok(events)
}

/// Reads the result slot table and the string table after it (the slots' names, in slot
/// order, then zero padding to a multiple of 4).
fn read_slots(r: &mut Reader, h: &Header) -> Result<Vec<Slot>, DecodeError> {
    let mut slot_raw = Vec::with_capacity(usize::from(h.slot_count));
    for _ in 0..h.slot_count {
        slot_raw.push((r.u8(), r.u8(), r.u16(), r.u32()));
    }
    let body = r.data;
    let strings_start = r.pos;
    let strings = &body[strings_start..strings_start + h.strings_len as usize];
    if body[strings_start + h.strings_len as usize..].iter().any(|&b| b != 0) {
        return bad("string table padding is not zero".to_string());
    }
    let mut slots = Vec::with_capacity(slot_raw.len());
    let mut next_name = 0usize;
    for (i, (kind, pad, line, name_at)) in slot_raw.into_iter().enumerate() {
        // names follow each other in slot order, each ended by one NUL: one image per program
        if name_at as usize != next_name {
            return bad(format!("result slot {i}: name at string offset {name_at}, expected {next_name} (names are stored in slot order)"));
        }
        let Some(kind) = SlotKind::from_code(kind) else {
            return bad(format!("result slot {i}: unknown kind {kind}"));
        };
        if pad != 0 {
            return bad(format!("result slot {i}: padding byte is {pad}, not 0"));
        }
        let tail = strings.get(name_at as usize..).unwrap_or(&[]);
        let Some(end) = tail.iter().position(|&b| b == 0) else {
            return bad(format!("result slot {i}: name offset {name_at} is not a string of the table"));
        };
        let Ok(name) = std::str::from_utf8(&tail[..end]) else {
            return bad(format!("result slot {i}: name is not UTF-8"));
        };
        next_name += end + 1;
        slots.push(Slot { kind, line, name: name.to_string() });
    }
    if next_name != h.strings_len as usize {
        return bad(format!("string table is {} bytes, the slot names take {next_name}", h.strings_len));
    }
    Ok(slots)
}

/// An instruction as stored: opcode, flags, slot, then the operands a (u32), b and c (u64).
type RawInsn = (u8, u8, u16, u32, u64, u64);

/// The tables an instruction refers to, already decoded.
struct Tables<'a> {
    dmas: usize,
    events: usize,
    slots: &'a [Slot],
}

impl Tables<'_> {
    /// Slot `s` of instruction `i`, which must exist and be of kind `what`.
    fn slot(&self, s: u16, i: usize, what: SlotKind) -> Result<u16, DecodeError> {
        match self.slots.get(usize::from(s)) {
            Some(slot) if slot.kind == what => Ok(s),
            Some(slot) => bad(format!("instruction {i}: slot {s} is a {} slot, not a {} slot", slot.kind.name(), what.name())),
            None => bad(format!("instruction {i}: result slot {s} of {}", self.slots.len())),
        }
    }

    /// As [`Tables::slot`], or none ([`NO_SLOT`]).
    fn opt_slot(&self, s: u16, i: usize, what: SlotKind) -> Result<Option<u16>, DecodeError> {
        if s == NO_SLOT {
            Ok(None)
        } else {
            self.slot(s, i, what).map(Some)
        }
    }
}

/// The loop structure seen so far.
#[derive(Default)]
struct Loops {
    /// Instruction indices of the LOOPs not yet closed, innermost last.
    open: Vec<usize>,
    /// Deepest nesting seen.
    depth_seen: usize,
}

/// Instruction `i`'s fields that its opcode does not use must be zero (`ok`).
fn unused(i: usize, what: &str, ok: bool) -> Result<(), DecodeError> {
    if ok {
        Ok(())
    } else {
        bad(format!("instruction {i} ({what}): unused fields are not zero"))
    }
}

/// Decodes and checks instruction `i` of `last + 1`.
fn decode_insn(i: usize, raw: RawInsn, last: usize, t: &Tables, loops: &mut Loops) -> Result<Insn, DecodeError> {
    let (opcode, flags, slot, a, b, c) = raw;
    let insn = match opcode {
        op::END => {
            unused(i, "end", flags == 0 && slot == NO_SLOT && a == 0 && b == 0 && c == 0)?;
            if i != last {
                return bad(format!("instruction {i}: END before the last instruction ({last})"));
            }
            Insn::End
        }
        op::DMA => {
            unused(i, "dma", flags & !1 == 0 && c == 0)?;
            if a as usize >= t.dmas {
                return bad(format!("instruction {i}: DMA descriptor {a} of {}", t.dmas));
            }
            let nowait = flags & 1 != 0;
            if nowait && slot != NO_SLOT {
                return bad(format!("instruction {i}: a nowait DMA records no result"));
            }
            Insn::Dma { desc: a as u16, slot: t.opt_slot(slot, i, SlotKind::Dma)?, nowait, limit_cycles: b }
        }
        op::POKE => {
            unused(i, "poke", slot == NO_SLOT && c == 0)?;
            check_offset(a, flags).map_err(|m| DecodeError(format!("instruction {i} (poke): {m}")))?;
            if flags == 1 && b > u64::from(u32::MAX) {
                return bad(format!("instruction {i} (poke): value 0x{b:x} does not fit one word"));
            }
            Insn::Poke { offset: a, words: flags, value: b }
        }
        op::PEEK => {
            unused(i, "peek", b == 0 && c == 0)?;
            check_offset(a, flags).map_err(|m| DecodeError(format!("instruction {i} (peek): {m}")))?;
            Insn::Peek { offset: a, words: flags, slot: t.slot(slot, i, SlotKind::Peek)? }
        }
        op::WAIT => {
            unused(i, "wait", flags == 0 && slot == NO_SLOT && a == 0 && c == 0)?;
            Insn::Wait { cycles: b }
        }
        op::WAIT_EVENT => {
            unused(i, "wait event", flags == 0 && c == 0)?;
            let known = if t.events >= 32 { u32::MAX } else { (1u32 << t.events) - 1 };
            if a == 0 || a & !known != 0 {
                return bad(format!("instruction {i}: event mask 0x{a:x} names events outside the table of {}", t.events));
            }
            Insn::WaitEvent { mask: a, timeout_cycles: b, slot: t.opt_slot(slot, i, SlotKind::Event)? }
        }
        op::LOOP => {
            unused(i, "loop", flags == 0 && slot == NO_SLOT && b == 0 && c == 0)?;
            if a == 0 {
                return bad(format!("instruction {i}: loop count 0"));
            }
            loops.open.push(i);
            loops.depth_seen = loops.depth_seen.max(loops.open.len());
            Insn::Loop { count: a }
        }
        op::END_LOOP => {
            unused(i, "end loop", flags == 0 && slot == NO_SLOT && b == 0 && c == 0)?;
            let Some(start) = loops.open.pop() else {
                return bad(format!("instruction {i}: END_LOOP without a LOOP"));
            };
            if a as usize != start + 1 {
                return bad(format!("instruction {i}: END_LOOP jumps to {a}, its LOOP's body starts at {}", start + 1));
            }
            Insn::EndLoop { target: a }
        }
        op::MARK => {
            unused(i, "mark", flags == 0 && a == 0 && b == 0 && c == 0)?;
            Insn::Mark { slot: t.slot(slot, i, SlotKind::Mark)? }
        }
        op::CHECK => {
            let Some(cmp) = CmpOp::from_code(flags & 0x7F) else {
                return bad(format!("instruction {i}: comparison code {} (0..=5)", flags & 0x7F));
            };
            let source = match t.slots.get(a as usize) {
                Some(s) if matches!(s.kind, SlotKind::Peek | SlotKind::Dma | SlotKind::Event | SlotKind::Mark) => a as u16,
                _ => return bad(format!("instruction {i}: check source {a} is not a value slot")),
            };
            Insn::Check { op: cmp, stop: flags & 0x80 != 0, slot: t.slot(slot, i, SlotKind::Check)?, source, constant: b, mask: c }
        }
        other => return bad(format!("instruction {i}: unknown opcode 0x{other:02x}")),
    };
    Ok(insn)
}

/// A register access the firmware can make: `words` (1 or 2) 32-bit words inside BAR0, aligned.
pub fn check_offset(offset: u32, words: u8) -> Result<(), String> {
    if words != 1 && words != 2 {
        return Err(format!("access of {words} words (1 or 2)"));
    }
    if offset % 4 != 0 {
        return Err(format!("BAR0 offset 0x{offset:x} is not a multiple of 4"));
    }
    if u64::from(offset) + 4 * u64::from(words) > tlpx_regs::BAR_SIZE {
        return Err(format!("BAR0 offset 0x{offset:x} is outside BAR0 (0x{:x} bytes)", tlpx_regs::BAR_SIZE));
    }
    Ok(())
}
