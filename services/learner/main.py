"""Learner process: settings -> DQN learner, replay mirror, publisher -> train.

Configured by ACTORQ_* environment variables (see actorq.config.LearnerSettings) and
ACTORQ_<ALGO>_* for the hyperparameters of the algorithm ACTORQ_ALGO names (e.g.
ACTORQ_DQN_* for actorq.algos.dqn.DQNConfig, ACTORQ_TD3_* for actorq.algos.td3.TD3Config).
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time

import torch

from actorq import metrics
from actorq.algos.factory import is_on_policy, load_algorithm_config, policy_spec
from actorq.allocator import retain_freed_memory
from actorq.config import ConfigError, LearnerSettings, load_settings
from actorq.denormals import describe as describe_denormals
from actorq.denormals import flush_denormals
from actorq.learner.device import DeviceChoice, resolve_settings_device
from actorq.learner.device_feed import attach_device_feed
from actorq.learner.distributed import DistConfig, init_group, leave_group
from actorq.learner.loop import Learner
from actorq.learner.publisher import learner_publisher
from actorq.learner.update_path import setup_learner
from actorq.redis_keys import RedisKeys
from actorq.rpc import GrpcServer
from actorq.rpc.control import StatusSnapshot, control_service
from actorq.security.tls import TlsConfig, allowed_peers
from actorq.service import (
    LOOP_CRASHED,
    ServiceRuntime,
    connect_redis,
    run_loop,
    run_main,
    setup_logging,
)
from actorq.sparse.config import SparseTrainingConfig

log = logging.getLogger("actorq.learner")


def dist_config(settings: LearnerSettings) -> DistConfig:
    return DistConfig(
        world_size=settings.world_size,
        rank=settings.rank,
        address=settings.dist_addr,
        backend=settings.dist_backend,
        timeout_s=settings.dist_timeout,
    )


def build_learner(
    settings: LearnerSettings,
    dqn,
    runtime: ServiceRuntime,
    rlx2: SparseTrainingConfig | None = None,
) -> Learner:
    spec = policy_spec(settings.env_id, settings.algo, settings.hidden, dqn)
    client = connect_redis(settings.redis_url, password_file=settings.redis_password_file)
    keys = RedisKeys(settings.redis_prefix)
    dist = dist_config(settings)
    publisher = None
    if dist.is_primary:  # one publisher for the whole learner group
        publisher = learner_publisher(settings, spec, client, keys)
    return Learner(settings, dqn, spec, client, keys, publisher, runtime.stop_event, dist, rlx2)


class _Rate:
    """Updates per second over the time between two status calls."""

    def __init__(self) -> None:
        self.last = (time.perf_counter(), 0)

    def __call__(self, count: int) -> float:
        now = time.perf_counter()
        then, before = self.last
        self.last = (now, count)
        return (count - before) / (now - then) if now > then else 0.0


def _status_fn(learner: Learner, runtime: ServiceRuntime):
    rate = _Rate()

    def status() -> StatusSnapshot:
        c = learner.counters
        publisher = learner.publisher
        return StatusSnapshot(
            role="learner",
            instance_id=f"learner-{learner.dist.rank}",
            policy_version=learner.version,
            state="stopping" if runtime.stopping else "running",
            counters={
                "updates": c.updates,
                "updates_per_second": rate(c.updates),
                "loss": c.last_loss,
                "replay_size": len(learner.storage),
                "replay_inserted": learner.storage.total_added,
                "replay_rejected": learner.reader.rejected,
                "wait_fraction": c.wait_fraction(),
                "wait_seconds": c.wait_seconds,  # `actorq run --pin-learner auto` reads it
                "sample_fraction": c.sample_fraction(),
                "update_fraction": c.update_fraction(),
                "update_ms": c.update_ms(),
                "checkpoints": c.checkpoints,
                "publish_failures": publisher.failures if publisher else 0,
                "blob_bytes": publisher.blob_bytes if publisher else 0,
                "rank": learner.dist.rank,
                "world_size": learner.dist.world_size,
                # Equal on every rank while the replicas agree (a parallel-learner check).
                "weights_checksum": _weights_checksum(learner),
                # Sparsity, FLOPs, n-step, replay capacity (actorq.learner.rlx2).
                **(learner.rlx2.status() if learner.rlx2 is not None else {}),
                # Behaviour vs learner gap, n-step importance weights (learner.behaviour).
                **learner.behaviour_status(),
                # Certification and the publish gate (actorq.learner.settle).
                **(learner.settling.status() if learner.settling is not None else {}),
            },
        )

    return status


def _weights_checksum(learner: Learner) -> float:
    """Equal on every data-parallel rank while the replicas agree."""
    return learner.algo.weights_checksum()


def serve(
    settings: LearnerSettings,
    dqn,
    rlx2: SparseTrainingConfig | None = None,
    choice: DeviceChoice | None = None,
) -> int:
    torch.set_num_threads(settings.torch_threads)
    retain_freed_memory()  # no page faults on each update's activation buffers
    runtime = ServiceRuntime("learner")
    learner = build_learner(settings, dqn, runtime, rlx2)
    info = setup_learner(
        learner.algo, settings.device, settings.update_path, choice,
        torch_threads=settings.torch_threads,
    )  # fmt: skip
    device_replay = attach_device_feed(learner, settings.device_replay_k)
    info = dataclasses.replace(info, device_replay=device_replay, denormals=describe_denormals())
    server = GrpcServer(
        settings.bind_host,
        settings.grpc_port,
        [
            control_service(
                _status_fn(learner, runtime),
                runtime.request_stop,
                allowed_peers(settings, "tls_allowed_stop_peers"),
            )
        ],
        max_workers=4,
        tls=TlsConfig.from_settings(settings),
    )
    metrics_port = metrics.serve_metrics(
        settings.bind_host, settings.metrics_port, service="learner", health=server.status
    )
    init_group(learner.dist, settings.device)
    learner.restore()
    # Answer (health, status) only once restored: before, a restarted learner reported
    # update 0 while it was still loading its checkpoint and rebuilding replay.
    server.start()
    primary = learner.dist.is_primary  # one record in Redis for the group
    info.announce(learner.client if primary else None, learner.keys)
    log.info(
        "learner up: %s on env %s, hidden %s, precision %s, %s, control port %d, metrics %s",
        settings.algo,
        settings.env_id,
        settings.hidden,
        settings.precision,
        info.line(),
        server.port,
        metrics_port,
    )
    learner.start()
    trainer = threading.Thread(
        target=run_loop, args=(learner.train, runtime, "max_updates reached"), name="train"
    )
    trainer.start()
    runtime.wait()
    trainer.join()
    learner.finish()
    leave_group()
    server.stop(grace=1.0)
    log.info(
        "learner %d stopped after %d updates, version %d; %d transitions ingested "
        "(this process, rebuild included), %d entries rejected",
        learner.dist.rank,
        learner.counters.updates,
        learner.version,
        learner.storage.total_added,
        learner.reader.rejected,
    )
    # A crashed training loop (e.g. a dead ingest process) is a failure: exit non-zero so
    # compose's restart: on-failure and Kubernetes restart the learner too.
    return 1 if runtime.stop_reason == LOOP_CRASHED else 0


def main() -> None:
    def _main() -> int:
        settings = load_settings(LearnerSettings)
        setup_logging(settings.log_level)
        # Before any thread starts (they inherit it) and before the start-up timings.
        flush_denormals(settings.flush_denormals)
        dqn = load_algorithm_config(settings.algo)
        if is_on_policy(settings.algo):  # trajectory segments, no replay
            from actorq.learner.onpolicy_service import serve_onpolicy

            if settings.device_replay_k:
                raise ConfigError(
                    f"device_replay_k (ACTORQ_DEVICE_REPLAY_K) {settings.device_replay_k}: "
                    f"{settings.algo} learns from trajectory segments, it has no replay; "
                    "expected 0"
                )

            return serve_onpolicy(settings, dqn, resolve_settings_device(settings, dqn))
        rlx2 = load_settings(SparseTrainingConfig)  # ACTORQ_SPARSITY_* and the rest of RLx2
        rlx2.check_usable(settings.algo, settings.replay, settings.world_size)
        # auto -> cpu or cuda (actorq.learner.device); a missing GPU is a ConfigError (exit 2)
        return serve(settings, dqn, rlx2, resolve_settings_device(settings, dqn))

    run_main(_main)


if __name__ == "__main__":
    main()
