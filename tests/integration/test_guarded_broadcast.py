"""Guarded broadcasts through the real quantizer: weights published over gRPC, a probe of
recent observations read from the real Redis replay stream, the stored blob and its
metadata, and an actor's PolicyFollower loading what actors would act with."""

from __future__ import annotations

import numpy as np
import redis
import torch

from actorq.actor.policy_follower import PolicyFollower
from actorq.guard import GuardConfig, PolicyGuard, divergence, replay_probe
from actorq.models import MLPSpec
from actorq.quant import encode_policy
from actorq.quant.blob import decode_policy
from actorq.quant.policy_module import build_policy_module
from actorq.quantizer.assembler import weight_chunks
from actorq.quantizer.server import ParameterServer, parameter_server_service
from actorq.quantizer.store import PolicyStore
from actorq.redis_keys import RedisKeys
from actorq.replay import RedisReplayWriter, TransitionBatch
from actorq.rpc import GrpcServer, make_channel
from actorq.v1 import parameter_server_pb2_grpc as ps_grpc
from actorq.v1 import policy_pb2
from tests.integration.test_parameter_server import _header, _weights

SPEC = MLPSpec(obs_dim=4, num_outputs=2, hidden=(64, 64))


def _fill_replay(client: redis.Redis, keys: RedisKeys, obs: np.ndarray) -> None:
    n = len(obs)
    batch = TransitionBatch(
        obs=obs, action=np.zeros(n, np.int64), reward=np.zeros(n, np.float32),
        next_obs=obs, done=np.zeros(n, bool), actor_id="actor-0", policy_version=1,
        precision="int4",
    )  # fmt: skip
    RedisReplayWriter(client, keys, maxlen_entries=100).write(batch)


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
        with torch.inference_mode():
            probe = torch.from_numpy(obs)
            ref = build_policy_module(decode_policy(fp32.envelope)).forward(probe).numpy()
            acted = policy.module(probe).numpy()
        assert divergence(ref, acted, continuous=False).value <= 0.02
    finally:
        follower.stop()
        channel.close()
        params.close()
        server.stop(0.2)
