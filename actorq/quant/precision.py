"""Names of broadcast precisions, mapped onto the wire enum `actorq.v1.Precision`."""

from __future__ import annotations

from actorq.v1 import policy_pb2

_BY_NAME: dict[str, int] = {
    "fp32": policy_pb2.PRECISION_FP32,
    "fp16": policy_pb2.PRECISION_FP16,
    "int8": policy_pb2.PRECISION_INT8,
    "int4": policy_pb2.PRECISION_INT4,
}
_BY_VALUE: dict[int, str] = {value: name for name, value in _BY_NAME.items()}

PRECISION_NAMES: tuple[str, ...] = tuple(_BY_NAME)
"""Accepted precision names, as used in configs and metric labels."""


def parse_precision(name: str) -> int:
    """Map "fp32" / "fp16" / "int8" / "int4" (any case, surrounding spaces ignored) to the enum."""
    key = name.strip().lower() if isinstance(name, str) else name
    try:
        return _BY_NAME[key]
    except (KeyError, TypeError):
        raise ValueError(
            f"unknown precision {name!r}; expected one of {', '.join(PRECISION_NAMES)}"
        ) from None


def precision_name(precision: int) -> str:
    """Short name ("fp32", "fp16", "int8", "int4") of a Precision enum value."""
    try:
        return _BY_VALUE[precision]
    except (KeyError, TypeError):
        raise ValueError(
            f"unknown precision value {precision!r}; expected one of "
            f"{', '.join(f'{v} ({n})' for v, n in _BY_VALUE.items())}"
        ) from None
