"""The checker's answers: the package's own code, with each exercise's signature.

Where the package has the function, the answer is that function (``causal_mask``, ``padding_mask``,
``online_softmax``) or a thin wrapper that runs the package's code on the exercise's inputs
(``mha_forward`` copies the weights into :class:`lessons_src.layer.MultiHeadAttention`). The checker
calls these beside the learner's function and never hands them to the learner's code.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from ...delta_rule import delta_rule_recurrent
from ...flash import online_softmax as _online_softmax
from ...flash import softmax_statistics, tile_plan
from ...flex import flex_attend
from ...functional import _softmax_zero_rows, attention
from ...layer import MultiHeadAttention
from ...masks import causal, draft_tree, mask_mod, mask_tensor, tree_positions
from ...masks import causal_mask as _causal_mask
from ...masks import padding_mask as _padding_mask
from ...mechanisms import ElementwiseGate, PerHeadRMSNorm
from ...paged_cache import PagedKVCache, PagedView
from ...quantized_cache import TileFormat, dequantize_tiles, quantize_tiles
from ...rope import apply_rope, apply_rope_interleaved
from ...score_mods import Sinks, merge_states, soft_cap
from ...sparse_selection import lightning_indexer_scores, top_k_mask
from ..batching import padded_positions

__all__ = [
    "absorb_query",
    "attention_scores",
    "causal_key_ends",
    "causal_mask",
    "causal_mask_mod",
    "decode_step",
    "delta_rule_step",
    "dimension_arithmetic",
    "draft_tree_mask",
    "flash_tile_step",
    "flex_sink_attention",
    "gated_output",
    "gqa_attention",
    "gqa_decode_intensity",
    "indexer_top_k",
    "left_padded_positions",
    "lse_in_base_2",
    "masked_softmax",
    "merge_attention_states",
    "merge_heads",
    "mha_forward",
    "mha_param_count",
    "online_softmax",
    "packed_step_positions",
    "padding_mask",
    "qk_norm_scores",
    "quantize_tile",
    "rope_interleaved",
    "sink_attention",
    "softcapped_softmax",
    "split_heads",
]


def split_heads(x: Tensor, num_heads: int) -> Tensor:
    B, T, D = x.shape
    return x.view(B, T, num_heads, D // num_heads).transpose(1, 2)  # (B, H, T, E)


def merge_heads(y: Tensor) -> Tensor:
    B, H, T, E = y.shape
    return y.transpose(1, 2).reshape(B, T, H * E)  # (B, T, H * E)


def attention_scores(q: Tensor, k: Tensor) -> Tensor:
    return (q @ k.transpose(-2, -1)) / math.sqrt(q.shape[-1])  # (B, H, T, S)


def causal_mask(T: int, S: int) -> Tensor:
    return _causal_mask(T, S)  # (T, S): lessons_src.masks.causal_mask


def padding_mask(lengths: list[int], S: int) -> Tensor:
    return _padding_mask(lengths, S)  # (B, 1, 1, S): lessons_src.masks.padding_mask


def masked_softmax(scores: Tensor, mask: Tensor) -> Tensor:
    return _softmax_zero_rows(scores.masked_fill(~mask, float("-inf")))  # the "eager" implementation's softmax


def mha_forward(x: Tensor, w_q: Tensor, w_k: Tensor, w_v: Tensor, w_o: Tensor, num_heads: int) -> Tensor:
    mha = MultiHeadAttention(x.shape[-1], num_heads).to(x.dtype)
    with torch.no_grad():
        mha.qkv_proj.weight.copy_(torch.cat([w_q, w_k, w_v]))  # rows [W_Q; W_K; W_V]
        mha.out_proj.weight.copy_(w_o)
        out: Tensor = mha(x)
    return out


def mha_param_count(d_model: int, num_heads: int, num_kv_heads: int, bias: bool) -> int:
    mha = MultiHeadAttention(d_model, num_heads, num_kv_heads=num_kv_heads, bias=bias, implementation="eager")
    return sum(p.numel() for p in mha.parameters())


def dimension_arithmetic(d_model: int, num_heads: int) -> dict[str, int]:
    mha = MultiHeadAttention(d_model, num_heads)
    w = mha.head_weights()  # per-head views: q (H, E, D), o (H, D, E)
    return {
        "head_dim": mha.head_dim,
        "w_q_one_head": w.q[0].numel(),
        "w_q_all_heads": w.q.numel(),
        "concat_width": mha.num_heads * mha.head_dim,
        "w_o": mha.out_proj.weight.numel(),
    }


def gqa_attention(q: Tensor, k: Tensor, v: Tensor) -> Tensor:
    return attention(q, k, v).output  # (B, H, T, E)


def decode_step(q: Tensor, k_new: Tensor, v_new: Tensor, k_cache: Tensor, v_cache: Tensor, position: int) -> Tensor:
    T = q.shape[2]
    k_cache[:, :, position : position + T] = k_new
    v_cache[:, :, position : position + T] = v_new
    k, v = k_cache[:, :, : position + T], v_cache[:, :, : position + T]  # the S = position + T filled slots
    return attention(q, k, v, is_causal=True).output  # is_causal is bottom-right in lessons_src


def online_softmax(x: Tensor, block_size: int) -> Tensor:
    return _online_softmax(x, block_size=block_size)  # lessons_src.flash.online_softmax


def absorb_query(q_nope: Tensor, w_uk: Tensor) -> Tensor:
    H = q_nope.shape[1]
    w = w_uk.view(H, -1, w_uk.shape[-1])  # (H, E, C): W_UK per head, as MultiHeadLatentAttention._absorbed
    return torch.einsum("bhte,hec->bhtc", q_nope, w)  # (B, H, T, C)


def softcapped_softmax(scores: Tensor, mask: Tensor, cap: float) -> Tensor:
    capped = soft_cap(scores, cap)  # lessons_src.score_mods.soft_cap, before the mask
    return _softmax_zero_rows(capped.masked_fill(~mask, float("-inf")))


def sink_attention(q: Tensor, k: Tensor, v: Tensor, sinks: Tensor, mask: Tensor) -> Tensor:
    return attention(q, k, v, attn_mask=mask, score_mods=Sinks(sinks), implementation="eager").output  # (B, H, T, E)


def qk_norm_scores(q: Tensor, k: Tensor, q_weight: Tensor, k_weight: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    norm = PerHeadRMSNorm(q.shape[-1], eps=1e-6).to(q.dtype)  # Qwen3's: offset 0, the weight itself
    with torch.no_grad():
        assert norm.k_weight is not None  # a norm made with keys=True has a key weight
        norm.q_weight.copy_(q_weight)
        norm.k_weight.copy_(k_weight)
        q, k = norm(q, k)
    q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
    return (q @ k.transpose(-2, -1)) / math.sqrt(q.shape[-1])  # (B, H, T, T)


def gated_output(x: Tensor, heads: Tensor, w_g: Tensor, w_o: Tensor) -> Tensor:
    B, H, T, E = heads.shape
    gate = ElementwiseGate(x.shape[-1], H, E).to(x.dtype)
    with torch.no_grad():
        gate.proj.weight.copy_(w_g)
        y: Tensor = gate(x, heads)  # (B, H, T, E): gated before W_O
    return y.transpose(1, 2).reshape(B, T, H * E) @ w_o.T  # (B, T, D)


def delta_rule_step(state: Tensor, q: Tensor, k: Tensor, v: Tensor, g: Tensor, beta: Tensor) -> Tensor:
    one = {"q": q[:, :, None], "k": k[:, :, None], "v": v[:, :, None], "g": g[:, :, None], "beta": beta[:, :, None]}
    out, new = delta_rule_recurrent(**one, state=state, scale=1.0)  # one token: (B, H, 1, Dv), (B, H, Dk, Dv)
    state.copy_(new)
    return out[:, :, 0]


def indexer_top_k(q: Tensor, k: Tensor, weights: Tensor, top_k: int) -> Tensor:
    return top_k_mask(lightning_indexer_scores(q, k, weights), top_k)  # (B, 1, T, S); the scale keeps the order


def causal_mask_mod(q_idx: Tensor, kv_idx: Tensor, T: int, S: int) -> Tensor:
    zero = torch.zeros((), dtype=torch.long)
    keep: Tensor = mask_mod(causal(), T, S)(zero, zero, q_idx, kv_idx)  # the rule, at positions q_idx + S - T
    return keep


def flex_sink_attention(q: Tensor, k: Tensor, v: Tensor, sinks: Tensor) -> Tensor:
    return flex_attend(q, k, v, sinks=sinks)  # lessons_src.flex: the sink through the returned log-sum-exp


def gqa_decode_intensity(batch: int, num_heads: int, num_kv_heads: int, head_dim: int, cached: int,
                         bytes_per_number: int) -> dict[str, float]:
    dtype = {1: torch.int8, 2: torch.bfloat16, 4: torch.float32}[bytes_per_number]
    k, v = (torch.empty(batch, num_kv_heads, cached, head_dim, dtype=dtype, device="meta") for _ in range(2))
    read = k.nbytes + v.nbytes  # the cache's keys and values, measured (meta: shapes only, nothing allocated)
    # what FlopCounterMode counts for attention(q, k, v, implementation="eager") with one query per head
    # (tests/lab/test_roofline.py checks it): q k^T and weights v, 2 FLOPs per multiply-add
    flops = 2 * 2 * batch * num_heads * cached * head_dim
    return {"flops": flops, "bytes": read, "intensity": flops / read}


def merge_attention_states(o1: Tensor, lse1: Tensor, o2: Tensor, lse2: Tensor) -> tuple[Tensor, Tensor]:
    return merge_states([(o1, lse1), (o2, lse2)])  # lessons_src.score_mods.merge_states


def rope_interleaved(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    return apply_rope_interleaved(x, cos, sin)  # lessons_src.rope: pairs (2i, 2i + 1)


def flash_tile_step(m: Tensor, l: Tensor, acc: Tensor, s: Tensor, v: Tensor) -> dict[str, Tensor]:
    # the step of lessons_src.flash's loop (_forward), on one block of queries of one head
    m_new = torch.maximum(m, s.amax(dim=-1))  # (Q,)
    shift = torch.where(m_new == float("-inf"), torch.zeros_like(m_new), m_new)
    p = torch.exp(s - shift[:, None])  # (Q, K)
    alpha = torch.exp(m - shift)  # (Q,)
    return {"m": m_new, "l": alpha * l + p.sum(dim=-1), "acc": alpha[:, None] * acc + p @ v}


def causal_key_ends(T: int, S: int, block_q: int) -> list[int]:
    # a tile of one key is skipped exactly when the block's last query cannot see it (lessons_src.flash.tile_plan)
    return [sum(kind != "skip" for kind in row) for row in tile_plan(T, S, block_q, 1, causal=True)]


def lse_in_base_2(x: Tensor, block_size: int) -> Tensor:
    *_, (m, l) = softmax_statistics(x, block_size=block_size)  # lessons_src.flash: block by block; the last
    return m + torch.log(l)  # natural log; -inf + log(0) = -inf for a row that sees nothing


def draft_tree_mask(parents: list[int], cached: int) -> tuple[Tensor, Tensor]:
    n = len(parents)
    keep = mask_tensor(causal() & draft_tree(parents, start=cached), n, cached + n)[0, 0]  # lessons_src.masks
    return keep, tree_positions(parents, cached)


def left_padded_positions(lengths: list[int], T: int) -> Tensor:
    keep = torch.arange(T) >= T - torch.tensor(lengths)[:, None]  # (B, T): True on the real tokens
    return padded_positions(keep)  # lessons_src.lab.batching: keep.cumsum(-1) - 1, the padding at 0


def packed_step_positions(cached: list[int], new: list[int]) -> Tensor:
    pool = PagedKVCache(num_blocks=sum(cached) + sum(new), block_size=1, num_kv_heads=1, head_dim=1)
    for i, n in enumerate(cached):  # each request in a page pool, holding its cached positions
        pool.add_sequence(i)
        if n:
            pool.append(i, torch.zeros(1, n, 1), torch.zeros(1, n, 1))
    return PagedView(pool, list(range(len(cached))), list(new)).positions()[0]  # lessons_src.paged_cache


def quantize_tile(x: Tensor, bits: int, tile: int) -> Tensor:
    fmt = TileFormat("exercise", bits, tile, torch.float32)  # lessons_src.quantized_cache, a float32 scale
    return dequantize_tiles(*quantize_tiles(x, fmt), fmt)
