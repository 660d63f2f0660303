"""The "Find your model" page: for each model of the atlas, its attention recipe with the lesson for each part.

Everything is read at build time: the models and their mechanisms from the configs file (through
:func:`atlas.parts`, the phrases the atlas's cards show), the lessons from :data:`atlas.LESSONS`, their order
from the navigation in ``mkdocs.yml`` and their titles from their front matter. So a model added to the atlas,
a lesson moved in the navigation or retitled, shows here at the next build. ``tests/site/test_model_finder.py``
resolves every link on the built page.
"""

from __future__ import annotations

import html
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

import atlas
import yaml
from site_links import relative_link

if TYPE_CHECKING:
    from lessons_src.lab.configs import ModelConfig

ROOT = Path(__file__).resolve().parents[2]
PAGE = "find-your-model.md"


def reading_order(config: Path = ROOT / "mkdocs.yml") -> list[str]:
    """The navigation's pages (sources under docs/), in the order a reader meets them."""
    found: list[str] = []

    def walk(items: list[Any]) -> None:
        for item in items:
            value = next(iter(item.values())) if isinstance(item, dict) else item
            if isinstance(value, list):
                walk(value)
            else:
                found.append(value)

    walk(yaml.safe_load(config.read_text(encoding="utf-8"))["nav"])
    return found


def title(src: str) -> str:
    """A page's title, from its front matter."""
    text = (ROOT / "docs" / src).read_text(encoding="utf-8")
    meta: dict[str, Any] = yaml.safe_load(text[4 : text.index("\n---\n", 4)])
    return str(meta["title"])


def lessons_in_order(cfg: ModelConfig, order: list[str]) -> list[tuple[str, list[atlas.Part]]]:
    """(lesson key, the parts it explains) for each lesson that explains a part of the row, in reading order;
    the parts no lesson teaches yet come last, under ``""``."""
    by_lesson: dict[str, list[atlas.Part]] = {}
    for part in atlas.parts(cfg):
        by_lesson.setdefault(part.lesson or "", []).append(part)

    def place(key: str) -> tuple[int, int]:
        if not key:
            return (len(order), 0)
        src, _, section = atlas.LESSONS[key].partition("#")
        return (order.index(src), 0 if not section else 1)

    return sorted(by_lesson.items(), key=lambda item: place(item[0]))


def entry(cfg: ModelConfig, order: list[str]) -> str:
    """One model: its name (the anchor), what kind of attention and layers, and its parts lesson by lesson."""
    e = html.escape
    items = []
    for key, found in lessons_in_order(cfg, order):
        words = "; ".join(e(part.text) for part in found)
        if not key:
            items.append(f"<li>Not taught here yet: {words}</li>")
            continue
        src, _, section = atlas.LESSONS[key].partition("#")
        items.append(f'<li><a href="{relative_link(src, PAGE, section)}">{e(title(src))}</a><br>{words}</li>')
    cache = relative_link(atlas.ATLAS, PAGE, "how-much-cache-a-model-needs").replace(
        "#", f"?model={quote(cfg.name)}#", 1)
    return (f'<h3 id="{atlas.card_id(cfg.name)}">{e(cfg.name)}</h3>'
            f"<p>{cfg.year}; {cfg.attention_kind}, {e(atlas.pattern_phrase(cfg))}; "
            f'<a href="{e(cache)}">its KV cache, computed</a>.</p><ol>{"".join(items)}</ol>')


def render() -> str:
    """Every family of the atlas as a collapsible, its models inside. The ids are the models' (a family and its one
    model may share a name: Kimi K2); a link to a model opens its family's collapsible (Material's doing)."""
    e = html.escape
    order = reading_order()
    out = []
    for family, rows in atlas.families().items():
        names = ", ".join(e(c.name) for c in rows)
        card = relative_link(atlas.ATLAS, PAGE, atlas.card_id(family))
        out.append(f'<details class="abstract"><summary>{e(family)}: {names}</summary>\n'
                   + "\n".join(entry(c, order) for c in rows)
                   + f'<p>Sizes and sources: <a href="{card}">the atlas\'s {e(family)} card</a>.</p></details>')
    return "\n".join(out)  # whitespace between the blocks: the search index keeps their words apart
