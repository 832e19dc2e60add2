#!/usr/bin/env python3
"""Generates the Grafana dashboards of tlpx (dashboards/*.json) from the descriptions below.

    python3 dashboards/generate.py          # rewrite dashboards/*.json
    python3 dashboards/generate.py --check  # exit 1 naming every file that is stale

Every query uses only the metrics of `tlpx serve` listed in docs/dashboards.md. The output is
reproducible byte for byte (sorted keys, fixed ids, no timestamps): the test
host/crates/tlpx/tests/dashboards_prom.rs runs `--check`, then runs every panel's query
against a real Prometheus scraping a real exporter on the simulated card.

Grafana variables used in queries: `$card` (the exporter's `card` label) and
`$__rate_interval`; the test substitutes them (the card's label, 30s).
"""

import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
DATASOURCE = {"type": "prometheus", "uid": "tlpx-prometheus"}
SCHEMA_VERSION = 39
RATE = "$__rate_interval"
CARD = 'card=~"$card"'

# Panel builders ---------------------------------------------------------------------------------


def target(expr, legend="", ref="A", fmt=None):
    t = {"datasource": DATASOURCE, "expr": expr, "legendFormat": legend, "refId": ref}
    if fmt:
        t["format"] = fmt
    return t


def targets(*exprs):
    """(expr, legend) pairs -> targets with refIds A, B, C..."""
    return [target(e, l, chr(ord("A") + i)) for i, (e, l) in enumerate(exprs)]


def timeseries(title, exprs, unit, description="", stack=False, w=12, h=8, overrides=()):
    custom = {"drawStyle": "line", "fillOpacity": 10, "lineWidth": 1, "showPoints": "never"}
    if stack:
        custom["stacking"] = {"group": "A", "mode": "normal"}
    return {
        "type": "timeseries",
        "title": title,
        "description": description,
        "targets": targets(*exprs),
        "fieldConfig": {"defaults": {"unit": unit, "custom": custom}, "overrides": list(overrides)},
        "options": {"legend": {"displayMode": "table", "placement": "bottom", "calcs": ["mean", "max"]},
                    "tooltip": {"mode": "multi", "sort": "desc"}},
        "_size": (w, h),
    }


def stat(title, expr, unit, description="", legend="", w=4, h=4):
    return {
        "type": "stat",
        "title": title,
        "description": description,
        "targets": targets((expr, legend)),
        "fieldConfig": {"defaults": {"unit": unit}, "overrides": []},
        "options": {"colorMode": "value", "graphMode": "area", "reduceOptions":
                    {"calcs": ["lastNotNull"], "fields": "", "values": False}},
        "_size": (w, h),
    }


def heatmap(title, expr, description="", w=12, h=9):
    return {
        "type": "heatmap",
        "title": title,
        "description": description,
        "targets": [target(expr, "{{le}}", "A", fmt="heatmap")],
        "fieldConfig": {"defaults": {"unit": "s"}, "overrides": []},
        "options": {"calculate": False, "cellGap": 1, "color": {"mode": "scheme", "scheme": "Oranges"},
                    "yAxis": {"unit": "s"}, "tooltip": {"show": True, "yHistogram": True}},
        "_size": (w, h),
    }


def table(title, expr, description="", w=24, h=5):
    return {
        "type": "table",
        "title": title,
        "description": description,
        "targets": [target(expr, "", "A", fmt="table") | {"instant": True}],
        "fieldConfig": {"defaults": {}, "overrides": []},
        "options": {"showHeader": True},
        "_size": (w, h),
    }


def rate(metric, by=None, extra=""):
    sel = f"{{{CARD}{extra}}}"
    r = f"rate({metric}{sel}[{RATE}])"
    return f"sum by ({by}) ({r})" if by else f"sum({r})"


def quantiles(metric, by, qs=(0.5, 0.99, 0.999)):
    legend_by = "".join(f"{{{{{b}}}}} " for b in by.split(", ")) if by else ""
    group = f"le, {by}" if by else "le"
    return [(f"histogram_quantile({q}, sum by ({group}) (rate({metric}_bucket{{{CARD}}}[{RATE}])))",
             f"{legend_by}p{q * 100:g}") for q in qs]


def link_raw_rate():
    """The link's raw data rate per direction (transfer rate x encoding x lanes / 8), from the
    exporter's gen and lanes labels: an upper bound above the model limit
    (`tlpx_link_model_limit_bytes_per_second`: framing, DLLPs, SKPs)."""
    per_lane = {"1": 2.5e9 * 8 / 10 / 8, "2": 5e9 * 8 / 10 / 8, "3": 8e9 * 128 / 130 / 8,
                "4": 16e9 * 128 / 130 / 8, "5": 32e9 * 128 / 130 / 8}
    gens = " or ".join(f'(0 * tlpx_card_up{{{CARD},gen="{g}"}} + {v:.6g})' for g, v in per_lane.items())
    lanes = " or ".join(f'(0 * tlpx_card_up{{{CARD},lanes="{n}"}} + {n})' for n in ("1", "2", "4", "8", "16"))
    return f"({gens}) * ({lanes})"


def layout(panels):
    """Places panels left to right in rows of 24 columns, and numbers them from 1."""
    x = y = row_h = 0
    out = []
    for i, p in enumerate(panels, start=1):
        w, h = p.pop("_size")
        if x + w > 24:
            x, y, row_h = 0, y + row_h, 0
        p = {"id": i, "gridPos": {"x": x, "y": y, "w": w, "h": h}, "datasource": DATASOURCE} | p
        out.append(p)
        x, row_h = x + w, max(row_h, h)
    return out


def dashboard(uid, title, description, panels, tags=()):
    return {
        "uid": uid,
        "title": title,
        "description": f"{description} Generated by dashboards/generate.py: edit that, not this file.",
        "tags": ["tlpx", *tags],
        "schemaVersion": SCHEMA_VERSION,
        "version": 1,
        "editable": True,
        "graphTooltip": 1,
        "refresh": "5s",
        "time": {"from": "now-15m", "to": "now"},
        "timezone": "browser",
        "annotations": {"list": []},
        "links": [{"type": "dashboards", "tags": ["tlpx"], "asDropdown": True, "title": "tlpx"}],
        "templating": {"list": [{
            "name": "card",
            "label": "card",
            "type": "query",
            "datasource": DATASOURCE,
            "query": {"query": "label_values(tlpx_card_info, card)", "refId": "card"},
            "definition": "label_values(tlpx_card_info, card)",
            "refresh": 2,
            "includeAll": True,
            "multi": True,
            "current": {},
            "sort": 1,
        }]},
        "panels": layout(panels),
    }


# Dashboards -------------------------------------------------------------------------------------

BYTES_S = "Bps"

OVERVIEW = dashboard("tlpx-overview", "tlpx: overview", "The card at a glance: identity, link, traffic, errors, interrupts, accelerator, simulator.", [
    stat("Card up", f"min(tlpx_card_up{{{CARD}}})", "none", "1 when the exporter's last reading of the card succeeded."),
    stat("Clock", f"max(tlpx_card_clock_hertz{{{CARD}}})", "hertz", "The card's clock."),
    stat("Max payload (MPS)", f"max(tlpx_link_max_payload_bytes{{{CARD}}})", "bytes"),
    stat("Max read request (MRRS)", f"max(tlpx_link_max_read_request_bytes{{{CARD}}})", "bytes"),
    stat("Last reading age", f"time() - max(tlpx_exporter_last_read_timestamp_seconds{{{CARD}}})", "s", "Seconds since the exporter's last good reading of the card."),
    stat("Reading errors", f"sum(tlpx_exporter_card_read_errors_total{{{CARD}}})", "none", "Failed readings of the card or simulator since the exporter started."),
    table("Cards", f"tlpx_card_info{{{CARD}}}", "Identity of every card exported: address, backend, gateware version, register map hash, datapath width, features, link."),
    timeseries("Link traffic per direction (simulator, wire bytes)", [(rate("tlpx_sim_wire_bytes_total", "direction"), "{{direction}}")], BYTES_S, "Bytes on the simulated wire (framing, header, payload), down = host to card."),
    timeseries("Spy: TLPs per second per direction", [(rate("tlpx_spy_tlps_total", "direction"), "{{direction}}")], "ops", "TLPs the spy saw, every type."),
    timeseries("Generator bytes per second", [(rate("tlpx_generator_bytes_total", "operation"), "{{operation}}")], BYTES_S, "Bytes the traffic generator moved, by operation."),
    timeseries("Errors per second", [(rate("tlpx_generator_errors_total", "kind"), "generator {{kind}}"),
                                     (rate("tlpx_sim_completion_timeouts_total"), "sim completion timeouts"),
                                     (rate("tlpx_exporter_card_read_errors_total"), "exporter reading errors")], "ops"),
    timeseries("Interrupts and MSIs per second", [(rate("tlpx_irq_fires_total"), "timer fires"), (rate("tlpx_sim_msis_total"), "MSIs (sim)")], "ops"),
    timeseries("Rule-30 operations per second", [(rate("tlpx_rule30_operations_total"), "operations")], "ops"),
    timeseries("Activity", [(f"max(tlpx_generator_running{{{CARD}}})", "generator running"), (f"max(tlpx_irq_running{{{CARD}}})", "irq timer running"),
                            (f"max(tlpx_spy_capturing{{{CARD}}})", "spy capturing"), (f"max(tlpx_rule30_busy{{{CARD}}})", "rule-30 busy")], "none", "1 while the block works, as read every interval."),
    timeseries("Simulator speed", [(f"max(tlpx_sim_speed_cycles_per_second{{{CARD}}})", "cycles/s"), (f"max(tlpx_sim_clients{{{CARD}}})", "clients")], "none", "Card cycles the simulator runs per wall second, and clients connected."),
], tags=["overview"])

BANDWIDTH = dashboard("tlpx-link-bandwidth", "tlpx: link bandwidth", "Bandwidth per direction on the link, as the simulator and the spy count it, against the link's raw rate.", [
    timeseries("Payload per direction against the model limit", [
        (rate("tlpx_sim_payload_bytes_total", "direction"), "{{direction}} payload (simulator)"),
        (rate("tlpx_spy_payload_bytes_total", "direction"), "{{direction}} payload (spy)"),
        (f'max by (operation) (tlpx_link_model_limit_bytes_per_second{{{CARD}}})', "model limit, DMA {{operation}} of 4 KiB"),
    ], BYTES_S, "Payload bytes per direction against the pcie-bench model's limit for this link (`tlpx model`: framing, DLLPs, SKPs; "
       "4 KiB transfers; a DMA write is the card's upstream, a read's completions come downstream).", w=24, h=9,
       overrides=[{"matcher": {"id": "byRegexp", "options": "model limit.*"},
                   "properties": [{"id": "custom.lineStyle", "value": {"dash": [10, 10], "fill": "dash"}}, {"id": "custom.fillOpacity", "value": 0}]}]),
    timeseries("Wire bytes per direction, with the link's raw rate", [
        (rate("tlpx_sim_wire_bytes_total", "direction"), "{{direction}} wire"),
        (link_raw_rate(), "link raw rate (per direction)"),
    ], BYTES_S, "Bytes on the simulated wire per direction, and the raw data rate of the link (gen x lanes after line encoding) as a reference line. "
       "The model limit (previous panel) is lower.", w=24, h=9,
       overrides=[{"matcher": {"id": "byName", "options": "link raw rate (per direction)"},
                   "properties": [{"id": "custom.lineStyle", "value": {"dash": [10, 10], "fill": "dash"}}, {"id": "custom.fillOpacity", "value": 0}]}]),
    timeseries("Payload bytes per direction (simulator)", [(rate("tlpx_sim_payload_bytes_total", "direction"), "{{direction}}")], BYTES_S),
    timeseries("Payload bytes per direction (spy)", [(rate("tlpx_spy_payload_bytes_total", "direction"), "{{direction}}")], BYTES_S, "The spy's count: works on hardware too."),
    timeseries("Datapath bytes per direction and type (spy)", [(rate("tlpx_spy_bytes_total", "direction, type"), "{{direction}} {{type}}")], BYTES_S, "Header + payload bytes.", stack=True),
    timeseries("Payload efficiency (simulator)", [(f"sum by (direction) (rate(tlpx_sim_payload_bytes_total{{{CARD}}}[{RATE}])) / sum by (direction) (rate(tlpx_sim_wire_bytes_total{{{CARD}}}[{RATE}]))", "{{direction}}")],
               "percentunit", "Payload bytes over wire bytes."),
    timeseries("DMA bytes per operation (simulator, exact)", [(rate("tlpx_sim_dma_bytes_total", "operation"), "{{operation}}")], BYTES_S, "Bytes the card read from / wrote to host memory."),
    timeseries("Generator bytes per operation", [(rate("tlpx_generator_bytes_total", "operation"), "{{operation}}")], BYTES_S, "Runs that start and end between two readings are missed: the simulator's DMA bytes are exact."),
    stat("Max payload (MPS)", f"max(tlpx_link_max_payload_bytes{{{CARD}}})", "bytes", w=6),
    stat("Max read request (MRRS)", f"max(tlpx_link_max_read_request_bytes{{{CARD}}})", "bytes", w=6),
    stat("Link raw rate per direction", f"max({link_raw_rate()})", BYTES_S, "From the gen and lanes labels.", w=6),
    stat("Outstanding reads", f"max(tlpx_generator_outstanding_reads{{{CARD}}})", "none", w=6),
], tags=["bandwidth"])

IRQ = dashboard("tlpx-irq-latency", "tlpx: interrupt latency", "The interrupt timer: fire to acknowledgement by the ISR and by user space, as heatmaps and percentiles.", [
    heatmap("ISR latency (heatmap)", f'sum by (le) (rate(tlpx_irq_latency_seconds_bucket{{{CARD},stage="isr"}}[{RATE}]))', "Fire to the ISR's acknowledgement; log2 buckets."),
    heatmap("User-space latency (heatmap)", f'sum by (le) (rate(tlpx_irq_latency_seconds_bucket{{{CARD},stage="user"}}[{RATE}]))', "Fire to user space's acknowledgement; log2 buckets."),
    timeseries("Latency percentiles per stage", quantiles("tlpx_irq_latency_seconds", "stage"), "s", "From the log2 buckets: a percentile is known to within a factor of 2.", w=24),
    timeseries("Mean latency per stage", [(f"sum by (stage) (rate(tlpx_irq_latency_seconds_sum{{{CARD}}}[{RATE}])) / sum by (stage) (rate(tlpx_irq_latency_seconds_count{{{CARD}}}[{RATE}]))", "{{stage}}")], "s"),
    timeseries("Fires, overruns, stray acks, drops per second", [(rate("tlpx_irq_fires_total"), "fires"), (rate("tlpx_irq_overruns_total"), "overruns"),
                                                                 (rate("tlpx_irq_stray_acks_total", "stage"), "stray acks {{stage}}"), (rate("tlpx_irq_records_dropped_total"), "records dropped")], "ops"),
    stat("Fires", f"sum(tlpx_irq_fires_total{{{CARD}}})", "none", w=6),
    stat("Overruns", f"sum(tlpx_irq_overruns_total{{{CARD}}})", "none", w=6),
    stat("Records dropped", f"sum(tlpx_irq_records_dropped_total{{{CARD}}})", "none", w=6),
    stat("Timer running", f"max(tlpx_irq_running{{{CARD}}})", "none", w=6),
], tags=["irq"])

SPY = dashboard("tlpx-spy-live", "tlpx: spy live", "What the passive spy sees: TLP mix by type and direction, backpressure waits, DMA read latency, errors, capture drops.", [
    timeseries("TLP mix, down (host to card)", [(rate("tlpx_spy_tlps_total", "type", ',direction="down"'), "{{type}}")], "ops", "Includes the exporter's own register reads.", stack=True),
    timeseries("TLP mix, up (card to host)", [(rate("tlpx_spy_tlps_total", "type", ',direction="up"'), "{{type}}")], "ops", stack=True),
    timeseries("Payload bytes by type and direction", [(rate("tlpx_spy_payload_bytes_total", "direction, type"), "{{direction}} {{type}}")], BYTES_S, stack=True),
    timeseries("Backpressure wait per TLP", [(f"sum by (direction) (rate(tlpx_spy_wait_seconds_total{{{CARD}}}[{RATE}])) / sum by (direction) (rate(tlpx_spy_tlps_total{{{CARD}}}[{RATE}]))", "{{direction}}")],
               "s", "Mean time a TLP waited on backpressure (card time)."),
    timeseries("DMA read latency percentiles", quantiles("tlpx_generator_read_latency_seconds", ""), "s", "The generator's read latency; log2 buckets."),
    heatmap("DMA read latency (heatmap)", f"sum by (le) (rate(tlpx_generator_read_latency_seconds_bucket{{{CARD}}}[{RATE}]))"),
    timeseries("Errors per second", [(rate("tlpx_generator_errors_total", "kind"), "{{kind}}"), (rate("tlpx_sim_completion_timeouts_total"), "completion timeouts (sim)")], "ops"),
    timeseries("Capture records and drops per second", [(rate("tlpx_spy_records_total"), "records"), (rate("tlpx_spy_records_dropped_total"), "dropped")], "ops",
               "Records lost when the ring is full or the host polls too slowly."),
    stat("Capturing", f"max(tlpx_spy_capturing{{{CARD}}})", "none", w=8),
    stat("Records dropped", f"sum(tlpx_spy_records_dropped_total{{{CARD}}})", "none", w=8),
    stat("Simulator TLPs per second", f'sum(rate(tlpx_sim_tlps_total{{{CARD}}}[{RATE}]))', "ops", "The simulator's own count of TLPs on the link (its type names).", w=8),
], tags=["spy"])

RULE30 = dashboard("tlpx-rule30", "tlpx: rule-30 accelerator", "The rule-30 core: operations, busy time, refused and ignored starts.", [
    timeseries("Operations per second", [(rate("tlpx_rule30_operations_total"), "operations")], "ops", "All modes: the mode is a host notion."),
    timeseries("Busy ratio", [(f"(sum(rate(tlpx_rule30_busy_seconds_total{{{CARD}}}[{RATE}])) / (sum(rate(tlpx_sim_card_cycles_total{{{CARD}}}[{RATE}])) / max(tlpx_card_clock_hertz{{{CARD}}})))"
                                f" or sum(rate(tlpx_rule30_busy_seconds_total{{{CARD}}}[{RATE}]))", "busy")],
               "percentunit", "Core busy time over card time. On the simulator card time is its cycles over the clock; on hardware card time is wall time."),
    timeseries("Mean time per operation", [(f"sum(rate(tlpx_rule30_busy_seconds_total{{{CARD}}}[{RATE}])) / sum(rate(tlpx_rule30_operations_total{{{CARD}}}[{RATE}]))", "busy time / operation")], "s"),
    timeseries("Refused and ignored starts per second", [(rate("tlpx_rule30_refused_starts_total"), "refused (bad parameters)"), (rate("tlpx_rule30_ignored_starts_total"), "ignored (busy)")], "ops"),
    stat("Operations", f"sum(tlpx_rule30_operations_total{{{CARD}}})", "none", w=6),
    stat("Busy time", f"sum(tlpx_rule30_busy_seconds_total{{{CARD}}})", "s", "Card time.", w=6),
    stat("Busy now", f"max(tlpx_rule30_busy{{{CARD}}})", "none", w=6),
    stat("Refused starts", f"sum(tlpx_rule30_refused_starts_total{{{CARD}}})", "none", w=6),
], tags=["rule30"])

DASHBOARDS = {"overview.json": OVERVIEW, "link-bandwidth.json": BANDWIDTH, "irq-latency.json": IRQ,
              "spy-live.json": SPY, "rule30.json": RULE30}


def render(d):
    return json.dumps(d, indent=2, sort_keys=True, ensure_ascii=False) + "\n"


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
        print(f"stale dashboards: {', '.join(stale)}: run `python3 dashboards/generate.py`", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
