"""Measurements for the long-context lessons: receptive fields, attention sinks, evicting the first tokens, and
attention over chosen keys (the text model with each query's top-k keys, the cost of a lightning indexer).

Built on the core (``masks``) and the lab's trained models; nothing here is timed (the benchmark
``tools/bench/bench_long_context.py`` does the timing).

Example:
    >>> receptive_field(window=3, num_layers=3, length=12)
    [3, 5, 7]
"""

from __future__ import annotations

from typing import TYPE_CHECKING, NamedTuple, cast

import torch
from torch import Tensor

from ..attention import attention
from ..masks import causal_mask
from ..sparse_selection import top_k_mask

if TYPE_CHECKING:
    from collections.abc import Sequence

    from .configs import ModelConfig
    from .minilm import MiniLM, Tokenizer
    from .text_model import Block, TextGPT
    from .toy_models import TinyTransformer

__all__ = [
    "SENTENCES",
    "TopKResult",
    "evict_keys_minilm",
    "first_token_mass",
    "minilm_eviction_cosines",
    "minilm_sink_shares",
    "receptive_field",
    "selection_costs",
    "text_model_top_k",
    "toy_logits_with_mask",
    "toy_window_eviction",
]


def receptive_field(window: int, num_layers: int, length: int) -> list[int]:
    """How many input positions can reach the last position after each of ``num_layers`` windowed layers.

    Computed, not assumed: layer by layer, a position is reachable when some position it may attend to
    (``causal_mask(length, window=window)``) was reachable from the input. With a window of ``W`` each
    layer reaches ``W - 1`` further back, so ``n`` layers see ``n (W - 1) + 1`` positions (capped at
    ``length``).

    Raises:
        ValueError: if a size is below 1 (from :func:`lessons_src.masks.causal_mask` for the window).
    """
    if num_layers < 1 or length < 1:
        raise ValueError(f"num_layers and length must be at least 1; got {num_layers}, {length}")
    hop = causal_mask(length, window=window).to(torch.int64)  # (T, T): row i may read column j
    reach = hop[-1]  # (T,): what the last position reads after one layer
    out = [int(reach.count_nonzero())]
    for _ in range(num_layers - 1):
        reach = ((reach @ hop) > 0).to(torch.int64)  # read a position that read j
        out.append(int(reach.count_nonzero()))
    return out


def first_token_mass(
    weights: Tensor, lengths: Tensor | None = None, first: int = 1, from_query: int = 0
) -> Tensor:
    """Mean attention weight on the first ``first`` keys, per layer and head, over the real queries.

    Args:
        weights: ``(L, B, H, T, T)`` attention weights (rows sum to 1 over real keys).
        lengths: real length of each of the ``B`` sequences (padding after), default ``T``.
        first: how many leading keys count as "first".
        from_query: count only queries at this position or later (in a causal model the first queries
            can see little else, so they say nothing about a preference).

    Returns:
        ``(L, H)``.
    """
    B, T = weights.shape[1], weights.shape[3]
    lengths = torch.full((B,), T) if lengths is None else lengths
    pos = torch.arange(T)[None, :]
    rows = (pos < lengths[:, None]) & (pos >= from_query)  # (B, T) the queries that count
    mass = weights[..., :first].sum(-1)  # (L, B, H, T)
    mass = mass * rows[None, :, None, :]
    return mass.sum(dim=(1, 3)) / rows.sum()  # (L, H)


@torch.no_grad()
def toy_logits_with_mask(model: TinyTransformer, tokens: Tensor, attn_mask: Tensor) -> Tensor:
    """The toy model's forward pass with ``attn_mask`` (bool, ``True`` = may attend) in every layer.

    The same computation as :class:`lessons_src.lab.toy_models.TinyTransformer` with ``is_causal=True``,
    except that the mask (which should include causality, e.g. ``causal_mask(T, window=W, sinks=n)``)
    replaces the causal flag.

    Shapes:
        tokens: ``(B, T)``; attn_mask: ``(T, T)``; returns logits ``(B, T, V)``.
    """
    T = tokens.shape[1]
    x = model.embed(tokens) + model.pos_embed(torch.arange(T))  # (B, T, D)
    for i, attn in enumerate(model.attentions):
        x = x + attn(x, attn_mask=attn_mask)
        if model.mlps:
            x = x + model.mlps[i](x)
    logits: Tensor = model.unembed(x)
    return logits


@torch.no_grad()
def evict_keys_minilm(model: MiniLM, ids: Tensor, keep: Tensor, evicted: list[list[int]]) -> Tensor:
    """MiniLM's hidden states when the ``evicted`` positions of each sentence are hidden as keys from every query.

    Args:
        model: the encoder.
        ids: ``(B, T)`` token ids.
        keep: ``(B, T)`` 1 for real tokens, 0 for padding.
        evicted: for each sentence, the positions no query may attend to (they still have an output).

    Returns:
        hidden states ``(B, T, D)``.
    """
    mask = keep.clone()
    for b, positions in enumerate(evicted):
        mask[b, positions] = 0
    hidden: Tensor = model(ids, mask)[0]
    return hidden


SENTENCES = (
    "The cat sat on the mat because it was warm.",
    "Attention heads learn different patterns from the same input.",
    "A long context needs a cache that does not grow without bound.",
    "She gave him the book that her brother had written.",
)
"""The sentences the attention-sinks lesson measures MiniLM on."""


@torch.no_grad()
def minilm_sink_shares(
    model: MiniLM, tok: Tokenizer, sentences: Sequence[str] = SENTENCES
) -> list[tuple[float, float, float]]:
    """Per layer: the mean weight on ``[CLS]``, on ``[SEP]``, and the share uniform attention gives one token.

    Averaged over every head and every real query of ``sentences``.
    """
    _, ids, keep = tok.batch(list(sentences))  # (B, T) ids, 1 for real tokens
    lengths = keep.sum(1)
    _, weights = model(ids, keep)  # (L, B, H, T, T)
    on_cls = first_token_mass(weights, lengths).mean(1)  # (L,): key 0 is [CLS]
    on_sep = torch.stack(
        [weights[:, b, :, :n, n - 1].mean(dim=(1, 2)) for b, n in enumerate(lengths.tolist())]
    ).mean(0)  # (L,): the last real key is [SEP]
    uniform = float((1 / lengths.float()).mean())
    return [(float(c), float(s), uniform) for c, s in zip(on_cls, on_sep, strict=True)]


@torch.no_grad()
def minilm_eviction_cosines(
    model: MiniLM, tok: Tokenizer, which: str, sentences: Sequence[str] = SENTENCES
) -> list[float]:
    """Cosine between each sentence's embedding with two keys evicted and without: ``which`` is ``"sinks"``
    (``[CLS]`` and ``[SEP]``) or ``"words"`` (positions 2 and 4). The embedding is the mean of the token
    outputs, L2-normalised (as sentence-transformers computes it)."""
    if which not in ("sinks", "words"):
        raise ValueError(f"which must be 'sinks' or 'words'; got {which!r}")
    _, ids, keep = tok.batch(list(sentences))
    ends = (keep.sum(1) - 1).tolist()
    evicted = [[0, e] for e in ends] if which == "sinks" else [[2, 4] for _ in ends]

    def embedding(positions: list[list[int]]) -> Tensor:
        hidden = evict_keys_minilm(model, ids, keep, positions)  # (B, T, D)
        mean = (hidden * keep[..., None]).sum(1) / keep.sum(1, keepdim=True)
        return torch.nn.functional.normalize(mean, dim=-1)

    full = embedding([[] for _ in sentences])
    return [float(c) for c in (embedding(evicted) * full).sum(-1)]


@torch.no_grad()
def toy_window_eviction(
    model: TinyTransformer, n: int, window: int, sinks: Sequence[int], batch: int = 32, seed: int = 1
) -> dict[str, object]:
    """The toy model on a random segment of ``n`` tokens repeated twice: first-token weight and windowed runs.

    Returns ``first_token`` (``(L, H)`` mean weight on position 0 from queries at position 8 or later),
    ``uniform`` (the share uniform attention would give it), ``full_loss`` (next-token loss on the repeated
    segment with full attention), ``outside_window`` (``(L,)``: with full attention, the mean weight the
    second copy's queries put on keys the window would hide, over heads and queries), and for each ``s`` in
    ``sinks`` a row ``(s, relative change of the logits from full attention, loss on the repeat)`` with
    ``causal_mask(2n, window=window, sinks=s)``.
    """
    import torch.nn.functional as F

    from .toy_models import repeated_random_tokens

    tokens = repeated_random_tokens(n, model.cfg.vocab_size, seed=seed, batch=batch)  # (batch, 2n)
    T = tokens.shape[1]
    full, weights = model(tokens, need_weights=True)  # (B, T, V), (L, B, H, T, T)
    assert weights is not None

    def repeat_loss(logits: Tensor) -> float:  # predicting the second copy from the token before each
        return float(F.cross_entropy(logits[:, n:-1].reshape(-1, logits.shape[-1]), tokens[:, n + 1 :].reshape(-1)))

    rows = []
    for s in sinks:
        logits = toy_logits_with_mask(model, tokens, causal_mask(T, window=window, sinks=s))
        rows.append((s, float((logits - full).norm() / full.norm()), repeat_loss(logits)))
    pos = torch.arange(T)
    hidden = (pos[None, :] <= pos[:, None] - window) & (pos[:, None] >= n)  # (T, T): second-copy query, old key
    outside = (weights * hidden).sum(-1).sum(-1) / (pos >= n).sum()  # (L, B, H): mean over the second copy
    return {
        "first_token": first_token_mass(weights, from_query=8),
        "outside_window": outside.mean(dim=(1, 2)),
        "uniform": float((1 / torch.arange(9, T + 1).float()).mean()),
        "full_loss": repeat_loss(full),
        "windowed": rows,
    }


class TopKResult(NamedTuple):
    """The text model with each query restricted to its ``top_k`` keys: the loss and the attention weight kept."""

    top_k: int
    loss: float  # mean next-byte cross-entropy, nats
    weight_kept: float  # mean over layers, heads and queries of the dense attention weight on the kept keys


@torch.no_grad()
def text_model_top_k(model: TextGPT, windows: Tensor, top_k: int) -> TopKResult:
    """Run ``model`` with each query attending only to its ``top_k`` keys, ranked by the true attention weights.

    The ranking is the upper bound an indexer tries to reach: each layer computes its dense attention weights,
    averages them over the heads and keeps each query's ``top_k`` best keys for all of them (one selection per
    layer, shared by the heads, as DeepSeek-V3.2's indexer picks), then attends over that selection only.

    Shapes:
        windows: ``(B, T + 1)`` byte ids; the loss predicts ``windows[:, 1:]``.
    """
    import torch.nn.functional as F

    tokens = windows[:, :-1]
    cos, sin = model._rotations(tokens)
    x = model.embed(tokens)
    kept = []
    for block in cast("list[Block]", list(model.blocks)):
        B, T, D = x.shape
        q, k, v = block.queries_keys_values(x, cos, sin)  # (B, H, T, E)
        dense = attention(q, k, v, is_causal=True, implementation="eager").weights  # (B, H, T, T)
        assert dense is not None
        keep = top_k_mask(dense.mean(dim=1), top_k)  # (B, 1, T, T): the heads' mean weight ranks the keys
        kept.append((dense * keep).sum(-1).mean())
        out = attention(q, k, v, attn_mask=keep).output  # keep is within causality already
        x = x + block.attn.out_proj(out.transpose(1, 2).reshape(B, T, D))
        x = x + block.mlp(block.ln2(x))
    logits = model.unembed(model.ln_f(x))
    loss = F.cross_entropy(logits.transpose(1, 2), windows[:, 1:])
    return TopKResult(top_k, float(loss), float(torch.stack(kept).mean()))


def selection_costs(cfg: ModelConfig, context: int, *, cache_bytes: int = 2, index_bytes: int = 1) -> dict[str, int]:
    """One decoding step's attention FLOPs and bytes read per layer, dense against a lightning indexer's top-k.

    For an MLA model with an indexer (DeepSeek-V3.2): dense attention reads the whole latent cache, ``S`` rows of
    ``C + R`` numbers, and spends ``2 H S (2C + R)`` FLOPs (absorbed: each head's query against each row's
    ``C + R`` numbers, then the weighted sum of the ``C``-wide latents). The indexer reads ``S`` keys of ``Di``
    numbers and spends ``2 Hi (Di + 1) S`` FLOPs (each head's dot products, then the heads' weighted sum: its
    quadratic part, over a whole sequence); attention then runs over
    ``top_k`` rows only. ``cache_bytes`` per latent number (bfloat16: 2), ``index_bytes`` per indexer key number
    (DeepSeek stores them in FP8: 1).

    Raises:
        ValueError: if the model has no MLA or no indexer, or ``context`` is below 1.

    Example:
        >>> from lessons_src.lab.configs import load_configs
        >>> c = selection_costs(load_configs()["DeepSeek-V3.2"], 131072)
        >>> round(c["dense_flops"] / c["sparse_flops"], 1), round(c["dense_bytes"] / c["sparse_bytes"], 1)
        (13.3, 7.9)
    """
    if not cfg.mla or not cfg.sparse:
        raise ValueError(f"{cfg.name} has no MLA latent or no lightning indexer (mla={cfg.mla}, sparse={cfg.sparse})")
    if isinstance(context, bool) or not isinstance(context, int) or context < 1:
        raise ValueError(f"context must be a positive int (tokens); got {context!r}")
    H, C, R = cfg.num_heads, cfg.mla["kv_latent_dim"], cfg.mla["rope_dim"]
    Hi, Di, top_k = cfg.sparse["indexer_heads"], cfg.sparse["indexer_head_dim"], cfg.sparse["top_k"]
    picked = min(top_k, context)
    attend = 2 * H * (2 * C + R)  # FLOPs per row attended
    return {
        "dense_flops": attend * context,
        "indexer_flops": 2 * Hi * (Di + 1) * context,
        "sparse_flops": 2 * Hi * (Di + 1) * context + attend * picked,
        "dense_bytes": context * (C + R) * cache_bytes,
        "indexer_bytes": context * Di * index_bytes,
        "sparse_bytes": context * Di * index_bytes + picked * (C + R) * cache_bytes,
    }
