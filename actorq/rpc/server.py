"""One small server class: gRPC health, reflection, message limits, clean stop."""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from concurrent import futures

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

from actorq.rpc.channel import CHANNEL_OPTIONS, SERVER_KEEPALIVE_OPTIONS
from actorq.rpc.errors import PortInUseError
from actorq.rpc.guard import DecodeGuard
from actorq.security.tls import PLAINTEXT, TlsConfig

log = logging.getLogger(__name__)

Registrar = Callable[[grpc.Server], None]


class GrpcServer:
    """A gRPC server on `host:port` (port 0 picks a free one) with health + reflection.

    `services` are (full service name, registrar) pairs, e.g.
    ("actorq.v1.ParameterServer", lambda s: add_ParameterServerServicer_to_server(x, s)).
    With an enabled `tls` the port speaks only TLS (mutual TLS if it requires client certs).
    """

    def __init__(
        self,
        host: str,
        port: int,
        services: Sequence[tuple[str, Registrar]],
        max_workers: int = 64,
        tls: TlsConfig = PLAINTEXT,
    ) -> None:
        self._executor = futures.ThreadPoolExecutor(
            max_workers=max_workers, thread_name_prefix="grpc"
        )
        self._server = grpc.server(
            self._executor,
            options=[*CHANNEL_OPTIONS, *SERVER_KEEPALIVE_OPTIONS, ("grpc.so_reuseport", 0)],
            interceptors=[DecodeGuard()],  # undecodable requests: INVALID_ARGUMENT
        )
        self._health = health.HealthServicer()
        health_pb2_grpc.add_HealthServicer_to_server(self._health, self._server)
        names = [name for name, _ in services]
        for _, register in services:
            register(self._server)
        reflection.enable_server_reflection(
            [
                *names,
                health_pb2.DESCRIPTOR.services_by_name["Health"].full_name,
                reflection.SERVICE_NAME,
            ],
            self._server,
        )
        self._names = names
        self._status = "NOT_SERVING"  # what /healthz reports (actorq.healthz) until start()
        self.tls = tls
        self.port = self._bind(host, port)

    def _bind(self, host: str, port: int) -> int:
        address = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
        try:
            if self.tls.enabled:
                bound = self._server.add_secure_port(address, self.tls.server_credentials())
            else:
                bound = self._server.add_insecure_port(address)
        except RuntimeError as exc:
            raise PortInUseError(f"cannot listen on {address}: port in use or not allowed") from exc
        if bound == 0:
            raise PortInUseError(f"cannot listen on {address}: port in use or not allowed")
        return bound

    def start(self) -> None:
        self._server.start()
        self.set_serving(True)

    def set_serving(self, serving: bool) -> None:
        """Report SERVING / NOT_SERVING on the health service (overall and per service)."""
        status = (
            health_pb2.HealthCheckResponse.SERVING
            if serving
            else health_pb2.HealthCheckResponse.NOT_SERVING
        )
        for name in ["", *self._names]:
            self._health.set(name, status)
        self._status = health_pb2.HealthCheckResponse.ServingStatus.Name(status)

    def status(self) -> str:
        """The overall grpc.health.v1 status name, for the metrics port's /healthz."""
        return self._status

    def stop(self, grace: float = 2.0) -> None:
        """Refuse new calls, let running ones finish for `grace` seconds, then close; the
        handler threads end too (a server stopped inside a longer-lived process, as in the
        tests, would otherwise keep its idle pool)."""
        self.set_serving(False)
        self._server.stop(grace).wait(grace + 1.0)
        self._executor.shutdown(wait=False, cancel_futures=True)

    def wait(self, timeout: float | None = None) -> bool:
        return bool(self._server.wait_for_termination(timeout))
