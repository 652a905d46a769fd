"""`actorq run`'s settings: one machine, every service a separate process on loopback."""

from __future__ import annotations

import math
from dataclasses import dataclass

from actorq.config_parse import (
    ALGORITHMS,
    ON_POLICY,
    REPLAY_KINDS,
    _check,
    _check_precision,
    check_env_backend,
    check_learner_device,
)


@dataclass
class RunSettings:
    """`actorq run`: one machine, every service a separate process on loopback."""

    env: str = "CartPole-v1"
    algo: str = "dqn"
    actors: int = 2
    envs_per_actor: int = 8
    precision: str = "int8"
    hidden: tuple[int, ...] = (64, 64)
    max_env_steps: int = 500000  # stop when the actors together took this many; 0 = no limit
    target_return: float | None = 475.0  # stop when the evaluator's mean reaches it
    settle_at: float | None = None  # the learner settles when the evaluator's mean reaches it
    max_seconds: float = 0.0  # wall-clock budget; 0 = none
    seed: int = 0
    run_dir: str = ""  # default: runs/<env>-<precision>-<timestamp>
    redis_url: str = ""  # empty = start an embedded Redis for this run
    eval_envs: int = 25  # evaluator envs: 4 rounds of 25 make the 100-episode mean
    samples_per_insert: float = 16.0
    learners: int = 1  # data-parallel learner processes (gradients all-reduced)
    replay: str = "uniform"  # uniform | prioritized
    ingest: str = ""  # thread | process (the learner's ACTORQ_INGEST); "" = its own default
    qat_bits: int = 0  # > 0: train the policy network with fake quantization at 2..8 bits
    unroll: int = 64  # on-policy algorithms: steps per trajectory segment (T)
    sparsity_actor: float = 0.0  # > 0: RLx2 sparse training (actorq.sparse), actor share of 0s
    sparsity_critic: float = 0.0  # the same for the critics
    learner_device: str = "auto"  # auto | cpu | cuda | cuda:N (the learner's ACTORQ_DEVICE)
    env_backend: str = "gymnasium"  # gymnasium | envpool: who builds the actors' vector envs
    # on: a CPU learner gets cores of its own, the other services the rest
    # (actorq.launch.cores); auto: the same, shared while the learner mostly waits for
    # data (CartPole solved 24% sooner than off on 2 cores, BENCHMARKS 20); off: the
    # scheduler places every process
    pin_learner: str = "auto"

    def __post_init__(self) -> None:
        self._check_sparsity()
        check_learner_device(self.learner_device, "--learner-device")
        check_env_backend(self.env_backend, self.algo in ON_POLICY, "--env-backend")
        _check(
            self.replay in REPLAY_KINDS,
            f"--replay: expected one of {', '.join(REPLAY_KINDS)}, got {self.replay!r}",
        )
        _check(
            self.ingest in ("", "thread", "process")
            and not (self.ingest and self.algo in ON_POLICY),
            f"--ingest: expected thread or process for an off-policy algorithm (on-policy "
            f"learners read segments, not replay), got {self.ingest!r} with {self.algo}",
        )
        _check(
            self.pin_learner in ("auto", "on", "off"),
            f"--pin-learner: expected auto, on or off, got {self.pin_learner!r}",
        )
        _check(1 <= self.learners <= 16, f"--learners: expected 1..16, got {self.learners}")
        _check(
            self.settle_at is None or (self.learners == 1 and math.isfinite(self.settle_at)),
            f"--settle-at: expected a finite return on one learner or 'none', got "
            f"{self.settle_at} with --learners {self.learners}",
        )
        _check(
            self.learners == 1 or self.algo not in ON_POLICY,
            f"--learners {self.learners}: parallel learners are for off-policy algorithms "
            f"(dqn, ddpg, td3, sac, d4pg), got {self.algo!r}",
        )
        _check(
            self.qat_bits == 0 or 2 <= self.qat_bits <= 8,
            f"--qat-bits: expected 0 (off) or 2..8, got {self.qat_bits}",
        )
        _check(
            self.algo in ALGORITHMS,
            f"--algo: expected one of {', '.join(ALGORITHMS)}, got {self.algo!r}",
        )
        _check(self.actors >= 1, f"--actors: expected >= 1, got {self.actors}")
        _check(1 <= self.unroll <= 4096, f"--unroll: expected 1..4096, got {self.unroll}")
        _check(self.actors <= 256, f"--actors: expected <= 256, got {self.actors}")
        _check(
            self.envs_per_actor >= 1, f"--envs-per-actor: expected >= 1, got {self.envs_per_actor}"
        )
        _check_precision(self.precision)
        _check(self.max_env_steps >= 0, f"--max-env-steps: expected >= 0, got {self.max_env_steps}")
        _check(
            self.max_env_steps > 0 or self.max_seconds > 0,
            "--max-env-steps 0 (no limit) needs --max-seconds, or nothing would end the run",
        )
        _check(self.max_seconds >= 0, f"--max-seconds: expected >= 0, got {self.max_seconds}")
        _check(self.eval_envs >= 1, f"--eval-envs: expected >= 1, got {self.eval_envs}")
        _check(
            self.samples_per_insert > 0,
            f"--samples-per-insert: expected > 0, got {self.samples_per_insert}",
        )

    def _check_sparsity(self) -> None:
        for name in ("sparsity_actor", "sparsity_critic"):
            value = getattr(self, name)
            flag = "--" + name.replace("_", "-")
            _check(0.0 <= value < 1.0, f"{flag} (or --sparsity): expected 0 <= x < 1, got {value}")
        if self.sparsity_actor == 0 and self.sparsity_critic == 0:
            return
        sparse_algos = ("ddpg", "td3", "sac", "d4pg")  # actorq.sparse.config.SPARSE_ALGORITHMS
        _check(
            self.algo in sparse_algos,
            f"--sparsity: sparse training needs an actor-critic algorithm "
            f"({', '.join(sparse_algos)}), got --algo {self.algo}",
        )
        _check(
            self.learners == 1,
            f"--sparsity: sparse training runs on one learner, got --learners {self.learners}",
        )
        _check(
            self.replay == "uniform",
            f"--sparsity: RLx2's dynamic-capacity replay needs --replay uniform, got {self.replay}",
        )
