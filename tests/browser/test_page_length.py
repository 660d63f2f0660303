"""Every page fits 12 screens of a 375x667 phone with its collapsibles closed, holds at most 1,500 elements
outside code blocks, and its figures fit the column.

The page is opened at 375x667 (a small phone), every <details> is closed, and the document's height is
divided by the screen's: at most 12 screens (views.FACTS_JS measures it). Pages known to be too long are
listed in KNOWN_LONG with the issue that is splitting them; they are expected to fail (strictly: once such a
page fits, its entry must go).

The figure check tests the assumption of tests/site/test_page_weight.py: on this screen a figure is drawn
at most 343 px wide (Material's content column), so its text size can be computed from its SVG file.
"""

from __future__ import annotations

import os
from urllib.parse import urlsplit

import pytest
from browser_support import BASE_PATH, SITE, page_file, site_pages
from figure_text import MIN_FIGURE_TEXT_PX, smallest_text_px
from views import HEIGHT, View, ViewKey, per_page

PHONE = 375
MAX_SCREENS = 12
PHONE_COLUMN_PX = 343
MAX_ELEMENTS = 1500
# Pages over the limit whose text another issue owns. KNOWN_LONG=0 in the environment runs them as ordinary
# tests, to measure them.
KNOWN_LONG: dict[str, str] = {}
PAGES = site_pages()


def marks(path: str) -> list[pytest.MarkDecorator]:
    if path in KNOWN_LONG and os.environ.get("KNOWN_LONG", "1") != "0":
        return [pytest.mark.xfail(reason=f"too long; {KNOWN_LONG[path]}", strict=True)]
    return []


@pytest.mark.parametrize(
    "view", [pytest.param(ViewKey(p, PHONE), marks=marks(p), id=f"{PHONE}-{p or 'home'}") for p in PAGES], indirect=True
)
def test_page_fits_twelve_phone_screens(view: View) -> None:
    n = view.facts["closedHeight"] / HEIGHT[PHONE]
    print(f"SCREENS {view.path or '/'} {n:.1f}")
    assert n <= MAX_SCREENS, f"{view.name}: {n:.1f} screens of 375x667 with collapsibles closed"


def _has_lesson_figure(path: str) -> bool:
    return '<figure class="lesson-figure">' in page_file(path).read_text(encoding="utf-8")


WITH_FIGURES = [p for p in PAGES if _has_lesson_figure(p)]


def test_some_page_has_a_lesson_figure() -> None:
    assert WITH_FIGURES, "no page has a lesson figure"


@pytest.mark.parametrize("view", [ViewKey(p, PHONE) for p in WITH_FIGURES], indirect=True, ids=str)
def test_figures_fit_the_phone_column(view: View) -> None:
    figures = view.facts["lessonFigures"]
    assert figures, f"{view.name}: no figure image"
    for f in figures:
        assert 0 < f["width"] <= PHONE_COLUMN_PX + 0.5, f"{view.name}: {f['src']} drawn {f['width']} px wide"
        assert f["natural"] > 0, f"{view.name}: {f['src']} did not load"
        if f["narrow"]:  # the phone gets the variant drawn for it
            picked = f"{view.name}: a 375-px screen picked {f['src']}, not {f['narrow']}"
            assert f["src"].endswith(f["narrow"].split("/")[-1]), picked


@per_page(pages=WITH_FIGURES)
def test_figure_text_is_at_least_11_px_as_drawn(view: View) -> None:
    """Each figure's smallest text, scaled by the width the browser draws the figure at (collapsibles open): the
    site check (tests/site/test_page_weight.py) assumes the column's width, and a collapsible is narrower."""
    small = []
    for f in view.facts["figureDraws"]:
        path = SITE / urlsplit(f["src"]).path.removeprefix(BASE_PATH)
        px = smallest_text_px(path.read_text(encoding="utf-8"), f["width"])
        if px < MIN_FIGURE_TEXT_PX:
            where = f["where"].rstrip("¶")
            small.append(f"{path.name} under {where!r}, drawn {f['width']:.0f} px wide: text {px:.1f} px")
    assert small == [], f"{view.name}: figure text under {MIN_FIGURE_TEXT_PX} px:\n" + "\n".join(small)


@per_page(widths=(PHONE,))
def test_at_most_1500_elements_outside_code(view: View) -> None:
    """The DOM as the browser holds it (scripts' widgets included), code blocks aside."""
    assert view.facts["elements"] <= MAX_ELEMENTS, f"{view.name}: {view.facts['elements']} elements outside code blocks"
