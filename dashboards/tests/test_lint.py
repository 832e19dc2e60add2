"""Grafana's dashboard-linter rules (dashboards/tests/lint.py) on the checked-in dashboards.

    dashboards/*.json ──► each rule ──► no problem
    a copy broken for the rule ──► the rule ──► a problem naming the dashboard (and panel)

Every rule is run twice: on the dashboards as generated, where it must find nothing, and on a
copy broken in the one way it looks for, where it must find that problem and name where it is
(so that no rule passes by looking at nothing).
"""

import copy
import re

import pytest

from dashlib import load_dashboards, panels, targets
from lint import RULES

DASHBOARDS = load_dashboards()
VICTIM = "link-bandwidth.json"


def _panel(ds, title=None):
    """The victim dashboard's first panel (or the one with that title)."""
    return next(p for p in panels(ds[VICTIM]) if title is None or p["title"] == title)


def _variable(ds, name):
    return next(v for v in ds[VICTIM]["templating"]["list"] if v["name"] == name)


def _edit_expr(ds, old, new, title=None):
    t = _panel(ds, title)["targets"][0]
    assert old in t["expr"], f"{old!r} not in {t['expr']!r}: the break would not break anything"
    t["expr"] = t["expr"].replace(old, new, 1)


def _rename_datasource(ds):
    _variable(ds, "datasource")["name"] = "ds"


def _other_default(ds):
    _variable(ds, "datasource")["current"]["value"] = "someone-elses-prometheus"


def _drop_job(ds):
    ds[VICTIM]["templating"]["list"].remove(_variable(ds, "job"))


def _single_instance(ds):
    _variable(ds, "instance")["multi"] = False


def _bad_variable_query(ds):
    _variable(ds, "card")["query"]["query"] = 'label_values(tlpx_card_info{job=~"$job"), card)'


def _reload_on_load(ds):
    _variable(ds, "card")["refresh"] = 1


def _editable(ds):
    ds[VICTIM]["editable"] = True


def _fixed_datasource(ds):
    _panel(ds)["datasource"] = {"type": "prometheus", "uid": "tlpx-prometheus"}


def _no_description(ds):
    _panel(ds)["description"] = ""


def _bad_unit(ds):
    _panel(ds)["fieldConfig"]["defaults"]["unit"] = "bytes/s"


def _no_targets(ds):
    _panel(ds)["targets"] = []


def _duplicate_id(ds):
    first, second = list(panels(ds[VICTIM]))[:2]
    second["id"] = first["id"]


def _counter_without_rate(ds):
    t = _panel(ds)["targets"][0]
    t["expr"], n = re.subn(r"rate\((tlpx_sim_payload_bytes_total\{[^}]*\})\[\$__rate_interval\]\)", r"\1", t["expr"], count=1)
    assert n == 1, t["expr"]


BREAKS = {
    "template-datasource-rule": (_rename_datasource, None),
    "tlpx-datasource-default-rule": (_other_default, None),
    "template-job-rule": (_drop_job, None),
    "template-instance-rule": (_single_instance, None),
    "template-label-promql-rule": (_bad_variable_query, None),
    "template-on-time-change-reload-rule": (_reload_on_load, None),
    "uneditable-dashboard": (_editable, None),
    "panel-datasource-rule": (_fixed_datasource, "panel 1"),
    "panel-title-description-rule": (_no_description, "panel 1"),
    "panel-units-rule": (_bad_unit, "panel 1"),
    "panel-no-targets-rule": (_no_targets, "panel 1"),
    "tlpx-unique-ids-rule": (_duplicate_id, "panel 1"),
    "target-promql-rule": (lambda ds: _edit_expr(ds, "sum by (direction) (", "sum by (direction) (("), "panel 1"),
    "target-rate-interval-rule": (lambda ds: _edit_expr(ds, "[$__rate_interval]", "[5m]"), "panel 1"),
    "target-job-rule": (lambda ds: _edit_expr(ds, 'job=~"$job",', ""), "panel 1"),
    "target-instance-rule": (lambda ds: _edit_expr(ds, 'instance=~"$instance",', 'instance=~".+",'), "panel 1"),
    "tlpx-target-card-rule": (lambda ds: _edit_expr(ds, ',card=~"$card"', ""), "panel 1"),
    "target-counter-agg-rule": (_counter_without_rate, "panel 1"),
}


def test_there_is_something_to_lint():
    assert len(DASHBOARDS) >= 5, sorted(DASHBOARDS)
    n_panels = sum(1 for d in DASHBOARDS.values() for _ in panels(d))
    n_targets = sum(1 for _ in targets(DASHBOARDS))
    assert n_panels >= 50 and n_targets >= 70, (n_panels, n_targets)


def test_every_rule_has_a_break():
    assert set(BREAKS) == set(RULES)


@pytest.mark.parametrize("rule", sorted(RULES))
def test_dashboards_pass(rule):
    problems = RULES[rule](DASHBOARDS)
    assert problems == [], f"{rule}:\n  " + "\n  ".join(problems)


@pytest.mark.parametrize("rule", sorted(RULES))
def test_a_broken_dashboard_fails(rule):
    broken = copy.deepcopy(DASHBOARDS)
    breaker, panel = BREAKS[rule]
    breaker(broken)
    problems = RULES[rule](broken)
    assert problems, f"{rule} found nothing wrong in a dashboard broken for it"
    assert all(VICTIM in p for p in problems), problems
    if panel:
        assert any(f"{panel} " in p for p in problems), problems
    # The same rule on the untouched dashboards still finds nothing: the break, not the
    # copy, made the problem.
    assert RULES[rule](DASHBOARDS) == []
