"""No build talk in a lesson: no `make` target, script path, seed material or internal goal in what it says.

A lesson is read by someone learning attention, not by someone building the site. How a page's numbers were
made (the make target that retrains a model, the script that writes a report) is for a contributor: it may
stay on a lesson only inside a collapsed note titled "How this was made", which the reader opens on purpose.
The Benchmarks page, Get the code and CONTRIBUTING.md name targets and scripts freely; they are not lessons.

Read from the Markdown: the front matter's description, and the prose with fenced code left out (the code's own
comments are code).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
LESSONS = sorted((ROOT / "docs" / "lessons").glob("*.md"))
NOTE = re.compile(r'^(\?\?\?|!!!)\+? \w+ "How this was made"')
TALK = {
    "a make target": re.compile(r"`make [a-z][\w-]*|\bmake (?:test|bench|train|serve|build|ablate|lock)[\w-]*\b"),
    "a script path": re.compile(r"\btools/[\w/.-]+"),
    "the seed material": re.compile(r"seed material", re.IGNORECASE),
    "an internal goal": re.compile(r"\bgoal:", re.IGNORECASE),
}


def build_talk(text: str) -> list[str]:
    """Each line of ``text``'s prose (and its description) that talks about the build, with what it names."""
    found = []
    lines = text.splitlines()
    if lines and lines[0] == "---":
        end = lines.index("---", 1)
        front, lines = lines[1:end], ["" for _ in range(end + 1)] + lines[end + 1 :]
        found += [f"description: {kind}" for line in front if line.startswith("description:")
                  for kind, pattern in TALK.items() if pattern.search(line)]
    fence, note_indent = None, None
    for number, line in enumerate(lines, 1):
        indent = len(line) - len(line.lstrip())
        if note_indent is not None and line.strip() and indent <= note_indent:
            note_indent = None  # the note ended where the text came back to its indentation
        if NOTE.match(line.lstrip()):
            note_indent = indent
            continue
        marker = re.match(r"\s*(`{3,}|~{3,})", line)
        if marker:
            fence = None if fence == marker.group(1)[0] else fence or marker.group(1)[0]
            continue
        if fence or note_indent is not None:
            continue
        found += [f"line {number}: {kind}: {line.strip()[:100]}" for kind, pattern in TALK.items()
                  if pattern.search(line)]
    return found


@pytest.mark.parametrize("page", LESSONS, ids=lambda p: p.name)
def test_a_lesson_does_not_talk_about_its_build(page: Path) -> None:
    talk = build_talk(page.read_text())
    assert not talk, f"{page.name} talks about its build outside a collapsed 'How this was made' note:\n" + \
        "\n".join(talk)


def test_the_check_finds_what_it_must_and_passes_what_it_may() -> None:
    """It refuses a make target, a script path, the seed material and a goal in prose; it passes them in code, in a
    collapsed "How this was made" note, and English that only looks like them ("make each head")."""
    bad = "---\ndescription: The seed material's example\n---\nRun `make bench`.\nSee tools/bench/x.py.\n(goal: 2x)\n"
    assert [t.split(":")[0] for t in build_talk(bad)] == ["description", "line 4", "line 5", "line 6"]
    good = ("Heads make each one weaker.\n\n```python\n# make bench writes it\n```\n\n"
            '??? note "How this was made"\n    `make train-heads` runs tools/train/x.py.\n\nBack to prose.\n')
    assert build_talk(good) == []
    assert build_talk(good + "Now `make test`.\n")  # prose after the note is read again
