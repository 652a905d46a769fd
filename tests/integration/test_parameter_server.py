"""Publish -> quantize -> store -> announce -> fetch -> verify -> load, through real gRPC
servers on ephemeral ports and a real Redis."""

from __future__ import annotations

import hashlib
import time
from collections.abc import Iterator

import grpc
import numpy as np
import pytest
import redis
import torch

from actorq.actor.policy_follower import PolicyFollower
from actorq.models import MLPSpec, QNetwork
from actorq.quant import decode_policy, spec_to_proto
from actorq.quantizer.server import ParameterServer, parameter_server_service
from actorq.quantizer.store import PolicyStore
from actorq.redis_keys import RedisKeys
from actorq.rpc import GrpcServer, make_channel
from actorq.rpc.weight_stream import weight_chunks
from actorq.testing.waiting import wait_for
from actorq.v1 import parameter_server_pb2 as ps_pb2
from actorq.v1 import parameter_server_pb2_grpc as ps_grpc
from actorq.v1 import policy_pb2

SPEC = MLPSpec(obs_dim=4, num_outputs=2, hidden=(64, 64))


def _weights(seed: int = 0, spec: MLPSpec = SPEC) -> dict[str, np.ndarray]:
    torch.manual_seed(seed)
    net = QNetwork(spec)
    return {k: v.detach().numpy().copy() for k, v in net.state_dict().items()}


def _header(version: int, precision: int = policy_pb2.PRECISION_INT8, spec: MLPSpec = SPEC):
    return ps_pb2.PublishHeader(
        version=version,
        learner_step=10 * version,
        precision=precision,
        spec=spec_to_proto(spec),
        num_tensors=len(spec.weight_shapes()),
    )


class Cluster:
    def __init__(
        self, client: redis.Redis, keys: RedisKeys, keep: int = 3, chunk: int = 4096
    ) -> None:
        self.store = PolicyStore(client, keys, keep_versions=keep)
        self.params = ParameterServer(self.store, chunk_bytes=chunk)
        self.server = GrpcServer("127.0.0.1", 0, [parameter_server_service(self.params)])
        self.server.start()
        self.address = f"127.0.0.1:{self.server.port}"
        self.channel = make_channel(self.address)
        self.stub = ps_grpc.ParameterServerStub(self.channel)

    def publish(self, version: int, weights=None, precision=policy_pb2.PRECISION_INT8):
        weights = _weights(version) if weights is None else weights
        return self.stub.PublishWeights(
            weight_chunks(_header(version, precision), weights, chunk_bytes=1000), timeout=10
        )

    def fetch(self, version: int = 0) -> tuple[bytes, list[ps_pb2.BlobChunk]]:
        chunks = list(self.stub.GetPolicy(ps_pb2.GetPolicyRequest(version=version), timeout=10))
        return b"".join(c.data for c in chunks), chunks

    def close(self) -> None:
        self.params.close()
        self.channel.close()
        self.server.stop(0.2)


@pytest.fixture
def cluster(redis_client: redis.Redis, redis_keys: RedisKeys) -> Iterator[Cluster]:
    c = Cluster(redis_client, redis_keys)
    yield c
    c.close()


def test_publish_fetch_load_int8_round_trip(cluster: Cluster) -> None:
    weights = _weights(1)
    reply = cluster.publish(1, weights)
    assert reply.version == 1
    assert reply.fp32_equivalent_bytes == SPEC.fp32_bytes()
    # int8 weights + fp32 per-channel scales + fp32 biases, plus a small header
    shapes = SPEC.weight_shapes().values()
    layout = sum(s[0] * s[1] + 4 * s[0] for s in shapes if len(s) == 2) + sum(
        4 * s[0] for s in shapes if len(s) == 1
    )
    assert layout <= reply.blob_bytes <= layout + 1024
    assert 0 < reply.quantization_error < 0.02

    envelope, chunks = cluster.fetch()
    assert len(chunks) > 1 and all(len(c.data) <= 4096 for c in chunks)
    assert len(envelope) == reply.blob_bytes == chunks[0].total_bytes
    policy = decode_policy(envelope, SPEC)
    assert policy.version == 1 and policy.precision == policy_pb2.PRECISION_INT8

    announcement = cluster.store.announcement(1)
    envelope_msg = policy_pb2.PolicyEnvelope.FromString(envelope)
    assert announcement.sha256 == hashlib.sha256(envelope_msg.payload).digest()
    assert cluster.params.bytes_sent == len(envelope)
    assert cluster.params.fp32_bytes_sent == SPEC.fp32_bytes()


def test_watch_announces_current_then_newer_versions(cluster: Cluster) -> None:
    cluster.publish(1)
    call = cluster.stub.WatchPolicy(
        ps_pb2.WatchPolicyRequest(actor_id="t", known_version=0), timeout=10
    )
    first = next(call)
    assert first.version == 1
    cluster.publish(2)
    second = next(call)
    assert second.version == 2 and second.precision == policy_pb2.PRECISION_INT8
    call.cancel()


@pytest.mark.parametrize(
    ("mutate", "code"),
    [
        (
            lambda w: w.__setitem__("layers.0.weight", np.full_like(w["layers.0.weight"], np.nan)),
            grpc.StatusCode.INVALID_ARGUMENT,
        ),
        (
            lambda w: w.__setitem__("layers.2.bias", np.full_like(w["layers.2.bias"], np.inf)),
            grpc.StatusCode.INVALID_ARGUMENT,
        ),
        (lambda w: w.pop("layers.4.weight"), grpc.StatusCode.INVALID_ARGUMENT),
        (
            lambda w: w.__setitem__("layers.0.weight", np.zeros((64, 5), np.float32)),
            grpc.StatusCode.INVALID_ARGUMENT,
        ),
    ],
    ids=["nan", "inf", "missing-tensor", "wrong-shape"],
)
def test_bad_weights_are_refused_and_nothing_is_stored(cluster: Cluster, mutate, code) -> None:
    cluster.publish(1)
    weights = _weights(2)
    mutate(weights)
    with pytest.raises(grpc.RpcError) as info:
        cluster.publish(2, weights)
    assert info.value.code() == code
    assert cluster.store.latest_version() == 1
    assert cluster.store.stored_versions() == [1]


def test_version_rollback_is_refused(cluster: Cluster) -> None:
    cluster.publish(5)
    with pytest.raises(grpc.RpcError) as info:
        cluster.publish(5)
    assert info.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    with pytest.raises(grpc.RpcError) as info:
        cluster.publish(3)
    assert info.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert cluster.store.latest_version() == 5


def test_stream_without_header_or_out_of_order_is_refused(cluster: Cluster) -> None:
    chunks = list(weight_chunks(_header(1), _weights(1), chunk_bytes=1000))
    with pytest.raises(grpc.RpcError) as info:
        cluster.stub.PublishWeights(iter(chunks[1:]), timeout=10)
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    swapped = [chunks[0], chunks[2], chunks[1], *chunks[3:]]
    with pytest.raises(grpc.RpcError) as info:
        cluster.stub.PublishWeights(iter(swapped), timeout=10)
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "offset" in info.value.details()
    assert cluster.store.latest_version() == 0


def test_get_policy_before_any_publication_is_not_found(cluster: Cluster) -> None:
    with pytest.raises(grpc.RpcError) as info:
        cluster.fetch()
    assert info.value.code() == grpc.StatusCode.NOT_FOUND


def test_keeps_only_last_k_versions(cluster: Cluster) -> None:
    for version in range(1, 6):
        cluster.publish(version)
    assert cluster.store.stored_versions() == [3, 4, 5]
    with pytest.raises(grpc.RpcError) as info:
        cluster.fetch(1)
    assert info.value.code() == grpc.StatusCode.NOT_FOUND


def test_restarted_quantizer_serves_what_redis_holds(
    redis_client: redis.Redis, redis_keys: RedisKeys
) -> None:
    first = Cluster(redis_client, redis_keys)
    first.publish(1)
    first.publish(2)
    envelope_before, _ = first.fetch()
    first.close()
    second = Cluster(redis_client, redis_keys)
    try:
        envelope_after, _ = second.fetch()
        assert envelope_after == envelope_before
        call = second.stub.WatchPolicy(ps_pb2.WatchPolicyRequest(known_version=0), timeout=10)
        assert next(call).version == 2
        call.cancel()
    finally:
        second.close()


@pytest.mark.parametrize(
    "precision",
    [policy_pb2.PRECISION_FP32, policy_pb2.PRECISION_FP16, policy_pb2.PRECISION_INT4],
)
def test_other_precisions_publish_and_size(cluster: Cluster, precision: int) -> None:
    reply = cluster.publish(1, precision=precision)
    ratio = reply.blob_bytes / SPEC.fp32_bytes()
    if precision == policy_pb2.PRECISION_FP32:
        assert 1.0 <= ratio < 1.05 and reply.quantization_error == 0.0
    elif precision == policy_pb2.PRECISION_FP16:
        assert 0.5 <= ratio < 0.6
    else:  # int4: half a byte per weight plus fp32 biases and one scale per row
        assert ratio < 0.25 and 0.01 < reply.quantization_error < 0.2


def test_follower_loads_new_versions_and_keeps_last_good_on_corruption(
    cluster: Cluster, redis_client: redis.Redis, redis_keys: RedisKeys
) -> None:
    cluster.publish(1)
    follower = PolicyFollower(cluster.address, "actor-test", expected_spec=SPEC).start()
    try:
        assert follower.wait_for_policy(10)
        assert follower.current is not None and follower.current.version == 1
        # Corrupt version 2 in Redis behind the quantizer's back: flip one payload byte.
        cluster.publish(2)
        wait_for(lambda: follower.current.version == 2)
        envelope = bytearray(redis_client.get(redis_keys.policy_blob(2)))
        envelope[len(envelope) // 2] ^= 0xFF
        _store_raw_version(cluster, redis_client, redis_keys, 3, bytes(envelope))
        wait_for(lambda: follower.rejections == 1)
        assert follower.current.version == 2  # kept the last good policy
        obs = np.zeros((3, SPEC.obs_dim), np.float32)
        assert follower.current.numpy_forward(obs).shape == (3, SPEC.num_outputs)
        cluster.publish(4)
        wait_for(lambda: follower.current.version == 4)
    finally:
        follower.stop()


def _store_raw_version(
    cluster: Cluster, client: redis.Redis, keys: RedisKeys, version: int, envelope: bytes
) -> None:
    """Write a version whose blob was tampered with, as a writer with Redis access could."""
    meta = client.hgetall(keys.policy_meta(version - 1))
    client.set(keys.policy_blob(version), envelope)
    client.hset(keys.policy_meta(version), mapping=meta)
    client.set(keys.policy_latest, version)
    client.zadd(keys.policy_versions, {str(version): version})
    cluster.params.board.post(cluster.store.announcement(version))


def test_unknown_precision_in_header_is_refused(cluster: Cluster) -> None:
    header = _header(1)
    header.precision = 42  # not a Precision value
    with pytest.raises(grpc.RpcError) as info:
        cluster.stub.PublishWeights(weight_chunks(header, _weights(1)), timeout=10)
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "42" in info.value.details()
    assert cluster.store.latest_version() == 0
    assert cluster.params.counters["rejections"] == 1


def test_follower_survives_quantizer_outage_and_late_start(
    redis_client: redis.Redis, redis_keys: RedisKeys
) -> None:
    from actorq.redis_server import find_free_port

    port = find_free_port()
    follower = PolicyFollower(
        f"127.0.0.1:{port}", "actor-test", expected_spec=SPEC, max_backoff=0.3
    )
    follower.start()  # nothing listens yet: it keeps retrying with backoff
    try:
        assert not follower.wait_for_policy(0.5)

        def serve() -> tuple[ParameterServer, GrpcServer]:
            params = ParameterServer(PolicyStore(redis_client, redis_keys))
            server = GrpcServer("127.0.0.1", port, [parameter_server_service(params)])
            server.start()
            return params, server

        params, server = serve()
        publisher = ps_grpc.ParameterServerStub(make_channel(f"127.0.0.1:{port}"))
        publisher.PublishWeights(
            weight_chunks(_header(1), _weights(1)), timeout=10, wait_for_ready=True
        )
        assert follower.wait_for_policy(10) and follower.current.version == 1

        params.close()
        server.stop(0.1)  # quantizer away: the actor keeps acting on version 1
        time.sleep(1.0)
        assert follower.current.version == 1
        out = follower.current.numpy_forward(np.zeros((2, SPEC.obs_dim), np.float32))
        assert out.shape == (2, SPEC.num_outputs)

        params, server = serve()  # back, serving what Redis holds, then a new version
        publisher.PublishWeights(
            weight_chunks(_header(2), _weights(2)), timeout=10, wait_for_ready=True
        )
        wait_for(lambda: follower.current.version == 2)
        params.close()
        server.stop(0.1)
    finally:
        follower.stop()


@pytest.mark.parametrize("version", [(1 << 64) - 1, 1 << 53, 0])
def test_version_beyond_exact_range_is_refused_and_does_not_wedge_the_store(
    cluster: Cluster, version: int
) -> None:
    """Regression (found by the fuzzer): version 2**64-1 moved `latest` in the Lua script,
    came back overflowed, so its blob was deleted but `latest` stayed at 2**64-1 and every
    later publication was refused. Versions must fit a double exactly (<= 2**53 - 1)."""
    header = _header(1)
    header.version = version
    with pytest.raises(grpc.RpcError) as info:
        cluster.stub.PublishWeights(weight_chunks(header, _weights(1)), timeout=10)
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "2**53 - 1" in info.value.details()
    assert cluster.store.latest_version() == 0 and cluster.store.stored_versions() == []
    assert cluster.publish(2).version == 2  # training goes on
