"""MkDocs hook: each lesson page shows its reading time, computed at build from the page's own words.

Words are counted in the rendered page text, code blocks, figures and math left out (code is read at a
different pace, and a reader who runs it takes longer still). The estimate is the word count at
READING_WPM words per minute, rounded up, and the line under the title states both numbers, so a reader
can see how it was computed. Pages outside READ_PAGES (the code reference, the practice widgets) get none.
"""

from __future__ import annotations

import math
import re
from typing import Any

READING_WPM = 200  # a common estimate for careful reading of technical prose
READ_PAGES = ("lessons/", "summary.md", "glossary.md")

_SKIP = re.compile(
    r"<(pre|svg|script|style|table)\b.*?</\1>"
    r'|<(span|div) class="arithmatex">.*?</\2>'
    r'|<span class="katex">.*?</span></span></span>',
    re.S,
)
_TAG = re.compile(r"<[^>]+>")
_WORD = re.compile(r"[A-Za-z0-9][\w'’-]*")
_H1_END = re.compile(r"</h1>")


def count_words(html: str) -> int:
    """Words of prose in a rendered page: code, figures, tables and math are left out."""
    text = _TAG.sub(" ", _SKIP.sub(" ", html))
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
