"""Figures for the lessons, emitted as byte-for-byte reproducible SVG.

matplotlib is imported lazily, so the rest of the package needs only torch.
"""

from __future__ import annotations

import io
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Sequence

    from matplotlib.axes import Axes
    from matplotlib.figure import Figure
    from torch import Tensor

__all__ = ["attention_heatmap", "attention_heatmaps", "figure", "svg"]


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


def attention_heatmap(
    ax: Axes,
    weights: Tensor,
    *,
    queries: Sequence[str] | None = None,
    keys: Sequence[str] | None = None,
    title: str | None = None,
    annotate: bool = False,
) -> None:
    """Draw one head's attention weights on ``ax``: rows are queries, columns are keys.

    Args:
        ax: the axes to draw on.
        weights: one head's weights, rows summing to 1.
        queries: labels of the rows (query tokens).
        keys: labels of the columns (key tokens).
        title: axes title.
        annotate: write each weight in its cell (for small maps).

    Shapes:
        weights: ``(T, S)``
    """
    w = weights.detach().float().cpu()
    ax.imshow(w.numpy(), cmap="viridis", vmin=0.0, vmax=1.0, aspect="auto")
    T, S = w.shape
    xlabels = list(keys) if keys is not None else [str(j) for j in range(S)]
    ylabels = list(queries) if queries is not None else [str(i) for i in range(T)]
    ax.set_xticks(range(S), labels=xlabels, rotation=90, fontsize=8)
    ax.set_yticks(range(T), labels=ylabels, fontsize=8)
    ax.set_xlabel("key (attended to)", fontsize=8)
    ax.set_ylabel("query", fontsize=8)
    if title:
        ax.set_title(title, fontsize=9)
    if annotate:
        for i in range(T):
            for j in range(S):
                value = float(w[i, j])
                ax.text(
                    j,
                    i,
                    f"{value:.2f}",
                    ha="center",
                    va="center",
                    fontsize=7,
                    color="black" if value > 0.5 else "white",
                )


def attention_heatmaps(
    weights: Tensor,
    tokens: Sequence[str] | None = None,
    *,
    titles: Sequence[str] | None = None,
    cols: int = 4,
    size: float = 2.4,
) -> Figure:
    """A grid of heatmaps, one per head.

    Args:
        weights: attention weights of several heads over one sequence.
        tokens: token labels (used for both axes of self-attention).
        titles: one title per head (default ``head 0``, ``head 1``, ...).
        cols: heads per row.
        size: inches per panel.

    Shapes:
        weights: ``(H, T, S)``

    Example:
        >>> import torch
        >>> fig = attention_heatmaps(torch.rand(2, 3, 3).softmax(-1), ["a", "b", "c"])
    """
    H = weights.shape[0]
    cols = min(cols, H)
    rows = -(-H // cols)
    fig = figure(figsize=(size * cols, size * rows))
    axes = fig.subplots(rows, cols, squeeze=False)
    for h in range(rows * cols):
        ax = axes[h // cols][h % cols]
        if h >= H:
            ax.set_axis_off()
            continue
        title = titles[h] if titles is not None else f"head {h}"
        attention_heatmap(ax, weights[h], queries=tokens, keys=tokens, title=title)
    return fig
