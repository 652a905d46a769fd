"""Container specs for a cluster, from one config: network, Redis, quantizer, learner, actors.

Pure data, no engine calls, so tests can check every name, label, variable and volume.
The containers get the same ACTORQ_* variables as docker-compose.yml and the Kubernetes
manifests: only how processes start differs, never the code path.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from actorq.config import PRECISIONS, ConfigError

LABEL_CLUSTER = "io.actorq.cluster"  # cluster name: finds every container of one cluster
LABEL_ROLE = "io.actorq.role"  # redis | quantizer | learner | actor
LABEL_INDEX = "io.actorq.actor-index"  # actors only: their ACTORQ_ACTOR_INDEX

GRPC_PORT = 50051  # every service container listens on the same ports (own network namespace)
METRICS_PORT = 9100
REDIS_IMAGE = "redis:7.2.5-alpine"  # pinned, same as docker-compose.yml
SECONDS = 1_000_000_000  # Docker's healthcheck durations are in nanoseconds


@dataclass(frozen=True)
class ClusterConfig:
    """What `actorq cluster up` starts; every field maps to a flag or an ACTORQ_* variable."""

    name: str = "actorq"  # prefix of container, network and volume names; the cluster label
    image: str = "actorq:latest"  # built from the repository's Dockerfile
    actors: int = 2
    envs_per_actor: int = 8
    env_id: str = "CartPole-v1"
    precision: str = "int8"
    redis_image: str = REDIS_IMAGE
    extra_env: Mapping[str, str] = field(default_factory=dict)  # more ACTORQ_* for every service

    def __post_init__(self) -> None:
        if not self.name.replace("-", "").isalnum() or not self.name[:1].isalpha():
            raise ConfigError(
                f"cluster name: expected letters, digits and '-', starting with a letter, "
                f"got {self.name!r}"
            )
        if not 0 <= self.actors <= 1024:
            raise ConfigError(f"--actors: expected 0..1024, got {self.actors}")
        if self.envs_per_actor < 1:
            raise ConfigError(f"--envs-per-actor: expected >= 1, got {self.envs_per_actor}")
        if self.precision not in PRECISIONS:
            raise ConfigError(
                f"--precision: expected one of {', '.join(PRECISIONS)}, got {self.precision!r}"
            )
        bad = [k for k in self.extra_env if not k.startswith("ACTORQ_")]
        if bad:
            raise ConfigError(f"extra environment: expected ACTORQ_* names only, got {bad}")

    @property
    def network(self) -> str:
        return f"{self.name}-net"

    @property
    def redis_volume(self) -> str:
        return f"{self.name}-redis-data"

    @property
    def checkpoint_volume(self) -> str:
        return f"{self.name}-checkpoints"

    def container_name(self, role: str, index: int | None = None) -> str:
        return f"{self.name}-{role}" if index is None else f"{self.name}-{role}-{index}"


@dataclass(frozen=True)
class ContainerSpec:
    """One container: what `docker run` needs, as plain data."""

    name: str
    role: str
    image: str
    command: list[str] | None
    environment: dict[str, str]
    labels: dict[str, str]
    volumes: dict[str, dict[str, str]]  # volume name -> {"bind": path, "mode": "rw"}
    healthcheck: dict[str, Any]

    def run_kwargs(self, network: str) -> dict[str, Any]:
        """Keyword arguments for docker-py's `containers.run`, detached, on `network`."""
        return {
            "image": self.image,
            "command": self.command,
            "name": self.name,
            "hostname": self.name,
            "environment": self.environment,
            "labels": self.labels,
            "volumes": self.volumes,
            "healthcheck": self.healthcheck,
            "network": network,
            "detach": True,
            # docker-init (tini) as PID 1: reaps what a probe killed at its timeout orphans,
            # and passes SIGTERM to the service (issue 31: a zombie blocked `down`).
            "init": True,
            "restart_policy": {"Name": "on-failure", "MaximumRetryCount": 5},
        }


@dataclass(frozen=True)
class ClusterPlan:
    """Everything `up` creates, in start order (each waits for the one before to be healthy)."""

    network: str
    volumes: list[str]
    containers: list[ContainerSpec]

    def by_role(self, role: str) -> list[ContainerSpec]:
        return [c for c in self.containers if c.role == role]


def _labels(config: ClusterConfig, role: str, index: int | None = None) -> dict[str, str]:
    labels = {LABEL_CLUSTER: config.name, LABEL_ROLE: role}
    if index is not None:
        labels[LABEL_INDEX] = str(index)
    return labels


def _http_healthcheck() -> dict[str, Any]:
    """The image's bash probe of /healthz (same state as grpc.health.v1, no Python), with
    docker-compose.yml's timings."""
    return {
        "test": ["CMD", "actorq-healthz"],
        "interval": 10 * SECONDS,
        "timeout": 30 * SECONDS,
        "retries": 5,
        "start_period": 120 * SECONDS,
    }


def _service_env(config: ClusterConfig, **extra: str) -> dict[str, str]:
    env = {
        "ACTORQ_REDIS_URL": f"redis://{config.container_name('redis')}:6379/0",
        "ACTORQ_REDIS_PREFIX": config.name,
        "ACTORQ_BIND_HOST": "0.0.0.0",
        "ACTORQ_GRPC_PORT": str(GRPC_PORT),
        "ACTORQ_METRICS_PORT": str(METRICS_PORT),
        "ACTORQ_QUANTIZER_ADDR": f"{config.container_name('quantizer')}:{GRPC_PORT}",
        "ACTORQ_SAMPLES_PER_INSERT": "16",  # both sides of the replay ratio, as in compose
    }
    env.update(config.extra_env)
    env.update(extra)
    return env


def redis_spec(config: ClusterConfig) -> ContainerSpec:
    return ContainerSpec(
        name=config.container_name("redis"),
        role="redis",
        image=config.redis_image,
        command=["redis-server", "--appendonly", "yes", "--save", ""],
        environment={},
        labels=_labels(config, "redis"),
        volumes={config.redis_volume: {"bind": "/data", "mode": "rw"}},
        healthcheck={
            "test": ["CMD", "redis-cli", "ping"],
            "interval": 5 * SECONDS,
            # docker-compose.yml's: on a loaded host Docker's exec, not Redis, is slow.
            "timeout": 30 * SECONDS,
            "retries": 10,
        },
    )


def _service_spec(
    config: ClusterConfig,
    role: str,
    env: dict[str, str],
    index: int | None = None,
    volumes: dict[str, dict[str, str]] | None = None,
) -> ContainerSpec:
    return ContainerSpec(
        name=config.container_name(role, index),
        role=role,
        image=config.image,
        command=[f"actorq-{role}"],
        environment=env,
        labels=_labels(config, role, index),
        volumes=volumes or {},
        healthcheck=_http_healthcheck(),
    )


def actor_spec(config: ClusterConfig, index: int, num_actors: int) -> ContainerSpec:
    """Actor `index` of `num_actors` (the pool size sets its Ape-X epsilon)."""
    env = _service_env(
        config,
        ACTORQ_ACTOR_INDEX=str(index),
        ACTORQ_NUM_ACTORS=str(num_actors),
        ACTORQ_ENV_ID=config.env_id,
        ACTORQ_ENVS_PER_ACTOR=str(config.envs_per_actor),
    )
    return _service_spec(config, "actor", env, index=index)


def plan_cluster(config: ClusterConfig) -> ClusterPlan:
    """Network, volumes and containers for `config`, in start order."""
    learner_env = _service_env(
        config,
        ACTORQ_ENV_ID=config.env_id,
        ACTORQ_PRECISION=config.precision,
        ACTORQ_CHECKPOINT_DIR="/checkpoints",
    )
    containers = [
        redis_spec(config),
        _service_spec(config, "quantizer", _service_env(config)),
        _service_spec(
            config,
            "learner",
            learner_env,
            volumes={config.checkpoint_volume: {"bind": "/checkpoints", "mode": "rw"}},
        ),
        *(actor_spec(config, i, config.actors) for i in range(config.actors)),
    ]
    return ClusterPlan(
        network=config.network,
        volumes=[config.redis_volume, config.checkpoint_volume],
        containers=containers,
    )
