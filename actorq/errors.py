"""Errors shared across the package, in a module that imports nothing of actorq's, so that
config.py and the modules it calls (security.signing, security.tls) need no import cycle."""

from __future__ import annotations


class ConfigError(ValueError):
    """A setting has a value that cannot be used; the message names it."""
