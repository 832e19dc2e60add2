//! The session script of `tlpx slot run`: its grammar, and the parser that reads and checks a
//! whole script (names, access, value widths, buffers, variables) before the card is opened.

use super::*;

/// What a buffer starts with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Fill {
    Random,
    Zero,
    Byte(u8),
}

/// Which part of a buffer's bus address.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AddrPart {
    Full,
    Lo,
    Hi,
}

/// A value on a line; buffer-dependent ones are computed when the line runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Value {
    Number(u64),
    Addr(usize, AddrPart),
    Crc { buffer: usize, inverted: bool },
    Size(usize),
}

#[derive(Debug, Clone)]
pub enum Op {
    Buffer { name: String, size: usize, fill: Fill },
    Write { target: Target, value: Value },
    Read { target: Target },
    WaitIrq { timeout: Duration },
    WaitReg { target: Target, value: Value, timeout: Duration },
    Expect { target: Target, value: Value },
    Compare { a: usize, b: usize, len: usize },
    Crc32 { buffer: usize },
    Dump { buffer: usize, len: usize },
}

/// One line of the script that does something.
#[derive(Debug, Clone)]
pub struct Step {
    /// `copy.slot:12` or `-e 2`.
    pub place: String,
    /// The line as written (comments and surrounding blanks removed).
    pub text: String,
    /// The line as it runs: its variables replaced by their values.
    pub expanded: String,
    pub op: Op,
}

/// A checked script: every step, and the buffers it allocates (name, size).
#[derive(Debug)]
pub struct Script {
    pub steps: Vec<Step>,
    pub buffers: Vec<(String, usize)>,
    pub variables: Vec<(String, String)>,
}

pub(super) const GRAMMAR: &str = "buffer NAME SIZE random|zero|0xBB, write REG[.FIELD] VALUE, read REG[.FIELD], wait irq TIMEOUT, \
     wait REG[.FIELD] VALUE TIMEOUT, expect REG[.FIELD] VALUE, compare A B [LEN], crc32 NAME, dump NAME [LEN], default VAR VALUE";
pub(super) const VALUES: &str = "a number (decimal or 0x hex), @BUF, @BUF.lo, @BUF.hi, crc32(BUF), ~crc32(BUF), size(BUF) or $VAR";

pub(super) fn valid_name(name: &str) -> bool {
    let mut chars = name.chars();
    chars.next().is_some_and(|c| c.is_ascii_alphabetic() || c == '_') && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// Parses `NAME=VALUE` of `--set`.
pub(super) fn parse_set(text: &str) -> anyhow::Result<(String, String)> {
    let (name, value) = text.split_once('=').ok_or_else(|| anyhow!("--set {text:?}: give NAME=VALUE (e.g. --set size=1025)"))?;
    if !valid_name(name) {
        bail!("--set {text:?}: {name:?} is not a variable name (letters, digits, _; not starting with a digit)");
    }
    if value.is_empty() || value.chars().any(char::is_whitespace) {
        bail!("--set {text:?}: the value must be one word without blanks (a number, a size such as 4KiB)");
    }
    Ok((name.to_owned(), value.to_owned()))
}

/// Replaces `$NAME` and `${NAME}` with the variables' values.
pub(super) fn expand(text: &str, vars: &[(String, String)], used: &mut Vec<String>) -> Result<String, String> {
    let mut out = String::new();
    let mut rest = text;
    while let Some(i) = rest.find('$') {
        out.push_str(&rest[..i]);
        let after = &rest[i + 1..];
        let (name, len) = if let Some(braced) = after.strip_prefix('{') {
            let end = braced.find('}').ok_or_else(|| "`${` without its `}`".to_string())?;
            (&braced[..end], end + 2)
        } else {
            let end = after.find(|c: char| !(c.is_ascii_alphanumeric() || c == '_')).unwrap_or(after.len());
            (&after[..end], end)
        };
        if name.is_empty() {
            return Err("a `$` without a variable name after it".into());
        }
        let value = vars
            .iter()
            .rev()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.clone())
            .ok_or_else(|| format!("${name} is not set: give --set {name}=VALUE, or a line `default {name} VALUE` before this one"))?;
        if !used.iter().any(|u| u == name) {
            used.push(name.to_owned());
        }
        out.push_str(&value);
        rest = &after[len..];
    }
    out.push_str(rest);
    Ok(out)
}

pub(super) struct Parser<'a> {
    pub(super) map: &'a RegMap,
    /// Whether `--regs` was given (an unknown region then needs no hint about it).
    pub(super) with_regs: bool,
    pub(super) buffers: Vec<(String, usize)>,
}

impl Parser<'_> {
    pub(super) fn buffer(&self, name: &str) -> Result<usize, String> {
        self.buffers.iter().position(|(n, _)| n == name).ok_or_else(|| {
            if self.buffers.is_empty() {
                format!("no buffer {name:?}: a `buffer {name} SIZE FILL` line must come first")
            } else {
                format!(
                    "no buffer {name:?} (buffers so far: {}); a `buffer {name} SIZE FILL` line must come first",
                    self.buffers.iter().map(|(n, _)| n.as_str()).collect::<Vec<_>>().join(", ")
                )
            }
        })
    }

    pub(super) fn target(&self, text: &str) -> Result<Target, String> {
        self.map.resolve(text).map_err(|e| {
            let hint = if !self.with_regs && e.to_string().starts_with("no region") {
                " (an accelerator's registers need --regs build/card/<card>/csr.json)"
            } else {
                ""
            };
            format!("{e}{hint}")
        })
    }

    /// The width a value for `target` may have, in bits.
    pub(super) fn bits(target: &Target) -> u32 {
        match target {
            Target::Field(_, f) => f.width,
            Target::Register(r) => r.size_bits,
        }
    }

    pub(super) fn value(&self, target: &Target, text: &str) -> Result<Value, String> {
        let bits = Parser::bits(target);
        let name = target.name();
        let fits = |v: u64| bits >= 64 || v >> bits == 0;
        let need = |want: u32, what: &str| -> Result<(), String> {
            if bits < want {
                Err(format!("{text} is {what} ({want} bits) and {name} has {bits} bits"))
            } else {
                Ok(())
            }
        };
        if let Some(rest) = text.strip_prefix('@') {
            let (buf, part) = match rest.rsplit_once('.') {
                Some((b, "lo")) => (b, AddrPart::Lo),
                Some((b, "hi")) => (b, AddrPart::Hi),
                Some((_, other)) => return Err(format!("{text}: .{other} is not a part of an address: give @BUF, @BUF.lo or @BUF.hi")),
                None => (rest, AddrPart::Full),
            };
            let i = self.buffer(buf)?;
            match part {
                AddrPart::Full => {
                    need(64, "a 64-bit bus address").map_err(|e| format!("{e}: write @{buf}.lo and @{buf}.hi to two 32-bit registers"))?
                }
                _ => need(32, "half of a bus address")?,
            }
            return Ok(Value::Addr(i, part));
        }
        for (prefix, inverted) in [("~crc32(", true), ("crc32(", false)] {
            if let Some(rest) = text.strip_prefix(prefix) {
                let buf = rest.strip_suffix(')').ok_or_else(|| format!("{text}: missing `)`"))?;
                let buffer = self.buffer(buf)?;
                need(32, "a CRC-32")?;
                return Ok(Value::Crc { buffer, inverted });
            }
        }
        if let Some(rest) = text.strip_prefix("size(") {
            let buf = rest.strip_suffix(')').ok_or_else(|| format!("{text}: missing `)`"))?;
            let i = self.buffer(buf)?;
            let size = self.buffers[i].1 as u64;
            if !fits(size) {
                return Err(format!("size({buf}) = {size} does not fit {name} ({bits} bits)"));
            }
            return Ok(Value::Size(i));
        }
        if let Target::Field(reg, f) = target {
            if !f.values.is_empty() || !text.starts_with(|c: char| c.is_ascii_digit()) {
                return f.parse_value(reg, text).map(Value::Number).map_err(|e| e.to_string());
            }
        }
        let v = parse_number(text).map_err(|_| format!("{text:?} is not a value: give {VALUES}"))?;
        if !fits(v) {
            return Err(format!("{v:#x} does not fit {name}, {bits} bits wide"));
        }
        Ok(Value::Number(v))
    }

    pub(super) fn len(&self, text: &str, buffers: &[usize]) -> Result<usize, String> {
        let n = crate::sizes::parse_size(text).ok_or_else(|| format!("{text:?} is not a length in bytes (e.g. 64, 1K)"))?;
        for &b in buffers {
            let (name, size) = &self.buffers[b];
            if n == 0 || n > *size as u64 {
                return Err(format!("length {n} is not within buffer {name} (1..={size} bytes)"));
            }
        }
        Ok(n as usize)
    }

    pub(super) fn readable(target: &Target) -> Result<(), String> {
        let r = target.register();
        if r.access == Access::Wo {
            return Err(format!("{} is write-only: a read returns nothing of it", r.full_name()));
        }
        if r.size_bits > 64 {
            return Err(format!("{} is {} bits wide: only registers of up to 64 bits can be read here", r.full_name(), r.size_bits));
        }
        Ok(())
    }

    pub(super) fn line(&mut self, words: &[&str]) -> Result<Op, String> {
        let wrong = |usage: &str| format!("takes {usage}");
        match words {
            ["buffer", name, size, fill] => {
                if !valid_name(name) {
                    return Err(format!("{name:?} is not a buffer name (letters, digits, _; not starting with a digit)"));
                }
                if self.buffers.iter().any(|(n, _)| n == name) {
                    return Err(format!("buffer {name} is already defined"));
                }
                let size = crate::sizes::parse_size(size)
                    .filter(|s| (1..=MAX_BUFFER_BYTES).contains(s))
                    .ok_or_else(|| format!("size {size:?} is not 1..={MAX_BUFFER_BYTES} bytes (e.g. 1025, 4KiB, 1MiB)"))?;
                let fill = match *fill {
                    "random" => Fill::Random,
                    "zero" => Fill::Zero,
                    other => match parse_number(other) {
                        Ok(b) if b <= 0xff => Fill::Byte(b as u8),
                        _ => return Err(format!("fill {other:?}: give random, zero or a byte (0x00..0xff)")),
                    },
                };
                self.buffers.push(((*name).to_owned(), size as usize));
                Ok(Op::Buffer { name: (*name).to_owned(), size: size as usize, fill })
            }
            ["buffer", ..] => Err(wrong("NAME SIZE random|zero|0xBB")),
            ["write", reg, value] => {
                let target = self.target(reg)?;
                let r = target.register();
                if r.access == Access::Ro {
                    return Err(format!("{} is read-only (ro): it cannot be written", r.full_name()));
                }
                if r.size_bits > 64 {
                    return Err(format!("{} is {} bits wide: write it a word at a time by offset", r.full_name(), r.size_bits));
                }
                if matches!(target, Target::Field(..)) && r.access != Access::Rw {
                    return Err(format!(
                        "{} is write-only: a field write needs a read-modify-write; write the whole register",
                        r.full_name()
                    ));
                }
                let value = self.value(&target, value)?;
                Ok(Op::Write { target, value })
            }
            ["write", ..] => Err(wrong("REG[.FIELD] VALUE")),
            ["read", reg] => {
                let target = self.target(reg)?;
                Parser::readable(&target)?;
                Ok(Op::Read { target })
            }
            ["read", ..] => Err(wrong("REG[.FIELD]")),
            ["wait", "irq", timeout] => Ok(Op::WaitIrq { timeout: duration(timeout)? }),
            ["wait", "irq", ..] => Err(wrong("irq TIMEOUT (e.g. wait irq 10ms)")),
            ["wait", reg, value, timeout] => {
                let target = self.target(reg)?;
                Parser::readable(&target)?;
                let value = self.value(&target, value)?;
                Ok(Op::WaitReg { target, value, timeout: duration(timeout)? })
            }
            ["wait", ..] => Err(wrong("irq TIMEOUT, or REG[.FIELD] VALUE TIMEOUT (polls until equal)")),
            ["expect", reg, value] => {
                let target = self.target(reg)?;
                Parser::readable(&target)?;
                let value = self.value(&target, value)?;
                Ok(Op::Expect { target, value })
            }
            ["expect", ..] => Err(wrong("REG[.FIELD] VALUE")),
            ["compare", a, b, rest @ ..] if rest.len() <= 1 => {
                let (a, b) = (self.buffer(a)?, self.buffer(b)?);
                let len = match rest {
                    [len] => self.len(len, &[a, b])?,
                    _ => {
                        let ((na, sa), (nb, sb)) = (&self.buffers[a], &self.buffers[b]);
                        if sa != sb {
                            return Err(format!("{na} has {sa} bytes and {nb} {sb}: give the length to compare (compare {na} {nb} LEN)"));
                        }
                        *sa
                    }
                };
                Ok(Op::Compare { a, b, len })
            }
            ["compare", ..] => Err(wrong("A B [LEN] (two buffers)")),
            ["crc32", buf] => Ok(Op::Crc32 { buffer: self.buffer(buf)? }),
            ["crc32", ..] => Err(wrong("NAME (a buffer)")),
            ["dump", buf, rest @ ..] if rest.len() <= 1 => {
                let buffer = self.buffer(buf)?;
                let len = match rest {
                    [len] => self.len(len, &[buffer])?,
                    _ => self.buffers[buffer].1.min(DUMP_DEFAULT),
                };
                Ok(Op::Dump { buffer, len })
            }
            ["dump", ..] => Err(wrong("NAME [LEN]")),
            [other, ..] => Err(format!("{other:?} is not a command; a line is one of: {GRAMMAR}")),
            [] => Err("empty line".into()),
        }
    }
}

pub(super) fn duration(text: &str) -> Result<Duration, String> {
    crate::sizes::parse_duration("TIMEOUT", text).map(Duration::from_secs_f64)
}

/// Parses and checks a script: `lines` are (place, text). Every bad line is reported, each
/// with its place, its text and what is accepted.
pub fn parse(lines: &[(String, String)], set: &[(String, String)], map: &RegMap, with_regs: bool) -> anyhow::Result<Script> {
    let mut vars: Vec<(String, String)> = set.to_vec();
    let mut used = Vec::new();
    let mut parser = Parser { map, with_regs, buffers: Vec::new() };
    let mut steps = Vec::new();
    let mut errors = Vec::new();
    for (place, raw) in lines {
        let text = raw.split('#').next().unwrap_or("").trim();
        if text.is_empty() {
            continue;
        }
        let words: Vec<&str> = text.split_whitespace().collect();
        if words[0] == "default" {
            match words.as_slice() {
                ["default", name, value] if valid_name(name) => {
                    if !set.iter().any(|(n, _)| n == name) {
                        vars.push(((*name).to_owned(), (*value).to_owned()));
                    }
                    if !used.iter().any(|u| u == name) {
                        used.push((*name).to_owned());
                    }
                }
                _ => errors.push(format!("{place}: `{text}`: takes VAR VALUE (a variable name and one word)")),
            }
            continue;
        }
        let result = expand(text, &vars, &mut used).and_then(|expanded| {
            let words: Vec<&str> = expanded.split_whitespace().collect();
            match parser.line(&words) {
                Ok(op) => Ok((op, expanded)),
                Err(e) if expanded != text => Err(format!("{e} (the line reads `{expanded}`)")),
                Err(e) => Err(e),
            }
        });
        match result {
            Ok((op, expanded)) => steps.push(Step { place: place.clone(), text: text.to_owned(), expanded, op }),
            Err(e) => errors.push(format!("{place}: `{text}`: {e}")),
        }
    }
    for (name, _) in set {
        if !used.iter().any(|u| u == name) {
            errors.push(format!("--set {name}=...: the script uses no ${name}"));
        }
    }
    if steps.is_empty() && errors.is_empty() {
        errors.push(format!("the script has no lines to run; a line is one of: {GRAMMAR}"));
    }
    if !errors.is_empty() {
        let n = errors.len();
        bail!("{} bad line{}; nothing was run:\n  {}", n, if n == 1 { "" } else { "s" }, errors.join("\n  "));
    }
    let variables = vars.into_iter().filter(|(n, _)| used.contains(n)).collect();
    Ok(Script { steps, buffers: parser.buffers, variables })
}

/// The script's lines: the file's, then `-e`'s.
pub(super) fn read_lines(args: &RunArgs) -> anyhow::Result<Vec<(String, String)>> {
    let mut lines = Vec::new();
    if let Some(path) = &args.script {
        let bytes = crate::input::read_capped(path, MAX_SCRIPT_BYTES).map_err(|e| anyhow!("reading the script {}: {e}", path.display()))?;
        let text = String::from_utf8(bytes).map_err(|_| anyhow!("the script {} is not UTF-8 text", path.display()))?;
        let name = path.file_name().map_or_else(|| path.display().to_string(), |n| n.to_string_lossy().into_owned());
        for (i, line) in text.lines().enumerate() {
            lines.push((format!("{name}:{}", i + 1), line.to_owned()));
        }
    }
    for (i, line) in args.lines.iter().enumerate() {
        lines.push((format!("-e {}", i + 1), line.clone()));
    }
    if args.script.is_none() && args.lines.is_empty() {
        bail!("give a script file or lines with -e (e.g. -e 'read pci_epf_test.status')");
    }
    Ok(lines)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lines(text: &str) -> Vec<(String, String)> {
        text.lines().enumerate().map(|(i, l)| (format!("t:{}", i + 1), l.to_owned())).collect()
    }

    fn check(text: &str, set: &[(&str, &str)]) -> anyhow::Result<Script> {
        let set: Vec<(String, String)> = set.iter().map(|(a, b)| ((*a).to_owned(), (*b).to_owned())).collect();
        parse(&lines(text), &set, &RegMap::card(), false)
    }

    #[test]
    fn a_good_script_parses_with_its_variables_and_buffers() {
        let s = check(
            "default size 64\nbuffer src $size random # a comment\nbuffer dst ${size} zero\nwrite ident.scratch 0x12\n\
             write ident.scratch @src.lo\nwrite ident.scratch crc32(src)\nexpect ident.scratch ~crc32(src)\ncompare src dst\n\
             dump src 16\ncrc32 dst\nwait irq 1ms\nwait ident.scratch size(src) 1ms",
            &[("size", "1025")],
        )
        .expect("parses");
        assert_eq!(s.buffers, vec![("src".to_owned(), 1025), ("dst".to_owned(), 1025)]);
        assert_eq!(s.variables, vec![("size".to_owned(), "1025".to_owned())]);
        assert_eq!(s.steps.len(), 11);
        assert!(matches!(s.steps[4].op, Op::Write { value: Value::Crc { buffer: 0, inverted: false }, .. }));
        assert!(matches!(s.steps[5].op, Op::Expect { value: Value::Crc { buffer: 0, inverted: true }, .. }));
        // Without --set the default applies.
        assert_eq!(check("default size 64\nbuffer a $size zero", &[]).expect("parses").buffers[0].1, 64);
    }

    #[test]
    fn every_bad_line_is_named_with_its_text_and_what_is_accepted() {
        let e = check(
            "buffer c 16 sideways\nbuffer b 16 random\nwrite ident.magic 1\nwrite ident.scratch @b\nwrite ident.scratch 0x1_0000_0000\n\
             frobnicate\ncompare b nosuch\nbuffer x $nope zero\nwait irq soon\nread ident.nosuch\nwrite ident.scratch @c.lo",
            &[("unused", "1")],
        )
        .expect_err("bad")
        .to_string();
        for want in [
            "11 bad lines; nothing was run",
            "t:1: `buffer c 16 sideways`: fill \"sideways\": give random, zero or a byte",
            "t:3: `write ident.magic 1`: ident.magic is read-only",
            "t:4: `write ident.scratch @b`: @b is a 64-bit bus address (64 bits) and ident.scratch has 32 bits: write @b.lo and @b.hi",
            "t:5: `write ident.scratch 0x1_0000_0000`: 0x100000000 does not fit ident.scratch",
            "t:6: `frobnicate`: \"frobnicate\" is not a command; a line is one of: buffer NAME SIZE",
            "t:7: `compare b nosuch`: no buffer \"nosuch\" (buffers so far: b)",
            "t:8: `buffer x $nope zero`: $nope is not set: give --set nope=VALUE",
            "t:9: `wait irq soon`: TIMEOUT: \"soon\" is not a duration",
            "t:10: `read ident.nosuch`: no register \"nosuch\" in region ident",
            // A buffer whose line was bad is not defined for the lines after it.
            "t:11: `write ident.scratch @c.lo`: no buffer \"c\"",
            "--set unused=...: the script uses no $unused",
        ] {
            assert!(e.contains(want), "missing {want:?} in:\n{e}");
        }
    }

    #[test]
    fn sizes_must_agree_and_names_need_regs() {
        let e = check("buffer a 4 zero\nbuffer b 8 zero\ncompare a b", &[]).expect_err("sizes").to_string();
        assert!(e.contains("a has 4 bytes and b 8: give the length"), "{e}");
        assert!(check("buffer a 4 zero\nbuffer b 8 zero\ncompare a b 4", &[]).is_ok());
        let e = check("read pci_epf_test.magic", &[]).expect_err("no regs").to_string();
        assert!(e.contains("need --regs"), "{e}");
        let e = check("buffer a 4 zero\nbuffer a 4 zero", &[]).expect_err("twice").to_string();
        assert!(e.contains("already defined"), "{e}");
        assert!(check("# nothing\n", &[]).expect_err("empty").to_string().contains("no lines to run"));
    }
}
