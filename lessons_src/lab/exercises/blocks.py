"""An input that remembers how it was reduced: an online softmax must work block by block, and its values
cannot show whether it did.

The online-softmax exercise hands the learner's function ``in_blocks(x, block_size)``: a tensor that behaves
as ``x`` does, and so does every tensor computed from it, but each carries a note of the first reduction
on its way (a max, a sum, a softmax, ...) that took more than ``block_size`` values of a row, its last dim,
at once. A block-by-block answer reduces one block at a time and returns a tensor with no note; a softmax
over whole rows (two passes over the row, or one block of the whole row) returns one with a note, which
:func:`whole_rows` reads and the checker reports.

>>> x = in_blocks(torch.randn(2, 6), block_size=2)
>>> whole_rows(torch.softmax(x, dim=-1))
'`softmax` over 6 values of a row at once (block_size=2)'
>>> whole_rows(x[..., :2].amax(dim=-1)) is None
True
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

__all__ = ["in_blocks", "whole_rows"]

# the torch functions and Tensor methods that combine the values along a dim, by name
REDUCTIONS = frozenset({"amax", "max", "sum", "nansum", "mean", "logsumexp", "softmax", "log_softmax", "cumsum",
                        "cummax", "logcumsumexp"})


class _InBlocks(Tensor):
    """A tensor whose results note their first reduction over more than ``block_size`` values of a row."""

    block_size: int
    note: str | None

    @classmethod
    def __torch_function__(
        cls, func: Callable[..., Any], types: Any, args: tuple[Any, ...] = (), kwargs: dict[str, Any] | None = None
    ) -> Any:
        kwargs = kwargs or {}
        out = super().__torch_function__(func, types, args, kwargs)  # type: ignore[no-untyped-call]
        given = [t for t in _leaves((args, kwargs)) if isinstance(t, _InBlocks) and hasattr(t, "block_size")]
        if given:
            block_size = given[0].block_size
            note = _wide_reduction(func, args, kwargs, block_size) or next((t.note for t in given if t.note), None)
            for t in _leaves(out):
                if isinstance(t, _InBlocks):
                    t.block_size, t.note = block_size, note
        return out

    def __repr__(self, *, tensor_contents: Any = None) -> str:  # type: ignore[override]  # torch's signature
        """Printed as a plain tensor, ``tensor([...])``: what the learner's function was given."""
        with torch._C.DisableTorchFunctionSubclass():
            return repr(self.as_subclass(Tensor))


def _leaves(obj: object) -> Iterator[object]:
    if isinstance(obj, list | tuple):
        for item in obj:
            yield from _leaves(item)
    elif isinstance(obj, dict):
        yield from _leaves(list(obj.values()))
    else:
        yield obj


def _wide_reduction(func: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any],
                    block_size: int) -> str | None:
    """The note for ``func(*args, **kwargs)`` when it reduces more than ``block_size`` values of a row, else None."""
    name = getattr(func, "__name__", "")
    if name not in REDUCTIONS or not args or not isinstance(args[0], Tensor) or args[0].ndim == 0:
        return None
    x, dim = args[0], kwargs.get("dim", args[1] if len(args) > 1 else None)
    if isinstance(dim, Tensor) or x.shape[-1] <= block_size:  # torch.max(a, b) is elementwise
        return None
    dims = range(x.ndim) if dim is None or dim == () or dim == [] else dim if isinstance(dim, list | tuple) else (dim,)
    if x.ndim - 1 not in {d % x.ndim for d in dims if isinstance(d, int)}:
        return None
    return f"`{name}` over {x.shape[-1]} values of a row at once (block_size={block_size})"


def in_blocks(x: Tensor, block_size: int) -> Tensor:
    """``x``, noting on what is computed from it each reduction over more than ``block_size`` values of a row."""
    watched = x.as_subclass(_InBlocks)
    watched.block_size, watched.note = block_size, None
    return watched


def whole_rows(value: object) -> str | None:
    """How ``value`` was computed from whole rows of an :func:`in_blocks` input (``"`amax` over 6 values of a
    row at once (block_size=2)"``), or None: it was computed block by block, or is no such tensor."""
    return value.note if isinstance(value, _InBlocks) else None
