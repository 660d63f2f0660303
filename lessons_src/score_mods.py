"""The two changes of 2024-26 that act *inside* the softmax: the soft-cap and the learned sinks.

:func:`lessons_src.functional.attention` takes them as pieces, ``score_mods=[SoftCap(c), Sinks(logits)]``, and
hands each implementation that declares them ``softcap=`` and ``sinks=``; they are checked here once and their
fiddly parts live here, beside each other:

* **soft-cap** (Gemma 2): the scaled scores pass through ``c * tanh(s / c)`` (:func:`soft_cap`), which keeps
  every finite score inside ``(-c, c)``. It comes *before* the mask: a cap applied to a hidden key's ``-inf`` would
  give ``-c``, a finite score, and the key would come back;
* **sinks** (gpt-oss): one learned logit per query head joins the softmax as one more column and takes no
  value, so a query may put weight on "nothing" and its weights over the keys sum to less than 1.

The eager and tiled implementations add the sink column to their own softmax. PyTorch's fused
``F.scaled_dot_product_attention`` has no place for it; :func:`sdpa_with_sinks` takes one of two exact ways in,
forward and backward:

* :func:`sink_flash_cpu` (CPU, float32/64): torch's CPU flash kernel returns each query's log-sum-exp; the
  sink joins it as a state with no value (:func:`merge_states`, which rescales the output), and inside the custom
  autograd Function the kernel's own backward is handed the new log-sum-exp, so its
  gradients are the sink attention's. Rescaling by ``sigmoid(lse - sink)`` under autograd instead looks
  right and gives wrong query gradients: the kernel's log-sum-exp carries no gradient;
* :func:`sinks_as_a_key` (any device): one more key whose key and value are zero and whose score is set by a
  float mask to the sink logit.

The names follow FlexAttention's "score mod" (a function of one score: the cap is one; a sink is a column).
This file needs torch and ``_checks.py``; ``functional.py`` imports it.

References:
    Gemma Team, "Gemma 2: Improving Open Language Models at a Practical Size", 2024 (arXiv:2408.00118):
    the soft-cap, 50.0 on the attention scores.
    OpenAI, "gpt-oss-120b & gpt-oss-20b Model Card", 2025 (arXiv:2508.10925): the learned sinks.
    Xiao et al., "Efficient Streaming Language Models with Attention Sinks", ICLR 2024 (arXiv:2309.17453).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import torch
import torch.nn.functional as F
from torch import Tensor

from ._checks import flag, instance, positive, probability, size, tensor

if TYPE_CHECKING:
    from collections.abc import Sequence

__all__ = ["Sinks", "SoftCap", "check_score_mods", "check_sinks", "check_softcap", "merge_states",
           "score_mod_arguments", "sdpa_with_sinks", "sink_flash_cpu", "sinks_as_a_key", "soft_cap"]


def merge_states(states: Sequence[tuple[Tensor, Tensor]]) -> tuple[Tensor, Tensor]:
    """Merge attention states over disjoint sets of keys into the state over all of them, exactly.

    A state is ``(output, lse)``: a query's attention output over some keys and the natural-log log-sum-exp of its
    scores over them. Two merge as ``lse = logaddexp(lse1, lse2)``, ``o = exp(lse1 - lse) o1 + exp(lse2 - lse) o2``
    (each output reweighted by its share of the whole softmax), and more by folding left to right, so splits of a
    cache, a shared prefix and a request's own suffix, ring steps, or a sink (a state with no value: ``(0, sink)``)
    combine into attention over all their keys. The empty state (``lse = -inf``; its output is ignored, 0 by
    convention) is the identity, and two empty states merge into ``(0, -inf)``, never NaN. The weights are computed
    in the log-sum-exps' dtype (keep it float32 for half-precision outputs) and the output is cast back to the
    outputs' dtype. Differentiable. FlashInfer's merge kernels work in base 2 (``exp2``/``log2``, and its MLA
    wrapper returns a base-2 log-sum-exp unless ``return_lse_base_on_e=True``): multiply such an lse by ``ln 2``.

    Shapes:
        each output ``(..., Ev)`` and its lse ``(...)``, the same for every state (attention's ``(B, H, T, Ev)`` and
        ``(B, H, T)``); returns the same.

    Example:
        >>> s = torch.randn(5); v = torch.randn(5, 2)
        >>> part = lambda a, b: (torch.softmax(s[a:b], 0) @ v[a:b], torch.logsumexp(s[a:b], 0))
        >>> o, lse = merge_states([part(0, 2), part(2, 5)])
        >>> torch.allclose(o, torch.softmax(s, 0) @ v), torch.allclose(lse, torch.logsumexp(s, 0))
        (True, True)

    Raises:
        TypeError, ValueError: if ``states`` is not a non-empty sequence of ``(output, lse)`` tensor pairs of one
            shape, floating dtype and device.
    """
    if isinstance(states, Tensor) or not isinstance(states, list | tuple) or not states:
        raise TypeError(f"states must be a non-empty list of (output, lse) pairs of tensors; got "
                        f"{type(states).__name__}")
    checked = [_check_state(i, state) for i, state in enumerate(states)]
    o, lse = checked[0]
    for i, (o2, lse2) in enumerate(checked[1:], 1):
        if (o2.shape, lse2.shape, o2.device, lse2.dtype) != (o.shape, lse.shape, o.device, lse.dtype):
            raise ValueError(f"states[{i}] has output {tuple(o2.shape)} and lse {tuple(lse2.shape)} {lse2.dtype} on "
                             f"{o2.device}; states[0] has {tuple(o.shape)}, {tuple(lse.shape)} {lse.dtype} on "
                             f"{o.device}: every state must match")
        o, lse = _merge_two(o, lse, o2, lse2)
    return o, lse


def _check_state(i: int, state: object) -> tuple[Tensor, Tensor]:
    """``states[i]`` as ``(output (..., Ev), lse (...))``, both floating and on one device."""
    if not isinstance(state, tuple | list) or len(state) != 2:
        raise TypeError(f"states[{i}] must be an (output, lse) pair; got {type(state).__name__}")
    o = tensor(f"states[{i}] output", state[0], shape="(..., Ev)")
    lse = tensor(f"states[{i}] lse", state[1], shape="(...)")
    if o.ndim < 1 or tuple(lse.shape) != tuple(o.shape[:-1]) or lse.device != o.device:
        raise ValueError(f"states[{i}] needs output (..., Ev) and lse (...) on one device; got output "
                         f"{tuple(o.shape)} on {o.device}, lse {tuple(lse.shape)} on {lse.device}")
    return o, lse


def _merge_two(o1: Tensor, lse1: Tensor, o2: Tensor, lse2: Tensor) -> tuple[Tensor, Tensor]:
    """The merge of two checked states: weights in the lse's dtype, an empty state's output never read."""
    lse = torch.logaddexp(lse1, lse2)  # (...): -inf only when both are empty
    shift = torch.where(torch.isneginf(lse), torch.zeros_like(lse), lse)  # both empty: exp(-inf - 0) = 0, not NaN
    parts = [torch.where(torch.isneginf(l)[..., None], 0.0, torch.exp(l - shift)[..., None] * o.to(l.dtype))
             for o, l in ((o1, lse1), (o2, lse2))]  # (..., Ev): an empty state adds 0, even if its output is NaN
    return (parts[0] + parts[1]).to(torch.promote_types(o1.dtype, o2.dtype)), lse


def soft_cap(scores: Tensor, cap: float) -> Tensor:
    """Squash scores smoothly into ``(-cap, cap)``: ``cap * tanh(scores / cap)`` (Gemma 2's attention soft-cap).

    Near zero it is the identity (``tanh(x) ~ x``), so small scores pass unchanged; a large score can no
    longer dominate the softmax by growing without bound. Apply it to the *scaled* scores *before* the mask:
    a masked ``-inf`` capped would become ``-cap``, a finite score, and the hidden key would come back.

    Shapes:
        scores: any; output: like ``scores``.

    Example:
        >>> soft_cap(torch.tensor([0.1, 10.0, float("-inf")]), 5.0)  # -inf would come back as -5: mask after
        tensor([ 0.1000,  4.8201, -5.0000])

    Raises:
        ValueError, TypeError: if ``cap`` is not a positive finite number.
    """
    tensor("scores", scores)
    return SoftCap(cap)(scores)  # the cap checked where the piece is made


def check_softcap(softcap: object) -> float | None:
    """``softcap`` as a positive finite float, or ``None``; a ``TypeError``/``ValueError`` naming it otherwise."""
    return None if softcap is None else positive("softcap", softcap, "Gemma 2 uses 50.0")


def check_sinks(sinks: object, num_heads: int, dtype: torch.dtype, device: torch.device) -> Tensor | None:
    """``sinks``: one logit per query head, ``(H,)``, in the queries' dtype and on their device (or ``None``)."""
    if sinks is None:
        return None
    if not isinstance(sinks, Tensor):
        raise TypeError(f"sinks must be a torch.Tensor of shape (H,) or None; got {type(sinks).__name__}")
    _check_query_sizes(num_heads, dtype, device)
    if not sinks.dtype.is_floating_point:
        raise ValueError(f"sinks must be floating logits like the queries ({dtype}); got dtype {sinks.dtype}")
    if tuple(sinks.shape) != (num_heads,):
        raise ValueError(f"sinks must have shape (H,) = ({num_heads},), one logit per query head; "
                         f"got shape {tuple(sinks.shape)}")
    if sinks.dtype != dtype:
        raise ValueError(f"sinks have dtype {sinks.dtype} but the queries are {dtype}; convert them: sinks.to({dtype})")
    if sinks.device != device:
        raise ValueError(f"sinks are on {sinks.device} but the queries are on {device}; move them there")
    return sinks


def _check_query_sizes(num_heads: object, dtype: object, device: object) -> None:
    """What a check of the score changes is told about the queries: ``H``, their dtype and their device."""
    size("num_heads", num_heads)
    instance("dtype", dtype, torch.dtype, "a torch.dtype such as torch.float32 (the queries')")
    instance("device", device, torch.device, "a torch.device (the queries')")


def check_score_mods(softcap: object, sinks: object, num_heads: int, dtype: torch.dtype,
                     device: torch.device) -> dict[str, float | Tensor]:
    """The checked ``softcap`` and ``sinks`` as keyword arguments for an implementation, only those that are set.

    An implementation that cannot cap or add sinks is then called exactly as before they existed.
    """
    _check_query_sizes(num_heads, dtype, device)
    mods: dict[str, float | Tensor] = {}
    cap = check_softcap(softcap)
    if cap is not None:
        mods["softcap"] = cap
    checked = check_sinks(sinks, num_heads, dtype, device)
    if checked is not None:
        mods["sinks"] = checked
    return mods


class SoftCap:
    """Gemma 2's soft-cap as a piece of :func:`lessons_src.functional.attention`: ``score_mods=SoftCap(50.0)``.

    Example:
        >>> SoftCap(50.0)
        SoftCap(50.0)
    """

    __slots__ = ("cap",)

    def __init__(self, cap: float) -> None:
        self.cap = positive("cap", cap, "Gemma 2 uses 50.0")

    def __call__(self, scores: Tensor) -> Tensor:
        """``cap * tanh(scores / cap)``, the cap checked when the piece was made (so a traced score_mod sees none)."""
        return self.cap * torch.tanh(scores / self.cap)

    def __repr__(self) -> str:
        return f"SoftCap({self.cap})"


class Sinks:
    """gpt-oss's learned sinks as a piece of :func:`lessons_src.functional.attention`: one logit per query head,
    ``score_mods=Sinks(logits)``; checked against the queries when attention runs (shape ``(H,)``, their dtype
    and device). The tensor is kept as it is, so its gradient flows.

    Example:
        >>> Sinks(torch.zeros(4)).logits.shape
        torch.Size([4])
    """

    __slots__ = ("logits",)

    def __init__(self, logits: Tensor) -> None:
        if not isinstance(logits, Tensor):
            raise TypeError(f"Sinks needs logits, a tensor of shape (H,): one logit per query head; got "
                            f"{type(logits).__name__}")
        self.logits = tensor("logits", logits, ndim=1, shape="(H,), one logit per query head")

    def __repr__(self) -> str:
        return f"Sinks(shape {tuple(self.logits.shape)})"


def score_mod_arguments(score_mods: object, num_heads: int, dtype: torch.dtype,
                        device: torch.device) -> dict[str, float | Tensor]:
    """``score_mods`` (``None``, a piece, or a sequence of :class:`SoftCap` and :class:`Sinks`) as the checked
    keyword arguments an implementation takes (``softcap=``, ``sinks=``), only those that are set.

    Raises:
        TypeError: for anything but those pieces; ValueError: for a piece given twice, or sinks that do not fit.
    """
    _check_query_sizes(num_heads, dtype, device)
    pieces = () if score_mods is None else (score_mods,) if isinstance(score_mods, SoftCap | Sinks) else score_mods
    if not isinstance(pieces, tuple | list) or not all(isinstance(p, SoftCap | Sinks) for p in pieces):
        raise TypeError(f"score_mods must be SoftCap(cap), Sinks(logits), a list of them or None; got {score_mods!r}")
    kinds = [type(p).__name__ for p in pieces]
    if len(set(kinds)) < len(kinds):
        raise ValueError(f"score_mods has a piece twice: {kinds}; give each at most once")
    caps = [p.cap for p in pieces if isinstance(p, SoftCap)]
    sinks = [p.logits for p in pieces if isinstance(p, Sinks)]
    return check_score_mods(caps[0] if caps else None, sinks[0] if sinks else None, num_heads, dtype, device)


def _check_heads(where: str, q: Tensor, k: Tensor, v: Tensor, sinks: Tensor, mask: object = None) -> None:
    """q ``(B, H, T, E)``, k ``(B, K, S, E)``, v ``(B, K, S, Ev)`` with ``H`` a multiple of ``K``, sinks ``(H,)``."""
    for name, t in (("q", q), ("k", k), ("v", v), ("sinks", sinks)):
        if not isinstance(t, Tensor):
            raise TypeError(f"{where}: {name} must be a torch.Tensor; got {type(t).__name__}")
        if not t.dtype.is_floating_point:
            raise ValueError(f"{where}: {name} must be floating, like the queries; got dtype {t.dtype}")
    if mask is not None:
        mask = tensor("mask", mask, ndim=(1, 2, 3, 4), shape="broadcastable to (B, H, T, S)", dtype="any")
        if mask.dtype != torch.bool and not mask.dtype.is_floating_point:
            raise ValueError(f"{where}: mask must be bool (True = may attend) or floating (added to the scores); "
                             f"got dtype {mask.dtype}")
    shapes = f"q {tuple(q.shape)}, k {tuple(k.shape)}, v {tuple(v.shape)}"
    if q.ndim != 4 or k.ndim != 4 or k.shape[:3] != v.shape[:3] or q.shape[0] != k.shape[0] \
            or q.shape[-1] != k.shape[-1] or k.shape[1] < 1 or q.shape[1] % k.shape[1]:
        raise ValueError(f"{where} needs q (B, H, T, E), k (B, K, S, E), v (B, K, S, Ev) with H a multiple of K; "
                         f"got {shapes}")
    check_sinks(sinks, q.shape[1], q.dtype, q.device)


class _SinkFlashCPU(torch.autograd.Function):
    """Attention with sinks from torch's CPU flash kernel, forward and backward (see :func:`sink_flash_cpu`)."""

    @staticmethod
    def forward(ctx: Any, q: Tensor, k: Tensor, v: Tensor, sinks: Tensor, is_causal: bool, mask: Tensor | None,
                scale: float) -> Tensor:
        out, lse = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(
            q, k, v, 0.0, is_causal, attn_mask=mask, scale=scale
        )  # (B, H, T, E), (B, H, T)
        sink = sinks.view(1, -1, 1).to(lse.dtype).expand_as(lse)  # (B, H, T): the sink, a state with no value
        y, lse_all = merge_states([(out, lse), (torch.zeros_like(out), sink)])  # the keys' state, then the sink's
        y = y.to(q.dtype)  # a query that sees no key: 0, even if the kernel gave NaN there (lse = -inf: not read)
        ctx.save_for_backward(q, k, v, sinks, mask, y, lse_all)
        ctx.config = (is_causal, scale)
        return y

    @staticmethod
    def backward(ctx: Any, dy: Tensor) -> tuple[Tensor | None, ...]:
        q, k, v, sinks, mask, y, lse_all = ctx.saved_tensors
        is_causal, scale = ctx.config
        if torch.is_grad_enabled():  # create_graph=True: these gradients will be differentiated again
            return (*_differentiable_grads(ctx.needs_input_grad[:4], q, k, v, sinks, mask, is_causal, scale, dy),
                    None, None, None)
        dq, dk, dv = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu_backward(
            dy.contiguous(), q, k, v, y, lse_all, 0.0, is_causal, attn_mask=mask, scale=scale
        )
        p_sink = torch.exp(sinks.view(1, -1, 1).to(lse_all.dtype) - lse_all)  # (B, H, T)
        d_sinks = -(p_sink * (dy * y).sum(dim=-1)).sum(dim=(0, 2))  # (H,): dS_sink = P_sink (0 - D)
        return dq, dk, dv, d_sinks.to(sinks.dtype), None, None, None


def _differentiable_grads(needed: tuple[bool, ...], q: Tensor, k: Tensor, v: Tensor, sinks: Tensor,
                          mask: Tensor | None, is_causal: bool, scale: float, dy: Tensor) -> list[Tensor | None]:
    """The gradients of q, k, v and the sinks as a graph of plain ops, for a second derivative.

    The kernel's backward has no derivative of its own, so the same attention is written out (the sink as a key,
    then softmax and matrix products) and differentiated with ``create_graph=True``: exact to every order.
    """
    k1, v1, bias = sinks_as_a_key(q, k, v, _causal_into_mask(mask, is_causal, q.shape[2], k.shape[2], q.device), sinks)
    y = torch.softmax(q @ k1.mT * scale + bias, dim=-1) @ v1  # (B, H, T, E)
    wanted = [t for t, need in zip((q, k, v, sinks), needed, strict=True) if need]
    grads = iter(torch.autograd.grad(y, wanted, dy, create_graph=True))
    return [next(grads) if need else None for need in needed]


def _causal_into_mask(mask: Tensor | None, is_causal: bool, T: int, S: int, device: torch.device) -> Tensor | None:
    """SDPA's causal flag (top-left) folded into ``mask``, for a way in that takes the mask alone."""
    if not is_causal:
        return mask
    tril = torch.ones(T, S, dtype=torch.bool, device=device).tril()  # (T, S), top-left
    if mask is None:
        return tril
    return mask & tril if mask.dtype == torch.bool else mask.masked_fill(~tril, -math.inf)


def _rows_contiguous(t: Tensor) -> Tensor:
    """``t`` with stride 1 along its last dim, as torch's CPU flash kernel reads it (it does not check)."""
    return t if t.stride(-1) == 1 else t.contiguous()


def sink_flash_cpu(q: Tensor, k: Tensor, v: Tensor, sinks: Tensor, *, is_causal: bool, mask: Tensor | None,
                   scale: float) -> Tensor:
    """Attention with sinks by torch's CPU flash kernel: the plain kernel's speed, exact gradients.

    The kernel returns each query's log-sum-exp ``lse`` over the keys. The sink joins the normaliser,
    ``lse' = log(exp(lse) + exp(sink))``, and the output ``sum_j exp(s_j - lse') v_j`` is the kernel's output
    times ``exp(lse - lse')``. The backward pass is the kernel's own, given that output and ``lse'``: it
    recomputes ``P = exp(s - lse')``, the weights with the sink, and ``D = rowsum(dO * O)`` with the sinks'
    output, so its gradients are the sink attention's (FlashAttention with sinks, as gpt-oss's kernels do it).
    The sink's own gradient is ``-sum_t P_sink(t) D(t)``. The kernel is private to torch
    (``aten._scaled_dot_product_flash_attention_for_cpu``): recheck it when torch is upgraded.

    Args:
        q, k, v: one KV head per query head (repeat grouped heads first), float32 or float64, on the CPU, with
            ``T, S >= 1`` and the values' width equal to the keys' (what the kernel accepts).
        sinks: one logit per head.
        is_causal: the kernel's causal flag (top-left; equal to bottom-right only when ``T == S``).
        mask: bool (``True`` = may attend) or float mask broadcastable to ``(B, H, T, S)``, or ``None``.
        scale: the score multiplier.

    Shapes:
        q ``(B, H, T, E)``, k and v ``(B, H, S, E)``, sinks ``(H,)``, mask up to ``(B, H, T, S)``; output
        ``(B, H, T, E)``.

    Raises:
        ValueError, TypeError: naming the inputs the kernel would refuse (or mis-read) and what it accepts.
    """
    _check_heads("sink_flash_cpu", q, k, v, sinks, mask)
    flag("is_causal", is_causal)
    scale = positive("scale", scale)
    if q.device.type != "cpu" or q.dtype not in (torch.float32, torch.float64) or k.shape[1] != q.shape[1] \
            or v.shape[-1] != q.shape[-1] or 0 in (q.shape[2], k.shape[2]) or not q.dtype == k.dtype == v.dtype:
        raise ValueError(f"sink_flash_cpu runs torch's CPU flash kernel: float32 or float64 CPU tensors of one dtype, "
                         f"one KV head per query head, values as wide as keys, T and S at least 1; got q "
                         f"{tuple(q.shape)} {q.dtype} on {q.device}, k {tuple(k.shape)} {k.dtype}, v {tuple(v.shape)} "
                         f"{v.dtype}: use sinks_as_a_key for the rest")
    if mask is not None and mask.requires_grad:
        raise ValueError("sink_flash_cpu gives no gradient to its mask, and this mask requires one: use "
                         "sinks_as_a_key (sdpa_with_sinks takes that way for such a mask)")
    if mask is not None and mask.dtype == torch.bool:
        mask = q.new_zeros(mask.shape).masked_fill(~mask, float("-inf"))  # the kernel adds a float mask
    if mask is not None:
        mask = _rows_contiguous(mask.reshape((1,) * (4 - mask.ndim) + tuple(mask.shape)).to(q.dtype))
    q, k, v = _rows_contiguous(q), _rows_contiguous(k), _rows_contiguous(v)  # the kernel's reading of memory
    out: Tensor = _SinkFlashCPU.apply(q, k, v, sinks.to(q.dtype), is_causal, mask, scale)  # type: ignore[no-untyped-call]
    return out


def sinks_as_a_key(
    q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None, sinks: Tensor
) -> tuple[Tensor, Tensor, Tensor]:
    """The sink as one more key for a kernel that takes a float mask: ``(k1, v1, bias)`` to attend with.

    The extra key, put first, is zero, so it scores ``q . 0 * scale = 0``; the float mask ``bias`` adds head
    ``h``'s sink logit to that column and the caller's mask (``-inf`` where hidden) to the others. The softmax
    then runs over the keys and the sink, and the sink's value, zero, adds nothing to the output; a query that
    sees no key puts all its weight on the sink and gets zero. The sink logits reach the scores only through
    the mask, so their gradient is the kernel's gradient of its mask: exact, on every device, with dropout.

    Shapes:
        q ``(B, H, T, E)``, k ``(B, K, S, E)``, v ``(B, K, S, Ev)``, mask broadcastable to ``(B, H, T, S)`` or
        ``None``, sinks ``(H,)``; returns k1 ``(B, K, 1 + S, E)``, v1 ``(B, K, 1 + S, Ev)``, bias
        ``(B or 1, H, T or 1, 1 + S)``.

    Example:
        >>> q, kv = torch.randn(1, 2, 3, 4), torch.randn(1, 2, 5, 4)
        >>> k1, v1, bias = sinks_as_a_key(q, kv, kv, None, torch.zeros(2))
        >>> k1.shape, bias.shape
        (torch.Size([1, 2, 6, 4]), torch.Size([1, 2, 1, 6]))

    Raises:
        ValueError, TypeError: if the shapes do not fit together or the sinks are not ``(H,)`` like ``q``.
    """
    _check_heads("sinks_as_a_key", q, k, v, sinks, mask)
    B, H = q.shape[:2]
    K, S = k.shape[1], k.shape[2]
    k1 = torch.cat([k.new_zeros(B, K, 1, k.shape[-1]), k], dim=2)  # (B, K, 1 + S, E): the sink's key is zero
    v1 = torch.cat([v.new_zeros(B, K, 1, v.shape[-1]), v], dim=2)  # (B, K, 1 + S, Ev): so is its value
    if mask is None:
        bias = q.new_zeros(1, 1, 1, S)
    elif mask.dtype == torch.bool:
        bias = q.new_zeros(mask.shape).masked_fill(~mask, float("-inf"))
    else:
        bias = mask.to(q.dtype)
    bias = bias.reshape((1,) * (4 - bias.ndim) + tuple(bias.shape))  # (b, H or 1, T or 1, S or 1)
    b, rows = bias.shape[0], bias.shape[2]
    sink = sinks.to(q.dtype).view(1, H, 1, 1).expand(b, H, rows, 1)  # (b, H, T or 1, 1)
    return k1, v1, torch.cat([sink, bias.expand(b, H, rows, S)], dim=-1)  # bias: (b, H, T or 1, 1 + S)


def sdpa_with_sinks(q: Tensor, k: Tensor, v: Tensor, sinks: Tensor, *, mask: Tensor | None, is_causal: bool,
                    scale: float, dropout_p: float = 0.0) -> Tensor:
    """Attention with a sink logit per head through PyTorch's SDPA kernels, exact forward and backward.

    Where torch's CPU flash kernel accepts the inputs (CPU, float32/64, no dropout, values as wide as keys, ``T``
    and ``S`` at least 1, a mask that needs no gradient): :func:`sink_flash_cpu`, at the plain kernel's speed.
    Anywhere else: the sink as one more key (:func:`sinks_as_a_key`), through ``F.scaled_dot_product_attention``.

    Args:
        q, k, v: queries, keys and values, ``H`` a multiple of ``K`` (grouped heads are shared, not copied, on
            the second way).
        sinks: one logit per query head.
        mask: bool (``True`` = may attend) or float mask broadcastable to ``(B, H, T, S)``, or ``None``.
        is_causal: SDPA's causal flag, aligned top-left (with ``T == S`` the same as bottom-right).
        scale: the score multiplier.
        dropout_p: probability of dropping a weight (the second way).

    Shapes:
        q ``(B, H, T, E)``, k ``(B, K, S, E)``, v ``(B, K, S, Ev)``, sinks ``(H,)``; output ``(B, H, T, Ev)``.

    Example:
        >>> q, kv, sinks = torch.randn(1, 4, 3, 8), torch.randn(1, 2, 3, 8), torch.zeros(4)
        >>> out = sdpa_with_sinks(q, kv, kv, sinks, mask=None, is_causal=True, scale=8**-0.5)
        >>> out.shape  # each query put some weight on its sink, which has no value
        torch.Size([1, 4, 3, 8])

    Raises:
        ValueError, TypeError: if the shapes do not fit together or the sinks are not ``(H,)`` like ``q``.
    """
    _check_heads("sdpa_with_sinks", q, k, v, sinks, mask)
    flag("is_causal", is_causal)
    scale, dropout_p = positive("scale", scale), probability("dropout_p", dropout_p)
    H, T, E = q.shape[1:]
    K, S = k.shape[1], k.shape[2]
    if (q.device.type == "cpu" and dropout_p == 0.0 and q.dtype in (torch.float32, torch.float64)
            and q.dtype == k.dtype == v.dtype and v.shape[-1] == E and T > 0 and S > 0
            and not (mask is not None and mask.requires_grad)):  # what the CPU flash kernel accepts
        k, v = k.repeat_interleave(H // K, dim=1), v.repeat_interleave(H // K, dim=1)  # (B, H, S, E): one per head
        return sink_flash_cpu(q, k, v, sinks, is_causal=is_causal, mask=mask, scale=scale)
    mask = _causal_into_mask(mask, is_causal, T, S, q.device)  # the flag as a mask: the sink's column stays
    k1, v1, bias = sinks_as_a_key(q, k, v, mask, sinks)  # (B, K, 1 + S, E), (B, K, 1 + S, Ev), (b, H, T or 1, 1 + S)
    return F.scaled_dot_product_attention(q, k1, v1, attn_mask=bias, dropout_p=dropout_p, scale=scale,
                                          enable_gqa=K != H)  # (B, H, T, Ev)
