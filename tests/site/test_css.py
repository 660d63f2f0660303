"""The site's own stylesheets set no colour under a width media query.

The browser tests check colour contrast at the laptop width only (tests/helpers/views.py, PHONE_SKIPS_RULES): that
is sound while a phone shows the text in the colours a laptop does, which this test keeps true for docs/assets.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
STYLESHEETS = sorted((ROOT / "docs" / "assets").glob("*.css"))
_COLOUR = re.compile(
    r"(?:^|[;{\s])((?:background(?:-color)?|color|border(?:-\w+)?-color|fill|stroke|outline-color)\s*:)"
)
_COMMENT = re.compile(r"/\*.*?\*/", re.S)


def width_media_blocks(css: str) -> list[tuple[str, str]]:
    """(condition, body) of every @media block whose condition names a width, nested blocks included."""
    css = _COMMENT.sub("", css)
    found = []
    for m in re.finditer(r"@media([^{]*)\{", css):
        depth, i = 1, m.end()
        while depth and i < len(css):
            depth += {"{": 1, "}": -1}.get(css[i], 0)
            i += 1
        if "width" in m.group(1):
            found.append((m.group(1).strip(), css[m.end() : i - 1]))
    return found


def colours_under_width_queries(css: str) -> list[str]:
    return [f"@media {cond}: {hit}" for cond, body in width_media_blocks(css) for hit in _COLOUR.findall(body)]


def test_the_scanner_finds_a_colour_under_a_width_query() -> None:
    planted = "a { color: red; }\n@media screen and (max-width: 44em) { .x { margin: 0; } .y { background: #fff; } }"
    assert colours_under_width_queries(planted) == ["@media screen and (max-width: 44em): background:"]
    assert colours_under_width_queries("@media print { .x { color: #000; } }") == []


def test_there_are_stylesheets() -> None:
    assert STYLESHEETS, "no stylesheet in docs/assets"


@pytest.mark.parametrize("sheet", STYLESHEETS, ids=lambda p: p.name)
def test_no_colour_under_a_width_media_query(sheet: Path) -> None:
    found = colours_under_width_queries(sheet.read_text(encoding="utf-8"))
    assert found == [], (
        f"{sheet.name} sets colours for some widths only: {found}. The phone view's axe run skips colour contrast"
        " (tests/helpers/views.py): set the colour for every width, or check contrast at the phone width too."
    )
