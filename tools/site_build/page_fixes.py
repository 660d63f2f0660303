"""Small fixes to the theme's HTML that the accessibility, loading and SEO audits ask for.

Part of the post-build step (:mod:`postbuild`), which runs over the built HTML. The browser suite
(tests/browser) runs axe-core on every page and `make bench` runs Lighthouse; these fixes apply, in the built
HTML, what those audits found in mkdocs-material's templates:

* the search dialog and the instant-loading progress bar get accessible names (axe: aria-dialog-name,
  aria-progressbar-name);
* display math, which scrolls sideways on narrow screens, is focusable so keyboard users can scroll it
  (axe: scrollable-region-focusable);
* performance (Lighthouse): markdown-exec's Pyodide scripts and its ANSI colour stylesheet are not loaded
  when no page of the site uses them (site-wide, because instant navigation does not load a new page's
  stylesheets); the site's own scripts (Material's bundle, then
  extra_javascript, in that order) are deferred, so they no longer block the first paint. Deferred scripts
  run in document order before DOMContentLoaded, so a widget script that subscribes to Material's
  ``document$`` still finds it.
* render-blocking CSS: KaTeX's stylesheet (25 kB, more than the site's own CSS) is not linked from every
  page's head; a page with math carries it inline at the top of its article (instant navigation swaps the
  article, so the style comes with the page that needs it), its font URLs made relative to the page. Only
  the woff2 fonts are shipped, so the woff/ttf fallbacks are dropped from it. The widgets' stylesheets
  likewise, on the widgets' pages only.
* no request to another host: Material's header repository link would fetch star and fork counts from
  GitHub's API; its ``data-md-component="source"`` is dropped so it stays a plain link.
* no unused asset and nothing pointing at another host: markdown-exec always copies its Pyodide and ANSI
  assets into site/assets/ (the Pyodide stylesheet loads from a CDN); when no page uses them they are
  deleted, as the links to them are removed from every page.

Every fix leaves an already fixed page as it is, so the step can run twice.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Iterable

_SEARCH_DIALOG = '<div class="md-search" data-md-component="search" role="dialog">'
_PROGRESS = '<div class="md-progress" data-md-component="progress" role="progressbar">'
_DISPLAY_MATH = re.compile(r'<div class="math">(?=<span class="katex-display">)')
_PYODIDE_ASSETS = re.compile(r'\s*<(?:link|script)\b[^>]*_markdown_exec_pyodide\.(?:css|js)"[^>]*>(?:\s*</script>)?')
_ANSI_CSS = re.compile(r'\s*<link\b[^>]*_markdown_exec_ansi\.css"[^>]*>')
_ANSI_OUTPUT = re.compile(r'class="[^"]*-Color-')
_KATEX_LINK = re.compile(r'\s*<link rel="stylesheet" href="[^"]*assets/katex/katex\.min\.css">')
_ARTICLE = '<article class="md-content__inner md-typeset">'
_KATEX_CSS = Path(__file__).resolve().parents[2] / "node_modules" / "katex" / "dist" / "katex.min.css"
_FALLBACK_FONTS = re.compile(r',url\(fonts/[\w-]+\.(?:woff|ttf)\) format\("(?:woff|truetype)"\)')
_LOCAL_SCRIPT = re.compile(r'<script (src="(?!https?:|//)[^"]+")></script>')
_DOCS_ASSETS = Path(__file__).resolve().parents[2] / "docs" / "assets"
# A code block of pymdownx.highlight (not a notebook's: mkdocs-jupyter's blocks are "highlight-ipynb") and, in
# it, a name token. The theme draws a name in the code's own colour (--md-code-hl-name-color is
# var(--md-code-fg-color) in both schemes; tests/site/test_page_weight.py checks the theme's CSS and ours), so its
# <span> changes nothing on screen; Pygments writes one per identifier, about a third of a listing's elements.
_CODE_BLOCK = re.compile(r'<div class="language-[\w-]+(?: [\w-]+)* highlight(?: [\w-]+)*"><pre>.*?</pre>', re.S)
_NAME_SPAN = re.compile(r'<span class="n">([^<]*)</span>')


def plain_names(output: str) -> str:
    """Name tokens in the page's highlighted code blocks as plain text: the same page on screen, fewer elements."""
    return _CODE_BLOCK.sub(lambda m: _NAME_SPAN.sub(r"\1", m.group(0)), output)
# Widget stylesheets: inlined only into the pages that show the widget (like KaTeX's), so they do not
# block rendering on every other page; the markers are the widgets' own class names and attributes.
_WIDGET_CSS = {
    "practice.css": ('class="flashcard', 'class="quiz', 'class="hx-', "jp-Cell"),  # jp-: the lab notebook's colours
    "live-model.css": ("data-live-model",),
}
_WIDGET_LINKS = {
    name: re.compile(r'\s*<link rel="stylesheet" href="[^"]*assets/' + re.escape(name) + r'">') for name in _WIDGET_CSS
}
_UNUSED_WHEN = {
    "pyodide": ("_markdown_exec_pyodide.css", "_markdown_exec_pyodide.js"),
    "ansi": ("_markdown_exec_ansi.css",),
}


def uses(pages: Iterable[str]) -> set[str]:
    """Which of markdown-exec's optional assets ("pyodide", "ansi") some page's content uses."""
    found: set[str] = set()
    for page in pages:
        if "pyodide" in _PYODIDE_ASSETS.sub("", page):  # the asset links themselves do not count
            found.add("pyodide")
        if _ANSI_OUTPUT.search(page):
            found.add("ansi")
    return found


def _katex_style(depth: int) -> str:
    css = _FALLBACK_FONTS.sub("", _KATEX_CSS.read_text(encoding="utf-8"))
    css = css.replace("url(fonts/", "url(" + "../" * depth + "assets/katex/fonts/")
    return f"<style>{css}</style>"


def fix_page(output: str, depth: int | None, used: set[str]) -> str:
    """One built page with the fixes applied. ``depth``: how many folders deep the page's file is under the
    site's root (None: a theme template such as the 404 page, which gets the head's fixes only)."""
    output = _KATEX_LINK.sub("", output)
    if depth is not None and 'class="katex' in output and _ARTICLE in output:
        style = _katex_style(depth)
        if style not in output:
            output = output.replace(_ARTICLE, _ARTICLE + style, 1)
    for name, markers in _WIDGET_CSS.items():
        output = _WIDGET_LINKS[name].sub("", output)
        if depth is not None and _ARTICLE in output and any(m in output for m in markers):
            style = "<style>" + (_DOCS_ASSETS / name).read_text(encoding="utf-8") + "</style>"
            if style not in output:
                output = output.replace(_ARTICLE, _ARTICLE + style, 1)
    output = output.replace(_SEARCH_DIALOG, _SEARCH_DIALOG[:-1] + ' aria-label="Search this site">', 1)
    output = output.replace(_PROGRESS, _PROGRESS[:-1] + ' aria-label="Page loading progress">', 1)
    output = _DISPLAY_MATH.sub('<div class="math" tabindex="0">', output)
    if "pyodide" not in used:
        output = _PYODIDE_ASSETS.sub("", output)
    if "ansi" not in used:
        output = _ANSI_CSS.sub("", output)
    output = output.replace(' data-md-component="source"', "")
    output = plain_names(output)
    return _LOCAL_SCRIPT.sub(r"<script \1 defer></script>", output)


def remove_unused_assets(site_dir: Path, used: set[str]) -> None:
    assets = site_dir / "assets"
    (assets / "katex" / "katex.min.css").unlink(missing_ok=True)  # inlined where used (fix_page)
    for name in _WIDGET_CSS:  # inlined into the widgets' pages
        (assets / name).unlink(missing_ok=True)
    for use, names in _UNUSED_WHEN.items():
        if use not in used:
            for name in names:
                (assets / name).unlink(missing_ok=True)
