//! A card build's csr.json, typed: the file `make gateware` writes beside each card
//! (build/card/<name>/csr.json) and gen_regs.py generated this crate from. Tools read it for
//! what this crate cannot hold: the regions of the accelerator a particular card carries in its
//! slot (`tlpx reg --regs`, `tlpx slot run --regs`).
//!
//! Hand-written (the rest of the crate is generated): the format is gateware/tlpx_gateware/soc.py's
//! `csr_json`, version [`crate::CSR_FORMAT_VERSION`]. Fields a reader has no use for are not
//! declared (serde skips them), so a newer build's extra keys do not break an older reader.

use serde::Deserialize;

/// The document.
#[derive(Debug, Clone, Deserialize)]
pub struct CsrJson {
    /// The map hash soc.py computed over the card-owned regions (`ident.map_hash`), "0x..." text.
    #[serde(default)]
    pub map_hash: Option<String>,
    /// The accelerator in the slot, when the build says.
    #[serde(default)]
    pub dut: Option<Dut>,
    pub regions: Vec<Region>,
}

/// The accelerator a card build carries in its slot.
#[derive(Debug, Clone, Deserialize)]
pub struct Dut {
    #[serde(default)]
    pub name: Option<String>,
    /// Where the slot's window sits in BAR0: `window` or `bar0`.
    #[serde(default)]
    pub placement: Option<String>,
}

/// One region: a block's registers (or the accelerator's, `owner: "dut"`).
#[derive(Debug, Clone, Deserialize)]
pub struct Region {
    pub name: String,
    pub offset: u64,
    /// `dut` for a region the accelerator in the slot owns; absent for the card's own.
    #[serde(default)]
    pub owner: Option<String>,
    pub registers: Vec<RegisterEntry>,
}

impl Region {
    /// A region of the accelerator in the slot (not covered by the card's map hash).
    pub fn is_dut(&self) -> bool {
        self.owner.as_deref() == Some("dut")
    }
}

/// One register of a region.
#[derive(Debug, Clone, Deserialize)]
pub struct RegisterEntry {
    pub name: String,
    /// BAR0 offset in bytes.
    pub offset: u64,
    pub size_bits: u64,
    /// `ro`, `rw` or `wo`.
    pub access: String,
    #[serde(default)]
    pub description: String,
    #[serde(default)]
    pub fields: Vec<FieldEntry>,
}

/// One bit field of a register.
#[derive(Debug, Clone, Deserialize)]
pub struct FieldEntry {
    pub name: String,
    /// Position of the field's lowest bit.
    pub offset: u64,
    /// Width in bits.
    pub size: u64,
    /// `wo` marks a field that acts on a write (start, stop, clear) in a writable register.
    #[serde(default)]
    pub access: Option<String>,
    #[serde(default)]
    pub description: String,
    /// Named values as LiteX writes them: `[value, name]` or `[value, name, description]`,
    /// the value as text (decimal or 0x hex).
    #[serde(default)]
    pub values: Vec<Vec<String>>,
}

impl FieldEntry {
    /// The named values as (name, value); an entry whose value is not a number is an error
    /// naming it.
    pub fn named_values(&self) -> Result<Vec<(String, u64)>, String> {
        self.values
            .iter()
            .map(|entry| match entry.as_slice() {
                [value, name, ..] => parse_int(value)
                    .map(|v| (name.clone(), v))
                    .ok_or_else(|| format!("field {}: value {value:?} of {name:?} is not a number", self.name)),
                other => Err(format!("field {}: a named value is {other:?}, not [value, name, description]", self.name)),
            })
            .collect()
    }
}

/// A number as Python's `int(text, 0)` reads the values LiteX writes: decimal, 0x, 0o, 0b.
fn parse_int(text: &str) -> Option<u64> {
    let t = text.trim();
    let (digits, radix) = match t.get(..2).map(str::to_ascii_lowercase).as_deref() {
        Some("0x") => (&t[2..], 16),
        Some("0o") => (&t[2..], 8),
        Some("0b") => (&t[2..], 2),
        _ => (t, 10),
    };
    u64::from_str_radix(&digits.replace('_', ""), radix).ok()
}

/// The register map hash of csr.json regions, as the gateware computes it (soc.py `map_hash`):
/// 32-bit FNV-1a over the compact JSON (Python's `json.dumps(separators=(",", ":"))`) of
/// `[[region, offset, [[register, offset, size_bits, access, [[field, offset, size]...]]...]]...]`.
/// The one Rust implementation: `--regs` compares it with `slot.dut_map_hash`.
pub fn map_hash<'a>(regions: impl IntoIterator<Item = &'a Region>) -> u32 {
    let mut text = String::from("[");
    for (i, r) in regions.into_iter().enumerate() {
        text += if i > 0 { ",[" } else { "[" };
        text += &format!("{},{},[", json_string(&r.name), r.offset);
        for (j, g) in r.registers.iter().enumerate() {
            text += if j > 0 { ",[" } else { "[" };
            text += &format!("{},{},{},{},[", json_string(&g.name), g.offset, g.size_bits, json_string(&g.access));
            for (k, f) in g.fields.iter().enumerate() {
                text += &format!("{}[{},{},{}]", if k > 0 { "," } else { "" }, json_string(&f.name), f.offset, f.size);
            }
            text += "]]";
        }
        text += "]]";
    }
    text += "]";
    fnv1a(text.as_bytes())
}

/// A JSON string as Python's json.dumps writes it (ensure_ascii: non-ASCII as \u escapes).
fn json_string(s: &str) -> String {
    let mut out = String::from("\"");
    for c in s.chars() {
        match c {
            '"' => out += "\\\"",
            '\\' => out += "\\\\",
            '\n' => out += "\\n",
            '\r' => out += "\\r",
            '\t' => out += "\\t",
            '\u{08}' => out += "\\b",
            '\u{0c}' => out += "\\f",
            c if (c as u32) < 0x20 || !c.is_ascii() => {
                let mut units = [0u16; 2];
                for u in c.encode_utf16(&mut units) {
                    out += &format!("\\u{u:04x}");
                }
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// 32-bit FNV-1a.
pub fn fnv1a(bytes: &[u8]) -> u32 {
    bytes.iter().fold(0x811C_9DC5u32, |h, b| (h ^ u32::from(*b)).wrapping_mul(0x0100_0193))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fnv1a_matches_the_reference_vectors() {
        // FNV-1a 32-bit test vectors (the FNV authors' table).
        assert_eq!(fnv1a(b""), 0x811c9dc5);
        assert_eq!(fnv1a(b"a"), 0xe40c292c);
        assert_eq!(fnv1a(b"foobar"), 0xbf9cf968);
    }

    #[test]
    fn strings_are_written_as_python_writes_them() {
        assert_eq!(json_string("a\"b\\c"), r#""a\"b\\c""#);
        assert_eq!(json_string("é\u{1}"), r#""\u00e9\u0001""#);
        assert_eq!(json_string("😀"), r#""\ud83d\ude00""#);
    }

    #[test]
    fn values_are_read_as_int_text_0() {
        assert_eq!(parse_int("0x1f"), Some(31));
        assert_eq!(parse_int("12"), Some(12));
        assert_eq!(parse_int("0b101"), Some(5));
        assert_eq!(parse_int("twelve"), None);
        let f = FieldEntry {
            name: "mode".into(),
            offset: 0,
            size: 2,
            access: None,
            description: String::new(),
            values: vec![vec!["0".into(), "off".into(), "nothing".into()], vec!["0x2".into(), "on".into()]],
        };
        assert_eq!(f.named_values(), Ok(vec![("off".into(), 0), ("on".into(), 2)]));
        let bad = FieldEntry { values: vec![vec!["x".into(), "off".into()]], ..f.clone() };
        assert!(bad.named_values().expect_err("not a number").contains("\"x\""));
        let short = FieldEntry { values: vec![vec!["1".into()]], ..f };
        assert!(short.named_values().is_err());
    }
}
