"""The solutions the exercise pages show: plain ``torch``, at most 15 lines each, nothing from ``lessons_src``.

A learner who is stuck reads these, so each is written out in full where :mod:`.solutions` (the checker's
reference) calls the package. They are checked against that reference, by the checker, when the pages are
built and in ``tests/lab/test_exercises.py``, which also holds them to the line limit and to importing only
``math`` and ``torch``. Each function runs alone after this module's imports: the pages print it with them.
"""

import math

import torch
from torch import Tensor
from torch.nn.attention.flex_attention import AuxRequest, flex_attention

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

MAX_LINES = 15  # the longest a shown solution may be, its `def` line included


def split_heads(x: Tensor, num_heads: int) -> Tensor:
    B, T, D = x.shape
    E = D // num_heads
    return x.view(B, T, num_heads, E).transpose(1, 2)  # (B, T, H, E) -> (B, H, T, E)


def merge_heads(y: Tensor) -> Tensor:
    B, H, T, E = y.shape
    return y.transpose(1, 2).reshape(B, T, H * E)  # (B, T, H, E) -> (B, T, H * E)


def attention_scores(q: Tensor, k: Tensor) -> Tensor:
    E = q.shape[-1]  # the head size
    return q @ k.transpose(-2, -1) / math.sqrt(E)  # (B, H, T, S)


def mha_param_count(d_model: int, num_heads: int, num_kv_heads: int, bias: bool) -> int:
    E = d_model // num_heads
    q_out, kv_out = num_heads * E, num_kv_heads * E  # output features of W_Q; of W_K and of W_V each
    outs = [q_out, kv_out, kv_out, d_model]  # W_Q, W_K, W_V, W_O
    ins = [d_model, d_model, d_model, q_out]  # W_O reads the heads side by side
    return sum(i * o + (o if bias else 0) for i, o in zip(ins, outs, strict=True))


def dimension_arithmetic(d_model: int, num_heads: int) -> dict[str, int]:
    head_dim = d_model // num_heads
    return {
        "head_dim": head_dim,
        "w_q_one_head": d_model * head_dim,  # D inputs, head_dim outputs
        "w_q_all_heads": num_heads * d_model * head_dim,  # = d_model * d_model
        "concat_width": num_heads * head_dim,
        "w_o": num_heads * head_dim * d_model,
    }


def causal_mask(T: int, S: int) -> Tensor:
    return torch.ones(T, S, dtype=torch.bool).tril(diagonal=S - T)  # query i sees keys j <= i + S - T


def padding_mask(lengths: list[int], S: int) -> Tensor:
    positions = torch.arange(S)  # (S,)
    real = positions < torch.tensor(lengths)[:, None]  # (B, S): True at the real tokens
    return real[:, None, None, :]  # (B, 1, 1, S)


def masked_softmax(scores: Tensor, mask: Tensor) -> Tensor:
    scores = scores.masked_fill(~mask, float("-inf"))  # a hidden key gets exp(-inf) = 0
    m = scores.amax(dim=-1, keepdim=True)  # (B, H, T, 1): each row's maximum
    m = torch.where(m == float("-inf"), 0.0, m)  # a row that sees nothing: shift by 0, not by -inf
    e = torch.exp(scores - m)
    total = e.sum(dim=-1, keepdim=True)
    return e / torch.where(total > 0, total, 1.0)  # a row that sees nothing: 0 / 1 = 0


def mha_forward(x: Tensor, w_q: Tensor, w_k: Tensor, w_v: Tensor, w_o: Tensor, num_heads: int) -> Tensor:
    B, T, D = x.shape
    E = D // num_heads
    q, k, v = ((x @ w.T).view(B, T, num_heads, E).transpose(1, 2) for w in (w_q, w_k, w_v))  # (B, H, T, E)
    weights = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(E), dim=-1)  # (B, H, T, T)
    y = (weights @ v).transpose(1, 2).reshape(B, T, D)  # the heads side by side
    return y @ w_o.T


def gqa_attention(q: Tensor, k: Tensor, v: Tensor) -> Tensor:
    n_rep = q.shape[1] // k.shape[1]  # query heads per KV head
    k = k.repeat_interleave(n_rep, dim=1)  # (B, H, S, E): query head h reads KV head h // n_rep
    v = v.repeat_interleave(n_rep, dim=1)
    E = q.shape[-1]
    weights = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(E), dim=-1)  # (B, H, T, S)
    return weights @ v  # (B, H, T, E)


def decode_step(q: Tensor, k_new: Tensor, v_new: Tensor, k_cache: Tensor, v_cache: Tensor, position: int) -> Tensor:
    T = q.shape[2]
    k_cache[:, :, position : position + T] = k_new  # in place
    v_cache[:, :, position : position + T] = v_new
    k, v = k_cache[:, :, : position + T], v_cache[:, :, : position + T]  # (B, H, S, E): the filled slots
    S, E = k.shape[2], q.shape[-1]
    scores = q @ k.transpose(-2, -1) / math.sqrt(E)  # (B, H, T, S)
    mask = torch.ones(T, S, dtype=torch.bool).tril(diagonal=S - T)  # bottom-right: the queries are the last T
    return torch.softmax(scores.masked_fill(~mask, float("-inf")), dim=-1) @ v  # (B, H, T, E)


def online_softmax(x: Tensor, block_size: int) -> Tensor:
    m = torch.full(x.shape[:-1], float("-inf"), dtype=x.dtype)  # running maximum of each row
    l = torch.zeros(x.shape[:-1], dtype=x.dtype)  # running sum of exp(x - m)
    for start in range(0, x.shape[-1], block_size):
        block = x[..., start : start + block_size]
        m_new = torch.maximum(m, block.amax(dim=-1))
        shift = torch.where(m_new == float("-inf"), 0.0, m_new)  # only -inf so far: shift by 0
        l = l * torch.exp(m - shift) + torch.exp(block - shift[..., None]).sum(dim=-1)
        m = m_new
    shift = torch.where(m == float("-inf"), 0.0, m)
    return torch.exp(x - shift[..., None]) / torch.where(l > 0, l, 1.0)[..., None]


def absorb_query(q_nope: Tensor, w_uk: Tensor) -> Tensor:
    H = q_nope.shape[1]
    w = w_uk.view(H, -1, w_uk.shape[-1])  # (H, E, C): head h owns rows h * E .. h * E + E - 1
    return torch.einsum("bhte,hec->bhtc", q_nope, w)  # (B, H, T, C): q . (W c) = (W^T q) . c


def softcapped_softmax(scores: Tensor, mask: Tensor, cap: float) -> Tensor:
    capped = cap * torch.tanh(scores / cap)  # the cap first: every score in (-cap, cap)
    capped = capped.masked_fill(~mask, float("-inf"))  # then the mask: a hidden key stays at -inf
    m = capped.amax(dim=-1, keepdim=True)
    m = torch.where(m == float("-inf"), 0.0, m)  # a row that sees nothing: shift by 0
    e = torch.exp(capped - m)
    total = e.sum(dim=-1, keepdim=True)
    return e / torch.where(total > 0, total, 1.0)


def sink_attention(q: Tensor, k: Tensor, v: Tensor, sinks: Tensor, mask: Tensor) -> Tensor:
    E = q.shape[-1]
    scores = (q @ k.transpose(-2, -1) / math.sqrt(E)).masked_fill(~mask, float("-inf"))  # (B, H, T, S)
    sink = sinks[:, None, None].expand(*scores.shape[:-1], 1)  # (B, H, T, 1): head h's logit in every row
    weights = torch.softmax(torch.cat([scores, sink], dim=-1), dim=-1)  # over the S keys and the sink
    return weights[..., :-1] @ v  # the sink's column, last, has no value: dropped


def qk_norm_scores(q: Tensor, k: Tensor, q_weight: Tensor, k_weight: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    def rms_norm(x: Tensor, w: Tensor) -> Tensor:
        return x * torch.rsqrt(x.pow(2).mean(dim=-1, keepdim=True) + 1e-6) * w  # over each head's E features
    def rope(x: Tensor) -> Tensor:
        x1, x2 = x.chunk(2, dim=-1)  # feature i pairs with feature i + E/2
        return x * cos + torch.cat([-x2, x1], dim=-1) * sin
    q, k = rope(rms_norm(q, q_weight)), rope(rms_norm(k, k_weight))  # the norm first, then RoPE
    return q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])  # (B, H, T, T)


def gated_output(x: Tensor, heads: Tensor, w_g: Tensor, w_o: Tensor) -> Tensor:
    B, H, T, E = heads.shape
    y = heads.transpose(1, 2).reshape(B, T, H * E)  # the heads side by side: feature h * E + e
    g = torch.sigmoid(x @ w_g.T)  # (B, T, H * E): one gate per token, head and feature
    return (y * g) @ w_o.T  # gate each head's output, then mix the heads with W_O


def indexer_top_k(q: Tensor, k: Tensor, weights: Tensor, top_k: int) -> Tensor:
    B, T, S = q.shape[0], q.shape[2], k.shape[1]
    per_head = torch.relu(torch.einsum("bhtd,bsd->bhts", q, k))  # (B, Hi, T, S)
    scores = (weights[..., None] * per_head).sum(dim=1)  # (B, T, S): the indexer heads summed
    visible = torch.ones(T, S, dtype=torch.bool).tril(diagonal=S - T)  # query t sees keys 0 .. t + S - T
    scores = scores.masked_fill(~visible, float("-inf"))  # the hidden keys out BEFORE the pick
    best = scores.topk(top_k, dim=-1).indices  # (B, T, top_k): along each query's keys
    keep = torch.zeros(B, T, S, dtype=torch.bool).scatter_(-1, best, True)
    return (keep & visible)[:, None]  # (B, 1, T, S): a query seeing fewer keeps only those; one pick for all heads


def causal_mask_mod(q_idx: Tensor, kv_idx: Tensor, T: int, S: int) -> Tensor:
    return kv_idx <= q_idx + S - T  # query q_idx is at position q_idx + S - T: bottom-right


def flex_sink_attention(q: Tensor, k: Tensor, v: Tensor, sinks: Tensor) -> Tensor:
    out, aux = flex_attention(q, k, v, return_aux=AuxRequest(lse=True))
    lse = aux.lse  # (B, H, T): the log of each query's sum of exp(score) over the keys
    assert lse is not None  # asked for above
    lse_all = torch.logaddexp(lse, sinks.view(1, -1, 1))  # the sink joins each query's normaliser
    return out * torch.exp(lse - lse_all)[..., None]  # each weight exp(s - lse) becomes exp(s - lse_all)


def delta_rule_step(state: Tensor, q: Tensor, k: Tensor, v: Tensor, g: Tensor, beta: Tensor) -> Tensor:
    S = state * torch.exp(g)[..., None, None]  # (B, H, Dk, Dv): the gate first
    recalled = torch.einsum("bhkv,bhk->bhv", S, k)  # (B, H, Dv): what the state holds for this key
    write = beta[..., None] * (v - recalled)  # (B, H, Dv): only the difference
    S = S + k[..., :, None] * write[..., None, :]  # (B, H, Dk, Dv): written under the key
    state.copy_(S)  # in place: the caller keeps it for the next token
    return torch.einsum("bhkv,bhk->bhv", S, q)  # (B, H, Dv): the query reads the new state


def gqa_decode_intensity(batch: int, num_heads: int, num_kv_heads: int, head_dim: int, cached: int,
                         bytes_per_number: int) -> dict[str, float]:
    # every query head: `cached` scores of `head_dim` multiply-adds, then a weighted sum of as many values;
    # two products, 2 FLOPs per multiply-add
    flops = 2 * 2 * batch * num_heads * cached * head_dim
    # the keys and the values of each KV head, read once for the whole group of query heads that share them
    read = 2 * batch * num_kv_heads * cached * head_dim * bytes_per_number
    return {"flops": flops, "bytes": read, "intensity": flops / read}


def merge_attention_states(o1: Tensor, lse1: Tensor, o2: Tensor, lse2: Tensor) -> tuple[Tensor, Tensor]:
    lse = torch.logaddexp(lse1, lse2)  # (B, H, T): the log of the two sums of exponentials, added
    # -inf only where both states are empty: shift by 0 there, so each weight is exp(-inf) = 0, not NaN
    safe = torch.where(torch.isneginf(lse), torch.zeros_like(lse), lse)
    w1 = torch.exp(lse1 - safe)[..., None]  # (B, H, T, 1): state 1's share of the whole softmax
    w2 = torch.exp(lse2 - safe)[..., None]
    return w1 * o1 + w2 * o2, lse  # (B, H, T, E), (B, H, T)


def rope_interleaved(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    E = x.shape[-1]
    c, s = cos[..., : E // 2], sin[..., : E // 2]  # (T, E/2): column i holds pair i's angle
    x1, x2 = x[..., 0::2], x[..., 1::2]  # (..., T, E/2): the pairs' features 2i and 2i + 1
    out = torch.stack([x1 * c - x2 * s, x2 * c + x1 * s], dim=-1)  # (..., T, E/2, 2): each pair turned
    return out.flatten(-2)  # (..., T, E): features 2i and 2i + 1 back side by side


def flash_tile_step(m: Tensor, l: Tensor, acc: Tensor, s: Tensor, v: Tensor) -> dict[str, Tensor]:
    m_new = torch.maximum(m, s.amax(dim=-1))  # (Q,): the running maximum, this tile included
    shift = torch.where(m_new == float("-inf"), 0.0, m_new)  # only -inf so far: shift by 0
    p = torch.exp(s - shift[:, None])  # (Q, K): this tile's weights, not yet normalised
    alpha = torch.exp(m - shift)  # (Q,): moves what was summed against m onto the new maximum
    l_new = l * alpha + p.sum(dim=-1)
    acc_new = acc * alpha[:, None] + p @ v  # (Q, E): the output's running sum, rescaled as l is
    return {"m": m_new, "l": l_new, "acc": acc_new}


def causal_key_ends(T: int, S: int, block_q: int) -> list[int]:
    ends = []
    for i_block in range(math.ceil(T / block_q)):
        end = (i_block + 1) * block_q + S - T  # one past the last key the block's last query sees
        ends.append(min(max(end, 0), S))  # a short last block: at most S; T > S: early blocks see none
    return ends


def lse_in_base_2(x: Tensor, block_size: int) -> Tensor:
    log2e = 1 / math.log(2)
    m = torch.full(x.shape[:-1], float("-inf"), dtype=x.dtype)  # running maximum, in base 2
    l = torch.zeros(x.shape[:-1], dtype=x.dtype)  # running sum of exp2(x * log2(e) - m)
    for start in range(0, x.shape[-1], block_size):
        block = x[..., start : start + block_size] * log2e  # exp(x) == exp2(x * log2(e))
        m_new = torch.maximum(m, block.amax(dim=-1))
        shift = torch.where(m_new == float("-inf"), 0.0, m_new)  # only -inf so far: shift by 0
        l = l * torch.exp2(m - shift) + torch.exp2(block - shift[..., None]).sum(dim=-1)
        m = m_new
    return (m + torch.log2(l)) * math.log(2)  # back to natural log: log2(y) * ln(2) == ln(y)


def draft_tree_mask(parents: list[int], cached: int) -> tuple[Tensor, Tensor]:
    n = len(parents)
    seen = torch.eye(n, dtype=torch.bool)  # (n, n): each draft sees itself
    for i, p in enumerate(parents):
        if p >= 0:
            seen[i] |= seen[p]  # and what its parent sees: all its ancestors (a parent comes first)
    prompt = torch.ones(n, cached, dtype=torch.bool)  # every draft sees the whole cached prompt
    depth = seen.sum(dim=1) - 1  # (n,): its ancestors, itself not counted
    return torch.cat([prompt, seen], dim=1), cached + depth  # (n, cached + n), (n,): positions by depth


def left_padded_positions(lengths: list[int], T: int) -> Tensor:
    slot = torch.arange(T)  # (T,): 0 .. T - 1, padding included
    pad = T - torch.tensor(lengths)[:, None]  # (B, 1): each row's own padding slots before its first real token
    return (slot - pad).clamp(min=0)  # (B, T): 0 at the first real token; the padding (negative) at 0


def packed_step_positions(cached: list[int], new: list[int]) -> Tensor:
    parts = [torch.arange(c, c + n) for c, n in zip(cached, new, strict=True)]  # each from its own length
    return torch.cat(parts)  # (T,), T = sum(new): request after request, as the row packs them


def quantize_tile(x: Tensor, bits: int, tile: int) -> Tensor:
    tiles = x.reshape(*x.shape[:-1], -1, tile)  # (..., N / tile, tile)
    largest: int = 2 ** (bits - 1) - 1  # the largest code: 127 for 8 bits, 7 for 4
    scale = tiles.abs().amax(dim=-1, keepdim=True) / largest  # each tile's own, from its largest magnitude
    codes = torch.round(tiles / scale).clamp(-largest - 1, largest)  # round to an integer, keep it a code
    return (codes * scale).reshape(x.shape)  # what the cache gives back
