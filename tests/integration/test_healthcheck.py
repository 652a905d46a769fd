"""The probe the container HEALTHCHECK runs, against a real GrpcServer on port 0."""

from __future__ import annotations

import subprocess
import sys

from actorq.cli import main as actorq_main
from actorq.redis_server import find_free_port
from actorq.rpc import GrpcServer
from actorq.rpc.healthcheck import check_health, default_address, main


def test_serving_server_passes_and_stopped_one_fails(capsys) -> None:
    server = GrpcServer("127.0.0.1", 0, [])
    server.start()
    address = f"127.0.0.1:{server.port}"
    try:
        assert check_health(address) == "SERVING"
        assert main(["--address", address]) == 0
        assert "SERVING" in capsys.readouterr().out
        server.set_serving(False)  # what a stopping service reports
        assert check_health(address) == "NOT_SERVING"
        assert main(["--address", address]) == 1
    finally:
        server.stop(grace=0.1)
    assert check_health(address, timeout=1.0).startswith("UNREACHABLE")


def test_nothing_listening_is_unhealthy_and_bad_address_is_usage_error(capsys) -> None:
    assert main(["--address", f"127.0.0.1:{find_free_port()}", "--timeout", "1"]) == 1
    assert "UNREACHABLE" in capsys.readouterr().out
    assert main(["--address", "no-port-here"]) == 2
    assert "host:port" in capsys.readouterr().err


def test_default_address_uses_the_service_port_variable() -> None:
    assert default_address({"ACTORQ_GRPC_PORT": "50099"}) == "127.0.0.1:50099"
    assert default_address({}) == "127.0.0.1:50051"


def test_cli_subcommand_and_module_entry_point() -> None:
    server = GrpcServer("127.0.0.1", 0, [])
    server.start()
    try:
        assert actorq_main(["healthcheck", "--address", f"127.0.0.1:{server.port}"]) == 0
        # exactly what the Dockerfile's HEALTHCHECK runs, in a fresh interpreter
        proc = subprocess.run(
            [sys.executable, "-m", "actorq.rpc.healthcheck"],
            env={"ACTORQ_GRPC_PORT": str(server.port), "PATH": "/usr/bin:/bin"},
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert proc.returncode == 0, proc.stdout + proc.stderr
    finally:
        server.stop(grace=0.1)
