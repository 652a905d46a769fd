"""Children are exec'd through util-linux wrappers (actorq.procutil.bound_to_parent), not a
Python pre-exec function: an embedded redis-server still dies with the process that
started it, runs on the cores it was given, and its pid is the server's own; without the
wrappers the pre-exec function does the same."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from actorq.procutil import bound_to_parent, die_with_parent

STARTER = """
import sys, time
from actorq.redis_server import EmbeddedRedis
server = EmbeddedRedis(cpus=(CPU,)).start()
print(server.pid, flush=True)
time.sleep(600)
"""


def test_the_wrappers_set_the_parent_death_signal_niceness_and_cores() -> None:
    prefix, preexec = bound_to_parent(5, (0, 3))
    assert preexec is None and prefix[0].endswith("setpriv")
    assert prefix[1:4] == ["--pdeathsig", "KILL", "--"]
    assert prefix[4].endswith("nice") and prefix[5:7] == ["-n", "5"]
    assert prefix[7].endswith("taskset") and prefix[8:] == ["--cpu-list", "0,3"]
    assert bound_to_parent()[0][4:] == []  # nothing else asked: setpriv alone


def test_without_the_wrappers_the_pre_exec_function_does_it(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))  # no setpriv here
    prefix, preexec = bound_to_parent(5, (1,))
    assert prefix == [] and preexec is not None
    assert preexec.func is die_with_parent and preexec.args == (5,)  # type: ignore[attr-defined]
    assert preexec.keywords == {"cpus": (1,)}  # type: ignore[attr-defined]


def test_redis_dies_with_the_process_that_started_it() -> None:
    cpu = max(os.sched_getaffinity(0))
    starter = subprocess.Popen(
        [sys.executable, "-c", STARTER.replace("CPU", str(cpu))],
        stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        pid = int(starter.stdout.readline())  # type: ignore[union-attr]
        assert Path(f"/proc/{pid}/comm").read_text().strip() == "redis-server"
        assert os.sched_getaffinity(pid) == {cpu}
        starter.send_signal(signal.SIGKILL)  # no atexit, no stop(): only the kernel's signal
        starter.wait(timeout=10)
        deadline = time.monotonic() + 10
        while Path(f"/proc/{pid}").exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        if Path(f"/proc/{pid}").exists():
            state = Path(f"/proc/{pid}/stat").read_text().split()[2]
            if state != "Z":  # a zombie awaiting its reaper is dead already
                os.kill(pid, signal.SIGKILL)
                pytest.fail(f"redis-server {pid} outlived the process that started it")
    finally:
        if starter.poll() is None:
            starter.kill()
        starter.stdout.close()  # type: ignore[union-attr]
