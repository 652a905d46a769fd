"""bench_compose_scale's processes arm: `actorq run --actors N` with the compose settings,
measured over a window and stopped cleanly (the compose arm needs a Docker engine)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from bench.bench_compose_scale import PROCESS_FLAGS, measure_processes  # noqa: E402


def test_processes_arm_measures_steps_updates_and_memory() -> None:
    assert PROCESS_FLAGS[PROCESS_FLAGS.index("--hidden") + 1] == "64,64"  # compose's default
    r = measure_processes(1, warmup=1.0, window=4.0)
    assert r["actors"] == 1 and r["healthy_s"] > 0
    assert r["env_steps"] > 0 and r["updates"] > 0
    assert r["learner_mib"] > 50 and r["actor_mib_median"] > 50  # torch is loaded in both
    assert r["total_mib"] >= r["learner_mib"] + r["quantizer_mib"] + r["actor_mib_max"]
    # CPU per role over the window, in cores: the learner is busy at samples-per-insert 16
    cores = r["cores"]
    assert set(cores) == {"learner", "actor", "quantizer", "rest"}
    assert cores["learner"] > 0.2 and cores["actor"] > 0.01, cores
    assert sum(cores.values()) <= os.cpu_count() + 0.2, cores
