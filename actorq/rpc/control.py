"""The Control service every actorq process serves: GetStatus and Stop."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import grpc

from actorq.security.tls import check_peer_allowed
from actorq.v1 import control_pb2, control_pb2_grpc

MAX_REASON_CHARS = 200


def safe_reason(text: str) -> str:
    """A caller's stop reason fit for one log line: cut short, control characters escaped."""
    text = text[:MAX_REASON_CHARS]
    return text if text.isprintable() else text.encode("unicode_escape").decode("ascii")


@dataclass
class StatusSnapshot:
    """What a service reports about itself; converted to `ServiceStatus` on the wire."""

    role: str
    instance_id: str
    policy_version: int = 0
    state: str = "running"
    counters: dict[str, float] = field(default_factory=dict)


class ControlServicer(control_pb2_grpc.ControlServicer):
    """Converts messages and delegates to the service's own status and stop callables."""

    def __init__(
        self,
        status: Callable[[], StatusSnapshot],
        stop: Callable[[str], None],
        stop_peers: frozenset[str] = frozenset(),
    ) -> None:
        self._status = status
        self._stop = stop
        self._stop_peers = stop_peers  # mTLS certificate names allowed to Stop; empty = any

    def GetStatus(
        self, request: control_pb2.GetStatusRequest, context: grpc.ServicerContext
    ) -> control_pb2.ServiceStatus:
        snap = self._status()
        return control_pb2.ServiceStatus(
            role=snap.role,
            instance_id=snap.instance_id,
            policy_version=snap.policy_version,
            state=snap.state,
            counters={k: float(v) for k, v in snap.counters.items()},
        )

    def Stop(
        self, request: control_pb2.StopRequest, context: grpc.ServicerContext
    ) -> control_pb2.StopReply:
        if not check_peer_allowed(context, self._stop_peers, "Stop"):
            context.abort(
                grpc.StatusCode.PERMISSION_DENIED,
                f"this client's certificate may not call Stop (allowed: "
                f"{', '.join(sorted(self._stop_peers))})",
            )
        self._stop(safe_reason(request.reason or "stop requested over gRPC"))
        return control_pb2.StopReply(accepted=True)


def control_service(
    status: Callable[[], StatusSnapshot],
    stop: Callable[[str], None],
    stop_peers: frozenset[str] = frozenset(),
) -> tuple[str, Callable[[grpc.Server], None]]:
    """(service name, registrar) for `GrpcServer`."""
    servicer = ControlServicer(status, stop, stop_peers)
    name = control_pb2.DESCRIPTOR.services_by_name["Control"].full_name
    return name, lambda server: control_pb2_grpc.add_ControlServicer_to_server(servicer, server)
