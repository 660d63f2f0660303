"""Attention that chooses its keys: DeepSeek's lightning indexer and MoBA's block selection, as keep-masks.

Each query picks a few keys (or blocks of keys) with a cheap score, then ordinary attention runs over the pick:
pass the mask these functions return as ``attn_mask`` to :func:`lessons_src.functional.attention` (``True`` = may
attend, the package's one convention), or, for one decoding step, gather the picked keys with
:func:`gather_selected`.

* **Lightning indexer** (DeepSeek Sparse Attention, DeepSeek-V3.2, arXiv:2512.02556): a few small indexer heads
  score every visible key, ``I[t, s] = sum_h w[t, h] * ReLU(scale * q_h[t] . k[s])``, with one key per position
  shared by the heads; each query keeps its ``top_k`` best keys, and all the layer's attention heads use that one
  selection (the mask has one head). Causality comes first: a key the query may not see is never picked.
  DeepSeek-V4's compressed sparse layers rank pooled entries instead of keys (:class:`CompressedIndexer`).
* **MoBA** (Mixture of Block Attention, Lu et al. 2025, arXiv:2502.13189): keys in blocks of ``block_size``; each
  query scores every earlier block by its dot product with the block's mean key and keeps ``top_k`` blocks: its
  own (causally) and the ``top_k - 1`` best earlier ones, as MoBA's code counts them; each head picks for itself.

Positions are bottom-right aligned as everywhere in the package: the ``T`` queries are the last of ``S`` positions.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from ._checks import flag, positive, size, tensor
from .masks import causal_mask

__all__ = ["CompressedIndexer", "gather_selected", "lightning_indexer_scores", "moba_mask", "top_k_mask"]


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
    tensor("q", q, ndim=4, shape="(B, Hi, T, Di)")
    tensor("k", k, ndim=3, shape="(B, S, Di)")
    tensor("weights", weights, ndim=3, shape="(B, Hi, T)")
    scale = None if scale is None else positive("scale", scale, "DeepSeek-V3.2: Di ** -0.5")
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
    sees fewer than ``top_k`` keys keeps all it sees; a ``top_k`` above ``S`` is ``S``, as DeepSeek-V3.2's indexer
    takes ``min(index_topk, S)``. Ties are broken as :func:`torch.topk` breaks them.

    Raises:
        ValueError, TypeError: if ``scores`` is not ``(B, T, S)`` or holds a NaN where a query looks (a NaN has no
            rank), or ``top_k`` is not an int of at least 1.

    Example:
        >>> top_k_mask(torch.tensor([[[3.0, 1.0, 2.0], [0.0, 5.0, 4.0]]]), 2, is_causal=False).int().tolist()
        [[[[1, 0, 1], [0, 1, 1]]]]
    """
    tensor("scores", scores, ndim=3, shape="(B, T, S)")
    flag("is_causal", is_causal)
    B, T, S = scores.shape
    top_k = min(size("top_k", top_k), S)
    visible = causal_mask(T, S, device=scores.device) if is_causal else torch.ones(T, S, dtype=torch.bool,
                                                                                   device=scores.device)
    ranked = scores.float().masked_fill(~visible, float("-inf"))  # causality before the pick
    _refuse_nan("scores", ranked)
    picked = torch.zeros(B, T, S, dtype=torch.bool, device=scores.device)
    picked.scatter_(-1, ranked.topk(top_k, dim=-1).indices, True)
    return (picked & visible)[:, None]  # a query seeing fewer than top_k keys picked some hidden ones: drop them


def _refuse_nan(name: str, ranked: Tensor) -> None:
    """A NaN ranks above every number in :func:`torch.topk`: a pick made through one would be arbitrary."""
    if ranked.device.type != "meta" and bool(ranked.isnan().any()):  # a meta tensor holds no values to check
        where = [int(i) for i in ranked.isnan().nonzero()[0]]
        raise ValueError(f"{name} hold NaN where a query picks (first at index {where}): a NaN has no rank; "
                         f"look for an overflow or a NaN in the inputs")


def moba_mask(q: Tensor, k: Tensor, *, block_size: int, top_k: int) -> Tensor:
    """MoBA's keep-mask, ``(B, H, T, S)``: each query's ``top_k`` blocks, its own block (causally) always among them.

    The own block counts in ``top_k``, as in MoBA's code (``moba_naive.py`` gives it a gate of ``+inf`` before
    ``topk(gate, min(moba_topk, num_block))``): ``top_k=1`` keeps the own block alone, and ``top_k`` at least the
    number of blocks keeps every earlier key (causal attention). The other ``top_k - 1`` are the best blocks
    that end before the query's own, scored by the query's dot product with the block's mean key. ``S`` need
    not be a multiple of ``block_size``: the last block is shorter.

    Args:
        q: ``(B, H, T, E)``; k: ``(B, H, S, E)`` (repeat the KV heads for GQA first).
        block_size: keys per block (``>= 1``).
        top_k: blocks each query keeps, its own included (``>= 1``; more than there are blocks keeps them all).

    Raises:
        ValueError, TypeError: on shapes that do not fit, a ``block_size`` or ``top_k`` that is not an int of at
            least 1, or a NaN in a block's score for a query that ranks it.

    Example:
        >>> q, k = torch.ones(1, 1, 4, 2), torch.ones(1, 1, 4, 2)
        >>> moba_mask(q, k, block_size=2, top_k=1)[0, 0].int().tolist()  # the own block only
        [[1, 0, 0, 0], [1, 1, 0, 0], [0, 0, 1, 0], [0, 0, 1, 1]]
    """
    tensor("q", q, ndim=4, shape="(B, H, T, E)")
    tensor("k", k, ndim=4, shape="(B, H, S, E)")
    if q.dim() != 4 or k.dim() != 4 or q.shape[:2] != k.shape[:2] or q.shape[-1] != k.shape[-1]:
        raise ValueError(f"q must be (B, H, T, E) and k (B, H, S, E) with the same B, H, E; got q {tuple(q.shape)}, "
                         f"k {tuple(k.shape)}")
    B, H, T, E = q.shape
    S = k.shape[2]
    block_size = size("block_size", block_size)  # keys per block
    top_k = size("top_k", top_k)  # blocks per query, its own included
    n_blocks = -(-S // block_size)
    block_of = torch.arange(S, device=k.device) // block_size  # (S,)
    sums = torch.zeros(B, H, n_blocks, E, dtype=torch.float32, device=k.device).index_add_(2, block_of, k.float())
    counts = (S - block_size * torch.arange(n_blocks, device=k.device)).clamp(max=block_size)  # the last is shorter
    means = sums / counts[:, None].float()  # (B, H, n_blocks, E): each block's mean key
    own = (torch.arange(T, device=q.device) + S - T) // block_size  # each query's block, (T,)
    scores = torch.einsum("bhte,bhne->bhtn", q.float(), means)  # (B, H, T, n_blocks)
    earlier = torch.arange(n_blocks, device=q.device)[None, :] < own[:, None]  # (T, n_blocks): whole blocks before
    ranked = scores.masked_fill(~earlier, float("-inf"))
    _refuse_nan("the blocks' scores (q against each block's mean key)", ranked)
    others = min(top_k, n_blocks) - 1  # the own block takes one of the top_k
    picked = torch.zeros_like(ranked, dtype=torch.bool).scatter_(-1, ranked.topk(others, dim=-1).indices, True)
    picked = picked & earlier  # a query with fewer earlier blocks than others picked some later ones: drop them
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
    tensor("k", k, ndim=4, shape="(B, K, S, E)")
    tensor("v", v, ndim=4, shape="(B, K, S, Ev)")
    tensor("mask", mask, ndim=4, shape="(B, 1, 1, S)", dtype="bool")
    B, K, S, _ = k.shape
    if v.shape[:3] != k.shape[:3] or v.dtype != k.dtype:
        raise ValueError(f"v must be (B, K, S, Ev) like k {tuple(k.shape)}, of its dtype {k.dtype}; got "
                         f"{tuple(v.shape)} {v.dtype}")
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


class CompressedIndexer(nn.Module):
    """DeepSeek-V4's lightning indexer: each query's ``top_k`` pooled entries, among those whose window has ended.

    Its keys are entries of its own compressor (``keys``, an :class:`lessons_src.shared_kv.OverlapCompressor` of
    ``head_dim`` features, given), its queries come from the layer's query latent, turned by the layer's RoPE
    (``rope``, given) at the queries' positions; the scores are :func:`lightning_indexer_scores` with weights
    from the hidden state times ``num_heads ** -0.5``, and the pick is :func:`top_k_mask` among the entries each
    query sees.

    Args:
        d_model: ``D``.
        q_rank: the layer's query latent width.
        num_heads: indexer heads ``Hi``.
        head_dim: their size ``Di``.
        top_k: entries kept per query.
        keys: ``(x, start=, cache=) -> (entries (B, 1, N, Di), seen (1, 1, T, N))``.
        rope: ``rotate(x, positions)``: the layer's :class:`lessons_src.mechanisms.Rotary`.

    Shapes:
        x: ``(B, T, D)``; latent: ``(B, T, q_rank)``; output: keep ``(B, 1, T, N)`` (bool).
    """

    def __init__(self, d_model: int, q_rank: int, num_heads: int, head_dim: int, top_k: int, *, keys: nn.Module,
                 rope: nn.Module) -> None:
        super().__init__()
        D, self.num_heads, self.head_dim = size("d_model", d_model), size("num_heads", num_heads), size("head_dim",
                                                                                                       head_dim)
        self.top_k = size("top_k", top_k)
        for name, piece in (("keys", keys), ("rope", rope)):
            if not isinstance(piece, nn.Module):
                raise TypeError(f"{name} must be an nn.Module piece; got {type(piece).__name__}")
        self.keys, self.rope = keys, rope
        self.q_up = nn.Linear(size("q_rank", q_rank), self.num_heads * self.head_dim, bias=False)
        self.weights_proj = nn.Linear(D, self.num_heads, bias=False)

    def forward(self, x: Tensor, *, latent: Tensor, start: int) -> Tensor:
        x = tensor("x", x, ndim=3, shape="(B, T, d_model)")
        latent = tensor("latent", latent, ndim=3, shape="(B, T, q_rank)")
        B, T, _ = x.shape
        entries: Tensor
        seen: Tensor
        entries, seen = self.keys(x, start=start, cache=None)  # (B, 1, N, Di), (1, 1, T, N)
        positions = torch.arange(start, start + T, device=x.device)  # (T,)
        q = self.q_up(latent).view(B, T, self.num_heads, self.head_dim).transpose(1, 2)  # (B, Hi, T, Di)
        q = self.rope.rotate(q, positions)  # type: ignore[operator]  # a Rotary's rotate
        weights = (self.weights_proj(x) * self.num_heads ** -0.5).transpose(1, 2)  # (B, Hi, T)
        scores = lightning_indexer_scores(q, entries[:, 0], weights)  # (B, T, N)
        ranked = scores.masked_fill(~seen[:, 0], float("-inf"))  # an entry not yet complete is never picked
        return top_k_mask(ranked, self.top_k, is_causal=False) & seen  # (B, 1, T, N)
