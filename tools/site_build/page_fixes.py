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
* layout shifts (Lighthouse's CLS): KaTeX's fonts are ``font-display: block`` and were requested only once the
  page's math was laid out, so a paragraph with math was drawn with a fallback font's metrics first and moved the
  text under it when the fonts arrived (a CLS of 0.07 and 0.14 on gqa-mqa and mla-modes at 375 px). A page with
  math preloads, from its head, exactly the woff2 files its math uses (:func:`katex_fonts`), so they come with the
  stylesheets and are there when the math is first laid out.
* a late largest paint: Material's script wraps each table of the article in a scrolling box when it runs, taking
  the table out of the page and putting it back; on a page whose largest element is a table (the code reference's
  overview) the table is painted again after the script, and Lighthouse times the largest paint then (3.0 s, not
  1.5 s). The tables are wrapped here, in Material's own markup, and given a class (:func:`wrap_tables`): the
  script wraps only ``table:not([class])``, so it leaves them alone. The theme's table styles use the same
  selector, so ``docs/assets/site.css`` styles ``table.course-table`` itself.
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

import functools
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


_FONT_FACE = re.compile(r"@font-face\{([^}]*)\}")
_KATEX_RULE = re.compile(r"(?:(?<=\})|^)([^{}@]+)\{([^{}]*font-family:KaTeX_[^{}]*)\}")  # not in @media or @font-face
_CLASS_ATTR = re.compile(r'class="([^"]*)"')


def _declarations(body: str) -> dict[str, str]:
    return dict(part.split(":", 1) for part in body.split(";") if ":" in part)


def _face(decl: dict[str, str]) -> tuple[str, str, str]:
    """A font's family, style and weight as KaTeX's stylesheet names them (normal and 400 when unnamed)."""
    weight = {"bold": "700", "normal": "400"}.get(decl.get("font-weight", "400"), decl.get("font-weight", "400"))
    return decl["font-family"].split(",")[0].strip('"'), decl.get("font-style", "normal"), weight


@functools.cache
def _katex_font_rules() -> tuple[str, tuple[tuple[frozenset[str], str], ...]]:
    """From KaTeX's stylesheet: the woff2 file of its base font (``.katex``: KaTeX_Main), and for each rule that
    sets another font, the classes an element must carry (those of the selector's last part) and the file."""
    css = _KATEX_CSS.read_text(encoding="utf-8")
    files = {}
    for face in _FONT_FACE.findall(css):
        decl = _declarations(face)
        woff2 = re.search(r"url\(fonts/([\w-]+\.woff2)\)", decl["src"])
        if woff2:
            files[_face(decl)] = woff2.group(1)
    base = files[("KaTeX_Main", "normal", "400")]
    if not re.search(r"\.katex\{font:[^;}]*KaTeX_Main", css):
        raise RuntimeError(f"{_KATEX_CSS}: .katex no longer draws in KaTeX_Main: update page_fixes.katex_fonts")
    rules = []
    for selectors, body in _KATEX_RULE.findall(css):
        font = files[_face(_declarations(body))]
        for selector in selectors.split(","):
            with_class = [part for part in re.split(r"[\s>+~]+", selector.strip()) if "." in part]
            rules.append((frozenset(re.findall(r"\.([\w-]+)", with_class[-1])), font))
    return base, tuple(rules)


def katex_fonts(output: str) -> list[str]:
    """The woff2 files of KaTeX's fonts that a built page's math uses (none for a page without math): KaTeX_Main
    for all of it, and each font a rule of KaTeX's stylesheet gives to classes some element of the page carries
    (``mathnormal``: KaTeX_Math italic; ``delimsizing size1``: KaTeX_Size1; ...)."""
    if 'class="katex' not in output:
        return []
    base, rules = _katex_font_rules()
    used = {frozenset(attr.split()) for attr in _CLASS_ATTR.findall(output)}
    return sorted({base} | {font for classes, font in rules if any(classes <= c for c in used)})


def _font_preloads(output: str, depth: int) -> str:
    return "".join(
        f'<link rel="preload" href="{"../" * depth}assets/katex/fonts/{name}" as="font" type="font/woff2" crossorigin>'
        for name in katex_fonts(output)
    )


_TABLE = re.compile(r"<table(?![^>]*\bclass=)((?:\s[^>]*)?>.*?</table>)", re.S)
_WRAP_OPEN = '<div class="md-typeset__scrollwrap"><div class="md-typeset__table">'
TABLE_CLASS = "course-table"  # styled in docs/assets/site.css; any class keeps Material's script off the table


def wrap_tables(output: str) -> str:
    """Each bare table of the article (one Material's script would wrap: ``table:not([class])``) in the markup the
    script would wrap it in, with ``class="course-table"`` so that the script leaves it alone."""
    head, found, article = output.partition(_ARTICLE)
    if not found:
        return output
    wrapped = _TABLE.sub(lambda m: f'{_WRAP_OPEN}<table class="{TABLE_CLASS}"{m.group(1)}</div></div>', article)
    return head + found + wrapped


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
        preloads = _font_preloads(output, depth)
        if preloads not in output:
            output = output.replace("</head>", preloads + "</head>", 1)
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
    if depth is not None:
        output = wrap_tables(output)
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
