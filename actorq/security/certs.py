"""Development certificates: a private CA plus one cert per service, made with openssl.

`make dev-certs` (or `python -m actorq.security.certs --out certs/dev`) writes ca.pem,
ca.key and <service>.pem / <service>.key for every service. Each service cert is valid as
a server and as a client (serverAuth + clientAuth) for localhost, 127.0.0.1 and the
service's own name (the host name compose and Kubernetes give it). For development and
tests only: production certificates come from your own CA or cert-manager.
"""

from __future__ import annotations

import argparse
import os
import secrets
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

SERVICES = ("quantizer", "learner", "actor", "evaluator", "launcher")
DEFAULT_HOSTS = ("localhost", "127.0.0.1", "::1")
EC_KEY = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes"]


class CertError(RuntimeError):
    """openssl is missing or refused to make a certificate."""


def _openssl(args: Sequence[str]) -> None:
    exe = shutil.which("openssl")
    if exe is None:
        raise CertError("the openssl command is needed to make dev certificates; install it")
    done = subprocess.run([exe, *args], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise CertError(f"openssl {args[0]} failed: {done.stderr.strip()}")


def _private(path: Path) -> None:
    os.chmod(path, 0o600)


def make_ca(out: Path, name: str = "actorq dev CA", days: int = 825) -> tuple[Path, Path]:
    """A self-signed CA: (ca.pem, ca.key) in `out`."""
    out.mkdir(parents=True, exist_ok=True)
    cert, key = out / "ca.pem", out / "ca.key"
    _openssl(
        [
            *("req", "-x509", *EC_KEY, "-keyout", str(key), "-out", str(cert)),
            *("-days", str(days), "-subj", f"/CN={name}"),
            *("-addext", "basicConstraints=critical,CA:TRUE"),
            *("-addext", "keyUsage=critical,keyCertSign,cRLSign"),
        ]
    )
    _private(key)
    return cert, key


def _san(hosts: Sequence[str]) -> str:
    entries = []
    for host in hosts:
        is_ip = host.replace(".", "").isdigit() or ":" in host
        entries.append(f"IP:{host}" if is_ip else f"DNS:{host}")
    return ",".join(entries)


def make_leaf(
    out: Path, name: str, ca_cert: Path, ca_key: Path, hosts: Sequence[str], days: int = 825
) -> tuple[Path, Path]:
    """A cert for `name` (CN = name) signed by the CA, valid for `hosts`: (pem, key)."""
    cert, key = out / f"{name}.pem", out / f"{name}.key"
    with tempfile.TemporaryDirectory() as tmp:
        csr, ext = Path(tmp) / "req.csr", Path(tmp) / "ext.cnf"
        ext.write_text(
            f"subjectAltName={_san(hosts)}\n"
            "extendedKeyUsage=serverAuth,clientAuth\n"
            "keyUsage=critical,digitalSignature,keyEncipherment\n"
            "basicConstraints=critical,CA:FALSE\n"
        )
        _openssl(
            ["req", "-new", *EC_KEY, "-keyout", str(key), "-out", str(csr), "-subj", f"/CN={name}"]
        )
        _openssl(
            [
                *("x509", "-req", "-in", str(csr), "-CA", str(ca_cert), "-CAkey", str(ca_key)),
                *("-set_serial", "0x" + secrets.token_hex(16), "-days", str(days)),
                *("-out", str(cert), "-extfile", str(ext)),
            ]
        )
    _private(key)
    return cert, key


def make_dev_certs(
    out: Path,
    services: Sequence[str] = SERVICES,
    extra_hosts: Sequence[str] = (),
    ca_name: str = "actorq dev CA",
) -> dict[str, tuple[Path, Path]]:
    """A CA and one cert per service in `out`; returns {name: (pem, key)}, "ca" included."""
    ca_cert, ca_key = make_ca(out, ca_name)
    made = {"ca": (ca_cert, ca_key)}
    for name in services:
        hosts = [*DEFAULT_HOSTS, name, f"actorq-{name}", *extra_hosts]
        made[name] = make_leaf(out, name, ca_cert, ca_key, hosts)
    return made


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="certs/dev", help="folder to write into")
    parser.add_argument(
        "--host",
        action="append",
        default=[],
        help="extra DNS name or IP every service cert is valid for (repeatable)",
    )
    args = parser.parse_args(argv)
    try:
        made = make_dev_certs(Path(args.out), extra_hosts=args.host)
    except CertError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(f"wrote a dev CA and {len(made) - 1} service certificates to {args.out}/:")
    for name, (pem, key) in made.items():
        print(f"  {name:<10} {pem}  {key}")
    print("use: ACTORQ_TLS_CA=ca.pem ACTORQ_TLS_CERT=<service>.pem ACTORQ_TLS_KEY=<service>.key")
    return 0


if __name__ == "__main__":
    sys.exit(main())
