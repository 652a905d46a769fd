"""The widths of the symmetric quantizers, without torch: the codec (actorq.quant.lowbit)
and fake quantization (actorq.models.fake_quant) share them, and an actor decoding a blob
must not import torch for them."""

from __future__ import annotations

MIN_BITS, MAX_BITS = 2, 8


def qmax_for_bits(bits: int) -> int:
    """Largest code of a symmetric `bits`-bit quantizer: 2**(bits-1) - 1 (the codec's
    widths, actorq.quant.lowbit, which imports it from here: models import nothing of
    actorq.quant, so the two packages hold no import cycle)."""
    if not isinstance(bits, int) or not MIN_BITS <= bits <= MAX_BITS:
        raise ValueError(f"bits must be an int in [{MIN_BITS}, {MAX_BITS}], got {bits!r}")
    return 2 ** (bits - 1) - 1
