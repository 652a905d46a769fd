"""TransitionBatch validation and its stream encoding."""

from __future__ import annotations

import contextlib

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from actorq.replay.batch import (
    PRECISIONS,
    ReplayDecodeError,
    TransitionBatch,
    decode_batch,
    encode_batch,
)


def make_batch(n: int = 4, obs_dim: int = 3, version: int = 7) -> TransitionBatch:
    rng = np.random.default_rng(0)
    return TransitionBatch(
        obs=rng.standard_normal((n, obs_dim), dtype=np.float32),
        action=rng.integers(0, 5, n, dtype=np.int64),
        reward=rng.standard_normal(n, dtype=np.float32),
        next_obs=rng.standard_normal((n, obs_dim), dtype=np.float32),
        done=rng.random(n) < 0.3,
        actor_id="actor-0",
        policy_version=version,
        precision="int8",
    )


def assert_same(a: TransitionBatch, b: TransitionBatch) -> None:
    for name in ("obs", "action", "reward", "next_obs", "done"):
        got, want = getattr(a, name), getattr(b, name)
        assert got.dtype == want.dtype and got.shape == want.shape, name
        np.testing.assert_array_equal(got, want, err_msg=name)
    assert (a.actor_id, a.policy_version, a.precision) == (
        b.actor_id,
        b.policy_version,
        b.precision,
    )


finite_f32 = st.floats(width=32, allow_nan=False, allow_infinity=False)


@st.composite
def batches(draw: st.DrawFn) -> TransitionBatch:
    n = draw(st.integers(1, 32))
    obs_dim = draw(st.integers(1, 8))
    f32 = np.float32
    return TransitionBatch(
        obs=draw(hnp.arrays(f32, (n, obs_dim), elements=finite_f32)),
        action=draw(hnp.arrays(np.int64, n)),
        reward=draw(hnp.arrays(f32, n, elements=finite_f32)),
        next_obs=draw(hnp.arrays(f32, (n, obs_dim), elements=finite_f32)),
        done=draw(hnp.arrays(np.bool_, n)),
        actor_id=draw(st.text(min_size=1, max_size=20)),
        policy_version=draw(st.integers(0, 2**63 - 1)),
        precision=draw(st.sampled_from(PRECISIONS)),
    )


@settings(deadline=None)
@given(batches())
def test_round_trip(batch: TransitionBatch) -> None:
    fields = encode_batch(batch)
    assert all(isinstance(v, bytes) for v in fields.values())
    assert_same(decode_batch(fields), batch)
    # Redis hands fields back with bytes keys
    assert_same(decode_batch({k.encode(): v for k, v in fields.items()}), batch)


def test_decoded_arrays_are_writable_copies() -> None:
    decoded = decode_batch(encode_batch(make_batch()))
    decoded.obs[0, 0] = 1.0  # must not raise (frombuffer views are read-only)


def test_header_is_ascii() -> None:
    fields = encode_batch(make_batch(n=5, obs_dim=2, version=3))
    assert fields["v"] == b"1"
    assert (fields["n"], fields["obs_dim"], fields["version"]) == (b"5", b"2", b"3")
    assert fields["precision"] == b"int8" and fields["actor"] == b"actor-0"
    assert len(fields["obs"]) == 5 * 2 * 4 and len(fields["done"]) == 5


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("obs", np.zeros((4, 3), np.float64)),
        ("obs", np.zeros(4, np.float32)),
        ("action", np.zeros(4, np.int32)),
        ("action", np.zeros(5, np.int64)),
        ("reward", np.zeros((4, 1), np.float32)),
        ("next_obs", np.zeros((4, 2), np.float32)),
        ("done", np.zeros(4, np.uint8)),
        ("reward", np.array([0, np.nan, 0, 0], np.float32)),
        ("obs", np.full((4, 3), np.inf, np.float32)),
        ("actor_id", ""),
        ("policy_version", -1),
        ("policy_version", True),
        ("policy_version", 2**63),
        ("precision", "int3"),
    ],
)
def test_invalid_batch_names_the_field(field: str, value: object) -> None:
    good = make_batch()
    kwargs = {k: getattr(good, k) for k in good.__dataclass_fields__}
    kwargs[field] = value
    with pytest.raises(ValueError, match=field):
        TransitionBatch(**kwargs)


def test_numpy_integer_version_becomes_int() -> None:
    batch = make_batch()
    batch = TransitionBatch(**{**vars(batch), "policy_version": np.int64(9)})
    assert type(batch.policy_version) is int and batch.policy_version == 9


def test_empty_batch_rejected() -> None:
    with pytest.raises(ValueError, match="obs"):
        make_batch(n=0)


def corrupt(fields: dict[str, bytes] | None = None, /, **changes: bytes | None) -> dict:
    """`fields` (default: an encoded make_batch()) with fields replaced (None: deleted)."""
    fields = encode_batch(make_batch()) if fields is None else fields
    for name, value in changes.items():
        if value is None:
            del fields[name]
        else:
            fields[name] = value
    return fields


GOOD = encode_batch(make_batch())


@pytest.mark.parametrize(
    ("fields", "reason"),
    [
        *[(corrupt(**{name: None}), "missing_field") for name in GOOD],
        *[
            (corrupt(**{name: GOOD[name][:-1]}), "bad_length")
            for name in ("obs", "action", "reward", "next_obs", "done")
        ],
        (corrupt(obs=GOOD["obs"] + b"\0\0\0\0"), "bad_length"),
        (corrupt(n=b"5"), "bad_length"),
        (corrupt(n=b"3"), "bad_length"),
        (corrupt(obs_dim=b"4"), "bad_length"),
        (corrupt(n=b"0"), "bad_header"),
        (corrupt(n=b"-4"), "bad_header"),
        (corrupt(n=b" 4"), "bad_header"),
        (corrupt(n=b"4.0"), "bad_header"),
        (corrupt(n=b"1_0"), "bad_header"),
        (corrupt(n=b"9" * 40), "bad_header"),
        (corrupt(version=b"x"), "bad_header"),
        (corrupt(version=b"99999999999999999999"[:19]), "invalid_batch"),
        (corrupt(v=b"4"), "unsupported_version"),
        (corrupt(v=b"3"), "missing_field"),  # a flat entry labelled pixels: no obs_shape
        (corrupt(done=b"\x00\x01\x02\x00"), "bad_value"),
        (corrupt(reward=np.array([1, np.nan, 0, 0], "<f4").tobytes()), "invalid_batch"),
        (corrupt(precision=b"int3"), "invalid_batch"),
        (corrupt(actor=b""), "invalid_batch"),
        (corrupt(actor=b"\xff\xfe"), "bad_header"),
    ],
)
def test_malformed_entries_rejected(fields: dict[str, bytes], reason: str) -> None:
    with pytest.raises(ReplayDecodeError) as info:
        decode_batch(fields)
    assert info.value.reason == reason


def test_extra_fields_are_ignored() -> None:
    fields = {**GOOD, "future": b"whatever"}
    assert_same(decode_batch(fields), make_batch())


@settings(deadline=None)
@given(st.sampled_from(sorted(GOOD)), st.binary(max_size=64))
def test_any_single_field_garbage_is_a_decode_error_or_valid(name: str, junk: bytes) -> None:
    with contextlib.suppress(ReplayDecodeError):
        decode_batch({**GOOD, name: junk})
