"""Greedy episodes of a candidate's weights on the learner's own envs, and a verdict
against a bar, for actorq.learner.settle: certification (fresh episodes of exactly the
candidate's weights at the actors' precision) and the publish gate once settled (a new
version is broadcast only if its greedy episodes reach the bar; settled DQN seeds still
relearned, earlier BENCHMARKS 12k/12p). Episodes are real env steps, counted.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

import numpy as np
import torch

from actorq.envs import make_vector_env
from actorq.guard import fp32_outputs
from actorq.models import MLPSpec
from actorq.models.cnn import CNNSpec
from actorq.quant import build_policy_module, decode_blob, encode_policy
from actorq.v1 import policy_pb2

# Envs played at once: a check of more episodes plays several rounds of this many, so a
# 100-episode certification of a pixel task does not open 100 emulators.
MAX_ENVS = 50

log = logging.getLogger(__name__)


class GreedyCheck:
    """Greedy validation of candidate versions on the learner's own envs."""

    def __init__(
        self,
        env_id: str,
        episodes: int,
        bar: float,
        seed: int,
        max_steps: int = 100_000,
        precision: int = policy_pb2.PRECISION_FP32,
    ) -> None:
        if episodes < 1:
            raise ValueError(f"validation episodes must be >= 1, got {episodes}")
        if not np.isfinite(bar):
            raise ValueError(f"validation bar must be a finite return, got {bar}")
        self.env_id, self.episodes, self.bar = env_id, episodes, float(bar)
        self.max_steps = max_steps  # vector steps per check: a safety net for endless play
        self.seed = seed
        # The precision actors act at: weights are played through that blob's decode, as
        # an actor builds its policy, so a check speaks for what actors would run.
        self.precision = precision
        self._env = None  # made on first use: most runs never settle
        self.checks = 0
        self.rounds = 0
        self.passed = 0
        self.env_steps = 0
        self.last_mean: float | None = None

    def passes(self, weights: Mapping[str, np.ndarray], spec: MLPSpec | CNNSpec) -> bool:
        """Play `episodes` greedy episodes with `weights`; True when their mean >= bar."""
        returns = self._play(weights, spec)
        self.checks += 1
        self.last_mean = float(returns.mean())
        ok = self.last_mean >= self.bar
        self.passed += int(ok)
        log.debug("validation %d: mean %.1f vs bar %g", self.checks, self.last_mean, self.bar)
        return ok

    def _play(self, weights: Mapping[str, np.ndarray], spec: MLPSpec | CNNSpec) -> np.ndarray:
        if self._env is None:
            self._env = make_vector_env(self.env_id, min(self.episodes, MAX_ENVS), self.seed)
        forward = self._forward(weights, spec)
        returns: list[np.ndarray] = []
        while sum(len(r) for r in returns) < self.episodes:
            returns.append(self._round(forward, spec))
        return np.concatenate(returns)[: self.episodes]

    def _round(self, forward, spec: MLPSpec | CNNSpec) -> np.ndarray:
        """One greedy episode on each env, from fresh start states."""
        self.rounds += 1
        obs, _ = self._env.reset(seed=self.seed + 10_007 * self.rounds)
        returns = np.zeros(self._env.num_envs)
        running = np.ones(self._env.num_envs, dtype=bool)
        continuous = isinstance(spec, MLPSpec) and spec.output_activation == "tanh"
        for _ in range(self.max_steps):
            outputs = forward(_as_probe(obs))
            actions = outputs if continuous else outputs.argmax(axis=1)
            obs, rewards, terminated, truncated, _ = self._env.step(actions)
            self.env_steps += int(running.sum())
            returns += np.where(running, rewards, 0.0)
            running &= ~(terminated | truncated)
            if not running.any():
                break
        return returns

    def _forward(self, weights: Mapping[str, np.ndarray], spec: MLPSpec | CNNSpec):
        """The policy's outputs on a batch: fp32, or through the actors' blob decode."""
        if self.precision == policy_pb2.PRECISION_FP32:
            return lambda probe: fp32_outputs(weights, spec, probe)
        encoded = encode_policy(weights, spec, self.precision, 0, 0)
        module = build_policy_module(decode_blob(encoded.envelope, expected_spec=spec))

        def quantized(probe: torch.Tensor) -> np.ndarray:
            with torch.inference_mode():
                return module(probe).numpy()

        return quantized

    def counters(self) -> dict[str, float]:
        """GetStatus counters (the launcher's summary and metrics.jsonl read them)."""
        return {
            "validation_checks": float(self.checks),
            "validation_passed": float(self.passed),
            "validation_env_steps": float(self.env_steps),
            "validation_last_mean": self.last_mean if self.last_mean is not None else 0.0,
        }

    def close(self) -> None:
        if self._env is not None:
            self._env.close()


def _as_probe(obs: np.ndarray) -> torch.Tensor:
    """Observations as the fp32 forward takes them: float32, or uint8 pixels as they are."""
    if obs.dtype == np.uint8:
        return torch.from_numpy(np.ascontiguousarray(obs))
    return torch.from_numpy(np.ascontiguousarray(obs, dtype=np.float32))
