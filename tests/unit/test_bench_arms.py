"""bench/arms.py: arms as the benches name them, and a stopped bench takes its run down with it
(real processes)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"

# Stands for `actorq run`: records its pid, and on SIGTERM records that it shut down.
_RUN = """
import os, pathlib, signal, sys, time
def stop(*_):
    pathlib.Path(sys.argv[2]).write_text("1")
    sys.exit(0)
signal.signal(signal.SIGTERM, stop)
pathlib.Path(sys.argv[1]).write_text(str(os.getpid()))
time.sleep(60)
"""

# Stands for a bench: runs that run through run_quietly.
_BENCH = """
import sys
sys.path.insert(0, sys.argv[1])
from arms import run_quietly
run_quietly([sys.executable, *sys.argv[2:]], {})
"""


def test_stopping_a_bench_stops_its_run_gracefully(tmp_path) -> None:
    run, pid_file, stopped = tmp_path / "run.py", tmp_path / "run.pid", tmp_path / "stopped"
    run.write_text(_RUN)
    cmd = [sys.executable, "-c", _BENCH, str(BENCH), str(run), str(pid_file), str(stopped)]
    bench = subprocess.Popen(cmd)
    deadline = time.monotonic() + 30
    while not pid_file.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    run_pid = int(pid_file.read_text())
    bench.send_signal(signal.SIGTERM)
    assert bench.wait(timeout=30) != 0  # the bench stops, with the interrupt
    assert stopped.exists(), "the run got no SIGTERM to shut down on"
    try:
        os.kill(run_pid, 0)
    except ProcessLookupError:
        return
    os.kill(run_pid, signal.SIGKILL)
    raise AssertionError(f"the run (pid {run_pid}) outlived its bench")


def test_an_arm_may_carry_several_settings() -> None:
    sys.path.insert(0, str(BENCH))
    from arms import arm_env, split_arms

    arms = split_arms("int8@ACTORQ_X=1,ACTORQ_Y=2,int8,fp32@ACTORQ_Z=3")
    assert arms == ["int8@ACTORQ_X=1,ACTORQ_Y=2", "int8", "fp32@ACTORQ_Z=3"]
    assert arm_env(arms[0]) == ("int8", {"ACTORQ_X": "1", "ACTORQ_Y": "2"})


def test_an_arm_named_twice_is_refused_before_anything_runs() -> None:
    sys.path.insert(0, str(BENCH))
    from arms import split_arms

    with pytest.raises(SystemExit, match="int8 named twice"):
        split_arms("int8,fp32,int8")
    assert split_arms("int8,int8@ACTORQ_X=1") == ["int8", "int8@ACTORQ_X=1"]
