//! `tlpx serve`'s reading of this block for the Prometheus exporter (the metrics it
//! describes are listed in host/crates/tlpx/src/cmd/serve.rs `describe`, beside the others).
//!
//! Compiled into the `tlpx` crate as a child of `cmd::serve` (its `#[path]` declaration is there).

use super::*;

impl Collector {
    pub(super) fn collect_generator(&mut self, r: &Registry) -> anyhow::Result<()> {
        let c = generator::counters(&mut self.card)?;
        let (running, done) = (c.running, c.done);
        let e = c.errors;
        // In this order: the first 14 are the run's monotonic counters, then the latency
        // sample count and sum.
        let reading = vec![
            c.read_bytes,
            c.write_bytes,
            c.read_requests,
            c.write_requests,
            c.completions,
            c.transfers,
            c.cycles,
            e.unsupported_request,
            e.completer_abort,
            e.other_status,
            e.poisoned,
            e.completion_timeouts,
            e.unexpected_completions,
            e.data_mismatches,
            c.latency_count,
            c.latency_sum,
        ];
        // A finished run's counters no longer move: any change after one is a new run.
        let unchanged = self.generator_last.as_deref() == Some(&reading[..]);
        let new_run = self.generator_done && !unchanged;
        let was_idle = self.generator_last.as_ref().is_none_or(|p| p.iter().all(|v| *v == 0));
        let active = reading.iter().any(|v| *v != 0) || running;
        if self.generator.update(&reading[..14], new_run) {
            self.generator_runs += u64::from(active);
            self.read_latency.taken = false;
        } else if was_idle && active {
            // The first run since the card was reset grows from zero: no restart to see.
            self.generator_runs += 1;
        }
        self.generator_last = Some(reading.clone());
        // The histogram of a run, once, after it ended and stayed put for an interval.
        if done && !running && unchanged && !self.read_latency.taken {
            if reading[14] > 0 {
                let buckets = generator::latency_histogram(&mut self.card)?;
                self.read_latency.add(&buckets, reading[15]);
            } else {
                self.read_latency.taken = true;
            }
        }
        self.generator_done = done && !running;
        let t = self.generator.totals.clone();
        self.counter(r, "tlpx_generator_runs_total", &[], self.generator_runs as f64);
        self.counter(r, "tlpx_generator_bytes_total", &[("operation", "read")], t[0] as f64);
        self.counter(r, "tlpx_generator_bytes_total", &[("operation", "write")], t[1] as f64);
        self.counter(r, "tlpx_generator_tlps_total", &[("type", "mrd")], t[2] as f64);
        self.counter(r, "tlpx_generator_tlps_total", &[("type", "mwr")], t[3] as f64);
        self.counter(r, "tlpx_generator_tlps_total", &[("type", "completion")], t[4] as f64);
        self.counter(r, "tlpx_generator_transfers_total", &[], t[5] as f64);
        self.counter(r, "tlpx_generator_busy_seconds_total", &[], self.seconds(t[6]));
        let kinds = [
            "unsupported_request",
            "completer_abort",
            "other_status",
            "poisoned",
            "completion_timeout",
            "unexpected_completion",
            "data_mismatch",
        ];
        for (i, kind) in kinds.iter().enumerate() {
            self.counter(r, "tlpx_generator_errors_total", &[("kind", kind)], t[7 + i] as f64);
        }
        self.gauge(r, "tlpx_generator_running", &[], f64::from(u8::from(running)));
        self.gauge(r, "tlpx_generator_outstanding_reads", &[], c.outstanding_reads as f64);
        let h = self.read_latency.value(self.clock_hz);
        self.with_labels(&[], |l| r.histogram_set("tlpx_generator_read_latency_seconds", l, h));
        Ok(())
    }
}
