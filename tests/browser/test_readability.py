"""What a reader sees without zooming or scrolling sideways, on every page at 375 and 1280 px (issue 30).

- Printed results fit: markdown-exec's output blocks carry the class ``result`` (tools/site_build/readable.py
  marks them), and none is wider than its box, so none scrolls sideways. A block of plain, unhighlighted text
  without that class is printed output the build failed to mark, and fails too. Shell commands (``bash``,
  ``console`` blocks) are held to the same: they were highlighted code, not results, so seven long
  ``python -m ...`` lines on get-the-code and exercises scrolled at 375 px unseen (issue 56).
- Tables fit the phone: no table is wider than its wrapper at 375 px (a wide one gets a phone form: one card
  per row, drawn by site.css from the cells' data-label attributes).
- No visible text under 12 CSS px at 375 px (Lighthouse's legible-font-size audit asks the same of mobile pages),
  math aside: KaTeX draws a formula's nested scripts at TeX's script sizes (half the formula's size for a
  script's script), and they are read as part of the formula, which is drawn larger than the text.

All three read the shared per-page view (views.FACTS_JS measures them with every collapsible open), so they
add no page load.
"""

from __future__ import annotations

import json

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
