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
    assert 'aria-label="three heads"' in first and first.count("<svg") == 1
    assert "dc:date" not in first


def test_heatmap_grid_has_one_panel_per_head() -> None:
    fig = attention_heatmaps(torch.rand(5, 3, 3).softmax(-1), cols=4)
    visible = [ax for ax in fig.axes if ax.axison]
    assert len(fig.axes) == 8 and len(visible) == 5


def test_figure_is_not_attached_to_pyplot() -> None:
    import matplotlib.pyplot as plt

    before = plt.get_fignums()
    figure()
    assert plt.get_fignums() == before
