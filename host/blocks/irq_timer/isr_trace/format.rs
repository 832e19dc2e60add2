//! The tracepoint's `format` file and the raw records it describes: which bytes of an
//! `irq_handler_entry` sample hold the interrupt number and the handler's name. The offsets
//! are read from the running kernel's format, not assumed, because they moved between kernel
//! versions (the common header grew; `__rel_loc` strings came in 5.19).

use serde::Serialize;

use super::error::IsrTraceError;
use crate::DeviceError;

/// One `field:` line of a tracepoint's format file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct FormatField {
    /// C type as written (`int`, `unsigned short`, `__data_loc char[]`).
    pub type_name: String,
    pub name: String,
    pub offset: usize,
    pub size: usize,
    pub signed: bool,
}

/// A tracepoint's format file (`name:`, `ID:`, the fields of its raw record).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct TracepointFormat {
    pub name: String,
    pub id: Option<u64>,
    pub fields: Vec<FormatField>,
}

impl TracepointFormat {
    /// Parses the text of `events/<system>/<event>/format`.
    pub fn parse(text: &str) -> Result<TracepointFormat, DeviceError> {
        let bad = |line: &str, why: &str| DeviceError::from(IsrTraceError::FormatLine { line: line.to_string(), why: why.to_string() });
        let mut name = String::new();
        let mut id = None;
        let mut fields = Vec::new();
        for line in text.lines() {
            let t = line.trim();
            if let Some(n) = t.strip_prefix("name:") {
                name = n.trim().to_string();
            } else if let Some(v) = t.strip_prefix("ID:") {
                id = Some(v.trim().parse::<u64>().map_err(|_| bad(line, "the ID is not a number"))?);
            } else if let Some(rest) = t.strip_prefix("field:") {
                let mut decl = None;
                let (mut offset, mut size, mut signed) = (None, None, None);
                for (i, part) in rest.split(';').map(str::trim).filter(|p| !p.is_empty()).enumerate() {
                    if i == 0 {
                        decl = Some(part);
                        continue;
                    }
                    let (k, v) = part.split_once(':').ok_or_else(|| bad(line, "a property has no `:`"))?;
                    let n = v.trim().parse::<usize>().map_err(|_| bad(line, &format!("{k} is not a number")))?;
                    match k.trim() {
                        "offset" => offset = Some(n),
                        "size" => size = Some(n),
                        "signed" => signed = Some(n != 0),
                        _ => {}
                    }
                }
                let decl = decl.ok_or_else(|| bad(line, "no declaration"))?;
                let (type_name, field_name) = split_declaration(decl).ok_or_else(|| bad(line, "no field name"))?;
                fields.push(FormatField {
                    type_name,
                    name: field_name,
                    offset: offset.ok_or_else(|| bad(line, "no offset"))?,
                    size: size.ok_or_else(|| bad(line, "no size"))?,
                    signed: signed.unwrap_or(false),
                });
            }
        }
        if fields.is_empty() {
            return Err(IsrTraceError::FormatWithoutFields.into());
        }
        Ok(TracepointFormat { name, id, fields })
    }

    pub fn field(&self, name: &str) -> Option<&FormatField> {
        self.fields.iter().find(|f| f.name == name)
    }
}

/// `__data_loc char[] name` → ("__data_loc char[]", "name"); `char comm[16]` → ("char[16]", "comm").
fn split_declaration(decl: &str) -> Option<(String, String)> {
    let (ty, last) = decl.trim().rsplit_once(char::is_whitespace)?;
    let (name, array) = match last.find('[') {
        Some(i) => (&last[..i], &last[i..]),
        None => (last, ""),
    };
    if name.is_empty() {
        return None;
    }
    Some((format!("{}{array}", ty.trim()), name.to_string()))
}

/// Where the fields of an `irq_handler_entry` record are, from its format file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct IrqEntryLayout {
    /// The event id the record's `common_type` must hold, when known.
    pub event_id: Option<u64>,
    /// `common_type` (offset, size), when the format has it.
    pub common_type: Option<(usize, usize)>,
    /// `irq`: offset, size, signed.
    pub irq: (usize, usize, bool),
    /// `name`: offset of its `__data_loc` (true) or `__rel_loc` (false) word, when present.
    pub name: Option<(usize, bool)>,
}

impl IrqEntryLayout {
    /// Finds the fields in `format`; `irq` must be there.
    pub fn from_format(format: &TracepointFormat) -> Result<IrqEntryLayout, DeviceError> {
        let irq = format.field("irq").ok_or_else(|| {
            DeviceError::from(IsrTraceError::NoIrqField {
                event: format.name.clone(),
                fields: format.fields.iter().map(|f| f.name.as_str()).collect::<Vec<_>>().join(", "),
            })
        })?;
        if ![1, 2, 4, 8].contains(&irq.size) {
            return Err(IsrTraceError::IrqFieldSize(irq.size).into());
        }
        let common_type = format.field("common_type").filter(|f| [1, 2, 4, 8].contains(&f.size)).map(|f| (f.offset, f.size));
        let name = format.field("name").and_then(|f| {
            if f.size != 4 {
                None
            } else if f.type_name.starts_with("__data_loc") {
                Some((f.offset, true))
            } else if f.type_name.starts_with("__rel_loc") {
                Some((f.offset, false))
            } else {
                None
            }
        });
        Ok(IrqEntryLayout { event_id: format.id, common_type, irq: (irq.offset, irq.size, irq.signed), name })
    }
}

/// The fields of one `irq_handler_entry` record.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct DecodedIrqEntry {
    pub irq: u32,
    /// The handler's name (`vfio-msi[0](0000:01:00.0)`), when the record has it.
    pub name: Option<String>,
}

fn read_uint(raw: &[u8], offset: usize, size: usize) -> Option<u64> {
    let bytes = raw.get(offset..offset.checked_add(size)?)?;
    Some(match size {
        1 => u64::from(bytes[0]),
        2 => u64::from(u16::from_ne_bytes([bytes[0], bytes[1]])),
        4 => u64::from(u32::from_ne_bytes([bytes[0], bytes[1], bytes[2], bytes[3]])),
        8 => u64::from_ne_bytes(bytes.try_into().ok()?),
        _ => return None,
    })
}

/// Decodes the raw data of one tracepoint sample (PERF_SAMPLE_RAW) with `layout`.
pub fn decode_irq_entry(layout: &IrqEntryLayout, raw: &[u8]) -> Result<DecodedIrqEntry, DeviceError> {
    let short = |what: &'static str, end: usize| DeviceError::from(IsrTraceError::RawRecordTooShort { len: raw.len(), what, needs: end });
    if let (Some((off, size)), Some(id)) = (layout.common_type, layout.event_id) {
        let found = read_uint(raw, off, size).ok_or_else(|| short("common_type", off + size))?;
        if found != id {
            return Err(IsrTraceError::ForeignRecord { found, id }.into());
        }
    }
    let (off, size, signed) = layout.irq;
    let value = read_uint(raw, off, size).ok_or_else(|| short("irq", off + size))?;
    let sign_bit = (value >> (size * 8 - 1)) & 1 == 1;
    let negative = signed && sign_bit;
    if negative || value > u64::from(u32::MAX) {
        return Err(IsrTraceError::IrqValue(value).into());
    }
    let name = layout.name.and_then(|(loc_off, absolute)| {
        let loc = read_uint(raw, loc_off, 4)? as usize;
        let (start, len) = (loc & 0xFFFF, loc >> 16);
        let start = if absolute { start } else { loc_off + 4 + start };
        let bytes = raw.get(start..start.checked_add(len)?)?;
        let bytes = bytes.split(|b| *b == 0).next().unwrap_or(bytes);
        Some(String::from_utf8_lossy(bytes).into_owned())
    });
    Ok(DecodedIrqEntry { irq: value as u32, name })
}
#[cfg(test)]
mod tests {
    use super::super::testdata::{layout_6_18, raw_entry, FORMAT_6_18};
    use super::*;

    #[test]
    fn format_of_this_kernel_gives_irq_at_offset_8_and_the_name_loc() {
        let f = TracepointFormat::parse(FORMAT_6_18).expect("parses");
        assert_eq!((f.name.as_str(), f.id, f.fields.len()), ("irq_handler_entry", Some(225), 6));
        let irq = f.field("irq").expect("irq");
        assert_eq!((irq.type_name.as_str(), irq.offset, irq.size, irq.signed), ("int", 8, 4, true));
        assert_eq!(f.field("name").expect("name").type_name, "__data_loc char[]");
        let l = layout_6_18();
        assert_eq!((l.event_id, l.common_type, l.irq, l.name), (Some(225), Some((0, 2)), (8, 4, true), Some((12, true))));
    }

    #[test]
    fn a_format_with_irq_elsewhere_moves_the_offset_and_rel_loc_names_decode() {
        // A kernel whose common header is 16 bytes and that uses __rel_loc for strings.
        let text = "name: irq_handler_entry\nID: 31\nformat:\n\
            \tfield:unsigned short common_type;\toffset:0;\tsize:2;\tsigned:0;\n\
            \tfield:char pad[14];\toffset:2;\tsize:14;\tsigned:0;\n\
            \tfield:int irq;\toffset:16;\tsize:4;\tsigned:1;\n\
            \tfield:__rel_loc char[] name;\toffset:20;\tsize:4;\tsigned:0;\n";
        let f = TracepointFormat::parse(text).expect("parses");
        assert_eq!(f.field("pad").map(|p| p.type_name.as_str()), Some("char[14]"));
        let l = IrqEntryLayout::from_format(&f).expect("layout");
        assert_eq!((l.irq, l.name), ((16, 4, true), Some((20, false))));
        let mut raw = vec![0u8; 24];
        raw[..2].copy_from_slice(&31u16.to_ne_bytes());
        raw[16..20].copy_from_slice(&77i32.to_ne_bytes());
        // __rel_loc: offset relative to the end of the loc word (24), length 5.
        raw[20..24].copy_from_slice(&(5u32 << 16).to_ne_bytes());
        raw.extend_from_slice(b"eth0\0");
        let e = decode_irq_entry(&l, &raw).expect("decodes");
        assert_eq!((e.irq, e.name.as_deref()), (77, Some("eth0")));
        // With FORMAT_6_18's layout the same bytes are refused: common_type 31 is not 225.
        let err = decode_irq_entry(&layout_6_18(), &raw).expect_err("wrong event").to_string();
        assert!(err.contains("common_type 31") && err.contains("225"), "{err}");
    }

    #[test]
    fn malformed_formats_are_refused_with_the_line() {
        let e = TracepointFormat::parse("name: x\nID: 1\n").expect_err("no fields").to_string();
        assert!(e.contains("no `field:`"), "{e}");
        let e = TracepointFormat::parse("\tfield:int irq;\toffset:eight;\tsize:4;\tsigned:1;\n").expect_err("bad offset").to_string();
        assert!(e.contains("offset is not a number") && e.contains("eight"), "{e}");
        let e = TracepointFormat::parse("\tfield:int irq;\tsize:4;\tsigned:1;\n").expect_err("no offset").to_string();
        assert!(e.contains("no offset"), "{e}");
        let no_irq =
            TracepointFormat::parse("name: softirq_entry\n\tfield:unsigned int vec;\toffset:8;\tsize:4;\tsigned:0;\n").expect("parses");
        let e = IrqEntryLayout::from_format(&no_irq).expect_err("no irq").to_string();
        assert!(e.contains("no `irq` field") && e.contains("vec"), "{e}");
    }

    #[test]
    fn raw_records_decode_and_short_or_negative_ones_are_refused() {
        let l = layout_6_18();
        let raw = raw_entry(225, 45, "vfio-msi[0](0000:01:00.0)");
        let e = decode_irq_entry(&l, &raw).expect("decodes");
        assert_eq!((e.irq, e.name.as_deref()), (45, Some("vfio-msi[0](0000:01:00.0)")));
        let e = decode_irq_entry(&l, &raw[..10]).expect_err("short").to_string();
        assert!(e.contains("10 bytes") && e.contains("irq") && e.contains("needs 12"), "{e}");
        let e = decode_irq_entry(&l, &raw_entry(225, -3, "x")).expect_err("negative").to_string();
        assert!(e.contains("not an interrupt number"), "{e}");
        // A name location pointing outside the record gives no name, not a panic.
        let mut bad_loc = raw_entry(225, 9, "ab");
        bad_loc[12..16].copy_from_slice(&((200u32 << 16) | 16).to_ne_bytes());
        assert_eq!(decode_irq_entry(&l, &bad_loc).expect("irq still decodes"), DecodedIrqEntry { irq: 9, name: None });
    }
}
