"""lessons_src.interop: weights and masks from nn.MultiheadAttention give the same outputs as PyTorch's module."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

from lessons_src import causal_mask, from_torch, masks_from_torch, padding_mask

DTYPES = [torch.float32, torch.float64]


def tol(dtype: torch.dtype) -> dict[str, float]:
    return {"atol": 1e-5, "rtol": 1e-4} if dtype == torch.float32 else {"atol": 1e-10, "rtol": 1e-9}


# ------------------------------------------------------------------ MultiHeadAttention vs nn.MultiheadAttention


def pair(d_model: int, heads: int, bias: bool, batch_first: bool, dtype: torch.dtype):
    torch.manual_seed(1)
    ref = nn.MultiheadAttention(d_model, heads, bias=bias, batch_first=batch_first, dtype=dtype).eval()
    if bias:  # nn.MultiheadAttention initialises biases to zero; make them matter
        with torch.no_grad():
            ref.in_proj_bias.normal_()
            ref.out_proj.bias.normal_()
    ours = from_torch(ref)
    return ref, ours


def call_ref(ref: nn.MultiheadAttention, x: torch.Tensor, ctx: torch.Tensor, **kw):
    if not ref.batch_first:
        x, ctx = x.transpose(0, 1), ctx.transpose(0, 1)
    out, w = ref(x, ctx, ctx, need_weights=True, average_attn_weights=False, **kw)
    return (out if ref.batch_first else out.transpose(0, 1)), w


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize("batch_first", [True, False])
@pytest.mark.parametrize("cross", [False, True])
@pytest.mark.parametrize("mask", ["none", "causal", "padding", "both", "float"])
def test_matches_nn_multihead_attention(dtype, bias, batch_first, cross, mask) -> None:
    B, T, D, H = 3, 6, 16, 4
    S = 9 if cross else T
    ref, ours = pair(D, H, bias, batch_first, dtype)
    g = torch.Generator().manual_seed(2)
    x = torch.randn(B, T, D, generator=g, dtype=dtype)
    ctx = torch.randn(B, S, D, generator=g, dtype=dtype) if cross else x
    lengths = torch.tensor([S, S - 2, 1])
    ref_kw: dict[str, torch.Tensor] = {}
    if mask in ("causal", "both"):
        ref_kw["attn_mask"] = ~causal_mask(T, S)  # nn.MultiheadAttention: True = blocked
    if mask in ("padding", "both"):
        ref_kw["key_padding_mask"] = ~padding_mask(lengths, S)[:, 0, 0, :]
    if mask == "float":
        ref_kw["attn_mask"] = torch.randn(T, S, generator=g, dtype=dtype)
    ours_mask = masks_from_torch(ref_kw.get("attn_mask"), ref_kw.get("key_padding_mask"), num_heads=H, dtype=dtype)

    ref_out, ref_w = call_ref(ref, x, ctx, **ref_kw)
    context = ctx if cross else None
    out_fast = ours(x, context, attn_mask=ours_mask)
    out_slow, w = ours.with_weights(x, context, attn_mask=ours_mask)
    torch.testing.assert_close(out_fast, ref_out, **tol(dtype))
    torch.testing.assert_close(out_slow, ref_out, **tol(dtype))
    torch.testing.assert_close(w, ref_w, **tol(dtype))


@settings(max_examples=40, deadline=None)
@given(
    B=st.integers(1, 3),
    T=st.integers(1, 9),
    S=st.integers(1, 9),
    H=st.sampled_from([1, 2, 3, 4, 6]),
    E=st.integers(1, 5),
    causal=st.booleans(),
    seed=st.integers(0, 2**16),
)
def test_property_fast_equals_explicit_equals_torch(B, T, S, H, E, causal, seed) -> None:
    torch.manual_seed(seed)
    D = H * E
    ref = nn.MultiheadAttention(D, H, batch_first=True, dtype=torch.float64).eval()
    ours = from_torch(ref)
    x = torch.randn(B, T, D, dtype=torch.float64)
    ctx = torch.randn(B, S, D, dtype=torch.float64)
    S_eff = S
    mask = None
    if causal:
        S_eff = max(S, T)
        ctx = torch.randn(B, S_eff, D, dtype=torch.float64)
        mask = causal_mask(T, S_eff)
    ref_out, _ = ref(x, ctx, ctx, attn_mask=None if mask is None else ~mask)
    fast = ours(x, ctx, is_causal=causal)
    slow, w = ours.with_weights(x, ctx, is_causal=causal)
    torch.testing.assert_close(fast, ref_out)
    torch.testing.assert_close(slow, ref_out)
    assert w.shape == (B, H, T, S_eff)


def test_from_torch_rejects_unsupported() -> None:
    with pytest.raises(ValueError, match="kdim=8 and vdim=8 must equal embed_dim=16"):
        from_torch(nn.MultiheadAttention(16, 4, kdim=8, vdim=8))
    with pytest.raises(ValueError, match="add_bias_kv"):
        from_torch(nn.MultiheadAttention(16, 4, add_bias_kv=True))


def test_masks_from_torch_inverts_bool_and_unfolds_heads() -> None:
    blocked = torch.tensor([[False, True], [False, False]])
    assert torch.equal(masks_from_torch(blocked, None, num_heads=2), ~blocked)
    per_head = torch.zeros(6, 2, 2, dtype=torch.bool)  # (B * H, T, S) with B=3, H=2
    per_head[3, 0, 1] = True  # batch 1, head 1
    out = masks_from_torch(per_head, None, num_heads=2)
    assert out.shape == (3, 2, 2, 2) and not out[1, 1, 0, 1] and out.sum() == 23
    kpm = torch.tensor([[False, True]])  # key 1 is padding
    both = masks_from_torch(blocked, kpm, num_heads=2)
    assert both.shape == (1, 1, 2, 2) and both[0, 0].tolist() == [[True, False], [True, False]]
    fl = masks_from_torch(torch.zeros(2, 2), kpm, num_heads=2)
    assert fl[0, 0, 0].tolist() == [0.0, float("-inf")]


def test_from_torch_keeps_train_or_eval_mode() -> None:
    ref = nn.MultiheadAttention(16, 4, batch_first=True, dropout=0.1)
    assert from_torch(ref.eval()).training is False
    assert from_torch(ref.train()).training is True


def test_from_torch_rejects_other_modules() -> None:
    with pytest.raises(TypeError, match=r"expects a torch\.nn\.MultiheadAttention; got Linear"):
        from_torch(nn.Linear(4, 4))  # type: ignore[arg-type]


def test_masks_from_torch_rejects_a_3d_mask_not_per_head() -> None:
    with pytest.raises(ValueError, match=r"\(B \* num_heads, T, S\); got \(5, 2, 2\).*num_heads=2"):
        masks_from_torch(torch.zeros(5, 2, 2, dtype=torch.bool), None, num_heads=2)
