"""Settings of RLx2-style sparse training (Tan et al., ICLR 2023), read as ACTORQ_* variables.

Defaults are the reference implementation's (tyq1024/RLx2): topology update every 10,000
optimizer steps with an initial drop fraction of 0.5, cosine-annealed to zero at the end
of training; a 3-step TD target switched on after 300,000 updates; a replay buffer that,
every 10,000 inserted transitions, drops its oldest 10% while the policy distance of its
oldest data passes 0.2 and it holds more than its minimum. The n-step target and the
dynamic buffer are off unless set (`actorq run --sparsity` turns both on, scaled to the
run's budget: see `recipe_environ`).
"""

from __future__ import annotations

from dataclasses import dataclass

from actorq.config import ConfigError

SPARSE_ALGORITHMS = ("ddpg", "td3", "sac", "d4pg")  # actor-critic MLPs (see training.py)
DELAYED_NSTEP_ALGORITHMS = ("ddpg", "td3", "sac")  # D4PG takes n-step from its actors


@dataclass
class SparseTrainingConfig:
    """ACTORQ_<FIELD> on the learner service."""

    sparsity_actor: float = 0.0
    """Share of the actor's Linear weights that are zero, in [0, 1); 0 = dense."""
    sparsity_critic: float = 0.0
    """Share of the critics' Linear weights that are zero, in [0, 1); 0 = dense."""
    topology_interval: int = 10_000
    """Optimizer steps (of each network) between topology updates (RLx2's Delta T)."""
    topology_stop: int = 1_000_000
    """Learner updates after which the topology is frozen; the drop fraction reaches 0
    there (the actor's limit is divided by TD3's policy delay, as it steps less often)."""
    topology_drop_fraction: float = 0.5
    """Share of active weights dropped and regrown at the first update (RLx2's zeta)."""
    delayed_nstep: int = 1
    """n of the multi-step TD target once switched on (RLx2: 3); 1 = one-step always."""
    delayed_nstep_after: int = 300_000
    """Learner updates with the one-step target before the n-step one is used."""
    dynamic_buffer: bool = False
    """RLx2's dynamic-capacity replay (uniform replay only)."""
    buffer_distance_threshold: float = 0.2
    """Drop old data while its policy distance, 0.5 * mean squared difference between the
    current policy's and the stored actions (in [-1, 1] units), passes this."""
    buffer_check_every: int = 10_000
    """Inserted transitions between two checks of the policy distance."""
    buffer_min_fraction: float = 0.1
    """Never drop below this share of ACTORQ_REPLAY_CAPACITY (RLx2: 1e5 of 1e6)."""
    buffer_drop_fraction: float = 0.1
    """Share of the stored transitions dropped, oldest first, per check that passes."""
    buffer_noise_baseline: bool = True
    """Subtract the distance of the newest data (exploration noise alone) from that of
    the oldest: actors store noisy actions, RLx2 stored the noise-free ones."""

    @property
    def sparse(self) -> bool:
        return self.sparsity_actor > 0 or self.sparsity_critic > 0

    @property
    def active(self) -> bool:
        """Whether any RLx2 component is switched on."""
        return self.sparse or self.delayed_nstep > 1 or self.dynamic_buffer

    def __post_init__(self) -> None:
        for name in ("sparsity_actor", "sparsity_critic"):
            value = getattr(self, name)
            _check(0.0 <= value < 1.0, f"ACTORQ_{name.upper()}: expected 0 <= x < 1, got {value}")
        for name in ("topology_interval", "buffer_check_every"):
            value = getattr(self, name)
            _check(value >= 1, f"ACTORQ_{name.upper()}: expected >= 1, got {value}")
        for name in ("topology_stop", "delayed_nstep_after"):
            value = getattr(self, name)
            _check(value >= 0, f"ACTORQ_{name.upper()}: expected >= 0, got {value}")
        for name in ("topology_drop_fraction", "buffer_min_fraction"):
            value = getattr(self, name)
            _check(0.0 <= value <= 1.0, f"ACTORQ_{name.upper()}: expected 0..1, got {value}")
        _check(
            0.0 < self.buffer_drop_fraction < 1.0,
            f"ACTORQ_BUFFER_DROP_FRACTION: expected 0 < x < 1, got {self.buffer_drop_fraction}",
        )
        _check(
            self.buffer_distance_threshold >= 0,
            f"ACTORQ_BUFFER_DISTANCE_THRESHOLD: expected >= 0, got "
            f"{self.buffer_distance_threshold}",
        )
        _check(
            1 <= self.delayed_nstep <= 255,
            f"ACTORQ_DELAYED_NSTEP: expected 1..255, got {self.delayed_nstep}",
        )

    def check_usable(self, algo: str, replay: str = "uniform", world_size: int = 1) -> None:
        """Raise ConfigError when this learner setup cannot use what is switched on."""
        if self.sparse:
            _check(
                algo in SPARSE_ALGORITHMS,
                f"sparse training needs an actor-critic algorithm "
                f"({', '.join(SPARSE_ALGORITHMS)}), got {algo!r}",
            )
            _check(
                world_size == 1,
                f"sparse training runs on one learner, got world_size {world_size}",
            )
        if self.delayed_nstep > 1:
            _check(
                algo in DELAYED_NSTEP_ALGORITHMS,
                f"ACTORQ_DELAYED_NSTEP={self.delayed_nstep} needs "
                f"{', '.join(DELAYED_NSTEP_ALGORITHMS)} (d4pg builds n-step on its actors), "
                f"got {algo!r}",
            )
        if self.dynamic_buffer:
            _check(
                algo in SPARSE_ALGORITHMS,
                f"ACTORQ_DYNAMIC_BUFFER needs a deterministic-action policy "
                f"({', '.join(SPARSE_ALGORITHMS)}), got {algo!r}",
            )
            _check(
                replay == "uniform",
                f"ACTORQ_DYNAMIC_BUFFER needs uniform replay, got {replay!r}",
            )


def _check(ok: bool, message: str) -> None:
    if not ok:
        raise ConfigError(message)


def recipe_environ(
    sparsity_actor: float, sparsity_critic: float, algo: str, expected_updates: int
) -> dict[str, str]:
    """ACTORQ_* variables for the full RLx2 recipe on a run of about `expected_updates`
    learner updates: the reference's schedule shapes, scaled to the run.

    The reference trains 3M steps with the topology frozen at the end, 300 topology
    updates (every 10,000 steps) and the n-step target from step 300,000 (10%). A short
    run keeps those proportions: the stop at the budget, an update every 1/100 of it
    (at most every 10,000 steps, at least every 200) and n-step from 10% of it.
    """
    stop = max(1, expected_updates)
    env = {
        "ACTORQ_SPARSITY_ACTOR": str(sparsity_actor),
        "ACTORQ_SPARSITY_CRITIC": str(sparsity_critic),
        "ACTORQ_TOPOLOGY_STOP": str(stop),
        "ACTORQ_TOPOLOGY_INTERVAL": str(min(10_000, max(200, stop // 100))),
        "ACTORQ_DYNAMIC_BUFFER": "true",
    }
    if algo in DELAYED_NSTEP_ALGORITHMS:
        env["ACTORQ_DELAYED_NSTEP"] = "3"
        env["ACTORQ_DELAYED_NSTEP_AFTER"] = str(min(300_000, stop // 10))
    return env


NARROW_WIDTH = 256  # RLx2's width; below it 90% sparse fell behind dense (BENCHMARKS 13c, 13d)


def narrow_network_note(
    sparsity_actor: float, sparsity_critic: float, hidden: tuple[int, ...]
) -> str | None:
    """One line for a run about to train a very sparse narrow network, else None.

    Measured here: at 64x64, 90% sparse SAC on Pendulum-v1 ended 15.9% behind dense and
    TD3 on HalfCheetah-v5 failed to move in two seeds of three, while at 256x256 the same
    recipe held (BENCHMARKS 13c-13g). A warning, not an error: the run is still valid.
    """
    sparsity = max(sparsity_actor, sparsity_critic)
    if sparsity < 0.9 or not hidden or min(hidden) >= NARROW_WIDTH:
        return None
    shape = "x".join(str(h) for h in hidden)
    return (
        f"note: --sparsity {sparsity:g} on a {shape} network: RLx2's results are at "
        f"{NARROW_WIDTH}x{NARROW_WIDTH}, and below that width 90% sparse fell behind dense "
        f"here (BENCHMARKS.md 13c, 13d); consider --hidden {NARROW_WIDTH},{NARROW_WIDTH}"
    )
