"""A network partition between an actor host and the rest, made with real network namespaces.

The actor runs in its own namespace (its own "host"), joined to this machine by a veth
pair; Redis, the quantizer and the learner listen on this side's veth address. The test
cuts the link (the packets vanish, no resets: a pulled cable), holds it down, restores it,
and checks the same guarantees as for crashes: no process dies, the actor's writes wait
(the Redis client retries with backoff; after that the actor holds the batch) and are
delivered afterwards, the actor switches to policies published after the link
returned, and the learner ingests exactly what Redis acknowledged, at least what the actor
counted as acknowledged. Needs root and iproute2; skipped (with the reason) otherwise.
"""

from __future__ import annotations

import os
import random
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import grpc
import pytest
import redis

from actorq.procutil import die_with_parent
from actorq.redis_server import find_free_port, find_redis_executable
from actorq.rpc import make_channel
from actorq.v1 import control_pb2, control_pb2_grpc

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class Link:
    namespace: str
    host_if: str
    host_ip: str
    actor_ip: str

    def set(self, up: bool) -> None:
        _ip("link", "set", self.host_if, "up" if up else "down")


def _ip(*args: str, namespace: str | None = None) -> None:
    prefix = ["ip", "netns", "exec", namespace, "ip"] if namespace else ["ip"]
    subprocess.run([*prefix, *args], check=True, capture_output=True, timeout=10)


@pytest.fixture
def link() -> Iterator[Link]:
    if os.geteuid() != 0 or shutil.which("ip") is None:
        pytest.skip("network namespaces need root and iproute2's `ip`")
    tag = f"{os.getpid() % 10000}{random.randrange(100)}"
    octet = random.randrange(16, 250)
    net = Link(f"aq{tag}", f"aqh{tag}", f"10.231.{octet}.1", f"10.231.{octet}.2")
    peer = f"aqa{tag}"
    try:
        _ip("netns", "add", net.namespace)
        _ip("link", "add", net.host_if, "type", "veth", "peer", "name", peer)
        _ip("link", "set", peer, "netns", net.namespace)
        _ip("addr", "add", f"{net.host_ip}/30", "dev", net.host_if)
        _ip("link", "set", net.host_if, "up")
        _ip("addr", "add", f"{net.actor_ip}/30", "dev", peer, namespace=net.namespace)
        _ip("link", "set", peer, "up", namespace=net.namespace)
        _ip("link", "set", "lo", "up", namespace=net.namespace)
    except subprocess.CalledProcessError as exc:
        subprocess.run(["ip", "netns", "del", net.namespace], capture_output=True)
        pytest.skip(f"cannot create network namespaces here: {exc.stderr.decode().strip()}")
    yield net
    subprocess.run(["ip", "link", "del", net.host_if], capture_output=True)
    subprocess.run(["ip", "netns", "del", net.namespace], capture_output=True)


class Services:
    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self.procs: dict[str, subprocess.Popen] = {}

    def start(self, name: str, argv: list[str], env: dict[str, str]) -> None:
        log = (self.tmp / f"{name}.log").open("wb")
        self.procs[name] = subprocess.Popen(
            argv,
            cwd=ROOT,
            env={**os.environ, "PYTHONUNBUFFERED": "1", **env},
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            preexec_fn=die_with_parent,
        )
        log.close()

    def log(self, name: str) -> str:
        return (self.tmp / f"{name}.log").read_text(errors="replace")

    def alive(self) -> dict[str, int | None]:
        return {name: p.poll() for name, p in self.procs.items()}

    def close(self) -> None:
        for p in self.procs.values():
            if p.poll() is None:
                p.terminate()
        for p in self.procs.values():
            try:
                p.wait(15)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()


def _status(address: str) -> control_pb2.ServiceStatus | None:
    channel = make_channel(address)
    try:
        stub = control_pb2_grpc.ControlStub(channel)
        return stub.GetStatus(control_pb2.GetStatusRequest(), timeout=2.0)
    except grpc.RpcError:
        return None
    finally:
        channel.close()


def _wait_for(predicate: Callable[[], bool], what: str, timeout: float = 240.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.25)
    raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}")


def test_actor_partitioned_from_redis_and_quantizer_loses_nothing(link: Link, tmp_path: Path):
    redis_port, q_port, l_port, a_port = (find_free_port() for _ in range(4))
    services = Services(tmp_path)
    try:
        services.start(
            "redis",
            [
                find_redis_executable(),
                "--port",
                str(redis_port),
                "--bind",
                "127.0.0.1",
                link.host_ip,
                "--save",
                "",
                "--appendonly",
                "no",
            ],
            {},
        )
        redis_url = f"redis://{link.host_ip}:{redis_port}/0"
        client = redis.Redis.from_url(redis_url)
        _wait_for(lambda: _pings(client), "redis")
        prefix = f"partition-{os.getpid()}"
        common = {"ACTORQ_REDIS_URL": redis_url, "ACTORQ_REDIS_PREFIX": prefix}
        q_addr = f"{link.host_ip}:{q_port}"
        python = [sys.executable, "-m"]
        services.start(
            "quantizer",
            [*python, "services.quantizer"],
            {
                **common,
                "ACTORQ_BIND_HOST": link.host_ip,
                "ACTORQ_GRPC_PORT": str(q_port),
                "ACTORQ_METRICS_PORT": "0",
            },
        )
        services.start(
            "learner",
            [*python, "services.learner"],
            {
                **common,
                "ACTORQ_GRPC_PORT": str(l_port),
                "ACTORQ_METRICS_PORT": "0",
                "ACTORQ_QUANTIZER_ADDR": q_addr,
            },
        )
        services.start(
            "actor",
            ["ip", "netns", "exec", link.namespace, *python, "services.actor"],
            {
                **common,
                "ACTORQ_BIND_HOST": link.actor_ip,
                "ACTORQ_GRPC_PORT": str(a_port),
                "ACTORQ_METRICS_PORT": "0",
                "ACTORQ_QUANTIZER_ADDR": q_addr,
                "ACTORQ_ENVS_PER_ACTOR": "4",
            },
        )
        actor_addr, learner_addr = f"{link.actor_ip}:{a_port}", f"127.0.0.1:{l_port}"
        inserted_key = f"{prefix}:replay:inserted"

        def acknowledged() -> int:
            return int(client.get(inserted_key) or 0)

        def version(address: str) -> int:
            status = _status(address)
            return int(status.policy_version) if status else -1

        _wait_for(lambda: version(q_addr) >= 2 and acknowledged() > 2000, "training to start")

        link.set(up=False)  # the actor host drops off the network
        time.sleep(2.0)  # let in-flight writes land
        during = acknowledged()
        time.sleep(15.0)
        assert acknowledged() == during, "the cut link still carried replay writes"
        assert _status(actor_addr) is None  # unreachable from this side
        version_at_restore = version(q_addr)
        link.set(up=True)

        _wait_for(lambda: acknowledged() > during + 1000, "the actor to deliver again")
        _wait_for(
            lambda: version(actor_addr) > version_at_restore,
            "the actor to switch to a policy published after the link returned",
        )
        assert all(code is None for code in services.alive().values()), services.alive()

        stub = control_pb2_grpc.ControlStub(make_channel(actor_addr))
        stub.Stop(control_pb2.StopRequest(reason="test: drain"), timeout=5.0)
        services.procs["actor"].wait(60)
        total = acknowledged()

        def ingested() -> float:
            status = _status(learner_addr)
            return status.counters["replay_inserted"] if status else -1.0

        _wait_for(lambda: ingested() >= total, f"the learner to ingest all {total}")
        assert ingested() == total
        logged = re.findall(r"(\d+) transitions acknowledged by Redis", services.log("actor"))
        assert len(logged) == 1 and 0 < int(logged[0]) <= total
    finally:
        services.close()


def _pings(client: redis.Redis) -> bool:
    try:
        return bool(client.ping())
    except redis.RedisError:
        return False
