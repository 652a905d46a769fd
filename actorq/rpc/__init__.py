"""gRPC plumbing shared by every service: server wrapper, channels, error mapping."""

from actorq.rpc.channel import make_channel
from actorq.rpc.errors import PortInUseError, abort_on_error
from actorq.rpc.server import GrpcServer

__all__ = ["GrpcServer", "PortInUseError", "abort_on_error", "make_channel"]
