"""MkDocs hook: the footer's "Previous"/"Next" links name the section of a numbered part.

The navigation numbers the parts of a series ("3. Paged KV caches" under "Long contexts"); in the sidebar the
section's heading stands above them, but the footer shows the title alone, so "Next: 3. Paged KV caches" says
nothing of which series. This hook rewrites each footer link to a numbered part as
"Long contexts, part 3: Paged KV caches" (its visible text and its aria-label); other titles are unchanged.
"""

from __future__ import annotations

import html
import re
from typing import Any

_NUMBERED = re.compile(r"^(\d+)\.\s+(.+)$")


def footer_title(title: str, section: str | None) -> str:
    """The footer's text for a page titled ``title`` in the nav section ``section`` (None: top level)."""
    m = _NUMBERED.match(title.strip())
    if not m or not section:
        return title
    return f"{section}, part {m.group(1)}: {m.group(2)}"


def _rewrite(output: str, direction: str, label: str, title: str) -> str:
    if label == title:
        return output
    link = re.compile(
        rf'(<a [^>]*class="md-footer__link md-footer__link--{direction}" aria-label=")([^"]*)(".*?'
        r'<div class="md-ellipsis">\s*)(.*?)(\s*</div>)',
        re.S,
    )
    word = "Next" if direction == "next" else "Previous"
    escaped = html.escape(label, quote=True)
    return link.sub(lambda m: f"{m.group(1)}{word}: {escaped}{m.group(3)}{html.escape(label)}{m.group(5)}",
                    output, count=1)


def on_post_page(output: str, page: Any, **kwargs: Any) -> str:
    for direction, other in (("prev", page.previous_page), ("next", page.next_page)):
        if other is None:
            continue
        section = other.parent.title if other.parent is not None else None
        output = _rewrite(output, direction, footer_title(other.title, section), other.title)
    return output
