//! Analytic PCIe link bandwidth model, after pcie-bench.
//!
//! This reproduces the bandwidth model of pcie-bench: R. Neugebauer et al.,
//! "Understanding PCIe performance for end host networking", SIGCOMM 2018,
//! whose model code is `pcie-bench/pcie-model` (`model/pcie.py` for the
//! constants, `model/mem_bw.py` for the write / read / read+write formulas,
//! `pcie_bw.py` for how they are driven). The paper states the model in
//! prose and plots it for Gen3 x8; the constants below are taken from
//! pcie-model, the code behind those plots, and cited by its variable names.
//! Where both this module and pcie-model apply, the numbers are the same;
//! the tests recompute them by hand.
//!
//! Everything is seen from the device (the card): *upstream* is device →
//! host (the device's TX), *downstream* is host → device (its RX).
//!
//! # Constants and where they come from
//!
//! | constant | value | source |
//! |---|---|---|
//! | transfer rate per lane | 2.5, 5, 8, 16, 32 GT/s for Gen1..Gen5 | pcie-model `GTs`; PCIe Base spec, chapter 4 |
//! | line encoding | 8b/10b for Gen1/2, 128b/130b for Gen3..5 | pcie-model `Gbs` |
//! | raw rate | rate × encoding × lanes, per direction | pcie-model `Raw` |
//! | TLP framing, [`TLP_FRAMING_BYTES`] | 8 bytes for every generation | pcie-model `DLLP_Hdr` ("DLLP header (6 bytes) plus start and end symbol") |
//! | request header, 32-bit address | 12 bytes (3 DW) | pcie-model `TLP_Hdr` + `TLP_MWr_32_Hdr` / `TLP_MRd_32_Hdr` |
//! | request header, 64-bit address | 16 bytes (4 DW) | pcie-model `TLP_Hdr` + `TLP_MWr_64_Hdr` / `TLP_MRd_64_Hdr` |
//! | completion header, [`COMPLETION_HEADER_BYTES`] | 12 bytes (3 DW) | pcie-model `TLP_Hdr` + `TLP_CplD_Hdr` |
//! | ACK and UpdateFC DLLP on the wire, [`DLLP_WIRE_BYTES`] | 8 bytes each | pcie-model `Ack_Size`, `FC_Size` ("2 B Phys + 4 B DLLP + 2 B DLLP CRC") |
//! | bytes between ACKs and between FC updates | table by generation, width, MPS | pcie-model `Ack_Limits` and `FC_Guide`, which cite PCIe Base spec 5.0 tables 3-7..3-9 and 2-46..2-48 |
//! | SKP ordered sets, [`SKP_ORDERED_SET_BYTES`] per [`SKP_INTERVAL_BYTES`] | 4 per 1538 | pcie-model `SKIP_Length`, `SKIP_Interval` |
//! | MPS, MRRS | 128..4096 bytes, powers of two | pcie-model `MPSs`, `MRRSs`; PCIe Base spec Device Control register |
//! | RCB | 64 or 128 bytes | PCIe Base spec (a root port's RCB); pcie-model also accepts 256 and 512 |
//!
//! Framing: on Gen1/2 a TLP carries STP (1 byte), the data-link sequence
//! number (2), LCRC (4) and END (1); on Gen3 and later the 4-byte STP token
//! carries the sequence number and there is no END, so STP token (4) + LCRC
//! (4). Both are 8 bytes, which is why pcie-model uses one value for every
//! generation.
//!
//! # How pcie-bench accounts for DLLPs
//!
//! pcie-bench does not count ACK and flow-control DLLPs per TLP. It takes the
//! spec's recommended ACK latency limit and FC update interval for the link's
//! generation, width and MPS (values in the spec's symbol times), reads each
//! as "one 8-byte DLLP every that many bytes", adds the SKP ordered sets, and
//! removes that share from the raw bandwidth of *both* directions up front:
//!
//! ```text
//! dllp_share = 8 / ack_limit + 8 / fc_interval          (a fraction, ~7.9 % for Gen3 x8 MPS 256)
//! tlp_capacity = raw × (1 − dllp_share − 4 / 1538)     (pcie-model `TLP_bw`)
//! ```
//!
//! Every TLP then costs `framing + header + payload` bytes of that capacity.
//! A transfer of `size` bytes is one "transaction" with a number of wire
//! bytes in each direction; the transaction rate is set by the direction
//! that fills first, and the payload rate is `size ×` that rate
//! (pcie-model `mem_bw.write`, `mem_bw.read`, `mem_bw.read_write`).
//! pcie-bench assumes the transfer starts aligned, so writes are
//! `ceil(size / MPS)` MWr, reads are `ceil(size / MRRS)` MRd answered by
//! `ceil(size / MPS)` CplD (or `ceil(size / RCB)` for root complexes that
//! complete in RCB pieces, [`CompletionSplit::Rcb`]).
//!
//! Two things in that accounting differ from the spec, and are kept so the
//! numbers match pcie-bench: the tables are in symbol times, which on an
//! xN link carry N bytes each, but pcie-bench divides by them as bytes (so it
//! charges wide links more DLLP bandwidth than the spec's timers imply); and
//! it charges the DLLPs to both directions, even though ACKs and FC updates
//! travel opposite to the TLPs they answer (about right when both directions
//! are busy, pessimistic for one-way traffic). pcie-model's Gen4 and Gen5
//! tables are copies of the Gen3 one.
//!
//! One deliberate difference from pcie-bench: when MRRS is below MPS, this
//! module counts `ceil(size / MRRS)` completions, at least one per request,
//! because a completion never answers two requests; pcie-bench still divides
//! by MPS. With MRRS ≥ MPS (pcie-bench's default 512 / 256) the two agree.

use std::fmt;

use serde::{Deserialize, Serialize};

// Constants (see the table in the module documentation) ----------------------------

/// Physical + data-link bytes added to every TLP: framing, sequence number, LCRC.
pub const TLP_FRAMING_BYTES: u32 = 8;
/// TLP header of a memory request with a 32-bit address (3 DW).
pub const REQUEST_HEADER_BYTES_32: u32 = 12;
/// TLP header of a memory request with a 64-bit address (4 DW).
pub const REQUEST_HEADER_BYTES_64: u32 = 16;
/// TLP header of a completion with data (3 DW).
pub const COMPLETION_HEADER_BYTES: u32 = 12;
/// An ACK or UpdateFC DLLP on the wire: 6 bytes of DLLP (with its CRC) + 2 of framing.
pub const DLLP_WIRE_BYTES: u32 = 8;
/// Length of a SKP ordered set, in symbols on every lane.
pub const SKP_ORDERED_SET_BYTES: u32 = 4;
/// Symbols between SKP ordered sets (the spec's longest interval).
pub const SKP_INTERVAL_BYTES: u32 = 1538;
/// No request and no completion may cross a 4 KiB address boundary (PCIe Base spec 2.2.7).
pub const PAGE_BYTES: u64 = 4096;

/// Transfer rate per lane in GT/s, indexed by generation − 1.
const TRANSFER_RATE_GT_S: [f64; 5] = [2.5, 5.0, 8.0, 16.0, 32.0];

/// Link widths the model knows, in the order of [`DLLP_INTERVAL`]'s rows.
const LANES: [u8; 5] = [1, 2, 4, 8, 16];

/// Spacing, in pcie-bench's reading as bytes, of ACK DLLPs and of UpdateFC
/// DLLPs: `[generation class][width][MPS]` with generation class Gen1, Gen2,
/// Gen3+ (pcie-model copies Gen3 into Gen4 and Gen5), width x1..x16 and MPS
/// 128..4096. pcie-model keeps two tables, `Ack_Limits` and `FC_Guide`; they
/// hold the same numbers for x1..x16 (they differ only in two x32 entries),
/// so one table serves both here.
const DLLP_INTERVAL: [[[u32; 6]; 5]; 3] = [
    // Gen1   MPS: 128  256  512  1024  2048  4096
    [
        [237, 416, 559, 1071, 2095, 4143], // x1
        [128, 217, 289, 545, 1057, 2081],  // x2
        [73, 118, 154, 282, 538, 1050],    // x4
        [67, 107, 86, 150, 278, 534],      // x8
        [48, 72, 86, 150, 278, 534],       // x16
    ],
    // Gen2
    [
        [288, 467, 610, 1122, 2146, 4194], // x1
        [179, 268, 340, 596, 1108, 2132],  // x2
        [124, 169, 205, 333, 589, 1101],   // x4
        [118, 158, 137, 201, 329, 585],    // x8
        [99, 123, 137, 201, 329, 585],     // x16
    ],
    // Gen3, Gen4, Gen5
    [
        [333, 512, 655, 1167, 2191, 4239], // x1
        [224, 313, 385, 641, 1153, 2177],  // x2
        [169, 214, 250, 378, 634, 1146],   // x4
        [163, 203, 182, 246, 374, 630],    // x8
        [144, 168, 182, 246, 374, 630],    // x16
    ],
];

// Errors -------------------------------------------------------------------------

/// Errors of the model: only bad parameters.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ModelError {
    /// A parameter is out of range; the message names it, its value and what is accepted.
    #[error("{0}")]
    Invalid(String),
}

// Link configuration -------------------------------------------------------------

/// A PCIe link as the model sees it: speed, width and the negotiated sizes.
///
/// Build it with [`LinkConfig::new`], or check a hand-built one with
/// [`LinkConfig::validate`]; deserialising validates too. The methods assume
/// a valid configuration and panic on one that is not.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(try_from = "LinkConfigFields")]
pub struct LinkConfig {
    /// PCIe generation, 1..=5.
    pub generation: u8,
    /// Link width: 1, 2, 4, 8 or 16 lanes.
    pub lanes: u8,
    /// Maximum Payload Size in bytes: 128..4096, a power of two.
    pub mps: u32,
    /// Maximum Read Request Size in bytes: 128..4096, a power of two.
    pub mrrs: u32,
    /// Read Completion Boundary of the completer (the root port) in bytes: 64 or 128.
    pub rcb: u32,
    /// Requests carry 64-bit addresses (4 DW headers) rather than 32-bit (3 DW).
    pub addr64: bool,
}

/// The serialised form of [`LinkConfig`], checked on the way in.
#[derive(Deserialize)]
struct LinkConfigFields {
    generation: u8,
    lanes: u8,
    mps: u32,
    mrrs: u32,
    rcb: u32,
    addr64: bool,
}

impl TryFrom<LinkConfigFields> for LinkConfig {
    type Error = ModelError;

    fn try_from(f: LinkConfigFields) -> Result<Self, Self::Error> {
        LinkConfig::new(f.generation, f.lanes, f.mps, f.mrrs, f.rcb, f.addr64)
    }
}

fn is_size_128_to_4096(bytes: u32) -> bool {
    (128..=4096).contains(&bytes) && bytes.is_power_of_two()
}

impl LinkConfig {
    /// pcie-bench's default link (`pcie_bw.py`): Gen3 x8, MPS 256, MRRS 512,
    /// RCB 64, 64-bit addresses.
    pub const PCIE_BENCH_DEFAULT: LinkConfig = LinkConfig { generation: 3, lanes: 8, mps: 256, mrrs: 512, rcb: 64, addr64: true };

    /// A checked link configuration.
    ///
    /// # Errors
    ///
    /// [`ModelError::Invalid`] naming the first bad value and what is accepted.
    pub fn new(generation: u8, lanes: u8, mps: u32, mrrs: u32, rcb: u32, addr64: bool) -> Result<LinkConfig, ModelError> {
        let cfg = LinkConfig { generation, lanes, mps, mrrs, rcb, addr64 };
        cfg.validate()?;
        Ok(cfg)
    }

    /// Checks every field, for configurations built without [`LinkConfig::new`].
    ///
    /// # Errors
    ///
    /// [`ModelError::Invalid`] naming the first bad value and what is accepted.
    pub fn validate(&self) -> Result<(), ModelError> {
        if !(1..=5).contains(&self.generation) {
            return Err(ModelError::Invalid(format!("PCIe generation must be 1..5, not {}", self.generation)));
        }
        if !LANES.contains(&self.lanes) {
            return Err(ModelError::Invalid(format!("link width must be 1, 2, 4, 8 or 16 lanes, not {}", self.lanes)));
        }
        if !is_size_128_to_4096(self.mps) {
            return Err(ModelError::Invalid(format!(
                "maximum payload size (MPS) must be 128, 256, 512, 1024, 2048 or 4096 bytes, not {}",
                self.mps
            )));
        }
        if !is_size_128_to_4096(self.mrrs) {
            return Err(ModelError::Invalid(format!(
                "maximum read request size (MRRS) must be 128, 256, 512, 1024, 2048 or 4096 bytes, not {}",
                self.mrrs
            )));
        }
        if self.rcb != 64 && self.rcb != 128 {
            return Err(ModelError::Invalid(format!("read completion boundary (RCB) must be 64 or 128 bytes, not {}", self.rcb)));
        }
        Ok(())
    }

    fn generation_index(&self) -> usize {
        match self.generation {
            1..=5 => usize::from(self.generation - 1),
            g => panic!("LinkConfig was not validated: PCIe generation must be 1..5, not {g}"),
        }
    }

    fn lanes_index(&self) -> usize {
        match LANES.iter().position(|&l| l == self.lanes) {
            Some(i) => i,
            None => panic!("LinkConfig was not validated: link width must be 1, 2, 4, 8 or 16 lanes, not {}", self.lanes),
        }
    }

    fn mps_index(&self) -> usize {
        assert!(
            is_size_128_to_4096(self.mps),
            "LinkConfig was not validated: MPS must be a power of two from 128 to 4096, not {}",
            self.mps
        );
        (self.mps / 128).trailing_zeros() as usize
    }

    /// Transfer rate of one lane in GT/s: 2.5, 5, 8, 16 or 32.
    pub fn transfer_rate_gt_s(&self) -> f64 {
        TRANSFER_RATE_GT_S[self.generation_index()]
    }

    /// Share of line bits that carry data: 8/10 for Gen1/2, 128/130 after.
    pub fn encoding_efficiency(&self) -> f64 {
        if self.generation <= 2 {
            8.0 / 10.0
        } else {
            128.0 / 130.0
        }
    }

    /// Bytes per second in one direction after line encoding, all lanes
    /// (pcie-model `Raw`, there in Gb/s). Gen3 x8: 7.877e9.
    pub fn raw_bytes_per_second(&self) -> f64 {
        self.transfer_rate_gt_s() * 1e9 * self.encoding_efficiency() * f64::from(self.lanes) / 8.0
    }

    /// Physical + data-link bytes added to every TLP (framing, sequence
    /// number, LCRC): 8 on every generation, see the module documentation.
    pub fn tlp_framing_bytes(&self) -> u32 {
        TLP_FRAMING_BYTES
    }

    /// Header of a memory read or write request: 12 bytes, or 16 with 64-bit addresses.
    pub fn request_header_bytes(&self) -> u32 {
        if self.addr64 {
            REQUEST_HEADER_BYTES_64
        } else {
            REQUEST_HEADER_BYTES_32
        }
    }

    /// Header of a completion with data: 12 bytes.
    pub fn completion_header_bytes(&self) -> u32 {
        COMPLETION_HEADER_BYTES
    }

    /// Bytes a TLP occupies on the wire: framing + header + payload, the
    /// payload rounded up to whole DWs as the TLP carries it.
    ///
    /// pcie-bench's size sweeps count the payload byte-exact instead, so for
    /// transfer sizes that are not a multiple of 4 the bandwidth functions of
    /// this module (which follow pcie-bench) are up to 3 bytes per TLP more
    /// optimistic than a sum of `wire_bytes`.
    pub fn wire_bytes(&self, header_bytes: u32, payload_bytes: u32) -> u32 {
        let total = u64::from(TLP_FRAMING_BYTES) + u64::from(header_bytes) + u64::from(payload_bytes).div_ceil(4) * 4;
        u32::try_from(total).unwrap_or(u32::MAX)
    }

    /// pcie-bench's ACK and FC DLLP interval for this generation, width and
    /// MPS (`Ack_Limits`, `FC_Guide`), read as bytes.
    pub fn dllp_interval_bytes(&self) -> u32 {
        let class = self.generation_index().min(2);
        DLLP_INTERVAL[class][self.lanes_index()][self.mps_index()]
    }

    /// Share of each direction's raw bandwidth that pcie-bench reserves for
    /// ACK and UpdateFC DLLPs: `8 / interval + 8 / interval`.
    pub fn dllp_overhead_fraction(&self) -> f64 {
        let interval = f64::from(self.dllp_interval_bytes());
        f64::from(DLLP_WIRE_BYTES) / interval + f64::from(DLLP_WIRE_BYTES) / interval
    }

    /// Share of each direction's raw bandwidth taken by SKP ordered sets: 4 / 1538.
    pub fn skp_overhead_fraction(&self) -> f64 {
        f64::from(SKP_ORDERED_SET_BYTES) / f64::from(SKP_INTERVAL_BYTES)
    }

    /// Bytes per second left for TLPs (framing included) in each direction
    /// once DLLPs and SKPs are taken out (pcie-model `TLP_bw`). Gen3 x8 MPS
    /// 256: 7.236e9 (57.88 Gb/s).
    pub fn tlp_bytes_per_second(&self) -> f64 {
        self.raw_bytes_per_second() * (1.0 - self.dllp_overhead_fraction() - self.skp_overhead_fraction())
    }

    /// ACK/FC DLLP bytes that one received TLP of `tlp_wire_bytes` causes in
    /// the opposite direction, amortised as pcie-bench assumes (one 8-byte
    /// ACK and one 8-byte UpdateFC every [`dllp_interval_bytes`] bytes).
    ///
    /// [`dllp_interval_bytes`]: LinkConfig::dllp_interval_bytes
    pub fn dllp_bytes_for_tlp(&self, tlp_wire_bytes: u32) -> f64 {
        f64::from(tlp_wire_bytes) * self.dllp_overhead_fraction()
    }

    /// ACK/FC DLLP bytes each received TLP causes in the opposite direction,
    /// amortised as pcie-bench assumes, for a full-MPS memory write: the TLP
    /// the spec's ACK and FC timer tables are sized around. Gen3 x8 MPS 256
    /// with 64-bit addresses: 280 × 16/203 = 22.07 bytes.
    ///
    /// pcie-bench's charge is proportional to bytes, not TLPs: for TLPs of
    /// another size use [`dllp_bytes_for_tlp`](LinkConfig::dllp_bytes_for_tlp).
    /// pcie-bench also charges DLLPs to both directions (see the module
    /// documentation); charging them only opposite the TLPs, as a link really
    /// does, gives one-way traffic up to `dllp_overhead_fraction` more
    /// bandwidth than pcie-bench predicts.
    pub fn dllp_bytes_per_tlp(&self) -> f64 {
        self.dllp_bytes_for_tlp(self.wire_bytes(self.request_header_bytes(), self.mps))
    }

    /// Seconds that `bytes` occupy one direction of the link at the raw rate.
    pub fn seconds_for_bytes(&self, bytes: f64) -> f64 {
        bytes / self.raw_bytes_per_second()
    }
}

impl fmt::Display for LinkConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "Gen{} x{}, MPS {}, MRRS {}, RCB {}, {}-bit addresses",
            self.generation,
            self.lanes,
            self.mps,
            self.mrrs,
            self.rcb,
            if self.addr64 { 64 } else { 32 }
        )
    }
}

// Bandwidth ----------------------------------------------------------------------

/// Payload bandwidth of a workload on a link.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Bandwidth {
    /// Payload bytes per second (per direction for read+write).
    pub bytes_per_second: f64,
    /// Payload bandwidth / raw link bandwidth of one direction.
    pub efficiency: f64,
}

impl Bandwidth {
    /// The same bandwidth in Gb/s (10⁹ bits per second), pcie-bench's unit.
    pub fn gbit_per_second(&self) -> f64 {
        self.bytes_per_second * 8.0 / 1e9
    }
}

/// A direction on the link, seen from the device.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Direction {
    /// Device → host: the device's MWr and MRd (pcie-bench's TX).
    Upstream,
    /// Host → device: completions with data (pcie-bench's RX).
    Downstream,
}

/// What the device does with each transfer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Operation {
    /// Device writes the transfer to host memory (pcie-bench `BW_WR`).
    Write,
    /// Device reads the transfer from host memory (pcie-bench `BW_RD`).
    Read,
    /// Device reads one transfer and writes another of the same size at once (pcie-bench `BW_RDWR`).
    ReadWrite,
}

/// How the completer cuts read completions.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CompletionSplit {
    /// Completions up to MPS each (pcie-bench's default, `rcb_chunks=False`).
    #[default]
    Mps,
    /// One completion per RCB, as some root complexes do (pcie-bench `rcb_chunks=True`).
    Rcb,
}

/// The full result of the model for one workload, for tools that print
/// where the limit comes from.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Analysis {
    /// What the device does.
    pub operation: Operation,
    /// Bytes per transfer (per direction for read+write).
    pub transfer_size: u64,
    /// How read completions are cut.
    pub completion_split: CompletionSplit,
    /// TLPs sent upstream per transfer.
    pub upstream_tlps: u64,
    /// TLPs sent downstream per transfer.
    pub downstream_tlps: u64,
    /// Wire bytes upstream per transfer, framing included, DLLPs not.
    pub upstream_wire_bytes: u64,
    /// Wire bytes downstream per transfer, framing included, DLLPs not.
    pub downstream_wire_bytes: u64,
    /// Transfers per second the link sustains.
    pub transfers_per_second: f64,
    /// Payload bandwidth.
    pub bandwidth: Bandwidth,
    /// Share of the upstream TLP capacity ([`LinkConfig::tlp_bytes_per_second`]) in use.
    pub upstream_utilisation: f64,
    /// Share of the downstream TLP capacity in use.
    pub downstream_utilisation: f64,
    /// The direction that saturates first (upstream on a tie).
    pub limited_by: Direction,
}

/// Wire bytes per transfer in each direction, and TLP counts, for one operation.
struct TransferCost {
    upstream_tlps: u64,
    downstream_tlps: u64,
    upstream_bytes: u128,
    downstream_bytes: u128,
}

fn transfer_cost(cfg: &LinkConfig, operation: Operation, size: u64, split: CompletionSplit) -> TransferCost {
    let framing = u128::from(TLP_FRAMING_BYTES);
    let request_overhead = framing + u128::from(cfg.request_header_bytes());
    let completion_overhead = framing + u128::from(COMPLETION_HEADER_BYTES);
    let payload = u128::from(size);

    let writes = size.div_ceil(u64::from(cfg.mps));
    let write_bytes = u128::from(writes) * request_overhead + payload;
    let reads = size.div_ceil(u64::from(cfg.mrrs));
    let read_bytes = u128::from(reads) * request_overhead;
    // A completion never serves two requests, so with MRRS below MPS each
    // request is at least one completion; pcie-bench divides by MPS alone
    // (the same whenever MRRS >= MPS).
    let completion_size = match split {
        CompletionSplit::Mps => cfg.mps.min(cfg.mrrs),
        CompletionSplit::Rcb => cfg.rcb,
    };
    let completions = size.div_ceil(u64::from(completion_size));
    let completion_bytes = u128::from(completions) * completion_overhead + payload;

    match operation {
        Operation::Write => TransferCost { upstream_tlps: writes, downstream_tlps: 0, upstream_bytes: write_bytes, downstream_bytes: 0 },
        Operation::Read => TransferCost {
            upstream_tlps: reads,
            downstream_tlps: completions,
            upstream_bytes: read_bytes,
            downstream_bytes: completion_bytes,
        },
        Operation::ReadWrite => TransferCost {
            upstream_tlps: writes + reads,
            downstream_tlps: completions,
            upstream_bytes: write_bytes + read_bytes,
            downstream_bytes: completion_bytes,
        },
    }
}

/// The model for one workload: wire bytes each way, which direction limits,
/// and the payload bandwidth. `transfer_size` 0 gives zero bandwidth.
pub fn analyse(cfg: &LinkConfig, operation: Operation, transfer_size: u64, completion_split: CompletionSplit) -> Analysis {
    let cost = transfer_cost(cfg, operation, transfer_size, completion_split);
    let capacity = cfg.tlp_bytes_per_second();
    let up = cost.upstream_bytes as f64;
    let down = cost.downstream_bytes as f64;

    // Each direction alone allows capacity / bytes transfers per second;
    // the busier one sets the rate (pcie-model mem_bw.read, read_write).
    let (transfers_per_second, limited_by) = if up == 0.0 && down == 0.0 {
        (0.0, Direction::Upstream)
    } else if up >= down {
        (capacity / up, Direction::Upstream)
    } else {
        (capacity / down, Direction::Downstream)
    };
    let bytes_per_second = transfer_size as f64 * transfers_per_second;

    Analysis {
        operation,
        transfer_size,
        completion_split,
        upstream_tlps: cost.upstream_tlps,
        downstream_tlps: cost.downstream_tlps,
        upstream_wire_bytes: u64::try_from(cost.upstream_bytes).unwrap_or(u64::MAX),
        downstream_wire_bytes: u64::try_from(cost.downstream_bytes).unwrap_or(u64::MAX),
        transfers_per_second,
        bandwidth: Bandwidth { bytes_per_second, efficiency: bytes_per_second / cfg.raw_bytes_per_second() },
        upstream_utilisation: transfers_per_second * up / capacity,
        downstream_utilisation: transfers_per_second * down / capacity,
        limited_by,
    }
}

/// The device writes `transfer_size` bytes to the host, as MWr of up to MPS
/// each (pcie-model `mem_bw.write`).
pub fn write_bandwidth(cfg: &LinkConfig, transfer_size: u64) -> Bandwidth {
    analyse(cfg, Operation::Write, transfer_size, CompletionSplit::Mps).bandwidth
}

/// The device reads `transfer_size` bytes from the host: MRd of up to MRRS
/// upstream, completions of up to MPS downstream, limited by the direction
/// that saturates first (pcie-model `mem_bw.read`).
pub fn read_bandwidth(cfg: &LinkConfig, transfer_size: u64) -> Bandwidth {
    analyse(cfg, Operation::Read, transfer_size, CompletionSplit::Mps).bandwidth
}

/// The device reads and writes `transfer_size` bytes at once; the result is
/// the bandwidth of each of the two streams (pcie-model
/// `mem_bw.read_write`, whose `tx_eff` `pcie_bw.py` plots as "PCIe
/// Read/Write BW"). Upstream carries the writes and the read requests,
/// downstream the completions.
pub fn read_write_bandwidth(cfg: &LinkConfig, transfer_size: u64) -> Bandwidth {
    analyse(cfg, Operation::ReadWrite, transfer_size, CompletionSplit::Mps).bandwidth
}

// TLP splitting ------------------------------------------------------------------

/// Cuts `[addr, addr + len)` at every multiple of `boundary` (a power of two)
/// and after at most `max` bytes per piece; the range is clipped at 2^64.
fn split_range(addr: u64, len: u32, max: u128, boundary: u128, first_to_boundary: u128) -> Vec<(u64, u32)> {
    let end = (u128::from(addr) + u128::from(len)).min(1u128 << 64);
    let mut pos = u128::from(addr);
    let mut pieces = Vec::new();
    while pos < end {
        let next_boundary = (pos / boundary + 1) * boundary;
        let limit = if pos % first_to_boundary != 0 {
            // Unaligned start: stop at the first alignment boundary.
            (pos / first_to_boundary + 1) * first_to_boundary
        } else {
            pos + max
        };
        let stop = limit.min(next_boundary).min(end);
        // Both fit: pos < 2^64 and stop - pos <= len.
        pieces.push((pos as u64, (stop - pos) as u32));
        pos = stop;
    }
    pieces
}

/// How a root complex cuts the completion of a read of `len` bytes at
/// `addr`: the first completion ends at the first RCB boundary when `addr`
/// is not RCB-aligned, the others are at most MPS and start and end on RCB
/// boundaries (the last ends with the request). No completion crosses a
/// 4 KiB boundary: a range that does is not one legal request, and is
/// completed as if the requester had split it there.
///
/// The spec also allows a longer first completion (up to MPS, ending on any
/// RCB boundary); this is the common behaviour pcie-model describes.
/// `len` 0 gives no completion.
pub fn completions_for_read(cfg: &LinkConfig, addr: u64, len: u32) -> Vec<(u64, u32)> {
    split_range(addr, len, u128::from(cfg.mps), u128::from(PAGE_BYTES), u128::from(cfg.rcb))
}

/// Completions cut at every RCB boundary, as root complexes with
/// [`CompletionSplit::Rcb`] behaviour do.
pub fn completions_for_read_rcb(cfg: &LinkConfig, addr: u64, len: u32) -> Vec<(u64, u32)> {
    split_range(addr, len, u128::from(cfg.rcb), u128::from(cfg.rcb), u128::from(cfg.rcb))
}

/// How a requester cuts a read of `len` bytes at `addr` into MRd: pieces end
/// on MRRS-aligned addresses (so none crosses 4 KiB), all but the first and
/// last are exactly MRRS. For an aligned start this is pcie-bench's
/// `ceil(len / MRRS)` requests.
pub fn read_requests(cfg: &LinkConfig, addr: u64, len: u32) -> Vec<(u64, u32)> {
    let mrrs = u128::from(cfg.mrrs);
    split_range(addr, len, mrrs, mrrs, mrrs)
}

/// How a requester cuts a write of `len` bytes at `addr` into MWr: pieces
/// end on MPS-aligned addresses (so none crosses 4 KiB), all but the first
/// and last are exactly MPS. For an aligned start this is pcie-bench's
/// `ceil(len / MPS)` writes.
pub fn write_requests(cfg: &LinkConfig, addr: u64, len: u32) -> Vec<(u64, u32)> {
    let mps = u128::from(cfg.mps);
    split_range(addr, len, mps, mps, mps)
}

#[cfg(test)]
mod tests;
