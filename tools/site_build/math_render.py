"""Math rendered at build time with KaTeX, and no page left loading scripts from another host.

Part of the post-build step (:mod:`postbuild`), which runs over the built HTML of any generator:

* ``pymdownx.arithmatex`` (generic mode) wraps ``$...$`` and ``$$...$$`` in ``arithmatex`` elements; they are
  rendered with the pinned KaTeX from ``node_modules`` (one ``node`` call for the whole site), so a page shows
  typeset math with no JavaScript, and a formula KaTeX rejects fails the step (and so ``mkdocs build``),
  naming its page.
* The search index is built by the generator before this step, from the arithmatex elements: it holds each
  formula once, as its TeX (KaTeX writes a formula three times: MathML, the TeX as an annotation, and the HTML
  that is drawn).
* KaTeX's ``woff2`` fonts are copied into ``site/assets/katex/fonts/`` (its stylesheet is inlined into the
  pages with math by :mod:`page_fixes`).
* Scripts that plugins point at third-party hosts (mkdocs-jupyter adds MathJax from a CDN) are removed.
"""

from __future__ import annotations

import html
import json
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
KATEX = ROOT / "node_modules" / "katex" / "dist"
MATH = re.compile(r'<(span|div) class="arithmatex">(.*?)</\1>', re.S)
# src="//host/x.js", 'https://host/x.js' or unquoted, in any case: the rest of the tag, then its end
_REMOTE_SCRIPT = re.compile(r"""<script\b[^>]*?\ssrc\s*=\s*["']?(?:https?:)?//[^>]*>\s*</script\s*>""", re.S | re.I)
_MATHJAX_CONFIG = re.compile(r'<script type="text/x-mathjax-config">.*?</script>', re.S)


class KatexError(RuntimeError):
    """A formula KaTeX rejects (the message names the page and the TeX)."""


def render(items: list[dict[str, Any]]) -> list[str]:
    """KaTeX's HTML for each ``{"tex", "display", "where"}`` item, in order; raises :class:`KatexError`."""
    if not KATEX.exists():
        raise RuntimeError("KaTeX is not installed: run `npm ci` (the Makefile does) before building the site")
    proc = subprocess.run(
        ["node", str(ROOT / "tools" / "site_build" / "katex_render.mjs")],
        input=json.dumps(items),
        capture_output=True,
        text=True,
        check=False,
        cwd=ROOT,
    )
    if proc.returncode != 0:
        raise KatexError(proc.stderr.strip())
    return list(json.loads(proc.stdout))


def _strip_delimiters(raw: str) -> tuple[str, bool]:
    tex = html.unescape(raw).strip()
    for left, right, display in (("\\[", "\\]", True), ("$$", "$$", True), ("\\(", "\\)", False), ("$", "$", False)):
        if tex.startswith(left) and tex.endswith(right):
            return tex[len(left) : len(tex) - len(right)], display
    return tex, False


def formulas(page: str, where: str) -> list[dict[str, Any]]:
    """The arithmatex formulas of one page, as items for :func:`render`."""
    items = []
    for m in MATH.finditer(page):
        tex, display = _strip_delimiters(m.group(2))
        items.append({"tex": tex, "display": display or m.group(1) == "div", "where": where})
    return items


def substitute(page: str, rendered: list[str]) -> str:
    """``page`` with its arithmatex formulas (in order) replaced by ``rendered``."""
    it = iter(rendered)
    return MATH.sub(lambda m: f'<{m.group(1)} class="math">{next(it)}</{m.group(1)}>', page)


def render_pages(pages: dict[str, str]) -> dict[str, str]:
    """Every page (name -> HTML) with its math rendered, in one KaTeX run; pages without math unchanged."""
    per_page = {name: formulas(text, name) for name, text in pages.items()}
    items = [item for page_items in per_page.values() for item in page_items]
    rendered = render(items) if items else []
    out, start = {}, 0
    for name, text in pages.items():
        n = len(per_page[name])
        out[name] = substitute(text, rendered[start : start + n]) if n else text
        start += n
    return out


def drop_remote_scripts(page: str) -> str:
    """``page`` without the scripts it would load from another host (and MathJax's configuration)."""
    page = _MATHJAX_CONFIG.sub("", page)
    return _REMOTE_SCRIPT.sub("", page)


def copy_fonts(site_dir: Path) -> None:
    dest = site_dir / "assets" / "katex" / "fonts"
    dest.mkdir(parents=True, exist_ok=True)
    for font in (KATEX / "fonts").glob("*.woff2"):
        shutil.copy2(font, dest / font.name)
