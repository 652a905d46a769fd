"""`auto`'s start-up measurement beside CPU-bound processes (actorq.learner.device_probe).

Here, not in tests/unit: its eight CPU hogs would slow whatever ran beside it on the other
xdist worker; the end-to-end tests run one at a time."""

from __future__ import annotations

import subprocess
import sys

import pytest

from actorq.algos import load_algorithm_config
from actorq.learner.device_probe import LearnerRecipe, measure
from actorq.models import MLPSpec

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(120)]


def _recipe() -> LearnerRecipe:
    config = load_algorithm_config("dqn", {}, batch_size=128)
    return LearnerRecipe("dqn", MLPSpec(4, 2, (64, 64)), config, seed=0)


def test_measurement_under_load_still_picks_the_faster_path(one_torch_thread) -> None:
    """Eight CPU-bound processes beside it (as 32 actors starting on 2 cores are): half
    of each candidate's turns are preempted. Its fastest turn still ranks numpy-flat
    (~0.2 ms for DQN 64x64) before torch-eager (~0.55-0.94 ms) every time, and near its
    unloaded time (BENCHMARKS 21c)."""
    hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(8)]
    try:
        for _ in range(3):
            timings = measure(_recipe(), ["cpu"]).timings
            assert min(timings, key=timings.__getitem__) == "cpu/numpy-flat", timings
            assert timings["cpu/numpy-flat"] * 1.5 < timings["cpu/torch-eager"], timings
            # Alone 0.2-0.5 ms on the project's CPUs; a preempted turn of 8 read 1.7-3.2.
            assert timings["cpu/numpy-flat"] < 1.0, timings
    finally:
        for hog in hogs:
            hog.kill()
            hog.wait()
