"""lessons_src.convert: MHA -> GQA by pooling KV heads per group (Ainslie et al. 2023)."""

from __future__ import annotations

import pytest
import torch

from lessons_src import MultiHeadAttention
from lessons_src.convert import expand_kv_heads, mha_to_gqa, pool_kv_heads


def test_pool_is_the_group_mean() -> None:
    H, K, E, D = 6, 2, 3, 5
    w = torch.randn(H * E, D)
    pooled = pool_kv_heads(w, H, K)
    heads = w.view(H, E, D)
    for k in range(K):
        torch.testing.assert_close(pooled.view(K, E, D)[k], heads[3 * k : 3 * k + 3].mean(0))
    torch.testing.assert_close(pool_kv_heads(w, H, K, "first").view(K, E, D), heads[[0, 3]])
    torch.testing.assert_close(pool_kv_heads(w, H, H), w)  # one head per group: unchanged


@pytest.mark.parametrize("K", [4, 2, 1])
@pytest.mark.parametrize("method", ["mean", "first"])
@pytest.mark.parametrize("bias", [False, True])
def test_gqa_equals_mha_with_pooled_heads_expanded(K: int, method: str, bias: bool) -> None:
    """The converted GQA layer computes what the MHA layer computes with each KV head replaced by its group's."""
    torch.manual_seed(0)
    D, H = 16, 4
    mha = MultiHeadAttention(D, H, bias=bias).double().eval()
    if bias:
        with torch.no_grad():
            mha.qkv_proj.bias.normal_()
    gqa = mha_to_gqa(mha, K, method)  # type: ignore[arg-type]
    assert gqa.num_kv_heads == K and gqa.qkv_proj.weight.dtype == torch.float64
    ref = MultiHeadAttention(D, H, bias=bias).double().eval()
    with torch.no_grad():
        ref.load_state_dict(mha.state_dict())
        for rows in (slice(D, 2 * D), slice(2 * D, 3 * D)):  # W_K, then W_V
            ref.qkv_proj.weight[rows] = expand_kv_heads(pool_kv_heads(mha.qkv_proj.weight[rows], H, K, method), K, H)  # type: ignore[arg-type]
            if bias:
                ref.qkv_proj.bias[rows] = expand_kv_heads(pool_kv_heads(mha.qkv_proj.bias[rows], H, K, method), K, H)  # type: ignore[arg-type]
    x = torch.randn(2, 7, D, dtype=torch.float64)
    torch.testing.assert_close(gqa(x, is_causal=True), ref(x, is_causal=True))
    if K == H:
        torch.testing.assert_close(gqa(x, is_causal=True), mha(x, is_causal=True))


def test_conversion_errors() -> None:
    mha = MultiHeadAttention(24, 6)
    with pytest.raises(ValueError, match=r"num_heads=6 is not a multiple of num_kv_heads=4; .* are 1, 2, 3, 6"):
        mha_to_gqa(mha, 4)
    with pytest.raises(ValueError, match="expected an MHA layer"):
        mha_to_gqa(MultiHeadAttention(24, 6, num_kv_heads=2), 1)
    with pytest.raises(ValueError, match="method must be 'mean' or 'first'"):
        pool_kv_heads(torch.zeros(6, 2), 6, 3, "random")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="w has 7 rows, which is not a multiple of num_heads=6"):
        pool_kv_heads(torch.zeros(7, 2), 6, 3)
