"""The copy button of a block that continues the one above copies the whole chain.

Every shown Python block runs when a reader copies it into a fresh interpreter (tests/site/test_snippets.py runs
each one alone). A block that goes on from the block above it (a model it trained, a tensor it made) says so in
its first line, a comment the page shows and the copy copies::

    # continues the block above

and its copy button copies the block above (with that one's own chain, if it continues one too), a blank line,
then the block itself: pasted into ``python``, the copy runs as the page ran it.

Part of the post-build step (:mod:`postbuild`): for each such block of a page, the text of the chain goes into a
``data-copy`` attribute of the block's ``<div class="language-python highlight">``, which Material's copy button
copies in place of the block's own text (its clipboard integration reads ``el.closest("[data-copy]")``). No
script of ours, no request. A block marked as continuing with no Python block above it stops the step (the
build fails). A page already rewritten is left as it is: the attribute is written again with the same text.
"""

from __future__ import annotations

import html
import re

CONTINUES = "# continues the block above"

_BLOCK = re.compile(
    r'<div class="language-python highlight"(?P<copy> data-copy="[^"]*")?>(?P<pre><pre>.*?</pre>)', re.S)
_TAG = re.compile(r"<[^>]+>")


class ChainError(ValueError):
    """A block says it continues the block above, and no Python block is above it."""


def code_text(pre: str) -> str:
    """The text of a highlighted ``<pre>`` as the copy button copies it (tags dropped, entities decoded)."""
    return html.unescape(_TAG.sub("", pre)).strip("\n")


def continues(code: str) -> bool:
    """Whether a block's code (its text) begins with the marker line."""
    return code.lstrip("\n").partition("\n")[0].strip().lower().startswith(CONTINUES)


def chains(output: str) -> str:
    """The page with a ``data-copy`` attribute (the chain's text) on each Python block that continues the one above."""
    above: list[str] = []  # the copy of the last Python block seen: its chain, or its own text

    def mark(m: re.Match[str]) -> str:
        code = code_text(m.group("pre"))
        if not continues(code):
            above[:] = [code]
            return m.group(0)
        if not above:
            raise ChainError(f"a block begins {CONTINUES!r} and no Python block is above it:\n{code[:200]}")
        above.append(code)
        copy = "\n\n".join(above)
        return f'<div class="language-python highlight" data-copy="{html.escape(copy, quote=True)}">{m.group("pre")}'

    return _BLOCK.sub(mark, output)
