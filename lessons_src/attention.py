"""Multi-head attention, written to be read and copied.

Two ways to compute the same thing:

* :func:`scaled_dot_product_attention` is the textbook formula,
  ``softmax(Q K^T / sqrt(d_k) + mask) V``, spelled out so you can see (and return) the weights;
* ``torch.nn.functional.scaled_dot_product_attention`` is PyTorch's fused kernel, which never builds the
  ``T x S`` weight matrix in memory. :class:`MultiHeadAttention` uses it unless you ask for the weights.

Masks follow PyTorch SDPA's convention (bool ``True`` = may attend, float = added); see
:mod:`lessons_src.masks`.

Grouped-query attention (GQA) lets ``K = num_kv_heads`` key/value heads serve ``H = num_heads`` query
heads, ``n_rep = H // K`` each: ``K == H`` is ordinary multi-head attention (MHA), ``K == 1`` is
multi-query attention (MQA). Query head ``h`` uses KV head ``h // n_rep`` (the order of
``repeat_interleave``). With a :class:`lessons_src.kv_cache.KVCache`, :meth:`MultiHeadAttention.forward`
decodes incrementally.

References:
    Vaswani et al., "Attention Is All You Need", NeurIPS 2017 (arXiv:1706.03762), section 3.2.
    Shazeer, "Fast Transformer Decoding: One Write-Head is All You Need", 2019 (arXiv:1911.02150).
    Ainslie et al., "GQA: Training Generalized Multi-Query Transformer Models from Multi-Head
    Checkpoints", EMNLP 2023 (arXiv:2305.13245).
    PyTorch documentation of ``torch.nn.functional.scaled_dot_product_attention``.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .masks import causal_mask, check_mask, combine_masks

if TYPE_CHECKING:
    from .kv_cache import KVCache

__all__ = ["MultiHeadAttention", "grouped_attention", "repeat_kv", "scaled_dot_product_attention"]


def scaled_dot_product_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    *,
    attn_mask: Tensor | None = None,
    is_causal: bool = False,
    scale: float | None = None,
    dropout_p: float = 0.0,
) -> tuple[Tensor, Tensor]:
    """The explicit attention formula, with the semantics of ``F.scaled_dot_product_attention``.

    Args:
        q: queries.
        k: keys.
        v: values.
        attn_mask: bool (``True`` = may attend) or float (added to the scores, same dtype as ``q``),
            broadcastable to the scores ``(..., T, S)``.
        is_causal: apply a causal mask aligned **top-left**, exactly as PyTorch does (query ``i`` sees
            keys ``j <= i``). For ``T != S`` pass :func:`lessons_src.masks.causal_mask` as ``attn_mask``
            instead. Cannot be combined with ``attn_mask`` (PyTorch refuses that too).
        scale: multiplier of the scores; default ``1 / sqrt(E)``.
        dropout_p: probability of zeroing a weight (the rest are scaled by ``1 / (1 - dropout_p)``).

    Returns:
        ``(output, weights)``; ``weights`` are the softmax probabilities after dropout. A query that may
        attend to no key at all gets all-zero weights and a zero output, as PyTorch's kernels give
        (a bare softmax over a row of ``-inf`` would give ``NaN``).

    Shapes:
        q: ``(..., T, E)``, k: ``(..., S, E)``, v: ``(..., S, Ev)``;
        output: ``(..., T, Ev)``, weights: ``(..., T, S)``.

    Raises:
        ValueError: on mismatched shapes, an unsupported mask, or ``attn_mask`` with ``is_causal``.

    Example:
        >>> q = k = v = torch.randn(1, 2, 3, 4)
        >>> out, w = scaled_dot_product_attention(q, k, v, is_causal=True)
        >>> out.shape, w.shape
        (torch.Size([1, 2, 3, 4]), torch.Size([1, 2, 3, 3]))
    """
    if q.ndim < 2 or k.ndim < 2 or v.ndim < 2:
        raise ValueError(
            "q, k, v need at least 2 dims (..., length, features); "
            f"got {tuple(q.shape)}, {tuple(k.shape)}, {tuple(v.shape)}"
        )
    if q.shape[-1] != k.shape[-1]:
        raise ValueError(f"q and k must have the same last dim (E); got q {tuple(q.shape)}, k {tuple(k.shape)}")
    if k.shape[-2] != v.shape[-2]:
        raise ValueError(f"k and v must have the same length (S); got k {tuple(k.shape)}, v {tuple(v.shape)}")
    if not 0.0 <= dropout_p < 1.0:
        raise ValueError(f"dropout_p must be in [0, 1); got {dropout_p}")
    if is_causal and attn_mask is not None:
        raise ValueError("pass either attn_mask or is_causal=True, not both (combine the masks yourself)")
    T, S = q.shape[-2], k.shape[-2]
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale

    scores = (q @ k.transpose(-2, -1)) * scale  # (..., T, S)
    if is_causal:
        attn_mask = torch.ones(T, S, dtype=torch.bool, device=q.device).tril()  # top-left, as PyTorch
    if attn_mask is not None:
        batch = torch.broadcast_shapes(q.shape[:-2], k.shape[:-2])  # type: ignore[no-untyped-call]
        target = (*batch, T, S)
        check_mask(attn_mask, target, q.dtype)
        if attn_mask.dtype == torch.bool:
            scores = scores.masked_fill(~attn_mask, float("-inf"))
        else:
            scores = scores + attn_mask
    weights = scores.softmax(dim=-1)  # (..., T, S)
    if attn_mask is not None:  # rows with no visible key: 0, not softmax's NaN
        weights = weights.masked_fill(scores.isneginf().all(dim=-1, keepdim=True), 0.0)
    if dropout_p > 0.0:
        weights = F.dropout(weights, p=dropout_p)
    return weights @ v, weights  # (..., T, Ev), (..., T, S)


def _divisors(n: int) -> str:
    return ", ".join(str(d) for d in range(1, n + 1) if n % d == 0)


def repeat_kv(x: Tensor, n_rep: int) -> Tensor:
    """Repeat each key/value head ``n_rep`` times, so ``K`` KV heads line up with ``H = K * n_rep`` query heads.

    Equivalent to ``torch.repeat_interleave(x, n_rep, dim=1)``: head ``k`` becomes heads
    ``k * n_rep, ..., k * n_rep + n_rep - 1``. It copies the keys and values ``n_rep`` times, which is
    what grouped-query attention exists to avoid; :func:`grouped_attention` does not need it.

    Shapes:
        x: ``(B, K, S, E)``; output: ``(B, K * n_rep, S, E)``.

    Example:
        >>> repeat_kv(torch.arange(2.0).view(1, 2, 1, 1), 3).flatten().tolist()
        [0.0, 0.0, 0.0, 1.0, 1.0, 1.0]
    """
    if n_rep == 1:
        return x
    B, K, S, E = x.shape
    return x[:, :, None].expand(B, K, n_rep, S, E).reshape(B, K * n_rep, S, E)  # (B, K * n_rep, S, E)


def grouped_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    *,
    attn_mask: Tensor | None = None,
    is_causal: bool = False,
    dropout_p: float = 0.0,
    scale: float | None = None,
) -> Tensor:
    """``F.scaled_dot_product_attention`` for ``H`` query heads sharing ``K`` key/value heads, on the fused kernel.

    * ``K == H``: plain SDPA.
    * ``is_causal`` (``T == S``, no mask; a prefill): SDPA with ``enable_gqa=True`` and its causal flag.
    * otherwise (decoding): the ``n_rep`` query heads of each group are stacked along the query axis,
      ``q (B, H, T, E) -> (B, K, n_rep * T, E)``, so that each KV head is read once and serves its whole
      group in one matmul; the mask is tiled the same way. This is what makes GQA and MQA decoding fast.

    Args:
        q: queries; ``H`` must be a multiple of ``K``.
        k: keys.
        v: values.
        attn_mask: bool (``True`` = may attend) or float mask, broadcastable to ``(B, H, T, S)``.
        is_causal: top-left causal flag, as SDPA's; only for ``T == S`` without ``attn_mask``.
        dropout_p: dropout on the weights.
        scale: score multiplier, default ``1 / sqrt(E)``.

    Returns:
        The attention output.

    Shapes:
        q: ``(B, H, T, E)``, k: ``(B, K, S, E)``, v: ``(B, K, S, Ev)``; output: ``(B, H, T, Ev)``.

    Example:
        >>> q, kv = torch.randn(1, 4, 1, 8), torch.randn(1, 2, 5, 8)
        >>> grouped_attention(q, kv, kv).shape
        torch.Size([1, 4, 1, 8])
    """
    B, H, T, E = q.shape
    K, S, Ev = k.shape[1], k.shape[2], v.shape[-1]
    if K < 1 or H % K != 0:
        raise ValueError(
            f"q has {H} heads, which is not a multiple of the {K} key/value heads of k; "
            f"KV-head counts that divide {H} are {_divisors(H)}"
        )
    if K == H:
        return F.scaled_dot_product_attention(
            q, k, v, attn_mask=attn_mask, is_causal=is_causal, dropout_p=dropout_p, scale=scale
        )
    if is_causal:
        return F.scaled_dot_product_attention(
            q, k, v, is_causal=True, dropout_p=dropout_p, scale=scale, enable_gqa=True
        )  # (B, H, T, Ev)
    n_rep = H // K
    qg = q.reshape(B, K, n_rep * T, E)  # (B, K, n_rep * T, E): row r * T + t is query head k * n_rep + r
    mask = attn_mask
    if mask is not None:
        mask = mask.reshape((1,) * (4 - mask.ndim) + tuple(mask.shape))
        mask = mask.expand(mask.shape[0], H, T, S).reshape(mask.shape[0], K, n_rep * T, S)  # like qg
    y = F.scaled_dot_product_attention(qg, k, v, attn_mask=mask, dropout_p=dropout_p, scale=scale)
    return y.reshape(B, H, T, Ev)  # (B, H, T, Ev)


class MultiHeadAttention(nn.Module):
    """Multi-head attention: split into heads, attend in each, concatenate, mix with ``W_O``.

    Self-attention uses one fused projection for Q, K and V (one matmul instead of three), with rows
    ``[W_Q (H*E); W_K (K*E); W_V (K*E)]``. With ``num_kv_heads == num_heads`` (the default) that is the
    ``(3 * d_model, d_model)`` layout of ``nn.MultiheadAttention``'s ``in_proj_weight``, so weights copy
    across unchanged (:func:`lessons_src.interop.from_torch`). Cross-attention uses the same weights,
    the Q rows on ``x`` and the K/V rows on ``context``.

    Args:
        d_model: model width ``D`` (HF ``hidden_size``, nanoGPT ``n_embd``, PyTorch ``embed_dim``).
        num_heads: number of query heads ``H``; must divide ``d_model``. Each head has ``head_dim = D // H``.
        num_kv_heads: number of key/value heads ``K`` (HF ``num_key_value_heads``); must divide
            ``num_heads``. ``None`` or ``num_heads``: MHA; ``1``: MQA; in between: GQA.
        bias: add biases to the projections.
        dropout: dropout on the attention weights, in training mode only.

    Shapes:
        x: ``(B, T, D)``; context: ``(B, S, D)``; attn_mask: broadcastable to ``(B, H, T, S)``;
        output: ``(B, T, D)``; weights: ``(B, H, T, S)``. With a cache, ``S`` = cached + ``T``.

    Raises:
        ValueError: if ``num_heads < 1``, ``num_heads`` does not divide ``d_model`` or ``num_kv_heads``
            does not divide ``num_heads`` (the messages list the counts that would), and, in
            :meth:`forward`, on malformed inputs.

    Example:
        >>> mha = MultiHeadAttention(d_model=8, num_heads=2)
        >>> mha(torch.randn(1, 5, 8), is_causal=True).shape
        torch.Size([1, 5, 8])
        >>> MultiHeadAttention(d_model=64, num_heads=8, num_kv_heads=2).n_rep
        4
    """

    def __init__(
        self,
        d_model: int,
        num_heads: int,
        *,
        num_kv_heads: int | None = None,
        bias: bool = False,
        dropout: float = 0.0,
    ) -> None:
        super().__init__()
        if num_heads < 1:
            raise ValueError(f"num_heads must be at least 1; got num_heads={num_heads}")
        if d_model < 1:
            raise ValueError(f"d_model must be at least 1; got d_model={d_model}")
        if d_model % num_heads != 0:
            raise ValueError(
                f"d_model={d_model} is not divisible by num_heads={num_heads}; "
                f"head counts that divide {d_model} are {_divisors(d_model)}"
            )
        num_kv_heads = num_heads if num_kv_heads is None else num_kv_heads
        if num_kv_heads < 1 or num_heads % num_kv_heads != 0:
            raise ValueError(
                f"num_heads={num_heads} is not a multiple of num_kv_heads={num_kv_heads}; "
                f"valid num_kv_heads for num_heads={num_heads} are {_divisors(num_heads)}"
            )
        if not 0.0 <= dropout < 1.0:
            raise ValueError(f"dropout must be in [0, 1); got dropout={dropout}")
        self.d_model = d_model
        self.num_heads = num_heads
        self.num_kv_heads = num_kv_heads
        self.n_rep = num_heads // num_kv_heads  # query heads served by each KV head
        self.head_dim = d_model // num_heads
        self.kv_dim = num_kv_heads * self.head_dim  # K * E
        self.dropout = dropout
        self.qkv_proj = nn.Linear(d_model, d_model + 2 * self.kv_dim, bias=bias)  # rows: [W_Q; W_K; W_V]
        self.out_proj = nn.Linear(d_model, d_model, bias=bias)  # W_O

    def extra_repr(self) -> str:
        return (
            f"d_model={self.d_model}, num_heads={self.num_heads}, num_kv_heads={self.num_kv_heads}, "
            f"head_dim={self.head_dim}"
        )

    def _split_heads(self, t: Tensor, heads: int) -> Tensor:
        B, L, _ = t.shape
        return t.view(B, L, heads, self.head_dim).transpose(1, 2)  # (B, heads, L, E)

    def project_qkv(self, x: Tensor, context: Tensor | None = None) -> tuple[Tensor, Tensor, Tensor]:
        """Project to per-head queries, keys and values (no checks; :meth:`forward` checks).

        Shapes:
            x: ``(B, T, D)``, context: ``(B, S, D)``; returns q ``(B, H, T, E)``, k and v ``(B, K, S, E)``.
        """
        D, KE = self.d_model, self.kv_dim
        if context is None:
            q, k, v = self.qkv_proj(x).split([D, KE, KE], dim=-1)  # (B, T, D), 2 x (B, T, K*E): one matmul
        else:
            w, b = self.qkv_proj.weight, self.qkv_proj.bias
            q = F.linear(x, w[:D], None if b is None else b[:D])  # (B, T, D)
            k, v = torch.split(F.linear(context, w[D:], None if b is None else b[D:]), [KE, KE], dim=-1)  # (B, S, K*E)
        H, K = self.num_heads, self.num_kv_heads
        return self._split_heads(q, H), self._split_heads(k, K), self._split_heads(v, K)

    def forward(
        self,
        x: Tensor,
        context: Tensor | None = None,
        *,
        attn_mask: Tensor | None = None,
        is_causal: bool = False,
        need_weights: bool = False,
        cache: KVCache | None = None,
    ) -> Tensor | tuple[Tensor, Tensor]:
        """Attend from ``x`` to itself, or to ``context`` (cross-attention).

        Args:
            x: queries' input ``(B, T, D)``.
            context: keys' and values' input ``(B, S, D)``; ``None`` for self-attention (``S = T``).
            attn_mask: bool (``True`` = may attend) or float (added), broadcastable to ``(B, H, T, S)``.
            is_causal: hide future keys, aligned bottom-right (see :func:`lessons_src.masks.causal_mask`);
                may be combined with ``attn_mask``.
            need_weights: also return the attention weights. This takes the explicit path, which builds
                the ``(B, H, T, S)`` weight matrix; without it the fused SDPA kernel is used.
            cache: a :class:`lessons_src.kv_cache.KVCache` for incremental self-attention decoding: the new
                keys and values are appended to it and ``x`` attends to everything cached so far
                (``S`` = cached + ``T``). Pass the prompt first (prefill), then one or more new tokens
                per call, with ``is_causal=True``.

        Returns:
            ``output`` ``(B, T, D)``, or ``(output, weights)`` with weights ``(B, H, T, S)``.

        Raises:
            ValueError: if ``x`` or ``context`` is not 3-D, their batch or width is wrong, the mask's
                dtype or shape is not accepted, ``cache`` is combined with ``context``, or the cache
                does not fit (see :meth:`lessons_src.kv_cache.KVCache.update`).

        Example:
            >>> from lessons_src.kv_cache import KVCache
            >>> gqa = MultiHeadAttention(16, 4, num_kv_heads=2).eval()
            >>> cache = KVCache(batch_size=1, num_kv_heads=2, head_dim=4, max_len=8)
            >>> _ = gqa(torch.randn(1, 5, 16), is_causal=True, cache=cache)  # prefill 5 tokens
            >>> gqa(torch.randn(1, 1, 16), is_causal=True, cache=cache).shape, cache.length
            (torch.Size([1, 1, 16]), 6)
        """
        self._check_inputs(x, context)
        if cache is not None and context is not None:
            raise ValueError("cache is for self-attention decoding; pass context=None with a cache")
        B, T, _ = x.shape
        S = (T if context is None else context.shape[1]) + (0 if cache is None else cache.length)
        if attn_mask is not None:  # checked before the cache is touched
            check_mask(attn_mask, (B, self.num_heads, T, S), x.dtype)
        q, k, v = self.project_qkv(x, context)  # (B, H, T, E), 2 x (B, K, S, E)
        if cache is not None:
            k, v = cache.update(k, v)  # everything cached so far: 2 x (B, K, S, E)
        dropout_p = self.dropout if self.training else 0.0

        use_causal_flag = is_causal and attn_mask is None and T == S
        mask = attn_mask
        if is_causal and not use_causal_flag and T > 1:  # with one query, the causal mask keeps every key
            mask = combine_masks(attn_mask, causal_mask(T, S, device=x.device), x.dtype)

        if need_weights:
            y, weights = scaled_dot_product_attention(
                q, repeat_kv(k, self.n_rep), repeat_kv(v, self.n_rep), attn_mask=mask,
                is_causal=use_causal_flag, dropout_p=dropout_p,
            )  # (B, H, T, E), (B, H, T, S)
        else:
            y = grouped_attention(q, k, v, attn_mask=mask, is_causal=use_causal_flag, dropout_p=dropout_p)
        y = y.transpose(1, 2).reshape(B, T, self.d_model)  # concatenate heads: (B, T, D)
        out = self.out_proj(y)  # (B, T, D)
        return (out, weights) if need_weights else out

    def _check_inputs(self, x: Tensor, context: Tensor | None) -> None:
        D = self.d_model
        if x.ndim != 3:
            raise ValueError(f"x must be 3-D (B, T, d_model={D}); got shape {tuple(x.shape)}")
        if x.shape[-1] != D:
            raise ValueError(f"x's last dim must be d_model={D}; got shape {tuple(x.shape)}")
        if context is None:
            return
        if context.ndim != 3:
            raise ValueError(f"context must be 3-D (B, S, d_model={D}); got shape {tuple(context.shape)}")
        if context.shape[0] != x.shape[0]:
            raise ValueError(
                f"context batch size {context.shape[0]} does not match x's batch size {x.shape[0]} "
                f"(x {tuple(x.shape)}, context {tuple(context.shape)})"
            )
        if context.shape[-1] != D:
            raise ValueError(f"context's last dim must be d_model={D}; got shape {tuple(context.shape)}")
