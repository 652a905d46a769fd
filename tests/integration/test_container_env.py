"""Real service processes started with the environment the containers get (the Docker
launcher's specs, compose's `ACTORQ_ACTOR_INDEX=-1` for replicas), probed the way the
container HEALTHCHECK and Kubernetes probes do. Only hosts and ports change: loopback
and free ports instead of container names and fixed ports."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from actorq.cluster.specs import ClusterConfig, plan_cluster
from actorq.redis_keys import RedisKeys
from actorq.redis_server import find_free_port
from actorq.rpc import make_channel
from actorq.v1 import control_pb2, control_pb2_grpc

HTTP_PROBE = Path(__file__).resolve().parents[2] / "deploy" / "docker" / "actorq-healthz"


def _local(env: dict[str, str], redis_url: str, quantizer: str, grpc_port: int) -> dict:
    return {
        **env,
        "ACTORQ_REDIS_URL": redis_url,
        "ACTORQ_QUANTIZER_ADDR": quantizer,
        "ACTORQ_GRPC_PORT": str(grpc_port),
        "ACTORQ_METRICS_PORT": str(find_free_port()),
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
    }


def _healthcheck(grpc_port: int) -> int:
    """Exactly the image's HEALTHCHECK command, with this service's port variable."""
    return subprocess.run(
        [sys.executable, "-m", "actorq.rpc.healthcheck", "--timeout", "1"],
        env={"ACTORQ_GRPC_PORT": str(grpc_port), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        timeout=60,
    ).returncode


def _http_probe(metrics_port: str) -> int:
    """The image's HEALTHCHECK: bash GET /healthz on the metrics port (no Python)."""
    return subprocess.run(
        [str(HTTP_PROBE), metrics_port], env={"PATH": "/usr/bin:/bin"}, capture_output=True,
        timeout=60,
    ).returncode  # fmt: skip


def _wait_healthy(port: int, proc: subprocess.Popen, log: Path) -> None:
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        assert proc.poll() is None, log.read_text()[-2000:]
        if _healthcheck(port) == 0:
            return
        time.sleep(0.5)
    raise AssertionError(f"never healthy:\n{log.read_text()[-2000:]}")


@pytest.fixture
def services(redis_url: str, redis_keys: RedisKeys, tmp_path: Path) -> Iterator[list]:
    """Quantizer + 2 actor replicas from one template; (name, process, grpc port, env)."""
    plan = plan_cluster(ClusterConfig(name="itest", actors=1, envs_per_actor=2))
    q_port = find_free_port()
    qaddr = f"127.0.0.1:{q_port}"
    prefix = {"ACTORQ_REDIS_PREFIX": redis_keys.prefix}
    q_env = {**_local(plan.by_role("quantizer")[0].environment, redis_url, qaddr, q_port)}
    template = {**plan.by_role("actor")[0].environment, "ACTORQ_ACTOR_INDEX": "-1"}
    wanted = [("quantizer", "services.quantizer", {**q_env, **prefix}, q_port)]
    for i in range(2):
        port = find_free_port()
        env = {**_local(template, redis_url, qaddr, port), **prefix, "ACTORQ_NUM_ACTORS": "2"}
        wanted.append((f"replica-{i}", "services.actor", env, port))
    started = []
    try:
        for name, module, env, port in wanted:  # all at once, as compose starts replicas
            log = tmp_path / f"{name}.log"
            with log.open("w") as out:
                proc = subprocess.Popen(
                    [sys.executable, "-m", module], env=env, stdout=out, stderr=out
                )
            started.append((name, proc, port, env, log))
        for _, proc, port, _, log in started:
            _wait_healthy(port, proc, log)
        yield started
    finally:
        for _, proc, *_ in reversed(started):
            proc.send_signal(signal.SIGTERM)
        for name, proc, *_rest, log in started:
            assert proc.wait(timeout=60) == 0, f"{name}:\n{log.read_text()[-2000:]}"


def _status(port: int) -> control_pb2.ServiceStatus:
    channel = make_channel(f"127.0.0.1:{port}")
    try:
        return control_pb2_grpc.ControlStub(channel).GetStatus(
            control_pb2.GetStatusRequest(), timeout=5
        )
    finally:
        channel.close()


def test_replicas_of_one_template_come_up_healthy_and_distinct(services) -> None:
    actors = [s for s in services if s[0].startswith("replica")]
    assert {actors[0][3]["ACTORQ_ACTOR_INDEX"], actors[1][3]["ACTORQ_ACTOR_INDEX"]} == {"-1"}
    assert all(s[3]["ACTORQ_BIND_HOST"] == "0.0.0.0" for s in services)  # as in containers
    names = {_status(port).instance_id for _, _, port, *_ in actors}
    assert names == {"actor-0", "actor-1"}
    for _, _, _, env, _ in actors:
        url = f"http://127.0.0.1:{env['ACTORQ_METRICS_PORT']}/metrics"
        page = urllib.request.urlopen(url, timeout=5).read().decode()
        assert 'instance="actor-' in page
    # The HTTP probe agrees with grpc.health.v1 on every real service (quantizer too).
    assert [_http_probe(env["ACTORQ_METRICS_PORT"]) for _, _, _, env, _ in services] == [0] * 3
    # a stopped service fails the same probes
    _, proc, port, env, _ = actors[-1]
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=60) == 0
    assert _healthcheck(port) == 1
    assert _http_probe(env["ACTORQ_METRICS_PORT"]) == 1
