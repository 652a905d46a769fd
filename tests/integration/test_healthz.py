"""`/healthz` on the metrics port and the image's probe (deploy/docker/actorq-healthz), over
real HTTP against a real GrpcServer's health state: the same answer as grpc.health.v1."""

from __future__ import annotations

import socket
import subprocess
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from actorq.healthz import start_server
from actorq.redis_server import find_free_port
from actorq.rpc import GrpcServer
from actorq.rpc.healthcheck import check_health

PROBE = Path(__file__).resolve().parents[2] / "deploy" / "docker" / "actorq-healthz"


def get(port: int, path: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as reply:
            return reply.status, reply.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def probe(port: int | str, wait_s: float = 4) -> subprocess.CompletedProcess[str]:
    """Exactly what the container HEALTHCHECK runs (bash, no Python)."""
    env = {"PATH": "/usr/bin:/bin", "ACTORQ_HEALTHZ_WAIT_S": str(wait_s)}
    return subprocess.run(
        [str(PROBE), str(port)], env=env, capture_output=True, text=True, timeout=30
    )


@pytest.fixture
def served() -> Iterator[tuple[GrpcServer, int]]:
    server = GrpcServer("127.0.0.1", 0, [])
    httpd = start_server("127.0.0.1", 0, server.status)
    try:
        yield server, httpd.server_port
    finally:
        httpd.shutdown()
        httpd.server_close()
        server.stop(grace=0.1)


def test_healthz_follows_the_grpc_health_state(served) -> None:
    server, port = served
    assert get(port, "/healthz") == (503, "NOT_SERVING\n")  # metrics up, gRPC not started
    server.start()
    address = f"127.0.0.1:{server.port}"
    assert check_health(address) == "SERVING"
    assert get(port, "/healthz") == (200, "SERVING\n")
    ok = probe(port)
    assert ok.returncode == 0, ok.stdout + ok.stderr
    assert ok.stdout.strip() == f"127.0.0.1:{port}/healthz: 200 OK: SERVING"
    server.set_serving(False)  # what a stopping service reports
    assert check_health(address) == "NOT_SERVING"
    assert get(port, "/healthz") == (503, "NOT_SERVING\n")
    bad = probe(port)
    assert bad.returncode == 1
    assert "503 Service Unavailable: NOT_SERVING" in bad.stdout
    status, page = get(port, "/metrics")  # the same port still serves Prometheus
    assert status == 200 and "# TYPE" in page


def test_no_health_source_is_404_and_metrics_still_served() -> None:
    httpd = start_server("127.0.0.1", 0, None)
    try:
        assert get(httpd.server_port, "/healthz")[0] == 404
        assert get(httpd.server_port, "/metrics")[0] == 200
        assert probe(httpd.server_port).returncode == 1
    finally:
        httpd.shutdown()
        httpd.server_close()


def test_probe_fails_fast_on_no_listener_silence_and_bad_port() -> None:
    down = probe(find_free_port())
    assert down.returncode == 1 and "nothing listens" in down.stdout
    assert probe("nine").returncode == 2
    # A wedged service: accepts, never answers. The probe gives up by itself.
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        held: list[socket.socket] = []
        threading.Thread(target=lambda: held.append(listener.accept()[0]), daemon=True).start()
        started = time.monotonic()
        silent = probe(listener.getsockname()[1], wait_s=1)
        assert time.monotonic() - started < 10
        for conn in held:
            conn.close()
    assert silent.returncode == 1 and "no reply" in silent.stdout
