"""bench/bench_learner_service.py's drawn-alone arm: the service's own UpdateStep over a
full replay mirror of the service's capacity, updating the network it was given."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import numpy as np

BENCH = Path(__file__).resolve().parents[2] / "bench" / "bench_learner_service.py"


def _bench():
    spec = importlib.util.spec_from_file_location("bench_learner_service", BENCH)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def test_drawn_step_samples_the_full_mirror_and_trains() -> None:
    from actorq.algos import load_algorithm_config, make_algorithm
    from actorq.config import LearnerSettings
    from actorq.learner.update_path import setup_learner

    bench = _bench()
    config = load_algorithm_config("dqn", {})
    learner = make_algorithm("dqn", 4, 2, (64, 64), config, device="cpu")
    setup_learner(learner, "cpu", "auto")
    before = {k: np.array(v, copy=True) for k, v in learner.policy_weights().items()}
    step = bench._drawn_step(learner, "dqn", 4, 2, config.batch_size)
    assert len(step.storage) == LearnerSettings().replay_capacity  # full, as in the service
    done = 0
    while done < 20:
        done += step(None, 20 - done)
    assert step.counters.updates == 20 and step.counters.sampled == 20 * config.batch_size
    assert step.counters.sample_seconds > 0 and step.counters.update_seconds > 0
    after = learner.policy_weights()
    assert any(not np.array_equal(before[k], after[k]) for k in before)  # it trained
    assert np.isfinite(step.counters.last_loss)


def test_worker_reports_the_drawn_rate_on_the_service_path() -> None:
    # Through the bench's own worker process: the worker sets process-wide state (torch
    # threads, flush-to-zero) that must not leak into this test process.
    got = _bench()._alone("dqn", "cpu", 0.5, "auto", drawn=True)
    assert got["path"] == "numpy-flat" and got["batch"] == 128 and got["updates_per_s"] > 0
