"""Measurements for the long-context lessons: receptive fields, attention sinks, evicting the first tokens.

Built on the core (``masks``) and the lab's trained models; nothing here is timed (the benchmark
``tools/bench/bench_long_context.py`` does the timing).

Example:
    >>> receptive_field(window=3, num_layers=3, length=12)
    [3, 5, 7]
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
from torch import Tensor

from ..masks import causal_mask

if TYPE_CHECKING:
    from .minilm import MiniLM
    from .toy_models import TinyTransformer

__all__ = ["evict_keys_minilm", "first_token_mass", "receptive_field", "toy_logits_with_mask"]


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
