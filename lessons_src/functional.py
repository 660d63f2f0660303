"""Attention as one function: ``attention(q, k, v, ...)``, its backends by name, and the explicit formula.

:func:`attention` checks its inputs once, prepares the mask once (:func:`lessons_src.masks.prepare_mask`) and runs
a backend from :data:`ATTENTION_FUNCTIONS`: ``"sdpa"`` (PyTorch's fused kernel, the default), ``"eager"`` (the
formula written out, which returns the weights), and those other files register (``"tiled"``, ``"triton"``).
Each backend declares what it :class:`Supports`; ``attention()`` refuses the rest once, naming the backends that
can. Masks are PyTorch SDPA's (bool ``True`` = may attend, float = added); ``is_causal`` is bottom-right.
``K`` key/value heads may serve ``H`` query heads (GQA; MQA with ``K = 1``): head ``h`` reads KV head
``h // (H // K)``. The layer that projects to heads is :class:`lessons_src.layer.MultiHeadAttention`.

Needs ``masks.py``, ``score_mods.py`` and ``_checks.py``.

References:
    Vaswani et al., "Attention Is All You Need", NeurIPS 2017 (arXiv:1706.03762), section 3.2.
    Ainslie et al., "GQA: Training Generalized Multi-Query Transformer Models from Multi-Head
    Checkpoints", EMNLP 2023 (arXiv:2305.13245).
    PyTorch documentation of ``torch.nn.functional.scaled_dot_product_attention``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, NamedTuple, Protocol

import torch
import torch.nn.functional as F
from torch import Tensor

from ._checks import check_qkv, positive, size
from .masks import prepare_mask
from .score_mods import Sinks, SoftCap, score_mod_arguments, sdpa_with_sinks, soft_cap

if TYPE_CHECKING:
    from collections.abc import Sequence

    from .masks import MaskLike, PreparedMask


__all__ = [
    "ATTENTION_FUNCTIONS",
    "ATTENTION_SUPPORTS",
    "AttentionFunction",
    "AttentionResult",
    "Supports",
    "attention",
    "check_implementation",
    "check_supports",
    "eager_attention",
    "explicit_attention",
    "register_attention",
    "repeat_kv",
    "sdpa_attention",
]


# --------------------------------------------------------------------------- implementations


class AttentionResult(NamedTuple):
    """What an attention implementation returns.

    Attributes:
        output: ``(B, H, T, Ev)``.
        weights: the attention probabilities ``(B, H, T, S)`` (after dropout), or ``None`` for
            implementations that never build them.
        lse: the log-sum-exp of each query's scaled, masked scores ``(B, H, T)``, for implementations
            that compute it (tiled attention keeps it for its backward pass), else ``None``.
    """

    output: Tensor
    weights: Tensor | None = None
    lse: Tensor | None = None


class AttentionFunction(Protocol):
    """``(q, k, v, mask, *, scale, dropout_p) -> AttentionResult``, with ``q (B, H, T, E)``, ``k (B, K, S, E)``.

    An implementation that can cap the scores or add sinks also takes ``softcap=`` and ``sinks=`` (see
    :func:`attention`); they are passed only when set, so one that cannot still works without them.
    """

    def __call__(
        self, q: Tensor, k: Tensor, v: Tensor, mask: PreparedMask, *, scale: float, dropout_p: float
    ) -> AttentionResult: ...


def repeat_kv(x: Tensor, n_rep: int) -> Tensor:
    """Repeat each key/value head ``n_rep`` times, so ``K`` KV heads line up with ``H = K * n_rep`` query heads.

    Equivalent to ``torch.repeat_interleave(x, n_rep, dim=1)``: head ``k`` becomes heads
    ``k * n_rep, ..., k * n_rep + n_rep - 1``. It copies the keys and values ``n_rep`` times, which is
    what grouped-query attention exists to avoid; :func:`sdpa_attention` does not need it.

    Shapes:
        x: ``(B, K, S, E)``; output: ``(B, K * n_rep, S, E)``.

    Example:
        >>> repeat_kv(torch.arange(2.0).view(1, 2, 1, 1), 3).flatten().tolist()
        [0.0, 0.0, 0.0, 1.0, 1.0, 1.0]
    """
    n_rep = size("n_rep", n_rep)
    if not isinstance(x, Tensor) or x.ndim != 4:
        raise ValueError(f"x must be (B, K, S, E); got shape {tuple(getattr(x, 'shape', ()))}")
    if n_rep == 1:
        return x
    B, K, S, E = x.shape
    return x[:, :, None].expand(B, K, n_rep, S, E).reshape(B, K * n_rep, S, E)  # (B, K * n_rep, S, E)


def _softmax_zero_rows(scores: Tensor) -> Tensor:
    """Softmax over the last dim in which a row of ``-inf`` gives zeros, with finite gradients.

    ``scores.softmax(-1)`` on a row of ``-inf`` computes ``exp(-inf - (-inf)) = NaN``, and zeroing the
    result afterwards still leaves NaN in the backward pass. Shifting such rows by 0 instead of their
    (infinite) maximum gives ``exp(-inf) = 0`` everywhere, and dividing by 1 where the sum is 0 keeps
    both the weights and their gradients at zero. Half-precision scores are summed in float32.
    """
    if scores.shape[-1] == 0:
        return scores
    s = scores.float() if scores.dtype in (torch.float16, torch.bfloat16) else scores
    row_max = s.amax(dim=-1, keepdim=True).detach()  # softmax does not depend on the shift: no gradient
    row_max = torch.where(torch.isfinite(row_max), row_max, torch.zeros_like(row_max))
    e = torch.exp(s - row_max)
    total = e.sum(dim=-1, keepdim=True)
    return (e / torch.where(total > 0, total, torch.ones_like(total))).to(scores.dtype)


def eager_attention(
    q: Tensor, k: Tensor, v: Tensor, mask: PreparedMask, *, scale: float, dropout_p: float,
    softcap: float | None = None, sinks: Tensor | None = None,
) -> AttentionResult:
    """The textbook formula, ``softmax(q k^T * scale + mask) v``, which builds and returns the weights and
    each query's log-sum-exp (float32 for half-precision inputs, else in their dtype).

    With ``softcap`` the scaled scores are capped (:func:`soft_cap`) before the mask; with ``sinks`` each
    head's sink logit is one more column of the softmax, dropped before the values (it has none), so a
    query's weights sum to less than 1.

    Shapes:
        q ``(B, H, T, E)``, k ``(B, K, S, E)``, v ``(B, K, S, Ev)``, sinks ``(H,)``; output ``(B, H, T, Ev)``,
        weights ``(B, H, T, S)``.
    """
    B, H, T, _ = q.shape
    n_rep = H // k.shape[1]
    k, v = repeat_kv(k, n_rep), repeat_kv(v, n_rep)  # (B, H, S, E), (B, H, S, Ev)
    scores = (q @ k.transpose(-2, -1)) * scale  # (B, H, T, S)
    if softcap is not None:
        scores = soft_cap(scores, softcap)  # before the mask: a hidden key stays at -inf
    full = mask.combined()
    if full is not None and full.dtype == torch.bool:
        scores = scores.masked_fill(~full, float("-inf"))
    elif full is not None:
        scores = scores + full.to(scores.dtype)
    if sinks is not None:  # the sink is one more column of the softmax, dropped before the values
        scores = torch.cat([scores, sinks.to(scores.dtype).view(1, H, 1, 1).expand(B, H, T, 1)], dim=-1)
    weights = _softmax_zero_rows(scores)  # (B, H, T, S or S + 1); a row with no visible key is all zeros
    lse = torch.logsumexp(scores.float() if scores.dtype in (torch.float16, torch.bfloat16) else scores,
                          dim=-1)  # (B, H, T), sink included, float32 or float64; -inf for a row that sees nothing
    if sinks is not None:
        weights = weights[..., :-1]  # (B, H, T, S)
    if dropout_p > 0.0:
        weights = F.dropout(weights, p=dropout_p)
    return AttentionResult(weights @ v, weights, lse)  # (B, H, T, Ev), (B, H, T, S), (B, H, T)


def sdpa_attention(
    q: Tensor, k: Tensor, v: Tensor, mask: PreparedMask, *, scale: float, dropout_p: float,
    softcap: float | None = None, sinks: Tensor | None = None,
) -> AttentionResult:
    """PyTorch's fused ``F.scaled_dot_product_attention``, for ``H`` query heads sharing ``K`` KV heads.

    * no mask and a causal flag with ``T == S`` (a prefill): SDPA's own causal flag; with ``T < S``
      (new tokens after cached ones) ``causal_lower_right``, which keeps SDPA on its fused kernel;
    * ``K < H``: the ``n_rep`` query heads of each group are stacked along the query axis,
      ``q (B, H, T, E) -> (B, K, n_rep * T, E)``, so each KV head is read once and serves its whole
      group in one matmul (the mask is tiled the same way). This is what makes GQA/MQA decoding fast;
    * ``sinks``: one more column of the softmax, exact forward and backward: see
      :func:`lessons_src.score_mods.sdpa_with_sinks`;
    * ``softcap``: not supported (:data:`ATTENTION_SUPPORTS`; :func:`attention` refuses it, naming those that cap).
      SDPA applies no function to its scores, and capping after it is impossible; a silent switch to another
      implementation would hide a slower path.

    Shapes:
        q ``(B, H, T, E)``, k ``(B, K, S, E)``, v ``(B, K, S, Ev)``, sinks ``(H,)``; output ``(B, H, T, Ev)``.

    """
    B, H, T, E = q.shape
    K, S, Ev = k.shape[1], k.shape[2], v.shape[-1]
    if sinks is not None:  # one more softmax column, exact forward and backward (lessons_src.score_mods)
        flag = mask.causal and mask.mask is None and mask.window is None and T == S  # top-left = bottom-right
        full = None if flag else mask.combined()
        return AttentionResult(sdpa_with_sinks(q, k, v, sinks, mask=full, is_causal=flag, scale=scale,
                                               dropout_p=dropout_p))
    n_rep = H // K
    # (under torch.compile the causal_lower_right object cannot be traced; a bool mask is used instead)
    lower_right_ok = T == S or not torch.compiler.is_compiling()
    if mask.mask is None and mask.window is None and (not mask.causal or T <= S) and lower_right_ok:
        if not mask.causal:
            flag, bias = False, None
        elif T == S:
            flag, bias = True, None
        else:  # T < S: queries are the last T of S positions
            # imported here, not at the top: the module loads torch._dynamo, which doubles the time it takes
            # to import lessons_src (every snippet, worker process and build pays it)
            from torch.nn.attention.bias import causal_lower_right

            flag, bias = False, causal_lower_right(T, S)
        if K == H or flag:
            y = F.scaled_dot_product_attention(
                q, k, v, attn_mask=bias, is_causal=flag, dropout_p=dropout_p, scale=scale, enable_gqa=K != H
            )  # (B, H, T, Ev)
            return AttentionResult(y)
        if bias is None:  # GQA without a mask: one matmul per KV head for its whole group
            qg = q.reshape(B, K, n_rep * T, E)  # row r * T + t is query head k * n_rep + r
            y = F.scaled_dot_product_attention(qg, k, v, dropout_p=dropout_p, scale=scale)
            return AttentionResult(y.reshape(B, H, T, Ev))
    full = mask.combined()  # (.., T, S), 4-D or (T, S)
    if K == H:
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=full, dropout_p=dropout_p, scale=scale)
        return AttentionResult(_zero_unseen(y, full))
    assert full is not None
    full = full.reshape((1,) * (4 - full.ndim) + tuple(full.shape))
    full = full.expand(full.shape[0], H, T, S).reshape(full.shape[0], K, n_rep * T, S)  # tiled like qg
    qg = q.reshape(B, K, n_rep * T, E)  # (B, K, n_rep * T, E)
    y = F.scaled_dot_product_attention(qg, k, v, attn_mask=full, dropout_p=dropout_p, scale=scale)
    return AttentionResult(_zero_unseen(y, full).reshape(B, H, T, Ev))  # (B, H, T, Ev)


def _zero_unseen(y: Tensor, mask: Tensor | None) -> Tensor:
    """``y`` with 0 for every query that ``mask`` lets see no key, as every implementation answers.

    On the CPU, SDPA gives those rows 0 itself; its fused CUDA kernels in float16 and bfloat16 do not (an H200
    gave outputs off by 1.4 for them: ``tests/core/test_gpu.py``, the ``T > S`` case).
    """
    if mask is None:
        return y
    seen = (mask if mask.dtype == torch.bool else mask > float("-inf")).any(dim=-1, keepdim=True)
    return y.masked_fill(~seen, 0.0)


@dataclass(frozen=True)
class Supports:
    """What an implementation can do, declared once where it is registered; :func:`attention` refuses the rest.

    Attributes:
        mask: a mask besides the causal flag (a tensor, or a rule other than ``causal()``, a sliding window
            included).
        dropout: ``dropout_p > 0``.
        softcap: a soft-cap of the scores (``softcap=``, passed to the implementation only when set).
        sinks: learned sink logits (``sinks=``, likewise).
        weights: it returns the attention weights (``AttentionResult.weights``).
        lse: it returns each query's log-sum-exp (``AttentionResult.lse``), sinks included.
    """

    mask: bool = True
    dropout: bool = True
    softcap: bool = False
    sinks: bool = False
    weights: bool = False
    lse: bool = False


ATTENTION_FUNCTIONS: dict[str, AttentionFunction] = {"sdpa": sdpa_attention, "eager": eager_attention}
"""The implementations :func:`attention` and :class:`MultiHeadAttention` can run, by name."""

ATTENTION_SUPPORTS: dict[str, Supports] = {
    "sdpa": Supports(sinks=True),  # F.scaled_dot_product_attention returns no log-sum-exp and caps nothing
    "eager": Supports(softcap=True, sinks=True, weights=True, lse=True),
}
"""What each implementation of :data:`ATTENTION_FUNCTIONS` supports (:func:`register_attention` fills both)."""

_WHAT = {"mask": "take a mask besides is_causal", "dropout": "apply dropout", "softcap": "soft-cap the scores",
         "sinks": "add learned sinks", "weights": "return the attention weights", "lse": "return the log-sum-exp"}


def register_attention(name: str, fn: AttentionFunction, supports: Supports | None = None) -> None:
    """Make ``fn`` available as ``implementation=name``; ``supports`` says what it can do (default: a mask and
    dropout, nothing more). It receives inputs checked by :func:`attention`, which refuses what it cannot do."""
    if not isinstance(name, str) or not name:
        raise ValueError(f"an implementation needs a non-empty name; got {name!r}")
    if not callable(fn):
        raise TypeError(f"an implementation must be callable; got {type(fn).__name__}")
    if supports is not None and not isinstance(supports, Supports):
        raise TypeError(f"supports must be a Supports or None; got {type(supports).__name__}")
    ATTENTION_FUNCTIONS[name] = fn
    ATTENTION_SUPPORTS[name] = Supports() if supports is None else supports


def check_supports(implementation: str, **wanted: object) -> None:
    """Raise a ValueError unless ``implementation`` supports each feature asked for, naming those that do.

    ``wanted`` maps a feature of :class:`Supports` to what the caller gave for it (``softcap=50.0``); ``None``,
    ``False`` and ``0`` ask for nothing.

    Example:
        >>> check_supports("sdpa", sinks=torch.zeros(2))  # SDPA adds sinks: no error
    """
    check_implementation(implementation)
    can = ATTENTION_SUPPORTS[implementation]
    for feature, given in wanted.items():
        if feature not in _WHAT:
            raise ValueError(f"{feature} is not a feature an implementation declares; the features are {sorted(_WHAT)}")
        if given is None or given is False or (isinstance(given, int | float) and given == 0):
            continue
        if not getattr(can, feature):
            able = sorted(n for n, s in ATTENTION_SUPPORTS.items() if getattr(s, feature))
            shown = f"{feature}={given!r}" if not isinstance(given, Tensor) else f"{feature} given"
            raise ValueError(f"implementation={implementation!r} cannot {_WHAT[feature]} (got {shown}); use one "
                             f"that can: {', '.join(repr(n) for n in able) or 'none is registered'}")


def check_implementation(name: str) -> None:
    """Raise a ValueError naming ``name`` and the registered implementations unless it is one of them."""
    if not isinstance(name, str):
        raise TypeError(f"implementation must be a name (a str) in ATTENTION_FUNCTIONS; got {type(name).__name__}")
    if name not in ATTENTION_FUNCTIONS:
        raise ValueError(f"unknown attention implementation {name!r}; choose one of {sorted(ATTENTION_FUNCTIONS)}")


def attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    *,
    attn_mask: MaskLike = None,
    is_causal: bool = False,
    scale: float | None = None,
    dropout_p: float = 0.0,
    implementation: str = "sdpa",
    score_mods: SoftCap | Sinks | Sequence[SoftCap | Sinks] | None = None,
) -> AttentionResult:
    """Attention by any registered implementation, with one meaning for every input.

    Every implementation gets the same checked inputs (:func:`prepare_mask`) and, for finite inputs, one answer:

    * masks: a rule of :mod:`lessons_src.masks` (``sliding_window(4096)``, ``causal() & same_chunk(8192)``,
      ``same_document(ids)``, ``prefix_lm(p)``, ``padding(lengths)``, or one of your own), a tensor, bool
      (``True`` = may attend) or float (added; converted to the queries' dtype) with at most 4 dims,
      broadcastable to ``(B, H, T, S)``, or a list of them, all of which apply;
    * ``is_causal``: key ``j`` is visible to query ``i`` when ``j <= i + S - T`` (bottom-right aligned:
      the queries are the last ``T`` of ``S`` positions); combined with ``attn_mask`` when both are given;
      with ``T > S`` the first ``T - S`` queries see nothing;
    * a query that may attend to no key gets a zero output (and zero weights), with finite gradients;
    * NaN in ``q`` or ``k`` gives NaN in ``"eager"`` and ``"tiled"``, possibly zeros in ``"sdpa"`` (CPU); ``scale`` is a
      finite number above 0 (a tensor is refused: its gradient would be dropped).

    Args:
        q, k, v: queries, keys and values (shapes below).
        attn_mask: optional mask, see above.
        is_causal: also apply the bottom-right causal mask.
        scale: score multiplier, default ``1 / sqrt(E)``.
        dropout_p: probability of zeroing a weight (the rest scaled by ``1 / (1 - dropout_p)``).
        implementation: a name in :data:`ATTENTION_FUNCTIONS`: ``"sdpa"`` (fused kernel), ``"eager"`` (explicit,
            with the weights), ``"tiled"`` (FlashAttention-2 in PyTorch; registered by :mod:`lessons_src.flash`) or
            ``"triton"`` (the same in Triton kernels, causal or not, no mask tensor; registered by
            :mod:`lessons_src.triton_flash`); each declares what it supports (:data:`ATTENTION_SUPPORTS`).
        score_mods: changes inside the softmax, from :mod:`lessons_src.score_mods`: ``SoftCap(c)`` caps the
            scaled scores at ``c * tanh(s / c)`` before the mask (Gemma 2); ``Sinks(logits)`` adds one learned
            logit per query head ``(H,)``, in the queries' dtype, as a column of the softmax with no value
            (gpt-oss); or a list of both.

    Returns:
        An :class:`AttentionResult` ``(output, weights, lse)``; ``weights`` and ``lse`` are ``None`` where the
        implementation does not declare them (with sinks the weights are the keys', summing to less than 1).

    Shapes:
        q ``(B, H, T, E)``, k ``(B, K, S, E)``, v ``(B, K, S, Ev)`` with ``H`` a multiple of ``K``,
        sinks ``(H,)``; output ``(B, H, T, Ev)``, weights ``(B, H, T, S)``, lse ``(B, H, T)``.

    Raises:
        ValueError: on an unknown implementation (the message lists them), mismatched shapes, dtypes or
            devices, a mask that does not fit, ``dropout_p`` outside ``[0, 1)``, sinks of the wrong shape, dtype
            or device, or what the implementation does not support (the message names those that do).
        TypeError: if an input is not a tensor, or a score change is not one of the pieces.

    Example:
        >>> from lessons_src.masks import sliding_window
        >>> q, kv = torch.randn(1, 4, 3, 8), torch.randn(1, 2, 5, 8)  # 4 query heads, 2 KV heads
        >>> out, weights, _ = attention(q, kv, kv, attn_mask=sliding_window(2), implementation="eager")
        >>> out.shape, weights.sum(-1).allclose(torch.ones(1, 4, 3))  # each query's weights sum to 1
        (torch.Size([1, 4, 3, 8]), True)
    """
    check_implementation(implementation)
    check_qkv(q, k, v)
    if isinstance(dropout_p, bool) or not isinstance(dropout_p, int | float) or not 0.0 <= dropout_p < 1.0:
        raise ValueError(f"dropout_p must be a number in [0, 1); got {dropout_p!r}")
    B, H, T, E = q.shape
    mask = prepare_mask(attn_mask, is_causal=is_causal, shape=(B, H, T, k.shape[2]), dtype=q.dtype, device=q.device)
    scale = 1.0 / math.sqrt(E) if scale is None else positive("scale", scale, f"None for 1/sqrt(E) = {E ** -0.5:.4g}")
    mods = score_mod_arguments(score_mods, H, q.dtype, q.device)
    check_supports(implementation, mask=mask.beyond_causal(), dropout=dropout_p, **mods)
    return ATTENTION_FUNCTIONS[implementation](q, k, v, mask, scale=scale, dropout_p=float(dropout_p), **mods)


def explicit_attention(q: Tensor, k: Tensor, v: Tensor, *, attn_mask: MaskLike = None, is_causal: bool = False,
                       scale: float | None = None, dropout_p: float = 0.0) -> tuple[Tensor, Tensor]:
    """The formula written out, ``softmax(q k^T / sqrt(E) + mask) v``, returning the output *and* the weights.

    It runs ``attention(..., implementation="eager")``, and unlike :func:`attention` returns a plain
    ``(output, weights)`` pair and takes 2-D ``(T, E)`` and 3-D ``(N, T, E)`` inputs as one batch, as a reader
    checking a formula by hand writes them. ``is_causal`` is bottom-right and may be combined with a mask.

    Args:
        q: queries.
        k: keys.
        v: values.
        attn_mask: bool (``True`` = may attend) or float (added) mask broadcastable to the scores.
        is_causal: hide future keys, bottom-right aligned (for ``T == S`` the usual lower triangle).
        scale: multiplier of the scores; default ``1 / sqrt(E)``.
        dropout_p: probability of zeroing a weight.

    Returns:
        ``(output, weights)``. A query that may attend to no key gets all-zero weights and a zero output
        (a bare softmax over a row of ``-inf`` would give ``NaN``), with finite gradients.

    Shapes:
        q ``(B, H, T, E)``, k ``(B, K, S, E)``, v ``(B, K, S, Ev)`` (3-D ``(N, T, E)`` and 2-D
        ``(T, E)`` inputs are treated as one batch); output ``(B, H, T, Ev)``, weights ``(B, H, T, S)``.

    Raises:
        ValueError: as :func:`attention`.

    Example:
        >>> q = k = v = torch.randn(1, 2, 3, 4)
        >>> out, w = explicit_attention(q, k, v, is_causal=True)
        >>> out.shape, w.shape
        (torch.Size([1, 2, 3, 4]), torch.Size([1, 2, 3, 3]))
    """
    ndim = q.ndim if isinstance(q, Tensor) else 0
    if isinstance(q, Tensor) and isinstance(k, Tensor) and isinstance(v, Tensor) and 2 <= ndim < 4:
        if not (k.ndim == v.ndim == ndim):
            raise ValueError(
                f"q, k, v must have the same number of dims; got {tuple(q.shape)}, {tuple(k.shape)}, {tuple(v.shape)}"
            )
        lead = (1,) * (4 - ndim)
        q, k, v = (t.reshape(lead + tuple(t.shape)) for t in (q, k, v))
    out, weights, _ = attention(
        q, k, v, attn_mask=attn_mask, is_causal=is_causal, scale=scale, dropout_p=dropout_p, implementation="eager"
    )
    assert weights is not None
    if 2 <= ndim < 4:
        out, weights = out.reshape(out.shape[4 - ndim :]), weights.reshape(weights.shape[4 - ndim :])
    return out, weights
