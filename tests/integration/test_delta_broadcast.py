"""Delta broadcasts end to end: real quantizer gRPC server, real Redis, a real follower."""

from __future__ import annotations

import numpy as np
import redis
import torch
from prometheus_client import REGISTRY

from actorq.actor.policy_follower import PolicyFollower
from actorq.models import MLPSpec, QNetwork
from actorq.quant import build_policy_module, decode_blob, spec_to_proto
from actorq.quantizer.server import ParameterServer, parameter_server_service
from actorq.quantizer.store import PolicyStore
from actorq.redis_keys import RedisKeys
from actorq.rpc import GrpcServer, make_channel
from actorq.rpc.weight_stream import weight_chunks
from actorq.testing.waiting import wait_for
from actorq.v1 import parameter_server_pb2 as ps_pb2
from actorq.v1 import parameter_server_pb2_grpc as ps_grpc
from actorq.v1 import policy_pb2

SPEC = MLPSpec(obs_dim=6, num_outputs=2, hidden=(128, 128), output_activation="tanh")


def _weights(version: int) -> dict[str, np.ndarray]:
    """Version 1 from a fixed init; each later one nudged a little, as training does."""
    torch.manual_seed(0)
    w = {k: v.detach().numpy().copy() for k, v in QNetwork(SPEC).state_dict().items()}
    rng = np.random.default_rng(version)
    for _ in range(version - 1):
        w = {k: (v + rng.normal(0, 2e-4, v.shape)).astype(np.float32) for k, v in w.items()}
    return w


def test_follower_takes_deltas_and_falls_back_to_the_full_blob(
    redis_client: redis.Redis, redis_keys: RedisKeys
) -> None:
    params = ParameterServer(PolicyStore(redis_client, redis_keys), chunk_bytes=4096)
    server = GrpcServer("127.0.0.1", 0, [parameter_server_service(params)])
    server.start()
    address = f"127.0.0.1:{server.port}"
    channel = make_channel(address)
    stub = ps_grpc.ParameterServerStub(channel)
    instance = "actor-delta"
    follower = PolicyFollower(address, instance, expected_spec=SPEC)

    def publish(version: int) -> None:
        stub.PublishWeights(weight_chunks(_header(version), _weights(version)), timeout=10)

    try:
        publish(1)
        follower.start()
        assert follower.wait_for_policy(10) and follower.current.kind == "full"
        publish(2)
        wait_for(lambda: follower.current.version == 2)
        assert follower.current.kind == "delta"
        announced = params.store.announcement(2)
        assert announced.delta_base == 1 and 0 < announced.delta_bytes < announced.blob_bytes
        assert follower.bytes_by_kind["delta"] == announced.delta_bytes
        full = decode_blob(params.store.load(2), SPEC)
        obs = torch.randn(8, SPEC.obs_dim)
        with torch.inference_mode():
            assert torch.equal(follower.current.module(obs), build_policy_module(full)(obs))

        # A corrupt delta in Redis: the follower counts a fallback and takes the full blob.
        behind_the_board = ParameterServer(params.store)
        behind_the_board.publish(weight_chunks(_header(3), _weights(3)))
        delta = redis_client.get(redis_keys.policy_delta(3))
        redis_client.set(redis_keys.policy_delta(3), delta[:-50] + bytes(50))
        params.board.post(params.store.announcement(3))
        wait_for(lambda: follower.current.version == 3)
        assert follower.current.kind == "full" and follower.delta_fallbacks == 1
        assert follower.rejections == 0
        assert (
            REGISTRY.get_sample_value(
                "actorq_actor_policy_delta_fallbacks_total",
                {"instance": instance, "reason": "BlobError"},
            )
            == 1
        )
        publish(4)  # and the next delta applies on top of the full blob
        wait_for(lambda: follower.current.version == 4)
        assert follower.current.kind == "delta"
        sent = params.deltas.sent_by_kind["delta"]  # the corrupt delta was sent too
        assert sent == follower.bytes_by_kind["delta"] + len(delta)
    finally:
        follower.stop()
        params.close()
        channel.close()
        server.stop(0.1)


def test_deltas_off_every_version_goes_out_full(
    redis_client: redis.Redis, redis_keys: RedisKeys
) -> None:
    """ACTORQ_DELTAS=false (bench_links' plain int8 arm): no delta is stored or sent."""
    params = ParameterServer(PolicyStore(redis_client, redis_keys), deltas=False)
    server = GrpcServer("127.0.0.1", 0, [parameter_server_service(params)])
    server.start()
    address = f"127.0.0.1:{server.port}"
    channel = make_channel(address)
    stub = ps_grpc.ParameterServerStub(channel)
    follower = PolicyFollower(address, "actor-nodelta", expected_spec=SPEC)
    try:
        stub.PublishWeights(weight_chunks(_header(1), _weights(1)), timeout=10)
        follower.start()
        assert follower.wait_for_policy(10)
        stub.PublishWeights(weight_chunks(_header(2), _weights(2)), timeout=10)
        wait_for(lambda: follower.current.version == 2)
        assert follower.current.kind == "full" and follower.bytes_by_kind["delta"] == 0
        assert params.store.announcement(2).delta_bytes == 0
        assert redis_client.get(redis_keys.policy_delta(2)) is None
    finally:
        follower.stop()
        params.close()
        channel.close()
        server.stop(0.1)


def _header(version: int) -> ps_pb2.PublishHeader:
    return ps_pb2.PublishHeader(
        version=version,
        precision=policy_pb2.PRECISION_INT8,
        spec=spec_to_proto(SPEC),
        num_tensors=len(SPEC.weight_shapes()),
    )
