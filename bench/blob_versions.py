"""Consecutive policy versions of a real learner, for measuring delta broadcasts.

A short in-process training loop (the real `actorq.algos` learner, a gymnasium vector
env, a numpy replay) that takes `policy_weights()` every `publish_every` updates, as the
learner service publishes them. Used by bench/bench_sparse_blob.py and its tests.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import numpy as np
import torch

from actorq.actor.stepper import VectorStepper
from actorq.algos.factory import make_algorithm, policy_spec
from actorq.envs import make_vector_env
from actorq.models.mlp import MLPSpec

ENVS = 8


def _explore(algo_name: str, act_dim: int, rng: np.random.Generator) -> Callable:
    def act(policy: torch.nn.Module, obs: np.ndarray) -> np.ndarray:
        with torch.inference_mode():
            out = policy(torch.from_numpy(obs)).numpy()
        if algo_name == "dqn":
            greedy = out.argmax(axis=1)
            random = rng.integers(0, out.shape[1], len(obs))
            return np.where(rng.random(len(obs)) < 0.1, random, greedy)
        noisy = out + rng.normal(0.0, 0.1, out.shape)
        return np.clip(noisy, -1.0, 1.0).astype(np.float32)

    return act


def policy_versions(
    env_id: str,
    algo_name: str,
    hidden: tuple[int, ...],
    versions: int,
    publish_every: int = 50,
    warmup: int = 1000,
    seed: int = 0,
) -> Iterator[tuple[MLPSpec, dict[str, np.ndarray]]]:
    """Yield (spec, fp32 policy weights) every `publish_every` updates, `versions` times.

    One update per env transition after `warmup` random transitions (samples per insert
    = batch size), the policy acting with exploration noise, as actors do.
    """
    from actorq.quant import quantized_policy_from_weights

    torch.manual_seed(seed)
    rng = np.random.default_rng(seed)
    spec = policy_spec(env_id, algo_name, hidden, None)
    algo = make_algorithm(algo_name, spec.obs_dim, spec.num_outputs, hidden, seed=seed)
    env = make_vector_env(env_id, ENVS, seed=seed)
    act = _explore(algo_name, spec.num_outputs, rng)
    replay = _Replay(spec.obs_dim, None if algo_name == "dqn" else spec.num_outputs)
    try:
        stepper = VectorStepper(env)
        obs = stepper.reset(seed=seed)
        published, steps = 0, 0
        policy = quantized_policy_from_weights(algo.policy_weights(), algo.policy_spec, "fp32")
        while published < versions:
            if steps < warmup:
                action = _random_action(algo_name, spec.num_outputs, rng)
            else:
                action = act(policy, obs)
            result = stepper.step(action)
            valid = result.valid
            replay.add(
                obs[valid],
                action[valid],
                result.rewards[valid],
                result.next_obs[valid],
                result.terminated[valid],
            )
            obs, steps = result.obs, steps + ENVS
            if steps < warmup:
                continue
            for _ in range(ENVS):
                algo.update(replay.sample(algo.config.batch_size, rng))
                if algo.num_updates % publish_every == 0:
                    weights = algo.policy_weights()
                    policy = quantized_policy_from_weights(weights, algo.policy_spec, "fp32")
                    published += 1
                    yield algo.policy_spec, weights
    finally:
        env.close()


def _random_action(algo_name: str, act_dim: int, rng: np.random.Generator) -> np.ndarray:
    if algo_name == "dqn":
        return rng.integers(0, act_dim, ENVS)
    return rng.uniform(-1, 1, (ENVS, act_dim)).astype(np.float32)


class _Replay:
    """Preallocated numpy replay, large enough for a bench run."""

    def __init__(self, obs_dim: int, act_dim: int | None, capacity: int = 200_000) -> None:
        self.obs = np.zeros((capacity, obs_dim), np.float32)
        self.next_obs = np.zeros((capacity, obs_dim), np.float32)
        self.action = (
            np.zeros(capacity, np.int64)
            if act_dim is None
            else np.zeros((capacity, act_dim), np.float32)
        )
        self.reward = np.zeros(capacity, np.float32)
        self.done = np.zeros(capacity, bool)
        self.size = 0

    def add(self, obs, action, reward, next_obs, done) -> None:
        n = min(len(obs), len(self.obs) - self.size)
        end = self.size + n
        self.obs[self.size : end], self.next_obs[self.size : end] = obs[:n], next_obs[:n]
        self.action[self.size : end], self.reward[self.size : end] = action[:n], reward[:n]
        self.done[self.size : end] = done[:n]
        self.size = end

    def sample(self, batch: int, rng: np.random.Generator) -> dict[str, np.ndarray]:
        picks = rng.integers(0, self.size, batch)
        return {
            "obs": self.obs[picks],
            "action": self.action[picks],
            "reward": self.reward[picks],
            "next_obs": self.next_obs[picks],
            "done": self.done[picks],
        }
