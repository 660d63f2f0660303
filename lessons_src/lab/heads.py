"""Measure what attention heads do: pattern scores, head classification, induction scores, ablation.

Everything here works on attention weights ``(..., T, T)`` (rows are queries and sum to 1) or on any
model that exposes its :class:`~lessons_src.layer.MultiHeadAttention` modules, so it serves both the
pretrained encoder (:mod:`lessons_src.lab.minilm`) and the small models (:mod:`lessons_src.lab.toy_models`).

* Pattern scores (Clark et al. 2019 looked at the same patterns in BERT): how much of a query's weight
  goes to the previous token, the next token, a token with the same id (itself or a copy), the
  ``[CLS]``/``[SEP]`` "sink", and how spread out the row is (entropy).
* Induction scores (Olsson et al. 2022): on a random sequence repeated twice, *prefix matching* is the
  weight a query in the second copy puts on the token right after its earlier occurrence; *copying* is
  how positive the eigenvalues of a head's OV circuit are, ΣRe λ / Σ|λ| from -1 to 1 (Elhage et al. 2021).
* Ablation: :func:`ablate_heads` zeroes chosen heads' outputs with a forward pre-hook on ``out_proj``,
  whose input is the concatenation of the heads (no change to the attention class itself).

References:
    Clark et al., "What Does BERT Look At?", BlackboxNLP 2019 (arXiv:1906.04341).
    Michel et al., "Are Sixteen Heads Really Better than One?", NeurIPS 2019 (arXiv:1905.10650).
    Elhage et al., "A Mathematical Framework for Transformer Circuits", Anthropic 2021.
    Olsson et al., "In-context Learning and Induction Heads", Anthropic 2022 (arXiv:2209.11895).
"""

from __future__ import annotations

import contextlib
import math
from typing import TYPE_CHECKING

import torch
from torch import Tensor, nn

if TYPE_CHECKING:
    from collections.abc import Iterator, Sequence

    from ..layer import MultiHeadAttention

__all__ = [
    "CATEGORIES",
    "ablate_heads",
    "classify_heads",
    "copying_score",
    "first_token_mass",
    "ov_circuit",
    "pattern_scores",
    "prefix_matching_score",
    "previous_token_score",
]

CATEGORIES = ("previous", "next", "same token", "sink", "broad", "mixed")
"""Head classes, in the order :func:`classify_heads` tries them (the first four by their score)."""

PATTERN_THRESHOLD = 0.4
"""A head is "previous"/"next"/"same token"/"sink" when that score is its largest and at least this."""

BROAD_THRESHOLD = 0.7
"""Otherwise a head is "broad" when its mean normalized entropy is at least this (1 = uniform)."""


def _check_square(weights: Tensor) -> int:
    if weights.ndim < 2 or weights.shape[-1] != weights.shape[-2]:
        raise ValueError(f"weights must be self-attention maps (..., T, T); got shape {tuple(weights.shape)}")
    return weights.shape[-1]


def previous_token_score(weights: Tensor) -> Tensor:
    """Mean weight a query puts on the position just before it (queries ``1 .. T-1``).

    Shapes:
        weights: ``(..., T, T)`` with ``T >= 2``; returns ``(...)``.

    Example:
        >>> previous_token_score(torch.eye(4).roll(-1, dims=1).T)  # each row i has its 1 at i - 1
        tensor(1.)
    """
    T = _check_square(weights)
    if T < 2:
        raise ValueError(f"need at least 2 positions; got T={T}")
    return weights.diagonal(offset=-1, dim1=-2, dim2=-1).mean(-1)  # w[i, i-1]


def prefix_matching_score(weights: Tensor, n: int) -> Tensor:
    """Olsson et al.'s prefix matching on a sequence made of ``n`` tokens repeated twice.

    A query at position ``i >= n`` holds the same token as position ``i - n``; an induction head attends
    to what came *after* that earlier occurrence, position ``i - n + 1``. The score is the mean of that
    weight over queries ``n .. 2n - 1``.

    Shapes:
        weights: ``(..., 2n, 2n)``; returns ``(...)``.

    Example:
        >>> w = torch.zeros(4, 4); w[2, 1] = w[3, 2] = 1.0  # n = 2: queries 2, 3 attend to 1, 2
        >>> prefix_matching_score(w, 2)
        tensor(1.)
    """
    T = _check_square(weights)
    if n < 1 or 2 * n != T:
        raise ValueError(f"weights cover T={T} positions; a sequence repeated twice needs T = 2 n, got n={n}")
    return weights.diagonal(offset=-(n - 1), dim1=-2, dim2=-1)[..., -n:].mean(-1)


def ov_circuit(embed: Tensor, attn: MultiHeadAttention, unembed: Tensor, head: int) -> Tensor:
    """One head's full OV circuit on tokens: the logits it adds to every token when it attends to one.

    ``M = W_E W_V^h W_O^h W_U``: row ``a`` is the change in the output logits when the head puts all
    its weight on a position holding token ``a`` (through the direct path, ignoring other layers).

    Args:
        embed: token embedding matrix ``(V, D)``.
        attn: the head's attention layer.
        unembed: unembedding weight as stored by ``nn.Linear(D, V)``, ``(V, D)``.
        head: head index.

    Shapes:
        returns ``(V, V)``.
    """
    if isinstance(head, bool) or not isinstance(head, int) or not 0 <= head < attn.num_heads:
        raise ValueError(f"head={head!r} is out of range; the layer has heads 0 .. {attn.num_heads - 1}")
    w = attn.head_weights()
    w_v = w.v[attn.kv_head(head)]  # (E, D): the KV head this query head reads (GQA: shared by its group)
    w_o = w.o[head]  # (D, E)
    return embed @ w_v.T @ w_o.T @ unembed.T  # (V, V)


def copying_score(ov: Tensor) -> Tensor:
    """How positive the OV circuit's eigenvalues are: ``sum(Re λ) / sum(|λ|)``, from -1 to 1.

    Near 1: attending to a token raises that same token's logit (the head copies).

    Shapes:
        ov: ``(V, V)``; returns a scalar.

    Example:
        >>> copying_score(torch.eye(3)), copying_score(-torch.eye(3))
        (tensor(1.), tensor(-1.))
    """
    if ov.ndim != 2 or ov.shape[0] != ov.shape[1]:
        raise ValueError(f"ov must be square (V, V); got shape {tuple(ov.shape)}")
    eig: Tensor = torch.linalg.eigvals(ov.double())
    score: Tensor = eig.real.sum() / eig.abs().sum()
    return score.float()


def pattern_scores(weights: Tensor, token_ids: Tensor) -> dict[str, Tensor]:
    """Per-head pattern scores of an encoder on one sentence that starts with [CLS] and ends with [SEP].

    Queries are the sentence's own tokens (``1 .. T-2``); each score is the mean over them of:

    * ``previous``: weight on position ``i - 1`` (queries ``2 .. T-2``, so the key is a word piece);
    * ``next``: weight on ``i + 1`` (queries ``1 .. T-3``);
    * ``same token``: weight on word pieces with the same id as the query (itself or a repeat);
    * ``sink``: weight on ``[CLS]`` and ``[SEP]`` together;
    * ``entropy``: entropy of the row divided by ``log T`` (1 = uniform over all positions).

    Shapes:
        weights: ``(..., T, T)`` with ``T >= 4``; token_ids: ``(T,)``; each score ``(...)``.
    """
    T = _check_square(weights)
    if T < 4 or token_ids.shape != (T,):
        raise ValueError(f"need T >= 4 and token_ids of shape ({T},); got T={T}, {tuple(token_ids.shape)}")
    real = slice(1, T - 1)
    prev = weights.diagonal(offset=-1, dim1=-2, dim2=-1)[..., 1 : T - 2]  # w[i, i-1], i = 2..T-2
    nxt = weights.diagonal(offset=1, dim1=-2, dim2=-1)[..., 1 : T - 2]  # w[i, i+1], i = 1..T-3
    same = (token_ids[:, None] == token_ids[None, :]).to(weights.dtype)  # (T, T)
    same[0, :] = same[-1, :] = 0.0
    same[:, 0] = same[:, -1] = 0.0
    rows = weights[..., real, :]  # (..., T-2, T)
    entropy = -(rows * rows.clamp_min(1e-12).log()).sum(-1) / math.log(T)  # (..., T-2)
    return {
        "previous": prev.mean(-1),
        "next": nxt.mean(-1),
        "same token": (rows * same[real]).sum(-1).mean(-1),
        "sink": (rows[..., 0] + rows[..., -1]).mean(-1),
        "entropy": entropy.mean(-1),
    }


def classify_heads(scores: dict[str, Tensor]) -> list[list[str]]:
    """Name each head's dominant pattern from (sentence-averaged) :func:`pattern_scores`.

    The largest of previous / next / same token / sink names the head if it is at least
    :data:`PATTERN_THRESHOLD`; otherwise the head is "broad" if its normalized entropy is at least
    :data:`BROAD_THRESHOLD`, else "mixed".

    Shapes:
        each score ``(L, H)``; returns ``L`` lists of ``H`` names.
    """
    names = CATEGORIES[:4]
    stacked = torch.stack([scores[n] for n in names])  # (4, L, H)
    if stacked.ndim != 3:
        raise ValueError(f"scores must be (L, H) per pattern; got {tuple(stacked.shape[1:])}")
    best, which = stacked.max(0)  # (L, H)
    out = []
    for layer in range(best.shape[0]):
        row = []
        for h in range(best.shape[1]):
            if best[layer, h] >= PATTERN_THRESHOLD:
                row.append(names[int(which[layer, h])])
            elif scores["entropy"][layer, h] >= BROAD_THRESHOLD:
                row.append("broad")
            else:
                row.append("mixed")
        out.append(row)
    return out


@contextlib.contextmanager
def ablate_heads(attentions: Sequence[MultiHeadAttention], keep: Tensor) -> Iterator[None]:
    """Inside the ``with`` block, scale each head's output by ``keep[layer, head]`` (0 removes the head).

    A forward pre-hook on each layer's ``out_proj`` multiplies the input, the concatenated heads
    ``(B, T, H * E)``, head by head: ``out_proj`` then sees zeros where a head was. The hooks are removed
    on exit, even after an error.

    Args:
        attentions: the model's attention layers, in order.
        keep: multipliers, 1 to keep a head and 0 to ablate it.

    Shapes:
        keep: ``(L, H)``.

    Example:
        >>> mha = MultiHeadAttention(8, 2)
        >>> x = torch.randn(1, 3, 8)
        >>> with ablate_heads([mha], torch.zeros(1, 2)):
        ...     y = mha(x)
        >>> torch.allclose(y, torch.zeros_like(y))  # no bias: nothing left
        True
    """
    L = len(attentions)
    H = attentions[0].num_heads if L else 0
    if keep.shape != (L, H):
        raise ValueError(f"keep must have shape (layers, heads) = ({L}, {H}); got {tuple(keep.shape)}")
    handles = []

    def make_hook(layer: int, attn: MultiHeadAttention) -> object:
        def hook(module: nn.Module, args: tuple[Tensor, ...]) -> tuple[Tensor, ...]:
            y = args[0]  # (B, T, H*E)
            scale = keep[layer].to(y.dtype).repeat_interleave(attn.head_dim)  # (H*E,)
            return (y * scale, *args[1:])

        return hook

    try:
        for layer, attn in enumerate(attentions):
            handles.append(attn.out_proj.register_forward_pre_hook(make_hook(layer, attn)))  # type: ignore[arg-type]
        yield
    finally:
        for handle in handles:
            handle.remove()


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
