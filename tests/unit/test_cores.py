"""actorq.launch.cores: which cores `actorq run --pin-learner on` gives the learner."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from actorq.config import ConfigError, RunSettings
from actorq.launch.cores import (
    CoreSharing,
    child_pids,
    learner_on_cpu,
    pin,
    plan_cores,
    set_process_cores,
)
from actorq.launch.plan import _plan
from actorq.procutil import INGEST_CORES_ENV, format_cores, parse_cores

ONE_THREAD = {"ACTORQ_TORCH_THREADS": "1"}
PIN = RunSettings(pin_learner="on")


def test_two_cores_give_the_learner_the_last_and_the_rest_the_first() -> None:
    layout = plan_cores(PIN, True, {0, 1}, ONE_THREAD)
    assert layout is not None
    assert layout.learners == ((1,),) and layout.others == (0,)
    assert layout.describe() == "learner on core(s) 1, other services on 0"


def test_torch_threads_and_ranks_each_get_cores_of_their_own() -> None:
    wide = plan_cores(PIN, True, set(range(16)), {"ACTORQ_TORCH_THREADS": "2"})
    assert wide is not None and wide.learners == ((14, 15),) and wide.others == tuple(range(14))
    ranks = plan_cores(RunSettings(learners=3, pin_learner="on"), True, set(range(16)), ONE_THREAD)
    assert ranks is not None and ranks.learners == ((13,), (14,), (15,))
    assert ranks.describe() == "learner on core(s) 13; 14; 15, other services on 0-12"


def test_the_default_pins_a_cpu_learner_and_shares_its_core_while_it_waits() -> None:
    layout = plan_cores(RunSettings(), True, {0, 1}, ONE_THREAD)
    assert layout is not None and layout.learners == ((1,),) and layout.others == (0,)
    assert RunSettings().pin_learner == "auto"  # the launcher's CoreSharing applies


def test_cores_this_process_may_not_use_are_never_given() -> None:
    layout = plan_cores(PIN, True, {2, 5, 7}, ONE_THREAD)
    assert layout is not None and layout.learners == ((7,),) and layout.others == (2, 5)


@pytest.mark.parametrize(
    ("settings", "on_cpu", "cores", "why"),
    [
        (RunSettings(pin_learner="off"), True, {0, 1}, "off when asked"),
        (PIN, False, {0, 1}, "a GPU learner: not measured"),
        (PIN, True, {0}, "nothing left for the other services"),
        (
            RunSettings(learners=2, pin_learner="on"),
            True,
            {0, 1},
            "nothing left for the other services",
        ),
    ],
)
def test_no_pinning_where_it_does_not_apply(
    settings: RunSettings, on_cpu: bool, cores: set[int], why: str
) -> None:
    assert plan_cores(settings, on_cpu, cores, ONE_THREAD) is None, why


def test_bad_values_are_refused_with_what_is_expected() -> None:
    with pytest.raises(ConfigError, match=r"--pin-learner: expected auto, on or off, got 'x'"):
        RunSettings(pin_learner="x")
    with pytest.raises(ConfigError, match=r"ACTORQ_TORCH_THREADS: expected .* got 'two'"):
        plan_cores(PIN, True, {0, 1}, {"ACTORQ_TORCH_THREADS": "two"})


def test_pin_puts_every_planned_service_on_its_cores(tmp_path) -> None:
    settings = RunSettings(actors=3, learners=2, pin_learner="on")
    cluster = _plan(settings, tmp_path, "redis://127.0.0.1:1/0", "p")
    layout = plan_cores(settings, True, set(range(8)), ONE_THREAD)
    pin(cluster, layout)
    assert [p.cpus for p in cluster.learners] == [(6,), (7,)]
    others = [p for p in cluster.all if p not in cluster.learners]
    assert len(others) == 5 and all(p.cpus == tuple(range(6)) for p in others)
    # an ingest process of a learner (ACTORQ_INGEST=process) goes with the others
    assert all(p.env[INGEST_CORES_ENV] == "0-5" for p in cluster.learners)
    assert all(INGEST_CORES_ENV not in p.env for p in others)


def test_an_ingest_process_no_longer_turns_pinning_off() -> None:
    layout = plan_cores(RunSettings(ingest="process", pin_learner="on"), True, {0, 1}, ONE_THREAD)
    assert layout is not None and layout.learners == ((1,),) and layout.others == (0,)


@pytest.mark.parametrize("cores", [(0,), (0, 1, 2, 3), (0, 2, 3, 7), (5, 6, 9, 10, 11)])
def test_core_lists_read_back_as_written(cores: tuple[int, ...]) -> None:
    assert parse_cores(format_cores(cores)) == cores
    assert format_cores((0, 1, 2, 3, 6)) == "0-3,6"


@pytest.mark.parametrize("text", ["", "a", "1-", "4-2", "-1", "0,,1"])
def test_a_bad_core_list_is_refused_naming_it(text: str) -> None:
    with pytest.raises(ValueError, match=f"expected a core list such as 0-3,6, got {text!r}"):
        parse_cores(text)


def test_auto_device_counts_as_cpu_only_without_an_nvidia_device_node(tmp_path) -> None:
    assert learner_on_cpu(RunSettings(learner_device="cpu"), tmp_path)
    assert not learner_on_cpu(RunSettings(learner_device="cuda"), tmp_path)
    assert learner_on_cpu(RunSettings(learner_device="auto"), tmp_path)
    (tmp_path / "nvidiactl").touch()  # the control node alone is no GPU
    assert learner_on_cpu(RunSettings(learner_device="auto"), tmp_path)
    (tmp_path / "nvidia0").touch()
    assert not learner_on_cpu(RunSettings(learner_device="auto"), tmp_path)
    assert learner_on_cpu(RunSettings(learner_device="auto", learners=2), tmp_path)


class _Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def _sharing(pids: list[int]) -> tuple[CoreSharing, _Clock, dict[int, tuple[int, ...]]]:
    layout = plan_cores(PIN, True, {0, 1, 2, 3}, ONE_THREAD)
    assert layout is not None
    clock, placed = _Clock(), {}
    sharing = CoreSharing(
        layout, lambda: list(pids), patience=3, clock=clock, set_cores=placed.__setitem__
    )
    return sharing, clock, placed


def _polls(
    sharing: CoreSharing, clock: _Clock, wait: float, share: float, n: int
) -> tuple[list, float]:
    """n polls of 0.5 s in which the learner waited `share` of the time."""
    said = []
    for _ in range(n):
        clock.now += 0.5
        wait += 0.5 * share
        said.append(sharing.observe(wait))
    return said, wait


def test_others_share_the_learner_core_while_it_waits_and_leave_when_it_is_busy() -> None:
    pids = [11, 12]
    sharing, clock, placed = _sharing(pids)
    said, wait = _polls(sharing, clock, 0.0, 0.0, 5)  # busy learner: nothing changes
    assert sharing.exclusive and placed == {11: (0, 1, 2), 12: (0, 1, 2)} and not any(said)
    said, wait = _polls(sharing, clock, wait, 0.6, 2)  # two waiting polls: not yet
    assert sharing.exclusive and not any(said)
    said, wait = _polls(sharing, clock, wait, 0.6, 1)  # the third in a row: share
    assert not sharing.exclusive and "every core" in said[-1]
    assert placed == {11: (0, 1, 2, 3), 12: (0, 1, 2, 3)}
    pids.append(13)  # a restarted service comes up on its start-up cores: put it in line
    said, wait = _polls(sharing, clock, wait, 0.2, 4)  # between the thresholds: stay
    assert not sharing.exclusive and placed[13] == (0, 1, 2, 3)
    said, wait = _polls(sharing, clock, wait, 0.0, 3)  # busy again: back to exclusive
    assert sharing.exclusive and "back on 0-2" in said[-1] and sharing.switches == 2
    assert set(placed.values()) == {(0, 1, 2)}


def test_one_waiting_poll_among_busy_ones_changes_nothing() -> None:
    sharing, clock, _ = _sharing([11])
    wait = 0.0
    for share in (0.9, 0.0, 0.9, 0.9, 0.0, 0.9):
        _, wait = _polls(sharing, clock, wait, share, 1)
    assert sharing.exclusive and sharing.switches == 0


def test_set_process_cores_moves_every_thread_of_a_real_process() -> None:
    allowed = sorted(os.sched_getaffinity(0))
    if len(allowed) < 2:
        pytest.skip(f"needs 2 cores to move a thread between; this process may use {allowed}")
    code = "import threading, time\n"
    code += (
        "[threading.Thread(target=time.sleep, args=(30,), daemon=True).start() for _ in range(3)]\n"
    )
    code += "print('ready', flush=True); time.sleep(30)\n"
    child = subprocess.Popen(
        [sys.executable, "-c", code], stdout=subprocess.PIPE, text=True, stdin=subprocess.DEVNULL
    )
    try:
        assert child.stdout is not None and child.stdout.readline().strip() == "ready"
        set_process_cores(child.pid, (allowed[0],))
        tids = [int(t) for t in os.listdir(f"/proc/{child.pid}/task")]
        assert len(tids) >= 4
        assert all(os.sched_getaffinity(t) == {allowed[0]} for t in tids)
        set_process_cores(999_999_999, (allowed[0],))  # gone: skipped, no error
    finally:
        child.kill()
        child.wait()
        if child.stdout is not None:
            child.stdout.close()


def test_child_pids_finds_a_real_processs_children_and_nothing_once_it_is_gone() -> None:
    """`--pin-learner auto` moves a learner's ingest process with the other services: the
    launcher finds it as the learner's child."""
    code = "import subprocess, sys, time\n"
    code += "c = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(30)'])\n"
    code += "print(c.pid, flush=True); time.sleep(30)\n"
    parent = subprocess.Popen(
        [sys.executable, "-c", code], stdout=subprocess.PIPE, text=True, stdin=subprocess.DEVNULL
    )
    try:
        assert parent.stdout is not None
        grandchild = int(parent.stdout.readline())
        assert child_pids(parent.pid) == [grandchild]
        assert child_pids(grandchild) == []
    finally:
        os.kill(grandchild, 9)
        parent.kill()
        parent.wait()
        parent.stdout.close()
    assert child_pids(parent.pid) == []  # reaped: no /proc entry
