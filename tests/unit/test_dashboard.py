"""The Grafana dashboard (deploy/grafana/build_dashboard.py) against the metrics in code.

Every actorq_* metric defined under actorq/ and services/ is read by some panel (or listed
in the builder's NOT_CHARTED with a reason), the committed JSON is what the builder writes,
each query reads its metrics the way their type allows (rate/increase on counters only,
histogram_quantile over _bucket by le), uses only labels the code sets, and parses
(promtool). tests/e2e/test_observability.py runs the same queries against a real
Prometheus scraping a real run."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BUILDER = ROOT / "deploy" / "grafana" / "build_dashboard.py"

sys.path.insert(0, str(BUILDER.parent))
import build_dashboard as bd  # noqa: E402  (deploy/grafana: grafana-foundation-sdk)

DASHBOARD = bd.build()
DEFINED = bd.defined_metrics()
# Labels every series may carry besides its own: the scrape's, and histogram buckets'.
SCRAPE_LABELS = {"job", "instance", "le"}
# Panels that show a counter's running total on purpose ("so far"), not its rate.
CUMULATIVE_KINDS = {"stat"}
CUMULATIVE_TITLE = "(cumulative)"


def test_committed_json_is_what_the_builder_writes() -> None:
    assert bd.DASHBOARD_PATH.read_text() == bd.render(DASHBOARD), "stale: run `make dashboard`"


def test_the_scan_finds_metrics_of_every_kind_and_module() -> None:
    """A guard on the scan itself: were it to find nothing, nothing would be uncharted."""
    assert DEFINED["actorq_actor_env_steps_total"].type == "counter"
    assert DEFINED["actorq_learner_importance_ess_fraction"].type == "gauge"  # onpolicy/
    assert DEFINED["actorq_actor_step_phase_seconds"].labels == ("instance", "phase")
    assert DEFINED["actorq_service_energy_joules_total"].labels == ("service", "method")
    assert DEFINED["actorq_quantizer_guard_divergence_ratio"].labels == ("measure", "stage")


def test_the_scan_matches_the_live_registry() -> None:
    """What prometheus_client registers on import is a subset of what the scan found,
    with the same type and labels."""
    from prometheus_client import REGISTRY

    import actorq.metrics
    import actorq.onpolicy.metrics  # noqa: F401

    for family in REGISTRY.collect():
        if not family.name.startswith("actorq_"):
            continue
        name = family.name + ("_total" if family.type == "counter" else "")
        assert name in DEFINED, f"{name} registered but not found by defined_metrics()"
        assert DEFINED[name].type == family.type, name
        labels = {k for s in family.samples for k in s.labels} - {"le"}
        assert labels <= set(DEFINED[name].labels), (name, labels)


def test_every_defined_metric_is_charted() -> None:
    missing = bd.uncharted(DEFINED, DASHBOARD)
    where = [f"{name} ({DEFINED[name].where})" for name in missing]
    assert not missing, "no panel queries (chart them, or list them in NOT_CHARTED):\n" + (
        "\n".join(where)
    )


def test_not_charted_entries_are_defined_and_really_not_charted() -> None:
    charted = bd.charted_metrics(DASHBOARD)
    defined = {bd.base_name(n) for n in DEFINED}
    for name, why in bd.NOT_CHARTED.items():
        assert why.strip(), f"{name}: say why it is left off"
        assert bd.base_name(name) in defined, f"{name}: no longer defined; drop it"
        assert bd.base_name(name) not in charted, f"{name}: charted after all; drop it"


def _series(expr: str) -> list[tuple[int, str]]:
    return [(m.start(), m.group()) for m in bd._METRIC_NAME.finditer(expr)]


def _metric(series: str):
    """(series suffix, Metric) for a series name a query uses."""
    if series in DEFINED:
        return "", DEFINED[series]
    base = bd.base_name(series)
    assert base in DEFINED or f"{base}_total" in DEFINED, f"{series}: no such metric"
    return series[len(base) :], DEFINED.get(base) or DEFINED[f"{base}_total"]


def test_queries_read_each_metric_as_its_type_allows() -> None:
    problems = []
    for panel in DASHBOARD["panels"]:
        for target in panel.get("targets", []):
            expr = target["expr"]
            for start, series in _series(expr):
                suffix, metric = _metric(series)
                in_rate = re.search(r"\b(rate|increase|irate)\($", expr[:start]) is not None
                where = f"{panel['title']}: {series}"
                if metric.type == "gauge" and in_rate:
                    problems.append(f"{where}: rate()/increase() of a gauge")
                if metric.type == "counter" and not in_rate:
                    cumulative = panel["type"] in CUMULATIVE_KINDS or (
                        CUMULATIVE_TITLE in panel["title"]
                    )
                    if not cumulative:
                        problems.append(f"{where}: counter outside rate()/increase()")
                if metric.type == "histogram":
                    if suffix not in ("_bucket", "_sum", "_count"):
                        problems.append(f"{where}: histogram without _bucket/_sum/_count")
                    elif not in_rate:
                        problems.append(f"{where}: histogram series outside rate()")
                    if suffix == "_bucket" and not re.search(
                        r"histogram_quantile\([0-9.]+, sum by \(le\b", expr
                    ):
                        problems.append(f"{where}: _bucket outside histogram_quantile by le")
    assert not problems, "\n".join(problems)


def test_queries_use_only_labels_the_code_sets() -> None:
    problems = []
    for panel in DASHBOARD["panels"]:
        for target in panel.get("targets", []):
            expr = target["expr"]
            metrics = [_metric(s)[1] for _, s in _series(expr)]
            if not metrics:  # `up`: Prometheus' own
                continue
            known = SCRAPE_LABELS.union(*(m.labels for m in metrics))
            used = set(re.findall(r"\b([a-z_]+)\s*(?:=~|!~|!=|=)\s*\"", expr))
            for group in re.findall(r"\b(?:by|without|on|ignoring)\s*\(([^)]*)\)", expr):
                used |= {label.strip() for label in group.split(",") if label.strip()}
            for legend_label in re.findall(r"\{\{(\w+)\}\}", target["legendFormat"]):
                used.add(legend_label)
            if used - known:
                problems.append(f"{panel['title']}: {sorted(used - known)} in {expr}")
    assert not problems, "\n".join(problems)


def test_rows_have_titles_and_panels_have_units_and_queries() -> None:
    rows = [p for p in DASHBOARD["panels"] if p["type"] == "row"]
    assert len(rows) == len(bd.PANELS) and all(r["title"].strip() for r in rows)
    titles = [r["title"] for r in rows]
    for needed in ("On-policy", "guard", "Runtime breakdown", "Energy", "Sparse", "Broadcasts"):
        assert any(needed in t for t in titles), f"no row about {needed}: {titles}"
    for panel in DASHBOARD["panels"]:
        if panel["type"] == "row":
            continue
        assert panel["targets"], panel["title"]
        assert panel["fieldConfig"]["defaults"]["unit"], panel["title"]
        grid = panel["gridPos"]
        assert grid["x"] + grid["w"] <= 24, panel["title"]


def test_guard_panels_cover_every_stage_and_measure() -> None:
    exprs = " ".join(expr for _, expr in bd.queries(DASHBOARD))
    for measure in ("regret", "disagreement", "agreement", "q_error", "action_diff", "kl"):
        assert f'measure="{measure}"' in exprs, measure
    guard = [e for _, e in bd.queries(DASHBOARD) if "guard_divergence_ratio" in e]
    assert all("by (stage)" in e for e in guard), "each measure split by stage"


def test_every_query_parses_with_promtool(tmp_path: Path) -> None:
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.fail("promtool not found: run ./scripts/test.sh (installs it) or "
                    "apt-get install prometheus")  # fmt: skip
    rules = tmp_path / "dashboard-queries.yml"
    rules.write_text(bd.rules_file(DASHBOARD))
    check = subprocess.run(
        [promtool, "check", "rules", str(rules)], capture_output=True, text=True, timeout=60
    )
    assert check.returncode == 0, check.stdout + check.stderr
    assert f"{len(bd.queries(DASHBOARD))} rules found" in check.stdout
