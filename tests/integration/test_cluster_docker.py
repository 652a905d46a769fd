"""`actorq cluster` where no Docker engine answers: it says so and fails. Against a real
engine: tests/e2e/test_cluster_engine.py."""

from __future__ import annotations

import subprocess
import sys

import pytest

from actorq.cluster.cli import EXIT_NO_ENGINE
from actorq.redis_server import find_free_port


def _cluster(*args: str, docker_host: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "actorq", "cluster", *args],
        env={"DOCKER_HOST": docker_host, "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.parametrize("action", ["up", "scale", "down"])
def test_no_engine_is_reported_clearly(action: str, tmp_path) -> None:
    # a socket path nothing listens on, and a TCP port nothing listens on
    for host in (f"unix://{tmp_path}/docker.sock", f"tcp://127.0.0.1:{find_free_port()}"):
        proc = _cluster(action, "--backend", "docker", "--actors", "2", docker_host=host)
        assert proc.returncode == EXIT_NO_ENGINE, proc.stdout + proc.stderr
        assert "no Docker engine found at " + host in proc.stderr


def test_bad_actor_count_is_a_usage_error_before_any_engine_is_asked(tmp_path) -> None:
    proc = _cluster("up", "--actors", "-3", docker_host=f"unix://{tmp_path}/none.sock")
    assert proc.returncode == 2
    assert "--actors: expected 0..1024, got -3" in proc.stderr
