"""The learner's device/path record: gauge and Redis record written, read back for
summary.json; a learner service refuses a GPU it does not have (exit 2, one line)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import redis
import torch
from prometheus_client import REGISTRY

from actorq.learner.update_path import LearnerInfo, read_learner_info
from actorq.redis_keys import RedisKeys


def _info_value(device: str, path: str, dtype: str) -> float | None:
    labels = {"device": device, "update_path": path, "dtype": dtype}
    return REGISTRY.get_sample_value("actorq_learner_info", labels)


def test_announce_sets_gauge_and_record(redis_client: redis.Redis, redis_keys: RedisKeys) -> None:
    assert read_learner_info(redis_client, redis_keys) == {}  # nothing recorded yet
    LearnerInfo("cpu", "torch-eager", "float32").announce(redis_client, redis_keys)
    LearnerInfo("cuda:0", "cuda-graph", "float32", "auto: ...").announce(redis_client, redis_keys)
    assert _info_value("cuda:0", "cuda-graph", "float32") == 1.0
    assert _info_value("cpu", "torch-eager", "float32") is None  # one series: the current one
    assert read_learner_info(redis_client, redis_keys) == {
        "learner_device": "cuda:0",
        "learner_update_path": "cuda-graph",
        "learner_dtype": "float32",
    }


def test_record_carries_the_measured_timings(
    redis_client: redis.Redis, redis_keys: RedisKeys
) -> None:
    timings = {"cpu/numpy-flat": 0.21, "cpu/torch-eager": 0.93}
    LearnerInfo("cpu", "numpy-flat", "float32", "auto: ...", timings).announce(
        redis_client, redis_keys
    )
    info = read_learner_info(redis_client, redis_keys)
    assert info["learner_device_timings"] == timings and info["learner_device"] == "cpu"


def test_unreadable_record_is_empty(redis_client: redis.Redis, redis_keys: RedisKeys) -> None:
    redis_client.set(redis_keys.learner_info, b"not json")
    assert read_learner_info(redis_client, redis_keys) == {}
    assert read_learner_info(None, redis_keys) == {}


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a GPU: cuda is valid")
def test_learner_service_refuses_missing_gpu(redis_url: str) -> None:
    env = {**os.environ, "ACTORQ_DEVICE": "cuda", "ACTORQ_REDIS_URL": redis_url}
    result = subprocess.run(
        [sys.executable, "-m", "services.learner"],
        capture_output=True, text=True, timeout=120, env=env, stdin=subprocess.DEVNULL,
    )  # fmt: skip
    assert result.returncode == 2, result.stderr[-2000:]
    assert "learner device 'cuda'" in result.stderr and "available: cpu" in result.stderr
    assert "Traceback" not in result.stderr
