"""actorq.study.stats against hand-computed cases and rliable itself (in its own side
environment: scripts/rliable_env.sh)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import numpy as np
import pytest

from actorq.study import stats


def test_iqm_trims_a_quarter_at_each_end():
    assert stats.iqm(np.arange(1, 9)) == pytest.approx(4.5)  # mean of 3, 4, 5, 6
    assert stats.iqm([1.0, 2.0, 100.0]) == pytest.approx(103 / 3)  # int(0.75) = 0: plain mean
    assert stats.iqm([1.0, 2.0, 3.0, 4.0, 1000.0]) == pytest.approx(3.0)  # drops 1 and 1000


def test_iqm_pools_runs_and_tasks():
    scores = np.array([[1.0, 10.0], [2.0, 20.0], [3.0, 30.0], [4.0, 40.0]])
    assert stats.iqm(scores) == pytest.approx(np.mean([3.0, 4.0, 10.0, 20.0]))


def test_probability_of_improvement_counts_pairs_and_half_ties():
    # pairs (x, y): (1,0) win, (1,3) loss, (2,0) win, (2,3) loss -> 0.5
    assert stats.probability_of_improvement([1, 2], [0, 3], reps=10).point == pytest.approx(0.5)
    # (2,2) tie counts one half: [(2,1) win, (2,2) tie] -> 0.75
    assert stats.probability_of_improvement([2], [1, 2], reps=10).point == pytest.approx(0.75)
    assert stats.probability_of_improvement([5, 6], [1, 2], reps=10).point == 1.0


def test_constant_scores_give_a_degenerate_interval():
    ci = stats.bootstrap_ci([3.0, 3.0, 3.0], reps=200)
    assert (ci.point, ci.low, ci.high) == (3.0, 3.0, 3.0)
    diff = stats.difference_ci([4.0, 4.0], [-8.0, -8.0], reps=200)
    # (4 - (-8)) / |-8| = +150%: the baseline's sign does not flip the difference
    assert (diff.point, diff.low, diff.high) == (150.0, 150.0, 150.0)


def test_interval_covers_the_point_and_is_reproducible():
    rng = np.random.default_rng(1)
    x = rng.normal(100, 10, size=10)
    a, b = stats.bootstrap_ci(x, seed=3), stats.bootstrap_ci(x, seed=3)
    assert a == b
    assert a.low < a.point < a.high
    assert x.min() <= a.low and a.high <= x.max()


def test_difference_ci_excludes_zero_for_separated_arms_only():
    far = stats.difference_ci([110, 111, 112, 113, 114], [100, 101, 102, 103, 104])
    assert far.low > 0 and far.point == pytest.approx(10.0 / 102 * 100)
    near = stats.difference_ci([100, 90, 110, 95, 105], [101, 91, 109, 96, 104])
    assert near.low < 0 < near.high


def test_bad_input_names_the_value():
    with pytest.raises(ValueError, match="finite"):
        stats.bootstrap_ci([1.0, float("nan")])
    with pytest.raises(ValueError, match="same tasks"):
        stats.difference_ci(np.ones((3, 2)), np.ones((3, 1)))
    with pytest.raises(ValueError, match="shape"):
        stats.as_scores([])


def test_compare_line_names_both_arms():
    c = stats.compare([1.0, 2.0, 3.0], [1.0, 2.0, 2.5], "int8", "fp32", reps=500)
    assert "int8 - fp32" in c.line() and "P(int8 > fp32)" in c.line()
    assert len(c.row()) == len(stats.ROW_HEADER)
    assert stats.compare_or_none([float("nan")], [1.0], "a", "b") is None


ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.timeout(900)  # the first call makes the side environment (pip, ~1 min)
def test_matches_rliable():
    """Against rliable 1.2.0 in the side environment it installs with (its arch<8 pin
    cannot import beside pandas 3): scripts/rliable_env.sh makes it when missing."""
    subprocess.run([str(ROOT / "scripts" / "rliable_env.sh")], check=True, timeout=900)
    python = ROOT / ".venv-rliable" / "bin" / "python"
    script = ROOT / "tests" / "unit" / "rliable_crosscheck.py"
    out = subprocess.run(
        [str(python), str(script)], capture_output=True, text=True, check=True, timeout=300
    )
    pairs = json.loads(out.stdout.strip().splitlines()[-1])
    assert pairs["iqm"][0] == pytest.approx(pairs["iqm"][1])
    assert pairs["poi"][0] == pytest.approx(pairs["poi"][1])
    assert pairs["point"][0] == pytest.approx(pairs["point"][1])
    # Same resampling scheme (rliable's stratified bootstrap is arch's IID bootstrap over
    # runs with one task), different random draws: endpoints agree to bootstrap noise.
    spread = pairs["spread"]
    assert pairs["ci_low"][0] == pytest.approx(pairs["ci_low"][1], abs=0.05 * spread)
    assert pairs["ci_high"][0] == pytest.approx(pairs["ci_high"][1], abs=0.05 * spread)


def test_table_rows_and_time_direction():
    lines = stats.table({"fp32": [10.0, 11.0, 12.0], "int8": [5.0, 6.0, 7.0]}, "fp32", reps=500)
    assert lines[0].startswith("| arm | n | IQM") and len(lines) == 4
    assert "-45.5%" in lines[3]  # (6 - 11) / 11
    assert lines[3].endswith("| 0.00 [0.00, 0.00] |")  # higher is better: int8 never wins
    times = stats.table({"fp32": [10.0, 11.0], "int8": [5.0, 6.0]}, "fp32", higher_is_better=False)
    assert times[3].endswith("| 1.00 [1.00, 1.00] |")  # shorter times win every pair
    assert stats.table({"a": [float("inf")]}, "a")[2] == "| a | 0 | - | - | - |"
