"""The learner process for on-policy algorithms (ACTORQ_ALGO=ppo|appo|a2c).

Same process contract as services.learner.main.serve (health, Control, /metrics,
SIGTERM), with `OnPolicyTrainer` in place of the replay learner.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time

import torch

from actorq import metrics
from actorq.algos.factory import policy_spec
from actorq.config import ConfigError, LearnerSettings
from actorq.denormals import describe as describe_denormals
from actorq.learner.onpolicy_loop import OnPolicyTrainer
from actorq.learner.publisher import learner_publisher
from actorq.learner.update_path import setup_learner
from actorq.redis_keys import RedisKeys
from actorq.rpc import GrpcServer
from actorq.rpc.control import StatusSnapshot, control_service
from actorq.security.tls import TlsConfig, allowed_peers
from actorq.service import ServiceRuntime, connect_redis, run_loop

log = logging.getLogger("actorq.learner")


def build_trainer(settings: LearnerSettings, config, runtime: ServiceRuntime) -> OnPolicyTrainer:
    if settings.world_size != 1:
        raise ConfigError(
            f"world_size {settings.world_size}: on-policy algorithms run one learner so far"
        )
    spec = policy_spec(settings.env_id, settings.algo, settings.hidden, config)
    client = connect_redis(settings.redis_url, password_file=settings.redis_password_file)
    keys = RedisKeys(settings.redis_prefix)
    publisher = learner_publisher(settings, spec, client, keys)
    return OnPolicyTrainer(settings, config, spec, client, keys, publisher, runtime.stop_event)


def _status_fn(trainer: OnPolicyTrainer, runtime: ServiceRuntime):
    last = [time.perf_counter(), 0]

    def status() -> StatusSnapshot:
        now, updates = time.perf_counter(), trainer.counters.updates
        rate = (updates - last[1]) / (now - last[0]) if now > last[0] else 0.0
        last[:] = [now, updates]
        return StatusSnapshot(
            role="learner",
            instance_id="learner-0",
            policy_version=trainer.version,
            state="stopping" if runtime.stopping else "running",
            counters={**trainer.status_counters(), "updates_per_second": rate},
        )

    return status


def serve_onpolicy(settings: LearnerSettings, config, choice=None) -> int:
    """`choice`: the resolved actorq.learner.device.DeviceChoice (its reason and timings
    are reported, its measured path taken for ACTORQ_UPDATE_PATH=auto)."""
    torch.set_num_threads(settings.torch_threads)
    runtime = ServiceRuntime("learner")
    trainer = build_trainer(settings, config, runtime)
    info = setup_learner(
        trainer.algo, settings.device, settings.update_path, choice,
        torch_threads=settings.torch_threads,
    )  # fmt: skip
    info = dataclasses.replace(info, denormals=describe_denormals())
    tls = TlsConfig.from_settings(settings)
    stop_peers = allowed_peers(settings, "tls_allowed_stop_peers")
    server = GrpcServer(
        settings.bind_host,
        settings.grpc_port,
        [control_service(_status_fn(trainer, runtime), runtime.request_stop, stop_peers)],
        max_workers=4,
        tls=tls,
    )
    metrics_port = metrics.serve_metrics(
        settings.bind_host, settings.metrics_port, service="learner", health=server.status
    )
    server.start()
    trainer.restore()
    info.announce(trainer.client, trainer.keys)
    log.info(
        "learner up: %s (on-policy) on env %s, hidden %s, precision %s, %s, control port "
        "%d, metrics %s",
        settings.algo, settings.env_id, settings.hidden, settings.precision, info.line(),
        server.port, metrics_port,
    )  # fmt: skip
    trainer.start()
    thread = threading.Thread(
        target=run_loop, args=(trainer.train, runtime, "max_updates reached"), name="train"
    )
    thread.start()
    runtime.wait()
    thread.join()
    trainer.finish()
    server.stop(grace=1.0)
    c = trainer.counters
    log.info(
        "learner stopped after %d updates, version %d; %d segments trained, %d dropped as "
        "stale; %.1f stream bytes per transition",
        c.updates, trainer.version, c.segments_trained, c.segments_dropped,
        trainer.reader.bytes_read / max(trainer.reader.transitions_read, 1),
    )  # fmt: skip
    return 0
