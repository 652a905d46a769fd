"""The run monitor stamps each episode with its own end time and the run's env steps at
that time (interpolated between polls), not with the poll that read it: real Redis."""

from __future__ import annotations

import time
from pathlib import Path

import redis

from actorq.actor.episodes import Episode
from actorq.launch.monitor import RunMonitor
from actorq.launch.processes import ServiceProcess
from actorq.redis_keys import RedisKeys


def _service(name: str) -> ServiceProcess:
    # A port nobody serves: the monitor's status calls fail quietly; only episodes matter.
    return ServiceProcess(name, f"services.{name}", {}, Path("/dev/null"), 9)


def test_episodes_between_two_polls_get_their_own_times_and_interpolated_steps(
    redis_client: redis.Redis, redis_keys: RedisKeys
) -> None:
    monitor = RunMonitor(
        redis_client, redis_keys, _service("learner"), _service("quantizer"),
        [_service("actor")], _service("evaluator"),
    )  # fmt: skip
    t0 = time.time()
    monitor._read_episodes(env_steps=1_000, wall=0.0)  # the first poll: nothing yet
    start, _ = monitor._last_poll
    time.sleep(0.4)
    ends = [start + 0.1, start + 0.2, start + 0.3]
    for i, ended in enumerate(ends):
        episode = Episode("actor-0", "train", float(i), 10, 1, 10 * i, ended)
        redis_client.xadd(redis_keys.episodes_stream, episode.fields())
    monitor._read_episodes(env_steps=5_000, wall=1.0)
    stop, _ = monitor._last_poll
    stamped = monitor.episodes
    assert [e.episode_return for e, _, _ in stamped] == [0.0, 1.0, 2.0]
    steps = [s for _, s, _ in stamped]
    walls = [w for _, _, w in stamped]
    assert len(set(steps)) == 3 and steps == sorted(steps)  # one point per episode
    assert all(1_000 < s < 5_000 for s in steps)
    for (_, s, _), ended in zip(stamped, ends, strict=True):
        expected = 1_000 + (ended - start) / (stop - start) * 4_000
        assert abs(s - expected) <= 1
    started_unix = monitor._started_unix
    assert all(abs(w - (e - started_unix)) < 1e-6 for w, e in zip(walls, ends, strict=True))
    assert started_unix <= t0
