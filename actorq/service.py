"""What every service process shares: logging, signals, Redis connection, user errors.

A service's `main()` builds its objects and calls `runtime.wait()`; SIGTERM or SIGINT
(or a Control.Stop call) sets the stop event, and the service shuts down in order.
User errors (bad settings, unreachable Redis, port in use) print one line and exit 2.
"""

from __future__ import annotations

import logging
import os
import signal
import sys
import threading
from collections.abc import Callable
from pathlib import Path

import redis
from redis.backoff import ExponentialBackoff
from redis.retry import Retry

from actorq.config import ConfigError
from actorq.redis_server import RedisUnavailable, check_redis
from actorq.rpc.errors import PortInUseError
from actorq.torch_threads import inherit_torch_threads

USER_ERRORS = (ConfigError, RedisUnavailable, PortInUseError, ValueError)
EXIT_USER_ERROR = 2

log = logging.getLogger("actorq")


def setup_logging(level: str = "INFO") -> None:
    logging.basicConfig(
        level=getattr(logging, level.upper(), logging.INFO),
        # milliseconds: start-up and restart timings are read off these lines
        format="%(asctime)s.%(msecs)03d %(levelname).1s %(name)s ["
        + str(os.getpid())
        + "] %(message)s",
        datefmt="%H:%M:%S",
    )


def read_password_file(path: str) -> str | None:
    """The Redis password in `path` (surrounding whitespace stripped); None for no path."""
    if not path:
        return None
    try:
        return Path(path).read_text().strip()
    except OSError as exc:
        raise ConfigError(f"redis_password_file: cannot read {path!r}: {exc.strerror}") from None


def connect_redis(url: str, check_timeout: float = 5.0, password_file: str = "") -> redis.Redis:
    """A client that retries with backoff; raises RedisUnavailable naming `url`.

    The user name comes from the URL; the password from the URL or, when the URL has none,
    from `password_file` (a mounted Secret), so it need not sit in the environment.
    """
    password = read_password_file(password_file)
    check_redis(url, timeout=check_timeout, password=password)
    return redis.Redis.from_url(
        url,
        password=password,
        socket_timeout=10.0,
        socket_connect_timeout=5.0,
        retry=Retry(ExponentialBackoff(cap=2.0, base=0.05), retries=8),
        retry_on_error=[redis.ConnectionError, redis.TimeoutError],
        health_check_interval=15,
    )


class ServiceRuntime:
    """Stop event wired to SIGTERM/SIGINT, shared by a service's threads."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.stop_event = threading.Event()
        self.stop_reason = ""
        if threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGTERM, self._on_signal)
            signal.signal(signal.SIGINT, self._on_signal)

    def _on_signal(self, signum: int, _frame: object) -> None:
        # Not request_stop() here: Event.set() takes the event's (non-reentrant) lock, and
        # this handler runs on the main thread, which may hold that very lock at this
        # instant (the signal landed inside its own Event.wait). set() then waits forever
        # for its own thread: a learner went on training after "stopping: signal SIGTERM"
        # until compose's stop timeout killed it. A short-lived thread sets it instead.
        reason = f"signal {signal.Signals(signum).name}"
        threading.Thread(
            target=self.request_stop, args=(reason,), name="stop-signal", daemon=True
        ).start()

    def request_stop(self, reason: str) -> None:
        if not self.stop_event.is_set():
            self.stop_reason = reason
            log.info("%s stopping: %s", self.name, reason)
            self.stop_event.set()

    @property
    def stopping(self) -> bool:
        return self.stop_event.is_set()

    def wait(self, timeout: float | None = None) -> bool:
        if timeout is not None:
            return self.stop_event.wait(timeout)
        # Wake up now and then: a SIGTERM the kernel delivers to a worker thread only sets
        # CPython's flag, and the main thread runs the handler once it is awake.
        while not self.stop_event.wait(0.25):
            pass
        return True


LOOP_CRASHED = "main loop crashed"  # the stop reason run_loop gives when its loop raised


def run_loop(loop: Callable[[], None], runtime: ServiceRuntime, done_reason: str) -> None:
    """Thread body for a service's main loop: a crash is logged and stops the service."""
    inherit_torch_threads()
    try:
        loop()
    except Exception:
        log.exception("%s: main loop crashed", runtime.name)
        runtime.request_stop(LOOP_CRASHED)
        raise
    runtime.request_stop(done_reason)


def run_main(main: Callable[[], int | None]) -> None:
    """Run a service main; user errors become one line on stderr and exit code 2."""
    try:
        code = main()
    except USER_ERRORS as exc:
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(EXIT_USER_ERROR)
    except KeyboardInterrupt:
        sys.exit(130)
    sys.exit(code or 0)
