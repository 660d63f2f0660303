"""Every sentence a page says about a computed result is listed in claims.yml and checked beside it.

``tests/site/claims.yml`` is the inventory: one entry per sentence, ``{page, id, sentence}``. A page backs
each listed sentence with ``claim("<id>", condition, evidence)`` (``lessons_src.lab.checks``) in an executed
block, which fails the build when the data stops supporting the sentence (test_build_fails_loudly.py shows a
false claim failing it). This module checks the inventory against the pages, both ways:

* each entry's page exists, its sentence is on the page (whitespace collapsed), and a ``claim("<id>"`` call
  sits in an executed block of that page (a fenced block with ``exec="on"``, or a notebook's code cell);
* every ``claim(...)`` call in the pages is in the inventory, with a literal id; ids are unique and are
  ``<page stem>/<slug>``.

It reads the Markdown, so it runs without a built site.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
INVENTORY = Path(__file__).with_name("claims.yml")

_FENCE = re.compile(r"^(\s*)(`{3,}|~{3,})(.*)$")
_EXECUTED = re.compile(r"""\bexec=["']?(?:on|1|true)\b""")
_CLAIM_CALL = re.compile(r"\bclaim\(\s*")
_LITERAL_ID = re.compile(r"""\bclaim\(\s*(["'])([^"'\n]+)\1""")
_ID = re.compile(r"^[a-z0-9-]+/[a-z0-9-]+$")


def collapse(text: str) -> str:
    """Runs of whitespace (line breaks and indentation included) become one space."""
    return re.sub(r"\s+", " ", text).strip()


def executed_code(name: str, text: str) -> list[str]:
    """The code a page runs at build time: its ``exec="on"`` fenced blocks, or a notebook's code cells."""
    if name.endswith(".ipynb"):
        cells = json.loads(text)["cells"]
        return ["".join(c["source"]) if isinstance(c["source"], list) else c["source"]
                for c in cells if c["cell_type"] == "code"]
    blocks: list[str] = []
    fence: str | None = None
    executed = False
    current: list[str] = []
    for line in text.split("\n"):
        m = _FENCE.match(line)
        if fence is not None:
            closing = m and m.group(2)[0] == fence[0] and len(m.group(2)) >= len(fence)
            if closing and not m.group(3).strip():  # as superfences: nothing may follow a closing fence
                if executed:
                    blocks.append("\n".join(current))
                fence, current = None, []
            else:
                current.append(line)
        elif m:
            fence, executed = m.group(2), bool(_EXECUTED.search(m.group(3)))
    return blocks


def claim_calls(code: str) -> list[str | None]:
    """The id of each ``claim(...)`` call in ``code``; None where the id is not a string literal."""
    ids: list[str | None] = []
    for m in _CLAIM_CALL.finditer(code):
        if code[max(0, m.start() - 4) : m.start()].endswith("def "):
            continue  # the definition, were a page to show one
        literal = _LITERAL_ID.match(code, m.start())
        ids.append(literal.group(2) if literal else None)
    return ids


def all_calls_in(name: str, text: str) -> list[str | None]:
    """Every ``claim(`` in the page's text, executed or not (a call in a shown-only block checks nothing)."""
    if name.endswith(".ipynb"):
        return [i for code in executed_code(name, text) for i in claim_calls(code)] + [
            i for c in json.loads(text)["cells"] if c["cell_type"] != "code"
            for i in claim_calls("".join(c["source"]))
        ]
    return claim_calls(text)


def inventory_problems(entries: list[dict[str, str]], pages: dict[str, str]) -> list[str]:
    """What is wrong between the inventory and the pages (page path relative to docs/ -> its text)."""
    problems: list[str] = []
    counts = Counter(e.get("id") for e in entries)
    problems += [f"claim id {i!r} is listed {n} times" for i, n in counts.items() if n > 1]
    executed = {name: Counter(i for code in executed_code(name, text) for i in claim_calls(code))
                for name, text in pages.items()}
    for e in entries:
        if set(e) != {"page", "id", "sentence"}:
            problems.append(f"entry {e!r}: needs exactly page, id and sentence")
            continue
        page, cid, sentence = e["page"], e["id"], e["sentence"]
        if not _ID.match(cid) or cid.split("/")[0] != Path(page).stem:
            problems.append(f"{page}: id {cid!r} should be '<page stem>/<slug>' ('{Path(page).stem}/...')")
        if page not in pages:
            problems.append(f"{cid}: page {page} does not exist")
            continue
        if collapse(sentence) not in collapse(pages[page]):
            problems.append(f"{cid}: the sentence is not on {page} (edited? update claims.yml): {sentence!r}")
        if executed[page][cid] == 0:
            problems.append(f"{cid}: no check: {page} has no executed claim({cid!r}, ...) for {sentence!r}")
    listed = {(e.get("page"), e.get("id")) for e in entries}
    for name, text in pages.items():
        for cid in all_calls_in(name, text):
            if cid is None:
                problems.append(f"{name}: a claim() call whose id is not a string literal")
            elif (name, cid) not in listed:
                problems.append(f"{name}: claim({cid!r}, ...) is not in claims.yml (add its page, id and sentence)")
        for cid, n in executed[name].items():
            if cid is not None and n > 1:
                problems.append(f"{name}: claim({cid!r}, ...) is called {n} times; give each sentence its own id")
    return problems


def site_pages() -> dict[str, str]:
    plugins = yaml.load((ROOT / "mkdocs.yml").read_text(encoding="utf-8"), Loader=_Tolerant)["plugins"]
    jupyter = next(p["mkdocs-jupyter"] for p in plugins if isinstance(p, dict) and "mkdocs-jupyter" in p)
    ignored = set(jupyter.get("ignore", []))  # notebooks published as downloads: not run
    paths = [p for p in DOCS.rglob("*") if p.suffix in {".md", ".ipynb"} and "_data" not in p.parts]
    return {str(p.relative_to(DOCS)): p.read_text(encoding="utf-8") for p in sorted(paths)
            if str(p.relative_to(DOCS)) not in ignored}


class _Tolerant(yaml.SafeLoader):
    """mkdocs.yml's tags (!ENV, !!python/name) read as None."""


_Tolerant.add_multi_constructor("", lambda loader, suffix, node: None)


def load_inventory() -> list[dict[str, str]]:
    entries = yaml.safe_load(INVENTORY.read_text(encoding="utf-8"))
    assert isinstance(entries, list), "claims.yml is a YAML list of {page, id, sentence}"
    return entries


def test_every_listed_claim_is_on_its_page_and_checked_there() -> None:
    problems = inventory_problems(load_inventory(), site_pages())
    assert problems == [], "claims.yml and the pages disagree:\n  " + "\n  ".join(problems)


def test_the_inventory_is_grouped_by_page_in_page_order() -> None:
    pages = [e["page"] for e in load_inventory()]
    assert pages == sorted(pages), "keep claims.yml sorted by page (so branches that add entries merge cleanly)"


def test_the_checker_reports_a_claim_with_no_check() -> None:
    page = (
        "# P\n\nThe cache saves little here.\n\nIt is almost half.\n\n"
        '```python exec="on"\nfrom lessons_src.lab.checks import claim\n\nclaim("p/half", 0.48 > 0.4, "0.48")\n```\n\n'
        '```python\nclaim("p/shown-only", True, "a block that is shown, not run")\n```\n'
    )
    entries = [
        {"page": "p.md", "id": "p/half", "sentence": "It is almost half."},
        {"page": "p.md", "id": "p/saves-little", "sentence": "The cache saves little here."},
    ]
    problems = inventory_problems(entries, {"p.md": page})
    assert any(p.startswith("p/saves-little: no check") for p in problems), problems
    assert any("claim('p/shown-only', ...) is not in claims.yml" in p for p in problems), problems
    assert not any("p/half" in p for p in problems), problems


def test_the_checker_reports_a_reworded_sentence_and_an_unlisted_claim() -> None:
    page = (
        '# P\n\nIt is\n  almost half.\n\n```python exec="on"\n'
        'claim("p/half", True, "")\nclaim("p/new", True, "")\n```\n'
    )
    problems = inventory_problems([{"page": "p.md", "id": "p/half", "sentence": "It is nearly half."}], {"p.md": page})
    assert any("p/half: the sentence is not on p.md" in p for p in problems), problems
    assert any("claim('p/new', ...) is not in claims.yml" in p for p in problems), problems
    ok = inventory_problems([{"page": "p.md", "id": "p/half", "sentence": "It is almost half."},
                             {"page": "p.md", "id": "p/new", "sentence": "It is"}], {"p.md": page})
    assert ok == [], ok  # whitespace collapsed: a sentence may wrap across lines on the page
