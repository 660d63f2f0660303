"""Links and anchors of the built site/: each page's link targets and ids, and which of a page's links are broken.

Shared by tests/site/test_links.py (every page's links) and tests/site/test_model_finder.py (the Find your
model page's). A link is broken when the file it names is not in site/, or its #fragment names no element.
"""

from __future__ import annotations

import re
from functools import cache
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote, urljoin, urlsplit

import pytest

ROOT = Path(__file__).resolve().parents[2]
SITE = ROOT / "site"
if not (SITE / "index.html").exists():
    pytest.fail("site/ is not built: run `make build` first (make test does)", pytrace=False)
# The address the site was built for (tools/site_build/site_links.py resolves it): the sitemap's home page.
BASE = min(re.findall(r"<loc>([^<]+)</loc>", (SITE / "sitemap.xml").read_text(encoding="utf-8")), key=len)
LINK_ATTRS = {"href", "src", "data", "poster", "action"}


class Links(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.links: list[str] = []
        self.ids: set[str] = set()

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        for name, value in attrs:
            if value is None:
                continue
            if name == "id" or (tag == "a" and name == "name"):
                self.ids.add(value)
            elif name in LINK_ATTRS:
                self.links.append(value)
            elif name == "srcset":
                self.links += [part.split()[0] for part in value.split(",") if part.strip()]


@cache
def parse(page: Path) -> Links:
    parser = Links()
    parser.feed(page.read_text(encoding="utf-8"))
    return parser


def url_of(page: Path) -> str:
    return BASE + page.relative_to(SITE).as_posix()


def resolve(url: str) -> tuple[Path, str] | None:
    """The file in site/ and the fragment that an absolute URL under BASE names; None for other hosts."""
    if not url.startswith(BASE):
        return None
    parts = urlsplit(url)
    rel = unquote(parts.path[len(urlsplit(BASE).path) :])
    target = SITE / rel
    if rel == "" or rel.endswith("/") or target.is_dir():
        target = target / "index.html"
    return target, unquote(parts.fragment)


def broken_links(page: Path, links: list[str]) -> list[str]:
    problems = []
    for link in links:
        if re.match(r"^(mailto|tel|data|javascript|blob):", link):
            continue
        url = urljoin(url_of(page), link)
        if urlsplit(url).scheme in {"http", "https"} and not url.startswith(BASE):
            if urlsplit(url).netloc == urlsplit(BASE).netloc:
                problems.append(f"{link}: outside the site's base path {urlsplit(BASE).path}")
            continue  # another host: not fetched (the browser suite proves pages never request one)
        resolved = resolve(url)
        if resolved is None:
            problems.append(f"{link}: not a URL of this site")
            continue
        target, fragment = resolved
        if not target.is_file():
            problems.append(f"{link}: no file {target.relative_to(SITE)}")
        elif fragment and target.suffix == ".html" and fragment not in parse(target).ids:
            problems.append(f"{link}: no element with id {fragment!r} in {target.relative_to(SITE)}")
    return problems
