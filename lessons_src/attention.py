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

Two of today's changes to the scores act inside the softmax, so they are arguments of :func:`attention` that every
implementation honours: ``softcap`` (Gemma 2) and ``sinks`` (a learned logit per head that joins the softmax and
takes no value, gpt-oss); :mod:`lessons_src.score_mods` checks them and holds their SDPA paths. The changes
around the kernel (QK-norm, output gates) are pieces that :class:`MultiHeadAttention` is given by name; they live
in :mod:`lessons_src.mechanisms`, whose docstring gives the order of all of them and why.

References:
    Vaswani et al., "Attention Is All You Need", NeurIPS 2017 (arXiv:1706.03762), section 3.2.
    Gemma Team, "Gemma 2: Improving Open Language Models at a Practical Size", 2024 (arXiv:2408.00118):
    the soft-cap.
    OpenAI, "gpt-oss-120b & gpt-oss-20b Model Card", 2025 (arXiv:2508.10925): the learned sinks.
    Shazeer, "Fast Transformer Decoding: One Write-Head is All You Need", 2019 (arXiv:1911.02150).
    Ainslie et al., "GQA: Training Generalized Multi-Query Transformer Models from Multi-Head
    Checkpoints", EMNLP 2023 (arXiv:2305.13245).
    PyTorch documentation of ``torch.nn.functional.scaled_dot_product_attention``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, NamedTuple, Protocol

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .masks import (
    MaskRule,
    and_masks,
    causal_mask,
    check_mask,
    combine_masks,
    mask_tensor,
)
from .score_mods import Sinks, SoftCap, check_softcap, score_mod_arguments, sdpa_with_sinks, soft_cap

if TYPE_CHECKING:
    from collections.abc import Sequence

    MaskLike = Tensor | MaskRule | Sequence[Tensor | MaskRule] | None

    from .kv_cache import KVCache

__all__ = [
    "ATTENTION_FUNCTIONS",
    "ATTENTION_SUPPORTS",
    "AttentionFunction",
    "AttentionResult",
    "HeadWeights",
    "MultiHeadAttention",
    "PreparedMask",
    "Supports",
    "attention",
    "check_supports",
    "eager_attention",
    "grouped_attention",
    "prepare_mask",
    "register_attention",
    "repeat_kv",
    "scaled_dot_product_attention",
    "sdpa_attention",
]


def _divisors(n: int) -> str:
    return ", ".join(str(d) for d in range(1, n + 1) if n % d == 0)


def _size(name: str, value: object, minimum: int = 1) -> int:
    """``value`` as an int, or a ``TypeError``/``ValueError`` naming it (``8.0`` is not a size)."""
    if isinstance(value, bool) or not hasattr(value, "__index__"):
        raise TypeError(f"{name} must be an int; got {value!r} of type {type(value).__name__}")
    n = int(value.__index__())
    if n < minimum:
        raise ValueError(f"{name} must be at least {minimum}; got {name}={n}")
    return n


# --------------------------------------------------------------------------- the one mask preparation


@dataclass(frozen=True)
class PreparedMask:
    """What every attention implementation is told about masking, checked once by :func:`prepare_mask`.

    Attributes:
        mask: the caller's mask as a 4-D tensor broadcastable to ``(B, H, T, S)``: bool (``True`` = may
            attend) or float in the queries' dtype (added to the scores); ``None`` for no mask.
        causal: whether the bottom-right causal mask applies too (key ``j`` visible to query ``i`` when
            ``j <= i + S - T``); ``False`` when it would hide nothing (one query, or no causal flag).
        T: query positions.
        S: key positions.
        window: with ``causal``, each query sees only the last ``window`` positions (``None``: all).
        device: the queries' (and the mask's) device, where :meth:`combined` builds the causal mask.
    """

    mask: Tensor | None
    causal: bool
    T: int
    S: int
    window: int | None = None
    device: torch.device | None = None

    def combined(self) -> Tensor | None:
        """The whole mask as one tensor (the caller's mask and the causal mask), or ``None``."""
        if not self.causal:
            return self.mask
        causal = causal_mask(self.T, self.S, window=self.window, device=self.device)  # (T, S) bool
        if self.mask is None:
            return causal
        dtype = self.mask.dtype if self.mask.dtype != torch.bool else torch.float32
        return combine_masks(self.mask, causal, dtype)


def prepare_mask(attn_mask: MaskLike, *, is_causal: bool, shape: tuple[int, int, int, int], dtype: torch.dtype,
                 device: torch.device) -> PreparedMask:
    """Check a mask once, for every implementation: shape, dtype and device, and the causal flag.

    Args:
        attn_mask: ``None``; a bool (``True`` = may attend) or float (added) tensor broadcastable to ``shape``,
            with at most 4 dims (a 1-D ``(S,)`` mask is a key mask shared by every query); a
            :class:`lessons_src.masks.MaskRule`; or a list of them, all of which apply. A rule that declares
            itself causal (``causal()``, ``sliding_window(w)``) becomes the causal flag and window that fast
            paths read (SDPA's own causal kernel, the tiles the tiled loop skips); any other becomes a bool tensor.
        is_causal: also hide future keys, aligned bottom-right; combined with the masks.
        shape: the scores' shape ``(B, H, T, S)``.
        dtype: the queries' dtype; a float mask is converted to it (as autocast converts the queries).
        device: the queries' device; a tensor mask must be on it.

    Raises:
        ValueError: naming the mask's shape, dtype or device, what a rule refuses, or a rule that widens the
            causal mask (a prefix LM) given with a causal flag or rule.
        TypeError: if ``is_causal`` is not a bool, or a mask is neither a tensor nor a rule.
    """
    if not isinstance(is_causal, bool):
        raise TypeError(f"is_causal must be True or False; got {is_causal!r}")
    items = list(attn_mask) if isinstance(attn_mask, list | tuple) else [] if attn_mask is None else [attn_mask]
    B, H, T, S = shape
    causal, window, rest = _causal_part(items, is_causal)
    masks = [_checked_tensor(item, shape, dtype, device) for item in items if not isinstance(item, MaskRule)]
    if rest:
        masks.append(mask_tensor(and_masks(*rest), T, S, B=B, H=H, device=device))  # (B or 1, H or 1, T, S)
    mask = None
    for m in masks:  # 4-D: SDPA's kernels need it
        mask = combine_masks(mask, m.reshape((1,) * (4 - m.ndim) + tuple(m.shape)), dtype)
    return PreparedMask(mask, causal and (T > 1 or window is not None), T, S, window=window, device=device)


def _causal_part(items: list[object], is_causal: bool) -> tuple[bool, int | None, list[MaskRule]]:
    """The causal flag and window the rules declare (with ``is_causal``), and the rules left to materialise."""
    rules = [part for item in items if isinstance(item, MaskRule) for part in item.parts]
    causal = is_causal or any(r.causal for r in rules)
    windows = [r.window for r in rules if r.causal and r.window is not None]
    widening = [r.name for r in rules if r.widens_causal]
    if widening and causal:
        raise ValueError(f"{widening[0]} widens the causal mask (its prefix attends both ways); give it without "
                         "is_causal=True or a causal rule, it is causal after its prefix itself")
    return causal, min(windows) if windows else None, [r for r in rules if not r.causal]


def _checked_tensor(mask: object, shape: tuple[int, int, int, int], dtype: torch.dtype,
                    device: torch.device) -> Tensor:
    """A mask tensor checked against the scores (shape, dtype, device), a float one in the queries' dtype."""
    if not isinstance(mask, Tensor):
        raise TypeError(f"attn_mask must be a torch.Tensor, a MaskRule, a list of them or None; got "
                        f"{type(mask).__name__}")
    check_mask(mask, shape, dtype)
    if mask.device != device:
        raise ValueError(f"attn_mask is on {mask.device} but the queries are on {device}; move the mask there")
    return mask.to(dtype) if mask.dtype != torch.bool and mask.dtype != dtype else mask


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
    n_rep = _size("n_rep", n_rep)
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
    each query's log-sum-exp (float32).

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
    lse = torch.logsumexp(scores.float(), dim=-1)  # (B, H, T), sink included; -inf for a row that sees nothing
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
    gave outputs off by 1.4 for them: ``tests/test_gpu.py``, the ``T > S`` case).
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
    _check_implementation(implementation)
    can = ATTENTION_SUPPORTS[implementation]
    for feature, given in wanted.items():
        if given is None or given is False or (isinstance(given, int | float) and given == 0):
            continue
        if not getattr(can, feature):
            able = sorted(n for n, s in ATTENTION_SUPPORTS.items() if getattr(s, feature))
            shown = f"{feature}={given!r}" if not isinstance(given, Tensor) else f"{feature} given"
            raise ValueError(f"implementation={implementation!r} cannot {_WHAT[feature]} (got {shown}); use one "
                             f"that can: {', '.join(repr(n) for n in able) or 'none is registered'}")


def _autocast_on(device_type: str) -> bool:
    """``torch.is_autocast_enabled(device_type)``, and False where autocast has no entry (meta) instead of raising."""
    return torch.amp.is_autocast_available(device_type) and torch.is_autocast_enabled(device_type)


def _check_implementation(name: str) -> None:
    """Raise a ValueError naming ``name`` and the registered implementations unless it is one of them."""
    if name not in ATTENTION_FUNCTIONS:
        raise ValueError(f"unknown attention implementation {name!r}; choose one of {sorted(ATTENTION_FUNCTIONS)}")


def _check_qkv(q: Tensor, k: Tensor, v: Tensor) -> None:
    for name, t in (("q", q), ("k", k), ("v", v)):
        if not isinstance(t, Tensor):
            raise TypeError(f"{name} must be a torch.Tensor; got {type(t).__name__}")
    if q.ndim != 4 or k.ndim != 4 or v.ndim != 4:
        raise ValueError(
            "q, k, v must be 4-D: q (B, H, T, E), k (B, K, S, E), v (B, K, S, Ev); "
            f"got {tuple(q.shape)}, {tuple(k.shape)}, {tuple(v.shape)}"
        )
    if not (q.dtype == k.dtype == v.dtype) or not q.dtype.is_floating_point:
        raise ValueError(
            f"q, k, v must share one floating dtype; got {q.dtype}, {k.dtype}, {v.dtype}"
        )
    if not (q.device == k.device == v.device):
        raise ValueError(f"q, k, v must be on one device; got {q.device}, {k.device}, {v.device}")
    if k.shape[:3] != v.shape[:3]:
        raise ValueError(f"k and v must agree on (B, K, S); got k {tuple(k.shape)}, v {tuple(v.shape)}")
    if q.shape[0] != k.shape[0]:
        raise ValueError(f"q and k must have the same batch size; got q {tuple(q.shape)}, k {tuple(k.shape)}")
    if q.shape[-1] != k.shape[-1]:
        raise ValueError(f"q and k must have the same head size E; got q {tuple(q.shape)}, k {tuple(k.shape)}")
    H, K = q.shape[1], k.shape[1]
    if K < 1 or H % K != 0:
        raise ValueError(
            f"q has {H} heads, which is not a multiple of the {K} key/value heads of k; "
            f"KV-head counts that divide {H} are {_divisors(H)}"
        )


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
    * NaN in ``q``, ``k`` or ``scale`` gives NaN in ``"eager"`` and ``"tiled"``, possibly zeros in ``"sdpa"`` (CPU).

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
    _check_implementation(implementation)
    _check_qkv(q, k, v)
    if isinstance(dropout_p, bool) or not isinstance(dropout_p, int | float) or not 0.0 <= dropout_p < 1.0:
        raise ValueError(f"dropout_p must be a number in [0, 1); got {dropout_p!r}")
    B, H, T, E = q.shape
    mask = prepare_mask(attn_mask, is_causal=is_causal, shape=(B, H, T, k.shape[2]), dtype=q.dtype, device=q.device)
    scale = 1.0 / math.sqrt(E) if scale is None else float(scale)
    mods = score_mod_arguments(score_mods, H, q.dtype, q.device)
    check_supports(implementation, mask=_beyond_causal(mask), dropout=dropout_p, **mods)
    return ATTENTION_FUNCTIONS[implementation](q, k, v, mask, scale=scale, dropout_p=float(dropout_p), **mods)


def _beyond_causal(mask: PreparedMask) -> str | None:
    """What of a prepared mask a backend that takes only the causal flag could not do, in words, or ``None``."""
    if mask.mask is not None:
        return "a mask besides the causal rule"
    return None if mask.window is None else f"window={mask.window}"


def scaled_dot_product_attention(q: Tensor, k: Tensor, v: Tensor, *, attn_mask: MaskLike = None,
                                 is_causal: bool = False, scale: float | None = None,
                                 dropout_p: float = 0.0) -> tuple[Tensor, Tensor]:
    """The explicit attention formula, returning the output and the weights.

    ``softmax(q k^T / sqrt(E) + mask) v``, spelled out (the ``"eager"`` implementation of
    :func:`attention`): the same inputs, masks and answers as PyTorch's fused kernel, except that
    ``is_causal`` is aligned **bottom-right** (see :func:`attention`) and may be combined with a mask.

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
        >>> out, w = scaled_dot_product_attention(q, k, v, is_causal=True)
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


def grouped_attention(q: Tensor, k: Tensor, v: Tensor, *, attn_mask: MaskLike = None, is_causal: bool = False,
                      dropout_p: float = 0.0, scale: float | None = None) -> Tensor:
    """``F.scaled_dot_product_attention`` for ``H`` query heads sharing ``K`` key/value heads.

    The ``"sdpa"`` implementation of :func:`attention` (see :func:`sdpa_attention` for how it stays on
    the fused kernel); ``is_causal`` is bottom-right and combines with ``attn_mask``.

    Shapes:
        q: ``(B, H, T, E)``, k: ``(B, K, S, E)``, v: ``(B, K, S, Ev)``; output: ``(B, H, T, Ev)``.

    Example:
        >>> q, kv = torch.randn(1, 4, 1, 8), torch.randn(1, 2, 5, 8)
        >>> grouped_attention(q, kv, kv).shape
        torch.Size([1, 4, 1, 8])
    """
    return attention(
        q, k, v, attn_mask=attn_mask, is_causal=is_causal, scale=scale, dropout_p=dropout_p, implementation="sdpa"
    ).output


class HeadWeights(NamedTuple):
    """Per-head views of a :class:`MultiHeadAttention`'s projection weights (no copies).

    Attributes:
        q: ``(H, E, D)``: head ``h``'s queries are ``x @ q[h].T``.
        k: ``(K, E, D)``: KV head ``g``'s keys are ``context @ k[g].T``.
        v: ``(K, E, D)``: KV head ``g``'s values.
        o: ``(H, D, E)``: head ``h`` adds ``y_h @ o[h].T`` to the output.
    """

    q: Tensor
    k: Tensor
    v: Tensor
    o: Tensor


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
        implementation: the attention function :meth:`forward` runs by default, a name in
            :data:`ATTENTION_FUNCTIONS` (``"sdpa"``: the fused kernel). Every implementation accepts the
            same inputs and gives the same answer; :meth:`with_weights` runs ``"eager"``, which returns the weights.
        qk_norm: a QK-norm piece from :mod:`lessons_src.mechanisms` (``PerHeadRMSNorm``,
            ``ProjectionRMSNorm``, ``WeightlessRMSNorm``): ``(q, k) -> (q, k)``, before ``rope``.
        v_norm: a value norm (``ValueRMSNorm``, Gemma 4): ``v -> v``, before the values are cached.
        rope: the layer's position piece, ``(q, k, start=) -> (q, k)``: a :class:`lessons_src.mechanisms.Rotary`
            (rotary positions, partial or scaled), or on a NoPE layer ``None`` or Llama 4's
            :class:`lessons_src.mechanisms.NoPETemperature`; for self-attention (with a cache, the new tokens'
            positions follow the cached ones).
        gate: an output gate (``HeadwiseGate``, ``ElementwiseGate``): ``(x, y) -> y``, each head's output
            gated from the layer's input, before ``W_O``.
        softcap: cap the scaled scores at ``softcap * tanh(s / softcap)`` (Gemma 2 uses 50.0); needs an
            implementation that can, ``"eager"`` or ``"tiled"``.
        sinks: learn one sink logit per head (gpt-oss), a parameter ``sinks`` ``(H,)`` starting at zero.
        scale: the scores' multiplier; ``None`` for ``1/sqrt(head_dim)``. Gemma 4 uses 1, Gemma 2 27B
            ``query_pre_attn_scalar ** -0.5``.

    Shapes:
        x: ``(B, T, D)``; context: ``(B, S, D)``; attn_mask: broadcastable to ``(B, H, T, S)``;
        output: ``(B, T, D)``; weights: ``(B, H, T, S)``. With a cache, ``S`` = cached + ``T``.

    Raises:
        TypeError: if a size is not an int (``8.0`` is not a size), a piece is not an ``nn.Module``, or ``scale``
            is not a number.
        ValueError: if a size is below 1, ``num_heads`` does not divide ``d_model`` or ``num_kv_heads``
            does not divide ``num_heads`` (the messages list the counts that would), a piece was made for
            other sizes, ``softcap`` or ``scale`` is not positive or ``softcap`` comes with
            ``implementation="sdpa"``, and, in :meth:`forward`, on malformed inputs.

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
        implementation: str = "sdpa",
        qk_norm: nn.Module | None = None,
        rope: nn.Module | None = None,
        gate: nn.Module | None = None,
        softcap: float | None = None,
        sinks: bool = False,
        v_norm: nn.Module | None = None,
        scale: float | None = None,
    ) -> None:
        super().__init__()
        d_model, num_heads = _size("d_model", d_model), _size("num_heads", num_heads)
        if num_kv_heads is not None:
            num_kv_heads = _size("num_kv_heads", num_kv_heads)
        if not isinstance(bias, bool):
            raise TypeError(f"bias must be True or False; got {bias!r}")
        _check_implementation(implementation)
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
        if isinstance(dropout, bool) or not isinstance(dropout, int | float) or not 0.0 <= dropout < 1.0:
            raise ValueError(f"dropout must be a number in [0, 1); got dropout={dropout!r}")
        self.d_model = d_model
        self.num_heads = num_heads
        self.num_kv_heads = num_kv_heads
        self.n_rep = num_heads // num_kv_heads  # query heads served by each KV head
        self.head_dim = d_model // num_heads
        self.kv_dim = num_kv_heads * self.head_dim  # K * E
        self.dropout = float(dropout)
        self.implementation = implementation  # the default; forward(implementation=...) overrides it
        self.qkv_proj = nn.Linear(d_model, d_model + 2 * self.kv_dim, bias=bias)  # rows: [W_Q; W_K; W_V]
        self.out_proj = nn.Linear(d_model, d_model, bias=bias)  # W_O
        # today's mechanisms (lessons_src.mechanisms): each is absent (None) unless the layer is given it
        sizes = {"d_model": d_model, "num_heads": num_heads, "num_kv_heads": num_kv_heads, "head_dim": self.head_dim}
        for name, piece in (("qk_norm", qk_norm), ("v_norm", v_norm), ("rope", rope), ("gate", gate)):
            if piece is not None and not isinstance(piece, nn.Module):
                raise TypeError(f"{name} must be an nn.Module piece (see lessons_src.mechanisms) or None; "
                                f"got {type(piece).__name__}")
            check = getattr(piece, "check", None)
            if callable(check):
                check(**sizes)  # a piece made for other sizes: a ValueError naming them
        self.qk_norm, self.v_norm, self.rope, self.gate = qk_norm, v_norm, rope, gate
        if scale is not None and (isinstance(scale, bool) or not isinstance(scale, int | float)):
            raise TypeError(f"scale must be a number or None; got {scale!r} of type {type(scale).__name__}")
        if scale is not None and not 0 < scale < math.inf:
            raise ValueError(f"scale must be a finite number above 0, or None for 1/sqrt(head_dim) = "
                             f"{self.head_dim ** -0.5:.4g} (Gemma 4: 1.0); got scale={scale!r}")
        self.scale = None if scale is None else float(scale)  # None: 1/sqrt(E)
        self.softcap = check_softcap(softcap)
        check_supports(implementation, softcap=self.softcap)
        if not isinstance(sinks, bool):
            raise TypeError(f"sinks must be True or False (a learned logit per head, or none); got {sinks!r}")
        self.sinks = nn.Parameter(self.qkv_proj.weight.new_zeros(num_heads)) if sinks else None  # (H,)

    def extra_repr(self) -> str:
        return (
            f"d_model={self.d_model}, num_heads={self.num_heads}, num_kv_heads={self.num_kv_heads}, "
            f"head_dim={self.head_dim}" + ("" if self.softcap is None else f", softcap={self.softcap}")
            + ("" if self.scale is None else f", scale={self.scale:g}")
        )

    @property
    def mechanisms(self) -> tuple[str, ...]:
        """The names of the mechanisms this layer has beyond plain attention (``()`` for a plain layer).

        Example:
            >>> MultiHeadAttention(8, 2, sinks=True).mechanisms
            ('sinks',)
        """
        names = ("qk_norm", "v_norm", "rope", "gate", "softcap", "sinks", "scale")
        return tuple(name for name in names if getattr(self, name) is not None)

    def check_plain(self, what: str) -> None:
        """Raise a ValueError naming ``what`` if this layer has a mechanism that ``what`` would silently drop."""
        if self.mechanisms:
            raise ValueError(f"{what} handles plain attention; this layer also has {', '.join(self.mechanisms)}, "
                             "which it would drop: use a layer without them")

    def head_weights(self) -> HeadWeights:
        """Per-head views of ``W_Q``, ``W_K``, ``W_V`` and ``W_O`` (they share storage with the parameters).

        Query head ``h`` uses KV head ``h // n_rep`` (:meth:`kv_head`).

        Example:
            >>> w = MultiHeadAttention(d_model=16, num_heads=4, num_kv_heads=2).head_weights()
            >>> tuple(w.q.shape), tuple(w.k.shape), tuple(w.o.shape)
            ((4, 4, 16), (2, 4, 16), (4, 16, 4))
        """
        D, H, K, E = self.d_model, self.num_heads, self.num_kv_heads, self.head_dim
        w_q, w_k, w_v = torch.split(self.qkv_proj.weight, [D, K * E, K * E], dim=0)  # rows [W_Q; W_K; W_V]
        w_o = self.out_proj.weight.view(D, H, E).transpose(0, 1)  # (H, D, E): columns of W_O per head
        return HeadWeights(w_q.view(H, E, D), w_k.view(K, E, D), w_v.view(K, E, D), w_o)

    def kv_head(self, head: int) -> int:
        """The key/value head that query head ``head`` reads (``head // n_rep``)."""
        head = _size("head", head, minimum=0)
        if head >= self.num_heads:
            raise ValueError(f"head must be in 0..{self.num_heads - 1}; got head={head}")
        return head // self.n_rep

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
        attn_mask: MaskLike = None,
        is_causal: bool = False,
        cache: KVCache | None = None,
        cache_position: int | None = None,
        implementation: str | None = None,
    ) -> Tensor:
        """Attend from ``x`` to itself, or to ``context`` (cross-attention).

        Args:
            x: queries' input ``(B, T, D)``.
            context: keys' and values' input ``(B, S, D)``; ``None`` for self-attention (``S = T``).
            attn_mask: a mask as :func:`attention` takes it: a bool (``True`` = may attend) or float (added)
                tensor broadcastable to ``(B, H, T, S)``, a rule of :mod:`lessons_src.masks` (``sliding_window(w)``,
                ``causal() & same_chunk(c)``, ``same_document(ids)`` with one id per key position, cached ones
                included, ``prefix_lm(p)``), or a list of them; a cache still keeps every position.
            is_causal: hide future keys, aligned bottom-right (see :func:`attention`); combines with
                ``attn_mask``.
            cache: a :class:`lessons_src.kv_cache.KVCache` for incremental self-attention decoding, for
                inference only (under ``torch.no_grad()``): the new keys and values are appended and
                ``x`` attends to everything cached (``S`` = cached + ``T``). Prefill a prompt into an
                empty cache with ``is_causal=True``, then decode one token per call. If a step fails,
                the cache is left as it was.
            cache_position: where ``x``'s first token goes in the cache. Needed only to append several
                tokens to a non-empty cache (a prompt in chunks); it must equal ``cache.length``. A new
                prompt needs ``cache.reset()`` first: several tokens arriving at a non-empty cache
                without ``cache_position`` are refused rather than attending to a stale prompt.
            implementation: a name in :data:`ATTENTION_FUNCTIONS`; default ``self.implementation``.

        Returns:
            ``output`` ``(B, T, D)``. :meth:`with_weights` also returns the attention weights.

        Raises:
            ValueError: if ``x`` or ``context`` is not 3-D, their batch or width is wrong, their dtype or
                device differs from the module's (outside autocast), the mask's dtype, device or shape is
                not accepted, ``cache`` is combined with ``context``, a cached prompt is not causal, a
                multi-token input meets a non-empty cache without ``cache_position``, or the cache does
                not fit (see :meth:`lessons_src.kv_cache.KVCache.update`).
            TypeError: if ``cache`` is not a :class:`lessons_src.kv_cache.KVCache` (checked before it is touched).

        Positions: the new tokens sit at ``cache.length ..`` (``0 ..`` without a cache), one position list for
        every row. Positions given per row and per token (a padded batch) will enter as one more keyword,
        ``positions`` ``(B, T)``, handed to ``rope`` in place of ``start``: an argument, not a second signature.

        Example:
            >>> from lessons_src.kv_cache import KVCache
            >>> gqa = MultiHeadAttention(16, 4, num_kv_heads=2).eval()
            >>> cache = KVCache(batch_size=1, num_kv_heads=2, head_dim=4, max_len=8)
            >>> with torch.no_grad():
            ...     _ = gqa(torch.randn(1, 5, 16), is_causal=True, cache=cache)  # prefill 5 tokens
            ...     y = gqa(torch.randn(1, 1, 16), is_causal=True, cache=cache)  # decode one
            >>> y.shape, cache.length
            (torch.Size([1, 1, 16]), 6)
        """
        impl = self.implementation if implementation is None else implementation
        return self._attend(x, context, attn_mask, is_causal, cache, cache_position, impl, weights=False)[0]

    def with_weights(
        self,
        x: Tensor,
        context: Tensor | None = None,
        *,
        attn_mask: MaskLike = None,
        is_causal: bool = False,
        cache: KVCache | None = None,
        cache_position: int | None = None,
        implementation: str = "eager",
    ) -> tuple[Tensor, Tensor]:
        """:meth:`forward`, also returning the attention weights ``(B, H, T, S)``: what a head looked at.

        The arguments are :meth:`forward`'s. The weights exist only where an implementation builds them:
        ``"eager"`` does (the default here; the output equals the fused kernel's); another is refused by
        name unless it was registered with ``Supports(weights=True)``.

        Example:
            >>> out, w = MultiHeadAttention(8, 2).with_weights(torch.randn(1, 5, 8), is_causal=True)
            >>> tuple(out.shape), tuple(w.shape), bool(w[0, 0, 0, 1:].eq(0).all())
            ((1, 5, 8), (1, 2, 5, 5), True)
        """
        out, weights = self._attend(x, context, attn_mask, is_causal, cache, cache_position, implementation,
                                    weights=True)
        assert weights is not None  # check_supports refused an implementation without weights
        return out, weights

    def _attend(self, x: Tensor, context: Tensor | None, attn_mask: MaskLike, is_causal: bool,
                cache: KVCache | None, cache_position: int | None, impl: str, *,
                weights: bool) -> tuple[Tensor, Tensor | None]:
        self._check_inputs(x, context)
        _check_implementation(impl)
        B, T, _ = x.shape
        if cache is not None:
            self._check_cache(cache, T, is_causal, attn_mask, context, cache_position)
        elif cache_position is not None:
            raise ValueError("cache_position is only meaningful with a cache; pass cache=... or drop it")
        S = (T if context is None else context.shape[1]) + (0 if cache is None else cache.length)
        if self.rope is not None and context is not None:
            raise ValueError("rope gives positions to self-attention; pass context=None, or a layer without rope")
        dtype = torch.get_autocast_dtype(x.device.type) if _autocast_on(x.device.type) else x.dtype
        # checked before the cache is touched; the implementations get this one prepared mask
        shape = (B, self.num_heads, T, S)
        mask = prepare_mask(attn_mask, is_causal=is_causal, shape=shape, dtype=dtype, device=x.device)
        q, k, v = self.project_qkv(x, context)  # (B, H, T, E), 2 x (B, K, S, E)
        dropout_p = self.dropout if self.training else 0.0
        start = 0 if cache is None else cache.length
        if self.qk_norm is not None:
            q, k = self.qk_norm(q, k)  # (B, H, T, E), (B, K, S, E)
        if self.rope is not None:
            q, k = self.rope(q, k, start=start)  # the new tokens at positions start .. start + T - 1
        if self.v_norm is not None:
            v = self.v_norm(v)  # (B, K, S, E)
        mods: dict[str, float | Tensor] = {} if self.softcap is None else {"softcap": self.softcap}
        if self.sinks is not None:
            mods["sinks"] = self.sinks.to(q.dtype)  # (H,)
        try:
            if cache is not None:
                k, v = cache.update(k, v)  # everything cached so far: 2 x (B, K, S, E)
            if mask.mask is not None and mask.mask.dtype != torch.bool and mask.mask.dtype != q.dtype:
                mask = replace(mask, mask=mask.mask.to(q.dtype))
            scale = 1.0 / math.sqrt(self.head_dim) if self.scale is None else self.scale
            check_supports(impl, mask=_beyond_causal(mask), dropout=dropout_p, weights=weights, **mods)
            result = ATTENTION_FUNCTIONS[impl](q, k, v, mask, scale=scale, dropout_p=dropout_p, **mods)
        except BaseException:
            if cache is not None:
                cache.length = start  # the step failed: forget the positions it appended
            raise
        heads = result.output if self.gate is None else self.gate(x, result.output)  # (B, H, T, E)
        y = heads.transpose(1, 2).reshape(B, T, self.d_model)  # concatenate heads: (B, T, D)
        return self.out_proj(y), result.weights  # (B, T, D), (B, H, T, S) or None

    def _check_cache(self, cache: KVCache, T: int, is_causal: bool, attn_mask: MaskLike,
                     context: Tensor | None, cache_position: int | None) -> None:
        if "KVCache" not in {c.__name__ for c in type(cache).__mro__}:  # by name: no import of kv_cache.py
            raise TypeError(f"cache must be a KVCache (lessons_src.kv_cache), not a {type(cache).__name__}: a rolling "
                            "or latent cache has its own update(); call it, then attention()")
        if context is not None:
            raise ValueError("cache is for self-attention decoding; pass context=None with a cache")
        if cache_position is not None:
            if _size("cache_position", cache_position, minimum=0) != cache.length:
                raise ValueError(
                    f"cache_position={cache_position} but the cache holds {cache.length} positions; new tokens go "
                    f"at position {cache.length} (call cache.reset() to start a new prompt)"
                )
        elif T > 1 and cache.length > 0:
            raise ValueError(
                f"{T} new tokens for a cache that already holds {cache.length}: if this is a new prompt, call "
                f"cache.reset() first; to append a prompt in chunks, pass cache_position={cache.length}"
            )
        if T > 1 and not is_causal and attn_mask is None:
            raise ValueError(
                f"caching {T} tokens without is_causal=True would let each see the ones after it (a decoder "
                "never can); pass is_causal=True, or an explicit attn_mask if that is what you mean"
            )

    def _check_inputs(self, x: Tensor, context: Tensor | None) -> None:
        D = self.d_model
        w = self.qkv_proj.weight
        for name, t in (("x", x), ("context", context)):
            if t is None:
                continue
            if not isinstance(t, Tensor):
                raise TypeError(f"{name} must be a torch.Tensor; got {type(t).__name__}")
            if t.device != w.device:
                raise ValueError(f"{name} is on {t.device} but the module is on {w.device}; move one of them")
            if t.dtype != w.dtype and not _autocast_on(t.device.type):
                raise ValueError(
                    f"{name} has dtype {t.dtype} but the module's weights are {w.dtype}; convert one of them "
                    f"(x.to({w.dtype}) or module.to({t.dtype})), or run under torch.autocast"
                )
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
