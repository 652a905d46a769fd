"""Network namespaces joined by shaped veth links (actorq.testing.netns), as bench_links
uses them: namespaces are made and removed, tbf limits a real TCP transfer, and a process
in an actor namespace reaches Redis and a gRPC service in the hub namespace."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from actorq.launch.processes import ServiceProcess
from actorq.testing.netns import (
    PREFIX,
    LinkShape,
    NetnsLab,
    exec_prefix,
    ip,
    list_namespaces,
    remove_stale,
    unavailable_reason,
)

ROOT = Path(__file__).resolve().parents[2]
REASON = unavailable_reason()
needs_netns = pytest.mark.skipif(bool(REASON), reason=REASON or "namespaces available")


def _ours() -> list[str]:
    return [n for n in list_namespaces() if n.startswith(f"{PREFIX}{os.getpid()}-")]


def _in_ns(namespace: str, code: str, timeout: float = 30) -> subprocess.CompletedProcess:
    argv = [*exec_prefix(namespace), sys.executable, "-c", textwrap.dedent(code)]
    return subprocess.run(argv, capture_output=True, text=True, timeout=timeout, cwd=ROOT)


def test_link_shape_refuses_bad_values() -> None:
    with pytest.raises(
        ValueError, match=re.escape("rate_mbit: expected 0.01..100000 Mbit/s, got -5")
    ):
        LinkShape(rate_mbit=-5)
    with pytest.raises(ValueError, match=re.escape("delay_ms: expected 0..10000 ms, got -1")):
        LinkShape(rate_mbit=20, delay_ms=-1)


@needs_netns
def test_lab_makes_and_removes_its_namespaces() -> None:
    with NetnsLab() as lab:
        a = lab.add_spoke("a0", LinkShape(rate_mbit=50))
        b = lab.add_spoke("a1", LinkShape())
        assert sorted(_ours()) == sorted([lab.hub, a.spoke, b.spoke])
        assert a.hub_addr != b.hub_addr and a.spoke_addr.endswith(".2")
        qdisc = subprocess.run([*exec_prefix(a.spoke), "tc", "qdisc", "show", "dev", "eth0"],
                               capture_output=True, text=True, check=True).stdout  # fmt: skip
        assert "tbf" in qdisc and "50Mbit" in qdisc
    assert _ours() == []


@needs_netns
def test_stale_namespaces_of_dead_processes_are_removed() -> None:
    dead = 4_000_000  # above any pid_max this kernel allows by default
    name = f"{PREFIX}{dead}-hub"
    ip("netns", "add", name)
    live = NetnsLab()
    try:
        live.make_hub()
        removed = remove_stale()
        assert name in removed and name not in list_namespaces()
        assert live.hub in list_namespaces()  # ours: its process runs
    finally:
        live.close()
        ip("netns", "del", name, check=False)


_SERVER = """
import socket, time
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("{addr}", 5001)); s.listen(1); s.settimeout(20)
c, _ = s.accept(); n = 0; t0 = None
while True:
    d = c.recv(1 << 16)
    if not d: break
    t0 = t0 or time.perf_counter(); n += len(d)
print(n * 8 / (time.perf_counter() - t0) / 1e6)
"""

_CLIENT = """
import socket, time
for _ in range(50):
    try:
        c = socket.create_connection(("{addr}", 5001)); break
    except OSError:
        time.sleep(0.1)
b = b"x" * 65536; t = time.perf_counter()
while time.perf_counter() - t < {seconds}: c.sendall(b)
c.close()
"""


def _throughput_mbit(lab: NetnsLab, rate: float | None, seconds: float = 1.5) -> float:
    link = lab.add_spoke(f"t{len(lab.links)}", LinkShape(rate_mbit=rate))
    server = subprocess.Popen(
        [*exec_prefix(lab.hub), sys.executable, "-c", _SERVER.format(addr=link.hub_addr)],
        stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        client = _in_ns(link.spoke, _CLIENT.format(addr=link.hub_addr, seconds=seconds))
        assert client.returncode == 0, client.stderr
        out, _ = server.communicate(timeout=20)
    finally:
        server.kill()
    return float(out)


@needs_netns
def test_tbf_limits_a_real_tcp_transfer() -> None:
    with NetnsLab() as lab:
        shaped = _throughput_mbit(lab, 20.0)
        faster = _throughput_mbit(lab, 200.0)
    print(f"TCP over the 20 Mbit/s link: {shaped:.1f} Mbit/s; over 200 Mbit/s: {faster:.1f}")
    assert 14.0 <= shaped <= 21.5
    assert faster > 3 * shaped


@needs_netns
def test_actor_namespace_reaches_hub_redis_and_grpc(tmp_path: Path) -> None:
    with NetnsLab() as lab:
        link = lab.add_spoke("a0", LinkShape(rate_mbit=100))
        redis_proc = subprocess.Popen(
            [*exec_prefix(lab.hub), "redis-server", "--port", "6379", "--bind", link.hub_addr,
             "--save", "", "--appendonly", "no", "--protected-mode", "no", "--dir", str(tmp_path)],
            stdout=subprocess.DEVNULL,
        )  # fmt: skip
        quantizer = ServiceProcess(
            "quantizer",
            "services.quantizer",
            {
                "ACTORQ_REDIS_URL": f"redis://{link.hub_addr}:6379/0",
                "ACTORQ_BIND_HOST": "0.0.0.0",
                "ACTORQ_GRPC_PORT": "50051",
                "ACTORQ_METRICS_PORT": "-1",
            },
            tmp_path / "quantizer.log",
            50051,
            wrapper=exec_prefix(lab.hub),
        )
        try:
            quantizer.start()
            reply = _reach(link.spoke, link.hub_addr)
            assert reply.returncode == 0, reply.stderr + quantizer.tail()
            assert reply.stdout.split() == ["redis", "True", "grpc", "SERVING"]
            # The root namespace cannot: the link's addresses exist only inside the lab.
            assert link.hub_addr not in ip("-4", "addr", "show").stdout
        finally:
            quantizer.terminate()
            quantizer.wait_stopped(10)
            redis_proc.terminate()
            redis_proc.wait(10)
    assert _ours() == []


def _reach(spoke: str, hub_addr: str) -> subprocess.CompletedProcess:
    """From the actor namespace: PING the hub's Redis, then the quantizer's gRPC health."""
    code = f"""
    import time, grpc, redis
    from grpc_health.v1 import health_pb2, health_pb2_grpc
    from actorq.rpc import make_channel
    client = redis.Redis(host="{hub_addr}", port=6379, socket_timeout=5)
    for _ in range(100):
        try:
            print("redis", client.ping()); break
        except redis.ConnectionError:
            time.sleep(0.1)
    stub = health_pb2_grpc.HealthStub(make_channel("{hub_addr}:50051"))
    deadline = time.monotonic() + 60
    while True:
        try:
            r = stub.Check(health_pb2.HealthCheckRequest(), timeout=1)
            if r.status == health_pb2.HealthCheckResponse.SERVING:
                break
        except grpc.RpcError:
            if time.monotonic() > deadline:
                raise
        time.sleep(0.2)
    print("grpc", health_pb2.HealthCheckResponse.ServingStatus.Name(r.status))
    """
    return _in_ns(spoke, code, timeout=90)
