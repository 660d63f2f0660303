"""The glossary's words, and when a sentence defines one (bold, ``<dfn>``, or a gloss in parentheses).

Shared by tests/site/test_terms.py (the glossary's words in the built lessons' prose) and
tests/site/test_code_terms.py (the words and abbreviations in the lessons' shown code).
"""

from __future__ import annotations

import itertools
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING

from reading_order import DOCS

if TYPE_CHECKING:
    from pathlib import Path


def glossary_terms(path: Path = DOCS / "glossary.md") -> list[str]:
    """The terms of the glossary's "Words" section: each definition-list entry, split at commas.

    An entry is the line right above a definition (a line starting ``:``), at the left margin or, inside one of
    the section's folded groups (a ``???`` collapsible), indented by four.
    """
    text = path.read_text(encoding="utf-8")
    section = text.split("\n## Words", 1)[1].split("\n## ", 1)[0]
    lines = [line[4:] if line.startswith("    ") else line for line in section.splitlines()[1:]]
    terms: list[str] = []
    for line, below in itertools.pairwise(lines):
        if line and not line[0].isspace() and not line.startswith(":") and below.startswith(":"):
            terms += [t.strip() for t in line.split(",") if t.strip()]
    return terms


def term_pattern(term: str) -> re.Pattern[str]:
    """The term as a word (plurals too); case-sensitive when it has capitals (RoPE, GQA), else not."""
    body = re.escape(term).replace(r"\ ", r"[\s-]+")
    flags = 0 if term != term.lower() else re.I
    return re.compile(rf"(?<![\w-]){body}(?:s|es)?(?![\w-])", flags)


@dataclass
class Sentence:
    text: str  # plain text
    marked: str  # with ⟦b⟧...⟦/b⟧ around bold/dfn and ⟦a href⟧...⟦/a⟧ around links


def defines(sentence: Sentence, pattern: re.Pattern[str]) -> bool:
    """The sentence defines the term: in bold/dfn, or followed at once by a gloss of 3+ words in parentheses."""
    for bold in re.findall(r"⟦b⟧(.*?)⟦/b⟧", sentence.marked):
        if pattern.search(re.sub(r"⟦[^⟧]*⟧", "", bold)):
            return True
    for m in re.finditer(r"⟦/b⟧\s*\(([^()]*)\)", sentence.marked):  # "**multi-head latent attention** (MLA)"
        if pattern.fullmatch(re.sub(r"⟦[^⟧]*⟧", "", m.group(1)).strip()):
            return True
    for m in pattern.finditer(sentence.text):
        gloss = re.match(r"\s*\(([^()]*)\)", sentence.text[m.end() :])
        if gloss and len(gloss.group(1).split()) >= 3 and not re.search(r"\b(19|20)\d\d\b", gloss.group(1)):
            return True
    return False
