"""Compression of observation bytes on the wire ("none" or "zstd").

Shared by on-policy trajectory segments (actorq.onpolicy.segments) and pixel replay
batches (actorq.replay.batch, format "3"): uint8 frames are mostly zeros and repeats, so
zstd at level 1 shrinks a MinAtar observation ~17x for a fraction of a millisecond.
"""

from __future__ import annotations

import zstandard

CODECS = ("none", "zstd")


class CodecError(ValueError):
    """Bytes that do not decompress to the size the header declares."""


def check_codec(codec: str) -> None:
    if codec not in CODECS:
        raise ValueError(f"obs codec must be one of {CODECS}, got {codec!r}")


def compress(data: bytes, codec: str) -> bytes:
    check_codec(codec)
    if codec == "none":
        return data
    return zstandard.ZstdCompressor(level=1).compress(data)


def decompress(data: bytes, codec: str, size: int) -> bytes:
    """`data` decompressed; CodecError unless it is exactly `size` bytes.

    A zstd frame that declares another content size is refused before decompressing:
    zstandard honours the declared size over `max_output_size`, so a few bytes from the
    network could otherwise ask for gigabytes."""
    check_codec(codec)
    if codec == "none":
        return data
    try:
        declared = zstandard.frame_content_size(data)
        if declared not in (-1, size):
            raise CodecError(f"zstd frame declares {declared} bytes, expected {size}")
        return zstandard.ZstdDecompressor().decompress(data, max_output_size=size)
    except zstandard.ZstdError as err:
        raise CodecError(f"obs data does not decompress with {codec}: {err}") from err
