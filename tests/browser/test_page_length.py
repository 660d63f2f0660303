"""Every page fits 12 screens of a 375x667 phone with its collapsibles closed, and its figures fit the column.

The page is opened at 375x667 (a small phone), every <details> is closed, and the document's height is
divided by the screen's: at most 12 screens. Pages known to be too long are listed in KNOWN_LONG with the
issue that is splitting them; they are expected to fail (strictly: once such a page fits, its entry must go).

The figure test checks the assumption of tests/site/test_page_weight.py: on this screen a figure is drawn
at most 343 px wide (Material's content column), so its text size can be computed from its SVG file.
"""

from __future__ import annotations

import os
from typing import Any

import pytest
from browser_support import open_context, site_pages

SCREEN = {"width": 375, "height": 667}
MAX_SCREENS = 12
PHONE_COLUMN_PX = 343
# Pages over the limit whose text another issue owns (lessons and summary: issue 15; practice: issue 16).
# KNOWN_LONG=0 in the environment runs them as ordinary tests, to measure them.
KNOWN_LONG: dict[str, str] = {}
PAGES = site_pages()


def screens(page: Any) -> float:
    height: float = page.evaluate(
        """() => {
            document.querySelectorAll('details[open]').forEach(d => d.removeAttribute('open'));
            return document.documentElement.scrollHeight;
        }"""
    )
    return height / SCREEN["height"]


def marks(path: str) -> list[Any]:
    if path in KNOWN_LONG and os.environ.get("KNOWN_LONG", "1") != "0":
        return [pytest.mark.xfail(reason=f"too long; {KNOWN_LONG[path]}", strict=True)]
    return []


@pytest.mark.parametrize("path", [pytest.param(p, marks=marks(p), id=p or "home") for p in PAGES])
def test_page_fits_twelve_phone_screens(browser: Any, server: str, path: str) -> None:
    context, _ = open_context(browser, server, viewport=SCREEN, is_mobile=True)
    try:
        page = context.new_page()
        page.goto(server + path, wait_until="networkidle")
        n = screens(page)
        print(f"SCREENS {path or '/'} {n:.1f}")
        assert n <= MAX_SCREENS, f"{path or 'home'}: {n:.1f} screens of 375x667 with collapsibles closed"
    finally:
        context.close()


def test_figures_fit_the_phone_column(browser: Any, server: str) -> None:
    with_figures = [p for p in PAGES if '<figure class="lesson-figure">' in _html(p)]
    assert with_figures, "no page has a lesson figure"
    context, watch = open_context(browser, server, viewport=SCREEN, is_mobile=True)
    try:
        page = context.new_page()
        for path in with_figures:
            page.goto(server + path, wait_until="networkidle")
            widths = page.evaluate(
                """async () => {
                    const imgs = [...document.querySelectorAll('.lesson-figure img')];
                    imgs.forEach(i => { i.loading = 'eager'; });
                    await Promise.all(imgs.map(i => i.decode().catch(() => null)));
                    return imgs.map(i => [i.getBoundingClientRect().width, i.currentSrc, i.naturalWidth,
                                          (i.parentElement.querySelector('source') || {}).srcset || null]);
                }"""
            )
            assert widths, f"{path}: no figure image"
            for width, src, natural, narrow in widths:
                assert 0 < width <= PHONE_COLUMN_PX + 0.5, f"{path}: {src} drawn {width} px wide"
                assert natural > 0, f"{path}: {src} did not load"
                if narrow:  # the phone gets the variant drawn for it
                    assert src.endswith(narrow.split("/")[-1]), f"{path}: a 375-px screen picked {src}, not {narrow}"
    finally:
        context.close()
    assert watch.problems() == {}, watch.problems()


def _html(path: str) -> str:
    from browser_support import page_file

    return page_file(path).read_text(encoding="utf-8")
