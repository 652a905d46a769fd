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
off-policy correction here, as in RLx2; `trace=True` hands out the intermediate steps so
the learner can weight the return by their truncated importance ratios
(actorq.learner.behaviour, ACTORQ_<ALGO>_IS_CORRECTION).
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
    trace: bool = False,
) -> dict[str, np.ndarray]:
    """n-step versions of the rows at `slots` (see the module docstring).

    `trace` adds the steps after the first, [n - 1, B] leading: `trace_obs`,
    `trace_action`, `trace_logp` (behaviour log-prob, NaN where unknown), `trace_valid`
    (the step is part of the return) and `trace_known` (its behaviour was recorded): what
    an importance correction of the intermediate actions needs (actorq.learner.behaviour)."""
    path, valid = trace_slots(cols, links, slots, oldest_seq, n)
    out = {name: col.take(slots, axis=0) for name, col in cols.items()}
    reward = out["reward"].astype(np.float64)
    steps = out["steps"].astype(np.int64)  # rows that are n-step already keep theirs
    for k in range(1, n):
        going = valid[k]
        if not going.any():
            break
        step_slots = path[k][going]
        reward[going] += gamma**k * cols["reward"][step_slots]
        out["next_obs"][going] = cols["next_obs"][step_slots]
        out["done"][going] = cols["done"][step_slots]
        steps[going] += 1
    out["reward"] = reward.astype(np.float32)
    out["steps"] = steps.astype(np.uint8)
    if trace:
        out |= _trace_columns(cols, path[1:], valid[1:])
    return out


def trace_slots(
    cols: dict[str, np.ndarray],
    links: TrajectoryLinks,
    slots: np.ndarray,
    oldest_seq: int,
    n: int,
) -> tuple[np.ndarray, np.ndarray]:
    """Each sampled row's path along its episode: slots [n, B] (step 0 = the row) and
    valid [n, B], whether step k exists and is part of the row's n-step return."""
    path = np.tile(slots, (n, 1))
    valid = np.zeros((n, len(slots)), np.bool_)
    valid[0] = True
    going = ~cols["done"].take(slots) & (cols["steps"].take(slots) == 1)
    current = slots.copy()
    for k in range(1, n):
        nxt = links.next_seq[current]
        going &= nxt >= max(oldest_seq, 0)
        if not going.any():
            break
        current = np.where(going, nxt % links.capacity, current)
        path[k], valid[k] = current, going
        going = going & ~cols["done"].take(current) & (cols["steps"].take(current) == 1)
    return path, valid


def _trace_columns(
    cols: dict[str, np.ndarray], path: np.ndarray, valid: np.ndarray
) -> dict[str, np.ndarray]:
    logp = cols["behaviour_logp"].take(path)
    return {
        "trace_obs": cols["obs"].take(path, axis=0),
        "trace_action": cols["action"].take(path, axis=0),
        "trace_logp": logp,
        "trace_valid": valid,
        "trace_known": cols["has_behaviour"].take(path) & ~np.isnan(logp),
    }
