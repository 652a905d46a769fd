"""Sparse training of actor-critic learners, as RLx2 (Tan et al., ICLR 2023) does it.

- allocation: Erdos-Renyi per-layer densities from one global sparsity;
- schedule + topology: masks kept exact by hooks, RigL-style drop/grow every Delta T;
- flops: training and inference FLOPs against the dense equivalent;
- training: `attach_sparse_training`, the one call that makes a learner sparse;
- config: `SparseTrainingConfig` (ACTORQ_SPARSITY_*, ACTORQ_TOPOLOGY_*, ...).

The other two RLx2 parts live with the replay (actorq.replay.trajectories: the delayed
n-step target; actorq.replay.dynamic_capacity) and are driven by actorq.learner.rlx2.
"""

from actorq.sparse.allocation import active_counts, erdos_renyi_densities
from actorq.sparse.config import SparseTrainingConfig
from actorq.sparse.schedule import TopologySchedule
from actorq.sparse.topology import SparseNetwork
from actorq.sparse.training import SparseTraining, attach_sparse_training

__all__ = [
    "SparseNetwork",
    "SparseTraining",
    "SparseTrainingConfig",
    "TopologySchedule",
    "active_counts",
    "attach_sparse_training",
    "erdos_renyi_densities",
]
