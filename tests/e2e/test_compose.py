"""`docker compose up --scale actor=N` end to end on a real Docker engine.

The `local_images` fixture (tests/conftest.py) starts an engine when none answers and runs
`make image`'s script; this module then brings up docker-compose.yml with the local-image
override (deploy/compose.local.yml) under a unique project name and checks, only through
real interfaces: every actor healthy with its own index, the Prometheus container
scraping every target, the dashboard's queries, training progress, an actor and the
learner crashed (SIGKILL of the container's process) and recovering, `compose stop`
losing no transition, and `compose down -v` leaving nothing behind.

N is ACTORQ_COMPOSE_ACTORS: `make compose-e2e` uses 32; the default (the CI run, via
`make test`) is 8, so the whole module fits CI's time budget on 2 shared cores.
The tests run in file order against one stack; each names what it waits for.

Passed end to end here on 2026-11-23 with N = 32 (all healthy 82 s after `up -d`, 2.5 min
in all) and N = 8 (41 s; 1.7 min); on 2026-12-03 (EPYC-AVX2) N = 32 beside 2 CPU hogs took
226 s and 424 s to healthy, and its run passed the replay stream's cap (see the stop test).
ACTORQ_COMPOSE_HOGS=N keeps N CPU-bound processes busy while the stack comes up. Teardown
always leaves nothing with the project's label: a failed `down -v` is followed by `docker rm
-f` / `network rm` / `volume rm` by label.
scripts/test.sh runs it; ACTORQ_COMPOSE_TESTS=0 deselects the `compose` marker.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from actorq.config import ActorSettings
from actorq.redis_server import find_free_port
from actorq.testing.compose import (
    ACTORQ_SERVICES,
    ROOT,
    ComposeStack,
    actor_instance,
    wait_for,
)
from actorq.testing.dashboard import unexpectedly_empty

ACTORS = int(os.environ.get("ACTORQ_COMPOSE_ACTORS", "8"))
DASHBOARD = ROOT / "deploy" / "grafana" / "dashboards" / "actorq.json"
# The evaluator exports the same actor metrics (instance "evaluator"): actors only here.
ACTOR_STEPS = 'actorq_actor_env_steps_total{job="actor"}'
HEALTHY_WITHIN_S = float(os.environ.get("ACTORQ_COMPOSE_HEALTHY_S", "300"))

pytestmark = [pytest.mark.e2e, pytest.mark.compose, pytest.mark.timeout(1500)]


# CPU-bound processes kept busy while the stack comes up (`make compose-e2e`: 2), as
# other jobs load a shared machine; issue 31's target is healthy within 180 s beside two.
HOGS = int(os.environ.get("ACTORQ_COMPOSE_HOGS", "0"))


@contextmanager
def cpu_hogs(count: int) -> Iterator[None]:
    hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(count)]
    try:
        yield
    finally:
        for hog in hogs:
            hog.kill()
            hog.wait(timeout=30)


@pytest.fixture(scope="module")
def stack(local_images: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ComposeStack]:
    project = f"actorq-e2e-{uuid.uuid4().hex[:8]}"
    work = tmp_path_factory.mktemp("compose")
    stack = ComposeStack(local_images, project, work, find_free_port())
    started = time.monotonic()
    try:
        with cpu_hogs(HOGS):
            stack.compose("up", "-d", "--scale", f"actor={ACTORS}")
            print(f"compose: {stack.cpu_weight()}")
            stack.wait_healthy(ACTORS, HEALTHY_WITHIN_S)
        load = os.getloadavg()[0]
        print(f"compose: {ACTORS} actors, all healthy {time.monotonic() - started:.0f} s "
              f"after `up -d` ({HOGS} CPU hogs, load average {load:.1f})")  # fmt: skip
        yield stack
    finally:
        # A failed `down -v` falls back to removing the project's objects by label.
        leftovers = stack.teardown(work / "logs.txt")
        assert leftovers == {"containers": [], "networks": [], "volumes": []}, leftovers


def test_every_actor_is_healthy_with_its_own_index(stack: ComposeStack) -> None:
    actors = stack.container_ids("actor")
    assert len(actors) == ACTORS
    assert all(stack.health(c) == "healthy" for c in actors)
    # docker-init as PID 1 and the bash /healthz probe in every actorq container
    for container in stack.containers():
        if container["Config"]["Labels"]["com.docker.compose.service"] in ACTORQ_SERVICES:
            assert container["HostConfig"]["Init"] is True, container["Name"]
            assert container["Config"]["Healthcheck"]["Test"] == ["CMD", "actorq-healthz"]
    instances = [actor_instance(stack.logs(c)) for c in actors]
    assert None not in instances, instances
    assert sorted(instances) == sorted(f"actor-{i}" for i in range(ACTORS))
    # The same names, from each actor's own /metrics through the Prometheus container.
    seen = wait_for(
        lambda: {r["metric"]["instance"] for r in stack.query(ACTOR_STEPS)}
        >= set(instances) and stack.query(ACTOR_STEPS),
        120, "every actor's env-step series in Prometheus",
    )  # fmt: skip
    assert {r["metric"]["instance"] for r in seen} == set(instances)


def test_cartpole_actors_act_without_torch(stack: ComposeStack) -> None:
    """A CartPole actor's int8 MLP policy runs through numpy (actorq.quant.numpy_mlp): no
    process in its container maps libtorch, while numpy's extension is mapped (the check
    reads the maps it means to). Pixel policies would load torch; compose's default does not."""
    actors = stack.container_ids("actor")
    for container in (actors[0], actors[-1]):
        found = {}
        for library in ("libtorch", "_multiarray_umath"):
            script = f"grep -l {library} /proc/[0-9]*/maps 2>/dev/null; true"
            found[library] = stack.docker_cli("exec", container, "sh", "-c", script).split()
        assert found["_multiarray_umath"], f"no process of {container} maps numpy"
        assert found["libtorch"] == [], f"{container}: libtorch mapped in {found['libtorch']}"


def test_engine_processes_do_not_count_as_this_tests(stack: ComposeStack) -> None:
    """The containerd shims the engine forks for this stack's containers outlive each test
    by design; they must not carry the test run's mark (tests/conftest.py), or the suite
    guard kills them when a test restarts a container (it once took down the stack)."""
    if os.environ.get("DOCKER_HOST"):
        pytest.skip("DOCKER_HOST names an engine whose processes may not be on this machine")
    mark = f"ACTORQ_TEST_RUN={os.environ['ACTORQ_TEST_RUN']}".encode()
    shims, marked = [], []
    for entry in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as cmdline:
                command = cmdline.read().replace(b"\0", b" ").decode(errors="replace")
            with open(f"/proc/{entry}/environ", "rb") as environ:
                environment = environ.read().split(b"\0")
        except OSError:
            continue
        if "containerd-shim" in command or "dockerd" in command.split(" ")[0]:
            shims.append(command)
            if mark in environment:
                marked.append(command)
    assert shims, "no containerd shim in /proc, though this stack's containers run"
    assert not marked, marked


def test_prometheus_container_scrapes_every_target(stack: ComposeStack) -> None:
    expected = {"actor": ACTORS, "learner": 1, "quantizer": 1, "evaluator": 1, "prometheus": 1}
    up = wait_for(lambda: (u := stack.targets_up()) == expected and u, 90,
                  f"targets up: {expected}")  # fmt: skip
    assert up == expected


def test_every_dashboard_query_returns_data(stack: ComposeStack) -> None:
    wait_for(lambda: (stack.value("max(actorq_learner_policy_version)") or 0) > 0, 180,
             "a published policy version")  # fmt: skip
    time.sleep(12)  # two more scrapes (5 s) so every rate() has two samples
    empty = []
    for panel in json.loads(DASHBOARD.read_text())["panels"]:
        for target in panel.get("targets", []):
            if not stack.query(target["expr"]):
                empty.append(f"{panel['title']}: {target['expr']}")
    unexpected = unexpectedly_empty(empty)
    assert not unexpected, "dashboard queries without data:\n" + "\n".join(unexpected)


PROGRESS = {
    "learner updates": "sum(actorq_learner_updates_total)",
    "policy version": "max(actorq_learner_policy_version)",
    "env steps": "sum(actorq_actor_env_steps_total)",
}


def test_training_progresses_and_int8_saves_bytes(stack: ComposeStack) -> None:
    first = {name: stack.value(expr) or 0 for name, expr in PROGRESS.items()}
    for name, expr in PROGRESS.items():
        wait_for(lambda e=expr, n=name: (stack.value(e) or 0) > first[n], 90,
                 f"{name} to rise above {first[name]:.0f}")  # fmt: skip
    saved = stack.value("sum(actorq_quantizer_broadcast_bytes_saved_total)")
    assert saved is not None and saved > 0


def test_killed_actor_is_restarted_and_acts_on_a_current_policy(stack: ComposeStack) -> None:
    victim = stack.container_ids("actor")[0]
    old_instance = actor_instance(stack.logs(victim))
    restarts = stack.inspect(victim)["RestartCount"]
    version_at_kill = stack.value("max(actorq_quantizer_policy_version)") or 0
    stack.crash(victim)
    wait_for(lambda: stack.inspect(victim)["RestartCount"] > restarts, 60,
             "compose's restart policy to restart the killed actor")  # fmt: skip
    new_instance = wait_for(lambda: (i := actor_instance(stack.logs(victim))) != old_instance
                            and i, 180, "the restarted actor to claim an index")  # fmt: skip
    wait_for(lambda: stack.health(victim) == "healthy", 180, "the restarted actor healthy")
    version = f'actorq_actor_policy_version{{instance="{new_instance}"}}'
    wait_for(lambda: (stack.value(version) or 0) >= version_at_kill, 120,
             f"{new_instance} acting on version >= {version_at_kill:.0f}")  # fmt: skip
    steps = f'actorq_actor_env_steps_total{{instance="{new_instance}"}}'
    wait_for(lambda: (stack.value(steps) or 0) > 0, 60, f"{new_instance} stepping")


RESUMED = re.compile(r"resumed from \S+ at update (\d+), version (\d+)")
REBUILT = re.compile(r"replay mirror rebuilt from Redis: (\d+)")
ACKED = re.compile(r"(\d+) transitions acknowledged by Redis")


def test_killed_learner_resumes_from_its_checkpoint(stack: ComposeStack) -> None:
    (learner,) = stack.container_ids("learner")
    wait_for(lambda: (stack.value("sum(actorq_learner_checkpoints_total)") or 0) >= 1, 180,
             "a learner checkpoint on the volume")  # fmt: skip
    restarts = stack.inspect(learner)["RestartCount"]
    version_at_kill = stack.value("max(actorq_quantizer_policy_version)") or 0
    stack.crash(learner)
    wait_for(lambda: stack.inspect(learner)["RestartCount"] > restarts, 60,
             "compose's restart policy to restart the learner")  # fmt: skip
    second_life = wait_for(lambda: _after_last(RESUMED, stack.logs(learner)), 180,
                           "the learner to resume")  # fmt: skip
    update, version = map(int, RESUMED.search(second_life).groups())
    assert update >= 100 and version >= 1, second_life[:300]
    # The first life logged "rebuilt ... 0" too: read the count logged after resuming.
    rebuilt = wait_for(lambda: REBUILT.findall(_after_last(RESUMED, stack.logs(learner))), 120,
                       "the replay rebuild after resuming")  # fmt: skip
    assert int(rebuilt[0]) > 0
    wait_for(lambda: stack.health(learner) == "healthy", 180, "the restarted learner healthy")
    wait_for(lambda: (stack.value("max(actorq_quantizer_policy_version)") or 0)
             > max(version_at_kill, version), 180, "new versions after the restart")  # fmt: skip


def _after_last(pattern: re.Pattern[str], text: str) -> str:
    """`text` from the last match of `pattern` on ("" when it never matches)."""
    starts = [m.start() for m in pattern.finditer(text)]
    return text[starts[-1] :] if starts else ""


def test_compose_stop_exits_cleanly_and_loses_nothing(stack: ComposeStack) -> None:
    containers = stack.container_ids()
    stack.compose("stop", "--timeout", "90")
    states = {stack.inspect(c)["Name"].lstrip("/"): stack.inspect(c)["State"] for c in containers}
    unclean = {n: (s["Status"], s["ExitCode"]) for n, s in states.items()
               if s["Status"] != "exited" or s["ExitCode"] != 0}  # fmt: skip
    assert not unclean, unclean
    learner_log = stack.service_logs("learner")
    final = re.findall(r"stopped after \d+ updates, version \d+; (\d+) transitions ingested",
                       learner_log)  # fmt: skip
    assert final, learner_log[-3000:]
    actors = stack.container_ids("actor", all_states=True)
    acks = [int(n) for c in actors for n in ACKED.findall(stack.logs(c))]
    assert len(acks) >= ACTORS  # each actor's last life logged its final count
    # Redis' own count, from its append-only file after the restart of the Redis container.
    stack.compose("start", "redis")
    wait_for(lambda: stack.health(stack.container_ids("redis")[0]) == "healthy", 60, "redis")
    acknowledged = int(stack.redis_get("actorq:replay:inserted"))
    ingested = int(final[-1])
    assert acknowledged > 0
    cap = ActorSettings().replay_stream_max_transitions
    if acknowledged <= cap:  # the stream still holds every transition: the learner read all
        assert ingested == acknowledged
    else:
        # The stream keeps about `cap` transitions (XADD MAXLEN ~), so the learner restarted
        # above rebuilt from those alone: with 32 actors on 2 cores the run passes the cap
        # (1.77M acknowledged, 1.01M rebuilt + 16.5k ingested, 2026-12-03). Nothing it could
        # read is missing: at least the capped stream, at most what was acknowledged.
        assert 0.99 * cap <= ingested <= acknowledged
    assert sum(acks) <= acknowledged
