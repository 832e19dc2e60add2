//! The record's field table: the one source of the 32-byte layout.
//!
//! Every typed accessor in [`crate::record`] and the header's `"fields"` JSON are
//! generated from [`FIELDS`]; traces/FORMAT.md, "Record", is the specification it
//! follows. Fields that share bits (`address_lo` / `completer_id`, `first_be` /
//! `lower_address`, `latency` / `address_hi`) are all listed: which one applies depends
//! on the record's kind.

use serde::{Deserialize, Serialize};

/// Size of one record in bytes (record format versions 1 and 2).
pub const RECORD_SIZE: usize = 32;
/// Number of 32-bit words in a record.
pub const RECORD_WORDS: usize = RECORD_SIZE / 4;

/// One named bit field of a record: `width` bits at `shift` in 32-bit word `word`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FieldSpec {
    /// Field name, as in traces/FORMAT.md and the header's `fields` table.
    pub name: &'static str,
    /// Word index, 0..=7 (word 0 is bytes 0..4, little-endian).
    pub word: u8,
    /// Bit position of the field's least significant bit in its word.
    pub shift: u8,
    /// Width in bits, 1..=32.
    pub width: u8,
    /// One-line meaning, copied into the header.
    pub description: &'static str,
}

impl FieldSpec {
    /// Mask of the field's value (not shifted).
    pub const fn value_mask(&self) -> u32 {
        if self.width >= 32 {
            u32::MAX
        } else {
            (1u32 << self.width) - 1
        }
    }

    /// Largest value the field holds.
    pub const fn max_value(&self) -> u32 {
        self.value_mask()
    }

    /// Extracts the field from the record's words.
    pub const fn get(&self, words: &[u32; RECORD_WORDS]) -> u32 {
        (words[self.word as usize] >> self.shift) & self.value_mask()
    }

    /// Stores `value` into the field, truncated to its width.
    pub fn set(&self, words: &mut [u32; RECORD_WORDS], value: u32) {
        let mask = self.value_mask() << self.shift;
        let word = &mut words[self.word as usize];
        *word = (*word & !mask) | ((value << self.shift) & mask);
    }

    /// The table entry as it appears in the header's `fields` JSON.
    pub fn to_desc(&self) -> FieldDesc {
        FieldDesc {
            name: self.name.to_owned(),
            word: u32::from(self.word),
            shift: u32::from(self.shift),
            width: u32::from(self.width),
            description: self.description.to_owned(),
        }
    }
}

/// A field table entry as read from (or written to) a trace header.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FieldDesc {
    pub name: String,
    pub word: u32,
    pub shift: u32,
    pub width: u32,
    #[serde(default)]
    pub description: String,
}

impl FieldDesc {
    /// Same layout (name, word, shift, width); the description is prose and may change
    /// without a format version change.
    pub fn same_layout(&self, spec: &FieldSpec) -> bool {
        self.name == spec.name
            && self.word == u32::from(spec.word)
            && self.shift == u32::from(spec.shift)
            && self.width == u32::from(spec.width)
    }
}

macro_rules! fields {
    ($( $(#[$doc:meta])* $id:ident = ($name:literal, $word:literal, $shift:literal, $width:literal, $desc:literal); )*) => {
        /// The fields of a record, one constant per row of the table in traces/FORMAT.md.
        pub mod field {
            use super::FieldSpec;
            $(
                $(#[$doc])*
                #[doc = concat!("`", $name, "`: ", $desc)]
                pub const $id: FieldSpec = FieldSpec {
                    name: $name, word: $word, shift: $shift, width: $width, description: $desc,
                };
            )*
        }
        /// Every field, in the order of traces/FORMAT.md (and of the header's `fields`).
        pub const FIELDS: &[FieldSpec] = &[ $( field::$id, )* ];
    };
}

fields! {
    SEQUENCE = ("sequence", 0, 0, 32, "per record the spy created (after filters), +1 each, wrapping; a jump means records were lost");
    TIMESTAMP_LO = ("timestamp_lo", 1, 0, 32, "card cycle of the TLP's first beat, bits 31:0 (footer: records created, bits 31:0)");
    TIMESTAMP_HI = ("timestamp_hi", 2, 0, 32, "card cycle of the TLP's first beat, bits 63:32 (footer: records created, bits 63:32)");
    DIRECTION = ("direction", 3, 0, 1, "0 = down (host to card), 1 = up (card to host)");
    FMT = ("fmt", 3, 1, 3, "TLP Fmt field; 7 = a spy event record (see type)");
    TYPE = ("type", 3, 4, 5, "TLP Type field; for fmt 7: 1 = completion timeout, 2 = footer");
    EP = ("ep", 3, 9, 1, "poisoned");
    ATTR = ("attr", 3, 10, 2, "bit 10 No Snoop, bit 11 Relaxed Ordering");
    TC = ("tc", 3, 12, 3, "traffic class");
    LENGTH = ("length", 3, 15, 10, "Length field in DWs (0 means 1024)");
    OWN = ("own", 3, 25, 1, "the spy's own DMA traffic");
    MATCHED = ("matched", 3, 26, 1, "a completion matched to a read the spy saw (latency valid)");
    LAST = ("last", 3, 27, 1, "the last completion of its read");
    SPLIT_INDEX = ("split_index", 3, 28, 4, "completions: 1-based index among its read's completions (15 = 15 or more)");
    REQUESTER_ID = ("requester_id", 4, 0, 16, "requests and completions");
    TAG = ("tag", 4, 16, 8, "requests and completions");
    FIRST_BE = ("first_be", 4, 24, 4, "requests: first DW byte enables");
    LAST_BE = ("last_be", 4, 28, 4, "requests: last DW byte enables");
    LOWER_ADDRESS = ("lower_address", 4, 24, 7, "completions: Lower Address");
    BCM = ("bcm", 4, 31, 1, "completions: Byte Count Modified (PCI-X completers)");
    ADDRESS_LO = ("address_lo", 5, 0, 32, "requests: address bits 31:0 (bits 1:0 are 0) (footer: records lost, bits 31:0)");
    ADDRESS_HI = ("address_hi", 6, 0, 32, "requests: address bits 63:32, 0 for 3DW headers (footer: records lost, bits 63:32)");
    COMPLETER_ID = ("completer_id", 5, 0, 16, "completions: Completer ID");
    STATUS = ("status", 5, 16, 3, "completions: 0 SC, 1 UR, 2 CRS, 4 CA");
    BYTE_COUNT = ("byte_count", 5, 19, 12, "completions: remaining byte count (0 means 4096)");
    LATENCY = ("latency", 6, 0, 32, "matched completions: cycles from the read's first beat to this completion's first beat; timeout events: cycles waited");
    DURATION = ("duration", 7, 0, 16, "cycles from first to last beat, saturating at 65535");
    WAIT_CYCLES = ("wait_cycles", 7, 16, 8, "cycles inside the TLP with valid high and ready low, saturating at 255");
    GAP_CYCLES = ("gap_cycles", 7, 24, 8, "cycles inside the TLP with valid low, saturating at 255");
    // Record format version 2 (appended so that version 1's table is a prefix of it).
    VECTOR = ("vector", 4, 0, 8, "MSI records: the vector field of the MSI the hard IP accepted");
    SOURCES = ("sources", 5, 0, 32, "MSI records: bit per MSI source pending when it was sent");
    MSI_WAIT_CYCLES = ("msi_wait_cycles", 6, 0, 32, "MSI records: cycles valid was high before ready, saturating");
    FIRST_DW = ("first_dw", 3, 9, 5, "payload records: index in the TLP's payload of the first DW carried (0, 6, 12)");
    COUNT = ("count", 3, 14, 3, "payload records: DWs carried, 1..6");
    FINAL = ("final", 3, 17, 1, "payload records: the last payload record of its TLP");
    PAYLOAD_DW0 = ("payload_dw0", 1, 0, 32, "payload records: payload DW first_dw + 0 (bytes in wire order, little-endian)");
    PAYLOAD_DW1 = ("payload_dw1", 2, 0, 32, "payload records: payload DW first_dw + 1");
    PAYLOAD_DW2 = ("payload_dw2", 4, 0, 32, "payload records: payload DW first_dw + 2");
    PAYLOAD_DW3 = ("payload_dw3", 5, 0, 32, "payload records: payload DW first_dw + 3");
    PAYLOAD_DW4 = ("payload_dw4", 6, 0, 32, "payload records: payload DW first_dw + 4");
    PAYLOAD_DW5 = ("payload_dw5", 7, 0, 32, "payload records: payload DW first_dw + 5");
    TRIGGER_SEQUENCE = ("trigger_sequence", 4, 0, 32, "footer: sequence of the record that matched the trigger (valid when triggered)");
    TRIGGERED = ("triggered", 7, 0, 1, "footer: the trigger matched");
}

/// Fields of record format version 1: the first rows of [`FIELDS`].
pub const FIELDS_V1_LEN: usize = 29;

/// The field table of record format `version` (1 or 2); None for another version.
pub fn fields_of_version(version: u16) -> Option<&'static [FieldSpec]> {
    match version {
        1 => Some(&FIELDS[..FIELDS_V1_LEN]),
        2 => Some(FIELDS),
        _ => None,
    }
}

/// Looks a field up by name.
pub fn field_by_name(name: &str) -> Option<&'static FieldSpec> {
    FIELDS.iter().find(|f| f.name == name)
}

/// The header's `fields` table for the version this crate writes.
pub fn field_table() -> Vec<FieldDesc> {
    FIELDS.iter().map(FieldSpec::to_desc).collect()
}

/// A record as its eight little-endian words, with raw access by field.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Hash)]
pub struct RawRecord {
    pub words: [u32; RECORD_WORDS],
}

impl RawRecord {
    pub fn from_bytes(bytes: &[u8; RECORD_SIZE]) -> Self {
        let mut words = [0u32; RECORD_WORDS];
        for (word, chunk) in words.iter_mut().zip(bytes.chunks_exact(4)) {
            *word = u32::from_le_bytes([chunk[0], chunk[1], chunk[2], chunk[3]]);
        }
        RawRecord { words }
    }

    pub fn to_bytes(&self) -> [u8; RECORD_SIZE] {
        let mut bytes = [0u8; RECORD_SIZE];
        for (chunk, word) in bytes.chunks_exact_mut(4).zip(self.words) {
            chunk.copy_from_slice(&word.to_le_bytes());
        }
        bytes
    }

    /// The value of `field`.
    pub fn get(&self, field: &FieldSpec) -> u32 {
        field.get(&self.words)
    }

    /// Stores `value` (truncated to the field's width).
    pub fn set(&mut self, field: &FieldSpec, value: u32) {
        field.set(&mut self.words, value)
    }

    /// The value of the field called `name`, or `None` when there is no such field.
    pub fn field(&self, name: &str) -> Option<u32> {
        field_by_name(name).map(|f| self.get(f))
    }

    /// Stores `value` into the field called `name`; `false` when there is no such field.
    pub fn set_field(&mut self, name: &str, value: u32) -> bool {
        match field_by_name(name) {
            Some(f) => {
                self.set(f, value);
                true
            }
            None => false,
        }
    }

    /// A 64-bit value split over two consecutive fields (lo, hi).
    pub fn get64(&self, lo: &FieldSpec, hi: &FieldSpec) -> u64 {
        u64::from(self.get(lo)) | (u64::from(self.get(hi)) << 32)
    }

    pub fn set64(&mut self, lo: &FieldSpec, hi: &FieldSpec, value: u64) {
        self.set(lo, value as u32);
        self.set(hi, (value >> 32) as u32);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_fit_in_their_word_and_names_are_unique() {
        for (i, f) in FIELDS.iter().enumerate() {
            assert!(f.width >= 1 && u32::from(f.shift) + u32::from(f.width) <= 32, "{f:?}");
            assert!((f.word as usize) < RECORD_WORDS, "{f:?}");
            assert!(FIELDS[..i].iter().all(|g| g.name != f.name), "duplicate {}", f.name);
        }
    }

    #[test]
    fn every_bit_of_the_record_is_described() {
        // No bit is described by no field at all (w5 bit 31 is covered for requests only).
        let mut covered = [0u32; RECORD_WORDS];
        for f in FIELDS {
            covered[f.word as usize] |= f.value_mask() << f.shift;
        }
        assert_eq!(covered, [u32::MAX; RECORD_WORDS]);
    }

    #[test]
    fn version_1_table_ends_where_version_2_begins() {
        assert_eq!(FIELDS[FIELDS_V1_LEN - 1].name, "gap_cycles");
        assert_eq!(FIELDS[FIELDS_V1_LEN].name, "vector");
        assert_eq!(fields_of_version(1).map(<[FieldSpec]>::len), Some(FIELDS_V1_LEN));
        assert!(fields_of_version(3).is_none());
    }

    #[test]
    fn raw_accessors_by_name_round_trip() {
        let mut raw = RawRecord::default();
        assert!(raw.set_field("tag", 0x1ab));
        assert_eq!(raw.field("tag"), Some(0xab));
        assert_eq!(raw.words[4], 0xab << 16);
        assert!(!raw.set_field("no_such_field", 1));
        assert_eq!(raw.field("no_such_field"), None);
        raw.set(&field::SPLIT_INDEX, 15);
        assert_eq!(raw.words[3] >> 28, 15);
        assert_eq!(RawRecord::from_bytes(&raw.to_bytes()), raw);
    }
}
