"""Requests that do not parse get INVALID_ARGUMENT, not grpc's INTERNAL.

grpc-python answers a request whose bytes fail to deserialize with INTERNAL ("Exception
deserializing request!"), which reads as a server bug and hides the caller's mistake. This
interceptor wraps every method handler's deserializer so that a parse failure becomes a
marker object, and the handler answers INVALID_ARGUMENT for it before any servicer code
runs (for client streams: at the first bad message, through `MalformedRequest`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import grpc


class MalformedRequest(ValueError):
    """A request message did not parse; maps to INVALID_ARGUMENT."""


class _Undecodable:
    def __init__(self, error: str) -> None:
        self.error = error


def _safe(deserializer: Callable[[bytes], Any] | None) -> Callable[[bytes], Any] | None:
    if deserializer is None:
        return None

    def parse(data: bytes) -> Any:
        try:
            return deserializer(data)
        except Exception as exc:  # any parse failure is the caller's, not ours
            return _Undecodable(f"{type(exc).__name__}: {exc}")

    return parse


def _message(bad: _Undecodable) -> str:
    return f"request is not a valid message for this method ({bad.error})"


def _checked(requests: Iterator[Any]) -> Iterator[Any]:
    for request in requests:
        if isinstance(request, _Undecodable):
            raise MalformedRequest(_message(request))
        yield request


def _guard(handler: grpc.RpcMethodHandler) -> grpc.RpcMethodHandler:
    parse = _safe(handler.request_deserializer)
    if handler.unary_unary is not None:
        inner_uu = handler.unary_unary

        def unary_unary(request: Any, context: grpc.ServicerContext) -> Any:
            if isinstance(request, _Undecodable):
                context.abort(grpc.StatusCode.INVALID_ARGUMENT, _message(request))
            return inner_uu(request, context)

        return handler._replace(request_deserializer=parse, unary_unary=unary_unary)
    if handler.unary_stream is not None:
        inner_us = handler.unary_stream

        def unary_stream(request: Any, context: grpc.ServicerContext) -> Iterator[Any]:
            if isinstance(request, _Undecodable):
                context.abort(grpc.StatusCode.INVALID_ARGUMENT, _message(request))
            yield from inner_us(request, context)

        return handler._replace(request_deserializer=parse, unary_stream=unary_stream)
    streaming = "stream_unary" if handler.stream_unary is not None else "stream_stream"
    inner = getattr(handler, streaming)

    def client_stream(requests: Iterator[Any], context: grpc.ServicerContext) -> Any:
        try:
            return inner(_checked(requests), context)
        except MalformedRequest as exc:  # the servicer did not map it itself
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(exc))

    return handler._replace(request_deserializer=parse, **{streaming: client_stream})


class DecodeGuard(grpc.ServerInterceptor):
    """Server interceptor applying the guard to every method of every service."""

    def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], grpc.RpcMethodHandler | None],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler | None:
        handler = continuation(handler_call_details)
        if handler is None or not hasattr(handler, "_replace"):
            return handler
        return _guard(handler)
