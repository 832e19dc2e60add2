//! `tlpx model`: the analytic PCIe bandwidth limit (pcie-bench's model, tlpx-model) for a
//! link and a list of transfer sizes.
//!
//! The link starts as the one libpci reports for `--device` when that device is reachable,
//! otherwise pcie-bench's default Gen3 x8, MPS 256, MRRS 512, RCB 64; every `--gen`,
//! `--lanes`, `--mps`, `--mrrs`, `--rcb` given replaces one field. The output says which.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

use anyhow::bail;
use clap::{Args, ValueEnum};
use serde::Serialize;
use tlpx_model::link::{self, CompletionSplit, LinkConfig};

/// The document's types are tlpx-results'.
pub use tlpx_results::model::{Body, ModelPoint, Parameters};

use crate::args::{check_optional_output, whole, whole_as};
use crate::output::{bytes, print_json};
use crate::results::{self, ModelConfig, ResultDoc};
use crate::session;
use crate::sizes::parse_size_list;

/// What --mps and --mrrs accept.
const POWERS_128_4096: &str = "128, 256, 512, 1024, 2048 or 4096 bytes";

/// Largest transfer size the model command accepts (1 GiB).
pub const MAX_MODEL_SIZE: u64 = 1 << 30;

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ModelOp {
    /// The device reads host memory (BW_RD).
    Read,
    /// The device writes host memory (BW_WR).
    Write,
    /// Both at once, each stream's bandwidth (BW_RDWR).
    Rdwr,
    /// Read, write and read+write.
    All,
}

impl ModelOp {
    pub fn expand(self) -> Vec<link::Operation> {
        match self {
            ModelOp::Read => vec![link::Operation::Read],
            ModelOp::Write => vec![link::Operation::Write],
            ModelOp::Rdwr => vec![link::Operation::ReadWrite],
            ModelOp::All => vec![link::Operation::Read, link::Operation::Write, link::Operation::ReadWrite],
        }
    }
}

/// Short name of a model operation as tlpx prints it.
pub fn op_name(op: link::Operation) -> &'static str {
    match op {
        link::Operation::Read => "read",
        link::Operation::Write => "write",
        link::Operation::ReadWrite => "rdwr",
    }
}

#[derive(Debug, Args)]
pub struct Cmd {
    /// PCIe generation, 1..5 [default: the device's, else 3].
    #[arg(long = "gen", value_parser = whole(1u8, 5), allow_negative_numbers = true)]
    pub generation: Option<u8>,
    /// Link width: 1, 2, 4, 8 or 16 lanes [default: the device's, else 8].
    #[arg(long, value_parser = parse_lanes, allow_negative_numbers = true)]
    pub lanes: Option<u8>,
    /// Max payload size: 128..4096 bytes, a power of two [default: the device's, else 256].
    #[arg(long, value_parser = whole_as(128u32, 4096, POWERS_128_4096), allow_negative_numbers = true)]
    pub mps: Option<u32>,
    /// Max read request size: 128..4096 bytes, a power of two [default: the device's, else 512].
    #[arg(long, value_parser = whole_as(128u32, 4096, POWERS_128_4096), allow_negative_numbers = true)]
    pub mrrs: Option<u32>,
    /// Read completion boundary of the root complex: 64 or 128 bytes [default: the device's, else 64].
    #[arg(long, value_parser = whole_as(64u32, 128, "64 or 128 bytes"), allow_negative_numbers = true)]
    pub rcb: Option<u32>,
    /// Requests with 64-bit addresses (4 DW headers); without it 3 DW headers as below 4 GiB.
    #[arg(long)]
    pub addr64: bool,
    /// Completions cut at every RCB, as some root complexes do (default: up to MPS each).
    #[arg(long)]
    pub rcb_completions: bool,
    /// Transfer sizes: 64,128,256 or 64..4096 (doubling) or 64..512+64 (step); K and M suffixes.
    #[arg(long, default_value = "64..4096", allow_hyphen_values = true)]
    pub sizes: String,
    /// What the device does.
    #[arg(long, value_enum, default_value_t = ModelOp::All)]
    pub op: ModelOp,
    /// Also write the result document (JSON) to this file.
    #[arg(long, value_name = "FILE.json")]
    pub output: Option<PathBuf>,
}

fn parse_lanes(s: &str) -> Result<u8, String> {
    match s.parse() {
        Ok(l @ (1 | 2 | 4 | 8 | 16)) => Ok(l),
        _ => Err(format!("link width must be 1, 2, 4, 8 or 16 lanes, not {s:?}")),
    }
}

/// The model for `op` at `size` on `cfg`.
pub fn point(cfg: &LinkConfig, op: link::Operation, size: u64, split: CompletionSplit) -> ModelPoint {
    let a = link::analyse(cfg, op, size, split);
    ModelPoint {
        operation: op,
        transfer_size: size,
        bytes_per_second: a.bandwidth.bytes_per_second,
        gbit_per_second: a.bandwidth.gbit_per_second(),
        efficiency: a.bandwidth.efficiency,
        analysis: a,
    }
}

pub fn run(cmd: &Cmd, device: &str, json: bool) -> anyhow::Result<ExitCode> {
    let started = Instant::now();
    let sizes = parse_size_list("--sizes", &cmd.sizes, "1..=1G bytes").map_err(anyhow::Error::msg)?;
    if let Some(bad) = sizes.iter().find(|s| **s == 0 || **s > MAX_MODEL_SIZE) {
        bail!("--sizes: {bad} is not a transfer size the model takes: use 1..={MAX_MODEL_SIZE} bytes");
    }
    for (flag, value) in [("--mps", cmd.mps), ("--mrrs", cmd.mrrs)] {
        if let Some(v) = value {
            if !(v.is_power_of_two() && (128..=4096).contains(&v)) {
                bail!("{flag} must be {POWERS_128_4096}, not {v}");
            }
        }
    }
    if let Some(r) = cmd.rcb {
        if r != 64 && r != 128 {
            bail!("--rcb must be 64 or 128 bytes, not {r}");
        }
    }
    check_optional_output("--output", cmd.output.as_deref())?;

    // Start from the device's link unless every field is given.
    let mut environment = results::machine_environment();
    let all_given = cmd.generation.is_some() && cmd.lanes.is_some() && cmd.mps.is_some() && cmd.mrrs.is_some();
    let default = LinkConfig { addr64: cmd.addr64, ..LinkConfig::PCIE_BENCH_DEFAULT };
    let (mut cfg, mut source, link_report) = if all_given {
        (default, "command line".to_string(), None)
    } else {
        match session::device_link(device) {
            Ok(found) => {
                let l = &found.link;
                environment.device = Some(found.location.clone());
                environment.pci_address = Some(found.pci_address.clone());
                environment.backend = found.sim.as_ref().map(|_| "sim".to_string());
                environment.simulated = found.sim.is_some();
                environment.sim = found.sim.clone();
                let cfg = LinkConfig { generation: l.generation, lanes: l.lanes, mps: l.mps, mrrs: l.mrrs, rcb: l.rcb, addr64: cmd.addr64 };
                (cfg, format!("libpci ({})", found.location), Some(found.link))
            }
            Err(e) => (default, format!("default: pcie-bench's Gen3 x8, MPS 256, MRRS 512, RCB 64 (no device reachable: {e:#})"), None),
        }
    };
    let mut overridden = Vec::new();
    if let Some(g) = cmd.generation {
        cfg.generation = g;
        overridden.push("gen");
    }
    if let Some(l) = cmd.lanes {
        cfg.lanes = l;
        overridden.push("lanes");
    }
    if let Some(m) = cmd.mps {
        cfg.mps = m;
        overridden.push("mps");
    }
    if let Some(m) = cmd.mrrs {
        cfg.mrrs = m;
        overridden.push("mrrs");
    }
    if let Some(r) = cmd.rcb {
        cfg.rcb = r;
        overridden.push("rcb");
    }
    if !overridden.is_empty() && source != "command line" {
        source = format!("{source}; from the command line: {}", overridden.join(", "));
    }
    if let Err(e) = cfg.validate() {
        bail!("the model cannot describe this link ({source}): {e}");
    }
    let split = if cmd.rcb_completions { CompletionSplit::Rcb } else { CompletionSplit::Mps };
    let ops = cmd.op.expand();
    let points: Vec<ModelPoint> =
        sizes.iter().flat_map(|&size| ops.iter().map(move |&op| (op, size))).map(|(op, size)| point(&cfg, op, size, split)).collect();

    let doc = ResultDoc::new(
        "model",
        Parameters { sizes: sizes.clone(), operations: ops.iter().map(|o| op_name(*o)).collect(), link_source: source.clone(), overridden },
        environment,
        link_report,
        Some(ModelConfig { link: cfg, completion_split: split }),
        Body { raw_bytes_per_second: cfg.raw_bytes_per_second(), tlp_bytes_per_second: cfg.tlp_bytes_per_second(), points },
        started.elapsed().as_secs_f64(),
        Vec::new(),
    );
    if let Some(path) = &cmd.output {
        results::write_json(path, &doc)?;
    }
    if json {
        print_json(&doc)?;
        return Ok(ExitCode::SUCCESS);
    }
    crate::outln!("link        {cfg}");
    crate::outln!("            from {source}");
    crate::outln!(
        "raw         {:.1} MB/s per direction ({:.3} Gb/s); {:.1} MB/s left for TLPs after DLLPs and SKPs",
        cfg.raw_bytes_per_second() / 1e6,
        cfg.raw_bytes_per_second() * 8.0 / 1e9,
        cfg.tlp_bytes_per_second() / 1e6
    );
    crate::outln!(
        "completions {}",
        match split {
            CompletionSplit::Mps => "up to MPS each (pcie-bench's default)",
            CompletionSplit::Rcb => "one per RCB (--rcb-completions)",
        }
    );
    crate::outln!("read+write figures are the bandwidth of each of the two streams");
    crate::outln!();
    crate::outln!("{:<9} {:<6} {:>14} {:>10} {:>8} {:>12} {:>10}", "SIZE", "OP", "LIMIT MB/s", "Gb/s", "EFF", "TLPs up/dn", "LIMITED BY");
    for p in &doc.body.points {
        crate::outln!(
            "{:<9} {:<6} {:>14.3} {:>10.3} {:>7.2}% {:>12} {:>10}",
            bytes(p.transfer_size),
            op_name(p.operation),
            p.bytes_per_second / 1e6,
            p.gbit_per_second,
            p.efficiency * 100.0,
            format!("{}/{}", p.analysis.upstream_tlps, p.analysis.downstream_tlps),
            match p.analysis.limited_by {
                link::Direction::Upstream => "upstream",
                link::Direction::Downstream => "downstream",
            }
        );
    }
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gen3_x8_read_4k_is_pcie_bench_s_figure() {
        // tlpx-model's own hand computation: 4096/4416 × 7.235595703e9.
        let p = point(&LinkConfig::PCIE_BENCH_DEFAULT, link::Operation::Read, 4096, CompletionSplit::Mps);
        assert!((p.bytes_per_second / 6.711_277_174e9 - 1.0).abs() < 1e-9);
        assert!((p.gbit_per_second - 6.711_277_174e9 * 8.0 / 1e9).abs() < 1e-6);
        assert_eq!((p.analysis.upstream_tlps, p.analysis.downstream_tlps), (8, 16));
    }

    #[test]
    fn all_expands_to_three_operations() {
        assert_eq!(ModelOp::All.expand().len(), 3);
        assert_eq!(op_name(link::Operation::ReadWrite), "rdwr");
    }
}
