"""Every figure's labels are readable as drawn: no two overlap, none falls outside the figure, and every
category label the figure asked for is drawn.

One Chromium load per distinct SVG file under site/assets/figures (the wide and the phone variant of every
lesson figure; overlap does not depend on the scale an image is drawn at). In the loaded file, each
<text> element's box is its getBBox() in its own coordinates, trimmed by 18% of its height at the top and
bottom (the font's ascent and descent above and below the glyphs), mapped through getScreenCTM() to a
quadrilateral, so rotated labels are compared as drawn, not by their axis-aligned bounding boxes.

* Overlap: two <text> elements of different labels (matplotlib wraps each label, all its lines, in one
  ``<g id="text_N">``) whose quadrilaterals intersect more than 1 px deep fail.
* Clipping: a label whose quadrilateral leaves the SVG's drawn area by more than 1 px fails.
* Covered: a filled shape drawn after a label (a box, a legend's frame) that covers at least 3 of 21
  points spread over the label's trimmed box (SVGGeometryElement.isPointInFill) fails.
* Dropped labels: ``lessons_src.lab.plotting.svg`` records the tick labels each figure asked for on its
  axes (``data-category-labels`` on the root <svg>, JSON); each one must be drawn as some label's text.

The last test checks the premise of tests/site/test_page_weight.py's 1280 check: on a 1280x800 screen every
lesson figure's <img> fills the 688-px content column.

A figure another issue is still fixing can be listed in KNOWN with that reason; it is expected to fail
(strictly: once it passes, its entry must go).
"""

from __future__ import annotations

import ast
import json
import re
from collections import Counter
from typing import TYPE_CHECKING, Any

import pytest
from browser_support import ROOT, SITE, open_context

if TYPE_CHECKING:
    from collections.abc import Iterator


def _plotting_constant(name: str) -> Any:
    """A constant of lessons_src/lab/plotting.py, read from its source: importing the package imports torch (about
    3 CPU-s of the browser step, for one number)."""
    source = ROOT / "lessons_src" / "lab" / "plotting.py"
    for node in ast.parse(source.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.Assign) and [getattr(t, "id", None) for t in node.targets] == [name]:
            return ast.literal_eval(node.value)
    raise LookupError(f"{source} has no constant {name}")


DESKTOP_COLUMN_PX = _plotting_constant("DESKTOP_COLUMN_PX")  # the column the wide variants are drawn for
DEPTH_TOLERANCE_PX = 1.0
TRIM = 0.18
KNOWN: dict[str, str] = {}  # figure id (below) -> reason: strict xfails

_FIGURE = re.compile(r'<figure class="lesson-figure">(.*?)</figure>', re.S)


def figure_files() -> dict[str, list[str]]:
    """Each distinct figure file (its path under site/) -> the figures showing it, as "page#n-variant"."""
    files: dict[str, list[str]] = {}
    for page in sorted(SITE.rglob("index.html")):
        where = page.parent.relative_to(SITE).as_posix()
        where = "home" if where == "." else where
        for n, fig in enumerate(_FIGURE.findall(page.read_text(encoding="utf-8"))):
            urls = [("wide", u) for u in re.findall(r'<img\b[^>]*\ssrc="([^"]+)"', fig)]
            urls += [("narrow", u) for u in re.findall(r'<source\b[^>]*\ssrcset="([^"]+)"', fig)]
            for variant, url in urls:
                path = (page.parent / url).resolve().relative_to(SITE).as_posix()
                files.setdefault(path, []).append(f"{where}#{n}-{variant}")
    return files


FILES = figure_files()

LABELS_JS = """() => {
  const svg = document.documentElement;
  const root = svg.getBoundingClientRect();
  const labels = [];
  for (const t of svg.querySelectorAll('text')) {
    if (!t.textContent.trim()) continue;
    const b = t.getBBox(), m = t.getScreenCTM(), dy = b.height * TRIM;
    const corners = [[b.x, b.y + dy], [b.x + b.width, b.y + dy], [b.x + b.width, b.y + b.height - dy],
                     [b.x, b.y + b.height - dy]];
    const group = t.closest('g[id^="text_"]');
    labels.push({
      group: group ? group.id : null,
      text: t.textContent,
      quad: corners.map(([x, y]) => { const p = new DOMPoint(x, y).matrixTransform(m); return [p.x, p.y]; }),
    });
  }
  // filled shapes drawn after a label (later in the document) that cover part of its glyph box
  const texts = [...svg.querySelectorAll('text')].filter(t => t.textContent.trim());
  const shapes = [...svg.querySelectorAll('path, rect, circle, ellipse, polygon')].filter(e => {
    if (e.closest('defs, clipPath, mask, marker, pattern')) return false;
    const s = getComputedStyle(e);
    return s.fill !== 'none' && parseFloat(s.fillOpacity) * parseFloat(s.opacity) >= 0.3;
  });
  const covered = [];
  texts.forEach((t, i) => {
    const own = t.closest('g[id^="text_"]');
    const box = t.getBoundingClientRect();
    const b = t.getBBox(), m = t.getScreenCTM(), dy = b.height * TRIM;
    const points = [];
    for (let a = 1; a < 8; a++) for (let c = 1; c < 4; c++)
      points.push(new DOMPoint(b.x + b.width * a / 8, b.y + dy + (b.height - 2 * dy) * c / 4).matrixTransform(m));
    for (const e of shapes) {
      if (!(t.compareDocumentPosition(e) & Node.DOCUMENT_POSITION_FOLLOWING)) continue;
      if (own && own.contains(e)) continue;
      const r = e.getBoundingClientRect();
      if (r.right < box.left || r.left > box.right || r.bottom < box.top || r.top > box.bottom) continue;
      const inv = e.getScreenCTM().inverse();
      const inside = points.filter(p => { const q = p.matrixTransform(inv);
        return e.isPointInFill(new DOMPoint(q.x, q.y)); }).length;
      if (inside >= 3) { covered.push([labels[i].text, inside, points.length]); break; }
    }
  });
  return {left: root.left, top: root.top, width: root.width, height: root.height, labels, covered,
          categories: svg.getAttribute('data-category-labels')};
}""".replace("TRIM", str(TRIM))

Quad = list[list[float]]


def penetration(a: Quad, b: Quad) -> float:
    """How deep two convex quadrilaterals overlap (separating axis theorem): <= 0 when they do not touch."""
    depth = float("inf")
    for poly in (a, b):
        for i in range(len(poly)):
            (x0, y0), (x1, y1) = poly[i], poly[(i + 1) % len(poly)]
            nx, ny = y0 - y1, x1 - x0
            norm = (nx * nx + ny * ny) ** 0.5
            if norm == 0:
                continue
            pa = [(x * nx + y * ny) / norm for x, y in a]
            pb = [(x * nx + y * ny) / norm for x, y in b]
            depth = min(depth, min(max(pa), max(pb)) - max(min(pa), min(pb)))
    return depth


def test_penetration() -> None:
    square = [[0.0, 0.0], [10.0, 0.0], [10.0, 10.0], [0.0, 10.0]]
    assert penetration(square, [[p[0] + 8, p[1] + 3] for p in square]) == 2.0
    assert penetration(square, [[p[0] + 12, p[1]] for p in square]) < 0
    diamond = [[20.0, 5.0], [25.0, 0.0], [30.0, 5.0], [25.0, 10.0]]  # its box overlaps a rotated label's would
    assert penetration([[0.0, 0.0], [14.0, 0.0], [24.0, 10.0], [10.0, 10.0]], diamond) < DEPTH_TOLERANCE_PX


def normalized(text: str) -> str:
    """A label's text without mathtext markup and spaces (a wrapped label is drawn in several lines)."""
    text = re.sub(r"\\(mathrm|mathdefault|mathit|mathbf|text)", "", text)
    return re.sub(r"[\s${}\\_^]", "", text)


def problems(facts: dict[str, Any]) -> list[str]:
    found = []
    labels = facts["labels"]
    for i, a in enumerate(labels):
        for b in labels[i + 1 :]:
            if a["group"] is not None and a["group"] == b["group"]:
                continue
            depth = penetration(a["quad"], b["quad"])
            if depth > DEPTH_TOLERANCE_PX:
                found.append(f"{a['text']!r} and {b['text']!r} overlap ({depth:.1f} px)")
        xs = [x - facts["left"] for x, _ in a["quad"]]
        ys = [y - facts["top"] for _, y in a["quad"]]
        out = max(-min(xs), max(xs) - facts["width"], -min(ys), max(ys) - facts["height"])
        if out > DEPTH_TOLERANCE_PX:
            found.append(f"{a['text']!r} is cut by the figure's edge ({out:.1f} px outside)")
    for text, inside, of in facts["covered"]:
        found.append(f"{text!r} is covered by a shape drawn over it ({inside} of {of} points of its box)")
    drawn: dict[str, str] = {}
    for lab in labels:
        key = lab["group"] or str(id(lab))
        drawn[key] = drawn.get(key, "") + lab["text"]
    shown = Counter(normalized(t) for t in drawn.values())
    for name, wanted in Counter(normalized(n) for n in json.loads(facts["categories"] or "[]")).items():
        if name and shown[name] < wanted:
            found.append(f"category label {name!r} is drawn {shown[name]} times, of {wanted}")
    return found


def params() -> list[Any]:
    out = []
    for path, users in FILES.items():
        name = users[0]
        marks = [pytest.mark.xfail(reason=KNOWN[name], strict=True)] if name in KNOWN else []
        out.append(pytest.param(path, id=name, marks=marks))
    return out


@pytest.fixture(scope="module")
def svg_page(browser: Any, server: str) -> Iterator[Any]:
    context, watch = open_context(browser, server, viewport={"width": 1280, "height": 800})
    page = context.new_page()
    yield page
    context.close()
    assert watch.problems() == {}, f"the browser reported problems: {watch.problems()}"


def test_some_figure_file() -> None:
    assert len(FILES) > 10, f"only {len(FILES)} figure files under {SITE}"


@pytest.mark.parametrize("path", params())
def test_figure_labels_are_readable(svg_page: Any, server: str, path: str) -> None:
    svg_page.goto(server + path)
    facts = svg_page.evaluate(LABELS_JS)
    assert facts["labels"], f"{path}: no text found"
    found = problems(facts)
    assert found == [], f"{path} ({', '.join(FILES[path])}):\n" + "\n".join(found)


def test_wide_figures_fill_the_desktop_column(svg_page: Any, server: str) -> None:
    pages = sorted({user.split("#")[0] for users in FILES.values() for user in users})
    page = next(p for p in pages if p.startswith("lessons/"))
    svg_page.goto(server + page + "/")
    widths = svg_page.evaluate(
        """() => ({column: (() => { const c = document.querySelector('.md-content__inner'), s = getComputedStyle(c);
                     return c.clientWidth - parseFloat(s.paddingLeft) - parseFloat(s.paddingRight); })(),
                   figures: [...document.querySelectorAll('.lesson-figure img')]
                     .map(i => i.getBoundingClientRect().width)})"""
    )
    assert abs(widths["column"] - DESKTOP_COLUMN_PX) < 1, f"{page}: the column is {widths['column']} px at 1280"
    assert widths["figures"], f"{page}: no figure"
    for w in widths["figures"]:
        assert abs(w - DESKTOP_COLUMN_PX) < 1, f"{page}: a figure drawn {w} px wide in a {DESKTOP_COLUMN_PX}-px column"
