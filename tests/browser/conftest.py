"""Fixtures for the real-browser tests: the built site/ served locally, and Debian's Chromium via Playwright.

See browser_support.py for how the site is served and how requests are watched.
"""

from __future__ import annotations

import functools
import http.server
import threading
from typing import TYPE_CHECKING, Any

import pytest
from browser_support import BASE_PATH, CHROMIUM_ARGS, SITE, SiteHandler, Watch, chromium_path, open_context

if TYPE_CHECKING:
    from collections.abc import Iterator


@pytest.fixture(scope="session")
def server() -> Iterator[str]:
    """Base URL of the local server, e.g. http://127.0.0.1:40123/multi-head-attention/."""
    if not (SITE / "index.html").exists():
        pytest.fail("site/ is not built: run `make build` first (make test does)", pytrace=False)
    handler = functools.partial(SiteHandler, directory=str(SITE))
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}{BASE_PATH}"
    httpd.shutdown()
    httpd.server_close()


@pytest.fixture(scope="session")
def browser() -> Iterator[Any]:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=chromium_path(), args=CHROMIUM_ARGS)
        yield b
        b.close()


@pytest.fixture
def context(browser: Any, server: str) -> Iterator[tuple[Any, Watch]]:
    context, watch = open_context(browser, server, viewport={"width": 1280, "height": 800})
    yield context, watch
    context.close()


@pytest.fixture
def page(context: tuple[Any, Watch]) -> Iterator[Any]:
    ctx, watch = context
    page = ctx.new_page()
    yield page
    assert watch.problems() == {}, f"the browser reported problems: {watch.problems()}"
