"""Every internal link and anchor of the built site resolves (MkDocs validates the Markdown; this checks the HTML).

It reads what readers get: each page's href/src (links, scripts, stylesheets, images), the canonical URLs,
the sitemap and the search index, and checks that each target file exists in site/ and that each
#fragment names an element id (or <a name>) in the target page. External links are not fetched.
"""

from __future__ import annotations

import json
import re
import xml.etree.ElementTree as ET
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
PAGES = sorted(SITE.rglob("*.html"))
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


def test_the_site_has_pages_and_links() -> None:
    assert len(PAGES) >= 3
    assert sum(len(parse(p).links) for p in PAGES) > 100


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(SITE)))
def test_internal_links_and_anchors_resolve(page: Path) -> None:
    problems = broken_links(page, parse(page).links)
    assert problems == [], f"{page.relative_to(SITE)}: broken links:\n" + "\n".join(problems)


def test_sitemap_entries_exist() -> None:
    ns = {"s": "http://www.sitemaps.org/schemas/sitemap/0.9"}
    locs = [el.text or "" for el in ET.parse(SITE / "sitemap.xml").getroot().findall("s:url/s:loc", ns)]
    assert locs
    missing = [loc for loc in locs if (r := resolve(loc)) is None or not r[0].is_file()]
    assert missing == []


def test_search_index_locations_resolve() -> None:
    docs = json.loads((SITE / "search" / "search_index.json").read_text(encoding="utf-8"))["docs"]
    assert docs
    problems = broken_links(SITE / "index.html", [d["location"] or "./" for d in docs])
    assert problems == []


def test_checker_finds_broken_links(tmp_path: Path) -> None:
    """The checker itself: a missing page and a missing anchor are reported, good ones are not."""
    home = SITE / "index.html"
    some_id = sorted(parse(home).ids)[0]
    good = ["./", f"#{some_id}", "assets/site.css", "https://example.org/elsewhere"]
    bad = ["no-such-page/", f"#{some_id}-missing", "reference/code/#no-such-anchor"]
    assert broken_links(home, good) == []
    assert len(broken_links(home, bad)) == len(bad)
