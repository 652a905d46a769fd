"""TLS and mutual TLS on real gRPC servers (port 0) with certificates made by openssl."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from actorq.config import ConfigError, QuantizerSettings, load_settings
from actorq.quantizer.server import ParameterServer, parameter_server_service
from actorq.quantizer.store import PolicyStore
from actorq.rpc import GrpcServer, make_channel
from actorq.rpc.control import StatusSnapshot, control_service
from actorq.security.certs import make_ca, make_dev_certs, make_leaf
from actorq.security.tls import PLAINTEXT, TlsConfig, allowed_peers
from actorq.testing import grpc_fuzz as fz
from actorq.v1 import control_pb2, control_pb2_grpc
from actorq.v1 import parameter_server_pb2_grpc as ps_grpc

pytestmark = pytest.mark.skipif(
    shutil.which("openssl") is None, reason="openssl is needed to make test certificates"
)


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Dev CA + service certs, and an intruder cert from another CA."""
    root = tmp_path_factory.mktemp("certs")
    made = make_dev_certs(root / "dev", services=("quantizer", "actor", "learner", "launcher"))
    other = root / "other"
    other_ca, other_key = make_ca(other, "some other CA")
    intruder = make_leaf(other, "actor", other_ca, other_key, ["localhost", "127.0.0.1"])
    paths = {
        f"{name}.{kind}": p
        for name, pair in made.items()
        for kind, p in zip(("pem", "key"), pair, strict=True)
    }
    paths |= {"other_ca.pem": other_ca, "intruder.pem": intruder[0], "intruder.key": intruder[1]}
    return paths


def _server_tls(certs: dict[str, Path], mutual: bool) -> TlsConfig:
    return TlsConfig(
        cert=str(certs["quantizer.pem"]),
        key=str(certs["quantizer.key"]),
        ca=str(certs["ca.pem"]),
        require_client_cert=mutual,
    )


def _serve(tls: TlsConfig) -> GrpcServer:
    status = lambda: StatusSnapshot(role="quantizer", instance_id="q")  # noqa: E731
    server = GrpcServer("127.0.0.1", 0, [control_service(status, lambda _r: None)], tls=tls)
    server.start()
    return server


@pytest.fixture
def tls_server(certs: dict[str, Path]) -> Iterator[GrpcServer]:
    server = _serve(_server_tls(certs, mutual=False))
    yield server
    server.stop(0.1)


@pytest.fixture
def mtls_server(certs: dict[str, Path]) -> Iterator[GrpcServer]:
    server = _serve(_server_tls(certs, mutual=True))
    yield server
    server.stop(0.1)


def _status_code(server: GrpcServer, tls: TlsConfig) -> grpc.StatusCode:
    """OK when GetStatus succeeds through `tls`, else the status of the failure."""
    channel = make_channel(f"127.0.0.1:{server.port}", tls)
    try:
        reply = control_pb2_grpc.ControlStub(channel).GetStatus(
            control_pb2.GetStatusRequest(), timeout=5
        )
        assert reply.role == "quantizer"
        return grpc.StatusCode.OK
    except grpc.RpcError as exc:
        return exc.code()
    finally:
        channel.close()


def _client(certs: dict[str, Path], ca: str = "ca.pem", who: str | None = None) -> TlsConfig:
    if who is None:
        return TlsConfig(ca=str(certs[ca]))
    return TlsConfig(ca=str(certs[ca]), cert=str(certs[f"{who}.pem"]), key=str(certs[f"{who}.key"]))


def test_tls_client_with_the_right_ca_is_served(tls_server: GrpcServer, certs) -> None:
    assert _status_code(tls_server, _client(certs)) == grpc.StatusCode.OK


def test_plaintext_client_is_refused_by_a_tls_server(tls_server: GrpcServer) -> None:
    assert _status_code(tls_server, PLAINTEXT) == grpc.StatusCode.UNAVAILABLE


def test_client_trusting_another_ca_refuses_the_server(tls_server: GrpcServer, certs) -> None:
    assert _status_code(tls_server, _client(certs, ca="other_ca.pem")) == (
        grpc.StatusCode.UNAVAILABLE
    )


def test_mtls_serves_a_client_with_a_cert_from_its_ca(mtls_server: GrpcServer, certs) -> None:
    assert _status_code(mtls_server, _client(certs, who="actor")) == grpc.StatusCode.OK


def test_mtls_refuses_a_client_without_a_cert(mtls_server: GrpcServer, certs) -> None:
    assert _status_code(mtls_server, _client(certs)) == grpc.StatusCode.UNAVAILABLE
    assert _status_code(mtls_server, PLAINTEXT) == grpc.StatusCode.UNAVAILABLE


def test_mtls_refuses_a_client_cert_from_another_ca(mtls_server: GrpcServer, certs) -> None:
    assert _status_code(mtls_server, _client(certs, who="intruder")) == (
        grpc.StatusCode.UNAVAILABLE
    )


def test_make_channel_follows_the_process_environment(
    mtls_server: GrpcServer, certs, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The launcher's channels (tls=None) use ACTORQ_TLS_* like the services do."""
    channel_tls_unset = TlsConfig.from_environ({})
    assert not channel_tls_unset.enabled
    monkeypatch.setenv("ACTORQ_TLS_CA", str(certs["ca.pem"]))
    monkeypatch.setenv("ACTORQ_TLS_CERT", str(certs["actor.pem"]))
    monkeypatch.setenv("ACTORQ_TLS_KEY", str(certs["actor.key"]))
    channel = make_channel(f"127.0.0.1:{mtls_server.port}")
    try:
        reply = control_pb2_grpc.ControlStub(channel).GetStatus(
            control_pb2.GetStatusRequest(), timeout=5
        )
        assert reply.instance_id == "q"
    finally:
        channel.close()


def test_server_name_override_checks_the_named_host(tls_server: GrpcServer, certs) -> None:
    """Certs name their service; a client may check that name instead of the address's."""
    right = TlsConfig(ca=str(certs["ca.pem"]), server_name="quantizer")
    wrong = TlsConfig(ca=str(certs["ca.pem"]), server_name="learner")
    assert _status_code(tls_server, right) == grpc.StatusCode.OK
    assert _status_code(tls_server, wrong) == grpc.StatusCode.UNAVAILABLE


def test_settings_read_tls_from_environment(certs) -> None:
    env = {
        "ACTORQ_TLS_CA": str(certs["ca.pem"]),
        "ACTORQ_TLS_CERT": str(certs["quantizer.pem"]),
        "ACTORQ_TLS_KEY": str(certs["quantizer.key"]),
        "ACTORQ_TLS_REQUIRE_CLIENT_CERT": "true",
    }
    tls = TlsConfig.from_settings(load_settings(QuantizerSettings, env))
    assert tls.enabled and tls.require_client_cert and tls.cert.endswith("quantizer.pem")


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"ACTORQ_TLS_CERT": "x.pem"}, "tls_ca: expected the CA certificate file"),
        ({"ACTORQ_TLS_REQUIRE_CLIENT_CERT": "true"}, "tls_ca: expected the CA"),
        ({"ACTORQ_TLS_CA": "/nonexistent/ca.pem"}, "tls_ca: expected a readable PEM file"),
        ({"ACTORQ_TLS_REQUIRE_CLIENT_CERT": "maybe"}, "expected true/false, got 'maybe'"),
    ],
)
def test_bad_tls_settings_name_the_setting(env: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        load_settings(QuantizerSettings, env)


def test_cert_without_key_is_refused(certs) -> None:
    with pytest.raises(ConfigError, match="tls_cert and tls_key: expected both"):
        TlsConfig(ca=str(certs["ca.pem"]), cert=str(certs["actor.pem"]))


def test_tls_server_without_its_own_cert_is_refused(certs) -> None:
    with pytest.raises(ConfigError, match="a TLS server needs its certificate and key"):
        _serve(TlsConfig(ca=str(certs["ca.pem"])))


@pytest.fixture
def guarded_quantizer(certs, redis_client, redis_keys) -> Iterator[tuple[GrpcServer, list[str]]]:
    """mTLS quantizer where only `learner` may publish and only `launcher` may Stop."""
    stops: list[str] = []
    params = ParameterServer(PolicyStore(redis_client, redis_keys))
    status = lambda: StatusSnapshot(role="quantizer", instance_id="q")  # noqa: E731
    server = GrpcServer(
        "127.0.0.1",
        0,
        [
            parameter_server_service(params, frozenset({"learner"})),
            control_service(status, stops.append, frozenset({"launcher"})),
        ],
        tls=_server_tls(certs, mutual=True),
    )
    server.start()
    yield server, stops
    params.close()
    server.stop(0.1)


def _publish(server: GrpcServer, tls: TlsConfig) -> grpc.StatusCode:
    channel = make_channel(f"127.0.0.1:{server.port}", tls)
    try:
        ps_grpc.ParameterServerStub(channel).PublishWeights(fz.valid_stream(1), timeout=10)
        return grpc.StatusCode.OK
    except grpc.RpcError as exc:
        return exc.code()
    finally:
        channel.close()


def _stop(server: GrpcServer, tls: TlsConfig) -> grpc.StatusCode:
    channel = make_channel(f"127.0.0.1:{server.port}", tls)
    try:
        control_pb2_grpc.ControlStub(channel).Stop(control_pb2.StopRequest(reason="x"), timeout=5)
        return grpc.StatusCode.OK
    except grpc.RpcError as exc:
        return exc.code()
    finally:
        channel.close()


def test_only_named_certificates_may_publish_or_stop(
    guarded_quantizer, certs, redis_client, redis_keys
) -> None:
    server, stops = guarded_quantizer
    actor, learner, launcher = (_client(certs, who=w) for w in ("actor", "learner", "launcher"))
    assert _publish(server, actor) == grpc.StatusCode.PERMISSION_DENIED
    assert redis_client.get(redis_keys.policy_latest) is None  # nothing stored
    assert _publish(server, learner) == grpc.StatusCode.OK
    assert _stop(server, actor) == grpc.StatusCode.PERMISSION_DENIED
    assert _stop(server, learner) == grpc.StatusCode.PERMISSION_DENIED
    assert stops == []
    assert _stop(server, launcher) == grpc.StatusCode.OK and stops == ["x"]
    assert _status_code(server, actor) == grpc.StatusCode.OK  # reading status stays open


def test_allowed_peer_lists_need_mutual_tls(certs) -> None:
    with pytest.raises(ConfigError, match="tls_allowed_publishers: names client certificates"):
        load_settings(QuantizerSettings, {"ACTORQ_TLS_ALLOWED_PUBLISHERS": "learner"})
    env = {
        "ACTORQ_TLS_CA": str(certs["ca.pem"]),
        "ACTORQ_TLS_CERT": str(certs["quantizer.pem"]),
        "ACTORQ_TLS_KEY": str(certs["quantizer.key"]),
        "ACTORQ_TLS_REQUIRE_CLIENT_CERT": "true",
        "ACTORQ_TLS_ALLOWED_PUBLISHERS": " learner, trainer-2 ,",
    }
    settings = load_settings(QuantizerSettings, env)
    assert allowed_peers(settings, "tls_allowed_publishers") == {"learner", "trainer-2"}
