"""The home page's formula fits a phone's width: no display formula of the home page overflows at 375 px."""

from __future__ import annotations

from typing import Any

import pytest
from browser_support import open_context


@pytest.mark.parametrize("width", [375, 1280])
def test_home_formula_fits(browser: Any, server: str, width: int) -> None:
    context, _ = open_context(browser, server, viewport={"width": width, "height": 667})
    try:
        page = context.new_page()
        page.goto(server, wait_until="load")
        sizes = page.evaluate(
            "[...document.querySelectorAll('article .katex-display')].map(e => [e.scrollWidth, e.clientWidth])"
        )
        assert sizes, "the home page shows no display formula"
        overflowing = [(scroll, client) for scroll, client in sizes if scroll > client]
        assert overflowing == [], f"display formulas wider than the column at {width} px: {overflowing}"
    finally:
        context.close()
