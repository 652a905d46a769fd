"""docker-compose.yml as compose itself resolves it (with the local-image override): every
actorq service runs under an init and is probed over HTTP without Python; per-role images."""

from __future__ import annotations

import json
import os
import subprocess

from actorq.testing.compose import ACTORQ_SERVICES, COMPOSE_FILES, compose_binary


def _services(**env: str) -> dict:
    files = [a for f in COMPOSE_FILES for a in ("-f", str(f))]
    command = [compose_binary(), *files, "config", "--format", "json"]
    environ = {k: v for k, v in os.environ.items() if k != "ACTORQ_PROBE_INTERVAL"}
    config = subprocess.run(command, capture_output=True, text=True, check=True, timeout=60,
                            env={**environ, **env})  # fmt: skip
    return json.loads(config.stdout)["services"]


def test_probe_interval_is_10s_unless_set() -> None:
    """Each probe costs the host ~50 ms of Docker exec CPU: big fleets may probe less often."""
    default, relaxed = _services(), _services(ACTORQ_PROBE_INTERVAL="30s")
    for name in ACTORQ_SERVICES:
        assert default[name]["healthcheck"]["interval"] == "10s", name
        assert relaxed[name]["healthcheck"]["interval"] == "30s", name


def test_every_actorq_service_has_init_and_the_http_probe() -> None:
    services = _services()
    for name in ACTORQ_SERVICES:
        assert services[name]["init"] is True, name
        assert services[name]["healthcheck"]["test"] == ["CMD", "actorq-healthz"], name
        assert services[name]["healthcheck"]["start_period"] == "2m0s", name
        assert services[name]["healthcheck"]["timeout"] == "30s", name
    # Redis and Prometheus too (Grafana, behind a profile here, as well): on a loaded host
    # the probe's exec, not the service, is slow (a 3 s timeout marked a serving Redis
    # unhealthy, BENCHMARKS.md 24b).
    for name in ("redis", "prometheus"):
        assert services[name]["healthcheck"]["timeout"] == "30s", name
    # CartPole actors, evaluator and quantizer on the image without extras; learner full.
    for name in ("actor", "evaluator", "quantizer"):
        assert services[name]["image"] == "actorq:core", name
        assert services[name]["build"]["args"]["EXTRAS"] == "", name
    assert services["learner"]["image"] == "actorq:latest"
    # The learner, which sets the pace, weighs the 32 actors' 256 each together (BENCHMARKS
    # 24e: at 2048 its training thread got 0.58 of a core beside them).
    assert services["learner"]["cpu_shares"] == 8192
    # Actors a quarter of a process each: 32 waiting actors at 1024 slowed `up` and the
    # learner (BENCHMARKS 24d); the evaluator is one container at Docker's default.
    assert services["actor"]["cpu_shares"] == 256
    assert "cpu_shares" not in services["evaluator"]
    # Actors start beside the learner once the quantizer is healthy (they wait for the
    # learner's first policy by themselves).
    for name in ("actor", "evaluator"):
        depends = {k: v["condition"] for k, v in services[name]["depends_on"].items()}
        assert depends == {"quantizer": "service_healthy"}, name
