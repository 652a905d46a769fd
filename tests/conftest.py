"""Shared fixtures: a real Redis for the session, and per-test key prefixes on it."""

from __future__ import annotations

import contextlib
import os
import signal
import time
import uuid
from collections.abc import Iterator

import pytest
import redis

from actorq.redis_keys import RedisKeys
from actorq.redis_server import EmbeddedRedis, RedisUnavailable, check_redis

# A Redis to reuse when one answers there (override for CI hosts with Redis elsewhere).
LOCAL_REDIS_URL = os.environ.get("ACTORQ_TEST_REDIS_URL", "redis://127.0.0.1:6379/0")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """`gpu`-marked tests need CUDA: without it they are skipped with the reason (CI has
    no GPU; bench/gpu_check.sh runs them on a GPU machine with `-m gpu`)."""
    gpu_items = [item for item in items if item.get_closest_marker("gpu") is not None]
    if not gpu_items:
        return
    import torch

    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(
        reason=f"needs a CUDA GPU: torch {torch.__version__} sees none (make gpu-check runs it)"
    )
    for item in gpu_items:
        item.add_marker(skip)


# Settings that belong to the whole pytest process. A test that changes one and does not
# put it back changes every later test: flush-to-zero left set by an in-process bench
# worker once made hypothesis refuse subnormal floats and zeroed the int4 scale vectors
# in 11 unrelated tests. Tests that need another value use a fixture that restores it
# (one_torch_thread, monkeypatch.setenv) or run the code in a subprocess.
_THREAD_ENV = (
    "OMP_NUM_THREADS",
    "MKL_NUM_THREADS",
    "OPENBLAS_NUM_THREADS",
    "NUMBA_NUM_THREADS",
    "NUMEXPR_NUM_THREADS",
)
_SIGNALS = (signal.SIGINT, signal.SIGTERM)


def _process_settings() -> dict[str, object]:
    import numpy as np
    import torch

    from actorq.denormals import denormals_flushed

    settings: dict[str, object] = {
        "subnormals flushed (MXCSR FTZ/DAZ)": denormals_flushed(),
        "torch.get_num_threads()": torch.get_num_threads(),
        "torch.get_default_dtype()": torch.get_default_dtype(),
        "torch.is_grad_enabled()": torch.is_grad_enabled(),
        "np.geterr()": np.geterr(),
        "working directory": os.getcwd(),
    }
    settings.update({f"${name}": os.environ.get(name) for name in _THREAD_ENV})
    settings.update({f"{sig.name} handler": signal.getsignal(sig) for sig in _SIGNALS})
    return settings


def _restore_process_settings(before: dict[str, object]) -> None:
    import numpy as np
    import torch

    from actorq.denormals import flush_denormals

    flush_denormals(bool(before["subnormals flushed (MXCSR FTZ/DAZ)"]))
    torch.set_num_threads(int(before["torch.get_num_threads()"]))  # type: ignore[call-overload]
    torch.set_default_dtype(before["torch.get_default_dtype()"])  # type: ignore[arg-type]
    torch.set_grad_enabled(bool(before["torch.is_grad_enabled()"]))
    np.seterr(**before["np.geterr()"])  # type: ignore[arg-type]
    os.chdir(str(before["working directory"]))
    for name in _THREAD_ENV:
        value = before[f"${name}"]
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = str(value)
    for sig in _SIGNALS:
        signal.signal(sig, before[f"{sig.name} handler"])  # type: ignore[arg-type]


# Processes a test starts (services, `actorq run`, their children) end with it: a service
# left running keeps its ports, cores and Redis keys for the rest of the suite, and an
# orphan outlives the run. They are found by a mark in their environment, which every
# process this pytest starts inherits (unless a test hands it an environment without it),
# so grandchildren reparented to init count and another pytest's processes never do.
_PROCESS_GRACE_S = 10.0
_RUN_MARK = "ACTORQ_TEST_RUN"
os.environ[_RUN_MARK] = uuid.uuid4().hex
_MARK_BYTES = f"{_RUN_MARK}={os.environ[_RUN_MARK]}".encode()


def _marked_processes() -> dict[tuple[int, int], str]:
    """Live processes started under this pytest's mark, but pytest itself: (pid, start
    time in clock ticks since boot) -> command line."""
    me = os.getpid()
    found: dict[tuple[int, int], str] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == me:
            continue
        try:
            with open(f"/proc/{entry}/environ", "rb") as environ:
                if _MARK_BYTES not in environ.read().split(b"\0"):
                    continue
            with open(f"/proc/{entry}/stat") as stat:
                fields = stat.read().rsplit(")", 1)[1].split()
            with open(f"/proc/{entry}/cmdline", "rb") as cmdline:
                command = cmdline.read().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue  # gone meanwhile, or not ours to read
        if fields[0] != "Z":
            found[(int(entry), int(fields[19]))] = command.strip()[:200]
    return found


def _processes_left(before: set[tuple[int, int]]) -> dict[int, str]:
    """The processes the test started that still run `_PROCESS_GRACE_S` after it (stops
    may be asynchronous); they are killed, so that the next test starts clean."""
    deadline = time.monotonic() + _PROCESS_GRACE_S
    while True:
        left = {key: cmd for key, cmd in _marked_processes().items() if key not in before}
        if not left or time.monotonic() >= deadline:
            break
        time.sleep(0.2)
    for pid, _ in left:
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)
    return {pid: cmd for (pid, _), cmd in left.items()}


@pytest.fixture(autouse=True)
def _no_state_left_behind() -> Iterator[None]:
    """Fails a test that leaves a process-wide setting changed or a process it started
    running (after putting the setting back and killing the process, so that the tests
    after it run as they would alone). Fixtures of a wider scope are set up before it."""
    before = _process_settings()
    processes_before = set(_marked_processes())
    yield
    after = _process_settings()
    changed = {key: (before[key], after[key]) for key in before if before[key] != after[key]}
    problems = [f"  {key}: {old!r} -> {new!r}" for key, (old, new) in changed.items()]
    if changed:
        _restore_process_settings(before)
    left = _processes_left(processes_before)
    problems += [f"  process {pid} still running (killed): {cmd}" for pid, cmd in left.items()]
    if problems:
        pytest.fail(
            "the test left process-wide state behind (restore settings with the "
            "one_torch_thread fixture or monkeypatch, or run the code in a subprocess; stop "
            "what it started):\n" + "\n".join(problems)
        )


@pytest.fixture
def one_torch_thread() -> Iterator[None]:
    """torch on one thread for the test (the learner's default): small MLP updates run ~20x
    faster than on two threads of a shared 2-core machine."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="session")
def redis_url() -> Iterator[str]:
    """The local Redis (LOCAL_REDIS_URL) when one answers, else an embedded redis-server."""
    try:
        check_redis(LOCAL_REDIS_URL, timeout=0.5)
    except RedisUnavailable:
        with EmbeddedRedis() as server:
            yield server.url
        return
    yield LOCAL_REDIS_URL


@pytest.fixture
def redis_client(redis_url: str) -> Iterator[redis.Redis]:
    """A binary-safe client (decode_responses=False), closed after the test."""
    client = redis.Redis.from_url(redis_url)
    yield client
    client.close()


@pytest.fixture
def redis_keys(redis_client: redis.Redis) -> Iterator[RedisKeys]:
    """Keys under a unique prefix; every key under it is deleted after the test."""
    keys = RedisKeys(prefix=f"test-{uuid.uuid4().hex}")
    yield keys
    stale = list(redis_client.scan_iter(match=f"{keys.prefix}:*", count=1000))
    if stale:
        redis_client.delete(*stale)


@pytest.fixture(scope="session")
def local_images() -> Iterator[str]:
    """A Docker engine holding `make image`'s images (actorq:latest, actorq-local/*).

    scripts/docker_engine.sh installs Debian's docker.io and starts dockerd when no engine
    answers; scripts/build_images.sh builds the images (base image and layers cached).
    An engine this fixture started is stopped again at the end of the session; the images
    stay in its store for the next run. Yields the docker CLI's path.
    """
    import shutil
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent
    docker = shutil.which("docker")
    was_running = docker is not None and _docker_answers(docker)
    # The engine outlives every test (and may outlive the session): it starts without the
    # test run's mark, or the suite guard would take the containerd shims it forks for a
    # test's containers for that test's leftovers and kill them.
    _run_script(root / "scripts" / "docker_engine.sh", "start", env=_environment_unmarked())
    try:
        # The compose tests run actorq:latest (learner) and actorq:core (the rest) only.
        os.environ.setdefault("ACTORQ_IMAGE_ROLES", "latest core")
        _run_script(root / "scripts" / "build_images.sh")
        yield shutil.which("docker") or "docker"
    finally:
        if not was_running:
            _run_script(root / "scripts" / "docker_engine.sh", "stop")


def _docker_answers(docker: str) -> bool:
    import subprocess

    return subprocess.run([docker, "info"], capture_output=True, check=False).returncode == 0


def _environment_unmarked() -> dict[str, str]:
    """This process's environment without the suite guard's mark, for daemons the whole
    session shares."""
    return {name: value for name, value in os.environ.items() if name != _RUN_MARK}


def _run_script(*args: object, env: dict[str, str] | None = None) -> None:
    import subprocess

    proc = subprocess.run(
        [str(a) for a in args], capture_output=True, text=True, check=False, timeout=1500, env=env
    )
    print(proc.stdout + proc.stderr)
    if proc.returncode != 0:
        pytest.fail(f"{args[0]} exited {proc.returncode}:\n{proc.stdout}\n{proc.stderr}")
