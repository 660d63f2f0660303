"""One load per page and width: the shared fixture every per-page browser check uses.

A *view* is one page of the built site opened at one width (1280 px, a laptop, or 375 px, a phone). The
suite opens each view once: a fresh browser context, one ``goto``, one ``evaluate`` that measures what the
checks read (:data:`FACTS_JS`: titles, math boxes, figures, widths, heights, element counts), and axe-core
run at most once per colour scheme. Each check is still its own test, so a failure names the page, the width
and the check::

    @per_page(widths=(375, 1280))
    def test_math_is_typeset(view: View) -> None:
        assert all(area > 0 for area in view.facts["math"])

:func:`per_page` parametrizes a test over every page (or a chosen list) and width. ``conftest.py`` orders the
collected checks so that those of one view run one after another, keeps the open view between them and
closes it when the next view starts; a check that changes the page (clicks, toggles) is marked
``@pytest.mark.mutates_view`` and runs after the view's other checks, and the view is closed after it. After
every check the view's watch must be clean: no console error, page error, failed or third-party request.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

import pytest
from browser_support import AXE, Watch, goto, open_context, site_pages

WIDTHS = (375, 1280)
HEIGHT = {375: 667, 1280: 800}  # a small phone's screen; a laptop's

# Everything the per-page checks read, measured in one round trip once the page has settled. Lazy images are
# made eager and decoded first, so figures are measured loaded; the screen count closes every <details>
# (as a reader finds the page) and opens them again afterwards, so the other measurements see the page as loaded.
FACTS_JS = """async () => {
    const lazy = [...document.querySelectorAll('article img[loading=lazy]')];
    lazy.forEach(i => { i.loading = 'eager'; });
    await Promise.all([...document.querySelectorAll('article img')].map(i => i.decode().catch(() => null)));
    await document.fonts.ready;
    // KaTeX's font faces this document has loaded ("family|style|weight"), and the fonts its head preloads.
    const faces = () => [...document.fonts].filter(f => f.status === 'loaded' && f.family.includes('KaTeX'))
        .map(f => [f.family.replace(/"/g, ''), f.style, f.weight].join('|'));
    const fontsOnOpening = faces();
    const box = e => { const r = e.getBoundingClientRect(); return {w: r.width, h: r.height}; };
    const article = document.querySelector('article');
    const prose = article ? article.cloneNode(true) : document.createElement('div');
    prose.querySelectorAll('pre, code, script, style, .katex, .math').forEach(e => e.remove());
    const facts = {
        h1: document.querySelectorAll('article h1').length,
        math: [...document.querySelectorAll('article .math')].map(e => {
            const k = e.querySelector('.katex'); if (!k) return 0; const b = box(k); return b.w * b.h; }),
        prose: prose.textContent,
        figures: [...document.querySelectorAll('article img, article figure svg, article svg[role=img]')].map(e => ({
            tag: e.tagName, ...box(e), loaded: e.tagName !== 'IMG' || (e.complete && e.naturalWidth > 0)})),
        lessonFigures: [...document.querySelectorAll('.lesson-figure img')].map(i => ({
            width: i.getBoundingClientRect().width, src: i.currentSrc, natural: i.naturalWidth,
            narrow: (i.parentElement.querySelector('source') || {}).srcset || null})),
        displayFormulas: [...document.querySelectorAll('article .katex-display')].map(e =>
            [e.scrollWidth, e.clientWidth]),
        widths: {doc: document.documentElement.scrollWidth, body: document.body.scrollWidth,
                 view: document.documentElement.clientWidth},
        details: document.querySelectorAll('article details').length,
        elements: [...document.querySelectorAll('*')].filter(e => !e.closest('pre, code')).length,
        scheme: document.body.getAttribute('data-md-color-scheme'),
        fontsOnOpening,
        fontPreloads: [...document.querySelectorAll('link[rel=preload][as=font]')].map(l => l.getAttribute('href')),
        // recorded from the start of the load by LOAD_WATCH_JS
        movedTables: [...window.__movedTables],  // copied: what comes later is ours
    };
    // Readability, measured with every collapsible open (as a reader who opens them sees it): printed results
    // (markdown-exec's output blocks, class "result", and the lab notebook's outputs) and tables that scroll
    // sideways, and visible text under 12 px.
    const closed = [...document.querySelectorAll('article details:not([open])')];
    closed.forEach(d => { d.open = true; });
    void document.body.offsetHeight;  // laid out: the fonts of the opened collapsibles' math are asked for
    await document.fonts.ready;
    facts.fontsOpen = faces();
    const where = e => { const h = [...document.querySelectorAll('article h1, article h2, article h3')]
        .filter(x => x.compareDocumentPosition(e) & Node.DOCUMENT_POSITION_FOLLOWING).pop();
        return h ? h.textContent.replace(/\\s+/g, ' ').trim().slice(0, 50) : '(top)'; };
    const widest = c => c.textContent.split('\\n').reduce((a, b) => b.length > a.length ? b : a, '');
    const blocks = document.querySelectorAll('article pre > code, article .jp-OutputArea-output pre');
    facts.codeBlocks = [...blocks].map(c => ({
        result: c.closest('.result, .jp-OutputArea-output') !== null,
        shell: c.closest('.language-bash, .language-console, .language-shell, .language-sh') !== null,
        highlighted: c.querySelector('span[class]') !== null,
        over: c.scrollWidth - c.clientWidth, where: where(c), line: widest(c).slice(0, 100)}));
    // Each printed line that wraps onto more than one line as drawn (a Range over the line's text: its boxes'
    // tops span more than half a line), per block of printed output that has one: the lines go back too, so
    // the test can tell a printed table's rows (test_readability.table_rows) from prose that may wrap.
    facts.wrappedLines = [...blocks].filter(c => c.closest('.result, .jp-OutputArea-output')).map(c => {
        const walk = document.createTreeWalker(c, NodeFilter.SHOW_TEXT), nodes = [];
        let text = '';
        for (let n = walk.nextNode(); n; n = walk.nextNode()) { nodes.push([n, text.length]); text += n.textContent; }
        const locate = (offset, end) => {  // the text node and offset of a character offset of the block
            let k = 0;
            for (let j = 1; j < nodes.length && (end ? nodes[j][1] < offset : nodes[j][1] <= offset); j++) k = j;
            return [nodes[k][0], Math.min(offset - nodes[k][1], nodes[k][0].textContent.length)];
        };
        const lineHeight = parseFloat(getComputedStyle(c).lineHeight) || 16;
        const lines = text.replace(/\\n$/, '').split('\\n'), wrapped = [];
        let start = 0;
        lines.forEach((line, i) => {
            if (line.trim()) {
                const range = document.createRange();
                range.setStart(...locate(start, false));
                range.setEnd(...locate(start + line.length, true));
                const tops = [...range.getClientRects()].filter(r => r.width > 0).map(r => r.top);
                if (tops.length && Math.max(...tops) - Math.min(...tops) > lineHeight / 2) wrapped.push(i);
            }
            start += line.length + 1;
        });
        return {where: where(c), lines, wrapped};
    }).filter(b => b.wrapped.length);
    facts.tableWraps = [...document.querySelectorAll('article table:is(:not([class]), .course-table)')].map(t => ({
        wraps: [...document.querySelectorAll('.md-typeset__scrollwrap')].filter(w => w.contains(t)).length,
        where: where(t)}));
    facts.tables = [...document.querySelectorAll('article table')].map(t => {
        const wrap = t.closest('.md-typeset__scrollwrap') || t.parentElement;
        const over = Math.max(wrap.scrollWidth, t.getBoundingClientRect().width) - wrap.clientWidth;
        return {over,
                head: [...t.querySelectorAll('th')].map(h => h.textContent.trim()).join(' | ').slice(0, 100),
                where: where(t)}; });
    const small = new Map();
    const walk = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
    for (let n = innerWidth < 600 ? walk.nextNode() : null; n; n = walk.nextNode()) {  // checked on the phone
        const e = n.parentElement;
        if (!e || !n.textContent.trim() || e.closest('script, style, noscript, svg, .md-search')) continue;
        const size = parseFloat(getComputedStyle(e).fontSize);
        if (size >= 12 || small.has(e) || !e.checkVisibility({checkOpacity: true, checkVisibilityCSS: true})) continue;
        const r = e.getBoundingClientRect();
        if (r.width === 0 || r.height === 0 || r.right <= 0 || r.left >= innerWidth) continue;
        const cls = typeof e.className === 'string' && e.className ? '.' + e.className.split(' ')[0] : '';
        const inside = ['.katex', 'pre', 'details', 'table', 'article'].filter(s => e.closest(s)).join(' ');
        small.set(e, {size: Math.round(size * 10) / 10, text: n.textContent.trim().slice(0, 40),
                      at: e.tagName.toLowerCase() + cls + ' in ' + (inside || 'the page outside the article')});
    }
    facts.smallText = [...small.values()];
    // Each lesson figure as drawn with the collapsibles open (one inside a collapsible is narrower than the column).
    facts.figureDraws = [...document.querySelectorAll('article .lesson-figure img')].map(i => ({
        src: i.currentSrc, width: i.getBoundingClientRect().width, where: where(i)}));
    closed.forEach(d => { d.open = false; });
    const open = [...document.querySelectorAll('details[open]')];
    open.forEach(d => { d.open = false; });
    facts.closedHeight = document.documentElement.scrollHeight;
    open.forEach(d => { d.open = true; });
    return facts;
}"""

# Added to every view's context, so it runs in each page before the page's own scripts: what happens while the
# page loads that the page as loaded no longer shows: tables of the article taken out of the document (Material's
# script wraps a table by taking it out and putting it back: it is painted again, late).
LOAD_WATCH_JS = """(() => {
    window.__movedTables = [];
    new MutationObserver(records => { for (const r of records) for (const n of r.removedNodes)
        if (n.nodeName === 'TABLE' && !n.hasAttribute('class'))
            window.__movedTables.push((n.querySelector('th') || n).textContent.trim().slice(0, 40)); })
        .observe(document, {childList: true, subtree: true});
})();"""

# What axe-core checks in each view. The HTML of a page is the same at both widths and in both schemes: the width
# changes the layout, the scheme only the colours. Colour contrast is most of axe's time on a page (three
# quarters of a run, most of it on the spans of highlighted code), so each part is checked where it can differ:
# - the laptop view, light scheme: every rule, colour contrast outside code blocks on the elements of a colour
#   kind no earlier page showed (see ContrastKinds);
# - the laptop view, dark scheme: colour contrast outside code blocks (the only rule a scheme can change), on
#   the same terms;
# - code blocks and printed results: their colours come from one stylesheet, the same on every page, so their
#   contrast is checked in both schemes on pages that together hold every kind of highlighted token the site
#   shows (test_pages.CODE_COLOUR_PAGES);
# - the phone view: every rule but colour contrast (tests/site/test_css.py keeps the site's stylesheets from setting
#   a colour under a width media query), on the pages whose content is laid out differently at that width
#   (test_pages.PHONE_AXE_PAGES).
PHONE_SKIPS_RULES = ("color-contrast",)
CODE = "pre"  # code blocks, printed results and the notebook's outputs

# An element's colour kind: everything axe-core's colour-contrast rule reads to judge it, as computed styles. Its
# text's colour, size, weight and shadow; then, from the element up, each ancestor's background colour and image,
# opacity, filter, blend mode and (when not static) position, up to the first opaque plain background, which
# hides everything behind it. Two elements of one kind get one verdict. Elements are those with text of their
# own (what the rule checks), shown (checkVisibility: axe skips hidden ones), outside `outside` (code, checked
# on its own pages). Each kind is returned once with one of its elements marked `data-contrast-new` if the
# page's caller has not seen it (`seen`, kinds as short hashes); `clear` removes the marks.
CONTRAST_KINDS_JS = """([outside, seen, mark]) => {
    const hash = text => { let a = 0x811c9dc5, b = 0x01000193;
        for (let i = 0; i < text.length; i++) { const c = text.charCodeAt(i);
            a = Math.imul(a ^ c, 16777619); b = Math.imul(b ^ c, 2246822519); }
        return (a >>> 0).toString(36) + (b >>> 0).toString(36); };
    const own = e => [...e.childNodes].some(n => n.nodeType === 3 && n.textContent.trim());
    const skip = 'svg, script, style, noscript, template' + (outside ? ', ' + outside : '');
    const known = new Set(seen), kinds = {};
    for (const e of document.querySelectorAll('body *')) {
        if (!own(e) || e.closest(skip) || !e.checkVisibility({checkOpacity: true, checkVisibilityCSS: true})) continue;
        const s = getComputedStyle(e), parts = [s.color, s.fontSize, s.fontWeight, s.textShadow];
        for (let a = e; a; a = a.parentElement) {
            const t = getComputedStyle(a);
            parts.push([t.backgroundColor, t.backgroundImage, t.opacity, t.filter, t.mixBlendMode,
                        t.position === 'static' ? '' : t.position].join(';'));
            if (t.backgroundColor.startsWith('rgb(') && t.backgroundImage === 'none') break;
        }
        const kind = hash(parts.join('|'));
        if (known.has(kind) || kind in kinds) continue;
        kinds[kind] = e;
        if (mark) e.setAttribute('data-contrast-new', kind);
    }
    return Object.keys(kinds);
}"""
_CLEAR_KINDS_JS = """() => document.querySelectorAll('[data-contrast-new]')
    .forEach(e => e.removeAttribute('data-contrast-new'))"""


@dataclass
class ContrastKinds:
    """The colour kinds (see CONTRAST_KINDS_JS) whose contrast axe-core has already judged, in one scheme.

    A page's contrast is checked on one element of each kind no earlier page showed, as CODE_COLOUR_PAGES does
    for code: 268 kinds over 82 pages at 1280 px in the light scheme, found on 31 of them. A kind whose element
    axe-core could not judge (an "incomplete" result: text over an image, or overlapped) stays unseen, so a later
    page's element of that kind is checked. Run the views of one page alone and all its kinds are checked.
    """

    outside: str = CODE
    seen: set[str] = field(default_factory=set)


# The kinds judged so far in this session, per scheme (the views' checks run in one process: see conftest.py).
CONTRAST_SEEN = {"light": ContrastKinds(), "dark": ContrastKinds()}


def run_axe(
    page: Any, skip_rules: tuple[str, ...] = (), *, only: tuple[str, ...] = (), include: str | None = None,
    contrast: ContrastKinds | None = None,
) -> list[dict[str, Any]]:
    """axe-core's violations of serious or critical impact on the open page (axe injected once per page).

    ``only`` runs just those rules; ``include`` (a CSS selector) limits the part of the page checked;
    ``contrast`` limits the colour-contrast rule, and only it, to one element of each colour kind it has not
    seen outside ``contrast.outside``, then records the kinds judged (one axe run, not two: a run's setup is
    about a third of its time; no run at all when colour contrast is the only rule and every kind was seen).
    """
    fresh: list[str] = []
    if contrast is not None:
        fresh = page.evaluate(CONTRAST_KINDS_JS, [contrast.outside, sorted(contrast.seen), True])
        if not fresh and only == ("color-contrast",):
            return []
    if not page.evaluate("typeof window.axe === 'object'"):
        page.add_script_tag(content=AXE.read_text(encoding="utf-8"))
    try:
        result: dict[str, Any] = page.evaluate(
            """async ([skip, only, include, kinds]) => {
                const options = {resultTypes: ['violations', 'incomplete'],
                                 rules: Object.fromEntries(skip.map(id => [id, {enabled: false}]))};
                if (only.length) options.runOnly = {type: 'rule', values: only};
                if (include && !document.querySelector(include)) return {violations: [], unjudged: []};
                if (kinds) {
                    if (!axe.getRules().some(r => r.ruleId === 'color-contrast'))
                        throw new Error('axe-core has no color-contrast rule');
                    axe.configure({rules: [{id: 'color-contrast', selector: '[data-contrast-new]'}]});
                }
                try {
                    const r = await axe.run(include ? {include: [[include]]} : document, options);
                    const unjudged = r.incomplete.filter(v => v.id === 'color-contrast').flatMap(v => v.nodes)
                        .map(n => document.querySelector(n.target[0]))
                        .map(e => e && e.getAttribute('data-contrast-new')).filter(k => k);
                    return {unjudged, violations: r.violations
                        .filter(v => v.impact === 'serious' || v.impact === 'critical').map(v => ({
                            id: v.id, impact: v.impact, help: v.help,
                            nodes: v.nodes.slice(0, 5).map(n => n.target.join(' ') + ': ' + n.failureSummary),
                        }))};
                } finally {
                    if (kinds) axe.reset();
                }
            }""",
            [list(skip_rules), list(only), include, contrast is not None],
        )
    finally:
        if contrast is not None:
            page.evaluate(_CLEAR_KINDS_JS)
    if contrast is not None:
        contrast.seen.update(set(fresh) - set(result["unjudged"]))
    violations: list[dict[str, Any]] = result["violations"]
    return violations


@dataclass(frozen=True)
class ViewKey:
    path: str  # below the site's base path: "" is the home page
    width: int

    def __str__(self) -> str:
        return f"{self.width}-{self.path or 'home'}"


@dataclass
class View:
    """A page opened at one width, measured once; axe-core results are computed on first use and kept."""

    key: ViewKey
    context: Any
    page: Any
    watch: Watch
    facts: dict[str, Any] = field(default_factory=dict)
    _axe: dict[str, list[dict[str, Any]]] = field(default_factory=dict)

    @property
    def path(self) -> str:
        return self.key.path

    @property
    def width(self) -> int:
        return self.key.width

    @property
    def name(self) -> str:
        return f"{self.path or 'home'} at {self.width} px"

    @classmethod
    def open(cls, browser: Any, server: str, key: ViewKey, reuse: View | None = None) -> View:
        """Load the page at the key's width: in a fresh context, or in the tab of ``reuse`` (a finished view of
        the same width) made to look fresh: storage cleared (colour scheme, widgets' state), the old page left
        for a blank one and what it was still loading forgotten, the light scheme emulated, then the new page.
        The scheme is set on the blank page, not the old one, which would restyle and repaint itself for it
        (about 7% of a view's CPU, measured over 24 views at 1280 px)."""
        if reuse is not None and (reuse.width != key.width or reuse.page.is_closed()):
            reuse.close()
            reuse = None
        if reuse is None:
            context, watch = open_context(
                browser, server, viewport={"width": key.width, "height": HEIGHT[key.width]}, is_mobile=key.width < 600
            )
            context.add_init_script(LOAD_WATCH_JS)
            page = context.new_page()
        else:
            context, page, watch = reuse.context, reuse.page, reuse.watch
            page.evaluate("() => { localStorage.clear(); sessionStorage.clear(); }")
            page.goto("about:blank")  # what the old page still loads (its favicon) is cancelled here, not later
            reuse.problems()  # and forgotten, as closing its context did
            # and what the old page stored while it was left (Material stores the scheme it shows)
            cdp = context.new_cdp_session(page)
            origin = "{0.scheme}://{0.netloc}".format(urlsplit(server))
            cdp.send("Storage.clearDataForOrigin", {"origin": origin, "storageTypes": "local_storage"})
            cdp.detach()
            page.emulate_media(color_scheme="light")
        view = cls(key, context, page, watch)
        goto(page, server + key.path)
        view.facts = page.evaluate(FACTS_JS)
        return view

    def axe(self, scheme: str = "light") -> list[dict[str, Any]]:
        """axe-core's serious and critical violations in Material's light (``default``) or dark (``slate``) scheme,
        code blocks' colours aside (see the comment above PHONE_SKIPS_RULES for what each view checks).

        The dark scheme is reached as a reader reaches it: the system preference set to dark, and the header's
        toggle clicked (Material applies the preference at load only; loading dark is tested on its own).
        """
        if scheme not in self._axe:
            self.set_scheme(scheme)
            if self.width < 600:
                found = run_axe(self.page, PHONE_SKIPS_RULES)
            elif scheme == "dark":
                found = run_axe(self.page, only=("color-contrast",), contrast=CONTRAST_SEEN[scheme])
            else:
                found = run_axe(self.page, contrast=CONTRAST_SEEN[scheme])
            self._axe[scheme] = found
        return self._axe[scheme]

    def axe_code(self, scheme: str) -> list[dict[str, Any]]:
        """Colour contrast of the page's code blocks and printed results, in the given scheme."""
        key = f"code-{scheme}"
        if key not in self._axe:
            self.set_scheme(scheme)
            self._axe[key] = run_axe(self.page, only=("color-contrast",), include=CODE)
        return self._axe[key]

    def set_scheme(self, scheme: str) -> None:
        target = {"light": "default", "dark": "slate"}[scheme]
        current = "document.body.getAttribute('data-md-color-scheme')"
        if self.page.evaluate(current) == target:
            return
        self.page.emulate_media(color_scheme=scheme)
        self.page.locator("form[data-md-component=palette] label:visible").first.click()
        self.page.wait_for_function(
            f"t => {current} === t && !document.body.hasAttribute('data-md-color-switching')", arg=target
        )

    def problems(self) -> str:
        """What the watch saw since it was last read (as JSON), and forget it: each check reports its own."""
        found = self.watch.problems()
        text = json.dumps(found, indent=1) if found else ""
        for value in found.values():
            value.clear()
        return text

    def close(self) -> None:
        self.context.close()


def per_page(widths: tuple[int, ...] = WIDTHS, pages: list[str] | None = None) -> pytest.MarkDecorator:
    """Parametrize a check over pages (default: every page in the sitemap) and widths, through the view fixture."""
    keys = [ViewKey(p, w) for w in widths for p in (site_pages() if pages is None else pages)]
    return pytest.mark.parametrize("view", keys, indirect=True, ids=str)
