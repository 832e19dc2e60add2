"""Every panel's PromQL through Prometheus's own tools, and the key panels' values on
synthetic series.

    dashboards/*.json ──► recording rules (one per target) ──► promtool check rules
    key panels + input_series ──► promtool test rules ──► the values the series imply

promtool is Prometheus's (Debian's prometheus package, which `make setup` installs): its
parser is the one the dashboards' queries meet. The expected values are computed here from
the synthetic series' slopes (and, for the link's raw rate, from the PCIe figures), not taken
from a run; slopes and bucket bounds are powers of two or integers so that Prometheus's
arithmetic is exact and promtool's exact comparison holds. A series of another job checks
that the job/instance/card matchers do select.
"""

import re
import shutil
import subprocess

import pytest
import yaml

from dashlib import load_dashboards, panels, substitute, targets

DASHBOARDS = load_dashboards()
PROMTOOL = shutil.which("promtool")

# The labels Prometheus and the exporter put on every series (docs/dashboards.md: card, gen,
# lanes from `tlpx serve`; job and instance from the scrape of dashboards/prometheus.yml).
JOB, INSTANCE, CARD = "tlpx", "127.0.0.1:9464", "sim:/tmp/tlpx-sim.sock"
GEN, LANES = "2", "4"
LABELS = f'job="{JOB}",instance="{INSTANCE}",card="{CARD}",gen="{GEN}",lanes="{LANES}"'
OTHER = f'job="other",instance="{INSTANCE}",card="{CARD}",gen="{GEN}",lanes="{LANES}"'
VALUES = {"job": JOB, "instance": INSTANCE, "card": CARD, "__rate_interval": "1m", "__range": "5m"}
STEPS = 900  # 15 minutes of 1 s samples
EVAL = "10m"


def needs_promtool():
    assert PROMTOOL, "promtool is not installed: `make setup` installs Debian's prometheus package, which has it"


def promtool(*args, cwd):
    needs_promtool()
    return subprocess.run([PROMTOOL, *args], cwd=cwd, capture_output=True, text=True, timeout=120)


def expr_of(file, title, ref="A"):
    p = next((p for p in panels(DASHBOARDS[file]) if p["title"] == title), None)
    assert p is not None, f"{file}: no panel {title!r}"
    t = next(t for t in p["targets"] if t["refId"] == ref)
    return substitute(t["expr"], VALUES)


# Every expression through promtool check rules --------------------------------------------------


def recording_rules():
    groups = {}
    for name, d, p, t in targets(DASHBOARDS):
        group = groups.setdefault(d["uid"], {"name": d["uid"], "rules": []})
        record = re.sub(r"[^a-zA-Z0-9_:]", "_", f"tlpx_dashboard:{d['uid']}:panel_{p['id']}_{t['refId']}")
        group["rules"].append({"record": record, "expr": substitute(t["expr"], VALUES)})
    return {"groups": list(groups.values())}


def test_every_expression_passes_promtool_check_rules(tmp_path):
    rules = recording_rules()
    n = sum(len(g["rules"]) for g in rules["groups"])
    assert n == sum(1 for _ in targets(DASHBOARDS)) and n >= 70, n
    (tmp_path / "rules.yml").write_text(yaml.safe_dump(rules, sort_keys=False))
    out = promtool("check", "rules", "rules.yml", cwd=tmp_path)
    assert out.returncode == 0, out.stdout + out.stderr
    assert f"SUCCESS: {n} rules found" in out.stdout + out.stderr, out.stdout + out.stderr


def test_promtool_check_rules_rejects_a_broken_expression(tmp_path):
    rules = recording_rules()
    rules["groups"][0]["rules"][0]["expr"] = rules["groups"][0]["rules"][0]["expr"].replace("(", "((", 1)
    (tmp_path / "rules.yml").write_text(yaml.safe_dump(rules, sort_keys=False))
    out = promtool("check", "rules", "rules.yml", cwd=tmp_path)
    assert out.returncode != 0 and "FAILED" in out.stdout + out.stderr, out.stdout + out.stderr


# Key panels on synthetic series (promtool test rules) -------------------------------------------


def counter(metric, slope, extra="", labels=LABELS):
    """A counter growing by `slope` per 1 s sample."""
    return {"series": f"{metric}{{{labels}{extra}}}", "values": f"0+{slope!r}x{STEPS}"}


def gauge(metric, value, extra="", labels=LABELS):
    return {"series": f"{metric}{{{labels}{extra}}}", "values": f"{value!r}+0x{STEPS}"}


def sample(value, labels="{}"):
    return {"labels": labels, "value": value}


def bucket_quantile(q, buckets):
    """Prometheus's histogram_quantile on cumulative (upper bound, rate) buckets, +Inf last:
    linear interpolation inside the bucket holding the rank (Prometheus's documented method),
    in the same order of operations so that the float result is the same."""
    rank = q * buckets[-1][1]
    b = next(i for i, (_, c) in enumerate(buckets[:-1] + [(None, float("inf"))]) if c >= rank)
    if b == len(buckets) - 1:
        return buckets[-2][0]
    start, end, count = 0.0, buckets[b][0], buckets[b][1]
    if b > 0:
        start = buckets[b - 1][0]
        count -= buckets[b - 1][1]
        rank -= buckets[b - 1][1]
    return start + (end - start) * (rank / count)


def link_cases():
    down, up, down_wire, up_wire = 4096, 1024, 5120, 2048
    # PCIe gen 2: 5 GT/s per lane with 8b/10b encoding (PCIe Base spec 4.2), 8 bits a byte.
    raw = int(LANES) * 5e9 * 8 / 10 / 8
    series = [counter("tlpx_sim_payload_bytes_total", down, ',direction="down"'),
              counter("tlpx_sim_payload_bytes_total", up, ',direction="up"'),
              counter("tlpx_sim_payload_bytes_total", 1 << 20, ',direction="down"', labels=OTHER),
              counter("tlpx_sim_wire_bytes_total", down_wire, ',direction="down"'),
              counter("tlpx_sim_wire_bytes_total", up_wire, ',direction="up"'),
              gauge("tlpx_card_up", 1), gauge("tlpx_card_up", 1, labels=OTHER.replace(f'gen="{GEN}"', 'gen="3"'))]
    tests = [
        ("link-bandwidth.json", "Payload bytes per direction (simulator)", "A",
         [sample(float(down), '{direction="down"}'), sample(float(up), '{direction="up"}')]),
        ("link-bandwidth.json", "Payload efficiency (simulator)", "A",
         [sample(down / down_wire, '{direction="down"}'), sample(up / up_wire, '{direction="up"}')]),
        ("link-bandwidth.json", "Link raw rate per direction", "A", [sample(raw)]),
    ]
    return series, tests


def irq_cases():
    # Cumulative bucket rates per second at log2 bounds; user stage only (the ISR stage is
    # empty on the simulator).
    bounds = [2.0 ** -19, 2.0 ** -18, 2.0 ** -17, float("inf")]
    rates = [2, 14, 16, 16]
    sum_slope, count_slope = 2.0 ** -14, 4
    series = [counter("tlpx_irq_latency_seconds_bucket", r, f',stage="user",le="{"+Inf" if b == float("inf") else repr(b)}"')
              for b, r in zip(bounds, rates)]
    series += [counter("tlpx_irq_latency_seconds_sum", sum_slope, ',stage="user"'),
               counter("tlpx_irq_latency_seconds_count", count_slope, ',stage="user"'),
               counter("tlpx_irq_fires_total", 3)]
    buckets = [(b, float(r)) for b, r in zip(bounds, rates)]
    tests = [("irq-latency.json", "Latency percentiles per stage", ref, [sample(bucket_quantile(q, buckets), '{stage="user"}')])
             for ref, q in (("A", 0.5), ("B", 0.99), ("C", 0.999))]
    tests += [("irq-latency.json", "Mean latency per stage", "A", [sample(sum_slope / count_slope, '{stage="user"}')]),
              # A stat's total: the increase over the dashboard's range ($__range = 5m).
              ("irq-latency.json", "Fires", "A", [sample(3.0 * 300)])]
    return series, tests


def spy_cases():
    wait, tlps = {"mrd": 2.0 ** -21, "cpld": 2.0 ** -21}, {"mrd": 5, "cpld": 3}
    series = [counter("tlpx_spy_wait_seconds_total", wait[t], f',direction="down",type="{t}"') for t in wait]
    series += [counter("tlpx_spy_tlps_total", tlps[t], f',direction="down",type="{t}"') for t in tlps]
    tests = [("spy-live.json", "Backpressure wait per TLP", "A", [sample(sum(wait.values()) / sum(tlps.values()), '{direction="down"}')]),
             ("spy-live.json", "TLP mix, down (host to card)", "A", [sample(float(tlps[t]), f'{{type="{t}"}}') for t in sorted(tlps)])]
    return series, tests


def rule30_cases(simulated):
    busy, clock = 0.25, 125_000_000
    series = [counter("tlpx_rule30_busy_seconds_total", busy), gauge("tlpx_card_clock_hertz", clock)]
    if simulated:  # card time from the simulator's cycles: here 1 s of card time per second
        series.append(counter("tlpx_sim_card_cycles_total", clock))
    return series, [("rule30.json", "Busy ratio", "A", [sample(busy / (clock / clock) if simulated else busy)])]


CASES = {"link": link_cases, "irq": irq_cases, "spy": spy_cases,
         "rule30-sim": lambda: rule30_cases(True), "rule30-hardware": lambda: rule30_cases(False)}


def unit_test_file(series, tests):
    return {"rule_files": [], "evaluation_interval": "1s", "tests": [{
        "interval": "1s",
        "input_series": series,
        "promql_expr_test": [{"expr": expr_of(f, title, ref), "eval_time": EVAL, "exp_samples": exp}
                             for f, title, ref, exp in tests],
    }]}


@pytest.mark.parametrize("case", sorted(CASES))
def test_key_panels_on_synthetic_series(case, tmp_path):
    series, tests = CASES[case]()
    (tmp_path / "test.yml").write_text(yaml.safe_dump(unit_test_file(series, tests), sort_keys=False))
    out = promtool("test", "rules", "test.yml", cwd=tmp_path)
    assert out.returncode == 0, f"promtool test rules ({case}):\n{out.stdout}{out.stderr}"
    assert "SUCCESS" in out.stdout, out.stdout


def test_promtool_test_rules_fails_on_a_wrong_value(tmp_path):
    series, tests = link_cases()
    f, title, ref, exp = tests[0]
    wrong = [dict(s, value=s["value"] * 2) for s in exp]
    (tmp_path / "test.yml").write_text(yaml.safe_dump(unit_test_file(series, [(f, title, ref, wrong)]), sort_keys=False))
    out = promtool("test", "rules", "test.yml", cwd=tmp_path)
    assert out.returncode != 0 and "FAILED" in out.stdout + out.stderr, out.stdout + out.stderr
