"""Light pages, figures as files, figures legible on a phone and a laptop: checks on the built site/ that hold
on any machine.

* DOM size: at most 1,500 elements per page outside code blocks (<pre>) and 6,000 in all, counted from the
  HTML the server sends (the theme's script adds a few dozen more in the browser).
* No inline SVG figure: every lesson figure is an <img> (in a <picture>) whose file exists, named by its
  content hash, with width, height, alt text and decoding="async"; all but a page's first figure load lazily.
* Legible at 375 px: the file a 375-px-wide screen picks (the <source> whose media query matches, else the
  <img>) is drawn at min(its width, 343 px) (Material's content column on that screen, 375 px less two
  16-px margins; tests/browser/test_page_length.py checks it in a browser), so a text of font size f in
  a viewBox w wide shows at f x rendered width / w CSS px: at least 11.
* Legible at 1280 px: from 45em up the wide file fills Material's content column (docs/assets/site.css),
  688 px at 1280; its text, scaled the same way, is at least 11 px too.
* Render-blocking CSS: the stylesheets every page links in its <head> weigh at most the stock theme's
  (Material's main and palette CSS, read from the installed package) plus a 12 kB margin.
* Assets: every file under site/assets/ that the project (not the theme) ships is referenced by a page or
  a stylesheet, and no stylesheet or script points at another host.
"""

from __future__ import annotations

import hashlib
import os
import re
from html.parser import HTMLParser
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import material
import pytest
from figure_text import MIN_FIGURE_TEXT_PX, smallest_text_px

from lessons_src.lab.plotting import DESKTOP_COLUMN_PX

SITE = Path(__file__).resolve().parents[2] / "site"
if not (SITE / "index.html").exists():
    pytest.fail("site/ is not built: run `make build` first (make test does)", pytrace=False)

PAGES = sorted(SITE.rglob("index.html"))
MAX_ELEMENTS_OUTSIDE_CODE = 1_500
MAX_ELEMENTS = 6_000
PHONE_WIDTH_PX = 375
PHONE_COLUMN_PX = 343
# Material's content column on a 1280x800 screen is lessons_src.lab.plotting.DESKTOP_COLUMN_PX (.md-content__inner's
# content box, measured in Chromium with both sidebars shown; tests/browser/test_figure_labels.py checks it).
DESKTOP_WIDTH_PX = 1280
CSS_MARGIN_BYTES = 12_000
# Pages over the DOM limit whose text another issue owns; expected to fail (strictly: once a page fits, its
# entry must go). Most of their elements are KaTeX's (HTML and MathML for every formula).
KNOWN_HEAVY: dict[str, str] = {}  # page id -> the issue fixing it (strict xfails); empty: every page fits
VOID = {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source", "track", "wbr"}


class ElementCounter(HTMLParser):
    """Counts elements, and those inside <pre> (code blocks), as a browser's parser would build them."""

    def __init__(self) -> None:
        super().__init__()
        self.total = 0
        self.in_code = 0
        self.stack: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.total += 1
        if "pre" in self.stack:
            self.in_code += 1
        if tag not in VOID:
            self.stack.append(tag)

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.total += 1
        if "pre" in self.stack:
            self.in_code += 1

    def handle_endtag(self, tag: str) -> None:
        if tag in VOID or tag not in self.stack:
            return
        while self.stack and self.stack.pop() != tag:
            pass


def count_elements(html: str) -> tuple[int, int]:
    """(elements in all, elements outside code blocks)."""
    counter = ElementCounter()
    counter.feed(html)
    return counter.total, counter.total - counter.in_code


def page_id(page: Path) -> str:
    return str(page.parent.relative_to(SITE)) + "/"


def dom_params() -> list[Any]:
    def marks(page: Path) -> list[Any]:
        if page_id(page) in KNOWN_HEAVY and os.environ.get("KNOWN_HEAVY", "1") != "0":
            return [pytest.mark.xfail(reason=f"too many elements; {KNOWN_HEAVY[page_id(page)]}", strict=True)]
        return []

    return [pytest.param(p, marks=marks(p), id=page_id(p)) for p in PAGES]


@pytest.mark.parametrize("page", dom_params())
def test_dom_is_small(page: Path) -> None:
    total, outside = count_elements(page.read_text(encoding="utf-8"))
    assert outside <= MAX_ELEMENTS_OUTSIDE_CODE and total <= MAX_ELEMENTS, (
        f"{page_id(page)}: {outside} elements outside code blocks (at most {MAX_ELEMENTS_OUTSIDE_CODE}), "
        f"{total} in all (at most {MAX_ELEMENTS}): split the page, or move big inline content into files"
    )


def test_element_counter_counts_code_apart() -> None:
    total, outside = count_elements("<div><p>a<br>b</p><pre><code><span>x</span><span>y</span></code></pre></div>")
    assert (total, outside) == (7, 4)


_FIGURE = re.compile(r'<figure class="lesson-figure">(.*?)</figure>', re.S)
_ATTR = re.compile(r'([\w-]+)="([^"]*)"')


def figures(html: str) -> list[str]:
    return _FIGURE.findall(html)


def tag_attrs(fragment: str, tag: str) -> list[dict[str, str]]:
    return [dict(_ATTR.findall(m)) for m in re.findall(rf"<{tag}\b([^>]*)>", fragment)]


def asset_path(page: Path, url: str) -> Path:
    return (page.parent / url).resolve()


@pytest.mark.parametrize("page", PAGES, ids=page_id)
def test_figures_are_files_with_size_name_and_lazy_loading(page: Path) -> None:
    html = page.read_text(encoding="utf-8")
    for n, fig in enumerate(figures(html)):
        assert "<svg" not in fig, f"{page_id(page)}: figure {n} is inline SVG"
        imgs = tag_attrs(fig, "img")
        assert len(imgs) == 1, f"{page_id(page)}: figure {n} has {len(imgs)} <img>"
        img = imgs[0]
        assert img.get("alt") and img.get("decoding") == "async", f"{page_id(page)}: figure {n}: {img}"
        assert int(img["width"]) > 0 and int(img["height"]) > 0
        assert n == 0 or img.get("loading") == "lazy", f"{page_id(page)}: figure {n} is below the first; not lazy"
        for url in [img["src"]] + [s["srcset"] for s in tag_attrs(fig, "source")]:
            path = asset_path(page, url)
            assert path.is_file(), f"{page_id(page)}: figure {n} points at missing {url}"
            assert path.stem == hashlib.sha256(path.read_bytes()).hexdigest()[:16], f"{url} is not named by its hash"
    # no big SVG left inline anywhere (the theme's icons and KaTeX's stretchy glyphs are a few elements each)
    for svg in re.findall(r"<svg\b.*?</svg>", html, re.S):
        assert svg.count("<") < 60, f"{page_id(page)}: an inline SVG of {svg.count('<')} elements: {svg[:120]!r}"


def media_matches(media: str, width_px: int) -> bool:
    """The (max-width: ...) / (min-width: ...) media queries the site uses, for a screen `width_px` wide."""
    ok = True
    for kind, value, unit in re.findall(r"\((max|min)-width:\s*([\d.]+)(em|px)\)", media):
        px = float(value) * (16 if unit == "em" else 1)
        ok &= width_px <= px if kind == "max" else width_px >= px
    return ok


def test_media_query_reader() -> None:
    assert media_matches("(max-width: 44.9375em)", 375) and not media_matches("(max-width: 44.9375em)", 800)
    assert media_matches("(min-width: 30em)", 600) and not media_matches("(min-width: 30em)", 375)


def test_smallest_text_px_scales_with_the_rendered_width() -> None:
    svg = '<svg viewBox="0 0 400 100"><text style="font-size: 8px">a</text><text style="font-size: 12px">b</text></svg>'
    assert smallest_text_px(svg, 200) == 4.0 and smallest_text_px(svg, 600) == 12.0


def drawn_width(fig: str, screen_px: int) -> tuple[str, float]:
    """The figure file a screen `screen_px` wide shows, and its drawn width in CSS px, as docs/assets/site.css
    draws it: on a phone (the narrow <source> matches) the file at its own width, at most the 343-px column;
    from 45em up the wide <img> fills the desktop column (688 px at 1280)."""
    chosen = next((s for s in tag_attrs(fig, "source") if media_matches(s.get("media", ""), screen_px)), None)
    if chosen is not None:
        return chosen["srcset"], min(float(chosen["width"]), PHONE_COLUMN_PX)
    img = tag_attrs(fig, "img")[0]
    if screen_px == PHONE_WIDTH_PX:
        return img["src"], min(float(img["width"]), PHONE_COLUMN_PX)
    return img["src"], DESKTOP_COLUMN_PX


def small_figure_text(screen_px: int) -> list[str]:
    small = []
    for page in PAGES:
        for n, fig in enumerate(figures(page.read_text(encoding="utf-8"))):
            url, width = drawn_width(fig, screen_px)
            svg = asset_path(page, url).read_text(encoding="utf-8")
            px = smallest_text_px(svg, width)
            if px < MIN_FIGURE_TEXT_PX:
                alt = tag_attrs(fig, "img")[0]["alt"][:70]
                small.append(f"{page_id(page)} figure {n} ({alt}): smallest text {px:.1f} px")
    return small


@pytest.mark.parametrize("screen_px", [PHONE_WIDTH_PX, DESKTOP_WIDTH_PX], ids=["375", "1280"])
def test_figure_text_is_legible_on_a_phone_and_a_laptop(screen_px: int) -> None:
    small = small_figure_text(screen_px)
    assert small == [], f"figure text under {MIN_FIGURE_TEXT_PX} px on a {screen_px}-px screen:\n" + "\n".join(small)


# A label's top is its baseline less its ascent; DejaVu Sans's capitals rise 0.73 of the font size. A label that
# starts less than a point below the figure's top edge is cut off where the reader's font rises higher.
CAP_HEIGHT = 0.76


def labels_at_the_top_edge(svg: str) -> list[str]:
    """The horizontal labels of an SVG figure whose capitals reach within 1 pt of its top edge."""
    found = []
    for m in re.finditer(r'<text\b[^>]*font-size: ([\d.]+)px[^>]*\by="([\d.-]+)"[^>]*>\s*([^<]*)', svg):
        size, y, label = float(m.group(1)), float(m.group(2)), m.group(3).strip()
        if "rotate(-0 " in m.group(0) and y - CAP_HEIGHT * size < 1.0:
            found.append(label)
    return found


def test_no_figure_label_is_cut_at_the_top_edge() -> None:
    """The positions lesson's panel titles ("position embedding", "RoPE") sat 0.5 pt below the top (issue 77)."""
    cut, checked = [], 0
    for svg_file in sorted((SITE / "assets" / "figures").glob("*.svg")):
        checked += 1
        cut += [f"{svg_file.name}: {label!r}" for label in labels_at_the_top_edge(svg_file.read_text(encoding="utf-8"))]
    assert checked > 20 and cut == [], f"labels at the top edge of {checked} figures:\n" + "\n".join(cut)
    assert labels_at_the_top_edge('<text style="font-size: 10px" x="1" y="7.85" transform="rotate(-0 1 7.85)">'
                                  "RoPE</text>") == ["RoPE"]


def stock_css_bytes() -> int:
    """Material's own render-blocking CSS, as installed: its main and palette stylesheets."""
    sheets = Path(material.__file__).parent / "templates" / "assets" / "stylesheets"
    found = [next(sheets.glob("main.*.min.css")), next(sheets.glob("palette.*.min.css"))]
    return sum(p.stat().st_size for p in found)


@pytest.mark.parametrize("page", PAGES, ids=page_id)
def test_render_blocking_css_within_budget(page: Path) -> None:
    html = page.read_text(encoding="utf-8")
    head = html[: html.index("</head>")]
    sheets = [a["href"] for a in tag_attrs(head, "link") if a.get("rel") == "stylesheet" and "media" not in a]
    weight = sum(asset_path(page, href).stat().st_size for href in sheets)
    budget = stock_css_bytes() + CSS_MARGIN_BYTES
    assert weight <= budget, f"{page_id(page)}: {weight} bytes of render-blocking CSS ({sheets}); budget {budget}"


THEME_ASSETS = ("assets/stylesheets/", "assets/javascripts/", "assets/images/favicon.png")


def test_every_project_asset_is_used() -> None:
    texts = [p.read_text(encoding="utf-8") for p in SITE.rglob("*.html")]
    texts += [p.read_text(encoding="utf-8") for p in (SITE / "assets").rglob("*.css")]
    texts += [p.read_text(encoding="utf-8") for p in (SITE / "assets").rglob("*.json")]  # e.g. the live model's
    texts += [p.read_text(encoding="utf-8") for p in (SITE / "assets").rglob("*.js")]  # widget-scripts.js loads some
    referenced = "\n".join(texts)
    unused = []
    for asset in sorted((SITE / "assets").rglob("*")):
        rel = asset.relative_to(SITE).as_posix()
        if asset.is_file() and not rel.startswith(THEME_ASSETS) and asset.name not in referenced:
            unused.append(rel)
    assert unused == [], f"assets shipped but never referenced: {unused}"


def test_no_asset_points_at_another_host() -> None:
    remote = re.compile(r"""(?:url\(\s*['"]?|@import\s+['"]|src=['"])(?:https?:)?//""")
    offenders = [
        p.relative_to(SITE).as_posix()
        for p in [*(SITE / "assets").rglob("*.css"), *(SITE / "assets").rglob("*.js")]
        if remote.search(p.read_text(encoding="utf-8", errors="replace"))
    ]
    assert offenders == []


def test_every_local_asset_a_page_loads_exists() -> None:
    """Stylesheets, scripts and images that any HTML file (the 404 page included) loads are in site/."""
    base = urlsplit(_site_url()).path.rstrip("/") + "/"  # "/" at the root, "/name/" under a Pages sub-path
    missing = []
    for page in SITE.rglob("*.html"):
        html = page.read_text(encoding="utf-8")
        urls = [a.get("href", "") for a in tag_attrs(html, "link") if a.get("rel") == "stylesheet"]
        urls += [a.get("src", "") for tag in ("script", "img") for a in tag_attrs(html, tag)]
        urls += [a.get("srcset", "") for a in tag_attrs(html, "source")]
        for url in filter(None, urls):
            if re.match(r"^(https?:)?//|^data:", url):
                continue
            path = SITE / url.split("?")[0][len(base) :] if url.startswith("/") else page.parent / url.split("?")[0]
            if not path.resolve().is_file():
                missing.append(f"{page.relative_to(SITE)}: {url}")
    assert missing == []


def _site_url() -> str:
    """The address the site was built for: the sitemap's first entry (site_url is resolved at build time)."""
    match = re.search(r"<loc>([^<]+)</loc>", (SITE / "sitemap.xml").read_text(encoding="utf-8"))
    assert match is not None, "sitemap.xml lists no page"
    return match.group(1)


# --------------------------------------------------------------------------- name tokens drawn as plain text

from page_fixes import plain_names  # noqa: E402


def test_name_tokens_lose_their_span_in_highlighted_code_only() -> None:
    code = ('<div class="language-python highlight"><pre><span></span><code><span class="n">x</span> '
            '<span class="o">=</span> <span class="nb">len</span><span class="p">(</span><span class="n">y</span>'
            '<span class="p">)</span></code></pre></div>')
    notebook = '<div class="highlight-ipynb hl-python"><pre><span class="n">x</span></pre></div>'
    prose = '<p><span class="n">x</span></p>'
    got = plain_names(code + notebook + prose)
    plain = code.replace('<span class="n">x</span>', "x").replace('<span class="n">y</span>', "y")
    assert got == plain + notebook + prose
    excerpt = '<div class="language-python package-excerpt highlight"><pre><code><span class="n">z</span></code></pre>'
    assert plain_names(excerpt) == excerpt.replace('<span class="n">z</span>', "z")


def test_the_theme_draws_a_name_in_the_codes_own_colour() -> None:
    """Why dropping a name's <span> changes nothing on screen: Material colours ``.highlight .n`` with
    --md-code-hl-name-color, which is var(--md-code-fg-color) in both schemes, and our stylesheets change neither."""
    sheets = Path(material.__file__).parent / "templates" / "assets" / "stylesheets"
    main = next(sheets.glob("main.*.min.css")).read_text(encoding="utf-8")
    palette = next(sheets.glob("palette.*.min.css")).read_text(encoding="utf-8")
    assert ".highlight .n{color:var(--md-code-hl-name-color)}" in main
    for css in (main, palette):
        assert set(re.findall(r"--md-code-hl-name-color:([^;}]+)", css)) == {"var(--md-code-fg-color)"}
    ours = "".join(p.read_text(encoding="utf-8") for p in (SITE.parent / "docs" / "assets").glob("*.css"))
    assert "--md-code-hl-name-color" not in ours and not re.search(r"\.n\b[^-]", ours)


def test_highlighted_code_has_no_name_spans() -> None:
    kept = [page_id(p) for p in PAGES if plain_names(html := p.read_text(encoding="utf-8")) != html]
    assert kept == [], f"name tokens kept their <span> on {kept} (the post-build step drops them)"


def test_math_fonts_preloaded_are_those_its_classes_draw_in(tmp_path: Path) -> None:
    """page_fixes.katex_fonts reads KaTeX's stylesheet: the base font for any math, and a font per class used."""
    from page_fixes import katex_fonts

    assert katex_fonts("<p>no math</p>") == []
    assert katex_fonts('<span class="katex"><span class="mord">2</span></span>') == ["KaTeX_Main-Regular.woff2"]
    page = '<span class="katex"><span class="mord mathnormal">x</span><span class="delimsizing size1">(</span></span>'
    assert katex_fonts(page) == ["KaTeX_Main-Regular.woff2", "KaTeX_Math-Italic.woff2", "KaTeX_Size1-Regular.woff2"]
    # a class alone is not enough where the stylesheet asks for two (.delimsizing.size1)
    assert katex_fonts('<span class="katex"><span class="size1">(</span></span>') == ["KaTeX_Main-Regular.woff2"]


def test_every_table_of_an_article_is_wrapped_and_marked_when_built() -> None:
    """No article table is left for Material's script to wrap as the page loads (it wraps ``table:not([class])``),
    and each table the build marked sits in the scrolling box the script would have put it in."""
    from page_fixes import TABLE_CLASS

    wrap = '<div class="md-typeset__scrollwrap"><div class="md-typeset__table">'
    bare, unwrapped, marked = [], [], 0
    for p in PAGES:
        article = p.read_text(encoding="utf-8").partition('<article class="md-content__inner md-typeset">')[2]
        bare += [page_id(p)] * len(re.findall(r"<table(?![^>]*\bclass=)[\s>]", article))
        for m in re.finditer(f'<table class="{TABLE_CLASS}"', article):
            marked += 1
            if not article.endswith(wrap, 0, m.start()):
                unwrapped.append(page_id(p))
    assert marked > 20, f"only {marked} marked tables in the built site: is wrap_tables still run?"
    assert bare == [] and unwrapped == [], f"bare tables on {bare}; marked but not wrapped on {unwrapped}"


