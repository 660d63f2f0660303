"""Printed results and tables a reader can read at both widths without scrolling sideways.

Part of the post-build step (:mod:`postbuild`), which runs over the built HTML; first, as it reads tables before
the math in them is rendered.

* **Printed results are marked.** markdown-exec renders a block's output (``result="text"``) as a ``text``
  code block, and the exercise pages print the checker's messages the same way; with ``pygments_lang_class``
  (mkdocs.yml) that block is ``<div class="language-text highlight">``, while shown source is highlighted
  Python. Each ``text`` block gets the class ``result``, so site.css can wrap its long lines (no block of
  the site's source is plain text).
* **Wide tables become cards on a phone.** A table whose columns would not fit the phone's column (343 CSS px,
  estimated from its longest word per column) gets ``data-phone="cards"`` and each of its ``<td>`` a
  ``data-label``, its column's header: below 45em site.css draws each row as a card, the first cell (the key) as its
  title and every other cell under its column's label, instead of a table that scrolls sideways.
  (An attribute, not a class: Material styles only tables without a class.)

``tests/browser/test_readability.py`` checks the result in Chromium on every page.
"""

from __future__ import annotations

import html
import re

_TEXT_BLOCK = '<div class="language-text highlight">'
_TABLE = re.compile(r"<table>(.*?)</table>", re.S)
_TH = re.compile(r"<th\b[^>]*>(.*?)</th>", re.S)
_ROW = re.compile(r"<tr>(.*?)</tr>", re.S)
_TD = re.compile(r"<td\b([^>]*)>(.*?)</td>", re.S)
_TAG = re.compile(r"<[^>]+>")

PHONE_COLUMN_PX = 343  # Material's content column on a 375-px screen (tests/browser/test_page_length.py)
# The estimate below is rough (proportional type, bold headers): a table estimated within 40 px of the column
# is drawn as cards too, and tests/browser/test_readability.py checks in Chromium that no table scrolls.
_MARGIN_PX = 40
# Material's tables on a phone: 12.8-px text (about 7 px a character, code a little wider) and 1.25em of
# padding each side of a cell (32 px a column).
_CHAR_PX, _CELL_PAD_PX = 7.2, 32


def _text(cell: str) -> str:
    return html.unescape(_TAG.sub("", cell)).strip()


def _phone_width(header: list[str], rows: list[list[str]]) -> float:
    """The table's narrowest width on a phone, estimated as the browser lays it out: each column as wide as
    its longest word (cells wrap between words, not inside them), plus the cells' padding."""
    width = 0.0
    for c, head in enumerate(header):
        cells = [head] + [r[c] for r in rows if c < len(r)]
        width += max((len(w) for cell in cells for w in cell.split()), default=0) * _CHAR_PX + _CELL_PAD_PX
    return width


def _label_table(m: re.Match[str]) -> str:
    body = m.group(1)
    header = [_text(h) for h in _TH.findall(body)]
    rows = [[_text(td.group(2)) for td in _TD.finditer(r.group(1))] for r in _ROW.finditer(body)]
    if not header or _phone_width(header, [r for r in rows if r]) <= PHONE_COLUMN_PX - _MARGIN_PX:
        return m.group(0)

    def label_row(row: re.Match[str]) -> str:
        labels = iter(header)

        def label_cell(td: re.Match[str]) -> str:
            label = next(labels, "")
            if not _text(td.group(2)):  # an empty cell: no "label:" with nothing after it (site.css hides it)
                return td.group(0)
            return f'<td{td.group(1)} data-label="{html.escape(label)}">{td.group(2)}</td>'

        return "<tr>" + _TD.sub(label_cell, row.group(1)) + "</tr>"

    return '<table data-phone="cards">' + _ROW.sub(label_row, body) + "</table>"


def mark(html_: str) -> str:
    """A built page with its printed results marked and its wide tables made phone cards."""
    html_ = html_.replace(_TEXT_BLOCK, '<div class="language-text highlight result">')
    return _TABLE.sub(_label_table, html_)
