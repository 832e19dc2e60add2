//! `tlpx serve`'s reading of this block for the Prometheus exporter (the metrics it
//! describes are listed in host/crates/tlpx/src/cmd/serve.rs `describe`, beside the others).
//!
//! Compiled into the `tlpx` crate as a child of `cmd::serve` (its `#[path]` declaration is there).

use super::*;

impl Collector {
    pub(super) fn collect_irq(&mut self, r: &Registry) -> anyhow::Result<()> {
        let c = irq_timer::counters(&mut self.card)?;
        let counts = [self.card.read(tlpx_regs::irq_timer::ISR_COUNT)?, self.card.read(tlpx_regs::irq_timer::USER_COUNT)?];
        let reading = vec![
            u64::from(c.fires),
            u64::from(c.overruns),
            u64::from(c.stray_isr_acks),
            u64::from(c.stray_user_acks),
            u64::from(c.lost),
            u64::from(c.sequence),
            counts[0],
            counts[1],
        ];
        let unchanged = self.irq_stable.as_deref() == Some(&reading[..]);
        if self.irq.update(&reading[..5], false) || (!unchanged && self.irq_stages.iter().any(|s| s.taken)) {
            for s in &mut self.irq_stages {
                s.taken = false;
            }
        }
        if !c.running && unchanged && !self.irq_stages[0].taken {
            for (i, stage) in irq_timer::Stage::ALL.into_iter().enumerate() {
                if counts[i] > 0 {
                    let s = irq_timer::stage_stats(&mut self.card, stage)?;
                    self.irq_stages[i].add(&s.histogram, s.sum_cycles);
                } else {
                    self.irq_stages[i].taken = true;
                }
            }
        }
        self.irq_stable = Some(reading);
        let t = self.irq.totals.clone();
        self.counter(r, "tlpx_irq_fires_total", &[], t[0] as f64);
        self.counter(r, "tlpx_irq_overruns_total", &[], t[1] as f64);
        self.counter(r, "tlpx_irq_stray_acks_total", &[("stage", "isr")], t[2] as f64);
        self.counter(r, "tlpx_irq_stray_acks_total", &[("stage", "user")], t[3] as f64);
        self.counter(r, "tlpx_irq_records_dropped_total", &[], t[4] as f64);
        self.gauge(r, "tlpx_irq_running", &[], f64::from(u8::from(c.running)));
        self.collect_host_interrupts(r);
        for (i, stage) in irq_timer::Stage::ALL.into_iter().enumerate() {
            let h = self.irq_stages[i].value(self.clock_hz);
            self.with_labels(&[("stage", stage.name())], |l| r.histogram_set("tlpx_irq_latency_seconds", l, h));
        }
        Ok(())
    }

    /// Per CPU, the card's interrupts the kernel dispatched there (/proc/interrupts columns of
    /// the card's irqs): where `tlpx irq --cpus` steers one vector per CPU, each CPU's count
    /// grows with its share. Every online CPU gets a series, 0 where no interrupt of the card
    /// is listed (the simulator: no kernel interrupt at all).
    fn collect_host_interrupts(&mut self, r: &Registry) {
        let Ok(text) = std::fs::read_to_string("/proc/interrupts") else { return };
        let Ok(counts) = tlpx_device::isr_trace::InterruptCounts::parse(&text) else { return };
        let irqs = self.host_irq_address.as_deref().and_then(|a| tlpx_device::isr_trace::find_msi_irqs(&text, a).ok()).unwrap_or_default();
        for (column, cpu) in counts.cpus.iter().enumerate() {
            let n: u64 = irqs.iter().filter_map(|i| counts.irqs.get(i)).map(|v| v[column]).sum();
            self.counter(r, "tlpx_irq_host_interrupts_total", &[("cpu", &cpu.to_string())], n as f64);
        }
    }
}
