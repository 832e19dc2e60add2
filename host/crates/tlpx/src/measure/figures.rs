//! What the figures of a DMA sweep are: the point lines and their header, the legend, and
//! the simulator's limits of the efficiency, the read latency and the knobs it cannot vary.

use crate::cmd::bw::{BwPoint, CacheState, Common, PatternArg};
use crate::output::bytes;
use crate::results::{Environment, SimLimit};

/// The column header of the point lines; on the simulator the efficiency column is `EFF*`,
/// its footnote being in [`legend`].
pub fn header_line(simulated: bool) -> String {
    format!(
        "{:<6} {:>7} {:>7} {:>3} {:<6} {:>21} {:>11} {:>8} {:>11} {:>6}  DATA",
        "OP",
        "SIZE",
        "WINDOW",
        "OFF",
        "PAT",
        "ACHIEVED MB/s",
        "MODEL MB/s",
        if simulated { "EFF*" } else { "EFF" },
        "TRANSFERS",
        "ERRORS"
    )
}

/// `efficiency_meaning` of a point or table row: the unit, and on the simulator why it cannot
/// exceed 1.0.
pub fn efficiency_meaning(simulated: bool) -> &'static str {
    if simulated {
        "achieved / model as a fraction (1.0 = 100 % of the model's limit); SIMULATED: tlpx-sim paces its link with this same \
         model, so it cannot exceed 1.0 by construction: it shows how near the card's gateware comes to the model, not how \
         good a host is"
    } else {
        "achieved / model as a fraction (1.0 = 100 % of the model's limit): how near this host and card come to the link's limit"
    }
}

/// The lines above a table of points: the clock of the throughputs and what EFF is.
pub fn legend(env: &Environment) -> Vec<String> {
    let mut out = vec![format!(
        "clock: ACHIEVED is payload MB/s over {}, from the card's cycle counter; MODEL is arithmetic (tlpx-model)",
        env.card_clock()
    )];
    if env.simulated {
        out.push(
            "EFF* = ACHIEVED / MODEL in %. * SIMULATED: tlpx-sim paces its link with this same model, so EFF cannot exceed \
             100 % here (by construction): it shows how near the card's gateware comes to the model, not how good a host is"
                .to_string(),
        );
    } else {
        out.push("EFF = ACHIEVED / MODEL in %: how near this host and card come to the link's limit".to_string());
    }
    out
}

/// How `bw` and `lat` print their points: tlpx's own lines, or pcie-bench's table
/// (tlpx_results::pciebench) as text or CSV.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum TableFormat {
    /// tlpx's lines: every figure with its clock, the model and the data check.
    #[default]
    Tlpx,
    /// pcie-bench's text table (Test PAT Cache HO DO WinSZ SZ ...), and nothing else on stdout.
    Pciebench,
    /// pcie-bench's CSV (the same columns, raw values, CRLF).
    PciebenchCsv,
}

impl TableFormat {
    /// Refuses --format with --json (one document on stdout at a time); returns whether
    /// tlpx's own text lines are printed.
    pub fn tlpx_text(self, json: bool) -> anyhow::Result<bool> {
        if json && self != TableFormat::Tlpx {
            anyhow::bail!("--format {} prints pcie-bench's table and --json the result document: choose one (--output FILE.json writes the document beside the table)", self.name());
        }
        Ok(!json && self == TableFormat::Tlpx)
    }

    pub fn name(self) -> &'static str {
        match self {
            TableFormat::Tlpx => "tlpx",
            TableFormat::Pciebench => "pciebench",
            TableFormat::PciebenchCsv => "pciebench-csv",
        }
    }

    /// pcie-bench's style, or None for tlpx's own lines.
    pub fn pciebench(self) -> Option<tlpx_results::pciebench::Style> {
        match self {
            TableFormat::Tlpx => None,
            TableFormat::Pciebench => Some(tlpx_results::pciebench::Style::Text),
            TableFormat::PciebenchCsv => Some(tlpx_results::pciebench::Style::Csv),
        }
    }
}

/// The simulator limit of every efficiency figure.
pub fn efficiency_limit() -> SimLimit {
    SimLimit::new(
        "efficiency_paced_by_the_model",
        &["points[].efficiency", "table[].efficiency"],
        "efficiency (achieved / model) cannot exceed 1.0 (100 %) by construction: tlpx-sim paces its link with the same \
         pcie-bench model it is compared with, so it shows how near the card's gateware comes to the model (transfer sizes, \
         datapath beats, the flushing read), not how good a host is; on a real host it is the finding",
    )
}

/// The simulator limit of the root complex's latency (a setting, not a measurement).
pub fn read_latency_limit(env: &Environment) -> Option<SimLimit> {
    let sim = env.sim.as_ref()?;
    Some(SimLimit::new(
        "dma_read_latency_configured",
        &["points[].latency_ns", "latency[].latency_ns"],
        format!(
            "the root complex's part of every DMA read is tlpx-sim's setting, {} ns + 0..{} ns uniform jitter (--dma-latency-ns, \
             --dma-jitter-ns, seed {}), not a measurement of a root complex, its caches or memory; the rest is the modelled link \
             and the card",
            sim.dma_latency_ns, sim.dma_jitter_ns, sim.seed
        ),
    ))
}

/// The knobs of `common` that the simulator cannot vary, when they are set away from their
/// defaults (`--window`, `--pattern`, `--ro`, `--ns`).
pub fn knob_limits(common: &Common) -> Vec<SimLimit> {
    let mut out = Vec::new();
    let window_set = common.windows != [1 << 20];
    let pattern_set = common.patterns != [PatternArg::Seq];
    if window_set || pattern_set {
        let flags: Vec<&str> = [("--window", window_set), ("--pattern", pattern_set)].iter().filter(|f| f.1).map(|f| f.0).collect();
        out.push(SimLimit::new(
            "window_and_address_pattern_not_modelled",
            &flags,
            format!(
                "{} only {} the card's addresses here: tlpx-sim has no host caches (no LLC, no DDIO), charges no IOMMU \
                 translation time (its IOMMU checks addresses only: no IOTLB, no page walks) and has no NUMA, so these \
                 figures cannot depend on {}; sweep {} on a real host",
                flags.join(" and "),
                if flags.len() == 1 { "moves" } else { "move" },
                if flags.len() == 1 { "it" } else { "them" },
                if flags.len() == 1 { "it" } else { "them" }
            ),
        ));
    }
    let cache_set = common.host.cache != CacheState::HostWarm;
    let node_set = common.host.numa_node.is_some();
    if cache_set || node_set {
        let flags: Vec<&str> = [("--cache", cache_set), ("--numa-node", node_set)].iter().filter(|f| f.1).map(|f| f.0).collect();
        out.push(SimLimit::new(
            "host_memory_state_not_modelled",
            &flags,
            format!(
                "{} {} real host state here ({}, checked), \
                 but the simulated card's DMA reaches tlpx-sim's host memory at its configured latency whatever the CPU's \
                 caches hold and wherever the pages are: no LLC, no DDIO, no NUMA distance, so card-time figures cannot \
                 differ by {} (device-warm's warm-up is a card run of its own, outside every figure); compare states on a real host",
                flags.join(" and "),
                if flags.len() == 1 { "sets" } else { "set" },
                [(cache_set, "the cache state: a flush, a sweep or the card's warm-up writes"), (node_set, "the pages' NUMA node")]
                    .iter()
                    .filter(|s| s.0)
                    .map(|s| s.1)
                    .collect::<Vec<_>>()
                    .join("; "),
                if flags.len() == 1 { "it" } else { "them" }
            ),
        ));
    }
    if common.relaxed_ordering || common.no_snoop {
        let flags: Vec<&str> = [("--ro", common.relaxed_ordering), ("--ns", common.no_snoop)].iter().filter(|f| f.1).map(|f| f.0).collect();
        out.push(SimLimit::new(
            "tlp_attributes_ignored",
            &flags,
            format!(
                "{} {} TLP attributes that tlpx-sim's root complex ignores (it neither reorders nor skips snooping), so \
                 {} nothing here; on a real host {} ordering and snooping",
                flags.join(" and "),
                if flags.len() == 1 { "sets" } else { "set" },
                if flags.len() == 1 { "it changes" } else { "they change" },
                if flags.len() == 1 { "it can change" } else { "they can change" }
            ),
        ));
    }
    out
}

pub fn point_line(p: &BwPoint) -> String {
    let a = &p.achieved_bytes_per_second;
    let achieved = if a.count > 1 {
        format!("{:.1} ({:.1}..{:.1})", a.median / 1e6, a.min / 1e6, a.max / 1e6)
    } else {
        format!("{:.1}", a.median / 1e6)
    };
    let model = p.model_bytes_per_second.map_or("-".to_string(), |m| format!("{:.1}", m / 1e6));
    let eff = p.efficiency.as_ref().map_or("-".to_string(), |e| format!("{:.1} %", e.median * 100.0));
    let data = if !p.config.check_data {
        "not checked".to_string()
    } else {
        let card = if p.read_bytes > 0 { format!("card {} bad DW", p.card_errors.data_mismatches) } else { String::new() };
        let host = p.host_check.as_ref().map(|c| if c.bad() == 0 { "host ok".to_string() } else { format!("host BAD: {}", c.bad_text()) });
        [Some(card).filter(|s| !s.is_empty()), host].into_iter().flatten().collect::<Vec<_>>().join(", ")
    };
    let ended: Vec<&str> = p.runs.iter().map(|r| r.ended_by.as_str()).filter(|e| *e != "count" && *e != "duration").collect();
    let ended = if ended.is_empty() { String::new() } else { format!("  ENDED BY {}", ended.join(",")) };
    let ended = if p.transfers == 0 { format!("{ended}  NO TRANSFER (nothing measured)") } else { ended };
    format!(
        "{:<6} {:>7} {:>7} {:>3} {:<6} {:>21} {:>11} {:>8} {:>11} {:>6}  {data}{ended}",
        p.operation,
        bytes(u64::from(p.transfer_size)),
        bytes(p.window),
        p.offset,
        p.pattern,
        achieved,
        model,
        eff,
        format!("{}x{}", p.runs.len(), p.transfers / p.runs.len().max(1) as u64),
        p.card_error_total
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::measure::config::parse_common;
    use crate::measure::config::tests::args;

    #[test]
    fn knobs_the_simulator_cannot_vary_are_named_only_when_set() {
        assert!(knob_limits(&parse_common(&args()).expect("defaults")).is_empty());
        let mut a = args();
        a.window = "4K,64M".into();
        a.pattern = vec![PatternArg::Seq, PatternArg::Random];
        a.ns = true;
        let l = knob_limits(&parse_common(&a).expect("valid"));
        assert_eq!(l.iter().map(|l| l.id).collect::<Vec<_>>(), ["window_and_address_pattern_not_modelled", "tlp_attributes_ignored"]);
        assert_eq!(l[0].concerns, ["--window", "--pattern"]);
        assert!(l[0].statement.starts_with("--window and --pattern only move") && l[0].statement.contains("IOTLB"), "{l:?}");
        assert_eq!(l[1].concerns, ["--ns"]);
    }
}
