"""lessons_src.lab.plotting: figures render, and their SVG is byte-for-byte reproducible."""

from __future__ import annotations

import pytest
import torch

from lessons_src.lab.plotting import (
    COLLAPSIBLE_COLUMN_PX,
    MIN_TEXT_PX,
    attention_heatmaps,
    category_labels,
    figure,
    svg,
)


@pytest.mark.slow
def test_svg_is_reproducible_and_named() -> None:
    def make() -> str:
        torch.manual_seed(0)
        fig = attention_heatmaps(torch.rand(3, 4, 4).softmax(-1), ["a", "b", "c", "d"], cols=2)
        return svg(fig, title="three heads")

    first, second = make(), make()
    assert first == second
    assert first.count('aria-label="three heads"') == 2 and first.count("<svg") == 2  # wide and narrow
    assert "dc:date" not in first


def test_both_variants_have_legible_type_and_the_figure_is_left_alone() -> None:
    import re

    from matplotlib.text import Text

    fig = attention_heatmaps(torch.rand(4, 6, 6).softmax(-1), [f"tok{i}" for i in range(6)], cols=4)
    size = tuple(fig.get_size_inches())
    fonts = [t.get_fontsize() for t in fig.findobj(Text)]
    out = svg(fig, title="four heads")
    narrow = out[out.index('<svg class="lesson-figure-narrow"') :]
    width_pt = float(re.search(r'width="([\d.]+)pt"', narrow).group(1))  # type: ignore[union-attr]
    assert 250 < width_pt * 96 / 72 <= 343  # drawn 343 px wide, blank margins cut off
    sizes = [float(f) for f in re.findall(r"font-size: ([\d.]+)px", narrow)]
    assert sizes and min(sizes) >= 9.0  # 9 pt at natural size is 12 CSS px
    wide = out[: out.index('<svg class="lesson-figure-narrow"')]
    view_width = float(re.search(r'viewBox="0 0 ([\d.]+)', wide).group(1))  # type: ignore[union-attr]
    smallest = min(float(f) for f in re.findall(r"font-size: ([\d.]+)px", wide))
    assert smallest * COLLAPSIBLE_COLUMN_PX / view_width >= MIN_TEXT_PX  # as drawn in a collapsible at 1280
    assert tuple(fig.get_size_inches()) == size and [t.get_fontsize() for t in fig.findobj(Text)] == fonts


def test_named_tick_labels_are_recorded_and_all_drawn_on_a_phone() -> None:
    import html
    import json
    import re

    words = ["The", "animal", "didn't", "cross", "the", "street", "because", "it", "was", "too", "tired", "."]
    fig = figure(figsize=(7.0, 3.0))
    axes = fig.subplots(1, 2)
    for ax in axes:
        ax.bar(range(len(words)), torch.rand(len(words)).tolist())
        ax.set_xticks(range(len(words)), labels=words)
    axes[1].set_ylim(0, 1)
    assert category_labels(fig) == words * 2  # the y axes' numbers are not named
    out = svg(fig, title="two bar charts")
    narrow = out[out.index('<svg class="lesson-figure-narrow"') :]
    recorded = re.search(r'data-category-labels="([^"]*)"', narrow).group(1)  # type: ignore[union-attr]
    assert json.loads(html.unescape(recorded)) == words * 2
    drawn = re.findall(r"<text [^>]*>([^<]*)</text>", narrow)
    assert all(drawn.count(html.escape(w, quote=False)) >= 2 for w in words), drawn  # none thinned out


def test_svg_rejects_what_is_not_a_figure() -> None:
    import pytest

    with pytest.raises(TypeError, match="narrow must be a matplotlib Figure"):
        svg(figure(), narrow="small")  # type: ignore[arg-type]


def test_heatmap_grid_has_one_panel_per_head() -> None:
    fig = attention_heatmaps(torch.rand(5, 3, 3).softmax(-1), cols=4)
    visible = [ax for ax in fig.axes if ax.axison]
    assert len(fig.axes) == 8 and len(visible) == 5


def test_figure_is_not_attached_to_pyplot() -> None:
    import matplotlib.pyplot as plt

    before = plt.get_fignums()
    figure()
    assert plt.get_fignums() == before
