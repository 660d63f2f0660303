"""Figures for the lessons, emitted as byte-for-byte reproducible SVG.

matplotlib is imported lazily, so the rest of the package needs only torch.
"""

from __future__ import annotations

import io
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from matplotlib.figure import Figure

__all__ = ["figure", "svg"]


def figure(**kwargs: Any) -> Figure:
    """A new matplotlib figure (not attached to pyplot, so nothing leaks between lesson blocks).

    Example:
        >>> fig = figure(figsize=(3, 2))
        >>> ax = fig.subplots()
    """
    from matplotlib.figure import Figure

    kwargs.setdefault("layout", "constrained")
    return Figure(**kwargs)


def svg(fig: Figure, *, title: str | None = None) -> str:
    """Render ``fig`` as an inline SVG string with no date and stable element ids.

    Args:
        fig: the figure.
        title: accessible name for the image (read by screen readers).

    Returns:
        The ``<svg>`` element as text, ready to print from a ``markdown-exec`` block with ``html="1"``.
    """
    import matplotlib

    buf = io.StringIO()
    with matplotlib.rc_context({"svg.hashsalt": "lessons", "svg.fonttype": "none"}):
        fig.savefig(buf, format="svg", metadata={"Date": None, "Creator": None})
    text = buf.getvalue()
    start = text.index("<svg")
    body = text[start:]
    if title is not None:
        body = body.replace("<svg ", f'<svg role="img" aria-label="{title}" ', 1)
    return f'<figure class="lesson-figure">{body}</figure>'
