"""`make_algorithm`: one place that maps an algorithm name to its learner and config."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from actorq.algos.base import Algorithm
from actorq.algos.d4pg import D4PGConfig, D4PGLearner
from actorq.algos.ddpg import DDPGConfig, DDPGLearner
from actorq.algos.dqn import DQNConfig, DQNLearner
from actorq.algos.ppo import A2CConfig, APPOConfig, OnPolicyLearner, PPOConfig
from actorq.algos.sac import SACConfig, SACLearner
from actorq.algos.td3 import TD3Config, TD3Learner
from actorq.models.mlp import MLPSpec

_REGISTRY: dict[str, tuple[type, type]] = {
    "dqn": (DQNConfig, DQNLearner),
    "ddpg": (DDPGConfig, DDPGLearner),
    "td3": (TD3Config, TD3Learner),
    "sac": (SACConfig, SACLearner),
    "d4pg": (D4PGConfig, D4PGLearner),
    # On-policy: trajectory segments instead of replay (actorq.learner.onpolicy_loop).
    "ppo": (PPOConfig, OnPolicyLearner),
    "appo": (APPOConfig, OnPolicyLearner),
    "a2c": (A2CConfig, OnPolicyLearner),
}
ALGORITHMS: tuple[str, ...] = tuple(_REGISTRY)
CONTINUOUS_ALGORITHMS: tuple[str, ...] = ("ddpg", "td3", "sac", "d4pg")
ON_POLICY_ALGORITHMS: tuple[str, ...] = ("ppo", "appo", "a2c")
PIXEL_ALGORITHMS: tuple[str, ...] = ("dqn", *ON_POLICY_ALGORITHMS)
"""Algorithms with a CNN policy for pixel envs (DQN through pixel replay, format "3")."""


def _check_name(name: str) -> None:
    if name not in _REGISTRY:
        raise ValueError(f"unknown algorithm {name!r}; expected one of {', '.join(ALGORITHMS)}")


def is_continuous(name: str) -> bool:
    """Whether algorithm `name` acts in continuous (Box) action spaces."""
    _check_name(name)
    return name in CONTINUOUS_ALGORITHMS


def is_on_policy(name: str) -> bool:
    """Whether algorithm `name` learns from trajectory segments (no replay)."""
    _check_name(name)
    return name in ON_POLICY_ALGORITHMS


def config_prefix(name: str) -> str:
    """Environment prefix of the algorithm's hyperparameters, e.g. ACTORQ_TD3_."""
    _check_name(name)
    return f"ACTORQ_{name.upper()}_"


def load_algorithm_config(name: str, environ: Mapping[str, str] | None = None, **overrides: Any):
    """The algorithm's config dataclass from ACTORQ_<NAME>_* variables plus overrides."""
    from actorq.config import load_settings

    _check_name(name)
    return load_settings(_REGISTRY[name][0], environ, prefix=config_prefix(name), **overrides)


def config_from_dict(name: str, values: Mapping[str, Any]) -> Any:
    """The algorithm's config from a checkpoint's recorded fields; fields this version
    does not know are ignored, missing ones take their defaults."""
    _check_name(name)
    config_cls = _REGISTRY[name][0]
    known = {f.name for f in dataclasses.fields(config_cls)}
    return config_cls(**{k: v for k, v in values.items() if k in known})


def policy_spec(env_id: str, algo: str, hidden: tuple[int, ...], config: Any = None) -> MLPSpec:
    """The network actors run for `algo` on `env_id` (Q-network, tanh actor, or the zoo's
    CNN on pixel envs); EnvError when the env is unknown or does not fit the algorithm."""
    from actorq.envs import EnvError, describe_env
    from actorq.envs.pixel import is_pixel_id

    # Pixel envs are described as they are (discrete), so that an algorithm without a CNN
    # policy gets the pixel message below rather than one about Box spaces.
    info = describe_env(env_id, continuous=None if is_pixel_id(env_id) else is_continuous(algo))
    if info.pixels:  # minatar:, ale: -> the zoo's CNN (actorq.models.cnn)
        if algo not in PIXEL_ALGORITHMS:
            raise EnvError(
                f"{env_id!r} has pixel observations and discrete actions; {algo} has no CNN "
                f"policy (pixel envs run with --algo {', '.join(PIXEL_ALGORITHMS)})"
            )
        if getattr(config, "qat_bits", 0):
            raise EnvError(f"{env_id!r}: quantization-aware training (--qat-bits) covers MLP "
                           "policies only, not the CNN of pixel envs")  # fmt: skip
        from actorq.models.cnn import cnn_spec_for

        return cnn_spec_for(info.obs_shape, info.num_actions)  # type: ignore[return-value]
    if info.continuous:
        norm = bool(getattr(config, "obs_norm", False))
        return MLPSpec(info.obs_dim, info.act_dim, hidden, "relu", "tanh", input_norm=norm)
    return MLPSpec(info.obs_dim, info.num_actions, hidden)


def make_algorithm(
    name: str,
    obs_dim: int,
    num_outputs: int,
    hidden: tuple[int, ...],
    config: Any = None,
    device: str = "cpu",
    seed: int = 0,
    spec: Any = None,
) -> Algorithm:
    """A fresh learner on its default update path (actorq.algos.capture). `num_outputs`:
    actions (DQN) or action dimensions; `config` must be the algorithm's own (default:
    its defaults); `spec` (DQN, on-policy) replaces the MLP, e.g. a CNNSpec."""
    from actorq.algos.capture import use_default_path

    _check_name(name)
    config_cls, learner_cls = _REGISTRY[name]
    config = config_cls() if config is None else config
    if type(config) is not config_cls:
        raise TypeError(f"{name} needs a {config_cls.__name__}, got {type(config).__name__}")
    if name == "dqn":
        algo = learner_cls(spec or MLPSpec(obs_dim, num_outputs, hidden), config, device, seed)
    elif name in ON_POLICY_ALGORITHMS:  # a CNNSpec for pixel envs
        extra = {} if spec is None else {"spec": spec}
        algo = learner_cls(obs_dim, num_outputs, hidden, config, device, seed, **extra)
    else:
        algo = learner_cls(obs_dim, num_outputs, hidden, config, device, seed)
    return use_default_path(algo)
