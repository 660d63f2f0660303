"""MkDocs hooks: render math at build time with KaTeX, and keep every page free of third-party requests.

* ``pymdownx.arithmatex`` (generic mode) wraps ``$...$`` and ``$$...$$`` in ``arithmatex`` elements; this
  hook renders them with the pinned KaTeX from ``node_modules`` (one ``node`` call per page), so a page
  shows typeset math with no JavaScript, and a formula KaTeX rejects fails the build.
* KaTeX writes each formula three times: as MathML, as its TeX source (an annotation inside the MathML) and
  as the HTML that is drawn. The search index keeps only the TeX: the other two are wrapped in a
  ``<search-skip data-search-exclude>`` element, which Material's search parser skips, and the wrappers are
  removed from the page once it is indexed. (A wrapper of its own, because the parser matches elements by tag
  name: ``data-search-exclude`` on a ``<span>`` or ``<mrow>`` ends at the first nested ``</span>`` or
  ``</mrow>``.)
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
_MATHML_BODY = re.compile(r'<semantics>(.*?)(?=<annotation encoding="application/x-tex">)', re.S)
_KATEX_HTML = '<span class="katex-html"'
_SKIP_OPEN, _SKIP_CLOSE = '<search-skip data-search-exclude="math">', "</search-skip>"
_SKIP = re.compile(r"</?search-skip\b[^>]*>")
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
    """Wrap KaTeX's MathML presentation and drawn HTML for the search parser to skip, leaving the TeX."""
    rendered = _MATHML_BODY.sub(lambda m: f"<semantics>{_SKIP_OPEN}{m.group(1)}{_SKIP_CLOSE}", rendered, count=1)
    start = rendered.index(_KATEX_HTML)
    wrappers = 2 if rendered.startswith('<span class="katex-display">') else 1  # .katex(-display) close after it
    end = len(rendered) - wrappers * len("</span>")
    if rendered[end:] != "</span>" * wrappers:
        raise RuntimeError(f"KaTeX's output changed shape: {rendered[-80:]!r}")
    return rendered[:start] + _SKIP_OPEN + rendered[start:end] + _SKIP_CLOSE + rendered[end:]


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
    output = _SKIP.sub("", output)  # indexed by now (the search plugin reads the page in on_page_context)
    output = _MATHJAX_CONFIG.sub("", output)
    return _REMOTE_SCRIPT.sub("", output)


def on_post_build(config: Any, **kwargs: Any) -> None:
    dest = Path(config["site_dir"]) / "assets" / "katex"
    (dest / "fonts").mkdir(parents=True, exist_ok=True)
    shutil.copy2(KATEX / "katex.min.css", dest / "katex.min.css")
    for font in (KATEX / "fonts").glob("*.woff2"):
        shutil.copy2(font, dest / "fonts" / font.name)
