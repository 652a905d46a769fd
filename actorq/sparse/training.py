"""`SparseTraining`: RLx2's sparse actor and critic attached to an actor-critic learner.

    sparse = attach_sparse_training(algo, config)   # once, right after make_algorithm
    ... algo.update(batch) ...                       # masks and topology run by hooks
    sparse.account_update()                          # after each update: FLOPs counters
    checkpoint {"sparse": sparse.state_dict()}       # masks + schedule state

It needs nothing from the algorithm's update code: it reads the learner's networks,
targets and optimizers by name (`actor`, `actor_target`, `critics`, `critics_target`,
`actor_opt`, `critic_opt`) and hooks into the optimizers and the weights' gradients.
"""

from __future__ import annotations

from typing import Any

from torch import nn

from actorq.sparse.config import SparseTrainingConfig
from actorq.sparse.flops import passes, policy_inference_flops, update_flops
from actorq.sparse.schedule import TopologySchedule
from actorq.sparse.topology import LayerStats, SparseNetwork, total_stats


class SparseTraining:
    """The sparse networks of one learner, their FLOPs and their checkpoint state."""

    def __init__(self, algo: Any, config: SparseTrainingConfig, algo_name: str) -> None:
        self.algo, self.config = algo, config
        algo_config = algo.config
        delay = int(getattr(algo_config, "policy_delay", 1))
        critic_schedule = _schedule(config, config.topology_stop)
        actor_schedule = _schedule(config, config.topology_stop // delay)
        self.networks: dict[str, SparseNetwork] = {}
        if config.sparsity_actor > 0:
            self.networks["actor"] = SparseNetwork(
                "actor",
                algo.actor,
                algo.actor_opt,
                config.sparsity_actor,
                actor_schedule,
                _targets(algo, "actor_target"),
            )
        if config.sparsity_critic > 0:
            self.networks["critic"] = SparseNetwork(
                "critic",
                algo.critics,
                algo.critic_opt,
                config.sparsity_critic,
                critic_schedule,
                _targets(algo, "critics_target"),
            )
        self._passes = passes(algo_name, delay, len(algo.critics))
        self._modules = {"actor": algo.actor, "critic": algo.critics}
        self.batch_size = int(algo_config.batch_size)
        self.train_flops = 0.0
        self.dense_train_flops = 0.0
        self._flops_cache: tuple[tuple[int, ...], tuple[float, float]] | None = None

    def layer_stats(self) -> dict[str, list[LayerStats]]:
        """Per network, per Linear layer: size and active weights (dense ones included)."""
        out = {}
        for name, module in self._modules.items():
            net = self.networks.get(name)
            if net is not None:
                out[name] = net.layer_stats()
            else:
                out[name] = [
                    LayerStats(n, m.weight.numel(), m.weight.numel())
                    for n, m in module.named_modules()
                    if isinstance(m, nn.Linear)
                ]
        return out

    def sparsity(self) -> dict[str, float]:
        """Share of zero weights: per network and over both ("total")."""
        stats = self.layer_stats()
        out = {name: _sparsity(layers) for name, layers in stats.items()}
        out["total"] = _sparsity([s for layers in stats.values() for s in layers])
        return out

    def update_flops(self) -> tuple[float, float]:
        """(sparse, dense) training FLOPs of one update with the current masks."""
        version = tuple(n.topology_updates for n in self.networks.values())
        if self._flops_cache is None or self._flops_cache[0] != version:
            flops = update_flops(self.layer_stats(), self._passes, self.batch_size)
            self._flops_cache = (version, flops)
        return self._flops_cache[1]

    def account_update(self) -> None:
        """Add one update's (sparse, dense) training FLOPs to the totals."""
        sparse, dense = self.update_flops()
        self.train_flops += sparse
        self.dense_train_flops += dense

    def inference_flops(self) -> tuple[int, int]:
        return policy_inference_flops(self.algo.policy_weights())

    @property
    def topology_updates(self) -> int:
        return sum(n.topology_updates for n in self.networks.values())

    @property
    def changed_total(self) -> int:
        return sum(n.changed_total for n in self.networks.values())

    def active_weights(self) -> tuple[int, int]:
        return total_stats(self.networks.values())

    def state_dict(self) -> dict[str, Any]:
        return {
            "networks": {name: net.state_dict() for name, net in self.networks.items()},
            "train_flops": self.train_flops,
            "dense_train_flops": self.dense_train_flops,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        saved = state["networks"]
        if set(saved) != set(self.networks):
            raise ValueError(
                f"checkpoint has sparse networks {sorted(saved)}, this learner "
                f"{sorted(self.networks)}: resume with the same ACTORQ_SPARSITY_* settings"
            )
        for name, net in self.networks.items():
            net.load_state_dict(saved[name])
        self.train_flops = float(state["train_flops"])
        self.dense_train_flops = float(state["dense_train_flops"])


def _sparsity(layers: list[LayerStats]) -> float:
    return 1.0 - sum(s.active for s in layers) / sum(s.size for s in layers)


def _schedule(config: SparseTrainingConfig, stop: int) -> TopologySchedule:
    return TopologySchedule(config.topology_interval, stop, config.topology_drop_fraction)


def _targets(algo: Any, name: str) -> list[nn.Module]:
    target = getattr(algo, name, None)
    return [target] if target is not None else []


def attach_sparse_training(
    algo: Any, config: SparseTrainingConfig, algo_name: str
) -> SparseTraining:
    """Make `algo`'s networks sparse now and keep them so; see the module docstring."""
    config.check_usable(algo_name)
    return SparseTraining(algo, config, algo_name)
