"""Defaults of `actorq run` that fit a throughput run: no settling without a target, no
env-step limit under a time budget, and one line saying what ends the run."""

from __future__ import annotations

import pytest

from actorq.cli import _resolve_max_env_steps, _resolve_settle_at, build_parser
from actorq.config import ConfigError, RunSettings
from actorq.launch.budget import what_ends


def _args(*argv: str):
    return build_parser().parse_args(["run", *argv])


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        ([], 475.0),  # a learning run: auto settles at CartPole's threshold
        (["--target-return", "none"], None),  # a throughput run: no automatic settle
        (["--target-return", "off"], None),
        (["--target-return", "none", "--settle-at", "300"], 300.0),  # explicit: kept
        (["--target-return", "none", "--settle-at", "auto"], 475.0),  # explicit auto too
        (["--target-return", "400"], 475.0),  # any target keeps the automatic settle
    ],
)
def test_target_return_none_turns_off_the_automatic_settle(argv, expected) -> None:
    assert _resolve_settle_at(_args(*argv)) == expected


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        ([], 500_000),  # no time budget: the env-step budget stays
        (["--max-seconds", "60"], 0),  # a time budget alone: no env-step limit
        (["--max-seconds", "60", "--max-env-steps", "1000"], 1000),  # explicit wins
        (["--max-env-steps", "2000"], 2000),
    ],
)
def test_max_seconds_alone_lifts_the_env_step_limit(argv, expected) -> None:
    assert _resolve_max_env_steps(_args(*argv)) == expected


def test_no_env_step_limit_needs_a_time_budget() -> None:
    assert RunSettings(max_env_steps=0, max_seconds=5).max_env_steps == 0
    with pytest.raises(ConfigError, match=r"--max-env-steps 0 .*needs --max-seconds"):
        RunSettings(max_env_steps=0)
    with pytest.raises(ConfigError, match="--max-env-steps: expected >= 0, got -5"):
        RunSettings(max_env_steps=-5)


def test_one_line_says_what_ends_the_run() -> None:
    line = what_ends(RunSettings())
    assert line == (
        "the run ends when the evaluator's 100-episode mean return reaches 475; or the "
        "actors took 500,000 env steps; Ctrl-C stops it early"
    )
    throughput = what_ends(RunSettings(target_return=None, max_env_steps=0, max_seconds=45))
    assert throughput == (
        "the run ends when 45 s of wall clock pass (no env-step limit); Ctrl-C stops it early"
    )
    both = what_ends(RunSettings(target_return=None, max_env_steps=10_000, max_seconds=30))
    assert "10,000 env steps; or 30 s of wall clock pass" in both and "\n" not in both
