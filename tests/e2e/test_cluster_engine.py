"""`actorq cluster up|scale|down --backend docker` against a real Docker engine.

The `local_images` fixture starts an engine when none answers and builds `make image`'s
images; the CLI runs as a user would run it, and the engine itself (docker CLI) is asked
what exists after each step: containers by the cluster's labels, their health, the
network and the volumes.
"""

from __future__ import annotations

import json
import subprocess
import sys
import uuid

import pytest

from actorq.testing.compose import wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.compose, pytest.mark.timeout(1500)]

LOCAL_REDIS = "actorq-local/redis:bookworm"


def _cluster(*args: str) -> str:
    proc = subprocess.run([sys.executable, "-m", "actorq", "cluster", *args, "--backend",
                           "docker"], capture_output=True, text=True, timeout=600)  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout


def _docker(docker: str, *args: str) -> str:
    return subprocess.run([docker, *args], capture_output=True, text=True, check=True,
                          timeout=120).stdout  # fmt: skip


def _containers(docker: str, name: str, role: str | None = None) -> dict[str, str]:
    """Container name -> health (or state) for the cluster's containers, optionally one role."""
    labels = ["--filter", f"label=io.actorq.cluster={name}"]
    if role:
        labels += ["--filter", f"label=io.actorq.role={role}"]
    ids = _docker(docker, "ps", "-aq", *labels).split()
    if not ids:
        return {}
    states = json.loads(_docker(docker, "inspect", *ids))
    return {
        s["Name"].lstrip("/"): s["State"].get("Health", {}).get("Status", s["State"]["Status"])
        for s in states
    }


def test_cluster_up_scale_down(local_images: str) -> None:
    docker = local_images
    name = f"aqc{uuid.uuid4().hex[:8]}"
    common = ["--name", name, "--redis-image", LOCAL_REDIS]
    anonymous: list[str] = []
    try:
        out = _cluster("up", "--actors", "2", "--envs-per-actor", "2", *common)
        assert f"cluster {name} up: 5 containers on {name}-net" in out
        # up waited for Redis, quantizer and learner to be healthy; actors follow.
        infra = {r: _containers(docker, name, r) for r in ("redis", "quantizer", "learner")}
        assert all(list(h.values()) == ["healthy"] for h in infra.values()), infra
        wait_for(lambda: sorted(_containers(docker, name, "actor").values())
                 == ["healthy", "healthy"], 240, "2 healthy actors")  # fmt: skip
        logs = subprocess.run([docker, "logs", f"{name}-actor-1"], capture_output=True,
                              text=True, timeout=60)  # fmt: skip
        assert "actor-1 up: env CartPole-v1 x2" in logs.stdout + logs.stderr
        inspected = json.loads(_docker(docker, "inspect", f"{name}-actor-1", f"{name}-learner"))
        assert [c["HostConfig"]["Init"] for c in inspected] == [True, True]  # tini as PID 1
        assert inspected[0]["Config"]["Healthcheck"]["Test"] == ["CMD", "actorq-healthz"]

        _cluster("scale", "--actors", "3", "--envs-per-actor", "2", *common)
        assert set(_containers(docker, name, "actor")) == {f"{name}-actor-{i}" for i in range(3)}
        _cluster("scale", "--actors", "1", "--envs-per-actor", "2", *common)
        assert set(_containers(docker, name, "actor")) == {f"{name}-actor-0"}
        # The images declare VOLUMEs: each container has anonymous ones, gone after down.
        ids = _docker(docker, "ps", "-aq", "--filter", f"label=io.actorq.cluster={name}").split()
        mounts = [m for c in json.loads(_docker(docker, "inspect", *ids)) for m in c["Mounts"]]
        anonymous += [m["Name"] for m in mounts if m["Type"] == "volume" and len(m["Name"]) == 64]
        assert anonymous
    finally:
        out = _cluster("down", "--volumes", *common)
    left = [v for v in _docker(docker, "volume", "ls", "-q").split() if v in anonymous]
    assert left == []
    assert f"cluster {name} down: 4 containers removed" in out
    assert _containers(docker, name) == {}
    assert _docker(docker, "network", "ls", "-q", "--filter", f"name={name}-net").split() == []
    assert _docker(docker, "volume", "ls", "-q", "--filter", f"name={name}-").split() == []
