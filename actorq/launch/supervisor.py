"""Restart services that die, the way compose's `restart: on-failure` and Kubernetes do.

`actorq run` calls `Supervisor.check()` twice a second. A service that exited is restarted
after a backoff that doubles with each restart of that service (1 s, 2 s, 4 s, ... capped
at 30 s), and the restart is logged and counted (summary.json `restarts`). What is not
restarted:

* an actor that exited 0: it spent its env-step budget;
* a service that exited with code 2: a user error (bad setting) that a restart repeats;
* a service restarted `max_restarts` times already: the run fails, naming it.

Data-parallel learners are one unit: when one rank dies the others would wait in a
collective, so every rank is stopped and the group restarts together (rank 0 resumes
from its checkpoint and broadcasts it). The embedded Redis is supervised too: it
restarts on the same port and replays its append-only file.
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from actorq.launch.processes import ServiceProcess, stop_in_order
from actorq.redis_server import EmbeddedRedis, RedisUnavailable

log = logging.getLogger(__name__)

EXIT_USER_ERROR = 2


@dataclass(frozen=True)
class RestartPolicy:
    initial_backoff: float = 1.0
    max_backoff: float = 30.0
    max_restarts: int = 10  # per service (or learner group) per run

    def backoff(self, restarts_so_far: int) -> float:
        return min(self.max_backoff, self.initial_backoff * 2.0**restarts_so_far)


@dataclass
class Supervisor:
    """Watches `units`: each a list of processes that live and restart together."""

    units: dict[str, list[ServiceProcess]]
    finished_ok: Callable[[ServiceProcess, int], bool]  # an exit that needs no restart
    policy: RestartPolicy = field(default_factory=RestartPolicy)
    redis: EmbeddedRedis | None = None
    on_event: Callable[[str], None] = log.warning
    restarts: Counter[str] = field(default_factory=Counter)
    _due: dict[str, float] = field(default_factory=dict)  # unit -> when to restart it
    _done: set[str] = field(default_factory=set)

    def check(self) -> str | None:
        """Restart what is due; return a reason when the run cannot go on, else None."""
        now = time.monotonic()
        failure = self._check_redis()
        if failure is not None:
            return failure
        for name, procs in self.units.items():
            if name in self._done or name in self._due:
                continue
            failure = self._check_unit(name, procs, now)
            if failure is not None:
                return failure
        for name in [n for n, due in self._due.items() if due <= now]:
            self._restart(name)
        return None

    def _check_unit(self, name: str, procs: Sequence[ServiceProcess], now: float) -> str | None:
        dead = [(p, p.exit_code()) for p in procs if p.exit_code() is not None]
        if not dead:
            return None
        proc, code = dead[0]
        assert code is not None
        if len(procs) == 1 and self.finished_ok(proc, code):
            self._done.add(name)
            return None
        where = f"see {proc.log_path}:\n{proc.tail()}"
        if code == EXIT_USER_ERROR:
            return f"{proc.name} exited with code {code} (a configuration error); {where}"
        if self.restarts[name] >= self.policy.max_restarts:
            return (
                f"{proc.name} exited with code {code} after {self.restarts[name]} restarts; {where}"
            )
        delay = self.policy.backoff(self.restarts[name])
        self.on_event(f"{proc.name} exited with code {code}; restarting in {delay:.0f}s")
        if len(procs) > 1:  # a learner group: the survivors would wait in a collective
            stop_in_order([[p for p in procs if p.exit_code() is None]], timeout=5.0)
        self._due[name] = now + delay
        return None

    def _restart(self, name: str) -> None:
        del self._due[name]
        self.restarts[name] += 1
        for proc in self.units[name]:
            proc.start()
        self.on_event(f"restarted {name} (restart {self.restarts[name]})")

    def _check_redis(self) -> str | None:
        if self.redis is None or self.redis.is_running():
            return None
        if self.restarts["redis"] >= self.policy.max_restarts:
            return f"embedded Redis exited after {self.restarts['redis']} restarts"
        self.on_event("embedded Redis exited; restarting it on the same port")
        try:
            self.redis.restart()
        except RedisUnavailable as exc:
            return f"embedded Redis could not be restarted: {exc}"
        self.restarts["redis"] += 1
        self.on_event(f"restarted redis (restart {self.restarts['redis']})")
        return None

    def finished(self, names: Sequence[str]) -> bool:
        """Whether every unit in `names` exited as finished (e.g. actors past their budget)."""
        return all(name in self._done for name in names)

    def restarts_of(self, process_name: str) -> int:
        """Restarts of the unit a process belongs to (a learner rank counts its group's)."""
        for unit, procs in self.units.items():
            if any(p.name == process_name for p in procs):
                return self.restarts[unit]
        return self.restarts[process_name]  # e.g. "redis", supervised outside the units
