"""What the search index holds: each formula once, as its TeX; no page's hidden data; the names each module
page's module defines, not its whole source. Every page fetches the index, so what it needn't hold costs
every reader.

KaTeX writes a formula three times: MathML, its TeX source (an annotation inside the MathML) and the HTML
that is drawn. Indexed whole, a search snippet read "W=4096W = 4096W=4096". Material's search plugin indexes each
page as MkDocs renders it, and the math is typeset later, by the post-build step over site/
(tools/site_build/postbuild.py, math_render.py): the index reads arithmatex's element, the TeX alone.
"""

from __future__ import annotations

import html
import itertools
import json
import re
from html.parser import HTMLParser
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from collections.abc import Iterator

ROOT = Path(__file__).resolve().parents[2]
SITE = ROOT / "site"
if not (SITE / "search" / "search_index.json").exists():
    pytest.fail("site/ is not built: run `make build` first (make test does)", pytrace=False)

_FORMULA = re.compile(r'<semantics>(.*?)<annotation encoding="application/x-tex">(.*?)</annotation>', re.S)


def _text(markup: str) -> str:
    return html.unescape(re.sub(r"<[^>]+>", "", markup))


def index_text_by_page() -> dict[str, str]:
    docs = json.loads((SITE / "search" / "search_index.json").read_text(encoding="utf-8"))["docs"]
    pages: dict[str, list[str]] = {}
    for doc in docs:
        pages.setdefault(doc["location"].split("#")[0], []).append(_text(doc["title"] + " " + doc["text"]))
    return {page: " ".join(texts) for page, texts in pages.items()}


def indexed_pages() -> Iterator[tuple[str, str, str]]:
    """(location, its index text, its built HTML) of each indexed page that is a file of the site."""
    for location, text in index_text_by_page().items():
        page = SITE / location / "index.html" if location else SITE / "index.html"
        if page.exists():
            yield location, text, page.read_text(encoding="utf-8")


def formulas(page_html: str) -> list[tuple[str, str]]:
    """(drawn text, TeX) of each formula on a built page."""
    return [(_text(m.group(1)), html.unescape(m.group(2))) for m in _FORMULA.finditer(page_html)]


def test_no_formula_is_indexed_beside_its_rendering() -> None:
    checked, repeated = 0, []
    for location, text, page_html in indexed_pages():
        for drawn, tex in formulas(page_html):
            if " ".join(drawn.split()) == " ".join(tex.split()) or not drawn.strip():
                continue  # the same text either way ("h"): nothing to tell apart
            checked += 1
            if drawn + tex in text or tex + drawn in text:
                repeated.append(f"{location or 'home'}: {drawn + tex + drawn!r}")
    assert checked > 100, f"only {checked} formulas found: is the math hook still rendering?"
    assert repeated == [], "formulas indexed with their rendering:\n  " + "\n  ".join(sorted(set(repeated))[:20])


def test_a_known_formula_is_indexed_once_as_tex() -> None:
    text = index_text_by_page()["lessons/mla-modes/"]
    assert text.count("H(2C + R)") == 1, "mla-modes' $H(2C + R)$ should be indexed once, as its TeX"
    assert "H(2C+R)" not in text, "the drawn form of $H(2C + R)$ is in the index"


def test_the_index_reads_the_formula_before_it_is_typeset() -> None:
    """The mechanism, on one formula: typeset, the parser would index it three times; the index is built from
    arithmatex's element, which the post-build step replaces with KaTeX's only after MkDocs has indexed the page."""
    import math_render
    from material.plugins.search.plugin import Parser

    before = '<span class="arithmatex">\\(W = 4096\\)</span>'
    after = math_render.render_pages({"p": before})["p"]

    def indexed(markup: str) -> str:
        parser = Parser()
        parser.feed(f"<p>A window {markup} wide.</p>")
        parser.close()
        return "".join("".join(section.text) for section in parser.data)

    assert "W=4096W = 4096W=4096" in indexed(after)
    assert _text(indexed(before)) == "A window \\(W = 4096\\) wide."


class _HiddenText(HTMLParser):
    """The text inside elements with the ``hidden`` attribute (the widgets' embedded data)."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.depth = 0  # > 0 inside a hidden element
        self.texts: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in {"br", "img", "input", "meta", "link", "hr", "source", "wbr"}:
            return
        if self.depth or any(name == "hidden" for name, _ in attrs):
            self.depth += 1
            if self.depth == 1:
                self.texts.append("")

    def handle_endtag(self, tag: str) -> None:
        if self.depth:
            self.depth -= 1

    def handle_data(self, data: str) -> None:
        if self.depth:
            self.texts[-1] += data


def test_no_hidden_data_is_indexed() -> None:
    """What a page hides (the head explorer's and the live models' embedded JSON) stays out of the search index:
    every page fetches the index, and the explorer's data alone was 150 KB of its 1.07 MB."""
    checked, found = 0, []
    for location, text, page_html in indexed_pages():
        parser = _HiddenText()
        parser.feed(page_html)
        for hidden in parser.texts:
            sample = " ".join(hidden.split())[:80]
            if len(sample) < 40:
                continue
            checked += 1
            if sample in " ".join(text.split()):
                found.append(f"{location}: {sample!r}")
    assert checked >= 3, f"only {checked} hidden blocks of text found: the widgets' data should be among them"
    assert found == [], "hidden text in the search index:\n  " + "\n  ".join(found)


def _code_pages() -> list[tuple[str, Path]]:
    """(index location, module file) of each module page that shows its whole file (found as the hook finds it)."""
    from mkdocs_code_hooks import WHOLE_FILE

    pages = []
    for md in sorted((ROOT / "docs" / "reference" / "code").glob("*.md")):
        if m := WHOLE_FILE.search(md.read_text(encoding="utf-8")):
            pages.append((f"reference/code/{md.stem}/", ROOT / m.group(1)))
    return pages


def test_code_pages_index_the_names_their_module_defines_not_its_source() -> None:
    """The module pages' source stays out of the index (it was 387 KB of 915 KB, fetched by every page, and
    outranked the lessons); what the module defines (read here by importing it) stays searchable."""
    import ast
    import importlib
    import importlib.util
    import inspect

    index = index_text_by_page()
    pages = _code_pages()
    assert len(pages) >= 20, f"only {len(pages)} module pages with their whole file found"
    for location, path in pages:
        text = " ".join(index[location].split())
        source_lines = [line.strip() for line in path.read_text(encoding="utf-8").splitlines()]
        indexed = [line for line in source_lines if len(line) >= 40 and line in text]
        assert indexed == [], f"{location}: its source is in the search index: {indexed[:3]}"
        dotted = path.relative_to(ROOT).with_suffix("").as_posix().replace("/", ".").removesuffix(".__init__")
        words = set(re.findall(r"\w+", text))
        missing = []
        if importlib.util.find_spec("triton") is None and dotted == "lessons_src.triton_flash":  # its extra is absent
            tree = ast.parse(path.read_text(encoding="utf-8"))
            for node in tree.body:
                if isinstance(node, ast.FunctionDef | ast.ClassDef) and not node.name.startswith("_"):
                    methods = [n.name for n in node.body if isinstance(n, ast.FunctionDef)] if isinstance(
                        node, ast.ClassDef) else []
                    missing += [n for n in [node.name, *methods] if not n.startswith("_") and n not in words]
            assert missing == [], f"{location}: these names of {dotted} cannot be found by search: {missing}"
            continue
        module = importlib.import_module(dotted)
        for name, obj in vars(module).items():
            if name.startswith("_") or not (inspect.isclass(obj) or inspect.isfunction(obj)):
                continue
            if obj.__module__ != dotted:
                continue  # imported from elsewhere
            methods = [m for m, f in vars(obj).items() if inspect.isfunction(f)] if inspect.isclass(obj) else []
            missing += [n for n in [name, *methods] if not n.startswith("_") and n not in words]
        assert missing == [], f"{location}: these names of {dotted} cannot be found by search: {missing}"


class _Figures(HTMLParser):
    """The SVG files a built page's figures draw (after the post-build step moved them behind <picture>)."""

    def __init__(self) -> None:
        super().__init__()
        self.files: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        src = dict(attrs).get("src") or ""
        if tag == "img" and src.endswith(".svg") and "/figures/" in src:
            self.files.append(src)


def _labels(svg: str) -> list[str]:
    """The text a figure draws, label by label, in the order the file draws it."""
    return [" ".join(_text(t).split()) for t in re.findall(r"<text\b[^>]*>(.*?)</text>", svg, re.S)]


def test_figures_and_controls_stay_out_of_the_index() -> None:
    """A figure's drawn labels and a widget's buttons were indexed run together with the prose ("answerKnew
    itAgain", "0.0 0.2 0.4 0.6 0.8 1.0"): neither is in the index, unless the page shows the same text itself
    (issue 56). The prose stays in."""
    figures, found = 0, []
    for location, text, page_html in indexed_pages():
        flat, shown = " ".join(text.split()), " ".join(_text(page_html).split())  # shown: the page's own text
        parser = _Figures()
        parser.feed(page_html)
        for src in parser.files:
            svg = (SITE / location / src).resolve() if not src.startswith("/") else None
            if svg is None or not svg.exists():
                continue
            labels = [label for label in _labels(svg.read_text(encoding="utf-8")) if label]
            if len(labels) >= 3:
                figures += 1
                if " ".join(labels[:3]) in flat and " ".join(labels[:3]) not in shown:
                    found.append(f"{location}: the figure {src} ({' '.join(labels[:3])!r})")
        buttons = [_text(b).strip() for b in re.findall(r"<button\b[^>]*>(.*?)</button>", page_html, re.S)]
        found += [f"{location}: the buttons {a!r} and {b!r}" for a, b in itertools.pairwise(buttons)
                  if a and b and a + b in flat]
    assert figures >= 20, f"only {figures} figures with labels found on indexed pages"
    assert found == [], "figure labels or controls in the search index:\n  " + "\n  ".join(found)
    prose = "To find out, remove it and measure."  # ablation's first paragraph: prose stays in
    assert prose in " ".join(index_text_by_page()["lessons/ablation/"].split())


def test_a_collapsible_s_title_is_indexed_apart_from_the_text_after_it() -> None:
    """A <summary> closed by a tag and followed at once by the next block's text was indexed as one word with it:
    the flashcards' "(14 cards)Inference variants", the quiz's "(9 questions)Question 1." (issue 77). Each
    summary's text, where the index holds it, is followed by a space or punctuation, not by a letter."""
    checked, joined = 0, []
    for location, text, page_html in indexed_pages():
        flat = " ".join(text.split())
        for summary in re.findall(r"<summary\b[^>]*>(.*?)</summary>", page_html, re.S):
            title = " ".join(_text(summary).split())
            for m in re.finditer(re.escape(title), flat) if len(title) >= 8 else ():
                checked += 1
                after = flat[m.end() : m.end() + 1]
                if after.isalnum():
                    joined.append(f"{location}: {flat[m.start() : m.end() + 20]!r}")
    assert checked > 20, f"only {checked} collapsible titles found in the index"
    run_in = re.compile(r"\(\d+ (?:cards|questions)\)\w")
    counts = [m.group(0) for t in index_text_by_page().values() for m in run_in.finditer(t)]
    joined += [f"a part's count run into its first card or question: {c!r}" for c in counts]
    assert joined == [], "titles run into the next text:\n  " + "\n  ".join(sorted(set(joined))[:20])
