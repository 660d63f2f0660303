"""No glossary term before it is explained: every term of the glossary, on every lesson, in reading order.

The glossary's "Words" (``docs/glossary.md``) are the course's vocabulary. Each one is introduced by exactly
one lesson (its front matter's ``introduces``). On every lesson, in the navigation's order, the first
sentence that names a term must explain it, in one of three ways:

* an earlier lesson introduces it;
* the same sentence defines it: the term in bold or in a ``<dfn>``, or followed at once by a gloss in
  parentheses ("the residual stream (the running sum that every block adds its output to)");
* the same sentence links to the lesson that introduces it.

The lesson that introduces a term must define it (as above) or give it a section (a heading naming it).
Once a page has explained a term, its later sentences may use it freely. Terms that are notation (a shape
letter) or everyday words are exempt, each on :data:`EXEMPT` with its reason. The test reads the built HTML
(no browser): run ``make build`` first.
"""

from __future__ import annotations

import html
import re
from pathlib import Path

import pytest
from glossary import Sentence, defines, glossary_terms, term_pattern
from reading_order import EXEMPT, LESSONS, SITE, built, front_matter

if not (SITE / "index.html").exists():
    pytest.fail("site/ is not built: run `make build` first (make test does)", pytrace=False)


_BLOCK = re.compile(r"</?(p|li|ul|ol|h[1-6]|td|th|tr|dd|dt|figcaption|summary|details|div|blockquote)\b[^>]*>")


def sentences(src: str) -> list[Sentence]:
    """The article's prose as sentences, code, math, figures and scripts left out, links and bold kept."""
    raw = built(src).read_text(encoding="utf-8")
    raw = raw[raw.index("<article") : raw.index("</article>")]
    raw = re.sub(r"<(pre|svg|script|style|code|picture)\b.*?</\1>", " ", raw, flags=re.S)
    raw = re.sub(r'<span class="katex">.*?</span></span></span>', " ", raw, flags=re.S)
    raw = re.sub(r'<p class="reading-time">.*?</p>', " ", raw, flags=re.S)
    raw = re.sub(r'<a class="headerlink".*?</a>', " ", raw, flags=re.S)
    raw = re.sub(r"<h([2-6])\b[^>]*>(.*?)</h\1>", r"\n\n⟦h⟧\2\n\n", raw, flags=re.S)  # a heading names its topic
    raw = _BLOCK.sub("\n\n", raw)
    raw = re.sub(r"<(strong|b|dfn)\b[^>]*>", "⟦b⟧", raw)
    raw = re.sub(r"</(strong|b|dfn)>", "⟦/b⟧", raw)
    raw = re.sub(r'<a\b[^>]*href="([^"]*)"[^>]*>', lambda m: f"⟦a {m.group(1)}⟧", raw)
    raw = raw.replace("</a>", "⟦/a⟧")
    raw = html.unescape(re.sub(r"<[^>]+>", "", raw))
    found = []
    for block in re.split(r"\n\s*\n", raw):
        block = re.sub(r"\s+", " ", block).strip()
        for part in re.split(r"(?<=[.!?:;])\s+(?=[A-Z(\"“⟦])", block):
            plain = re.sub(r"⟦[^⟧]*⟧", "", part).strip()
            if plain:
                found.append(Sentence(plain, part))
    return found


def names_as_topic(sentence: Sentence, pattern: re.Pattern[str]) -> bool:
    """A heading naming the term: the section about it (counts on the page that introduces it)."""
    return sentence.marked.startswith("⟦h⟧") and pattern.search(sentence.text) is not None


def links_to(sentence: Sentence, lesson: str) -> bool:
    stem = Path(lesson).stem
    return any(re.search(rf"(^|/){re.escape(stem)}/(#|$)", href)
               for href in re.findall(r"⟦a ([^⟧]*)⟧", sentence.marked))


_INTRODUCES = {src: [t.lower() for t in front_matter(src)["introduces"]] for src in LESSONS}


def introducer(term: str) -> str | None:
    """The lesson whose front matter introduces the term (compared case-insensitively), or None."""
    return next((src for src in LESSONS if term.lower() in _INTRODUCES[src]), None)


def unexplained(pages: list[str], terms: list[str]) -> list[str]:
    """Every page's first use of a term that nothing explains, as 'page: term (introduced by ...): sentence'."""
    order = {src: i for i, src in enumerate(LESSONS)}
    problems = []
    owners = {term: introducer(term) for term in terms}
    patterns = {term: term_pattern(term) for term in terms}
    for src in pages:
        page = sentences(src)
        for term in terms:
            owner, pattern = owners[term], patterns[term]
            if owner == src:  # the introducing page: somewhere it defines the term, or gives it a section
                if not any(defines(s, pattern) or names_as_topic(s, pattern) for s in page):
                    problems.append(f"{src}: {term!r} is introduced here but no sentence defines it")
                continue
            if owner is not None and order[owner] < order[src]:
                continue
            first = next((s for s in page if pattern.search(s.text)), None)
            if first is None or defines(first, pattern) or (owner and links_to(first, owner)):
                continue
            where = f"introduced by {owner}" if owner else "introduced by no lesson"
            problems.append(f"{src}: {term!r} ({where}): {first.text[:160]}")
    return problems


TERMS = [t for t in glossary_terms() if t not in EXEMPT]


def test_the_glossary_terms_are_found() -> None:
    assert {"attention head", "KV cache", "MLA", "ablation", "P"} <= set(glossary_terms())
    assert set(EXEMPT) <= set(glossary_terms()), "an exempt term the glossary no longer has"


def test_every_glossary_term_is_introduced_by_a_lesson() -> None:
    assert [t for t in TERMS if introducer(t) is None] == []


def test_no_glossary_term_is_used_before_it_is_explained() -> None:
    problems = unexplained(LESSONS, TERMS)
    assert problems == [], "\n".join(problems)


def test_the_check_tells_explained_from_unexplained() -> None:
    pattern = term_pattern("residual stream")
    bold = Sentence("The residual stream is the sum.", "The ⟦b⟧residual stream⟦/b⟧ is the sum.")
    gloss = Sentence("It reads the residual stream (the sum every block adds to).", "")
    cited = Sentence("It reads the residual stream (Elhage et al., 2021).", "")
    bare = Sentence("Each layer reads the residual streams.", "")
    assert defines(bold, pattern) and defines(gloss, pattern)
    acronym = Sentence("It uses multi-head latent attention (MLA).",
                       "It uses ⟦b⟧multi-head latent attention⟦/b⟧ (MLA).")
    assert defines(acronym, term_pattern("MLA"))
    assert not defines(cited, pattern) and not defines(bare, pattern) and pattern.search(bare.text)
    assert not term_pattern("MLA").search("the mla of it") and term_pattern("all-reduce").search("two all-reduces")
    linked = Sentence("See RoPE.", "See ⟦a ../positions/#rope⟧RoPE⟦/a⟧.")
    assert links_to(linked, "lessons/positions.md") and not links_to(linked, "lessons/mla.md")


@pytest.mark.parametrize("src", ["lessons/why-multiple-heads.md"])
def test_sentences_keep_prose_and_drop_code(src: str) -> None:
    found = sentences(src)
    assert len(found) > 20 and not any("import torch" in s.text for s in found)
