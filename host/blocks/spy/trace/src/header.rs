//! The trace header: the fixed 20-byte prefix and the self-describing JSON after it
//! (traces/FORMAT.md, "File layout" and "Header JSON").

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::error::TraceError;
use crate::fields::{FieldDesc, RECORD_SIZE};

/// `TLPXTRC\0`.
pub const MAGIC: [u8; 8] = *b"TLPXTRC\0";
/// File format version this crate reads and writes.
pub const FILE_VERSION: u16 = 1;
/// Record format version this crate writes; it reads this one and [`OLDEST_RECORD_VERSION`]..
/// (version 2 = version 1 plus MSI and payload records and the footer's trigger sequence).
pub const RECORD_VERSION: u16 = 2;
/// The oldest record format version this crate reads.
pub const OLDEST_RECORD_VERSION: u16 = 1;
/// Bytes before the header JSON.
pub const PREFIX_LEN: u64 = 20;
/// Offset of the header JSON.
pub const JSON_OFFSET: u64 = PREFIX_LEN;
/// Largest header JSON a reader accepts; real headers are a few KiB.
pub const MAX_HEADER_JSON: u64 = 16 << 20;

/// The card that was captured.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CardInfo {
    /// Identification block's register map hash, e.g. `"0x1681c1fd"`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub map_hash: Option<String>,
    /// Datapath width in bits.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data_width: Option<u32>,
    /// Frequency of the card cycle counter that stamps the records (required, > 0).
    pub clock_hz: u64,
    /// PCI address, e.g. `"0000:01:00.0"`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pci_address: Option<String>,
    /// BAR0's bus address when captured, e.g. `"0xf0000000"`: the converters name the
    /// host's requests into BAR0 by register with it. Absent in traces written before it
    /// existed (their requests keep only the address).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bar0_address: Option<String>,
    /// BAR0 offset of tlpx's own register map, `"0x80000"` on a card whose slot DUT sits at
    /// BAR0 0 (absent: 0).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tlpx_map_offset: Option<String>,
    /// The accelerator in the card's slot (`slot.dut_name`): its window's accesses and the
    /// slot's tags are attributed to it by name (absent: the map's own, rule 30).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub slot_dut: Option<String>,
    /// The slot DUT's registers (name, offset in its window), when the capturing command knew
    /// them (`tlpx slot run --regs`): its window's accesses are then named `dut.register`
    /// rather than `dut+0x4`. Absent: by offset.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub slot_registers: Vec<SlotRegister>,
}

/// One register of the slot's DUT, for naming its window's accesses.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SlotRegister {
    pub name: String,
    /// Byte offset in the DUT's window.
    pub offset: u64,
    /// Width in bits (a register over 32 bits spans several DWs).
    pub size_bits: u32,
}

impl CardInfo {
    pub fn new(clock_hz: u64) -> Self {
        CardInfo {
            map_hash: None,
            data_width: None,
            clock_hz,
            pci_address: None,
            bar0_address: None,
            tlpx_map_offset: None,
            slot_dut: None,
            slot_registers: Vec::new(),
        }
    }
}

/// The negotiated link.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct LinkInfo {
    pub generation: u8,
    pub lanes: u8,
    /// Max Payload Size in bytes.
    pub mps: u16,
    /// Max Read Request Size in bytes.
    pub mrrs: u16,
}

/// How the spy was set up. Filters and trigger are kept as the capture command wrote
/// them (JSON objects), so this format does not change when they gain options.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct CaptureInfo {
    #[serde(default)]
    pub filters: Value,
    #[serde(default)]
    pub trigger: Value,
    #[serde(default)]
    pub include_own_traffic: bool,
}

/// What the capturing tool fills in; [`crate::TraceWriter`] adds the creation time and
/// the field table.
#[derive(Debug, Clone, PartialEq)]
pub struct HeaderInfo {
    /// Tool and version, e.g. `"tlpx 0.1.0"`.
    pub tool: String,
    pub card: CardInfo,
    /// Captured on the simulated card.
    pub simulated: bool,
    /// The clock that stamped the records: `"virtual"`, `"live"` or `"hardware"` (None: not
    /// said, as in traces written before it existed).
    pub time_mode: Option<String>,
    pub link: Option<LinkInfo>,
    pub capture: CaptureInfo,
}

impl HeaderInfo {
    pub fn new(tool: impl Into<String>, card: CardInfo) -> Self {
        HeaderInfo { tool: tool.into(), card, simulated: false, time_mode: None, link: None, capture: CaptureInfo::default() }
    }
}

/// The header JSON of a trace.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Header {
    #[serde(default)]
    pub tool: String,
    /// ISO 8601 UTC, e.g. `"2026-11-22T15:04:05Z"`.
    #[serde(default)]
    pub created_utc: String,
    pub card: CardInfo,
    #[serde(default)]
    pub simulated: bool,
    /// `"virtual"` (the simulator's deterministic time), `"live"` (the simulator ran in live
    /// time: not reproducible) or `"hardware"`; absent in older traces.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub time_mode: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub link: Option<LinkInfo>,
    #[serde(default)]
    pub capture: CaptureInfo,
    pub fields: Vec<FieldDesc>,
}

impl Header {
    /// A header for `info`, created now, with this version's field table.
    pub fn new(info: &HeaderInfo) -> Self {
        Header::with_time(info, utc_now())
    }

    /// Same, with a given creation time (reproducible output).
    pub fn with_time(info: &HeaderInfo, created_utc: String) -> Self {
        Header {
            tool: info.tool.clone(),
            created_utc,
            card: info.card.clone(),
            simulated: info.simulated,
            time_mode: info.time_mode.clone(),
            link: info.link,
            capture: info.capture.clone(),
            fields: crate::fields::field_table(),
        }
    }

    pub fn clock_hz(&self) -> u64 {
        self.card.clock_hz
    }

    /// The header as JSON text.
    pub fn to_json(&self) -> String {
        // Serializing plain structs and `Value`s cannot fail.
        serde_json::to_string_pretty(self).unwrap_or_default()
    }

    /// Parses and validates header JSON found at [`JSON_OFFSET`]: required keys present
    /// and well-typed, field table equal to this version's.
    pub fn parse(json: &[u8]) -> Result<(Header, Value), TraceError> {
        Header::parse_version(json, RECORD_VERSION)
    }

    /// [`Header::parse`] for a trace of record format `version` (its field table is that
    /// version's).
    pub fn parse_version(json: &[u8], version: u16) -> Result<(Header, Value), TraceError> {
        let offset = JSON_OFFSET;
        let value: Value = serde_json::from_slice(json)
            .map_err(|e| TraceError::HeaderJson { offset, message: format!("{e} (JSON line {}, column {})", e.line(), e.column()) })?;
        let Value::Object(top) = &value else {
            return Err(key_error("(top level)", "is not an object", "a JSON object"));
        };

        let card_value = top
            .get("card")
            .ok_or_else(|| key_error("card.clock_hz", "is missing", "an object `card` with `clock_hz`, the card clock in Hz"))?;
        let clock = card_value
            .get("clock_hz")
            .ok_or_else(|| key_error("card.clock_hz", "is missing", "a positive integer, the card clock in Hz"))?;
        match clock.as_u64() {
            Some(hz) if hz > 0 => {}
            _ => return Err(key_error("card.clock_hz", &format!("is {clock}"), "a positive integer, the card clock in Hz")),
        }
        let card: CardInfo = typed(
            card_value,
            "card",
            "an object with clock_hz, map_hash, data_width, pci_address, bar0_address, tlpx_map_offset, slot_dut, slot_registers ([{name, offset, size_bits}])",
        )?;
        if let Some(text) = &card.bar0_address {
            if crate::names::parse_address(text).is_none() {
                return Err(key_error("card.bar0_address", &format!("is {text:?}"), "BAR0's bus address as a 0x hex string"));
            }
        }
        if let Some(text) = &card.tlpx_map_offset {
            if crate::names::parse_address(text).is_none() {
                return Err(key_error("card.tlpx_map_offset", &format!("is {text:?}"), "a BAR0 offset as a 0x hex string"));
            }
        }

        let fields_value = top.get("fields").ok_or_else(|| {
            key_error("fields", "is missing", "an array of {name, word, shift, width, description} describing the record")
        })?;
        let fields: Vec<FieldDesc> =
            typed(fields_value, "fields", "an array of {name, word, shift, width, description} describing the record")?;
        check_field_table(&fields, version)?;

        let header = Header {
            tool: optional(top, "tool", "a string")?.unwrap_or_default(),
            created_utc: optional(top, "created_utc", "an ISO 8601 UTC time string")?.unwrap_or_default(),
            card,
            simulated: optional(top, "simulated", "true or false")?.unwrap_or_default(),
            time_mode: optional(top, "time_mode", "\"virtual\", \"live\" or \"hardware\"")?,
            link: optional(top, "link", "an object with generation, lanes, mps, mrrs")?,
            capture: optional(top, "capture", "an object with filters, trigger, include_own_traffic")?.unwrap_or_default(),
            fields,
        };
        Ok((header, value))
    }
}

fn key_error(key: &str, problem: &str, expected: &str) -> TraceError {
    TraceError::HeaderKey { offset: JSON_OFFSET, key: key.to_owned(), problem: problem.to_owned(), expected: expected.to_owned() }
}

fn typed<T: DeserializeOwned>(value: &Value, key: &str, expected: &str) -> Result<T, TraceError> {
    T::deserialize(value).map_err(|e| key_error(key, &format!("is invalid ({e})"), expected))
}

fn optional<T: DeserializeOwned>(top: &serde_json::Map<String, Value>, key: &str, expected: &str) -> Result<Option<T>, TraceError> {
    match top.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(v) => typed(v, key, expected).map(Some),
    }
}

fn check_field_table(fields: &[FieldDesc], version: u16) -> Result<(), TraceError> {
    let mismatch = |detail: String| TraceError::FieldTableMismatch { offset: JSON_OFFSET, version, detail };
    let expected = crate::fields::fields_of_version(version).ok_or_else(|| mismatch("no such record format version".into()))?;
    for (i, spec) in expected.iter().enumerate() {
        let Some(found) = fields.get(i) else {
            return Err(mismatch(format!(
                "the table has {} fields, expected {} (field #{i} `{}` is missing)",
                fields.len(),
                expected.len(),
                spec.name
            )));
        };
        if !found.same_layout(spec) {
            return Err(mismatch(format!(
                "field #{i} is `{}` at word {} shift {} width {}, expected `{}` at word {} shift {} width {}",
                found.name, found.word, found.shift, found.width, spec.name, spec.word, spec.shift, spec.width
            )));
        }
    }
    if fields.len() > expected.len() {
        return Err(mismatch(format!(
            "the table has {} fields, expected {} (`{}` is unknown)",
            fields.len(),
            expected.len(),
            fields[expected.len()].name
        )));
    }
    Ok(())
}

/// The fixed part before the header JSON.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Prefix {
    pub json_len: u32,
    /// Record format version (1 or 2); writers write [`RECORD_VERSION`].
    pub record_version: u16,
}

impl Prefix {
    pub fn to_bytes(&self) -> [u8; PREFIX_LEN as usize] {
        let mut b = [0u8; PREFIX_LEN as usize];
        b[0..8].copy_from_slice(&MAGIC);
        b[8..10].copy_from_slice(&FILE_VERSION.to_le_bytes());
        b[10..12].copy_from_slice(&(RECORD_SIZE as u16).to_le_bytes());
        b[12..14].copy_from_slice(&self.record_version.to_le_bytes());
        b[16..20].copy_from_slice(&self.json_len.to_le_bytes());
        b
    }

    /// Validates the prefix, in file order, so the first wrong byte is the one reported.
    pub fn parse(b: &[u8; PREFIX_LEN as usize]) -> Result<Prefix, TraceError> {
        let u16_at = |i: usize| u16::from_le_bytes([b[i], b[i + 1]]);
        let mut magic = [0u8; 8];
        magic.copy_from_slice(&b[0..8]);
        if magic != MAGIC {
            return Err(TraceError::BadMagic { found: magic });
        }
        let file_version = u16_at(8);
        if file_version != FILE_VERSION {
            return Err(TraceError::UnsupportedFileVersion { found: file_version });
        }
        let record_size = u16_at(10);
        if usize::from(record_size) != RECORD_SIZE {
            return Err(TraceError::WrongRecordSize { found: record_size });
        }
        let record_version = u16_at(12);
        if !(OLDEST_RECORD_VERSION..=RECORD_VERSION).contains(&record_version) {
            return Err(TraceError::UnsupportedRecordVersion { found: record_version });
        }
        let reserved = u16_at(14);
        if reserved != 0 {
            return Err(TraceError::ReservedHeaderField { found: reserved });
        }
        Ok(Prefix { json_len: u32::from_le_bytes([b[16], b[17], b[18], b[19]]), record_version })
    }

    /// Offset of the first record.
    pub fn records_start(&self) -> u64 {
        let end = PREFIX_LEN + u64::from(self.json_len);
        end.div_ceil(RECORD_SIZE as u64) * RECORD_SIZE as u64
    }
}

/// Now, as `YYYY-MM-DDTHH:MM:SSZ`.
pub fn utc_now() -> String {
    let secs = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0);
    utc_from_unix(secs)
}

/// Formats Unix seconds as `YYYY-MM-DDTHH:MM:SSZ` (proleptic Gregorian calendar).
pub fn utc_from_unix(secs: u64) -> String {
    let days = (secs / 86_400) as i64;
    let rem = secs % 86_400;
    // Civil-from-days, Howard Hinnant's algorithm.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!("{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z", rem / 3600, rem / 60 % 60, rem % 60)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn utc_formatting_known_dates() {
        assert_eq!(utc_from_unix(0), "1970-01-01T00:00:00Z");
        assert_eq!(utc_from_unix(951_782_400), "2000-02-29T00:00:00Z");
        assert_eq!(utc_from_unix(1_795_359_845), "2026-11-22T15:04:05Z");
    }

    #[test]
    fn header_json_round_trips() {
        let mut info = HeaderInfo::new("tlpx 0.1.0", CardInfo::new(125_000_000));
        info.link = Some(LinkInfo { generation: 2, lanes: 4, mps: 256, mrrs: 512 });
        let h = Header::with_time(&info, "2026-11-22T15:04:05Z".into());
        let (back, _) = Header::parse(h.to_json().as_bytes()).expect("valid header");
        assert_eq!(back, h);
    }
}
