//! `tlpx serve`'s reading of this block for the Prometheus exporter (the metrics it
//! describes are listed in host/crates/tlpx/src/cmd/serve.rs `describe`, beside the others).
//!
//! Compiled into the `tlpx` crate as a child of `cmd::serve` (its `#[path]` declaration is there).

use super::*;

impl Collector {
    pub(super) fn collect_spy(&mut self, r: &Registry) -> anyhow::Result<()> {
        let c = spy::counters(&mut self.card)?;
        let mut reading = Vec::with_capacity(2 * 8 * 4 + 2);
        for d in spy::Direction::BOTH {
            for cc in c.direction(d) {
                reading.extend([cc.tlps, cc.bytes, cc.payload_bytes, cc.wait_cycles]);
            }
        }
        reading.extend([u64::from(c.sequence), u64::from(c.lost)]);
        self.spy.update(&reading, false);
        let t = self.spy.totals.clone();
        for (di, d) in spy::Direction::BOTH.iter().enumerate() {
            for (ci, class) in spy::CLASSES.iter().enumerate() {
                let i = (di * 8 + ci) * 4;
                let l = [("direction", d.name()), ("type", *class)];
                self.counter(r, "tlpx_spy_tlps_total", &l, t[i] as f64);
                self.counter(r, "tlpx_spy_bytes_total", &l, t[i + 1] as f64);
                self.counter(r, "tlpx_spy_payload_bytes_total", &l, t[i + 2] as f64);
                self.counter(r, "tlpx_spy_wait_seconds_total", &l, self.seconds(t[i + 3]));
            }
        }
        self.counter(r, "tlpx_spy_records_total", &[], t[64] as f64);
        self.counter(r, "tlpx_spy_records_dropped_total", &[], t[65] as f64);
        self.gauge(r, "tlpx_spy_capturing", &[], f64::from(u8::from(c.capturing)));
        Ok(())
    }
}
