"""The services of one `actorq run`: their ports and ACTORQ_* environments.

Each service gets the variables it would get under compose or Kubernetes; what an
algorithm needs beyond the common ones (QAT bits, n-step replay, sparse recipe, obs codec)
is derived here from the run's settings.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from actorq.algos.factory import (
    config_prefix,
    is_continuous,
    is_on_policy,
    load_algorithm_config,
)
from actorq.config import RunSettings
from actorq.launch.processes import ServiceProcess
from actorq.redis_server import find_free_port

ACTOR_NICENESS = 5


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
        **({"ACTORQ_INGEST": settings.ingest} if settings.ingest else {}),
        "ACTORQ_WORLD_SIZE": str(settings.learners),
        "ACTORQ_RANK": str(rank),
        "ACTORQ_DIST_ADDR": dist_addr,
        "ACTORQ_ALGO": settings.algo,
        "ACTORQ_DEVICE": settings.learner_device,
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
        "ACTORQ_ENV_BACKEND": settings.env_backend,
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
    from actorq.envs.pixel import is_pixel_id

    return {"ACTORQ_OBS_CODEC": "zstd" if is_pixel_id(settings.env) else "none"}


def _sparse_env(settings: RunSettings) -> dict[str, str]:
    """RLx2's recipe scaled to the run's budget (actorq.sparse.config.recipe_environ);
    ACTORQ_* variables already set in this process's environment win."""
    if not (settings.sparsity_actor or settings.sparsity_critic):
        return {}
    from actorq.sparse.config import recipe_environ

    config = load_algorithm_config(settings.algo)
    # A run without an env-step limit scales the recipe to the default budget.
    steps = settings.max_env_steps or RunSettings.max_env_steps
    updates = steps * settings.samples_per_insert / config.batch_size
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
