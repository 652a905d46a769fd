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
from actorq.replay.prioritized import PrioritizedSampler
from actorq.replay.rate_limiter import SampleToInsertRatio
from actorq.replay.redis_io import RedisReplayReader, RedisReplayWriter, read_inserted
from actorq.replay.sampler import Sampler, SampleResult, UniformSampler
from actorq.replay.storage import ReplayStorage
from actorq.replay.sumtree import SumTree

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
    "TransitionBatch",
    "UniformSampler",
    "decode_batch",
    "encode_batch",
    "read_inserted",
]
