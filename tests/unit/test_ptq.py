"""`actorq ptq`: checkpoints of any algorithm evaluated at several widths, table and plot."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from actorq.algos import make_algorithm
from actorq.algos.factory import policy_spec
from actorq.cli import main
from actorq.learner.checkpoint import Checkpointer
from actorq.ptq import PTQError, load_policy, parse_bits, run_study


def _checkpoint(tmp_path: Path, algo: str, env_id: str, with_algo_meta: bool = True) -> Path:
    spec = policy_spec(env_id, algo, (16, 16))
    learner = make_algorithm(algo, spec.obs_dim, spec.num_outputs, (16, 16), seed=1)
    meta = {"env_id": env_id, "hidden": [16, 16], "updates": 0, "version": 0}
    if with_algo_meta:
        meta["algo"] = algo
    run = tmp_path / f"{algo}-run"
    Checkpointer(run / "checkpoints").save({"dqn": learner.state_dict()}, meta)
    return run


@pytest.mark.parametrize(("algo", "env_id"), [("dqn", "CartPole-v1"), ("td3", "Pendulum-v1")])
def test_study_writes_table_and_plot(tmp_path: Path, algo: str, env_id: str, capsys) -> None:
    run = _checkpoint(tmp_path, algo, env_id)
    code = main(["ptq", str(run), "--bits", "32,16,8,4,2", "--episodes", "3"])
    assert code == 0
    out = run / "ptq"
    rows = list(csv.DictReader((out / "ptq.csv").read_text().splitlines()))
    assert [int(r["bits"]) for r in rows] == [32, 16, 8, 4, 2]
    assert [r["path"] for r in rows] == [
        "blob fp32", "blob fp16", "blob int8", "blob int4", "simulated",
    ]  # fmt: skip
    assert float(rows[0]["relative_drop"]) == 0.0
    assert (out / "ptq.png").stat().st_size > 1000
    table = (out / "ptq.md").read_text()
    assert f"PTQ of {algo.upper()} on {env_id}" in table and "| 8 | blob int8 |" in table
    assert "| 8 | blob int8 |" in capsys.readouterr().out


def test_old_dqn_checkpoints_without_algo_load(tmp_path: Path) -> None:
    run = _checkpoint(tmp_path, "dqn", "CartPole-v1", with_algo_meta=False)
    policy = load_policy(run)
    assert policy.algo == "dqn" and policy.spec.num_outputs == 2


def test_same_seeds_make_fp32_and_fp16_agree(tmp_path: Path) -> None:
    policy = load_policy(_checkpoint(tmp_path, "sac", "Pendulum-v1"))
    rows = run_study(policy, (32, 16), episodes=2)
    assert rows[1].mean == pytest.approx(rows[0].mean, rel=0.02)


@pytest.mark.parametrize("text", ["", "32,1", "9", "8,x"])
def test_bad_bits_named(text: str) -> None:
    with pytest.raises(PTQError, match="--bits"):
        parse_bits(text)


def test_missing_checkpoint_is_a_user_error(tmp_path: Path, capsys) -> None:
    assert main(["ptq", str(tmp_path / "nothing")]) == 2
    assert "no checkpoint at" in capsys.readouterr().err


def test_checkpoint_of_another_algorithm_is_refused(tmp_path: Path) -> None:
    run = _checkpoint(tmp_path, "td3", "Pendulum-v1")
    meta = run / "checkpoints" / "checkpoint.json"
    meta.write_text(meta.read_text().replace('"td3"', '"sac"'))
    with pytest.raises(PTQError, match="does not hold a sac learner for Pendulum-v1"):
        load_policy(run)
