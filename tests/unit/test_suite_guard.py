"""The suite's guard (tests/conftest.py) fails a test that leaves a process-wide setting
changed or a process running, puts the setting back and kills the process, so that the
tests after it run as they would alone."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest_plugins = ["pytester"]

CONFTEST = Path(__file__).resolve().parent.parent / "conftest.py"

LEAKY = """
import os
import subprocess

import torch

from actorq.denormals import denormals_flushed, flush_denormals


def test_leaves_one_thread_and_flush_to_zero():
    torch.set_num_threads(1)
    flush_denormals(True)
    os.environ["OMP_NUM_THREADS"] = "3"


def test_runs_after_it_with_the_settings_put_back():
    assert torch.get_num_threads() == EXPECTED_THREADS
    assert not denormals_flushed()
    assert "OMP_NUM_THREADS" not in os.environ


def test_restoring_its_own_change_passes(one_torch_thread):
    assert torch.get_num_threads() == 1


def test_leaves_an_orphan():
    # a grandchild: its parent exits at once, so it is reparented away from pytest
    subprocess.run(["sh", "-c", "sleep 300 & echo $!"], check=True)


def test_stops_what_it_starts():
    child = subprocess.Popen(["sleep", "300"])
    child.kill()
    child.wait()
"""


def test_a_test_that_leaks_settings_fails_and_the_next_one_sees_them_restored(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The inner pytest is a fresh process (no flush-to-zero); it starts on 2 torch threads
    # so that the change to 1 shows whatever this machine's default.
    threads = 2
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)  # the inner session inherits it
    pytester.makeconftest(CONFTEST.read_text())
    pytester.makepyfile(
        test_leaky=LEAKY.replace("EXPECTED_THREADS", str(threads)),
        conftest_threads=f"import torch\ntorch.set_num_threads({threads})\n",
    )
    pytester.makeini("[pytest]\naddopts = -p conftest_threads\n")
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-q")
    result.assert_outcomes(passed=5, errors=2)
    result.stdout.fnmatch_lines(
        [
            "*ERROR at teardown of test_leaves_one_thread_and_flush_to_zero*",
            "E*Failed: the test left process-wide state behind*",
            "*subnormals flushed (MXCSR FTZ/DAZ): False -> True*",
            f"*torch.get_num_threads(): {threads} -> 1*",
            "*$OMP_NUM_THREADS: None -> '3'*",
            "*ERROR at teardown of test_leaves_an_orphan*",
            "E*process * still running (killed): sleep 300",
        ]
    )
    assert not _sleepers(), "the orphan was not killed"


def _sleepers() -> list[str]:
    """`sleep 300` processes still alive (the guard kills the orphan it reports)."""
    import subprocess

    found = subprocess.run(["pgrep", "-f", "^sleep 300$"], capture_output=True, text=True)
    return found.stdout.split()
