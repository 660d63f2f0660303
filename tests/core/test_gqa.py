"""Grouped-query attention in lessons_src.functional: MHA (K == H), GQA and MQA (K == 1) against references."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch.profiler import ProfilerActivity, profile

from lessons_src import MultiHeadAttention, causal_mask, padding_mask
from lessons_src.functional import attention, explicit_attention, repeat_kv
from lessons_src.kv_cache import KVCache

FUSED_CPU = "aten::_scaled_dot_product_flash_attention_for_cpu"
MATH = "aten::_scaled_dot_product_attention_math"


def sdpa_ops(fn) -> set[str]:
    """Names of the SDPA kernels that ran inside fn."""
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        fn()
    return {e.name for e in prof.events() if "scaled_dot_product" in e.name}


@pytest.mark.parametrize(("K", "n_rep"), [(1, 1), (2, 3), (3, 2), (1, 6)])
def test_repeat_kv_equals_repeat_interleave(K: int, n_rep: int) -> None:
    x = torch.randn(2, K, 5, 4)
    torch.testing.assert_close(repeat_kv(x, n_rep), torch.repeat_interleave(x, n_rep, dim=1), rtol=0, atol=0)


def test_gqa_with_k_equal_h_is_mha() -> None:
    torch.manual_seed(0)
    mha = MultiHeadAttention(24, 6, bias=True).eval()
    gqa = MultiHeadAttention(24, 6, num_kv_heads=6, bias=True).eval()
    gqa.load_state_dict(mha.state_dict())  # same parameter names and shapes
    x = torch.randn(2, 5, 24)
    torch.testing.assert_close(gqa(x, is_causal=True), mha(x, is_causal=True), rtol=0, atol=0)
    assert gqa.qkv_proj.weight.shape == (3 * 24, 24)  # nn.MultiheadAttention's in_proj layout


@pytest.mark.parametrize("K", [1, 2, 3, 6])
@pytest.mark.parametrize("mask", ["none", "causal", "padding_causal", "float"])
@pytest.mark.parametrize("cross", [False, True])
def test_gqa_equals_mha_with_repeated_kv_weights(K: int, mask: str, cross: bool) -> None:
    """A GQA layer is an MHA layer whose K/V heads are copies within each group: build that MHA and compare."""
    torch.manual_seed(1)
    H, D, E = 6, 24, 4
    gqa = MultiHeadAttention(D, H, num_kv_heads=K, bias=True).double().eval()
    mha = MultiHeadAttention(D, H, bias=True).double().eval()
    with torch.no_grad():
        w, b = gqa.qkv_proj.weight, gqa.qkv_proj.bias
        wq, wk, wv = w.split([D, K * E, K * E])
        bq, bk, bv = b.split([D, K * E, K * E])
        n = H // K
        rep = lambda t: t.view(K, E, *t.shape[1:]).repeat_interleave(n, 0).reshape(H * E, *t.shape[1:])  # noqa: E731
        mha.qkv_proj.weight.copy_(torch.cat([wq, rep(wk), rep(wv)]))
        mha.qkv_proj.bias.copy_(torch.cat([bq, rep(bk), rep(bv)]))
        mha.out_proj.load_state_dict(gqa.out_proj.state_dict())
    x = torch.randn(3, 5, D, dtype=torch.float64)
    ctx = torch.randn(3, 7, D, dtype=torch.float64) if cross else None
    S = 7 if cross else 5
    kw: dict[str, object] = {}
    if mask == "causal":
        kw["is_causal"] = True
    elif mask == "padding_causal":
        kw |= {"is_causal": True, "attn_mask": padding_mask([S, S - 2, 1], S)}
    elif mask == "float":
        kw["attn_mask"] = torch.randn(H, 5, S, dtype=torch.float64)
    ref = mha(x, ctx, **kw)
    torch.testing.assert_close(gqa(x, ctx, **kw), ref)
    out, w_ = gqa.with_weights(x, ctx, **kw)
    torch.testing.assert_close(out, ref)
    assert w_.shape == (3, H, 5, S)


@pytest.mark.parametrize("K", [1, 2, 4])
@pytest.mark.parametrize(("T", "S"), [(1, 9), (3, 9), (6, 6)])
def test_grouped_attention_equals_explicit(K: int, T: int, S: int) -> None:
    """The fused grouped layout (and SDPA's enable_gqa path for causal prefill) equals the explicit formula."""
    g = torch.Generator().manual_seed(2)
    q = torch.randn(2, 4, T, 8, generator=g, dtype=torch.float64)
    k = torch.randn(2, K, S, 8, generator=g, dtype=torch.float64)
    v = torch.randn(2, K, S, 5, generator=g, dtype=torch.float64)
    mask = causal_mask(T, S)
    ref, _ = explicit_attention(q, repeat_kv(k, 4 // K), repeat_kv(v, 4 // K), attn_mask=mask)
    torch.testing.assert_close(attention(q, k, v, attn_mask=mask).output, ref)
    if T == S:
        torch.testing.assert_close(attention(q, k, v, is_causal=True).output, ref)
        enable_gqa = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
        torch.testing.assert_close(enable_gqa, ref)
    per_batch = torch.rand(2, 1, T, S, generator=g) > 0.3
    per_batch[..., 0] = True
    ref2, _ = explicit_attention(q, repeat_kv(k, 4 // K), repeat_kv(v, 4 // K), attn_mask=per_batch)
    torch.testing.assert_close(attention(q, k, v, attn_mask=per_batch).output, ref2)


@pytest.mark.parametrize("K", [8, 2, 1])
def test_decoding_runs_the_fused_kernel(K: int) -> None:
    """Prefill and one-token decoding of MHA, GQA and MQA run SDPA's fused CPU kernel, not the math one."""
    torch.manual_seed(3)
    layer = MultiHeadAttention(64, 8, num_kv_heads=K).eval()
    cache = KVCache(2, K, 8, 40)
    with torch.inference_mode():
        ops = sdpa_ops(lambda: layer(torch.randn(2, 32, 64), is_causal=True, cache=cache))
        assert FUSED_CPU in ops and MATH not in ops, ops
        ops = sdpa_ops(lambda: layer(torch.randn(2, 1, 64), is_causal=True, cache=cache))
        assert FUSED_CPU in ops and MATH not in ops, ops


def test_parameter_count() -> None:
    D, H, E = 512, 8, 64
    for K in (8, 4, 2, 1):
        n = sum(p.numel() for p in MultiHeadAttention(D, H, num_kv_heads=K).parameters())
        assert n == 2 * D * D + 2 * D * K * E  # W_Q and W_O, plus W_K and W_V for K heads


@pytest.mark.parametrize(("H", "K", "valid"), [(8, 3, "1, 2, 4, 8"), (6, 4, "1, 2, 3, 6")])
def test_bad_num_kv_heads_lists_valid_counts(H: int, K: int, valid: str) -> None:
    with pytest.raises(ValueError, match=rf"num_heads={H} is not a multiple of num_kv_heads={K}; .* are {valid}$"):
        MultiHeadAttention(8 * H, H, num_kv_heads=K)


def test_zero_kv_heads_is_refused() -> None:
    with pytest.raises(ValueError, match=r"num_kv_heads must be at least 1; got num_kv_heads=0"):
        MultiHeadAttention(32, 4, num_kv_heads=0)


def test_attention_rejects_bad_head_counts() -> None:
    with pytest.raises(ValueError, match=r"q has 4 heads, which is not a multiple of the 3 key/value heads"):
        attention(torch.randn(1, 4, 2, 8), torch.randn(1, 3, 2, 8), torch.randn(1, 3, 2, 8))


def test_cache_with_context_is_refused() -> None:
    layer = MultiHeadAttention(16, 4, num_kv_heads=2)
    with pytest.raises(ValueError, match="cache is for self-attention decoding"):
        layer(torch.randn(1, 2, 16), torch.randn(1, 3, 16), cache=KVCache(1, 2, 4, 8))


@pytest.mark.parametrize("K", [6, 3, 2, 1])
def test_matches_hugging_face_llama_attention(K: int) -> None:
    """GQA against transformers' LlamaAttention (its own repeat_kv), RoPE switched off with cos=1, sin=0."""
    transformers = pytest.importorskip("transformers")
    from transformers.models.llama.modeling_llama import LlamaAttention

    D, H, T = 24, 6, 7
    cfg = transformers.LlamaConfig(hidden_size=D, num_attention_heads=H, num_key_value_heads=K, attention_bias=True)
    cfg._attn_implementation = "eager"
    torch.manual_seed(0)
    ref = LlamaAttention(cfg, layer_idx=0).eval()
    ours = MultiHeadAttention(D, H, num_kv_heads=K, bias=True).eval()
    with torch.no_grad():
        for p in ref.parameters():
            p.normal_()  # biases start at zero; make every parameter matter
        ours.qkv_proj.weight.copy_(torch.cat([ref.q_proj.weight, ref.k_proj.weight, ref.v_proj.weight]))
        ours.qkv_proj.bias.copy_(torch.cat([ref.q_proj.bias, ref.k_proj.bias, ref.v_proj.bias]))
        ours.out_proj.load_state_dict(ref.o_proj.state_dict())
        x = torch.randn(2, T, D)
        no_rotation = (torch.ones(2, T, D // H), torch.zeros(2, T, D // H))
        mask = torch.zeros(2, 1, T, T).masked_fill(~causal_mask(T), float("-inf"))
        expected, _ = ref(x, position_embeddings=no_rotation, attention_mask=mask)
        torch.testing.assert_close(ours(x, is_causal=True), expected, atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("K", [2, 1])
def test_gqa_trains(K: int) -> None:
    """Gradients reach every projection on the causal (enable_gqa) and the masked (grouped) paths."""
    torch.manual_seed(4)
    layer = MultiHeadAttention(16, 4, num_kv_heads=K, dropout=0.1)
    x = torch.randn(2, 5, 16, requires_grad=True)
    (layer(x, is_causal=True).sum() + layer(x, attn_mask=padding_mask([5, 3])).sum()).backward()
    assert x.grad is not None and layer.qkv_proj.weight.grad is not None
    assert layer.qkv_proj.weight.grad[16:].abs().sum() > 0  # the K/V rows
