"""The Docker launcher's container specs: a pure function, checked field by field."""

from __future__ import annotations

import pytest

from actorq.cluster.specs import (
    GRPC_PORT,
    LABEL_CLUSTER,
    LABEL_INDEX,
    LABEL_ROLE,
    ClusterConfig,
    actor_spec,
    plan_cluster,
)
from actorq.config import ActorSettings, ConfigError, LearnerSettings, load_settings


def test_plan_starts_redis_quantizer_learner_then_n_actors() -> None:
    plan = plan_cluster(ClusterConfig(name="exp1", actors=4))
    assert [c.role for c in plan.containers] == ["redis", "quantizer", "learner", *["actor"] * 4]
    assert plan.network == "exp1-net"
    names = [c.name for c in plan.containers]
    assert len(set(names)) == len(names)
    assert names[-1] == "exp1-actor-3"
    assert plan.volumes == ["exp1-redis-data", "exp1-checkpoints"]


def test_every_container_is_labelled_so_scale_and_down_find_it() -> None:
    plan = plan_cluster(ClusterConfig(name="exp1", actors=3))
    for spec in plan.containers:
        assert spec.labels[LABEL_CLUSTER] == "exp1"
        assert spec.labels[LABEL_ROLE] == spec.role
    indices = [c.labels[LABEL_INDEX] for c in plan.by_role("actor")]
    assert indices == ["0", "1", "2"]
    assert all(LABEL_INDEX not in c.labels for c in plan.containers if c.role != "actor")


def test_services_find_redis_and_quantizer_by_container_name() -> None:
    plan = plan_cluster(ClusterConfig(name="exp1", actors=1, precision="fp16"))
    for spec in plan.containers[1:]:
        env = spec.environment
        assert env["ACTORQ_REDIS_URL"] == "redis://exp1-redis:6379/0"
        assert env["ACTORQ_QUANTIZER_ADDR"] == f"exp1-quantizer:{GRPC_PORT}"
        assert env["ACTORQ_BIND_HOST"] == "0.0.0.0"  # reachable from other containers
        assert spec.healthcheck["test"] == ["CMD", "actorq-healthz"]  # bash, no Python
        assert spec.command == [f"actorq-{spec.role}"]
        assert spec.run_kwargs("exp1-net")["network"] == "exp1-net"
        assert spec.run_kwargs("exp1-net")["init"] is True  # tini reaps orphaned probes
    redis = plan.containers[0]
    assert redis.role == "redis" and redis.healthcheck["timeout"] == 30 * 10**9  # as compose's
    learner = plan.by_role("learner")[0]
    assert learner.environment["ACTORQ_PRECISION"] == "fp16"
    assert learner.volumes == {"exp1-checkpoints": {"bind": "/checkpoints", "mode": "rw"}}
    redis = plan.by_role("redis")[0]
    assert "--appendonly" in redis.command and redis.volumes["exp1-redis-data"]["bind"] == "/data"


def test_the_services_accept_the_environment_they_are_given() -> None:
    """The specs' variables parse into the services' own settings classes."""
    plan = plan_cluster(ClusterConfig(actors=3, envs_per_actor=4))
    actor = load_settings(ActorSettings, plan.by_role("actor")[2].environment)
    assert (actor.actor_index, actor.num_actors, actor.envs_per_actor) == (2, 3, 4)
    learner = load_settings(LearnerSettings, plan.by_role("learner")[0].environment)
    assert learner.checkpoint_dir == "/checkpoints" and learner.grpc_port == GRPC_PORT


def test_scaled_actor_knows_the_new_pool_size() -> None:
    spec = actor_spec(ClusterConfig(name="c"), index=5, num_actors=8)
    assert spec.name == "c-actor-5"
    assert spec.environment["ACTORQ_NUM_ACTORS"] == "8"


@pytest.mark.parametrize(
    ("kwargs", "named"),
    [
        ({"name": "bad name"}, "cluster name"),
        ({"actors": -1}, "--actors"),
        ({"precision": "int3"}, "--precision"),
        ({"extra_env": {"PATH": "/x"}}, "ACTORQ_"),
    ],
)
def test_bad_config_is_refused_with_the_value_named(kwargs, named) -> None:
    with pytest.raises(ConfigError, match=named):
        ClusterConfig(**kwargs)
