"""The "Find your model" page (tools/site_build/model_finder.py): every model of the atlas has an entry a link can
name, and each entry's lessons are links, in reading order, that resolve to a page and a section of the built site.
"""

from __future__ import annotations

import re
from pathlib import Path

from built_links import SITE, broken_links, parse

ROOT = Path(__file__).resolve().parents[2]
import atlas  # noqa: E402
import model_finder  # noqa: E402
import site_links  # noqa: E402

PAGE = SITE / "find-your-model" / "index.html"


def entries() -> dict[str, list[str]]:
    """Each entry's id and the hrefs of its list of lessons, as built."""
    raw = PAGE.read_text(encoding="utf-8")
    return {m.group(1): re.findall(r'<a href="([^"]+)"', m.group(2))
            for m in re.finditer(r'<h3 id="([^"]+)">.*?</h3><p>.*?</p><ol>(.*?)</ol>', raw, re.S)}


def test_every_model_of_the_atlas_has_an_entry() -> None:
    names = [c.name for rows in atlas.families().values() for c in rows]
    assert len(names) == len(set(names)) > 20
    assert set(entries()) == {atlas.card_id(n) for n in names}
    assert {"gpt-oss-20b", "qwen3-8b", "deepseek-v3"} <= parse(PAGE).ids


def test_each_entry_links_its_lessons_in_reading_order_and_every_link_resolves() -> None:
    order = [site_links.page_url(src) for src in model_finder.reading_order()]
    problems = []
    for model, hrefs in entries().items():
        places = [order.index(h.split("#")[0].removeprefix("../")) for h in hrefs]
        if not hrefs or places != sorted(places):
            problems.append(f"{model}: lessons missing or out of reading order: {hrefs}")
        problems += [f"{model}: {why}" for why in broken_links(PAGE, hrefs)]
    assert problems == []
    assert broken_links(PAGE, ["../lessons/mla/#no-such-section"]), "the check would pass a broken anchor"
