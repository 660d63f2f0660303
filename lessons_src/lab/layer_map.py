"""Where each 2025-26 piece sits in an attention layer: the order as data, and the figure drawn from it.

:data:`LAYER_STEPS` lists the steps of one attention layer from its input to ``W_O``, each with the models
whose own code has it (as the pinned ``transformers`` ships them). :func:`layer_map` draws that list, with the
pieces a page teaches highlighted; :func:`sink_column_map` draws one head's softmax with its sink column. The
layer's figure draws the data and nothing else, and ``tests/lab/test_layer_map.py`` reads the same list against the
course's layer and the models' modules: a step moved here fails there.

The rules behind the order, each written out on the lesson that teaches it:

* a QK-norm with a weight comes before RoPE (the weight scales feature ``i``; the rotation mixes ``i`` with
  ``i + E/2``); a norm without one may come after, as Llama 4 Scout's does (a rotation keeps the length);
* the soft-cap acts on the scaled scores and before the mask (a capped ``-inf`` is a finite ``-c``);
* the sink is one more column of the softmax, after the mask, and has no value;
* the gate scales each head's output before ``W_O`` mixes the heads.

References:
    Qwen3 (arXiv:2505.09388), Gemma 2 (arXiv:2408.00118), Gemma 3 (arXiv:2503.19786), gpt-oss
    (arXiv:2508.10925), Qiu et al., "Gated Attention for Large Language Models" (arXiv:2505.06708).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from . import requires_extra

if TYPE_CHECKING:
    from collections.abc import Iterable

    from matplotlib.axes import Axes
    from matplotlib.figure import Figure
    from matplotlib.patches import Rectangle
    from torch import Tensor

__all__ = ["LAYER_STEPS", "LayerStep", "layer_map", "sink_column_map"]


@dataclass(frozen=True)
class LayerStep:
    """One step of an attention layer.

    Attributes:
        name: the step's short name (``"qk_norm"``), what :func:`layer_map`'s ``highlight`` takes.
        label: what the figure writes in the step's box.
        models: the models whose attention code has this step (empty: every layer has it).
        lead: the words before the models' names (``"windows:"``), if the step is in every layer but a
            variant of it is the models'.
    """

    name: str
    label: str
    models: tuple[str, ...] = ()
    lead: str = ""

    @property
    def note(self) -> str:
        """What the figure writes beside the box: the models, after the lead."""
        return " ".join(part for part in (self.lead, ", ".join(self.models)) if part)

    def note_lines(self, width: int) -> str:
        """:attr:`note` in lines of at most ``width`` characters, never breaking a model's name."""
        words = [self.lead] if self.lead else []
        words += [f"{model}," for model in self.models[:-1]] + list(self.models[-1:])
        lines: list[str] = []
        for word in words:
            if lines and len(lines[-1]) + 1 + len(word) <= width:
                lines[-1] += " " + word
            else:
                lines.append(word)
        return "\n".join(lines)


LAYER_STEPS: tuple[LayerStep, ...] = (
    LayerStep("project", "project x to q, k, v"),
    LayerStep("qk_norm", "QK-norm, with a weight", ("Qwen3", "Gemma 3", "OLMo 2", "Qwen3-Next")),
    LayerStep("rope", "RoPE on q and k"),
    LayerStep("qk_norm_after", "QK-norm, no weight", ("Llama 4 Scout",)),
    LayerStep("scores", "scores: q·kᵀ × scale"),
    LayerStep("softcap", "soft-cap: c·tanh(s / c)", ("Gemma 2",)),
    LayerStep("mask", "mask: causal", ("Gemma 3", "gpt-oss"), lead="windows:"),
    LayerStep("softmax", "softmax (+ a sink column)", ("gpt-oss",), lead="sink:"),
    LayerStep("values", "weights × v"),
    LayerStep("gate", "gate: × σ(x W_G)", ("Qwen3-Next",)),
    LayerStep("out", "W_O mixes the heads"),
)
"""The steps of a 2025-26 attention layer, in order from the input to the output."""

_EDGE, _INK, _FAINT = "#333333", "#111111", "#555555"
_EVERY, _SOME, _LIT = "#e9ecef", "#fff3bf", "#ffc078"  # every layer's step, some models', the page's
_FONT_PT = 9.0  # 12 CSS px on a phone's column, and at least 11 px in a collapsible on a laptop


def _highlighted(highlight: Iterable[str]) -> set[str]:
    if isinstance(highlight, str):
        raise TypeError(f"highlight must be a list of step names, not one string; got highlight={highlight!r}")
    names = {step.name for step in LAYER_STEPS}
    chosen = set()
    for name in highlight:
        if name not in names:
            raise ValueError(f"highlight must name steps of LAYER_STEPS ({', '.join(sorted(names))}); got {name!r}")
        chosen.add(name)
    return chosen


def _column(ax: Axes, steps: tuple[LayerStep, ...], x: float, top: float, row: float, box_w: float, wrap: int,
            lit: set[str]) -> list[tuple[float, float]]:
    """Draw ``steps`` top down from ``top`` (axes in inches); returns each box's (top, bottom) edge."""
    with requires_extra("plot"):
        from matplotlib.patches import FancyArrowPatch, FancyBboxPatch

    edges = []
    box_h = row * 0.62
    for i, step in enumerate(steps):
        yc = top - (i + 0.5) * row
        colour = _LIT if step.name in lit else (_SOME if step.models else _EVERY)
        ax.add_patch(FancyBboxPatch((x, yc - box_h / 2), box_w, box_h, boxstyle="round,pad=0.02,rounding_size=0.05",
                                    fc=colour, ec=_EDGE, lw=1.4 if step.name in lit else 0.7,
                                    ls="-" if not step.models or step.name in lit else (0, (3, 2))))
        ax.text(x + box_w / 2, yc, step.label, ha="center", va="center", fontsize=_FONT_PT, color=_INK,
                fontweight="bold" if step.name in lit else "normal")
        if step.note:
            ax.text(x + box_w + 0.1, yc, step.note_lines(wrap), ha="left", va="center", fontsize=_FONT_PT,
                    color=_FAINT, linespacing=1.1)
        edges.append((yc + box_h / 2, yc - box_h / 2))
        if i:
            ax.add_patch(FancyArrowPatch((x + box_w / 2, edges[-2][1]), (x + box_w / 2, edges[-1][0]),
                                         arrowstyle="-|>", mutation_scale=7, lw=0.7, color=_EDGE, shrinkA=0,
                                         shrinkB=0))
    return edges


def _canvas(width: float, height: float) -> tuple[Figure, Axes]:
    from .plotting import figure

    fig = figure(figsize=(width, height), layout=None)
    ax = fig.add_axes((0, 0, 1, 1))
    ax.set_xlim(0, width)
    ax.set_ylim(0, height)
    ax.set_axis_off()
    return fig, ax


def _narrow(lit: set[str]) -> Figure:
    """One column, top to bottom, for a phone's 343-px column."""
    from .plotting import NARROW_WIDTH_PX

    width, row = NARROW_WIDTH_PX / 96, 0.31
    fig, ax = _canvas(width, row * len(LAYER_STEPS) + 0.1)
    _column(ax, LAYER_STEPS, 0.04, row * len(LAYER_STEPS) + 0.05, row, 1.85, 19, lit)
    return fig


def _wide(lit: set[str]) -> Figure:
    """Two columns side by side: up to the scores, then from the cap to ``W_O``, joined along the gap."""
    split = next(i for i, step in enumerate(LAYER_STEPS) if step.name == "softcap")
    left, right = LAYER_STEPS[:split], LAYER_STEPS[split:]
    row = 0.4
    height = row * max(len(left), len(right)) + 0.1
    fig, ax = _canvas(7.1, height)
    box_w, x2, gap = 1.75, 3.6, 3.48
    a = _column(ax, left, 0.05, height - 0.05, row, box_w, 20, lit)
    b = _column(ax, right, x2, height - 0.05, row, box_w, 20, lit)
    low, high = (a[-1][0] + a[-1][1]) / 2, (b[0][0] + b[0][1]) / 2  # the middles of the last and first boxes
    ax.plot([0.05 + box_w + 0.02, gap, gap], [low, low, high], color=_EDGE, lw=0.7)
    ax.annotate("", (x2 - 0.02, high), (gap, high), arrowprops={"arrowstyle": "-|>", "mutation_scale": 7, "lw": 0.7,
                                                               "color": _EDGE, "shrinkA": 0, "shrinkB": 0})
    return fig


def layer_map(highlight: Iterable[str] = ()) -> Figure:
    """Draw :data:`LAYER_STEPS`: each step a box, in order, the models that have it beside it.

    Steps every layer has are grey; steps only some models have are dashed and yellow, with the models named;
    the steps named in ``highlight`` (the page's pieces) are orange and bold. The figure is drawn in two
    columns; its narrow-screen variant (:func:`lessons_src.lab.plotting.set_narrow`) in one.

    Args:
        highlight: names of steps (:attr:`LayerStep.name`) to highlight.

    Returns:
        A matplotlib figure (emit it with :func:`lessons_src.lab.plotting.svg`).

    Raises:
        TypeError: if ``highlight`` is a string.
        ValueError: if it names a step that is not in :data:`LAYER_STEPS`.

    Example:
        >>> fig = layer_map(highlight=["softcap"])  # doctest: +SKIP
    """
    from .plotting import set_narrow

    lit = _highlighted(highlight)
    return set_narrow(_wide(lit), _narrow(lit))


def _sink_panel(weights: Tensor, width: float, height: float) -> Figure:
    from .plotting import figure

    w = weights.detach().double().cpu()
    T, S = w.shape[0], w.shape[1] - 1
    fig = figure(figsize=(width, height))
    ax = fig.subplots()
    for i in range(T):
        for j in range(S + 1):
            x = j + (0.3 if j == S else 0.0)  # the sink's column set apart
            value = float(w[i, j])
            ax.add_patch(_cell(x, i, value, sink=j == S))
            if value > 0:  # a hidden key's cell is left blank
                ax.text(x + 0.5, i + 0.5, f"{value:.2f}", ha="center", va="center", fontsize=_FONT_PT,
                        color=_INK if value < 0.55 else "#ffffff")
    ax.set_xlim(0, S + 1.3)
    ax.set_ylim(T, 0)
    ax.set_xticks([j + 0.5 for j in range(S)] + [S + 0.8], labels=[f"k{j}" for j in range(S)] + ["sink"],
                  fontsize=_FONT_PT)
    ax.set_yticks([i + 0.5 for i in range(T)], labels=[f"q{i}" for i in range(T)], fontsize=_FONT_PT)
    ax.tick_params(length=0)
    for side in ax.spines.values():
        side.set_visible(False)
    ax.set_xlabel("each row sums to 1", fontsize=_FONT_PT)
    return fig


def _cell(x: float, y: float, value: float, *, sink: bool) -> Rectangle:
    with requires_extra("plot"):
        from matplotlib import colormaps
        from matplotlib.colors import to_hex
        from matplotlib.patches import Rectangle

    colour = "#f1f3f5" if value == 0 else to_hex(colormaps["Oranges" if sink else "Blues"](0.08 + 0.85 * value))
    return Rectangle((x + 0.03, y + 0.03), 0.94, 0.94, fc=colour, ec="none")


def sink_column_map(weights: Tensor) -> Figure:
    """One head's softmax with a sink: its weights on the keys, and on the sink's column, set apart, in its own colour.

    Args:
        weights: the softmax over ``[scores | sink logit]`` of one head, the sink's column last, each row summing
            to 1 (a query that sees no key: its row is all zeros but the sink).

    Shapes:
        weights: ``(T, S + 1)``

    Returns:
        A matplotlib figure (emit it with :func:`lessons_src.lab.plotting.svg`), with a narrow-screen variant.

    Raises:
        TypeError: if ``weights`` is not a tensor.
        ValueError: if it is not 2-D with at least two columns, or a row does not sum to 1.

    Example:
        >>> import torch
        >>> s = torch.tensor([[0.0, float("-inf"), 1.0], [0.5, 0.0, 1.0]])  # two queries, two keys, the sink
        >>> fig = sink_column_map(torch.softmax(s, -1))  # doctest: +SKIP
    """
    import torch

    from .plotting import NARROW_WIDTH_PX, set_narrow

    if not isinstance(weights, torch.Tensor):
        raise TypeError(f"weights must be a tensor (T, S + 1), got {type(weights).__name__}")
    if weights.dim() != 2 or weights.shape[1] < 2:
        raise ValueError(f"weights must be (T, S + 1), the sink's column last; got shape {tuple(weights.shape)}")
    sums = weights.detach().double().sum(-1)
    if not torch.allclose(sums, torch.ones_like(sums), atol=1e-4):
        raise ValueError(f"weights must be a softmax over the keys and the sink, rows summing to 1; got sums "
                         f"{sums.tolist()}")
    rows = weights.shape[0]
    return set_narrow(_sink_panel(weights, 4.6, 0.34 * rows + 0.7),
                      _sink_panel(weights, NARROW_WIDTH_PX / 96, 0.34 * rows + 0.75))
