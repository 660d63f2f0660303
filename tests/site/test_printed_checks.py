"""No page prints a failed check: no output line says ``== ...: False``, ``matches: nan`` or ``mismatch``.

Pages print comparisons through ``lessons_src.lab.checks`` (``close``, ``equal``, ``holds``), which raise
instead of printing a failure, so a comparison that stops holding fails the build. This scan of the built
site is the net under that rule: it reads every printed result (each ``<pre>`` block that is not highlighted
source, notebook outputs included) and fails on a line where ``False``, ``mismatch`` or ``nan`` follows
``==``, ``:`` or "matches" (directly, or inside ``tensor(`` or a list). Pages that print a wrong result on
purpose (the pitfalls) are on the reviewed ALLOWED list, each with its reason.
"""

from __future__ import annotations

import html
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SITE = ROOT / "site"
if not (SITE / "index.html").exists():
    pytest.fail("site/ is not built: run `make build` first (make test does)", pytrace=False)

# page (as built, under site/) -> {exact substring of the printed line: why the page prints it on purpose}
ALLOWED: dict[str, dict[str, str]] = {
    "lessons/pitfalls-in-code/index.html": {
        "contiguous after transpose: False": "pitfall 9 shows that transpose returns a non-contiguous view",
        "by hand, row 1: [nan, nan, nan, nan]": "pitfall 5 shows the NaN a fully masked row gives by hand",
    },
}

_FAILED = re.compile(  # "== one process: False", "matches: tensor(False)", "loss: nan", "rows: [nan, ...]"
    r"""(?:==|:|\bmatch(?:es|ed)?\b)\s*(?:tensor\(|\[|["'])?\s*(False|mismatch\w*|nan)(?![\w-])""", re.I
)
_BLOCK = re.compile(r"<pre\b[^>]*>(.*?)</pre>", re.S)
_HIGHLIGHTED = re.compile(r'<span class="[a-z0-9 ]+"')  # Pygments' tokens: shown source (a printed result is plain)
_CODE_LINE = re.compile(r"""print\(|\bf["']|\{[\w.]+(?:!r)?(?::[^}]*)?\}""")  # were a source line unhighlighted


def printed_lines(page_html: str) -> list[str]:
    """The lines of every printed result on a page: ``<pre>`` blocks that are not highlighted source code."""
    lines: list[str] = []
    for m in _BLOCK.finditer(page_html):
        if _HIGHLIGHTED.search(m.group(1)):
            continue  # a Python block as shown: its f-strings say "== ...: {same}", not a result
        text = html.unescape(re.sub(r"<[^>]+>", "", m.group(1)))
        lines += [line for line in text.split("\n") if not _CODE_LINE.search(line)]
    return lines


def failed_checks(page_html: str) -> list[str]:
    return [line.strip() for line in printed_lines(page_html) if _FAILED.search(line)]


def _allowed(page: str, line: str) -> bool:
    return any(key in line for key in ALLOWED.get(page, {}))


def test_no_page_prints_a_failed_check() -> None:
    found = []
    for path in sorted(SITE.rglob("*.html")):
        page = str(path.relative_to(SITE))
        found += [f"{page}: {line}" for line in failed_checks(path.read_text(encoding="utf-8"))
                  if not _allowed(page, line)]
    why = "printed checks that failed (print them with lessons_src.lab.checks, which fails the build instead)"
    assert found == [], why + ":\n  " + "\n  ".join(found)


def test_allowed_lines_are_still_printed() -> None:
    for page, entries in ALLOWED.items():
        lines = failed_checks((SITE / page).read_text(encoding="utf-8"))
        for key, why in entries.items():
            assert why.strip(), f"{page}: {key!r} needs a reason"
            assert any(key in line for line in lines), f"{page}: allowed line {key!r} is no longer printed"


def test_the_scan_finds_a_failed_check_and_skips_source() -> None:
    page = (
        '<div class="highlight"><pre><code><span class="nb">print</span>(f"output == SDPA: {same}")\n'
        "same == other: False</code></pre></div>\n"
        '<div class="highlight"><pre><code>print(f"output == SDPA: {same}")\nok: {same}</code></pre></div>\n'
        '<div class="highlight"><pre><span></span><code><a id="l1"></a>rank 0: output == one process: True, '
        "gradients == one process: False\nloss: nan\nrows match: yes\nx = False\nthe tiles matched: mismatch at 3\n"
        "NaN-safe: yes\n{'loss': nan}\n(proj): Linear(in_features=4, bias=False)\n"
        "</code></pre></div>"
    )
    assert failed_checks(page) == ["rank 0: output == one process: True, gradients == one process: False",
                                   "loss: nan", "the tiles matched: mismatch at 3", "{'loss': nan}"]
