"""The checked-in dashboards read back through the SDK's models of Grafana's dashboard schema.

    dashboards/*.json ──► grafana_foundation_sdk.models.dashboard.Dashboard.from_json ──► JSON
                      ══  (the same, field for field)

The models are generated from Grafana's schema and keep only the fields it defines, so a
field Grafana does not know at the dashboard, panel, variable or link level (a misspelling, a
field of another Grafana version) is lost on the way back and the comparison fails. Panel
options, field config and targets are kept whole by the models (their schema belongs to the
panel and datasource plugins); the lint rules and the Prometheus tests look at those.
"""

import copy
import json

import pytest
from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.models import dashboard as dm

from dashlib import load_dashboards

DASHBOARDS = load_dashboards()


def round_trip(d):
    return json.loads(JSONEncoder(sort_keys=True).encode(dm.Dashboard.from_json(d)))


def differences(a, b, path=""):
    """Paths at which two JSON values differ."""
    if isinstance(a, dict) and isinstance(b, dict):
        return [p for k in sorted(set(a) | set(b)) for p in differences(a.get(k, "<absent>"), b.get(k, "<absent>"), f"{path}.{k}")]
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        return [p for i, (x, y) in enumerate(zip(a, b)) for p in differences(x, y, f"{path}[{i}]")]
    return [] if a == b else [f"{path}: {a!r} -> {b!r}"]


@pytest.mark.parametrize("name", sorted(DASHBOARDS))
def test_dashboard_survives_the_sdk_models(name):
    diff = differences(DASHBOARDS[name], round_trip(DASHBOARDS[name]))
    assert diff == [], f"{name}: fields Grafana's schema does not keep:\n  " + "\n  ".join(diff)


@pytest.mark.parametrize("where", ["dashboard", "panel", "variable"])
def test_an_unknown_field_is_caught(where):
    d = copy.deepcopy(DASHBOARDS["rule30.json"])
    if where == "dashboard":
        d["refresh_rate"] = "5s"
    elif where == "panel":
        d["panels"][0]["gridpos"] = d["panels"][0]["gridPos"]
    else:
        d["templating"]["list"][1]["allvalue"] = ".+"
    diff = differences(d, round_trip(d))
    assert diff and all(any(k in p for k in ("refresh_rate", "gridpos", "allvalue")) for p in diff), diff
