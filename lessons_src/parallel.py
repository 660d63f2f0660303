"""Attention across processes: tensor parallelism by heads, Ulysses sequence parallelism, ring attention.

Heads are independent until ``W_O``: head ``h`` reads only its own rows of ``W_Q``, ``W_K``, ``W_V`` and
writes only its own ``E`` columns of ``W_O``'s input. So ``P`` processes ("ranks") can each hold whole
heads and compute them without talking to each other; the one place they meet is ``W_O``, whose output
is a *sum* over heads, which one all-reduce completes. Three ways to use that, each over
``torch.distributed`` (gloo on CPU here; NCCL on GPUs takes the same calls):

* **Tensor parallelism** (Megatron-LM), :class:`TensorParallelAttention`: every rank sees the whole
  sequence and holds ``H / P`` query heads: the rows of ``W_Q``, ``W_K``, ``W_V`` for its heads
  (column-parallel, in Megatron's terms) and the matching columns of ``W_O`` (row-parallel). Forward:
  one all-reduce of ``(B, T, D)``; backward: one more, for the input's gradient. With grouped-query
  attention a rank holds the KV heads its query heads read; with more ranks than KV heads, each KV head
  is *replicated* on ``P / K`` ranks, as serving engines do (:func:`tp_plan`).
* **Ulysses** (DeepSpeed-Ulysses), :func:`ulysses_attention`: every rank holds ``T / P`` positions and
  all the weights; an all-to-all turns "my positions, every head" into "every position, my heads",
  attention runs per head on the whole sequence, and a second all-to-all turns it back.
* **Ring attention** (context parallelism), :func:`ring_attention`: every rank keeps its ``T / P``
  queries; the key/value blocks travel around the ring, one hop per step, and each rank folds every
  block into its queries' running max and sum (the online softmax of :mod:`lessons_src.flash`), so no
  rank ever holds more than two blocks of keys. With a causal mask the contiguous split gives the last
  rank ``P`` blocks of work and the first one; the zig-zag split (:func:`sequence_chunks`) evens it out.
  Its backward pass sends the blocks round once more, each with its gradient.

Multi-head latent attention splits by heads too, with its down-projections and latent cache replicated
on every rank; that split is ``lessons_src.lab.parallel_runs.shard_mla`` (kept out of this file, which
needs only ``attention.py``).

Every collective goes through one small :class:`Collectives` object, so a subclass can count the bytes
each call moves (``lessons_src.lab.launch.CountingCollectives`` does).

References:
    Shoeybi et al., "Megatron-LM: Training Multi-Billion Parameter Language Models Using Model
    Parallelism", 2019 (arXiv:1909.08053), section 3 (the f and g operators).
    Jacobs et al., "DeepSpeed Ulysses: System Optimizations for Enabling Training of Extreme Long
    Sequence Transformer Models", 2023 (arXiv:2309.14509).
    Liu, Zaharia and Abbeel, "Ring Attention with Blockwise Transformers for Near-Infinite Context",
    2023 (arXiv:2310.01889).
    Brandon et al., "Striped Attention: Faster Ring Attention for Causal Transformers", 2023
    (arXiv:2311.09431), on the causal load imbalance; the zig-zag split is the one of the
    ring-flash-attention and Llama 3 context-parallel implementations.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

import torch
import torch.distributed as dist
from torch import Tensor, nn

from .attention import MultiHeadAttention, attention, repeat_kv

if TYPE_CHECKING:
    from collections.abc import Iterator, Sequence

__all__ = [
    "Collectives",
    "RingResult",
    "RingStep",
    "TPPlan",
    "TensorParallelAttention",
    "ring_attention",
    "sequence_chunks",
    "shard_sequence",
    "tp_plan",
    "ulysses_attention",
    "unshard_sequence",
    "valid_tp_degrees",
]

Order = Literal["contiguous", "zigzag"]
_NEG_INF = float("-inf")


def _int(name: str, value: object, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int; got {value!r} of type {type(value).__name__}")
    if value < minimum:
        raise ValueError(f"{name} must be at least {minimum}; got {name}={value}")
    return value


# --------------------------------------------------------------------------- the collectives, in one place


class Collectives:
    """The collectives this file uses, over an initialised ``torch.distributed`` process group.

    Subclass it to watch them: every call goes through :meth:`all_reduce`, :meth:`all_to_all` or
    :meth:`send_recv`. Ranks are positions in ``group`` (the default group: all processes).

    Args:
        group: a process group, or ``None`` for the default one.

    Raises:
        ValueError: if ``torch.distributed`` is not initialised (call ``init_process_group`` first).
    """

    def __init__(self, group: Any = None) -> None:
        if not dist.is_available() or not dist.is_initialized():
            raise ValueError(
                "torch.distributed is not initialised: call torch.distributed.init_process_group(...) in each "
                "process first (lessons_src.lab.launch.launch does it for local processes)"
            )
        self.group = group

    @property
    def rank(self) -> int:
        """This process's position in the group, ``0 .. world_size - 1``."""
        return dist.get_rank(self.group)

    @property
    def world_size(self) -> int:
        """Processes in the group (the parallel degree ``P``)."""
        return dist.get_world_size(self.group)

    def _global(self, rank: int) -> int:
        return rank if self.group is None else dist.get_global_rank(self.group, rank)

    def all_reduce(self, t: Tensor) -> Tensor:
        """Sum ``t`` over all ranks, in place; every rank ends with the sum. Returns ``t``."""
        dist.all_reduce(t, op=dist.ReduceOp.SUM, group=self.group)
        return t

    def all_to_all(self, chunks: Sequence[Tensor]) -> list[Tensor]:
        """Send ``chunks[j]`` to rank ``j``; return what each rank sent here, in rank order.

        Every rank sends chunks of one shape, so each received chunk has the shape of the one sent.
        """
        if len(chunks) != self.world_size:
            raise ValueError(f"all_to_all needs one chunk per rank ({self.world_size}); got {len(chunks)}")
        inputs = [c.contiguous() for c in chunks]
        outputs = [torch.empty_like(c) for c in inputs]
        dist.all_to_all(outputs, inputs, group=self.group)
        return outputs

    def send_recv(self, t: Tensor, *, to: int, frm: int) -> Tensor:
        """Send ``t`` to rank ``to`` while receiving a tensor of the same shape from rank ``frm``; return it."""
        t = t.contiguous()
        received = torch.empty_like(t)
        sending = dist.isend(t, self._global(to), group=self.group)
        receiving = dist.irecv(received, self._global(frm), group=self.group)
        for work in (sending, receiving):
            if work is not None:  # None only for a rank outside the group
                work.wait()
        return received


class _CopyToParallel(torch.autograd.Function):
    """Megatron's ``f``: the identity forward; the backward all-reduces the gradient (every rank used ``x``)."""

    @staticmethod
    def forward(ctx: Any, x: Tensor, comm: Collectives) -> Tensor:
        ctx.comm = comm
        return x.view_as(x)

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> tuple[Tensor, None]:
        return ctx.comm.all_reduce(grad.contiguous().clone()), None


class _ReduceFromParallel(torch.autograd.Function):
    """Megatron's ``g``: all-reduce forward (sum the ranks' partial outputs); the backward is the identity."""

    @staticmethod
    def forward(ctx: Any, x: Tensor, comm: Collectives) -> Tensor:
        return comm.all_reduce(x.contiguous().clone())

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> tuple[Tensor, None]:
        return grad, None


class _AllToAll(torch.autograd.Function):
    """Split ``x`` along ``split_dim`` into one chunk per rank, exchange, concatenate along ``cat_dim``.

    Its backward is the same exchange with the two dims swapped.
    """

    @staticmethod
    def forward(ctx: Any, x: Tensor, comm: Collectives, split_dim: int, cat_dim: int) -> Tensor:
        ctx.comm, ctx.dims = comm, (split_dim, cat_dim)
        return torch.cat(comm.all_to_all(x.chunk(comm.world_size, dim=split_dim)), dim=cat_dim)

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> tuple[Tensor, None, None, None]:
        split_dim, cat_dim = ctx.dims
        comm = ctx.comm
        return torch.cat(comm.all_to_all(grad.chunk(comm.world_size, dim=cat_dim)), dim=split_dim), None, None, None


def _copy_to_parallel(x: Tensor, comm: Collectives) -> Tensor:
    out: Tensor = _CopyToParallel.apply(x, comm)  # type: ignore[no-untyped-call]
    return out


def _reduce_from_parallel(x: Tensor, comm: Collectives) -> Tensor:
    out: Tensor = _ReduceFromParallel.apply(x, comm)  # type: ignore[no-untyped-call]
    return out


def _all_to_all(x: Tensor, comm: Collectives, split_dim: int, cat_dim: int) -> Tensor:
    out: Tensor = _AllToAll.apply(x, comm, split_dim, cat_dim)  # type: ignore[no-untyped-call]
    return out


# --------------------------------------------------------------------------- tensor parallelism: the plan


@dataclass(frozen=True)
class TPPlan:
    """How ``degree`` ranks split ``num_heads`` query heads and ``num_kv_heads`` KV heads.

    Attributes:
        degree: ranks ``P``.
        query_heads_per_rank: ``H / P``.
        kv_heads_per_rank: ``K / P`` when ``P <= K``; 1 when ``P > K`` (the one KV head its queries read).
        kv_copies: ranks holding each KV head: 1 when ``P <= K``, ``P / K`` when the heads are replicated.
    """

    degree: int
    query_heads_per_rank: int
    kv_heads_per_rank: int
    kv_copies: int

    def query_heads(self, rank: int) -> range:
        """The query heads rank ``rank`` computes (whole heads, consecutive)."""
        n = self.query_heads_per_rank
        return range(rank * n, (rank + 1) * n)

    def kv_heads(self, rank: int) -> range:
        """The KV heads rank ``rank`` holds: those its query heads read."""
        if self.kv_copies > 1:
            return range(rank // self.kv_copies, rank // self.kv_copies + 1)
        n = self.kv_heads_per_rank
        return range(rank * n, (rank + 1) * n)


def valid_tp_degrees(num_heads: int, num_kv_heads: int) -> list[int]:
    """Degrees ``P`` that split the heads whole: ``P`` divides ``H``, and ``P`` divides ``K`` or ``K`` divides ``P``.

    Example:
        >>> valid_tp_degrees(32, 8)  # Llama 3 8B: 8 KV heads
        [1, 2, 4, 8, 16, 32]
        >>> valid_tp_degrees(12, 12)
        [1, 2, 3, 4, 6, 12]
    """
    H, K = _int("num_heads", num_heads, 1), _int("num_kv_heads", num_kv_heads, 1)
    if H % K:
        raise ValueError(f"num_heads={H} is not a multiple of num_kv_heads={K}")
    return [p for p in range(1, H + 1) if H % p == 0 and (K % p == 0 or p % K == 0)]


def tp_plan(num_heads: int, num_kv_heads: int, degree: int) -> TPPlan:
    """The split of the heads over ``degree`` ranks, or a ``ValueError`` listing the degrees that work.

    Example:
        >>> tp_plan(32, 8, 16)
        TPPlan(degree=16, query_heads_per_rank=2, kv_heads_per_rank=1, kv_copies=2)
    """
    P = _int("degree", degree, 1)
    valid = valid_tp_degrees(num_heads, num_kv_heads)
    if P not in valid:
        raise ValueError(
            f"tensor-parallel degree {P} does not split num_heads={num_heads} (num_kv_heads={num_kv_heads}) into "
            f"whole heads per rank; degrees that do: {', '.join(map(str, valid))}"
        )
    K = num_kv_heads
    return TPPlan(P, num_heads // P, max(1, K // P), max(1, P // K))


# --------------------------------------------------------------------------- tensor parallelism: the layer


class TensorParallelAttention(nn.Module):
    """One rank's share of a :class:`lessons_src.attention.MultiHeadAttention`: its whole heads.

    ``qkv_proj`` holds the rows of ``[W_Q; W_K; W_V]`` for this rank's query and KV heads
    (:attr:`qkv_rows` says which rows of the full matrix); ``out_proj`` holds the matching columns of
    ``W_O`` (:attr:`out_cols`). The output bias, if any, is added once, after the all-reduce.

    Args:
        d_model: model width ``D``.
        num_heads: query heads ``H`` of the whole layer.
        num_kv_heads: KV heads ``K`` of the whole layer (default ``H``).
        comm: the ranks' :class:`Collectives`; its ``world_size`` is the degree ``P``.
        bias: whether the projections have biases.

    Shapes:
        x: ``(B, T, D)``, the same on every rank; output ``(B, T, D)``, the same on every rank.

    Raises:
        ValueError: if the degree does not split the heads whole (the message lists the degrees that do).

    Example (in each of ``P`` processes, after ``init_process_group``)::

        full = MultiHeadAttention(64, 8, num_kv_heads=2)     # same seed on every rank
        tp = TensorParallelAttention.from_module(full, Collectives())
        y = tp(x, is_causal=True)                             # == full(x, is_causal=True)
    """

    def __init__(
        self, d_model: int, num_heads: int, *, num_kv_heads: int | None = None, comm: Collectives, bias: bool = False
    ) -> None:
        super().__init__()
        D, H = _int("d_model", d_model, 1), _int("num_heads", num_heads, 1)
        K = H if num_kv_heads is None else _int("num_kv_heads", num_kv_heads, 1)
        if D % H:
            raise ValueError(f"d_model={D} is not divisible by num_heads={H}")
        self.plan = tp_plan(H, K, comm.world_size)
        self.comm, self.rank = comm, comm.rank
        self.d_model, self.num_heads, self.num_kv_heads, self.head_dim = D, H, K, D // H
        E = self.head_dim
        heads, kv_heads = self.plan.query_heads(self.rank), self.plan.kv_heads(self.rank)
        self.local_heads, self.local_kv_heads = len(heads), len(kv_heads)
        self.n_rep = self.local_heads // self.local_kv_heads  # query heads per KV head on this rank
        rows = [h * E + e for h in heads for e in range(E)]  # W_Q rows of my heads
        rows += [D + k * E + e for k in kv_heads for e in range(E)]  # W_K rows
        rows += [D + K * E + k * E + e for k in kv_heads for e in range(E)]  # W_V rows
        self.qkv_rows = torch.tensor(rows)  # which rows of the full qkv_proj.weight this rank holds
        self.out_cols = torch.tensor([h * E + e for h in heads for e in range(E)])  # which columns of W_O
        self.qkv_proj = nn.Linear(D, len(rows), bias=bias)  # column-parallel: (Hl + 2 Kl) E outputs
        self.out_proj = nn.Linear(len(heads) * E, D, bias=False)  # row-parallel: a partial sum of W_O's output
        self.out_bias = nn.Parameter(torch.zeros(D)) if bias else None  # replicated, added after the sum

    @classmethod
    def from_module(cls, full: MultiHeadAttention, comm: Collectives) -> TensorParallelAttention:
        """This rank's shard of ``full``, its weights copied (so outputs and gradients match ``full``'s)."""
        bias = full.qkv_proj.bias is not None
        tp = cls(full.d_model, full.num_heads, num_kv_heads=full.num_kv_heads, comm=comm, bias=bias)
        tp.to(dtype=full.qkv_proj.weight.dtype, device=full.qkv_proj.weight.device)
        with torch.no_grad():
            tp.qkv_proj.weight.copy_(full.qkv_proj.weight[tp.qkv_rows])
            tp.out_proj.weight.copy_(full.out_proj.weight[:, tp.out_cols])
            if bias:
                assert full.qkv_proj.bias is not None and full.out_proj.bias is not None and tp.out_bias is not None
                tp.qkv_proj.bias.copy_(full.qkv_proj.bias[tp.qkv_rows])
                tp.out_bias.copy_(full.out_proj.bias)
        return tp

    def kv_cache_bytes_per_token(self, dtype: torch.dtype = torch.bfloat16) -> int:
        """Bytes one token adds to this rank's KV cache for this layer: ``local KV heads * 2E * element size``."""
        return self.local_kv_heads * 2 * self.head_dim * torch.empty((), dtype=dtype).element_size()

    def forward(
        self, x: Tensor, *, attn_mask: Tensor | None = None, is_causal: bool = False, implementation: str = "sdpa"
    ) -> Tensor:
        """Self-attention of this rank's heads, summed over ranks by one all-reduce.

        Args:
            x: ``(B, T, D)``, identical on every rank.
            attn_mask: as for :func:`lessons_src.attention.attention`, with a head dim of 1 or ``H``
                (a per-head mask is cut to this rank's heads).
            is_causal: bottom-right causal mask.
            implementation: a registered attention implementation.
        """
        if x.ndim != 3 or x.shape[-1] != self.d_model:
            raise ValueError(f"x must be (B, T, d_model={self.d_model}); got shape {tuple(x.shape)}")
        B, T, _ = x.shape
        E, Hl, Kl = self.head_dim, self.local_heads, self.local_kv_heads
        if attn_mask is not None and attn_mask.ndim == 4 and attn_mask.shape[1] == self.num_heads:
            heads = self.plan.query_heads(self.rank)
            attn_mask = attn_mask[:, heads.start : heads.stop]
        x = _copy_to_parallel(x, self.comm)  # backward: all-reduce of x's gradient
        q, k, v = self.qkv_proj(x).split([Hl * E, Kl * E, Kl * E], dim=-1)  # (B, T, Hl E), 2 x (B, T, Kl E)
        q = q.view(B, T, Hl, E).transpose(1, 2)  # (B, Hl, T, E)
        k = k.view(B, T, Kl, E).transpose(1, 2)  # (B, Kl, T, E)
        v = v.view(B, T, Kl, E).transpose(1, 2)  # (B, Kl, T, E)
        y = attention(q, k, v, attn_mask=attn_mask, is_causal=is_causal, implementation=implementation).output
        partial = self.out_proj(y.transpose(1, 2).reshape(B, T, Hl * E))  # (B, T, D): my heads' share of W_O
        out = _reduce_from_parallel(partial, self.comm)  # (B, T, D): the sum over all heads
        return out if self.out_bias is None else out + self.out_bias


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
    T, P = _int("T", T, 1), _int("world_size", world_size, 1)
    r = _int("rank", rank, 0)
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


def shard_sequence(x: Tensor, world_size: int, rank: int, *, dim: int, order: Order = "contiguous") -> Tensor:
    """Rank ``rank``'s positions of a full sequence ``x`` (along ``dim``), in :func:`sequence_chunks` order."""
    chunks = sequence_chunks(x.shape[dim], world_size, rank, order)
    return torch.cat([x.narrow(dim, a, b - a) for a, b in chunks], dim=dim)


def unshard_sequence(shards: Sequence[Tensor], *, dim: int, order: Order = "contiguous") -> Tensor:
    """Put the ranks' shards (in rank order) back into sequence order: the inverse of :func:`shard_sequence`."""
    P = len(shards)
    T = sum(s.shape[dim] for s in shards)
    pieces: list[tuple[int, Tensor]] = []
    for r, shard in enumerate(shards):
        offset = 0
        for a, b in sequence_chunks(T, P, r, order):
            pieces.append((a, shard.narrow(dim, offset, b - a)))
            offset += b - a
    return torch.cat([t for _, t in sorted(pieces, key=lambda p: p[0])], dim=dim)


# --------------------------------------------------------------------------- Ulysses: sequence <-> heads


def ulysses_attention(
    mha: MultiHeadAttention, x: Tensor, comm: Collectives, *, is_causal: bool = False, implementation: str = "sdpa"
) -> Tensor:
    """Self-attention of a sequence split over ranks, by trading positions for heads (DeepSpeed-Ulysses).

    Each rank holds ``T / P`` consecutive positions (:func:`shard_sequence`, ``"contiguous"``) and all of
    ``mha``'s weights. It projects its positions for every head, then an all-to-all sends head group
    ``j`` to rank ``j``: each rank now has every position for ``H / P`` heads, runs ordinary attention on
    them, and a second all-to-all sends each rank its positions back. With fewer KV heads than ranks, each
    KV head is repeated before the exchange so that every rank receives the one its queries read.

    Args:
        mha: the layer (the same weights on every rank).
        x: this rank's positions ``(B, T / P, D)``.
        comm: the ranks' :class:`Collectives`.
        is_causal: causal over the whole sequence.
        implementation: a registered attention implementation.

    Returns:
        This rank's positions of the output ``(B, T / P, D)``; differentiable (the all-to-alls pass
        gradients back the way they came).

    Raises:
        ValueError: if ``P`` does not split the heads (see :func:`valid_tp_degrees`).
    """
    P = comm.world_size
    tp_plan(mha.num_heads, mha.num_kv_heads, P)  # the same condition: whole heads per rank
    B, Tl, D = x.shape
    q, k, v = mha.project_qkv(x)  # (B, H, T/P, E), 2 x (B, K, T/P, E)
    if mha.num_kv_heads < P:
        k, v = repeat_kv(k, P // mha.num_kv_heads), repeat_kv(v, P // mha.num_kv_heads)  # (B, P, T/P, E)
    q = _all_to_all(q, comm, 1, 2)  # (B, H/P, T, E): my heads, every position
    k = _all_to_all(k, comm, 1, 2)  # (B, max(K/P, 1), T, E)
    v = _all_to_all(v, comm, 1, 2)
    y = attention(q, k, v, is_causal=is_causal, implementation=implementation).output  # (B, H/P, T, E)
    y = _all_to_all(y, comm, 2, 1)  # (B, H, T/P, E): every head, my positions
    out: Tensor = mha.out_proj(y.transpose(1, 2).reshape(B, Tl, D))  # (B, T/P, D)
    return out


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


def _chunk_kind(q: tuple[int, int], k: tuple[int, int], causal: bool) -> str:
    """``"skip"`` (every key after every query), ``"full"`` (every key visible) or ``"partial"``."""
    if not causal:
        return "full"
    if k[0] > q[1] - 1:
        return "skip"
    return "full" if k[1] - 1 <= q[0] else "partial"


def _tiles(
    mine: list[tuple[int, int]], theirs: list[tuple[int, int]], causal: bool
) -> Iterator[tuple[slice, slice, tuple[int, int, int, int], str]]:
    """(my rows, their columns, positions ``(qa, qb, ka, kb)``, kind) of each chunk pair the causal mask leaves."""
    q_off = 0
    for qa, qb in mine:
        k_off = 0
        for ka, kb in theirs:
            kind = _chunk_kind((qa, qb), (ka, kb), causal)
            if kind != "skip":
                yield slice(q_off, q_off + qb - qa), slice(k_off, k_off + kb - ka), (qa, qb, ka, kb), kind
            k_off += kb - ka
        q_off += qb - qa


def _tile_scores(q: Tensor, k: Tensor, span: tuple[int, int, int, int], kind: str, scale: float) -> Tensor:
    """Scaled scores of one chunk pair ``(B, H, tq, tk)``, causal-masked when the pair straddles the diagonal."""
    s = q @ k.transpose(-2, -1) * scale
    if kind == "partial":
        qa, qb, ka, kb = span
        i = torch.arange(qa, qb, device=q.device)[:, None]
        j = torch.arange(ka, kb, device=q.device)[None, :]
        s = s.masked_fill(j > i, _NEG_INF)  # causal within the pair: key after query
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
    m = torch.full((B, H, Tl), _NEG_INF, dtype=cd, device=q.device)  # running max
    l = torch.zeros(B, H, Tl, dtype=cd, device=q.device)  # running sum of exp(s - m)
    acc = torch.zeros(B, H, Tl, v.shape[-1], dtype=cd, device=q.device)  # running sum of exp(s - m) v
    kv = torch.cat([k, v], dim=-1)  # one block to pass on: (B, K, T/P, E + Ev)
    qc = q.to(cd)
    work, steps = 0, []
    for step in range(P):
        source = (rank - step) % P
        k_blk = repeat_kv(kv[..., :E].to(cd), H // K)  # (B, H, T/P, E): each KV head for its query heads
        v_blk = repeat_kv(kv[..., E:].to(cd), H // K)  # (B, H, T/P, Ev)
        step_work = 0
        for rows, cols, span, kind in _tiles(mine, sequence_chunks(T, P, source, order), causal):
            s = _tile_scores(qc[:, :, rows], k_blk[:, :, cols], span, kind, scale)  # (B, H, tq, tk)
            m_old = m[:, :, rows]
            m_new = torch.maximum(m_old, s.amax(dim=-1))
            shift = torch.where(m_new == _NEG_INF, torch.zeros_like(m_new), m_new)
            p = torch.exp(s - shift[..., None])  # (B, H, tq, tk), unnormalised weights
            alpha = torch.exp(m_old - shift)  # rescales what was summed against the old max
            l[:, :, rows] = alpha * l[:, :, rows] + p.sum(dim=-1)
            acc[:, :, rows] = alpha[..., None] * acc[:, :, rows] + p @ v_blk[:, :, cols]
            m[:, :, rows] = m_new
            step_work += (span[1] - span[0]) * (span[3] - span[2])
        work += step_work
        if keep_steps:
            steps.append(RingStep(step, source, step_work, m.clone(), l.clone()))
        if step < P - 1:  # pass the block on: to rank + 1, from rank - 1
            kv = comm.send_recv(kv, to=(rank + 1) % P, frm=(rank - 1) % P)
    total = torch.where(l > 0, l, torch.ones_like(l))
    out = (acc / total[..., None]).to(q.dtype)
    shift = torch.where(m == _NEG_INF, torch.zeros_like(m), m)
    return RingResult(out, shift + torch.log(l), work, steps)


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
    for step in range(P):
        source = (rank - step) % P
        k_blk, v_blk = repeat_kv(kv[..., :E].to(cd), n_rep), repeat_kv(kv[..., E:].to(cd), n_rep)
        for rows, cols, span, kind in _tiles(mine, sequence_chunks(T, P, source, order), causal):
            s = _tile_scores(qc[:, :, rows], k_blk[:, :, cols], span, kind, scale)
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
        ValueError: on mismatched shapes, a sequence the ranks cannot split evenly, or ``keep_steps``
            with inputs that require a gradient.
    """
    if q.ndim != 4 or k.ndim != 4 or v.ndim != 4 or k.shape[:3] != v.shape[:3] or q.shape[2] != k.shape[2]:
        raise ValueError(
            "ring_attention needs q (B, H, T/P, E), k (B, K, T/P, E), v (B, K, T/P, Ev) over the same positions; "
            f"got {tuple(q.shape)}, {tuple(k.shape)}, {tuple(v.shape)}"
        )
    H, K = q.shape[1], k.shape[1]
    if H % K:
        raise ValueError(f"q has {H} heads, not a multiple of the {K} key/value heads of k")
    sequence_chunks(q.shape[2] * comm.world_size, comm.world_size, comm.rank, order)  # a split that works
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else float(scale)
    needs_grad = torch.is_grad_enabled() and any(t.requires_grad for t in (q, k, v))
    if not needs_grad:
        return _ring_forward(q, k, v, comm, is_causal, order, scale, keep_steps)
    if keep_steps:
        raise ValueError("keep_steps records the forward pass only; run it under torch.no_grad()")
    P, T = comm.world_size, q.shape[2] * comm.world_size
    mine = sequence_chunks(T, P, comm.rank, order)
    work = sum((b - a) * (d - c) for src in range(P)
               for _, _, (a, b, c, d), _ in _tiles(mine, sequence_chunks(T, P, src, order), is_causal))
    out, lse = _RingAttention.apply(q, k, v, comm, is_causal, order, scale)  # type: ignore[no-untyped-call]
    return RingResult(out, lse, work, [])
