//! Parsing of size lists and card-time durations given on the command line.
//!
//! A size list is comma-separated items; each item is one size or a range:
//!
//! | text | sizes |
//! |---|---|
//! | `64` | 64 |
//! | `4K`, `4k`, `4KiB`, `0x1000` | 4096 |
//! | `1M`, `1MiB` | 1048576 |
//! | `64..4096` | 64, 128, 256, ... 4096 (doubling; the last is included when reached) |
//! | `64..512+64` | 64, 128, 192, ... 512 (linear step 64) |
//! | `64,256,4K` | 64, 256, 4096 |
//!
//! A size given twice (`64,64`, or `64..4096,256`) is refused, naming it: every size is a
//! measurement point, and measuring one twice is never what was meant.

/// Most sizes one list may hold (a sweep larger than this is a typo, not a plan).
pub const MAX_LIST: usize = 10_000;

fn usage(flag: &str) -> String {
    format!(
        "{flag} takes sizes in bytes: a number like 64, 4K or 1MiB, a list like 64,256,4096, a doubling range like 64..4096, or a stepped range like 64..512+64"
    )
}

/// Parses one size: decimal or 0x hex, optionally followed by B, K/KiB/KB or M/MiB/MB (binary units).
pub fn parse_size(text: &str) -> Option<u64> {
    let t = text.trim().replace('_', "");
    let lower = t.to_ascii_lowercase();
    let (digits, scale) =
        [("mib", 1u64 << 20), ("mb", 1 << 20), ("m", 1 << 20), ("kib", 1 << 10), ("kb", 1 << 10), ("k", 1 << 10), ("b", 1)]
            .iter()
            .find_map(|(suffix, scale)| lower.strip_suffix(suffix).map(|d| (d.to_string(), *scale)))
            .unwrap_or((lower.clone(), 1));
    let digits = digits.trim();
    // "0xb" would lose its hex digit to the "b" suffix: hex numbers take no suffix.
    let value = if let Some(hex) = lower.strip_prefix("0x") {
        u64::from_str_radix(hex, 16).ok()?
    } else {
        if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        digits.parse::<u64>().ok()?.checked_mul(scale)?
    };
    Some(value)
}

/// Parses a size list (see the module documentation). `flag` names the option in errors,
/// `accepted` the sizes it takes ("1..=65536 bytes"), for the error about a negative size;
/// the caller checks them.
pub fn parse_size_list(flag: &str, text: &str, accepted: &str) -> Result<Vec<u64>, String> {
    let mut out: Vec<u64> = Vec::new();
    // Which item gave each size, for the message about a duplicate.
    let mut given_by: std::collections::HashMap<u64, &str> = std::collections::HashMap::new();
    if text.trim().is_empty() {
        return Err(format!("{flag} is empty: {}", usage(flag)));
    }
    for item in text.split(',') {
        let item = item.trim();
        if item.starts_with('-') {
            return Err(format!("{flag}: {item:?} is negative; accepted: {accepted}"));
        }
        let bad = || format!("{flag}: {item:?} is not a size or a range; {}", usage(flag));
        let values: Vec<u64> = if let Some((a, rest)) = item.split_once("..") {
            let rest = rest.strip_prefix('=').unwrap_or(rest);
            let (b, step) = match rest.split_once('+') {
                Some((b, s)) => (b, Some(parse_size(s).ok_or_else(bad)?)),
                None => (rest, None),
            };
            let start = parse_size(a).ok_or_else(bad)?;
            let end = parse_size(b).ok_or_else(bad)?;
            if start > end {
                return Err(format!("{flag}: the range {item:?} runs backwards ({start} > {end})"));
            }
            let mut v = Vec::new();
            let mut x = start;
            match step {
                Some(0) => return Err(format!("{flag}: the step of {item:?} must be at least 1")),
                Some(s) => {
                    while x <= end {
                        v.push(x);
                        if v.len() > MAX_LIST {
                            break;
                        }
                        x = match x.checked_add(s) {
                            Some(n) => n,
                            None => break,
                        };
                    }
                }
                None => {
                    if start == 0 {
                        return Err(format!("{flag}: a doubling range cannot start at 0 ({item:?}); start at 1 or more"));
                    }
                    while x <= end {
                        v.push(x);
                        x = match x.checked_mul(2) {
                            Some(n) => n,
                            None => break,
                        };
                    }
                }
            }
            v
        } else {
            vec![parse_size(item).ok_or_else(bad)?]
        };
        for v in values {
            if let Some(first) = given_by.insert(v, item) {
                let by = if first == item { format!("{item:?} twice") } else { format!("{first:?} and {item:?}") };
                return Err(format!("{flag}: {v} is given twice ({by}); give each size once"));
            }
            out.push(v);
        }
        if out.len() > MAX_LIST {
            return Err(format!("{flag}: {text:?} gives more than {MAX_LIST} sizes"));
        }
    }
    Ok(out)
}

/// Parses a time such as `500us`, `2ms`, `1s`, `1500ns` into seconds (card time).
pub fn parse_duration(flag: &str, text: &str) -> Result<f64, String> {
    let t = text.trim();
    let range = || format!("{flag}: {t:?} must be a positive duration of at most 1 hour, such as 500us or 2ms");
    if t.starts_with('-') {
        return Err(range());
    }
    let split = t.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(t.len());
    let (number, unit) = t.split_at(split);
    let scale = match unit.trim() {
        "ns" => 1e-9,
        "us" | "µs" => 1e-6,
        "ms" => 1e-3,
        "s" => 1.0,
        _ => return Err(format!("{flag}: {t:?} is not a duration; write a number and a unit: ns, us, ms or s (e.g. 2ms)")),
    };
    match number.parse::<f64>() {
        Ok(v) if v > 0.0 && v.is_finite() && v * scale <= 3600.0 => Ok(v * scale),
        _ => Err(range()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn list(t: &str) -> Vec<u64> {
        match parse_size_list("--sizes", t, "1..=65536 bytes") {
            Ok(v) => v,
            Err(e) => panic!("{t}: {e}"),
        }
    }

    #[test]
    fn single_sizes_and_units() {
        assert_eq!(parse_size("64"), Some(64));
        assert_eq!(parse_size("4K"), Some(4096));
        assert_eq!(parse_size("4kib"), Some(4096));
        assert_eq!(parse_size("4KB"), Some(4096));
        assert_eq!(parse_size("1MiB"), Some(1 << 20));
        assert_eq!(parse_size("0x1000"), Some(4096));
        assert_eq!(parse_size("0xb"), Some(11));
        assert_eq!(parse_size("256B"), Some(256));
        assert_eq!(parse_size("1_024"), Some(1024));
        assert_eq!(parse_size(""), None);
        assert_eq!(parse_size("K"), None);
        assert_eq!(parse_size("-4"), None);
        assert_eq!(parse_size("4.5K"), None);
        assert_eq!(parse_size("abc"), None);
    }

    #[test]
    fn doubling_ranges_include_the_end_when_reached() {
        assert_eq!(list("64..4096"), vec![64, 128, 256, 512, 1024, 2048, 4096]);
        assert_eq!(list("64..1000"), vec![64, 128, 256, 512]);
        assert_eq!(list("1..4"), vec![1, 2, 4]);
        assert_eq!(list("4K..16K"), vec![4096, 8192, 16384]);
        assert_eq!(list("64..=256"), vec![64, 128, 256]);
    }

    #[test]
    fn stepped_ranges_and_lists() {
        assert_eq!(list("64..256+64"), vec![64, 128, 192, 256]);
        assert_eq!(list("64,128,256"), vec![64, 128, 256]);
        assert_eq!(list("4096, 64..128"), vec![4096, 64, 128]);
    }

    #[test]
    fn duplicates_are_refused_naming_the_size() {
        for (text, needle) in [
            ("64,64", "--sizes: 64 is given twice (\"64\" twice)"),
            ("4096, 64..128, 64", "--sizes: 64 is given twice (\"64..128\" and \"64\")"),
            ("64..4096,4K", "4096 is given twice (\"64..4096\" and \"4K\")"),
            ("1K,1024", "1024 is given twice"),
        ] {
            match parse_size_list("--sizes", text, "1..=65536 bytes") {
                Ok(v) => panic!("{text:?} parsed as {v:?}"),
                Err(e) => assert!(e.contains(needle) && e.contains("give each size once"), "{text:?}: {e}"),
            }
        }
    }

    #[test]
    fn bad_lists_name_the_item() {
        for (text, needle) in [
            ("", "empty"),
            ("64,,128", "\"\""),
            ("abc", "\"abc\""),
            ("4096..64", "backwards"),
            ("0..64", "cannot start at 0"),
            ("64..128+0", "step"),
            ("1..100000+1", "more than"),
            ("-64", "\"-64\" is negative; accepted: 1..=65536 bytes"),
            ("64,-4K", "\"-4K\" is negative"),
        ] {
            match parse_size_list("--sizes", text, "1..=65536 bytes") {
                Ok(v) => panic!("{text:?} parsed as {v:?}"),
                Err(e) => {
                    assert!(e.contains(needle), "{text:?}: {e}");
                    assert!(e.starts_with("--sizes"), "{e}");
                }
            }
        }
    }

    #[test]
    fn durations() {
        for (text, secs) in [("2ms", 2e-3), ("500us", 500e-6), ("1.5s", 1.5), ("100ns", 100e-9)] {
            let got = parse_duration("--duration", text).unwrap_or(f64::NAN);
            assert!((got / secs - 1.0).abs() < 1e-12, "{text}: {got}");
        }
        for bad in ["2", "ms", "0ms", "-1ms", "2 parsecs", "7200s"] {
            assert!(parse_duration("--duration", bad).is_err(), "{bad}");
        }
        let e = parse_duration("--poll", "-2ms").expect_err("negative");
        assert!(e.starts_with("--poll: \"-2ms\"") && e.contains("positive duration of at most 1 hour"), "{e}");
    }
}
