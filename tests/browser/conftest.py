"""Fixtures for the real-browser tests: the built site/ served locally, and Debian's Chromium via Playwright.

See browser_support.py for how the site is served and how requests are watched, and views.py for ``view``,
the shared fixture of the per-page checks (one load per page and width for all of them).
"""

from __future__ import annotations

import functools
import http.server
import threading
from typing import TYPE_CHECKING, Any

import pytest
from browser_support import BASE_PATH, CHROMIUM_ARGS, SITE, SiteHandler, Watch, chromium_path, open_context
from views import View, ViewKey

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


def _view_key(item: pytest.Item) -> ViewKey | None:
    callspec = getattr(item, "callspec", None)
    key = callspec.params.get("view") if callspec is not None else None
    return key if isinstance(key, ViewKey) else None


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Run the checks of one view one after another (those that change the page last), after the other tests."""
    others = [item for item in items if _view_key(item) is None]
    views = [item for item in items if _view_key(item) is not None]
    views.sort(key=lambda item: (_view_key(item).width, _view_key(item).path,  # type: ignore[union-attr]
                                 item.get_closest_marker("mutates_view") is not None))
    items[:] = others + views


class _OpenView:
    """The one view kept open between checks, and the tab it leaves behind for the next view of that width.

    A view's checks run one after another; when the next view starts, the tab of the last one is reused (its
    storage cleared, its scheme back to light, then a full navigation to the new page: see View.open), which
    spares a browser context, a renderer process and a cold cache per page: a fifth of a page load's CPU.
    """

    def __init__(self) -> None:
        self.view: View | None = None
        self.spare: View | None = None

    def get(self, browser: Any, server: str, key: ViewKey) -> View:
        if self.view is not None and self.view.key != key:
            self.release()
        if self.view is None:
            self.view = View.open(browser, server, key, reuse=self.spare)
            self.spare = None
        return self.view

    def release(self) -> None:
        """Done with the open view (its checks ran, or one changed the page): keep its tab for the next view."""
        if self.view is not None:
            if self.spare is not None:
                self.spare.close()
            self.spare, self.view = self.view, None

    def close(self) -> None:
        for view in (self.view, self.spare):
            if view is not None:
                view.close()
        self.view = self.spare = None


@pytest.fixture(scope="session")
def _open_view() -> Iterator[_OpenView]:
    holder = _OpenView()
    yield holder
    holder.close()


@pytest.fixture
def view(request: pytest.FixtureRequest, browser: Any, server: str, _open_view: _OpenView) -> Iterator[View]:
    """The page and width this check is parametrized with (see views.per_page), loaded once for all its checks."""
    opened = _open_view.get(browser, server, request.param)
    yield opened
    problems = opened.problems()
    if request.node.get_closest_marker("mutates_view") is not None:
        _open_view.release()
    assert not problems, f"{opened.name}: the browser reported problems: {problems}"
