"""The real quantizer process: loopback-only by default, and TLS/mTLS + blob signing when
configured through ACTORQ_* variables, exactly as compose or Kubernetes would set them."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
import redis

from actorq.config import ActorSettings, CommonSettings, LearnerSettings, QuantizerSettings
from actorq.models import MLPSpec, QNetwork
from actorq.quant import spec_to_proto
from actorq.redis_keys import RedisKeys
from actorq.redis_server import find_free_port
from actorq.rpc import make_channel
from actorq.rpc.weight_stream import weight_chunks
from actorq.security.certs import make_dev_certs
from actorq.security.signing import key_id_of
from actorq.security.tls import PLAINTEXT, TlsConfig
from actorq.v1 import control_pb2, control_pb2_grpc, policy_pb2
from actorq.v1 import parameter_server_pb2 as ps_pb2
from actorq.v1 import parameter_server_pb2_grpc as ps_grpc

SPEC = MLPSpec(obs_dim=4, num_outputs=2, hidden=(16,))


def _external_ipv4() -> str | None:
    """An address of this host other than loopback (None when it has none)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        try:
            probe.connect(("192.0.2.1", 9))  # no packet is sent for a UDP connect
            address = probe.getsockname()[0]
        except OSError:
            return None
    return None if address.startswith("127.") else address


class QuantizerProcess:
    def __init__(self, redis_url: str, env: dict[str, str], log: Path) -> None:
        self.prefix = f"test-{uuid.uuid4().hex}"
        self.port, self.metrics_port = find_free_port(), find_free_port()
        self.log = log
        with open(log, "wb") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "services.quantizer"],
                env={
                    **os.environ,
                    "ACTORQ_REDIS_URL": redis_url,
                    "ACTORQ_REDIS_PREFIX": self.prefix,
                    "ACTORQ_GRPC_PORT": str(self.port),
                    "ACTORQ_METRICS_PORT": str(self.metrics_port),
                    **env,
                },
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
            )

    def status(self, tls: TlsConfig, timeout: float = 5) -> control_pb2.ServiceStatus:
        channel = make_channel(f"127.0.0.1:{self.port}", tls)
        try:
            stub = control_pb2_grpc.ControlStub(channel)
            return stub.GetStatus(control_pb2.GetStatusRequest(), timeout=timeout)
        finally:
            channel.close()

    def wait_ready(self, tls: TlsConfig) -> None:
        channel = make_channel(f"127.0.0.1:{self.port}", tls)
        try:
            grpc.channel_ready_future(channel).result(timeout=60)
        except grpc.FutureTimeoutError:
            raise AssertionError(f"quantizer did not start:\n{self.log.read_text()}") from None
        finally:
            channel.close()

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        self.proc.wait(15)


def _refused(host: str, port: int) -> bool:
    with socket.socket() as sock:
        sock.settimeout(2)
        try:
            sock.connect((host, port))
        except OSError:
            return True
        return False


def test_every_service_binds_loopback_by_default() -> None:
    for cls in (CommonSettings, QuantizerSettings, LearnerSettings, ActorSettings):
        assert cls().bind_host == "127.0.0.1"


@pytest.fixture
def plain_quantizer(redis_url: str, tmp_path: Path) -> Iterator[QuantizerProcess]:
    q = QuantizerProcess(redis_url, {}, tmp_path / "quantizer.log")
    q.wait_ready(PLAINTEXT)
    yield q
    q.stop()


def test_quantizer_is_unreachable_from_other_interfaces(plain_quantizer: QuantizerProcess) -> None:
    external = _external_ipv4()
    if external is None:
        pytest.skip("this host has no non-loopback IPv4 address to try")
    assert plain_quantizer.status(PLAINTEXT).role == "quantizer"
    assert not _refused("127.0.0.1", plain_quantizer.metrics_port)
    assert _refused(external, plain_quantizer.port)
    assert _refused(external, plain_quantizer.metrics_port)


@pytest.mark.skipif(shutil.which("openssl") is None, reason="openssl makes the test certs")
def test_quantizer_with_mtls_and_signing_from_environment(redis_url: str, tmp_path: Path) -> None:
    certs = make_dev_certs(tmp_path / "certs", services=("quantizer", "learner"))
    key_file = tmp_path / "policy.key"
    key_file.write_text("s" * 64)
    env = {
        "ACTORQ_TLS_CA": str(certs["ca"][0]),
        "ACTORQ_TLS_CERT": str(certs["quantizer"][0]),
        "ACTORQ_TLS_KEY": str(certs["quantizer"][1]),
        "ACTORQ_TLS_REQUIRE_CLIENT_CERT": "true",
        "ACTORQ_POLICY_KEY_FILE": str(key_file),
    }
    learner_tls = TlsConfig(
        ca=str(certs["ca"][0]), cert=str(certs["learner"][0]), key=str(certs["learner"][1])
    )
    q = QuantizerProcess(redis_url, env, tmp_path / "quantizer.log")
    try:
        q.wait_ready(learner_tls)
        for tls in (PLAINTEXT, TlsConfig(ca=str(certs["ca"][0]))):  # no cert: refused
            with pytest.raises(grpc.RpcError) as info:
                q.status(tls, timeout=3)
            assert info.value.code() == grpc.StatusCode.UNAVAILABLE
        header = ps_pb2.PublishHeader(
            version=1,
            precision=policy_pb2.PRECISION_INT8,
            spec=spec_to_proto(SPEC),
            num_tensors=len(SPEC.weight_shapes()),
        )
        weights = {k: v.detach().numpy() for k, v in QNetwork(SPEC).state_dict().items()}
        channel = make_channel(f"127.0.0.1:{q.port}", learner_tls)
        reply = ps_grpc.ParameterServerStub(channel).PublishWeights(
            weight_chunks(header, weights), timeout=10
        )
        channel.close()
        assert reply.version == 1
        client = redis.Redis.from_url(redis_url)
        blob = client.get(RedisKeys(q.prefix).policy_blob(1))
        client.delete(*client.keys(f"{q.prefix}:*"))
        client.close()
        envelope = policy_pb2.PolicyEnvelope.FromString(blob)
        assert envelope.key_id == key_id_of(b"s" * 64) and len(envelope.hmac_sha256) == 32
        assert "mutual TLS" in q.log.read_text() and "s" * 64 not in q.log.read_text()
    finally:
        q.stop()


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        ({"ACTORQ_TLS_CA": "/nonexistent/ca.pem"}, "tls_ca: expected a readable PEM file"),
        ({"ACTORQ_TLS_CERT": "/x.pem"}, "tls_ca: expected the CA certificate file"),
        ({"ACTORQ_POLICY_KEY_FILE": "/nonexistent/key"}, "policy_key_file: cannot read"),
        ({"ACTORQ_REDIS_PASSWORD_FILE": "/nonexistent/pw"}, "redis_password_file: expected"),
        ({"ACTORQ_TLS_ALLOWED_PUBLISHERS": "learner"}, "needs mutual TLS"),
    ],
)
def test_bad_security_settings_stop_the_service_with_one_line(env, expected) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "services.quantizer"],
        env={**os.environ, "ACTORQ_METRICS_PORT": "-1", **env},
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
    )
    assert result.returncode == 2, result.stderr
    assert expected in result.stderr and "Traceback" not in result.stderr
