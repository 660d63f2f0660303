"""MkDocs hooks: render math at build time with KaTeX, and keep every page free of third-party requests.

* ``pymdownx.arithmatex`` (generic mode) wraps ``$...$`` and ``$$...$$`` in ``arithmatex`` elements; this
  hook renders them with the pinned KaTeX from ``node_modules`` (one ``node`` call per page), so a page
  shows typeset math with no JavaScript, and a formula KaTeX rejects fails the build.
* KaTeX writes each formula three times: as MathML, as its TeX source (an annotation inside the MathML) and
  as the HTML that is drawn. The search index keeps only the TeX: the other two are marked
  ``data-search-exclude``, which Material's search plugin honours and then strips from the page.
* KaTeX's stylesheet and its ``woff2`` fonts are copied into ``site/assets/katex/``.
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
_MATH = re.compile(r'<(span|div) class="arithmatex">(.*?)</\1>', re.S)
_MATHML_BODY = re.compile(r"<semantics><(\w+)")  # the MathML presentation, before the TeX annotation
_KATEX_HTML = '<span class="katex-html"'
_SEARCH_EXCLUDE = ' data-search-exclude="math"'  # a value: the plugin removes only valued data-search-* attributes
_REMOTE_SCRIPT = re.compile(r'<script[^>]*\bsrc="(?:https?:)?//[^"]*"[^>]*>\s*</script>', re.S)
_MATHJAX_CONFIG = re.compile(r'<script type="text/x-mathjax-config">.*?</script>', re.S)


def _render(items: list[dict[str, Any]]) -> list[str]:
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
        raise RuntimeError(proc.stderr.strip())
    return list(json.loads(proc.stdout))


def _strip_delimiters(raw: str) -> tuple[str, bool]:
    tex = html.unescape(raw).strip()
    for left, right, display in (("\\[", "\\]", True), ("$$", "$$", True), ("\\(", "\\)", False), ("$", "$", False)):
        if tex.startswith(left) and tex.endswith(right):
            return tex[len(left) : len(tex) - len(right)], display
    return tex, False


def _index_tex_only(rendered: str) -> str:
    """Mark KaTeX's MathML presentation and drawn HTML for the search plugin to skip, leaving the TeX."""
    rendered = _MATHML_BODY.sub(lambda m: f"<semantics><{m.group(1)}{_SEARCH_EXCLUDE}", rendered, count=1)
    return rendered.replace(_KATEX_HTML, _KATEX_HTML + _SEARCH_EXCLUDE, 1)


def on_page_content(content: str, **kwargs: Any) -> str:
    matches = list(_MATH.finditer(content))
    if not matches:
        return content
    items = []
    for m in matches:
        tex, display = _strip_delimiters(m.group(2))
        items.append({"tex": tex, "display": display or m.group(1) == "div"})
    rendered = iter(_render(items))

    def sub(m: re.Match[str]) -> str:
        tag = m.group(1)
        return f'<{tag} class="math">{_index_tex_only(next(rendered))}</{tag}>'

    return _MATH.sub(sub, content)


def on_post_page(output: str, **kwargs: Any) -> str:
    output = _MATHJAX_CONFIG.sub("", output)
    return _REMOTE_SCRIPT.sub("", output)


def on_post_build(config: Any, **kwargs: Any) -> None:
    dest = Path(config["site_dir"]) / "assets" / "katex"
    (dest / "fonts").mkdir(parents=True, exist_ok=True)
    shutil.copy2(KATEX / "katex.min.css", dest / "katex.min.css")
    for font in (KATEX / "fonts").glob("*.woff2"):
        shutil.copy2(font, dest / "fonts" / font.name)
