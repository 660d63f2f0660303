# ruff: noqa: E501  (a table of cases: one row per call reads better than wrapped rows)
"""Bad input, by category, for every public function of the core: a clear error that names the bad value.

Each row calls one public function with one kind of mistake (a wrong type, shape, dtype, device or
value) and expects a ``TypeError`` or ``ValueError`` whose message names the value and what would be
right: never a bare traceback from inside torch, never a silently wrong result.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest
import torch
from torch import nn

from lessons_src import (
    KVCache,
    LatentCache,
    MultiHeadAttention,
    MultiHeadLatentAttention,
    apply_rope,
    causal_mask,
    from_torch,
    grouped_attention,
    masks_from_torch,
    mha_to_gqa,
    padding_mask,
    repeat_kv,
    scaled_dot_product_attention,
)
from lessons_src.attention import attention, prepare_mask, register_attention
from lessons_src.convert import expand_kv_heads, pool_kv_heads
from lessons_src.kv_cache import kv_bytes_per_token, latent_bytes_per_token
from lessons_src.masks import combine_masks
from lessons_src.rope import rope_cos_sin

if TYPE_CHECKING:
    from collections.abc import Callable

Q = torch.randn(1, 2, 3, 4)
KV = torch.randn(1, 1, 5, 4)
MHA = MultiHeadAttention(16, 4, num_kv_heads=2)
MLA = MultiHeadLatentAttention(32, 4, kv_latent_dim=8, rope_dim=4)
META = torch.device("meta")


def _no_grad(f: Callable[[], object]) -> Callable[[], object]:
    def call() -> object:
        with torch.no_grad():
            return f()

    return call


CASES: list[tuple[str, str, Callable[[], object], type[Exception], str]] = [
    # (function, category, call, error, message pattern)
    ("attention", "type", lambda: attention([1.0], KV, KV), TypeError, r"q must be a torch.Tensor; got list"),
    ("attention", "shape", lambda: attention(Q[0], KV, KV), ValueError, r"must be 4-D: .* got \(2, 3, 4\)"),
    ("attention", "shape", lambda: attention(Q, torch.randn(1, 2, 5, 3), torch.randn(1, 2, 5, 3)), ValueError,
     r"same head size E; got q \(1, 2, 3, 4\), k \(1, 2, 5, 3\)"),
    ("attention", "dtype", lambda: attention(Q.long(), KV.long(), KV.long()), ValueError,
     r"one floating dtype; got torch.int64"),
    ("attention", "device", lambda: attention(Q, KV.to(META), KV.to(META)), ValueError, r"one device; got cpu, meta"),
    ("attention", "value", lambda: attention(Q, KV, KV, dropout_p=1.5), ValueError, r"dropout_p .* \[0, 1\); got 1.5"),
    ("attention", "value", lambda: attention(Q, KV, KV, implementation="flash"), ValueError,
     r"unknown attention implementation 'flash'; choose one of \['eager', 'sdpa'\]"),
    ("attention", "type", lambda: attention(Q, KV, KV, is_causal="yes"), TypeError,  # type: ignore[arg-type]
     r"is_causal must be True or False; got 'yes'"),
    ("scaled_dot_product_attention", "shape", lambda: scaled_dot_product_attention(Q, KV[0], KV[0]), ValueError,
     r"must be 4-D"),
    ("scaled_dot_product_attention", "shape",
     lambda: scaled_dot_product_attention(Q[None], Q[None], Q[None]), ValueError, r"must be 4-D: .*\(1, 1, 2, 3, 4\)"),
    ("grouped_attention", "value", lambda: grouped_attention(torch.randn(1, 3, 2, 4), torch.randn(1, 2, 2, 4),
     torch.randn(1, 2, 2, 4)), ValueError, r"q has 3 heads, which is not a multiple of the 2 .* divide 3 are 1, 3"),
    ("prepare_mask", "type", lambda: prepare_mask([[True]], is_causal=False, shape=(1, 1, 1, 1),  # type: ignore[arg-type]
     dtype=torch.float32, device=torch.device("cpu")), TypeError, r"attn_mask must be a torch.Tensor or None; got list"),
    ("prepare_mask", "dtype", lambda: attention(Q, KV, KV, attn_mask=torch.ones(3, 5, dtype=torch.int64)), ValueError,
     r"dtype torch.int64, which is not supported; use torch.bool"),
    ("prepare_mask", "shape", lambda: attention(Q, KV, KV, attn_mask=torch.ones(4, 5, dtype=torch.bool)), ValueError,
     r"shape \(4, 5\) is not broadcastable .* \(B, H, T, S\) = \(1, 2, 3, 5\)"),
    ("prepare_mask", "device", lambda: attention(Q, KV, KV, attn_mask=torch.ones(3, 5, dtype=torch.bool, device=META)),
     ValueError, r"attn_mask is on meta but the queries are on cpu"),
    ("repeat_kv", "value", lambda: repeat_kv(KV, 0), ValueError, r"n_rep must be at least 1; got n_rep=0"),
    ("repeat_kv", "type", lambda: repeat_kv(KV, 1.5), TypeError, r"n_rep must be an int; got 1.5"),  # type: ignore[arg-type]
    ("repeat_kv", "shape", lambda: repeat_kv(KV[0], 2), ValueError, r"x must be \(B, K, S, E\); got shape \(1, 5, 4\)"),
    ("register_attention", "value", lambda: register_attention("", lambda *a, **k: None), ValueError,  # type: ignore[arg-type]
     r"non-empty name; got ''"),
    ("register_attention", "type", lambda: register_attention("x", "not callable"), TypeError,  # type: ignore[arg-type]
     r"must be callable; got str"),
    ("MultiHeadAttention", "type", lambda: MultiHeadAttention(8.0, 2), TypeError, r"d_model must be an int; got 8.0"),  # type: ignore[arg-type]
    ("MultiHeadAttention", "value", lambda: MultiHeadAttention(100, 12), ValueError,
     r"d_model=100 is not divisible by num_heads=12; head counts that divide 100 are 1, 2, 4, 5, 10, 20, 25, 50, 100"),
    ("MultiHeadAttention", "value", lambda: MultiHeadAttention(16, 4, dropout=1.0), ValueError,
     r"dropout must be a number in \[0, 1\); got dropout=1.0"),
    ("MultiHeadAttention", "value", lambda: MultiHeadAttention(16, 4, implementation="flash"), ValueError,
     r"unknown attention implementation 'flash'"),
    ("MultiHeadAttention", "type", lambda: MultiHeadAttention(16, 4, bias="yes"), TypeError,  # type: ignore[arg-type]
     r"bias must be True or False; got 'yes'"),
    ("MultiHeadAttention.forward", "shape", lambda: MHA(torch.randn(5, 16)), ValueError,
     r"x must be 3-D \(B, T, d_model=16\); got shape \(5, 16\)"),
    ("MultiHeadAttention.forward", "shape", lambda: MHA(torch.randn(1, 5, 8)), ValueError,
     r"x's last dim must be d_model=16; got shape \(1, 5, 8\)"),
    ("MultiHeadAttention.forward", "shape", lambda: MHA(torch.randn(2, 5, 16), torch.randn(3, 4, 16)), ValueError,
     r"context batch size 3 does not match x's batch size 2"),
    ("MultiHeadAttention.forward", "type", lambda: MHA([[1.0]]), TypeError, r"x must be a torch.Tensor; got list"),  # type: ignore[call-overload]
    ("MultiHeadAttention.forward", "dtype", lambda: MHA(torch.randn(1, 5, 16).double()), ValueError,
     r"x has dtype torch.float64 but the module's weights are torch.float32"),
    ("MultiHeadAttention.forward", "device", lambda: MHA(torch.randn(1, 5, 16, device=META)), ValueError,
     r"x is on meta but the module is on cpu"),
    ("MultiHeadAttention.forward", "type", lambda: MHA(torch.randn(1, 5, 16), need_weights="yes"), TypeError,  # type: ignore[call-overload]
     r"need_weights must be True or False; got 'yes'"),
    ("MultiHeadAttention.forward", "value", _no_grad(lambda: MHA(torch.randn(1, 1, 16), torch.randn(1, 2, 16),
     cache=KVCache(1, 2, 4, 4))), ValueError, r"cache is for self-attention decoding; pass context=None"),
    ("MultiHeadAttention.forward", "value", _no_grad(lambda: MHA(torch.randn(1, 2, 16), is_causal=True,
     cache=KVCache(1, 2, 4, 4), cache_position=1)), ValueError, r"cache_position=1 but the cache holds 0 positions"),
    ("MultiHeadAttention.forward", "value", lambda: MHA(torch.randn(1, 2, 16), cache_position=0), ValueError,
     r"cache_position is only meaningful with a cache"),
    ("MultiHeadAttention.kv_head", "value", lambda: MHA.kv_head(4), ValueError, r"head must be in 0..3; got head=4"),
    ("causal_mask", "type", lambda: causal_mask(3.0), TypeError, r"T must be an int; got 3.0"),  # type: ignore[arg-type]
    ("causal_mask", "value", lambda: causal_mask(3, -2), ValueError, r"S must be at least 0; got S=-2"),
    ("padding_mask", "type", lambda: padding_mask([2.5, 3.0]), TypeError, r"lengths must be integers; got \[2.5, 3.0\]"),
    ("padding_mask", "shape", lambda: padding_mask([[2, 3]]), ValueError, r"non-empty 1-D list .* got shape \(1, 2\)"),
    ("padding_mask", "value", lambda: padding_mask([2, 6], S=5), ValueError, r"between 1 and S=5; got \[6\]"),
    ("combine_masks", "shape", lambda: combine_masks(torch.ones(2, 3, dtype=torch.bool),
     torch.ones(4, 3, dtype=torch.bool), torch.float32), ValueError,
     r"masks of shapes \(2, 3\) and \(4, 3\) do not broadcast together"),
    ("combine_masks", "device", lambda: combine_masks(torch.ones(2, 3, dtype=torch.bool),
     torch.ones(2, 3, dtype=torch.bool, device=META), torch.float32), ValueError, r"masks on cpu and meta"),
    ("KVCache", "type", lambda: KVCache(1, 2, 4.0, 8), TypeError, r"cache sizes must be ints; got \{'head_dim': 4.0"),  # type: ignore[arg-type]
    ("KVCache", "value", lambda: KVCache(1, 0, 4, 8), ValueError, r"at least 1; got \{'num_kv_heads': 0\}"),
    ("KVCache.update", "shape", _no_grad(lambda: KVCache(1, 2, 4, 8).update(torch.zeros(1, 3, 2, 4),
     torch.zeros(1, 3, 2, 4))), ValueError, r"k of shape \(1, 3, 2, 4\) does not fit this cache: expected \(B, K, T, E\)"),
    ("KVCache.update", "dtype", _no_grad(lambda: KVCache(1, 2, 4, 8).update(torch.zeros(1, 2, 2, 4).double(),
     torch.zeros(1, 2, 2, 4).double())), ValueError, r"dtype torch.float64 but the cache stores torch.float32"),
    ("KVCache.update", "device", _no_grad(lambda: KVCache(1, 2, 4, 8, device=META).update(torch.zeros(1, 2, 2, 4),
     torch.zeros(1, 2, 2, 4))), ValueError, r"k is on cpu but the cache is on meta"),
    ("KVCache.update", "value", _no_grad(lambda: KVCache(1, 2, 4, 2).update(torch.zeros(1, 2, 3, 4),
     torch.zeros(1, 2, 3, 4))), ValueError, r"cache is full: .* max_len=2 .* make it with max_len >= 3"),
    ("KVCache.update", "value", lambda: KVCache(1, 2, 4, 8).update(torch.zeros(1, 2, 2, 4, requires_grad=True),
     torch.zeros(1, 2, 2, 4)), ValueError, r"k requires grad: KV caches are for inference"),
    ("KVCache.update", "type", lambda: KVCache(1, 2, 4, 8).update("k", "v"), TypeError,  # type: ignore[arg-type]
     r"k must be a torch.Tensor; got str"),
    ("LatentCache", "value", lambda: LatentCache(1, 8, 0, 4), ValueError, r"at least 1; got \{'rope_dim': 0\}"),
    ("LatentCache.update", "shape", _no_grad(lambda: LatentCache(1, 8, 2, 4).update(torch.zeros(1, 2, 8),
     torch.zeros(1, 3, 2))), ValueError, r"same number of positions; got \(1, 2, 8\), \(1, 3, 2\)"),
    ("kv_bytes_per_token", "value", lambda: kv_bytes_per_token(0, 64, torch.float16), ValueError,
     r"num_kv_heads must be at least 1; got num_kv_heads=0"),
    ("kv_bytes_per_token", "type", lambda: kv_bytes_per_token(8, 64.0, torch.float16), TypeError,  # type: ignore[arg-type]
     r"head_dim must be an int; got 64.0"),
    ("kv_bytes_per_token", "dtype", lambda: kv_bytes_per_token(8, 64, "bf16"), TypeError,  # type: ignore[arg-type]
     r"dtype must be a torch.dtype such as torch.bfloat16; got 'bf16'"),
    ("latent_bytes_per_token", "value", lambda: latent_bytes_per_token(512, -1, torch.float16), ValueError,
     r"rope_dim must be at least 1; got rope_dim=-1"),
    ("MultiHeadLatentAttention", "value", lambda: MultiHeadLatentAttention(32, 4, kv_latent_dim=8, rope_dim=3),
     ValueError, r"rope_dim must be even .* got rope_dim=3"),
    ("MultiHeadLatentAttention", "type", lambda: MultiHeadLatentAttention(32.0, 4, kv_latent_dim=8, rope_dim=4),  # type: ignore[arg-type]
     TypeError, r"sizes must be ints; got \{'d_model': 32.0\}"),
    ("MultiHeadLatentAttention.forward", "shape", lambda: MLA(torch.randn(1, 3, 16)), ValueError,
     r"x must be \(B, T, d_model=32\); got shape \(1, 3, 16\)"),
    ("MultiHeadLatentAttention.forward", "dtype", lambda: MLA(torch.randn(1, 3, 32).double()), ValueError,
     r"x has dtype torch.float64 but the module's weights are torch.float32"),
    ("MultiHeadLatentAttention.forward", "device", lambda: MLA(torch.randn(1, 3, 32, device=META)), ValueError,
     r"x is on meta but the module is on cpu"),
    ("MultiHeadLatentAttention.forward", "value", lambda: MLA(torch.randn(1, 3, 32), mode="fast"), ValueError,  # type: ignore[arg-type]
     r"mode must be 'naive' or 'absorbed'; got 'fast'"),
    ("rope_cos_sin", "value", lambda: rope_cos_sin(torch.arange(3), 5), ValueError, r"dim must be even .* got dim=5"),
    ("rope_cos_sin", "dtype", lambda: rope_cos_sin(torch.rand(3), 4), ValueError,
     r"positions must be integers of shape \(T,\); got dtype torch.float32"),
    ("apply_rope", "shape", lambda: apply_rope(torch.randn(2, 3, 4), *rope_cos_sin(torch.arange(5), 4)), ValueError,
     r"x of shape \(2, 3, 4\) needs cos and sin of shape \(3, 4\); got \(5, 4\)"),
    ("pool_kv_heads", "value", lambda: pool_kv_heads(torch.randn(8, 4), 4, 3), ValueError,
     r"num_heads=4 is not a multiple of num_kv_heads=3; valid num_kv_heads for num_heads=4 are 1, 2, 4"),
    ("pool_kv_heads", "value", lambda: pool_kv_heads(torch.randn(8, 4), 4, 2, method="max"), ValueError,  # type: ignore[arg-type]
     r"method must be 'mean' or 'first'; got 'max'"),
    ("expand_kv_heads", "shape", lambda: expand_kv_heads(torch.randn(5, 4), 2, 4), ValueError,
     r"w has 5 rows, which is not a multiple of num_kv_heads=2"),
    ("mha_to_gqa", "type", lambda: mha_to_gqa(nn.Linear(4, 4), 2), TypeError,  # type: ignore[arg-type]
     r"mha must be a lessons_src MultiHeadAttention; got Linear"),
    ("mha_to_gqa", "value", lambda: mha_to_gqa(MHA, 1), ValueError, r"expected an MHA layer .* got num_kv_heads=2"),
    ("from_torch", "type", lambda: from_torch(nn.Linear(4, 4)), TypeError,  # type: ignore[arg-type]
     r"expects a torch.nn.MultiheadAttention; got Linear"),
    ("from_torch", "value", lambda: from_torch(nn.MultiheadAttention(16, 4, kdim=8, vdim=8)), ValueError,
     r"kdim=8 and vdim=8 must equal embed_dim=16"),
    ("masks_from_torch", "shape", lambda: masks_from_torch(torch.zeros(5, 2, 2, dtype=torch.bool), None, num_heads=2),
     ValueError, r"\(B \* num_heads, T, S\); got \(5, 2, 2\)"),
]


@pytest.mark.parametrize(("function", "category", "call", "error", "match"), CASES,
                         ids=[f"{c[0]}-{c[1]}-{i}" for i, c in enumerate(CASES)])
def test_bad_input_gets_a_clear_error(function: str, category: str, call, error, match) -> None:
    with pytest.raises(error, match=match):
        call()


def test_every_public_function_of_the_core_is_covered() -> None:
    import lessons_src

    covered = {c[0].split(".")[0] for c in CASES}
    public = set(lessons_src.__all__) - {"__version__"}
    public |= {"attention", "prepare_mask", "register_attention", "pool_kv_heads", "expand_kv_heads",
               "kv_bytes_per_token", "latent_bytes_per_token", "combine_masks", "rope_cos_sin"}
    assert public <= covered, f"no bad-input case for {sorted(public - covered)}"
    categories = {c[1] for c in CASES}
    assert categories == {"type", "shape", "dtype", "device", "value"}
