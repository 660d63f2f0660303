"""Every page of the built site, opened in Chromium: it loads cleanly, shows its math, figures and collapsibles,
passes axe-core (no serious or critical violation, light and dark), and fits a 375-px-wide screen.

The pages come from site/sitemap.xml, so a lesson added to the nav is tested without touching this file.
"""

from __future__ import annotations

import html
import json
import re
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

import pytest
from browser_support import ROOT, Watch, goto, open_context, page_file, pages_with, site_pages
from views import CONTRAST_KINDS_JS, HEIGHT, ContrastKinds, View, per_page, run_axe

if TYPE_CHECKING:
    from collections.abc import Callable
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


@per_page()
def test_page_has_a_title(view: View) -> None:
    assert view.facts["h1"] >= 1, f"{view.name}: no <h1> in the article"


@per_page()
def test_math_is_typeset(view: View) -> None:
    """Math is typeset at build time: every formula has a laid-out KaTeX box, and no raw TeX is left in the prose."""
    boxes = view.facts["math"]
    if expects_math(view.path):
        assert boxes, f"{view.name}: the source has math but the page shows no .katex element"
    assert all(area > 0 for area in boxes), f"{view.name}: a formula has no KaTeX box of nonzero size: {boxes}"
    raw = _RAW_TEX.findall(view.facts["prose"])
    assert raw == [], f"{view.name}: TeX left unrendered in the page: {raw[:5]}"


@per_page()
def test_figures_render(view: View) -> None:
    """Every image and figure SVG in the article is loaded and has a nonzero size (lazy ones fetched first)."""
    figures = view.facts["figures"]
    if expects_figure(view.path):
        assert figures, f"{view.name}: the source makes a figure but the page shows none"
    bad = [f for f in figures if not (f["w"] > 0 and f["h"] > 0 and f["loaded"])]
    assert bad == [], f"{view.name}: figures that did not render: {bad}"


# A KaTeX font face as its file: KaTeX names each file by family and style (KaTeX_Math-Italic.woff2).
_FACE_FILE = {("normal", "400"): "Regular", ("normal", "700"): "Bold", ("italic", "400"): "Italic",
              ("italic", "700"): "BoldItalic"}


def _font_file(face: str) -> str:
    family, style, weight = face.split("|")
    return f"{family}-{_FACE_FILE[style, {'normal': '400', 'bold': '700'}.get(weight, weight)]}.woff2"


@per_page()
def test_math_fonts_come_with_the_page(view: View) -> None:
    """Every KaTeX font the page draws with as it opens is preloaded from its head, and every font preloaded is one
    its math uses once the collapsibles are open. KaTeX's fonts block text until they load: a font asked for only
    when the math is laid out came after the first layout, and the lines under each formula moved when it
    arrived (Lighthouse's layout shift: 0.14 on mla-modes at 375 px)."""
    preloaded = {href.rsplit("/", 1)[-1] for href in view.facts["fontPreloads"]}
    opening = {_font_file(f) for f in view.facts["fontsOnOpening"]}
    used = {_font_file(f) for f in view.facts["fontsOpen"]}
    assert opening <= preloaded, f"{view.name}: drawn in fonts its head does not preload: {sorted(opening - preloaded)}"
    assert preloaded <= used, f"{view.name}: preloads fonts its math does not use: {sorted(preloaded - used)}"


@per_page()
def test_tables_stay_where_the_page_put_them(view: View) -> None:
    """Each table of the article comes wrapped in Material's scrolling box (once), and no script takes a table out of
    the page while it loads: Material's wraps a bare table by taking it out and putting it back, so it is painted
    again after the script and Lighthouse times the page's largest paint then (reference/code/: 3.0 s, not 1.5 s)."""
    assert view.facts["movedTables"] == [], f"{view.name}: tables taken out while loading: {view.facts['movedTables']}"
    wraps = [t for t in view.facts["tableWraps"] if t["wraps"] != 1]
    assert wraps == [], f"{view.name}: tables not wrapped exactly once: {wraps}"


@per_page()
def test_no_sideways_scroll(view: View) -> None:
    widths = view.facts["widths"]
    assert widths["view"] == view.width
    assert max(widths["doc"], widths["body"]) <= widths["view"], f"{view.name} scrolls sideways: {widths}"


@per_page(widths=(1280,))
def test_axe_clean(view: View) -> None:
    """No serious or critical axe-core violation in the light scheme (views.py says what each view checks)."""
    assert view.facts["scheme"] == "default", f"{view.name}: a light preference loaded {view.facts['scheme']}"
    violations = view.axe("light")
    assert violations == [], f"{view.name} (light): {json.dumps(violations, indent=1)}"


@per_page(widths=(1280,))
def test_axe_clean_in_the_dark_scheme(view: View) -> None:
    violations = view.axe("dark")
    assert violations == [], f"{view.name} (dark): {json.dumps(violations, indent=1)}"


_KINDS_PAGE = """<main style="background: #fff">
  <p>plain</p><p>plain again, one kind with the first</p>
  <p style="color: #555">another colour</p>
  <p style="font-size: 24px">another size</p>
  <p style="font-weight: 700">another weight</p>
  <div style="background: #ffe"><p>another background</p></div>
  <div style="background-image: linear-gradient(#fff, #eee)"><p>a background image</p></div>
  <div style="opacity: 0.8"><p>under an opacity</p></div>
  <pre><span style="color: #999">code: checked on its own pages</span></pre>
  <p hidden>hidden</p>
</main>"""


def test_colour_kinds_tell_apart_what_contrast_depends_on(page: Any) -> None:
    """Each change that can change a contrast verdict makes a kind of its own; repeats, code and hidden text none."""
    page.set_content(_KINDS_PAGE)
    kinds = page.evaluate(CONTRAST_KINDS_JS, ["pre", [], False])
    assert len(kinds) == 7, kinds
    assert page.evaluate(CONTRAST_KINDS_JS, ["pre", kinds, False]) == []


def test_contrast_is_judged_once_per_kind_and_a_bad_one_is_caught(page: Any) -> None:
    """A faint colour fails on the first page that shows it; a kind already judged is not run again; code's
    colours are left to CODE_COLOUR_PAGES; a kind axe-core cannot judge (text over an image) stays unseen."""
    page.set_content('<main style="background: #fff"><p>fine</p><p style="color: #bbb">faint</p>'
                     '<pre style="color: #bbb">faint code</pre></main>')
    kinds = ContrastKinds()
    found = run_axe(page, only=("color-contrast",), contrast=kinds)
    assert [v["id"] for v in found] == ["color-contrast"], found
    assert len(found[0]["nodes"]) == 1 and "pre" not in found[0]["nodes"][0], found
    assert len(kinds.seen) == 2
    assert run_axe(page, only=("color-contrast",), contrast=kinds) == []
    assert run_axe(page, only=("color-contrast",), contrast=ContrastKinds(seen=set())) != []
    assert page.evaluate("document.querySelectorAll('[data-contrast-new]').length") == 0, "marks left behind"
    page.set_content('<main><div style="background-image: linear-gradient(#000, #fff)"><p>over a gradient</p>'
                     '</div></main>')
    unjudged = ContrastKinds()
    assert run_axe(page, only=("color-contrast",), contrast=unjudged) == []
    assert unjudged.seen == set(), "a kind axe-core could not judge was recorded as judged"


def _phone_axe_pages() -> list[str]:
    """The pages whose content a phone lays out differently in a way axe-core can see: the home page (Material's
    phone header and navigation drawer, the same on every page) and each page with a table shown as cards."""
    return ["", *(p for p in pages_with('data-phone="cards"') if p)]


PHONE_AXE_PAGES = _phone_axe_pages()


@per_page(widths=(375,), pages=PHONE_AXE_PAGES)
def test_axe_clean_at_phone_width(view: View) -> None:
    assert view.facts["scheme"] == "default", f"{view.name}: a light preference loaded {view.facts['scheme']}"
    violations = view.axe("light")
    assert violations == [], f"{view.name} (light): {json.dumps(violations, indent=1)}"


_PRE = re.compile(r'(?:<div class="(?P<wrapper>[^"]*)">)?<pre\b.*?</pre>', re.S)
_SPAN_CLASS = re.compile(r'<span class="([\w -]+)"')


def code_kinds(page: str) -> set[str]:
    """What the page's code blocks show that has a colour of its own: each highlighted token class, printed
    results (markdown-exec's output, class ``result``), the notebook's outputs, and plain code."""
    text = page_file(page).read_text(encoding="utf-8")
    kinds: set[str] = set()
    for block in _PRE.finditer(text):
        spans = _SPAN_CLASS.findall(block.group(0))
        kinds.update(f"token {c}" for c in spans)
        if "result" in (block.group("wrapper") or "").split():
            kinds.add("printed result")
        elif not spans:
            kinds.add("plain")
    if "jp-OutputArea-output" in text:
        kinds.add("notebook output")
    return kinds


def _code_colour_pages() -> list[str]:
    """A few pages that together show every kind of code colour on the site (a greedy cover)."""
    kinds = {p: code_kinds(p) for p in PAGES}
    left, chosen = set().union(*kinds.values()), []
    while left:
        best = max(PAGES, key=lambda p: (len(kinds[p] & left), p))
        chosen.append(best)
        left -= kinds[best]
    return chosen


CODE_COLOUR_PAGES = _code_colour_pages()


def test_the_code_colour_pages_show_every_kind_of_code() -> None:
    """The pages whose code is contrast-checked cover every token class the site highlights, printed results
    and the notebook's outputs; so the per-page checks may leave code blocks out of colour contrast."""
    everywhere = set().union(*(code_kinds(p) for p in PAGES))
    covered = set().union(*(code_kinds(p) for p in CODE_COLOUR_PAGES))
    assert {"printed result", "notebook output", "token k", "token s2"} <= everywhere, sorted(everywhere)
    assert covered == everywhere and len(CODE_COLOUR_PAGES) < len(PAGES) / 4, CODE_COLOUR_PAGES


@per_page(widths=(1280,), pages=CODE_COLOUR_PAGES)
def test_code_colours_have_contrast(view: View) -> None:
    """Code blocks and printed results are legible in both schemes (checked where every kind of them appears)."""
    for scheme in ("light", "dark"):
        violations = view.axe_code(scheme)
        assert violations == [], f"{view.name} ({scheme}), code: {json.dumps(violations, indent=1)}"


# Clicks every <details>' summary in one round trip: scrolled into view, the summary must be what a click at its
# centre hits (as Playwright's click checks), then the click must toggle it (closed first if it starts open)
# and the opened body must take up room.
COLLAPSIBLES_JS = """() => [...document.querySelectorAll('article details')].map((d, i) => {
    const summary = d.querySelector('summary');
    const problems = [];
    const click = () => {
        summary.scrollIntoView({block: 'center'});
        const r = summary.getBoundingClientRect();
        const hit = document.elementFromPoint(r.left + Math.min(r.width / 2, 40), r.top + r.height / 2);
        if (!hit || !summary.contains(hit)) {
            problems.push(`#${i}: a click on its summary lands on ${hit ? hit.tagName.toLowerCase() + '.' +
                          hit.className : 'nothing'}`);
            return false;
        }
        summary.click();
        return true;
    };
    if (d.open && click() && d.open) problems.push(`#${i} did not close on click`);
    if (!click()) return problems;
    if (!d.open) problems.push(`#${i} did not open on click`);
    else if (d.getBoundingClientRect().height - summary.offsetHeight <= 0)
        problems.push(`#${i} opened but shows nothing`);
    return problems;
}).flat()"""


@per_page(widths=(1280,))
@pytest.mark.mutates_view
def test_collapsibles_open_and_close(view: View) -> None:
    """Each <details> opens when its summary is clicked and then shows its content (and closes again)."""
    assert view.page.locator("article details").count() == view.facts["details"]
    problems = view.page.evaluate(COLLAPSIBLES_JS)
    assert problems == [], f"{view.name}: {problems}"


def test_some_page_has_a_collapsible() -> None:
    """So that the collapsible check above is never vacuous for the whole site."""
    assert any("<details" in page_file(p).read_text(encoding="utf-8") for p in PAGES)


def test_a_colour_preference_picks_the_scheme_at_load(browser: Any, server: str) -> None:
    """Material applies the system's colour preference when a page loads (the per-page dark check toggles it)."""
    for scheme, expected in (("dark", "slate"), ("light", "default")):
        context, watch = open_context(browser, server, viewport={"width": 1280, "height": 800}, color_scheme=scheme)
        try:
            page = context.new_page()
            page.goto(server + next(p for p in PAGES if p), wait_until="load")
            assert page.evaluate("document.body.getAttribute('data-md-color-scheme')") == expected
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
    goto(page, server + start)
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


class _Events:
    """Stands in for a Playwright object that takes handlers with ``.on`` and routes with ``.route``."""

    def __init__(self) -> None:
        self.handlers: dict[str, Any] = {}
        self.main_frame = object()

    def on(self, event: str, handler: Any) -> None:
        self.handlers[event] = handler

    def route(self, *args: Any) -> None:
        pass

    route_web_socket = route


class _Request:
    def __init__(self, url: str, frame: object, *, navigation: bool = False, failure: str | None = None) -> None:
        self.url, self.frame, self.failure, self._navigation = url, frame, failure, navigation

    def is_navigation_request(self) -> bool:
        return self._navigation


def test_the_watch_judges_a_cancel_reported_before_the_navigation_that_caused_it() -> None:
    """Under load the browser reported the old page's favicon as cancelled before the event of the navigation that
    cancelled it (a fresh clone's run, load 4.9): the watch counted it. The judgment now waits for the navigation;
    a cancel that no navigation follows still counts. Events are replayed in that order, without a browser."""
    context = _Events()
    browser = type("B", (), {"new_context": lambda self, **o: context})()
    _, watch = open_context(browser, "http://127.0.0.1:8000/")
    page = _Events()
    context.handlers["page"](page)
    origin = "http://127.0.0.1:8000/"
    frame = page.main_frame
    page.handlers["request"](_Request(origin + "a/", frame, navigation=True))
    page.handlers["framenavigated"](frame)
    favicon = _Request(origin + "favicon.png", frame, failure="net::ERR_ABORTED")
    page.handlers["request"](favicon)
    page.handlers["requestfailed"](favicon)  # reported first ...
    page.handlers["request"](_Request(origin + "b/", frame, navigation=True))  # ... then the navigation
    assert watch.problems() == {}
    page.handlers["framenavigated"](frame)
    own = _Request(origin + "data.json", frame, failure="net::ERR_ABORTED")  # the page cancels, and stays
    page.handlers["request"](own)
    page.handlers["requestfailed"](own)
    assert watch.problems() == {"failed": [origin + "data.json: net::ERR_ABORTED"]}


def test_the_watch_catches_what_it_must(browser: Any, server: str) -> None:
    """The checks above can fail: a third-party request, a console error and a 404 are all recorded."""
    context, watch = open_context(browser, server)
    try:
        page = context.new_page()
        page.goto(server, wait_until="load")
        page.evaluate("() => fetch('https://cdn.example.com/lib.js').catch(() => null)")
        page.evaluate(
            """() => new Promise(done => { const i = new Image(); i.onload = i.onerror = done;
                                           i.src = '//fonts.example.org/x.png'; document.body.append(i); })"""
        )
        page.evaluate("() => console.error('boom')")
        page.evaluate("() => fetch('no-such-file.js').catch(() => null)")
        # Each evaluate above returns once its request was answered or refused, so the watch has seen them all.
        assert set(watch.third_party) == {"https://cdn.example.com/lib.js", "http://fonts.example.org/x.png"}
        assert any("boom" in e for e in watch.console_errors)
        assert any("no-such-file.js: HTTP 404" in f for f in watch.failed)
    finally:
        context.close()


def test_the_watch_forgives_only_what_leaving_a_page_cancels(browser: Any, server: str) -> None:
    """A request the browser cancels because the test opened another page (as it cancels the old page's favicon
    when the next page comes before the favicon has) is not a failure; the same cancel by the page itself, or a
    request refused while the page stays, still is. (CI failed twice on the favicon: a race, the second time
    with the favicon asked for after the next page's navigation had started, before the browser committed it.)"""
    context, watch = open_context(browser, server)
    held: list[Any] = []  # requests given no answer: in flight until the browser cancels them
    context.route(re.compile(r".*[?&]held$"), lambda r: held.append(r))
    context.route(re.compile(r".*[?&]refused$"), lambda r: r.abort("connectionrefused"))

    def until(done: Callable[[], bool], what: str) -> None:  # each wait lets Playwright's events arrive
        for _ in range(500):
            if done():
                return
            page.wait_for_timeout(20)
        pytest.fail(f"waited 10 s for {what}")

    try:
        page = context.new_page()
        goto(page, server)
        page.evaluate("() => { fetch('assets/images/favicon.png?held').catch(() => null); }")
        until(lambda: len(held) == 1, "the route to hold the request")
        goto(page, server + "lessons/paged-cache/")  # returns once no request of the page is in flight
        assert watch.problems() == {}, "a request cut off by leaving the page was counted as a failure"

        # The race CI met again: the old page asks for something after the next navigation has started but
        # before the browser commits it (under load, the favicon); the commit cancels it.
        navigation: list[Any] = []
        context.route(re.compile(r".*[?]next$"), lambda r: navigation.append(r))
        # (once the navigation has started Playwright waits for the next page before it evaluates anything, so
        # the old page is told beforehand to ask a moment later, while the next page's answer is held)
        page.evaluate("""base => { location.href = base + 'lessons/kv-cache-speedup/?next';
            setTimeout(() => fetch(base + 'assets/images/favicon.png?late&held').catch(() => null), 300); }""",
                      server)
        until(lambda: len(navigation) == 1, "the next page's request")
        until(lambda: len(held) == 2, "the route to hold the old page's late request")
        navigation[0].continue_()
        page.wait_for_url(lambda url: url.endswith("?next"), timeout=10_000)
        page.wait_for_load_state("load", timeout=10_000)
        goto(page, server + "lessons/paged-cache/")
        assert watch.problems() == {}, "a request the old page made while the next one loaded was counted"

        page.evaluate("""() => { window.canceller = new AbortController();
            window.asked = fetch('assets/images/favicon.png?by=page&held', {signal: canceller.signal})
                .catch(() => null);
        }""")
        until(lambda: len(held) == 3, "the route to hold the second request")
        page.evaluate("() => { canceller.abort(); return asked; }")
        page.evaluate("() => fetch('assets/images/favicon.png?refused').catch(() => null)")
        until(lambda: len(watch.problems().get("failed", [])) == 2, "two failures")
        failed = " ".join(watch.failed)
        assert "?by=page&held: net::ERR_ABORTED" in failed and "?refused: net::ERR_CONNECTION_REFUSED" in failed, failed
    finally:
        context.close()


@pytest.mark.parametrize("width", [375, 1280])
def test_search_finds_a_lesson_by_its_title(browser: Any, server: str, width: int) -> None:
    """Search, with the real index (the other tests serve an empty one: see open_context): a class's name lists
    its module's page among the first three; a word of a lesson's title lists that lesson among the first three
    results, and the result opens it. At 375 px the box is behind the header's search button."""
    context, watch = open_context(
        browser, server, real_search=True, viewport={"width": width, "height": 800}, is_mobile=width < 600
    )
    try:
        page = context.new_page()
        goto(page, server)
        if width < 600:
            page.locator("label.md-header__button[for=__search]").click()
        box = page.locator("input.md-search__input")
        box.click()
        results = page.locator(".md-search-result__item > a")

        def first_results(query: str) -> list[str]:
            box.fill(query)
            box.press("End")  # a key, as when typing: Material searches again on keyup
            page.wait_for_function(  # the results of this query (their links carry it, as ?h=)
                "q => [...document.querySelectorAll('.md-search-result__item > a')].some(a => a.href.includes(q))",
                arg="h=" + query.lower(), timeout=30_000)
            return [urlsplit(h or "").path for h in results.evaluate_all("as => as.map(a => a.getAttribute('href'))")]

        # a class of the package: its module's page lists what the module defines (the source is not indexed); the
        # code pages rank below the lessons (test_search.py), so the lesson that teaches the class may come first
        hrefs = first_results("RollingKVCache")
        pages = list(dict.fromkeys(hrefs))
        assert any(p.endswith("reference/code/kv_cache/") for p in pages[:3]), f"first results: {pages[:5]}"
        hrefs = first_results("paged")
        lesson = [i for i, h in enumerate(hrefs) if h.endswith("lessons/paged-cache/")]
        assert lesson and lesson[0] < 3, f"the lesson is not among the first 3 results for 'paged': {hrefs}"
        assert "paged KV caches" in results.nth(lesson[0]).inner_text()
        results.nth(lesson[0]).click()
        page.wait_for_url("**/lessons/paged-cache/**")
        page.wait_for_function(
            "() => document.querySelector('.md-content article h1').textContent.includes('paged KV caches')"
        )
        assert_clean(watch)
    finally:
        context.close()


# The home page's two ways in, by where they lead: the course's first lesson, and the page that finds a model.
WAYS_IN = {"Start the course": "lessons/start-here/", "Find your model": "find-your-model/"}


@per_page(widths=(375,), pages=[""])
def test_the_home_page_s_first_phone_screen_shows_both_ways_in(view: View) -> None:
    """On a 375x667 phone, before any scrolling, a link to each way in is drawn whole above the screen's bottom
    (Material's instant loading makes every link absolute: they are compared as URLs)."""
    found = view.page.evaluate(
        """ways => Object.fromEntries(Object.entries(ways).map(([name, href]) => [name,
            [...document.querySelectorAll('article a[href]')]
                .filter(a => a.href.split('#')[0] === new URL(href, location.href).href && a.checkVisibility())
                .map(a => Math.round(a.getBoundingClientRect().bottom + scrollY))]))""",
        WAYS_IN,
    )
    screen = HEIGHT[view.width]
    missing = {name: f"links' bottoms at {bottoms} px" for name, bottoms in found.items()
               if not any(b <= screen for b in bottoms)}
    assert missing == {}, f"{view.name}: not on the first {screen}-px screen: {missing}"
