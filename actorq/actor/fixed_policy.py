"""A fixed, randomly initialised policy for an env, and a follower that never changes it.

For benchmarks and tests of the actor loop alone (bench/bench_throughput.py,
tests/integration/test_actor_fast_path.py): the policy goes through the real encode ->
decode -> build path (actorq.quant), so the loop runs the module a `PolicyFollower` would
build from a blob; only the gRPC fetch is left out.
"""

from __future__ import annotations

import torch

from actorq.actor.policy_follower import LoadedPolicy
from actorq.envs import describe_env
from actorq.models import MLPSpec
from actorq.models.cnn import build_network, cnn_spec_for
from actorq.quant import build_policy_module, decode_blob, encode_policy, parse_precision


def make_policy(
    env_id: str, hidden: tuple[int, ...], precision: str, seed: int = 0
) -> LoadedPolicy:
    """Version 1 of a random policy for `env_id`: a Q-network (discrete), a tanh actor
    (continuous) or the zoo's CNN (pixels; `hidden` is then unused)."""
    info = describe_env(env_id, continuous=None)
    torch.manual_seed(seed)
    if info.pixels:
        spec = cnn_spec_for(info.obs_shape, info.num_actions)
    elif info.continuous:
        spec = MLPSpec(info.obs_dim, info.act_dim, hidden, output_activation="tanh")
    else:
        spec = MLPSpec(info.obs_dim, info.num_actions, hidden)
    weights = {k: v.numpy().copy() for k, v in build_network(spec).state_dict().items()}
    encoded = encode_policy(weights, spec, parse_precision(precision), 1, 0)
    arrays = decode_blob(encoded.envelope)
    return LoadedPolicy(1, precision, build_policy_module(arrays), encoded.blob_bytes, arrays)


class StaticFollower:
    """Stands in for `PolicyFollower`: `current` is always the one given policy."""

    def __init__(self, policy: LoadedPolicy) -> None:
        self.current = policy

    def wait_for_policy(self, timeout: float) -> bool:
        return True
