"""Guarded broadcasts through the real quantizer: weights published over gRPC, a probe of
recent observations read from the real Redis replay stream (flat or uint8 pixel frames)
or trajectory segments, the stored blob and its metadata, and an actor's PolicyFollower
loading what actors would act with (MLP and CNN policies)."""

from __future__ import annotations

import numpy as np
import redis
import torch

from actorq.actor.policy_follower import PolicyFollower
from actorq.guard import GuardConfig, PolicyGuard, divergence
from actorq.guard_probes import replay_probe, segment_probe
from actorq.models import MLPSpec
from actorq.onpolicy.segments import TrajectorySegment, encode_segment
from actorq.onpolicy.stream import SegmentWriter
from actorq.quant import encode_policy
from actorq.quant.blob import decode_policy
from actorq.quant.policy_module import build_policy_module
from actorq.quantizer.server import ParameterServer, parameter_server_service
from actorq.quantizer.store import PolicyStore
from actorq.redis_keys import RedisKeys
from actorq.replay import RedisReplayWriter, TransitionBatch
from actorq.rpc import GrpcServer, make_channel
from actorq.rpc.weight_stream import weight_chunks
from actorq.v1 import parameter_server_pb2_grpc as ps_grpc
from actorq.v1 import policy_pb2
from tests.integration.test_parameter_server import _header, _weights
from tests.unit.test_guard_cnn import MINATAR, _frames, _outlier_channel
from tests.unit.test_guard_cnn import _weights as _cnn_weights

SPEC = MLPSpec(obs_dim=4, num_outputs=2, hidden=(64, 64))


def _fill_replay(client: redis.Redis, keys: RedisKeys, obs: np.ndarray, codec="none") -> None:
    n = len(obs)
    batch = TransitionBatch(
        obs=obs, action=np.zeros(n, np.int64), reward=np.zeros(n, np.float32),
        next_obs=obs, done=np.zeros(n, bool), actor_id="actor-0", policy_version=1,
        precision="int4",
    )  # fmt: skip
    RedisReplayWriter(client, keys, maxlen_entries=100, obs_codec=codec).write(batch)


def test_hard_int4_version_is_stored_with_fallbacks_and_actors_act_within_threshold(
    redis_client: redis.Redis, redis_keys: RedisKeys
) -> None:
    obs = np.random.default_rng(5).standard_normal((256, 4)).astype(np.float32)
    _fill_replay(redis_client, redis_keys, obs)
    guard = PolicyGuard(GuardConfig(max_disagreement=0.02), replay_probe(redis_client, redis_keys))
    params = ParameterServer(PolicyStore(redis_client, redis_keys), guard=guard)
    server = GrpcServer("127.0.0.1", 0, [parameter_server_service(params)])
    server.start()
    address = f"127.0.0.1:{server.port}"
    channel = make_channel(address)
    follower = PolicyFollower(address, "actor-guard", expected_spec=SPEC).start()
    try:
        weights = _weights(7)
        weights["layers.2.weight"][:, 1] *= 30.0  # an outlier input channel
        int4 = policy_pb2.PRECISION_INT4
        ps_grpc.ParameterServerStub(channel).PublishWeights(
            weight_chunks(_header(1, int4), weights, chunk_bytes=1000), timeout=30
        )
        meta = {
            k.decode(): v.decode()
            for k, v in redis_client.hgetall(redis_keys.policy_meta(1)).items()
        }
        assert meta["guard_probe"] == "replay:256"
        assert float(meta["guard_before_disagreement"]) > 0.02  # unguarded int4 strays
        assert float(meta["guard_disagreement"]) <= 0.02
        assert "layers.2.weight=fp16" in meta["guard_fallback_layers"]
        assert params.guard_stats.fallback_versions == 1
        counters = params.guard_stats.counters()
        assert counters["guard_max_divergence"] <= 0.02 < counters["guard_max_divergence_before"]

        assert follower.wait_for_policy(20)
        policy = follower.current
        assert policy is not None and policy.version == 1 and policy.precision == "int4"
        fp32 = encode_policy(weights, SPEC, policy_pb2.PRECISION_FP32, 1, 10)
        assert policy.numpy_forward is not None  # what the actor runs (numpy_mlp)
        acted = policy.numpy_forward(obs)
        with torch.inference_mode():
            probe = torch.from_numpy(obs)
            ref = build_policy_module(decode_policy(fp32.envelope)).forward(probe).numpy()
        assert divergence(ref, acted, continuous=False).value <= 0.02
    finally:
        follower.stop()
        channel.close()
        params.close()
        server.stop(0.2)


def test_int8_cnn_with_an_outlier_channel_is_stored_with_conv_fallbacks(
    redis_client: redis.Redis, redis_keys: RedisKeys
) -> None:
    frames = _frames(MINATAR)
    _fill_replay(redis_client, redis_keys, frames, codec="zstd")  # pixel replay, format "3"
    weights = _outlier_channel(_cnn_weights(MINATAR, frames), frames)
    guard = PolicyGuard(GuardConfig(max_disagreement=0.01), replay_probe(redis_client, redis_keys))
    params = ParameterServer(PolicyStore(redis_client, redis_keys), guard=guard)
    server = GrpcServer("127.0.0.1", 0, [parameter_server_service(params)])
    server.start()
    address = f"127.0.0.1:{server.port}"
    channel = make_channel(address)
    follower = PolicyFollower(address, "actor-guard-cnn", expected_spec=MINATAR).start()
    try:
        header = _header(1, policy_pb2.PRECISION_INT8, spec=MINATAR)
        ps_grpc.ParameterServerStub(channel).PublishWeights(
            weight_chunks(header, weights, chunk_bytes=4096), timeout=30
        )
        meta = {
            k.decode(): v.decode()
            for k, v in redis_client.hgetall(redis_keys.policy_meta(1)).items()
        }
        assert meta["guard_probe"] == "replay:256"
        assert float(meta["guard_before_regret"]) > 0.5  # the outlier wrecks int8
        assert float(meta["guard_regret"]) <= 0.01
        assert meta["guard_fallback_layers"] == "convs.0.weight=fp16,head.0.weight=fp16"

        assert follower.wait_for_policy(20)
        policy = follower.current
        assert policy is not None and policy.version == 1 and policy.precision == "int8"
        fp32 = encode_policy(weights, MINATAR, policy_pb2.PRECISION_FP32, 1, 10)
        with torch.inference_mode():
            probe = torch.from_numpy(frames)
            ref = build_policy_module(decode_policy(fp32.envelope)).forward(probe).numpy()
            acted = policy.module(probe).numpy()
        assert divergence(ref, acted, continuous=False).value <= 0.01
    finally:
        follower.stop()
        channel.close()
        params.close()
        server.stop(0.2)


def test_on_policy_pixel_probe_reads_the_newest_trajectory_segments(
    redis_client: redis.Redis, redis_keys: RedisKeys
) -> None:
    T, B = 40, 4  # two segments of 160 frames: the probe of 256 spans both
    writer = SegmentWriter(redis_client, redis_keys, codec="zstd")
    for seed in (1, 2):
        obs = _frames(MINATAR, n=T * B, seed=seed).reshape(T, B, *MINATAR.obs_shape)
        zeros = np.zeros((T, B), np.uint8)
        segment = TrajectorySegment(
            obs=obs, action=np.zeros((T, B), np.int32), reward=np.zeros((T, B), np.float32),
            terminated=zeros, truncated=zeros, behaviour_logp=np.zeros((T, B), np.float32),
            last_obs=obs[-1].copy(), trunc_index=np.zeros(0, np.int32),
            trunc_obs=np.zeros((0, *MINATAR.obs_shape), np.uint8), actor_id="actor-0",
            policy_version=1, precision="int8",
        )  # fmt: skip
        writer.write_fields(encode_segment(segment, "zstd"), T * B)
    guard = PolicyGuard(
        GuardConfig(),
        replay_probe(redis_client, redis_keys),  # empty: on-policy runs write no replay
        segment_probe(redis_client, redis_keys),
    )
    probe, source = guard.probe_batch(MINATAR)
    assert source == "segments" and probe.dtype == torch.uint8
    assert tuple(probe.shape) == (256, *MINATAR.obs_shape)
    newest = _frames(MINATAR, n=T * B, seed=2)
    np.testing.assert_array_equal(probe[: T * B].numpy(), newest)  # newest segment first
