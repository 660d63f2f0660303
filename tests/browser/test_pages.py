"""Every page of the built site, opened in Chromium: it loads cleanly, shows its math, figures and collapsibles,
passes axe-core (no serious or critical violation, light and dark), and fits a 375-px-wide screen.

The pages come from site/sitemap.xml, so a lesson added to the nav is tested without touching this file.
"""

from __future__ import annotations

import html
import json
import re
from typing import TYPE_CHECKING, Any

import pytest
from browser_support import AXE, ROOT, Watch, open_context, page_file, site_pages

if TYPE_CHECKING:
    from pathlib import Path

PAGES = site_pages()
DOCS = ROOT / "docs"
_FENCE = re.compile(r"^(```|~~~).*?^\1", re.S | re.M)
_INLINE_CODE = re.compile(r"`[^`\n]*`")
_MATH_SOURCE = re.compile(r"\$\$|(?<![\\$\w])\$(?=\S)[^$\n]+?(?<=\S)\$(?![\w$])")
# TeX that a reader would see raw if the build-time renderer missed it.
_RAW_TEX = re.compile(r"\$\$|\\\(|\\\[|\\(?:frac|sqrt|operatorname|mathbf|mathrm|text|cdot|top|sum)\b")


def source_of(page: str) -> Path | None:
    stem = page.rstrip("/")
    candidates = [DOCS / f"{stem}.md", DOCS / stem / "index.md", DOCS / f"{stem}.ipynb", DOCS / stem / "index.ipynb"]
    if stem == "":
        candidates = [DOCS / "index.md", DOCS / "index.ipynb"]
    return next((c for c in candidates if c.exists()), None)


def prose_of(source: Path) -> str:
    """The source's prose, without code: Markdown outside fences, or a notebook's markdown cells."""
    if source.suffix == ".ipynb":
        cells = json.loads(source.read_text(encoding="utf-8"))["cells"]
        text = "\n".join("".join(c["source"]) for c in cells if c["cell_type"] == "markdown")
    else:
        text = source.read_text(encoding="utf-8")
    return _INLINE_CODE.sub("", _FENCE.sub("", text))


def expects_math(page: str) -> bool:
    source = source_of(page)
    return source is not None and bool(_MATH_SOURCE.search(prose_of(source)))


def expects_figure(page: str) -> bool:
    source = source_of(page)
    if source is None:
        return False
    text = source.read_text(encoding="utf-8")
    return "plotting.svg(" in text or "image/svg+xml" in text or "image/png" in text or bool(re.search(r"!\[", text))


def assert_clean(watch: Watch) -> None:
    assert watch.problems() == {}, f"the browser reported problems: {json.dumps(watch.problems(), indent=1)}"


def run_axe(page: Any) -> list[dict[str, Any]]:
    """axe-core's violations of serious or critical impact on the open page."""
    page.add_script_tag(content=AXE.read_text(encoding="utf-8"))
    violations: list[dict[str, Any]] = page.evaluate(
        """async () => {
            const r = await axe.run(document, {resultTypes: ['violations']});
            return r.violations.filter(v => v.impact === 'serious' || v.impact === 'critical').map(v => ({
                id: v.id, impact: v.impact, help: v.help,
                nodes: v.nodes.slice(0, 5).map(n => n.target.join(' ') + ': ' + n.failureSummary),
            }));
        }"""
    )
    return violations


@pytest.mark.parametrize("path", PAGES, ids=lambda p: p or "home")
def test_page_renders_cleanly(page: Any, context: tuple[Any, Watch], server: str, path: str) -> None:
    """No console error, failed request or third-party request; math, figures and collapsibles work."""
    page.goto(server + path, wait_until="load")
    page.wait_for_load_state("networkidle")
    assert page.locator("article h1").count() >= 1

    # Math: typeset at build time; every formula has a laid-out KaTeX box and no raw TeX is left in the prose.
    boxes = page.eval_on_selector_all(
        "article .math", "els => els.map(e => { const k = e.querySelector('.katex'); "
        "if (!k) return 0; const r = k.getBoundingClientRect(); return r.width * r.height; })"
    )
    if expects_math(path):
        assert boxes, f"{path or 'home'}: the source has math but the page shows no .katex element"
    assert all(area > 0 for area in boxes), f"{path or 'home'}: a formula has no KaTeX box of nonzero size: {boxes}"
    prose = page.evaluate(
        """() => { const a = document.querySelector('article').cloneNode(true);
                   a.querySelectorAll('pre, code, script, style, .katex, .math').forEach(e => e.remove());
                   return a.textContent; }"""
    )
    raw = _RAW_TEX.findall(prose)
    assert raw == [], f"{path or 'home'}: TeX left unrendered in the page: {raw[:5]}"

    # Figures: every image and figure SVG in the article is loaded and has a nonzero size (lazy ones fetched first).
    page.evaluate(
        """async () => {
            const imgs = [...document.querySelectorAll('article img[loading=lazy]')];
            imgs.forEach(i => { i.loading = 'eager'; });
            await Promise.all(imgs.map(i => i.decode().catch(() => null)));
        }"""
    )
    figures = page.eval_on_selector_all(
        "article img, article figure svg, article svg[role=img]",
        """els => els.map(e => { const r = e.getBoundingClientRect();
            return {tag: e.tagName, w: r.width, h: r.height,
                    loaded: e.tagName !== 'IMG' || (e.complete && e.naturalWidth > 0)}; })""",
    )
    if expects_figure(path):
        assert figures, f"{path or 'home'}: the source makes a figure but the page shows none"
    bad = [f for f in figures if not (f["w"] > 0 and f["h"] > 0 and f["loaded"])]
    assert bad == [], f"{path or 'home'}: figures that did not render: {bad}"

    # Collapsibles: each <details> opens when its summary is clicked and then shows its content.
    details = page.locator("article details")
    for i in range(details.count()):
        d = details.nth(i)
        if d.evaluate("e => e.open"):
            d.locator("summary").first.click()
            assert not d.evaluate("e => e.open"), f"{path or 'home'}: details #{i} did not close on click"
        d.locator("summary").first.scroll_into_view_if_needed()
        d.locator("summary").first.click()
        assert d.evaluate("e => e.open"), f"{path or 'home'}: details #{i} did not open on click"
        body_height = d.evaluate("e => e.getBoundingClientRect().height - e.querySelector('summary').offsetHeight")
        assert body_height > 0, f"{path or 'home'}: details #{i} opened but shows nothing"
    assert_clean(context[1])


def test_some_page_has_a_collapsible() -> None:
    """So that the collapsible check above is never vacuous for the whole site."""
    assert any("<details" in page_file(p).read_text(encoding="utf-8") for p in PAGES)


@pytest.mark.parametrize("scheme", ["light", "dark"])
@pytest.mark.parametrize("path", PAGES, ids=lambda p: p or "home")
def test_axe_no_serious_violations(browser: Any, server: str, path: str, scheme: str) -> None:
    context, watch = open_context(browser, server, viewport={"width": 1280, "height": 800}, color_scheme=scheme)
    try:
        page = context.new_page()
        page.goto(server + path, wait_until="load")
        material_scheme = page.evaluate("document.body.getAttribute('data-md-color-scheme')")
        assert material_scheme == {"light": "default", "dark": "slate"}[scheme]
        violations = run_axe(page)
        assert violations == [], f"{path or 'home'} ({scheme}): {json.dumps(violations, indent=1)}"
        assert_clean(watch)
    finally:
        context.close()


@pytest.mark.parametrize("path", PAGES, ids=lambda p: p or "home")
def test_375px_wide_no_horizontal_scroll_and_axe_clean(browser: Any, server: str, path: str) -> None:
    context, watch = open_context(browser, server, viewport={"width": 375, "height": 740}, is_mobile=True)
    try:
        page = context.new_page()
        page.goto(server + path, wait_until="load")
        widths = page.evaluate(
            "({doc: document.documentElement.scrollWidth, body: document.body.scrollWidth,"
            " view: document.documentElement.clientWidth})"
        )
        assert widths["view"] == 375
        assert max(widths["doc"], widths["body"]) <= widths["view"], f"{path or 'home'} scrolls sideways: {widths}"
        # The phone layout differs (drawer navigation, footer, wrapped tables): axe-core checks it too.
        violations = run_axe(page)
        assert violations == [], f"{path or 'home'} (375 px): {json.dumps(violations, indent=1)}"
        assert_clean(watch)
    finally:
        context.close()


def click_nav_link(page: Any, url: str) -> None:
    """Click the primary navigation's link to `url` (an absolute URL), as a reader would."""
    links = page.locator("nav.md-nav--primary a.md-nav__link")
    hrefs = links.evaluate_all("as => as.map(a => a.href)")
    assert url in hrefs, f"no navigation link to {url}"
    link = links.nth(hrefs.index(url))
    link.scroll_into_view_if_needed()
    link.click()


def test_dark_mode_toggles_and_persists(page: Any, context: tuple[Any, Watch], server: str) -> None:
    page.goto(server, wait_until="load")
    scheme = "document.body.getAttribute('data-md-color-scheme')"
    background = "getComputedStyle(document.body).backgroundColor"
    assert page.evaluate(scheme) == "default"
    light_bg = page.evaluate(background)
    page.locator("form[data-md-component=palette] label:visible").first.click()
    page.wait_for_function(f"{scheme} === 'slate'")
    assert page.evaluate(background) != light_bg
    # The choice survives a navigation (Material keeps it in localStorage).
    other = server + next(p for p in PAGES if p)
    click_nav_link(page, other)
    page.wait_for_url(other)
    assert page.evaluate(scheme) == "slate"
    page.locator("form[data-md-component=palette] label:visible").first.click()
    page.wait_for_function(f"{scheme} === 'default'")
    assert_clean(context[1])


def test_instant_navigation_keeps_the_page_and_renders_math(page: Any, context: tuple[Any, Watch], server: str) -> None:
    """Clicking a nav link swaps the content without a reload, and the new page is complete (math included)."""
    start = next(p for p in PAGES if p)
    page.goto(server + start, wait_until="networkidle")
    page.evaluate("window.__not_reloaded = true")
    click_nav_link(page, server)
    page.wait_for_url(server)
    title = re.search(r"<title>(.*?)</title>", page_file("").read_text(encoding="utf-8"), re.S)
    assert title is not None
    page.wait_for_function("t => document.title === t", arg=html.unescape(title.group(1)))
    assert page.evaluate("window.__not_reloaded === true"), "navigation reloaded the page (instant loading is off)"
    if expects_math(""):
        page.wait_for_selector("article .katex")
        assert page.locator("article .katex").count() == page_file("").read_text(encoding="utf-8").count(
            'class="katex"'
        )
    assert_clean(context[1])


def test_the_watch_catches_what_it_must(browser: Any, server: str) -> None:
    """The checks above can fail: a third-party request, a console error and a 404 are all recorded."""
    context, watch = open_context(browser, server)
    try:
        page = context.new_page()
        page.goto(server, wait_until="load")
        page.evaluate("() => fetch('https://cdn.example.com/lib.js').catch(() => null)")
        page.evaluate("() => { const i = new Image(); i.src = '//fonts.example.org/x.png'; document.body.append(i); }")
        page.evaluate("() => console.error('boom')")
        page.evaluate("() => fetch('no-such-file.js').catch(() => null)")
        page.wait_for_timeout(300)
        assert set(watch.third_party) == {"https://cdn.example.com/lib.js", "http://fonts.example.org/x.png"}
        assert any("boom" in e for e in watch.console_errors)
        assert any("no-such-file.js: HTTP 404" in f for f in watch.failed)
    finally:
        context.close()
