"""Attention over a key/value cache cut into pieces, each piece's state merged by its log-sum-exp.

A piece of the keys gives a partial *state*, ``(output, lse)``: the attention output over those keys alone and the
log-sum-exp of the scores over them. States over disjoint keys merge exactly into the state over all of them
(:func:`lessons_src.score_mods.merge_states`), so attention can be computed piece by piece and merged afterwards:

* **split-KV decoding** (:func:`split_kv_attention`, FlashDecoding): one decoding query cannot fill a machine, so
  the cache is cut into splits computed side by side (each by any backend that returns an LSE), then merged;
* **shared-prefix (cascade) attention** (:func:`shared_prefix_attention`): requests sharing a prompt read the
  prompt's keys once, in one batched pass over every request's queries, and their own suffixes apart, then merge;
* a **learned sink** is a state with no value, ``(0, sink)``: merged once, after the splits, never per split.

Needs ``functional.py`` (with ``masks.py`` and ``score_mods.py``) and ``_checks.py``.

References:
    Dao, Haziza, Massa and Sizov, "Flash-Decoding for long-context inference", 2023 (the PyTorch blog).
    Ye et al., "FlashInfer: Efficient and Customizable Attention Engine for LLM Inference Serving", 2025
    (arXiv:2501.01005), section 2.2: attention states and their merge; cascade attention.
    Juravsky et al., "Hydragen: High-Throughput LLM Inference with Shared Prefixes", 2024 (arXiv:2402.05099).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import torch
from torch import Tensor

from ._checks import check_qkv, flag, size, tensor
from .functional import AttentionResult, attention, check_implementation, check_supports
from .masks import prepare_mask
from .score_mods import SoftCap, merge_states, score_mod_arguments

if TYPE_CHECKING:
    from collections.abc import Sequence

    from .masks import MaskLike
    from .score_mods import Sinks

__all__ = ["shared_prefix_attention", "split_bounds", "split_kv_attention"]


def split_bounds(S: int, *, split_size: int | None = None, num_splits: int | None = None) -> list[tuple[int, int]]:
    """The ``[start, end)`` key ranges of ``S`` cached keys cut into splits: of ``split_size`` keys each (the
    last may be shorter), or into ``num_splits`` splits as even as possible (empty ones dropped). Give one of the two.

    Example:
        >>> split_bounds(10, split_size=4), split_bounds(10, num_splits=3)
        ([(0, 4), (4, 8), (8, 10)], [(0, 3), (3, 6), (6, 10)])

    Raises:
        TypeError, ValueError: unless exactly one of ``split_size`` and ``num_splits`` is given, as a size of at
            least 1.
    """
    S = size("S", S, 0)
    if (split_size is None) == (num_splits is None):
        raise ValueError(f"give exactly one of split_size and num_splits; got split_size={split_size!r}, "
                         f"num_splits={num_splits!r}")
    if split_size is not None:
        n = size("split_size", split_size, hint="keys per split")
        return [(a, min(a + n, S)) for a in range(0, S, n)]
    n = size("num_splits", num_splits, hint="splits of the cache")
    edges = [i * S // n for i in range(n + 1)]
    return [(edges[i], edges[i + 1]) for i in range(n) if edges[i + 1] > edges[i]]


def _sink_state(sinks: Tensor | None, like: tuple[Tensor, Tensor]) -> list[tuple[Tensor, Tensor]]:
    """The sinks as a state with no value ``(0, sink)``, shaped like the state ``like``; none without sinks."""
    if sinks is None:
        return []
    o, lse = like
    return [(torch.zeros_like(o), sinks.view(1, -1, 1).to(lse.dtype).expand_as(lse))]  # (B, H, T, Ev), (B, H, T)


def _pieces(implementation: str, score_mods: object, H: int, q: Tensor) -> tuple[list[SoftCap], Tensor | None]:
    """The checked score changes split in two: the cap, applied in every piece, and the sinks, merged once."""
    check_implementation(implementation)
    mods = score_mod_arguments(score_mods, H, q.dtype, q.device)
    check_supports(implementation, lse=True, softcap=mods.get("softcap"))
    cap = mods.get("softcap")
    return ([] if cap is None else [SoftCap(float(cap))]), mods.get("sinks")  # type: ignore[return-value]


def _state(r: AttentionResult) -> tuple[Tensor, Tensor]:
    """A backend's result as a state, its output in the lse's dtype (float32 for half precision) for the merge."""
    assert r.lse is not None  # the backend declared lse=True
    return r.output.to(r.lse.dtype), r.lse


def split_kv_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    *,
    split_size: int | None = None,
    num_splits: int | None = None,
    attn_mask: MaskLike = None,
    is_causal: bool = False,
    scale: float | None = None,
    implementation: str = "eager",
    score_mods: SoftCap | Sinks | Sequence[SoftCap | Sinks] | None = None,
) -> AttentionResult:
    """Attention over a cache cut into splits (FlashDecoding): each split's state by a backend, then merged.

    Equal to ``attention(q, k, v, ...)`` over the whole cache. The mask (a rule, a tensor, ``is_causal``
    bottom-right) is prepared once for the whole cache and each split takes its columns, so a split a query cannot
    see gives the empty state. A soft-cap applies in every split; sinks are merged once, after the splits.

    Args:
        q, k, v: queries (one per request when decoding), the cached keys and values (GQA: ``K`` divides ``H``).
        split_size: keys per split; or
        num_splits: the number of splits (give one of the two; see :func:`split_bounds`).
        attn_mask, is_causal, scale, score_mods: as :func:`lessons_src.functional.attention`.
        implementation: a backend that returns the log-sum-exp (``ATTENTION_SUPPORTS[name].lse``).

    Returns:
        An :class:`AttentionResult` with the output (in ``q``'s dtype) and the log-sum-exp (float32 for half
        precision, else ``q``'s dtype); no weights.

    Shapes:
        q ``(B, H, T, E)``, k ``(B, K, S, E)``, v ``(B, K, S, Ev)``; output ``(B, H, T, Ev)``, lse ``(B, H, T)``.

    Example:
        >>> q, kv = torch.randn(1, 4, 1, 8), torch.randn(1, 2, 10, 8)
        >>> out, _, lse = split_kv_attention(q, kv, kv, split_size=4)
        >>> torch.allclose(out, attention(q, kv, kv).output, atol=1e-6)
        True

    Raises:
        ValueError, TypeError: as :func:`lessons_src.functional.attention`; for a backend that returns no
            log-sum-exp (naming those that do); unless exactly one of ``split_size`` and ``num_splits`` is given.
    """
    check_qkv(q, k, v)
    B, H, T, _ = q.shape
    S = k.shape[2]
    caps, sinks = _pieces(implementation, score_mods, H, q)
    bounds = split_bounds(S, split_size=split_size, num_splits=num_splits)
    full = prepare_mask(attn_mask, is_causal=is_causal, shape=(B, H, T, S), dtype=q.dtype, device=q.device).combined()
    states = []
    for a, b in bounds:
        m = None if full is None else full if full.shape[-1] == 1 else full[..., a:b]  # (.., T, b - a): its columns
        r = attention(q, k[:, :, a:b], v[:, :, a:b], attn_mask=m, scale=scale, implementation=implementation,
                      score_mods=caps)  # (B, H, T, Ev), lse (B, H, T)
        states.append(_state(r))
    if not states:  # no cached key: the empty state
        cd = torch.float32 if q.dtype in (torch.float16, torch.bfloat16) else q.dtype
        states = [(q.new_zeros(B, H, T, v.shape[-1], dtype=cd), q.new_full((B, H, T), -math.inf, dtype=cd))]
    out, lse = merge_states(states + _sink_state(sinks, states[0]))
    return AttentionResult(out.to(q.dtype), None, lse)


def shared_prefix_attention(
    q: Tensor,
    prefix_k: Tensor,
    prefix_v: Tensor,
    k: Tensor,
    v: Tensor,
    *,
    is_causal: bool = True,
    scale: float | None = None,
    implementation: str = "eager",
    score_mods: SoftCap | Sinks | Sequence[SoftCap | Sinks] | None = None,
) -> AttentionResult:
    """Attention of requests that share a prompt (cascade attention): the prefix read once for all of them.

    Every query sees the whole shared prefix (it comes before all of each request's own positions): one pass over
    the prefix's keys with all requests' queries stacked, ``(B, H, T) -> (1, H, B * T)``, gives each query's
    prefix state; a batched pass over each request's own keys (``is_causal``: bottom-right, the queries being
    the last ``T`` of them) gives its suffix state; the two merge. Equal to each request's attention over its own
    copy of the prefix followed by its suffix.

    Args:
        q: each request's queries.
        prefix_k, prefix_v: the shared prefix's keys and values, one copy (batch 1).
        k, v: each request's own keys and values after the prefix.
        is_causal: causal within the requests' own keys (the prefix is always visible).
        scale, score_mods: as :func:`lessons_src.functional.attention` (sinks merged once).
        implementation: a backend that returns the log-sum-exp.

    Returns:
        An :class:`AttentionResult` with the output and the log-sum-exp over prefix and suffix; no weights.

    Shapes:
        q ``(B, H, T, E)``, prefix_k ``(1, K, P, E)``, prefix_v ``(1, K, P, Ev)``, k ``(B, K, S, E)``,
        v ``(B, K, S, Ev)``; output ``(B, H, T, Ev)``, lse ``(B, H, T)``.

    Example:
        >>> q, pk, kv = torch.randn(3, 4, 1, 8), torch.randn(1, 2, 6, 8), torch.randn(3, 2, 2, 8)
        >>> out, _, _ = shared_prefix_attention(q, pk, pk, kv, kv)
        >>> whole = torch.cat([pk.expand(3, -1, -1, -1), kv], dim=2)  # each request's own copy of the prefix
        >>> torch.allclose(out, attention(q, whole, whole, is_causal=True).output, atol=1e-6)
        True

    Raises:
        ValueError, TypeError: as :func:`lessons_src.functional.attention`; if the prefix is not one copy
            ``(1, K, P, E)`` matching the requests' keys, or a causal request has more queries than own keys.
    """
    check_qkv(q, k, v)
    is_causal = flag("is_causal", is_causal)
    B, H, T, E = q.shape
    for name, t in (("prefix_k", prefix_k), ("prefix_v", prefix_v)):
        tensor(name, t, ndim=4, shape="(1, K, P, E), one copy of the shared prefix")
    if prefix_k.shape[0] != 1 or prefix_k.shape[1:3] != prefix_v.shape[1:3] or prefix_k.shape[1] != k.shape[1] \
            or prefix_k.shape[-1] != E or prefix_v.shape[-1] != v.shape[-1]:
        raise ValueError(f"prefix_k and prefix_v must be one copy (1, K, P, E) and (1, K, P, Ev) with the requests' K, "
                         f"E and Ev; got prefix_k {tuple(prefix_k.shape)}, prefix_v {tuple(prefix_v.shape)}, k "
                         f"{tuple(k.shape)}, v {tuple(v.shape)}")
    check_qkv(q[:1], prefix_k, prefix_v)  # one dtype and device with the requests' queries
    if is_causal and k.shape[2] < T:
        raise ValueError(f"with is_causal each request's T={T} queries must be among its own S={k.shape[2]} keys "
                         f"after the prefix; use T <= S")
    caps, sinks = _pieces(implementation, score_mods, H, q)
    flat = q.transpose(0, 1).reshape(1, H, B * T, E)  # (1, H, B * T, E): every request's queries, one pass
    pre = _state(attention(flat, prefix_k, prefix_v, scale=scale, implementation=implementation, score_mods=caps))
    pre_o = pre[0].reshape(H, B, T, -1).transpose(0, 1)  # (B, H, T, Ev)
    pre_lse = pre[1].reshape(H, B, T).transpose(0, 1)  # (B, H, T)
    own = _state(attention(q, k, v, is_causal=is_causal, scale=scale, implementation=implementation, score_mods=caps))
    out, lse = merge_states([(pre_o, pre_lse), own, *_sink_state(sinks, own)])
    return AttentionResult(out.to(q.dtype), None, lse)
