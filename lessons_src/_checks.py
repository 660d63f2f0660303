"""The argument checks every core file shares: one rule per kind of argument, each error naming the argument.

A size is an int (``numpy.int64`` too, ``8.0`` and ``True`` are not) of at least a minimum; a number is a finite
real (an int, a float or a numpy scalar; not a bool, a string or a tensor, whose gradient a float would drop) in a
range: :func:`positive` (a scale, a cap, a factor), :func:`eps` (at least 0), :func:`probability` (``[0, 1)``); a flag
is ``True`` or ``False``; a tensor has a rank and a kind of dtype (:func:`tensor`); ``q``, ``k`` and ``v`` are the
attention layout ``(B, H, T, E)``, ``(B, K, S, E)``, ``(B, K, S, Ev)`` with
``H`` a multiple of ``K``. This file imports nothing of the package, so any core file may import it.

Example:
    >>> size("num_heads", 8), integer("start", -1), flag("causal", True)
    (8, -1, True)
    >>> divisors(12)  # an error about a head count lists the counts that would do
    '1, 2, 3, 4, 6, 12'
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import Tensor

__all__ = ["autocast_on", "check_qkv", "choice", "device", "divisors", "eps", "flag", "instance", "integer", "number",
           "positions", "positive", "probability", "size", "tensor"]


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


def number(name: str, value: object, *, low: float = -math.inf, low_ok: bool = True, high: float = math.inf,
           high_ok: bool = True, hint: str = "") -> float:
    """``value`` as a finite float in the range ``low .. high`` (each end included with ``low_ok``/``high_ok``).

    Any real number is one (numpy's too); a bool, a string or a tensor is not: a tensor's gradient would be dropped
    by ``float()``, so a learned value belongs in a parameter of the layer, not in an argument.
    """
    if isinstance(value, bool | str | bytes | complex | Tensor) or not hasattr(value, "__float__"):
        why = "; a tensor would lose its gradient: pass a float" if isinstance(value, Tensor) else ""
        raise TypeError(f"{name} must be a number; got {value!r} of type {type(value).__name__}{why}")
    value = float(value)
    said = f" ({hint})" if hint else ""
    if not math.isfinite(value):
        raise ValueError(f"{name} must be finite{said}; got {name}={value!r}")
    if math.isfinite(low) and math.isfinite(high) and not (low < value < high or (value == low and low_ok)
                                                            or (value == high and high_ok)):
        span = f"{'[' if low_ok else '('}{low:g}, {high:g}{']' if high_ok else ')'}"
        raise ValueError(f"{name} must be a number in {span}{said}; got {name}={value!r}")
    if value < low or (value == low and not low_ok):
        raise ValueError(f"{name} must be {'at least' if low_ok else 'above'} {low:g}{said}; got {name}={value!r}")
    if value > high or (value == high and not high_ok):
        raise ValueError(f"{name} must be {'at most' if high_ok else 'below'} {high:g}{said}; got {name}={value!r}")
    return value


def positive(name: str, value: object, hint: str = "") -> float:
    """A finite number above 0: a scale, a cap, a factor (``hint``: a usual value, printed in the error)."""
    return number(name, value, low=0.0, low_ok=False, hint=hint)


def eps(name: str, value: object, hint: str = "1e-6 is usual") -> float:
    """A finite number at least 0: an epsilon added to a denominator, or a rate that may be 0."""
    return number(name, value, low=0.0, hint=hint)


def probability(name: str, value: object) -> float:
    """A number in ``[0, 1)``: a dropout probability (1 would drop everything)."""
    return number(name, value, low=0.0, high=1.0, high_ok=False, hint="a probability")


def flag(name: str, value: object) -> bool:
    """``value`` if it is ``True`` or ``False`` (not ``1``, not ``"yes"``)."""
    if not isinstance(value, bool):
        raise TypeError(f"{name} must be True or False; got {value!r}")
    return value


def choice(name: str, value: object, options: tuple[str, ...] | dict[str, Any]) -> str:
    """``value`` if it is one of ``options`` (strings)."""
    if not isinstance(value, str):
        raise TypeError(f"{name} must be one of {', '.join(map(repr, options))}; got {value!r} of type "
                        f"{type(value).__name__}")
    if value not in options:
        raise ValueError(f"{name} must be one of {', '.join(map(repr, options))}; got {name}={value!r}")
    return value


def instance(name: str, value: object, kind: Any, what: str) -> None:
    """Raise a TypeError naming ``name`` unless ``value`` is a ``kind`` (``what``: how the error calls it)."""
    if not isinstance(value, kind):
        raise TypeError(f"{name} must be {what}; got {type(value).__name__}")


def tensor(name: str, value: object, *, ndim: int | tuple[int, ...] | None = None, shape: str = "",
           dtype: str = "floating") -> Tensor:
    """``value`` if it is a tensor of ``ndim`` dims (``shape``: its layout, for the error) and a ``dtype`` kind:
    ``"floating"``, ``"integer"`` (ids, positions), ``"bool"`` (a keep-mask) or ``"any"``."""
    if not isinstance(value, Tensor):
        raise TypeError(f"{name} must be a torch.Tensor{f' {shape}' if shape else ''}; got {type(value).__name__}")
    dims = (ndim,) if isinstance(ndim, int) else ndim
    if dims is not None and value.ndim not in dims:
        want = " or ".join(f"{d}-D" for d in dims)
        raise ValueError(f"{name} must be {want}{f' {shape}' if shape else ''}; got shape {tuple(value.shape)}")
    kind = value.dtype
    ok = {"floating": kind.is_floating_point, "bool": kind == torch.bool, "any": True,
          "integer": not kind.is_floating_point and not kind.is_complex and kind != torch.bool}[dtype]
    if not ok:
        example = {"floating": "torch.float32", "integer": "torch.int64", "bool": "torch.bool"}[dtype]
        raise ValueError(f"{name} must have a {dtype} dtype such as {example}; got {kind}")
    return value


def positions(name: str, value: object, B: int, T: int, on: torch.device) -> Tensor:
    """``value`` if it is an integer ``(B, T)`` tensor of positions, at least 0, on ``on``: the position of each
    row's each token (a left-padded row counts from its first real token; a packed row restarts per document)."""
    t = tensor(name, value, ndim=2, shape=f"(B, T) = ({B}, {T}), one position per row and token", dtype="integer")
    if tuple(t.shape) != (B, T):
        raise ValueError(f"{name} must be (B, T) = ({B}, {T}), one position per row and token; got shape "
                         f"{tuple(t.shape)}")
    if t.device != on:
        raise ValueError(f"{name} are on {t.device} but the queries are on {on}; move them there")
    if t.device.type != "meta" and t.numel() and bool((t < 0).any()):
        raise ValueError(f"{name} must be at least 0 (a row's first real token is at 0); got {int(t.min())}")
    return t


def device(name: str, value: object) -> torch.device | None:
    """``value`` as a ``torch.device`` (a device or its name, ``"cpu"``, ``"cuda:0"``), or ``None``."""
    if value is None or isinstance(value, torch.device):
        return value
    try:
        return torch.device(value)  # type: ignore[call-overload, no-any-return]
    except (RuntimeError, TypeError):
        raise ValueError(f"{name} must be a torch.device or its name, such as 'cpu' or 'cuda'; got {value!r}") from None


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
