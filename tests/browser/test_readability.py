"""What a reader sees without zooming or scrolling sideways, on every page at 375 and 1280 px (issue 30).

- Printed results fit: markdown-exec's output blocks carry the class ``result`` (tools/site_build/readable.py
  marks them), and none is wider than its box, so none scrolls sideways. A block of plain, unhighlighted text
  without that class is printed output the build failed to mark, and fails too. Shell commands (``bash``,
  ``console`` blocks) are held to the same: they were highlighted code, not results, so seven long
  ``python -m ...`` lines on get-the-code and exercises scrolled at 375 px unseen (issue 56).
- Tables fit the phone: no table is wider than its wrapper at 375 px (a wide one gets a phone form: one card
  per row, drawn by site.css from the cells' data-label attributes).
- Printed tables keep their columns: no row of a printed table wraps onto a second line as drawn, at 375 or 1280
  px (issue 56). Printed results wrap rather than scroll, which is right for a long sentence and wrong for a
  table, read down its columns: a wrapped row breaks them. A printed table is defined by :func:`table_rows`.
- No visible text under 12 CSS px at 375 px (Lighthouse's legible-font-size audit asks the same of mobile pages),
  math aside: KaTeX draws a formula's nested scripts at TeX's script sizes (half the formula's size for a
  script's script), and they are read as part of the formula, which is drawn larger than the text.

All four read the shared per-page view (views.FACTS_JS measures them with every collapsible open), so they
add no page load.
"""

from __future__ import annotations

import json
import re

from views import View, per_page

PHONE = 375
MIN_TEXT_PX = 12


@per_page()
def test_printed_results_fit(view: View) -> None:
    blocks = view.facts["codeBlocks"]
    print(f"WIDE-RESULTS {view.name} {sum(b['over'] > 1 for b in blocks if b['result'] or not b['highlighted'])}")
    unmarked = [b for b in blocks if not b["result"] and not b["highlighted"]]
    assert unmarked == [], f"{view.name}: printed output without the class 'result': {json.dumps(unmarked, indent=1)}"
    wide = [b for b in blocks if (b["result"] or b["shell"]) and b["over"] > 1]
    assert wide == [], f"{view.name}: printed results or shell lines that scroll sideways: {json.dumps(wide, indent=1)}"


def column_edges(line: str) -> set[tuple[str, int]]:
    """Where a line's fields start and end, for the fields set apart by a gap of two spaces or more."""
    edges: set[tuple[str, int]] = set()
    for gap in re.finditer(r"(?<=\S) {2,}(?=\S)", line):
        edges |= {("end", gap.start()), ("start", gap.end())}
    return edges


def table_rows(lines: list[str]) -> set[int]:
    """The indexes of the lines of a printed block that are rows of a printed table.

    A printed table is two or more consecutive lines whose fields line up: each line has a gap of two spaces or
    more between fields, and each shares with the line next to it the column where a field starts or ends (a
    left- or right-aligned column). A line of prose, a key and its value (``max |diff| 1e-07``), or a heading
    above a table is not a row.
    """
    rows: set[int] = set()
    for i in range(len(lines) - 1):
        if column_edges(lines[i]) & column_edges(lines[i + 1]):
            rows |= {i, i + 1}
    return rows


def test_table_rows_are_lines_whose_columns_line_up() -> None:
    printed = ["shape check: yes", "  h   params   flops", "  1   4,096    8.1e6", "  8     512    1.0e6",
               "a sentence  with a gap", "done"]
    assert table_rows(printed) == {1, 2, 3}
    assert table_rows(["key  value", "other  thing"]) == set()  # gaps, but no column in common
    assert table_rows(["x  1", "y  2"]) == {0, 1}  # a key column and a value column, left-aligned


@per_page()
def test_printed_tables_keep_their_rows_whole(view: View) -> None:
    broken = [{"where": b["where"], "rows": [b["lines"][i] for i in sorted(set(b["wrapped"]) & table_rows(b["lines"]))]}
              for b in view.facts["wrappedLines"]]
    broken = [b for b in broken if b["rows"]]
    print(f"WRAPPED-TABLE-ROWS {view.name} {sum(len(b['rows']) for b in broken)}")
    assert broken == [], (
        f"{view.name}: rows of printed tables that wrap onto a second line (print them narrower): "
        f"{json.dumps(broken, indent=1)}")


@per_page(widths=(PHONE,))
def test_tables_fit_the_phone(view: View) -> None:
    wide = [t for t in view.facts["tables"] if t["over"] > 1]
    print(f"WIDE-TABLES {view.name} {len(wide)}")
    assert wide == [], f"{view.name}: tables that scroll sideways: {json.dumps(wide, indent=1)}"


@per_page(widths=(PHONE,))
def test_no_text_under_12px(view: View) -> None:
    small = [t for t in view.facts["smallText"] if ".katex" not in t["at"]]
    print(f"SMALL-TEXT {view.name} {len(small)}")
    assert small == [], f"{view.name}: visible text under {MIN_TEXT_PX} px: {json.dumps(small[:10], indent=1)}"
