"""`actorq ptq`: checkpoints of any algorithm evaluated at several widths, table and plot."""

from __future__ import annotations

import csv
import dataclasses
from pathlib import Path

import numpy as np
import pytest
import torch

from actorq.algos import TD3Config, make_algorithm
from actorq.algos.factory import policy_spec
from actorq.cli import main
from actorq.learner.checkpoint import Checkpointer
from actorq.ptq import PTQError, load_policy, paired_drop, parse_bits, run_study
from actorq.quant import quantized_policy_from_weights

# `actorq ptq` sets one torch thread for its process; here it runs inside pytest's.
pytestmark = pytest.mark.usefixtures("one_torch_thread")


def _checkpoint(tmp_path: Path, algo: str, env_id: str, with_algo_meta: bool = True) -> Path:
    spec = policy_spec(env_id, algo, (16, 16))
    learner = make_algorithm(algo, spec.obs_dim, spec.num_outputs, (16, 16), seed=1, spec=spec)
    meta = {"env_id": env_id, "hidden": [16, 16], "updates": 0, "version": 0}
    if with_algo_meta:
        meta["algo"] = algo
    run = tmp_path / f"{algo}-run"
    Checkpointer(run / "checkpoints").save({"dqn": learner.state_dict()}, meta)
    return run


@pytest.mark.parametrize(
    ("algo", "env_id"),
    [
        ("dqn", "CartPole-v1"),
        ("td3", "Pendulum-v1"),
        ("ppo", "minatar:breakout"),
        ("dqn", "minatar:breakout"),  # the CNN Q-network
    ],
)
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
    assert float(rows[0]["relative_drop"]) == 0.0 and float(rows[0]["drop_ci95"]) == 0.0
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


def test_paired_drop_by_hand() -> None:
    reference = np.array([-100.0, -200.0, -300.0, -400.0])
    returns = np.array([-110.0, -200.0, -330.0, -400.0])  # differences 10, 0, 30, 0
    drop, half = paired_drop(reference, returns)
    # mean difference 10 over |mean reference| 250; sample std of (10, 0, 30, 0) is
    # sqrt(((0)^2 + 10^2 + 20^2 + 10^2) / 3) = sqrt(200); half-width 1.96 * sqrt(200) / 2.
    assert drop == pytest.approx(10 / 250)
    assert half == pytest.approx(1.96 * np.sqrt(200) / 2 / 250)


def test_paired_drop_is_tight_when_every_episode_shifts_alike() -> None:
    rng = np.random.default_rng(0)
    reference = rng.normal(-150, 100, size=50)  # widely spread episodes ...
    drop, half = paired_drop(reference, reference - 3.0)  # ... all 3 worse
    assert drop == pytest.approx(3.0 / abs(reference.mean()))
    assert half == pytest.approx(0.0, abs=1e-12)  # pairing removes the episode spread


def test_paired_drop_needs_the_same_episodes() -> None:
    with pytest.raises(ValueError, match="paired returns differ in shape"):
        paired_drop(np.zeros(3), np.zeros(4))


@pytest.mark.parametrize("recorded", [True, False])
def test_obs_norm_checkpoint_is_evaluated_with_its_normalisation(
    tmp_path: Path, recorded: bool
) -> None:
    """The checkpoint's config (or, in older checkpoints, its statistics) switches
    obs_norm on: the loaded policy acts exactly as the trained learner on raw obs."""
    config = TD3Config(obs_norm=True)
    spec = policy_spec("Pendulum-v1", "td3", (16, 16), config)
    learner = make_algorithm("td3", spec.obs_dim, spec.num_outputs, (16, 16), config, seed=1)
    rng = np.random.default_rng(0)
    learner.obs_rms.update(rng.normal([0.5, -0.5, 3.0], [0.1, 0.1, 4.0], size=(500, 3)))
    meta = {"env_id": "Pendulum-v1", "hidden": [16, 16], "algo": "td3"}
    if recorded:
        meta["algo_config"] = dataclasses.asdict(config)
    run = tmp_path / "run"
    Checkpointer(run / "checkpoints").save({"dqn": learner.state_dict()}, meta)
    policy = load_policy(run)
    assert policy.spec.input_norm and "input_norm.scale" in policy.weights
    obs = rng.normal([0.5, -0.5, 3.0], [0.1, 0.1, 4.0], size=(16, 3)).astype(np.float32)
    module = quantized_policy_from_weights(policy.weights, policy.spec, "fp32")
    with torch.inference_mode():
        got = module(torch.from_numpy(obs)).numpy()
    np.testing.assert_allclose(got, learner.actions(obs), atol=1e-5)


def test_checkpoint_with_unusable_config_is_refused(tmp_path: Path) -> None:
    run = _checkpoint(tmp_path, "td3", "Pendulum-v1")
    meta = run / "checkpoints" / "checkpoint.json"
    bad = '"algo": "td3", "algo_config": {"gamma": "x"}'
    meta.write_text(meta.read_text().replace('"algo": "td3"', bad))
    with pytest.raises(PTQError, match="unusable td3 config"):
        load_policy(run)
