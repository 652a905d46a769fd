"""ProgressReport against a real Redis: what the training thread requests reaches Redis
within half a second, the newest request wins, a repeated request is written again
(after a failed write), a busy learner's counts are written at most once per REPORT_MIN_SECONDS,
the newest of them, while an idle one reports at once, and close stops the reporter thread."""

from __future__ import annotations

import time

import redis

from actorq.learner.progress_report import ProgressReport
from actorq.redis_keys import RedisKeys


def _wait_for(client: redis.Redis, key: str, value: int, seconds: float = 2.0) -> float:
    started = time.monotonic()
    while time.monotonic() < started + seconds:
        if client.get(key) == str(value).encode():
            return time.monotonic() - started
        time.sleep(0.0005)
    raise AssertionError(f"{key} never became {value}: {client.get(key)!r}")


def test_requests_reach_redis_and_the_newest_wins(
    redis_client: redis.Redis, redis_keys: RedisKeys
) -> None:
    sampled = [0]
    report = ProgressReport(redis_client, redis_keys, lambda: sampled[0])
    try:
        sampled[0] = 1280
        started = time.perf_counter()
        report.request(10)
        assert time.perf_counter() - started < 0.001  # the training thread never waits
        assert _wait_for(redis_client, redis_keys.learner_updates, 10) < 0.5
        assert redis_client.get(redis_keys.learner_sampled) == b"1280"
        assert report.reported_updates == 10 and not report.due_while_idle(10)
        assert report.due_while_idle(11)  # a newer count nobody asked for yet is stale
        for updates in (20, 30, 40):  # faster than the reporter polls: the last one lands
            report.request(updates)
        _wait_for(redis_client, redis_keys.learner_updates, 40)
    finally:
        report.close()
    assert not report._thread.is_alive()


def test_a_repeated_request_is_written_again(
    redis_client: redis.Redis, redis_keys: RedisKeys
) -> None:
    report = ProgressReport(redis_client, redis_keys, lambda: 64)
    try:
        report.request(5)
        _wait_for(redis_client, redis_keys.learner_updates, 5)
        redis_client.delete(redis_keys.learner_updates)  # as if that write had been lost
        report.request(5)  # the idle learner's once-a-second repeat
        _wait_for(redis_client, redis_keys.learner_updates, 5)
    finally:
        report.close()


def test_a_busy_learner_reports_at_most_once_per_floor_an_idle_one_at_once(
    redis_client: redis.Redis, redis_keys: RedisKeys
) -> None:
    floor = 0.25
    report = ProgressReport(redis_client, redis_keys, lambda: 0, min_seconds=floor)
    try:
        started = time.monotonic()
        updates = 0
        while time.monotonic() < started + 1.0:  # a busy learner: a count every ms
            updates += 1
            report.request_paced(updates)
            time.sleep(0.001)
        busy_writes = report.writes
        # a turn per floor: 4 in the second, none of them at each of the ~1,000 requests
        assert 2 <= busy_writes <= 1.0 / floor + 1, busy_writes
        _wait_for(redis_client, redis_keys.learner_updates, updates)  # the newest lands
    finally:
        report.close()
    slow = ProgressReport(redis_client, redis_keys, lambda: 0, min_seconds=30.0)
    try:
        time.sleep(0.1)  # the reporter is inside its first 30 s turn
        slow.request(7)  # the idle path wakes it: no waiting for the turn
        assert _wait_for(redis_client, redis_keys.learner_updates, 7) < 1.0
    finally:
        slow.close()
    unpaced = ProgressReport(redis_client, redis_keys, lambda: 0, min_seconds=0.0)
    try:
        for updates in (40, 50):
            unpaced.request_paced(updates)
            assert _wait_for(redis_client, redis_keys.learner_updates, updates) < 0.5
    finally:
        unpaced.close()
    assert not unpaced._thread.is_alive()
