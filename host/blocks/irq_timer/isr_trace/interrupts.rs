//! /proc/interrupts: which interrupt numbers belong to the card, found from the handler
//! names vfio-pci gives them or from the interrupt chip LitePCIe's driver leaves them on.

use crate::DeviceError;

/// The interrupt numbers of the card at `pci_address` (`0000:01:00.0` or `01:00.0`) in the
/// text of /proc/interrupts, in the order listed: lines whose handler is vfio-pci's
/// `vfio-msi[N](addr)` or `vfio-msix[N](addr)` for that address, and lines of LitePCIe's
/// driver (handler `litepcie`, which does not name the card) whose interrupt chip does:
/// `PCI-MSI-0000:01:00.0` on recent kernels, or `PCI-MSI` with the hardware irq number
/// that encodes the requester id (`524288-edge` = bus 1, device 0, function 0).
pub fn find_msi_irqs(proc_interrupts: &str, pci_address: &str) -> Result<Vec<u32>, DeviceError> {
    let target = crate::pci::parse_address(pci_address)?;
    let mut lines = proc_interrupts.lines();
    let cpus =
        proc_interrupts.lines().next().filter(|h| h.split_whitespace().all(|t| t.starts_with("CPU"))).map(|h| h.split_whitespace().count());
    if cpus.is_some() {
        lines.next();
    }
    let mut irqs = Vec::new();
    for line in lines {
        let Some((number, rest)) = line.trim_start().split_once(':') else { continue };
        let Ok(irq) = number.trim().parse::<u32>() else { continue };
        // The per-CPU counts, then the chip, the hardware irq and flow, the handler names.
        let mut tokens = token_spans(rest);
        let mut skipped = 0;
        while let Some(&(s, e)) = tokens.first() {
            let counted = cpus.is_some_and(|n| skipped >= n);
            if counted || !rest[s..e].bytes().all(|b| b.is_ascii_digit()) {
                break;
            }
            tokens.remove(0);
            skipped += 1;
        }
        let Some(&(cs, ce)) = tokens.first() else { continue };
        let chip = &rest[cs..ce];
        let flow = tokens.iter().skip(1).position(|&(s, e)| is_hwirq_flow(&rest[s..e]));
        let (hwirq, names_from) = match flow {
            Some(i) => {
                let (s, e) = tokens[i + 1];
                (rest[s..e].split('-').next().and_then(|d| d.parse::<u64>().ok()), e)
            }
            None => (None, ce),
        };
        let names: Vec<&str> = rest[names_from..].split(',').map(str::trim).filter(|n| !n.is_empty()).collect();
        let matched = names.iter().any(|name| {
            vfio_name_address(name).is_some_and(|a| a == target) || (name.starts_with("litepcie") && chip_names_device(chip, hwirq, target))
        });
        if matched {
            irqs.push(irq);
        }
    }
    Ok(irqs)
}

/// (start, end) of each whitespace-separated token.
fn token_spans(s: &str) -> Vec<(usize, usize)> {
    let mut spans = Vec::new();
    let mut start = None;
    for (i, c) in s.char_indices() {
        match (c.is_whitespace(), start) {
            (true, Some(st)) => {
                spans.push((st, i));
                start = None;
            }
            (false, None) => start = Some(i),
            _ => {}
        }
    }
    if let Some(st) = start {
        spans.push((st, s.len()));
    }
    spans
}

/// `524288-edge`, `0-fasteoi`, `-edge`: the hardware irq number joined to the flow handler.
fn is_hwirq_flow(token: &str) -> bool {
    token
        .split_once('-')
        .is_some_and(|(d, flow)| d.bytes().all(|b| b.is_ascii_digit()) && !flow.is_empty() && flow.bytes().all(|b| b.is_ascii_alphabetic()))
}

/// `vfio-msi[0](0000:01:00.0)` / `vfio-msix[3](01:00.0)` → the address.
fn vfio_name_address(name: &str) -> Option<(u16, u8, u8, u8)> {
    let rest = name.strip_prefix("vfio-msix[").or_else(|| name.strip_prefix("vfio-msi["))?;
    let (vector, rest) = rest.split_once("](")?;
    vector.parse::<u32>().ok()?;
    crate::pci::parse_address(rest.strip_suffix(')')?).ok()
}

/// Whether an interrupt chip column names the device: `PCI-MSI-0000:01:00.0`,
/// `PCI-MSIX-0000:01:00.0`, or a `PCI-MSI` chip whose hardware irq encodes it
/// (pci_msi_domain_calc_hwirq: vector | requester id << 11 | domain << 27).
fn chip_names_device(chip: &str, hwirq: Option<u64>, target: (u16, u8, u8, u8)) -> bool {
    for prefix in ["PCI-MSIX-", "PCI-MSI-"] {
        if let Some(i) = chip.find(prefix) {
            if let Ok(a) = crate::pci::parse_address(&chip[i + prefix.len()..]) {
                return a == target;
            }
        }
    }
    match hwirq {
        Some(h) if chip.contains("PCI-MSI") => {
            let rid = (h >> 11) & 0xFFFF;
            let domain = h >> 27;
            let (d, bus, dev, func) = target;
            domain == u64::from(d) && rid == u64::from(bus) << 8 | u64::from(dev) << 3 | u64::from(func)
        }
        _ => false,
    }
}
#[cfg(test)]
mod tests {
    use super::super::testdata::PROC_INTERRUPTS;
    use super::*;

    #[test]
    fn proc_interrupts_gives_the_vfio_and_litepcie_vectors_of_one_card() {
        assert_eq!(find_msi_irqs(PROC_INTERRUPTS, "0000:01:00.0").expect("ok"), vec![121]);
        assert_eq!(find_msi_irqs(PROC_INTERRUPTS, "01:00.0").expect("short form"), vec![121]);
        assert_eq!(find_msi_irqs(PROC_INTERRUPTS, "0000:03:00.0").expect("ok"), vec![123, 124, 125]);
        assert_eq!(find_msi_irqs(PROC_INTERRUPTS, "0000:02:00.0").expect("old kernel hwirq"), vec![122]);
        assert_eq!(find_msi_irqs(PROC_INTERRUPTS, "0000:04:00.0").expect("chip name"), vec![126]);
        // nvme at 05:00.0 is not a card's handler; a card not there has none.
        assert!(find_msi_irqs(PROC_INTERRUPTS, "0000:05:00.0").expect("ok").is_empty());
        assert!(find_msi_irqs(PROC_INTERRUPTS, "0000:06:00.0").expect("ok").is_empty());
        // This machine's own listing (2 CPUs, virtio MSI-X) has no card at all.
        let here = std::fs::read_to_string("/proc/interrupts").expect("/proc/interrupts");
        assert!(find_msi_irqs(&here, "0000:01:00.0").expect("parses").is_empty());
    }

    #[test]
    fn a_bad_pci_address_is_refused_naming_it() {
        let e = find_msi_irqs(PROC_INTERRUPTS, "01:00").expect_err("no function").to_string();
        assert!(e.contains("\"01:00\""), "{e}");
    }
}
