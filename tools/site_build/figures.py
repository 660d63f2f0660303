"""Every inline SVG figure becomes a file, loaded by an ``<img>``, so a page's DOM stays small.

Part of the post-build step (:mod:`postbuild`), which runs over the built HTML.

``lessons_src.lab.plotting.svg`` prints a ``<figure class="lesson-figure">`` holding two ``<svg>``
elements, the figure as drawn and a variant drawn for a phone's column. Inline, a figure costs the page
thousands of DOM elements (the style and layout work that made the long lessons slow on a phone). For each
built page, the step

* writes each SVG to ``assets/figures/<first 16 hex digits of its SHA-256>.svg`` (same bytes, same name:
  builds stay byte-identical, and a figure drawn twice is stored once);
* replaces the figure's content with a ``<picture>``: a ``<source>`` for screens narrower than 45em (the
  narrow variant) and an ``<img>`` with the wide one, each with its ``width`` and ``height`` in CSS px (no
  layout shift), ``alt`` from the figure's accessible name, ``decoding="async"``, and
  ``loading="lazy"`` unless it is the page's first figure and starts within the first screenful of text;
* wraps the picture in a link to the wide file, so a tap opens the figure full size.

A figure already moved to files (no ``<svg>`` left, a ``<picture>``) is left as it is, so the step can run
twice. A figure without its accessible name fails the build, as does an SVG whose size the hook cannot read.
"""

from __future__ import annotations

import hashlib
import html
import posixpath
import re
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pathlib import Path

FIGURE_DIR = "assets/figures"
NARROW_MEDIA = "(max-width: 44.9375em)"  # Material's phone and tablet-portrait layouts
EAGER_TEXT_CHARS = 1200  # text before a first figure that still leaves it on the first screen or so

_FIGURE = re.compile(r'<figure class="lesson-figure">(.*?)</figure>', re.S)
_SVG = re.compile(r"<svg\b[^>]*>.*?</svg>", re.S)
_SIZE = re.compile(r'<svg\b[^>]*?\swidth="([\d.]+)(pt|px)?"[^>]*?\sheight="([\d.]+)(pt|px)?"')
_ARTICLE_START = re.compile(r'<article\b[^>]*>')
_NOT_SHOWN = re.compile(r"<(style|script)\b.*?</\1\s*>|<!--.*?-->", re.S | re.I)
_PX_PER_UNIT = {"pt": 96 / 72, "px": 1.0, None: 1.0}


def _size_px(svg: str) -> tuple[int, int]:
    m = _SIZE.match(svg)
    if m is None:
        raise ValueError(f"figure SVG has no width/height attributes: {svg[:200]!r}")
    return round(float(m.group(1)) * _PX_PER_UNIT[m.group(2)]), round(float(m.group(3)) * _PX_PER_UNIT[m.group(4)])


def _label(svg: str) -> str | None:
    m = re.match(r'<svg\b[^>]*?\saria-label="([^"]*)"', svg)
    return html.unescape(m.group(1)) if m else None


def _file_bytes(svg: str) -> bytes:
    # As a file, the SVG is its own document: the attributes meant for the page (class, role, name) go.
    svg = re.sub(r'^<svg class="[^"]*"( role="img" aria-label="[^"]*")? ', "<svg ", svg, count=1)
    return ('<?xml version="1.0" encoding="utf-8" standalone="no"?>\n' + svg + "\n").encode("utf-8")


def _store(data: bytes, site_dir: Path) -> str:
    name = f"{FIGURE_DIR}/{hashlib.sha256(data).hexdigest()[:16]}.svg"
    path = site_dir / name
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    return name


def relative_url(target: str, page_url: str) -> str:
    """``target`` (a path from the site's root) as a link from the page at ``page_url`` ("" for the home page,
    "lessons/x/" for lessons/x/index.html), as MkDocs' ``get_relative_url`` writes it."""
    return posixpath.relpath(target, posixpath.dirname(page_url) or ".")


def _visible_text_length(fragment: str) -> int:
    """Characters of text a reader sees in ``fragment``: not its tags, nor what is inside a <style>, a <script> or
    a comment (an element's raw text ends at the first closing tag of its name, so a lazy match is exact)."""
    text = re.sub(r"<[^>]+>", " ", _NOT_SHOWN.sub(" ", fragment))
    return len(re.sub(r"\s+", " ", text).strip())


def externalize(output: str, page_url: str, site_dir: Path) -> str:
    """``output`` (a page's HTML) with every lesson figure moved to files under ``site_dir``."""
    article = _ARTICLE_START.search(output)
    content_start = article.end() if article else 0
    first = True

    def replace(m: re.Match[str]) -> str:
        nonlocal first
        svgs = _SVG.findall(m.group(1))
        if not svgs and "<picture>" in m.group(1):
            return m.group(0)  # moved to files by an earlier run of the step
        if not 1 <= len(svgs) <= 2:
            raise ValueError(f"page {page_url or '/'}: a lesson figure holds {len(svgs)} <svg>, expected 1 or 2")
        wide, narrow = svgs[0], svgs[-1]
        alt = _label(wide)
        if not alt:
            raise ValueError(f"page {page_url or '/'}: a figure has no accessible name (plotting.svg(..., title=...))")
        wide_url = relative_url(_store(_file_bytes(wide), site_dir), page_url)
        (w, h) = _size_px(wide)
        eager = first and _visible_text_length(output[content_start : m.start()]) <= EAGER_TEXT_CHARS
        first = False
        loading = "" if eager else ' loading="lazy"'
        source = ""
        if narrow is not wide:
            narrow_url = relative_url(_store(_file_bytes(narrow), site_dir), page_url)
            nw, nh = _size_px(narrow)
            source = f'<source media="{NARROW_MEDIA}" srcset="{narrow_url}" width="{nw}" height="{nh}">'
        img = (
            f'<img src="{wide_url}" width="{w}" height="{h}" alt="{html.escape(alt, quote=True)}"'
            f'{loading} decoding="async">'
        )
        return f'<figure class="lesson-figure"><a href="{wide_url}"><picture>{source}{img}</picture></a></figure>'

    return _FIGURE.sub(replace, output)

