"""Shared fixtures: a real Redis for the session, and per-test key prefixes on it."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator

import pytest
import redis

from actorq.redis_keys import RedisKeys
from actorq.redis_server import EmbeddedRedis, RedisUnavailable, check_redis

# A Redis to reuse when one answers there (override for CI hosts with Redis elsewhere).
LOCAL_REDIS_URL = os.environ.get("ACTORQ_TEST_REDIS_URL", "redis://127.0.0.1:6379/0")


@pytest.fixture(scope="session")
def redis_url() -> Iterator[str]:
    """The local Redis (LOCAL_REDIS_URL) when one answers, else an embedded redis-server."""
    try:
        check_redis(LOCAL_REDIS_URL, timeout=0.5)
    except RedisUnavailable:
        with EmbeddedRedis() as server:
            yield server.url
        return
    yield LOCAL_REDIS_URL


@pytest.fixture
def redis_client(redis_url: str) -> Iterator[redis.Redis]:
    """A binary-safe client (decode_responses=False), closed after the test."""
    client = redis.Redis.from_url(redis_url)
    yield client
    client.close()


@pytest.fixture
def redis_keys(redis_client: redis.Redis) -> Iterator[RedisKeys]:
    """Keys under a unique prefix; every key under it is deleted after the test."""
    keys = RedisKeys(prefix=f"test-{uuid.uuid4().hex}")
    yield keys
    stale = list(redis_client.scan_iter(match=f"{keys.prefix}:*", count=1000))
    if stale:
        redis_client.delete(*stale)
