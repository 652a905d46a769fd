"""Bulk decoding of replay stream entries: many XREAD entries -> one set of columns.

The plain path (`decode_batch` + `ReplayStorage.add`) costs tens of microseconds of Python
per entry, about 1 us per CartPole transition at 32 transitions per entry. Here a run of
entries that share one field layout is decoded column by column: each array field of
every entry is joined into one bytes object and read with one `np.frombuffer`, headers
are checked once per distinct value, and every check the plain path makes per entry
(lengths, finite values, done 0/1, precision, version, actor id) is made once per column.

The wire format is the one `actorq.replay.batch` documents (formats "1" and "2", flat
float32 observations); anything else (pixel "3" entries, an unknown layout, a run in
which any check fails) returns None and the caller decodes it entry by entry with the
plain path, which rejects exactly the bad entries. So the fast path only ever accepts
runs the plain path would accept whole, and stores the same rows in the same order
(tests/unit/test_replay_bulk.py compares them).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from operator import itemgetter

import numpy as np

from actorq.replay.batch import _DECIMAL, _MAX_VERSION, PRECISIONS

_F32 = np.dtype("<f4")
_I64 = np.dtype("<i8")
_PRECISIONS = frozenset(p.encode() for p in PRECISIONS)
_PIXEL_FIELDS = frozenset((b"obs_shape", b"obs_dtype", b"obs_codec"))
_REQUIRED = frozenset(
    (b"v", b"n", b"obs_dim", b"actor", b"version", b"precision", b"obs", b"action", b"reward",
     b"next_obs", b"done")
)  # fmt: skip

Columns = dict[str, "np.ndarray | int | float"]


class _Reject(Exception):
    """A run the bulk path does not take whole (the caller falls back to the plain path)."""


def layout_of(fields: object) -> tuple[bytes, ...] | None:
    """The field names of one raw entry (a flat [name, value, ...] list), or None when the
    entry is not a list of bytes pairs the bulk path can read."""
    if type(fields) is not list or len(fields) % 2:
        return None
    names = tuple(fields[0::2])
    return names if len(set(names)) == len(names) else None  # a repeated name: plain path


def decode_run(
    field_lists: Sequence[list[bytes]],
    layout: tuple[bytes, ...],
    obs_dim: int,
    act_dim: int,
) -> tuple[Columns, int] | None:
    """Decode entries that all have `layout` into storage columns and their row count.

    Returns None when the run must go the plain way: a layout or format the bulk path does
    not read, an obs_dim/act_dim other than the storage's (the plain path rejects and
    counts those), or any entry the plain path would reject.
    """
    if not set(layout) >= _REQUIRED or _PIXEL_FIELDS & set(layout):
        return None
    pos = {name: 2 * i + 1 for i, name in enumerate(layout)}
    try:
        return _decode(field_lists, pos, obs_dim, act_dim)
    except _Reject:
        return None


def _decode(
    lists: Sequence[list[bytes]], pos: dict[bytes, int], obs_dim: int, act_dim: int
) -> tuple[Columns, int]:
    m = len(lists)

    def column(name: bytes) -> list[bytes]:
        return list(map(itemgetter(pos[name]), lists))

    version_field = column(b"v")
    continuous = b"act_dim" in pos
    if version_field.count(b"2" if continuous else b"1") != m:
        raise _Reject
    _same(column(b"obs_dim"), obs_dim)
    if continuous:
        _same(column(b"act_dim"), act_dim)
    elif act_dim:
        raise _Reject
    n = _decimals(column(b"n"))
    if n.min() < 1:
        raise _Reject
    _check_text(column(b"actor"))
    if not set(column(b"precision")) <= _PRECISIONS:
        raise _Reject
    versions = _decimals(column(b"version"))
    rows = int(n.sum())
    width = act_dim or 1
    action_dtype = _F32 if continuous else _I64
    action = _array(column(b"action"), action_dtype, n * width)
    if continuous:
        action = action.reshape(rows, act_dim)
        _finite(action)
    cols: Columns = {
        "obs": _floats(column(b"obs"), n * obs_dim).reshape(rows, obs_dim),
        "action": action,
        "reward": _floats(column(b"reward"), n),
        "next_obs": _floats(column(b"next_obs"), n * obs_dim).reshape(rows, obs_dim),
        "done": _done(column(b"done"), n),
        "policy_version": np.repeat(versions, n),
    }
    cols["steps"] = _steps(column(b"steps"), n) if b"steps" in pos else 1
    cols |= _behaviour(column, pos, n, action)
    return cols, rows


def _same(values: list[bytes], expected: int) -> None:
    """Every entry's header says `expected` (obs_dim, act_dim)."""
    if values.count(str(expected).encode()) != len(values):
        raise _Reject


def _decimals(values: list[bytes]) -> np.ndarray:
    """ASCII decimals (as `batch._decimal` accepts them) as int64, parsing each distinct
    value once: a run's n and version take few values."""
    parsed: dict[bytes, int] = {}
    for text in set(values):
        if not _DECIMAL.fullmatch(text) or int(text) > _MAX_VERSION:
            raise _Reject
        parsed[text] = int(text)
    return np.fromiter(map(parsed.__getitem__, values), np.int64, len(values))


def _check_text(values: list[bytes]) -> None:
    """Actor ids: non-empty UTF-8, as `TransitionBatch` requires."""
    for text in set(values):
        try:
            text.decode("utf-8")
        except UnicodeDecodeError:
            raise _Reject from None
        if not text:
            raise _Reject


def _array(values: list[bytes], dtype: np.dtype, counts: np.ndarray) -> np.ndarray:
    """Join one array field of every entry; each entry's byte length must fit its n."""
    lengths = np.fromiter(map(len, values), np.int64, len(values))
    if not np.array_equal(lengths, counts * dtype.itemsize):
        raise _Reject
    return np.frombuffer(b"".join(values), dtype=dtype)


def _floats(values: list[bytes], counts: np.ndarray) -> np.ndarray:
    arr = _array(values, _F32, counts)
    _finite(arr)
    return arr


def _finite(arr: np.ndarray) -> None:
    # One float64 sum: NaN or infinity anywhere makes it non-finite (batch._all_finite).
    if not math.isfinite(np.add.reduce(arr.ravel(), dtype=np.float64)):
        raise _Reject


def _done(values: list[bytes], n: np.ndarray) -> np.ndarray:
    raw = b"".join(values)
    lengths = np.fromiter(map(len, values), np.int64, len(values))
    if not np.array_equal(lengths, n) or raw.translate(None, b"\x00\x01"):
        raise _Reject
    return np.frombuffer(raw, dtype=np.bool_)


def _steps(values: list[bytes], n: np.ndarray) -> np.ndarray:
    steps = _array(values, np.dtype(np.uint8), n)
    if steps.min() < 1:
        raise _Reject
    return steps


def _behaviour(column, pos: dict[bytes, int], n: np.ndarray, action: np.ndarray) -> Columns:
    """The behaviour columns, or the placeholders `ReplayStorage` stores without them."""
    if b"behaviour" not in pos:  # behaviour_logp alone is ignored, as by decode_batch
        return {"behaviour": 0, "behaviour_logp": np.nan, "has_behaviour": False}
    width = action.shape[1] if action.ndim == 2 else 1
    behaviour = _array(column(b"behaviour"), action.dtype, n * width).reshape(action.shape)
    if action.ndim == 2:
        _finite(behaviour)
    logp: np.ndarray | float = np.nan
    if b"behaviour_logp" in pos:
        logp = _array(column(b"behaviour_logp"), _F32, n)
        if np.isnan(logp).any() or (logp == np.inf).any():  # -inf is a valid log-prob
            raise _Reject
    return {"behaviour": behaviour, "behaviour_logp": logp, "has_behaviour": True}
