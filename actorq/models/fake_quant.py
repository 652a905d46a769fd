"""Fake quantization in torch: what a `bits`-bit broadcast does to a weight, differentiably.

Used by post-training quantization (evaluate a policy whose weights went through the
codec at 2..8 bits) and by quantization-aware training (the actor trains through the
rounding with a straight-through estimator, so low-bit actors keep their return). The
math is the codec's (actorq.quant.lowbit): symmetric, one scale per output channel.
"""

from __future__ import annotations

import torch

from actorq.models.qbits import MAX_BITS, MIN_BITS, qmax_for_bits  # noqa: F401  (re-exported)


def fake_quantize(weight: torch.Tensor, bits: int) -> torch.Tensor:
    """Per-output-channel symmetric quantize-dequantize of a 2-D weight.

    Forward: scale[c] * clip(round(w / scale[c]), -qmax, qmax) with
    scale[c] = max|w[c]| / qmax. Backward: the straight-through estimator, i.e. the
    gradient passes to `weight` unchanged (the scale is treated as a constant).
    """
    if weight.dim() != 2:
        raise ValueError(f"fake_quantize expects a 2-D weight, got shape {tuple(weight.shape)}")
    qmax = qmax_for_bits(bits)
    w = weight.detach()
    max_abs = w.abs().amax(dim=1, keepdim=True)
    scale = torch.where(max_abs > 0, max_abs / qmax, torch.ones_like(max_abs))
    quantized = torch.clamp(torch.round(w / scale), -qmax, qmax) * scale
    return weight + (quantized - w)  # value of `quantized`, gradient of `weight`
