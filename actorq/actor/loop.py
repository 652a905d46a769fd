"""The actor's env loop and the evaluator's rounds.

Actor: M envs stepped together, one batched forward of the quantized policy per step,
Ape-X epsilon-greedy or Gaussian / OU noise, transitions stamped (actor, version,
precision) with their behaviour fields (actorq.learner.behaviour) and pushed to Redis
every `push_every` transitions. The evaluator acts greedily, writes no replay, and plays
one episode per env for each new policy version.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

import numpy as np
import redis
from gymnasium import spaces
from prometheus_client import Histogram

from actorq import metrics
from actorq.actor.columns import (
    PendingTransitions,
    StepColumns,
    StepRecorder,
    auto_push_every,
)
from actorq.actor.derived import (
    ContinuousExploration,
    actor_limiter,
    env_epsilons,
    ou_noise,
    wait_for_learner,
)
from actorq.actor.episodes import EpisodeTracker
from actorq.actor.fast_act import PolicyForward, fast_acting, make_recorder
from actorq.actor.nstep import NStepAccumulator, NStepRecorder
from actorq.actor.policy_follower import LoadedPolicy, PolicyFollower
from actorq.actor.push import Transaction
from actorq.actor.stepper import VectorStepper
from actorq.breakdown import LOOP_PHASES, PhaseClock, observe_many
from actorq.config import ActorSettings
from actorq.redis_keys import RedisKeys
from actorq.replay import RedisReplayWriter

log = logging.getLogger(__name__)

Explore = Callable[
    [np.ndarray, np.random.Generator], tuple[np.ndarray, np.ndarray, np.ndarray | None]
]
"""Outputs, generator -> (taken, the policy's own action, log mu(taken) or None)."""

EXPORT_EVERY_S = 0.25  # the actor's Prometheus counters are at most this stale


class _EnvWorker:
    """What the actor and the evaluator share: settings, env, policy, Redis, stop event."""

    kind = "train"

    def __init__(
        self,
        settings: ActorSettings,
        env,
        follower: PolicyFollower,
        client: redis.Redis,
        keys: RedisKeys,
        stop: threading.Event,
    ) -> None:
        self.s, self.env, self.follower = settings, env, follower
        self.client, self.keys, self.stop = client, keys, stop
        self.instance = settings.instance_id
        self.episodes = EpisodeTracker(env.num_envs, self.instance, self.kind)
        self.stepper = VectorStepper(env)
        self.env_steps = 0
        self.continuous = isinstance(env.single_action_space, spaces.Box)
        # Labelled metric children are looked up once, not on every env step.
        self._steps_metric = metrics.ACTOR_ENV_STEPS.labels(self.instance)
        self._inference_metric: dict[str, Histogram] = {}
        self._inference_seconds: list[tuple[str, float]] = []  # (precision, seconds)
        # numpy's forward for MLP policies (no torch in this process), torch's for pixels.
        self.forward = PolicyForward(fused=False, numpy_act=settings.numpy_act)

    def q_values(self, policy: LoadedPolicy, obs: np.ndarray) -> np.ndarray:
        """One batched forward; its latency goes to the inference histogram."""
        started = time.perf_counter()
        q = self.forward(policy, obs)
        self._inference_histogram(policy.precision).observe(time.perf_counter() - started)
        return q

    def _inference_histogram(self, precision: str) -> Histogram:
        histogram = self._inference_metric.get(precision)
        if histogram is None:
            histogram = metrics.ACTOR_INFERENCE_SECONDS.labels(self.instance, precision)
            self._inference_metric[precision] = histogram
        return histogram

    def _flush_observations(self) -> None:
        """The deferred inference latencies into their histograms (one per precision)."""
        for precision in {p for p, _ in self._inference_seconds}:
            values = [v for p, v in self._inference_seconds if p == precision]
            observe_many(self._inference_histogram(precision), values)
        self._inference_seconds.clear()

    def greedy(self, outputs: np.ndarray) -> np.ndarray:
        """Actions without exploration: argmax of Q-values, or the tanh actions as they are."""
        return outputs if self.continuous else outputs.argmax(axis=1)

    def _count_steps(self, steps: int) -> None:
        self.env_steps += steps
        self._steps_metric.inc(steps)


class Actor(_EnvWorker):
    """Steps the env with the follower's current policy and feeds the replay stream."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        settings = self.s
        self.epsilon = env_epsilons(settings)
        self.rng = np.random.default_rng(settings.seed + 7919 * settings.actor_index)
        self.ou = ou_noise(settings, self.env) if self.continuous else None
        self.nstep = (
            NStepAccumulator(
                self.env.num_envs, settings.n_step, settings.gamma, cut=settings.nstep_cut
            )
            if settings.n_step > 1
            else None
        )
        self.push_every = settings.push_every or auto_push_every(
            self.env.num_envs, self._transition_bytes()
        )
        self.writer = RedisReplayWriter(
            self.client,
            self.keys,
            maxlen_entries=max(settings.replay_stream_max_transitions // self.push_every, 1),
            obs_codec=settings.obs_codec,
        )
        self._build_acting(settings)
        self.inserted = 0
        self._steps_exported = 0
        self._in_flight: Transaction | None = None  # sent, replies not read yet
        self._in_flight_rows = 0
        self.version_of_pending = 0
        self.precision = "int8"
        self.limiter = actor_limiter(settings)
        metrics.ACTOR_RATE_LIMITED_SECONDS.labels(self.instance)  # 0 from the start, not no data
        self._backoff = 0.05
        # Runtime breakdown of each env-loop step (actorq.breakdown).
        # Phase histograms are observed in bulk at each push (actorq.breakdown.observe_many).
        self.clock = PhaseClock(
            LOOP_PHASES, metrics.ACTOR_STEP_PHASE_SECONDS, (self.instance,), deferred=True
        )
        self.loop_seconds = 0.0
        self.loop_steps = 0
        self._loop_started: float | None = None
        self._exported = (0.0, 0)  # loop seconds and steps already exported
        self._last_export = 0.0
        self._episodes_exported = 0
        self._episodes_metric = metrics.ACTOR_EPISODES.labels(self.instance)
        self._episode_return_metric = metrics.ACTOR_EPISODE_RETURN.labels(self.instance)

    def _build_acting(self, settings: ActorSettings) -> None:
        """The step's forward, exploration and recording: discrete 1-step transitions take
        the fast path (StepColumns, numba runners where they can), others the plain one."""
        self.fast = settings.fast_step and not self.continuous and self.nstep is None
        self.pending: PendingTransitions | StepColumns = PendingTransitions()
        self.record: StepRecorder = StepRecorder(self.pending, self.episodes)
        self.explore: Explore
        if self.continuous:
            self.explore = ContinuousExploration(settings, self.ou, lambda: self.env_steps)
            self.forward = PolicyForward(fused=False, numpy_act=settings.numpy_act)
        else:
            num_actions = int(self.env.single_action_space.n)
            fused = self.fast and settings.fused_act
            self.explore, self.forward = fast_acting(
                self.epsilon, num_actions, fused, settings.numpy_act
            )
        if self.nstep is not None:
            self.record = NStepRecorder(self.pending, self.episodes, self.nstep, self.continuous)
        elif self.fast:
            space = self.env.single_observation_space
            steps = -(-self.push_every // self.env.num_envs) + 1
            self.pending = StepColumns(
                self.env.num_envs, space.shape, self.stepper.obs_dtype, steps
            )
            self.record = make_recorder(self.pending, self.episodes, settings.fused_act)

    def _count_steps(self, steps: int) -> None:
        self.env_steps += steps  # to Prometheus every EXPORT_EVERY_S (_export_metrics)

    def _transition_bytes(self) -> int:
        obs_bytes = int(np.prod(self.env.single_observation_space.shape))
        obs_bytes *= 1 if self.stepper.obs_dtype == np.uint8 else 4
        return 2 * obs_bytes + 25  # + action, reward, done, behaviour, log-prob

    def run(self) -> None:
        # Every transition carries a real policy version, so wait for the first one.
        while not self.stop.is_set() and not self.follower.wait_for_policy(0.1):
            pass
        obs = self.stepper.reset(seed=self.s.seed + 1000 * self.s.actor_index)
        log.info(
            "%s acting on %d envs with epsilons %.4f..%.4f",
            self.instance,
            self.env.num_envs,
            self.epsilon.max(),
            self.epsilon.min(),
        )
        loop_started = self._loop_started = time.perf_counter()
        while not self.stop.is_set() and not self._budget_spent():
            self.clock.start()
            obs = self._step(obs)
            if self.pending.count >= self.push_every:
                self._push()
            self.loop_steps += 1
        self._push(final=True)
        self.loop_seconds = time.perf_counter() - loop_started
        self._export_loop_time()

    def _export_metrics(self, final: bool) -> None:
        """Counters and deferred observations to Prometheus at most every EXPORT_EVERY_S,
        and at the final push: at M = 128 pushes come every ~7 ms, and exporting at each
        cost ~2.5 us per vector step (BENCHMARKS.md 23l); scrapes come every few seconds."""
        now = time.perf_counter()
        if final or now - self._last_export >= EXPORT_EVERY_S:
            self._last_export = now
            self._export_loop_time()
            self._export_episodes()

    def _export_loop_time(self) -> None:
        """Loop seconds and steps, and the deferred histogram observations, to Prometheus
        (_export_metrics), rather than on every step."""
        self.clock.flush()
        self._flush_observations()
        self._steps_metric.inc(self.env_steps - self._steps_exported)
        self._steps_exported = self.env_steps
        seconds = self.loop_seconds or self._loop_seconds_so_far()
        metrics.ACTOR_LOOP_SECONDS.labels(self.instance).inc(seconds - self._exported[0])
        metrics.ACTOR_LOOP_STEPS.labels(self.instance).inc(self.loop_steps - self._exported[1])
        self._exported = (seconds, self.loop_steps)

    def breakdown_counters(self) -> dict[str, float]:
        """GetStatus counters of the runtime breakdown; loop time so far while running."""
        return {
            **self.clock.counters("step_seconds"),
            "loop_seconds": self.loop_seconds or self._loop_seconds_so_far(),
            "loop_steps": float(self.loop_steps),
        }

    def _loop_seconds_so_far(self) -> float:
        # Read from the gRPC thread mid-step: count the loop only up to the latest phase
        # mark, or a long wait in progress (rate limiter) would look like untimed work.
        if self._loop_started is None:
            return 0.0
        return max(self.clock.last_mark - self._loop_started, 0.0)

    def _budget_spent(self) -> bool:
        return self.s.max_env_steps > 0 and self.env_steps >= self.s.max_env_steps

    def _step(self, obs: np.ndarray) -> np.ndarray:
        """One vector step: forward, exploration, env step, recording (each timed)."""
        policy = self.follower.current
        assert policy is not None  # run() waits for the first policy
        out = self._forward(policy, obs)
        self.clock.mark("inference")
        taken, behaviour, logp = self.explore(out, self.rng)
        self.clock.mark("explore")
        step = self.stepper.step(taken)
        self.clock.mark("env_step")
        steps = self.record(obs, taken, behaviour, logp, step, policy.version, self.env_steps)
        if self.ou is not None:
            self.ou.reset(step.ended)
        self.version_of_pending, self.precision = policy.version, policy.precision
        self._count_steps(steps)
        self.clock.mark("record")
        return step.obs

    def _forward(self, policy: LoadedPolicy, obs: np.ndarray) -> np.ndarray:
        """`q_values` fused where it can be (fast_act);
        its latency is observed at the next export, not on every step."""
        started = time.perf_counter()
        q = self.forward(policy, obs)
        self._inference_seconds.append((policy.precision, time.perf_counter() - started))
        return q

    def _export_episodes(self) -> None:
        """Episode count and mean return to Prometheus, once per push: the mean over the
        last 100 returns cost ~10 us, paid on every step where an episode ended."""
        done = self.episodes.count - self._episodes_exported
        if done:
            self._episodes_metric.inc(done)
            self._episode_return_metric.set(self.episodes.mean_return)
            self._episodes_exported = self.episodes.count

    def _push(self, final: bool = False) -> None:
        """Read the previous push's replies, then send the pending transitions without
        waiting (at once when `final`). On an outage the unacknowledged transaction is
        resent at the next push, before anything newer, and the loop backs off."""
        if self._in_flight is not None and not self._collect(final):
            return
        if self.pending.count == 0:
            return
        batch = self.pending.batch(self.instance, self.version_of_pending, self.precision)
        # One MULTI/EXEC (all of it stored, or none; raw RESP, actorq.actor.push): the batch
        # with its counter, the finished episodes (one entry), and the counters the rate
        # limiter compares (a separate MGET: no difference measured, BENCHMARKS.md 16h).
        commands = self.writer.commands(batch)
        commands += self.episodes.commands(self.keys, self.s.episodes_maxlen)
        commands.append(("MGET", self.keys.inserted_counter, self.keys.learner_sampled))
        transaction = Transaction(self.client, commands)
        transaction.send()
        # The transaction's payload holds them now, until Redis acknowledges it.
        self._in_flight, self._in_flight_rows = transaction, len(batch)
        self.pending.clear()
        self.episodes.clear_pending()
        self.clock.mark("push")
        if final:
            self._collect(final)

    def _collect(self, final: bool) -> bool:
        """Read the in-flight transaction's replies (sending it again after a failure);
        False, after backing off, while Redis is away."""
        assert self._in_flight is not None
        try:
            counters = self._in_flight.result()[-1]
        except (redis.ConnectionError, redis.TimeoutError) as exc:
            self._on_redis_error(exc, final)
            self.clock.mark("push")  # the backoff wait included: it is time not acting
            return False
        # Acknowledged: forget them now, so a later error cannot send them twice.
        rows, self._in_flight, self._in_flight_rows = self._in_flight_rows, None, 0
        self._export_metrics(final)
        self.inserted += rows
        self._backoff = 0.05
        metrics.ACTOR_REPLAY_INSERTS.labels(self.instance).inc(rows)
        self.clock.mark("push")
        try:
            wait_for_learner(
                self.limiter, counters, self.client, self.keys, self.stop, self.instance
            )
        except (redis.ConnectionError, redis.TimeoutError) as exc:
            self._on_redis_error(exc, final)
            self.clock.mark("push")
            return True  # the push itself was acknowledged
        self.clock.mark("rate_limit_wait")
        return True

    @property
    def unacknowledged(self) -> int:
        """Transitions not yet acknowledged by Redis: pending plus the one in flight."""
        return self.pending.count + self._in_flight_rows

    def _on_redis_error(self, exc: Exception, final: bool) -> None:
        metrics.ACTOR_CONNECTION_ERRORS.labels(self.instance, "redis").inc()
        log.warning("redis unavailable (%s); holding %d transitions", exc, self.unacknowledged)
        if final and self.unacknowledged:
            log.warning("stopping with %d unacknowledged transitions", self.unacknowledged)
        if not final:
            self.stop.wait(self._backoff)
            self._backoff = min(self._backoff * 2, 2.0)
