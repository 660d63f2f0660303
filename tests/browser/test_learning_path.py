"""The home page's formula fits a phone's width: no display formula of the home page overflows at 375 px."""

from __future__ import annotations

from views import View, per_page


@per_page(pages=[""])
def test_home_formula_fits(view: View) -> None:
    sizes = view.facts["displayFormulas"]
    assert sizes, "the home page shows no display formula"
    overflowing = [(scroll, client) for scroll, client in sizes if scroll > client]
    assert overflowing == [], f"display formulas wider than the column at {view.width} px: {overflowing}"
