"""Replay: storage, sampler and rate limiter as separate parts, plus Redis stream I/O.

A transition's path: actor -> `RedisReplayWriter.write` (XADD to the replay stream) ->
`RedisReplayReader.poll` (XREAD into the learner's `ReplayStorage`) ->
`Sampler.sample` -> `ReplayStorage.get` -> gradient step.

Samplers: `UniformSampler`, or `PrioritizedSampler` on a K-ary `SumTree` with lazy writing.
"""

from actorq.replay.batch import (
    FORMAT_VERSION,
    PRECISIONS,
    ReplayDecodeError,
    TransitionBatch,
    decode_batch,
    encode_batch,
)
from actorq.replay.rate_limiter import SampleToInsertRatio
from actorq.replay.redis_io import RedisReplayReader, RedisReplayWriter, read_inserted
from actorq.replay.sampler import Sampler, SampleResult, TerminalShareSampler, UniformSampler
from actorq.replay.storage import ReplayStorage

# The sum tree's kernels need numba (~1.5 s to import): only processes that sample with
# priorities load it, so actors and the uniform learner start without it.
_LAZY = {
    "PrioritizedSampler": "actorq.replay.prioritized",
    "SumTree": "actorq.replay.sumtree",
}


def __getattr__(name: str) -> object:
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'actorq.replay' has no attribute {name!r}")


__all__ = [
    "FORMAT_VERSION",
    "PRECISIONS",
    "PrioritizedSampler",
    "RedisReplayReader",
    "RedisReplayWriter",
    "ReplayDecodeError",
    "ReplayStorage",
    "SampleResult",
    "SampleToInsertRatio",
    "Sampler",
    "SumTree",
    "TerminalShareSampler",
    "TransitionBatch",
    "UniformSampler",
    "decode_batch",
    "encode_batch",
    "read_inserted",
]
