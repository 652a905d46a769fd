"""Domain errors -> gRPC status codes, in one place.

Servicers wrap their bodies in `abort_on_error(context)`; a ValueError (bad input)
becomes INVALID_ARGUMENT, a KeyError/LookupError NOT_FOUND, a redis outage UNAVAILABLE.
Anything else is INTERNAL and logged with its traceback, and the server keeps running.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator

import grpc
import redis

log = logging.getLogger(__name__)


class PortInUseError(RuntimeError):
    """A gRPC or metrics port could not be bound."""


class FailedPrecondition(RuntimeError):
    """The request is well formed but conflicts with stored state (e.g. version rollback)."""


class DataLoss(RuntimeError):
    """Stored state is corrupt (e.g. a Redis value that does not parse)."""


def status_for(exc: BaseException) -> grpc.StatusCode:
    """The gRPC status code a domain exception maps to."""
    if isinstance(exc, DataLoss):
        return grpc.StatusCode.DATA_LOSS
    if isinstance(exc, FailedPrecondition):
        return grpc.StatusCode.FAILED_PRECONDITION
    if isinstance(exc, ValueError):
        return grpc.StatusCode.INVALID_ARGUMENT
    if isinstance(exc, LookupError):
        return grpc.StatusCode.NOT_FOUND
    if isinstance(exc, redis.RedisError | ConnectionError | TimeoutError):
        return grpc.StatusCode.UNAVAILABLE
    return grpc.StatusCode.INTERNAL


@contextlib.contextmanager
def abort_on_error(context: grpc.ServicerContext) -> Iterator[None]:
    """Turn an exception raised inside a servicer method into a proper gRPC status."""
    try:
        yield
    except Exception as exc:
        # context.abort raises its own exception type; let it through untouched.
        if isinstance(exc, grpc.RpcError) or type(exc).__name__ == "_AbortError":
            raise
        code = status_for(exc)
        if code is grpc.StatusCode.INTERNAL:
            log.exception("internal error in gRPC handler")
        message = exc.args[0] if isinstance(exc, KeyError) and exc.args else str(exc)
        context.abort(code, str(message) or type(exc).__name__)
