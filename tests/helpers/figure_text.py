"""How small a figure's text is drawn: the smallest font size of its SVG, scaled to the width it is drawn at.

Shared by tests/site/test_page_weight.py (computed from the SVG files at the column widths) and
tests/browser/test_page_length.py (the widths Chromium draws each figure at on a phone).
"""

from __future__ import annotations

import re

MIN_FIGURE_TEXT_PX = 11.0  # the house rule: no figure label under 11 px as drawn


def smallest_text_px(svg: str, rendered_width: float) -> float:
    view_width = float(re.search(r'viewBox="[\d.-]+ [\d.-]+ ([\d.]+)', svg).group(1))  # type: ignore[union-attr]
    sizes = [float(s) for s in re.findall(r"font-size:\s*([\d.]+)px", svg)]
    sizes += [float(s) for s in re.findall(r'font-size="([\d.]+)"', svg)]
    return min(sizes, default=float("inf")) * rendered_width / view_width
