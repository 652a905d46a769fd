"""Where the policy guard's probe observations come from: the newest entries of the replay
stream (off-policy runs) or of the trajectory stream (on-policy runs), read from Redis."""

from __future__ import annotations

import logging
from collections.abc import Callable

import numpy as np
import redis

from actorq.onpolicy.segments import SegmentDecodeError, decode_segment
from actorq.redis_keys import RedisKeys
from actorq.replay import ReplayDecodeError, decode_batch

log = logging.getLogger(__name__)

Probe = Callable[[int], np.ndarray | None]  # n -> up to n recent observations, or None


def replay_probe(client: redis.Redis, keys: RedisKeys) -> Probe:
    """Probe source: observations of the newest replay batches (XREVRANGE), newest first
    (float32 rows, or uint8 frames [n, C, H, W] of pixel replay, format "3")."""

    def decode(fields) -> np.ndarray | None:
        try:
            return decode_batch(fields).obs
        except ReplayDecodeError:
            return None

    return _stream_probe(client, keys.replay_stream, decode)


def segment_probe(client: redis.Redis, keys: RedisKeys) -> Probe:
    """Probe source for on-policy runs (PPO and kin write trajectory segments, no replay):
    the observations of the newest segments, [T, B, *obs] flattened to [T * B, *obs]."""

    def decode(fields) -> np.ndarray | None:
        try:
            obs = decode_segment(fields).obs
        except SegmentDecodeError:
            return None
        return obs.reshape(-1, *obs.shape[2:])

    return _stream_probe(client, keys.trajectory_stream, decode, count=2)  # segments are big


def _stream_probe(client: redis.Redis, stream: str, decode, count: int = 8) -> Probe:
    """n -> up to n observations of the newest `count` entries of `stream`, newest first;
    entries that do not decode, or whose observations differ in shape from the newest
    one's, are skipped; None when there are none."""

    def probe(n: int) -> np.ndarray | None:
        try:
            entries = client.xrevrange(stream, count=count)
        except redis.RedisError as exc:
            log.debug("no probe from %s: %s", stream, exc)
            return None
        parts, have = [], 0
        for _id, fields in entries:
            obs = decode(fields)
            if obs is None or (parts and obs.shape[1:] != parts[0].shape[1:]):
                continue
            parts.append(obs)
            have += len(obs)
            if have >= n:
                break
        return np.concatenate(parts)[:n] if parts else None

    return probe
