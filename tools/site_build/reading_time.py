"""MkDocs hook: each lesson page shows its reading time, computed at build from the page's own words.

Words are counted in the rendered page text, code blocks, figures and math left out (code is read at a
different pace, and a reader who runs it takes longer still; math is left out whole, as arithmatex leaves it
before the post-build step typesets it or as KaTeX drew it). The estimate is the word count at
READING_WPM words per minute, rounded up, and the line under the title states both numbers, so a reader
can see how it was computed. Pages outside READ_PAGES (the code reference, the practice widgets) get none.
"""

from __future__ import annotations

import math
import re
from typing import Any

READING_WPM = 200  # a common estimate for careful reading of technical prose
READ_PAGES = ("lessons/", "summary.md", "glossary.md")

_SKIP = re.compile(r"<(pre|svg|script|style|table)\b.*?</\1>" r'|<(span|div) class="arithmatex">.*?</\2>', re.S)
_KATEX_START = re.compile(r'<span class="katex(?:-display)?">')
_SPAN = re.compile(r"<span\b|</span>")
_TAG = re.compile(r"<[^>]+>")
_WORD = re.compile(r"[A-Za-z0-9][\w'’-]*")
_H1_END = re.compile(r"</h1>")


def _without_katex(html: str) -> str:
    """``html`` with each formula KaTeX rendered (its whole outer span, nested spans counted) left out."""
    out, pos = [], 0
    while (m := _KATEX_START.search(html, pos)) is not None:
        out.append(html[pos : m.start()])
        depth, end = 1, m.end()
        while depth:
            tag = _SPAN.search(html, end)
            if tag is None:
                raise ValueError(f"a KaTeX formula is not closed: {html[m.start() : m.start() + 200]!r}")
            depth += 1 if tag.group(0) == "<span" else -1
            end = tag.end()
        pos = end
    return "".join(out) + html[pos:]


def count_words(html: str) -> int:
    """Words of prose in a rendered page: code, figures, tables and math are left out."""
    text = _TAG.sub(" ", _SKIP.sub(" ", _without_katex(html)))
    return len(_WORD.findall(text))


def reading_minutes(words: int) -> int:
    """Whole minutes to read ``words`` at READING_WPM, at least 1."""
    if words < 0:
        raise ValueError(f"words must be >= 0, got {words}")
    return max(1, math.ceil(words / READING_WPM))


def on_page_content(html: str, page: Any, **_: Any) -> str:
    src = page.file.src_uri
    if not (src.startswith(READ_PAGES[0]) or src in READ_PAGES[1:]):
        return html
    words = count_words(html)
    line = (f'<p class="reading-time">About {reading_minutes(words)} min read '
            f"({words:,} words of prose at {READING_WPM} a minute, code not counted)</p>")
    m = _H1_END.search(html)
    return html[: m.end()] + line + html[m.end() :] if m else line + html
