"""Turn a multi-head checkpoint into a grouped-query one: average the key and value heads of each group.

Ainslie et al. (2023) convert a trained MHA model to GQA with ``K`` KV heads by mean-pooling the
key and value projection heads within each of the ``K`` groups of ``n_rep = H // K`` consecutive
heads, then continue training ("uptraining") for a small fraction of the original steps. Mean-pooling
beat keeping the first head of each group and random initialisation in their ablation. This module does
the conversion; the lesson measures what it costs before any uptraining.

A GQA layer whose KV heads are group means computes exactly what the original MHA layer computes with
each key/value head replaced by its group's mean (:func:`expand_kv_heads` builds those MHA weights),
which is how the conversion can be tried on any MHA model without changing its code.

References:
    Ainslie et al., "GQA: Training Generalized Multi-Query Transformer Models from Multi-Head
    Checkpoints", EMNLP 2023 (arXiv:2305.13245), section 2.1.
"""

from __future__ import annotations

from typing import Literal

import torch
from torch import Tensor

from ._checks import divisors
from .layer import MultiHeadAttention

__all__ = ["expand_kv_heads", "mha_to_gqa", "pool_kv_heads"]

Method = Literal["mean", "first"]


def _check_counts(num_heads: int, num_kv_heads: int) -> tuple[int, int]:
    for name, n in (("num_heads", num_heads), ("num_kv_heads", num_kv_heads)):
        if isinstance(n, bool) or not hasattr(n, "__index__"):  # numpy integers pass, bool and float do not
            raise TypeError(f"{name} must be an int; got {n!r}")
    num_heads, num_kv_heads = int(num_heads.__index__()), int(num_kv_heads.__index__())
    if num_kv_heads < 1 or num_heads % num_kv_heads:
        raise ValueError(
            f"num_heads={num_heads} is not a multiple of num_kv_heads={num_kv_heads}; "
            f"valid num_kv_heads for num_heads={num_heads} are {divisors(num_heads)}"
        )
    return num_heads, num_kv_heads


def pool_kv_heads(w: Tensor, num_heads: int, num_kv_heads: int, method: Method = "mean") -> Tensor:
    """Pool the ``H`` heads of a key or value projection's output rows into ``K`` heads.

    Args:
        w: weight ``(H * E, D)`` or bias ``(H * E,)`` of a key or value projection, head-major rows.
        num_heads: ``H``.
        num_kv_heads: ``K``; must divide ``H``.
        method: ``"mean"`` (the GQA paper's choice) or ``"first"`` (keep the first head of each group).

    Returns:
        The pooled rows.

    Shapes:
        w: ``(H * E, ...)``; output: ``(K * E, ...)``.

    Raises:
        ValueError: if ``num_kv_heads`` does not divide ``num_heads``, ``w``'s rows are not a multiple
            of ``num_heads``, or ``method`` is unknown.

    Example:
        >>> pool_kv_heads(torch.tensor([1.0, 3.0, 5.0, 7.0]), num_heads=4, num_kv_heads=2).tolist()
        [2.0, 6.0]
    """
    num_heads, num_kv_heads = _check_counts(num_heads, num_kv_heads)
    if w.shape[0] % num_heads:
        raise ValueError(f"w has {w.shape[0]} rows, which is not a multiple of num_heads={num_heads}")
    if method not in ("mean", "first"):
        raise ValueError(f"method must be 'mean' or 'first'; got {method!r}")
    E, n_rep = w.shape[0] // num_heads, num_heads // num_kv_heads
    grouped = w.reshape(num_kv_heads, n_rep, E, *w.shape[1:])  # (K, n_rep, E, ...)
    pooled = grouped.mean(dim=1) if method == "mean" else grouped[:, 0]  # (K, E, ...)
    return pooled.reshape(num_kv_heads * E, *w.shape[1:])  # (K * E, ...)


def expand_kv_heads(w: Tensor, num_kv_heads: int, num_heads: int) -> Tensor:
    """Repeat each of ``K`` heads' rows ``n_rep`` times: the MHA weights that behave like the GQA ones.

    Shapes:
        w: ``(K * E, ...)``; output: ``(H * E, ...)``.

    Example:
        >>> expand_kv_heads(torch.tensor([2.0, 6.0]), num_kv_heads=2, num_heads=4).tolist()
        [2.0, 2.0, 6.0, 6.0]
    """
    num_heads, num_kv_heads = _check_counts(num_heads, num_kv_heads)
    if w.shape[0] % num_kv_heads:
        raise ValueError(f"w has {w.shape[0]} rows, which is not a multiple of num_kv_heads={num_kv_heads}")
    E = w.shape[0] // num_kv_heads
    per_head = w.reshape(num_kv_heads, E, *w.shape[1:])  # (K, E, ...)
    return per_head.repeat_interleave(num_heads // num_kv_heads, dim=0).reshape(num_heads * E, *w.shape[1:])


def mha_to_gqa(mha: MultiHeadAttention, num_kv_heads: int, method: Method = "mean") -> MultiHeadAttention:
    """A grouped-query copy of a multi-head layer, its KV heads pooled per group (queries and ``W_O`` kept).

    Args:
        mha: a :class:`lessons_src.layer.MultiHeadAttention` with ``num_kv_heads == num_heads``.
        num_kv_heads: ``K`` for the new layer; must divide ``mha.num_heads``.
        method: see :func:`pool_kv_heads`.

    Returns:
        A new layer with ``num_kv_heads`` KV heads, same dtype and device.

    Raises:
        ValueError: if ``mha`` is already grouped or ``num_kv_heads`` does not divide its heads.

    Example:
        >>> mha = MultiHeadAttention(16, 4)
        >>> mha_to_gqa(mha, 2).qkv_proj.weight.shape  # 16 query rows + 2 x (2 heads x 4) key/value rows
        torch.Size([32, 16])
    """
    if not isinstance(mha, MultiHeadAttention):
        raise TypeError(
            f"mha must be a lessons_src MultiHeadAttention; got {type(mha).__name__} "
            "(convert an nn.MultiheadAttention with lessons_src.interop.from_torch first)"
        )
    mha.check_plain("mha_to_gqa")
    H, D = mha.num_heads, mha.d_model
    if mha.num_kv_heads != H:
        raise ValueError(f"expected an MHA layer (num_kv_heads == num_heads={H}); got num_kv_heads={mha.num_kv_heads}")
    H, num_kv_heads = _check_counts(H, num_kv_heads)
    bias = mha.qkv_proj.bias is not None
    w = mha.qkv_proj.weight
    new = MultiHeadAttention(D, H, num_kv_heads=num_kv_heads, bias=bias, dropout=mha.dropout)
    new = new.to(device=w.device, dtype=w.dtype)
    with torch.no_grad():
        parts = [w[:D], pool_kv_heads(w[D : 2 * D], H, num_kv_heads, method)]
        parts.append(pool_kv_heads(w[2 * D :], H, num_kv_heads, method))
        new.qkv_proj.weight.copy_(torch.cat(parts))  # [W_Q; pooled W_K; pooled W_V]
        new.out_proj.weight.copy_(mha.out_proj.weight)
        if bias:
            b = mha.qkv_proj.bias
            pooled_b = [b[:D], pool_kv_heads(b[D : 2 * D], H, num_kv_heads, method)]
            pooled_b.append(pool_kv_heads(b[2 * D :], H, num_kv_heads, method))
            new.qkv_proj.bias.copy_(torch.cat(pooled_b))
            new.out_proj.bias.copy_(mha.out_proj.bias)
    return new
