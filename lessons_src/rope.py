"""Rotary position embedding (RoPE): rotate pairs of features by an angle proportional to the position.

Feature ``i`` of the first half and feature ``i`` of the second half form a pair (the "rotate half"
layout of GPT-NeoX and Hugging Face Llama); the pair at position ``m`` is rotated by ``m * base^(-2i/R)``.
A rotated query at position ``m`` dotted with a rotated key at position ``n`` depends only on ``m - n``,
which is how attention scores learn relative positions.

References:
    Su et al., "RoFormer: Enhanced Transformer with Rotary Position Embedding", 2021 (arXiv:2104.09864).
"""

from __future__ import annotations

import torch
from torch import Tensor

__all__ = ["apply_rope", "rope_cos_sin"]


def rope_cos_sin(
    positions: Tensor, dim: int, *, base: float = 10000.0, dtype: torch.dtype = torch.float32
) -> tuple[Tensor, Tensor]:
    """Cosines and sines of the rotation angles for ``positions``.

    Args:
        positions: integer positions, e.g. ``torch.arange(start, start + T)``.
        dim: rotated features per head ``R``; must be even.
        base: the wavelength base (10000 in RoFormer and Llama 2).
        dtype: dtype of the result.

    Returns:
        ``(cos, sin)``.

    Shapes:
        positions: ``(T,)``; cos, sin: ``(T, R)``.

    Raises:
        ValueError: if ``dim`` is odd or below 2.

    Example:
        >>> cos, sin = rope_cos_sin(torch.arange(3), 4)
        >>> cos.shape, cos[0].tolist()
        (torch.Size([3, 4]), [1.0, 1.0, 1.0, 1.0])
    """
    if isinstance(dim, bool) or not hasattr(dim, "__index__"):  # numpy integers pass, bool and float do not
        raise TypeError(f"dim must be an int; got {dim!r} of type {type(dim).__name__}")
    dim = int(dim.__index__())
    if dim < 2 or dim % 2:
        raise ValueError(f"RoPE rotates pairs of features, so dim must be even and at least 2; got dim={dim!r}")
    if positions.dtype.is_floating_point or positions.dtype == torch.bool or positions.ndim != 1:
        raise ValueError(
            f"positions must be integers of shape (T,); got dtype {positions.dtype}, shape {tuple(positions.shape)}"
        )
    inv_freq = base ** (-torch.arange(0, dim, 2, dtype=torch.float64, device=positions.device) / dim)  # (R/2,)
    angles = positions.to(torch.float64)[:, None] * inv_freq  # (T, R/2)
    angles = torch.cat([angles, angles], dim=-1)  # (T, R): pair i is (i, i + R/2)
    return angles.cos().to(dtype), angles.sin().to(dtype)


def apply_rope(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    """Rotate the last dim of ``x`` by the angles in ``cos``/``sin`` (from :func:`rope_cos_sin`).

    Shapes:
        x: ``(..., T, R)``; cos, sin: ``(T, R)``; output: like ``x``.

    Raises:
        ValueError: if ``cos`` or ``sin`` is not ``(T, R)`` for ``x``.

    Example:
        >>> cos, sin = rope_cos_sin(torch.arange(2), 2)
        >>> apply_rope(torch.tensor([[1.0, 0.0], [1.0, 0.0]]), cos, sin)  # position 1: rotated by 1 radian
        tensor([[1.0000, 0.0000],
                [0.5403, 0.8415]])
    """
    if x.ndim < 2 or cos.shape != x.shape[-2:] or sin.shape != cos.shape:
        raise ValueError(
            f"x of shape {tuple(x.shape)} needs cos and sin of shape {tuple(x.shape[-2:])}; "
            f"got {tuple(cos.shape)} and {tuple(sin.shape)}"
        )
    x1, x2 = x.chunk(2, dim=-1)  # (..., T, R/2) each
    rotated = torch.cat([-x2, x1], dim=-1)  # (..., T, R)
    return x * cos + rotated * sin
