"""A batch of transitions and its Redis stream encoding.

Actors push one `TransitionBatch` per XADD; the learner decodes it back. The wire format is
a flat map of stream fields: small ASCII header fields plus raw little-endian numpy bytes,
so any language can read it and nothing is ever unpickled.

Fields of format version "1":

=========  =====================================================================
v          format version, ASCII "1"
n          number of transitions N, ASCII decimal (>= 1)
obs_dim    observation size D, ASCII decimal (>= 1)
actor      actor id, UTF-8
version    policy version that chose the actions, ASCII decimal (>= 0)
precision  precision of that policy: "fp32", "fp16", "int8" or "int4"
obs        N*D float32 little-endian, row-major
action     N int64 little-endian
reward     N float32 little-endian
next_obs   N*D float32 little-endian, row-major
done       N bytes, 0 or 1 (1 only on termination, never on truncation)
=========  =====================================================================

Format version "2" carries continuous actions (DDPG, TD3, SAC, D4PG). It has every field
of "1" except that `action` changes, plus two fields:

=========  =====================================================================
act_dim    action size A, ASCII decimal (>= 1)
action     N*A float32 little-endian, row-major, each in [-1, 1]
steps      optional: N bytes, the n-step length of each transition (1..255); absent
           means all 1. reward is then the discounted n-step reward sum and next_obs
           the observation n steps later (see actorq.actor.nstep)
=========  =====================================================================

Format version "3" carries uint8 pixel observations (DQN on minatar:/ale: envs). It has
every field of "1" (`obs_dim` = C*H*W) except that `obs` and `next_obs` change, plus
three fields that say so explicitly:

=========  =====================================================================
obs_shape  "C,H,W", ASCII decimals (each >= 1, product = obs_dim)
obs_dtype  "uint8" (the only pixel dtype)
obs_codec  "none" or "zstd" (actorq.obs_codec)
obs        N*C*H*W uint8, row-major, compressed whole with obs_codec
next_obs   the same for the next observations
=========  =====================================================================

Measured on batches of 32 random-play minatar:breakout transitions: 30 bytes per
transition with zstd, 816 uncompressed, 3,213 as float32 "1".
Decompressed observation fields are limited to MAX_OBS_FIELD_BYTES.

Every format may carry two more optional fields, what the behaviour policy itself did
before exploration (`actorq.learner.behaviour` measures the behaviour-vs-learner gap and
the n-step importance correction with them):

===============  ===============================================================
behaviour        N int64 (formats "1", "3": the acting policy's greedy action) or
                 N*A float32 row-major (format "2": its action before noise, in
                 [-1, 1]); for an n-step transition, that of its first step
behaviour_logp   N float32 (never NaN or +inf): log mu(a|s) of the taken action
                 under the distribution it was drawn from (epsilon-greedy with the
                 env's epsilon, the clipped Gaussian around `behaviour`, or the
                 uniform warm-up); read only with `behaviour`, absent where that
                 distribution is not known (OU noise)
===============  ===============================================================

Readers that do not know them ignore them; an entry without them decodes as before (the
learner counts its rows as not measured).

Discrete batches with flat observations are still written as "1", byte for byte as
before (n-step DQN adds the same optional `steps` field, which older readers ignore), so
older readers keep working on them; an older reader refuses a "2" entry as an unsupported
version rather than misreading float actions as integers (and a "3" entry rather than
misreading compressed pixels as float32).
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from actorq.obs_codec import CODECS, CodecError, check_codec, compress, decompress
from actorq.replay.batch_checks import (
    _all_finite,
    _check_action,
    _check_array,
    _check_behaviour,
    _check_obs,
)

FORMAT_VERSION = "1"
CONTINUOUS_FORMAT_VERSION = "2"
PIXEL_FORMAT_VERSION = "3"  # uint8 pixel observations, optionally compressed
_VERSIONS = (FORMAT_VERSION.encode(), CONTINUOUS_FORMAT_VERSION.encode(), b"3")
MAX_OBS_FIELD_BYTES = 1 << 28
"""Largest decompressed obs / next_obs field of a pixel entry (256 MiB: 9,000 Atari
frame stacks), checked before decompressing."""
PRECISIONS = ("fp32", "fp16", "int8", "int4")

_F32 = np.dtype("<f4")
_I64 = np.dtype("<i8")
_U8 = np.dtype("u1")
_HEADER_FIELDS = ("v", "n", "obs_dim", "actor", "version", "precision")
_ARRAY_FIELDS = ("obs", "action", "reward", "next_obs", "done")
_REQUIRED_FIELDS = (*_HEADER_FIELDS, *_ARRAY_FIELDS)
_DECIMAL = re.compile(rb"[0-9]{1,19}")
_MAX_VERSION = 2**63 - 1  # stored as int64


class ReplayDecodeError(ValueError):
    """A stream entry that is not a valid transition batch.

    `reason` is a short, stable category (for counting and log-once); the message has the
    details.
    """

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


@dataclass(eq=False)
class TransitionBatch:
    """N transitions from one actor, all chosen by the same policy version.

    `done` is true only when the episode terminated, not when it was truncated, so the
    learner still bootstraps from `next_obs` on truncated steps. Observations are float32
    [N, obs_dim] or uint8 pixels [N, C, H, W] (discrete actions only, format "3").
    Actions are int64 [N] (discrete) or float32 [N, act_dim] (continuous); `steps`
    (uint8 [N], optional) holds n-step lengths when transitions span more than one env step;
    `behaviour` (like `action`) and `behaviour_logp` (float32 [N]), both optional, what the
    acting policy chose before exploration and log mu(a|s) of the taken action.
    """

    obs: np.ndarray  # float32 [N, obs_dim] or uint8 [N, C, H, W]
    action: np.ndarray  # int64 [N] or float32 [N, act_dim]
    reward: np.ndarray  # float32 [N]
    next_obs: np.ndarray  # like obs
    done: np.ndarray  # bool [N]
    actor_id: str
    policy_version: int
    precision: str = "fp32"
    steps: np.ndarray | None = None  # uint8 [N], n-step lengths >= 1; None = all 1
    behaviour: np.ndarray | None = None  # like action: the policy's own, before exploration
    behaviour_logp: np.ndarray | None = None  # float32 [N], log mu(a|s); needs behaviour

    def __post_init__(self) -> None:
        n = _check_obs("obs", self.obs)
        _check_action(self.action, n)
        _check_behaviour(self.behaviour, self.behaviour_logp, self.action)
        if self.steps is not None:
            _check_array("steps", self.steps, np.dtype(np.uint8), (n,))
            if n and self.steps.min() < 1:
                raise ValueError("steps must be >= 1")
        _check_array("reward", self.reward, np.dtype(np.float32), (n,))
        _check_array("next_obs", self.next_obs, self.obs.dtype, self.obs.shape)
        _check_array("done", self.done, np.dtype(np.bool_), (n,))
        if self.pixels and self.continuous:
            raise ValueError("pixel observations are stored with discrete actions only")
        floats = () if self.pixels else ("obs", "next_obs")  # uint8 is always finite
        for name in ("reward", *floats, *(("action",) if self.continuous else ())):
            if not _all_finite(getattr(self, name)):
                raise ValueError(f"{name} contains NaN or infinity")
        _check_meta(self.actor_id, self.policy_version, self.precision)
        self.policy_version = int(self.policy_version)  # a numpy integer becomes a plain int

    def __len__(self) -> int:
        return int(self.obs.shape[0])

    @property
    def obs_dim(self) -> int:
        return math.prod(self.obs_shape)

    @property
    def obs_shape(self) -> tuple[int, ...]:
        """One observation's shape: (obs_dim,) or (C, H, W) for pixels."""
        return tuple(int(d) for d in self.obs.shape[1:])

    @property
    def pixels(self) -> bool:
        return self.obs.dtype == np.uint8

    @property
    def continuous(self) -> bool:
        return self.action.dtype == np.float32

    @property
    def act_dim(self) -> int:
        """Action dimensions of a continuous batch; 0 for a discrete one."""
        return int(self.action.shape[1]) if self.continuous else 0


def _check_meta(actor_id: object, policy_version: object, precision: object) -> None:
    if not isinstance(actor_id, str) or not actor_id:
        raise ValueError(f"actor_id must be a non-empty str, got {actor_id!r}")
    is_integer = isinstance(policy_version, int | np.integer)
    valid_version = is_integer and not isinstance(policy_version, bool)
    if not valid_version or not 0 <= policy_version <= _MAX_VERSION:  # type: ignore[operator]
        raise ValueError(f"policy_version must be an int in [0, 2**63), got {policy_version!r}")
    if precision not in PRECISIONS:
        raise ValueError(f"precision must be one of {PRECISIONS}, got {precision!r}")


def encode_batch(batch: TransitionBatch, obs_codec: str = "none") -> dict[str, bytes]:
    """Encode a batch as Redis stream fields (see the module docstring for the format).

    `obs_codec` compresses pixel observations (format "3"); flat float observations are
    always raw: they compress poorly and older readers expect them so."""
    check_codec(obs_codec)
    fields = {
        "v": _format_version(batch).encode(),
        "n": str(len(batch)).encode(),
        "obs_dim": str(batch.obs_dim).encode(),
    }
    if batch.continuous:
        fields["act_dim"] = str(batch.act_dim).encode()
    fields |= {
        "actor": batch.actor_id.encode("utf-8"),
        "version": str(batch.policy_version).encode(),
        "precision": batch.precision.encode(),
    }
    if batch.pixels:
        fields |= {
            "obs_shape": ",".join(map(str, batch.obs_shape)).encode(),
            "obs_dtype": b"uint8",
            "obs_codec": obs_codec.encode(),
        }
    action = batch.action.astype(_F32 if batch.continuous else _I64, copy=False)
    fields |= {
        "obs": _obs_bytes(batch.obs, obs_codec),
        "action": action.tobytes(order="C"),
        "reward": batch.reward.astype(_F32, copy=False).tobytes(),
        "next_obs": _obs_bytes(batch.next_obs, obs_codec),
        "done": batch.done.astype(_U8).tobytes(),
    }
    if batch.steps is not None:  # n-step transitions; readers without it ignore the field
        fields["steps"] = batch.steps.astype(_U8, copy=False).tobytes()
    if batch.behaviour is not None:  # optional as well: older readers ignore both
        fields["behaviour"] = batch.behaviour.astype(action.dtype, copy=False).tobytes("C")
        if batch.behaviour_logp is not None:
            fields["behaviour_logp"] = batch.behaviour_logp.astype(_F32, copy=False).tobytes()
    return fields


def _format_version(batch: TransitionBatch) -> str:
    if batch.pixels:
        return PIXEL_FORMAT_VERSION
    return CONTINUOUS_FORMAT_VERSION if batch.continuous else FORMAT_VERSION


def _obs_bytes(obs: np.ndarray, codec: str) -> bytes:
    if obs.dtype == np.uint8:
        return compress(np.ascontiguousarray(obs).tobytes(), codec)
    return obs.astype(_F32, copy=False).tobytes(order="C")


def decode_batch(fields: Mapping[bytes, bytes] | Mapping[str, bytes]) -> TransitionBatch:
    """Decode stream fields written by `encode_batch`.

    Raises `ReplayDecodeError` for anything malformed: a missing field, an unknown format
    version, a bad number, a byte length that does not match the header, a done flag other
    than 0/1, or values the batch itself rejects (NaN, unknown precision). Extra fields are
    ignored so later writers can add some without breaking older readers.
    """
    f = _normalize_keys(fields)
    if f["v"] not in _VERSIONS:
        raise ReplayDecodeError("unsupported_version", f"unsupported format version {f['v']!r}")
    n, obs_dim = _decimal(f, "n"), _decimal(f, "obs_dim")
    if n < 1 or obs_dim < 1:
        raise ReplayDecodeError("bad_header", f"n and obs_dim must be >= 1, got {n}, {obs_dim}")
    action, steps = _actions(f, n)
    shape, codec = _obs_header(f, n, obs_dim)
    try:
        batch = TransitionBatch(
            obs=_observations(f, "obs", n, shape, codec),
            action=action,
            reward=_array(f, "reward", _F32, n),
            next_obs=_observations(f, "next_obs", n, shape, codec),
            done=_done(f, n),
            actor_id=_text(f, "actor"),
            policy_version=_decimal(f, "version"),
            precision=_text(f, "precision"),
            steps=steps,
            **_behaviour(f, action),
        )
    except ReplayDecodeError:
        raise
    except ValueError as exc:
        raise ReplayDecodeError("invalid_batch", str(exc)) from exc
    return batch


def _obs_header(f: dict[str, bytes], n: int, obs_dim: int) -> tuple[tuple[int, ...], str]:
    """One observation's shape and the obs codec: ((obs_dim,), "") for flat float32
    entries, ((C, H, W), codec) for a pixel entry ("3")."""
    if f["v"] != PIXEL_FORMAT_VERSION.encode():
        return (obs_dim,), ""
    missing = [k for k in ("obs_shape", "obs_dtype", "obs_codec") if type(f.get(k)) is not bytes]
    if missing:
        raise ReplayDecodeError("missing_field", f"format 3 entry without {missing}")
    shape_text = f["obs_shape"].split(b",")
    if len(shape_text) != 3 or not all(_DECIMAL.fullmatch(d) for d in shape_text):
        raise ReplayDecodeError("bad_header", f"obs_shape must be C,H,W: {f['obs_shape'][:32]!r}")
    shape = tuple(int(d) for d in shape_text)
    codec = f["obs_codec"].decode("ascii", "replace")
    if min(shape) < 1 or math.prod(shape) != obs_dim or f["obs_dtype"] != b"uint8":
        raise ReplayDecodeError(
            "bad_header", f"obs_shape {shape} / obs_dtype {f['obs_dtype'][:16]!r} do not fit "
            f"obs_dim {obs_dim} and uint8"
        )  # fmt: skip
    if codec not in CODECS or n * obs_dim > MAX_OBS_FIELD_BYTES:
        raise ReplayDecodeError("bad_header", f"obs_codec {codec!r} or {n} x {obs_dim} bytes")
    return shape, codec


def _observations(
    f: dict[str, bytes], name: str, n: int, shape: tuple[int, ...], codec: str
) -> np.ndarray:
    """obs or next_obs: float32 [N, obs_dim], or uint8 [N, C, H, W] decompressed."""
    if not codec:
        return _array(f, name, _F32, n * shape[0]).reshape(n, *shape)
    size = n * math.prod(shape)
    try:
        raw = decompress(f[name], codec, size)
    except CodecError as exc:
        raise ReplayDecodeError("bad_obs_data", f"field {name!r}: {exc}") from exc
    if len(raw) != size:
        raise ReplayDecodeError("bad_length", f"field {name!r} has {len(raw)} bytes, need {size}")
    return np.frombuffer(raw, dtype=_U8).reshape(n, *shape).copy()


def _actions(f: dict[str, bytes], n: int) -> tuple[np.ndarray, np.ndarray | None]:
    """Actions (and n-step lengths) of a "1" or "3" (int64) or "2" (float32 [N, A]) entry."""
    if f["v"] != CONTINUOUS_FORMAT_VERSION.encode():
        return _array(f, "action", _I64, n), _steps(f, n)
    if "act_dim" not in f or type(f["act_dim"]) is not bytes:
        raise ReplayDecodeError("missing_field", "format 2 entry without an act_dim field")
    act_dim = _decimal(f, "act_dim")
    if act_dim < 1:
        raise ReplayDecodeError("bad_header", f"act_dim must be >= 1, got {act_dim}")
    action = _array(f, "action", _F32, n * act_dim).reshape(n, act_dim)
    return action, _steps(f, n)


def _steps(f: dict[str, bytes], n: int) -> np.ndarray | None:
    """The optional n-step lengths (one byte per transition); None when absent (all 1)."""
    if "steps" not in f:
        return None
    raw = f["steps"]
    if type(raw) is not bytes or len(raw) != n:
        raise ReplayDecodeError("bad_length", f"field 'steps' must be {n} bytes")
    return np.frombuffer(raw, dtype=np.uint8).copy()


def _behaviour(f: dict[str, bytes], action: np.ndarray) -> dict[str, np.ndarray | None]:
    """The optional behaviour fields, shaped like the entry's actions; absent -> None."""
    if "behaviour" not in f:
        return {"behaviour": None, "behaviour_logp": None}
    dtype = _F32 if action.dtype == np.float32 else _I64
    for name in ("behaviour", "behaviour_logp"):
        if name in f and type(f[name]) is not bytes:
            raise ReplayDecodeError("bad_value", f"field {name!r} is not bytes")
    behaviour = _array(f, "behaviour", dtype, action.size).reshape(action.shape)
    n = len(action)
    logp = _array(f, "behaviour_logp", _F32, n) if "behaviour_logp" in f else None
    return {"behaviour": behaviour, "behaviour_logp": logp}


def _normalize_keys(fields: Mapping[bytes, bytes] | Mapping[str, bytes]) -> dict[str, bytes]:
    """Map field names to str and check that every required field is present as bytes."""
    out = {
        (k.decode("ascii", "replace") if isinstance(k, bytes) else str(k)): v
        for k, v in fields.items()
    }
    missing = [k for k in _REQUIRED_FIELDS if k not in out]
    if missing:
        raise ReplayDecodeError("missing_field", f"missing fields {missing}")
    wrong = [k for k in _REQUIRED_FIELDS if type(out[k]) is not bytes]
    if wrong:
        raise ReplayDecodeError("bad_value", f"fields {wrong} are not bytes")
    return out


def _decimal(f: dict[str, bytes], name: str) -> int:
    if not _DECIMAL.fullmatch(f[name]):
        raise ReplayDecodeError("bad_header", f"field {name!r} is not a decimal: {f[name][:32]!r}")
    return int(f[name])


def _text(f: dict[str, bytes], name: str) -> str:
    try:
        return f[name].decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ReplayDecodeError("bad_header", f"field {name!r} is not UTF-8") from exc


def _array(f: dict[str, bytes], name: str, dtype: np.dtype, count: int) -> np.ndarray:
    """Decode a raw array field into a fresh, writable, native-endian array."""
    raw = f[name]
    if len(raw) != count * dtype.itemsize:
        raise ReplayDecodeError(
            "bad_length", f"field {name!r} has {len(raw)} bytes, expected {count * dtype.itemsize}"
        )
    return np.frombuffer(raw, dtype=dtype).astype(dtype.newbyteorder("="))


def _done(f: dict[str, bytes], n: int) -> np.ndarray:
    raw = f["done"]
    if len(raw) != n:
        raise ReplayDecodeError("bad_length", f"field 'done' has {len(raw)} bytes, expected {n}")
    if raw.translate(None, b"\x00\x01"):  # anything left is neither 0 nor 1
        raise ReplayDecodeError("bad_value", "field 'done' has bytes other than 0 and 1")
    return np.frombuffer(raw, dtype=np.bool_).copy()
