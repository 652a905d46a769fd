"""Run by tests/unit/test_stats.py in the rliable side environment (scripts/rliable_env.sh):
actorq.study.stats against rliable 1.2.0 itself. Prints one JSON line of pairs
(ours, rliable's) and leaves the judging to the test."""

from __future__ import annotations

import importlib.util
import json
import sys
import warnings
from pathlib import Path

import numpy as np


def _stats():
    path = Path(__file__).resolve().parents[2] / "actorq" / "study" / "stats.py"
    spec = importlib.util.spec_from_file_location("actorq_stats", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses resolve their module by name
    spec.loader.exec_module(module)
    return module


def main() -> None:
    warnings.simplefilter("ignore")
    from rliable import library, metrics

    stats = _stats()
    rng = np.random.default_rng(7)
    x = rng.normal(100, 15, size=(10, 2))
    y = rng.normal(95, 15, size=(8, 2))
    ours_ci = stats.bootstrap_ci(x[:, 0])
    point, ci = library.get_interval_estimates(
        {"x": x[:, :1]}, lambda s: np.array([metrics.aggregate_iqm(s)]), reps=20_000
    )
    print(
        json.dumps(
            {
                "iqm": [stats.iqm(x), float(metrics.aggregate_iqm(x))],
                "poi": [
                    stats.probability_of_improvement(x, y, reps=10).point,
                    float(metrics.probability_of_improvement(x, y)),
                ],
                "ci_low": [ours_ci.low, float(ci["x"][0][0])],
                "ci_high": [ours_ci.high, float(ci["x"][1][0])],
                "spread": float(x[:, 0].std()),
                "point": [ours_ci.point, float(point["x"][0])],
            }
        )
    )


if __name__ == "__main__":
    main()
