"""Which stored transition follows which: the learner-side n-step target of RLx2.

Actors send one-step transitions from many envs, interleaved. A transition's successor
in its episode is the one from the same actor whose observation is bit for bit this
transition's next observation (a vector env's next step starts where the last ended).
`TrajectoryLinks` finds it at insert time with a dictionary of transitions still waiting
for their successor; a terminal transition (done) or one that is itself n-step (steps >
1, D4PG's actors) waits for none, and a truncated episode's last transition never
finds one (the next observation is a reset). Links are global insert sequence numbers,
so a link to a row since overwritten or dropped is recognised as gone.

`nstep_rows` then follows the links of sampled rows: reward = sum_k gamma^k r_k, next_obs
= the observation after the last step taken, done = whether that step terminated, steps
= how many were taken (fewer than n where the episode or the stored data ends). No
off-policy correction, as in RLx2.
"""

from __future__ import annotations

from collections import OrderedDict

import numpy as np

NO_LINK = -1


class TrajectoryLinks:
    def __init__(self, capacity: int, max_pending: int = 1 << 16) -> None:
        self.capacity = capacity
        self.next_seq = np.full(capacity, NO_LINK, np.int64)
        self.max_pending = max_pending
        self._pending: OrderedDict[bytes, int] = OrderedDict()

    def add(
        self,
        actor_id: str,
        first_seq: int,
        obs: np.ndarray,
        next_obs: np.ndarray,
        done: np.ndarray,
        steps: np.ndarray | None,
    ) -> None:
        """Record rows first_seq, first_seq + 1, ... (in the order the actor sent them)."""
        count = len(obs)
        self.next_seq[(first_seq + np.arange(count)) % self.capacity] = NO_LINK
        prefix = actor_id.encode() + b"\0"
        waits = ~np.asarray(done, bool)
        if steps is not None:
            waits &= np.asarray(steps) == 1
        for i in range(count):
            seq = first_seq + i
            before = self._pending.pop(prefix + obs[i].tobytes(), None)
            if before is not None:
                self.next_seq[before % self.capacity] = seq
            if waits[i]:
                self._pending[prefix + next_obs[i].tobytes()] = seq
        while len(self._pending) > self.max_pending:  # successors that will never come
            self._pending.popitem(last=False)


def nstep_rows(
    cols: dict[str, np.ndarray],
    links: TrajectoryLinks,
    slots: np.ndarray,
    oldest_seq: int,
    n: int,
    gamma: float,
) -> dict[str, np.ndarray]:
    """n-step versions of the rows at `slots` (see the module docstring)."""
    out = {name: col.take(slots, axis=0) for name, col in cols.items()}
    reward = out["reward"].astype(np.float64)
    steps = out["steps"].astype(np.int64)  # rows that are n-step already keep theirs
    going = ~out["done"] & (out["steps"] == 1)
    current = slots.copy()
    for k in range(1, n):
        nxt = links.next_seq[current]
        going &= nxt >= max(oldest_seq, 0)
        if not going.any():
            break
        step_slots = nxt[going] % links.capacity
        reward[going] += gamma**k * cols["reward"][step_slots]
        out["next_obs"][going] = cols["next_obs"][step_slots]
        out["done"][going] = cols["done"][step_slots]
        steps[going] += 1
        current[going] = step_slots
        going &= ~out["done"] & (cols["steps"].take(current) == 1)
    out["reward"] = reward.astype(np.float32)
    out["steps"] = steps.astype(np.uint8)
    return out
