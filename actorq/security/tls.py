"""TLS and mutual TLS for every gRPC server and channel, from PEM files on disk.

Certificates come from paths (a Kubernetes Secret mounted as a volume is just files), set by
ACTORQ_TLS_CERT, ACTORQ_TLS_KEY, ACTORQ_TLS_CA and ACTORQ_TLS_REQUIRE_CLIENT_CERT. One
certificate per service serves both sides: the service's server identity and its client
identity when it calls another service (dev certs carry both serverAuth and clientAuth).

- No CA set: plaintext (the default, for loopback-only local runs).
- CA set: clients verify the server against the CA; servers present cert + key.
- require_client_cert: servers also demand a client certificate signed by the same CA.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import grpc

from actorq.errors import ConfigError

ENV_VARS = {
    "cert": "ACTORQ_TLS_CERT",
    "key": "ACTORQ_TLS_KEY",
    "ca": "ACTORQ_TLS_CA",
    "require_client_cert": "ACTORQ_TLS_REQUIRE_CLIENT_CERT",
    "server_name": "ACTORQ_TLS_SERVER_NAME",
}


@dataclass(frozen=True)
class TlsConfig:
    """Paths of PEM files; an empty `ca` means TLS is off."""

    cert: str = ""
    key: str = ""
    ca: str = ""
    require_client_cert: bool = False
    server_name: str = ""  # override the name checked in the server's cert (tests, k8s)

    def __post_init__(self) -> None:
        if not self.ca:
            stray = [n for n in ("cert", "key") if getattr(self, n)]
            if stray or self.require_client_cert:
                raise ConfigError(
                    "tls_ca: expected the CA certificate file when tls_cert, tls_key or "
                    "tls_require_client_cert is set (TLS needs a CA to verify peers)"
                )
            return
        if bool(self.cert) != bool(self.key):
            raise ConfigError(
                "tls_cert and tls_key: expected both (a certificate and its private key) "
                f"or neither, got cert={self.cert!r} key={self.key!r}"
            )
        for name in ("cert", "key", "ca"):
            path = getattr(self, name)
            if path and not Path(path).is_file():
                raise ConfigError(f"tls_{name}: expected a readable PEM file, got {path!r}")

    @property
    def enabled(self) -> bool:
        return bool(self.ca)

    @classmethod
    def from_settings(cls, settings: object) -> TlsConfig:
        """From a settings object with tls_* fields (CommonSettings)."""
        return cls(
            cert=getattr(settings, "tls_cert", ""),
            key=getattr(settings, "tls_key", ""),
            ca=getattr(settings, "tls_ca", ""),
            require_client_cert=getattr(settings, "tls_require_client_cert", False),
            server_name=getattr(settings, "tls_server_name", ""),
        )

    @classmethod
    def from_environ(cls, environ: Mapping[str, str] | None = None) -> TlsConfig:
        """From ACTORQ_TLS_* variables of this process (plaintext when none are set)."""
        env = os.environ if environ is None else environ
        require = env.get(ENV_VARS["require_client_cert"], "false").strip().lower()
        if require not in ("1", "true", "yes", "on", "0", "false", "no", "off", ""):
            raise ConfigError(
                f"{ENV_VARS['require_client_cert']}: expected true/false, got {require!r}"
            )
        return cls(
            cert=env.get(ENV_VARS["cert"], ""),
            key=env.get(ENV_VARS["key"], ""),
            ca=env.get(ENV_VARS["ca"], ""),
            require_client_cert=require in ("1", "true", "yes", "on"),
            server_name=env.get(ENV_VARS["server_name"], ""),
        )

    def _read(self, name: str) -> bytes:
        path = getattr(self, name)
        try:
            return Path(path).read_bytes()
        except OSError as exc:
            raise ConfigError(f"tls_{name}: cannot read {path!r}: {exc.strerror}") from None

    def server_credentials(self) -> grpc.ServerCredentials:
        """Credentials for `add_secure_port`; a server needs its own cert and key."""
        if not (self.cert and self.key):
            raise ConfigError(
                "tls_cert and tls_key: a TLS server needs its certificate and key, got none"
            )
        return grpc.ssl_server_credentials(
            [(self._read("key"), self._read("cert"))],
            root_certificates=self._read("ca") if self.require_client_cert else None,
            require_client_auth=self.require_client_cert,
        )

    def channel_credentials(self) -> grpc.ChannelCredentials:
        """Credentials for `secure_channel`; the client cert is sent when one is set."""
        return grpc.ssl_channel_credentials(
            root_certificates=self._read("ca"),
            private_key=self._read("key") if self.key else None,
            certificate_chain=self._read("cert") if self.cert else None,
        )

    def channel_options(self) -> list[tuple[str, str]]:
        if self.server_name:
            return [("grpc.ssl_target_name_override", self.server_name)]
        return []


PLAINTEXT = TlsConfig()


def parse_peer_names(text: str, setting: str, tls: TlsConfig) -> frozenset[str]:
    """'learner,trainer-2' -> names; empty = any authenticated peer. Needs mutual TLS."""
    names = frozenset(n.strip() for n in text.split(",") if n.strip())
    if names and not tls.require_client_cert:
        raise ConfigError(
            f"{setting}: names client certificates, so it needs mutual TLS "
            f"(tls_ca, tls_cert, tls_key and tls_require_client_cert=true); got {text!r}"
        )
    return names


def allowed_peers(settings: object, setting: str) -> frozenset[str]:
    """The names in a settings field like tls_allowed_publishers (validated)."""
    return parse_peer_names(getattr(settings, setting), setting, TlsConfig.from_settings(settings))


def peer_names(context: grpc.ServicerContext) -> set[str]:
    """Common name and subject alternative names of the caller's verified certificate."""
    auth = context.auth_context()
    names: set[str] = set()
    for key in ("x509_common_name", "x509_subject_alternative_name"):
        names |= {value.decode("utf-8", "replace") for value in auth.get(key, [])}
    return names


def check_peer_allowed(context: grpc.ServicerContext, allowed: frozenset[str], what: str) -> bool:
    """True if `allowed` is empty or the caller's certificate names one of its entries."""
    if not allowed:
        return True
    return bool(peer_names(context) & allowed)
