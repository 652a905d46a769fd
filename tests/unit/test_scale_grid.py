"""actorq scale: the grid's parsing and checks (bad values exit 2 before anything starts),
the plan's order, and each run's `actorq run` command line."""

from __future__ import annotations

from pathlib import Path

import pytest

from actorq.cli import main
from actorq.config import ConfigError
from actorq.scale.grid import (
    GridConfig,
    check_run_args,
    parse_actors,
    parse_precisions,
    parse_ratios,
    parse_seeds,
    resolve_target,
)


def _config(**kw) -> GridConfig:
    base = dict(
        actors=(1, 2), precisions=("fp32", "int8"), samples_per_insert=(16.0,), seeds=(1, 2),
        env="CartPole-v1", algo="dqn", target_return=475.0, max_seconds=60.0,
        max_env_steps=None,
    )  # fmt: skip
    return GridConfig(**{**base, **kw})


def test_lists_parse() -> None:
    assert parse_actors("1,2,4") == (1, 2, 4)
    assert parse_precisions("fp32,int8") == ("fp32", "int8")
    assert parse_ratios("16,0.25") == (16.0, 0.25)
    assert parse_seeds("1, 2,3") == (1, 2, 3)


@pytest.mark.parametrize(
    ("parse", "text", "message"),
    [
        (parse_actors, "0,1", "bad value '0'; expected actor counts >= 1"),
        (parse_actors, "1,x", "bad value 'x'"),
        (parse_actors, "", "none empty"),
        (parse_actors, "1,,2", "none empty"),
        (parse_actors, "1,1", "1 given twice"),
        (parse_precisions, "fp32,int9", "unknown precision 'int9'; expected any of fp32"),
        (parse_precisions, " ", "none empty"),
        (parse_ratios, "16,0", "bad value '0'; expected samples per insert > 0"),
        (parse_ratios, "nan", "bad value 'nan'"),
        (parse_seeds, "1,a", "bad value 'a'; expected integer seeds"),
    ],
)
def test_bad_values_name_the_value_and_what_is_expected(parse, text, message) -> None:
    with pytest.raises(ConfigError, match=message):
        parse(text)


def test_grid_flags_after_dashes_are_refused() -> None:
    assert check_run_args(["--hidden", "256,256"]) == ("--hidden", "256,256")
    for bad in (["--seed", "3"], ["--precision=int4"], ["--run-dir", "x"]):
        with pytest.raises(ConfigError, match="the grid sets it on every run"):
            check_run_args(bad)
    with pytest.raises(ConfigError, match="unexpected argument 'oops'"):
        check_run_args(["oops"])


def test_target_defaults_to_the_env_threshold_and_is_required_without_one() -> None:
    assert resolve_target("CartPole-v1", None) == 475.0
    assert resolve_target("minatar:breakout", 30.0) == 30.0
    with pytest.raises(ConfigError, match="give the return"):
        resolve_target("minatar:breakout", None)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--actors", "0"], "--actors: bad value '0'"),
        (["--precisions", "fp32,bf16"], "unknown precision 'bf16'"),
        (["--seeds", ""], "--seeds ''"),
        (["--samples-per-insert", "-1"], "bad value '-1'"),
        (["--max-seconds", "0"], "expected a budget per run"),
        (["--algo", "nope"], "--algo 'nope'"),
        (["--", "--actors", "3"], "'--actors' after '--'"),
    ],
)
def test_cli_exits_2_before_anything_starts(argv, message, tmp_path: Path, capsys) -> None:
    out = tmp_path / "scale"
    assert main(["scale", "--out", str(out), *argv]) == 2
    assert message in capsys.readouterr().err
    assert not out.exists()  # nothing was started or written


def test_plan_interleaves_and_rotates_precisions() -> None:
    runs = _config().plan()
    assert [(r.seed, r.actors, r.precision) for r in runs] == [
        (1, 1, "fp32"), (1, 1, "int8"), (1, 2, "fp32"), (1, 2, "int8"),
        (2, 1, "int8"), (2, 1, "fp32"), (2, 2, "int8"), (2, 2, "fp32"),
    ]  # fmt: skip
    assert len({r.name for r in runs}) == len(runs)


def test_run_command_carries_the_cell_and_passthrough_last(tmp_path: Path) -> None:
    config = _config(run_args=("--hidden", "32,32"), max_env_steps=5000)
    run = config.plan()[3]
    cmd = config.run_command(run, tmp_path / "r")
    text = " ".join(cmd[1:])
    assert "-m actorq run --env CartPole-v1 --algo dqn --actors 2 --precision int8" in text
    assert "--samples-per-insert 16 --seed 1 --max-seconds 60 --max-env-steps 5000" in text
    assert text.endswith(f"--target-return 475 --hidden 32,32 --run-dir {tmp_path / 'r'}")
    never = _config(stop_at_target=False).run_command(run, tmp_path / "r")
    assert never[never.index("--target-return") + 1] == "none"
    assert "--no-stop-at-target" in _config(stop_at_target=False).command(Path("o"))


def test_smoke_grid_and_flags_beside_it() -> None:
    from actorq.cli import build_parser
    from actorq.scale.cli import build_config

    args = build_parser().parse_args(["scale", "--smoke", "--out", "o", "--seeds", "7"])
    config = build_config(args)
    assert (config.actors, config.precisions, config.seeds) == ((1, 2), ("fp32", "int8"), (7,))
    assert config.env == "CartPole-v1" and config.target_return == 475.0
    assert len(config.plan()) == 4 and config.max_seconds <= 60
    argv = ["scale", "--smoke", "--out", "o", "--", "--envs-per-actor", "8"]
    cmd = build_config(build_parser().parse_args(argv)).run_command(config.plan()[0], Path("r"))
    assert cmd.index("--envs-per-actor") < len(cmd) - 4  # the smoke's own value, then ...
    assert cmd[-4:-2] == ["--envs-per-actor", "8"]  # ... the user's, which argparse keeps
