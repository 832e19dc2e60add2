"""The rules of Grafana's dashboard-linter (github.com/grafana/dashboard-linter, docs/index.md
and docs/rules/), re-implemented for tlpx's dashboards: the linter is a Go program that is
not packaged for Debian or PyPI, so it cannot be installed here. Each rule keeps the linter's
name and takes {file: dashboard JSON}; it returns the problems it found, each naming the
dashboard file, the panel and the target. PromQL is read by a real parser (promql-parser, the
Python bindings of GreptimeTeam's Rust parser), from its syntax tree, never by pattern.

Where tlpx is stricter than the linter, the rule says so. Rules of the linter that do not
apply: target-logql-rule, target-logql-auto-rule (no Loki datasource); the linter's
exclusions file (.lint) is not needed (no rule is excluded).
"""

import re

import promql_parser as pp
import yaml
from grafana_foundation_sdk.models import units as sdk_units

from dashlib import DASHBOARDS_DIR, DURATION_MARKERS, panels, substitute, targets, where

DATASOURCE_REFS = ("$datasource", "${datasource}")
# Panel types the linter's panel rules look at, plus heatmap (tlpx: every panel that draws
# numbers has a unit and a description).
NUMERIC_PANELS = ("stat", "singlestat", "graph", "table", "timeseries", "gauge", "heatmap")
# Grafana's value formats (units), from the pinned SDK: generated from Grafana's own list
# (packages/grafana-data/src/valueFormats/categories.ts), which the linter copies by hand.
VALID_UNITS = frozenset(v for k, v in vars(sdk_units).items() if not k.startswith("_") and isinstance(v, str))
RATE_FUNCTIONS = ("rate", "irate")
COUNTER_FUNCTIONS = ("rate", "irate", "increase")


# The PromQL syntax tree -------------------------------------------------------------------------


def children(node):
    if isinstance(node, (pp.AggregateExpr,)):
        return [c for c in (node.param, node.expr) if isinstance(c, pp.Expr)]
    if isinstance(node, pp.BinaryExpr):
        return [node.lhs, node.rhs]
    if isinstance(node, (pp.ParenExpr, pp.UnaryExpr, pp.SubqueryExpr)):
        return [node.expr]
    if isinstance(node, pp.Call):
        return [a for a in node.args if isinstance(a, pp.Expr)]
    if isinstance(node, pp.MatrixSelector):
        return [node.vector_selector]
    return []


def walk(node, parents=()):
    """(node, its ancestors from the root) of every node, depth first."""
    yield node, parents
    for c in children(node):
        yield from walk(c, parents + (node,))


def parsed(dashboards):
    """(where, expr, syntax tree or None, parse error or None) of every target."""
    for name, _d, p, t in targets(dashboards):
        expr = t.get("expr", "")
        try:
            yield where(name, p, t), expr, pp.parse(substitute(expr)), None
        except ValueError as e:
            yield where(name, p, t), expr, None, str(e)


def variables(d):
    return d.get("templating", {}).get("list", [])


def variable_query(v):
    q = v.get("query", "")
    return q.get("query", "") if isinstance(q, dict) else q


# Dashboard and template rules -------------------------------------------------------------------


def template_datasource_rule(dashboards):
    """Exactly one datasource variable, named `datasource` (or `prometheus_datasource`),
    labelled "Data source" (or "Prometheus data source"), for Prometheus."""
    out = []
    for name, d in dashboards.items():
        ds = [v for v in variables(d) if v.get("type") == "datasource"]
        if len(ds) != 1:
            out.append(f"{name}: {len(ds)} datasource variables, want exactly one")
        for v in ds:
            if v.get("name") not in ("datasource", "prometheus_datasource"):
                out.append(f"{name}: datasource variable named {v.get('name')!r}, want 'datasource'")
            if v.get("label") not in ("Data source", "Prometheus data source"):
                out.append(f"{name}: datasource variable labelled {v.get('label')!r}, want 'Data source'")
            if v.get("query") != "prometheus":
                out.append(f"{name}: datasource variable for {v.get('query')!r}, want 'prometheus'")
    return out


def datasource_default_rule(dashboards):
    """tlpx's: the datasource variable defaults to the provisioned Prometheus datasource
    (dashboards/provisioning/datasources/tlpx.yaml), so the dashboards work as provisioned."""
    prov = yaml.safe_load((DASHBOARDS_DIR / "provisioning/datasources/tlpx.yaml").read_text(encoding="utf-8"))
    uids = {s["uid"] for s in prov["datasources"] if s.get("type") == "prometheus"}
    out = []
    for name, d in dashboards.items():
        for v in variables(d):
            if v.get("type") == "datasource" and v.get("current", {}).get("value") not in uids:
                out.append(f"{name}: datasource variable defaults to {v.get('current')}, want one of the provisioned {sorted(uids)}")
    return out


def _template_rule(label_name):
    title = label_name.capitalize()

    def rule(dashboards):
        out = []
        for name, d in dashboards.items():
            v = next((v for v in variables(d) if v.get("name") == label_name), None)
            if v is None:
                out.append(f"{name}: no {label_name} variable")
                continue
            uid = (v.get("datasource") or {}).get("uid")
            if uid not in DATASOURCE_REFS:
                out.append(f"{name}: {label_name} variable uses datasource {uid!r}, want '$datasource'")
            if v.get("type") != "query":
                out.append(f"{name}: {label_name} variable is of type {v.get('type')!r}, want a Prometheus query")
            if v.get("label") != title:
                out.append(f"{name}: {label_name} variable labelled {v.get('label')!r}, want {title!r}")
            if not v.get("multi"):
                out.append(f"{name}: {label_name} variable is not multi-select")
            if v.get("allValue") != ".+":
                out.append(f"{name}: {label_name} variable's allValue is {v.get('allValue')!r}, want '.+'")
        return out

    rule.__doc__ = (f"A `{label_name}` variable: a Prometheus query on `$datasource`, labelled "
                    f"{title!r}, multi-select, allValue `.+`.")
    return rule


template_job_rule = _template_rule("job")
template_instance_rule = _template_rule("instance")

_LABEL_VALUES = re.compile(r"^\s*label_values\(\s*(?:(?P<sel>.+?)\s*,\s*)?(?P<label>[A-Za-z_]\w*)\s*\)\s*$")
_QUERY_RESULT = re.compile(r"^\s*query_result\((?P<expr>.+)\)\s*$")


def template_label_promql_rule(dashboards):
    """Every Prometheus query variable's query is one of Grafana's forms (label_values,
    query_result) around valid PromQL."""
    out = []
    for name, d in dashboards.items():
        for v in variables(d):
            if v.get("type") != "query":
                continue
            q = variable_query(v)
            m = _LABEL_VALUES.match(q) or _QUERY_RESULT.match(q)
            inner = (m.groupdict().get("sel") or m.groupdict().get("expr")) if m else None
            if m is None:
                out.append(f"{name}: variable {v.get('name')}: {q!r} is not label_values(...) or query_result(...)")
            elif inner:
                try:
                    pp.parse(substitute(inner))
                except ValueError as e:
                    out.append(f"{name}: variable {v.get('name')}: {inner!r}: {e}")
    return out


def template_on_time_change_reload_rule(dashboards):
    """Query variables reload when the time range changes (refresh 2)."""
    return [f"{name}: variable {v.get('name')} refresh {v.get('refresh')!r}, want 2 (on time range change)"
            for name, d in dashboards.items() for v in variables(d)
            if v.get("type") == "query" and v.get("refresh") != 2]


def uneditable_dashboard(dashboards):
    """Dashboards are code: not editable in Grafana (edits belong in dashboards/generate.py)."""
    return [f"{name}: editable is {d.get('editable')!r}, want false" for name, d in dashboards.items()
            if d.get("editable") is not False]


# Panel rules ------------------------------------------------------------------------------------


def panel_datasource_rule(dashboards):
    """Every panel and each of its targets uses the templated datasource (the linter checks
    graph, table, timeseries and singlestat panels; tlpx every panel, and the targets as the
    linter's issue #14 asks)."""
    out = []
    for name, d in dashboards.items():
        for p in panels(d):
            if p.get("type") == "row":
                continue
            uid = (p.get("datasource") or {}).get("uid")
            if uid not in DATASOURCE_REFS:
                out.append(f"{where(name, p)}: datasource {uid!r}, want '${{datasource}}'")
            for t in p.get("targets") or []:
                tuid = (t.get("datasource") or {}).get("uid", uid)
                if tuid not in DATASOURCE_REFS:
                    out.append(f"{where(name, p, t)}: datasource {tuid!r}, want '${{datasource}}'")
    return out


def panel_title_description_rule(dashboards):
    """Every panel has a title and a description (tlpx: every type, not only the linter's)."""
    out = []
    for name, d in dashboards.items():
        for p in panels(d):
            if p.get("type") == "row":
                continue
            for field in ("title", "description"):
                if not str(p.get(field) or "").strip():
                    out.append(f"{where(name, p)}: no {field}")
    return out


def _unit(p):
    fc = p.get("fieldConfig") or {}
    for o in fc.get("overrides") or []:
        for prop in o.get("properties") or []:
            if prop.get("id") == "unit":
                return prop.get("value")
    return (fc.get("defaults") or {}).get("unit")


def _has_mappings(p):
    fc = p.get("fieldConfig") or {}
    if (fc.get("defaults") or {}).get("mappings"):
        return True
    return any(prop.get("id") == "mappings" and prop.get("value")
               for o in fc.get("overrides") or [] for prop in o.get("properties") or [])


def panel_units_rule(dashboards):
    """Every panel that draws numbers has a unit, one of Grafana's (value mappings exempt)."""
    out = []
    for name, d in dashboards.items():
        for p in panels(d):
            if p.get("type") in NUMERIC_PANELS and not _has_mappings(p):
                u = _unit(p)
                if u not in VALID_UNITS:
                    out.append(f"{where(name, p)}: unit {u!r} is not one of Grafana's units")
    return out


def panel_no_targets_rule(dashboards):
    """Every panel (but rows and text) has at least one target."""
    return [f"{where(name, p)}: no targets" for name, d in dashboards.items() for p in panels(d)
            if p.get("type") not in ("row", "text") and not p.get("targets")]


def unique_ids_rule(dashboards):
    """tlpx's (Grafana requires it; the linter does not check): panel ids unique in a dashboard,
    refIds unique in a panel, uids and titles unique across the dashboards."""
    out = []
    seen = {}
    for name, d in dashboards.items():
        for key in ("uid", "title"):
            other = seen.setdefault((key, d.get(key)), name)
            if other != name:
                out.append(f"{name}: {key} {d.get(key)!r} is also {other}'s")
        ids = {}
        for p in panels(d):
            if not isinstance(p.get("id"), int) or ids.setdefault(p["id"], p.get("title")) != p.get("title"):
                out.append(f"{where(name, p)}: id {p.get('id')!r} missing or used by {ids.get(p.get('id'))!r}")
            refs = [t.get("refId") for t in p.get("targets") or []]
            if len(set(refs)) != len(refs) or not all(refs):
                out.append(f"{where(name, p)}: refIds {refs} not unique")
    return out


# Target (PromQL) rules --------------------------------------------------------------------------


def target_promql_rule(dashboards):
    """Every target's expression is valid PromQL (after Grafana's variables)."""
    return [f"{at}: {err}: {expr}" for at, expr, _tree, err in parsed(dashboards) if err]


def target_rate_interval_rule(dashboards):
    """A range vector is only an argument of a function; in rate and irate its range is
    `$__rate_interval`, in increase `$__rate_interval` or `$__range` (tlpx: the linter checks
    rate and irate only; a stat's total over the dashboard's range is increase over `$__range`)."""
    rate_interval, whole_range = DURATION_MARKERS["__rate_interval"], DURATION_MARKERS["__range"]
    out = []
    for at, expr, tree, _err in parsed(dashboards):
        for node, parents in walk(tree) if tree else ():
            if not isinstance(node, pp.MatrixSelector):
                continue
            call = parents[-1] if parents else None
            if not isinstance(call, pp.Call):
                out.append(f"{at}: range vector {node} outside a function: {expr}")
            elif call.func.name in RATE_FUNCTIONS and node.range != rate_interval:
                out.append(f"{at}: {call.func.name} over {pp.display_duration(node.range)}, want $__rate_interval: {expr}")
            elif call.func.name == "increase" and node.range not in (rate_interval, whole_range):
                out.append(f"{at}: increase over {pp.display_duration(node.range)}, want $__rate_interval or $__range: {expr}")
    return out


def _matcher_rule(label):
    def rule(dashboards):
        out = []
        for at, expr, tree, _err in parsed(dashboards):
            for node, _parents in walk(tree) if tree else ():
                if isinstance(node, pp.VectorSelector) and not any(
                        m.name == label and m.op == pp.MatchOp.Re and m.value in (f"${label}", f"${{{label}}}")
                        for m in node.matchers.matchers):
                    out.append(f'{at}: {node} has no {label}=~"${label}": {expr}')
        return out

    rule.__doc__ = f'Every selector of every query has the matcher {label}=~"${label}".'
    return rule


target_job_rule = _matcher_rule("job")
target_instance_rule = _matcher_rule("instance")
target_card_rule = _matcher_rule("card")  # tlpx's: the exporter's card label, as job and instance


def target_counter_agg_rule(dashboards):
    """A counter (a metric ending in _total) is read only through rate, irate or increase
    (tlpx: by metric name; the linter compares the selector's text, matchers included, so it
    misses counters that have matchers)."""
    out = []
    for at, expr, tree, _err in parsed(dashboards):
        for node, parents in walk(tree) if tree else ():
            if isinstance(node, pp.VectorSelector) and (node.name or "").endswith("_total"):
                ok = (len(parents) >= 2 and isinstance(parents[-1], pp.MatrixSelector)
                      and isinstance(parents[-2], pp.Call) and parents[-2].func.name in COUNTER_FUNCTIONS)
                if not ok:
                    out.append(f"{at}: counter {node.name} is not read through rate, irate or increase: {expr}")
    return out


RULES = {
    "template-datasource-rule": template_datasource_rule,
    "tlpx-datasource-default-rule": datasource_default_rule,
    "template-job-rule": template_job_rule,
    "template-instance-rule": template_instance_rule,
    "template-label-promql-rule": template_label_promql_rule,
    "template-on-time-change-reload-rule": template_on_time_change_reload_rule,
    "uneditable-dashboard": uneditable_dashboard,
    "panel-datasource-rule": panel_datasource_rule,
    "panel-title-description-rule": panel_title_description_rule,
    "panel-units-rule": panel_units_rule,
    "panel-no-targets-rule": panel_no_targets_rule,
    "tlpx-unique-ids-rule": unique_ids_rule,
    "target-promql-rule": target_promql_rule,
    "target-rate-interval-rule": target_rate_interval_rule,
    "target-job-rule": target_job_rule,
    "target-instance-rule": target_instance_rule,
    "tlpx-target-card-rule": target_card_rule,
    "target-counter-agg-rule": target_counter_agg_rule,
}
