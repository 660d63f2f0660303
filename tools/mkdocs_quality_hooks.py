"""MkDocs hooks: small fixes to the theme's HTML that the accessibility and SEO audits ask for.

The browser suite (tests/browser) runs axe-core on every page and `make bench` runs Lighthouse; these
hooks fix, in the built HTML, what those audits found in mkdocs-material's templates:

* the search dialog and the instant-loading progress bar get accessible names (axe: aria-dialog-name,
  aria-progressbar-name);
* display math, which scrolls sideways on narrow screens, is focusable so keyboard users can scroll it
  (axe: scrollable-region-focusable);
* markdown-exec's Pyodide assets, which no page uses, are not loaded (two render-blocking requests less).
"""

from __future__ import annotations

import re
from typing import Any

_SEARCH_DIALOG = '<div class="md-search" data-md-component="search" role="dialog">'
_PROGRESS = '<div class="md-progress" data-md-component="progress" role="progressbar">'
_DISPLAY_MATH = re.compile(r'<div class="math">(?=<span class="katex-display">)')
_PYODIDE_ASSETS = re.compile(r'\s*<(?:link|script)\b[^>]*_markdown_exec_pyodide\.(?:css|js)"[^>]*>(?:\s*</script>)?')


def on_post_page(output: str, **kwargs: Any) -> str:
    output = output.replace(_SEARCH_DIALOG, _SEARCH_DIALOG[:-1] + ' aria-label="Search this site">', 1)
    output = output.replace(_PROGRESS, _PROGRESS[:-1] + ' aria-label="Page loading progress">', 1)
    output = _DISPLAY_MATH.sub('<div class="math" tabindex="0">', output)
    if "pyodide" not in output.replace("_markdown_exec_pyodide", ""):
        output = _PYODIDE_ASSETS.sub("", output)
    return output
