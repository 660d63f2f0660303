"""No page's executed output shows a traceback, an error report or a warning.

`mkdocs build --strict` fails on a block that raises (tests/site/test_build_fails_loudly.py proves it),
but code can also *print* a failure and go on: a caught exception's traceback, a warning on stderr that
markdown-exec or nbconvert puts on the page, a notebook's error output. Those pages build, so they are
checked here, on the text readers see.
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
PAGES = sorted(SITE.rglob("*.html"))

FAILURE_SIGNS = {
    "a Python traceback": re.compile(r"Traceback \(most recent call last\)"),
    "an IPython error report": re.compile(r"-{20,}\s*\n?\s*[A-Z]\w*(Error|Exception)\b.*Traceback", re.S),
    "a printed warning": re.compile(r"\b[A-Z]\w*Warning: "),
    "a kernel error": re.compile(r"\b(CellExecutionError|DeadKernelError|nbclient\.exceptions)\b"),
}
_STDERR_OUTPUT = re.compile(r'data-mime-type="application/vnd\.jupyter\.(?:stderr|error)"')


def failures_in(raw_html: str) -> list[str]:
    markup = re.sub(r"<(script|style)\b.*?</\1>", "", raw_html, flags=re.S)  # notebook CSS names the MIME types
    text = html.unescape(re.sub(r"<[^>]+>", "", markup))
    found = [name for name, sign in FAILURE_SIGNS.items() if sign.search(text)]
    if _STDERR_OUTPUT.search(markup):  # the output's MIME type is an attribute
        found.append("a notebook's stderr or error output")
    return sorted(set(found))


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(SITE)))
def test_page_shows_no_failure(page: Path) -> None:
    assert failures_in(page.read_text(encoding="utf-8")) == []


@pytest.mark.parametrize(
    ("output", "sign"),
    [
        ('<pre><code><span class="n">Traceback</span> <span class="p">(</span>most recent call last):', "traceback"),
        ("<pre>/x.py:3: UserWarning: this overload is deprecated</pre>", "warning"),
        ('<div data-mime-type="application/vnd.jupyter.stderr"><pre>oops</pre></div>', "stderr"),
        ("<style>.x[data-mime-type='application/vnd.jupyter.stderr']{}</style><pre>UserWarning: y</pre>", "warning"),
    ],
)
def test_the_signs_are_recognised(output: str, sign: str) -> None:
    assert any(sign in found for found in failures_in(output))


def test_a_handled_error_shown_on_purpose_is_not_a_failure() -> None:
    """Lessons may print an error message they caught on purpose (the code page shows a ValueError)."""
    assert failures_in("<pre>ValueError: d_model=100 is not divisible by num_heads=12</pre>") == []
