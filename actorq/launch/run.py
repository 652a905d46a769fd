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
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

import redis

from actorq.algos.factory import (
    config_prefix,
    is_continuous,
    is_on_policy,
    load_algorithm_config,
    policy_spec,
)
from actorq.config import RunSettings, redact_url
from actorq.energy import EnergyMeter, PowerModel
from actorq.launch.final import FinalRecords, read_final_records, redis_cpu_seconds
from actorq.launch.monitor import ProgressSample, RunMonitor
from actorq.launch.outputs import (
    Summary,
    append_metrics,
    sparse_summary,
    write_episodes,
    write_json,
    write_plots,
    write_summary,
)
from actorq.launch.processes import ServiceProcess, stop_in_order
from actorq.launch.progress import ProgressView
from actorq.launch.supervisor import Supervisor
from actorq.launch.zygote import Zygote
from actorq.models import MLPSpec
from actorq.redis_keys import RedisKeys
from actorq.redis_server import EmbeddedRedis, check_redis, find_free_port
from actorq.service import read_password_file

log = logging.getLogger("actorq.run")

EXIT_OK, EXIT_SERVICE_FAILED, EXIT_INTERRUPTED = 0, 1, 130
ACTOR_NICENESS = 5


def default_run_dir(settings: RunSettings) -> Path:
    stamp = time.strftime("%Y%m%d-%H%M%S")
    env = re.sub(r"[^A-Za-z0-9_.-]+", "_", settings.env)
    return Path("runs") / f"{env}-{settings.precision}-{stamp}"


@dataclass
class _Cluster:
    quantizer: ServiceProcess
    learners: list[ServiceProcess]  # rank 0 first; it publishes and checkpoints
    actors: list[ServiceProcess]
    evaluator: ServiceProcess

    @property
    def learner(self) -> ServiceProcess:
        return self.learners[0]

    @property
    def all(self) -> list[ServiceProcess]:
        return [self.quantizer, *self.learners, *self.actors, self.evaluator]


class PortPicker:
    """Distinct free ports for the services of this process's runs.

    `find_free_port` alone can hand out a port it handed out before (the kernel reuses a
    released ephemeral port), and since services bind only when they start, two of them
    then collide (seen: an actor's and the evaluator's metrics port).
    """

    def __init__(self, find: Callable[[], int] = find_free_port) -> None:
        self._find = find
        self._given: set[int] = set()

    def take(self) -> int:
        for _ in range(100):
            port = self._find()
            if port not in self._given:
                self._given.add(port)
                return port
        raise RuntimeError("no free port that this process has not handed out already")


_PORTS = PortPicker()


def _common_env(redis_url: str, prefix: str, port: int, run_dir: Path) -> dict[str, str]:
    return {
        "ACTORQ_RUN_DIR": str(run_dir),  # not a setting: lets operators find a run's processes
        "ACTORQ_REDIS_URL": redis_url,
        "ACTORQ_REDIS_PREFIX": prefix,
        "ACTORQ_BIND_HOST": "127.0.0.1",
        "ACTORQ_GRPC_PORT": str(port),
        "ACTORQ_METRICS_PORT": str(_PORTS.take()),
        "PYTHONUNBUFFERED": "1",
    }


def _plan(settings: RunSettings, run_dir: Path, redis_url: str, prefix: str) -> _Cluster:
    logs = run_dir / "logs"
    q_port = _PORTS.take()
    quantizer = ServiceProcess(
        "quantizer",
        "services.quantizer",
        {**_common_env(redis_url, prefix, q_port, run_dir), **_guard_env(settings)},
        logs / "quantizer.log",
        q_port,
    )
    qaddr = quantizer.address
    dist_addr = f"127.0.0.1:{_PORTS.take()}"
    learners = [
        _learner(settings, run_dir, redis_url, prefix, qaddr, rank, dist_addr)
        for rank in range(settings.learners)
    ]
    per_actor_budget = -(-settings.max_env_steps // settings.actors)  # ceil: a safety net
    actors = [
        _actor(settings, run_dir, redis_url, prefix, qaddr, i, per_actor_budget)
        for i in range(settings.actors)
    ]
    evaluator = _actor(settings, run_dir, redis_url, prefix, qaddr, 0, 0, evaluator=True)
    return _Cluster(quantizer, learners, actors, evaluator)


def plan_services(settings: RunSettings, run_dir: Path, redis_url: str, prefix: str) -> _Cluster:
    """The services `actorq run` would start, not started: their module and ACTORQ_* env.
    bench/bench_links.py starts the same ones in other network namespaces."""
    return _plan(settings, run_dir, redis_url, prefix)


def _learner(
    settings: RunSettings,
    run_dir: Path,
    redis_url: str,
    prefix: str,
    qaddr: str,
    rank: int,
    dist_addr: str,
) -> ServiceProcess:
    port = _PORTS.take()
    name = "learner" if rank == 0 else f"learner-{rank}"
    env = {
        **_common_env(redis_url, prefix, port, run_dir),
        "ACTORQ_ENV_ID": settings.env,
        "ACTORQ_HIDDEN": ",".join(map(str, settings.hidden)),
        "ACTORQ_PRECISION": settings.precision,
        "ACTORQ_SEED": str(settings.seed),
        "ACTORQ_QUANTIZER_ADDR": qaddr,
        "ACTORQ_SAMPLES_PER_INSERT": str(settings.samples_per_insert),
        "ACTORQ_REPLAY": settings.replay,
        "ACTORQ_WORLD_SIZE": str(settings.learners),
        "ACTORQ_RANK": str(rank),
        "ACTORQ_DIST_ADDR": dist_addr,
        "ACTORQ_ALGO": settings.algo,
        "ACTORQ_SETTLE_AT": "none" if settings.settle_at is None else repr(settings.settle_at),
        **_qat_env(settings),
        **({"ACTORQ_PUBLISH_EVERY": "1"} if is_on_policy(settings.algo) else {}),
        **_sparse_env(settings),
    }
    if rank == 0:
        env["ACTORQ_CHECKPOINT_DIR"] = str(run_dir / "checkpoints")
    return ServiceProcess(name, "services.learner", env, run_dir / "logs" / f"{name}.log", port)


def _actor(
    settings: RunSettings,
    run_dir: Path,
    redis_url: str,
    prefix: str,
    qaddr: str,
    index: int,
    budget: int,
    evaluator: bool = False,
) -> ServiceProcess:
    port = _PORTS.take()
    name = "evaluator" if evaluator else f"actor-{index}"
    env = {
        **_common_env(redis_url, prefix, port, run_dir),
        "ACTORQ_ENV_ID": settings.env,
        "ACTORQ_ACTOR_INDEX": str(index),
        "ACTORQ_NUM_ACTORS": str(settings.actors),
        "ACTORQ_EVALUATOR": "true" if evaluator else "false",
        "ACTORQ_ENVS_PER_ACTOR": str(settings.eval_envs if evaluator else settings.envs_per_actor),
        "ACTORQ_SEED": str(settings.seed),
        "ACTORQ_QUANTIZER_ADDR": qaddr,
        "ACTORQ_MAX_ENV_STEPS": str(budget),
        "ACTORQ_SAMPLES_PER_INSERT": str(settings.samples_per_insert),
        **_actor_replay_env(settings),
        **({} if evaluator else {**_onpolicy_actor_env(settings), **_obs_codec_env(settings)}),
    }
    # On one machine the learner is the critical path: actors and the evaluator get a lower
    # priority so that they use spare CPU rather than share the learner's core.
    return ServiceProcess(
        name, "services.actor", env, run_dir / "logs" / f"{name}.log", port, niceness=ACTOR_NICENESS
    )


def _qat_env(settings: RunSettings) -> dict[str, str]:
    if not settings.qat_bits:
        return {}
    return {f"{config_prefix(settings.algo)}QAT_BITS": str(settings.qat_bits)}


def _onpolicy_actor_env(settings: RunSettings) -> dict[str, str]:
    """On-policy actors stream T-step segments; the queue they may run ahead of the
    learner is one update's worth of segments, so data is at most about one version old."""
    if not is_on_policy(settings.algo):
        return {}
    config = load_algorithm_config(settings.algo)
    return {
        "ACTORQ_UNROLL_LENGTH": str(settings.unroll),
        "ACTORQ_ONPOLICY_QUEUE_SEGMENTS": str(config.segments_per_update),
    }


def _obs_codec_env(settings: RunSettings) -> dict[str, str]:
    """uint8 frames compress well: actors send them zstd-compressed, in trajectory
    segments and in pixel replay batches (format "3") alike."""
    from actorq.pixel_envs import is_pixel_id

    return {"ACTORQ_OBS_CODEC": "zstd" if is_pixel_id(settings.env) else "none"}


def _sparse_env(settings: RunSettings) -> dict[str, str]:
    """RLx2's recipe scaled to the run's budget (actorq.sparse.config.recipe_environ);
    ACTORQ_* variables already set in this process's environment win."""
    if not (settings.sparsity_actor or settings.sparsity_critic):
        return {}
    from actorq.sparse.config import recipe_environ

    config = load_algorithm_config(settings.algo)
    updates = settings.max_env_steps * settings.samples_per_insert / config.batch_size
    env = recipe_environ(
        settings.sparsity_actor, settings.sparsity_critic, settings.algo, int(updates)
    )
    return {k: v for k, v in env.items() if k not in os.environ or k.startswith("ACTORQ_SPARSITY")}


def _note_narrow_sparse(settings: RunSettings) -> None:
    from actorq.sparse.config import narrow_network_note

    note = narrow_network_note(settings.sparsity_actor, settings.sparsity_critic, settings.hidden)
    if note:
        print(note, file=sys.stderr)


def _guard_env(settings: RunSettings) -> dict[str, str]:
    """The guard's regret of a Q-network scales with 1 / (1 - gamma): give it DQN's."""
    if settings.algo != "dqn" or "ACTORQ_GUARD_GAMMA" in os.environ:
        return {}
    return {"ACTORQ_GUARD_GAMMA": str(load_algorithm_config("dqn").gamma)}


def _actor_replay_env(settings: RunSettings) -> dict[str, str]:
    """What actors put into replay beyond one-step transitions: n-step transitions when the
    algorithm's config asks (D4PG; DQN with ACTORQ_DQN_N_STEP > 1), and for continuous
    actors a uniform warm-up that fills the learner's `learning_starts`."""
    if settings.algo == "dqn":
        config = load_algorithm_config("dqn")
        if config.n_step == 1:
            return {}
        return {
            "ACTORQ_N_STEP": str(config.n_step),
            "ACTORQ_GAMMA": str(config.gamma),
            "ACTORQ_NSTEP_CUT": "true" if config.is_correction else "false",
        }
    if not is_continuous(settings.algo):
        return {}
    config = load_algorithm_config(settings.algo)
    warm_up = -(-config.learning_starts // settings.actors)
    return {
        "ACTORQ_RANDOM_STEPS": str(warm_up),
        # Short continuous-control budgets: actors may run only a little past the learner's
        # warm-up, or most transitions would come from the first, untrained policy.
        "ACTORQ_INSERT_ERROR_BUFFER": str(config.learning_starts + 1000),
        "ACTORQ_N_STEP": str(getattr(config, "n_step", 1)),
        "ACTORQ_GAMMA": str(config.gamma),
    }


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
    meter = EnergyMeter(PowerModel.from_env())  # bad ACTORQ_WATTS_PER_CORE etc.: exit 2
    _note_narrow_sparse(settings)
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
            embedded = EmbeddedRedis(data_dir=run_dir / "redis", appendonly=True)
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
) -> int:
    cluster = _plan(settings, run_dir, redis_url, prefix)
    for proc in cluster.all:
        proc.zygote = zygote
    write_json(
        run_dir / "config.json", _resolved_config(settings, run_dir, prefix, redis_url, cluster)
    )
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
        code = _watch(settings, cluster, supervisor, monitor, view, run_dir, stop)
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
    records = read_final_records(client, RedisKeys(prefix), run_dir / "checkpoints")
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
) -> int:
    metrics_path = run_dir / "metrics.jsonl"
    pids: dict[str, int | None] = {}
    while not stop.reason:
        time.sleep(0.5)
        sample = monitor.poll()
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


def _solved(settings: RunSettings, monitor: RunMonitor) -> bool:
    recent = monitor.eval_recent
    return (
        settings.target_return is not None
        and len(recent) == recent.maxlen
        and sum(recent) / len(recent) >= settings.target_return
    )


def _stop_reason(settings: RunSettings, monitor: RunMonitor, sample: ProgressSample) -> str:
    if _solved(settings, monitor):
        return f"target return {settings.target_return:g} reached"
    if sample.env_steps >= settings.max_env_steps:
        return f"env-step budget {settings.max_env_steps} spent"
    if settings.max_seconds and sample.wall_seconds >= settings.max_seconds:
        return f"time budget {settings.max_seconds:g}s spent"
    return ""


def _write_outputs(
    settings: RunSettings,
    spec: MLPSpec,
    run_dir: Path,
    monitor: RunMonitor,
    reason: str,
    view: ProgressView,
    cpu: dict[str, float | None],
    restarts: dict[str, int],
    records: FinalRecords,
    energy: dict,
) -> None:
    last = monitor.samples[-1] if monitor.samples else None  # as of the stop decision
    checkpoint = run_dir / "checkpoints" / "checkpoint.pt"
    summary = Summary(
        env=settings.env,
        algo=settings.algo,
        precision=settings.precision,
        actors=settings.actors,
        learners=settings.learners,
        replay=settings.replay,
        envs_per_actor=settings.envs_per_actor,
        env_steps=last.env_steps if last else 0,
        learner_updates=_final(records.learner_updates, last.learner_updates if last else 0),
        wall_seconds=last.wall_seconds if last else 0.0,
        final_mean_return=last.eval_mean_return if last else None,
        train_mean_return=last.train_mean_return if last else None,
        target_return=settings.target_return,
        solved=_solved(settings, monitor),
        stop_reason=reason,
        policy_versions=_final(records.policy_version, last.policy_version if last else 0),
        blob_bytes=last.blob_bytes if last else 0,
        fp32_equivalent_bytes=spec.fp32_bytes(),
        dense_fp32_bytes=last.dense_fp32_bytes if last else 0,
        delta_bytes_median=last.delta_bytes_median if last else 0.0,
        delta_bytes_p10=last.delta_bytes_p10 if last else 0.0,
        delta_bytes_p90=last.delta_bytes_p90 if last else 0.0,
        broadcast_bytes_total=last.broadcast_bytes_total if last else 0,
        bytes_saved_total=last.bytes_saved_total if last else 0,
        eval_episodes=last.eval_episodes if last else 0,
        train_episodes=last.train_episodes if last else 0,
        policy_rejections=last.policy_rejections if last else 0,
        learner_wait_fraction=last.learner_wait_fraction if last else 0.0,
        learner_sample_fraction=last.learner_sample_fraction if last else 0.0,
        seed=settings.seed,
        hidden=list(settings.hidden),
        checkpoint=str(checkpoint) if checkpoint.exists() else None,
        cpu_seconds={k: round(v, 2) for k, v in cpu.items() if v is not None},
        restarts=restarts,
        transitions_inserted=records.transitions_inserted,
        final_records=records.as_dict(),
        actor_breakdown=last.actor_breakdown if last else {},
        publish_breakdown=last.publish_breakdown if last else {},
        energy=energy,
        guard=last.guard if last else {},
        behaviour={k: v for k, v in last.extra.items() if k.startswith("behaviour_")}
        if last
        else {},
        **sparse_summary(run_dir, monitor),
    )
    write_summary(run_dir, summary)
    write_episodes(run_dir, monitor)
    write_plots(
        run_dir,
        monitor,
        f"{settings.env} {settings.algo.upper()}, {settings.precision} actors",
        settings.target_return,
    )
    view.final(summary, run_dir)


def _final(value: int | None, fallback: int) -> int:
    return fallback if value is None else value
