//! `tlpx spy capture`: arm the spy, stream its ring into a trace file (or stdout), and say
//! how the capture ended and what it saw, the spy's own ring writes apart.

use tlpx_device::card::Card;

use super::convert::write_pcapng;
use super::*;

/// What `tlpx spy capture` reports at the end (its --json output).
#[derive(Debug, Serialize)]
pub(super) struct CaptureSummary {
    pub(super) output: String,
    /// The pcapng file written from the trace at the end (--pcapng), and its packets.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) pcapng: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) pcapng_packets: Option<u64>,
    /// The records travelled through LitePCIe's DMA writer into its driver's ring (the
    /// litepcie backend), not through the spy's own ring.
    pub(super) through_driver_writer: bool,
    pub(super) records_written: u64,
    pub(super) records_created: u64,
    pub(super) records_lost: u64,
    pub(super) records_held_before_trigger: u64,
    pub(super) sequence_gaps: Vec<String>,
    /// Card time from the start of the capture to its end.
    pub(super) card_seconds: f64,
    pub(super) wall_seconds: f64,
    pub(super) triggered: bool,
    /// A capture with an end of its own (--duration, --records, a trigger) was stopped before it.
    pub(super) interrupted: bool,
    /// What ended it: duration, records, trigger, signal (Ctrl-C, SIGTERM, SIGHUP; `tlpx spy
    /// stop` on this host sends SIGTERM), spy_stop (the spy was taken back from it: `tlpx spy
    /// stop` from another host, or after the capture did not end on SIGTERM) or output_closed.
    pub(super) ended_by: EndedBy,
    /// The clock that stamped the records: live on the simulator (the capture holds live
    /// time), hardware on a card.
    pub(super) time_mode: tlpx_device::TimeMode,
    pub(super) plan: Plan,
    /// Sequence number of the record that matched the trigger (also in the trace's footer).
    pub(super) trigger_sequence: Option<u32>,
    /// The capture's own ring writes on the link it observes.
    pub(super) own_traffic: OwnTrafficSummary,
    /// MSIs the card sent during the capture (recorded or not).
    pub(super) msis: u64,
}

/// The spy's own ring writes over a span of card time, and their share of the link.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct OwnTrafficSummary {
    pub tlps: u64,
    /// Header and payload bytes (the datapath's, as the spy's byte counters).
    pub bytes: u64,
    /// On the wire: plus the link's framing per TLP (tlpx-model's TLP_FRAMING_BYTES).
    pub wire_bytes: u64,
    /// `wire_bytes` over what the card-to-host direction carries for TLPs in the span (the
    /// link model's TLP bandwidth for the link libpci reports); None without a link model.
    pub link_share: Option<f64>,
}

/// The own-traffic figures of `own` over `seconds` of card time on `link`.
pub(crate) fn own_traffic(own: &spy::OwnTraffic, link: Option<&tlpx_model::link::LinkConfig>, seconds: f64) -> OwnTrafficSummary {
    let wire_bytes = own.bytes + own.tlps * u64::from(tlpx_model::link::TLP_FRAMING_BYTES);
    let link_share =
        link.map(|l| l.tlp_bytes_per_second() * seconds).filter(|carried| *carried > 0.0).map(|carried| wire_bytes as f64 / carried);
    OwnTrafficSummary { tlps: own.tlps, bytes: own.bytes, wire_bytes, link_share }
}

impl OwnTrafficSummary {
    /// "N TLPs, B bytes (W on the wire, X% of the link's card-to-host direction)".
    pub(crate) fn describe(&self) -> String {
        let share = match self.link_share {
            Some(s) => format!(", {:.2}% of the link's card-to-host direction", s * 100.0),
            None => String::new(),
        };
        format!("{} TLPs, {} bytes ({} on the wire{share})", self.tlps, self.bytes, self.wire_bytes)
    }
}

/// What ended a capture.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub(super) enum EndedBy {
    Duration,
    Records,
    Trigger,
    Signal,
    SpyStop,
    OutputClosed,
}

/// Records reach the disk at least this often (and every [`FLUSH_RECORDS`]): a capture killed
/// outright (SIGKILL) leaves a readable trace up to what the host had received.
pub(super) const FLUSH_EVERY: Duration = Duration::from_millis(100);
pub(super) const FLUSH_RECORDS: u64 = 1024;

struct Sink {
    writer: TraceWriter<BufWriter<File>>,
    gaps: GapDetector,
    gap_texts: Vec<String>,
    /// The running log: records folded into entries (a TLP with its payload), then put in
    /// time order across directions within a bounded window (tlpx_trace::log::TimeSorter says
    /// why the window suffices); the last line printed, for its delta.
    entries: tlpx_trace::EntryBuilder,
    sorter: tlpx_trace::log::TimeSorter,
    previous: Option<Record>,
    clock_hz: u64,
    /// BAR0's address: the running log names the registers host requests hit.
    names: Option<tlpx_trace::Bar0Names>,
    log: bool,
    stdout: std::io::StdoutLock<'static>,
    /// The reader of the running log went away (EPIPE): the capture stops as after Ctrl-C.
    output_closed: bool,
    unflushed: u64,
    flushed_at: Instant,
}

impl Sink {
    /// A sink writing to `writer`, the log on stdout when `log`.
    fn new(writer: TraceWriter<BufWriter<File>>, names: Option<tlpx_trace::Bar0Names>, clock_hz: u64, log: bool) -> Sink {
        Sink {
            writer,
            gaps: GapDetector::new(),
            gap_texts: Vec::new(),
            entries: tlpx_trace::EntryBuilder::new(),
            sorter: tlpx_trace::log::TimeSorter::new(),
            previous: None,
            clock_hz,
            names,
            log,
            stdout: std::io::stdout().lock(),
            output_closed: false,
            unflushed: 0,
            flushed_at: Instant::now(),
        }
    }

    /// A line of the running log; a closed stdout stops the log and asks the capture to stop.
    fn say(&mut self, line: std::fmt::Arguments<'_>) {
        if !self.log || self.output_closed {
            return;
        }
        if writeln!(self.stdout, "{line}").is_err() {
            self.output_closed = true;
            self.log = false;
            crate::output::mark_output_closed();
        }
    }

    /// Prints log lines the time sorter released.
    fn log_sorted(&mut self, held: Vec<tlpx_trace::log::Held>) {
        if held.is_empty() {
            return;
        }
        let mut text = Vec::new();
        let _ = tlpx_trace::log::write_sorted(&mut text, held, &mut self.previous, self.clock_hz, self.names.as_ref());
        for line in String::from_utf8_lossy(&text).lines() {
            self.say(format_args!("{line}"));
        }
    }

    /// The end of the capture: the log lines still held, in time order. `next_sequence` is the
    /// spy's next (a payload record lost at the very end marks its TLP's payload incomplete).
    fn end_log(&mut self, next_sequence: u32) {
        if self.log {
            if let Some(info) = self.entries.finish(Some(next_sequence)) {
                let held = self.sorter.push(info);
                self.log_sorted(held);
            }
            let held = self.sorter.finish();
            self.log_sorted(held);
        }
    }

    fn take(&mut self, batch: &[[u8; RECORD_BYTES]]) -> anyhow::Result<()> {
        for raw in batch {
            self.writer.write_raw(raw).context("writing the trace")?;
            self.unflushed += 1;
            let record = Record::from_bytes(raw).map_err(|e| anyhow!("the spy delivered a record this tlpx cannot decode: {e}"))?;
            if let Some(gap) = self.gaps.push(record.sequence) {
                let text = gap.to_string();
                // The running log says it in time order, before the record after the gap.
                if !self.log {
                    eprintln!("tlpx: warning: {text} (ring full)");
                }
                self.gap_texts.push(text);
            }
            if self.log {
                if let Some(info) = self.entries.push(record) {
                    let held = self.sorter.push(info);
                    self.log_sorted(held);
                }
            }
        }
        if self.unflushed >= FLUSH_RECORDS || (self.unflushed > 0 && self.flushed_at.elapsed() >= FLUSH_EVERY) {
            self.writer.flush().context("writing the trace")?;
            self.unflushed = 0;
            self.flushed_at = Instant::now();
        }
        Ok(())
    }
}

/// BAR0's bus address from config space (the trace header records it, `top` hides its own
/// accesses with it; both name BAR0 registers with it) (memory BAR, 32- or 64-bit).
pub(crate) fn bar0_address(card: &mut tlpx_device::card::Card) -> Option<u64> {
    let cfg = card.device().config_read(0x10, 8).ok()?;
    let low = u32::from_le_bytes(cfg[0..4].try_into().ok()?);
    if low & 1 != 0 {
        return None; // an I/O BAR: not ours
    }
    let high = if (low >> 1) & 3 == 2 { u32::from_le_bytes(cfg[4..8].try_into().ok()?) } else { 0 };
    Some(u64::from(high) << 32 | u64::from(low & !0xf))
}

/// The names for this card's BAR0 (`spy.wr_index`) and slot tags: BAR0's bus address, where
/// tlpx's map is in it, and the slot's DUT. None when BAR0's address cannot be read.
pub(crate) fn bar0_names(card: &mut tlpx_device::card::Card) -> Option<tlpx_trace::Bar0Names> {
    let base = bar0_address(card)?;
    let dut = crate::slot::dut_name(card).ok();
    Some(tlpx_trace::Bar0Names::new(base).with_slot(card.tlpx_base(), dut))
}

/// The trace header of a capture on this session's card (its identity, BAR0's address, where
/// tlpx's map is and who is in the slot, so that readers name registers and attribute tags),
/// and the names the running log uses. `tlpx slot run --spy` writes the same header.
pub(crate) fn trace_header(
    session: &mut Session,
    filters: &Filters,
    trigger: &Trigger,
    time_mode: tlpx_device::TimeMode,
) -> anyhow::Result<(HeaderInfo, Option<tlpx_trace::Bar0Names>)> {
    let id = session.card.identity().clone();
    let clock_hz = u64::from(session.clock_hz);
    let names = bar0_names(&mut session.card);
    let mut info = HeaderInfo::new(
        format!("tlpx {}", env!("CARGO_PKG_VERSION")),
        CardInfo {
            map_hash: Some(format!("0x{:08x}", id.map_hash)),
            data_width: Some(id.data_width),
            clock_hz,
            pci_address: session.environment.pci_address.clone(),
            bar0_address: names.as_ref().map(|n| format!("{:#x}", n.base)),
            tlpx_map_offset: names.as_ref().filter(|n| n.tlpx_base != 0).map(|n| format!("{:#x}", n.tlpx_base)),
            slot_dut: names.as_ref().and_then(|n| n.dut.clone()),
            slot_registers: Vec::new(),
        },
    );
    info.simulated = session.environment.simulated;
    info.time_mode = Some(time_mode.name().to_string());
    info.link =
        session.link.as_ref().map(|l| LinkInfo { generation: l.generation, lanes: l.lanes, mps: l.mps as u16, mrrs: l.mrrs as u16 });
    info.capture.filters = serde_json::to_value(filters)?;
    info.capture.trigger = serde_json::to_value(trigger)?;
    info.capture.include_own_traffic = filters.include_own;
    Ok((info, names))
}

pub(super) fn capture(a: &CaptureArgs, device: &str, json: bool) -> anyhow::Result<ExitCode> {
    let plan = Plan::parse(a)?;
    // A bad --regs file is refused before the card is opened.
    let loaded = crate::cmd::reg::load_map(a.regs.as_ref())?;
    let started = Instant::now();
    let mut session = Session::open_observer(device)?;
    let (mps, _) = session.mps_mrrs();
    session.card.require(Feature::Spy, "spy")?;
    if a.regs.is_some() {
        loaded.check(&mut session.card, &[])?;
    }
    // Live time for the whole capture (it ends with this process's connection): the traffic
    // another process starts while this one sleeps between polls runs and is recorded.
    session.hold_live_time()?;
    let time_mode = session.environment.time_mode_at_start().unwrap_or(tlpx_device::TimeMode::Hardware);
    let clock_hz = u64::from(session.clock_hz);
    let link_model = session.link.as_ref().and_then(|l| l.model(false));
    let (mut info, mut names) = trace_header(&mut session, &plan.filters, &plan.trigger, time_mode)?;
    if a.regs.is_some() {
        let dut = crate::slot::dut_name(&mut session.card)?;
        info.card.slot_registers = crate::cmd::reg::slot_registers(&loaded.map, &dut);
        names = names.map(|n| n.with_dut_registers(info.card.slot_registers.clone()));
    }
    // The spy first: a capture refused because another owns the spy leaves --output as it was.
    session.card.claim(Block::Spy)?;
    for note in session.card.take_notes() {
        eprintln!("tlpx: note: {note}");
    }
    let mut writer = TraceWriter::create(&a.output, &info).with_context(|| format!("creating {}", a.output.display()))?;
    // The header is on disk before the first record: a capture killed at any moment leaves a
    // trace that reads (up to its last flushed record, without footer).
    writer.flush().with_context(|| format!("writing {}", a.output.display()))?;
    let log = !a.quiet && !json;
    let mut sink = Sink::new(writer, names, clock_hz, log);
    let until = match (plan.duration_s, plan.records) {
        (Some(_), _) => format!("for {} of card time", a.duration.as_deref().unwrap_or_default().trim()),
        (None, Some(n)) => format!("until {n} records have arrived"),
        (None, None) => "until Ctrl-C, SIGTERM or `tlpx spy stop`".to_string(),
    };
    sink.say(format_args!("{}", session.describe()));
    progress::install_stop_handler();
    let card = &mut session.card;
    let mut cap = Capture::start_with_mps(card, plan.ring, mps, &plan.filters, &plan.trigger)?;
    let transport = if cap.through_driver_writer() {
        // LitePCIe's driver owns the DMA buffers: the records travel in its writer ring. Said
        // on stderr too when --ring was given, which does not apply there (-q or not).
        if a.ring != DEFAULT_RING_RECORDS {
            eprintln!(
                "tlpx: note: --ring {} does not apply through LitePCIe's driver: the records go into its ring of {} records",
                a.ring,
                cap.ring_records()
            );
        }
        format!("through LitePCIe's DMA writer into its driver's ring of {} records; --ring does not apply", cap.ring_records())
    } else {
        format!("ring {} records", cap.ring_records())
    };
    sink.say(format_args!("capturing to {} ({transport}) {until}; times are card time, dur/lat in cycles", a.output.display()));
    sink.say(format_args!("{}", tlpx_trace::log_title()));
    // Card time from the device's clock (the simulator's cycle count, which moves no TLP; the
    // host's on hardware, where they are the same time): in live time card time runs while
    // this process computes too, not only during its waits.
    let t0 = card.device().clock_ns()?;
    let mut elapsed = Duration::ZERO;
    let mut batch = Vec::new();
    let result = poll_until_end(&mut cap, card, &mut sink, &plan, t0, &mut elapsed, &mut batch);
    // Stop in any case, so the card is not left capturing into a freed ring; whatever went
    // wrong, what was received is flushed to the trace (without footer if the capture failed).
    let through_driver_writer = cap.through_driver_writer();
    let end = cap.stop_into(card, &mut batch).context("stopping the capture");
    elapsed = card.device().clock_ns().map_or(elapsed, |t| Duration::from_nanos(t.saturating_sub(t0)));
    let (ended_by, end): (EndedBy, CaptureEnd) = match (result, end) {
        (Ok(why), Ok(end)) => (why, end),
        (Err(e), _) | (Ok(_), Err(e)) => {
            let _ = sink.take(&batch);
            let _ = sink.writer.finish_without_footer();
            return Err(e);
        }
    };
    sink.take(&batch)?;
    sink.end_log(end.next_sequence);
    if let Some(gap) = sink.gaps.push(end.next_sequence) {
        let text = format!("{gap} (at the end of the capture)");
        if !json {
            eprintln!("tlpx: warning: {text}");
        }
        sink.gap_texts.push(text);
    }
    let written = sink.writer.records_written();
    sink.writer
        .finish(
            end.next_sequence,
            Footer { records_created: end.records_created, records_lost: end.records_lost, trigger_sequence: end.trigger_sequence },
        )
        .context("finishing the trace")?;
    // pcapng from the finished trace: the trace is the capture's record (it is on disk as the
    // capture runs, a killed capture leaves it readable); pcapng is a view of it.
    let pcapng_packets = match &a.pcapng {
        Some(path) => Some(write_pcapng(&a.output, path)?),
        None => None,
    };
    // Being stopped is the end of a capture that has none of its own; one with an end of its
    // own (--duration, --records, a trigger) was cut short.
    let planned_end = plan.duration_s.is_some() || plan.records.is_some() || plan.trigger.mode != TriggerMode::Off;
    let interrupted = planned_end && matches!(ended_by, EndedBy::Signal | EndedBy::SpyStop);
    let summary = CaptureSummary {
        output: a.output.display().to_string(),
        pcapng: a.pcapng.as_ref().map(|p| p.display().to_string()),
        pcapng_packets,
        through_driver_writer,
        records_written: written,
        records_created: end.records_created,
        records_lost: end.records_lost,
        records_held_before_trigger: end.records_held,
        sequence_gaps: sink.gap_texts.clone(),
        card_seconds: elapsed.as_secs_f64(),
        wall_seconds: started.elapsed().as_secs_f64(),
        triggered: end.triggered,
        interrupted,
        ended_by,
        time_mode,
        plan,
        trigger_sequence: end.trigger_sequence,
        own_traffic: own_traffic(&end.own, link_model.as_ref(), elapsed.as_secs_f64()),
        msis: end.msi_count,
    };

    if sink.output_closed {
        // Nobody reads the log any more: the trace is complete; say nothing, exit as a
        // process killed by SIGPIPE would (128 + 13), after cleaning up.
        return Ok(ExitCode::from(141));
    }
    if json {
        print_json(&summary)?;
    } else {
        print_summary(&summary);
    }
    Ok(if summary.records_lost > 0 {
        ExitCode::from(1)
    } else if interrupted {
        ExitCode::from(progress::INTERRUPTED_EXIT)
    } else {
        ExitCode::SUCCESS
    })
}

/// Polls the spy's ring into `sink` until the capture ends (its records, its duration of card
/// time from `t0`, a trigger, a signal, `tlpx spy stop`, or a closed output), and says why;
/// `elapsed` follows the card time as it goes.
fn poll_until_end(
    cap: &mut Capture,
    card: &mut Card,
    sink: &mut Sink,
    plan: &Plan,
    t0: u64,
    elapsed: &mut Duration,
    batch: &mut Vec<[u8; RECORD_BYTES]>,
) -> anyhow::Result<EndedBy> {
    let poll = Duration::from_secs_f64(plan.poll_s);
    loop {
        cap.poll(card, batch)?;
        sink.take(batch)?;
        batch.clear();
        if sink.output_closed {
            return Ok(EndedBy::OutputClosed);
        }
        if plan.records.is_some_and(|n| cap.delivered() >= n) {
            return Ok(EndedBy::Records);
        }
        *elapsed = Duration::from_nanos(card.device().clock_ns()?.saturating_sub(t0));
        if plan.duration_s.is_some_and(|d| elapsed.as_secs_f64() >= d) {
            return Ok(EndedBy::Duration);
        }
        if progress::stop_requested() || tlpx_device::stop::requested() {
            return Ok(EndedBy::Signal);
        }
        if plan.trigger.mode != TriggerMode::Off && tlpx_regs::spy::status::STOPPED.get(card.read(tlpx_regs::spy::STATUS)?) != 0 {
            return Ok(EndedBy::Trigger);
        }
        match card.idle(poll) {
            Err(tlpx_device::DeviceError::Interrupted) => return Ok(EndedBy::Signal),
            // The spy was taken back (`tlpx spy stop` where this process could not be
            // signalled): it stopped recording and wrote what it could into the ring
            // before the lease went; drain that and finish.
            Err(tlpx_device::DeviceError::LeaseLost { .. }) => return Ok(EndedBy::SpyStop),
            other => other?,
        }
    }
}

/// The text report of a finished capture: what was written where, on which clock, how it
/// ended, and what was lost (on stderr).
fn print_summary(summary: &CaptureSummary) {
    let why = match summary.ended_by {
        EndedBy::Signal => " (stopped by Ctrl-C, SIGTERM or `tlpx spy stop`)",
        EndedBy::SpyStop => " (the spy was taken back from it: `tlpx spy stop`)",
        _ => "",
    };
    crate::outln!(
        "{} records written to {} in {:.3} ms of card time ({}; {:.2} s wall){why}; the spy created {}, lost {}",
        summary.records_written,
        summary.output,
        summary.card_seconds * 1e3,
        match summary.time_mode {
            tlpx_device::TimeMode::Live => "live time: not reproducible",
            tlpx_device::TimeMode::Virtual => "virtual time",
            tlpx_device::TimeMode::RealHostTime => "real host time: not reproducible",
            tlpx_device::TimeMode::Hardware => "hardware",
        },
        summary.wall_seconds,
        summary.records_created,
        summary.records_lost
    );
    crate::outln!("the spy's own ring writes: {}; MSIs sent by the card: {}", summary.own_traffic.describe(), summary.msis);
    if let Some(seq) = summary.trigger_sequence {
        crate::outln!("the trigger matched record {seq}");
    }
    if let (Some(path), Some(n)) = (&summary.pcapng, summary.pcapng_packets) {
        crate::outln!("{n} packets written to {path} (pcapng; open it with wireshark/tlpx.lua: docs/wireshark.md)");
    }
    if summary.records_held_before_trigger > 0 {
        crate::outln!(
            "the start trigger never matched: {} pre-trigger records were held and not written",
            summary.records_held_before_trigger
        );
    }
    if summary.records_lost > 0 {
        eprintln!(
            "tlpx: {} records lost ({} sequence gaps): the ring was full; use {}a shorter --poll, or filters",
            summary.records_lost,
            summary.sequence_gaps.len(),
            if summary.through_driver_writer { "" } else { "a larger --ring, " }
        );
    }
}
