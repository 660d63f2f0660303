"""The copy button of a block that continues the block above copies the whole chain, as the snippet test ran it.

A shown block may go on from the block above it only if its first line says so (`# continues the block above`);
its copy button then copies the chain, so that the copy runs in a fresh `python` (tests/site/test_snippets.py
runs each block that way, and tools/site_build/copy_chains.py gives the button its text). Here the button is
clicked on the phone, as a reader taps it, and what the page put on the clipboard is compared with that chain
as the snippet test computes it from the page's Markdown: the button copies what the test ran.
"""

from __future__ import annotations

import pytest
from browser_support import pages_with
from shown_blocks import BLOCKS, copied
from views import View, per_page

CHAINED = [b for b in BLOCKS if b.continues]
PAGES = sorted({f"{b.page.removesuffix('.md')}/" for b in CHAINED})

# Material's button copies through clipboard.js: a hidden textarea holding the text is selected and copied. Each
# copy event on the page records what it copies (the selection in that textarea, or the page's selection).
RECORD_COPIES_JS = """() => {
    window.__copies = [];
    document.addEventListener('copy', e => {
        const t = e.target;
        window.__copies.push(t && t.tagName === 'TEXTAREA' ? t.value.slice(t.selectionStart, t.selectionEnd)
                                                          : String(document.getSelection()));
    }, true);
}"""


def test_some_page_has_a_continued_block() -> None:
    """So that the check below is never vacuous, and every page with one is built with its chains."""
    assert CHAINED and sorted(pages_with("data-copy=")) == PAGES


@per_page(widths=(375,), pages=PAGES)
@pytest.mark.mutates_view
def test_the_copy_button_of_a_continued_block_copies_its_chain(view: View) -> None:
    view.page.evaluate(RECORD_COPIES_JS)
    blocks = [b for b in CHAINED if f"{b.page.removesuffix('.md')}/" == view.path]
    buttons = view.page.locator("div.language-python.highlight[data-copy] button[data-md-type=copy]")
    assert buttons.count() == len(blocks), f"{view.name}: {buttons.count()} blocks copy a chain, not {len(blocks)}"
    copies = []
    for i in range(len(blocks)):
        button = buttons.nth(i)
        button.evaluate("b => { const d = b.closest('details'); if (d) d.open = true; }")  # as a reader opens it
        button.scroll_into_view_if_needed()
        button.click(timeout=5000)
        view.page.wait_for_function("n => window.__copies.length >= n", arg=i + 1)
        copies.append(view.page.evaluate("i => window.__copies[i]", i))
    want = [copied(b).rstrip() for b in blocks]
    assert copies == want, f"{view.name}: the buttons copy {copies!r}, not the chains {want!r}"
