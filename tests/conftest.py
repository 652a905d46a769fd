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


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """`gpu`-marked tests need CUDA: without it they are skipped with the reason (CI has
    no GPU; bench/gpu_check.sh runs them on a GPU machine with `-m gpu`)."""
    gpu_items = [item for item in items if item.get_closest_marker("gpu") is not None]
    if not gpu_items:
        return
    import torch

    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(
        reason=f"needs a CUDA GPU: torch {torch.__version__} sees none (make gpu-check runs it)"
    )
    for item in gpu_items:
        item.add_marker(skip)


@pytest.fixture
def one_torch_thread() -> Iterator[None]:
    """torch on one thread for the test (the learner's default): small MLP updates run ~20x
    faster than on two threads of a shared 2-core machine, and DQN's numpy update needs it."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


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


@pytest.fixture(scope="session")
def local_images() -> Iterator[str]:
    """A Docker engine holding `make image`'s images (actorq:latest, actorq-local/*).

    scripts/docker_engine.sh installs Debian's docker.io and starts dockerd when no engine
    answers; scripts/build_images.sh builds the images (base image and layers cached).
    An engine this fixture started is stopped again at the end of the session; the images
    stay in its store for the next run. Yields the docker CLI's path.
    """
    import shutil
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent
    docker = shutil.which("docker")
    was_running = docker is not None and _docker_answers(docker)
    _run_script(root / "scripts" / "docker_engine.sh", "start")
    try:
        # The compose tests run actorq:latest (learner) and actorq:core (the rest) only.
        os.environ.setdefault("ACTORQ_IMAGE_ROLES", "latest core")
        _run_script(root / "scripts" / "build_images.sh")
        yield shutil.which("docker") or "docker"
    finally:
        if not was_running:
            _run_script(root / "scripts" / "docker_engine.sh", "stop")


def _docker_answers(docker: str) -> bool:
    import subprocess

    return subprocess.run([docker, "info"], capture_output=True, check=False).returncode == 0


def _run_script(*args: object) -> None:
    import subprocess

    proc = subprocess.run(
        [str(a) for a in args], capture_output=True, text=True, check=False, timeout=1500
    )
    print(proc.stdout + proc.stderr)
    if proc.returncode != 0:
        pytest.fail(f"{args[0]} exited {proc.returncode}:\n{proc.stdout}\n{proc.stderr}")
