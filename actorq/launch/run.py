"""`actorq run`: Redis (embedded unless given), quantizer, learner, N actors, evaluator.

The launcher only starts processes, watches them and writes the run folder; every
service runs the same entry point it runs under compose or Kubernetes, configured by
ACTORQ_* variables.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import re
import resource
import signal
import sys
import time
import uuid
from collections.abc import Mapping
from pathlib import Path

import redis

from actorq.algos.factory import load_algorithm_config, policy_spec
from actorq.config import ConfigError, RunSettings, redact_url
from actorq.energy import EnergyMeter, PowerModel
from actorq.envs import check_backend
from actorq.launch.budget import what_ends
from actorq.launch.cores import (
    CoreLayout,
    CoreSharing,
    child_pids,
    learner_on_cpu,
    pin,
    plan_cores,
)
from actorq.launch.final import read_final_records, redis_cpu_seconds
from actorq.launch.monitor import ProgressSample, RunMonitor
from actorq.launch.outputs import append_metrics, write_json
from actorq.launch.plan import _Cluster, _note_narrow_sparse, _plan, _qat_env
from actorq.launch.processes import ServiceProcess, stop_in_order
from actorq.launch.progress import ProgressView
from actorq.launch.summary import _solved, _write_outputs
from actorq.launch.supervisor import Supervisor
from actorq.launch.zygote import Zygote
from actorq.learner.update_path import read_learner_info
from actorq.models import MLPSpec
from actorq.redis_keys import RedisKeys
from actorq.redis_server import EmbeddedRedis, check_redis
from actorq.service import read_password_file

log = logging.getLogger("actorq.run")

EXIT_OK, EXIT_SERVICE_FAILED, EXIT_INTERRUPTED = 0, 1, 130


def default_run_dir(settings: RunSettings) -> Path:
    stamp = time.strftime("%Y%m%d-%H%M%S")
    env = re.sub(r"[^A-Za-z0-9_.-]+", "_", settings.env)
    return Path("runs") / f"{env}-{settings.precision}-{stamp}"


class _StopFlag:
    """Set by SIGINT/SIGTERM; the main loop then shuts everything down in order."""

    def __init__(self) -> None:
        self.reason = ""
        self._previous = {
            s: signal.signal(s, self._handle) for s in (signal.SIGINT, signal.SIGTERM)
        }

    def _handle(self, signum: int, _frame: object) -> None:
        self.reason = self.reason or f"interrupted ({signal.Signals(signum).name})"

    def restore(self) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)


def _check_learner_device(settings: RunSettings) -> None:
    """--learner-device cuda without a usable GPU, or --learners above the GPUs (NCCL
    takes one per rank) or the cores (each rank keeps one busy) there: exit 2 before
    anything starts (the learner would refuse a missing GPU too, but only after Redis and
    the services were up). `auto` is left to the learner, which decides where it runs;
    several learners stay on the CPU under `auto`."""
    if settings.learner_device.startswith("cuda"):
        from actorq.learner.device import CudaInfo, check_available

        cuda = CudaInfo.probe()
        check_available(settings.learner_device, cuda)
        if settings.learners > cuda.count:
            raise ConfigError(
                f"--learners {settings.learners} on --learner-device "
                f"{settings.learner_device}: this machine has {cuda.count} GPU(s), one per "
                f"learner; expected --learners <= {cuda.count}"
            )
        return
    cores = len(os.sched_getaffinity(0))
    if settings.learners > cores:
        raise ConfigError(
            f"--learners {settings.learners}: this machine gives the run {cores} CPU "
            f"core(s) and each learner keeps one busy; expected --learners <= {cores}"
        )


def run(settings: RunSettings, zygote: Zygote | None = None) -> int:
    """Run training to the target or budget; returns the process exit code.

    `zygote`: services are forked from it (already importing in the background, see
    actorq.launch.zygote); None starts them as separate interpreters.
    """
    started = time.perf_counter()  # wall_seconds counts from here, start-up included
    # Unknown env or wrong action kind for the algorithm: clear error before anything starts.
    # bad ACTORQ_<ALGO>_* values: same; the config is the one the learner will load
    config = load_algorithm_config(settings.algo, {**os.environ, **_qat_env(settings)})
    spec = policy_spec(settings.env, settings.algo, settings.hidden, config)
    check_backend(settings.env, settings.env_backend)  # envpool missing or not covering it
    meter = EnergyMeter(PowerModel.from_env())  # bad ACTORQ_WATTS_PER_CORE etc.: exit 2
    _check_learner_device(settings)
    _note_narrow_sparse(settings)
    layout = plan_cores(settings, learner_on_cpu(settings))
    print(f"actorq run: {what_ends(settings)}", flush=True)
    if layout is not None:
        print(f"actorq run: {layout.describe()} (--pin-learner {settings.pin_learner})", flush=True)
    password = None  # the embedded Redis has none; an external one may (a mounted file)
    if settings.redis_url:
        password = read_password_file(os.environ.get("ACTORQ_REDIS_PASSWORD_FILE", ""))
        check_redis(settings.redis_url, timeout=3.0, password=password)
    run_dir = Path(settings.run_dir) if settings.run_dir else default_run_dir(settings)
    run_dir.mkdir(parents=True, exist_ok=True)
    prefix = f"actorq:{run_dir.name}:{uuid.uuid4().hex[:6]}"
    stop = _StopFlag()
    embedded = None
    try:
        if settings.redis_url:
            redis_url = settings.redis_url
        else:
            embedded = EmbeddedRedis(
                data_dir=run_dir / "redis",
                appendonly=True,
                cpus=layout.others if layout is not None else (),
            )
            embedded.start()
            redis_url = embedded.url
        return _run_cluster(
            settings,
            spec,
            run_dir,
            redis_url,
            password,
            prefix,
            stop,
            started,
            embedded,
            meter,
            zygote,
            layout,
        )
    finally:
        if embedded is not None:
            embedded.stop()
        stop.restore()


def _resolved_config(
    settings: RunSettings, run_dir: Path, prefix: str, redis_url: str, cluster: _Cluster
) -> dict:
    """Everything needed to understand or repeat the run, including where each service is."""
    config = dataclasses.asdict(settings)
    config.update(
        run_dir=str(run_dir),
        redis_url=redact_url(redis_url),
        redis_prefix=prefix,
        python=sys.version.split()[0],
        ends=what_ends(settings),
    )
    config["inherited_env"] = _public_env(os.environ)
    config["services"] = {
        p.name: {
            "grpc": p.address,
            "metrics": f"http://127.0.0.1:{p.env['ACTORQ_METRICS_PORT']}/metrics",
            "env": _public_env(p.env),
        }
        for p in cluster.all
    }
    return config


def _public_env(env: Mapping[str, str]) -> dict[str, str]:
    """ACTORQ_* variables with passwords in URLs masked: config.json is not a secret."""
    return {k: redact_url(v) for k, v in env.items() if k.startswith("ACTORQ_")}


def _run_cluster(
    settings: RunSettings,
    spec: MLPSpec,
    run_dir: Path,
    redis_url: str,
    password: str | None,
    prefix: str,
    stop: _StopFlag,
    started: float,
    embedded: EmbeddedRedis | None,
    meter: EnergyMeter,
    zygote: Zygote | None,
    layout: CoreLayout | None,
) -> int:
    cluster = _plan(settings, run_dir, redis_url, prefix)
    pin(cluster, layout)
    for proc in cluster.all:
        proc.zygote = zygote
    config = _resolved_config(settings, run_dir, prefix, redis_url, cluster)
    config["cpu_layout"] = layout.as_dict() if layout is not None else None
    write_json(run_dir / "config.json", config)
    view = ProgressView(settings, run_dir)
    supervisor = _supervisor(cluster, embedded, view)
    monitor: RunMonitor | None = None
    client: redis.Redis | None = None
    code = EXIT_OK
    try:
        _start(cluster, view)
        client = redis.Redis.from_url(redis_url, password=password)
        monitor = RunMonitor(
            client,
            RedisKeys(prefix),
            cluster.learner,
            cluster.quantizer,
            cluster.actors,
            cluster.evaluator,
            started=started,
        )
        sharing = _core_sharing(settings, cluster, supervisor, layout)
        code = _watch(settings, cluster, supervisor, monitor, view, run_dir, stop, sharing)
    except RuntimeError as exc:  # a service failed to start
        stop.reason = stop.reason or str(exc)
        code = EXIT_SERVICE_FAILED
    finally:
        if monitor is not None and code == EXIT_OK:
            # One last poll as close to the stop as possible: env steps and the breakdown
            # come from the services' status (versions and updates from `records` below).
            append_metrics(run_dir / "metrics.jsonl", monitor.poll())
        running_cpu = {proc.name: proc.cpu_seconds() for proc in cluster.all}
        view.message("stopping services ...")
        stop_in_order([[*cluster.actors, cluster.evaluator], cluster.learners, [cluster.quantizer]])
        view.close()
    # Everything below is read after the services stopped: the learner's final publish,
    # progress report and checkpoint, and each process's CPU time up to its exit.
    cpu = {p.name: _final_cpu(p, running_cpu[p.name]) for p in cluster.all}
    if embedded is not None:
        cpu["redis"] = redis_cpu_seconds(client)
    own = resource.getrusage(resource.RUSAGE_SELF)
    cpu["launcher"] = own.ru_utime + own.ru_stime  # monitor polls, progress view, outputs
    records = read_final_records(
        client, RedisKeys(prefix), run_dir / "checkpoints", settings.learners
    )
    learner_info = read_learner_info(client, RedisKeys(prefix))
    if monitor is not None:
        _write_outputs(
            settings,
            spec,
            run_dir,
            monitor,
            stop.reason,
            view,
            cpu,
            dict(supervisor.restarts),
            records,
            meter.report({k: v for k, v in cpu.items() if v is not None}),
            learner_info,
        )
        monitor.close()
    if client is not None:
        client.close()
    if stop.reason.startswith("interrupted"):
        code = EXIT_INTERRUPTED
    if code == EXIT_SERVICE_FAILED:
        print(f"error: {stop.reason}", file=sys.stderr)
    return code


def _final_cpu(proc: ServiceProcess, running: float | None) -> float | None:
    """CPU seconds up to exit when the process could be read before reaping, else the
    last reading while it ran."""
    return proc.final_cpu_seconds if proc.final_cpu_seconds is not None else running


def _start(cluster: _Cluster, view: ProgressView) -> None:
    """Start every service at once (each retries its peers), then wait for all to be healthy.

    Starting in parallel hides the per-process import time; the learner retries its first
    publication until the quantizer answers, and actors wait for that first version.
    """
    view.message(
        f"starting quantizer, {len(cluster.learners)} learner(s), {len(cluster.actors)} actors "
        "and the evaluator ..."
    )
    for proc in cluster.all:
        proc.start()
    for proc in cluster.all:
        proc.wait_healthy(180)


def _core_sharing(
    settings: RunSettings, cluster: _Cluster, supervisor: Supervisor, layout: CoreLayout | None
) -> CoreSharing | None:
    """--pin-learner auto: the others share the learner's cores while it waits for data."""
    if layout is None or settings.pin_learner != "auto":
        return None
    learners = {id(p) for p in cluster.learners}

    def others() -> list[int]:
        pids = [p.pid for p in cluster.all if id(p) not in learners and p.exit_code() is None]
        redis_pid = supervisor.redis.pid if supervisor.redis is not None else None
        # a learner's ingest process (ACTORQ_INGEST=process) moves with the other services
        ingest = [c for p in cluster.learners if p.pid is not None for c in child_pids(p.pid)]
        return [pid for pid in [*pids, redis_pid, *ingest] if pid is not None]

    return CoreSharing(layout, others)


def _supervisor(
    cluster: _Cluster, embedded: EmbeddedRedis | None, view: ProgressView
) -> Supervisor:
    units = {"quantizer": [cluster.quantizer], "learner": cluster.learners}
    units.update({p.name: [p] for p in [*cluster.actors, cluster.evaluator]})
    actors = {p.name for p in cluster.actors}

    def finished_ok(proc: ServiceProcess, code: int) -> bool:
        return proc.name in actors and code == 0  # the actor spent its env-step budget

    def on_event(message: str) -> None:
        log.warning("%s", message)
        view.message(message)

    return Supervisor(units, finished_ok, redis=embedded, on_event=on_event)


def _watch(
    settings: RunSettings,
    cluster: _Cluster,
    supervisor: Supervisor,
    monitor: RunMonitor,
    view: ProgressView,
    run_dir: Path,
    stop: _StopFlag,
    sharing: CoreSharing | None = None,
) -> int:
    metrics_path = run_dir / "metrics.jsonl"
    pids: dict[str, int | None] = {}
    while not stop.reason:
        time.sleep(0.5)
        sample = monitor.poll()
        if sharing is not None and monitor.learner.last is not None:
            change = sharing.observe(monitor.learner.counter("wait_seconds"))
            if change is not None:
                log.info("%s", change)
                view.message(change)
        sample.cpu_seconds = round(sum(p.cpu_seconds() or 0.0 for p in cluster.all), 3)
        append_metrics(metrics_path, sample)
        view.update(sample)
        failed = supervisor.check()
        if failed is not None:
            stop.reason = failed
            return EXIT_SERVICE_FAILED
        pids = _write_services(run_dir, cluster, supervisor, pids)
        stop.reason = stop.reason or _stop_reason(settings, monitor, sample)
        if not stop.reason and supervisor.finished([p.name for p in cluster.actors]):
            # Each actor's share of the budget is spent; their last status may predate it.
            stop.reason = f"env-step budget {settings.max_env_steps} spent"
    return EXIT_OK


def _write_services(
    run_dir: Path, cluster: _Cluster, supervisor: Supervisor, before: dict[str, int | None]
) -> dict[str, int | None]:
    """services.json: each service's pid and restarts, rewritten when a pid changes."""
    pids = {p.name: p.pid for p in cluster.all}
    if supervisor.redis is not None:
        pids["redis"] = supervisor.redis.pid
    if pids != before:
        services = {
            name: {"pid": pid, "restarts": supervisor.restarts_of(name)}
            for name, pid in pids.items()
        }
        write_json(run_dir / "services.json", services)
    return pids


def _stop_reason(settings: RunSettings, monitor: RunMonitor, sample: ProgressSample) -> str:
    if _solved(settings, monitor):
        return f"target return {settings.target_return:g} reached"
    if settings.max_env_steps and sample.env_steps >= settings.max_env_steps:
        return f"env-step budget {settings.max_env_steps} spent"
    if settings.max_seconds and sample.wall_seconds >= settings.max_seconds:
        return f"time budget {settings.max_seconds:g}s spent"
    return ""
