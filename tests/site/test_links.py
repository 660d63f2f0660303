"""Every internal link and anchor of the built site resolves (MkDocs validates the Markdown; this checks the HTML).

It reads what readers get: each page's href/src (links, scripts, stylesheets, images), the canonical URLs,
the sitemap and the search index, and checks that each target file exists in site/ and that each
#fragment names an element id (or <a name>) in the target page. External links are not fetched.
"""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from typing import TYPE_CHECKING

import pytest
from built_links import SITE, broken_links, parse, resolve

if TYPE_CHECKING:
    from pathlib import Path

PAGES = sorted(SITE.rglob("*.html"))


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
