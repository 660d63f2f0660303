"""The course's reading order and each lesson's front matter, from mkdocs.yml and docs/ (no build needed).

Shared by the site's checks of the reading order (tests/site/test_learning_path.py, test_terms.py,
test_code_terms.py): the navigation's pages in order, the lessons (pages whose front matter lists the terms they
``introduces``), and where a page's built HTML is.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import model_finder
import yaml

ROOT = Path(__file__).resolve().parents[2]
SITE = ROOT / "site"
DOCS = ROOT / "docs"


def nav_pages() -> list[str]:
    """Source paths of the navigation, in reading order (as the site's Find your model page reads it)."""
    return model_finder.reading_order(ROOT / "mkdocs.yml")


def front_matter(src: str) -> dict[str, Any]:
    text = (DOCS / src).read_text(encoding="utf-8")
    if not text.startswith("---\n"):
        return {}
    meta: dict[str, Any] = yaml.safe_load(text[4 : text.index("\n---\n", 4)])
    return meta


def built(src: str) -> Path:
    stem = src.removesuffix(".md").removesuffix(".ipynb")
    if stem == "index":
        return SITE / "index.html"
    return SITE / stem.removesuffix("/index") / "index.html"


LESSONS = [src for src in nav_pages() if "introduces" in front_matter(src)]

# Glossary words neither test_learning_path.py nor test_terms.py polices, each with the reason (a word with an
# everyday meaning names it on pages before the lesson that introduces it). Reviewed: keep it short.
EXEMPT = {
    "rank": "also an everyday verb and noun ('ranks the head counts', a matrix's rank in Today's models) before a "
            "process's rank (Across devices)",
    "P": "notation: a shape letter (processes sharing a layer), defined in the glossary's table of letters",
    "split": "one of the three everyday verbs of the entry 'split, run, concatenate' (the entry is the recipe)",
    "run": "one of the three everyday verbs of the entry 'split, run, concatenate' (the entry is the recipe)",
    "concatenate": "one of the three everyday verbs of the entry 'split, run, concatenate' (the entry is the recipe)",
}
