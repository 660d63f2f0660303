"""Figures for the lessons, emitted as byte-for-byte reproducible SVG.

matplotlib is imported lazily, so the rest of the package needs only torch; without it a figure's import says
which extra installs it (``pip install "mha-computed[plot]"``).
"""

from __future__ import annotations

import html
import io
import json
import pickle
import re
from typing import TYPE_CHECKING, Any

from . import requires_extra

if TYPE_CHECKING:
    from collections.abc import Sequence

    from matplotlib.axes import Axes
    from matplotlib.figure import Figure
    from torch import Tensor

__all__ = ["attention_heatmap", "attention_heatmaps", "figure", "set_narrow", "svg"]


def figure(**kwargs: Any) -> Figure:
    """A new matplotlib figure (not attached to pyplot, so nothing leaks between lesson blocks).

    Example:
        >>> fig = figure(figsize=(3, 2))
        >>> ax = fig.subplots()
    """
    with requires_extra("plot"):
        from matplotlib.figure import Figure

    kwargs.setdefault("layout", "constrained")
    return Figure(**kwargs)


# A phone's content column: Material leaves 343 CSS px of a 375-px-wide screen for the page's content.
NARROW_WIDTH_PX = 343
# The smallest type in a figure drawn for that column, in points: 9 pt is 12 CSS px at natural size.
NARROW_MIN_FONT_PT = 9.0
# Material's content column on a 1280-px laptop screen: from 45em up the site's stylesheet draws a figure's wide
# variant this wide (docs/assets/site.css), whatever its own width.
DESKTOP_COLUMN_PX = 688
# A collapsible's content box in that column (Material's admonition padding and border): the narrowest place a
# lesson draws a wide figure, so the wide variant's type is sized for it.
COLLAPSIBLE_COLUMN_PX = 662
# The smallest type a reader should meet, in CSS px as drawn (on the phone and on the laptop).
MIN_TEXT_PX = 11.0
# Panels narrower than this (inches) are moved to more rows in the narrow variant.
_MIN_PANEL_IN = 1.7


def svg(fig: Figure, *, title: str | None = None, narrow: Figure | None = None) -> str:
    """Render ``fig`` as inline SVG with no date and stable element ids, plus a variant for narrow screens.

    The returned ``<figure>`` holds two ``<svg>`` elements: the figure as drawn (class
    ``lesson-figure-wide``) and a variant drawn for a phone's 343-px column (class
    ``lesson-figure-narrow``), whose smallest type is :data:`NARROW_MIN_FONT_PT` points (12 CSS px) at
    its natural size. The site's stylesheet shows one of them by screen width; the site build moves both
    into files behind a ``<picture>`` (``tools/site_build/figures.py``).

    The narrow variant is ``narrow`` if given (or a figure attached with :func:`set_narrow`); otherwise it
    is derived from a copy of ``fig``: panels in more rows, small type enlarged, long titles wrapped,
    crowded tick labels thinned. ``fig`` itself is not changed.

    Args:
        fig: the figure.
        title: accessible name for the image (read by screen readers).
        narrow: a figure drawn for narrow screens, if the automatic one does not suit.

    Returns:
        The ``<figure>`` element as text, ready to print from a ``markdown-exec`` block with ``html="1"``.

    Raises:
        TypeError: if ``fig`` or ``narrow`` is not a matplotlib ``Figure``.
    """
    with requires_extra("plot"):
        from matplotlib.figure import Figure

    for name, value in (("fig", fig), ("narrow", narrow)):
        if value is not None and not isinstance(value, Figure):
            raise TypeError(f"{name} must be a matplotlib Figure (from plotting.figure()), got {type(value).__name__}")
    derived = narrow is None and getattr(fig, "_lesson_narrow", None) is None
    categories = category_labels(fig)
    laid_out: set[int] = set()  # the copies made here whose last layout shows them as they are
    if narrow is None:
        narrow = getattr(fig, "_lesson_narrow", None)
        if narrow is None:
            narrow, done = _narrow_copy(fig)
            if done:
                laid_out.add(id(narrow))
    wide, done = _desktop_copy(fig)
    if done:
        laid_out.add(id(wide))
    wide_svg = _svg_text(wide, title=title, css_class="lesson-figure-wide", salt="lessons", categories=categories,
                         laid_out=id(wide) in laid_out)
    # a derived variant is given room to spare (its panels' heights are a guess); the blank margin is cut off
    narrow_svg = _svg_text(narrow, title=title, css_class="lesson-figure-narrow", salt="lessons-narrow", tight=derived,
                           categories=categories if derived else category_labels(narrow),
                           laid_out=id(narrow) in laid_out)
    return f'<figure class="lesson-figure">{wide_svg}{narrow_svg}</figure>'


def set_narrow(fig: Figure, narrow: Figure) -> Figure:
    """Attach a hand-made narrow-screen variant to ``fig`` (used by :func:`svg`); returns ``fig``."""
    fig._lesson_narrow = narrow  # type: ignore[attr-defined]
    return fig


def category_labels(fig: Figure) -> list[str]:
    """The tick labels ``fig`` names on its axes (set with ``set_xticks(..., labels=...)`` or drawn from strings),
    within each axis's view: what a reader must find drawn in every variant. Numbers a locator picks are not
    named (a variant may show fewer of them)."""
    names: list[str] = []
    for ax in fig.axes:
        if not ax.axison:
            continue
        for axis in (ax.xaxis, ax.yaxis):
            if not _named(axis):
                continue
            lo, hi = sorted(axis.get_view_interval())
            slack = 1e-9 * max(1.0, hi - lo)
            for loc, label in zip(axis.get_majorticklocs(), axis.get_majorticklabels(), strict=False):
                if lo - slack <= loc <= hi + slack and label.get_visible() and label.get_text().strip():
                    names.append(label.get_text())
    return names


def _named(axis: Any) -> bool:
    """Whether ``axis`` shows labels the figure names (fixed ticks with given labels, or categories)."""
    with requires_extra("plot"):
        from matplotlib.category import StrCategoryLocator
        from matplotlib.ticker import FixedLocator, LogFormatter, ScalarFormatter

    formatter, locator = axis.get_major_formatter(), axis.get_major_locator()
    return isinstance(locator, FixedLocator | StrCategoryLocator) and not isinstance(
        formatter, ScalarFormatter | LogFormatter
    )


def _desktop_copy(fig: Figure) -> tuple[Figure, bool]:
    """``fig``, or a copy whose type is at least :data:`MIN_TEXT_PX` as drawn in a collapsible; and whether
    the copy's last layout shows it as it is (then saving it need not lay it out again).

    From 45em up the site draws the wide variant :data:`DESKTOP_COLUMN_PX` wide, so a figure drawn wider than
    that shrinks and one drawn narrower grows: its smallest type must be ``MIN_TEXT_PX`` at that scale, and
    inside a collapsible (:data:`COLLAPSIBLE_COLUMN_PX`) too.
    Hand-placed drawings (no layout engine) are returned as they are: their type is sized by hand.
    """
    width_px = float(fig.get_size_inches()[0]) * 96
    least_pt = MIN_TEXT_PX * 72 / 96 * width_px / COLLAPSIBLE_COLUMN_PX * 1.01
    if fig.get_layout_engine() is None:
        return fig, False
    with requires_extra("plot"):
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.text import Text

    if all(float(t.get_fontsize()) * _math_scale(t) >= least_pt for t in fig.findobj(Text) if t.get_text()):
        return fig, False
    copy: Figure = pickle.loads(pickle.dumps(fig))
    FigureCanvasAgg(copy)
    return copy, _enlarge_type(copy, least_pt)


def _math_scale(t: Any) -> float:
    # mathtext draws super- and subscripts at 0.7 of the size (2^3 on a log axis)
    return 0.7 if re.search(r"\$.*[\^_].*\$", t.get_text()) else 1.0


def _enlarge_type(copy: Figure, least_pt: float) -> bool:
    """Raise every visible text of ``copy`` to ``least_pt`` points; wrap what then outgrows the figure or its axes.

    Returns whether the last layout drawn shows ``copy`` as it now is (nothing was changed after it).
    """
    import textwrap

    with requires_extra("plot"):
        from matplotlib.text import Text

    for ax in copy.axes:
        for axis in ("x", "y"):
            labels = getattr(ax, f"get_{axis}ticklabels")()
            if labels and labels[0].get_fontsize() < least_pt:
                ax.tick_params(axis=axis, labelsize=least_pt)
    changed = True
    for _ in range(2):  # measure, enlarge and wrap; once more to wrap what enlarging made too wide
        copy.draw_without_rendering()
        renderer = copy.canvas.get_renderer()  # type: ignore[attr-defined]
        changed = False
        for t in copy.findobj(Text):
            if not t.get_visible() or not t.get_text():
                continue
            least = least_pt / _math_scale(t)
            if float(t.get_fontsize()) < least:
                t.set_fontsize(least)
                changed = True
            limit = copy.bbox.width * 0.98
            axes = t.axes
            titles = [getattr(axes, n, None) for n in ("title", "_left_title", "_right_title")] if axes else []
            if axes is not None and t in titles:
                limit = max(axes.bbox.width * 1.15, 60.0)
            extent = t.get_window_extent(renderer).width
            if extent > limit and len(t.get_text()) > 8:
                chars = max(8, int(max(len(line) for line in t.get_text().split("\n")) * limit / extent * 0.9))
                t.set_text("\n".join(textwrap.fill(line, chars) for line in t.get_text().split("\n")))
                changed = True
        if not changed:
            break  # a second pass would measure what the first did
    return not changed


def _svg_text(
    fig: Figure,
    *,
    title: str | None,
    css_class: str,
    salt: str,
    tight: bool = False,
    categories: Sequence[str] = (),
    laid_out: bool = False,
) -> str:
    with requires_extra("plot"):
        import matplotlib

    buf = io.StringIO()
    crop: dict[str, Any] = {"bbox_inches": "tight", "pad_inches": 0.04} if tight else {}
    # savefig lays a figure out once more before drawing it: not needed when the last layout is current
    engine = fig.get_layout_engine() if laid_out else None
    if engine is not None:
        fig.set_layout_engine("none")
    try:
        with matplotlib.rc_context({"svg.hashsalt": salt, "svg.fonttype": "none"}):
            fig.savefig(buf, format="svg", metadata={"Date": None, "Creator": None}, **crop)
    finally:
        if engine is not None:
            fig.set_layout_engine(engine)
    text = buf.getvalue()
    body = text[text.index("<svg") :]
    label = f' role="img" aria-label="{html.escape(title, quote=True)}"' if title is not None else ""
    # the tick labels the figure names, for the site's tests (tests/browser/test_figure_labels.py)
    names = f' data-category-labels="{html.escape(json.dumps(list(categories)), quote=True)}"' if categories else ""
    return body.replace("<svg ", f'<svg class="{css_class}"{label}{names} ', 1)


def _narrow_copy(fig: Figure) -> tuple[Figure, bool]:
    """A copy of ``fig`` laid out for a phone's column (see :func:`svg`), and whether its last layout shows it as
    it is (then saving it need not lay it out again)."""
    with requires_extra("plot"):
        from matplotlib.backends.backend_agg import FigureCanvasAgg

    copy: Figure = pickle.loads(pickle.dumps(fig))
    FigureCanvasAgg(copy)  # measures text while laying out; savefig picks its own canvas for SVG
    width_in = NARROW_WIDTH_PX / 96
    old_w, old_h = (float(v) for v in fig.get_size_inches())
    rows = cols = new_rows = new_cols = 1
    grid = [ax for ax in copy.axes if ax.get_subplotspec() is not None]
    specs = {id(ax.get_subplotspec().get_gridspec()) for ax in grid}  # type: ignore[union-attr]
    if len(specs) == 1 and copy.get_layout_engine() is not None:
        gs = grid[0].get_subplotspec().get_gridspec()  # type: ignore[union-attr]
        rows, cols = gs.get_geometry()
        single = all(
            len(ax.get_subplotspec().rowspan) == 1 and len(ax.get_subplotspec().colspan) == 1  # type: ignore[union-attr]
            for ax in grid
        )
        if cols > 1 and single:
            shown = [ax for ax in grid if ax.axison]
            new_cols = max(1, min(cols, int(width_in // max(_MIN_PANEL_IN, 0.8 * old_w / cols))))
            new_rows = -(-len(shown) // new_cols)
            new_gs = copy.add_gridspec(new_rows, new_cols)
            order = sorted(shown, key=lambda a: (a.get_subplotspec().rowspan.start, a.get_subplotspec().colspan.start))  # type: ignore[union-attr]
            for i, ax in enumerate(order):
                ax.set_subplotspec(new_gs[i // new_cols, i % new_cols])
                ax.tick_params(labelleft=True, labelbottom=True)
            for ax in grid:
                if not ax.axison:
                    copy.delaxes(ax)
        else:
            new_rows, new_cols = rows, cols
    panel_scale = (width_in / new_cols) / (old_w / cols)
    text_room = 0.7 if copy.get_layout_engine() is not None else 0.0  # enlarged type needs room in every row
    height_in = max(new_rows * (old_h / rows * panel_scale + text_room), old_h * width_in / old_w, 1.0)
    copy.set_size_inches(width_in, min(height_in, 4 * width_in))
    if copy.get_layout_engine() is None:
        return copy, False  # hand-placed drawings: enlarging type would break them; see set_narrow
    current = _enlarge_type(copy, NARROW_MIN_FONT_PT)  # whether its last layout shows the copy as it is
    good = (float(copy.get_size_inches()[0]), float(copy.get_size_inches()[1]))
    for _ in range(4):  # panels with a fixed aspect (images) leave blank bands: take the height back
        if not current:
            copy.draw_without_rendering()
            current = True
        panels = [a for a in copy.axes if a.get_subplotspec() and a.get_visible() and not hasattr(a, "_colorbar")]
        frames = [(ax.get_position(original=True), ax.get_position(original=False)) for ax in panels]
        if not frames or any(full.width - used.width > 0.005 for full, used in frames):
            if (float(copy.get_size_inches()[0]), float(copy.get_size_inches()[1])) != good:
                copy.set_size_inches(good[0], good[1])  # went too far: a panel got narrower than its column
                current = False
            break
        good = (float(copy.get_size_inches()[0]), float(copy.get_size_inches()[1]))
        w, h = good
        slack = min(full.height - used.height for full, used in frames) * h * new_rows
        if slack < 0.05:
            break
        copy.set_size_inches(w, h - 0.7 * slack)
        current = False
    if not current:
        copy.draw_without_rendering()
    renderer = copy.canvas.get_renderer()  # type: ignore[attr-defined]
    for ax in copy.axes:
        for axis in ("x", "y"):
            ticks = list(getattr(ax, f"get_{axis}ticks")())
            labels = [lab for lab in getattr(ax, f"get_{axis}ticklabels")() if lab.get_visible()]
            if len(labels) != len(ticks) or len(labels) < 3:
                continue
            named = _named(getattr(ax, f"{axis}axis"))
            boxes = [lab.get_window_extent(renderer) for lab in labels]
            step = 1
            while step < len(labels) and any(
                boxes[i].overlaps(boxes[i + step]) for i in range(0, len(boxes) - step, step)
            ):
                step += 1
            if step > 1 and named and axis == "x":  # every named label stays: stand them on end instead
                ax.tick_params(axis="x", labelrotation=90)
                current = False
            elif step > 1 and not named:  # numbers: every step-th is enough
                texts = [lab.get_text() if i % step == 0 else "" for i, lab in enumerate(labels)]
                style = {"rotation": labels[0].get_rotation(), "fontsize": labels[0].get_fontsize()}
                getattr(ax, f"set_{axis}ticks")(ticks, labels=texts, **style)
                current = False
    return copy, current


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
