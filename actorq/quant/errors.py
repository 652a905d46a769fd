"""Errors raised by the quant package; both are ValueErrors so callers can catch broadly."""

from __future__ import annotations


class WeightsError(ValueError):
    """fp32 weights handed to the encoder do not fit the model spec or are not finite."""


class BlobError(ValueError):
    """A policy blob is corrupt, inconsistent, or not the model the reader expected.

    Actors keep their previous policy when they see this error.
    """


class SignatureError(BlobError):
    """A policy blob is unsigned, signed with an unknown key, or its HMAC does not match.

    Raised only by readers that hold policy keys; the actor keeps its previous policy.
    """
