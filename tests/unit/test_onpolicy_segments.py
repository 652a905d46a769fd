"""Trajectory segments: wire round trip (raw and zstd), joint batches, malformed entries."""

from __future__ import annotations

import numpy as np
import pytest

from actorq.onpolicy.segments import (
    SegmentDecodeError,
    TrajectorySegment,
    decode_segment,
    encode_segment,
    stack_segments,
)


def segment(
    T=4, B=3, obs_shape=(2,), dtype=np.float32, seed=0, trunc=((1, 2),)
) -> TrajectorySegment:
    rng = np.random.default_rng(seed)
    obs = (rng.integers(0, 255, (T, B, *obs_shape)) if dtype == np.uint8
           else rng.normal(size=(T, B, *obs_shape))).astype(dtype)  # fmt: skip
    truncated = np.zeros((T, B), np.uint8)
    for t, b in trunc:
        truncated[t, b] = 1
    return TrajectorySegment(
        obs=obs, action=rng.integers(0, 4, (T, B)).astype(np.int32),
        reward=rng.normal(size=(T, B)).astype(np.float32),
        terminated=np.zeros((T, B), np.uint8), truncated=truncated,
        behaviour_logp=-rng.random((T, B)).astype(np.float32),
        last_obs=obs[-1].copy(),
        trunc_index=np.array([t * B + b for t, b in trunc], np.int32),
        trunc_obs=obs[[t for t, _ in trunc], [b for _, b in trunc]].copy(),
        actor_id="actor-1", policy_version=7, precision="int8",
    )  # fmt: skip


@pytest.mark.parametrize("codec", ["none", "zstd"])
@pytest.mark.parametrize("dtype,shape", [(np.float32, (2,)), (np.uint8, (10, 10, 4))])
def test_round_trip(codec: str, dtype, shape) -> None:
    seg = segment(obs_shape=shape, dtype=dtype)
    back = decode_segment(encode_segment(seg, codec))
    for name, value in seg.arrays().items():
        np.testing.assert_array_equal(getattr(back, name), value)
    assert (back.actor_id, back.policy_version, back.precision) == ("actor-1", 7, "int8")


def test_zstd_shrinks_sparse_pixels() -> None:
    seg = segment(obs_shape=(10, 10, 4), dtype=np.uint8)
    seg.obs[:] = 0
    seg.obs[:, :, 3, 3, 1] = 1  # MinAtar-like: a few set cells
    raw, packed = (len(encode_segment(seg, c)[b"obs"]) for c in ("none", "zstd"))
    assert raw == seg.obs.nbytes
    assert packed < raw / 10


def test_stack_moves_truncation_indices_to_the_joint_columns() -> None:
    a, b = segment(B=3, seed=1, trunc=((1, 2),)), segment(B=2, seed=2, trunc=((3, 0),))
    batch = stack_segments([a, b])
    assert batch["obs"].shape == (4, 5, 2)
    # a's (t=1, b=2) -> 1*5+2; b's (t=3, b=0) sits in column 3 -> 3*5+3.
    assert batch["trunc_index"].tolist() == [7, 18]
    flat = batch["obs"].reshape(20, 2)
    np.testing.assert_array_equal(batch["trunc_obs"], flat[[7, 18]])


def test_malformed_entries_are_named() -> None:
    fields = encode_segment(segment())
    with pytest.raises(SegmentDecodeError, match="reward"):
        decode_segment({**fields, b"reward": fields[b"reward"][:-4]})
    with pytest.raises(SegmentDecodeError, match="header"):
        decode_segment({k: v for k, v in fields.items() if k != b"shape"})
    with pytest.raises(SegmentDecodeError, match="trunc_index"):
        decode_segment({**fields, b"trunc_index": np.array([99], "<i4").tobytes()})


def test_segments_beyond_the_lag_limit_are_split_off() -> None:
    from actorq.learner.onpolicy_loop import split_stale

    segs = [segment(seed=i) for i in range(3)]
    for seg, version in zip(segs, (10, 7, 6), strict=True):
        seg.policy_version = version
    fresh, stale = split_stale(segs, version=10, max_lag=3)
    assert [s.policy_version for s in fresh] == [10, 7]
    assert [s.policy_version for s in stale] == [6]
