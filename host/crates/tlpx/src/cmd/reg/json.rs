//! What `tlpx reg --json` prints, one type per shape.
//!
//! Every struct lists its fields in alphabetical order: the output was written through
//! `serde_json::Value` objects before, whose keys come out sorted, and it stays the same byte
//! for byte.

use serde::Serialize;

use crate::regmap::{Access, RegDef};

/// A field of a register read (`reg read`, `reg dump`'s fields).
#[derive(Debug, Serialize)]
pub(super) struct FieldValue<'a> {
    pub name: &'a str,
    pub shift: u32,
    pub value: u64,
    pub value_name: Option<&'a str>,
    pub width: u32,
}

impl<'a> FieldValue<'a> {
    /// Every field of `reg` in `value`.
    pub fn all(reg: &'a RegDef, value: u64) -> Vec<FieldValue<'a>> {
        reg.fields
            .iter()
            .map(|f| {
                let v = f.get(value);
                FieldValue { name: &f.name, shift: f.shift, value: v, value_name: f.value_name(v), width: f.width }
            })
            .collect()
    }
}

/// A register of `reg list`, with its fields and their value names.
#[derive(Debug, Serialize)]
pub(super) struct RegisterListing<'a> {
    pub access: &'static str,
    pub bar0_offset: u64,
    pub bits: u32,
    pub description: &'a str,
    pub fields: Vec<FieldListing<'a>>,
    pub name: String,
    pub offset: u64,
    pub writable: bool,
}

impl<'a> RegisterListing<'a> {
    /// `r` as listed, at `bar0_offset` as the host sees it.
    pub fn of(r: &'a RegDef, bar0_offset: u64) -> RegisterListing<'a> {
        RegisterListing {
            access: r.access.name(),
            bar0_offset,
            bits: r.size_bits,
            description: &r.description,
            fields: r
                .fields
                .iter()
                .map(|f| FieldListing {
                    description: &f.description,
                    name: &f.name,
                    shift: f.shift,
                    values: f.values.iter().map(|(name, value)| NamedValue { name, value: *value }).collect(),
                    width: f.width,
                })
                .collect(),
            name: r.full_name(),
            offset: r.offset,
            writable: r.access != Access::Ro,
        }
    }
}

#[derive(Debug, Serialize)]
pub(super) struct FieldListing<'a> {
    pub description: &'a str,
    pub name: &'a str,
    pub shift: u32,
    pub values: Vec<NamedValue<'a>>,
    pub width: u32,
}

/// A value name of a field.
#[derive(Debug, Serialize)]
pub(super) struct NamedValue<'a> {
    pub name: &'a str,
    pub value: u64,
}

/// A register of `reg dump`: its value in hex, or null and what reading it would do.
#[derive(Debug, Serialize)]
pub(super) struct DumpRow<'a> {
    pub name: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub not_read: Option<&'a str>,
    pub offset: u64,
    pub value: Option<&'a str>,
}

/// One field read (`reg read REGION.REGISTER.FIELD`).
#[derive(Debug, Serialize)]
pub(super) struct FieldRead<'a> {
    pub name: String,
    pub offset: u64,
    pub register: String,
    pub shift: u32,
    pub value: u64,
    pub value_name: Option<&'a str>,
    pub width: u32,
}

/// One register read: its value (null when wider than 64 bits), in hex, and its fields.
#[derive(Debug, Serialize)]
pub(super) struct RegisterRead<'a> {
    pub bits: u32,
    pub fields: Vec<FieldValue<'a>>,
    pub hex: String,
    pub name: String,
    pub offset: u64,
    pub value: Option<u64>,
}

/// A write: the register's (or for a field, the field's value, the register before and
/// after), and the leases held for it.
#[derive(Debug, Default, Serialize)]
pub(super) struct WriteReport {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub before: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub field_value: Option<u64>,
    pub leases_held: Vec<&'static str>,
    pub name: String,
    pub notes: Vec<String>,
    pub offset: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub register: Option<String>,
    pub written: u64,
}

/// A change `reg watch --json` saw, one a line.
#[derive(Debug, Serialize)]
pub(super) struct WatchChange<'a> {
    pub card_cycles: u64,
    pub card_seconds: f64,
    pub fields_changed: &'a [String],
    pub name: String,
    pub previous: Option<Option<u64>>,
    pub text: &'a str,
    pub value: Option<u64>,
    pub wall_utc: &'a str,
}
