"""Observability end to end: `actorq run` starts the real services, a real Prometheus
(Debian's `prometheus`) scrapes every one of them through a generated config, and the
Grafana dashboard's own queries parse and return data through Prometheus' HTTP API, and
every actorq_* metric Prometheus scraped is read by some panel (the builder's NOT_CHARTED
excepted; tests/unit/test_dashboard.py checks the metrics defined in code the same way
without a run). promtool lints each live /metrics page. The test command (scripts/test.sh)
installs the binaries when they are missing; run directly without them, these tests fail
saying so."""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from actorq.redis_server import find_free_port
from actorq.testing.dashboard import unexpectedly_empty

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]
DASHBOARD = ROOT / "deploy" / "grafana" / "dashboards" / "actorq.json"
ALERTS = ROOT / "deploy" / "prometheus" / "alerts.yml"
BUILDER = ROOT / "deploy" / "grafana" / "build_dashboard.py"


def _need(binary: str) -> str:
    path = shutil.which(binary)
    if path is None:
        pytest.fail(f"{binary} not found: run ./scripts/test.sh (installs it) or "
                    "apt-get install prometheus")  # fmt: skip
    return path


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A short real training run; stopped with SIGTERM when the module's tests are done."""
    _need("prometheus")
    folder = tmp_path_factory.mktemp("obs") / "run"
    proc = subprocess.Popen(
        [sys.executable, "-m", "actorq", "run", "--actors", "2", "--target-return", "none",
         "--max-seconds", "240", "--run-dir", str(folder)],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, stdin=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        _wait_for(lambda: (folder / "config.json").exists(), 120, "run never wrote config.json")
        yield folder
    finally:
        proc.send_signal(signal.SIGTERM)
        output, _ = proc.communicate(timeout=120)
        assert proc.returncode in (0, 130), output[-2000:]


def _wait_for(condition, timeout: float, message: str, every: float = 0.5):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(every)
    raise AssertionError(message)


def _services(run_dir: Path) -> dict[str, str]:
    """Service name -> /metrics URL, as `actorq run` recorded them."""
    config = json.loads((run_dir / "config.json").read_text())
    return {name: s["metrics"] for name, s in config["services"].items()}


def _job(name: str) -> str:
    return "actor" if name.startswith("actor-") else name


def prometheus_config(services: dict[str, str], rules: Path) -> str:
    """Static targets, one job per role, with the same job names and label handling as
    deploy/prometheus/prometheus.yml (whose DNS discovery only works inside compose)."""
    jobs: dict[str, list[str]] = {}
    for name, url in services.items():
        jobs.setdefault(_job(name), []).append(urllib.parse.urlsplit(url).netloc)
    lines = ["global:", "  scrape_interval: 1s", "  evaluation_interval: 1s",
             f"rule_files: [{json.dumps(str(rules))}]", "scrape_configs:"]  # fmt: skip
    for job, targets in sorted(jobs.items()):
        lines += [
            f"  - job_name: {job}",
            f"    honor_labels: {'true' if job in ('actor', 'evaluator') else 'false'}",
            f"    static_configs: [{{targets: {json.dumps(targets)}}}]",
        ]
    return "\n".join(lines) + "\n"


@pytest.fixture(scope="module")
def prometheus(run_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    binary = _need("prometheus")
    work = tmp_path_factory.mktemp("prometheus")
    config = work / "prometheus.yml"
    config.write_text(prometheus_config(_services(run_dir), ALERTS))
    port = find_free_port()
    url = f"http://127.0.0.1:{port}"
    with (work / "prometheus.log").open("w") as log:
        proc = subprocess.Popen(
            [binary, f"--config.file={config}", f"--storage.tsdb.path={work / 'data'}",
             f"--web.listen-address=127.0.0.1:{port}", "--log.level=warn"],
            stdout=subprocess.DEVNULL, stderr=log,
        )  # fmt: skip
        try:
            _wait_for(lambda: _ready(url), 60, f"prometheus never ready: see {work}")
            yield url
        finally:
            proc.terminate()
            proc.wait(timeout=30)


def _ready(url: str) -> bool:
    try:
        return urllib.request.urlopen(f"{url}/-/ready", timeout=2).status == 200
    except OSError:
        return False


def _api(url: str, path: str, **params: str) -> dict:
    query = urllib.parse.urlencode(params)
    with urllib.request.urlopen(f"{url}/api/v1/{path}?{query}", timeout=10) as reply:
        body = json.loads(reply.read())
    assert body["status"] == "success", body
    return body["data"]


def _value(url: str, expr: str) -> float | None:
    """The query's single value now (sums over series), or None when it has no data."""
    result = _api(url, "query", query=expr)["result"]
    return sum(float(r["value"][1]) for r in result) if result else None


def _panel_query(title: str) -> str:
    dashboard = json.loads(DASHBOARD.read_text())
    panel = next(p for p in dashboard["panels"] if p["title"] == title and p.get("targets"))
    return panel["targets"][0]["expr"]


def test_live_metrics_pages_pass_promtool(run_dir: Path) -> None:
    promtool = _need("promtool")
    services = _services(run_dir)
    assert {"quantizer", "learner", "actor-0", "actor-1", "evaluator"} <= services.keys()
    for name, url in services.items():
        page = _wait_for(lambda u=url: _fetch(u), 60, f"{name}: /metrics never answered")
        assert "actorq_" in page
        lint = subprocess.run([promtool, "check", "metrics"], input=page, capture_output=True,
                              text=True, timeout=60)  # fmt: skip
        assert lint.returncode == 0, f"{name}: {lint.stdout}{lint.stderr}"


def _fetch(url: str) -> str | None:
    try:
        return urllib.request.urlopen(url, timeout=5).read().decode()
    except OSError:
        return None


def test_dashboard_key_queries_return_data(prometheus: str) -> None:
    _wait_for(lambda: _value(prometheus, 'count(up{job="actor"} == 1)') == 2, 60,
              "prometheus never saw both actors up")  # fmt: skip
    steps = _panel_query("Env steps/s")
    saved = _panel_query("Bytes saved")
    version = _panel_query("Policy version")
    _wait_for(lambda: (_value(prometheus, steps) or 0) > 0, 120, f"no env steps/s: {steps}")
    _wait_for(lambda: (_value(prometheus, saved) or 0) > 0, 120, f"no bytes saved: {saved}")
    _wait_for(lambda: (_value(prometheus, version) or 0) > 0, 120, f"no version: {version}")
    first = _value(prometheus, "sum(actorq_actor_env_steps_total)")
    _wait_for(
        lambda: (_value(prometheus, "sum(actorq_actor_env_steps_total)") or 0) > (first or 0),
        30, "env steps are not rising",
    )  # fmt: skip
    # Each actor's series appears once its loop is built and rate() has two scrapes of it;
    # on a loaded machine one actor can get there well after the other, so wait for both.
    per_actor = _panel_query("Env steps/s per actor")
    _wait_for(lambda: _instances(prometheus, per_actor) == {"actor-0", "actor-1"}, 120,
              f"per-actor panel never showed both actors: {per_actor}")  # fmt: skip


def _instances(url: str, expr: str) -> set[str]:
    return {r["metric"].get("instance", "") for r in _api(url, "query", query=expr)["result"]}


def test_every_dashboard_query_runs_and_most_have_data(prometheus: str) -> None:
    """Every panel query is valid PromQL against live data; all but the ones that are
    empty in a healthy run (rejections, rate-limit waits, ...) return series."""
    _wait_for(lambda: (_value(prometheus, "max(actorq_learner_policy_version)") or 0) > 0,
              120, "no policy published")  # fmt: skip
    time.sleep(3)  # a few more scrapes so every rate() has two samples
    dashboard = json.loads(DASHBOARD.read_text())
    empty = []
    for panel in dashboard["panels"]:
        for target in panel.get("targets", []):
            if not _api(prometheus, "query", query=target["expr"])["result"]:
                empty.append(f"{panel['title']}: {target['expr']}")
    unexpected = unexpectedly_empty(empty)
    assert not unexpected, "queries without data:\n" + "\n".join(unexpected)


def test_every_scraped_actorq_metric_is_charted(prometheus: str) -> None:
    """What the services really export (custom collectors included) against the panels:
    a metric Prometheus has but no panel reads is one the dashboard forgot."""
    _wait_for(lambda: (_value(prometheus, "max(actorq_learner_policy_version)") or 0) > 0,
              120, "no policy published")  # fmt: skip
    sys.path.insert(0, str(BUILDER.parent))
    import build_dashboard  # deploy/grafana: grafana-foundation-sdk

    names = [n for n in _api(prometheus, "label/__name__/values") if n.startswith("actorq_")]
    assert "actorq_service_energy_joules_total" in names  # the collector's, not in metrics.py
    dashboard = json.loads(DASHBOARD.read_text())
    missing = build_dashboard.uncharted(names, dashboard)
    hint = "chart them, or list them in NOT_CHARTED in deploy/grafana/build_dashboard.py"
    assert not missing, f"scraped but on no panel ({hint}):\n" + "\n".join(missing)


def test_alert_rules_load_and_none_fire_on_a_healthy_run(prometheus: str) -> None:
    groups = _api(prometheus, "rules")["groups"]
    names = {rule["name"] for group in groups for rule in group["rules"]}
    assert {"ActorqLearnerStalled", "ActorqPolicyLagHigh", "ActorqReplayNotGrowing"} <= names
    firing = [a["labels"]["alertname"] for a in _api(prometheus, "alerts")["alerts"]
              if a["state"] == "firing"]  # fmt: skip
    assert firing == []
