"""lessons_src.lab.plotting: figures render, and their SVG is byte-for-byte reproducible."""

from __future__ import annotations

import torch

from lessons_src.lab.plotting import attention_heatmaps, figure, svg


def test_svg_is_reproducible_and_named() -> None:
    def make() -> str:
        torch.manual_seed(0)
        fig = attention_heatmaps(torch.rand(3, 4, 4).softmax(-1), ["a", "b", "c", "d"], cols=2)
        return svg(fig, title="three heads")

    first, second = make(), make()
    assert first == second
    assert first.count('aria-label="three heads"') == 2 and first.count("<svg") == 2  # wide and narrow
    assert "dc:date" not in first


def test_narrow_variant_fits_a_phone_column_with_legible_type_and_leaves_the_figure_alone() -> None:
    import re

    fig = attention_heatmaps(torch.rand(4, 6, 6).softmax(-1), [f"tok{i}" for i in range(6)], cols=4)
    size = tuple(fig.get_size_inches())
    out = svg(fig, title="four heads")
    narrow = out[out.index('<svg class="lesson-figure-narrow"') :]
    width_pt = float(re.search(r'width="([\d.]+)pt"', narrow).group(1))  # type: ignore[union-attr]
    assert 250 < width_pt * 96 / 72 <= 343  # drawn 343 px wide, blank margins cut off
    sizes = [float(f) for f in re.findall(r"font-size: ([\d.]+)px", narrow)]
    assert sizes and min(sizes) >= 9.0  # 9 pt at natural size is 12 CSS px
    wide = out[: out.index('<svg class="lesson-figure-narrow"')]
    assert min(float(f) for f in re.findall(r"font-size: ([\d.]+)px", wide)) == 8.0  # the figure as drawn
    assert tuple(fig.get_size_inches()) == size


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
