//! The register map `tlpx reg` works with at run time: the card's generated map (tlpx-regs,
//! with the fields and value names its build script extracts) plus, with `--regs FILE`, the
//! DUT-owned regions of a card build's csr.json (the accelerator's own registers).
//!
//! Names: `region.register` names a register, `region.register.field` one of its fields; a
//! register name alone is accepted when one region has it. Values are numbers (decimal or
//! `0x` hex) or, for a field with named values, the name.

use std::path::Path;

use anyhow::{anyhow, bail};
use serde_json::Value;

/// One field as the build script writes it from tlpx-regs.
pub struct GenField {
    pub name: &'static str,
    pub shift: u32,
    pub width: u32,
    pub description: &'static str,
    /// (name, value, description) of each named value.
    pub values: &'static [(&'static str, u64, &'static str)],
}

/// (region, register, fields) for every register of tlpx-regs that has fields.
static GEN_FIELDS: &[(&str, &str, &[GenField])] = include!(concat!(env!("OUT_DIR"), "/reg_fields.rs"));

/// Who a region belongs to (csr.json's `owner`): tlpx's card, or the accelerator in its slot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Owner {
    Card,
    Dut,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    Ro,
    Rw,
    Wo,
}

impl Access {
    pub fn name(self) -> &'static str {
        match self {
            Access::Ro => "ro",
            Access::Rw => "rw",
            Access::Wo => "wo",
        }
    }
    fn parse(text: &str) -> Option<Access> {
        match text {
            "ro" => Some(Access::Ro),
            "rw" => Some(Access::Rw),
            "wo" => Some(Access::Wo),
            _ => None,
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct FieldDef {
    pub name: String,
    pub shift: u32,
    pub width: u32,
    pub description: String,
    /// Named values: (name, value).
    pub values: Vec<(String, u64)>,
}

impl FieldDef {
    pub fn mask(&self) -> u64 {
        (((1u128 << self.width) - 1) as u64) << self.shift
    }
    pub fn get(&self, register: u64) -> u64 {
        (register & self.mask()) >> self.shift
    }
    pub fn value_name(&self, value: u64) -> Option<&str> {
        self.values.iter().find(|(_, v)| *v == value).map(|(n, _)| n.as_str())
    }
    /// `count (1)`, or `5` for a field without value names, `3 (no name)` for a value no
    /// name has.
    pub fn show(&self, value: u64) -> String {
        match self.value_name(value) {
            Some(n) => format!("{n} ({value})"),
            None if self.values.is_empty() => value.to_string(),
            None => format!("{value} (no name)"),
        }
    }
    /// A value given by name or number, checked against the field's width.
    pub fn parse_value(&self, reg: &RegDef, text: &str) -> anyhow::Result<u64> {
        let full = format!("{}.{}", reg.full_name(), self.name);
        let v = match self.values.iter().find(|(n, _)| n == text) {
            Some((_, v)) => *v,
            None => parse_number(text).map_err(|_| {
                let names: Vec<&str> = self.values.iter().map(|(n, _)| n.as_str()).collect();
                if names.is_empty() {
                    anyhow!("{text:?} is not a value of {full}: give a number (decimal or 0x hex) below 2^{}", self.width)
                } else {
                    anyhow!("{text:?} is not a value of {full}: give one of {} or a number below 2^{}", names.join(", "), self.width)
                }
            })?,
        };
        if self.width < 64 && v >> self.width != 0 {
            bail!("{v} ({v:#x}) does not fit {full}, a {}-bit field (0..={})", self.width, (1u128 << self.width) - 1);
        }
        Ok(v)
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct RegDef {
    pub region: String,
    pub name: String,
    /// BAR0 offset (tlpx-internal).
    pub offset: u64,
    pub size_bits: u32,
    pub access: Access,
    pub description: String,
    pub fields: Vec<FieldDef>,
    pub owner: Owner,
    /// Bits of its write-1-to-act fields (start, stop, clear): the card does not keep them, so
    /// a read-modify-write of another field must write them 0, never the value read back.
    pub actions: u64,
}

impl RegDef {
    pub fn full_name(&self) -> String {
        format!("{}.{}", self.region, self.name)
    }
    pub fn words(&self) -> u64 {
        u64::from(self.size_bits.div_ceil(32))
    }
    fn field(&self, name: &str) -> anyhow::Result<&FieldDef> {
        self.fields.iter().find(|f| f.name == name).ok_or_else(|| {
            if self.fields.is_empty() {
                anyhow!("{} has no fields (its value is one number): no {name:?}", self.full_name())
            } else {
                anyhow!(
                    "{} has no field {name:?}; its fields: {}",
                    self.full_name(),
                    self.fields.iter().map(|f| f.name.as_str()).collect::<Vec<_>>().join(", ")
                )
            }
        })
    }
}

/// What a name on the command line means.
#[derive(Debug, Clone)]
pub enum Target {
    Register(RegDef),
    Field(RegDef, FieldDef),
}

impl Target {
    pub fn register(&self) -> &RegDef {
        match self {
            Target::Register(r) | Target::Field(r, _) => r,
        }
    }
    pub fn name(&self) -> String {
        match self {
            Target::Register(r) => r.full_name(),
            Target::Field(r, f) => format!("{}.{}", r.full_name(), f.name),
        }
    }
}

/// Largest `--regs` file read: a card build's csr.json is about 130 KiB (the CPU card's with
/// every description); 16 MiB stops an endless input at once and leaves room for any DUT.
pub const MAX_REGS_BYTES: u64 = 16 << 20;

pub struct RegMap {
    pub registers: Vec<RegDef>,
}

impl RegMap {
    /// The card's map from tlpx-regs.
    pub fn card() -> RegMap {
        let registers = tlpx_regs::ALL
            .iter()
            .map(|r| {
                let fields = GEN_FIELDS
                    .iter()
                    .find(|(region, name, _)| *region == r.region && *name == r.name)
                    .map(|(_, _, fields)| {
                        fields
                            .iter()
                            .map(|f| FieldDef {
                                name: f.name.to_owned(),
                                shift: f.shift,
                                width: f.width,
                                description: f.description.to_owned(),
                                values: f.values.iter().map(|(n, v, _)| ((*n).to_owned(), *v)).collect(),
                            })
                            .collect()
                    })
                    .unwrap_or_default();
                RegDef {
                    region: r.region.to_owned(),
                    name: r.name.to_owned(),
                    offset: r.offset,
                    size_bits: r.size_bits,
                    access: if r.writable { Access::Rw } else { Access::Ro },
                    description: r.description.to_owned(),
                    fields,
                    owner: Owner::Card,
                    actions: r.actions,
                }
            })
            .collect();
        RegMap { registers }
    }

    /// Region names in BAR0 order, each once.
    pub fn regions(&self) -> Vec<&str> {
        let mut out: Vec<&str> = Vec::new();
        for r in &self.registers {
            if !out.contains(&r.region.as_str()) {
                out.push(&r.region);
            }
        }
        out
    }

    /// Adds the DUT-owned regions of a card build's csr.json (replacing regions of the same
    /// name: the file describes the accelerator this card carries). Returns the DUT map hash
    /// of the file's DUT regions and their names.
    pub fn add_dut_regions(&mut self, path: &Path) -> anyhow::Result<DutRegions> {
        let bytes =
            crate::input::read_capped(path, MAX_REGS_BYTES).map_err(|e| anyhow!("--regs {}: cannot read it: {e}", path.display()))?;
        let text =
            String::from_utf8(bytes).map_err(|_| anyhow!("--regs {}: not UTF-8 text: give a card build's csr.json", path.display()))?;
        let doc: Value = serde_json::from_str(&text)
            .map_err(|e| anyhow!("--regs {}: not JSON ({e}): give a card build's csr.json (build/card/<name>/csr.json)", path.display()))?;
        let regions = doc.get("regions").and_then(Value::as_array).ok_or_else(|| {
            anyhow!("--regs {}: no `regions` array: not a tlpx card build's csr.json (build/card/<name>/csr.json)", path.display())
        })?;
        let dut: Vec<&Value> = regions.iter().filter(|r| r.get("owner").and_then(Value::as_str) == Some("dut")).collect();
        if dut.is_empty() {
            bail!(
                "--regs {}: no region has \"owner\": \"dut\" (regions: {}): the file names no accelerator's registers; give the csr.json of a card built with a DUT (make gateware DUT=...)",
                path.display(),
                regions.iter().filter_map(|r| r.get("name").and_then(Value::as_str)).collect::<Vec<_>>().join(", ")
            );
        }
        let hash =
            map_hash(&dut.iter().map(|r| (*r).clone()).collect::<Vec<_>>()).map_err(|e| anyhow!("--regs {}: {e}", path.display()))?;
        let mut names = Vec::new();
        for region in dut {
            let parsed = parse_region(region).map_err(|e| anyhow!("--regs {}: {e}", path.display()))?;
            let name = parsed.first().map(|r| r.region.clone()).unwrap_or_default();
            let name = if name.is_empty() { region.get("name").and_then(Value::as_str).unwrap_or("").to_owned() } else { name };
            self.registers.retain(|r| r.region != name);
            self.registers.extend(parsed);
            names.push(name);
        }
        self.registers.sort_by_key(|r| r.offset);
        let placement = doc.pointer("/dut/placement").and_then(Value::as_str).map(str::to_owned);
        Ok(DutRegions { hash, names, placement })
    }

    /// The register or field `text` names (see the module's doc); numbers are BAR0 offsets.
    pub fn resolve(&self, text: &str) -> anyhow::Result<Target> {
        if text.starts_with(|c: char| c.is_ascii_digit()) {
            let offset = parse_number(text)?;
            if !offset.is_multiple_of(4) || offset >= tlpx_regs::BAR_SIZE {
                bail!("offset {offset:#x} must be DW-aligned and inside BAR0 (0..{:#x})", tlpx_regs::BAR_SIZE);
            }
            return Ok(Target::Register(self.registers.iter().find(|r| r.offset == offset).cloned().unwrap_or(RegDef {
                region: "bar0".into(),
                name: format!("{offset:#x}"),
                offset,
                size_bits: 32,
                access: Access::Rw,
                description: String::new(),
                fields: Vec::new(),
                owner: Owner::Card,
                actions: 0,
            })));
        }
        let parts: Vec<&str> = text.split('.').collect();
        let regions = self.regions();
        let in_region = |region: &str, name: &str| -> anyhow::Result<RegDef> {
            if !regions.contains(&region) {
                bail!("no region {region:?} (in {text:?}); regions: {}", regions.join(", "));
            }
            self.registers.iter().find(|r| r.region == region && r.name == name).cloned().ok_or_else(|| {
                let names: Vec<&str> = self.registers.iter().filter(|r| r.region == region).map(|r| r.name.as_str()).collect();
                anyhow!("no register {name:?} in region {region}; its registers: {}", names.join(", "))
            })
        };
        match parts.as_slice() {
            [name] => {
                if regions.contains(name) {
                    let names: Vec<String> = self.registers.iter().filter(|r| r.region == *name).map(RegDef::full_name).collect();
                    bail!("{name:?} is a region: name one of its registers ({})", names.join(", "));
                }
                let found: Vec<&RegDef> = self.registers.iter().filter(|r| r.name == *name).collect();
                match found.as_slice() {
                    [one] => Ok(Target::Register((*one).clone())),
                    [] => bail!(
                        "no register {name:?}: give region.register (regions: {}; `tlpx reg list REGION` lists a region's registers)",
                        regions.join(", ")
                    ),
                    many => bail!(
                        "{name:?} is ambiguous: {}; give region.register",
                        many.iter().map(|r| r.full_name()).collect::<Vec<_>>().join(", ")
                    ),
                }
            }
            [region, name] => Ok(Target::Register(in_region(region, name)?)),
            [region, name, field] => {
                let reg = in_region(region, name)?;
                let f = reg.field(field)?.clone();
                Ok(Target::Field(reg, f))
            }
            _ => bail!("{text:?} has too many dots: give region.register or region.register.field"),
        }
    }
}

/// The DUT regions `--regs` added.
#[derive(Debug, Clone)]
pub struct DutRegions {
    /// map_hash of the file's DUT-owned regions (to compare with slot.dut_map_hash).
    pub hash: u32,
    pub names: Vec<String>,
    /// The card build's slot placement (`window`, `bar0`), when the file says.
    pub placement: Option<String>,
}

fn parse_region(region: &Value) -> anyhow::Result<Vec<RegDef>> {
    let rname = region.get("name").and_then(Value::as_str).ok_or_else(|| anyhow!("a region has no name"))?;
    let regs = region.get("registers").and_then(Value::as_array).ok_or_else(|| anyhow!("region {rname} has no registers array"))?;
    let mut out = Vec::new();
    for g in regs {
        let s = |k: &str| g.get(k).and_then(Value::as_str).ok_or_else(|| anyhow!("a register of {rname} has no {k}"));
        let n = |k: &str| g.get(k).and_then(Value::as_u64).ok_or_else(|| anyhow!("a register of {rname} has no numeric {k}"));
        let name = s("name")?;
        let access = Access::parse(s("access")?).ok_or_else(|| anyhow!("{rname}.{name}: access {:?} is not ro, rw or wo", g["access"]))?;
        let offset = n("offset")?;
        if offset >= tlpx_regs::BAR_SIZE || !offset.is_multiple_of(4) {
            bail!("{rname}.{name}: offset {offset:#x} is not a DW-aligned BAR0 offset (0..{:#x})", tlpx_regs::BAR_SIZE);
        }
        let size_bits = u32::try_from(n("size_bits")?)
            .ok()
            .filter(|b| (1..=1024).contains(b))
            .ok_or_else(|| anyhow!("{rname}.{name}: size_bits is not 1..=1024"))?;
        let mut fields = Vec::new();
        let mut actions = 0u64;
        for f in g.get("fields").and_then(Value::as_array).map(Vec::as_slice).unwrap_or_default() {
            let fname = f.get("name").and_then(Value::as_str).ok_or_else(|| anyhow!("{rname}.{name}: a field has no name"))?;
            let shift = f.get("offset").and_then(Value::as_u64).ok_or_else(|| anyhow!("{rname}.{name}.{fname}: no offset"))?;
            let width = f.get("size").and_then(Value::as_u64).ok_or_else(|| anyhow!("{rname}.{name}.{fname}: no size"))?;
            if width == 0 || shift + width > u64::from(size_bits).min(64) {
                bail!("{rname}.{name}.{fname}: bits {shift}+{width} do not fit the {size_bits}-bit register");
            }
            // A write-only field of a writable register acts on a write (gen_regs.py's rule).
            if access != Access::Ro && f.get("access").and_then(Value::as_str) == Some("wo") {
                actions |= (((1u128 << width) - 1) as u64) << shift;
            }
            let values = f
                .get("values")
                .and_then(Value::as_array)
                .map(Vec::as_slice)
                .unwrap_or_default()
                .iter()
                .filter_map(|v| Some((v.get("name")?.as_str()?.to_owned(), v.get("value")?.as_u64()?)))
                .collect();
            fields.push(FieldDef {
                name: fname.to_owned(),
                shift: shift as u32,
                width: width as u32,
                description: f.get("description").and_then(Value::as_str).unwrap_or("").to_owned(),
                values,
            });
        }
        out.push(RegDef {
            region: rname.to_owned(),
            name: name.to_owned(),
            offset,
            size_bits,
            access,
            description: g.get("description").and_then(Value::as_str).unwrap_or("").to_owned(),
            fields,
            owner: Owner::Dut,
            actions,
        });
    }
    Ok(out)
}

/// The register map hash of csr.json regions, as the gateware computes it (soc.py
/// `map_hash`): 32-bit FNV-1a over the compact JSON of
/// `[[region, offset, [[register, offset, size_bits, access, [[field, offset, size]...]]...]]...]`.
/// The one Rust implementation: `--regs` compares it with `slot.dut_map_hash`.
pub fn map_hash(regions: &[Value]) -> anyhow::Result<u32> {
    let get = |v: &Value, k: &str| v.get(k).cloned().ok_or_else(|| anyhow!("a map entry has no {k:?}: {v}"));
    let mut structure = Vec::new();
    for r in regions {
        let mut regs = Vec::new();
        for g in r.get("registers").and_then(Value::as_array).map(Vec::as_slice).unwrap_or_default() {
            let mut fields = Vec::new();
            for f in g.get("fields").and_then(Value::as_array).map(Vec::as_slice).unwrap_or_default() {
                fields.push(Value::Array(vec![get(f, "name")?, get(f, "offset")?, get(f, "size")?]));
            }
            regs.push(Value::Array(vec![
                get(g, "name")?,
                get(g, "offset")?,
                get(g, "size_bits")?,
                get(g, "access")?,
                Value::Array(fields),
            ]));
        }
        structure.push(Value::Array(vec![get(r, "name")?, get(r, "offset")?, Value::Array(regs)]));
    }
    // serde_json's compact form is Python's json.dumps(separators=(",", ":")) for these
    // ASCII names and integers.
    let text = serde_json::to_string(&Value::Array(structure))?;
    Ok(fnv1a(text.as_bytes()))
}

fn fnv1a(bytes: &[u8]) -> u32 {
    bytes.iter().fold(0x811C_9DC5u32, |h, b| (h ^ u32::from(*b)).wrapping_mul(0x0100_0193))
}

pub fn parse_number(text: &str) -> anyhow::Result<u64> {
    let t = text.trim().replace('_', "");
    match t.strip_prefix("0x").or_else(|| t.strip_prefix("0X")) {
        Some(h) => u64::from_str_radix(h, 16),
        None => t.parse(),
    }
    .map_err(|_| anyhow!("{text:?} is not a number (decimal, or hex with 0x)"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_card_map_has_the_generated_fields_and_value_names() {
        let map = RegMap::card();
        let Target::Field(reg, f) = map.resolve("generator.config.operation").expect("field") else { panic!("a field") };
        assert_eq!(reg.offset, tlpx_regs::generator::CONFIG.offset);
        assert_eq!((f.shift, f.width), (tlpx_regs::generator::config::OPERATION.shift, tlpx_regs::generator::config::OPERATION.width));
        let write = tlpx_regs::generator::config::Operation::Write;
        assert_eq!(f.parse_value(&reg, write.name()).expect("by name"), u64::from(write.value()));
        assert_eq!(f.parse_value(&reg, "2").expect("by number"), 2);
        let e = f.parse_value(&reg, "4").expect_err("too wide").to_string();
        assert!(e.contains("2-bit field"), "{e}");
        let e = f.parse_value(&reg, "sideways").expect_err("unknown").to_string();
        assert!(e.contains("read, write, read_write, write_then_read"), "{e}");
        // Every generated field of every register, by its Field constant's mask.
        let v = tlpx_regs::ident::version::MAJOR;
        let Target::Field(_, f) = map.resolve("ident.version.major").expect("major") else { panic!() };
        assert_eq!(f.mask(), v.mask());
    }

    #[test]
    fn names_errors_list_what_exists() {
        let map = RegMap::card();
        let e = map.resolve("nosuch.status").expect_err("region").to_string();
        assert!(e.contains("no region \"nosuch\"") && e.contains("generator"), "{e}");
        let e = map.resolve("generator.nosuch").expect_err("register").to_string();
        assert!(e.contains("its registers:") && e.contains("status"), "{e}");
        let e = map.resolve("generator.status.nosuch").expect_err("field").to_string();
        assert!(e.contains("its fields:"), "{e}");
        let e = map.resolve("status").expect_err("ambiguous").to_string();
        assert!(e.contains("ambiguous") && e.contains("generator.status"), "{e}");
        assert_eq!(map.resolve("scratch").expect("unique").name(), "ident.scratch");
        let e = map.resolve("spy").expect_err("a region").to_string();
        assert!(e.contains("is a region") && e.contains("spy.wr_index"), "{e}");
    }

    #[test]
    fn map_hash_is_the_gateware_s() {
        // The card builds' csr.json carry the hash soc.py computed over their card-owned
        // regions (ident.map_hash); the DUT-owned ones (rule 30's) hash to slot.dut_map_hash.
        let builds = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../build/card");
        let owned = |regions: &[Value], dut: bool| -> Vec<Value> {
            regions.iter().filter(|r| (r.get("owner").and_then(Value::as_str) == Some("dut")) == dut).cloned().collect()
        };
        for build in ["dw64", "dw64-cpu", "dw128"] {
            let path = builds.join(build).join("csr.json");
            let doc: Value = serde_json::from_str(&std::fs::read_to_string(&path).expect("csr.json (make gateware)")).expect("JSON");
            let regions = doc["regions"].as_array().expect("regions");
            let want = doc["map_hash"].as_str().and_then(|h| u32::from_str_radix(h.trim_start_matches("0x"), 16).ok()).expect("map_hash");
            assert_eq!(map_hash(&owned(regions, false)).expect("hash"), want, "{}", path.display());
            assert_eq!(map_hash(&owned(regions, true)).expect("hash"), tlpx_regs::RULE30_DUT_MAP_HASH, "{}", path.display());
        }
        // A change of one register's offset changes it.
        let mut v: Value = serde_json::from_str(&std::fs::read_to_string(builds.join("dw64/csr.json")).expect("csr.json")).expect("JSON");
        let before = map_hash(v["regions"].as_array().expect("regions")).expect("hash");
        v["regions"][0]["registers"][0]["offset"] = 4.into();
        assert_ne!(map_hash(v["regions"].as_array().expect("regions")).expect("hash"), before);
    }

    #[test]
    fn fnv1a_matches_the_reference_vectors() {
        // FNV-1a 32-bit test vectors (the FNV authors' table).
        assert_eq!(fnv1a(b""), 0x811c9dc5);
        assert_eq!(fnv1a(b"a"), 0xe40c292c);
        assert_eq!(fnv1a(b"foobar"), 0xbf9cf968);
    }
}
