//! Reading result documents: the schema version, and a deserializer that names the field a
//! document lacks.
//!
//! The writers name what they record from fixed tables (`"operation": "read"`, a clock, a
//! statement) as `&'static str`, so their derived `Deserialize` needs input that lives for
//! the whole program. [`from_value`] is that input: a deserializer over a parsed JSON value
//! that hands every string out interned (each distinct string is kept once, for the rest of
//! the process; a document holds a few hundred distinct strings at most, its numbers are not
//! strings). It also keeps the path of every value it hands out, so a document that lacks a
//! field is refused with that field's path ("field points[0].samples_cycles is missing"),
//! not with a bare serde message.

use std::collections::HashSet;
use std::fmt;
use std::rc::Rc;
use std::sync::{Mutex, OnceLock};

use serde::de::{self, DeserializeSeed, Visitor};
use serde::Deserialize;
use serde_json::{Map, Value};

use crate::{SCHEMA, SCHEMA_VERSION};

/// The schema versions this tlpx reads (it writes [`SCHEMA_VERSION`]).
pub const READ_VERSIONS: &[u32] = &[SCHEMA_VERSION];

/// The versions read, as a sentence's end: "version 1", "versions 1, 2".
fn versions_text() -> String {
    let list: Vec<String> = READ_VERSIONS.iter().map(ToString::to_string).collect();
    format!("{} {}", if list.len() == 1 { "version" } else { "versions" }, list.join(", "))
}

/// Checks that `v` is a tlpx result of a schema version this tlpx reads; the error says the
/// version found and the versions accepted (the caller names the file).
pub fn check_version(v: &Value) -> Result<(), String> {
    if v.get("schema").and_then(Value::as_str) != Some(SCHEMA) {
        let found = v.get("schema").map_or("no \"schema\" field".to_string(), |s| format!("\"schema\" is {s}"));
        return Err(format!("not a tlpx result ({found}, expected \"{SCHEMA}\")"));
    }
    match v.get("schema_version") {
        None => Err(format!("a tlpx result without \"schema_version\"; this tlpx reads {}", versions_text())),
        Some(found) if found.as_u64().is_some_and(|n| READ_VERSIONS.iter().any(|&r| u64::from(r) == n)) => Ok(()),
        Some(found) => Err(format!("\"schema_version\" is {found}; this tlpx reads {}", versions_text())),
    }
}

// Interned strings -------------------------------------------------------------------------

/// The one copy of `s` kept for the rest of the process.
fn intern(s: &str) -> &'static str {
    static TABLE: OnceLock<Mutex<HashSet<&'static str>>> = OnceLock::new();
    let mut table = TABLE.get_or_init(Default::default).lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    if let Some(&kept) = table.get(s) {
        return kept;
    }
    let kept: &'static str = Box::leak(s.to_owned().into_boxed_str());
    table.insert(kept);
    kept
}

// Errors with the field's path -------------------------------------------------------------

/// Why a value could not be read, at which field.
#[derive(Debug, Clone, PartialEq)]
pub struct ReadError {
    /// Where: "points[2].latency_ns" ("" for the document itself); set where the error arose.
    path: Option<String>,
    what: Problem,
}

#[derive(Debug, Clone, PartialEq)]
enum Problem {
    Missing(String),
    Other(String),
}

impl ReadError {
    /// The error with the path of the value being read, unless a deeper one is set already.
    fn at(mut self, path: &FieldPath) -> ReadError {
        if self.path.is_none() {
            self.path = Some(path.to_string());
        }
        self
    }
}

impl fmt::Display for ReadError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let path = self.path.as_deref().unwrap_or_default();
        match (&self.what, path) {
            (Problem::Missing(field), "") => write!(f, "field {field} is missing"),
            (Problem::Missing(field), p) => write!(f, "field {p}.{field} is missing"),
            (Problem::Other(msg), "") => f.write_str(msg),
            (Problem::Other(msg), p) => write!(f, "field {p}: {msg}"),
        }
    }
}

impl std::error::Error for ReadError {}

impl de::Error for ReadError {
    fn custom<T: fmt::Display>(msg: T) -> Self {
        ReadError { path: None, what: Problem::Other(msg.to_string()) }
    }
    fn missing_field(field: &'static str) -> Self {
        ReadError { path: None, what: Problem::Missing(field.to_string()) }
    }
}

/// The path of a value in the document, built only when an error needs it.
#[derive(Clone)]
enum FieldPath {
    Root,
    Key(Rc<FieldPath>, &'static str),
    Index(Rc<FieldPath>, usize),
}

impl fmt::Display for FieldPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FieldPath::Root => Ok(()),
            FieldPath::Key(parent, k) if matches!(**parent, FieldPath::Root) => f.write_str(k),
            FieldPath::Key(parent, k) => write!(f, "{parent}.{k}"),
            FieldPath::Index(parent, i) => write!(f, "{parent}[{i}]"),
        }
    }
}

// The deserializer -------------------------------------------------------------------------

/// Reads `value` into `T`, strings interned; errors carry the field's path.
pub fn from_value<T: Deserialize<'static>>(value: Value) -> Result<T, ReadError> {
    T::deserialize(ValueDe { value, path: Rc::new(FieldPath::Root) })
}

struct ValueDe {
    value: Value,
    path: Rc<FieldPath>,
}

impl<'de> de::Deserializer<'de> for ValueDe
where
    'de: 'static,
{
    type Error = ReadError;

    fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, ReadError> {
        let path = self.path.clone();
        let out = match self.value {
            Value::Null => visitor.visit_unit(),
            Value::Bool(b) => visitor.visit_bool(b),
            Value::Number(ref n) => {
                if let Some(u) = n.as_u64() {
                    visitor.visit_u64(u)
                } else if let Some(i) = n.as_i64() {
                    visitor.visit_i64(i)
                } else {
                    visitor.visit_f64(n.as_f64().unwrap_or(f64::NAN))
                }
            }
            Value::String(ref s) => visitor.visit_borrowed_str(intern(s)),
            Value::Array(items) => {
                let len = items.len();
                let mut seq = SeqDe { items: items.into_iter().enumerate(), parent: path.clone() };
                let v = visitor.visit_seq(&mut seq)?;
                match seq.items.len() {
                    0 => Ok(v),
                    left => Err(de::Error::invalid_length(len - left, &"fewer elements")),
                }
            }
            Value::Object(map) => visitor.visit_map(MapDe { entries: map.into_iter(), value: None, parent: path.clone() }),
        };
        out.map_err(|e| e.at(&path))
    }

    fn deserialize_option<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, ReadError> {
        match self.value {
            Value::Null => visitor.visit_none(),
            _ => visitor.visit_some(self),
        }
    }

    fn deserialize_newtype_struct<V: Visitor<'de>>(self, _name: &'static str, visitor: V) -> Result<V::Value, ReadError> {
        visitor.visit_newtype_struct(self)
    }

    fn deserialize_enum<V: Visitor<'de>>(
        self,
        _name: &'static str,
        _variants: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, ReadError> {
        let path = self.path.clone();
        let out = match self.value {
            // A unit variant: "read".
            Value::String(ref s) => visitor.visit_enum(de::value::BorrowedStrDeserializer::new(intern(s))),
            // A variant with data: {"samples": 50}.
            Value::Object(map) if map.len() == 1 => {
                let Some((variant, value)) = map.into_iter().next() else { unreachable!("one entry") };
                let variant = intern(&variant);
                let content = ValueDe { value, path: Rc::new(FieldPath::Key(path.clone(), variant)) };
                visitor.visit_enum(EnumDe { variant, content })
            }
            ref other => Err(de::Error::invalid_type(unexpected(other), &"a variant name or an object of one entry")),
        };
        out.map_err(|e| e.at(&path))
    }

    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes byte_buf unit unit_struct seq tuple
        tuple_struct map struct identifier ignored_any
    }
}

fn unexpected(v: &Value) -> de::Unexpected<'_> {
    match v {
        Value::Null => de::Unexpected::Unit,
        Value::Bool(b) => de::Unexpected::Bool(*b),
        Value::Number(n) => n.as_f64().map_or(de::Unexpected::Other("a number"), de::Unexpected::Float),
        Value::String(s) => de::Unexpected::Str(s),
        Value::Array(_) => de::Unexpected::Seq,
        Value::Object(_) => de::Unexpected::Map,
    }
}

struct SeqDe {
    items: std::iter::Enumerate<std::vec::IntoIter<Value>>,
    parent: Rc<FieldPath>,
}

impl<'de> de::SeqAccess<'de> for SeqDe
where
    'de: 'static,
{
    type Error = ReadError;

    fn next_element_seed<T: DeserializeSeed<'de>>(&mut self, seed: T) -> Result<Option<T::Value>, ReadError> {
        match self.items.next() {
            Some((i, value)) => {
                let de = ValueDe { value, path: Rc::new(FieldPath::Index(self.parent.clone(), i)) };
                seed.deserialize(de).map(Some)
            }
            None => Ok(None),
        }
    }

    fn size_hint(&self) -> Option<usize> {
        Some(self.items.len())
    }
}

struct MapDe {
    entries: <Map<String, Value> as IntoIterator>::IntoIter,
    /// The value of the key handed out last, with its path.
    value: Option<ValueDe>,
    parent: Rc<FieldPath>,
}

impl<'de> de::MapAccess<'de> for MapDe
where
    'de: 'static,
{
    type Error = ReadError;

    fn next_key_seed<K: DeserializeSeed<'de>>(&mut self, seed: K) -> Result<Option<K::Value>, ReadError> {
        match self.entries.next() {
            Some((key, value)) => {
                let key = intern(&key);
                self.value = Some(ValueDe { value, path: Rc::new(FieldPath::Key(self.parent.clone(), key)) });
                seed.deserialize(de::value::BorrowedStrDeserializer::new(key)).map(Some)
            }
            None => Ok(None),
        }
    }

    fn next_value_seed<V: DeserializeSeed<'de>>(&mut self, seed: V) -> Result<V::Value, ReadError> {
        match self.value.take() {
            Some(de) => seed.deserialize(de),
            None => Err(de::Error::custom("a map value asked for before its key")),
        }
    }

    fn size_hint(&self) -> Option<usize> {
        Some(self.entries.len())
    }
}

struct EnumDe {
    variant: &'static str,
    content: ValueDe,
}

impl<'de> de::EnumAccess<'de> for EnumDe
where
    'de: 'static,
{
    type Error = ReadError;
    type Variant = ValueDe;

    fn variant_seed<V: DeserializeSeed<'de>>(self, seed: V) -> Result<(V::Value, ValueDe), ReadError> {
        let name = de::value::BorrowedStrDeserializer::<ReadError>::new(self.variant);
        Ok((seed.deserialize(name)?, self.content))
    }
}

impl<'de> de::VariantAccess<'de> for ValueDe
where
    'de: 'static,
{
    type Error = ReadError;

    fn unit_variant(self) -> Result<(), ReadError> {
        Deserialize::deserialize(self)
    }
    fn newtype_variant_seed<T: DeserializeSeed<'de>>(self, seed: T) -> Result<T::Value, ReadError> {
        seed.deserialize(self)
    }
    fn tuple_variant<V: Visitor<'de>>(self, _len: usize, visitor: V) -> Result<V::Value, ReadError> {
        de::Deserializer::deserialize_any(self, visitor)
    }
    fn struct_variant<V: Visitor<'de>>(self, _fields: &'static [&'static str], visitor: V) -> Result<V::Value, ReadError> {
        de::Deserializer::deserialize_any(self, visitor)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[derive(Debug, PartialEq, Deserialize)]
    struct Point {
        operation: &'static str,
        size: u32,
        latency: Option<f64>,
        tags: Vec<String>,
        amount: Amount,
    }

    #[derive(Debug, PartialEq, Deserialize)]
    #[serde(rename_all = "snake_case")]
    enum Amount {
        Samples(u32),
        Seconds(f64),
        Forever,
    }

    #[derive(Debug, PartialEq, Deserialize)]
    #[serde(bound(deserialize = "'de: 'static"))]
    struct Doc {
        points: Vec<Point>,
        #[serde(flatten)]
        rest: Rest,
    }

    #[derive(Debug, PartialEq, Deserialize)]
    struct Rest {
        clock: &'static str,
    }

    #[test]
    fn static_strings_enums_options_and_flatten_are_read() {
        let v = json!({
            "clock": "card time",
            "points": [
                {"operation": "read", "size": 64, "latency": null, "tags": ["a \"quoted\" tag"], "amount": {"samples": 50}},
                {"operation": "read", "size": 128, "latency": 2.5, "tags": [], "amount": "forever"},
            ]
        });
        let d: Doc = from_value(v).expect("read");
        assert_eq!(d.rest.clock, "card time");
        assert_eq!(d.points[0].amount, Amount::Samples(50));
        assert_eq!(d.points[1].amount, Amount::Forever);
        assert_eq!(d.points[0].tags, vec!["a \"quoted\" tag".to_string()]);
        assert_eq!(d.points[1].latency, Some(2.5));
        // One copy of each distinct string.
        assert!(std::ptr::eq(d.points[0].operation, d.points[1].operation));
        let _ = Amount::Seconds(1.0);
    }

    #[test]
    fn errors_name_the_field() {
        let v = json!({"clock": "c", "points": [{"operation": "read", "size": 64, "tags": [], "amount": "forever"},
                                                {"operation": "read", "tags": [], "amount": "forever"}]});
        let e = from_value::<Doc>(v).expect_err("no size");
        assert_eq!(e.to_string(), "field points[1].size is missing");
        let v = json!({"clock": "c", "points": [{"operation": "read", "size": "big", "tags": [], "amount": "forever"}]});
        let e = from_value::<Doc>(v).expect_err("a string size");
        assert!(e.to_string().starts_with("field points[0].size: invalid type: string \"big\""), "{e}");
        let v = json!({"clock": "c", "points": [{"operation": "read", "size": 1, "tags": [], "amount": {"hours": 2}}]});
        let e = from_value::<Doc>(v).expect_err("an unknown variant");
        assert!(e.to_string().contains("points[0].amount") && e.to_string().contains("hours"), "{e}");
        let e = from_value::<Doc>(json!({"points": []})).expect_err("no clock");
        assert_eq!(e.to_string(), "field clock is missing");
    }

    #[test]
    fn versions_are_checked_with_what_is_read() {
        let doc = |v: Value| json!({"schema": "tlpx-result", "schema_version": v, "kind": "bw"});
        assert_eq!(check_version(&doc(json!(SCHEMA_VERSION))), Ok(()));
        let e = check_version(&doc(json!(SCHEMA_VERSION + 1))).expect_err("newer");
        assert_eq!(e, format!("\"schema_version\" is {}; this tlpx reads version {SCHEMA_VERSION}", SCHEMA_VERSION + 1));
        let e = check_version(&doc(json!("1"))).expect_err("a string");
        assert!(e.contains("\"schema_version\" is \"1\""), "{e}");
        let mut missing = doc(Value::Null);
        missing.as_object_mut().expect("object").remove("schema_version");
        let e = check_version(&missing).expect_err("missing");
        assert_eq!(e, format!("a tlpx result without \"schema_version\"; this tlpx reads version {SCHEMA_VERSION}"));
        let e = check_version(&json!({"name": "left-pad"})).expect_err("not a result");
        assert!(e.contains("no \"schema\" field"), "{e}");
    }
}
