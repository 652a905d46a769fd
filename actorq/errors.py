"""Errors shared across the package, in a module that imports nothing of actorq's, so that
config.py and the modules it calls (security.signing, security.tls) need no import cycle.
The blob errors live here too: security.signing raises them and actorq.quant imports it."""

from __future__ import annotations


class ConfigError(ValueError):
    """A setting has a value that cannot be used; the message names it."""


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
