"""Faults survived by `actorq run`: real processes, real Redis, SIGKILL.

Each test kills one part of a running cluster and checks what the reliability issue asks:
the launcher restarts it (with backoff, counted in summary.json), training goes on, and
no transition Redis acknowledged is lost: at the end the actors are stopped and the
learner must have ingested exactly what Redis counted as acknowledged, which is at least
what the actors themselves counted.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import grpc
import pytest
import redis

from actorq.rpc import make_channel
from actorq.v1 import control_pb2, control_pb2_grpc

pytestmark = pytest.mark.e2e

WAIT = 240.0  # seconds; generous because CI machines are small and shared


class Cluster:
    """An `actorq run` in the background, and ways to look inside and break it."""

    def __init__(self, run_dir: Path, extra_env: dict[str, str] | None = None) -> None:
        self.run_dir = run_dir
        args = ["--actors", "2", "--envs-per-actor", "4", "--eval-envs", "5"]
        args += ["--target-return", "none", "--max-seconds", "900", "--run-dir", str(run_dir)]
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "actorq", "run", *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            text=True,
            env={**os.environ, **(extra_env or {})},
        )
        self.config = self._wait_json("config.json")
        self.services = self.config["services"]
        self._stubs: dict[str, control_pb2_grpc.ControlStub] = {}

    def _wait_json(self, name: str) -> dict:
        path = self.run_dir / name
        wait_for(path.exists, f"{name} to appear", proc=self.proc)
        return json.loads(path.read_text())

    def pids(self) -> dict[str, dict]:
        return self._wait_json("services.json")

    def status(self, name: str) -> control_pb2.ServiceStatus | None:
        if name not in self._stubs:
            channel = make_channel(self.services[name]["grpc"])
            self._stubs[name] = control_pb2_grpc.ControlStub(channel)
        try:
            return self._stubs[name].GetStatus(control_pb2.GetStatusRequest(), timeout=2.0)
        except grpc.RpcError:
            return None

    def counter(self, name: str, counter: str) -> float:
        status = self.status(name)
        return status.counters.get(counter, -1.0) if status else -1.0

    def version(self, name: str = "quantizer") -> int:
        status = self.status(name)
        return int(status.policy_version) if status else -1

    def kill(self, name: str) -> int:
        pid = int(self.pids()[name]["pid"])
        os.kill(pid, signal.SIGKILL)
        return pid

    def wait_restarted(self, name: str, old_pid: int) -> None:
        def restarted() -> bool:
            entry = self.pids().get(name, {})
            return entry.get("pid") not in (None, old_pid) and entry.get("restarts", 0) >= 1

        wait_for(restarted, f"{name} to be restarted", proc=self.proc)

    def redis(self) -> redis.Redis:
        return redis.Redis.from_url(self.config["redis_url"])

    def acknowledged_in_redis(self) -> int:
        key = f"{self.config['redis_prefix']}:replay:inserted"
        return int(self.redis().get(key) or 0)

    def stop_actors(self) -> None:
        for name in ("actor-0", "actor-1"):
            stub = control_pb2_grpc.ControlStub(make_channel(self.services[name]["grpc"]))
            stub.Stop(control_pb2.StopRequest(reason="test: drain"), timeout=5.0)
        for name in ("actor-0", "actor-1"):
            pid = int(self.pids()[name]["pid"])
            wait_for(lambda p=pid: not _alive(p), f"{name} to exit", proc=self.proc)

    def assert_nothing_acknowledged_lost(self) -> None:
        """Stop the actors, let the learner drain the stream, compare the three counts.

        With every actor stopped the launcher may end the run (its actors are done); the
        learner then drains the stream before it stops and logs its final count.
        """
        self.stop_actors()
        acknowledged = self.acknowledged_in_redis()
        wait_for(
            lambda: (self.ingested() or 0) >= acknowledged,
            f"the learner to ingest all {acknowledged} acknowledged transitions",
        )
        assert self.ingested() == acknowledged
        assert sum(self.actor_logged_acks()) <= acknowledged

    def ingested(self) -> int | None:
        """The learner's ingested count: live while the run goes on, else its last log line."""
        if self.proc.poll() is None:
            value = self.counter("learner", "replay_inserted")
            if value >= 0:
                return int(value)
        text = (self.run_dir / "logs" / "learner.log").read_text(errors="replace")
        found = re.findall(r"(\d+) transitions ingested", text)
        return int(found[-1]) if found and self.proc.poll() is not None else None

    def actor_logged_acks(self) -> list[int]:
        """Transitions each actor life that exited cleanly counted as acknowledged."""
        pattern = re.compile(r"(\d+) transitions acknowledged by Redis")
        counts = []
        for name in ("actor-0", "actor-1"):
            text = (self.run_dir / "logs" / f"{name}.log").read_text(errors="replace")
            counts += [int(m) for m in pattern.findall(text)]
        return counts

    def finish(self) -> dict:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        output, _ = self.proc.communicate(timeout=180)
        assert self.proc.returncode in (0, 130), output[-3000:]
        return json.loads((self.run_dir / "summary.json").read_text())

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.communicate(timeout=30)
        if self.proc.stdout is not None:  # a failed wait read it but left it open: its
            self.proc.stdout.close()  # finalizer would fail whichever test runs next


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a zombie still answers kill(0); its state letter in /proc says so
    stat = Path(f"/proc/{pid}/stat").read_text()
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def wait_for(predicate: Callable[[], bool], what: str, timeout: float = WAIT, proc=None) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        if proc is not None and proc.poll() is not None:
            output = proc.stdout.read() if proc.stdout else ""
            raise AssertionError(f"actorq run exited while waiting for {what}:\n{output[-3000:]}")
        time.sleep(0.25)
    raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}")


@pytest.fixture
def cluster_factory(tmp_path: Path):
    made: list[Cluster] = []

    def make(name: str, extra_env: dict[str, str] | None = None) -> Cluster:
        cluster = Cluster(tmp_path / name, extra_env)
        made.append(cluster)
        wait_for(lambda: cluster.version() >= 2, "policy version 2", proc=cluster.proc)
        return cluster

    yield make
    for cluster in made:
        cluster.close()


def test_killed_actor_is_restarted_and_picks_up_the_latest_policy(cluster_factory) -> None:
    c = cluster_factory("actor-killed")
    updates_before = c.counter("learner", "updates")
    old = c.kill("actor-0")
    c.wait_restarted("actor-0", old)
    version_at_restart = c.version()
    wait_for(
        lambda: (
            c.version("actor-0") >= version_at_restart and c.counter("actor-0", "env_steps") > 0
        ),
        "the restarted actor to act on the latest policy",
        proc=c.proc,
    )
    wait_for(lambda: c.counter("learner", "updates") > updates_before, "training to go on")
    c.assert_nothing_acknowledged_lost()
    summary = c.finish()
    assert summary["restarts"] == {"actor-0": 1}


def test_killed_learner_resumes_from_its_checkpoint(cluster_factory) -> None:
    c = cluster_factory("learner-killed", {"ACTORQ_CHECKPOINT_EVERY": "100"})
    meta_path = c.run_dir / "checkpoints" / "checkpoint.json"
    wait_for(meta_path.exists, "a first checkpoint", proc=c.proc)
    version_before = c.version()
    old = c.kill("learner")
    checkpoint = json.loads(meta_path.read_text())
    c.wait_restarted("learner", old)
    wait_for(lambda: c.status("learner") is not None, "the new learner to answer", proc=c.proc)
    # resumed, not started over: its update count starts at the checkpoint's
    assert c.counter("learner", "updates") >= checkpoint["updates"] > 0
    log = (c.run_dir / "logs" / "learner.log").read_text()
    assert "resumed from" in log
    rebuilt = [int(n) for n in re.findall(r"rebuilt from Redis: (\d+) transitions", log)]
    assert len(rebuilt) == 2 and rebuilt[1] > 0  # the restart got the replay back
    # versions keep increasing: the new learner continues after what Redis holds
    wait_for(lambda: c.version() > version_before + 1, "new policy versions", proc=c.proc)
    c.assert_nothing_acknowledged_lost()
    summary = c.finish()
    assert summary["restarts"] == {"learner": 1}
    assert summary["policy_versions"] > version_before


def test_killed_ingest_process_restarts_the_learner_and_loses_nothing(cluster_factory) -> None:
    # ACTORQ_INGEST=process: the learner's ingest child dies; the learner must stop loudly
    # (exit 1, not train on a mirror nobody fills), be restarted, and rebuild its replay.
    c = cluster_factory("ingest-killed", {"ACTORQ_INGEST": "process"})
    learner = int(c.pids()["learner"]["pid"])
    children = Path(f"/proc/{learner}/task/{learner}/children").read_text().split()
    ingest = next(
        int(pid) for pid in children
        if "actorq.learner.ingest_process" in Path(f"/proc/{pid}/cmdline").read_text()
    )  # fmt: skip
    os.kill(ingest, signal.SIGKILL)
    c.wait_restarted("learner", learner)
    wait_for(lambda: c.status("learner") is not None, "the new learner to answer", proc=c.proc)
    log_path = c.run_dir / "logs" / "learner.log"
    started = re.compile(r"ingest process \d+ started")
    wait_for(
        lambda: len(started.findall(log_path.read_text())) == 2,
        "the new learner's ingest process", proc=c.proc,
    )  # fmt: skip
    log = log_path.read_text()
    assert "the ingest process exited with status -9 while the learner ran" in log
    c.assert_nothing_acknowledged_lost()
    summary = c.finish()
    assert summary["restarts"] == {"learner": 1}


def test_actors_keep_acting_while_the_quantizer_is_down(cluster_factory) -> None:
    c = cluster_factory("quantizer-killed")
    version_before = c.version()
    steps_before = c.counter("actor-0", "env_steps")
    old = c.kill("quantizer")
    wait_for(
        lambda: c.counter("actor-0", "env_steps") > steps_before + 100,
        "actors to keep acting on their last policy",
        timeout=60,
    )
    assert c.version("actor-0") >= 1
    c.wait_restarted("quantizer", old)
    wait_for(
        lambda: c.version("actor-0") > version_before,
        "actors to switch to a version published after the quantizer returned",
        timeout=120,
        proc=c.proc,
    )
    c.assert_nothing_acknowledged_lost()
    summary = c.finish()
    assert summary["restarts"] == {"quantizer": 1}


def test_redis_killed_and_restarted_loses_nothing_acknowledged(cluster_factory) -> None:
    c = cluster_factory("redis-killed")
    acknowledged_before = c.acknowledged_in_redis()
    assert acknowledged_before > 0
    old = c.kill("redis")
    c.wait_restarted("redis", old)
    # the append-only file brought back everything acknowledged before the kill
    assert c.acknowledged_in_redis() >= acknowledged_before
    updates = c.counter("learner", "updates")
    wait_for(
        lambda: (
            c.acknowledged_in_redis() > acknowledged_before + 500
            and c.counter("learner", "updates") > updates
        ),
        "actors and learner to carry on after reconnecting",
        proc=c.proc,
    )
    c.assert_nothing_acknowledged_lost()
    summary = c.finish()
    assert summary["restarts"] == {"redis": 1}  # no service crashed
