"""MkDocs hooks: small fixes to the theme's HTML that the accessibility and SEO audits ask for.

The browser suite (tests/browser) runs axe-core on every page and `make bench` runs Lighthouse; these
hooks fix, in the built HTML, what those audits found in mkdocs-material's templates:

* the search dialog and the instant-loading progress bar get accessible names (axe: aria-dialog-name,
  aria-progressbar-name);
* display math, which scrolls sideways on narrow screens, is focusable so keyboard users can scroll it
  (axe: scrollable-region-focusable);
* reproducible notebooks: a kernel's printed output reaches nbclient in chunks whose boundaries depend on
  timing, and each chunk became a separate output block, so two builds of the same notebook differed.
  Consecutive stream outputs are merged (nbclient's ``coalesce_streams``), as a notebook shows them.
* performance (Lighthouse): markdown-exec's Pyodide scripts and its ANSI colour stylesheet are not loaded
  when no page of the site uses them (site-wide, because instant navigation does not load a new page's
  stylesheets); the site's own scripts (Material's bundle, then
  extra_javascript, in that order) are deferred, so they no longer block the first paint. Deferred scripts
  run in document order before DOMContentLoaded, so a widget script that subscribes to Material's
  ``document$`` still finds it.
* render-blocking CSS: KaTeX's stylesheet (25 kB, more than the site's own CSS) is not linked from every
  page's head; a page with math carries it inline at the top of its article (instant navigation swaps the
  article, so the style comes with the page that needs it), its font URLs made relative to the page. Only
  the woff2 fonts are shipped, so the woff/ttf fallbacks are dropped from it.
* no unused asset and nothing pointing at another host: markdown-exec always copies its Pyodide and ANSI
  assets into site/assets/ (the Pyodide stylesheet loads from a CDN); when no page uses them they are
  deleted after the build, as the links to them were removed from every page.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

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
# Widget stylesheets: inlined only into the pages that show the widget (like KaTeX's), so they do not
# block rendering on every other page; the markers are the widgets' own class names and attributes.
_WIDGET_CSS = {
    "practice.css": ('class="flashcard', 'class="quiz', 'class="hx-', "jp-Cell"),  # jp-: the lab notebook's colours
    "live-model.css": ("data-live-model",),
}
_WIDGET_LINKS = {
    name: re.compile(r'\s*<link rel="stylesheet" href="[^"]*assets/' + re.escape(name) + r'">') for name in _WIDGET_CSS
}


_uses: set[str] = set()


def on_config(config: Any, **kwargs: Any) -> Any:
    # mkdocs-jupyter replaces nbconvert's whole ExecutePreprocessor configuration (a config file cannot
    # reach it), so every ExecutePreprocessor is told to coalesce streams as it is created.
    from nbconvert.preprocessors import ExecutePreprocessor

    if not getattr(ExecutePreprocessor, "_coalesces_streams", False):
        original_init = ExecutePreprocessor.__init__

        def init(self: Any, *args: Any, **kw: Any) -> None:
            original_init(self, *args, **kw)
            self.coalesce_streams = True

        ExecutePreprocessor.__init__ = init  # type: ignore[method-assign]
        ExecutePreprocessor._coalesces_streams = True  # type: ignore[attr-defined]
    return config


def on_pre_build(**kwargs: Any) -> None:
    _uses.clear()


def on_page_content(html: str, **kwargs: Any) -> str:
    # MkDocs renders every page's content before it writes any page, so on_post_page sees the whole site.
    if "pyodide" in html:
        _uses.add("pyodide")
    if _ANSI_OUTPUT.search(html):
        _uses.add("ansi")
    return html


def _katex_style(page_url: str) -> str:
    depth = page_url.count("/")
    css = _FALLBACK_FONTS.sub("", _KATEX_CSS.read_text(encoding="utf-8"))
    css = css.replace("url(fonts/", "url(" + "../" * depth + "assets/katex/fonts/")
    return f"<style>{css}</style>"


def on_post_template(output: str, template_name: str, **kwargs: Any) -> str:
    # the 404 page is a theme template, not a page: it gets the same head (and must not link what is deleted)
    return _fix_page(output, None) if template_name.endswith(".html") else output


def on_post_page(output: str, page: Any = None, **kwargs: Any) -> str:
    return _fix_page(output, page.url if page is not None else "")


def _fix_page(output: str, page_url: str | None) -> str:
    output = _KATEX_LINK.sub("", output)
    if page_url is not None and 'class="katex' in output and _ARTICLE in output:
        output = output.replace(_ARTICLE, _ARTICLE + _katex_style(page_url), 1)
    for name, markers in _WIDGET_CSS.items():
        output = _WIDGET_LINKS[name].sub("", output)
        if page_url is not None and _ARTICLE in output and any(m in output for m in markers):
            css = (_DOCS_ASSETS / name).read_text(encoding="utf-8")
            output = output.replace(_ARTICLE, _ARTICLE + f"<style>{css}</style>", 1)
    output = output.replace(_SEARCH_DIALOG, _SEARCH_DIALOG[:-1] + ' aria-label="Search this site">', 1)
    output = output.replace(_PROGRESS, _PROGRESS[:-1] + ' aria-label="Page loading progress">', 1)
    output = _DISPLAY_MATH.sub('<div class="math" tabindex="0">', output)
    if "pyodide" not in _uses:
        output = _PYODIDE_ASSETS.sub("", output)
    if "ansi" not in _uses:
        output = _ANSI_CSS.sub("", output)
    return _LOCAL_SCRIPT.sub(r"<script \1 defer></script>", output)


_UNUSED_WHEN = {
    "pyodide": ("_markdown_exec_pyodide.css", "_markdown_exec_pyodide.js"),
    "ansi": ("_markdown_exec_ansi.css",),
}


def on_post_build(config: Any, **kwargs: Any) -> None:
    assets = Path(config["site_dir"]) / "assets"
    (assets / "katex" / "katex.min.css").unlink(missing_ok=True)  # inlined where used (on_post_page)
    for name in _WIDGET_CSS:  # inlined into the widgets' pages
        (assets / name).unlink(missing_ok=True)
    for use, names in _UNUSED_WHEN.items():
        if use not in _uses:
            for name in names:
                (assets / name).unlink(missing_ok=True)
