"""The services' pre-imported parent (actorq.launch.zygote): real forks, real signals."""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
from pathlib import Path

import pytest

from actorq.launch.processes import ServiceProcess
from actorq.launch.zygote import LOST_WITH_ZYGOTE, Zygote

MODULE = "actorq.testing.zygote_child"
LIGHT = ("json",)  # the real preload (torch & co.) is exercised by every `actorq run` test


@pytest.fixture
def zygote(monkeypatch):
    monkeypatch.setenv("ACTORQ_LAUNCH_MODE", "fork")
    z = Zygote.start(LIGHT)
    assert z is not None
    yield z
    z.close()


def test_child_gets_env_and_log_and_reports_its_exit_code(zygote, tmp_path) -> None:
    log = tmp_path / "child.log"
    env = {**os.environ, "ACTORQ_TEST_VALUE": "42", "ACTORQ_TEST_EXIT_CODE": "3"}
    child = zygote.spawn(MODULE, env, str(log), niceness=0)
    assert child.wait(timeout=60) == 3
    assert child.poll() == 3
    text = log.read_text()
    assert f"child pid {child.pid}" in text
    assert "value 42" in text


def test_terminate_reports_the_signal_and_wait_times_out_before(zygote, tmp_path) -> None:
    env = {**os.environ, "ACTORQ_TEST_SLEEP": "1"}
    child = zygote.spawn(MODULE, env, str(tmp_path / "c.log"), niceness=0)
    with pytest.raises(subprocess.TimeoutExpired):
        child.wait(timeout=0.3)
    child.terminate()
    assert child.wait(timeout=30) == -signal.SIGTERM


def test_a_failing_child_exits_nonzero_with_its_traceback(zygote, tmp_path) -> None:
    log = tmp_path / "bad.log"
    child = zygote.spawn("actorq.no_such_module", dict(os.environ), str(log), niceness=0)
    assert child.wait(timeout=30) == 1
    assert "No module named actorq.no_such_module" in log.read_text()


def test_spawn_mode_needs_no_zygote_and_bad_mode_is_refused(monkeypatch) -> None:
    monkeypatch.setenv("ACTORQ_LAUNCH_MODE", "spawn")
    assert Zygote.start(LIGHT) is None
    monkeypatch.setenv("ACTORQ_LAUNCH_MODE", "threads")
    with pytest.raises(ValueError, match="ACTORQ_LAUNCH_MODE='threads'"):
        Zygote.start(LIGHT)


def test_closing_the_zygote_leaves_no_process(monkeypatch, tmp_path) -> None:
    monkeypatch.setenv("ACTORQ_LAUNCH_MODE", "fork")
    z = Zygote.start(LIGHT)
    assert z is not None
    child = z.spawn(MODULE, dict(os.environ), str(tmp_path / "c.log"), niceness=0)
    assert child.wait(timeout=60) == 0
    z.close()
    assert z._proc.returncode is not None
    with pytest.raises(ProcessLookupError):
        os.kill(child.pid, 0)


def test_child_shows_its_module_and_run_dir_in_ps(zygote, tmp_path) -> None:
    env = {**os.environ, "ACTORQ_TEST_SLEEP": "1", "ACTORQ_RUN_DIR": str(tmp_path)}
    child = zygote.spawn(MODULE, env, str(tmp_path / "c.log"), niceness=0)
    deadline = time.monotonic() + 30
    cmdline = b""
    while time.monotonic() < deadline and str(tmp_path).encode() not in cmdline:
        cmdline = Path(f"/proc/{child.pid}/cmdline").read_bytes()
        time.sleep(0.05)
    assert f"-m {MODULE} {tmp_path}".encode() in cmdline
    child.kill()
    assert child.wait(timeout=30) == -signal.SIGKILL


def test_cpu_seconds_of_a_forked_service_are_reported_after_its_exit(zygote, tmp_path) -> None:
    # The service is the zygote's child, so only the zygote can read its rusage (wait4);
    # the launcher's /proc read would find nothing once it is reaped.
    proc = ServiceProcess(
        name="burner",
        module=MODULE,
        env={"ACTORQ_TEST_BURN": "0.2"},
        log_path=tmp_path / "burn.log",
        grpc_port=0,
        zygote=zygote,
    )
    proc.start()
    assert proc.wait_stopped(timeout=60) == 0
    assert proc.exit_code() == 0
    cpu = proc.cpu_seconds()
    assert cpu is not None and cpu > 0.1
    assert proc.final_cpu_seconds == cpu


def test_wait_returns_when_the_zygote_is_killed_before_reporting(monkeypatch, tmp_path) -> None:
    # `pkill -f actorq` kills the zygote beside the services: the launcher's shutdown used
    # to wait forever for exits that the dead zygote could no longer report.
    monkeypatch.setenv("ACTORQ_LAUNCH_MODE", "fork")
    z = Zygote.start(LIGHT)
    assert z is not None
    env = {**os.environ, "ACTORQ_TEST_SLEEP": "1"}
    child = z.spawn(MODULE, env, str(tmp_path / "c.log"), niceness=0)
    os.kill(z._proc.pid, signal.SIGKILL)
    codes: list[int] = []
    waiter = threading.Thread(target=lambda: codes.append(child.wait()), daemon=True)
    waiter.start()
    waiter.join(timeout=30)
    assert not waiter.is_alive(), "wait() hung after the zygote died"
    assert codes == [LOST_WITH_ZYGOTE]
    deadline = time.monotonic() + 10  # the kernel kills the child with its parent
    while _running(child.pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _running(child.pid)
    z.close()


def test_spawn_fails_at_once_once_the_zygote_is_dead(monkeypatch, tmp_path) -> None:
    monkeypatch.setenv("ACTORQ_LAUNCH_MODE", "fork")
    z = Zygote.start(LIGHT)
    assert z is not None
    os.kill(z._proc.pid, signal.SIGKILL)
    started = time.monotonic()
    with pytest.raises(RuntimeError, match="zygote exited"):
        z.spawn(MODULE, dict(os.environ), str(tmp_path / "c.log"), niceness=0)
    assert time.monotonic() - started < 30  # not the 120 s fork timeout
    z.close()


def _running(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


def test_close_after_the_zygote_was_killed_with_a_request_still_buffered() -> None:
    z = Zygote.start(LIGHT)
    assert z is not None
    os.kill(z._proc.pid, signal.SIGKILL)
    z._proc.wait()
    assert z._proc.stdin is not None
    z._proc.stdin.write(b'{"module": "x"}\n')  # what a spawn racing the kill leaves behind
    z.close()  # flushing into the dead pipe must not raise
    assert z._proc.stdin.closed
