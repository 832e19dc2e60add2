//! Tokens of one script line, and the numbers / quantities of the language.

use crate::Diagnostic;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Tok {
    /// A name: letters, digits, `_` and `.` (`spy.control`, `generator.done`, `dma`, `KiB`).
    Word(String),
    /// Starts with a digit: `4096`, `0x3800`, `4KiB`, `10us`, `1.5ms`.
    Num(String),
    /// `->` `==` `!=` `<=` `>=` `<` `>` `=` `&` `|` `{` `}` `[` `]`
    Sym(&'static str),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Token {
    pub tok: Tok,
    /// 1-based column (in characters) of the token's first character.
    pub col: usize,
    /// Column just after the token.
    pub end: usize,
}

impl Token {
    pub fn text(&self) -> String {
        match &self.tok {
            Tok::Word(w) | Tok::Num(w) => w.clone(),
            Tok::Sym(s) => (*s).to_string(),
        }
    }
}

const SYMBOLS: [&str; 14] = ["->", "==", "!=", "<=", ">=", "<", ">", "=", "&", "|", "{", "}", "[", "]"];

/// Splits one line (without its newline) into tokens; `#` starts a comment.
pub fn tokens(line_no: usize, line: &str) -> Result<Vec<Token>, Diagnostic> {
    let chars: Vec<char> = line.chars().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        if c == '#' {
            break;
        }
        if c.is_whitespace() {
            i += 1;
            continue;
        }
        let start = i;
        if c.is_ascii_alphabetic() || c == '_' {
            while i < chars.len() && (chars[i].is_ascii_alphanumeric() || chars[i] == '_' || chars[i] == '.') {
                i += 1;
            }
            out.push(Token { tok: Tok::Word(chars[start..i].iter().collect()), col: start + 1, end: i + 1 });
            continue;
        }
        if c.is_ascii_digit() {
            while i < chars.len() && (chars[i].is_ascii_alphanumeric() || chars[i] == '_' || chars[i] == '.') {
                i += 1;
            }
            out.push(Token { tok: Tok::Num(chars[start..i].iter().collect()), col: start + 1, end: i + 1 });
            continue;
        }
        let rest: String = chars[i..chars.len().min(i + 2)].iter().collect();
        if let Some(sym) = SYMBOLS.iter().find(|s| rest.starts_with(**s)) {
            i += sym.len();
            out.push(Token { tok: Tok::Sym(sym), col: start + 1, end: i + 1 });
            continue;
        }
        return Err(Diagnostic::new(
            line_no,
            start + 1,
            format!(
                "unexpected character {c:?}: a line holds names, numbers, the symbols -> == != < <= > >= = & | {{ }} [ ], and # comments"
            ),
        ));
    }
    Ok(out)
}

/// A number as written, before it is given a meaning by its place.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Qty {
    /// A plain number or a size (`4096`, `0x1000`, `4KiB`, `64B`).
    Int(u64),
    /// A time, in picoseconds (`10us`, `1.5ms`).
    Time(u128),
    /// A number of card cycles (`100 cycles`).
    Cycles(u64),
}

impl Qty {
    /// Card cycles of a time or cycle count at `clock_hz`; a nonzero time is at least one
    /// cycle (times round up). None for a plain number.
    pub fn cycles(self, clock_hz: u32) -> Option<u128> {
        match self {
            Qty::Int(_) => None,
            Qty::Cycles(c) => Some(u128::from(c)),
            Qty::Time(ps) => {
                // saturates: a time this long is refused by its maximum anyway
                Some(ps.saturating_mul(u128::from(clock_hz)).div_ceil(1_000_000_000_000))
            }
        }
    }
}

/// Whether `word` is a unit that may follow a number as a separate token (`100 cycles`, `4 KiB`).
pub fn is_unit(word: &str) -> bool {
    !word.is_empty() && unit(word).is_some()
}

enum Unit {
    Mult(u64),
    Ps(u128),
    Cycles,
}

fn unit(suffix: &str) -> Option<Unit> {
    Some(match suffix {
        "" => Unit::Mult(1),
        "B" => Unit::Mult(1),
        "K" | "Ki" | "KiB" => Unit::Mult(1 << 10),
        "M" | "Mi" | "MiB" => Unit::Mult(1 << 20),
        "G" | "Gi" | "GiB" => Unit::Mult(1 << 30),
        "ns" => Unit::Ps(1_000),
        "us" => Unit::Ps(1_000_000),
        "ms" => Unit::Ps(1_000_000_000),
        "s" => Unit::Ps(1_000_000_000_000),
        "cycle" | "cycles" => Unit::Cycles,
        _ => return None,
    })
}

/// Parses a number token, with `unit` the separate unit word after it, if any.
pub fn quantity(text: &str, separate_unit: Option<&str>) -> Result<Qty, String> {
    let accepted =
        "decimal (1_000), hex (0x3800) or binary (0b101), with an optional unit: B, K/KiB, M/MiB, G/GiB (x1024), ns, us, ms, s or cycles";
    let lower = text.to_ascii_lowercase();
    if lower.starts_with("0x") || lower.starts_with("0b") {
        let radix = if lower.starts_with("0x") { 16 } else { 2 };
        let digits: String = text[2..].chars().filter(|&c| c != '_').collect();
        if digits.is_empty() {
            return Err(format!("bad number \"{text}\": no digits after the prefix"));
        }
        let v = u64::from_str_radix(&digits, radix).map_err(|_| {
            if digits.chars().all(|c| c.is_digit(radix)) {
                format!("number \"{text}\" does not fit in 64 bits")
            } else {
                format!(
                    "bad number \"{text}\": {} digits only (a hex or binary number takes no unit)",
                    if radix == 16 { "hex" } else { "binary" }
                )
            }
        })?;
        if let Some(word) = separate_unit {
            return Err(format!("\"{text}\" takes no unit (\"{word}\"): units follow decimal numbers"));
        }
        return Ok(Qty::Int(v));
    }
    let split = text.find(|c: char| !(c.is_ascii_digit() || c == '_' || c == '.')).unwrap_or(text.len());
    let (num, suffix) = text.split_at(split);
    let (int_part, frac_part) = match num.split_once('.') {
        Some((i, f)) => (i, f),
        None => (num, ""),
    };
    if frac_part.contains('.') || int_part.is_empty() || (num.contains('.') && frac_part.is_empty()) {
        return Err(format!("bad number \"{text}\": {accepted}"));
    }
    if let Some(word) = separate_unit {
        if !suffix.is_empty() {
            return Err(format!("\"{text}\" already has a unit (\"{suffix}\"), then comes \"{word}\""));
        }
        return quantity(&format!("{num}{word}"), None);
    }
    let Some(u) = unit(suffix) else {
        return Err(format!("bad number \"{text}\": unknown unit \"{suffix}\"; {accepted}"));
    };
    let mut mantissa: u128 = 0;
    let mut frac_digits = 0u32;
    for c in int_part.chars().chain(frac_part.chars()) {
        if c == '_' {
            continue;
        }
        let d = u128::from(c.to_digit(10).unwrap_or(0));
        mantissa = mantissa.checked_mul(10).and_then(|m| m.checked_add(d)).ok_or_else(|| format!("number \"{text}\" is too large"))?;
    }
    for c in frac_part.chars() {
        if c != '_' {
            frac_digits += 1;
        }
    }
    if frac_digits > 12 {
        return Err(format!("number \"{text}\" has more than 12 decimals"));
    }
    let scale = 10u128.pow(frac_digits);
    let too_big = || format!("number \"{text}\" is too large");
    let q = match u {
        Unit::Mult(m) => {
            let v = mantissa.checked_mul(u128::from(m)).ok_or_else(too_big)?;
            if v % scale != 0 {
                return Err(format!("\"{text}\" is not a whole number"));
            }
            Qty::Int(u64::try_from(v / scale).map_err(|_| too_big())?)
        }
        Unit::Ps(ps) => {
            let v = mantissa.checked_mul(ps).ok_or_else(too_big)?;
            if v % scale != 0 {
                return Err(format!("\"{text}\" is finer than a picosecond"));
            }
            Qty::Time(v / scale)
        }
        Unit::Cycles => {
            if frac_digits > 0 {
                return Err(format!("\"{text}\": cycles are whole numbers"));
            }
            Qty::Cycles(u64::try_from(mantissa).map_err(|_| too_big())?)
        }
    };
    Ok(q)
}

/// Parses a clock frequency: `125MHz`, `125 MHz`, `250000000`, `62.5MHz`.
pub fn parse_clock(text: &str) -> Result<u32, String> {
    let t = text.trim();
    let split = t.find(|c: char| !(c.is_ascii_digit() || c == '.' || c == '_')).unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let mult: u128 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "hz" => 1,
        "khz" => 1_000,
        "mhz" => 1_000_000,
        "ghz" => 1_000_000_000,
        other => return Err(format!("clock \"{text}\": unknown unit \"{other}\" (Hz, kHz, MHz or GHz)")),
    };
    let (i, f) = num.split_once('.').unwrap_or((num, ""));
    let digits = format!("{i}{f}").replace('_', "");
    if digits.is_empty() || !digits.chars().all(|c| c.is_ascii_digit()) || digits.len() > 30 {
        return Err(format!("clock \"{text}\": not a frequency (e.g. 125MHz, 250000000)"));
    }
    let mantissa: u128 = digits.parse().map_err(|_| format!("clock \"{text}\": not a frequency"))?;
    let scale = 10u128.pow(f.len() as u32);
    let hz = mantissa.saturating_mul(mult);
    if hz % scale != 0 {
        return Err(format!("clock \"{text}\" is not a whole number of Hz"));
    }
    match u32::try_from(hz / scale) {
        Ok(hz) if hz >= 1_000 => Ok(hz),
        _ => Err(format!("clock \"{text}\": must be 1 kHz..=4.29 GHz")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_and_units() {
        assert_eq!(quantity("4096", None), Ok(Qty::Int(4096)));
        assert_eq!(quantity("0x3800", None), Ok(Qty::Int(0x3800)));
        assert_eq!(quantity("0b101", None), Ok(Qty::Int(5)));
        assert_eq!(quantity("1_000", None), Ok(Qty::Int(1000)));
        assert_eq!(quantity("4KiB", None), Ok(Qty::Int(4096)));
        assert_eq!(quantity("1K", None), Ok(Qty::Int(1024)));
        assert_eq!(quantity("4", Some("KiB")), Ok(Qty::Int(4096)));
        assert_eq!(quantity("64B", None), Ok(Qty::Int(64)));
        assert_eq!(quantity("1.5K", None), Ok(Qty::Int(1536)));
        assert_eq!(quantity("10us", None), Ok(Qty::Time(10_000_000)));
        assert_eq!(quantity("1.5", Some("ms")), Ok(Qty::Time(1_500_000_000)));
        assert_eq!(quantity("100", Some("cycles")), Ok(Qty::Cycles(100)));
        assert!(quantity("4KB", None).is_err());
        assert!(quantity("0x", None).is_err());
        assert!(quantity("0x10", Some("us")).is_err());
        assert!(quantity("1.2.3", None).is_err());
        assert!(quantity("1.", None).is_err());
        assert!(quantity("99999999999999999999999", None).is_err());
        assert!(quantity("1.5", None).is_err());
        assert_eq!(Qty::Time(1_000).cycles(125_000_000), Some(1)); // 1 ns rounds up to a cycle
        assert_eq!(Qty::Time(1_000_000).cycles(125_000_000), Some(125));
        assert_eq!(parse_clock("125MHz"), Ok(125_000_000));
        assert_eq!(parse_clock("62.5 MHz"), Ok(62_500_000));
        assert_eq!(parse_clock("250000000"), Ok(250_000_000));
        assert!(parse_clock("5 GHz").is_err());
        assert!(parse_clock("fast").is_err());
    }
}
