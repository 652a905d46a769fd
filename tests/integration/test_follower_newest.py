"""A follower on a slow link fetches only the newest announced version, not every one."""

from __future__ import annotations

import threading

import redis

from actorq.actor.policy_follower import PolicyFollower
from actorq.quantizer.server import ParameterServer, parameter_server_service
from actorq.quantizer.store import PolicyStore
from actorq.redis_keys import RedisKeys
from actorq.rpc import GrpcServer, make_channel
from actorq.rpc.weight_stream import weight_chunks
from actorq.testing.waiting import wait_for
from actorq.v1 import parameter_server_pb2_grpc as ps_grpc
from tests.integration.test_delta_broadcast import SPEC, _header, _weights


class _SlowVersion(ParameterServer):
    """A real parameter server whose blob for one version waits (a slow link), and which
    records every version an actor asked for."""

    def __init__(self, *args, slow_version: int, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.slow_version = slow_version
        self.release = threading.Event()
        self.requested: list[int] = []

    def blob_chunks(self, version: int, base_version: int = 0):
        self.requested.append(version)
        if version == self.slow_version:
            self.release.wait(20)
        yield from super().blob_chunks(version, base_version)


def test_follower_skips_versions_superseded_while_it_fetched(
    redis_client: redis.Redis, redis_keys: RedisKeys
) -> None:
    params = _SlowVersion(PolicyStore(redis_client, redis_keys), slow_version=2)
    server = GrpcServer("127.0.0.1", 0, [parameter_server_service(params)])
    server.start()
    address = f"127.0.0.1:{server.port}"
    channel = make_channel(address)
    stub = ps_grpc.ParameterServerStub(channel)
    follower = PolicyFollower(address, "actor-newest", expected_spec=SPEC)

    def publish(version: int) -> None:
        stub.PublishWeights(weight_chunks(_header(version), _weights(version)), timeout=10)

    try:
        publish(1)
        follower.start()
        assert follower.wait_for_policy(10)
        publish(2)
        wait_for(lambda: 2 in params.requested)  # the follower is now stuck on version 2
        for version in (3, 4, 5):
            publish(version)
        params.release.set()
        wait_for(lambda: follower.current is not None and follower.current.version == 5)
        assert params.requested == [1, 2, 5]  # 3 and 4 were superseded before it asked
        assert follower.loads == 3 and follower.latest_announced == 5
    finally:
        params.release.set()
        follower.stop()
        params.close()
        channel.close()
        server.stop(0.1)
