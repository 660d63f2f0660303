"""Tensors stay on the queries' device: meta runs of the core, and a lint for tensors made without one.

A ``meta`` tensor has a shape, dtype and device but no values, so a function whose control flow reads
no values runs on it for free, and any tensor it makes on the default device (the CPU) instead of the
queries' one raises torch's device-mismatch error, exactly as it would on a GPU.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from lessons_src.attention import MultiHeadAttention, attention
from lessons_src.masks import causal_mask

META = torch.device("meta")


def _meta(*shape: int) -> torch.Tensor:
    return torch.empty(*shape, device=META)


# --------------------------------------------------------------------------- the combined causal mask

# (name, implementation, q shape, kv shape, window): the calls issue 27 lists as failing off the CPU
MASK_CASES = [
    ("eager causal", "eager", (1, 2, 4, 8), (1, 2, 4, 8), None),
    ("sdpa window", "sdpa", (1, 2, 4, 8), (1, 2, 4, 8), 2),
    ("sdpa causal T > S", "sdpa", (1, 2, 4, 8), (1, 2, 2, 8), None),
    ("sdpa causal GQA T < S", "sdpa", (1, 4, 3, 8), (1, 2, 6, 8), None),
]


@pytest.mark.parametrize(("name", "impl", "q_shape", "kv_shape", "window"), MASK_CASES, ids=[c[0] for c in MASK_CASES])
def test_causal_mask_is_built_on_the_queries_device(name, impl, q_shape, kv_shape, window):
    q, kv = _meta(*q_shape), _meta(*kv_shape)
    out, weights, _ = attention(q, kv, kv, is_causal=True, implementation=impl, window=window)
    assert out.device == META and out.shape == q_shape
    if impl == "eager":
        assert weights is not None and weights.device == META


def test_mha_with_weights_builds_its_mask_on_the_inputs_device():
    # MultiHeadAttention cannot run on meta (torch's autocast lookup has no meta entry), so run it on the
    # CPU with meta as the default device: a mask made without device= lands on meta and fails the call.
    torch.manual_seed(0)
    mha = MultiHeadAttention(d_model=8, num_heads=2)
    x = torch.randn(1, 5, 8)
    q, k, v = mha.project_qkv(x)  # (1, 2, 5, 4) each
    want = F.scaled_dot_product_attention(q.double(), k.double(), v.double(), is_causal=True)  # T == S
    want = mha.out_proj(want.transpose(1, 2).reshape(1, 5, 8).float())
    with torch.device(META):
        out, weights = mha(x, is_causal=True, need_weights=True)
        windowed = mha(x, is_causal=True, window=2)
    torch.testing.assert_close(out, want)
    assert weights.device.type == "cpu" and windowed.device.type == "cpu"
    assert torch.equal(weights[0, 0] > 0, causal_mask(5, device="cpu"))
