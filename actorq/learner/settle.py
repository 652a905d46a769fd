"""Settle once solved: a lower replay ratio after a certified version reaches a target.

DQN on CartPole-v1 collapses after it solves the task when the learner keeps training at
the replay ratio that solved it fastest (BENCHMARKS 12c/12f: 16 sampled per inserted
transition, every seed fell below 250 within 200k env steps, fp32 as int8), while a ratio
of 4 stays solved but solves ~3x later. So the learner starts at the fast ratio and, once
a version is certified solved, drops to the settled ratio for the rest of the run, rolls
back to that version's weights and multiplies its learning rate by
`LearnerSettings.settle_lr_scale`: 0 by default, which freezes the weights, since at any
rate above 0 Adam's normalised steps still walked solved policies off (BENCHMARKS 12r).

Certification, in two steps:
1. `SolvedWatch` names a candidate: when the evaluator's mean greedy return over its last
   `episodes` episodes (one round of 25 by default) reaches `threshold`, the newest
   version in that window whose own episodes average the threshold.
2. The learner plays `settle_certify_episodes` (100) fresh greedy episodes of exactly that
   version's weights, at the actors' precision (actorq.learner.publish_gate). Only a mean
   at or above the threshold settles. A candidate that fails, or whose weights the learner
   no longer holds (published before a restart and not in the checkpoint), is rejected:
   the watch then names only newer versions, and learning goes on.
One lucky round of 25 episodes is not "solved" (a 25-episode round of 475+ whose
100-episode mean never reached 475 froze a policy before), and neither are the weights in
hand when the measured ones are gone (a restarted learner once froze weights that scored
324.6 on the evaluator's 100-episode mean after reading the old rounds from the stream).

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
    """Follows the evaluator's greedy returns and names candidate versions to certify."""

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
        self.solved = False  # set once settled: the watch stops reading
        self.rejected_through = 0  # candidates at or below this version were rejected
        self._last_id: bytes | str = "0-0"
        self._next_poll = 0.0

    def mean(self) -> float | None:
        """Mean of the last `episodes` evaluator returns; None until there are that many."""
        if len(self.recent) < self.episodes:
            return None
        return sum(self.recent) / len(self.recent)

    def poll(self) -> int | None:
        """Read new evaluator episodes (at most every `poll_seconds`); the version to
        certify when the window's mean reaches the threshold with a version newer than
        every rejected one in it, else None (always None once solved)."""
        now = time.monotonic()
        if self.solved or now < self._next_poll:
            return None
        self._next_poll = now + self.poll_seconds
        try:
            reply = self.client.xread({self.keys.episodes_stream: self._last_id}, count=10_000)
        except (redis.ConnectionError, redis.TimeoutError) as exc:
            log.warning("could not read the evaluator's episodes: %s", exc)
            return None
        for _stream, entries in reply or []:
            for entry_id, fields in entries:
                self._last_id = entry_id
                candidate = self._candidate_after(fields)
                if candidate is not None:
                    return candidate
        return None

    def reject(self, version: int) -> None:
        """`version` failed certification: from now on name only newer versions."""
        self.rejected_through = max(self.rejected_through, int(version))

    def held_versions(self) -> list[int]:
        """Versions in the window that may still be named (the checkpoint keeps their
        weights, so a restarted learner can certify them)."""
        return sorted({v for v in self.versions if v > self.rejected_through})

    def _candidate_after(self, fields: dict[bytes, bytes]) -> int | None:
        """The candidate once one of the entry's evaluator episodes brings the mean to the
        threshold (an entry carries one or more episodes: actorq.actor.episodes)."""
        try:
            episodes = parse_episodes(fields)
        except (KeyError, ValueError):
            return None  # a malformed entry is skipped here as the monitor skips it
        for episode in episodes:
            if episode.kind != "eval":
                return None
            self.recent.append(episode.episode_return)
            self.versions.append(episode.policy_version)
            mean = self.mean()
            if mean is not None and mean >= self.threshold:
                candidate = self.solved_version()
                if candidate is not None and candidate > self.rejected_through:
                    return candidate
        return None

    def solved_version(self) -> int | None:
        """The policy version to certify: the newest one in the window whose own episodes
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
