"""Support for the real-browser tests: the built site/ served locally, and Debian's Chromium via Playwright.

The site is served on 127.0.0.1 under the same sub-path it was built for (the path of the ``site_url`` the
build resolved, read from the built sitemap: GitHub Pages' sub-path in CI, the root for a build that knows no
public address), so relative links, instant navigation and the sitemap behave as they will in production.
Every request the browser makes goes through a route: requests to the local server continue, anything else
is aborted and recorded, and the test that caused it fails.

Chromium is Debian's (``/usr/bin/chromium``, or ``$CHROMIUM``); no browser is ever downloaded.
"""

from __future__ import annotations

import functools
import gzip
import html
import http.server
import json
import os
import re
import shutil
import time
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

import pytest

if TYPE_CHECKING:
    from collections.abc import Callable

ROOT = Path(__file__).resolve().parents[2]
SITE = Path(os.environ.get("SITE_DIR", ROOT / "site")).resolve()  # SITE_DIR: test another build
AXE = ROOT / "node_modules" / "axe-core" / "axe.min.js"
_COMPRESSIBLE = {".html", ".css", ".js", ".json", ".xml", ".svg", ".txt", ".map"}
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--headless=new",
    "--disable-gpu",
    "--disable-dev-shm-usage",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-default-apps",
    "--disable-sync",
    "--no-first-run",
    "--no-default-browser-check",
]


def site_url() -> str:
    """The address the site was built for (tools/site_build/site_links.py resolves it): the sitemap's home page."""
    sitemap = SITE / "sitemap.xml"
    if not sitemap.exists():
        pytest.fail("site/ is not built: run `make build` first (make test does)", pytrace=False)
    ns = {"s": "http://www.sitemaps.org/schemas/sitemap/0.9"}
    locs = [el.text or "" for el in ET.parse(sitemap).getroot().findall("s:url/s:loc", ns)]
    assert locs, "sitemap.xml lists no page"
    return min(locs, key=len)


BASE_PATH = urlsplit(site_url()).path  # e.g. "/multi-head-attention/"


def chromium_path() -> str:
    path = os.environ.get("CHROMIUM") or shutil.which("chromium") or shutil.which("chromium-browser")
    if not path:
        pytest.fail("Debian's chromium is not installed: `apt-get install chromium` (.ci/run does)", pytrace=False)
    return path


def site_pages() -> list[str]:
    """Every page of the built site, as paths below the base path ("", "reference/code/", ...), from sitemap.xml."""
    sitemap = SITE / "sitemap.xml"
    if not sitemap.exists():
        pytest.fail("site/ is not built: run `make build` first (make test does)", pytrace=False)
    ns = {"s": "http://www.sitemaps.org/schemas/sitemap/0.9"}
    locs = [el.text or "" for el in ET.parse(sitemap).getroot().findall("s:url/s:loc", ns)]
    prefix = site_url()
    pages = []
    for loc in locs:
        assert loc.startswith(prefix), f"sitemap entry {loc} is not under site_url {prefix}"
        pages.append(loc[len(prefix) :])
    assert pages, "sitemap.xml lists no page"
    return pages


def page_file(page: str) -> Path:
    return SITE / page / "index.html" if page == "" or page.endswith("/") else SITE / page


@functools.lru_cache(maxsize=512)
def _gzipped(body: bytes) -> bytes:
    """The gzipped body, compressed once per content (each page load asks again for the theme's assets)."""
    return gzip.compress(body, mtime=0)


class SiteHandler(http.server.SimpleHTTPRequestHandler):
    """Serves site/ under BASE_PATH only (everything else is a 404), as GitHub Pages does: text is gzipped
    for clients that accept it, and responses may be cached for 10 minutes."""

    def translate_path(self, path: str) -> str:
        path = urlsplit(path).path
        if not path.startswith(BASE_PATH):
            return str(SITE / "__outside_base_path__")
        return super().translate_path("/" + path[len(BASE_PATH) :])

    def do_GET(self) -> None:
        path = Path(self.translate_path(self.path))
        if path.is_dir():
            if not urlsplit(self.path).path.endswith("/"):
                super().do_GET()  # the redirect to the path with a slash
                return
            path = path / "index.html"
        if not path.is_file():
            self.send_error(404, "File not found")
            return
        body = path.read_bytes()
        if path == SITE / "sitemap.xml":
            # Material's instant navigation only follows links listed in sitemap.xml, whose entries carry
            # site_url's host. It swaps in the page's protocol and host name but keeps the sitemap's port,
            # so on a test port it would fall back to full page loads. Serve the sitemap as GitHub Pages
            # effectively does: with the entries on the origin that serves it.
            host, port = self.server.server_address[:2]
            origin = "{0.scheme}://{0.netloc}".format(urlsplit(site_url()))
            body = body.replace(origin.encode(), f"http://{host}:{port}".encode())
        ctype = self.guess_type(str(path))
        self.send_response(200)
        self.send_header("Content-Type", ctype)
        self.send_header("Cache-Control", "max-age=600")
        if "gzip" in self.headers.get("Accept-Encoding", "") and path.suffix in _COMPRESSIBLE:
            body = _gzipped(body)
            self.send_header("Content-Encoding", "gzip")
            self.send_header("Vary", "Accept-Encoding")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:  # quiet
        pass


@dataclass
class Watch:
    """What went wrong while a page was open: console errors, page errors, failed and third-party requests."""

    origin: str
    console_errors: list[str] = field(default_factory=list)
    page_errors: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)
    third_party: list[str] = field(default_factory=list)
    # Cancelled requests not yet judged: (what to report, whether leaving the page explains it). Under load the
    # browser can report a cancel before the event of the navigation that caused it, so the judgment waits.
    cancelled: list[tuple[str, Callable[[], bool]]] = field(default_factory=list)

    def problems(self) -> dict[str, list[str]]:
        self.failed.extend(message for message, left in self.cancelled if not left())
        self.cancelled.clear()
        return {k: v for k, v in vars(self).items() if k not in ("origin", "cancelled") and v}


def open_context(browser: Any, server: str, *, real_search: bool = False, **options: Any) -> tuple[Any, Watch]:
    """A fresh browser context whose pages may only talk to the local server.

    Unless ``real_search``, the pages get a search index with the site's configuration and no document. On each
    full load Material's search worker fetches the 1 MB index and builds its lunr index: measured at about
    70% of the renderer's CPU per page load, in a worker thread no check but the search test reads
    (test_pages.test_search_finds_a_lesson_by_its_title opens a context with the real index).
    """
    origin = "{0.scheme}://{0.netloc}/".format(urlsplit(server))
    watch = Watch(origin)
    context = browser.new_context(service_workers="block", **options)
    if not real_search:
        body = _empty_search_index()
        context.route(
            re.compile("^" + re.escape(origin) + r"(.*/)?search/search_index\.json$"),
            lambda r: r.fulfill(status=200, content_type="application/json", body=body),
        )

    def route(r: Any) -> None:
        watch.third_party.append(r.request.url)
        r.abort("blockedbyclient")

    # Only requests to another host are routed: the pattern goes to the browser, which hands Python just those
    # (a function as the pattern would stop every request, the site's own included, for a round trip to Python).
    context.route(re.compile("^(?!" + re.escape(origin) + ")"), route)

    def route_socket(ws: Any) -> None:  # the site has no WebSocket; any is a request to record and refuse
        watch.third_party.append(ws.url)
        ws.close()

    context.route_web_socket(re.compile(".*"), route_socket)

    def on_page(page: Any) -> None:
        inflight = _INFLIGHT.setdefault(page, set())
        # Top-level navigations started, and how many of them the browser had committed when each request
        # started: the document the request belongs to. A request the old page makes after the next navigation
        # has started but before it commits (the old page's favicon, under load) belongs to the old page.
        document = committed = 0
        started: dict[Any, int] = {}
        seen: dict[Any, float] = {}  # when each request was seen
        navigations: list[float] = []  # when each top-level navigation's request was seen

        def on_request(r: Any) -> None:
            nonlocal document
            if r.is_navigation_request() and r.frame == page.main_frame:
                document += 1
                navigations.append(time.monotonic())
            started[r] = committed
            seen[r] = time.monotonic()
            inflight.add(r)

        def on_navigated(frame: Any) -> None:
            nonlocal committed
            if frame == page.main_frame:
                committed = document  # a same-document change (history.replaceState) starts no navigation

        def on_failed(r: Any) -> None:
            inflight.discard(r)
            # A request the browser cancels because its page was left (the old page's favicon, still loading
            # when a test opens the next page) is the test's doing, not the site's: it is not a failure.
            aborted = r.failure == "net::ERR_ABORTED"
            left = aborted and started.pop(r, committed) != document
            # The browser's own favicon request (not the page's: no script asks for it) is fetched after the load
            # event; a test that opens the next page cancels it, and under load its events may come in any order
            # around the navigation's, so a cancel of it is never the site's failure (a missing one is an HTTP 404).
            left = left or (aborted and r.url.endswith("/assets/images/favicon.png") and r.resource_type != "fetch")
            if not r.url.startswith(origin) or left:
                return
            if not aborted:
                watch.failed.append(f"{r.url}: {r.failure}")
                return
            # A navigation seen after the request started and up to a moment after its cancel caused it too: under
            # load the browser may report the old page's request before the navigation that had already begun, or
            # the cancel before the navigation's event.
            since, until = seen.pop(r, 0.0), time.monotonic() + 2.0
            watch.cancelled.append((f"{r.url}: {r.failure}", lambda: any(since <= t <= until for t in navigations)))

        def on_finished(r: Any) -> None:
            inflight.discard(r)
            started.pop(r, None)
            seen.pop(r, None)

        page.on("request", on_request)
        page.on("requestfinished", on_finished)
        page.on("requestfailed", on_failed)
        page.on("framenavigated", on_navigated)
        page.on("close", lambda _: _INFLIGHT.pop(page, None))
        page.on("console", lambda m: m.type == "error" and watch.console_errors.append(f"{m.text} @ {m.location}"))
        page.on("pageerror", lambda e: watch.page_errors.append(str(e)))
        page.on("response", lambda r: r.status >= 400 and watch.failed.append(f"{r.url}: HTTP {r.status}"))

    context.on("page", on_page)
    return context, watch


@functools.cache
def _empty_search_index() -> str:
    """The built search index's configuration (language, separator, pipeline, fields) with no document."""
    index = json.loads((SITE / "search" / "search_index.json").read_text(encoding="utf-8"))
    return json.dumps({"config": index["config"], "docs": []})


_INFLIGHT: dict[Any, set[Any]] = {}  # each open page's requests not yet finished or failed (see open_context)
# Promises a page's own scripts expose while they finish drawing after the load event (the live model fetches
# its weights, then runs the model); settle() waits for each one present.
# (widget-scripts.js loads each live model's script on its page: wait for the script's object first.)
READY_JS = """async () => {
    const loaded = name => new Promise(done => { const t = () => window[name] ? done() : setTimeout(t, 10); t(); });
    if (document.querySelector('[data-live-model]')) { await loaded('liveModel'); await window.liveModel.ready; }
    if (document.querySelector('[data-live-text-model]')) {
        await loaded('liveTextModel'); await window.liveTextModel.ready; }
}"""


def settle(page: Any, timeout_s: float = 30.0) -> None:
    """Wait until the page's scripts are ready and none of its requests is in flight after two animation frames.

    The condition Playwright's "networkidle" approximates with a fixed 500 ms of quiet, checked directly: each
    round trip to the page lets the browser's events (request started, finished, failed) arrive. For pages of
    a context made by open_context.
    """
    deadline = time.monotonic() + timeout_s
    while True:
        page.evaluate(READY_JS)
        page.evaluate("() => new Promise(r => requestAnimationFrame(() => requestAnimationFrame(r)))")
        if not _INFLIGHT.get(page):
            return
        if time.monotonic() > deadline:
            pytest.fail(f"{page.url}: requests still in flight after {timeout_s} s: {_INFLIGHT.get(page)}")


def goto(page: Any, url: str) -> None:
    """Open `url` and wait for the load event, then for the page to settle (see settle)."""
    page.goto(url, wait_until="load")
    settle(page)


def reload(page: Any) -> None:
    page.reload(wait_until="load")
    settle(page)


def open_by_navigation(page: Any, server: str, path: str) -> None:
    """Open the home page, then click the nav link to `path`; assert the page was swapped in, not reloaded."""
    goto(page, server)
    page.evaluate("window.__not_reloaded = true")
    target = server + path
    links = page.locator("nav.md-nav--primary a.md-nav__link")
    hrefs = links.evaluate_all("as => as.map(a => a.href)")
    assert target in hrefs, f"no navigation link to {path} on the home page"
    link = links.nth(hrefs.index(target))
    link.scroll_into_view_if_needed()
    title = re.search(r"<title>(.*?)</title>", page_file(path).read_text(encoding="utf-8"), re.S)
    assert title is not None
    link.click()
    page.wait_for_url(target)
    # The URL changes before the new content is swapped in; the title changes with the content.
    page.wait_for_function("t => document.title === t", arg=html.unescape(title.group(1)))
    settle(page)
    assert page.evaluate("window.__not_reloaded === true"), "the navigation reloaded the page"


def pages_with(marker: str) -> list[str]:
    """Built pages whose HTML contains `marker` (e.g. a widget's data attribute)."""
    return [p for p in site_pages() if marker in page_file(p).read_text(encoding="utf-8")]
