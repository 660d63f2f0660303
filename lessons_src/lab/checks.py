"""What a page prints about a comparison, and what its sentences say about a result, checked at build time.

A lesson that prints ``torch.allclose(a, b)`` can print ``False`` beside a sentence saying the two agree.
Pages print comparisons through this module instead: :func:`close`, :func:`equal` and :func:`holds` print
what was compared, the largest differences and the tolerance, and raise :class:`CheckFailed` when the
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
      max |diff| 0.0e+00, rel 0.0e+00
      allowed 1e-06 + 1e-05·|want|
"""

from __future__ import annotations

import builtins
import sys
import textwrap
from collections.abc import Callable, Mapping

import torch

WIDTH = 38
"""The widest line these checks print: a code block's width at 375 px, in characters (inside a collapsible, 31:
there a longer line wraps, its continuation indented)."""


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
    for part in detail.splitlines():
        for line in textwrap.wrap(part, WIDTH, initial_indent="  ", subsequent_indent="  "):
            out(line)


def _number(x: object) -> bool:
    return isinstance(x, int | float)  # bool too: a subclass of int


def _pairs(got: object, want: object, where: str = "") -> list[tuple[str, torch.Tensor, torch.Tensor]]:
    """The tensors of ``got`` and ``want`` side by side, each with where it sits (``[2]``, ``['bias']``).

    ``got`` and ``want`` are tensors, numbers, or lists, tuples and mappings of them (a model's gradients, a
    ``state_dict``), nested alike. A number is compared as a 0-d tensor.

    Raises:
        CheckFailed: the structures differ (a length, a key, a tensor against something else).
        TypeError: a value is of a type this module does not compare (a string, a set, an array).
    """
    for x in (got, want):
        if isinstance(x, str | bytes) or not (
            isinstance(x, torch.Tensor | Mapping | list | tuple) or _number(x)
        ):
            raise TypeError(f"the checks compare tensors, numbers, and lists, tuples or mappings of them; "
                            f"{where or 'the value'} is a {type(x).__name__}")
    if isinstance(got, torch.Tensor) or isinstance(want, torch.Tensor) or _number(got) or _number(want):
        if not (isinstance(got, torch.Tensor) or _number(got)) or not (isinstance(want, torch.Tensor) or _number(want)):
            raise CheckFailed(f"{where or 'the value'} is a {type(got).__name__} where the reference has "
                              f"a {type(want).__name__}")
        return [(where, torch.as_tensor(got), torch.as_tensor(want))]
    if isinstance(got, Mapping) or isinstance(want, Mapping):
        if not (isinstance(got, Mapping) and isinstance(want, Mapping)):
            raise CheckFailed(f"{where or 'the value'} is a {type(got).__name__} where the reference has "
                              f"a {type(want).__name__}")
        if set(got) != set(want):
            missing, extra = sorted(set(want) - set(got), key=repr), sorted(set(got) - set(want), key=repr)
            raise CheckFailed(f"the keys of {where or 'the mapping'} differ: missing {missing}, extra {extra}")
        return [p for key in got for p in _pairs(got[key], want[key], f"{where}[{key!r}]")]
    got_list, want_list = list(got), list(want)  # type: ignore[call-overload]
    if len(got_list) != len(want_list):
        raise CheckFailed(f"compared {len(got_list)} values with {len(want_list)} at {where or 'the top'}: "
                          "the counts must match")
    return [p for i, (g, w) in enumerate(zip(got_list, want_list, strict=True)) for p in _pairs(g, w, f"{where}[{i}]")]


def _index(mask: torch.Tensor) -> str:
    """Where the first True of ``mask`` is, written as an index (``[0, 3]``; empty for a 0-d tensor)."""
    first = mask.nonzero()[0].tolist()
    return f"[{', '.join(map(str, first))}]" if first else ""


def _for_pairs(what: str, got: object, want: object) -> list[tuple[str, torch.Tensor, torch.Tensor]]:
    try:
        pairs = _pairs(got, want)
    except CheckFailed as err:  # a structure that differs: say which comparison
        raise CheckFailed(f"{what}: {err}") from None
    if not pairs:
        raise CheckFailed(f"{what}: nothing to compare, no tensor in either")
    for where, g, w in pairs:
        if g.shape != w.shape:
            raise CheckFailed(f"{what}: shapes differ{' at ' + where if where else ''}, "
                              f"{tuple(g.shape)} vs {tuple(w.shape)}")
        if g.numel() == 0:
            raise CheckFailed(f"{what}: nothing to compare{' at ' + where if where else ''}, "
                              f"both are empty {tuple(g.shape)}")
    return pairs


def close(what: str, got: object, want: object, *, rtol: float = 1e-5, atol: float = 1e-6) -> None:
    """Print that ``got`` matches ``want`` element by element, or raise :class:`CheckFailed`.

    Each finite entry must satisfy ``|got - want| <= atol + rtol * |want|`` (the rule of ``torch.isclose``), so
    a large value elsewhere never widens the tolerance of a small one. Non-finite entries must match exactly:
    ``-inf`` where the reference has ``-inf`` (a masked score), NaN where it has NaN, and nowhere else.
    Something must be compared: two empty tensors, or tensors with no finite value, fail.

    Args:
        what: what is compared, as the reader should read it ("output == SDPA").
        got: a tensor or a number, or a list, tuple or mapping of them (a model's gradients, a ``state_dict``).
        want: the reference, of the same structure and shapes.
        rtol: tolerance relative to each entry of ``want``.
        atol: absolute tolerance, for entries near zero; when values are large, derive it from their scale
            (``atol=1e-6 * want.abs().max()``, say) and print it.

    It prints the largest absolute difference and the largest relative one, over the entries whose bound
    ``rtol`` sets (``rtol * |want| >= atol``: near zero ``atol`` does, and a large relative difference there
    would read as a contradiction of "yes"), and returns nothing, so a notebook cell that ends with it shows
    only the printed lines.

    Raises:
        CheckFailed: the structures or shapes differ, nothing is compared, the non-finite entries differ, or an
            entry differs by more than its tolerance (the message names the first such entry).
        TypeError: a value is not a tensor, number, list, tuple or mapping (a string, say).
    """
    worst, rel, nonfinite = 0.0, 0.0, 0
    for where, g, w in _for_pairs(what, got, want):
        if g.is_complex() or w.is_complex():
            raise TypeError(f"close() compares real tensors; {where or 'the value'} is complex")
        g64, w64 = g.detach().cpu().double(), w.detach().cpu().double()
        finite = torch.isfinite(w64)
        same_nonfinite = ~finite & ((g64 == w64) | (g64.isnan() & w64.isnan()))
        wrong = (torch.isfinite(g64) != finite) | (~finite & ~same_nonfinite)
        if wrong.any():
            i = _index(wrong)
            at = tuple(wrong.nonzero()[0].tolist())
            raise CheckFailed(f"{what}: {int(wrong.sum())} entries are not finite in one and finite or another "
                              f"non-finite value in the other; the first, {where}{i}, is {g64[at].item():g} where "
                              f"the reference has {w64[at].item():g}")
        if not finite.any():
            raise CheckFailed(f"{what}: nothing to compare{' at ' + where if where else ''}: "
                              f"no entry of the reference is finite")
        nonfinite += int((~finite).sum())
        diff = torch.where(finite, g64 - w64, 0.0).abs()
        allowed = atol + rtol * torch.where(finite, w64, 0.0).abs()
        over = diff > allowed
        if over.any():
            at = tuple(over.nonzero()[0].tolist())
            raise CheckFailed(f"{what}: {int(over.sum())} of {g.numel()} entries exceed the tolerance; the first, "
                              f"{where}{_index(over)}, is {g64[at].item():.6g} where the reference has "
                              f"{w64[at].item():.6g}: |diff| {diff[at].item():.2e} > {allowed[at].item():.2e} "
                              f"(atol {atol:g} + rtol {rtol:g} × |want|)")
        worst = max(worst, diff.max().item())
        relative = finite & (w64 != 0) & (rtol * w64.abs() >= atol)  # where rtol, not atol, sets the bound
        if relative.any():
            rel = max(rel, (diff[relative] / w64[relative].abs()).max().item())
    detail = f"max |diff| {worst:.1e}, rel {rel:.1e}\nallowed {atol:g} + {rtol:g}·|want|"
    if nonfinite:
        detail += f"\n{nonfinite} inf/NaN in the same places"
    _say(what, "yes", detail)


def equal(what: str, got: object, want: object) -> None:
    """Print that ``got`` equals ``want`` exactly, or raise :class:`CheckFailed`.

    Tensors (alone, or in lists, tuples and mappings) are compared bit for bit, with their shapes; other values
    (shapes, token lists, strings) by ``==``.

    Raises:
        CheckFailed: the values differ (for tensors: where, the shape, or how many elements differ), or the
            tensors are empty (nothing compared).
    """
    if not _holds_tensor(got) and not _holds_tensor(want):
        if got != want:
            raise CheckFailed(f"{what}: {got!r} != {want!r}")
        _say(what, "yes")
        return
    for where, g, w in _for_pairs(what, got, want):
        if not torch.equal(g, w):
            differ = g != w
            raise CheckFailed(f"{what}: {int(differ.sum())} of {g.numel()} elements differ; the first, "
                              f"{where}{_index(differ)}, is {g[differ][0].item()!r} where the reference has "
                              f"{w[differ][0].item()!r}")
    _say(what, "yes", "bit for bit")


def _holds_tensor(x: object) -> bool:
    if isinstance(x, torch.Tensor):
        return True
    if isinstance(x, Mapping):
        return any(_holds_tensor(v) for v in x.values())
    return isinstance(x, list | tuple) and any(_holds_tensor(v) for v in x)


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

