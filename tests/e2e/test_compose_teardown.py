"""Compose projects that fail or misbehave on purpose, and what they leave behind.

- A readiness wait that times out (a 1 s budget) reports each service's health counts and
  a probe's last output, and the teardown leaves 0 containers, networks and volumes with
  the project's label.
- A health probe that hangs past its timeout. Docker 20.10 marks it failed and leaves it
  running; exec'd processes belong to the container's PID 1 once runc exits, so when the
  probe and its child end, PID 1 must reap them. With `init: true` (docker-init, as every
  actorq service now runs) they are reaped; without it (the control, a Python PID 1 like
  the services) they stay zombies. `compose down` then succeeds and nothing is left.
"""

from __future__ import annotations

import time
import uuid
from pathlib import Path

import pytest

from actorq.redis_server import find_free_port
from actorq.testing.compose import ComposeError, ComposeStack, wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.compose, pytest.mark.timeout(900)]

EMPTY = {"containers": [], "networks": [], "volumes": []}


def test_failed_readiness_wait_reports_and_leaves_nothing(
    local_images: str, tmp_path, capsys: pytest.CaptureFixture[str]
) -> None:
    stack = ComposeStack(local_images, f"actorq-fail-{uuid.uuid4().hex[:8]}", tmp_path,
                         find_free_port())  # fmt: skip
    try:
        stack.compose("up", "-d", "--scale", "actor=1", "redis", "quantizer", "actor")
        with pytest.raises(ComposeError) as failed:
            stack.wait_healthy(expected_actors=1, timeout=1)
        message = str(failed.value)
        print(message)
        assert "timed out after 1 s" in message
        assert "  actor: 1 " in message and "  redis: 1 " in message
        assert stack.objects()["containers"], "the stack was up before the teardown"
        # Make `compose down -v` itself fail (its file is gone), as a zombie once made it:
        # the teardown must fall back to removal by the project label and say so.
        stack.files = [tmp_path / "deleted-compose-file.yml"]
    finally:
        left = stack.teardown(tmp_path / "logs.txt")
    out = capsys.readouterr().out
    print(out)
    assert left == EMPTY
    assert "`down -v` failed" in out
    assert f"removed 3 containers of {stack.project} by label" in out
    assert f"removed 1 networks of {stack.project} by label" in out


HANGING_PROBE = """\
services:
  {name}:
    image: {image}
    init: {init}
    # A service as PID 1 (python): without an init it never reaps adopted children. It
    # exits on SIGTERM (PID 1 has no default action for it): else `down` waits out its
    # 60 s stop timeout on the no-init stack.
    command: ["python", "-c", "import signal, sys, time; signal.signal(signal.SIGTERM,
              lambda *_: sys.exit(0)); time.sleep(3600)"]
    healthcheck:
      # The probe starts a child and runs past the 1 s timeout; both end within 3 s.
      test: ["CMD", "bash", "-c", "sleep 1 & exec sleep 3"]
      interval: 2s
      timeout: 1s
      retries: 1000
"""


# /proc inside the container: a zombie has left its cgroup, so `docker top` never shows it.
PROC_STATES = 'for s in /proc/[0-9]*/stat; do read -r p c st _ < "$s" && echo "$p $c $st"; done'


def _zombies(stack: ComposeStack, container: str) -> list[str]:
    """Processes in the container's PID namespace in state Z."""
    out = stack.docker_cli("exec", container, "bash", "-c", PROC_STATES)
    return [line for line in out.splitlines() if line.endswith(" Z")]


def _hanging_probe_stack(docker: str, tmp_path: Path, init: bool) -> tuple[ComposeStack, str]:
    name = "withinit" if init else "noinit"
    stack = ComposeStack(docker, f"actorq-zombie-{name}-{uuid.uuid4().hex[:6]}", tmp_path,
                         find_free_port())  # fmt: skip
    compose_file = tmp_path / f"{name}.yml"
    compose_file.write_text(HANGING_PROBE.format(name=name, image="actorq:core",
                                                 init=str(init).lower()))  # fmt: skip
    stack.files = [compose_file]
    stack.compose("up", "-d")
    return stack, stack.container_ids(name)[0]


def _timeouts(stack: ComposeStack, container: str) -> int:
    log = stack.inspect(container)["State"]["Health"]["Log"]
    return sum("exceeded timeout" in entry["Output"] for entry in log)


def test_hanging_probe_leaves_no_zombie_with_init(local_images: str, tmp_path) -> None:
    stacks = []
    try:
        stacks.append(_hanging_probe_stack(local_images, tmp_path, init=True))
        stacks.append(_hanging_probe_stack(local_images, tmp_path, init=False))
        (with_init, a), (without, b) = stacks
        for stack, container in stacks:
            wait_for(lambda s=stack, c=container: _timeouts(s, c) >= 3, 120,
                     "three probes killed at their timeout")  # fmt: skip
        time.sleep(4)  # the probes that timed out have ended by now
        assert with_init.inspect(a)["HostConfig"]["Init"] is True
        zombies = {"init": _zombies(with_init, a), "no init": _zombies(without, b)}
        print(f"zombies after {_timeouts(with_init, a)} timed-out probes: {zombies}")
        assert zombies["init"] == []
        assert len(zombies["no init"]) >= 2, "the control shows the probe orphans children"
        # `down` of the init project succeeds by itself: no fallback needed.
        with_init.compose("down", "-v", "--remove-orphans", "--timeout", "20")
        assert with_init.objects() == EMPTY
    finally:
        for stack, _ in stacks:
            assert stack.teardown() == EMPTY
