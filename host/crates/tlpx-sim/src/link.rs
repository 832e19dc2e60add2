//! Link pacing: each direction of the PCIe link is a server that a TLP occupies for its wire
//! time, as tlpx_model::link counts it (framing + header + payload at the raw byte rate of
//! the generation and width). The ACK/UpdateFC DLLPs a TLP causes are charged to the
//! opposite direction (pcie-bench's byte-proportional amortisation, `dllp_bytes_for_tlp`).
//!
//! Time is in card cycles, kept fractional so that a TLP shorter than a cycle (a fast link
//! behind a slow clock) still costs exactly its share.

use tlpx_model::link::LinkConfig;

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
    /// Cycle at which the last byte arrives at the other end.
    pub end: f64,
}

impl Link {
    /// `clock_hz`: the card clock, which is the unit of time.
    pub fn new(cfg: LinkConfig, clock_hz: f64) -> Link {
        Link { cfg, bytes_per_cycle: cfg.raw_bytes_per_second() / clock_hz, down: Direction::default(), up: Direction::default() }
    }

    pub fn config(&self) -> &LinkConfig {
        &self.cfg
    }

    /// Changes MPS/MRRS (after a config write); the rates do not change.
    pub fn set_config(&mut self, cfg: LinkConfig) {
        self.cfg = cfg;
    }

    /// Raw bytes per card cycle in each direction.
    pub fn bytes_per_cycle(&self) -> f64 {
        self.bytes_per_cycle
    }

    /// Wire bytes of a TLP of `header_dw` + `payload_dw` DWs.
    pub fn wire_bytes(&self, header_dw: usize, payload_dw: usize) -> u32 {
        self.cfg.wire_bytes(header_dw as u32 * 4, payload_dw as u32 * 4)
    }

    /// A TLP goes host to card, starting at `now` or when the direction frees up.
    pub fn send_down(&mut self, now: u64, header_dw: usize, payload_dw: usize) -> Transfer {
        let wire = self.wire_bytes(header_dw, payload_dw);
        let end = occupy(&mut self.down, now, f64::from(wire) / self.bytes_per_cycle);
        let dllp = self.cfg.dllp_bytes_for_tlp(wire) / self.bytes_per_cycle;
        occupy(&mut self.up, now, dllp);
        Transfer { wire_bytes: wire, end }
    }

    /// A TLP goes card to host.
    pub fn send_up(&mut self, now: u64, header_dw: usize, payload_dw: usize) -> Transfer {
        let wire = self.wire_bytes(header_dw, payload_dw);
        let end = occupy(&mut self.up, now, f64::from(wire) / self.bytes_per_cycle);
        let dllp = self.cfg.dllp_bytes_for_tlp(wire) / self.bytes_per_cycle;
        occupy(&mut self.down, now, dllp);
        Transfer { wire_bytes: wire, end }
    }
}

fn occupy(dir: &mut Direction, now: u64, cycles: f64) -> f64 {
    let start = dir.free_at.max(now as f64);
    dir.free_at = start + cycles;
    dir.free_at
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(generation: u8, lanes: u8, mps: u32) -> LinkConfig {
        LinkConfig::new(generation, lanes, mps, 512, 64, false).expect("valid link")
    }

    #[test]
    fn back_to_back_writes_take_their_wire_time() {
        let c = cfg(3, 4, 256);
        let mut link = Link::new(c, 125e6);
        // Gen3 x4: 8 GT/s * 128/130 * 4 / 8 = 3.938 GB/s = 31.5 bytes per 125 MHz cycle.
        assert!((link.bytes_per_cycle() - 31.507_692).abs() < 1e-3);
        let mut now = 0u64;
        let n = 1000;
        for _ in 0..n {
            while !link.up.is_free(now) {
                now += 1;
            }
            link.send_up(now, 3, 64);
        }
        let wire = f64::from(c.wire_bytes(12, 256));
        let expect = wire * f64::from(n) / link.bytes_per_cycle();
        // Back to back, the cycle grid costs nothing: exactly n wire times.
        assert!((link.up.free_at - expect).abs() < 1e-6, "{} != {expect}", link.up.free_at);
        // The DLLPs went the other way, in proportion.
        let dllp = c.dllp_bytes_for_tlp(c.wire_bytes(12, 256)) * f64::from(n) / link.bytes_per_cycle();
        assert!(link.down.free_at >= dllp - 1e-6);
        assert!(link.down.free_at < link.up.free_at);
    }

    #[test]
    fn a_busy_direction_delays_the_next_tlp() {
        let mut link = Link::new(cfg(1, 1, 128), 125e6);
        // Gen1 x1: 250 MB/s = 2 bytes per cycle; a 3DW MRd is 8 + 12 = 20 bytes = 10 cycles.
        let t = link.send_down(100, 3, 0);
        assert_eq!(t.wire_bytes, 20);
        assert!((t.end - 110.0).abs() < 1e-9);
        assert!(!link.down.is_free(109));
        assert!(link.down.is_free(110));
        let t2 = link.send_down(105, 3, 0);
        assert!((t2.end - 120.0).abs() < 1e-9);
    }

    #[test]
    fn fast_links_cost_fractions_of_a_cycle() {
        let mut link = Link::new(cfg(5, 16, 256), 125e6);
        let t = link.send_down(0, 3, 1);
        assert!(t.end < 1.0, "{}", t.end);
        assert!(link.down.is_free(1));
    }
}
