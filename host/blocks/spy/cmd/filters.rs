//! The capture's arguments checked: numbers, base/mask pairs, directions, TLP types, the
//! payload match, and the [`Plan`] of filters and trigger they make.

use super::*;

pub(super) fn parse_number(flag: &str, text: &str) -> anyhow::Result<u64> {
    let t = text.trim().replace('_', "");
    let parsed = match t.strip_prefix("0x").or_else(|| t.strip_prefix("0X")) {
        Some(hex) => u64::from_str_radix(hex, 16),
        None => t.parse::<u64>(),
    };
    parsed.map_err(|_| anyhow!("{flag}: {text:?} is not a number (decimal, or hex with 0x)"))
}

/// `BASE[/MASK]`; without a mask, every bit of `full` is compared.
pub(super) fn parse_base_mask(flag: &str, text: &str, full: u64) -> anyhow::Result<(u64, u64)> {
    let (base, mask) = match text.split_once('/') {
        Some((b, m)) => (parse_number(flag, b)?, parse_number(flag, m)?),
        None => (parse_number(flag, text)?, full),
    };
    if base & !full != 0 || mask & !full != 0 {
        bail!("{flag}: {text:?} has bits outside 0x{full:x}");
    }
    Ok((base, mask))
}

pub(super) fn parse_directions(flag: &str, text: &str) -> anyhow::Result<(bool, bool)> {
    let (mut down, mut up) = (false, false);
    let parts: Vec<String> = text.split(',').map(|p| p.trim().to_ascii_lowercase()).filter(|p| !p.is_empty()).collect();
    refuse_duplicates(flag, &parts, String::clone).map_err(anyhow::Error::msg)?;
    for part in &parts {
        match Direction::parse(part).map_err(|e| anyhow!("{flag}: {e}"))? {
            Direction::Down => down = true,
            Direction::Up => up = true,
        }
    }
    if !down && !up {
        bail!("{flag}: {text:?} names no direction; write down, up or down,up");
    }
    Ok((down, up))
}

/// The names of a type list, checked for emptiness and duplicates.
pub(super) fn type_names<'a>(flag: &str, text: &'a str, accepted: &[&str]) -> anyhow::Result<Vec<&'a str>> {
    let names: Vec<&str> = text.split(',').filter(|p| !p.trim().is_empty()).collect();
    if names.is_empty() {
        bail!("{flag}: give some of {}, or all", accepted.join(", "));
    }
    let lower: Vec<String> = names.iter().map(|n| n.trim().to_ascii_lowercase()).collect();
    refuse_duplicates(flag, &lower, String::clone).map_err(anyhow::Error::msg)?;
    Ok(names)
}

/// The record filter's types (TLP types and `msi`).
pub(super) fn parse_types(flag: &str, text: &str) -> anyhow::Result<u16> {
    let names = type_names(flag, text, &spy::FILTER_CLASSES)?;
    spy::class_mask(&names).map_err(|e| anyhow!("{flag}: {e}"))
}

/// TLP types only (the trigger, payload capture).
pub(super) fn parse_tlp_types(flag: &str, text: &str) -> anyhow::Result<u8> {
    let names = type_names(flag, text, &CLASSES)?;
    spy::tlp_class_mask(&names).map_err(|e| anyhow!("{flag}: {e}"))
}

/// --payload, --payload-types, --payload-dir into the filters.
pub(super) fn parse_payload(a: &CaptureArgs, filters: &mut Filters) -> anyhow::Result<()> {
    let given = a.payload_types != "all" || a.payload_dir != "down,up";
    if a.payload == 0 && given {
        bail!("--payload-types and --payload-dir need --payload N (1..={})", spy::PAYLOAD_DWS_MAX);
    }
    filters.payload_dws = a.payload;
    filters.payload_classes = parse_tlp_types("--payload-types", &a.payload_types)?;
    let (down, up) = parse_directions("--payload-dir", &a.payload_dir)?;
    filters.payload_directions = u8::from(down) | u8::from(up) << 1;
    Ok(())
}

/// The spy set-up a capture command asks for.
#[derive(Debug, Clone, Serialize)]
pub(super) struct Plan {
    pub(super) filters: Filters,
    pub(super) trigger: Trigger,
    pub(super) duration_s: Option<f64>,
    pub(super) records: Option<u64>,
    pub(super) ring: u32,
    pub(super) poll_s: f64,
}

impl Plan {
    pub(super) fn parse(a: &CaptureArgs) -> anyhow::Result<Plan> {
        let (down, up) = parse_directions("--dir", &a.dir)?;
        let mut filters =
            Filters { down, up, class_mask: parse_types("--types", &a.types)?, include_own: a.include_own, ..Filters::default() };
        if let Some(text) = &a.address {
            (filters.address_base, filters.address_mask) = parse_base_mask("--address", text, !3)?;
        }
        if let Some(text) = &a.requester {
            let (id, mask) = parse_base_mask("--requester", text, 0xFFFF)?;
            (filters.requester_id, filters.requester_mask) = (id as u16, mask as u16);
        }
        parse_payload(a, &mut filters)?;
        let mut trigger = Trigger::default();
        let trigger_flags =
            a.trigger_address.is_some() || a.pre != 0 || a.post.is_some() || a.trigger_types != "all" || a.trigger_dir != "down,up";
        match a.trigger.as_deref() {
            None if trigger_flags => {
                bail!("--trigger-types, --trigger-dir, --trigger-address, --pre and --post need --trigger start or --trigger stop")
            }
            None => {}
            Some(mode) => {
                trigger.mode = match mode.trim() {
                    "start" => TriggerMode::Start,
                    "stop" => TriggerMode::Stop,
                    other => bail!("--trigger: must be start or stop, not {other:?}"),
                };
                (trigger.down, trigger.up) = parse_directions("--trigger-dir", &a.trigger_dir)?;
                trigger.class_mask = parse_tlp_types("--trigger-types", &a.trigger_types)?;
                if let Some(text) = &a.trigger_address {
                    (trigger.address_base, trigger.address_mask) = parse_base_mask("--trigger-address", text, !3)?;
                }
                trigger.pre = a.pre;
                trigger.post = a.post.unwrap_or(if trigger.mode == TriggerMode::Start { u32::MAX } else { 1 });
            }
        }
        // Checked before the card is touched, worded as the capture's own refusal would be.
        spy::SpyConfig::new(&filters, &trigger).map_err(|e| anyhow!("{}", tlpx_device::DeviceError::from(e)))?;
        if !a.ring.is_power_of_two() || !(spy::MIN_RING_RECORDS..=spy::MAX_RING_RECORDS).contains(&a.ring) {
            bail!("--ring: must be a power of two in {}..={} records, not {}", spy::MIN_RING_RECORDS, spy::MAX_RING_RECORDS, a.ring);
        }
        if a.records == Some(0) {
            bail!("--records: must be at least 1, not 0");
        }
        // Neither --duration nor --records: until stopped. A capture watches traffic that comes
        // from elsewhere (another terminal, a driver), so its natural end is the user's, as
        // tcpdump's is; a fixed default of card time would end at a wall time nobody can
        // predict (on the simulator card time runs tens to hundreds of times slower than wall
        // time, depending on the card and its traffic).
        let duration_s = match &a.duration {
            Some(d) => Some(parse_duration("--duration", d).map_err(anyhow::Error::msg)?),
            None => None,
        };
        let poll_s = parse_duration("--poll", &a.poll).map_err(anyhow::Error::msg)?;
        // Before the card is touched: a trace that cannot be written fails at once.
        check_output_file("--output", &a.output)?;
        if let Some(path) = &a.pcapng {
            check_output_file("--pcapng", path)?;
            if path == &a.output || crate::args::same_file(path, &a.output) {
                bail!("--pcapng {}: that is the --output file {}; give the pcapng file another name", path.display(), a.output.display());
            }
        }
        Ok(Plan { filters, trigger, duration_s, records: a.records, ring: a.ring, poll_s })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base_mask_parsing() {
        assert_eq!(parse_base_mask("--address", "0x1000/0xF000", !3).expect("ok"), (0x1000, 0xF000));
        assert_eq!(parse_base_mask("--address", "0x18", !3).expect("ok"), (0x18, !3));
        assert!(parse_base_mask("--address", "0x1001/0xFFFF", !3).expect_err("unaligned").to_string().contains("bits outside"));
        assert!(parse_base_mask("--requester", "zz", 0xFFFF).expect_err("bad").to_string().contains("not a number"));
        assert_eq!(parse_types("--types", "mrd,cpld").expect("ok"), 0b1001);
        assert!(parse_directions("--dir", "sideways").is_err());
    }
}
