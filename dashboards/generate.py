#!/usr/bin/env python3
"""Generates the Grafana dashboards of tlpx (dashboards/*.json) with Grafana's own SDK.

    .venv/bin/python dashboards/generate.py          # rewrite dashboards/*.json
    .venv/bin/python dashboards/generate.py --check  # exit 1 naming every file that is stale

The dashboards are built with grafana-foundation-sdk (pinned in gateware/requirements.txt, the
flavour generated from Grafana's main branch: docs/dashboards.md says why), whose builders are
generated from Grafana's own dashboard schema, so a field Grafana does not know cannot be
written. Every query uses only the metrics of `tlpx serve` listed in docs/dashboards.md. The
output is reproducible byte for byte (sorted keys, fixed ids, no timestamps).

Tests: dashboards/tests (Grafana's dashboard-linter rules, every expression through a PromQL
parser and promtool, key panels against synthetic series with `promtool test rules`) and
host/crates/tlpx/tests/dashboards_prom.rs (`--check`, then every panel's query against a real
Prometheus scraping a real exporter on the simulated card).

Grafana variables used in queries: `$datasource` (the Prometheus datasource), `$job` and
`$instance` (Prometheus's target labels), `$card` (the exporter's `card` label),
`$__rate_interval` and `$__range`; the tests substitute them.
"""

import sys
from pathlib import Path

try:
    from grafana_foundation_sdk.builders import common as cb
    from grafana_foundation_sdk.builders import dashboard as db
    from grafana_foundation_sdk.builders import heatmap as hm
    from grafana_foundation_sdk.builders import prometheus, stat as st, table as tb, timeseries as ts
    from grafana_foundation_sdk.cog.encoder import JSONEncoder
    from grafana_foundation_sdk.models import common as cm
    from grafana_foundation_sdk.models import dashboard as dm
    from grafana_foundation_sdk.models import heatmap as hmm
    from grafana_foundation_sdk.models import prometheus as pm
except ImportError as e:  # a clear message, not a traceback: the usual cause is python3 outside the venv
    sys.exit(f"dashboards/generate.py needs grafana-foundation-sdk ({e}): run it with the project's "
             f"venv, `.venv/bin/python dashboards/generate.py` (`make setup` installs the pinned "
             f"version from gateware/requirements.txt)")

HERE = Path(__file__).resolve().parent

# The provisioned datasource (dashboards/provisioning/datasources/tlpx.yaml): the default of the
# `datasource` variable, which every panel and target uses (dashboard-linter's
# template-datasource and panel-datasource rules).
DATASOURCE_UID = "tlpx-prometheus"
DATASOURCE_NAME = "tlpx Prometheus"
DATASOURCE = dm.DataSourceRef(type_val="prometheus", uid="${datasource}")
RATE = "$__rate_interval"
# The range the dashboard shows: counters shown as one number are their increase over it
# (dashboard-linter's target-counter-agg rule: a counter is read through rate/irate/increase).
RANGE = "$__range"
# Every selector narrows to the chosen job, instance (Prometheus's target labels: the linter's
# target-job and target-instance rules) and card (the exporter's label).
SEL = 'job=~"$job",instance=~"$instance",card=~"$card"'

# Panel builders ---------------------------------------------------------------------------------


def query(expr, legend="", ref="A"):
    return prometheus.Dataquery().expr(expr).legend_format(legend).ref_id(ref).datasource(DATASOURCE)


def targets(panel, exprs):
    """(expr, legend) pairs -> targets with refIds A, B, C..."""
    for i, (e, legend) in enumerate(exprs):
        panel.with_target(query(e, legend, chr(ord("A") + i)))
    return panel


def common(panel, title, description, unit, w, h):
    if not description:
        raise ValueError(f"panel {title!r}: a description is required (dashboard-linter's panel-title-description rule)")
    return panel.title(title).description(description).datasource(DATASOURCE).unit(unit).span(w).height(h)


DASHED = [dm.DynamicConfigValue(id_val="custom.lineStyle", value={"dash": [10, 10], "fill": "dash"}),
          dm.DynamicConfigValue(id_val="custom.fillOpacity", value=0)]


def timeseries(title, exprs, unit, description, stack=False, w=12, h=8, dashed_regexp=None, dashed_name=None):
    p = (common(ts.Panel(), title, description, unit, w, h)
         .draw_style(cm.GraphDrawStyle.LINE).fill_opacity(10).line_width(1).show_points(cm.VisibilityMode.NEVER)
         .legend(cb.VizLegendOptions().show_legend(True).display_mode(cm.LegendDisplayMode.TABLE)
                 .placement(cm.LegendPlacement.BOTTOM).calcs(["mean", "max"]))
         .tooltip(cb.VizTooltipOptions().mode(cm.TooltipDisplayMode.MULTI).sort(cm.SortOrder.DESCENDING)))
    if stack:
        p.stacking(cb.StackingConfig().group("A").mode(cm.StackingMode.NORMAL))
    if dashed_regexp:
        p.override_by_regexp(dashed_regexp, DASHED)
    if dashed_name:
        p.override_by_name(dashed_name, DASHED)
    return targets(p, exprs)


def stat(title, expr, unit, description, legend="", w=4, h=4):
    p = (common(st.Panel(), title, description, unit, w, h)
         .color_mode(cm.BigValueColorMode.VALUE).graph_mode(cm.BigValueGraphMode.AREA)
         .reduce_options(cb.ReduceDataOptions().calcs(["lastNotNull"]).fields("").values(False)))
    return targets(p, [(expr, legend)])


def heatmap(title, expr, description, w=12, h=9):
    p = (common(hm.Panel(), title, description, "s", w, h)
         .calculate(False).cell_gap(1)
         .color(hm.HeatmapColorOptions().mode(hmm.HeatmapColorMode.SCHEME).scheme("Oranges"))
         .y_axis(hm.YAxisConfig().unit("s"))
         .mode(cm.TooltipDisplayMode.SINGLE).show_y_histogram())
    return p.with_target(query(expr, "{{le}}").format(pm.PromQueryFormat.HEATMAP))


def table(title, expr, description, w=24, h=5):
    # The info table shows labels; its one value column is the constant 1 ("none": a plain number).
    p = common(tb.Panel(), title, description, "none", w, h).show_header(True)
    return p.with_target(query(expr).format(pm.PromQueryFormat.TABLE).instant())


def rate(metric, by=None, extra=""):
    r = f"rate({metric}{{{SEL}{extra}}}[{RATE}])"
    return f"sum by ({by}) ({r})" if by else f"sum({r})"


def increase(metric):
    """A counter's increase over the dashboard's time range (for a stat panel)."""
    return f"sum(increase({metric}{{{SEL}}}[{RANGE}]))"


def quantiles(metric, by, qs=(0.5, 0.99, 0.999)):
    legend_by = "".join(f"{{{{{b}}}}} " for b in by.split(", ")) if by else ""
    group = f"le, {by}" if by else "le"
    return [(f"histogram_quantile({q}, sum by ({group}) (rate({metric}_bucket{{{SEL}}}[{RATE}])))",
             f"{legend_by}p{q * 100:g}") for q in qs]


# The link's raw data rate per lane in bytes/s by PCIe generation: transfer rate x line encoding
# (8b/10b for gen 1-2, 128b/130b from gen 3) / 8. The tests compute the same from the spec's
# figures independently.
RAW_BYTES_PER_LANE = {"1": 2.5e9 * 8 / 10 / 8, "2": 5e9 * 8 / 10 / 8, "3": 8e9 * 128 / 130 / 8,
                      "4": 16e9 * 128 / 130 / 8, "5": 32e9 * 128 / 130 / 8}
LINK_WIDTHS = ("1", "2", "4", "8", "16")


def link_raw_rate():
    """The link's raw data rate per direction (transfer rate x encoding x lanes / 8), from the
    exporter's gen and lanes labels: an upper bound above the model limit
    (`tlpx_link_model_limit_bytes_per_second`: framing, DLLPs, SKPs)."""
    gens = " or ".join(f'(0 * tlpx_card_up{{{SEL},gen="{g}"}} + {v:.6g})' for g, v in RAW_BYTES_PER_LANE.items())
    lanes = " or ".join(f'(0 * tlpx_card_up{{{SEL},lanes="{n}"}} + {n})' for n in LINK_WIDTHS)
    return f"({gens}) * ({lanes})"


def variables():
    """The datasource, then job, instance and card, each narrowed by the ones before it
    (dashboard-linter's template-datasource, template-job and template-instance rules: multi
    select, allValue `.+`, reloaded when the time range changes)."""
    ds = (db.DatasourceVariable("datasource").label("Data source").type("prometheus")
          .current(dm.VariableOption(selected=True, text=DATASOURCE_NAME, value=DATASOURCE_UID)))

    def label_values(name, label, selector, all_value=".+"):
        q = f"label_values({selector}, {name})"
        v = (db.QueryVariable(name).label(label).datasource(DATASOURCE).query({"query": q, "refId": name})
             .refresh(dm.VariableRefresh.ON_TIME_RANGE_CHANGED).include_all(True).multi(True)
             .sort(dm.VariableSort.ALPHABETICAL_ASC))
        if all_value:  # shown as All until the user picks: every job and instance that has a card
            v.all_value(all_value).current(dm.VariableOption(selected=True, text="All", value="$__all"))
        return v

    return [ds,
            label_values("job", "Job", "tlpx_card_info"),
            label_values("instance", "Instance", 'tlpx_card_info{job=~"$job"}'),
            # card: Grafana's own All (every value listed), as before job and instance existed.
            label_values("card", "card", 'tlpx_card_info{job=~"$job",instance=~"$instance"}', all_value=None)]


def dashboard(uid, title, description, panels, tags=()):
    d = (db.Dashboard(title).uid(uid)
         .description(f"{description} Generated by dashboards/generate.py: edit that, not this file.")
         .tags(["tlpx", *tags]).version(1)
         # Generated: edits belong in generate.py (dashboard-linter's uneditable-dashboard rule).
         .readonly()
         .tooltip(dm.DashboardCursorSync.CROSSHAIR).refresh("5s").time("now-15m", "now").timezone("browser")
         .link(db.DashboardLink("tlpx").type(dm.DashboardLinkType.DASHBOARDS).tags(["tlpx"]).as_dropdown(True))
         .variables(variables()))
    # The SDK places panels left to right in rows of 24 columns; ids are numbered from 1.
    for i, p in enumerate(panels, start=1):
        d.with_panel(p.id(i))
    built = d.build()
    for p in built.panels:
        if p.grid_pos.x + p.grid_pos.w > 24:
            raise ValueError(f"{uid}: panel {p.title!r} does not fit the 24 columns: {p.grid_pos.to_json()}")
    return built


# Dashboards -------------------------------------------------------------------------------------

BYTES_S = "Bps"

OVERVIEW = dashboard("tlpx-overview", "tlpx: overview", "The card at a glance: identity, link, traffic, errors, interrupts, accelerator, simulator.", [
    stat("Card up", f"min(tlpx_card_up{{{SEL}}})", "none", "1 when the exporter's last reading of the card succeeded."),
    stat("Clock", f"max(tlpx_card_clock_hertz{{{SEL}}})", "hertz", "The card's clock."),
    stat("Max payload (MPS)", f"max(tlpx_link_max_payload_bytes{{{SEL}}})", "bytes", "The link's Max Payload Size: the largest payload of one TLP."),
    stat("Max read request (MRRS)", f"max(tlpx_link_max_read_request_bytes{{{SEL}}})", "bytes", "The link's Max Read Request Size: the most one read request may ask for."),
    stat("Last reading age", f"time() - max(tlpx_exporter_last_read_timestamp_seconds{{{SEL}}})", "s", "Seconds since the exporter's last good reading of the card."),
    stat("Reading errors", increase("tlpx_exporter_card_read_errors_total"), "none", "Failed readings of the card or simulator in the dashboard's time range."),
    table("Cards", f"tlpx_card_info{{{SEL}}}", "Identity of every card exported: address, backend, gateware version, register map hash, datapath width, features, link."),
    timeseries("Link traffic per direction (simulator, wire bytes)", [(rate("tlpx_sim_wire_bytes_total", "direction"), "{{direction}}")], BYTES_S, "Bytes on the simulated wire (framing, header, payload), down = host to card."),
    timeseries("Spy: TLPs per second per direction", [(rate("tlpx_spy_tlps_total", "direction"), "{{direction}}")], "ops", "TLPs the spy saw, every type."),
    timeseries("Generator bytes per second", [(rate("tlpx_generator_bytes_total", "operation"), "{{operation}}")], BYTES_S, "Bytes the traffic generator moved, by operation."),
    timeseries("Errors per second", [(rate("tlpx_generator_errors_total", "kind"), "generator {{kind}}"),
                                     (rate("tlpx_sim_completion_timeouts_total"), "sim completion timeouts"),
                                     (rate("tlpx_exporter_card_read_errors_total"), "exporter reading errors")], "ops",
               "Generator errors by kind, the simulator's completion timeouts and the exporter's failed readings."),
    timeseries("Interrupts and MSIs per second", [(rate("tlpx_irq_fires_total"), "timer fires"), (rate("tlpx_sim_msis_total"), "MSIs (sim)")], "ops",
               "Interrupts the card's timer fired, and the MSIs the simulator delivered."),
    timeseries("Rule-30 operations per second", [(rate("tlpx_rule30_operations_total"), "operations")], "ops", "Operations the rule-30 core completed, every mode."),
    timeseries("Activity", [(f"max(tlpx_generator_running{{{SEL}}})", "generator running"), (f"max(tlpx_irq_running{{{SEL}}})", "irq timer running"),
                            (f"max(tlpx_spy_capturing{{{SEL}}})", "spy capturing"), (f"max(tlpx_rule30_busy{{{SEL}}})", "rule-30 busy")], "none", "1 while the block works, as read every interval."),
    timeseries("Simulator speed", [(f"max(tlpx_sim_speed_cycles_per_second{{{SEL}}})", "cycles/s"), (f"max(tlpx_sim_clients{{{SEL}}})", "clients")], "none", "Card cycles the simulator runs per wall second, and clients connected."),
], tags=["overview"])

BANDWIDTH = dashboard("tlpx-link-bandwidth", "tlpx: link bandwidth", "Bandwidth per direction on the link, as the simulator and the spy count it, against the link's raw rate.", [
    timeseries("Payload per direction against the model limit", [
        (rate("tlpx_sim_payload_bytes_total", "direction"), "{{direction}} payload (simulator)"),
        (rate("tlpx_spy_payload_bytes_total", "direction"), "{{direction}} payload (spy)"),
        (f'max by (operation) (tlpx_link_model_limit_bytes_per_second{{{SEL}}})', "model limit, DMA {{operation}} of 4 KiB"),
    ], BYTES_S, "Payload bytes per direction against the pcie-bench model's limit for this link (`tlpx model`: framing, DLLPs, SKPs; "
       "4 KiB transfers; a DMA write is the card's upstream, a read's completions come downstream).", w=24, h=9,
       dashed_regexp="model limit.*"),
    timeseries("Wire bytes per direction, with the link's raw rate", [
        (rate("tlpx_sim_wire_bytes_total", "direction"), "{{direction}} wire"),
        (link_raw_rate(), "link raw rate (per direction)"),
    ], BYTES_S, "Bytes on the simulated wire per direction, and the raw data rate of the link (gen x lanes after line encoding) as a reference line. "
       "The model limit (previous panel) is lower.", w=24, h=9, dashed_name="link raw rate (per direction)"),
    timeseries("Payload bytes per direction (simulator)", [(rate("tlpx_sim_payload_bytes_total", "direction"), "{{direction}}")], BYTES_S, "The simulator's count of payload bytes on the link."),
    timeseries("Payload bytes per direction (spy)", [(rate("tlpx_spy_payload_bytes_total", "direction"), "{{direction}}")], BYTES_S, "The spy's count: works on hardware too."),
    timeseries("Datapath bytes per direction and type (spy)", [(rate("tlpx_spy_bytes_total", "direction, type"), "{{direction}} {{type}}")], BYTES_S, "Header + payload bytes.", stack=True),
    timeseries("Payload efficiency (simulator)", [(f"sum by (direction) (rate(tlpx_sim_payload_bytes_total{{{SEL}}}[{RATE}])) / sum by (direction) (rate(tlpx_sim_wire_bytes_total{{{SEL}}}[{RATE}]))", "{{direction}}")],
               "percentunit", "Payload bytes over wire bytes."),
    timeseries("DMA bytes per operation (simulator, exact)", [(rate("tlpx_sim_dma_bytes_total", "operation"), "{{operation}}")], BYTES_S, "Bytes the card read from / wrote to host memory."),
    timeseries("Generator bytes per operation", [(rate("tlpx_generator_bytes_total", "operation"), "{{operation}}")], BYTES_S, "Runs that start and end between two readings are missed: the simulator's DMA bytes are exact."),
    stat("Max payload (MPS)", f"max(tlpx_link_max_payload_bytes{{{SEL}}})", "bytes", "The link's Max Payload Size: the largest payload of one TLP.", w=6),
    stat("Max read request (MRRS)", f"max(tlpx_link_max_read_request_bytes{{{SEL}}})", "bytes", "The link's Max Read Request Size: the most one read request may ask for.", w=6),
    stat("Link raw rate per direction", f"max({link_raw_rate()})", BYTES_S, "From the gen and lanes labels.", w=6),
    stat("Outstanding reads", f"max(tlpx_generator_outstanding_reads{{{SEL}}})", "none", "DMA reads of the generator in flight, as last read.", w=6),
], tags=["bandwidth"])

IRQ = dashboard("tlpx-irq-latency", "tlpx: interrupt latency", "The interrupt timer: fire to acknowledgement by the ISR and by user space, as heatmaps and percentiles.", [
    heatmap("ISR latency (heatmap)", f'sum by (le) (rate(tlpx_irq_latency_seconds_bucket{{{SEL},stage="isr"}}[{RATE}]))', "Fire to the ISR's acknowledgement; log2 buckets."),
    heatmap("User-space latency (heatmap)", f'sum by (le) (rate(tlpx_irq_latency_seconds_bucket{{{SEL},stage="user"}}[{RATE}]))', "Fire to user space's acknowledgement; log2 buckets."),
    timeseries("Latency percentiles per stage", quantiles("tlpx_irq_latency_seconds", "stage"), "s", "From the log2 buckets: a percentile is known to within a factor of 2.", w=24),
    timeseries("Mean latency per stage", [(f"sum by (stage) (rate(tlpx_irq_latency_seconds_sum{{{SEL}}}[{RATE}])) / sum by (stage) (rate(tlpx_irq_latency_seconds_count{{{SEL}}}[{RATE}]))", "{{stage}}")], "s",
               "Sum of latencies over their count, per stage: exact, unlike the percentiles."),
    timeseries("Fires, overruns, stray acks, drops per second", [(rate("tlpx_irq_fires_total"), "fires"), (rate("tlpx_irq_overruns_total"), "overruns"),
                                                                 (rate("tlpx_irq_stray_acks_total", "stage"), "stray acks {{stage}}"), (rate("tlpx_irq_records_dropped_total"), "records dropped")], "ops",
               "Fires; fires while the previous one was pending; acknowledgements with nothing pending; timer records lost."),
    timeseries("Card interrupts per CPU (kernel dispatch)", [(rate("tlpx_irq_host_interrupts_total", "cpu"), "CPU {{cpu}}")], "ops",
               "The card's interrupts the host kernel dispatched on each CPU, from /proc/interrupts: with tlpx irq --cpus each CPU's steered vector shows here. 0 on every CPU on the simulator (no kernel interrupt: its interrupts come over a socket).", w=24),
    stat("Fires", increase("tlpx_irq_fires_total"), "none", "Interrupts the timer fired in the dashboard's time range.", w=6),
    stat("Overruns", increase("tlpx_irq_overruns_total"), "none", "Fires while the previous one was still pending, in the dashboard's time range.", w=6),
    stat("Records dropped", increase("tlpx_irq_records_dropped_total"), "none", "Timer records lost in the dashboard's time range.", w=6),
    stat("Timer running", f"max(tlpx_irq_running{{{SEL}}})", "none", "1 while the interrupt timer runs.", w=6),
], tags=["irq"])

SPY = dashboard("tlpx-spy-live", "tlpx: spy live", "What the passive spy sees: TLP mix by type and direction, backpressure waits, DMA read latency, errors, capture drops.", [
    timeseries("TLP mix, down (host to card)", [(rate("tlpx_spy_tlps_total", "type", ',direction="down"'), "{{type}}")], "ops", "Includes the exporter's own register reads.", stack=True),
    timeseries("TLP mix, up (card to host)", [(rate("tlpx_spy_tlps_total", "type", ',direction="up"'), "{{type}}")], "ops", "TLPs the card sent, by type.", stack=True),
    timeseries("Payload bytes by type and direction", [(rate("tlpx_spy_payload_bytes_total", "direction, type"), "{{direction}} {{type}}")], BYTES_S, "Payload bytes the spy saw, by direction and TLP type.", stack=True),
    timeseries("Backpressure wait per TLP", [(f"sum by (direction) (rate(tlpx_spy_wait_seconds_total{{{SEL}}}[{RATE}])) / sum by (direction) (rate(tlpx_spy_tlps_total{{{SEL}}}[{RATE}]))", "{{direction}}")],
               "s", "Mean time a TLP waited on backpressure (card time)."),
    timeseries("DMA read latency percentiles", quantiles("tlpx_generator_read_latency_seconds", ""), "s", "The generator's read latency; log2 buckets."),
    heatmap("DMA read latency (heatmap)", f"sum by (le) (rate(tlpx_generator_read_latency_seconds_bucket{{{SEL}}}[{RATE}]))", "The generator's read latency per log2 bucket."),
    timeseries("Errors per second", [(rate("tlpx_generator_errors_total", "kind"), "{{kind}}"), (rate("tlpx_sim_completion_timeouts_total"), "completion timeouts (sim)")], "ops",
               "Generator errors by kind, and the simulator's completion timeouts."),
    timeseries("Capture records and drops per second", [(rate("tlpx_spy_records_total"), "records"), (rate("tlpx_spy_records_dropped_total"), "dropped")], "ops",
               "Records lost when the ring is full or the host polls too slowly."),
    stat("Capturing", f"max(tlpx_spy_capturing{{{SEL}}})", "none", "1 while a capture is on.", w=8),
    stat("Records dropped", increase("tlpx_spy_records_dropped_total"), "none", "Capture records lost in the dashboard's time range.", w=8),
    stat("Simulator TLPs per second", f'sum(rate(tlpx_sim_tlps_total{{{SEL}}}[{RATE}]))', "ops", "The simulator's own count of TLPs on the link (its type names).", w=8),
], tags=["spy"])

RULE30 = dashboard("tlpx-rule30", "tlpx: rule-30 accelerator", "The rule-30 core: operations, busy time, refused and ignored starts.", [
    timeseries("Operations per second", [(rate("tlpx_rule30_operations_total"), "operations")], "ops", "All modes: the mode is a host notion."),
    timeseries("Busy ratio", [(f"(sum(rate(tlpx_rule30_busy_seconds_total{{{SEL}}}[{RATE}])) / (sum(rate(tlpx_sim_card_cycles_total{{{SEL}}}[{RATE}])) / max(tlpx_card_clock_hertz{{{SEL}}})))"
                                f" or sum(rate(tlpx_rule30_busy_seconds_total{{{SEL}}}[{RATE}]))", "busy")],
               "percentunit", "Core busy time over card time. On the simulator card time is its cycles over the clock; on hardware card time is wall time."),
    timeseries("Mean time per operation", [(f"sum(rate(tlpx_rule30_busy_seconds_total{{{SEL}}}[{RATE}])) / sum(rate(tlpx_rule30_operations_total{{{SEL}}}[{RATE}]))", "busy time / operation")], "s",
               "Core busy time over operations completed (card time)."),
    timeseries("Refused and ignored starts per second", [(rate("tlpx_rule30_refused_starts_total"), "refused (bad parameters)"), (rate("tlpx_rule30_ignored_starts_total"), "ignored (busy)")], "ops",
               "Starts the core refused for bad parameters, and starts it ignored while busy."),
    stat("Operations", increase("tlpx_rule30_operations_total"), "none", "Operations completed in the dashboard's time range.", w=6),
    stat("Busy time", increase("tlpx_rule30_busy_seconds_total"), "s", "Card time the core computed in the dashboard's time range.", w=6),
    stat("Busy now", f"max(tlpx_rule30_busy{{{SEL}}})", "none", "1 while the core computes.", w=6),
    stat("Refused starts", increase("tlpx_rule30_refused_starts_total"), "none", "Starts refused for bad parameters in the dashboard's time range.", w=6),
], tags=["rule30"])

DASHBOARDS = {"overview.json": OVERVIEW, "link-bandwidth.json": BANDWIDTH, "irq-latency.json": IRQ,
              "spy-live.json": SPY, "rule30.json": RULE30}


def render(d):
    """The SDK's JSON encoder; sorted keys and a fixed indent make the file reproducible."""
    return JSONEncoder(indent=2, sort_keys=True, ensure_ascii=False).encode(d) + "\n"


def main(argv):
    check = argv[1:] == ["--check"]
    if argv[1:] not in ([], ["--check"]):
        print(f"usage: {argv[0]} [--check], not {' '.join(argv[1:])!r}", file=sys.stderr)
        return 2
    stale = []
    for name, d in DASHBOARDS.items():
        path = HERE / name
        text = render(d)
        if check:
            if not path.exists() or path.read_text(encoding="utf-8") != text:
                stale.append(name)
        else:
            path.write_text(text, encoding="utf-8")
    if stale:
        print(f"stale dashboards: {', '.join(stale)}: run `.venv/bin/python dashboards/generate.py`", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
