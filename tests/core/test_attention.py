"""lessons_src.functional against PyTorch's own attention: F.scaled_dot_product_attention and nn.MultiheadAttention."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from lessons_src import MultiHeadAttention, causal_mask, explicit_attention, padding_mask

DTYPES = [torch.float32, torch.float64]


def tol(dtype: torch.dtype) -> dict[str, float]:
    return {"atol": 1e-5, "rtol": 1e-4} if dtype == torch.float32 else {"atol": 1e-10, "rtol": 1e-9}


# --------------------------------------------------------------------------- explicit SDPA


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("mask_kind", ["none", "causal", "bool", "float", "bool_broadcast"])
@pytest.mark.parametrize(("T", "S"), [(5, 5), (3, 7), (7, 3)])
def test_sdpa_matches_torch(dtype: torch.dtype, mask_kind: str, T: int, S: int) -> None:
    g = torch.Generator().manual_seed(0)
    q = torch.randn(2, 3, T, 8, generator=g, dtype=dtype)
    k = torch.randn(2, 3, S, 8, generator=g, dtype=dtype)
    v = torch.randn(2, 3, S, 6, generator=g, dtype=dtype)
    kwargs: dict[str, object] = {}
    ref_kwargs: dict[str, object] = {}
    if mask_kind == "causal":
        kwargs["is_causal"] = True
        ref_kwargs["attn_mask"] = causal_mask(T, S)  # is_causal is bottom-right here; SDPA's flag is top-left
    elif mask_kind == "bool":
        m = torch.rand(2, 3, T, S, generator=g) > 0.3
        m[..., 0] = True  # every query keeps at least one key
        kwargs["attn_mask"] = m
    elif mask_kind == "float":
        kwargs["attn_mask"] = torch.randn(T, S, generator=g, dtype=dtype)
    elif mask_kind == "bool_broadcast":
        kwargs["attn_mask"] = padding_mask([S, max(1, S - 2)])  # (2, 1, 1, S)
    out, w = explicit_attention(q, k, v, **kwargs)  # type: ignore[arg-type]
    ref = F.scaled_dot_product_attention(q, k, v, **(ref_kwargs or kwargs))  # type: ignore[arg-type]
    torch.testing.assert_close(out, ref, **tol(dtype))
    assert w.shape == (2, 3, T, S)
    visible = (ref_kwargs["attn_mask"].any(-1) if ref_kwargs else torch.ones(T, dtype=torch.bool)).to(dtype)
    # rows that see at least one key sum to 1; with T > S the first T - S causal rows see none and are 0
    torch.testing.assert_close(w.sum(-1), visible.expand(2, 3, T), **tol(dtype))


def test_sdpa_scale_matches_torch() -> None:
    q, k, v = (torch.randn(2, 4, 5, 8) for _ in range(3))
    torch.testing.assert_close(
        explicit_attention(q, k, v, scale=0.3)[0], F.scaled_dot_product_attention(q, k, v, scale=0.3)
    )


def test_sdpa_dropout_zeroes_and_rescales() -> None:
    torch.manual_seed(0)
    q = k = torch.zeros(1, 1, 4, 2)  # uniform weights of 1/64 each over S=64
    q = torch.zeros(1, 1, 4, 2)
    k = torch.zeros(1, 1, 64, 2)
    v = torch.ones(1, 1, 64, 1)
    _, w = explicit_attention(q, k, v, dropout_p=0.5)
    kept = w[w > 0]
    torch.testing.assert_close(kept, torch.full_like(kept, 2 / 64))  # survivors scaled by 1 / (1 - p)
    assert 0 < (w == 0).sum() < w.numel()


@pytest.mark.parametrize("kind", ["bool", "float"])
def test_sdpa_fully_masked_row_is_zero_like_torch(kind: str) -> None:
    q, k, v = torch.randn(1, 1, 3, 4), torch.randn(1, 1, 2, 4), torch.randn(1, 1, 2, 4)
    mask = torch.tensor([[True, False], [False, False], [True, True]])
    if kind == "float":
        mask = torch.zeros(3, 2).masked_fill(~mask, float("-inf"))
    out, w = explicit_attention(q, k, v, attn_mask=mask)
    torch.testing.assert_close(out, F.scaled_dot_product_attention(q, k, v, attn_mask=mask))
    assert (w[0, 0, 1] == 0).all() and (out[0, 0, 1] == 0).all() and not torch.isnan(w).any()


# ------------------------------------------------------------------ MultiHeadAttention


@pytest.mark.parametrize("cross", [False, True])
def test_is_causal_equals_explicit_bottom_right_mask(cross: bool) -> None:
    torch.manual_seed(3)
    mha = MultiHeadAttention(12, 3).eval()
    x = torch.randn(2, 4, 12)
    ctx = torch.randn(2, 7, 12) if cross else None
    S = 7 if cross else 4
    a = mha(x, ctx, is_causal=True)
    b = mha(x, ctx, attn_mask=causal_mask(4, S))
    c, w = mha.with_weights(x, ctx, is_causal=True)
    torch.testing.assert_close(a, b)
    torch.testing.assert_close(a, c)
    assert (w.tril(S - 4) == w).all()  # nothing above the bottom-right diagonal
    # combining is_causal with a padding mask keeps both
    pm = padding_mask([S, S - 1], S)
    d, w2 = mha.with_weights(x, ctx, attn_mask=pm, is_causal=True)
    torch.testing.assert_close(d, mha(x, ctx, attn_mask=pm & causal_mask(4, S)))
    assert (w2[1, ..., S - 1] == 0).all()


def test_matches_hand_written_floor() -> None:
    """The fast path is exactly: fused QKV Linear, SDPA, output Linear."""
    torch.manual_seed(4)
    mha = MultiHeadAttention(32, 4, bias=True).eval()
    x = torch.randn(2, 10, 32)
    q, k, v = mha.qkv_proj(x).split(32, dim=-1)
    q, k, v = (t.view(2, 10, 4, 8).transpose(1, 2) for t in (q, k, v))
    y = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(2, 10, 32)
    torch.testing.assert_close(mha(x, is_causal=True), mha.out_proj(y))


def test_dropout_only_in_training_and_gradients_flow() -> None:
    torch.manual_seed(5)
    mha = MultiHeadAttention(16, 4, dropout=0.5)
    x = torch.randn(2, 8, 16, requires_grad=True)
    out, w = mha.with_weights(x)
    assert (w == 0).any()  # some weights dropped in training mode
    out.sum().backward()
    assert x.grad is not None and mha.qkv_proj.weight.grad is not None
    mha.eval()
    _, w_eval = mha.with_weights(x)
    assert not (w_eval == 0).any()


def test_parameter_count_is_4_d_squared() -> None:
    for d, h in [(768, 12), (1024, 16), (256, 4)]:
        assert sum(p.numel() for p in MultiHeadAttention(d, h).parameters()) == 4 * d * d
        assert sum(p.numel() for p in MultiHeadAttention(d, h, bias=True).parameters()) == 4 * d * d + 4 * d


# --------------------------------------------------------------------------- bad input


def test_d_model_not_divisible_lists_divisors() -> None:
    with pytest.raises(
        ValueError, match=r"d_model=100 is not divisible by num_heads=12; .* 1, 2, 4, 5, 10, 20, 25, 50, 100"
    ):
        MultiHeadAttention(100, 12)


@pytest.mark.parametrize("h", [0, -3])
def test_num_heads_below_one(h: int) -> None:
    with pytest.raises(ValueError, match=f"num_heads must be at least 1; got num_heads={h}"):
        MultiHeadAttention(64, h)


@pytest.mark.parametrize(
    ("x_shape", "ctx_shape", "pattern"),
    [
        ((4, 16), None, r"x must be 3-D \(B, T, d_model=16\); got shape \(4, 16\)"),
        ((2, 4, 12), None, r"x's last dim must be d_model=16; got shape \(2, 4, 12\)"),
        ((2, 4, 16), (3, 5, 16), r"context batch size 3 does not match x's batch size 2"),
        ((2, 4, 16), (2, 5, 8), r"context's last dim must be d_model=16; got shape \(2, 5, 8\)"),
        ((2, 4, 16), (5, 16), r"context must be 3-D"),
    ],
)
def test_bad_shapes(x_shape, ctx_shape, pattern) -> None:
    mha = MultiHeadAttention(16, 4)
    ctx = None if ctx_shape is None else torch.randn(ctx_shape)
    with pytest.raises(ValueError, match=pattern):
        mha(torch.randn(x_shape), ctx)


def test_mask_not_broadcastable_names_both_shapes() -> None:
    mha = MultiHeadAttention(16, 4)
    with pytest.raises(ValueError, match=r"shape \(3, 5\) is not broadcastable .* \(B, H, T, S\) = \(2, 4, 5, 5\)"):
        mha(torch.randn(2, 5, 16), attn_mask=torch.ones(3, 5, dtype=torch.bool))
    with pytest.raises(ValueError, match=r"\(1, 2, 4, 5, 5\) is not broadcastable"):
        mha(torch.randn(2, 5, 16), attn_mask=torch.ones(1, 2, 4, 5, 5, dtype=torch.bool))


@pytest.mark.parametrize("dtype", [torch.int64, torch.uint8])
def test_mask_dtype(dtype: torch.dtype) -> None:
    mha = MultiHeadAttention(16, 4)
    with pytest.raises(ValueError, match=rf"dtype {dtype}, which is not supported; use torch.bool .* torch.float32"):
        mha(torch.randn(2, 5, 16), attn_mask=torch.ones(5, 5, dtype=dtype))


def test_sdpa_bad_inputs() -> None:
    q = torch.randn(1, 2, 3, 4)
    with pytest.raises(ValueError, match=r"same head size E; got q \(1, 2, 3, 4\), k \(1, 2, 3, 5\)"):
        explicit_attention(q, torch.randn(1, 2, 3, 5), torch.randn(1, 2, 3, 5))
    with pytest.raises(ValueError, match=r"k and v must agree on \(B, K, S\)"):
        explicit_attention(q, q, torch.randn(1, 2, 4, 4))
    with pytest.raises(ValueError, match="dropout_p"):
        explicit_attention(q, q, q, dropout_p=1.0)
