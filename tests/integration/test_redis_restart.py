"""EmbeddedRedis.restart forks the server again when a start fails before the server
answers (seen once: a child killed by SIGABRT between fork and exec), and gives up with
the reason once every attempt failed."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest
import redis

from actorq.redis_server import (
    RESTART_ATTEMPTS,
    EmbeddedRedis,
    RedisUnavailable,
    find_redis_executable,
)


def _flaky_server(tmp_path: Path, failures: int) -> Path:
    """An executable that aborts its first `failures` starts after the first one, then
    runs the real redis-server with the same arguments."""
    count = tmp_path / "starts"
    script = tmp_path / "redis-server"
    script.write_text(
        "#!/bin/sh\n"
        f'n=$(cat "{count}" 2>/dev/null || echo 0); n=$((n + 1)); echo $n > "{count}"\n'
        f"if [ $n -gt 1 ] && [ $n -le {failures + 1} ]; then\n"
        '  echo "abort $n" >&2; kill -ABRT $$\n'
        "fi\n"
        f'exec "{find_redis_executable()}" "$@"\n'
    )
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return script


def test_a_restart_whose_first_fork_dies_tries_again(tmp_path: Path) -> None:
    server = EmbeddedRedis(data_dir=tmp_path / "data", appendonly=True,
                           executable=str(_flaky_server(tmp_path, failures=1)))  # fmt: skip
    server.start()
    try:
        redis.Redis.from_url(server.url).set("kept", "1")
        server.restart()  # the first fork aborts, the second serves the same port and data
        assert redis.Redis.from_url(server.url).get("kept") == b"1"
        assert (tmp_path / "starts").read_text().strip() == "3"
    finally:
        server.stop()


def test_a_restart_that_keeps_failing_says_why(tmp_path: Path) -> None:
    flaky = _flaky_server(tmp_path, failures=RESTART_ATTEMPTS)
    server = EmbeddedRedis(data_dir=tmp_path / "data", executable=str(flaky))
    server.start()
    try:
        with pytest.raises(RedisUnavailable, match=r"exited with code -6"):
            server.restart()
        assert (tmp_path / "starts").read_text().strip() == str(1 + RESTART_ATTEMPTS)
    finally:
        server.stop()
