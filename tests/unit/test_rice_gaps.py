"""Golomb-Rice coded positions of sparse int8 layers (`Tensor.rice_gaps`): the documented
bit layout, bit-for-bit round trips, the writer's choice of form, and refusals."""

from __future__ import annotations

import math

import numpy as np
import pytest

from actorq.quant import BlobError
from actorq.quant.rice import (
    RICE_K_MAX,
    best_rice_k,
    decode_rice_gaps,
    encode_rice_gaps,
    rice_bits,
    rice_size,
)
from actorq.quant.sparse import (
    decode_sparse_int8,
    encode_bitmap,
    encode_sparse_int8,
    encode_varints,
    sparse_positions,
    varint_size,
)
from actorq.v1 import policy_pb2

FORMS = ("bitmap", "index_gaps", "rice_gaps")


def random_codes(shape: tuple[int, int], sparsity: float, seed: int = 0) -> np.ndarray:
    """int8 codes in [-127, 127] with exactly round(sparsity * size) zeros."""
    rng = np.random.default_rng(seed)
    codes = rng.integers(1, 128, size=shape) * rng.choice([-1, 1], size=shape)
    flat = codes.reshape(-1)
    flat[rng.permutation(flat.size)[: round(sparsity * flat.size)]] = 0
    return codes.astype(np.int8)


def gaps_of(codes: np.ndarray) -> np.ndarray:
    return np.diff(np.flatnonzero(codes.ravel()), prepend=-1) - 1


def rice_tensor(codes: np.ndarray, k: int | None = None) -> policy_pb2.Tensor:
    """The sparse tensor of `codes` with its positions forced into rice_gaps."""
    tensor = encode_sparse_int8("w", codes, np.ones(codes.shape[0], np.float32))
    gaps = gaps_of(codes)
    tensor.rice_gaps = encode_rice_gaps(gaps, best_rice_k(gaps) if k is None else k)
    return tensor


def edge_cases() -> list[np.ndarray]:
    one_at_end = np.zeros((300, 400), np.int8)
    one_at_end[-1, -1] = -127
    huge_gaps = np.zeros((1, 1_000_000), np.int8)
    huge_gaps[0, [0, 999_999]] = [5, 127]
    empty_rows = random_codes((16, 64), 0.7)
    empty_rows[[0, 5, 15]] = 0
    return [
        np.zeros((8, 8), np.int8),  # no codes at all
        one_at_end,
        huge_gaps,
        empty_rows,
        random_codes((1, 1), 0.0),
        random_codes((5, 7), 0.0),  # every gap 0
        random_codes((1, 1000), 0.999),
        random_codes((1000, 1), 0.99),
    ]


# --- the documented layout -------------------------------------------------------------


def test_the_worked_example_of_the_format_doc() -> None:
    """docs/BLOB_FORMAT.md section 3: positions 0, 6, 8 -> gaps 0, 5, 1 -> with k = 1 the
    low bits 0 1 1, then unary 1 | 001 | 1: stream bits 0111 0011 -> bytes 01 CE."""
    gaps = np.array([0, 5, 1])
    assert encode_rice_gaps(gaps, 1) == b"\x01\xce"
    np.testing.assert_array_equal(decode_rice_gaps(b"\x01\xce", 3, 9, "x"), gaps)
    assert encode_rice_gaps(gaps, 0) == b"\x00\x41\x01"  # k = 0: the bitmap, cut after its last 1
    assert encode_rice_gaps(np.zeros(0, np.int64), 3) == b"\x03"


def test_best_k_is_the_brute_force_minimum_and_sizes_are_exact() -> None:
    rng = np.random.default_rng(1)
    cases = [rng.geometric(p, size=n) - 1 for p in (0.5, 0.1, 0.01, 0.001) for n in (1, 7, 500)]
    cases += [
        np.zeros(0, np.int64),
        np.zeros(9, np.int64),
        np.array([2**40]),
        np.array([0] * 99 + [10**6]),
    ]
    for gaps in cases:
        bits = [rice_bits(gaps, k) for k in range(RICE_K_MAX + 1)]
        assert best_rice_k(gaps) == int(np.argmin(bits))  # argmin: the first of equal ones
        for k in (0, best_rice_k(gaps), RICE_K_MAX):
            if bits[k] < 10**7:  # k = 0 for a gap of 2**40 would be 2**40 unary bits
                assert len(encode_rice_gaps(gaps, k)) == rice_size(gaps, k)


# --- round trips ------------------------------------------------------------------------


@pytest.mark.parametrize("sparsity", [0.5, 0.7, 0.8, 0.9, 0.95, 0.98, 0.99])
@pytest.mark.parametrize("shape", [(1, 1), (3, 5), (17, 256), (256, 256), (64, 1000)])
def test_rice_positions_round_trip_bit_for_bit(sparsity: float, shape: tuple[int, int]) -> None:
    codes = random_codes(shape, sparsity, seed=shape[0] + shape[1])
    for k in {0, 1, best_rice_k(gaps_of(codes)), RICE_K_MAX}:  # any k in range decodes
        tensor = rice_tensor(codes, k)
        decoded = decode_sparse_int8(tensor, shape)
        assert decoded.dtype == np.int8 and decoded.tobytes() == codes.tobytes()
    auto = encode_sparse_int8("w", codes, np.ones(shape[0], np.float32))
    assert decode_sparse_int8(auto, shape).tobytes() == codes.tobytes()


@pytest.mark.parametrize("case", range(len(edge_cases())))
def test_edge_cases_round_trip_in_every_form(case: int) -> None:
    codes = edge_cases()[case]
    gaps = gaps_of(codes)
    forms = {
        "bitmap": encode_bitmap(codes != 0),
        "index_gaps": encode_varints(gaps),
        "rice_gaps": encode_rice_gaps(gaps, best_rice_k(gaps)),
    }
    for form, data in forms.items():
        tensor = encode_sparse_int8("w", codes, np.ones(codes.shape[0], np.float32))
        setattr(tensor, form, data)
        assert decode_sparse_int8(tensor, codes.shape).tobytes() == codes.tobytes(), form
    auto = encode_sparse_int8("w", codes, np.ones(codes.shape[0], np.float32))
    assert decode_sparse_int8(auto, codes.shape).tobytes() == codes.tobytes()


# --- the writer's choice ----------------------------------------------------------------


def form_sizes(codes: np.ndarray) -> dict[str, int]:
    gaps = gaps_of(codes)
    return {
        "bitmap": math.ceil(codes.size / 8),
        "index_gaps": varint_size(gaps),
        "rice_gaps": rice_size(gaps, best_rice_k(gaps)),
    }


def varint_friendly() -> np.ndarray:
    """Many adjacent codes then one far away: Rice must pick k for the far gap (or pay it
    in unary), varints pay 1 byte per code and 3 for the far one."""
    codes = np.zeros((1, 2_000_000), np.int8)
    codes[0, :1000] = 1
    codes[0, -1] = 1
    return codes


@pytest.mark.parametrize(
    ("codes", "expected"),
    [
        (random_codes((256, 256), 0.5), "bitmap"),
        (varint_friendly(), "index_gaps"),
        (random_codes((256, 256), 0.8), "rice_gaps"),
        (random_codes((256, 256), 0.9), "rice_gaps"),
        (random_codes((1024, 1024), 0.98), "rice_gaps"),
        (np.zeros((4, 4), np.int8), "index_gaps"),  # no codes: 0 varint bytes
    ],
)
def test_the_writer_stores_the_smallest_form(codes: np.ndarray, expected: str) -> None:
    tensor = encode_sparse_int8("w", codes, np.ones(codes.shape[0], np.float32))
    sizes = form_sizes(codes)
    assert tensor.WhichOneof("positions") == expected
    assert len(getattr(tensor, expected)) == sizes[expected] == min(sizes.values())


def test_ties_go_to_the_older_form() -> None:
    """Equal sizes keep what older writers stored (bitmap, then varints): one code at 0 of
    8 elements costs 1 byte as bitmap or varint, 2 as Rice; codes at 0 and 1 of 64 cost
    2 bytes as varints or Rice, 8 as bitmap. Only a strictly smaller stream is Rice."""
    first = np.zeros((1, 8), np.int8)
    first[0, 0] = 3
    assert form_sizes(first) == {"bitmap": 1, "index_gaps": 1, "rice_gaps": 2}
    assert encode_sparse_int8("w", first, np.ones(1, np.float32)).WhichOneof("positions") == (
        "bitmap"
    )
    pair = np.zeros((8, 8), np.int8)
    pair[0, :2] = 1
    assert form_sizes(pair) == {"bitmap": 8, "index_gaps": 2, "rice_gaps": 2}
    assert encode_sparse_int8("w", pair, np.ones(8, np.float32)).WhichOneof("positions") == (
        "index_gaps"
    )


# --- refusals ---------------------------------------------------------------------------

SHAPE = (33, 64)
CODES = random_codes(SHAPE, 0.9, seed=3)


def refused(tensor: policy_pb2.Tensor, pattern: str) -> None:
    with pytest.raises(BlobError, match=pattern):
        decode_sparse_int8(tensor, SHAPE)


def with_stream(data: bytes, codes: np.ndarray = CODES) -> policy_pb2.Tensor:
    tensor = rice_tensor(codes)
    tensor.rice_gaps = data
    return tensor


def stream(k: int | None = None) -> bytes:
    gaps = gaps_of(CODES)
    return encode_rice_gaps(gaps, best_rice_k(gaps) if k is None else k)


@pytest.mark.parametrize(
    ("data", "pattern"),
    [
        (b"", r"rice_gaps is empty"),
        (bytes([32]) + stream()[1:], r"Rice parameter k=32, outside \[0, 31\]"),
        (bytes([255]) + stream()[1:], r"k=255"),
        (stream()[:-1], r"holds \d+ positions for \d+ codes \(cut off"),
        (stream()[:3], r"is cut off: 16 bits, \d+ gaps need \d+ for low parts"),
        (stream() + b"\x00", r"has 1 bytes past its last gap"),
        (stream() + b"\x01", r"holds \d+ positions for \d+ codes"),
        (stream() + b"\x00" * 10_000, r"take at most \d+"),
        (bytes([0]) + b"\x00" * 200, r"holds 0 positions for \d+ codes"),
    ],
)
def test_broken_streams_are_refused(data: bytes, pattern: str) -> None:
    refused(with_stream(data), pattern)


def test_a_code_count_other_than_the_gap_count_is_refused() -> None:
    more = rice_tensor(CODES)
    more.data += b"\x01"
    refused(more, r"positions for \d+ codes")
    fewer = rice_tensor(CODES)
    fewer.data = fewer.data[:-1]
    refused(fewer, r"positions for \d+ codes")


def test_positions_past_the_end_are_refused() -> None:
    one = np.array([[0, 5]], np.int8)  # one code in 2 elements
    tensor = rice_tensor(one)
    tensor.rice_gaps = b"\x00\x80"  # k = 0, unary 0000000 1: a gap of 7
    with pytest.raises(BlobError, match=r"index gap of at least 7 in 2 elements"):
        decode_sparse_int8(tensor, (1, 2))
    tensor.rice_gaps = b"\x02\x06"  # k = 2, low bits 0 1, unary 1: a gap of 2
    with pytest.raises(BlobError, match=r"index gap of 2 in 2 elements"):
        decode_sparse_int8(tensor, (1, 2))
    count = int(np.count_nonzero(CODES))
    drift = np.full(count, 2111 // count + 1)  # each gap fits, their sum does not
    refused(with_stream(encode_rice_gaps(drift, 5)), r"position \d+ past 2112 elements")
    too_long = np.array([0] * (count - 1) + [math.prod(SHAPE)])  # more unary bits than valid
    refused(with_stream(encode_rice_gaps(too_long, 0)), r"take at most")


def test_random_corruption_is_refused_or_decodes_to_valid_positions() -> None:
    """Flip and cut the stream at random: the reader either raises BlobError or returns
    strictly increasing positions below the size, one per code (what the checks promise:
    corruption of the blob itself is the checksum's job)."""
    rng = np.random.default_rng(7)
    good = stream()
    size, count = math.prod(SHAPE), int(np.count_nonzero(CODES))
    for _ in range(600):
        data = bytearray(good)
        for i in rng.integers(0, len(data), size=rng.integers(1, 4)):
            data[i] ^= 1 << int(rng.integers(8))
        data = data[: rng.integers(len(data) - 2, len(data) + 1)]
        try:
            indices = sparse_positions(with_stream(bytes(data)), SHAPE)
        except BlobError:
            continue
        assert indices.size == count and (np.diff(indices) > 0).all()
        assert indices[0] >= 0 and indices[-1] < size
