"""One actor's env steps/s at each precision: the real Actor loop (vector env, batched
policy forward, epsilon-greedy, pipelined pushes to a real Redis) with a policy served by a
real quantizer over gRPC. Precisions are interleaved round by round so machine noise hits
them alike; the table reports medians and ratios against fp32.

    .venv/bin/python bench/bench_actor.py [--quick] [--hidden 512,512,512] [--envs 32]
"""

from __future__ import annotations

import argparse
import statistics
import threading
import time
import uuid

import redis
import torch

from actorq.actor.loop import Actor
from actorq.actor.policy_follower import PolicyFollower
from actorq.config import ActorSettings, parse_int_tuple
from actorq.envs import describe_env, make_vector_env
from actorq.models import MLPSpec, QNetwork
from actorq.quant import parse_precision, spec_to_proto
from actorq.quantizer.server import ParameterServer, parameter_server_service
from actorq.quantizer.store import PolicyStore
from actorq.redis_keys import RedisKeys
from actorq.redis_server import EmbeddedRedis
from actorq.rpc import GrpcServer, make_channel
from actorq.rpc.weight_stream import weight_chunks
from actorq.v1 import parameter_server_pb2 as ps_pb2
from actorq.v1 import parameter_server_pb2_grpc as ps_grpc


def _publish(address: str, spec: MLPSpec, precision: str, version: int) -> None:
    torch.manual_seed(0)
    weights = {k: v.numpy().copy() for k, v in QNetwork(spec).state_dict().items()}
    header = ps_pb2.PublishHeader(
        version=version,
        precision=parse_precision(precision),
        spec=spec_to_proto(spec),
        num_tensors=len(weights),
    )
    stub = ps_grpc.ParameterServerStub(make_channel(address))
    stub.PublishWeights(weight_chunks(header, weights), timeout=60)


def _measure(settings: ActorSettings, client: redis.Redis, keys: RedisKeys, steps: int) -> float:
    env = make_vector_env(settings.env_id, settings.envs_per_actor, settings.seed)
    follower = PolicyFollower(settings.quantizer_addr, "bench").start()
    follower.wait_for_policy(30)
    actor = Actor(settings, env, follower, client, keys, threading.Event())
    started = time.perf_counter()
    actor.run()
    elapsed = time.perf_counter() - started
    follower.stop()
    env.close()
    return actor.env_steps / elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--env", default="CartPole-v1")
    parser.add_argument("--hidden", default="512,512,512")
    parser.add_argument("--envs", type=int, default=32)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--steps", type=int, default=64_000, help="env steps per measurement")
    parser.add_argument("--quick", action="store_true", help="2 rounds of 16k steps")
    args = parser.parse_args()
    if args.quick:
        args.rounds, args.steps = 2, 16_000
    torch.set_num_threads(1)
    info = describe_env(args.env)
    spec = MLPSpec(info.obs_dim, info.num_actions, parse_int_tuple(args.hidden))
    results: dict[str, list[float]] = {"fp32": [], "fp16": [], "int8": []}
    with EmbeddedRedis() as server:
        client = redis.Redis.from_url(server.url)
        for round_index in range(args.rounds):
            for precision in results:
                keys = RedisKeys(f"bench-{uuid.uuid4().hex[:8]}")
                params = ParameterServer(PolicyStore(client, keys))
                grpc_server = GrpcServer("127.0.0.1", 0, [parameter_server_service(params)])
                grpc_server.start()
                address = f"127.0.0.1:{grpc_server.port}"
                _publish(address, spec, precision, version=1)
                settings = ActorSettings(
                    redis_url=server.url,
                    redis_prefix=keys.prefix,
                    env_id=args.env,
                    envs_per_actor=args.envs,
                    quantizer_addr=address,
                    max_env_steps=args.steps,
                    push_every=256,
                    seed=round_index,
                )
                results[precision].append(_measure(settings, client, keys, args.steps))
                params.close()
                grpc_server.stop(0.1)
                client.flushdb()
    _print_table(args, spec, results)


def _print_table(args: argparse.Namespace, spec: MLPSpec, results: dict[str, list[float]]) -> None:
    print(
        f"\nactor env steps/s: {args.env}, {args.envs} envs, hidden {args.hidden}, "
        f"{args.rounds} rounds x {args.steps} steps, 1 torch thread"
    )
    print(f"{'precision':>9} | {'median steps/s':>14} | {'min':>9} | {'max':>9} | {'vs fp32':>7}")
    base = statistics.median(results["fp32"])
    for precision, values in results.items():
        med = statistics.median(values)
        print(
            f"{precision:>9} | {med:>14,.0f} | {min(values):>9,.0f} | {max(values):>9,.0f} | "
            f"{med / base:>6.2f}x"
        )


if __name__ == "__main__":
    main()
