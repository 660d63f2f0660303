"""Attention without the ``T x S`` matrix: online softmax and FlashAttention-2's tiling, in plain PyTorch.

The textbook formula ``softmax(q k^T * scale + mask) v`` builds a ``(B, H, T, S)`` score matrix, then a
weight matrix of the same size. FlashAttention computes the same output one tile at a time: a block of
``block_q`` queries against a block of ``block_k`` keys, never holding more than one
``(block_q, block_k)`` tile of scores per head. What makes that possible is the *online softmax*
(:func:`online_softmax`): a softmax's normaliser can be accumulated block by block, rescaling what has
been summed so far whenever a larger maximum turns up.

This file is that algorithm, written to be read: :func:`tiled_attention` (forward: the output and each
query's log-sum-exp) and its backward pass, which recomputes each tile from the saved log-sum-exp instead
of storing the weights (FlashAttention-2's backward), as a ``torch.autograd.Function``. It is registered
as the ``"tiled"`` implementation of :func:`lessons_src.functional.attention`, so it accepts the same masks
(bool or float, any broadcastable shape), bottom-right ``is_causal``, grouped-query heads (without
repeating keys and values) and dtypes as the others, and gives the same answer. With a sliding
``window`` it skips the tiles that lie wholly before the window as well as those after the diagonal, so
its work grows with ``T * window`` instead of ``T * S``.

It honours the two changes to the softmax that :func:`lessons_src.functional.attention` takes: a ``softcap``
is applied to each tile's scaled scores before its mask (and its derivative, ``1 - tanh^2``, in the backward
pass), and ``sinks`` start each query's online softmax: the running maximum starts at the sink logit and the
running sum at ``exp(0) = 1``, with nothing added to the output, so the log-sum-exp includes the sink and
the backward pass needs only one more sum, the sink's gradient ``-sum_t p_sink(t) * D(t)``.

It is not fast: the fused kernels (``F.scaled_dot_product_attention``) run the same loop inside one
kernel, keeping each tile in on-chip memory, which plain PyTorch cannot express. What it shows is the
arithmetic, and that the memory no longer grows with ``T x S``.

References:
    Milakov and Gimelshein, "Online normalizer calculation for softmax", 2018 (arXiv:1805.02867).
    Dao et al., "FlashAttention: Fast and Memory-Efficient Exact Attention with IO-Awareness",
    NeurIPS 2022 (arXiv:2205.14135).
    Dao, "FlashAttention-2: Faster Attention with Better Parallelism and Work Partitioning", 2023
    (arXiv:2307.08691), algorithms 1 (forward) and 2 (backward).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, NamedTuple

import torch
from torch import Tensor

from ._checks import autocast_on, check_qkv, integer, size
from .functional import AttentionResult, Supports, register_attention
from .masks import BlockKind, CausalTiles, MaskRule, PreparedMask, causal, check_window, prepare_mask, sliding_window

if TYPE_CHECKING:
    from collections.abc import Iterator

__all__ = [
    "BLOCK_K",
    "BLOCK_Q",
    "RescaleCount",
    "TiledAttention",
    "block_kind",
    "count_rescales",
    "online_softmax",
    "softmax_statistics",
    "tile_plan",
    "tiled_attention",
    "tiled_attention_function",
]

BLOCK_Q = 128
"""Default query block size of the ``"tiled"`` implementation."""
BLOCK_K = 128
"""Default key block size of the ``"tiled"`` implementation."""

_NEG_INF = float("-inf")
_LOG2E = 1.4426950408889634  # a rise of d in natural units is d * log2(e) powers of two


_PER_BLOCK = "a number of positions per block"  # what a block size counts, for its error


# --------------------------------------------------------------------------- online softmax


def softmax_statistics(x: Tensor, *, block_size: int = 1) -> Iterator[tuple[Tensor, Tensor]]:
    """Read ``x``'s last dim once, a block at a time, yielding the running max and sum after each block.

    The softmax of a row ``x_1..x_n`` is ``exp(x_i - m) / l`` with ``m = max_j x_j`` (subtracted so no
    ``exp`` overflows) and ``l = sum_j exp(x_j - m)``. Both can be built in one pass. After the first
    ``k`` entries, keep ``m_k = max(x_1..x_k)`` and ``l_k = sum_{j<=k} exp(x_j - m_k)``. A new block
    with maximum ``b`` gives

    * ``m_new = max(m_k, b)``;
    * ``l_new = l_k * exp(m_k - m_new) + sum_{j in block} exp(x_j - m_new)``: the old sum was taken
      relative to ``m_k``; multiplying by ``exp(m_k - m_new)`` re-expresses every term relative to
      ``m_new``, since ``exp(x_j - m_k) * exp(m_k - m_new) = exp(x_j - m_new)``.

    At the end, ``m`` and ``l`` are exactly the max and the sum a two-pass softmax computes.
    Entries of ``-inf`` (masked out) add ``exp(-inf) = 0``. While a row has seen only ``-inf``, its
    ``m`` is ``-inf``; the shift used is then 0 instead (``exp(-inf - 0) = 0``), so nothing becomes
    ``NaN`` and such a row keeps ``l = 0``.

    Args:
        x: scores; the softmax is over the last dim.
        block_size: how many entries each step reads (1: one at a time).

    Yields:
        ``(m, l)``, each of shape ``x.shape[:-1]``, after each block.

    Raises:
        TypeError, ValueError: if ``block_size`` is not a positive int.

    Example:
        >>> x = torch.tensor([1.0, 3.0, 2.0])
        >>> [(m.item(), round(l.item(), 3)) for m, l in softmax_statistics(x)]
        [(1.0, 1.0), (3.0, 1.135), (3.0, 1.503)]
    """
    block_size = size("block_size", block_size, hint=_PER_BLOCK)
    m = torch.full(x.shape[:-1], _NEG_INF, dtype=x.dtype, device=x.device)
    l = torch.zeros(x.shape[:-1], dtype=x.dtype, device=x.device)  # the papers' name
    for start in range(0, x.shape[-1], block_size):
        block = x[..., start : start + block_size]
        m_new = torch.maximum(m, block.amax(dim=-1))
        shift = torch.where(m_new == _NEG_INF, torch.zeros_like(m_new), m_new)  # a row of -inf so far: shift 0
        l = l * torch.exp(m - shift) + torch.exp(block - shift[..., None]).sum(dim=-1)
        m = m_new
        yield m, l


def online_softmax(x: Tensor, *, block_size: int = 1) -> Tensor:
    """Softmax over the last dim from the one-pass statistics of :func:`softmax_statistics`.

    Equal to ``torch.softmax(x, -1)``, except that a row of only ``-inf`` (a query that may see no key)
    gives zeros instead of ``NaN``.

    Shapes:
        x: ``(..., n)``; output: ``(..., n)``.

    Raises:
        TypeError: if ``x`` is not a tensor.
        ValueError: if ``x`` is 0-d or not floating, or ``block_size`` is not a positive int.

    Example:
        >>> online_softmax(torch.tensor([[0.0, float("-inf")], [float("-inf"), float("-inf")]])).tolist()
        [[1.0, 0.0], [0.0, 0.0]]
    """
    _check_scores(x)
    if x.shape[-1] == 0:
        size("block_size", block_size, hint=_PER_BLOCK)
        return x.clone()
    m = l = x  # overwritten: the last statistics
    for m, l in softmax_statistics(x, block_size=block_size):  # noqa: B007
        pass
    shift = torch.where(m == _NEG_INF, torch.zeros_like(m), m)
    total = torch.where(l > 0, l, torch.ones_like(l))  # a row of -inf: 0 / 1 = 0
    return torch.exp(x - shift[..., None]) / total[..., None]


def _check_scores(x: object) -> None:
    if not isinstance(x, Tensor):
        raise TypeError(f"x must be a torch.Tensor; got {type(x).__name__}")
    if x.ndim == 0:
        raise ValueError("x must have at least 1 dim (the softmax is over the last); got a 0-d tensor")
    if not x.dtype.is_floating_point:
        raise ValueError(f"x must be floating (scores); got {x.dtype}: convert it, e.g. x.float()")


def _rises_within(m: Tensor, m_new: Tensor, threshold: float) -> Tensor:
    """Where the running max rose (or stayed) by at most ``threshold`` powers of two from a finite old max."""
    return (m > _NEG_INF) & ((m_new - m) * _LOG2E <= threshold)


class RescaleCount(NamedTuple):
    """How often an online softmax over blocks rescaled what it had summed (see :func:`count_rescales`).

    Attributes:
        steps: (row, block) steps after a row's first finite block: each could need a rescale.
        rises: steps at which the row's maximum rose: FlashAttention-2 rescales there (it multiplies at every
            step, by ``exp(0) = 1`` where the maximum stayed).
        rescales: steps at which the running maximum was replaced, with the threshold: the rest were skipped.
    """

    steps: int
    rises: int
    rescales: int


def count_rescales(x: Tensor, *, block_size: int, threshold: float) -> RescaleCount:
    """Count the rescales an online softmax over ``x``'s last dim does, with and without a threshold.

    FlashAttention-4 (Zadouri et al., 2026, arXiv:2603.05451) keeps a row's running maximum unless a new block
    raises it by more than ``threshold`` powers of two (its kernel uses 8 for 16-bit inputs:
    ``rescale_threshold`` in flash_attn/cute/flash_fwd_sm100.py). The weights ``exp(s - m)`` computed against
    the stale maximum then stay below ``2**threshold``, and since the sum and the output use the same stale
    maximum, the final ``output / sum`` is the same. What it saves is the multiplication of the whole running
    output (``block_q x Ev`` numbers) each time the maximum creeps up.

    Args:
        x: scores (scaled, masked with ``-inf``); the softmax is over the last dim.
        block_size: keys per block.
        threshold: how far, in powers of two, the maximum may rise without a rescale (0: every rise rescales).

    Returns:
        A :class:`RescaleCount` over every row of ``x``.

    Raises:
        TypeError, ValueError: if ``x`` is not a floating tensor of at least 1 dim, ``block_size`` not a positive
            int or ``threshold`` not a number >= 0.

    Example:
        >>> x = torch.tensor([[0.0, 1.0, 9.0, 3.0]])  # blocks of one key: the max rises at 1.0 and at 9.0
        >>> count_rescales(x, block_size=1, threshold=8)
        RescaleCount(steps=3, rises=2, rescales=1)
    """
    _check_scores(x)
    block_size = size("block_size", block_size, hint=_PER_BLOCK)
    if isinstance(threshold, bool) or not isinstance(threshold, int | float) or not threshold >= 0:
        raise ValueError(f"threshold must be a number >= 0 (powers of two); got {threshold!r}")
    m = torch.full(x.shape[:-1], _NEG_INF, dtype=torch.float64, device=x.device)  # the running max, as kept
    exact = m.clone()  # the true running max
    steps = rises = rescales = 0
    for start in range(0, x.shape[-1], block_size):
        block_max = x[..., start : start + block_size].amax(dim=-1).double()
        new_exact = torch.maximum(exact, block_max)
        seen = exact > _NEG_INF  # a row's first finite block sets its max: no rescale, nothing summed yet
        steps += int(seen.sum())
        rises += int((seen & (new_exact > exact)).sum())
        keep = _rises_within(m, torch.maximum(m, block_max), float(threshold))
        rescales += int((seen & ~keep).sum())
        m = torch.where(keep, m, torch.maximum(m, block_max))
        exact = new_exact
    return RescaleCount(steps, rises, rescales)


# --------------------------------------------------------------------------- which tiles to compute


def _rule(is_causal: bool, window: int | None) -> MaskRule | None:
    """The causal rule a tiled loop reads (narrowed to ``window``), or ``None`` when nothing is hidden."""
    if not is_causal:
        return None
    return causal() if window is None else sliding_window(window)


def block_kind(
    i0: int, i1: int, j0: int, j1: int, T: int, S: int, *, causal: bool, window: int | None = None
) -> BlockKind:
    """Whether the tile of queries ``i0..i1-1`` and keys ``j0..j1-1`` is skipped, fully or partly visible.

    With the bottom-right causal mask, query ``i`` sees key ``j`` when ``j <= i + S - T``. A tile is
    hidden entirely (``"skip"``: never computed) when its first key is after what its last query sees,
    and visible entirely (``"full"``: no mask needed) when its last key is within what its first query
    sees; otherwise ``"partial"`` (the causal mask is built for the tile). Without ``causal``, ``"full"``.
    A sliding ``window`` also hides the keys older than the last ``window`` positions: a tile whose last key
    is that old even for its first query is skipped too. The rule is read from
    :func:`lessons_src.masks.sliding_window` (or ``causal``), not written again here.

    Example:
        >>> [block_kind(0, 2, j, j + 2, 4, 4, causal=True) for j in (0, 2)]
        ['partial', 'skip']
        >>> [block_kind(6, 8, j, j + 2, 8, 8, causal=True, window=2) for j in (0, 2, 4, 6)]
        ['skip', 'skip', 'partial', 'partial']
    """
    window = check_window(window)
    return CausalTiles(T, S, _rule(causal, window)).kind(i0, i1, j0, j1)


def tile_plan(
    T: int, S: int, block_q: int, block_k: int, *, causal: bool, window: int | None = None
) -> list[list[BlockKind]]:
    """The kind of every tile (rows: query blocks, columns: key blocks), as the loops of this file see them.

    Example:
        >>> tile_plan(4, 4, 2, 2, causal=True)
        [['partial', 'skip'], ['full', 'partial']]
        >>> tile_plan(6, 6, 2, 2, causal=True, window=2)[2]
        ['skip', 'partial', 'partial']
    """
    block_q, block_k = size("block_q", block_q, hint=_PER_BLOCK), size("block_k", block_k, hint=_PER_BLOCK)
    T, S = integer("T", T), integer("S", S)
    if T < 0 or S < 0:
        raise ValueError(f"T and S are numbers of positions, at least 0; got T={T}, S={S}")
    tiles = CausalTiles(T, S, _rule(causal, check_window(window)))
    return [
        [
            tiles.kind(i0, min(i0 + block_q, T), j0, min(j0 + block_k, S))
            for j0 in range(0, S, block_k)
        ]
        for i0 in range(0, T, block_q)
    ]


# --------------------------------------------------------------------------- one tile of scores


def _compute_dtype(dtype: torch.dtype) -> torch.dtype:
    """Half-precision inputs are accumulated in float32, as the fused kernels do."""
    return torch.float32 if dtype in (torch.float16, torch.bfloat16) else dtype


def _mask_tile(mask: Tensor, i0: int, i1: int, j0: int, j1: int) -> Tensor:
    """The part of a 4-D mask ``(b, h, T or 1, S or 1)`` that covers queries ``i0..i1-1`` and keys ``j0..j1-1``."""
    rows = slice(i0, i1) if mask.shape[2] > 1 else slice(None)
    cols = slice(j0, j1) if mask.shape[3] > 1 else slice(None)
    return mask[:, :, rows, cols]


def _tile_scores(
    q_i: Tensor,
    k_j: Tensor,
    mask: Tensor | None,
    kind: BlockKind,
    span: tuple[int, int, int, int],
    scale: float,
    tiles: CausalTiles,
    softcap: float | None = None,
) -> tuple[Tensor, Tensor | None]:
    """Scaled (capped) and masked scores of one tile, the ``n_rep`` query heads of each KV head stacked on the rows.

    Returns the scores and, with ``softcap``, ``tanh(s / softcap)`` of the scaled scores (the backward pass
    needs it for the cap's derivative), else ``None``.

    Shapes:
        q_i: ``(B, K, n_rep * tq, E)``; k_j: ``(B, K, tk, E)``; mask: ``(b, H or 1, T or 1, S or 1)``;
        output: ``(B, K, n_rep * tq, tk)``, and the tanh of the same shape.
    """
    i0, i1, j0, j1 = span
    B, K, rows, _ = q_i.shape
    tq, tk = i1 - i0, j1 - j0
    n_rep = rows // tq
    s = (q_i @ k_j.transpose(-2, -1)) * scale  # (B, K, n_rep * tq, tk)
    tanh = None
    if softcap is not None:
        tanh = torch.tanh(s / softcap)
        s = softcap * tanh  # the cap, before the mask
    if mask is None and kind == "full":
        return s, tanh
    s5 = s.view(B, K, n_rep, tq, tk)
    if mask is not None:
        m = _mask_tile(mask, i0, i1, j0, j1)  # (b, H or 1, tq or 1, tk or 1)
        m = m.reshape(m.shape[0], K, n_rep, *m.shape[2:]) if m.shape[1] > 1 else m[:, :, None]  # 5-D
        s5 = s5.masked_fill(~m, _NEG_INF) if m.dtype == torch.bool else s5 + m.to(s5.dtype)
    if kind == "partial":
        s5 = s5.masked_fill(~tiles.visible(i0, i1, j0, j1), _NEG_INF)  # (tq, tk): the causal rule (and window)
    return s5.reshape(B, K, n_rep * tq, tk), tanh


def _sink_rows(sinks: Tensor, K: int, tq: int, dtype: torch.dtype) -> Tensor:
    """Each row's sink logit in the grouped layout of a query block: ``(H,) -> (K, n_rep * tq)``."""
    return sinks.to(dtype).view(K, -1, 1).expand(K, sinks.shape[0] // K, tq).reshape(K, -1)


# --------------------------------------------------------------------------- forward (FlashAttention-2, algorithm 1)


def _forward(
    q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None, causal: bool, scale: float, block_q: int, block_k: int,
    window: int | None = None, softcap: float | None = None, sinks: Tensor | None = None,
    rescale_threshold: float = 0.0,
) -> tuple[Tensor, Tensor]:
    """Output ``(B, H, T, Ev)`` and log-sum-exp ``(B, H, T)``, one query block at a time (a sink starts each row).

    With ``rescale_threshold`` > 0, a row keeps its old maximum unless the new one is more than that many powers
    of two larger (FlashAttention-4's conditional rescaling, :func:`count_rescales`).
    """
    B, H, T, E = q.shape
    K, S, Ev = k.shape[1], k.shape[2], v.shape[-1]
    n_rep = H // K
    cd = _compute_dtype(q.dtype)
    out = torch.zeros(B, K, n_rep, T, Ev, dtype=q.dtype, device=q.device)  # a query that sees nothing: 0
    lse = torch.full((B, K, n_rep, T), _NEG_INF, dtype=cd, device=q.device)
    qg = q.view(B, K, n_rep, T, E)  # head h is KV head h // n_rep, no copy of k or v
    tiles = CausalTiles(T, S, _rule(causal, window), q.device)
    for i0 in range(0, T, block_q):
        i1 = min(i0 + block_q, T)
        tq = i1 - i0
        q_i = qg[:, :, :, i0:i1].to(cd).reshape(B, K, n_rep * tq, E)  # one block of queries, every head of a group
        m = torch.full((B, K, n_rep * tq), _NEG_INF, dtype=cd, device=q.device)  # running max
        l = torch.zeros(B, K, n_rep * tq, dtype=cd, device=q.device)  # running sum of exp(s - m)
        if sinks is not None:  # the sink is the first score seen: max = sink, sum = exp(sink - sink) = 1
            m = _sink_rows(sinks, K, tq, cd).expand(B, K, n_rep * tq).clone()  # (B, K, n_rep * tq)
            l = torch.ones_like(m)
        acc = torch.zeros(B, K, n_rep * tq, Ev, dtype=cd, device=q.device)  # running sum of exp(s - m) v
        for j0 in range(0, S, block_k):
            j1 = min(j0 + block_k, S)
            kind = tiles.kind(i0, i1, j0, j1)
            if kind == "skip":
                continue  # hidden by the causal mask (or before the window): never computed
            k_j = k[:, :, j0:j1].to(cd)  # (B, K, tk, E)
            s, _ = _tile_scores(q_i, k_j, mask, kind, (i0, i1, j0, j1), scale, tiles, softcap)
            m_new = torch.maximum(m, s.amax(dim=-1))
            if rescale_threshold > 0:  # keep a stale max that is close enough: its weights stay <= 2**threshold
                m_new = torch.where(_rises_within(m, m_new, rescale_threshold), m, m_new)
            shift = torch.where(m_new == _NEG_INF, torch.zeros_like(m_new), m_new)
            p = torch.exp(s - shift[..., None])  # (B, K, n_rep * tq, tk), unnormalised
            alpha = torch.exp(m - shift)  # rescales what was summed relative to the old max
            l = alpha * l + p.sum(dim=-1)
            acc = alpha[..., None] * acc + p @ v[:, :, j0:j1].to(cd)  # (B, K, n_rep * tq, Ev)
            m = m_new
        shift = torch.where(m == _NEG_INF, torch.zeros_like(m), m)
        total = torch.where(l > 0, l, torch.ones_like(l))  # divided once, at the end (FlashAttention-2)
        out[:, :, :, i0:i1] = (acc / total[..., None]).view(B, K, n_rep, tq, Ev).to(q.dtype)
        lse[:, :, :, i0:i1] = (shift + torch.log(l)).view(B, K, n_rep, tq)  # log(0) = -inf: sees nothing
    return out.view(B, H, T, Ev), lse.view(B, H, T)


# --------------------------------------------------------------------------- backward (FlashAttention-2, algorithm 2)


def _sum_to(x: Tensor, shape: torch.Size) -> Tensor:
    """Sum ``x`` over the dims it was broadcast along, back to ``shape`` (same number of dims)."""
    dims = [d for d, (a, b) in enumerate(zip(x.shape, shape, strict=True)) if b == 1 and a != 1]
    return x.sum(dim=dims, keepdim=True) if dims else x


def _backward(
    q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None, causal: bool, scale: float, block_q: int, block_k: int,
    out: Tensor, lse: Tensor, d_out: Tensor, d_lse: Tensor | None, mask_grad: bool, window: int | None = None,
    softcap: float | None = None, sinks: Tensor | None = None,
) -> tuple[Tensor, Tensor, Tensor, Tensor | None, Tensor | None]:
    """Gradients of q, k, v (and of a float mask and the sinks), each tile's weights recomputed from the lse.

    With ``P = exp(S - lse)`` recomputed per tile, ``dV = P^T dO``, ``dP = dO V^T`` and
    ``dS = P * (dP - D)``, where ``D = rowsum(dO * O)`` equals ``rowsum(P * dP)``; ``dQ = scale dS K`` and
    ``dK = scale dS^T Q``. A gradient reaching the log-sum-exp adds ``P * d_lse`` to ``dS``. A cap multiplies
    ``dS`` by its derivative ``1 - tanh^2`` (the mask's gradient is taken after it). A sink's value is zero,
    so its ``dP`` is zero and its gradient is ``-sum P_sink * D`` with ``P_sink = exp(sink - lse)``.
    """
    B, H, T, E = q.shape
    K, S, Ev = k.shape[1], k.shape[2], v.shape[-1]
    n_rep = H // K
    cd = _compute_dtype(q.dtype)
    D = (d_out.to(cd) * out.to(cd)).sum(dim=-1)  # (B, H, T)
    if d_lse is not None:
        D = D - d_lse.to(cd)  # dS = P * (dP - D + d_lse)
    lse = torch.where(lse == _NEG_INF, torch.zeros_like(lse), lse)  # a row that sees nothing: P = exp(-inf) = 0
    d_sinks = None
    if sinks is not None:  # lse includes the sink: -inf only for a -inf sink over no key, whose P_sink is then 0
        d_sinks = -(torch.exp(sinks.to(cd).view(1, H, 1) - lse) * D).sum(dim=(0, 2))  # (H,)
    qg = q.view(B, K, n_rep, T, E)
    dog = d_out.reshape(B, K, n_rep, T, Ev)
    Dg, lseg = D.view(B, K, n_rep, T), lse.view(B, K, n_rep, T)
    dq = torch.zeros(B, K, n_rep, T, E, dtype=cd, device=q.device)
    dk = torch.zeros(B, K, S, E, dtype=cd, device=q.device)
    dv = torch.zeros(B, K, S, Ev, dtype=cd, device=q.device)
    d_mask = torch.zeros(mask.shape, dtype=cd, device=q.device) if mask is not None and mask_grad else None
    tiles = CausalTiles(T, S, _rule(causal, window), q.device)
    for j0 in range(0, S, block_k):  # outer loop over key blocks: dK_j and dV_j stay local
        j1 = min(j0 + block_k, S)
        k_j, v_j = k[:, :, j0:j1].to(cd), v[:, :, j0:j1].to(cd)  # (B, K, tk, E), (B, K, tk, Ev)
        for i0 in range(0, T, block_q):
            i1 = min(i0 + block_q, T)
            tq, tk = i1 - i0, j1 - j0
            kind = tiles.kind(i0, i1, j0, j1)
            if kind == "skip":
                continue
            q_i = qg[:, :, :, i0:i1].to(cd).reshape(B, K, n_rep * tq, E)
            do_i = dog[:, :, :, i0:i1].to(cd).reshape(B, K, n_rep * tq, Ev)
            s, tanh = _tile_scores(q_i, k_j, mask, kind, (i0, i1, j0, j1), scale, tiles, softcap)
            p = torch.exp(s - lseg[:, :, :, i0:i1].reshape(B, K, n_rep * tq)[..., None])  # the weights, again
            dv[:, :, j0:j1] += p.transpose(-2, -1) @ do_i  # sums over the n_rep heads of the group too
            dp = do_i @ v_j.transpose(-2, -1)  # (B, K, n_rep * tq, tk)
            ds = p * (dp - Dg[:, :, :, i0:i1].reshape(B, K, n_rep * tq)[..., None])  # d(masked scores)
            ds_raw = ds if tanh is None else ds * (1 - tanh * tanh)  # through the cap: d(scaled scores)
            dq[:, :, :, i0:i1] += (ds_raw @ k_j).view(B, K, n_rep, tq, E) * scale
            dk[:, :, j0:j1] += (ds_raw.transpose(-2, -1) @ q_i) * scale
            if d_mask is not None:
                ds4 = ds.view(B, H, tq, tk)
                tile = _mask_tile(d_mask, i0, i1, j0, j1)
                tile += _sum_to(ds4, tile.shape)
    return (
        dq.view(B, H, T, E).to(q.dtype),
        dk.to(k.dtype),
        dv.to(v.dtype),
        None if d_mask is None else d_mask.to(mask.dtype),  # type: ignore[union-attr]
        None if d_sinks is None or sinks is None else d_sinks.to(sinks.dtype),
    )


class TiledAttention(torch.autograd.Function):
    """Tiled attention with FlashAttention-2's backward: nothing of size ``T x S`` is saved or built.

    ``TiledAttention.apply(q, k, v, mask, causal, scale, block_q, block_k, window, softcap, sinks,
    rescale_threshold) -> (output, lse)``; saves q, k, v, the mask, the sinks, the output and the log-sum-exp
    (``O(T)`` per head) for the backward pass.
    """

    @staticmethod
    def forward(
        ctx: Any, q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None, causal: bool, scale: float,
        block_q: int, block_k: int, window: int | None = None, softcap: float | None = None,
        sinks: Tensor | None = None, rescale_threshold: float = 0.0,
    ) -> tuple[Tensor, Tensor]:
        args = (q, k, v, mask, causal, scale, block_q, block_k, window, softcap, sinks, rescale_threshold)
        if autocast_on(q.device.type):  # the tiles keep the dtype chosen here, not autocast's
            with torch.autocast(q.device.type, enabled=False):
                out, lse = _forward(*args)
        else:
            out, lse = _forward(*args)
        ctx.save_for_backward(q, k, v, mask, sinks, out, lse)
        ctx.config = (causal, scale, block_q, block_k, window, softcap)
        ctx.mask_grad = mask is not None and mask.requires_grad
        return out, lse

    @staticmethod
    def backward(ctx: Any, d_out: Tensor, d_lse: Tensor | None) -> tuple[Tensor | None, ...]:
        q, k, v, mask, sinks, out, lse = ctx.saved_tensors
        causal, scale, block_q, block_k, window, softcap = ctx.config
        args = (q, k, v, mask, causal, scale, block_q, block_k, out, lse, d_out, d_lse, ctx.mask_grad, window,
                softcap, sinks)
        if autocast_on(q.device.type):
            with torch.autocast(q.device.type, enabled=False):
                dq, dk, dv, d_mask, d_sinks = _backward(*args)
        else:
            dq, dk, dv, d_mask, d_sinks = _backward(*args)
        return dq, dk, dv, d_mask, None, None, None, None, None, None, d_sinks, None


# --------------------------------------------------------------------------- entry points


def tiled_attention_function(
    q: Tensor, k: Tensor, v: Tensor, mask: PreparedMask, *, scale: float, dropout_p: float,
    block_q: int = BLOCK_Q, block_k: int = BLOCK_K, softcap: float | None = None, sinks: Tensor | None = None,
    rescale_threshold: float = 0.0,
) -> AttentionResult:
    """The ``"tiled"`` implementation of :func:`lessons_src.functional.attention` (inputs already checked).

    Returns the output and the log-sum-exp (``AttentionResult.lse``, the sink included); no weights (they
    are never built).

    Raises:
        ValueError: if ``dropout_p > 0`` (dropout inside the tiles is not implemented here) or a block
            size is not a positive int.
    """
    block_q, block_k = size("block_q", block_q, hint=_PER_BLOCK), size("block_k", block_k, hint=_PER_BLOCK)
    if dropout_p > 0.0:
        raise ValueError(
            f"the 'tiled' implementation does not implement dropout; got dropout_p={dropout_p}. "
            "Use 'sdpa' or 'eager' for dropout, or dropout_p=0.0 (a module in eval mode)"
        )
    out, lse = TiledAttention.apply(  # type: ignore[no-untyped-call]
        q, k, v, mask.mask, mask.causal, scale, block_q, block_k, mask.window, softcap, sinks, rescale_threshold
    )
    return AttentionResult(out, None, lse)


def tiled_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    *,
    attn_mask: Tensor | None = None,
    is_causal: bool = False,
    scale: float | None = None,
    block_q: int = BLOCK_Q,
    block_k: int = BLOCK_K,
    rescale_threshold: float = 0.0,
) -> AttentionResult:
    """Attention one ``(block_q, block_k)`` tile at a time (FlashAttention-2), with the log-sum-exp.

    Same inputs and answer as ``attention(..., implementation="tiled")``, with the block sizes chosen.

    Args:
        q: queries.
        k: keys.
        v: values.
        attn_mask: bool (``True`` = may attend) or float (added) mask broadcastable to ``(B, H, T, S)``.
        is_causal: also hide future keys, bottom-right aligned; tiles it hides entirely are skipped.
        scale: score multiplier, default ``1 / sqrt(E)``.
        block_q: queries per block (the last block may be shorter).
        block_k: keys per block (the last block may be shorter).
        rescale_threshold: FlashAttention-4's conditional rescaling: a row's running maximum is replaced only
            when a block raises it by more than this many powers of two (0: at every rise, as FlashAttention-2).
            The answer is the same; :func:`count_rescales` counts what it skips.

    Returns:
        :class:`lessons_src.functional.AttentionResult` ``(output, None, lse)``: ``lse[b, h, t]`` is the
        log-sum-exp of query ``t``'s scaled, masked scores (``-inf`` for a query that sees nothing;
        float32 for half-precision inputs).

    Shapes:
        q ``(B, H, T, E)``, k ``(B, K, S, E)``, v ``(B, K, S, Ev)`` with ``H`` a multiple of ``K``;
        output ``(B, H, T, Ev)``; lse ``(B, H, T)``.

    Raises:
        TypeError, ValueError: on a block size that is not a positive int, a ``rescale_threshold`` that is not
            a number in ``[0, 64]``, and as :func:`attention`.

    Example:
        >>> q, kv = torch.randn(1, 4, 5, 8), torch.randn(1, 2, 7, 8)
        >>> out, _, lse = tiled_attention(q, kv, kv, is_causal=True, block_q=2, block_k=3)
        >>> out.shape, lse.shape
        (torch.Size([1, 4, 5, 8]), torch.Size([1, 4, 5]))
    """
    block_q, block_k = size("block_q", block_q, hint=_PER_BLOCK), size("block_k", block_k, hint=_PER_BLOCK)
    check_qkv(q, k, v)
    B, H, T, E = q.shape
    prepared = prepare_mask(attn_mask, is_causal=is_causal, shape=(B, H, T, k.shape[2]), dtype=q.dtype,
                            device=q.device)  # a sliding_window rule: its window's tiles skipped too
    scale = 1.0 / math.sqrt(E) if scale is None else float(scale)
    if isinstance(rescale_threshold, bool) or not isinstance(rescale_threshold, int | float) or not (
        0 <= rescale_threshold <= 64
    ):
        raise ValueError(
            f"rescale_threshold must be a number of powers of two in [0, 64] (weights up to 2**threshold must fit the "
            f"accumulator; FlashAttention-4 uses 8); got {rescale_threshold!r}"
        )
    return tiled_attention_function(q, k, v, prepared, scale=scale, dropout_p=0.0, block_q=block_q, block_k=block_k,
                                    rescale_threshold=float(rescale_threshold))


register_attention("tiled", tiled_attention_function, Supports(softcap=True, sinks=True, lse=True))
