"""A writer with Redis access alone cannot make an actor load a policy (real gRPC + Redis)."""

from __future__ import annotations

import logging

import numpy as np
import pytest
import redis
import torch
from prometheus_client import REGISTRY

from actorq.actor.policy_follower import PolicyFollower
from actorq.models import MLPSpec, QNetwork
from actorq.quant import encode_policy, spec_to_proto
from actorq.quantizer.server import ParameterServer, parameter_server_service
from actorq.quantizer.store import Announcement, PolicyStore
from actorq.redis_keys import RedisKeys
from actorq.rpc import GrpcServer, make_channel
from actorq.rpc.weight_stream import weight_chunks
from actorq.security.signing import PolicyKey, PolicyKeys
from actorq.testing.waiting import wait_for
from actorq.v1 import parameter_server_pb2 as ps_pb2
from actorq.v1 import parameter_server_pb2_grpc as ps_grpc
from actorq.v1 import policy_pb2

SPEC = MLPSpec(obs_dim=4, num_outputs=2, hidden=(32,))
QUANTIZER_KEY = PolicyKey(b"k" * 32)
ATTACKER_KEY = PolicyKey(b"a" * 32)


def _weights(seed: int) -> dict[str, np.ndarray]:
    torch.manual_seed(seed)
    return {k: v.detach().numpy().copy() for k, v in QNetwork(SPEC).state_dict().items()}


class SignedQuantizer:
    """A quantizer that signs; `restart()` re-reads Redis like a restarted process."""

    def __init__(self, client: redis.Redis, keys: RedisKeys, signing: PolicyKeys) -> None:
        self.client, self.keys, self.signing = client, keys, signing
        self.params = ParameterServer(PolicyStore(client, keys), chunk_bytes=4096, keys=signing)
        self.server = GrpcServer("127.0.0.1", 0, [parameter_server_service(self.params)])
        self.server.start()
        self.address = f"127.0.0.1:{self.server.port}"
        self.channel = make_channel(self.address)

    def publish(self, version: int) -> None:
        header = ps_pb2.PublishHeader(
            version=version,
            precision=policy_pb2.PRECISION_INT8,
            spec=spec_to_proto(SPEC),
            num_tensors=len(SPEC.weight_shapes()),
        )
        stub = ps_grpc.ParameterServerStub(self.channel)
        stub.PublishWeights(weight_chunks(header, _weights(version)), timeout=10)

    def announce_what_redis_holds(self) -> None:
        """What a restarted quantizer does: serve Redis's `latest` (here: the forgery)."""
        self.params.board.post(self.params.store.announcement(0))

    def close(self) -> None:
        self.params.close()
        self.channel.close()
        self.server.stop(0.1)


def _forge(client: redis.Redis, keys: RedisKeys, version: int, signer: PolicyKeys | None) -> None:
    """Write a complete, checksummed version straight into Redis, as an attacker could."""
    encoded = encode_policy(
        _weights(100 + version), SPEC, policy_pb2.PRECISION_INT8, version, 0, keys=signer
    )
    store = PolicyStore(client, keys)
    store.save(encoded)  # the quantizer's own code path: blob, metadata, then `latest`
    assert store.announcement(version) == Announcement.of(encoded)


def _rejections(instance: str) -> float:
    value = REGISTRY.get_sample_value(
        "actorq_actor_policy_rejections_total",
        {"instance": instance, "reason": "SignatureError"},
    )
    return value or 0.0


@pytest.mark.parametrize("forger", ["unsigned", "own_key", "copied_signature"])
def test_forged_blob_under_latest_is_never_loaded(
    redis_client: redis.Redis,
    redis_keys: RedisKeys,
    forger: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    signing = PolicyKeys(QUANTIZER_KEY)
    quantizer = SignedQuantizer(redis_client, redis_keys, signing)
    instance = f"actor-forge-{forger}"
    follower = PolicyFollower(quantizer.address, instance, expected_spec=SPEC, keys=signing)
    follower.start()
    before = _rejections(instance)
    try:
        quantizer.publish(1)
        assert follower.wait_for_policy(10) and follower.current.version == 1
        caplog.set_level(logging.DEBUG, logger="actorq.actor.policy_follower")
        for version in (2, 3):  # two forgeries: both refused, logged once
            if forger == "copied_signature":
                genuine = policy_pb2.PolicyEnvelope.FromString(
                    redis_client.get(redis_keys.policy_blob(1))
                )
                _forge(redis_client, redis_keys, version, None)
                forged = policy_pb2.PolicyEnvelope.FromString(
                    redis_client.get(redis_keys.policy_blob(version))
                )
                forged.key_id, forged.hmac_sha256 = genuine.key_id, genuine.hmac_sha256
                redis_client.set(redis_keys.policy_blob(version), forged.SerializeToString())
            else:
                signer = PolicyKeys(ATTACKER_KEY) if forger == "own_key" else None
                _forge(redis_client, redis_keys, version, signer)
            quantizer.announce_what_redis_holds()
            wait_for(lambda v=version: follower.latest_announced == v and follower.rejections)
            wait_for(lambda v=version: follower.rejections == v - 1)
        assert follower.current.version == 1  # kept the genuine policy
        assert _rejections(instance) - before == 2
        warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
        assert len(warnings) == 1 and "SignatureError" in warnings[0].getMessage()

        quantizer.publish(4)  # the real learner goes on publishing: actors follow it
        wait_for(lambda: follower.current.version == 4)
    finally:
        follower.stop()
        quantizer.close()


def test_key_rotation_without_refusals(redis_client: redis.Redis, redis_keys: RedisKeys) -> None:
    """Actors learn the new key first (old one kept as previous), then the quantizer."""
    new_key = PolicyKey(b"n" * 32)
    old_quantizer = SignedQuantizer(redis_client, redis_keys, PolicyKeys(QUANTIZER_KEY))
    rotating = PolicyKeys(current=new_key, previous=QUANTIZER_KEY)
    follower = PolicyFollower(old_quantizer.address, "actor-rot", expected_spec=SPEC, keys=rotating)
    follower.start()
    try:
        old_quantizer.publish(1)
        assert follower.wait_for_policy(10) and follower.current.version == 1
        old_quantizer.params.keys = PolicyKeys(new_key)  # quantizer restarted with the new key
        old_quantizer.publish(2)
        wait_for(lambda: follower.current.version == 2)
        assert follower.rejections == 0
        envelope = policy_pb2.PolicyEnvelope.FromString(redis_client.get(redis_keys.policy_blob(2)))
        assert envelope.key_id == new_key.key_id
    finally:
        follower.stop()
        old_quantizer.close()
