"""Display formulas fit the column: none is wider than its box at 375 or 1280 px on any page.

A formula wider than the column scrolls inside its box (site.css), and on a phone nothing shows that it does:
the reader sees it cut at the right edge. A long formula is written in lines (``gathered``, ``aligned``).
"""

from __future__ import annotations

from views import View, per_page


@per_page()
def test_display_formulas_fit(view: View) -> None:
    overflowing = [(scroll, client) for scroll, client in view.facts["displayFormulas"] if scroll > client]
    assert overflowing == [], f"{view.name}: display formulas wider than the column (scroll, box): {overflowing}"


@per_page(pages=[""])
def test_the_home_page_shows_a_formula(view: View) -> None:
    assert view.facts["displayFormulas"], "the home page shows no display formula"
