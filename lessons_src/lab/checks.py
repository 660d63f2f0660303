"""What a page prints about a comparison, and what its sentences say about a result, checked at build time.

A lesson that prints ``torch.allclose(a, b)`` can print ``False`` beside a sentence saying the two agree.
Pages print comparisons through this module instead: :func:`close`, :func:`equal` and :func:`holds` print
what was compared, the largest difference and the tolerance, and raise :class:`CheckFailed` when the
comparison does not hold, so the block fails and ``mkdocs build --strict`` fails with it. A page can never
show a failed check.

:func:`claim` backs a sentence about a computed result ("almost half", "at least 3x faster"): it prints
nothing and raises :class:`ClaimFailed` when the data stops supporting the sentence. Every claim id is
listed with its sentence in ``tests/site/claims.yml``.

Printed lines are at most :data:`WIDTH` characters, so they fit a 375-px phone column without scrolling. They
are printed with the ``print`` of the code that called the check: markdown-exec captures a block's output by
giving the block its own ``print``, so a check called from a page's block prints onto the page.

Example:
    >>> import torch
    >>> close("doubled == added", torch.ones(3) * 2, torch.ones(3) + 1)
    doubled == added: yes
      max |diff| 0.0e+00 ≤ 3.0e-06
"""

from __future__ import annotations

import builtins
import sys
import textwrap
from collections.abc import Callable, Iterable, Sequence

import torch

WIDTH = 38
"""The widest line these checks print: a code block's width at 375 px, in characters."""


class CheckFailed(AssertionError):
    """A comparison a page prints does not hold (the build fails instead of printing it)."""


class ClaimFailed(AssertionError):
    """A sentence a page says about a computed result no longer holds."""


def _callers_print() -> Callable[..., None]:
    """The ``print`` the code calling this module sees (a page's block has its own, which captures output)."""
    frame = sys._getframe(1)
    while frame.f_back is not None and frame.f_globals.get("__name__") == __name__:
        frame = frame.f_back
    found = frame.f_globals.get("print", builtins.print)
    return found if callable(found) else builtins.print


def _say(what: str, verdict: str, detail: str = "") -> None:
    out = _callers_print()
    for line in textwrap.wrap(f"{what}: {verdict}", WIDTH, subsequent_indent="  "):
        out(line)
    for line in textwrap.wrap(detail, WIDTH, initial_indent="  ", subsequent_indent="  "):
        out(line)


def _pairs(got: object, want: object) -> list[tuple[torch.Tensor, torch.Tensor]]:
    if isinstance(got, torch.Tensor) and isinstance(want, torch.Tensor):
        return [(got, want)]
    if isinstance(got, Sequence | Iterable) and isinstance(want, Sequence | Iterable):
        got_list, want_list = list(got), list(want)
        if len(got_list) != len(want_list):
            raise CheckFailed(f"compared {len(got_list)} tensors with {len(want_list)}: the counts must match")
        pairs = [p for g, w in zip(got_list, want_list, strict=True) for p in _pairs(g, w)]
        if not pairs:
            raise CheckFailed("nothing to compare: both sequences are empty")
        return pairs
    raise TypeError(f"close() compares tensors or sequences of tensors, got {type(got).__name__} "
                    f"and {type(want).__name__}")


def close(what: str, got: object, want: object, *, rtol: float = 1e-5, atol: float = 1e-6) -> None:
    """Print that ``got`` matches ``want`` within a tolerance, or raise :class:`CheckFailed`.

    The tolerance is ``atol + rtol * max|want|``: relative to the size of the values compared, so a check
    on gradients as large as 12.8 allows what float32 rounding does to numbers that size.

    Args:
        what: what is compared, as the reader should read it ("output == SDPA").
        got: a tensor, or a sequence of tensors (a model's gradients, say).
        want: the reference, of the same shapes.
        rtol: tolerance relative to the largest magnitude in ``want``.
        atol: absolute tolerance, for references near zero.

    It returns nothing, so a notebook cell that ends with it shows only the printed lines (no ``Out[]``).

    Raises:
        CheckFailed: the shapes differ, a value is NaN or infinite where the reference is not, or the largest
            difference exceeds the tolerance.
    """
    pairs = _pairs(got, want)
    worst, scale = 0.0, 0.0
    for g, w in pairs:
        if g.shape != w.shape:
            raise CheckFailed(f"{what}: shapes differ, {tuple(g.shape)} vs {tuple(w.shape)}")
        g64, w64 = g.detach().double().cpu(), w.detach().double().cpu()
        same_nonfinite = (g64 == w64) | (g64.isnan() & w64.isnan())
        if not torch.equal(~torch.isfinite(g64) & ~same_nonfinite, torch.zeros_like(g64, dtype=torch.bool)):
            raise CheckFailed(f"{what}: non-finite values where the reference has none or others")
        finite = torch.isfinite(w64)
        if finite.any():
            worst = max(worst, (g64 - w64)[finite].abs().max().item())
            scale = max(scale, w64[finite].abs().max().item())
    tol = atol + rtol * scale
    if not worst <= tol:
        raise CheckFailed(f"{what}: max |diff| {worst:.2e} exceeds the tolerance {tol:.2e} "
                          f"(atol {atol:g} + rtol {rtol:g} × max|want| {scale:.3g})")
    _say(what, "yes", f"max |diff| {worst:.1e} ≤ {tol:.1e}")


def equal(what: str, got: object, want: object) -> None:
    """Print that ``got`` equals ``want`` exactly (tensors bit for bit, other values by ``==``), or raise.

    Raises:
        CheckFailed: the values differ (for tensors: the shape, or the count of differing elements).
    """
    if isinstance(got, torch.Tensor) or isinstance(want, torch.Tensor):
        if not (isinstance(got, torch.Tensor) and isinstance(want, torch.Tensor)):
            other = want if isinstance(got, torch.Tensor) else got
            raise CheckFailed(f"{what}: compared a tensor with a {type(other).__name__}")
        if got.shape != want.shape:
            raise CheckFailed(f"{what}: shapes differ, {tuple(got.shape)} vs {tuple(want.shape)}")
        if not torch.equal(got, want):
            differ = (got != want).sum().item()
            raise CheckFailed(f"{what}: {differ} of {got.numel()} elements differ")
        _say(what, "yes", "bit for bit")
        return
    if got != want:
        raise CheckFailed(f"{what}: {got!r} != {want!r}")
    _say(what, "yes")


def holds(what: str, condition: bool, detail: str = "") -> None:
    """Print that ``condition`` holds, with ``detail`` (the numbers that show it), or raise.

    Raises:
        CheckFailed: ``condition`` is false.
    """
    one_bool = isinstance(condition, bool) or (isinstance(condition, torch.Tensor) and condition.numel() == 1)
    if not one_bool:
        raise TypeError(f"holds() needs one bool, got {condition!r}")
    if not bool(condition):
        raise CheckFailed(f"{what}: does not hold ({detail})" if detail else f"{what}: does not hold")
    _say(what, "yes", detail)


def claim(claim_id: str, condition: bool, evidence: str) -> None:
    """Assert a sentence on the page about a computed result; print nothing.

    Args:
        claim_id: the id the sentence has in ``tests/site/claims.yml`` ("flash-attention/third-skipped").
        condition: what must be true for the sentence to be true.
        evidence: the numbers the condition was computed from, for the build log when it fails.

    Raises:
        ClaimFailed: ``condition`` is false: the page's sentence no longer matches its data.
    """
    if not bool(condition):
        raise ClaimFailed(f"claim {claim_id!r} no longer holds: {evidence}")

