"""The launcher's restart rules, with real child processes that exit with chosen codes."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from actorq.launch.processes import ServiceProcess
from actorq.launch.supervisor import RestartPolicy, Supervisor

FAST = RestartPolicy(initial_backoff=0.05, max_backoff=0.2, max_restarts=3)


def _proc(tmp_path: Path, name: str, code: int, lifetime: float = 0.0) -> ServiceProcess:
    (tmp_path / "exiter.py").write_text(
        "import os, sys, time\n"
        "time.sleep(float(os.environ['LIFETIME']))\n"
        "sys.exit(int(os.environ['EXIT_CODE']))\n"
    )
    env = {"PYTHONPATH": str(tmp_path), "EXIT_CODE": str(code), "LIFETIME": str(lifetime)}
    return ServiceProcess(name, "exiter", env, tmp_path / f"{name}.log", grpc_port=0)


def _run_until(supervisor: Supervisor, done, timeout: float = 20.0) -> str | None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        failure = supervisor.check()
        if failure is not None or done():
            return failure
        time.sleep(0.02)
    raise AssertionError("supervisor never got there")


def test_crashing_service_is_restarted_with_backoff_then_fails_the_run(tmp_path):
    proc = _proc(tmp_path, "quantizer", code=1)
    proc.start()
    events: list[str] = []
    sup = Supervisor({"quantizer": [proc]}, lambda p, c: False, FAST, on_event=events.append)
    failure = _run_until(sup, lambda: False)
    assert failure is not None and "after 3 restarts" in failure
    assert sup.restarts["quantizer"] == 3
    assert sum("restarting in" in e for e in events) == 3


def test_configuration_error_is_not_restarted(tmp_path):
    proc = _proc(tmp_path, "learner", code=2)
    proc.start()
    sup = Supervisor({"learner": [proc]}, lambda p, c: False, FAST, on_event=lambda m: None)
    failure = _run_until(sup, lambda: False)
    assert failure is not None and "configuration error" in failure
    assert sup.restarts["learner"] == 0


def test_finished_actor_is_left_alone(tmp_path):
    proc = _proc(tmp_path, "actor-0", code=0)
    proc.start()
    sup = Supervisor({"actor-0": [proc]}, lambda p, c: c == 0, FAST, on_event=lambda m: None)
    assert _run_until(sup, lambda: sup.finished(["actor-0"])) is None
    assert sup.restarts == {}


def test_a_group_restarts_together_when_one_member_dies(tmp_path):
    dying = _proc(tmp_path, "learner", code=1)
    survivor = _proc(tmp_path, "learner-1", code=0, lifetime=60)
    for p in (dying, survivor):
        p.start()
    first_pid = survivor.pid
    sup = Supervisor(
        {"learner": [dying, survivor]}, lambda p, c: False, FAST, on_event=lambda m: None
    )
    _run_until(sup, lambda: sup.restarts["learner"] == 1)
    assert survivor.pid != first_pid  # stopped and started again with its rank 0
    for p in (dying, survivor):
        p.proc.kill()
        p.proc.wait()


@pytest.mark.parametrize("restarts,expected", [(0, 0.05), (1, 0.1), (2, 0.2), (5, 0.2)])
def test_backoff_doubles_up_to_the_cap(restarts, expected):
    assert FAST.backoff(restarts) == pytest.approx(expected)
