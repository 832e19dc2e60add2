//! The register map `tlpx reg` works with at run time: the card's generated map (tlpx-regs,
//! its field table `tlpx_regs::FIELDS`) plus, with `--regs FILE`, the DUT-owned regions of a
//! card build's csr.json (the accelerator's own registers, read by `tlpx_regs::csr_json`).
//!
//! Names: `region.register` names a register, `region.register.field` one of its fields; a
//! register name alone is accepted when one region has it. Values are numbers (decimal or
//! `0x` hex) or, for a field with named values, the name.

use std::path::Path;

use anyhow::{anyhow, bail};
use tlpx_regs::csr_json::{self, CsrJson, Region};

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
                let fields = tlpx_regs::FIELDS
                    .iter()
                    .find(|t| t.register == *r)
                    .map(|t| {
                        t.fields
                            .iter()
                            .map(|f| FieldDef {
                                name: f.name.to_owned(),
                                shift: f.field.shift,
                                width: f.field.width,
                                description: f.description.to_owned(),
                                values: f.values.iter().map(|v| (v.name.to_owned(), v.value)).collect(),
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
        let doc: CsrJson = serde_json::from_str(&text).map_err(|e| match e.classify() {
            serde_json::error::Category::Data => anyhow!(
                "--regs {}: not a tlpx card build's csr.json ({e}): give build/card/<name>/csr.json (its `regions`, each with `registers`)",
                path.display()
            ),
            _ => anyhow!("--regs {}: not JSON ({e}): give a card build's csr.json (build/card/<name>/csr.json)", path.display()),
        })?;
        let dut: Vec<&Region> = doc.regions.iter().filter(|r| r.is_dut()).collect();
        if dut.is_empty() {
            bail!(
                "--regs {}: no region has \"owner\": \"dut\" (regions: {}): the file names no accelerator's registers; give the csr.json of a card built with a DUT (make gateware DUT=...)",
                path.display(),
                doc.regions.iter().map(|r| r.name.as_str()).collect::<Vec<_>>().join(", ")
            );
        }
        let hash = csr_json::map_hash(dut.iter().copied());
        let mut names = Vec::new();
        for region in dut {
            let parsed = parse_region(region).map_err(|e| anyhow!("--regs {}: {e}", path.display()))?;
            self.registers.retain(|r| r.region != region.name);
            self.registers.extend(parsed);
            names.push(region.name.clone());
        }
        self.registers.sort_by_key(|r| r.offset);
        let placement = doc.dut.and_then(|d| d.placement);
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

fn parse_region(region: &Region) -> anyhow::Result<Vec<RegDef>> {
    let rname = &region.name;
    let mut out = Vec::new();
    for g in &region.registers {
        let name = &g.name;
        let access = Access::parse(&g.access).ok_or_else(|| anyhow!("{rname}.{name}: access {:?} is not ro, rw or wo", g.access))?;
        let offset = g.offset;
        if offset >= tlpx_regs::BAR_SIZE || !offset.is_multiple_of(4) {
            bail!("{rname}.{name}: offset {offset:#x} is not a DW-aligned BAR0 offset (0..{:#x})", tlpx_regs::BAR_SIZE);
        }
        let size_bits = u32::try_from(g.size_bits)
            .ok()
            .filter(|b| (1..=1024).contains(b))
            .ok_or_else(|| anyhow!("{rname}.{name}: size_bits is not 1..=1024"))?;
        let mut fields = Vec::new();
        let mut actions = 0u64;
        for f in &g.fields {
            let (fname, shift, width) = (&f.name, f.offset, f.size);
            if width == 0 || shift + width > u64::from(size_bits).min(64) {
                bail!("{rname}.{name}.{fname}: bits {shift}+{width} do not fit the {size_bits}-bit register");
            }
            // A write-only field of a writable register acts on a write (gen_regs.py's rule).
            if access != Access::Ro && f.access.as_deref() == Some("wo") {
                actions |= (((1u128 << width) - 1) as u64) << shift;
            }
            fields.push(FieldDef {
                name: fname.clone(),
                shift: shift as u32,
                width: width as u32,
                description: f.description.clone(),
                values: f.named_values().map_err(|e| anyhow!("{rname}.{name}: {e}"))?,
            });
        }
        out.push(RegDef {
            region: rname.clone(),
            name: name.clone(),
            offset,
            size_bits,
            access,
            description: g.description.clone(),
            fields,
            owner: Owner::Dut,
            actions,
        });
    }
    Ok(out)
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
        let read = |build: &str| -> CsrJson {
            let path = builds.join(build).join("csr.json");
            serde_json::from_str(&std::fs::read_to_string(&path).expect("csr.json (make gateware)")).expect("csr.json")
        };
        for build in ["dw64", "dw64-cpu", "dw128"] {
            let doc = read(build);
            let want = doc.map_hash.as_deref().and_then(|h| u32::from_str_radix(h.trim_start_matches("0x"), 16).ok()).expect("map_hash");
            assert_eq!(csr_json::map_hash(doc.regions.iter().filter(|r| !r.is_dut())), want, "{build}");
            assert_eq!(csr_json::map_hash(doc.regions.iter().filter(|r| r.is_dut())), tlpx_regs::RULE30_DUT_MAP_HASH, "{build}");
        }
        // A change of one register's offset changes it.
        let mut doc = read("dw64");
        let before = csr_json::map_hash(&doc.regions);
        doc.regions[0].registers[0].offset = 4;
        assert_ne!(csr_json::map_hash(&doc.regions), before);
    }

    #[test]
    fn the_generated_field_table_agrees_with_the_field_constants() {
        // tlpx_regs::FIELDS and the per-register field modules come from one csr.json: spot
        // checks that they name the same bits and values.
        let map = RegMap::card();
        let Target::Field(_, f) = map.resolve("spy.trigger.mode").expect("field") else { panic!("a field") };
        let mode = tlpx_regs::spy::trigger::MODE;
        assert_eq!((f.shift, f.width), (mode.shift, mode.width));
        let names: Vec<&str> = tlpx_regs::spy::trigger::Mode::ALL.iter().map(|m| m.name()).collect();
        assert_eq!(f.values.iter().map(|(n, _)| n.as_str()).collect::<Vec<_>>(), names);
        let with_fields = tlpx_regs::ALL.iter().filter(|r| tlpx_regs::FIELDS.iter().any(|t| t.register == **r)).count();
        assert_eq!(with_fields, tlpx_regs::FIELDS.len(), "one table row per register with fields");
    }
}
