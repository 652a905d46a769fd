"""The metrics port's HTTP server: Prometheus' /metrics plus a plain `/healthz`.

`/healthz` answers from the same state as the service's grpc.health.v1 (the status
`GrpcServer.set_serving` last set): 200 and "SERVING", or 503 and the other status. A
container probe then needs no gRPC client and no Python: the image's `actorq-healthz`
(deploy/docker/actorq-healthz) is bash talking HTTP/1.0 over its /dev/tcp builtin, about
a millisecond of CPU where `python -m actorq.rpc.healthcheck` spent half a second
importing grpc (BENCHMARKS.md "Health probes"). Kubernetes keeps its native gRPC probes.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, make_server

from prometheus_client import REGISTRY, make_wsgi_app
from prometheus_client.exposition import ThreadingWSGIServer, _get_best_family

HEALTH_PATH = "/healthz"
SERVING = "SERVING"

HealthSource = Callable[[], str]  # the grpc.health.v1 status name of the overall service


def _reply(start_response: Callable[..., Any], status: str, body: str) -> list[bytes]:
    data = (body + "\n").encode()
    start_response(status, [("Content-Type", "text/plain"), ("Content-Length", str(len(data)))])
    return [data]


def make_app(health: HealthSource | None) -> Callable[..., Iterable[bytes]]:
    """WSGI app: `/healthz` from `health`, everything else Prometheus' exposition."""
    metrics = make_wsgi_app(REGISTRY)

    def app(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        if environ.get("PATH_INFO") != HEALTH_PATH:
            return metrics(environ, start_response)
        if health is None:  # a process with no gRPC server has no health to report
            return _reply(start_response, "404 Not Found", "no health source in this process")
        status = health()
        code = "200 OK" if status == SERVING else "503 Service Unavailable"
        return _reply(start_response, code, status)

    return app


class _QuietHandler(WSGIRequestHandler):
    """No access log line per scrape or probe (the service's log stays readable)."""

    def log_message(self, format: str, *args: Any) -> None:
        pass


def start_server(host: str, port: int, health: HealthSource | None) -> ThreadingWSGIServer:
    """Serve `make_app(health)` on host:port (0 = a free port) from a daemon thread."""

    class Server(ThreadingWSGIServer):  # per call: the address family is a class attribute
        pass

    Server.address_family, addr = _get_best_family(host, port)
    httpd = make_server(addr, port, make_app(health), Server, handler_class=_QuietHandler)
    threading.Thread(target=httpd.serve_forever, name="metrics-http", daemon=True).start()
    return httpd
