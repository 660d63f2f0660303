"""Numbers in the lessons' prose are printed by code, or are facts with their source beside them.

Every number a reader sees should come from code run at build time (inside a code block's output), or be
a published fact whose source the same paragraph names. This lint reads the Markdown of every page in the
navigation and flags each number typed into the prose (code blocks, inline code, math and link targets
left out), unless it is one of these kinds, recognised by rule:

* a year (1900-2099), an arXiv id, or a reference into a source ("section 3.2.1", "Table 1", "footnote 4",
  "Figure 4", "algorithm 2", "chapter 3", "row (A)") or into this course ("part 2", "pitfall 1");
* a list, heading or exercise number ("## 3.", "1. ", "??? question \"2."), a number in an exercise's
  question (the exercise's given, which its answer's code then uses), in a model's or licence's name
  ("Llama 3 8B", "Gemma 2 and 3", "CC BY 4.0"), in a number format's name ("16-bit"), or a series' length
  ("Part 4 of 5", checked against the navigation below);
* 0 or 1 (an index, or a probability's total), or an index naming a head, layer, token, key, slot or
  feature in an example ("head 2", "tokens 2 and 3");
* a number in a paragraph that cites its source (an "et al.", an arXiv id, or a reference list).

The front matter's title and description are prose too (they become the page's meta description and
search snippet), and are read by the same rules.

What remains must be on the short, reviewed ALLOWED list below (each entry says why it is not printed by
code), or be replaced by a number the page's code prints.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"

# page -> {exact text around the number: why it is typed}. Keep this short; prefer printing the number.
ALLOWED: dict[str, dict[str, str]] = {
    "lessons/why-multiple-heads.md": {"At 45°": "names a row of the sweep's table above, which prints it"},
    "lessons/parameters-and-compute.md": {"multiply-add as 2": "a counting convention (PyTorch's counter's)"},
    "practice/questions.md": {
        "d_model = 1024": "the exercise's given (the seeds' dimension-arithmetic exercise)",
        "to 32 and keep": "the exercise's given",
    },
    "reference/benchmarks.md": {
        "batch 8, 1,024": "Raschka's published setup; tests/tools/test_bench_reports.py checks the report used it",
        "768, 12 heads": "Raschka's published setup, as above",
        "at 60 Hz": "a display's refresh rate: the frame budget the goal is stated in",
    },
    "reference/site-measured.md": {
        "from 0 to 100": "Lighthouse's published score scale, from its documentation linked above",
        "(150 ms round trips, 1.6 Mbit/s": "Lighthouse's published mobile throttling, from its documentation",
    },
    "get-the-code.md": {
        "Python 3.11": "pyproject.toml's requires-python; test_python_version_is_pyprojects checks it",
    },
}

_FENCE = re.compile(r"^(\s*)(`{3,}|~{3,})")
_NUMBER = re.compile(r"(?<![\w.\-/:#])(?>\d+(?:[.,]\d+)*)(?![\w])")
_INDEX_LABEL = re.compile(  # "head 2", "tokens 2 and 3", "features 3-5", '"token" 2': a name in an example
    r"\b(?:head|heads|token|tokens|query|queries|key|keys|feature|features|coordinate|coordinates|index|layer|layers|"
    r"slot|slots)\"?\s+"
    r"(?:\d+\s+(?:and|or|to)\s+)?$",
    re.I,
)
_MODEL_NAME = re.compile(  # a model's or a licence's name: "Llama 3 8B", "Gemma 2 and 3", "CC BY 4.0"
    r"\b(?:Llama|LLaMA|Gemma|Mistral|Qwen|Phi|T5|GPT|OLMo|CC BY(?:-SA)?)\s*(?:\d+\s+(?:and|or)\s+)?$"
)
_PART_OF = re.compile(r"\bparts?\s+\d+\s+of\s*$", re.I)  # "Part 4 of 5": test_part_counts_match_the_series
_FORMAT = re.compile(r"^-bit\b")  # "16-bit numbers", "JavaScript's 64-bit": the name of a number format
_SOURCE_REF = re.compile(
    r"\b(?:section|sections|§|table|tables|figure|figures|fig\.|footnote|algorithm|chapter|eq\.|equation|row|rows|"
    r"part|parts|pitfall|pitfalls|step|lesson)\s*$",
    re.I,
)
_CITES = re.compile(r"et al\.|arXiv:|\(\d{4}\)|\b(?:19|20)\d{2}\b")


def nav_pages() -> list[str]:
    config = yaml.safe_load((ROOT / "mkdocs.yml").read_text(encoding="utf-8"))
    found: list[str] = []

    def walk(items: list) -> None:  # type: ignore[type-arg]
        for item in items:
            value = next(iter(item.values())) if isinstance(item, dict) else item
            walk(value) if isinstance(value, list) else found.append(value)

    walk(config["nav"])
    return [p for p in found if p.endswith(".md") and not p.startswith("reference/code/")]


def paragraphs(text: str) -> list[tuple[int, str]]:
    """(first line number, text) of each prose paragraph: front matter, code blocks and display math out."""
    lines = text.split("\n")
    start = 0
    if lines and lines[0] == "---":
        start = lines.index("---", 1) + 1
    out: list[tuple[int, str]] = []
    current: list[str] = []
    first = 0
    fence: str | None = None
    in_math = False

    def flush() -> None:
        nonlocal current
        if current:
            out.append((first, "\n".join(current)))
        current = []

    for i in range(start, len(lines)):
        line = lines[i]
        m = _FENCE.match(line)
        if fence is not None:
            if m and m.group(2)[0] == fence[0] and len(m.group(2)) >= len(fence):
                fence = None
            continue
        if m:
            fence = m.group(2)
            flush()
            continue
        if line.strip() == "$$":
            in_math = not in_math
            flush()
            continue
        if in_math:
            continue
        if not line.strip():
            flush()
            continue
        if not current:
            first = i + 1
        current.append(line)
    flush()
    return out


def front_matter(text: str) -> tuple[dict[str, object], list[str]]:
    """The page's front matter, and its lines (empty when it has none)."""
    lines = text.split("\n")
    if not lines or lines[0] != "---":
        return {}, []
    head = lines[: lines.index("---", 1)]
    return yaml.safe_load("\n".join(head[1:])) or {}, head


def front_matter_prose(text: str) -> list[tuple[int, str]]:
    """(line number, text) of the front matter's title and description: the page's meta description and
    search snippet, prose a reader sees before the page."""
    meta, head = front_matter(text)
    out = []
    for key in ("title", "description"):
        value = meta.get(key)
        if isinstance(value, str):
            line_no = next(i + 1 for i, line in enumerate(head) if line.startswith(f"{key}:"))
            out.append((line_no, " ".join(value.split())))
    return out


def strip_markup(text: str) -> str:
    text = re.sub(r"\$\$.*?\$\$", " ", text, flags=re.S)
    text = re.sub(r"(?<!\\)\$[^$]+\$", " ", text)
    text = re.sub(r"`[^`]*`", " ", text)
    text = re.sub(r"\]\([^)]*\)", "]", text)  # link targets
    text = re.sub(r"<[^>]+>", " ", text)
    text = re.sub(r"\{\s*[#.][^}]*\}", " ", text)  # attribute lists: { #anchor data-toc-label="..." }
    text = re.sub(r"\{[a-z_0-9]+\}", " ", text)  # placeholders filled by the build
    return text


def typed_numbers(src: str) -> list[tuple[int, str, str]]:
    """(line, number, context) for each number in the page's prose that no rule allows."""
    text = (DOCS / src).read_text(encoding="utf-8")
    found = []
    exercises = _exercise_lines(text)
    for line_no, para in front_matter_prose(text) + paragraphs(text):
        if line_no in exercises and re.match(r"^\d+\. ", para):
            continue  # an exercise's statement ("1. With d_model = 1024, ..."): its numbers are the givens
        if _CITES.search(para) or re.match(r"^\s*[-*] [A-Z][\w'-]+, [A-Z]\.", para):
            continue  # a paragraph naming its source, or a reference list
        for offset, raw_line in enumerate(para.split("\n")):
            if re.match(r'^\s*\?\?\?\+? question "', raw_line):
                continue  # an exercise's question: its numbers are the givens
            line = strip_markup(raw_line)
            line = re.sub(r"^\s*(?:#{1,6}\s*)?(?:\d+\.|[-*])\s", " ", line)  # list and heading numbers
            for m in _NUMBER.finditer(line):
                number = m.group()
                value = number.replace(",", "")
                if value in {"0", "1"} or (len(value) == 4 and value.isdigit() and 1900 <= int(value) <= 2099):
                    continue
                before = line[: m.start()]
                if _SOURCE_REF.search(before) or _MODEL_NAME.search(before) or _INDEX_LABEL.search(before):
                    continue
                if _PART_OF.search(before) or _FORMAT.match(line[m.end() :]):
                    continue
                context = line[max(0, m.start() - 40) : m.end() + 30].strip()
                found.append((line_no + offset, number, context))
    return found


def _exercise_lines(text: str) -> set[int]:
    """Line numbers (1-based) inside an "## Exercises" section."""
    inside, lines = False, set()
    for i, line in enumerate(text.split("\n"), 1):
        if line.startswith("## "):
            inside = line.strip() == "## Exercises"
        elif inside:
            lines.add(i)
    return lines


def _allowed(src: str, context: str) -> bool:
    return any(key in context for key in ALLOWED.get(src, {}))


@pytest.mark.parametrize("src", nav_pages())
def test_no_hand_typed_numbers_in_prose(src: str) -> None:
    bad = [(line, n, ctx) for line, n, ctx in typed_numbers(src) if not _allowed(src, ctx)]
    listing = "\n".join(f"  line {line}: {n!r} in ...{ctx}..." for line, n, ctx in bad)
    assert bad == [], f"{src}: numbers typed into the prose (print them from code, or name their source):\n{listing}"


def test_allowlist_entries_are_all_used() -> None:
    """A stale entry hides nothing and should go; each entry must still match a number on its page."""
    for src, entries in ALLOWED.items():
        contexts = [ctx for _, _, ctx in typed_numbers(src)]
        for key, why in entries.items():
            assert why.strip(), f"{src}: allowlist entry {key!r} needs a reason"
            assert any(key in ctx for ctx in contexts), f"{src}: allowlist entry {key!r} matches no number"


def test_allowlist_stays_short_and_gives_reasons() -> None:
    """Issue 31: at most 10 reviewed entries, each with its reason; a number code could print is printed instead."""
    entries = [(page, text, why) for page, allowed in ALLOWED.items() for text, why in allowed.items()]
    assert len(entries) <= 10, f"{len(entries)} allowlisted numbers: print some from code instead"
    assert all(why.strip() for _, _, why in entries)


def test_python_version_is_pyprojects() -> None:
    import tomllib

    required = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]["requires-python"]
    assert required == ">=3.11" and "Python 3.11 or later" in (DOCS / "get-the-code.md").read_text(encoding="utf-8")


def test_the_lint_flags_a_typed_number(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    page = tmp_path / "lesson.md"
    page.write_text(
        "---\ntitle: t\n---\n\n# T\n\nThe layer has 12 heads of 64.\n\n"
        "```python\nprint(12)\n```\n\nHead 2 reads tokens 3 and 4.\n\nVaswani et al. (2017) used 8 heads.\n\n"
        "1. First, section 3.2 and Table 1.\n"
        '\n??? question "2. With d_model = 1024?"\n    The answer is `64`, printed: $d_k = 64$.\n',
        encoding="utf-8",
    )
    monkeypatch.setattr(sys.modules[__name__], "DOCS", tmp_path)
    found = [(n, line) for line, n, _ in typed_numbers("lesson.md")]
    assert found == [("12", 7), ("64", 7)]  # not head 2, tokens 3 and 4, the source's 8, the question's 1024


def test_part_counts_match_the_series() -> None:
    """ "Part 4 of 5" in a description: the page is the 4th in the navigation of a series of 5 titled alike."""
    series: dict[str, list[tuple[str, str]]] = {}
    for src in nav_pages():
        text = (DOCS / src).read_text(encoding="utf-8")
        meta = front_matter(text)[0]
        m = re.match(r"(.+), part (\d+):", str(meta.get("title", "")))
        if m:
            series.setdefault(m.group(1), []).append((m.group(2), str(meta.get("description", ""))))
    assert series, "no page titled '<series>, part N: ...'"
    for name, parts in series.items():
        assert [p for p, _ in parts] == [str(i) for i in range(1, len(parts) + 1)], f"{name}: parts out of order"
        for part, description in parts:
            stated = re.search(r"\bPart (\d+) of (\d+)\.", description)
            assert stated is None or stated.groups() == (part, str(len(parts))), (
                f"{name}, part {part}: the description says {stated.group()!r}, the navigation has {len(parts)} parts"
            )
