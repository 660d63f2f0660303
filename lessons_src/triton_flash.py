"""FlashAttention-2 in Triton: one forward kernel and two backward kernels, written to be read.

:mod:`lessons_src.flash` spells the algorithm out in PyTorch, one tile at a time, in a Python loop. Here the
same loop runs inside a GPU kernel: each *program* (one instance of the kernel, ``tl.program_id`` says which)
owns one block of queries of one head, keeps its running maximum, sum and output in registers, and walks
over the key blocks. Nothing of size ``T x S`` ever reaches the GPU's main memory.

* :func:`_forward_kernel`: the online softmax (as :func:`lessons_src.flash.softmax_statistics`), in base 2
  (``exp(x) = exp2(x * log2 e)``, the GPU's native exponential), writing the output and each query's
  log-sum-exp.
* :func:`_backward_dk_dv_kernel`: one program per block of keys of one key/value head. It loops over every
  query head that reads that key/value head (grouped-query attention) and every query block that sees it,
  recomputing the weights from the saved log-sum-exp, and sums ``dK`` and ``dV`` in registers: no atomics.
* :func:`_backward_dq_kernel`: one program per block of queries, the forward loop again for ``dQ``.

The causal mask is bottom-right (query ``i`` sees key ``j`` when ``j <= i + S - T``), as everywhere in the
course; blocks it hides entirely are never loaded. Head sizes 16 to 128 (the kernel pads to a power of two),
float32 under Triton's interpreter (``TRITON_INTERPRET=1``, on CPU tensors) and float16, bfloat16 or float32
on a CUDA GPU. It takes no mask tensor, window, soft-cap, sinks or dropout: :func:`attention` refuses those
with ``implementation="triton"`` and names the implementations that have them.

Importing this module registers ``implementation="triton"`` in :func:`lessons_src.functional.attention`. It needs
Triton (``pip install "mha-computed[triton]"``), which the rest of the package never imports.

References:
    Dao, "FlashAttention-2: Faster Attention with Better Parallelism and Work Partitioning", 2023
    (arXiv:2307.08691), algorithms 1 and 2.
    Tillet, Kung and Cox, "Triton: an intermediate language and compiler for tiled neural network
    computations", MAPL 2019.
"""

from __future__ import annotations

import math
import os
from typing import Any

import torch
from torch import Tensor

try:
    import triton
    import triton.language as tl
except ImportError as error:  # pragma: no cover - the message is the point
    raise ImportError(
        'triton is not installed: it comes with pip install "mha-computed[triton]" (on a machine without a GPU, '
        "run the kernels through its interpreter: TRITON_INTERPRET=1)", name="triton"
    ) from error

from ._checks import check_qkv, flag, instance, positive, probability, size
from .functional import AttentionResult, Supports, check_supports, register_attention
from .masks import PreparedMask, prepare_mask

__all__ = ["INTERPRETED", "TritonFlashAttention", "triton_attention", "triton_attention_function"]

INTERPRETED = os.environ.get("TRITON_INTERPRET", "0") == "1"
"""Whether the kernels run through Triton's interpreter (read when ``triton.jit`` wraps them, at import)."""

HEAD_SIZES = (16, 128)
"""The head sizes the kernels take (inclusive): ``tl.dot`` needs at least 16; more than 128 outgrows the chip."""

_LOG2E = 1.4426950408889634  # exp(x) = exp2(x * log2(e)): the kernels' scores are in base 2
_DTYPES = (torch.float32, torch.float16, torch.bfloat16)


# --------------------------------------------------------------------------- forward


@triton.jit(do_not_specialize=["T", "S"])  # lengths change from call to call: one compiled kernel for all
def _forward_kernel(
    Q, K, V, O, LSE,  # q (B, H, T, E), k (B, KV, S, E), v (B, KV, S, EV), out (B, H, T, EV), lse (B, H, T)
    H, N_REP, T, S, E, EV, qk_scale,  # qk_scale = scale * log2(e)
    CAUSAL: tl.constexpr, BLOCK_Q: tl.constexpr, BLOCK_K: tl.constexpr,
    HEAD_E: tl.constexpr, HEAD_EV: tl.constexpr, PRECISION: tl.constexpr,
):
    i_block = tl.program_id(0)  # which block of queries
    bh = tl.program_id(1).to(tl.int64)  # which (batch, query head); int64: offsets can pass 2**31
    kv = (bh // H) * (H // N_REP) + (bh % H) // N_REP  # its key/value head: b * KV + h // n_rep
    rows = i_block * BLOCK_Q + tl.arange(0, BLOCK_Q)  # query positions of this block
    cols = tl.arange(0, BLOCK_K)
    e, ev = tl.arange(0, HEAD_E), tl.arange(0, HEAD_EV)  # head dims, padded to a power of two

    q = tl.load(Q + bh * T * E + rows[:, None] * E + e[None, :], mask=(rows[:, None] < T) & (e[None, :] < E), other=0.0)
    m = tl.full([BLOCK_Q], float("-inf"), tl.float32)  # running max of each query's scores
    l = tl.zeros([BLOCK_Q], tl.float32)  # running sum of exp2(s - m)
    acc = tl.zeros([BLOCK_Q, HEAD_EV], tl.float32)  # running sum of exp2(s - m) v

    end = S
    if CAUSAL:  # no key after what this block's last query sees is ever loaded
        end = (i_block + 1) * BLOCK_Q + S - T
        if end > S:
            end = S
    for j0 in range(0, end, BLOCK_K):
        keys = j0 + cols
        k_t = tl.load(K + kv * S * E + keys[None, :] * E + e[:, None], mask=(keys[None, :] < S) & (e[:, None] < E),
                      other=0.0)  # (HEAD_E, BLOCK_K): the keys, transposed by the addresses
        s = tl.dot(q, k_t, input_precision=PRECISION) * qk_scale  # (BLOCK_Q, BLOCK_K) scores, base 2
        visible = keys[None, :] < S
        if CAUSAL:
            visible = visible & (keys[None, :] <= rows[:, None] + S - T)
        s = tl.where(visible, s, float("-inf"))
        m_new = tl.maximum(m, tl.max(s, 1))
        shift = tl.where(m_new == float("-inf"), 0.0, m_new)  # a query that has seen nothing yet: shift by 0
        p = tl.exp2(s - shift[:, None])  # unnormalised weights of this tile
        alpha = tl.exp2(m - shift)  # rescales what was summed against the old max
        l = l * alpha + tl.sum(p, 1)
        v = tl.load(V + kv * S * EV + keys[:, None] * EV + ev[None, :], mask=(keys[:, None] < S) & (ev[None, :] < EV),
                    other=0.0)  # (BLOCK_K, HEAD_EV)
        acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v, input_precision=PRECISION)
        m = m_new

    saw = l > 0  # a query that sees no key: output 0, log-sum-exp -inf
    total = tl.where(saw, l, 1.0)
    out = acc / total[:, None]  # divided once, at the end
    lse = tl.where(saw, (m + tl.log2(total)) * 0.6931471805599453, float("-inf"))  # natural log: times ln 2
    tl.store(O + bh * T * EV + rows[:, None] * EV + ev[None, :], out.to(O.dtype.element_ty),
             mask=(rows[:, None] < T) & (ev[None, :] < EV))
    tl.store(LSE + bh * T + rows, lse, mask=rows < T)


# --------------------------------------------------------------------------- backward


@triton.jit(do_not_specialize=["T", "S"])
def _backward_dk_dv_kernel(
    Q, K, V, DO, LSE, DELTA, DK, DV,  # LSE: finite (0 where a query sees nothing); DELTA = rowsum(dO * O)
    H, N_REP, T, S, E, EV, qk_scale, scale,
    CAUSAL: tl.constexpr, BLOCK_Q: tl.constexpr, BLOCK_K: tl.constexpr,
    HEAD_E: tl.constexpr, HEAD_EV: tl.constexpr, PRECISION: tl.constexpr,
):
    j_block = tl.program_id(0)  # which block of keys
    bkv = tl.program_id(1).to(tl.int64)  # which (batch, key/value head)
    n_kv = H // N_REP
    keys = j_block * BLOCK_K + tl.arange(0, BLOCK_K)
    e, ev = tl.arange(0, HEAD_E), tl.arange(0, HEAD_EV)
    k = tl.load(K + bkv * S * E + keys[:, None] * E + e[None, :], mask=(keys[:, None] < S) & (e[None, :] < E),
                other=0.0)
    v = tl.load(V + bkv * S * EV + keys[:, None] * EV + ev[None, :], mask=(keys[:, None] < S) & (ev[None, :] < EV),
                other=0.0)
    dk = tl.zeros([BLOCK_K, HEAD_E], tl.float32)
    dv = tl.zeros([BLOCK_K, HEAD_EV], tl.float32)

    start = 0
    if CAUSAL:  # key j is seen by queries i >= j - (S - T): earlier query blocks are skipped
        start = j_block * BLOCK_K - (S - T)
        if start < 0:
            start = 0
        start = start // BLOCK_Q * BLOCK_Q
    for r in range(0, N_REP):  # every query head that reads this key/value head sums into the same dK, dV
        bh = (bkv // n_kv) * H + (bkv % n_kv) * N_REP + r
        for i0 in range(start, T, BLOCK_Q):
            rows = i0 + tl.arange(0, BLOCK_Q)
            in_rows = rows < T
            q = tl.load(Q + bh * T * E + rows[:, None] * E + e[None, :], mask=in_rows[:, None] & (e[None, :] < E),
                        other=0.0)
            do = tl.load(DO + bh * T * EV + rows[:, None] * EV + ev[None, :],
                         mask=in_rows[:, None] & (ev[None, :] < EV), other=0.0)
            lse = tl.load(LSE + bh * T + rows, mask=in_rows, other=0.0) * 1.4426950408889634  # base 2
            delta = tl.load(DELTA + bh * T + rows, mask=in_rows, other=0.0)
            s = tl.dot(q, tl.trans(k), input_precision=PRECISION) * qk_scale  # (BLOCK_Q, BLOCK_K)
            visible = in_rows[:, None] & (keys[None, :] < S)
            if CAUSAL:
                visible = visible & (keys[None, :] <= rows[:, None] + S - T)
            p = tl.where(visible, tl.exp2(s - lse[:, None]), 0.0)  # the forward's weights, recomputed
            dv += tl.dot(tl.trans(p.to(do.dtype)), do, input_precision=PRECISION)  # dV = P^T dO
            dp = tl.dot(do, tl.trans(v), input_precision=PRECISION)  # dP = dO V^T
            ds = p * (dp - delta[:, None])  # dS = P * (dP - D)
            dk += tl.dot(tl.trans(ds.to(q.dtype)), q, input_precision=PRECISION)  # dK = dS^T Q (times scale below)

    tl.store(DK + bkv * S * E + keys[:, None] * E + e[None, :], (dk * scale).to(DK.dtype.element_ty),
             mask=(keys[:, None] < S) & (e[None, :] < E))
    tl.store(DV + bkv * S * EV + keys[:, None] * EV + ev[None, :], dv.to(DV.dtype.element_ty),
             mask=(keys[:, None] < S) & (ev[None, :] < EV))


@triton.jit(do_not_specialize=["T", "S"])
def _backward_dq_kernel(
    Q, K, V, DO, LSE, DELTA, DQ,
    H, N_REP, T, S, E, EV, qk_scale, scale,
    CAUSAL: tl.constexpr, BLOCK_Q: tl.constexpr, BLOCK_K: tl.constexpr,
    HEAD_E: tl.constexpr, HEAD_EV: tl.constexpr, PRECISION: tl.constexpr,
):
    i_block = tl.program_id(0)
    bh = tl.program_id(1).to(tl.int64)
    kv = (bh // H) * (H // N_REP) + (bh % H) // N_REP
    rows = i_block * BLOCK_Q + tl.arange(0, BLOCK_Q)
    in_rows = rows < T
    cols = tl.arange(0, BLOCK_K)
    e, ev = tl.arange(0, HEAD_E), tl.arange(0, HEAD_EV)
    q = tl.load(Q + bh * T * E + rows[:, None] * E + e[None, :], mask=in_rows[:, None] & (e[None, :] < E), other=0.0)
    do = tl.load(DO + bh * T * EV + rows[:, None] * EV + ev[None, :], mask=in_rows[:, None] & (ev[None, :] < EV),
                 other=0.0)
    lse = tl.load(LSE + bh * T + rows, mask=in_rows, other=0.0) * 1.4426950408889634
    delta = tl.load(DELTA + bh * T + rows, mask=in_rows, other=0.0)
    dq = tl.zeros([BLOCK_Q, HEAD_E], tl.float32)

    end = S
    if CAUSAL:
        end = (i_block + 1) * BLOCK_Q + S - T
        if end > S:
            end = S
    for j0 in range(0, end, BLOCK_K):
        keys = j0 + cols
        k = tl.load(K + kv * S * E + keys[:, None] * E + e[None, :], mask=(keys[:, None] < S) & (e[None, :] < E),
                    other=0.0)
        v_t = tl.load(V + kv * S * EV + keys[None, :] * EV + ev[:, None], mask=(keys[None, :] < S) & (ev[:, None] < EV),
                      other=0.0)  # (HEAD_EV, BLOCK_K)
        s = tl.dot(q, tl.trans(k), input_precision=PRECISION) * qk_scale
        visible = in_rows[:, None] & (keys[None, :] < S)
        if CAUSAL:
            visible = visible & (keys[None, :] <= rows[:, None] + S - T)
        p = tl.where(visible, tl.exp2(s - lse[:, None]), 0.0)
        dp = tl.dot(do, v_t, input_precision=PRECISION)
        ds = p * (dp - delta[:, None])
        dq += tl.dot(ds.to(k.dtype), k, input_precision=PRECISION)  # dQ = dS K (times scale below)

    tl.store(DQ + bh * T * E + rows[:, None] * E + e[None, :], (dq * scale).to(DQ.dtype.element_ty),
             mask=in_rows[:, None] & (e[None, :] < E))


# --------------------------------------------------------------------------- launching them


def _config(q: Tensor, v: Tensor) -> dict[str, Any]:
    """The constants every kernel is compiled with: padded head sizes and how float32 products are taken."""
    return {
        "HEAD_E": max(16, triton.next_power_of_2(q.shape[-1])),
        "HEAD_EV": max(16, triton.next_power_of_2(v.shape[-1])),
        "PRECISION": "ieee" if q.dtype == torch.float32 else "tf32",  # float32 stays float32 (no TF32 rounding)
    }


def _warps(head: int) -> int:
    return 8 if head > 64 else 4


def _forward(q: Tensor, k: Tensor, v: Tensor, causal: bool, scale: float, block_q: int, block_k: int
             ) -> tuple[Tensor, Tensor]:
    B, H, T, E = q.shape
    n_kv, S, Ev = k.shape[1], k.shape[2], v.shape[-1]
    out = torch.empty(B, H, T, Ev, dtype=q.dtype, device=q.device)
    lse = torch.empty(B, H, T, dtype=torch.float32, device=q.device)
    config = _config(q, v)
    grid = (triton.cdiv(T, block_q), B * H)
    if min(grid) == 0:  # no query: nothing to launch
        return out, lse
    _forward_kernel[grid](
        q, k, v, out, lse, H, H // n_kv, T, S, E, Ev, scale * _LOG2E,
        CAUSAL=causal, BLOCK_Q=block_q, BLOCK_K=block_k, num_warps=_warps(config["HEAD_E"]), num_stages=2, **config,
    )
    return out, lse


def _backward(q: Tensor, k: Tensor, v: Tensor, out: Tensor, lse: Tensor, d_out: Tensor, d_lse: Tensor | None,
              causal: bool, scale: float, block_q: int, block_k: int) -> tuple[Tensor, Tensor, Tensor]:
    B, H, T, E = q.shape
    n_kv, S, Ev = k.shape[1], k.shape[2], v.shape[-1]
    d_out = d_out.contiguous()
    delta = (d_out.float() * out.float()).sum(dim=-1)  # D = rowsum(dO * O), one number per query
    if d_lse is not None:
        delta = delta - d_lse.float()  # a gradient on the log-sum-exp: dS = P * (dP - D + d_lse)
    lse = torch.where(lse == float("-inf"), torch.zeros_like(lse), lse)  # a query that sees nothing: P = 0 anyway
    dq, dk, dv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)  # every entry is written
    config = _config(q, v)
    warps = _warps(max(config["HEAD_E"], config["HEAD_EV"]))
    args = (H, H // n_kv, T, S, E, Ev, scale * _LOG2E, scale)
    consts = {"CAUSAL": causal, "BLOCK_Q": block_q, "BLOCK_K": block_k, "num_warps": warps, "num_stages": 2, **config}
    grid_kv, grid_q = (triton.cdiv(S, block_k), B * n_kv), (triton.cdiv(T, block_q), B * H)
    if min(grid_kv) > 0:  # an empty grid means an empty tensor (with no query, the kernel writes dK = dV = 0)
        _backward_dk_dv_kernel[grid_kv](q, k, v, d_out, lse, delta, dk, dv, *args, **consts)
    if min(grid_q) > 0:
        _backward_dq_kernel[grid_q](q, k, v, d_out, lse, delta, dq, *args, **consts)
    return dq, dk, dv


class TritonFlashAttention(torch.autograd.Function):
    """``TritonFlashAttention.apply(q, k, v, causal, scale, block_q, block_k) -> (output, lse)``.

    Saves q, k, v, the output and the log-sum-exp (``O(T)`` per head); the backward pass recomputes each
    tile's weights from them (FlashAttention-2's algorithm 2).
    """

    @staticmethod
    def forward(ctx: Any, q: Tensor, k: Tensor, v: Tensor, causal: bool, scale: float, block_q: int,
                block_k: int) -> tuple[Tensor, Tensor]:
        scale, block_q, block_k = _checked(q, k, v, causal, scale, block_q, block_k)
        q, k, v = q.contiguous(), k.contiguous(), v.contiguous()  # the kernels index a packed (B, H, T, E) layout
        out, lse = _forward(q, k, v, causal, scale, block_q, block_k)
        ctx.save_for_backward(q, k, v, out, lse)
        ctx.config = (causal, scale, block_q, block_k)
        return out, lse

    @staticmethod
    def backward(ctx: Any, d_out: Tensor, d_lse: Tensor | None) -> tuple[Tensor | None, ...]:
        q, k, v, out, lse = ctx.saved_tensors
        dq, dk, dv = _backward(q, k, v, out, lse, d_out, d_lse, *ctx.config)
        return dq, dk, dv, None, None, None, None


# --------------------------------------------------------------------------- entry points


def _block(name: str, value: object) -> int:
    value = size(name, value, minimum=16, hint="a tile's side for tl.dot, a power of two")
    if value & (value - 1):
        raise ValueError(f"{name} must be a power of two, at least 16 (a tile's side for tl.dot); got {name}={value!r}")
    return value


def _checked(q: Tensor, k: Tensor, v: Tensor, causal: object, scale: object, block_q: object,
             block_k: object) -> tuple[float, int, int]:
    """Every argument of the kernels, checked by the package's rules before a kernel reads any of them."""
    check_qkv(q, k, v)
    flag("causal", causal)
    _check_inputs(q, k, v)
    return positive("scale", scale), _block("block_q", block_q), _block("block_k", block_k)


def _check_inputs(q: Tensor, k: Tensor, v: Tensor) -> None:
    """What the kernels cannot take, named with what to use instead."""
    if q.dtype not in _DTYPES:
        raise ValueError(f"the 'triton' implementation takes float32, float16 or bfloat16; got {q.dtype}. "
                         "Convert the inputs (q.float()) or use 'tiled' or 'eager'")
    lo, hi = HEAD_SIZES
    for name, width in (("E", q.shape[-1]), ("Ev", v.shape[-1])):
        if not lo <= width <= hi:
            raise ValueError(f"the 'triton' implementation takes head sizes {lo} to {hi}; got {name}={width}. "
                             "Use 'sdpa' or 'tiled' for other head sizes")
    if q.device.type != "cuda" and not INTERPRETED:
        raise ValueError(
            f"the 'triton' kernels compile for a CUDA GPU and the tensors are on {q.device.type}: move them to "
            "'cuda', or run the kernels through Triton's interpreter by setting TRITON_INTERPRET=1 before "
            "lessons_src.triton_flash (and triton) is first imported"
        )


def triton_attention_function(
    q: Tensor, k: Tensor, v: Tensor, mask: PreparedMask, *, scale: float, dropout_p: float,
    block_q: int | None = None, block_k: int | None = None, **mods: object,
) -> AttentionResult:
    """The ``"triton"`` implementation of :func:`lessons_src.functional.attention` (inputs already checked).

    Returns the output and the log-sum-exp (``AttentionResult.lse``); no weights (they are never built).

    Raises:
        ValueError: on a mask tensor, a window, a soft-cap, sinks or dropout (the kernels have none of
            them; the message names the implementations that do), a dtype, head size or device the kernels
            cannot take, or a block size that is not a power of two of at least 16.
    """
    check_qkv(q, k, v)
    instance("mask", mask, PreparedMask, "a PreparedMask (from prepare_mask)")
    scale, dropout_p = positive("scale", scale), probability("dropout_p", dropout_p)
    check_supports("triton", mask=mask.beyond_causal(), dropout=dropout_p, **mods)  # what it declared, once
    _check_inputs(q, k, v)
    block_q = _block("block_q", 64 if block_q is None else block_q)
    block_k = _block("block_k", 64 if block_k is None else block_k)
    out, lse = TritonFlashAttention.apply(q, k, v, mask.causal, scale, block_q, block_k)
    return AttentionResult(out, None, lse)


def triton_attention(
    q: Tensor, k: Tensor, v: Tensor, *, is_causal: bool = False, scale: float | None = None,
    block_q: int | None = None, block_k: int | None = None,
) -> AttentionResult:
    """FlashAttention-2 in Triton, forward and backward, with the log-sum-exp.

    Same answer as ``attention(q, k, v, is_causal=..., implementation="triton")``, with the block sizes chosen.

    Args:
        q: queries ``(B, H, T, E)``.
        k: keys ``(B, K, S, E)``, ``H`` a multiple of ``K`` (grouped-query attention reads them in place).
        v: values ``(B, K, S, Ev)``.
        is_causal: hide future keys, bottom-right aligned (``j <= i + S - T``).
        scale: score multiplier, default ``1 / sqrt(E)``.
        block_q: queries per program (a power of two, at least 16; default 64).
        block_k: keys per step of a program's loop (likewise).

    Returns:
        :class:`lessons_src.functional.AttentionResult` ``(output, None, lse)``, lse in float32 (``-inf`` for
        a query that sees nothing, whose output is 0).

    Raises:
        ValueError: as :func:`triton_attention_function`, and as :func:`lessons_src.functional.attention`.

    Example:
        >>> q, kv = torch.randn(1, 4, 40, 16), torch.randn(1, 2, 50, 16)  # CPU tensors: TRITON_INTERPRET=1
        >>> out, _, lse = triton_attention(q, kv, kv, is_causal=True)
        >>> out.shape, lse.shape
        (torch.Size([1, 4, 40, 16]), torch.Size([1, 4, 40]))
        >>> s = q @ kv.repeat_interleave(2, 1).transpose(-2, -1) / 4  # scores: 1 / sqrt(16)
        >>> s = s.masked_fill(torch.ones(40, 50, dtype=torch.bool).triu(11), float("-inf"))  # bottom-right
        >>> bool((lse - torch.logsumexp(s, -1)).abs().max() < 1e-5)
        True
    """
    check_qkv(q, k, v)
    flag("is_causal", is_causal)
    B, H, T, E = q.shape
    prepared = prepare_mask(None, is_causal=is_causal, shape=(B, H, T, k.shape[2]), dtype=q.dtype, device=q.device)
    scale = 1.0 / math.sqrt(E) if scale is None else positive("scale", scale, f"None for 1/sqrt(E) = {E ** -0.5:.4g}")
    return triton_attention_function(q, k, v, prepared, scale=scale, dropout_p=0.0, block_q=block_q, block_k=block_k)


register_attention("triton", triton_attention_function, Supports(mask=False, dropout=False, lse=True))
