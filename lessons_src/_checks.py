"""The argument checks every core file shares: one rule per kind of argument, each error naming the argument.

A size is an int (``numpy.int64`` too, ``8.0`` and ``True`` are not) of at least a minimum; a flag is ``True`` or
``False``; ``q``, ``k`` and ``v`` are the attention layout ``(B, H, T, E)``, ``(B, K, S, E)``, ``(B, K, S, Ev)`` with
``H`` a multiple of ``K``. This file imports nothing of the package, so any core file may import it.

Example:
    >>> size("num_heads", 8), integer("start", -1), flag("causal", True)
    (8, -1, True)
    >>> divisors(12)  # an error about a head count lists the counts that would do
    '1, 2, 3, 4, 6, 12'
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

__all__ = ["autocast_on", "check_qkv", "divisors", "flag", "integer", "number", "size"]


def integer(name: str, value: object, what: str = "an int") -> int:
    """``value`` as an int if ``operator.index`` takes it (numpy integers too), refusing bool and float."""
    if isinstance(value, bool) or not hasattr(value, "__index__"):
        raise TypeError(f"{name} must be {what}; got {value!r} of type {type(value).__name__}")
    return int(value.__index__())


def size(name: str, value: object, minimum: int = 1, hint: str = "") -> int:
    """:func:`integer`, at least ``minimum`` (``hint``: what the number counts, printed in the error)."""
    n = integer(name, value)
    if n < minimum:
        raise ValueError(f"{name} must be at least {minimum}{f' ({hint})' if hint else ''}; got {name}={n}")
    return n


def number(name: str, value: object, *, low: float, low_ok: bool, hint: str) -> float:
    """``value`` as a finite float above ``low`` (or equal to it with ``low_ok``), or an error naming it."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TypeError(f"{name} must be a number; got {value!r} of type {type(value).__name__}")
    if not math.isfinite(value):
        raise ValueError(f"{name} must be finite ({hint}); got {name}={value!r}")
    if value < low or (value == low and not low_ok):
        raise ValueError(f"{name} must be {'at least' if low_ok else 'above'} {low:g} ({hint}); got {name}={value!r}")
    return float(value)


def flag(name: str, value: object) -> bool:
    """``value`` if it is ``True`` or ``False`` (not ``1``, not ``"yes"``)."""
    if not isinstance(value, bool):
        raise TypeError(f"{name} must be True or False; got {value!r}")
    return value


def divisors(n: int) -> str:
    """The divisors of ``n``, for an error that says which counts would do: ``divisors(12) == "1, 2, 3, 4, 6, 12"``."""
    return ", ".join(str(d) for d in range(1, n + 1) if n % d == 0)


def autocast_on(device_type: str) -> bool:
    """``torch.is_autocast_enabled(device_type)``, and False where autocast has no entry (meta) instead of raising."""
    return torch.amp.is_autocast_available(device_type) and torch.is_autocast_enabled(device_type)


def check_qkv(q: Tensor, k: Tensor, v: Tensor) -> None:
    """Raise unless ``q``, ``k``, ``v`` are 4-D tensors of one floating dtype and device in the attention layout."""
    for name, t in (("q", q), ("k", k), ("v", v)):
        if not isinstance(t, Tensor):
            raise TypeError(f"{name} must be a torch.Tensor; got {type(t).__name__}")
    if q.ndim != 4 or k.ndim != 4 or v.ndim != 4:
        raise ValueError(
            "q, k, v must be 4-D: q (B, H, T, E), k (B, K, S, E), v (B, K, S, Ev); "
            f"got {tuple(q.shape)}, {tuple(k.shape)}, {tuple(v.shape)}"
        )
    if not (q.dtype == k.dtype == v.dtype) or not q.dtype.is_floating_point:
        raise ValueError(f"q, k, v must share one floating dtype; got {q.dtype}, {k.dtype}, {v.dtype}")
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
            f"KV-head counts that divide {H} are {divisors(H)}"
        )
