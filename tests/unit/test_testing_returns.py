"""The learning tests' yardsticks (actorq/testing/returns.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from actorq.testing.returns import last_eval_mean, random_pendulum_return


def _episodes(path: Path, rows: list[tuple[str, float]]) -> Path:
    lines = ["kind,instance,return,length,policy_version,total_env_steps,wall_seconds"]
    lines += [f"{kind},i,{ret},200,1,{n},0.1" for n, (kind, ret) in enumerate(rows)]
    (path / "episodes.csv").write_text("\n".join(lines) + "\n")
    return path


def test_last_eval_mean_takes_the_newest_evaluator_episodes_only(tmp_path: Path) -> None:
    rows = [("eval", -1500.0)] * 80 + [("train", 0.0)] * 5 + [("eval", -150.0)] * 20
    assert last_eval_mean(_episodes(tmp_path, rows)) == pytest.approx(-150.0)
    assert last_eval_mean(tmp_path, episodes=40) == pytest.approx(-825.0)


def test_last_eval_mean_refuses_a_run_with_too_few_evaluator_episodes(tmp_path: Path) -> None:
    _episodes(tmp_path, [("eval", -200.0)] * 19 + [("train", -100.0)] * 10)
    with pytest.raises(ValueError, match="19 evaluator episodes, expected >= 20"):
        last_eval_mean(tmp_path)


def test_random_pendulum_return_is_a_random_policys() -> None:
    assert -1500 < random_pendulum_return(episodes=3) < -900
