"""Errors raised by the quant package (defined in actorq.errors, which imports nothing of
actorq's, so security.signing can raise them without importing actorq.quant); all are
ValueErrors so callers can catch broadly."""

from __future__ import annotations

from actorq.errors import BlobError, SignatureError, WeightsError

__all__ = ["BlobError", "SignatureError", "WeightsError"]
