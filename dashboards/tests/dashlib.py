"""What the dashboard tests share: the checked-in dashboards, their targets, and Grafana's
variables substituted so that a PromQL parser (or Prometheus) can read an expression.

Grafana expands `$name` / `${name}` in a query before sending it to Prometheus; the parsers
do not know them. Label values (`job=~"$job"`) are plain strings to a parser and stay as they
are unless concrete values are given; durations (`[$__rate_interval]`) must become durations.
For the lint rules each Grafana duration becomes a distinct duration no dashboard would use
(as Grafana's dashboard-linter does), so that the rules can tell from the syntax tree which
variable a range came from.
"""

import json
import re
from datetime import timedelta
from pathlib import Path

DASHBOARDS_DIR = Path(__file__).resolve().parent.parent

# Grafana's global duration variables -> a marker duration each (seconds no query uses).
DURATION_MARKERS = {
    "__rate_interval": timedelta(seconds=7771),
    "__interval": timedelta(seconds=7772),
    "__range": timedelta(seconds=7773),
}


def load_dashboards():
    """{file name: dashboard JSON} of dashboards/*.json."""
    out = {}
    for path in sorted(DASHBOARDS_DIR.glob("*.json")):
        out[path.name] = json.loads(path.read_text(encoding="utf-8"))
    return out


def panels(d):
    """Every panel of a dashboard, rows' collapsed panels included."""
    for p in d.get("panels", []):
        yield p
        yield from p.get("panels", [])


def targets(dashboards):
    """(file, dashboard, panel, target) of every target of every panel."""
    for name, d in dashboards.items():
        for p in panels(d):
            for t in p.get("targets") or []:
                yield name, d, p, t


def where(name, p, t=None):
    at = f"{name}: panel {p.get('id')} {p.get('title')!r}"
    return f"{at} {t.get('refId')}" if t is not None else at


_VAR = re.compile(r"\$(?:\{(\w+)(?::\w+)?\}|(\w+))")


def substitute(expr, values=None):
    """expr with Grafana's variables replaced: a duration variable by `values` or its marker,
    a variable named in `values` by that value, any other left as it is (inside a label
    matcher's quotes it is a string to the parser; anywhere else the parser rejects it)."""
    values = values or {}

    def repl(m):
        name = m.group(1) or m.group(2)
        if name in values:
            return values[name]
        if name in DURATION_MARKERS:
            return f"{int(DURATION_MARKERS[name].total_seconds())}s"
        return m.group(0)

    return _VAR.sub(repl, expr)
