"""Actor (or evaluator) process: settings -> env, policy follower, replay writer -> act.

Configured by ACTORQ_* environment variables (see actorq.config.ActorSettings);
ACTORQ_EVALUATOR=true makes this process the greedy evaluator.
"""

from __future__ import annotations

import logging
import threading

from actorq import metrics
from actorq.actor.evaluator import Evaluator
from actorq.actor.identity import claim_actor_index
from actorq.actor.loop import Actor
from actorq.actor.policy_follower import PolicyFollower
from actorq.actor.trajectory import TrajectoryActor
from actorq.config import ActorSettings, load_settings
from actorq.envs import check_backend, describe_env, make_vector_env
from actorq.redis_keys import RedisKeys
from actorq.rpc import GrpcServer
from actorq.rpc.control import StatusSnapshot, control_service
from actorq.security.signing import load_policy_keys
from actorq.security.tls import TlsConfig, allowed_peers
from actorq.service import ServiceRuntime, connect_redis, run_loop, run_main, setup_logging
from actorq.torch_threads import set_torch_threads

log = logging.getLogger("actorq.actor")


def serve(settings: ActorSettings) -> int:
    # Actors scale by processes: one torch thread each, if torch is ever loaded (pixel
    # policies; MLP policies act in numpy or numba, and the process never imports torch).
    set_torch_threads(1)
    # Unknown or unsupported env, or a backend that cannot build it: a clear error before
    # anything starts.
    describe_env(settings.env_id, continuous=None)
    check_backend(settings.env_id, settings.env_backend)
    client = connect_redis(settings.redis_url, password_file=settings.redis_password_file)
    keys = RedisKeys(settings.redis_prefix)
    settings = claim_actor_index(settings, client, keys)  # replicas of one template (-1)
    runtime = ServiceRuntime(settings.instance_id)
    on_policy = settings.unroll_length > 0 and not settings.evaluator
    env = make_vector_env(
        settings.env_id,
        settings.envs_per_actor,
        settings.seed + 1000 * settings.actor_index,
        native=not on_policy,  # segments need SAME_STEP autoreset (actorq.actor.trajectory)
        backend=settings.env_backend,
    )
    tls = TlsConfig.from_settings(settings)
    follower = PolicyFollower(
        settings.quantizer_addr,
        settings.instance_id,
        keys=load_policy_keys(settings.policy_key_file, settings.policy_previous_key_file),
        tls=tls,
        numpy_act=settings.numpy_act,
    ).start()
    kind = Evaluator if settings.evaluator else (TrajectoryActor if on_policy else Actor)
    worker = kind(settings, env, follower, client, keys, runtime.stop_event)
    server = GrpcServer(
        settings.bind_host,
        settings.grpc_port,
        [
            control_service(
                lambda: _status(worker, follower, runtime),
                runtime.request_stop,
                allowed_peers(settings, "tls_allowed_stop_peers"),
            )
        ],
        max_workers=4,
        tls=tls,
    )
    metrics_port = metrics.serve_metrics(
        settings.bind_host,
        settings.metrics_port,
        service=settings.instance_id,
        health=server.status,
    )
    server.start()
    log.info(
        "%s up: env %s x%d, control port %d, metrics %s, quantizer %s",
        settings.instance_id,
        settings.env_id,
        settings.envs_per_actor,
        server.port,
        metrics_port,
        settings.quantizer_addr,
    )
    thread = threading.Thread(
        target=run_loop, args=(worker.run, runtime, "env step budget reached"), name="env-loop"
    )
    thread.start()
    runtime.wait()
    thread.join()
    follower.stop()
    env.close()
    server.stop(grace=1.0)
    if not isinstance(worker, Evaluator):  # what "nothing acknowledged is lost" is checked against
        log.info(
            "%s stopped: %d env steps, %d transitions acknowledged by Redis",
            settings.instance_id,
            worker.env_steps,
            worker.inserted,
        )
    return 0


def _status(
    worker: Actor | TrajectoryActor | Evaluator, follower: PolicyFollower, runtime: ServiceRuntime
) -> StatusSnapshot:
    current = follower.current
    counters = {
        "env_steps": worker.env_steps,
        "episodes": worker.episodes.count,
        "mean_return_100": worker.episodes.mean_return,
        "policy_rejections": follower.rejections,
        "policy_loads": follower.loads,
        "policy_bytes_received": follower.bytes_received,
        "policy_delta_fallbacks": follower.delta_fallbacks,
        "latest_announced_version": follower.latest_announced,
    }
    if not isinstance(worker, Evaluator):
        counters["replay_inserted"] = worker.inserted
        counters["epsilon_mean"] = float(worker.epsilon.mean())
        counters.update(worker.breakdown_counters())  # actorq.breakdown
        counters.update(follower.clock.counters("policy_seconds"))
    return StatusSnapshot(
        role="evaluator" if isinstance(worker, Evaluator) else "actor",
        instance_id=worker.instance,
        policy_version=current.version if current else 0,
        state="stopping" if runtime.stopping else ("running" if current else "waiting"),
        counters=counters,
    )


def main() -> None:
    def _main() -> int:
        settings = load_settings(ActorSettings)
        setup_logging(settings.log_level)
        return serve(settings)

    run_main(_main)


if __name__ == "__main__":
    main()
