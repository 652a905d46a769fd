"""Settings from ACTORQ_* variables: typed parsing, validation naming the bad value."""

from __future__ import annotations

import pytest

from actorq.config import (
    ActorSettings,
    ConfigError,
    LearnerSettings,
    QuantizerSettings,
    RunSettings,
    load_settings,
    parse_int_tuple,
    to_environ,
)


def test_defaults_work_on_localhost() -> None:
    learner = load_settings(LearnerSettings, {})
    assert learner.redis_url.startswith("redis://127.0.0.1")
    assert learner.precision == "int8"
    assert load_settings(QuantizerSettings, {}).grpc_port == 50051


def test_environment_values_are_typed() -> None:
    env = {
        "ACTORQ_HIDDEN": "512, 512,512",
        "ACTORQ_SEED": "7",
        "ACTORQ_SAMPLES_PER_INSERT": "2.5",
        "ACTORQ_PRECISION": "fp16",
        "ACTORQ_FLUSH_DENORMALS": "false",
        "ACTORQ_UNRELATED": "ignored",
    }
    s = load_settings(LearnerSettings, env)
    assert s.hidden == (512, 512, 512) and s.seed == 7
    assert s.flush_denormals is False and LearnerSettings().flush_denormals is True
    assert s.samples_per_insert == 2.5 and s.precision == "fp16"
    actor = load_settings(ActorSettings, {"ACTORQ_EVALUATOR": "yes", "ACTORQ_NUM_ACTORS": "3"})
    assert actor.evaluator is True and actor.instance_id == "evaluator"


def test_round_trip_through_environment() -> None:
    original = LearnerSettings(hidden=(32, 16), seed=3, precision="fp32", checkpoint_dir="/x")
    assert load_settings(LearnerSettings, to_environ(original)) == original


@pytest.mark.parametrize(
    ("cls", "env", "named"),
    [
        (LearnerSettings, {"ACTORQ_SEED": "seven"}, "ACTORQ_SEED"),
        (LearnerSettings, {"ACTORQ_HIDDEN": "64,-1"}, "ACTORQ_HIDDEN"),
        (LearnerSettings, {"ACTORQ_PRECISION": "int3"}, "int3"),
        (LearnerSettings, {"ACTORQ_REDIS_URL": "localhost:6379"}, "localhost:6379"),
        (ActorSettings, {"ACTORQ_EVALUATOR": "maybe"}, "ACTORQ_EVALUATOR"),
        (LearnerSettings, {"ACTORQ_FLUSH_DENORMALS": "ftz"}, "ACTORQ_FLUSH_DENORMALS"),
        (ActorSettings, {"ACTORQ_ACTOR_INDEX": "4", "ACTORQ_NUM_ACTORS": "4"}, "actor_index"),
        (QuantizerSettings, {"ACTORQ_CHUNK_BYTES": str(16 << 20)}, "chunk_bytes"),
        (QuantizerSettings, {"ACTORQ_GRPC_PORT": "70000"}, "70000"),
    ],
)
def test_bad_values_raise_config_error_naming_them(cls, env, named) -> None:
    with pytest.raises(ConfigError, match=named):
        load_settings(cls, env)


def test_run_settings_validate_flags() -> None:
    with pytest.raises(ConfigError, match="--actors"):
        RunSettings(actors=0)
    with pytest.raises(ConfigError, match="--algo"):
        RunSettings(algo="trpo")
    with pytest.raises(ConfigError, match="precision"):
        RunSettings(precision="bf16")


def test_parse_int_tuple() -> None:
    assert parse_int_tuple("1,2,3") == (1, 2, 3)
    for bad in ("", "a", "0", "1,,x"):
        with pytest.raises(ConfigError):
            parse_int_tuple(bad, "--hidden")


def test_onpolicy_settings_are_checked() -> None:
    with pytest.raises(ConfigError, match="--unroll"):
        RunSettings(algo="ppo", unroll=0)
    with pytest.raises(ConfigError, match="obs_codec"):
        ActorSettings(obs_codec="gzip")
    with pytest.raises(ConfigError, match="unroll_length"):
        ActorSettings(unroll_length=-1)


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        ([], 475.0),  # auto by default: dqn on CartPole-v1 -> gymnasium's reward threshold
        (["--settle-at", "auto"], 475.0),
        (["--settle-at", "auto", "--env", "Acrobot-v1"], -100.0),
        (["--settle-at", "auto", "--env", "Pendulum-v1"], None),  # no threshold registered
        (["--settle-at", "auto", "--env", "dmc:cartpole-swingup"], None),  # not gymnasium's
        (["--settle-at", "auto", "--algo", "td3", "--env", "Pendulum-v1"], None),  # dqn only
        (["--settle-at", "auto", "--learners", "2"], None),  # one learner only
        (["--settle-at", "300"], 300.0),
        (["--settle-at", "none"], None),
    ],
)
def test_settle_at_auto_is_the_envs_threshold_for_dqn(argv: list[str], expected) -> None:
    from actorq.cli import _resolve_settle_at, build_parser

    args = build_parser().parse_args(["run", *argv])
    assert _resolve_settle_at(args) == expected


def test_settle_at_is_checked() -> None:
    from actorq.cli import build_parser

    with pytest.raises(SystemExit):
        build_parser().parse_args(["run", "--settle-at", "soon"])
    with pytest.raises(ConfigError, match="--settle-at"):
        RunSettings(settle_at=475.0, learners=2)
    with pytest.raises(ConfigError, match="--settle-at"):
        RunSettings(settle_at=float("inf"))


def test_dqn_actors_build_n_step_transitions_when_the_config_asks(monkeypatch) -> None:
    from actorq.launch.plan import _actor_replay_env

    monkeypatch.delenv("ACTORQ_DQN_N_STEP", raising=False)
    assert _actor_replay_env(RunSettings()) == {}  # one-step DQN: nothing extra
    monkeypatch.setenv("ACTORQ_DQN_N_STEP", "3")
    monkeypatch.setenv("ACTORQ_DQN_GAMMA", "0.98")
    monkeypatch.delenv("ACTORQ_DQN_IS_CORRECTION", raising=False)
    n_step = {"ACTORQ_N_STEP": "3", "ACTORQ_GAMMA": "0.98"}
    assert _actor_replay_env(RunSettings()) == {**n_step, "ACTORQ_NSTEP_CUT": "false"}
    monkeypatch.setenv("ACTORQ_DQN_IS_CORRECTION", "true")  # actors cut at exploration
    assert _actor_replay_env(RunSettings()) == {**n_step, "ACTORQ_NSTEP_CUT": "true"}
    monkeypatch.setenv("ACTORQ_DQN_N_STEP", "0")
    with pytest.raises(ValueError, match="n_step"):
        _actor_replay_env(RunSettings())
