"""Ring attention: the sequence split over ranks, the key/value blocks passed round, merged by the online softmax.

Every rank keeps its ``T / P`` queries; the key/value blocks travel around the ring of ranks, one hop per
step, and each rank merges every block's attention state ``(output, lse)`` into its queries' running state
(:func:`lessons_src.score_mods.merge_states`: the online softmax of :mod:`lessons_src.flash`, a block at a time),
so no rank ever holds more than two blocks of keys, and none ever holds the whole sequence. After ``P`` steps the
output and its log-sum-exp are exact.

With a causal mask, the contiguous split gives the last rank ``P`` blocks of work and the first rank one;
the zig-zag split (:func:`sequence_chunks`: rank ``r`` holds chunks ``r`` and ``2P - 1 - r`` of ``2P``)
evens it out. The backward pass sends the blocks round once more, each with its gradient, and
recomputes each tile's weights from the saved log-sum-exp (FlashAttention-2's backward).

The ranks talk through a :class:`lessons_src.parallel.Collectives` (only its ``rank``, ``world_size``,
``send_recv`` and ``all_gather_ints`` are used), so this file needs only ``masks.py`` and ``score_mods.py``.

References:
    Liu, Zaharia and Abbeel, "Ring Attention with Blockwise Transformers for Near-Infinite Context",
    2023 (arXiv:2310.01889).
    Brandon et al., "Striped Attention: Faster Ring Attention for Causal Transformers", 2023
    (arXiv:2311.09431), on the causal load imbalance; the zig-zag split is the one of the
    ring-flash-attention and Llama 3 context-parallel implementations.
    Dao, "FlashAttention-2", 2023 (arXiv:2307.08691), algorithm 2 (the backward pass).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

import torch
from torch import Tensor

from ._checks import check_qkv, integer, size
from .masks import CausalTiles
from .masks import causal as causal_rule
from .score_mods import merge_states

if TYPE_CHECKING:
    from collections.abc import Iterator, Sequence

    from .parallel import Collectives

__all__ = [
    "RingResult",
    "RingStep",
    "ring_attention",
    "sequence_chunks",
    "shard_sequence",
    "unshard_sequence",
]

Order = Literal["contiguous", "zigzag"]
_NEG_INF = float("-inf")


def _check_inputs(q: Tensor, k: Tensor, v: Tensor, is_causal: object) -> None:
    """The checks of :func:`lessons_src.functional.attention` (``tests/core/test_ring.py`` runs one table of bad inputs
    through both), then the ring's own rule: queries and keys cover the same positions."""
    check_qkv(q, k, v)
    if not isinstance(is_causal, bool):
        raise TypeError(f"is_causal must be True or False; got {is_causal!r}")
    if q.shape[2] != k.shape[2]:
        raise ValueError(
            "ring attention needs queries and keys over the same positions (this rank's T/P of each); "
            f"got q {tuple(q.shape)}, k {tuple(k.shape)}"
        )


def _same_blocks_on_every_rank(comm: Collectives, k: Tensor, v: Tensor) -> None:
    """Raise a ValueError on every rank unless all hold key/value blocks of one shape and element size.

    The blocks are sent round the ring; a block of another size on one rank would make gloo abort the
    process (no Python exception), so the ranks compare their shapes first, with one small all-gather.
    """
    shapes = comm.all_gather_ints([*k.shape, v.shape[-1], k.element_size()], device=k.device)
    if any(s != shapes[0] for s in shapes):
        held = ", ".join(f"rank {r} holds {s[2]} positions" for r, s in enumerate(shapes))
        raise ValueError(
            f"the ranks' key/value blocks differ: {held}; (B, K, T/P, E, Ev, bytes per element) by rank: "
            f"{[tuple(s) for s in shapes]}. Every rank must hold T/P positions of one shape (shard_sequence)"
        )


def _repeat_kv(x: Tensor, n_rep: int) -> Tensor:
    """Each KV head repeated for the ``n_rep`` query heads it serves: ``(B, K, S, E) -> (B, K * n_rep, S, E)``."""
    return x if n_rep == 1 else x.repeat_interleave(n_rep, dim=1)


# --------------------------------------------------------------------------- splitting a sequence over ranks


def sequence_chunks(T: int, world_size: int, rank: int, order: Order = "contiguous") -> list[tuple[int, int]]:
    """The ``[start, end)`` position ranges rank ``rank`` holds when ``T`` positions are split over the ranks.

    * ``"contiguous"``: ``P`` equal blocks, rank ``r`` holds block ``r``;
    * ``"zigzag"``: ``2P`` equal chunks, rank ``r`` holds chunks ``r`` and ``2P - 1 - r`` (an early and a
      late one, so with a causal mask every rank has the same work).

    Example:
        >>> sequence_chunks(8, 2, 0), sequence_chunks(8, 2, 0, "zigzag"), sequence_chunks(8, 2, 1, "zigzag")
        ([(0, 4)], [(0, 2), (6, 8)], [(2, 4), (4, 6)])
    """
    T, P = size("T", T, 1), size("world_size", world_size, 1)
    r = size("rank", rank, 0)
    if r >= P:
        raise ValueError(f"rank must be in 0..{P - 1}; got rank={r}")
    if order == "contiguous":
        if T % P:
            raise ValueError(f"T={T} positions do not split into {P} equal blocks; use a multiple of {P}")
        n = T // P
        return [(r * n, (r + 1) * n)]
    if order == "zigzag":
        if T % (2 * P):
            raise ValueError(
                f"T={T} positions do not split into {2 * P} equal zig-zag chunks; use a multiple of {2 * P}"
            )
        n = T // (2 * P)
        return [(r * n, (r + 1) * n), ((2 * P - 1 - r) * n, (2 * P - r) * n)]
    raise ValueError(f"order must be 'contiguous' or 'zigzag'; got {order!r}")


def _dim(dim: object, shape: torch.Size, name: str) -> int:
    """``dim`` as an int that indexes ``shape`` (negative counts from the end)."""
    d, n = integer("dim", dim), len(shape)
    if not -n <= d < n:
        raise ValueError(f"dim={d} is out of range for {name} of shape {tuple(shape)}: use {-n}..{n - 1}")
    return d


def shard_sequence(x: Tensor, world_size: int, rank: int, *, dim: int, order: Order = "contiguous") -> Tensor:
    """Rank ``rank``'s positions of a full sequence ``x`` (along ``dim``), in :func:`sequence_chunks` order."""
    dim = _dim(dim, x.shape, "x")
    chunks = sequence_chunks(x.shape[dim], world_size, rank, order)
    return torch.cat([x.narrow(dim, a, b - a) for a, b in chunks], dim=dim)


def unshard_sequence(shards: Sequence[Tensor], *, dim: int, order: Order = "contiguous") -> Tensor:
    """Put the ranks' shards (in rank order) back into sequence order: the inverse of :func:`shard_sequence`."""
    if not shards:
        raise ValueError("no shards: unshard_sequence needs every rank's shard, in rank order (one at least)")
    dim = _dim(dim, shards[0].shape, "the shards")
    P = len(shards)
    T = sum(s.shape[dim] for s in shards)
    pieces: list[tuple[int, Tensor]] = []
    for r, shard in enumerate(shards):
        offset = 0
        for a, b in sequence_chunks(T, P, r, order):
            pieces.append((a, shard.narrow(dim, offset, b - a)))
            offset += b - a
    return torch.cat([t for _, t in sorted(pieces, key=lambda p: p[0])], dim=dim)


# --------------------------------------------------------------------------- ring attention


@dataclass(frozen=True)
class RingStep:
    """What one rank did at one step of :func:`ring_attention`.

    Attributes:
        step: ``0 .. P - 1``.
        source: the rank whose key/value block was used (``(rank - step) mod P``).
        work: query-key scores computed at this step (0 when the causal mask hid the whole block).
        running_max: each local query's running max after this step ``(B, H, T / P)``.
        running_sum: each local query's running sum ``sum exp(s - running_max)`` after this step.
    """

    step: int
    source: int
    work: int
    running_max: Tensor
    running_sum: Tensor


class RingResult:
    """The output of :func:`ring_attention`: ``output (B, H, T/P, Ev)``, ``lse (B, H, T/P)``, ``work`` and ``steps``."""

    def __init__(self, output: Tensor, lse: Tensor, work: int, steps: list[RingStep]) -> None:
        self.output, self.lse, self.work, self.steps = output, lse, work, steps


def _tiles(
    mine: list[tuple[int, int]], theirs: list[tuple[int, int]], tiles: CausalTiles
) -> Iterator[tuple[slice, slice, tuple[int, int, int, int], str]]:
    """(my rows, their columns, positions ``(qa, qb, ka, kb)``, kind) of each chunk pair the causal mask leaves."""
    q_off = 0
    for qa, qb in mine:
        k_off = 0
        for ka, kb in theirs:
            kind = tiles.kind(qa, qb, ka, kb)
            if kind != "skip":
                yield slice(q_off, q_off + qb - qa), slice(k_off, k_off + kb - ka), (qa, qb, ka, kb), kind
            k_off += kb - ka
        q_off += qb - qa


def _tile_scores(q: Tensor, k: Tensor, span: tuple[int, int, int, int], kind: str, scale: float,
                 tiles: CausalTiles) -> Tensor:
    """Scaled scores of one chunk pair ``(B, H, tq, tk)``, causal-masked when the pair straddles the diagonal."""
    s = q @ k.transpose(-2, -1) * scale
    if kind == "partial":
        s = s.masked_fill(~tiles.visible(*span), _NEG_INF)  # the causal rule of masks.py, within the pair
    return s


def _ring_forward(
    q: Tensor, k: Tensor, v: Tensor, comm: Collectives, causal: bool, order: Order, scale: float, keep_steps: bool
) -> RingResult:
    B, H, Tl, E = q.shape
    K = k.shape[1]
    P, rank = comm.world_size, comm.rank
    T = Tl * P
    cd = torch.float32 if q.dtype in (torch.float16, torch.bfloat16) else q.dtype
    mine = sequence_chunks(T, P, rank, order)
    tiles = CausalTiles(T, T, causal_rule() if causal else None, q.device)  # which pairs the mask hides
    out = torch.zeros(B, H, Tl, v.shape[-1], dtype=cd, device=q.device)  # the empty state: output 0 ...
    lse = torch.full((B, H, Tl), _NEG_INF, dtype=cd, device=q.device)  # ... and log-sum-exp -inf
    m = torch.full((B, H, Tl), _NEG_INF, dtype=cd, device=q.device)  # running max (reported by keep_steps)
    kv = torch.cat([k, v], dim=-1)  # one block to pass on: (B, K, T/P, E + Ev)
    qc = q.to(cd)
    work, steps = 0, []
    for step in range(P):
        source = (rank - step) % P
        k_blk = _repeat_kv(kv[..., :E].to(cd), H // K)  # (B, H, T/P, E): each KV head for its query heads
        v_blk = _repeat_kv(kv[..., E:].to(cd), H // K)  # (B, H, T/P, Ev)
        step_work = 0
        for rows, cols, span, kind in _tiles(mine, sequence_chunks(T, P, source, order), tiles):
            s = _tile_scores(qc[:, :, rows], k_blk[:, :, cols], span, kind, scale, tiles)  # (B, H, tq, tk)
            lse_t = torch.logsumexp(s, dim=-1)  # (B, H, tq): the tile's state ...
            shift = torch.where(torch.isneginf(lse_t), torch.zeros_like(lse_t), lse_t)
            o_t = torch.exp(s - shift[..., None]) @ v_blk[:, :, cols]  # ... its output (B, H, tq, Ev)
            out[:, :, rows], lse[:, :, rows] = merge_states([(out[:, :, rows], lse[:, :, rows]), (o_t, lse_t)])
            m[:, :, rows] = torch.maximum(m[:, :, rows], s.amax(dim=-1))
            step_work += (span[1] - span[0]) * (span[3] - span[2])
        work += step_work
        if keep_steps:  # the running sum of exp(s - m) is exp(lse - m)
            shift = torch.where(m == _NEG_INF, torch.zeros_like(m), m)
            steps.append(RingStep(step, source, step_work, m.clone(), torch.exp(lse - shift)))
        if step < P - 1:  # pass the block on: to rank + 1, from rank - 1
            kv = comm.send_recv(kv, to=(rank + 1) % P, frm=(rank - 1) % P)
    return RingResult(out.to(q.dtype), lse, work, steps)


def _ring_backward(
    q: Tensor, k: Tensor, v: Tensor, out: Tensor, lse: Tensor, d_out: Tensor, d_lse: Tensor | None,
    comm: Collectives, causal: bool, order: Order, scale: float,
) -> tuple[Tensor, Tensor, Tensor]:
    """Gradients of this rank's q, k, v: the key/value blocks go round the ring again, with their gradients.

    As in FlashAttention-2's backward, each tile's weights are recomputed from the saved log-sum-exp,
    ``P = exp(S - lse)``; ``dV = P^T dO``, ``dS = P * (dO V^T - rowsum(dO * O))``, ``dQ = scale dS K``,
    ``dK = scale dS^T Q``. The gradient of a key/value block travels with it, each rank adding its
    queries' share, and after the last step one more hop brings it home.
    """
    B, H, Tl, E = q.shape
    K, Ev = k.shape[1], v.shape[-1]
    n_rep = H // K
    P, rank = comm.world_size, comm.rank
    T = Tl * P
    cd = torch.float32 if q.dtype in (torch.float16, torch.bfloat16) else q.dtype
    qc, do = q.to(cd), d_out.to(cd)
    D = (do * out.to(cd)).sum(dim=-1)  # (B, H, T/P): rowsum(dO * O) = rowsum(P * dP)
    if d_lse is not None:
        D = D - d_lse.to(cd)
    lse = torch.where(lse == _NEG_INF, torch.zeros_like(lse), lse).to(cd)
    dq = torch.zeros(B, H, Tl, E, dtype=cd, device=q.device)
    kv = torch.cat([k, v], dim=-1)
    dkv = torch.zeros(B, K, Tl, E + Ev, dtype=cd, device=q.device)  # the gradient travelling with the block
    mine = sequence_chunks(T, P, rank, order)
    tiles = CausalTiles(T, T, causal_rule() if causal else None, q.device)  # which pairs the mask hides
    for step in range(P):
        source = (rank - step) % P
        k_blk, v_blk = _repeat_kv(kv[..., :E].to(cd), n_rep), _repeat_kv(kv[..., E:].to(cd), n_rep)
        for rows, cols, span, kind in _tiles(mine, sequence_chunks(T, P, source, order), tiles):
            s = _tile_scores(qc[:, :, rows], k_blk[:, :, cols], span, kind, scale, tiles)
            p = torch.exp(s - lse[:, :, rows, None])  # (B, H, tq, tk): the weights, recomputed
            dv = p.transpose(-2, -1) @ do[:, :, rows]  # (B, H, tk, Ev)
            ds = p * (do[:, :, rows] @ v_blk[:, :, cols].transpose(-2, -1) - D[:, :, rows, None])
            dq[:, :, rows] += ds @ k_blk[:, :, cols] * scale
            dk = ds.transpose(-2, -1) @ qc[:, :, rows] * scale  # (B, H, tk, E)
            tk = dk.shape[2]
            dkv[:, :, cols, :E] += dk.view(B, K, n_rep, tk, E).sum(2)  # a KV head sums over its query heads
            dkv[:, :, cols, E:] += dv.view(B, K, n_rep, tk, Ev).sum(2)
        if step < P - 1:
            both = comm.send_recv(torch.cat([kv.to(cd), dkv], dim=-1), to=(rank + 1) % P, frm=(rank - 1) % P)
            kv, dkv = both[..., : E + Ev].to(k.dtype), both[..., E + Ev :]
    if P > 1:  # the block here came from rank + 1: its gradient goes back there, one more hop
        dkv = comm.send_recv(dkv, to=(rank + 1) % P, frm=(rank - 1) % P)
    return dq.to(q.dtype), dkv[..., :E].to(k.dtype), dkv[..., E:].to(v.dtype)


class _RingAttention(torch.autograd.Function):
    @staticmethod
    def forward(
        ctx: Any, q: Tensor, k: Tensor, v: Tensor, comm: Collectives, causal: bool, order: Order, scale: float
    ) -> tuple[Tensor, Tensor]:
        r = _ring_forward(q, k, v, comm, causal, order, scale, keep_steps=False)
        ctx.save_for_backward(q, k, v, r.output, r.lse)
        ctx.config = (comm, causal, order, scale)
        return r.output, r.lse

    @staticmethod
    def backward(ctx: Any, d_out: Tensor, d_lse: Tensor | None) -> tuple[Tensor | None, ...]:
        q, k, v, out, lse = ctx.saved_tensors
        comm, causal, order, scale = ctx.config
        dq, dk, dv = _ring_backward(q, k, v, out, lse, d_out, d_lse, comm, causal, order, scale)
        return dq, dk, dv, None, None, None, None


def ring_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    comm: Collectives,
    *,
    is_causal: bool = False,
    order: Order = "contiguous",
    scale: float | None = None,
    keep_steps: bool = False,
) -> RingResult:
    """Attention over a sequence split across ranks, the key/value blocks passed around the ring.

    Rank ``r`` holds the positions :func:`sequence_chunks` gives it, for queries, keys and values alike.
    At step ``s`` it holds the key/value block of rank ``(r - s) mod P``; it folds that block into its
    queries' running max ``m``, running sum ``l = sum exp(s - m)`` and running ``sum exp(s - m) v``
    (rescaling by ``exp(m_old - m_new)`` when the max grows), then passes the block on to rank
    ``r + 1`` and receives the next one from rank ``r - 1``. After ``P`` steps each query has seen every
    key: the output is the running ``sum exp(s - m) v / l`` and the log-sum-exp is ``m + log l``.

    With ``is_causal``, a chunk of keys entirely after a chunk of queries is skipped (no work), one
    entirely before is computed without a mask, and the diagonal one with the causal mask.

    The backward pass (when an input requires a gradient) sends the blocks round the ring once more,
    each with its gradient, which every rank adds its queries' share to; one last hop takes the
    gradients home. It recomputes each tile's weights from the saved log-sum-exp, as FlashAttention-2's
    backward does.

    Args:
        q: this rank's queries ``(B, H, T/P, E)``.
        k: this rank's keys ``(B, K, T/P, E)``, ``K`` dividing ``H``.
        v: this rank's values ``(B, K, T/P, Ev)``.
        comm: the ranks' :class:`Collectives`.
        is_causal: causal over the whole sequence (queries and keys are the same positions).
        order: how the sequence was split (``"contiguous"`` or ``"zigzag"``, see :func:`sequence_chunks`).
        scale: score multiplier, default ``1 / sqrt(E)``.
        keep_steps: also return each step's running max and sum (:class:`RingStep`); forward only.

    Returns:
        A :class:`RingResult`: the output, the log-sum-exp, the work (query-key scores computed on this
        rank in the forward pass) and, with ``keep_steps``, the steps.

    Raises:
        TypeError: if ``q``, ``k`` or ``v`` is not a tensor, or ``is_causal`` not a bool.
        ValueError: as :func:`lessons_src.functional.attention` on mismatched shapes, dtypes or devices; if
            ``q`` and ``k`` hold different numbers of positions, the ranks cannot split the sequence evenly,
            or ``keep_steps`` is asked with inputs that require a gradient; on every rank, if the ranks'
            blocks differ in shape (checked with one small all-gather before any block is sent).
    """
    _check_inputs(q, k, v, is_causal)
    sequence_chunks(q.shape[2] * comm.world_size, comm.world_size, comm.rank, order)  # a split that works
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else float(scale)
    needs_grad = torch.is_grad_enabled() and any(t.requires_grad for t in (q, k, v))
    if needs_grad and keep_steps:
        raise ValueError("keep_steps records the forward pass only; run it under torch.no_grad()")
    _same_blocks_on_every_rank(comm, k, v)
    if not needs_grad:
        return _ring_forward(q, k, v, comm, is_causal, order, scale, keep_steps)
    P, T = comm.world_size, q.shape[2] * comm.world_size
    mine, tiles = sequence_chunks(T, P, comm.rank, order), CausalTiles(T, T, causal_rule() if is_causal else None)
    work = sum((b - a) * (d - c) for src in range(P)
               for _, _, (a, b, c, d), _ in _tiles(mine, sequence_chunks(T, P, src, order), tiles))
    out, lse = _RingAttention.apply(q, k, v, comm, is_causal, order, scale)  # type: ignore[no-untyped-call]
    return RingResult(out, lse, work, [])
