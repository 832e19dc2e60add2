//! Drawing: one frame from a [`State`], nothing else. Works on any ratatui backend, the
//! terminal's or a `TestBackend` for `--snapshot` and tests.

use ratatui::buffer::Buffer;
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::{Color, Modifier, Style};
use ratatui::symbols::Marker;
use ratatui::text::{Line, Span};
use ratatui::widgets::{Axis, Bar, BarChart, BarGroup, Block, Chart, Dataset, GraphType, Paragraph, Row, Table};
use ratatui::Frame;

use tlpx_device::TimeMode;

use super::collect::{RingOwner, CLASS_COUNT, CLASS_LABELS};
use super::state::{Panel, State};

const DOWN_COLOR: Color = Color::Cyan;
const UP_COLOR: Color = Color::Yellow;

/// Payload rate as MB/s (10^6 bytes), the unit of every bandwidth figure in tlpx.
pub fn mb_s(bytes_per_second: f64) -> String {
    let mb = bytes_per_second / 1e6;
    if mb >= 100.0 {
        format!("{mb:.0} MB/s")
    } else if mb >= 1.0 {
        format!("{mb:.1} MB/s")
    } else {
        format!("{mb:.3} MB/s")
    }
}

/// A count with k/M/G suffixes, 4 significant characters or so.
pub fn count(v: f64) -> String {
    if v >= 1e9 {
        format!("{:.1}G", v / 1e9)
    } else if v >= 1e6 {
        format!("{:.1}M", v / 1e6)
    } else if v >= 1e4 {
        format!("{:.0}k", v / 1e3)
    } else if v >= 1e3 {
        format!("{:.1}k", v / 1e3)
    } else {
        format!("{v:.0}")
    }
}

/// A cycle count as a short bucket label: 1, 2, ... 512, 1K, ... 1M, ...
fn cycles_label(v: u64) -> String {
    if v >= 1 << 30 {
        format!("{}G", v >> 30)
    } else if v >= 1 << 20 {
        format!("{}M", v >> 20)
    } else if v >= 1 << 10 {
        format!("{}K", v >> 10)
    } else {
        v.to_string()
    }
}

fn block(state: &State, panel: Panel, title: String) -> Block<'static> {
    let focused = state.focus == panel;
    let style = if focused { Style::new().fg(Color::LightGreen).add_modifier(Modifier::BOLD) } else { Style::new() };
    Block::bordered().border_style(style).title(Span::styled(format!(" {title} "), style))
}

/// Draws the whole screen.
pub fn draw(frame: &mut Frame, state: &State) {
    let area = frame.area();
    let [top, body, help] = Layout::vertical([Constraint::Length(1), Constraint::Min(0), Constraint::Length(1)]).areas(area);
    frame.render_widget(Paragraph::new(status_line(state)), top);
    frame.render_widget(Paragraph::new(help_line(state)), help);
    if state.zoomed {
        draw_panel(frame, state, state.focus, body);
        return;
    }
    let [upper, middle, lower] = Layout::vertical([Constraint::Percentage(34), Constraint::Percentage(30), Constraint::Min(6)]).areas(body);
    let [bw, mix] = Layout::horizontal([Constraint::Percentage(55), Constraint::Percentage(45)]).areas(upper);
    let [lat, counters] = Layout::horizontal([Constraint::Percentage(55), Constraint::Percentage(45)]).areas(middle);
    draw_panel(frame, state, Panel::Bandwidth, bw);
    draw_panel(frame, state, Panel::Mix, mix);
    draw_panel(frame, state, Panel::Latency, lat);
    draw_panel(frame, state, Panel::Counters, counters);
    draw_panel(frame, state, Panel::Recent, lower);
}

fn draw_panel(frame: &mut Frame, state: &State, panel: Panel, area: Rect) {
    match panel {
        Panel::Bandwidth => draw_bandwidth(frame, state, area),
        Panel::Mix => draw_mix(frame, state, area),
        Panel::Latency => draw_latency(frame, state, area),
        Panel::Counters => draw_counters(frame, state, area),
        Panel::Recent => draw_recent(frame, state, area),
    }
}

fn status_line(state: &State) -> Line<'static> {
    let mut spans = vec![Span::styled("tlpx top ", Style::new().add_modifier(Modifier::BOLD)), Span::raw(state.header.clone())];
    match &state.last {
        // Live time on the simulator: a frame follows wall time and covers far less card time;
        // say which span of card time it is.
        Some(s) if state.time_mode != TimeMode::Hardware => spans.push(Span::raw(format!(
            " | card time {:.6}..{:.6} s ({} in {} wall, {}) | frame {}",
            s.card_start_s,
            s.card_time_s,
            span_label(s.interval_s),
            span_label(s.wall_interval_s),
            state.time_mode,
            state.samples
        ))),
        Some(s) => spans.push(Span::raw(format!(
            " | card time {:.3} s | sample {} every {} (last {})",
            s.card_time_s,
            state.samples,
            duration_label(state.interval_s),
            duration_label(s.interval_s)
        ))),
        None => spans.push(Span::raw(" | waiting for the first sample")),
    }
    if state.paused {
        spans.push(Span::styled(" PAUSED", Style::new().fg(Color::Black).bg(Color::Yellow)));
    }
    if let Some(m) = &state.message {
        spans.push(Span::styled(format!(" {m}"), Style::new().fg(Color::Red)));
    }
    Line::from(spans)
}

fn help_line(state: &State) -> Line<'static> {
    let zoom = if state.zoomed { "z/enter: all panels" } else { "z/enter: zoom" };
    Line::from(Span::styled(
        format!(" q quit  p pause  c clear counters  tab/arrows: focus ({})  {zoom}", state.focus.title()),
        Style::new().fg(Color::DarkGray),
    ))
}

fn duration_label(seconds: f64) -> String {
    if seconds >= 1.0 {
        format!("{seconds:.3} s")
    } else if seconds >= 1e-3 {
        format!("{:.0} ms", seconds * 1e3)
    } else {
        format!("{:.0} us", seconds * 1e6)
    }
}

/// A span of time with three decimals in its unit: "4.434 ms", "1.000 s", "12.5 us".
fn span_label(seconds: f64) -> String {
    if seconds >= 1.0 {
        format!("{seconds:.3} s")
    } else if seconds >= 1e-3 {
        format!("{:.3} ms", seconds * 1e3)
    } else {
        format!("{:.1} us", seconds * 1e6)
    }
}

fn draw_bandwidth(frame: &mut Frame, state: &State, area: Rect) {
    let title = match &state.limits.link {
        Some(link) => format!("{} (payload, card time) - link {link}", Panel::Bandwidth.title()),
        None => format!("{} (payload, card time)", Panel::Bandwidth.title()),
    };
    let mut outer = block(state, Panel::Bandwidth, title);
    // top's ring writes share the up link and the spy does not count them: say what they cost.
    if let Some(s) = state.last.as_ref().filter(|s| s.ring == RingOwner::Top && s.interval_s > 0.0) {
        let ring = (s.records_received * tlpx_trace::RECORD_SIZE as u64) as f64 / s.interval_s;
        outer = outer.title_bottom(Span::styled(
            format!(" up link also carries top's ring writes: {} ", mb_s(ring)),
            Style::new().fg(Color::DarkGray),
        ));
    }
    let inner = outer.inner(area);
    frame.render_widget(outer, area);
    let [text, chart] = Layout::vertical([Constraint::Length(2), Constraint::Min(0)]).areas(inner);
    let (peak_down, peak_up) = state.peaks();
    let (now_down, now_up) = state.last.as_ref().map_or((0.0, 0.0), |s| (s.down.payload_bytes_per_second, s.up.payload_bytes_per_second));
    let limit = |l: Option<f64>| l.map_or_else(|| "no model".to_string(), |v| format!("limit {}", mb_s(v)));
    let line = |name: &str, color: Color, now: f64, peak: f64, lim: Option<f64>| {
        Line::from(vec![
            Span::styled(format!("{name:<16}"), Style::new().fg(color)),
            Span::styled(format!("{:>13}", mb_s(now)), Style::new().fg(color).add_modifier(Modifier::BOLD)),
            Span::raw(format!("  peak {:>12}  {}", mb_s(peak), limit(lim))),
        ])
    };
    frame.render_widget(
        Paragraph::new(vec![
            line("down host->card", DOWN_COLOR, now_down, peak_down, state.limits.down),
            line("up   card->host", UP_COLOR, now_up, peak_up, state.limits.up),
        ]),
        text,
    );
    if chart.height < 3 {
        return;
    }
    let down: Vec<(f64, f64)> = state.down_history.iter().map(|(t, v)| (*t, v / 1e6)).collect();
    let up: Vec<(f64, f64)> = state.up_history.iter().map(|(t, v)| (*t, v / 1e6)).collect();
    let x0 = down.first().map_or(0.0, |p| p.0);
    // At least one frame's span of card time wide (on the simulator a frame of wall time
    // covers far less card time than its interval).
    let span = if state.time_mode == TimeMode::Hardware { state.interval_s } else { state.last.as_ref().map_or(0.0, |s| s.interval_s) };
    let x1 = down.last().map_or(1.0, |p| p.0).max(x0 + span.max(1e-6));
    // Scale to what was seen, but never above the link's limit: the limit is in the text.
    let seen = (peak_down.max(peak_up) / 1e6).max(0.001);
    let y1 = nice_ceiling(seen * 1.1);
    let datasets = vec![
        Dataset::default().name("down").marker(Marker::Braille).graph_type(GraphType::Line).style(Style::new().fg(DOWN_COLOR)).data(&down),
        Dataset::default().name("up").marker(Marker::Braille).graph_type(GraphType::Line).style(Style::new().fg(UP_COLOR)).data(&up),
    ];
    let chart_widget = Chart::new(datasets)
        .x_axis(
            Axis::default().bounds([x0, x1]).labels([format!("{x0:.3} s"), format!("{x1:.3} s")]).style(Style::new().fg(Color::DarkGray)),
        )
        .y_axis(Axis::default().bounds([0.0, y1]).labels(["0".to_string(), format!("{y1} MB/s")]).style(Style::new().fg(Color::DarkGray)))
        .hidden_legend_constraints((Constraint::Percentage(0), Constraint::Percentage(0)));
    frame.render_widget(chart_widget, chart);
}

/// 1, 2 or 5 times a power of ten, at least `v`.
fn nice_ceiling(v: f64) -> f64 {
    let mut base = 0.001;
    loop {
        for m in [1.0, 2.0, 5.0] {
            if base * m >= v {
                return (base * m * 1000.0).round() / 1000.0;
            }
        }
        base *= 10.0;
    }
}

fn draw_mix(frame: &mut Frame, state: &State, area: Rect) {
    let mut outer = block(state, Panel::Mix, format!("{} (rate now, total since clear)", Panel::Mix.title()));
    let (down_total, up_total) = state.totals();
    let last = state.last.as_ref();
    if let Some(s) = last.filter(|s| s.ring == RingOwner::Top) {
        outer = outer.title_bottom(Span::styled(
            format!(" incl. {} TLPs of top's own polling ", s.own_accesses_hidden),
            Style::new().fg(Color::DarkGray),
        ));
    }
    let interval = last.map_or(0.0, |s| s.interval_s);
    let rate = |n: u64| if interval > 0.0 { n as f64 / interval } else { 0.0 };
    let mut rows = Vec::new();
    for i in 0..CLASS_COUNT {
        let d = last.map_or(0, |s| s.down.classes[i].tlps);
        let u = last.map_or(0, |s| s.up.classes[i].tlps);
        let dt = down_total[i].tlps;
        let ut = up_total[i].tlps;
        let style = if d + u > 0 {
            Style::new().add_modifier(Modifier::BOLD)
        } else if dt + ut == 0 {
            Style::new().fg(Color::DarkGray)
        } else {
            Style::new()
        };
        rows.push(
            Row::new(vec![
                CLASS_LABELS[i].to_string(),
                format!("{:>8}", count(rate(d))),
                format!("{:>8}", count(dt as f64)),
                format!("{:>8}", count(rate(u))),
                format!("{:>8}", count(ut as f64)),
                format!("{:>9}", count((down_total[i].wait_cycles + up_total[i].wait_cycles) as f64)),
            ])
            .style(style),
        );
    }
    let header = Row::new(vec!["class", "  down/s", "    down", "    up/s", "      up", "wait cyc"])
        .style(Style::new().add_modifier(Modifier::UNDERLINED));
    let widths = [
        Constraint::Length(6),
        Constraint::Length(8),
        Constraint::Length(8),
        Constraint::Length(8),
        Constraint::Length(8),
        Constraint::Length(9),
    ];
    frame.render_widget(Table::new(rows, widths).header(header).block(outer).column_spacing(1), area);
}

fn draw_latency(frame: &mut Frame, state: &State, area: Rect) {
    let hist = state.latency();
    let n: u64 = hist.iter().sum();
    let hz = state.clock_hz.max(1) as f64;
    let title =
        format!("{} (request to last completion, cycles of {:.0} ns, log height) n={}", Panel::Latency.title(), 1e9 / hz, count(n as f64));
    let outer = block(state, Panel::Latency, title);
    let inner = outer.inner(area);
    frame.render_widget(outer, area);
    if n == 0 {
        frame.render_widget(Paragraph::new("no matched reads yet: the spy times every read it sees to its last completion"), inner);
        return;
    }
    let first = hist.iter().position(|v| *v > 0).unwrap_or(0);
    let last = hist.iter().rposition(|v| *v > 0).unwrap_or(0);
    // Show at least a few buckets either side; as many as fit, widening the bars.
    let slots = (inner.width / 5).max(1) as usize;
    let span = (last - first + 1).max(slots.min(12));
    let start = first.saturating_sub((span - (last - first + 1)) / 2).min(hist.len().saturating_sub(span));
    let end = (start + span).min(hist.len());
    let bar_width = ((inner.width as usize / (end - start)).saturating_sub(1)).clamp(3, 8) as u16;
    let bars: Vec<Bar> = (start..end)
        // Heights on a log scale, so a bucket of 10 stays visible beside one of 100 000;
        // the text is the count.
        .map(|k| {
            let height = ((hist[k] as f64).ln_1p() * 100.0) as u64;
            Bar::default().value(height).text_value(count(hist[k] as f64)).label(Line::from(cycles_label(1u64 << k)))
        })
        .collect();
    frame.render_widget(
        BarChart::default()
            .data(BarGroup::default().bars(&bars))
            .bar_width(bar_width)
            .bar_gap(1)
            .bar_style(Style::new().fg(Color::Green))
            .value_style(Style::new().fg(Color::Black).bg(Color::Green)),
        inner,
    );
}

fn figure(name: &str, v: u64) -> Vec<Span<'static>> {
    let style = if v > 0 { Style::new().fg(Color::Red).add_modifier(Modifier::BOLD) } else { Style::new() };
    vec![Span::raw(format!("{name} ")), Span::styled(v.to_string(), style), Span::raw("  ")]
}

/// The card's MSIs and the spy's own ring writes (they share the link they observe), over the
/// last interval: two short lines, so that a panel of any width shows both whole.
fn own_traffic_lines(state: &State) -> [String; 2] {
    let Some(s) = state.last.as_ref() else { return ["MSIs ?/s".to_string(), "spy ring writes ?".to_string()] };
    let share = match state.limits.tlp_bytes_per_second {
        Some(link) if link > 0.0 => format!(", {:.1}% of link up", s.own_wire_bytes_per_second / link * 100.0),
        _ => String::new(),
    };
    [
        format!("MSIs {:.0}/s", s.msis_per_second),
        format!("spy ring writes {:.0} TLP/s, {} wire{share}", s.own_tlps_per_second, mb_s(s.own_wire_bytes_per_second)),
    ]
}

fn draw_counters(frame: &mut Frame, state: &State, area: Rect) {
    let outer = block(state, Panel::Counters, format!("{} (since clear)", Panel::Counters.title()));
    let (lost, sequence) = state.lost();
    let lost_now = state.last.as_ref().map_or(0, |s| s.lost_delta);
    let ring = match state.ring() {
        Some(RingOwner::Top) => "ring: top's own capture (the losses are its)",
        Some(RingOwner::Other) => "ring: another tool's capture (losses are its)",
        Some(RingOwner::Off) => "ring: not captured by top (--no-capture)",
        None => "ring: ?",
    };
    let rp = state.request_path();
    let g = state.generator();
    let [msi_line, ring_line] = own_traffic_lines(state);
    let mut lines = vec![
        Line::from(
            [figure("dropped records", lost), figure("last interval", lost_now), vec![Span::raw(format!("seq {sequence}"))]].concat(),
        ),
        Line::from(Span::styled(ring, Style::new().fg(Color::DarkGray))),
        Line::from(msi_line),
        Line::from(ring_line),
        Line::from(Span::styled("request path (host requests the card refused)", Style::new().add_modifier(Modifier::UNDERLINED))),
        Line::from(
            [figure("UR sent", rp.ur_sent), figure("posted dropped", rp.posted_dropped), figure("malformed", rp.malformed)].concat(),
        ),
        Line::from(
            [
                figure("poisoned", rp.poisoned),
                figure("too long", rp.reads_too_long),
                figure("bus errors", rp.bus_errors),
                figure("cfg", rp.cfg_requests),
            ]
            .concat(),
        ),
        Line::from(Span::styled("generator (current or last run)", Style::new().add_modifier(Modifier::UNDERLINED))),
        Line::from(
            [
                figure("UR", g.unsupported_request),
                figure("CA", g.completer_abort),
                figure("other", g.other_status),
                figure("poisoned", g.poisoned),
            ]
            .concat(),
        ),
        Line::from(
            [
                figure("timeouts", g.completion_timeouts),
                figure("unexpected", g.unexpected_completions),
                figure("mismatches", g.data_mismatches),
            ]
            .concat(),
        ),
    ];
    if state.received_records > 0 {
        lines.push(Line::from(Span::styled(
            format!("records top received since clear: {}", state.received_records),
            Style::new().fg(Color::DarkGray),
        )));
    }
    frame.render_widget(Paragraph::new(lines).block(outer), area);
}

fn draw_recent(frame: &mut Frame, state: &State, area: Rect) {
    let last = state.last.as_ref();
    let hidden = last.map_or(0, |s| s.own_accesses_hidden);
    let title = match last.map(|s| s.ring) {
        Some(RingOwner::Top) => format!("{} (spy records; {hidden} of top's own register accesses hidden)", Panel::Recent.title()),
        _ => Panel::Recent.title().to_string(),
    };
    let outer = block(state, Panel::Recent, title);
    let inner = outer.inner(area);
    frame.render_widget(outer, area);
    let lines: Vec<Line> = match last.map(|s| s.ring) {
        None => vec![Line::raw("waiting for the first sample")],
        Some(RingOwner::Other) => vec![
            Line::styled(
                "another tool is capturing with the spy (its ring is in use): top shows counters only",
                Style::new().fg(Color::Yellow),
            ),
            Line::raw("and never takes the ring; the recent transactions are in that tool's trace."),
        ],
        Some(RingOwner::Off) => vec![Line::raw("capture is off (--no-capture): counters only")],
        Some(RingOwner::Top) => {
            let recent = &last.map(|s| s.recent.as_slice()).unwrap_or_default();
            let room = inner.height.saturating_sub(1) as usize;
            let mut out = vec![Line::styled(tlpx_trace::log_title(), Style::new().add_modifier(Modifier::UNDERLINED))];
            if recent.is_empty() {
                out.push(Line::styled("no transactions in the last interval", Style::new().fg(Color::DarkGray)));
            }
            let skip = recent.len().saturating_sub(room);
            out.extend(recent[skip..].iter().map(|l| {
                let style = if l.contains(" up ") { Style::new().fg(UP_COLOR) } else { Style::new().fg(DOWN_COLOR) };
                Line::styled(l.clone(), style)
            }));
            out
        }
    };
    frame.render_widget(Paragraph::new(lines), inner);
}

/// The buffer as plain text, one line per row, trailing blanks trimmed.
pub fn buffer_text(buffer: &Buffer) -> String {
    let area = buffer.area;
    let mut out = String::new();
    for y in area.top()..area.bottom() {
        let mut line = String::new();
        for x in area.left()..area.right() {
            line.push_str(buffer[(x, y)].symbol());
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use ratatui::backend::TestBackend;
    use ratatui::Terminal;

    use super::super::collect::{sample_between, ClassCount, Reading, RingOwner};
    use super::super::state::{Action, Limits};
    use super::*;

    fn synthetic_state() -> State {
        let mut state = State::new(
            "simulated card (64-bit at 125 MHz)".into(),
            Limits { link: Some("Gen2 x1".into()), down: Some(380e6), up: Some(400e6), tlp_bytes_per_second: Some(500e6) },
            1e-3,
        );
        state.clock_hz = 125_000_000;
        let mut before = Reading::zero();
        for i in 1..=5u64 {
            let mut now = before.clone();
            now.cycles = i * 125_000;
            now.up[1].tlps += 1000;
            now.up[1].payload_bytes += 256_000;
            now.up[1].bytes += 272_000;
            now.down[0] = ClassCount { tlps: now.down[0].tlps + 10, bytes: now.down[0].bytes + 120, payload_bytes: 0, wait_cycles: 0 };
            now.down[3].tlps += 10;
            now.latency_histogram[9] += 40;
            now.latency_histogram[10] += 2;
            now.lost += 3;
            now.request_path.ur_sent = 1;
            let mut s = sample_between(i, &before, &now, 125_000_000, 0.0);
            s.ring = RingOwner::Top;
            s.recent = vec!["   12.504 us  up   MWr32  0x40001000 len  64 tag 0x00  dur  2  lat   -       +0.128 us".into()];
            s.own_accesses_hidden = 7;
            state.apply(s);
            before = now;
        }
        state
    }

    fn render(state: &State, w: u16, h: u16) -> String {
        let mut terminal = Terminal::new(TestBackend::new(w, h)).expect("test backend");
        terminal.draw(|f| draw(f, state)).expect("draw");
        buffer_text(terminal.backend().buffer())
    }

    #[test]
    fn every_panel_draws_its_figures() {
        let state = synthetic_state();
        let text = render(&state, 120, 40);
        for title in ["Bandwidth", "TLP mix", "Read latency", "Drops and errors", "Recent transactions"] {
            assert!(text.contains(title), "{title} missing:\n{text}");
        }
        // 256 kB per ms of card time = 256 MB/s up, limit from the model.
        assert!(text.contains("256 MB/s"), "{text}");
        assert!(text.contains("limit 400 MB/s"), "{text}");
        let mwr = text.lines().find(|l| l.contains("MWr")).expect("MWr row");
        assert!(mwr.contains("1.0M") && mwr.contains("5.0k"), "{mwr}");
        assert!(text.contains("dropped records 15"), "{text}");
        assert!(text.contains("UR sent 1"), "{text}");
        assert!(text.contains("MWr32  0x40001000"), "{text}");
        assert!(text.contains("7 of top's own register accesses hidden"), "{text}");
        assert!(text.contains("512"), "latency bucket label: {text}");
    }

    #[test]
    fn zoom_pause_and_small_terminals() {
        let mut state = synthetic_state();
        state.act(Action::NextPanel);
        state.act(Action::Zoom);
        state.act(Action::Pause);
        let text = render(&state, 120, 40);
        assert!(text.contains("TLP mix") && !text.contains("Read latency ("), "{text}");
        assert!(text.contains("PAUSED"));
        // Tiny terminals must not panic.
        state.act(Action::Zoom);
        for (w, h) in [(20, 5), (40, 10), (80, 24), (1, 1)] {
            render(&state, w, h);
        }
        let empty = State::new("x".into(), Limits::default(), 0.1);
        assert!(render(&empty, 120, 40).contains("waiting for the first sample"));
    }

    #[test]
    fn another_capture_is_named_not_taken() {
        let mut state = synthetic_state();
        let mut s = state.last.clone().expect("sample");
        s.ring = RingOwner::Other;
        state.apply(s);
        let text = render(&state, 120, 40);
        assert!(text.contains("another tool is capturing"), "{text}");
    }

    #[test]
    fn a_live_frame_states_the_span_of_card_time_it_covers() {
        let mut state = synthetic_state();
        state.time_mode = TimeMode::Live;
        state.interval_s = 1.0;
        let mut s = state.last.clone().expect("sample");
        s.wall_interval_s = 1.0;
        state.apply(s);
        let text = render(&state, 160, 40);
        let status = text.lines().next().expect("status line");
        assert!(status.contains("card time 0.004000..0.005000 s (1.000 ms in 1.000 s wall, live) | frame 6"), "{status}");
    }

    #[test]
    fn labels() {
        assert_eq!(mb_s(256e6), "256 MB/s");
        assert_eq!(mb_s(1.5e6), "1.5 MB/s");
        assert_eq!(count(1500.0), "1.5k");
        assert_eq!(cycles_label(2048), "2K");
        assert_eq!(nice_ceiling(280.0), 500.0);
        assert_eq!(nice_ceiling(0.0011), 0.002);
    }
}
