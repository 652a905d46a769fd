"""`actorq cluster up|scale|down --backend docker`: argument parsing and exit codes."""

from __future__ import annotations

import argparse
import sys

from actorq.cluster.specs import REDIS_IMAGE, ClusterConfig
from actorq.config import PRECISIONS

EXIT_NO_ENGINE = 3
BACKENDS = ("docker",)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("action", choices=["up", "scale", "down"], help="what to do")
    parser.add_argument(
        "--backend", choices=BACKENDS, default="docker", help="container engine to use"
    )
    parser.add_argument("--actors", type=int, default=2, help="actor containers (up, scale)")
    parser.add_argument("--name", default="actorq", help="cluster name (labels, name prefix)")
    parser.add_argument("--image", default="actorq:latest", help="image built from Dockerfile")
    parser.add_argument(
        "--redis-image",
        default=REDIS_IMAGE,
        help="Redis image (no registry: actorq-local/redis:bookworm from `make image`)",
    )
    parser.add_argument("--env", default="CartPole-v1", help="gymnasium env id")
    parser.add_argument("--envs-per-actor", type=int, default=8, help="envs per actor")
    parser.add_argument("--precision", choices=PRECISIONS, default="int8")
    parser.add_argument(
        "--volumes", action="store_true", help="down: also remove Redis and checkpoint volumes"
    )


def config_from_args(args: argparse.Namespace) -> ClusterConfig:
    return ClusterConfig(
        name=args.name,
        image=args.image,
        actors=args.actors,
        envs_per_actor=args.envs_per_actor,
        env_id=args.env,
        precision=args.precision,
        redis_image=args.redis_image,
    )


def run(args: argparse.Namespace) -> int:
    from actorq.cluster.docker_backend import DockerCluster, NoDockerEngine, connect

    config = config_from_args(args)  # bad values fail here, before looking for an engine
    try:
        cluster = DockerCluster(connect(), config)
    except NoDockerEngine as exc:
        print(f"actorq cluster: {exc}", file=sys.stderr)
        return EXIT_NO_ENGINE
    if args.action == "up":
        plan = cluster.up()
        print(f"cluster {config.name} up: {len(plan.containers)} containers on {plan.network}")
    elif args.action == "scale":
        changed = cluster.scale(config.actors)
        print(f"cluster {config.name}: {config.actors} actors ({len(changed)} changed)")
    else:
        removed = cluster.down(remove_volumes=args.volumes)
        print(f"cluster {config.name} down: {len(removed)} containers removed")
    return 0
