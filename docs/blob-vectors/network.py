"""The policy network of docs/BLOB_FORMAT.md sections 2 and 3, in numpy float32, over a
`reader.Policy`'s dequantized weights: what an FP32 reader runs. No actorq code.

    actions = forward(read_blob(envelope), obs)
"""

from __future__ import annotations

import numpy as np


def forward(policy, obs: np.ndarray) -> np.ndarray:
    """The network in float32 over dequantized weights (what an FP32 reader runs)."""
    t = {n: x.values for n, x in policy.tensors.items()}
    spec = policy.spec
    if spec["kind"] == "cnn":
        x = obs.astype(np.float32) * np.float32(spec["input_scale"])
        for i, (_, _, stride) in enumerate(spec["conv"]):
            x = np.maximum(
                _conv2d(x, t[f"convs.{2 * i}.weight"], stride)
                + t[f"convs.{2 * i}.bias"][None, :, None, None],
                0,
            )
        x, prefix = x.reshape(x.shape[0], -1), "head"  # flatten (C, H, W) row-major
    else:
        x, prefix = obs.astype(np.float32), "layers"
        if spec["input_norm"]:
            x = (x - t["input_norm.shift"]) * t["input_norm.scale"]
    layers = len(spec["hidden"]) + 1
    for j in range(layers):
        x = x @ t[f"{prefix}.{2 * j}.weight"].T + t[f"{prefix}.{2 * j}.bias"]
        if j < layers - 1:
            x = np.maximum(x, 0)
    return np.tanh(x) if spec["output_activation"] == "tanh" else x


def _conv2d(x: np.ndarray, w: np.ndarray, stride: int) -> np.ndarray:
    """Valid (unpadded) cross-correlation, [B, C, H, W] * [O, C, k, k] -> [B, O, H', W']."""
    b, _, h, wd = x.shape
    o, _, k, _ = w.shape
    ho, wo = (h - k) // stride + 1, (wd - k) // stride + 1
    out = np.zeros((b, o, ho, wo), np.float32)
    for i in range(ho):
        for j in range(wo):
            patch = x[:, :, i * stride : i * stride + k, j * stride : j * stride + k]
            out[:, :, i, j] = patch.reshape(b, -1) @ w.reshape(o, -1).T
    return out
