"""Attention across processes: tensor parallelism by heads, and Ulysses sequence parallelism.

Heads are independent until ``W_O``: head ``h`` reads only its own rows of ``W_Q``, ``W_K``, ``W_V`` and
writes only its own ``E`` columns of ``W_O``'s input. So ``P`` processes ("ranks") can each hold whole
heads and compute them without talking to each other; the one place they meet is ``W_O``, whose output
is a *sum* over heads, which one all-reduce completes. Two ways to use that, each over
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

Ring attention, the third way (the sequence split, the keys and values passed round), is in
:mod:`lessons_src.ring`.

Multi-head latent attention splits by heads too, with its down-projections and latent cache replicated
on every rank; that split is ``lessons_src.lab.parallel_runs.shard_mla`` (kept out of this file, which
needs only ``functional.py``).

Every collective goes through one small :class:`Collectives` object, so a subclass can count the bytes
each call moves (``lessons_src.lab.launch.CountingCollectives`` does).

References:
    Shoeybi et al., "Megatron-LM: Training Multi-Billion Parameter Language Models Using Model
    Parallelism", 2019 (arXiv:1909.08053), section 3 (the f and g operators).
    Jacobs et al., "DeepSpeed Ulysses: System Optimizations for Enabling Training of Extreme Long
    Sequence Transformer Models", 2023 (arXiv:2309.14509).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch
import torch.distributed as dist
from torch import Tensor, nn

from ._checks import size
from .functional import attention, repeat_kv

if TYPE_CHECKING:
    from collections.abc import Sequence

    from .layer import MultiHeadAttention

__all__ = [
    "Collectives",
    "TPPlan",
    "TensorParallelAttention",
    "tp_plan",
    "ulysses_attention",
    "valid_tp_degrees",
]



# --------------------------------------------------------------------------- the collectives, in one place


class Collectives:
    """The collectives this file uses, over an initialised ``torch.distributed`` process group.

    Subclass it to watch them: every call goes through :meth:`all_reduce`, :meth:`all_to_all` or
    :meth:`send_recv` (and the few bytes of :meth:`all_gather_ints`, with which Ulysses and ring attention
    check that every rank holds shards of one shape). Ranks are positions in ``group`` (the default group:
    all processes).

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

    def all_gather_ints(self, values: Sequence[int], *, device: torch.device | None = None) -> list[list[int]]:
        """Every rank's ``values`` (as many on each), in rank order: one small all-gather.

        For checking that the ranks agree on the sizes of a collective before it runs: a send or an
        all-to-all of different sizes on different ranks makes gloo abort the process, with no Python
        exception to catch. ``device``: where the backend wants tensors (a GPU for NCCL); default CPU.
        """
        mine = torch.tensor(list(values), dtype=torch.int64, device=device)
        every = [torch.empty_like(mine) for _ in range(self.world_size)]
        dist.all_gather(every, mine, group=self.group)
        return [[int(n) for n in t.tolist()] for t in every]

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
    H, K = size("num_heads", num_heads), size("num_kv_heads", num_kv_heads)
    if H % K:
        raise ValueError(f"num_heads={H} is not a multiple of num_kv_heads={K}")
    return [p for p in range(1, H + 1) if H % p == 0 and (K % p == 0 or p % K == 0)]


def tp_plan(num_heads: int, num_kv_heads: int, degree: int) -> TPPlan:
    """The split of the heads over ``degree`` ranks, or a ``ValueError`` listing the degrees that work.

    Example:
        >>> tp_plan(32, 8, 16)
        TPPlan(degree=16, query_heads_per_rank=2, kv_heads_per_rank=1, kv_copies=2)
    """
    P = size("degree", degree)
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
    """One rank's share of a :class:`lessons_src.layer.MultiHeadAttention`: its whole heads.

    ``qkv_proj`` holds the rows of ``[W_Q; W_K; W_V]`` for this rank's query and KV heads
    (:attr:`qkv_rows` says which rows of the full matrix); ``out_proj`` holds the matching columns of
    ``W_O`` (:attr:`out_cols`). The output bias, if any, is added once, after the all-reduce.

    Args:
        d_model: model width ``D``.
        num_heads: query heads ``H`` of the whole layer.
        num_kv_heads: KV heads ``K`` of the whole layer (default ``H``).
        comm: the ranks' :class:`Collectives`; its ``world_size`` is the degree ``P``.
        bias: whether the projections have biases.
        dropout: dropout on the attention weights, in training mode only (each rank drops its own heads').

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
        self,
        d_model: int,
        num_heads: int,
        *,
        num_kv_heads: int | None = None,
        comm: Collectives,
        bias: bool = False,
        dropout: float = 0.0,
    ) -> None:
        super().__init__()
        D, H = size("d_model", d_model), size("num_heads", num_heads)
        K = H if num_kv_heads is None else size("num_kv_heads", num_kv_heads)
        if D % H:
            raise ValueError(f"d_model={D} is not divisible by num_heads={H}")
        if isinstance(dropout, bool) or not isinstance(dropout, int | float) or not 0.0 <= dropout < 1.0:
            raise ValueError(f"dropout must be a number in [0, 1); got dropout={dropout!r}")
        self.dropout = float(dropout)
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
        full.check_plain("TensorParallelAttention.from_module")
        bias = full.qkv_proj.bias is not None
        tp = cls(full.d_model, full.num_heads, num_kv_heads=full.num_kv_heads, comm=comm, bias=bias,
                 dropout=full.dropout)
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
            attn_mask: as for :func:`lessons_src.functional.attention`, with a head dim of 1 or ``H``
                (a per-head mask, ``(H, T, S)`` or ``(B, H, T, S)``, is cut to this rank's heads).
            is_causal: bottom-right causal mask.
            implementation: a registered attention implementation.
        """
        if x.ndim != 3 or x.shape[-1] != self.d_model:
            raise ValueError(f"x must be (B, T, d_model={self.d_model}); got shape {tuple(x.shape)}")
        B, T, _ = x.shape
        E, Hl, Kl = self.head_dim, self.local_heads, self.local_kv_heads
        if isinstance(attn_mask, Tensor) and attn_mask.ndim in (3, 4) and attn_mask.shape[-3] == self.num_heads:
            heads = self.plan.query_heads(self.rank)
            attn_mask = attn_mask.narrow(-3, heads.start, len(heads))  # (.., Hl, T, S): my heads' rows
        x = _copy_to_parallel(x, self.comm)  # backward: all-reduce of x's gradient
        q, k, v = self.qkv_proj(x).split([Hl * E, Kl * E, Kl * E], dim=-1)  # (B, T, Hl E), 2 x (B, T, Kl E)
        q = q.view(B, T, Hl, E).transpose(1, 2)  # (B, Hl, T, E)
        k = k.view(B, T, Kl, E).transpose(1, 2)  # (B, Kl, T, E)
        v = v.view(B, T, Kl, E).transpose(1, 2)  # (B, Kl, T, E)
        p = self.dropout if self.training else 0.0
        y = attention(q, k, v, attn_mask=attn_mask, is_causal=is_causal, dropout_p=p, implementation=implementation)[0]
        partial = self.out_proj(y.transpose(1, 2).reshape(B, T, Hl * E))  # (B, T, D): my heads' share of W_O
        out = _reduce_from_parallel(partial, self.comm)  # (B, T, D): the sum over all heads
        return out if self.out_bias is None else out + self.out_bias


# --------------------------------------------------------------------------- Ulysses: sequence <-> heads


def ulysses_attention(
    mha: MultiHeadAttention, x: Tensor, comm: Collectives, *, is_causal: bool = False, implementation: str = "sdpa"
) -> Tensor:
    """Self-attention of a sequence split over ranks, by trading positions for heads (DeepSpeed-Ulysses).

    Each rank holds ``T / P`` consecutive positions (rank ``r`` the ``r``-th block) and all of
    ``mha``'s weights. It projects its positions for every head, then an all-to-all sends head group
    ``j`` to rank ``j``: each rank now has every position for ``H / P`` heads, runs ordinary attention on
    them, and a second all-to-all sends each rank its positions back. With fewer KV heads than ranks, each
    KV head is repeated before the exchange so that every rank receives the one its queries read. In
    training mode, ``mha.dropout`` applies to the weights (each rank drops its own heads').

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
        TypeError: if ``x`` is not a tensor.
        ValueError: if ``P`` does not split the heads (see :func:`valid_tp_degrees`); if ``x`` is not
            ``(B, T/P, D)`` in the module's dtype and device; on every rank, if the ranks' ``x`` differ in
            batch, length or dtype (checked with one small all-gather before the first all-to-all).
    """
    P = comm.world_size
    mha.check_plain("ulysses_attention")
    tp_plan(mha.num_heads, mha.num_kv_heads, P)  # the same condition: whole heads per rank
    mha._check_inputs(x, None)  # (B, T/P, D), the module's dtype and device
    B, Tl, D = x.shape
    shapes = comm.all_gather_ints([B, Tl, x.element_size()], device=x.device)
    if any(s != shapes[0] for s in shapes):
        held = ", ".join(f"rank {r} holds {t} positions" for r, (_, t, _) in enumerate(shapes))
        raise ValueError(
            f"the ranks' shards of x differ: {held}; batch sizes {[b for b, _, _ in shapes]}, bytes per element "
            f"{[e for _, _, e in shapes]}. Every rank must hold T/P positions of one batch (shard_sequence)"
        )
    q, k, v = mha.project_qkv(x)  # (B, H, T/P, E), 2 x (B, K, T/P, E)
    if mha.num_kv_heads < P:
        k, v = repeat_kv(k, P // mha.num_kv_heads), repeat_kv(v, P // mha.num_kv_heads)  # (B, P, T/P, E)
    q = _all_to_all(q, comm, 1, 2)  # (B, H/P, T, E): my heads, every position
    k = _all_to_all(k, comm, 1, 2)  # (B, max(K/P, 1), T, E)
    v = _all_to_all(v, comm, 1, 2)
    p = mha.dropout if mha.training else 0.0
    y = attention(q, k, v, is_causal=is_causal, dropout_p=p, implementation=implementation)[0]  # (B, H/P, T, E)
    y = _all_to_all(y, comm, 2, 1)  # (B, H, T/P, E): every head, my positions
    out: Tensor = mha.out_proj(y.transpose(1, 2).reshape(B, Tl, D))  # (B, T/P, D)
    return out
