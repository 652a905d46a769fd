"""Bad bytes on the wire and in Redis: a clear status or a counted refusal, never a crash.

Regression tests for what the fuzzer (test_grpc_fuzz.py, bench/fuzz_grpc.py) found, and
corrupt or truncated blobs and metadata in Redis as a faulty disk or a rogue writer would
leave them.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator

import grpc
import pytest
import redis
from prometheus_client import REGISTRY

from actorq.actor.policy_follower import PolicyFollower
from actorq.models import MLPSpec
from actorq.quantizer.server import ParameterServer
from actorq.redis_keys import RedisKeys
from actorq.testing import grpc_fuzz as fz
from actorq.testing.waiting import wait_for
from actorq.v1 import parameter_server_pb2 as ps_pb2

SPEC = MLPSpec(obs_dim=4, num_outputs=2, hidden=(8,))


@pytest.fixture
def target(redis_client: redis.Redis, redis_keys: RedisKeys) -> Iterator[fz.FuzzTarget]:
    t = fz.FuzzTarget(redis_client, redis_keys)
    yield t
    t.close()


@pytest.mark.parametrize("method", sorted(fz.METHODS))
def test_undecodable_request_is_invalid_argument_not_internal(
    target: fz.FuzzTarget, method: str
) -> None:
    """Regression: grpc-python answered INTERNAL for request bytes that do not parse."""
    code = target.raw(method, [b"\xff\xff\xff"], stream_timeout=10)
    assert code == grpc.StatusCode.INVALID_ARGUMENT
    target.check_all()


def test_bad_message_inside_a_publish_stream_is_counted(target: fz.FuzzTarget) -> None:
    header = next(fz.valid_stream(1)).SerializeToString()
    code = target.raw("PublishWeights", [header, b"\x12\xff"])
    assert code == grpc.StatusCode.INVALID_ARGUMENT
    assert target.params.counters["rejections"] == 1
    assert target.store.latest_version() == 0
    target.check_all()


def test_message_over_the_size_limit_is_resource_exhausted(target: fz.FuzzTarget) -> None:
    code = target.raw("GetStatus", [b"\x00" * (9 << 20)], timeout=20)
    assert code == grpc.StatusCode.RESOURCE_EXHAUSTED
    target.check_all()


def test_corrupt_latest_pointer_is_data_loss_and_counted(
    target: fz.FuzzTarget, redis_client: redis.Redis, redis_keys: RedisKeys
) -> None:
    target.ps.PublishWeights(fz.valid_stream(1), timeout=10)
    redis_client.set(redis_keys.policy_latest, b"\x80garbage")
    with pytest.raises(grpc.RpcError) as info:
        target.ps.PublishWeights(fz.valid_stream(2), timeout=10)
    assert info.value.code() == grpc.StatusCode.DATA_LOSS
    assert redis_keys.policy_latest in info.value.details()
    counted = REGISTRY.get_sample_value(
        "actorq_quantizer_publish_rejections_total", {"reason": "corrupt_store"}
    )
    assert counted and counted >= 1
    target.check_healthy()


def test_restarted_quantizer_with_corrupt_metadata_starts_and_recovers(
    target: fz.FuzzTarget, redis_client: redis.Redis, redis_keys: RedisKeys
) -> None:
    target.ps.PublishWeights(fz.valid_stream(1), timeout=10)
    redis_client.hset(redis_keys.policy_meta(1), "blob_bytes", "lots")
    restarted = ParameterServer(target.store)  # used to raise here: no quantizer at all
    assert restarted.board.latest is None
    with pytest.raises(grpc.RpcError) as info:
        list(target.ps.GetPolicy(ps_pb2.GetPolicyRequest(version=1), timeout=5))
    assert info.value.code() == grpc.StatusCode.DATA_LOSS
    assert restarted.publish(fz.valid_stream(2)).version == 2  # the next version heals it


def _corrupt(blob: bytes, how: str) -> bytes:
    return {
        "truncated": blob[: len(blob) // 2],
        "cut_checksum": blob[:-5],
        "empty": b"",
        "garbage": b"\x80\x04\x95pickle-looking bytes",
        "flipped": blob[:-40] + bytes([blob[-40] ^ 1]) + blob[-39:],
    }[how]


def test_actor_refuses_corrupt_blobs_counts_them_logs_once_and_goes_on(
    target: fz.FuzzTarget,
    redis_client: redis.Redis,
    redis_keys: RedisKeys,
    caplog: pytest.LogCaptureFixture,
) -> None:
    address = f"127.0.0.1:{target.server.port}"
    follower = PolicyFollower(address, "actor-corrupt", expected_spec=SPEC).start()
    caplog.set_level(logging.WARNING, logger="actorq.actor.policy_follower")
    try:
        target.ps.PublishWeights(fz.valid_stream(1), timeout=10)
        assert follower.wait_for_policy(10)
        hows = ["truncated", "cut_checksum", "empty", "garbage", "flipped", "truncated"]
        behind_the_board = ParameterServer(target.store)  # stores without announcing
        for version, how in enumerate(hows, start=2):
            behind_the_board.publish(fz.valid_stream(version))
            blob = redis_client.get(redis_keys.policy_blob(version))
            redis_client.set(redis_keys.policy_blob(version), _corrupt(blob, how))
            delta = redis_client.get(redis_keys.policy_delta(version))
            if delta is not None:  # a corrupt delta falls back to the (corrupt) full blob
                redis_client.set(redis_keys.policy_delta(version), _corrupt(delta, how))
            target.params.board.post(target.store.announcement(version))
            wait_for(lambda v=version: follower.rejections == v - 1)
        assert follower.current.version == 1 and follower.loads == 1
        assert follower.rejections_by_reason == {"BlobError": len(hows)}
        warnings = [r for r in caplog.records if "refused policy" in r.getMessage()]
        assert len(warnings) == 1  # logged once per reason, every refusal counted
        counted = REGISTRY.get_sample_value(
            "actorq_actor_policy_rejections_total",
            {"instance": "actor-corrupt", "reason": "BlobError"},
        )
        assert counted == len(hows)
        target.ps.PublishWeights(fz.valid_stream(20), timeout=10)
        wait_for(lambda: follower.current.version == 20)  # training goes on
    finally:
        follower.stop()
