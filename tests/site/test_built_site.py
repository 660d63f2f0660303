"""Checks on the built site in site/ (run by `make test` after `make build`).

They read the HTML that readers get: every page's numbers came from executed code, nothing points at a
third-party host, and no executed block printed a traceback.
"""

from __future__ import annotations

import re
from html.parser import HTMLParser
from pathlib import Path

import pytest
import torch

from lessons_src import MultiHeadAttention

SITE = Path(__file__).resolve().parents[2] / "site"
if not (SITE / "index.html").exists():
    pytest.fail("site/ is not built: run `make build` first (make test does)", pytrace=False)

PAGES = sorted(SITE.rglob("*.html"))
# Attributes that make the browser fetch something (links in <a href> are navigation, not requests).
FETCHING = {("script", "src"), ("link", "href"), ("img", "src"), ("iframe", "src"), ("source", "src"),
            ("video", "src"), ("audio", "src"), ("embed", "src"), ("object", "data"), ("image", "href")}


class Fetches(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.urls: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        for name, value in attrs:
            if value and (tag, name) in FETCHING:
                if tag == "link" and dict(attrs).get("rel") in {"canonical", "alternate"}:
                    continue
                self.urls.append(value)
        style = dict(attrs).get("style") or ""
        self.urls += re.findall(r"url\(([^)]+)\)", style)


def text_of(page: Path) -> str:
    return re.sub(r"<[^>]+>", "", page.read_text(encoding="utf-8"))


def test_pages_were_built() -> None:
    assert (SITE / "index.html").exists() and len(PAGES) >= 3


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(SITE)))
def test_no_third_party_requests(page: Path) -> None:
    parser = Fetches()
    parser.feed(page.read_text(encoding="utf-8"))
    remote = [u for u in parser.urls if re.match(r"^(https?:)?//", u.strip("'\""))]
    assert remote == [], f"{page.relative_to(SITE)} would fetch from other hosts: {remote}"


def test_no_remote_urls_in_css_and_js() -> None:
    offenders = []
    for asset in [*SITE.rglob("*.css"), *SITE.rglob("*.js")]:
        text = asset.read_text(encoding="utf-8", errors="replace")
        for url in re.findall(r"""url\(\s*['"]?((?:https?:)?//[^'")\s]+)""", text):
            offenders.append(f"{asset.relative_to(SITE)}: {url}")
        if "fonts.googleapis" in text or "fonts.gstatic" in text:
            offenders.append(f"{asset.relative_to(SITE)}: Google Fonts")
    assert offenders == []


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(SITE)))
def test_no_traceback_in_executed_output(page: Path) -> None:
    assert "Traceback (most recent call last)" not in text_of(page)


def test_home_page_numbers_come_from_the_code() -> None:
    text = text_of(SITE / "index.html")
    mha = MultiHeadAttention(768, 12)
    params = sum(p.numel() for p in mha.parameters())
    assert f"parameters {params:,}" in text
    assert f"{mha.num_heads} of head_dim {mha.head_dim}" in text
    assert "weights (2, 12, 10, 10)" in text
    assert "each row of weights sums to 1: yes" in text  # printed by lessons_src.lab.checks: it raises otherwise
    assert "ours == nn.MultiheadAttention: yes" in text


def test_math_is_rendered_at_build_time() -> None:
    html = (SITE / "index.html").read_text(encoding="utf-8")
    assert 'class="katex-display"' in html and "<math" in html
    assert 'class="arithmatex"' not in html  # nothing left for a client-side renderer
    # KaTeX's stylesheet is inline on the pages with math (tools/site_build/page_fixes.py, in the post-build step)
    style = re.search(r"<style>(.*?)</style>", html, re.S)
    assert style is not None and ".katex" in style.group(1)
    fonts = set(re.findall(r"url\(([^)]+\.woff2)\)", style.group(1)))
    assert fonts and all((SITE / f).exists() for f in fonts)


def test_code_pages_include_every_module_as_tested() -> None:
    """One page per module of the package, each showing the file's source, linked from the overview."""
    index = text_of(SITE / "reference" / "code" / "index.html")
    assert "fast path == explicit path: yes" in index
    assert "head counts that divide 100 are 1, 2, 4, 5, 10, 20, 25, 50, 100" in index
    pkg = SITE.parent / "lessons_src"
    modules = sorted(pkg.glob("*.py")) + sorted((pkg / "lab").glob("*.py"))
    pages = 0
    for path in modules:
        if path.name == "__init__.py" and path.parent == pkg:
            continue  # the top-level __init__ only re-exports
        rel = path.relative_to(pkg).with_suffix("").as_posix()
        slug = "lab" if rel == "lab/__init__" else rel.replace("/", "-")
        page = SITE / "reference" / "code" / slug / "index.html"
        assert page.is_file(), f"no code page for lessons_src/{rel}.py (expected {page.relative_to(SITE)})"
        text = text_of(page)
        # every def and class of the file appears on its page
        for line in path.read_text().splitlines():
            if line.startswith(("def ", "class ")):
                assert line.split("(")[0].split(":")[0] in text, f"{line!r} missing from {slug}"
        assert f"{slug}/" in (SITE / "reference" / "code" / "index.html").read_text(), f"overview lacks {slug}"
        pages += 1
    assert pages == len(modules) - 1  # every module but the top-level __init__


def test_benchmark_page_shows_the_report() -> None:
    assert "ratio to floor" in text_of(SITE / "reference" / "benchmarks" / "index.html")
    assert torch.__version__.split("+")[0] in text_of(SITE / "reference" / "benchmarks" / "index.html")
