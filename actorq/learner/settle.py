"""Settle once solved: a lower replay ratio after the evaluator first reaches a target.

DQN on CartPole-v1 collapses after it solves the task when the learner keeps training at
the replay ratio that solved it fastest (BENCHMARKS 12c/12f: 16 sampled per inserted
transition, every seed fell below 250 within 200k env steps, fp32 as int8), while a ratio
of 4 stays solved but solves ~3x later. So the learner starts at the fast ratio and, the
first time the evaluator's mean greedy return over its last `episodes` episodes reaches
`threshold`, drops to the settled ratio for the rest of the run, and multiplies its learning
rate by `LearnerSettings.settle_lr_scale`: 0 by default, which freezes the weights, since at
any rate above 0 Adam's normalised steps still walked solved policies off (BENCHMARKS 12r).

The learner reads the evaluator's episodes from the same Redis stream the progress monitor
reads (`RedisKeys.episodes_stream`). The lower ratio needs no message to the actors: each
update after settling is credited to the rate limiter as `base / settled` batches, so the
`sampled` count actors compare with their inserts (actorq.replay.rate_limiter) lets them run
that much further ahead of each update.
"""

from __future__ import annotations

import logging
import math
import time
from collections import deque

import redis

from actorq.actor.episodes import parse_episodes
from actorq.redis_keys import RedisKeys

log = logging.getLogger(__name__)


class SolvedWatch:
    """Follows the evaluator's greedy returns; `solved` latches once their mean is high."""

    def __init__(
        self,
        client: redis.Redis,
        keys: RedisKeys,
        threshold: float,
        episodes: int = 100,
        poll_seconds: float = 0.5,
    ) -> None:
        if not math.isfinite(threshold):
            raise ValueError(f"threshold must be a finite return, got {threshold}")
        if episodes < 1:
            raise ValueError(f"episodes must be >= 1, got {episodes}")
        self.client, self.keys = client, keys
        self.threshold, self.episodes = float(threshold), int(episodes)
        self.poll_seconds = poll_seconds
        self.recent: deque[float] = deque(maxlen=self.episodes)
        self.versions: deque[int] = deque(maxlen=self.episodes)  # policy of each episode
        self.solved = False
        self._last_id: bytes | str = "0-0"
        self._next_poll = 0.0

    def mean(self) -> float | None:
        """Mean of the last `episodes` evaluator returns; None until there are that many."""
        if len(self.recent) < self.episodes:
            return None
        return sum(self.recent) / len(self.recent)

    def poll(self) -> bool:
        """Read new evaluator episodes (at most every `poll_seconds`); True the first time
        the mean reaches the threshold, False otherwise (and on every call after)."""
        now = time.monotonic()
        if self.solved or now < self._next_poll:
            return False
        self._next_poll = now + self.poll_seconds
        try:
            reply = self.client.xread({self.keys.episodes_stream: self._last_id}, count=10_000)
        except (redis.ConnectionError, redis.TimeoutError) as exc:
            log.warning("could not read the evaluator's episodes: %s", exc)
            return False
        for _stream, entries in reply or []:
            for entry_id, fields in entries:
                self._last_id = entry_id
                if self._eval_return_reaches(fields):
                    self.solved = True
                    return True
        return False

    def _eval_return_reaches(self, fields: dict[bytes, bytes]) -> bool:
        """True when one of the entry's evaluator episodes brings the mean to the
        threshold (an entry carries one or more episodes: actorq.actor.episodes)."""
        try:
            episodes = parse_episodes(fields)
        except (KeyError, ValueError):
            return False  # a malformed entry is skipped here as the monitor skips it
        for episode in episodes:
            if episode.kind != "eval":
                return False
            self.recent.append(episode.episode_return)
            self.versions.append(episode.policy_version)
            mean = self.mean()
            if mean is not None and mean >= self.threshold:
                return True
        return False

    def solved_version(self) -> int | None:
        """The policy version to settle on: the newest one in the window whose own episodes
        there average at least the threshold, else the newest one in the window.

        The window mixes several versions (the evaluator plays one round per version), and
        the learner has moved on by the time it reads the stream (9-27 versions in
        BENCHMARKS 12t), so the weights in hand are not the ones that were measured."""
        by_version: dict[int, list[float]] = {}
        for version, episode_return in zip(self.versions, self.recent, strict=True):
            by_version.setdefault(version, []).append(episode_return)
        if not by_version:
            return None
        good = [v for v, rs in by_version.items() if sum(rs) / len(rs) >= self.threshold]
        return max(good) if good else max(by_version)


def credit_per_update(base_ratio: float, settled_ratio: float) -> float:
    """Batches the rate limiter counts per settled update, so inserts per update grow by
    base/settled and the replay ratio becomes `settled_ratio`."""
    if not (base_ratio > 0 and settled_ratio > 0):
        raise ValueError(
            f"replay ratios must be > 0, got base {base_ratio} and settled {settled_ratio}"
        )
    if settled_ratio > base_ratio:  # a negative credit would stall actors, not settle
        raise ValueError(
            f"settling lowers the replay ratio: settled {settled_ratio} > base {base_ratio}"
        )
    return base_ratio / settled_ratio
