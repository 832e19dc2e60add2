//! Link pacing: each direction of the PCIe link is a server that a TLP occupies for its wire
//! time, so that a requester that keeps the link busy gets exactly the bandwidth of
//! tlpx_model::link (pcie-bench's model) — neither more nor less.
//!
//! - A TLP costs `LinkConfig::wire_bytes` (8 bytes of framing, sequence number and LCRC, the
//!   header, the payload in whole DWs), as in the model.
//! - Each direction carries those bytes at the model's TLP capacity,
//!   `LinkConfig::tlp_bytes_per_second()`: the raw rate less the share pcie-bench reserves
//!   for ACK/UpdateFC DLLPs and SKP ordered sets. pcie-bench takes the DLLP share out of
//!   *both* directions up front, whatever the traffic; so does the sim, and it does not
//!   charge DLLPs per TLP on top. (Charging each TLP's DLLPs to the opposite direction, as a
//!   real link does, at the raw rate less SKPs, makes one-way traffic up to the DLLP share —
//!   ~8 % at Gen3 x8 — faster than the model, and doing both makes read+write slower.)
//!
//! Time is in card cycles, kept fractional so that a TLP shorter than a cycle (a fast link
//! behind a slow clock) costs exactly its share and back-to-back TLPs lose nothing to the
//! cycle grid.

use tlpx_model::link::LinkConfig;

/// TLPs the card's transmit side (the hard IP's buffer) holds: taken from the card and not
/// yet fully on the wire. While it is full, `tx_ready` is low. It lets the card hand over a
/// short TLP in one cycle and the next in the following cycle even when the wire is still
/// busy, so the card's beat grid costs no link bandwidth (a 3 DW read request takes a whole
/// beat of the datapath but only part of a cycle of a fast link).
pub const TX_BUFFER_TLPS: usize = 8;

/// TLPs the card's receive side holds: on the downstream wire or arrived and not yet taken
/// by the card. While it is full, the root complex sends nothing more (the only
/// flow control modelled).
pub const RX_BUFFER_TLPS: usize = 16;

/// One direction of the link.
#[derive(Debug, Clone, Copy, Default)]
pub struct Direction {
    /// Card cycle (fractional) from which the direction is free again.
    pub free_at: f64,
}

impl Direction {
    /// Whether a TLP may start in cycle `now`: the direction frees up before the cycle ends.
    /// The TLP then occupies the wire from `free_at` (not from the cycle's start), so
    /// back-to-back TLPs lose no fraction of a cycle to the cycle grid.
    #[inline]
    pub fn is_free(&self, now: u64) -> bool {
        self.free_at < (now + 1) as f64
    }
}

/// Both directions plus the rates of the link.
#[derive(Debug, Clone)]
pub struct Link {
    cfg: LinkConfig,
    clock_hz: f64,
    /// TLP capacity of one direction, bytes per card cycle.
    bytes_per_cycle: f64,
    /// Host (root complex) to card.
    pub down: Direction,
    /// Card to host.
    pub up: Direction,
}

/// How long one TLP occupied its direction, for callers that need the arrival time.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Transfer {
    pub wire_bytes: u32,
    /// Cycle (fractional) at which the TLP started on the wire.
    pub start: f64,
    /// Cycle (fractional) at which its last byte arrives at the other end.
    pub end: f64,
}

impl Transfer {
    /// The first whole cycle at which the receiver has the complete TLP.
    pub fn arrival_cycle(&self) -> u64 {
        self.end.ceil() as u64
    }
}

impl Link {
    /// `clock_hz`: the card clock, which is the unit of time.
    pub fn new(cfg: LinkConfig, clock_hz: f64) -> Link {
        Link { cfg, clock_hz, bytes_per_cycle: cfg.tlp_bytes_per_second() / clock_hz, down: Direction::default(), up: Direction::default() }
    }

    pub fn config(&self) -> &LinkConfig {
        &self.cfg
    }

    /// Changes MPS/MRRS (after a config write). The TLP capacity follows: pcie-bench's DLLP
    /// share depends on MPS.
    pub fn set_config(&mut self, cfg: LinkConfig) {
        self.cfg = cfg;
        self.bytes_per_cycle = cfg.tlp_bytes_per_second() / self.clock_hz;
    }

    /// TLP bytes (framing included) per card cycle in each direction.
    pub fn bytes_per_cycle(&self) -> f64 {
        self.bytes_per_cycle
    }

    /// Raw bytes per card cycle in each direction (before DLLPs and SKPs).
    pub fn raw_bytes_per_cycle(&self) -> f64 {
        self.cfg.raw_bytes_per_second() / self.clock_hz
    }

    /// Wire bytes of a TLP of `header_dw` + `payload_dw` DWs.
    pub fn wire_bytes(&self, header_dw: usize, payload_dw: usize) -> u32 {
        self.cfg.wire_bytes(header_dw as u32 * 4, payload_dw as u32 * 4)
    }

    /// A TLP goes host to card, starting at `now` or when the direction frees up.
    pub fn send_down(&mut self, now: u64, header_dw: usize, payload_dw: usize) -> Transfer {
        let wire = self.wire_bytes(header_dw, payload_dw);
        let cycles = f64::from(wire) / self.bytes_per_cycle;
        occupy(&mut self.down, now, wire, cycles)
    }

    /// A TLP goes card to host.
    pub fn send_up(&mut self, now: u64, header_dw: usize, payload_dw: usize) -> Transfer {
        let wire = self.wire_bytes(header_dw, payload_dw);
        let cycles = f64::from(wire) / self.bytes_per_cycle;
        occupy(&mut self.up, now, wire, cycles)
    }
}

fn occupy(dir: &mut Direction, now: u64, wire_bytes: u32, cycles: f64) -> Transfer {
    let start = dir.free_at.max(now as f64);
    dir.free_at = start + cycles;
    Transfer { wire_bytes, start, end: dir.free_at }
}

#[cfg(test)]
mod tests {
    use std::collections::VecDeque;

    use tlpx_model::link::{
        completions_for_read, read_bandwidth, read_requests, read_write_bandwidth, write_bandwidth, write_requests, Operation,
    };

    use super::*;

    fn cfg(generation: u8, lanes: u8, mps: u32) -> LinkConfig {
        LinkConfig::new(generation, lanes, mps, 512, 64, false).expect("valid link")
    }

    #[test]
    fn the_rate_is_the_models_tlp_capacity() {
        let c = cfg(3, 4, 256);
        let link = Link::new(c, 125e6);
        // Gen3 x4: 8 GT/s * 128/130 * 4 / 8 = 3.938 GB/s = 31.51 raw bytes per 125 MHz
        // cycle; less 2 * 8/214 (DLLPs, x4 MPS 256) and 4/1538 (SKP) = 29.15 for TLPs.
        assert!((link.raw_bytes_per_cycle() - 31.507_692).abs() < 1e-5);
        let want = 31.507_692 * (1.0 - 16.0 / 214.0 - 4.0 / 1538.0);
        assert!((link.bytes_per_cycle() - want).abs() < 1e-4, "{} != {want}", link.bytes_per_cycle());
        // A larger MPS spaces the DLLPs wider (pcie-bench's table): more capacity.
        let mut l2 = link.clone();
        l2.set_config(cfg(3, 4, 512));
        assert!(l2.bytes_per_cycle() > link.bytes_per_cycle());
    }

    #[test]
    fn back_to_back_tlps_take_exactly_their_wire_time() {
        let c = cfg(3, 4, 256);
        let mut link = Link::new(c, 125e6);
        let mut now = 0u64;
        let n = 1000;
        for _ in 0..n {
            while !link.up.is_free(now) {
                now += 1;
            }
            link.send_up(now, 3, 64);
        }
        let expect = f64::from(c.wire_bytes(12, 256)) * f64::from(n) / link.bytes_per_cycle();
        // Back to back, the cycle grid costs nothing: exactly n wire times.
        assert!((link.up.free_at - expect).abs() < 1e-6, "{} != {expect}", link.up.free_at);
        // One direction's traffic costs the other nothing (the DLLP share is in the rate).
        assert_eq!(link.down.free_at, 0.0);
    }

    #[test]
    fn a_busy_direction_delays_the_next_tlp() {
        let mut link = Link::new(cfg(1, 1, 128), 125e6);
        let bpc = link.bytes_per_cycle();
        // Gen1 x1: 250 MB/s = 2 raw bytes per cycle; a 3DW MRd is 8 + 12 = 20 bytes.
        let t = link.send_down(100, 3, 0);
        assert_eq!(t.wire_bytes, 20);
        assert_eq!(t.start, 100.0);
        assert!((t.end - (100.0 + 20.0 / bpc)).abs() < 1e-9);
        assert_eq!(t.arrival_cycle(), 111, "20 bytes at {bpc:.3} bytes per cycle");
        assert!(!link.down.is_free(109));
        assert!(link.down.is_free(110));
        let t2 = link.send_down(105, 3, 0);
        assert_eq!(t2.start, t.end);
        assert!((t2.end - (100.0 + 40.0 / bpc)).abs() < 1e-9);
    }

    #[test]
    fn fast_links_cost_fractions_of_a_cycle() {
        let mut link = Link::new(cfg(5, 16, 256), 125e6);
        let t = link.send_down(0, 3, 1);
        assert!(t.end < 1.0, "{}", t.end);
        assert!(link.down.is_free(0) && link.down.is_free(1));
    }

    // Pacing against the model --------------------------------------------------------------

    /// A perfect requester and a zero-latency root complex on `link` for `transfers`
    /// transfers of `size` bytes, driven cycle by cycle as the engine drives the link: the
    /// card hands over at most one TLP per cycle while the transmit buffer has room, and it
    /// goes on the wire as soon as the up direction is free; the root complex acts on a TLP
    /// in the cycle it has fully arrived and starts completions whenever the down direction
    /// is free. Returns the payload bytes per second of card time of the write stream and
    /// of the read stream in steady state (from 10 % to 90 % of the bytes delivered, so the
    /// start and the drain at the end do not count).
    fn run_workload(cfg: LinkConfig, clock_hz: f64, op: Operation, size: u32, transfers: u64) -> (f64, f64) {
        let mut link = Link::new(cfg, clock_hz);
        let hdr = (cfg.request_header_bytes() / 4) as usize;
        // (is_read, address, bytes) of every upstream request, transfer by transfer.
        let mut up_queue: VecDeque<(bool, u64, u32)> = VecDeque::new();
        for k in 0..transfers {
            let addr = 0x4000_0000 + k * 8192;
            if matches!(op, Operation::Write | Operation::ReadWrite) {
                up_queue.extend(write_requests(&cfg, addr, size).into_iter().map(|(a, l)| (false, a, l)));
            }
            if matches!(op, Operation::Read | Operation::ReadWrite) {
                up_queue.extend(read_requests(&cfg, addr + 4096, size).into_iter().map(|(a, l)| (true, a, l)));
            }
        }
        let mut reads_arriving: VecDeque<(u64, u64, u32)> = VecDeque::new();
        let mut tx_buffer: VecDeque<u64> = VecDeque::new();
        let mut cpl_queue: VecDeque<u32> = VecDeque::new();
        // (cycle the last byte arrived, payload bytes delivered so far) per TLP and stream.
        let mut writes: Vec<(f64, u64)> = vec![];
        let mut reads: Vec<(f64, u64)> = vec![];
        let deliver = |v: &mut Vec<(f64, u64)>, end: f64, len: u32| {
            let total = v.last().map_or(0, |l| l.1) + u64::from(len);
            v.push((end, total));
        };
        let mut now = 0u64;
        while !up_queue.is_empty() || !reads_arriving.is_empty() || !cpl_queue.is_empty() {
            // Root complex: reads that have arrived are answered at once, completions leave
            // as soon as the down direction frees up (several per cycle on a fast link).
            while reads_arriving.front().is_some_and(|r| r.0 <= now) {
                let Some((_, addr, len)) = reads_arriving.pop_front() else { break };
                cpl_queue.extend(completions_for_read(&cfg, addr, len).into_iter().map(|(_, l)| l));
            }
            while link.down.is_free(now) {
                let Some(len) = cpl_queue.pop_front() else { break };
                let t = link.send_down(now, 3, len.div_ceil(4) as usize);
                deliver(&mut reads, t.end, len);
            }
            // Card: one TLP per cycle into the transmit buffer while it has room.
            while tx_buffer.front().is_some_and(|a| *a <= now) {
                tx_buffer.pop_front();
            }
            if tx_buffer.len() < TX_BUFFER_TLPS {
                if let Some((is_read, addr, len)) = up_queue.pop_front() {
                    let t = if is_read {
                        let t = link.send_up(now, hdr, 0);
                        reads_arriving.push_back((t.arrival_cycle().max(now + 1), addr, len));
                        t
                    } else {
                        let t = link.send_up(now, hdr, len.div_ceil(4) as usize);
                        deliver(&mut writes, t.end, len);
                        t
                    };
                    tx_buffer.push_back(t.arrival_cycle().max(now + 1));
                }
            }
            now += 1;
        }
        let steady_rate = |v: &[(f64, u64)]| {
            let total = v.last().map_or(0, |l| l.1);
            let at = |share: u64| v.iter().find(|d| d.1 * 10 >= total * share).copied().unwrap_or((0.0, 0));
            let ((t0, b0), (t1, b1)) = (at(1), at(9));
            if t1 > t0 {
                (b1 - b0) as f64 / ((t1 - t0) / clock_hz)
            } else {
                0.0
            }
        };
        (steady_rate(&writes), steady_rate(&reads))
    }

    /// Achieved / model for the three operations at 64 B .. 4 KiB; returns the table.
    fn pacing_table(cfg: LinkConfig, clock_hz: f64) -> Vec<(Operation, u32, f64, f64)> {
        let mut rows = vec![];
        for op in [Operation::Write, Operation::Read, Operation::ReadWrite] {
            for size in [64u32, 256, 1024, 4096] {
                // About 2 MiB per stream: long enough that the start costs < 0.1 %.
                let transfers = (2u64 << 20) / u64::from(size);
                let (wr, rd) = run_workload(cfg, clock_hz, op, size, transfers);
                let (achieved, model) = match op {
                    Operation::Write => (wr, write_bandwidth(&cfg, u64::from(size)).bytes_per_second),
                    Operation::Read => (rd, read_bandwidth(&cfg, u64::from(size)).bytes_per_second),
                    Operation::ReadWrite => (wr.min(rd), read_write_bandwidth(&cfg, u64::from(size)).bytes_per_second),
                };
                rows.push((op, size, achieved, model));
            }
        }
        rows
    }

    fn check_pacing(cfg: LinkConfig, clock_hz: f64) {
        let mut failures = vec![];
        for (op, size, achieved, model) in pacing_table(cfg, clock_hz) {
            let ratio = achieved / model;
            eprintln!(
                "pacing {cfg} @ {:.0} MHz: {op:?} {size} B: {:.4} GB/s achieved, {:.4} GB/s model, {:.4}",
                clock_hz / 1e6,
                achieved / 1e9,
                model / 1e9,
                ratio
            );
            if (ratio - 1.0).abs() > 0.005 {
                failures.push(format!("{op:?} {size} B: {ratio:.4}"));
            }
        }
        assert!(failures.is_empty(), "{cfg}: achieved / model off by more than 0.5 %: {failures:?}");
    }

    #[test]
    fn pacing_matches_the_model_gen1_x1() {
        check_pacing(cfg(1, 1, 256), 125e6);
    }

    #[test]
    fn pacing_matches_the_model_gen2_x4() {
        check_pacing(cfg(2, 4, 256), 125e6);
    }

    #[test]
    fn pacing_matches_the_model_gen3_x8() {
        check_pacing(cfg(3, 8, 256), 250e6);
    }

    #[test]
    fn pacing_matches_the_model_with_other_sizes_and_64_bit_headers() {
        check_pacing(LinkConfig::new(2, 4, 128, 256, 64, true).expect("valid"), 125e6);
        check_pacing(LinkConfig::new(3, 8, 512, 1024, 128, false).expect("valid"), 250e6);
    }
}
