//! `tlpx serve`'s reading of this block for the Prometheus exporter (the metrics it
//! describes are listed in host/crates/tlpx/src/cmd/serve.rs `describe`, beside the others).
//!
//! Compiled into the `tlpx` crate as a child of `cmd::serve` (its `#[path]` declaration is there).

use super::*;

impl Collector {
    pub(super) fn collect_rule30(&mut self, r: &Registry) -> anyhow::Result<()> {
        let c = rule30::counters(&mut self.card)?;
        let status = rule30::read(&mut self.card, rule30::reg::STATUS)?;
        let reading = [u64::from(c.operations), c.busy_cycles, u64::from(c.refused_starts), u64::from(c.ignored_starts)];
        self.rule30.update(&reading, false);
        let t = self.rule30.totals.clone();
        self.counter(r, "tlpx_rule30_operations_total", &[], t[0] as f64);
        self.counter(r, "tlpx_rule30_busy_seconds_total", &[], self.seconds(t[1]));
        self.counter(r, "tlpx_rule30_refused_starts_total", &[], t[2] as f64);
        self.counter(r, "tlpx_rule30_ignored_starts_total", &[], t[3] as f64);
        self.gauge(r, "tlpx_rule30_busy", &[], f64::from(u8::from(status & rule30::STATUS_BUSY != 0)));
        Ok(())
    }
}
