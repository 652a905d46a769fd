"""How far the actors' behaviour policy is from the learner's, on sampled replay rows, and
the truncated importance correction of learner-side n-step returns.

`BehaviourMonitor` compares what actors recorded (their int8, lagged policy's choice
before exploration and log mu(a|s) of the taken action) with the learner's policy: mean
|mu_b - mu_l| / 2 (continuous) or the share of differing greedy actions (discrete), plus
log pi(a|s) - log mu(a|s) with pi the learner's policy explored as the behaviour was.

`NStepCorrection`: a one-step target needs no correction (Q-learning is off-policy), but
an n-step return sums rewards that followed the behaviour's actions a_1 .. a_{n-1}. Each
n-step row is weighted by prod_{k=1}^{steps-1} min(rho_bar, pi(a_k|s_k) / mu(a_k|s_k))
(truncated per-decision ratios, as Retrace and V-trace). This needs the intermediate
states, so only the learner-side n-step path (ACTORQ_DELAYED_NSTEP, DDPG and TD3) has it.
DQN's greedy target makes the trace a cut at the first exploratory action, which its
actors make themselves (ACTORQ_NSTEP_CUT, actorq.actor.nstep); D4PG (folded on actors)
and SAC (another policy density) are refused.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from actorq import metrics
from actorq.config import ConfigError
from actorq.exploration import clipped_gaussian_logp, epsilon_from_logp

CORRECTABLE_ALGORITHMS = ("ddpg", "td3")
TRACE_KEYS = ("trace_obs", "trace_action", "trace_logp", "trace_valid", "trace_known")
_EMA = 0.05  # status figures average about the last 20 measurements


@dataclass(frozen=True)
class GapStats:
    gap: float
    fresh_gap: float  # rows acted by the newest version or the one before (NaN: none)
    log_ratio_mean: float
    log_ratio_abs_mean: float
    rho_mean: float
    measured: int
    unmeasured: int


def continuous_gap(
    batch: dict[str, np.ndarray],
    learner_mean: np.ndarray,
    sigma: float,
    newest_version: int | None = None,
) -> GapStats:
    """Gap of the rows with behaviour fields; `learner_mean` [M, A] at those rows' obs."""
    rows = batch["has_behaviour"]
    row_gap = np.abs(batch["behaviour"][rows] - learner_mean).mean(axis=1) / 2.0
    logp = batch["behaviour_logp"][rows]
    known = ~np.isnan(logp)
    log_ratio = np.empty(0)
    if known.any() and sigma > 0:
        pi = clipped_gaussian_logp(batch["action"][rows][known], learner_mean[known], sigma)
        log_ratio = pi.astype(np.float64) - logp[known]
    return _stats(batch, row_gap, log_ratio, newest_version)


def discrete_gap(
    batch: dict[str, np.ndarray],
    learner_greedy: np.ndarray,
    num_actions: int,
    newest_version: int | None = None,
) -> GapStats:
    """Gap of the rows with behaviour fields; `learner_greedy` [M] at those rows' obs."""
    rows = batch["has_behaviour"]
    behaviour, action = batch["behaviour"][rows], batch["action"][rows]
    row_gap = (behaviour != learner_greedy).astype(np.float64)
    logp = batch["behaviour_logp"][rows].astype(np.float64)
    known = ~np.isnan(logp)
    eps = epsilon_from_logp(logp[known], action[known] == behaviour[known], num_actions)
    pi = (1.0 - eps) * (action[known] == learner_greedy[known]) + eps / num_actions
    with np.errstate(divide="ignore"):
        log_ratio = np.log(pi) - logp[known]
    return _stats(batch, row_gap, log_ratio, newest_version)


def _stats(
    batch: dict[str, np.ndarray],
    row_gap: np.ndarray,
    log_ratio: np.ndarray,
    newest_version: int | None,
) -> GapStats:
    """Aggregates. Replay rows are of every age, so the gap is mostly replay age; the
    fresh gap (rows at most one version behind the newest) is what lag alone cannot
    explain: quantization, plus up to one version of learning."""
    rows = batch["has_behaviour"]
    finite = log_ratio[np.isfinite(log_ratio)]  # -inf: an action the learner never takes
    with np.errstate(over="ignore"):
        rho = np.minimum(1.0, np.exp(log_ratio))
    nan = float("nan")
    fresh = np.zeros(len(row_gap), np.bool_)
    if newest_version is not None:
        fresh = batch["policy_version"][rows] >= newest_version - 1
    return GapStats(
        gap=float(row_gap.mean()),
        fresh_gap=float(row_gap[fresh].mean()) if fresh.any() else nan,
        log_ratio_mean=float(finite.mean()) if finite.size else nan,
        log_ratio_abs_mean=float(np.abs(finite).mean()) if finite.size else nan,
        rho_mean=float(rho.mean()) if rho.size else nan,
        measured=int(rows.sum()),
        unmeasured=int((~rows).sum()),
    )


def _average(recent: dict[str, float], name: str, value: float) -> None:
    """Exponential moving average for status figures; NaN (nothing measured) is skipped."""
    if math.isnan(value):
        return
    before = recent.get(name)
    recent[name] = value if before is None else before + _EMA * (value - before)


class BehaviourMonitor:
    """Measures the gap on every `every`-th sampled batch (0 = never), before the update,
    so it is the actors' distance from the learner, not the learner's own step; and at
    most once per `min_seconds` of wall clock: a measurement is a forward of the batch
    through the learner's net (~0.5 ms on the CPU, torch), 4% of a 4,000 updates/s DQN
    learner's core every 50th batch, while its figures average the last ~20 anyway."""

    def __init__(
        self,
        algo: Any,
        continuous: bool,
        sigma: float,
        every: int,
        min_seconds: float = 0.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.algo, self.continuous, self.sigma, self.every = algo, continuous, sigma, every
        self.min_seconds, self._clock = min_seconds, clock
        self.recent: dict[str, float] = {}
        self.rows = {"measured": 0, "unmeasured": 0}
        self.calls = 0
        self._measured_call, self._measured_at = 1 - every, -math.inf  # the first is due

    def due(self, calls: int = 1) -> bool:
        """Count `calls` sampled batches; True (and the count restarts) when `every` of
        them passed since the last measurement and `min_seconds` too."""
        self.calls += calls
        if not self.every or self.calls - self._measured_call < self.every:
            return False
        now = self._clock()
        if now - self._measured_at < self.min_seconds:
            return False
        self._measured_call, self._measured_at = self.calls, now
        return True

    def maybe_measure(
        self, batch: dict[str, np.ndarray], newest_version: int | None = None
    ) -> GapStats | None:
        if not self.due():
            return None
        return self.measure(batch, newest_version)

    def measure(
        self, batch: dict[str, np.ndarray], newest_version: int | None = None
    ) -> GapStats | None:
        """`newest_version`: the learner's newest published version (for the fresh gap)."""
        rows = batch["has_behaviour"]
        stats = None
        if rows.any():
            obs = batch["obs"][rows]
            if self.continuous:
                mean = self.algo.actions(obs)
                stats = continuous_gap(batch, mean, self.sigma, newest_version)
            else:
                greedy, actions = self.algo.greedy_actions(obs), self.algo.policy_spec.num_outputs
                stats = discrete_gap(batch, greedy, actions, newest_version)
            self._record(stats)
        self._count(int(rows.sum()), int((~rows).sum()))
        return stats

    def _record(self, stats: GapStats) -> None:
        metrics.LEARNER_BEHAVIOUR_GAP.set(stats.gap)
        metrics.LEARNER_BEHAVIOUR_LOG_RATIO.labels("mean").set(stats.log_ratio_mean)
        metrics.LEARNER_BEHAVIOUR_LOG_RATIO.labels("abs_mean").set(stats.log_ratio_abs_mean)
        metrics.LEARNER_BEHAVIOUR_RHO.set(stats.rho_mean)
        if not math.isnan(stats.fresh_gap):
            metrics.LEARNER_BEHAVIOUR_FRESH_GAP.set(stats.fresh_gap)
        for name in ("gap", "fresh_gap", "log_ratio_mean", "log_ratio_abs_mean", "rho_mean"):
            _average(self.recent, name, getattr(stats, name))

    def _count(self, measured: int, unmeasured: int) -> None:
        self.rows["measured"] += measured
        self.rows["unmeasured"] += unmeasured
        metrics.LEARNER_BEHAVIOUR_ROWS.labels("true").inc(measured)
        metrics.LEARNER_BEHAVIOUR_ROWS.labels("false").inc(unmeasured)

    def status(self) -> dict[str, float]:
        """GetStatus counters (`behaviour_*`; metrics.jsonl and summary.json carry them)."""
        out = {f"behaviour_{k}": v for k, v in self.recent.items()}
        out |= {f"behaviour_rows_{k}": float(v) for k, v in self.rows.items()}
        return out


class NStepCorrection:
    """Truncated importance weights of learner-side n-step rows (see the module docstring)."""

    def __init__(self, algo: Any, sigma: float, rho_bar: float) -> None:
        self.algo, self.sigma, self.rho_bar = algo, sigma, rho_bar
        self.recent: dict[str, float] = {}
        self.unknown_steps = 0  # intermediate steps without a recorded log-prob (weight 1)

    def weights(self, batch: dict[str, np.ndarray]) -> np.ndarray:
        """Per-row weights [B]; takes the trace_* columns out of `batch`. Rows without
        a trace (one-step targets) weigh 1."""
        size = len(batch["reward"])
        if "trace_valid" not in batch:
            return np.ones(size, np.float32)
        trace = {k: batch.pop(k) for k in TRACE_KEYS}
        use = trace["trace_valid"] & trace["trace_known"]
        self.unknown_steps += int((trace["trace_valid"] & ~trace["trace_known"]).sum())
        factors = np.ones(use.shape, np.float64)
        if use.any():
            log_ratio = self.log_ratio(trace, use)
            with np.errstate(over="ignore"):
                ratio = np.exp(log_ratio)
            factors[use] = np.minimum(self.rho_bar, ratio)
            self._record("truncated_fraction", float(np.mean(ratio > self.rho_bar)))
        weights = factors.prod(axis=0).astype(np.float32)
        self._record("weight_mean", float(weights.mean()))
        return weights

    def log_ratio(self, trace: dict[str, np.ndarray], use: np.ndarray) -> np.ndarray:
        """log pi(a_k|s_k) - log mu(a_k|s_k) of the used intermediate steps."""
        mean = self.algo.actions(trace["trace_obs"][use])
        pi = clipped_gaussian_logp(trace["trace_action"][use], mean, self.sigma)
        return pi.astype(np.float64) - trace["trace_logp"][use]

    def _record(self, name: str, value: float) -> None:
        gauge = {
            "weight_mean": metrics.LEARNER_NSTEP_IS_WEIGHT,
            "truncated_fraction": metrics.LEARNER_NSTEP_IS_TRUNCATED,
        }[name]
        gauge.set(value)
        _average(self.recent, name, value)

    def status(self) -> dict[str, float]:
        out = {f"behaviour_is_{k}": v for k, v in self.recent.items()}
        return out | {"behaviour_is_unknown_steps": float(self.unknown_steps)}


def nstep_correction(
    algo_name: str, config: Any, algo: Any, delayed_nstep: int, sigma: float
) -> NStepCorrection | None:
    """The correction ACTORQ_<ALGO>_IS_CORRECTION asks for, or None; ConfigError where it
    would not be valid (see the module docstring)."""
    if not getattr(config, "is_correction", False):
        return None
    prefix = f"ACTORQ_{algo_name.upper()}_IS_CORRECTION"
    one_step = f"{prefix}: one-step targets need no correction (Q-learning is off-policy)"
    if algo_name == "dqn":  # DQN's actors cut their n-step windows (actorq.actor.nstep)
        if config.n_step <= 1:
            raise ConfigError(f"{one_step}; it applies with ACTORQ_DQN_N_STEP > 1")
        return None
    if algo_name not in CORRECTABLE_ALGORITHMS:
        raise ConfigError(
            f"{prefix}: the n-step correction needs the learner's policy at the intermediate "
            f"states, which only the learner-side n-step of {', '.join(CORRECTABLE_ALGORITHMS)} "
            f"keeps ({algo_name} folds n steps on its actors or has another policy density)"
        )
    if delayed_nstep <= 1:
        raise ConfigError(
            f"{one_step}; set ACTORQ_DELAYED_NSTEP > 1 for the learner-side n-step target"
        )
    if sigma <= 0:
        raise ConfigError(f"{prefix}: needs the actors' Gaussian ACTORQ_NOISE_SIGMA > 0")
    return NStepCorrection(algo, sigma, float(config.rho_bar))
