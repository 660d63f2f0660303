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
    explicit_attention,
    from_torch,
    masks_from_torch,
    mha_to_gqa,
    online_softmax,
    padding_mask,
    repeat_kv,
    tiled_attention,
)
from lessons_src.convert import expand_kv_heads, pool_kv_heads
from lessons_src.flash import block_kind, count_rescales, softmax_statistics, tile_plan, tiled_attention_function
from lessons_src.flex import block_mask, block_sparsity, flex_attend, soft_cap_mod
from lessons_src.functional import attention, check_implementation, check_supports, register_attention
from lessons_src.kv_cache import ChunkedKVCache, RollingKVCache, kv_bytes_per_token, latent_bytes_per_token
from lessons_src.masks import (
    CausalTiles,
    MaskRule,
    PreparedMask,
    and_masks,
    at_positions,
    by_distance,
    causal,
    check_chunk,
    check_mask,
    check_window,
    chunk_mask,
    combine_masks,
    document_mask,
    draft_tree,
    key_mask,
    mask_mod,
    mask_tensor,
    or_masks,
    padding,
    prefix_lm,
    prefix_lm_mask,
    prepare_mask,
    same_chunk,
    same_document,
    sliding_window,
    tree_ancestors,
    tree_positions,
)
from lessons_src.mechanisms import (
    ConjugateRotation,
    ElementwiseGate,
    HeadwiseGate,
    NoPETemperature,
    PerHeadRMSNorm,
    ProjectionRMSNorm,
    Rotary,
    ValueRMSNorm,
    WeightlessRMSNorm,
)
from lessons_src.paged_cache import PagedKVCache, PagedView, block_runs, paged_attention
from lessons_src.parallel import TensorParallelAttention, tp_plan, ulysses_attention, valid_tp_degrees
from lessons_src.ring import ring_attention, sequence_chunks, shard_sequence, unshard_sequence
from lessons_src.rope import (
    RopeScaling,
    apply_rope_interleaved,
    interleaved_to_rotate_half,
    llama3_scaling,
    mrope_cos_sin,
    mrope_grid_positions,
    mrope_pair_axes,
    proportional_scaling,
    rope_cos_sin,
    rope_frequencies,
    rotate_half_to_interleaved,
    yarn_scaling,
)
from lessons_src.score_mods import (
    Sinks,
    SoftCap,
    check_score_mods,
    check_sinks,
    check_softcap,
    merge_states,
    score_mod_arguments,
    sdpa_with_sinks,
    sink_flash_cpu,
    sinks_as_a_key,
    soft_cap,
)
from lessons_src.shared_kv import GroupedOutput, OverlapCompressor, SharedKVAttention, SharedKVCache
from lessons_src.speculative import DraftCache, accept_greedy, prompt_lookup, tree_from_drafts
from lessons_src.split_kv import shared_prefix_attention, split_bounds, split_kv_attention

if TYPE_CHECKING:
    from collections.abc import Callable

class _Stub:
    """Collectives where only the degree matters: every check runs before any collective."""

    def __init__(self, world_size: int = 2, rank: int = 0) -> None:
        self.world_size, self.rank = world_size, rank


def _one_sequence(table: list[int] | None = None) -> PagedKVCache:
    cache = PagedKVCache(4, 2, 1, 4)
    cache.add_sequence(0)
    with torch.no_grad():
        cache.append(0, torch.zeros(1, 1, 4), torch.zeros(1, 1, 4))
    if table is not None:
        cache.block_tables[0] = table
    return cache


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




def _shared_kv_layer() -> SharedKVAttention:
    return SharedKVAttention(8, 2, 4, q_rank=3, window=2, rope=Rotary(2), output=GroupedOutput(2, 4, 8, groups=2, rank=3))

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
     r"unknown attention implementation 'flash'; choose one of \['eager', 'sdpa', 'tiled'\]"),
    ("tiled_attention", "value", lambda: tiled_attention(Q, KV, KV, block_q=0), ValueError,
     r"block_q must be at least 1 \(a number of positions per block\); got block_q=0"),
    ("tiled_attention", "type", lambda: tiled_attention(Q, KV, KV, block_k=8.0), TypeError,  # type: ignore[arg-type]
     r"block_k must be an int; got 8.0 of type float"),
    ("online_softmax", "value", lambda: online_softmax(Q, block_size=-1), ValueError,
     r"block_size must be at least 1 \(a number of positions per block\); got block_size=-1"),
    ("attention", "type", lambda: attention(Q, KV, KV, is_causal="yes"), TypeError,  # type: ignore[arg-type]
     r"is_causal must be True or False; got 'yes'"),
    ("explicit_attention", "shape", lambda: explicit_attention(Q, KV[0], KV[0]), ValueError,
     r"must be 4-D"),
    ("explicit_attention", "shape",
     lambda: explicit_attention(Q[None], Q[None], Q[None]), ValueError, r"must be 4-D: .*\(1, 1, 2, 3, 4\)"),
    ("attention", "value", lambda: attention(torch.randn(1, 3, 2, 4), torch.randn(1, 2, 2, 4),
     torch.randn(1, 2, 2, 4)), ValueError, r"q has 3 heads, which is not a multiple of the 2 .* divide 3 are 1, 3"),
    ("PreparedMask", "type", lambda: PreparedMask([[True]], True, 1, 1), TypeError,  # type: ignore[arg-type]
     r"mask must be a tensor or None \(prepare_mask makes one\); got list"),
    ("prepare_mask", "type", lambda: prepare_mask([[True]], is_causal=False, shape=(1, 1, 1, 1),  # type: ignore[arg-type]
     dtype=torch.float32, device=torch.device("cpu")), TypeError, r"attn_mask must be a torch.Tensor, a MaskRule, a list of them or None; got list"),
    ("prepare_mask", "dtype", lambda: attention(Q, KV, KV, attn_mask=torch.ones(3, 5, dtype=torch.int64)), ValueError,
     r"dtype torch.int64, which is not supported; use torch.bool"),
    ("prepare_mask", "shape", lambda: attention(Q, KV, KV, attn_mask=torch.ones(4, 5, dtype=torch.bool)), ValueError,
     r"shape \(4, 5\) is not broadcastable .* \(B, H, T, S\) = \(1, 2, 3, 5\)"),
    ("prepare_mask", "device", lambda: attention(Q, KV, KV, attn_mask=torch.ones(3, 5, dtype=torch.bool, device=META)),
     ValueError, r"attn_mask is on meta but the queries are on cpu"),
    ("repeat_kv", "value", lambda: repeat_kv(KV, 0), ValueError, r"n_rep must be at least 1; got n_rep=0"),
    ("repeat_kv", "type", lambda: repeat_kv(KV, 1.5), TypeError, r"n_rep must be an int; got 1.5"),  # type: ignore[arg-type]
    ("repeat_kv", "shape", lambda: repeat_kv(KV[0], 2), ValueError, r"x must be \(B, K, S, E\); got shape \(1, 5, 4\)"),
    ("check_implementation", "value", lambda: check_implementation("fast"), ValueError,
     r"unknown attention implementation 'fast'; choose one of"),
    ("check_implementation", "type", lambda: check_implementation(["sdpa"]), TypeError,  # type: ignore[arg-type]
     r"implementation must be a name \(a str\) in ATTENTION_FUNCTIONS; got list"),
    ("check_supports", "value", lambda: check_supports("sdpa", windw=3), ValueError,
     r"windw is not a feature an implementation declares; the features are .*'softcap'"),
    ("check_supports", "value", lambda: check_supports("sdpa", softcap=50.0), ValueError,
     r"implementation='sdpa' cannot soft-cap the scores \(got softcap=50.0\); use one that can"),
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
    ("MultiHeadAttention.forward", "type", lambda: MHA([[1.0]]), TypeError, r"x must be a torch.Tensor; got list"),  # type: ignore[arg-type]
    ("MultiHeadAttention.forward", "dtype", lambda: MHA(torch.randn(1, 5, 16).double()), ValueError,
     r"x has dtype torch.float64 but the module's weights are torch.float32"),
    ("MultiHeadAttention.forward", "device", lambda: MHA(torch.randn(1, 5, 16, device=META)), ValueError,
     r"x is on meta but the module is on cpu"),
    ("MultiHeadAttention.with_weights", "value", lambda: MHA.with_weights(torch.randn(1, 5, 16), implementation="sdpa"),
     ValueError, r"implementation='sdpa' cannot return the attention weights .*use one that can: 'eager'"),
    ("MultiHeadAttention.with_weights", "value", lambda: MHA.with_weights(torch.randn(1, 5, 16), implementation="fast"),
     ValueError, r"unknown attention implementation 'fast'; choose one of"),
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
    ("KVCache", "type", lambda: KVCache(1, 2, 4.0, 8), TypeError, r"head_dim must be an int; got 4.0"),  # type: ignore[arg-type]
    ("KVCache", "value", lambda: KVCache(1, 0, 4, 8), ValueError, r"num_kv_heads must be at least 1; got num_kv_heads=0"),
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
    ("LatentCache", "value", lambda: LatentCache(1, 8, 0, 4), ValueError, r"rope_dim must be at least 1; got rope_dim=0"),
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
     TypeError, r"d_model must be an int; got 32.0"),
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
     r"positions must be integers of shape \(T,\) or \(B, T\); got dtype torch.float32"),
    ("apply_rope", "shape", lambda: apply_rope(torch.randn(2, 3, 4), *rope_cos_sin(torch.arange(5), 4)), ValueError,
     r"x of shape \(2, 3, 4\) needs cos and sin of shape \(3, 4\) or \(2, 3, 4\); got \(5, 4\)"),
    ("apply_rope_interleaved", "shape", lambda: apply_rope_interleaved(torch.randn(3, 5), *rope_cos_sin(torch.arange(3), 4)),
     ValueError, r"x of shape \(3, 5\) needs cos and sin of shape \(3, 5\); got \(3, 4\)"),
    ("interleaved_to_rotate_half", "value", lambda: interleaved_to_rotate_half(5), ValueError, r"dim must be even .* got dim=5"),
    ("rotate_half_to_interleaved", "value", lambda: rotate_half_to_interleaved(0), ValueError, r"dim must be even .* got dim=0"),
    ("mrope_pair_axes", "value", lambda: mrope_pair_axes((2, 4, 4)), ValueError,
     r"sections=\(2, 4, 4\) cannot be interleaved: an axis after the first gets at most one pair in 3"),
    ("mrope_cos_sin", "shape", lambda: mrope_cos_sin(torch.zeros(3, 2, dtype=torch.long), 8, sections=(3, 3, 2)),
     ValueError, r"dim=8 rotates 4 pairs but sections=\(3, 3, 2\) share 8; use dim=16"),
    ("mrope_grid_positions", "value", lambda: mrope_grid_positions((1, 0, 2)), ValueError, r"grid\[1\] must be at least 1"),
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
    # the newer modules (issue 28): flash, the rolling and paged caches, ring, parallel
    ("prepare_mask", "shape", lambda: attention(Q, KV, KV, attn_mask=torch.ones(2, 1, 1, 5, dtype=torch.bool)),
     ValueError, r"shape \(2, 1, 1, 5\) is not broadcastable .* = \(1, 2, 3, 5\)"),
    ("online_softmax", "shape", lambda: online_softmax(torch.tensor(1.0)), ValueError,
     r"x must have at least 1 dim .*; got a 0-d tensor"),
    ("online_softmax", "dtype", lambda: online_softmax(torch.arange(3)), ValueError,
     r"x must be floating .*; got torch.int64"),
    ("online_softmax", "type", lambda: online_softmax([1.0, 2.0]), TypeError, r"x must be a torch.Tensor; got list"),  # type: ignore[arg-type]
    ("softmax_statistics", "value", lambda: next(softmax_statistics(torch.randn(3), block_size=0)), ValueError,
     r"block_size must be at least 1 \(a number of positions per block\); got block_size=0"),
    ("block_kind", "value", lambda: block_kind(0, 2, 0, 2, 4, 4, causal=True, window=0), ValueError,
     r"window must be at least 1 .*; got window=0"),
    ("tiled_attention_function", "value", lambda: tiled_attention_function(Q, KV, KV, prepare_mask(
     None, is_causal=False, shape=(1, 2, 3, 5), dtype=torch.float32, device=torch.device("cpu")), scale=0.5,
     dropout_p=0.1), ValueError, r"does not implement dropout; got dropout_p=0.1"),
    ("tile_plan", "value", lambda: tile_plan(-4, 4, 2, 2, causal=True), ValueError, r"at least 0; got T=-4, S=4"),
    ("count_rescales", "value", lambda: count_rescales(Q, block_size=4, threshold=-1), ValueError,
     r"threshold must be a number >= 0 \(powers of two\); got -1"),
    ("count_rescales", "type", lambda: count_rescales([1.0], block_size=4, threshold=8), TypeError,  # type: ignore[arg-type]
     r"x must be a torch.Tensor; got list"),
    ("count_rescales", "dtype", lambda: count_rescales(torch.arange(3), block_size=2, threshold=8), ValueError,
     r"x must be floating \(scores\); got torch.int64"),
    ("tiled_attention", "shape", lambda: tiled_attention(Q, KV[:, :, :, :3], KV), ValueError, r"same head size E"),
    ("KVCache", "dtype", lambda: KVCache(1, 2, 4, 8, dtype=torch.int64), ValueError,
     r"dtype=torch.int64 .* floating dtype such as torch.float32"),
    ("KVCache", "type", lambda: KVCache(1, 2, 4, 8, dtype="float32"), TypeError,  # type: ignore[arg-type]
     r"dtype must be a torch.dtype such as torch.float32; got 'float32'"),
    ("LatentCache", "dtype", lambda: LatentCache(1, 8, 2, 4, dtype=torch.bool), ValueError, r"dtype=torch.bool"),
    ("RollingKVCache", "dtype", lambda: RollingKVCache(1, 1, 2, 3, dtype=torch.int32), ValueError, r"dtype=torch.int32"),
    ("RollingKVCache", "value", lambda: RollingKVCache(1, 1, 2, 3, sink_tokens=-1), ValueError, r"sink_tokens must be at least 0"),
    ("RollingKVCache.update", "shape", _no_grad(lambda: RollingKVCache(1, 1, 2, 3).update(torch.zeros(1, 2, 1, 2),
     torch.zeros(1, 2, 1, 2))), ValueError, r"k of shape \(1, 2, 1, 2\) does not fit this cache"),
    ("RollingKVCache.update", "device", _no_grad(lambda: RollingKVCache(1, 1, 2, 3).update(
     torch.zeros(1, 1, 1, 2, device=META), torch.zeros(1, 1, 1, 2, device=META))), ValueError, r"k is on meta"),
    ("PagedKVCache", "dtype", lambda: PagedKVCache(4, 2, 1, 4, dtype=torch.int64), ValueError, r"dtype=torch.int64"),
    ("PagedKVCache.append", "device", _no_grad(lambda: _one_sequence().append(0, torch.zeros(1, 1, 4, device=META),
     torch.zeros(1, 1, 4, device=META))), ValueError, r"k is torch.float32 on meta but the pool is torch.float32 on cpu"),
    ("PagedKVCache.fork", "value", lambda: _one_sequence().fork(0, 1, 2), ValueError,
     r"length=2 but sequence 0 holds only 1 positions"),
    ("PagedKVCache.truncate", "type", lambda: _one_sequence().truncate(0, 0.5), TypeError,  # type: ignore[arg-type]
     r"length must be an int; got 0.5"),
    ("PagedView", "type", lambda: PagedView(_one_sequence(), 0), TypeError,  # type: ignore[arg-type]
     r"seq_ids must be a non-empty list of sequence ids; got 0"),
    ("PagedView.update", "shape", _no_grad(lambda: PagedView(_one_sequence(), [0]).update(torch.zeros(1, 1, 1, 2),
     torch.zeros(1, 1, 1, 2))), ValueError, r"k of shape \(1, 1, 2\) does not fit: one sequence's \(K, T, E\)"),
    ("PagedView.update", "device", _no_grad(lambda: PagedView(_one_sequence(), [0]).update(
     torch.zeros(1, 1, 1, 4, device=META), torch.zeros(1, 1, 1, 4, device=META))), ValueError, r"k is torch.float32 on meta"),
    ("paged_attention", "value", lambda: paged_attention(torch.randn(1, 1, 1, 4), _one_sequence(table=[99]), [0]),
     ValueError, r"names block 99; the pool has 0..3"),
    ("paged_attention", "type", lambda: paged_attention("q", _one_sequence(), [0]), ValueError,  # type: ignore[arg-type]
     r"q must be \(B, H, T, E\)"),
    ("block_runs", "value", lambda: block_runs([-1, 0, 99]), ValueError, r"at least 0; got -1 in \[-1, 0, 99\]"),
    ("ring_attention", "shape", lambda: ring_attention(Q, *[KV.expand(2, 1, 5, 4)[:, :, :3]] * 2, _Stub()),  # type: ignore[arg-type]
     ValueError, r"q and k must have the same batch size; got q \(1, 2, 3, 4\), k \(2, 1, 3, 4\)"),
    ("ring_attention", "dtype", lambda: ring_attention(Q, KV[:, :, :3].double(), KV[:, :, :3].double(), _Stub()),  # type: ignore[arg-type]
     ValueError, r"one floating dtype; got torch.float32, torch.float64"),
    ("ring_attention", "device", lambda: ring_attention(Q, KV[:, :, :3].to(META), KV[:, :, :3].to(META), _Stub()),  # type: ignore[arg-type]
     ValueError, r"one device; got cpu, meta"),
    ("ring_attention", "type", lambda: ring_attention(Q, KV[:, :, :3], KV[:, :, :3], _Stub(), is_causal="no"),  # type: ignore[arg-type]
     TypeError, r"is_causal must be True or False; got 'no'"),
    ("ring_attention", "value", lambda: ring_attention(Q, KV[:, :0, :3], KV[:, :0, :3], _Stub()),  # type: ignore[arg-type]
     ValueError, r"not a multiple of the 0 key/value heads"),
    ("sequence_chunks", "value", lambda: sequence_chunks(8, 2, 2), ValueError, r"rank must be in 0..1; got rank=2"),
    ("shard_sequence", "value", lambda: shard_sequence(torch.zeros(1, 6), 4, 0, dim=1), ValueError,
     r"T=6 positions do not split into 4 equal blocks"),
    ("unshard_sequence", "shape", lambda: unshard_sequence([torch.zeros(1, 3), torch.zeros(1, 2)], dim=1), ValueError,
     r"T=5 positions do not split into 2 equal blocks"),
    ("shard_sequence", "value", lambda: shard_sequence(torch.zeros(2, 4), 2, 0, dim=5), ValueError,
     r"dim=5 is out of range for x of shape \(2, 4\): use -2..1"),
    ("shard_sequence", "type", lambda: shard_sequence(torch.zeros(2, 4), 2, 0, dim=1.0), TypeError,  # type: ignore[arg-type]
     r"dim must be an int; got 1.0 of type float"),
    ("unshard_sequence", "value", lambda: unshard_sequence([torch.zeros(2, 4)], dim=-3), ValueError,
     r"dim=-3 is out of range for the shards of shape \(2, 4\): use -2..1"),
    ("unshard_sequence", "value", lambda: unshard_sequence([], dim=1), ValueError,
     r"no shards: unshard_sequence needs every rank's shard, in rank order"),
    ("TensorParallelAttention", "value", lambda: TensorParallelAttention(16, 4, comm=_Stub(3)), ValueError,  # type: ignore[arg-type]
     r"degree 3 does not split num_heads=4"),
    ("TensorParallelAttention", "value", lambda: TensorParallelAttention(16, 4, comm=_Stub(2), dropout=1.0),  # type: ignore[arg-type]
     ValueError, r"dropout must be a number in \[0, 1\); got dropout=1.0"),
    ("TensorParallelAttention.forward", "shape", lambda: TensorParallelAttention(16, 4, comm=_Stub(2))(torch.randn(2, 8)),  # type: ignore[arg-type]
     ValueError, r"x must be \(B, T, d_model=16\); got shape \(2, 8\)"),
    ("tp_plan", "type", lambda: tp_plan(8, 2, 2.0), TypeError, r"degree must be an int; got 2.0"),  # type: ignore[arg-type]
    ("valid_tp_degrees", "value", lambda: valid_tp_degrees(6, 4), ValueError, r"num_heads=6 is not a multiple of num_kv_heads=4"),
    ("ulysses_attention", "shape", lambda: ulysses_attention(MHA, torch.randn(4, 16), _Stub(2)), ValueError,  # type: ignore[arg-type]
     r"x must be 3-D \(B, T, d_model=16\); got shape \(4, 16\)"),
    ("ulysses_attention", "device", lambda: ulysses_attention(MHA, torch.randn(1, 4, 16, device=META), _Stub(2)),  # type: ignore[arg-type]
     ValueError, r"x is on meta but the module is on cpu"),
    ("ulysses_attention", "type", lambda: ulysses_attention(MHA, "x", _Stub(2)), TypeError,  # type: ignore[arg-type]
     r"x must be a torch.Tensor; got str"),
    # today's mechanisms: the cap and the sinks of the one interface, and the pieces a layer is given
    ("attention", "value", lambda: attention(Q, KV, KV, score_mods=SoftCap(0.0), implementation="eager"), ValueError,
     r"cap must be above 0 \(Gemma 2 uses 50.0\); got cap=0.0"),
    ("attention", "value", lambda: attention(Q, KV, KV, score_mods=SoftCap(float("inf")), implementation="eager"), ValueError,
     r"cap must be finite .*; got cap=inf"),
    ("attention", "type", lambda: attention(Q, KV, KV, score_mods=SoftCap("50"), implementation="eager"), TypeError,  # type: ignore[arg-type]
     r"cap must be a number; got '50' of type str"),
    ("attention", "value", lambda: attention(Q, KV, KV, score_mods=SoftCap(50.0)), ValueError,
     r"implementation='sdpa' cannot soft-cap the scores \(got softcap=50.0\).*'eager'.*'tiled'"),
    ("attention", "shape", lambda: attention(Q, KV, KV, score_mods=Sinks(torch.zeros(3))), ValueError,
     r"sinks must have shape \(H,\) = \(2,\), one logit per query head; got shape \(3,\)"),
    ("attention", "shape", lambda: attention(Q, KV, KV, score_mods=Sinks(torch.zeros(1, 2))), ValueError,
     r"logits must be 1-D \(H,\), one logit per query head; got shape \(1, 2\)"),
    ("attention", "dtype", lambda: attention(Q, KV, KV, score_mods=Sinks(torch.zeros(2, dtype=torch.float64))), ValueError,
     r"sinks have dtype torch.float64 but the queries are torch.float32; convert them: sinks.to\(torch.float32\)"),
    ("attention", "device", lambda: attention(Q, KV, KV, score_mods=Sinks(torch.zeros(2, device=META))), ValueError,
     r"sinks are on meta but the queries are on cpu; move them there"),
    ("attention", "type", lambda: attention(Q, KV, KV, score_mods=Sinks([0.0, 0.0])), TypeError,  # type: ignore[arg-type]
     r"Sinks needs logits, a tensor of shape \(H,\): one logit per query head; got list"),
    ("SoftCap", "value", lambda: SoftCap(-1.0), ValueError, r"cap must be above 0 .*; got cap=-1.0"),
    ("Sinks", "type", lambda: Sinks(2.0), TypeError, r"Sinks needs logits, a tensor of shape \(H,\)"),  # type: ignore[arg-type]
    ("score_mod_arguments", "type", lambda: score_mod_arguments("cap", 2, torch.float32, torch.device("cpu")), TypeError,
     r"score_mods must be SoftCap\(cap\), Sinks\(logits\), a list of them or None; got 'cap'"),
    ("attention", "type", lambda: attention(Q, KV, KV, score_mods=50.0), TypeError,  # type: ignore[arg-type]
     r"score_mods must be SoftCap\(cap\), Sinks\(logits\), a list of them or None; got 50.0"),
    ("attention", "value", lambda: attention(Q, KV, KV, score_mods=[Sinks(torch.zeros(2))] * 2), ValueError,
     r"score_mods has a piece twice: \['Sinks', 'Sinks'\]"),
    ("attention", "value", lambda: attention(Q, KV, KV, is_causal=True, attn_mask=prefix_lm(1)), ValueError,
     r"prefix_lm widens the causal mask .*give it without is_causal=True or a causal rule"),
    ("MultiHeadAttention", "value", lambda: MultiHeadAttention(16, 4, softcap=50.0), ValueError,
     r"implementation='sdpa' cannot soft-cap the scores \(got softcap=50.0\); use one that can: 'eager', 'tiled'"),
    ("MultiHeadAttention", "value", lambda: MultiHeadAttention(16, 4, softcap=-1.0, implementation="eager"), ValueError,
     r"softcap must be above 0 .*; got softcap=-1.0"),
    ("MultiHeadAttention", "type", lambda: MultiHeadAttention(16, 4, sinks=1), TypeError,  # type: ignore[arg-type]
     r"sinks must be True or False .*; got 1"),
    ("MultiHeadAttention", "shape", lambda: MultiHeadAttention(16, 4, gate=HeadwiseGate(16, 2)), ValueError,
     r"HeadwiseGate was made for num_heads=2 \(the layer has 4\); make it with the layer's sizes"),
    ("MultiHeadAttention", "shape", lambda: MultiHeadAttention(16, 4, gate=ElementwiseGate(32, 4, 4)), ValueError,
     r"ElementwiseGate was made for d_model=32 \(the layer has 16\)"),
    ("MultiHeadAttention", "shape", lambda: MultiHeadAttention(16, 4, qk_norm=PerHeadRMSNorm(8)), ValueError,
     r"PerHeadRMSNorm was made for head_dim=8 \(the layer has 4\)"),
    ("MultiHeadAttention", "shape", lambda: MultiHeadAttention(16, 4, num_kv_heads=2, qk_norm=ProjectionRMSNorm(4, 4, 4)),
     ValueError, r"ProjectionRMSNorm was made for num_kv_heads=4 \(the layer has 2\)"),
    ("MultiHeadAttention", "shape", lambda: MultiHeadAttention(16, 4, rope=Rotary(8)), ValueError,
     r"Rotary\(dim=8\) rotates more features than a head has \(head_dim=4\); use dim <= 4"),
    ("MultiHeadAttention", "type", lambda: MultiHeadAttention(16, 4, gate=lambda x, y: y), TypeError,  # type: ignore[arg-type]
     r"gate must be an nn.Module piece \(see lessons_src.mechanisms\) or None; got function"),
    ("MultiHeadAttention.forward", "value", lambda: MultiHeadAttention(16, 4, rope=Rotary(4))(
     torch.randn(1, 2, 16), torch.randn(1, 3, 16)), ValueError, r"rope gives positions to self-attention; pass context=None"),
    ("MultiHeadAttention.forward", "value", lambda: MultiHeadAttention(16, 4, softcap=5.0, implementation="eager")(
     torch.randn(1, 2, 16), implementation="sdpa"), ValueError, r"implementation='sdpa' cannot soft-cap the scores"),
    ("MultiHeadAttention", "value", lambda: MultiHeadAttention(16, 4, scale=0.0), ValueError,
     r"scale must be a finite number above 0, or None for 1/sqrt\(head_dim\) = 0.5 \(Gemma 4: 1.0\); got scale=0.0"),
    ("MultiHeadAttention", "value", lambda: MultiHeadAttention(16, 4, scale=float("inf")), ValueError, r"got scale=inf"),
    ("MultiHeadAttention", "type", lambda: MultiHeadAttention(16, 4, scale="1"), TypeError,  # type: ignore[arg-type]
     r"scale must be a number or None; got '1' of type str"),
    ("MultiHeadAttention", "type", lambda: MultiHeadAttention(16, 4, v_norm=lambda v: v), TypeError,  # type: ignore[arg-type]
     r"v_norm must be an nn.Module piece \(see lessons_src.mechanisms\) or None; got function"),
    ("MultiHeadAttention", "value", lambda: MultiHeadAttention(16, 4, qk_norm=PerHeadRMSNorm(4, keys=False)), ValueError,
     r"PerHeadRMSNorm\(keys=False\) norms queries only, .* this layer computes its own: use keys=True"),
    ("PerHeadRMSNorm.forward", "value", lambda: PerHeadRMSNorm(4, keys=False)(Q, KV), ValueError,
     r"this norm has no key weight \(keys=False\): pass k=None, or make it with keys=True"),
    ("PerHeadRMSNorm", "type", lambda: PerHeadRMSNorm(4, keys=1), TypeError, r"keys must be True or False .*; got 1"),  # type: ignore[arg-type]
    ("ValueRMSNorm", "value", lambda: ValueRMSNorm(eps=-1e-6), ValueError, r"eps must be at least 0 .*; got eps=-1e-06"),
    ("proportional_scaling", "value", lambda: proportional_scaling(16, 0.3), ValueError,
     r"fraction=0.3 of dim=16 turns 2.4 of its 8 pairs; use a fraction giving a whole number of pairs, one of 0.125, 0.25, .* 1"),
    ("proportional_scaling", "value", lambda: proportional_scaling(16, 0.0), ValueError,
     r"fraction must be a number in \(0, 1\] \(Gemma 4: 0.25\); got fraction=0.0"),
    ("proportional_scaling", "value", lambda: proportional_scaling(16, 0.25, factor=0.5), ValueError,
     r"factor must be at least 1 \(1 keeps the frequencies\); got factor=0.5"),
    ("proportional_scaling", "value", lambda: proportional_scaling(15, 0.25), ValueError, r"dim must be even and at least 2; got dim=15"),
    ("Rotary.proportional", "value", lambda: Rotary.proportional(8, 0.1), ValueError, r"fraction=0.1 of dim=8 turns 0.4 of its 4 pairs"),
    ("Rotary", "value", lambda: Rotary(4, features="middle"), ValueError, r"features must be one of 'leading', 'trailing'"),
    ("Rotary.rotate", "shape", lambda: Rotary(4).rotate(torch.randn(3, 2), torch.arange(3)), ValueError,
     r"x must be \(\.\.\., T, E\) with E >= dim=4; got shape \(3, 2\)"),
    ("ConjugateRotation", "type", lambda: ConjugateRotation(nn.Linear(2, 2)), TypeError,  # type: ignore[arg-type]
     r"rope must be the layer's Rotary piece; got Linear"),
    ("ConjugateRotation.forward", "shape", lambda: ConjugateRotation(Rotary(4))(torch.randn(2, 3, 4), start=0), ValueError,
     r"y must be 4-D \(B, heads, T, E\); got shape \(2, 3, 4\)"),
    ("SharedKVAttention.forward", "value", lambda: _shared_kv_layer()(torch.randn(1, 2, 8), cache=SharedKVCache(2), start=3),
     ValueError, r"start=3 but the cache holds 0 tokens"),
    ("GroupedOutput", "value", lambda: GroupedOutput(3, 4, 8, groups=2, rank=3), ValueError, r"groups=2 must divide num_heads=3"),
    ("OverlapCompressor.forward", "value", lambda: OverlapCompressor(8, 4, 2, Rotary(2))(torch.randn(1, 4, 8), start=0,
     cache=SharedKVCache(2)), ValueError, r"start must be 0 and cache None .*its cached decoding is not built"),
    ("PerHeadRMSNorm", "type", lambda: PerHeadRMSNorm(8.0), TypeError, r"head_dim must be an int; got 8.0 of type float"),  # type: ignore[arg-type]
    ("PerHeadRMSNorm", "value", lambda: PerHeadRMSNorm(8, eps=-1.0), ValueError, r"eps must be at least 0 .*; got eps=-1.0"),
    ("ProjectionRMSNorm", "value", lambda: ProjectionRMSNorm(4, 0, 8), ValueError, r"num_kv_heads must be at least 1; got num_kv_heads=0"),
    ("WeightlessRMSNorm", "value", lambda: WeightlessRMSNorm(eps=float("nan")), ValueError, r"eps must be finite .*; got eps=nan"),
    ("Rotary", "value", lambda: Rotary(3), ValueError, r"dim must be even and at least 2; got dim=3"),
    ("Rotary.partial", "value", lambda: Rotary.partial(16, 0.3), ValueError,
     r"fraction=0.3 of head_dim=16 rotates 4.8 features, but RoPE rotates pairs: .* one of 0.125, 0.25, .* 1"),
    ("Rotary.partial", "value", lambda: Rotary.partial(12, 0.25), ValueError,
     r"fraction=0.25 of head_dim=12 rotates 3 features, but RoPE rotates pairs"),
    ("Rotary.partial", "value", lambda: Rotary.partial(16, 1.5), ValueError, r"fraction must be a number in \(0, 1\]"),
    ("Rotary", "shape", lambda: Rotary(8, scaling=yarn_scaling(16, factor=2.0, original_max_positions=64)), ValueError,
     r"scaling has \(8,\) frequencies but dim=8 rotates 4 pairs; make it with dim=8"),
    ("NoPETemperature", "value", lambda: NoPETemperature(floor_scale=0), ValueError,
     r"floor_scale must be at least 1; got floor_scale=0"),
    ("NoPETemperature", "value", lambda: NoPETemperature(attn_scale=-0.1), ValueError,
     r"attn_scale must be at least 0 \(Llama 4: 0.1\); got attn_scale=-0.1"),
    ("NoPETemperature", "type", lambda: NoPETemperature(floor_scale=2.5), TypeError,  # type: ignore[arg-type]
     r"floor_scale must be an int; got 2.5"),
    ("llama3_scaling", "value", lambda: llama3_scaling(16, factor=0.5), ValueError,
     r"factor must be at least 1 \(1 keeps the frequencies, Llama 3.1 uses 8\); got factor=0.5"),
    ("llama3_scaling", "value", lambda: llama3_scaling(16, low_freq_factor=4.0, high_freq_factor=1.0), ValueError,
     r"low_freq_factor=4.0 must be below high_freq_factor=1.0"),
    ("llama3_scaling", "value", lambda: llama3_scaling(15), ValueError, r"dim must be even and at least 2; got dim=15"),
    ("llama3_scaling", "value", lambda: llama3_scaling(16, original_max_positions=0), ValueError,
     r"original_max_positions must be at least 1 \(the trained context\); got original_max_positions=0"),
    ("yarn_scaling", "value", lambda: yarn_scaling(16, factor=float("inf"), original_max_positions=64), ValueError,
     r"factor must be finite .*; got factor=inf"),
    ("yarn_scaling", "value", lambda: yarn_scaling(16, factor=4.0, original_max_positions=64, beta_fast=1.0,
     beta_slow=32.0), ValueError, r"beta_slow=32.0 must be below beta_fast=1.0"),
    ("yarn_scaling", "value", lambda: yarn_scaling(16, factor=4.0, original_max_positions=64, attention_factor=0.0),
     ValueError, r"attention_factor must be above 0 .*; got attention_factor=0.0"),
    ("yarn_scaling", "type", lambda: yarn_scaling(16, factor="4", original_max_positions=64), TypeError,  # type: ignore[arg-type]
     r"factor must be a number; got '4' of type str"),
    ("yarn_scaling", "type", lambda: yarn_scaling(16, factor=4.0, original_max_positions=64, truncate="no"),  # type: ignore[arg-type]
     TypeError, r"truncate must be True or False \(gpt-oss: False\); got 'no'"),
    ("rope_frequencies", "value", lambda: rope_frequencies(8, base=1.0), ValueError,
     r"base must be above 1 \(rope_theta, 10000 in RoFormer\); got base=1.0"),
    ("RopeScaling", "shape", lambda: rope_cos_sin(torch.arange(3), 4, scaling=RopeScaling(torch.ones(3))), ValueError,
     r"scaling has \(3,\) frequencies but dim=4 rotates 2 pairs"),
    ("document_mask", "dtype", lambda: document_mask(torch.zeros(3)), TypeError, r"documents must hold integer document ids; got dtype torch.float32"),
    ("document_mask", "type", lambda: document_mask([0, 0, 1]), TypeError, r"documents must be a tensor of integer document ids; got list"),  # type: ignore[arg-type]
    ("document_mask", "shape", lambda: document_mask(torch.zeros(1, 2, 3, dtype=torch.long)), ValueError, r"documents must be \(S,\) or \(B, S\), .*; got shape \(1, 2, 3\)"),
    ("document_mask", "value", lambda: document_mask(torch.zeros(3, dtype=torch.long), T=0), ValueError, r"T=0 queries must be the last of the S=3 positions"),
    ("attention", "device", lambda: attention(torch.randn(1, 1, 3, 4, device="meta"), *[torch.randn(1, 1, 3, 4, device="meta")] * 2,
     attn_mask=same_document(torch.zeros(3, dtype=torch.long))), ValueError, r"documents are on cpu but the mask is built on meta; move them there"),
    ("attention", "shape", lambda: attention(torch.randn(2, 1, 3, 4), *[torch.randn(2, 1, 3, 4)] * 2, attn_mask=same_document(torch.zeros(3, 3, dtype=torch.long))),
     ValueError, r"documents has 3 rows for a batch of B=2; give one per sequence or one for all"),
    ("tree_ancestors", "type", lambda: tree_ancestors("01"), TypeError, r"parents must be a list of ints"),
    ("tree_ancestors", "value", lambda: tree_ancestors([-1, 1]), ValueError, r"parents\[1\]=1: each node's parent must come before it"),
    ("tree_ancestors", "dtype", lambda: tree_ancestors(torch.tensor([-1.0, 0.0])), TypeError, r"parents must hold integer node indices"),
    ("tree_positions", "value", lambda: tree_positions([-1, 0], start=-2), ValueError, r"start must be at least 0"),
    ("draft_tree", "shape", lambda: attention(Q, KV, KV, attn_mask=draft_tree([-1, 0], start=1)), ValueError, r"S must be 3; got S=5"),
    ("draft_tree", "type", lambda: draft_tree([-1, 0], start=1.0), TypeError, r"start must be an int"),  # type: ignore[arg-type]
    ("at_positions", "dtype", lambda: at_positions(causal(), torch.zeros(4)), TypeError, r"positions must be an integer tensor"),
    ("at_positions", "shape", lambda: attention(Q, KV, KV, attn_mask=at_positions(causal(), torch.arange(3))), ValueError, r"positions give 3 slots but there are S=5"),
    ("at_positions", "device", lambda: attention(Q, KV, KV, attn_mask=at_positions(causal(), torch.arange(5, device="meta"))), ValueError, r"positions are on meta"),
    ("prompt_lookup", "type", lambda: prompt_lookup("abc"), TypeError, r"context must be a list or 1-D tensor of token ids"),
    ("prompt_lookup", "dtype", lambda: prompt_lookup(torch.zeros(3)), TypeError, r"context must be a 1-D tensor of token ids; got dtype torch.float32"),
    ("prompt_lookup", "value", lambda: prompt_lookup([1, 2], ngram=0), ValueError, r"ngram must be at least 1"),
    ("tree_from_drafts", "type", lambda: tree_from_drafts(0, [[1, 2.5]]), TypeError, r"each draft must hold int token ids"),
    ("tree_from_drafts", "type", lambda: tree_from_drafts(0, "12"), TypeError, r"drafts must be a list of chains"),  # type: ignore[arg-type]
    ("accept_greedy", "shape", lambda: accept_greedy([0, 1], [-1, 0], torch.zeros(3, 5)), ValueError, r"logits must be \(n, V\) = \(2, V\)"),
    ("accept_greedy", "value", lambda: accept_greedy([0], [-1, 0], torch.zeros(2, 5)), ValueError, r"tokens has 1 entries but parents has 2"),
    ("DraftCache", "type", lambda: DraftCache(RollingKVCache(1, 1, 2, window=2)), TypeError, r"cache must be a LayerCache"),  # type: ignore[arg-type]
    ("DraftCache", "value", lambda: DraftCache(KVCache(1, 1, 2, max_len=4)).keep([0]), ValueError, r"keep\(\) needs the positions of the last pass"),
    ("RollingKVCache", "value", lambda: RollingKVCache(1, 1, 2, window=2, spare=-1), ValueError, r"spare must be at least 0"),
    ("RollingKVCache", "value", lambda: RollingKVCache(1, 1, 2, window=2).truncate(1), ValueError, r"length=1 but the cache has seen only 0"),
    ("key_mask", "type", lambda: key_mask([1, 1, 0]), TypeError, r"keep must be a tensor, True \(or 1\) for each real token; got list"),  # type: ignore[arg-type]
    ("key_mask", "dtype", lambda: key_mask(torch.ones(3)), TypeError, r"keep must be bool \(or 0/1 integers\).*; got dtype torch.float32"),
    ("key_mask", "shape", lambda: key_mask(torch.ones(1, 1, 3, dtype=torch.bool)), ValueError, r"keep must be \(S,\) or \(B, S\), .*; got shape \(1, 1, 3\)"),
    ("key_mask", "value", lambda: key_mask(torch.tensor([0, 1, 2])), ValueError, r"keep must hold 0 \(padding\) and 1 \(a real token\) only"),
    ("key_mask", "shape", lambda: attention(Q, KV, KV, attn_mask=key_mask(torch.ones(1, 4, dtype=torch.bool))), ValueError,
     r"keep gives 4 positions but there are S=5 keys: one entry per key position, the cached ones included"),
    ("key_mask", "device", lambda: attention(torch.randn(1, 1, 3, 4, device="meta"), *[torch.randn(1, 1, 3, 4, device="meta")] * 2,
     attn_mask=key_mask(torch.ones(3, dtype=torch.bool))), ValueError, r"keep are on cpu but the mask is built on meta; move them there"),
    ("MultiHeadAttention.forward", "dtype", lambda: MHA(torch.randn(2, 3, 16), positions=torch.zeros(2, 3)), ValueError,
     r"positions must have a integer dtype such as torch.int64; got torch.float32"),
    ("MultiHeadAttention.forward", "shape", lambda: MHA(torch.randn(2, 3, 16), positions=torch.arange(3)), ValueError,
     r"positions must be 2-D \(B, T\) = \(2, 3\), one position per row and token; got shape \(3,\)"),
    ("MultiHeadAttention.forward", "shape", lambda: MHA(torch.randn(2, 3, 16), positions=torch.zeros(1, 3, dtype=torch.long)), ValueError,
     r"positions must be \(B, T\) = \(2, 3\), one position per row and token; got shape \(1, 3\)"),
    ("MultiHeadAttention.forward", "value", lambda: MHA(torch.randn(1, 3, 16), positions=torch.tensor([[0, -1, 1]])), ValueError,
     r"positions must be at least 0 \(a row's first real token is at 0\); got -1"),
    ("MultiHeadAttention.forward", "device", lambda: MHA(torch.randn(1, 3, 16), positions=torch.zeros(1, 3, dtype=torch.long, device=META)), ValueError,
     r"positions are on meta but the queries are on cpu; move them there"),
    ("MultiHeadAttention.forward", "type", lambda: MHA(torch.randn(1, 3, 16), positions=[[0, 1, 2]]), TypeError,  # type: ignore[arg-type]
     r"positions must be a torch.Tensor \(B, T\)"),
    ("MultiHeadAttention.forward", "value", lambda: MHA(torch.randn(1, 3, 16), torch.randn(1, 4, 16), positions=torch.zeros(1, 3, dtype=torch.long)),
     ValueError, r"positions are for self-attention"),
    ("rope_cos_sin", "shape", lambda: rope_cos_sin(torch.zeros(1, 2, 3, dtype=torch.long), 4), ValueError,
     r"positions must be integers of shape \(T,\) or \(B, T\); got dtype torch.int64, shape \(1, 2, 3\)"),
    ("apply_rope", "shape", lambda: apply_rope(torch.randn(2, 1, 3, 4), *rope_cos_sin(torch.zeros(3, 3, dtype=torch.long), 4)), ValueError,
     r"x of shape \(2, 1, 3, 4\) needs cos and sin of shape \(3, 4\) or \(2, 3, 4\); got \(3, 3, 4\)"),
    ("prefix_lm_mask", "value", lambda: prefix_lm_mask(3, prefix=4), ValueError, r"prefix=4 is longer than the S=3 keys; use 0 .. 3"),
    ("prefix_lm_mask", "value", lambda: prefix_lm_mask(3, prefix=[1, -1]), ValueError, r"every prefix length must be between 0 and S=3; got \[-1\]"),
    ("prefix_lm_mask", "value", lambda: prefix_lm_mask(4, 3, prefix=1), ValueError, r"a prefix LM needs 1 <= T <= S .*; got T=4, S=3"),
    ("prefix_lm_mask", "type", lambda: prefix_lm_mask(3, prefix=[0.5]), TypeError, r"prefix must be an int, or a 1-D list of ints .*; got \[0.5\]"),  # type: ignore[list-item]
    ("prefix_lm_mask", "type", lambda: prefix_lm_mask(3, prefix=2.0), TypeError, r"prefix must be an int, or a 1-D list of ints"),  # type: ignore[arg-type]
    ("MultiHeadAttention.forward", "value", lambda: MultiHeadAttention(16, 4)(torch.randn(1, 3, 16), is_causal=True,
     attn_mask=prefix_lm(1)), ValueError, r"prefix_lm widens the causal mask .*give it without is_causal=True"),
    ("attention", "shape", lambda: attention(torch.randn(2, 1, 3, 4), *[torch.randn(2, 1, 3, 4)] * 2, attn_mask=prefix_lm([1, 2, 3])),
     ValueError, r"prefix has 3 rows for a batch of B=2; give one per sequence or one for all"),
    ("MultiHeadAttention.forward", "value", lambda: MultiHeadAttention(16, 4)(torch.randn(1, 2, 16),
     attn_mask=prefix_lm(1) & causal() & same_chunk(2)), ValueError, r"prefix_lm widens the causal mask .*or a causal rule"),
    ("MaskRule", "type", lambda: MaskRule("x", 3), TypeError, r"fn must be a function \(b, h, q, kv\) -> bool tensor; got int"),  # type: ignore[arg-type]
    ("and_masks", "type", lambda: and_masks(causal(), torch.ones(2, 2)), TypeError, r"and_masks takes one or more MaskRule; got \['Tensor'\]"),  # type: ignore[arg-type]
    ("or_masks", "type", lambda: or_masks(), TypeError, r"or_masks takes one or more MaskRule; got none"),
    ("causal", "type", lambda: mask_tensor(causal(), 4, 4.0), TypeError, r"S must be an int; got 4.0 of type float"),  # type: ignore[arg-type]
    ("padding", "type", lambda: padding([2.5, 3.0]), TypeError, r"lengths must be integers; got \[2.5, 3.0\]"),
    ("padding", "value", lambda: mask_tensor(padding([2, 6]), 1, 5, B=2), ValueError, r"every length must be between 1 and S=5; got \[6\]"),
    ("padding", "shape", lambda: mask_tensor(padding([2, 3]), 1, 5, B=3), ValueError, r"lengths has 2 rows for a batch of B=3"),
    ("padding", "device", lambda: mask_tensor(padding(torch.tensor([2, 3])), 1, 5, B=2, device="meta"), ValueError, r"lengths are on cpu but the mask is built on meta; move them there"),
    ("sliding_window", "value", lambda: sliding_window(0), ValueError, r"window must be at least 1 \(the query itself\); got window=0"),
    ("sliding_window", "value", lambda: sliding_window(2, sink_tokens=-1), ValueError, r"sink_tokens must be at least 0; got sink_tokens=-1"),
    ("same_chunk", "type", lambda: same_chunk(None), TypeError, r"chunk must be an int of at least 1; got None"),  # type: ignore[arg-type]
    ("same_document", "dtype", lambda: same_document(torch.zeros(3)), TypeError, r"documents must hold integer document ids; got dtype torch.float32"),
    ("same_document", "shape", lambda: mask_tensor(same_document(torch.tensor([0, 0, 1])), 2, 4), ValueError, r"documents give 3 positions but there are S=4 keys"),
    ("prefix_lm", "value", lambda: block_mask(prefix_lm(4), 3, block_size=2), ValueError, r"prefix=4 is longer than the S=3 keys; use 0 .. 3"),
    ("prefix_lm", "type", lambda: prefix_lm([0.5]), TypeError, r"prefix must be an int, or a 1-D list of ints \(one per sequence\); got \[0.5\]"),  # type: ignore[list-item]
    ("mask_tensor", "type", lambda: mask_tensor(torch.ones(2, 2), 2), TypeError, r"rule must be a MaskRule .*; got Tensor"),  # type: ignore[arg-type]
    ("mask_mod", "value", lambda: mask_mod(causal(), -1), ValueError, r"T must be at least 0; got T=-1"),
    ("CausalTiles", "value", lambda: CausalTiles(4, 4, causal() & same_chunk(2)), ValueError, r"causal & same_chunk\(2\) does not depend on the distance alone"),
    ("CausalTiles", "value", lambda: CausalTiles(4, 4, None).visible(0, 2, 0, 2), ValueError, r"a rule of None hides nothing"),
    ("by_distance", "value", lambda: by_distance(causal() & same_chunk(2), 4), ValueError, r"causal & same_chunk\(2\) does not depend on the distance alone"),
    ("by_distance", "type", lambda: by_distance("causal", 4), TypeError, r"rule must be a MaskRule .*; got str"),  # type: ignore[arg-type]
    ("by_distance", "value", lambda: by_distance(causal(), 4, -2), ValueError, r"S must be at least 0; got S=-2"),
    ("soft_cap_mod", "value", lambda: soft_cap_mod(-1.0), ValueError, r"cap must be above 0 .*; got cap=-1.0"),
    ("block_mask", "value", lambda: block_mask(causal(), 4, block_size=0), ValueError, r"block_size must be at least 1; got block_size=0"),
    ("block_mask", "type", lambda: block_mask(torch.ones(4, 4), 4), TypeError, r"mask must be a MaskRule or a mask_mod function; got Tensor"),  # type: ignore[arg-type]
    ("block_sparsity", "type", lambda: block_sparsity(torch.ones(2, 2)), TypeError, r"block_sparsity needs mask, a BlockMask \(from block_mask\); got Tensor"),  # type: ignore[arg-type]
    ("flex_attend", "shape", lambda: flex_attend(*[torch.randn(1, 2, 4, 8)] * 3, sinks=torch.zeros(3)), ValueError, r"sinks must have shape \(H,\) = \(2,\)"),
    ("flex_attend", "dtype", lambda: flex_attend(*[torch.randn(1, 2, 4, 8)] * 3, sinks=torch.zeros(2, dtype=torch.float64)), ValueError,
     r"sinks have dtype torch.float64 but the queries are torch.float32"),
    ("chunk_mask", "value", lambda: chunk_mask(4, 4, 0), ValueError, r"chunk must be at least 1 position .*; got chunk=0"),
    ("chunk_mask", "type", lambda: chunk_mask(4, 4, None), TypeError, r"chunk must be an int of at least 1; got None"),  # type: ignore[arg-type]
    ("ChunkedKVCache", "value", lambda: ChunkedKVCache(1, 1, 4, 0), ValueError, r"chunk must be at least 1; got chunk=0"),
    ("check_window", "value", lambda: check_window(0), ValueError, r"window must be at least 1 \(the query itself\); got window=0"),
    ("check_mask", "dtype", lambda: check_mask(torch.ones(2, 2, dtype=torch.int64), (1, 1, 2, 2), torch.float32),
     ValueError, r"attn_mask has dtype torch.int64, which is not supported"),
    ("check_chunk", "type", lambda: check_chunk(2.0), TypeError, r"chunk must be an int or None; got 2.0 of type float"),
    ("causal_mask", "value", lambda: causal_mask(4, chunk=-1), ValueError, r"chunk must be at least 1 position"),
    ("MultiHeadAttention.forward", "type", lambda: MultiHeadAttention(16, 4)(torch.randn(1, 3, 16),
     attn_mask=[causal(), "chunk"]), TypeError, r"attn_mask must be a torch.Tensor, a MaskRule, a list of them or None; got str"),
    ("same_chunk", "value", lambda: same_chunk(0), ValueError, r"chunk must be at least 1 position \(Llama 4 uses 8192\); got chunk=0"),
    ("HeadwiseGate", "value", lambda: HeadwiseGate(16, 0), ValueError, r"num_heads must be at least 1; got num_heads=0"),
    ("ElementwiseGate", "type", lambda: ElementwiseGate(16, 4, "4"), TypeError, r"head_dim must be an int; got '4' of type str"),  # type: ignore[arg-type]
    ("mha_to_gqa", "value", lambda: mha_to_gqa(MultiHeadAttention(16, 4, sinks=True), 2), ValueError,
     r"mha_to_gqa handles plain attention; this layer also has sinks, which it would drop"),
    ("ulysses_attention", "value", lambda: ulysses_attention(MultiHeadAttention(16, 4, gate=HeadwiseGate(16, 4)),
     torch.randn(1, 4, 16), _Stub(2)), ValueError, r"ulysses_attention handles plain attention; this layer also has gate"),  # type: ignore[arg-type]
    ("TensorParallelAttention", "value", lambda: TensorParallelAttention.from_module(MultiHeadAttention(
     16, 4, softcap=5.0, implementation="eager"), _Stub(2)), ValueError, r"from_module handles plain attention; this layer also has softcap"),  # type: ignore[arg-type]
    ("soft_cap", "value", lambda: soft_cap(torch.ones(2), 0.0), ValueError, r"cap must be above 0 .*; got cap=0.0"),
    ("check_softcap", "type", lambda: check_softcap("50"), TypeError, r"softcap must be a number; got '50' of type str"),
    ("check_sinks", "dtype", lambda: check_sinks(torch.zeros(4, dtype=torch.float64), 4, torch.float32, torch.device("cpu")),
     ValueError, r"sinks have dtype torch.float64 but the queries are torch.float32"),
    ("check_score_mods", "shape", lambda: check_score_mods(None, torch.zeros(3), 4, torch.float32, torch.device("cpu")),
     ValueError, r"sinks must have shape \(H,\) = \(4,\), one logit per query head; got shape \(3,\)"),
    ("sinks_as_a_key", "shape", lambda: sinks_as_a_key(torch.ones(1, 4, 3, 8), torch.ones(1, 3, 5, 8), torch.ones(1, 3, 5, 8),
     None, torch.zeros(4)), ValueError, r"sinks_as_a_key needs .* H a multiple of K; got q \(1, 4, 3, 8\), k \(1, 3, 5, 8\)"),
    ("sdpa_with_sinks", "shape", lambda: sdpa_with_sinks(torch.ones(1, 4, 3, 8), torch.ones(1, 2, 5, 8), torch.ones(1, 2, 5, 8),
     torch.zeros(2), mask=None, is_causal=False, scale=0.5), ValueError, r"sinks must have shape \(H,\) = \(4,\)"),
    ("sink_flash_cpu", "dtype", lambda: sink_flash_cpu(*(torch.ones(1, 2, 3, 4, dtype=torch.float16),) * 3,
     torch.zeros(2, dtype=torch.float16), is_causal=False, mask=None, scale=0.5), ValueError,
     r"sink_flash_cpu runs torch's CPU flash kernel: float32 or float64 .* got q \(1, 2, 3, 4\) torch.float16"),
    ("sink_flash_cpu", "shape", lambda: sink_flash_cpu(torch.ones(1, 2, 3, 4), torch.ones(1, 1, 3, 4), torch.ones(1, 1, 3, 4),
     torch.zeros(2), is_causal=False, mask=None, scale=0.5), ValueError, r"one KV head per query head"),
    # attention states and the pieces of a cache they merge (issue 81)
    ("merge_states", "type", lambda: merge_states(torch.zeros(2, 3)), TypeError,  # type: ignore[arg-type]
     r"states must be a non-empty list of \(output, lse\) pairs of tensors; got Tensor"),
    ("merge_states", "value", lambda: merge_states([]), TypeError, r"states must be a non-empty list"),
    ("merge_states", "type", lambda: merge_states([(torch.zeros(2, 3), [0.0, 0.0])]), TypeError,  # type: ignore[list-item]
     r"states\[0\] lse must be a torch.Tensor \(\.\.\.\); got list"),
    ("merge_states", "shape", lambda: merge_states([(torch.zeros(2, 3), torch.zeros(3))]), ValueError,
     r"states\[0\] needs output \(\.\.\., Ev\) and lse \(\.\.\.\) on one device; got output \(2, 3\)"),
    ("merge_states", "dtype", lambda: merge_states([(torch.zeros(2, 3), torch.zeros(2)), (torch.zeros(2, 3), torch.zeros(2).double())]),
     ValueError, r"states\[1\] has output \(2, 3\) and lse \(2,\) torch.float64 .* every state must match"),
    ("merge_states", "dtype", lambda: merge_states([(torch.zeros(2, 3, dtype=torch.long), torch.zeros(2))]), ValueError,
     r"states\[0\] output must have a floating dtype"),
    ("merge_states", "device", lambda: merge_states([(torch.zeros(2, 3), torch.zeros(2, device=META))]), ValueError,
     r"on one device; got output \(2, 3\) on cpu, lse \(2,\) on meta"),
    ("split_bounds", "value", lambda: split_bounds(8, split_size=2, num_splits=2), ValueError,
     r"give exactly one of split_size and num_splits; got split_size=2, num_splits=2"),
    ("split_bounds", "type", lambda: split_bounds(8, split_size=2.0), TypeError, r"split_size must be an int"),  # type: ignore[arg-type]
    ("split_bounds", "value", lambda: split_bounds(8, num_splits=0), ValueError, r"num_splits must be at least 1"),
    ("split_kv_attention", "value", lambda: split_kv_attention(Q, KV, KV, split_size=2, implementation="sdpa"), ValueError,
     r"implementation='sdpa' cannot return the log-sum-exp .*'eager'.*'tiled'"),
    ("split_kv_attention", "value", lambda: split_kv_attention(Q, KV, KV), ValueError, r"give exactly one of split_size"),
    ("split_kv_attention", "shape", lambda: split_kv_attention(Q, KV[0], KV[0], split_size=2), ValueError, r"q, k, v must be 4-D"),
    ("split_kv_attention", "dtype", lambda: split_kv_attention(Q, KV.double(), KV.double(), split_size=2), ValueError,
     r"q, k, v must share one floating dtype"),
    ("split_kv_attention", "device", lambda: split_kv_attention(Q, KV.to(META), KV.to(META), split_size=2), ValueError,
     r"q, k, v must be on one device"),
    ("split_kv_attention", "type", lambda: split_kv_attention(Q, KV, KV, split_size=2, score_mods="cap"), TypeError,  # type: ignore[arg-type]
     r"score_mods must be SoftCap\(cap\), Sinks\(logits\)"),
    ("shared_prefix_attention", "shape", lambda: shared_prefix_attention(Q, KV.expand(2, 1, 5, 4), KV.expand(2, 1, 5, 4), KV, KV),
     ValueError, r"prefix_k and prefix_v must be one copy \(1, K, P, E\) .* got prefix_k \(2, 1, 5, 4\)"),
    ("shared_prefix_attention", "shape", lambda: shared_prefix_attention(Q, KV, KV, KV[:, :, :2], KV[:, :, :2]), ValueError,
     r"with is_causal each request's T=3 queries must be among its own S=2 keys"),
    ("shared_prefix_attention", "value", lambda: shared_prefix_attention(Q, KV, KV, KV, KV, implementation="sdpa"), ValueError,
     r"cannot return the log-sum-exp"),
    ("shared_prefix_attention", "type", lambda: shared_prefix_attention(Q, KV, KV, KV, KV, is_causal=1), TypeError,  # type: ignore[arg-type]
     r"is_causal must be True or False"),
    ("shared_prefix_attention", "dtype", lambda: shared_prefix_attention(Q, KV.double(), KV.double(), KV, KV), ValueError,
     r"q, k, v must share one floating dtype"),
    ("shared_prefix_attention", "device", lambda: shared_prefix_attention(Q, KV.to(META), KV.to(META), KV, KV), ValueError,
     r"q, k, v must be on one device"),
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
    public |= {"attention", "prepare_mask", "register_attention", "check_implementation", "check_supports", "pool_kv_heads", "expand_kv_heads",
               "kv_bytes_per_token", "latent_bytes_per_token", "combine_masks", "rope_cos_sin"}
    from lessons_src import flash, paged_cache, parallel, ring

    public |= {n for m in (flash, paged_cache, parallel, ring) for n in m.__all__ if n[0].islower() or n in
               ("PagedKVCache", "PagedView", "TensorParallelAttention")}
    public |= {"RollingKVCache", "ChunkedKVCache", "soft_cap"}
    from lessons_src import mechanisms

    public |= set(mechanisms.__all__)
    from lessons_src import masks, rope

    public |= set(rope.__all__) | set(masks.__all__)
    from lessons_src import flex, score_mods, split_kv

    public |= set(score_mods.__all__) | set(flex.__all__) | set(split_kv.__all__)
    from lessons_src import speculative

    public |= set(speculative.__all__)
    assert public <= covered, f"no bad-input case for {sorted(public - covered)}"
    categories = {c[1] for c in CASES}
    assert categories == {"type", "shape", "dtype", "device", "value"}


# --------------------------------------------------------------------------- one rule for every size argument

_q, _kv = torch.randn(1, 2, 4, 4), torch.randn(1, 1, 4, 4)


def _paged(**sizes: object) -> object:
    return PagedKVCache(**{"num_blocks": 4, "block_size": 2, "num_kv_heads": 1, "head_dim": 4, **sizes})  # type: ignore[arg-type]


def _paged_attention(min_run: object) -> object:
    cache = _paged()
    cache.add_sequence(0)  # type: ignore[attr-defined]
    with torch.no_grad():
        cache.append(0, torch.zeros(1, 2, 4), torch.zeros(1, 2, 4))  # type: ignore[attr-defined]
    return paged_attention(torch.randn(1, 1, 1, 4), cache, [0], min_run=min_run)  # type: ignore[arg-type]


def _size_calls() -> list[tuple[str, int, Callable[[object], object]]]:
    return [  # (argument, a good value, call with that argument set to n)
        ("d_model", 16, lambda n: MultiHeadAttention(n, 4)),  # type: ignore[arg-type]
        ("num_heads", 4, lambda n: MultiHeadAttention(16, n)),  # type: ignore[arg-type]
        ("num_kv_heads", 2, lambda n: MultiHeadAttention(16, 4, num_kv_heads=n)),  # type: ignore[arg-type]
        ("n_rep", 2, lambda n: repeat_kv(KV, n)),  # type: ignore[arg-type]
        ("head", 1, lambda n: MHA.kv_head(n)),  # type: ignore[arg-type]
        ("window", 2, lambda n: attention(_q, _kv, _kv, attn_mask=sliding_window(n))),  # type: ignore[arg-type]
        ("T", 3, lambda n: causal_mask(n)),  # type: ignore[arg-type]
        ("sink_tokens", 1, lambda n: causal_mask(3, window=2, sink_tokens=n)),  # type: ignore[arg-type]
        ("head_dim", 4, lambda n: KVCache(1, 2, n, 8)),  # type: ignore[arg-type]
        ("max_len", 8, lambda n: KVCache(1, 2, 4, n)),  # type: ignore[arg-type]
        ("kv_latent_dim", 8, lambda n: LatentCache(1, n, 2, 4)),  # type: ignore[arg-type]
        ("window", 3, lambda n: RollingKVCache(1, 1, 2, n)),  # type: ignore[arg-type]
        ("sink_tokens", 1, lambda n: RollingKVCache(1, 1, 2, 3, sink_tokens=n)),  # type: ignore[arg-type]
        ("num_kv_heads", 8, lambda n: kv_bytes_per_token(n, 64, torch.float16)),  # type: ignore[arg-type]
        ("rope_dim", 64, lambda n: latent_bytes_per_token(512, n, torch.float16)),  # type: ignore[arg-type]
        ("num_blocks", 4, lambda n: _paged(num_blocks=n)),
        ("block_size", 2, lambda n: _paged(block_size=n)),
        ("v_head_dim", 4, lambda n: _paged(v_head_dim=n)),
        ("min_run", 2, _paged_attention),
        ("block_size", 2, lambda n: online_softmax(torch.randn(3, 5), block_size=n)),  # type: ignore[arg-type]
        ("block_q", 2, lambda n: tiled_attention(_q, _kv, _kv, block_q=n)),  # type: ignore[arg-type]
        ("block_k", 2, lambda n: tiled_attention(_q, _kv, _kv, block_k=n)),  # type: ignore[arg-type]
        ("T", 4, lambda n: tile_plan(n, 4, 2, 2, causal=True)),  # type: ignore[arg-type]
        ("S", 4, lambda n: tile_plan(4, n, 2, 2, causal=True)),  # type: ignore[arg-type]
        ("world_size", 2, lambda n: sequence_chunks(8, n, 0)),  # type: ignore[arg-type]
        ("rank", 1, lambda n: sequence_chunks(8, 2, n)),  # type: ignore[arg-type]
        ("num_heads", 8, lambda n: valid_tp_degrees(n, 2)),  # type: ignore[arg-type]
        ("degree", 2, lambda n: tp_plan(8, 2, n)),  # type: ignore[arg-type]
        ("d_model", 32, lambda n: MultiHeadLatentAttention(n, 4, kv_latent_dim=8, rope_dim=4)),  # type: ignore[arg-type]
        ("num_kv_heads", 2, lambda n: pool_kv_heads(torch.randn(16, 4), 4, n)),  # type: ignore[arg-type]
        ("num_kv_heads", 2, lambda n: mha_to_gqa(MultiHeadAttention(16, 4), n)),  # type: ignore[arg-type]
        ("dim", 4, lambda n: rope_cos_sin(torch.arange(3), n)),  # type: ignore[arg-type]
        ("split_size", 2, lambda n: split_kv_attention(_q, _kv, _kv, split_size=n)),  # type: ignore[arg-type]
        ("num_splits", 2, lambda n: split_bounds(4, num_splits=n)),  # type: ignore[arg-type]
    ]


SIZE_CALLS = _size_calls()


@pytest.mark.parametrize(("name", "good", "call"), SIZE_CALLS, ids=[f"{c[0]}-{i}" for i, c in enumerate(SIZE_CALLS)])
def test_every_size_argument_takes_numpy_ints_and_refuses_bools_and_floats(name: str, good: int, call) -> None:
    """One rule: any integer ``operator.index`` accepts (numpy's included) is a size; bool and float are not."""
    import numpy as np

    call(np.int64(good))
    for bad in (True, float(good)):
        with pytest.raises(TypeError, match=rf"{name}\b.*{bad!r}|{bad!r}.*{name}\b|'{name}': {bad!r}"):
            call(bad)
