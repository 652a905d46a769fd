"""Trajectory segments: T steps of one actor's B envs, packed as one Redis stream entry.

A segment holds, time-major, what an on-policy learner needs (actorq.algos.ppo):
obs [T, B, *obs_shape], action [T, B], reward, terminated, truncated, the behaviour
policy's log-probability of each action, the bootstrap observation after the last step
(last_obs [B, *obs_shape]) and, for steps cut by a time limit, the true final observation
(trunc_index: flat t * B + b indices, trunc_obs [K, *obs_shape]). Stamped with the actor,
the policy version and its precision, so the learner can measure lag and drop stale data.

Wire form: flat stream fields, raw little-endian arrays plus a few decimal header
fields; nothing pickled. Observation arrays may be compressed (`obs_codec`: "none" or
"zstd"): uint8 pixel observations compress well and dominate the bytes.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from actorq.obs_codec import CODECS, CodecError, check_codec, compress, decompress

FORMAT = b"seg1"
OBS_DTYPES = {"float32": np.dtype("<f4"), "uint8": np.dtype("u1")}
_OBS_FIELDS = ("obs", "last_obs", "trunc_obs")


class SegmentDecodeError(ValueError):
    """A stream entry that is not a well-formed segment."""


@dataclass
class TrajectorySegment:
    obs: np.ndarray
    action: np.ndarray
    reward: np.ndarray
    terminated: np.ndarray
    truncated: np.ndarray
    behaviour_logp: np.ndarray
    last_obs: np.ndarray
    trunc_index: np.ndarray
    trunc_obs: np.ndarray
    actor_id: str
    policy_version: int
    precision: str

    @property
    def steps(self) -> int:
        return int(self.action.size)

    def arrays(self) -> dict[str, np.ndarray]:
        return {k: getattr(self, k) for k in _ARRAY_DTYPES}


_ARRAY_DTYPES = {
    "obs": None,  # the segment's obs dtype
    "action": np.dtype("<i4"),
    "reward": np.dtype("<f4"),
    "terminated": np.dtype("u1"),
    "truncated": np.dtype("u1"),
    "behaviour_logp": np.dtype("<f4"),
    "last_obs": None,
    "trunc_index": np.dtype("<i4"),
    "trunc_obs": None,
}


def encode_segment(seg: TrajectorySegment, codec: str = "none") -> dict[bytes, bytes]:
    """Stream fields of one segment; `codec` compresses the observation arrays."""
    check_codec(codec)
    obs_dtype = next((n for n, d in OBS_DTYPES.items() if seg.obs.dtype == d), None)
    if obs_dtype is None:
        raise ValueError(f"obs dtype must be one of {list(OBS_DTYPES)}, got {seg.obs.dtype}")
    T, B = seg.action.shape
    fields = {
        b"format": FORMAT,
        b"actor": seg.actor_id.encode(),
        b"version": str(seg.policy_version).encode(),
        b"precision": seg.precision.encode(),
        b"shape": f"{T},{B}".encode(),
        b"obs_shape": ",".join(map(str, seg.obs.shape[2:])).encode(),
        b"obs_dtype": obs_dtype.encode(),
        b"obs_codec": codec.encode(),
        b"trunc": str(len(seg.trunc_index)).encode(),
    }
    for name, dtype in _ARRAY_DTYPES.items():
        value = np.ascontiguousarray(getattr(seg, name), dtype=dtype or OBS_DTYPES[obs_dtype])
        data = value.tobytes()
        fields[name.encode()] = compress(data, codec) if name in _OBS_FIELDS else data
    return fields


def decode_segment(fields: dict[bytes, bytes]) -> TrajectorySegment:
    """The segment in `fields`; SegmentDecodeError naming what is wrong."""
    try:
        if fields[b"format"] != FORMAT:
            raise SegmentDecodeError(f"segment format {fields[b'format']!r}, expected {FORMAT!r}")
        T, B = (int(x) for x in fields[b"shape"].split(b","))
        obs_shape = tuple(int(x) for x in fields[b"obs_shape"].split(b",") if x)
        obs_dtype = OBS_DTYPES[fields[b"obs_dtype"].decode()]
        codec = fields[b"obs_codec"].decode()
        trunc = int(fields[b"trunc"])
        header = (fields[b"actor"].decode(), int(fields[b"version"]), fields[b"precision"].decode())
    except (KeyError, ValueError) as err:
        raise SegmentDecodeError(f"segment header is malformed: {err!r}") from err
    if codec not in CODECS or T < 1 or B < 1 or not 0 <= trunc <= T * B:
        raise SegmentDecodeError(f"segment header out of range: codec {codec!r}, T {T}, B {B}")
    shapes = {
        "obs": (T, B, *obs_shape),
        "last_obs": (B, *obs_shape),
        "trunc_index": (trunc,),
        "trunc_obs": (trunc, *obs_shape),
    }
    arrays = {}
    for name, dtype in _ARRAY_DTYPES.items():
        dtype = dtype or obs_dtype
        shape = shapes.get(name, (T, B))
        size = int(np.prod(shape)) * dtype.itemsize
        data = fields.get(name.encode())
        if data is None:
            raise SegmentDecodeError(f"segment has no {name!r} field")
        if name in _OBS_FIELDS:
            try:
                data = decompress(data, codec, size)
            except CodecError as err:
                raise SegmentDecodeError(f"segment field {name!r}: {err}") from err
        if len(data) != size:
            raise SegmentDecodeError(f"segment field {name!r} has {len(data)} bytes, needs {size}")
        arrays[name] = np.frombuffer(data, dtype=dtype).reshape(shape)
    if trunc and (arrays["trunc_index"].min() < 0 or arrays["trunc_index"].max() >= T * B):
        raise SegmentDecodeError(f"segment trunc_index out of range 0..{T * B - 1}")
    return TrajectorySegment(**arrays, actor_id=header[0], policy_version=header[1],
                             precision=header[2])  # fmt: skip


def stack_segments(segments: list[TrajectorySegment]) -> dict[str, np.ndarray]:
    """One time-major batch [T, sum B] from segments of equal T (envs side by side)."""
    T = segments[0].action.shape[0]
    if any(s.action.shape[0] != T for s in segments):
        raise ValueError(f"segments differ in length: {[s.action.shape[0] for s in segments]}")
    out = {
        k: np.concatenate([getattr(s, k) for s in segments], axis=1)
        for k in ("obs", "action", "reward", "terminated", "truncated", "behaviour_logp")
    }
    out["last_obs"] = np.concatenate([s.last_obs for s in segments], axis=0)
    # Flat indices t * B + b move with each segment's column offset in the joint batch.
    total_b = out["action"].shape[1]
    index, trunc_obs, offset = [], [], 0
    for s in segments:
        b = s.action.shape[1]
        t, col = np.divmod(s.trunc_index.astype(np.int64), b)
        index.append(t * total_b + col + offset)
        trunc_obs.append(s.trunc_obs)
        offset += b
    out["trunc_index"] = np.concatenate(index)
    out["trunc_obs"] = np.concatenate(trunc_obs, axis=0)
    return out
