"""actorq.study.stats against hand-computed cases and, where it imports, rliable itself."""

from __future__ import annotations

import importlib.util
import warnings

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


RLIABLE = all(importlib.util.find_spec(m) is not None for m in ("rliable", "arch"))


@pytest.mark.skipif(
    not RLIABLE,
    reason="rliable is not installed: rliable 1.2.0 pins arch<8, and arch 7 fails to import "
    "with pandas 3 (ARCHITECTURE.md 'Documentation and statistics'); pip install rliable "
    "arch==8.0.0 to run it",
)
def test_matches_rliable():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            from rliable import metrics
        except (ImportError, TypeError) as exc:  # arch 7 with pandas 3: TypeError on import
            pytest.skip(f"rliable is installed but does not import here: {exc!r}")

    rng = np.random.default_rng(7)
    x = rng.normal(100, 15, size=(10, 2))
    y = rng.normal(95, 15, size=(8, 2))
    assert stats.iqm(x) == pytest.approx(metrics.aggregate_iqm(x))
    assert stats.probability_of_improvement(x, y, reps=10).point == pytest.approx(
        metrics.probability_of_improvement(x, y)
    )
    # rliable's get_interval_estimates passes random_state to arch, which arch 8 refuses;
    # with one task its StratifiedBootstrap is arch's IIDBootstrap over runs, so compare
    # the interval with that directly.
    from arch.bootstrap import IIDBootstrap

    col = x[:, 0]
    ref = IIDBootstrap(col, seed=0).conf_int(
        lambda s: np.array([metrics.aggregate_iqm(s[:, None])]), reps=20_000, method="percentile"
    )
    ours = stats.bootstrap_ci(col)
    spread = col.std()
    # Same resampling scheme, different random draws: endpoints agree to bootstrap noise.
    assert ours.low == pytest.approx(ref[0][0], abs=0.05 * spread)
    assert ours.high == pytest.approx(ref[1][0], abs=0.05 * spread)


def test_table_rows_and_time_direction():
    lines = stats.table({"fp32": [10.0, 11.0, 12.0], "int8": [5.0, 6.0, 7.0]}, "fp32", reps=500)
    assert lines[0].startswith("| arm | n | IQM") and len(lines) == 4
    assert "-45.5%" in lines[3]  # (6 - 11) / 11
    assert lines[3].endswith("| 0.00 [0.00, 0.00] |")  # higher is better: int8 never wins
    times = stats.table({"fp32": [10.0, 11.0], "int8": [5.0, 6.0]}, "fp32", higher_is_better=False)
    assert times[3].endswith("| 1.00 [1.00, 1.00] |")  # shorter times win every pair
    assert stats.table({"a": [float("inf")]}, "a")[2] == "| a | 0 | - | - | - |"
