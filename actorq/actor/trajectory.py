"""The on-policy actor: samples actions from the int8 policy's softmax and streams
fixed-length trajectory segments (T steps of its M envs) to Redis.

Each step records log mu(a|s) under the quantized policy that acted, so the learner
corrects lag and quantization (actorq.algos.ppo). A segment is stamped with the newest
version used. Actors wait while the learner is more than `onpolicy_queue_segments`
behind. SAME_STEP autoreset (native=False): every row is a real transition, and a
truncation keeps its true final observation.
"""

from __future__ import annotations

import contextlib
import logging
import time

import numpy as np
import redis

from actorq import metrics
from actorq.actor.loop import _EnvWorker
from actorq.onpolicy.segments import TrajectorySegment, encode_segment
from actorq.onpolicy.stream import SegmentWriter

log = logging.getLogger(__name__)


def log_softmax(logits: np.ndarray) -> np.ndarray:
    shifted = logits - logits.max(axis=1, keepdims=True)
    return shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True))


def sample_actions(logits: np.ndarray, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """(actions, log-probs) sampled from softmax(logits) per row (Gumbel-max)."""
    logp = log_softmax(logits.astype(np.float64))
    gumbel = -np.log(-np.log(rng.uniform(1e-12, 1.0, logp.shape)))
    actions = (logp + gumbel).argmax(axis=1)
    return actions, logp[np.arange(len(actions)), actions].astype(np.float32)


class _SegmentBuffer:
    """T steps of M envs, filled row by row."""

    def __init__(self, T: int, M: int, obs_shape: tuple[int, ...], obs_dtype) -> None:
        self.T, self.M, self.t = T, M, 0
        self.obs = np.zeros((T, M, *obs_shape), obs_dtype)
        self.action = np.zeros((T, M), np.int32)
        self.reward = np.zeros((T, M), np.float32)
        self.terminated = np.zeros((T, M), np.uint8)
        self.truncated = np.zeros((T, M), np.uint8)
        self.logp = np.zeros((T, M), np.float32)
        self.trunc_index: list[int] = []
        self.trunc_obs: list[np.ndarray] = []

    def add(self, obs, action, reward, terminated, truncated, logp, final_obs) -> None:
        t = self.t
        self.obs[t], self.action[t], self.reward[t] = obs, action, reward
        self.terminated[t], self.truncated[t], self.logp[t] = terminated, truncated, logp
        for m in np.flatnonzero(truncated & ~terminated):
            self.trunc_index.append(t * self.M + int(m))
            self.trunc_obs.append(final_obs[m])
        self.t += 1

    @property
    def full(self) -> bool:
        return self.t == self.T

    def segment(self, last_obs, actor_id: str, version: int, precision: str) -> TrajectorySegment:
        shape = self.obs.shape[2:]
        trunc_obs = np.array(self.trunc_obs, self.obs.dtype).reshape(-1, *shape)
        return TrajectorySegment(
            obs=self.obs.copy(), action=self.action.copy(), reward=self.reward.copy(),
            terminated=self.terminated.copy(), truncated=self.truncated.copy(),
            behaviour_logp=self.logp.copy(), last_obs=np.asarray(last_obs, self.obs.dtype),
            trunc_index=np.array(self.trunc_index, np.int32), trunc_obs=trunc_obs,
            actor_id=actor_id, policy_version=version, precision=precision,
        )  # fmt: skip

    def clear(self) -> None:
        self.t = 0
        self.trunc_index.clear()
        self.trunc_obs.clear()


class TrajectoryActor(_EnvWorker):
    """Steps M envs with actions sampled from the current policy; writes T-step segments."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        s = self.s
        self.rng = np.random.default_rng(s.seed + 7919 * s.actor_index)
        space = self.env.single_observation_space
        self.buffer = _SegmentBuffer(s.unroll_length, self.env.num_envs, space.shape, space.dtype)
        self.writer = SegmentWriter(self.client, self.keys, codec=s.obs_codec)
        # Exported at 0 from the start: an actor never held back reads 0, not "no data".
        metrics.ACTOR_RATE_LIMITED_SECONDS.labels(self.instance)
        self.inserted = 0  # transitions acknowledged by Redis
        self.epsilon = np.zeros(1)  # the status page reports a mean epsilon; none here
        self._backoff = 0.05

    def run(self) -> None:
        while not self.stop.is_set() and not self.follower.wait_for_policy(0.1):
            pass
        obs, _ = self.env.reset(seed=self.s.seed + 1000 * self.s.actor_index)
        version, precision = 0, "int8"
        while not self.stop.is_set() and not self._budget_spent():
            policy = self.follower.current
            assert policy is not None
            logits = self.q_values(policy, obs)  # pixels stay uint8
            actions, logp = sample_actions(logits, self.rng)
            next_obs, rewards, terminated, truncated, infos = self.env.step(actions)
            final_obs = infos.get("final_obs") if truncated.any() else None
            self.buffer.add(obs, actions, rewards, terminated, truncated, logp, final_obs)
            version, precision = policy.version, policy.precision
            self._count_steps(self.env.num_envs)
            self._track(rewards, terminated | truncated, version)
            obs = next_obs
            if self.buffer.full:
                segment = self.buffer.segment(obs, self.instance, version, precision)
                self.buffer.clear()
                self._write(segment)
                self._wait_for_learner()

    def _budget_spent(self) -> bool:
        return self.s.max_env_steps > 0 and self.env_steps >= self.s.max_env_steps

    def breakdown_counters(self) -> dict[str, float]:
        """GetStatus counters of the runtime breakdown: none, the phase clock
        (actorq.breakdown) times the off-policy loop only. Without this the status RPC
        failed and `actorq run` counted 0 env steps for on-policy runs."""
        return {}

    def _track(self, rewards: np.ndarray, ended: np.ndarray, version: int) -> None:
        before = self.episodes.count
        self.episodes.step(rewards, ended, version, self.env_steps)
        if self.episodes.count != before:
            metrics.ACTOR_EPISODES.labels(self.instance).inc(self.episodes.count - before)
            metrics.ACTOR_EPISODE_RETURN.labels(self.instance).set(self.episodes.mean_return)

    def _write(self, segment: TrajectorySegment) -> None:
        """Write one segment; on a Redis outage retry with backoff until stopped."""
        fields = encode_segment(segment, self.writer.codec)
        while not self.stop.is_set():
            try:
                self.writer.write_fields(fields, segment.steps)
                break
            except (redis.ConnectionError, redis.TimeoutError) as exc:
                metrics.ACTOR_CONNECTION_ERRORS.labels(self.instance, "redis").inc()
                log.warning("redis unavailable (%s); holding one segment", exc)
                self.stop.wait(self._backoff)
                self._backoff = min(self._backoff * 2, 2.0)
        else:
            return
        self._backoff = 0.05
        self.inserted += segment.steps
        metrics.ACTOR_REPLAY_INSERTS.labels(self.instance).inc(segment.steps)
        # On an outage episodes stay pending and go with the next flush.
        with contextlib.suppress(redis.ConnectionError, redis.TimeoutError):
            self.episodes.flush(self.client, self.keys, self.s.episodes_maxlen)

    def _wait_for_learner(self) -> None:
        """Wait while the segments queued for the learner exceed the allowed backlog."""
        started = time.perf_counter()
        limit = self.s.onpolicy_queue_segments
        while not self.stop.is_set():
            try:
                backlog = self.writer.backlog()
            except (redis.ConnectionError, redis.TimeoutError):
                backlog = 0
            if backlog <= limit:
                break
            self.stop.wait(0.005)
        waited = time.perf_counter() - started
        if waited > 0.001:
            metrics.ACTOR_RATE_LIMITED_SECONDS.labels(self.instance).inc(waited)
