"""Ask a service's grpc.health.v1 endpoint whether it is SERVING.

The container HEALTHCHECK and `actorq healthcheck` use this, so probes exercise the same
health service that Kubernetes' native gRPC probes call. Exit 0 = SERVING, 1 = anything
else (not serving, unreachable, timeout), 2 = bad arguments.

    python -m actorq.rpc.healthcheck                  # 127.0.0.1:$ACTORQ_GRPC_PORT
    python -m actorq.rpc.healthcheck --address quantizer:50051
"""

from __future__ import annotations

import argparse
import os
import sys

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from actorq.rpc.channel import make_channel

EXIT_SERVING = 0
EXIT_UNHEALTHY = 1
EXIT_USAGE = 2


def default_address(environ: dict[str, str] | None = None) -> str:
    """127.0.0.1 and the port the service in this container listens on."""
    environ = dict(os.environ) if environ is None else environ
    return f"127.0.0.1:{environ.get('ACTORQ_GRPC_PORT', '50051')}"


def check_health(address: str, service: str = "", timeout: float = 3.0) -> str:
    """The health status name ("SERVING", "NOT_SERVING", ...) or "UNREACHABLE: <why>"."""
    channel = make_channel(address)
    try:
        stub = health_pb2_grpc.HealthStub(channel)
        reply = stub.Check(health_pb2.HealthCheckRequest(service=service), timeout=timeout)
        return health_pb2.HealthCheckResponse.ServingStatus.Name(reply.status)
    except grpc.RpcError as exc:
        return f"UNREACHABLE: {exc.code().name}"
    finally:
        channel.close()


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--address",
        default=None,
        help="host:port of the service (default 127.0.0.1:$ACTORQ_GRPC_PORT)",
    )
    parser.add_argument("--service", default="", help="service name to ask about ('' = overall)")
    parser.add_argument("--timeout", type=float, default=3.0, help="seconds to wait for a reply")


def run(args: argparse.Namespace) -> int:
    address = args.address or default_address()
    if ":" not in address:
        print(f"healthcheck: expected --address host:port, got {address!r}", file=sys.stderr)
        return EXIT_USAGE
    status = check_health(address, args.service, args.timeout)
    print(f"{address}: {status}")
    return EXIT_SERVING if status == "SERVING" else EXIT_UNHEALTHY


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m actorq.rpc.healthcheck", description=__doc__)
    add_arguments(parser)
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
