"""Queries, keys and values for the cache tests, rotated by RoPE at positions 0..N-1, in float64.

Shared by tests/core/test_rolling_cache.py and tests/core/test_chunked_cache.py, whose caches must give what one pass
over the same rotated tensors gives.
"""

from __future__ import annotations

import torch

from lessons_src.rope import apply_rope, rope_cos_sin

B, H, K, E = 2, 4, 2, 8  # batch, query heads, key/value heads, head size; values have 6 features


def rotated(N: int, seed: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """q (B, H, N, E) and k (B, K, N, E) rotated by their positions 0..N-1 (RoPE), and v (B, K, N, 6)."""
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(B, H, N, E, generator=g, dtype=torch.float64)
    k = torch.randn(B, K, N, E, generator=g, dtype=torch.float64)
    v = torch.randn(B, K, N, 6, generator=g, dtype=torch.float64)
    cos, sin = rope_cos_sin(torch.arange(N), E, dtype=torch.float64)
    return apply_rope(q, cos, sin), apply_rope(k, cos, sin), v
