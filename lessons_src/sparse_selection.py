"""Attention that chooses its keys: DeepSeek's lightning indexer and MoBA's block selection, as keep-masks.

Each query picks a few keys (or blocks of keys) with a cheap score, then ordinary attention runs over the pick:
pass the mask these functions return as ``attn_mask`` to :func:`lessons_src.attention.attention` (``True`` = may
attend, the package's one convention), or, for one decoding step, gather the picked keys with
:func:`gather_selected`.

* **Lightning indexer** (DeepSeek Sparse Attention, DeepSeek-V3.2, arXiv:2512.02556): a few small indexer heads
  score every visible key, ``I[t, s] = sum_h w[t, h] * ReLU(scale * q_h[t] . k[s])``, with one key per position
  shared by the heads; each query keeps its ``top_k`` best keys, and all the layer's attention heads use that one
  selection (the mask has one head). Causality comes first: a key the query may not see is never picked.
* **MoBA** (Mixture of Block Attention, Lu et al. 2025, arXiv:2502.13189): keys in blocks of ``block_size``; each
  query scores every earlier block by its dot product with the block's mean key, keeps its ``top_k`` best, and
  always its own block (causally); each head picks for itself.

Positions are bottom-right aligned as everywhere in the package: the ``T`` queries are the last of ``S`` positions.
"""

from __future__ import annotations

import torch
from torch import Tensor

from .masks import causal_mask

__all__ = ["gather_selected", "lightning_indexer_scores", "moba_mask", "top_k_mask"]


def lightning_indexer_scores(q: Tensor, k: Tensor, weights: Tensor, *, scale: float | None = None) -> Tensor:
    """The indexer's score of every key for every query: ``sum_h weights[h] * ReLU(scale * q_h . k)``.

    Args:
        q: indexer queries, ``(B, Hi, T, Di)`` (``Hi`` indexer heads of size ``Di``).
        k: indexer keys, ``(B, S, Di)``: one per position, shared by the indexer heads.
        weights: each query's weight per indexer head, ``(B, Hi, T)`` (DeepSeek-V3.2 computes them from the
            hidden state and multiplies by ``Hi ** -0.5``).
        scale: the dot products' factor (default ``Di ** -0.5``).

    Returns:
        ``(B, T, S)`` scores in float32, causality not yet applied (:func:`top_k_mask` applies it).

    Raises:
        ValueError: if the shapes do not fit together.
    """
    if q.dim() != 4 or k.dim() != 3 or k.shape[0] != q.shape[0] or k.shape[-1] != q.shape[-1]:
        raise ValueError(
            f"q must be (B, Hi, T, Di) and k (B, S, Di) with the same B and Di; got q {tuple(q.shape)}, "
            f"k {tuple(k.shape)}"
        )
    B, Hi, T, Di = q.shape
    if weights.shape != (B, Hi, T):
        raise ValueError(f"weights must be (B, Hi, T) = ({B}, {Hi}, {T}), one per indexer head; got "
                         f"{tuple(weights.shape)}")
    s = Di**-0.5 if scale is None else scale
    per_head = torch.relu(torch.einsum("bhtd,bsd->bhts", q.float(), k.float()) * s)  # (B, Hi, T, S)
    return torch.einsum("bht,bhts->bts", weights.float(), per_head)


def top_k_mask(scores: Tensor, top_k: int, *, is_causal: bool = True) -> Tensor:
    """Each query's ``top_k`` best visible keys, as a keep-mask shared by the heads, ``(B, 1, T, S)``.

    With ``is_causal`` a key the query may not see (``j > i + S - T``) is ruled out before the pick, so a query that
    sees fewer than ``top_k`` keys keeps all it sees. Ties are broken as :func:`torch.topk` breaks them.

    Raises:
        ValueError: if ``scores`` is not ``(B, T, S)`` or ``top_k`` is not an int from 1 to ``S``.

    Example:
        >>> top_k_mask(torch.tensor([[[3.0, 1.0, 2.0], [0.0, 5.0, 4.0]]]), 2, is_causal=False).int().tolist()
        [[[[1, 0, 1], [0, 1, 1]]]]
    """
    if scores.dim() != 3:
        raise ValueError(f"scores must be (B, T, S); got {tuple(scores.shape)}")
    B, T, S = scores.shape
    if isinstance(top_k, bool) or not isinstance(top_k, int) or not 1 <= top_k <= S:
        raise ValueError(f"top_k must be an int from 1 to the number of keys S={S}; got {top_k!r}")
    visible = causal_mask(T, S, device=scores.device) if is_causal else torch.ones(T, S, dtype=torch.bool,
                                                                                   device=scores.device)
    ranked = scores.float().masked_fill(~visible, float("-inf"))  # causality before the pick
    picked = torch.zeros(B, T, S, dtype=torch.bool, device=scores.device)
    picked.scatter_(-1, ranked.topk(top_k, dim=-1).indices, True)
    return (picked & visible)[:, None]  # a query seeing fewer than top_k keys picked some hidden ones: drop them


def moba_mask(q: Tensor, k: Tensor, *, block_size: int, top_k: int) -> Tensor:
    """MoBA's keep-mask, ``(B, H, T, S)``: each query's own block (causally) and its ``top_k`` best earlier blocks.

    A block's score is the query's dot product with the block's mean key; only blocks that end before the query's
    own block compete (causality before the pick). ``S`` need not be a multiple of ``block_size``: the last block
    is shorter.

    Args:
        q: ``(B, H, T, E)``; k: ``(B, H, S, E)`` (repeat the KV heads for GQA first).
        block_size: keys per block (``>= 1``).
        top_k: earlier blocks each query keeps (``>= 1``; at most the number of blocks before the last one).

    Raises:
        ValueError: on shapes that do not fit, a ``block_size`` below 1, or a ``top_k`` out of range.
    """
    if q.dim() != 4 or k.dim() != 4 or q.shape[:2] != k.shape[:2] or q.shape[-1] != k.shape[-1]:
        raise ValueError(f"q must be (B, H, T, E) and k (B, H, S, E) with the same B, H, E; got q {tuple(q.shape)}, "
                         f"k {tuple(k.shape)}")
    B, H, T, E = q.shape
    S = k.shape[2]
    if isinstance(block_size, bool) or not isinstance(block_size, int) or block_size < 1:
        raise ValueError(f"block_size must be a positive int (keys per block); got {block_size!r}")
    n_blocks = -(-S // block_size)
    if isinstance(top_k, bool) or not isinstance(top_k, int) or not 1 <= top_k <= max(n_blocks - 1, 1):
        raise ValueError(f"top_k must be an int from 1 to the {n_blocks - 1} blocks before the last of S={S} keys "
                         f"in blocks of {block_size}; got {top_k!r}")
    block_of = torch.arange(S, device=k.device) // block_size  # (S,)
    sums = torch.zeros(B, H, n_blocks, E, dtype=torch.float32, device=k.device).index_add_(2, block_of, k.float())
    counts = (S - block_size * torch.arange(n_blocks, device=k.device)).clamp(max=block_size)  # the last is shorter
    means = sums / counts[:, None].float()  # (B, H, n_blocks, E): each block's mean key
    own = (torch.arange(T, device=q.device) + S - T) // block_size  # each query's block, (T,)
    scores = torch.einsum("bhte,bhne->bhtn", q.float(), means)  # (B, H, T, n_blocks)
    earlier = torch.arange(n_blocks, device=q.device)[None, :] < own[:, None]  # (T, n_blocks): whole blocks before
    ranked = scores.masked_fill(~earlier, float("-inf"))
    picked = torch.zeros_like(ranked, dtype=torch.bool).scatter_(-1, ranked.topk(min(top_k, n_blocks), dim=-1).indices,
                                                                 True) & earlier
    picked |= torch.arange(n_blocks, device=q.device)[None, :] == own[:, None]  # the own block, always
    keep = picked[..., block_of]  # (B, H, T, S): a key is kept when its block is
    return keep & causal_mask(T, S, device=q.device)


def gather_selected(k: Tensor, v: Tensor, mask: Tensor) -> tuple[Tensor, Tensor]:
    """The picked keys and values of one decoding query: ``(B, K, n, E)`` and ``(B, K, n, Ev)``, ``n`` picked.

    For a step with a cache: the query's row of the keep-mask, ``(B, 1, 1, S)`` (shared by the heads), chooses
    ``n`` of the cached positions (every batch row must pick as many, as :func:`top_k_mask` does once a query sees
    ``top_k`` keys); attention over them equals attention over the whole cache with the mask.

    Args:
        k: ``(B, K, S, E)``; v: ``(B, K, S, Ev)`` (MLA: the latent, ``K = 1``).
        mask: ``(B, 1, 1, S)`` bool.

    Raises:
        ValueError: on a mask of another shape, or batch rows that pick different numbers of keys.
    """
    B, K, S, _ = k.shape
    if mask.shape != (B, 1, 1, S) or mask.dtype != torch.bool:
        raise ValueError(f"mask must be a bool (B, 1, 1, S) = ({B}, 1, 1, {S}) row; got {mask.dtype} "
                         f"{tuple(mask.shape)}")
    counts = mask.sum(dim=-1).flatten()
    if counts.numel() and not bool((counts == counts[0]).all()):
        raise ValueError(f"every batch row must pick as many keys to gather them into one tensor; got "
                         f"{counts.tolist()}")
    n = int(counts[0]) if counts.numel() else 0
    index = mask[:, 0, 0].nonzero()[:, 1].view(B, 1, n)  # positions in order, (B, 1, n)
    rows = torch.arange(B, device=k.device).view(B, 1, 1)
    heads = torch.arange(K, device=k.device).view(1, K, 1)
    # Indexing copies whole rows of E numbers: about 3x faster on a CPU than gather with an index expanded over E.
    return k[rows, heads, index], v[rows, heads, index]  # (B, K, n, E), (B, K, n, Ev)
