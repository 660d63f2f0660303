"""The post-build step's handling of a page's HTML (tools/site_build/figures.py, math_render.py), on small pages.

The built site is checked whole in tests/site/ and tests/browser/; these cases are the HTML those pages do not
happen to hold yet.
"""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
import figures  # noqa: E402
import math_render  # noqa: E402

ARTICLE = '<article class="md-content__inner md-typeset">'
FIGURE = ('<figure class="lesson-figure"><svg class="lesson-svg" role="img" aria-label="A figure" width="72pt" '
          'height="36pt" viewBox="0 0 72 36"><rect width="9" height="9"/></svg></figure>')


def lazy(page: str, tmp_path: Path) -> list[bool]:
    """Whether each figure of ``page`` is loaded lazily once the step has moved it to a file."""
    out = figures.externalize(page, "lessons/x/", tmp_path)
    return [' loading="lazy"' in img for img in out.split("<img")[1:]]


def test_only_text_a_reader_sees_can_push_the_first_figure_off_the_first_screen(tmp_path: Path) -> None:
    """An inlined stylesheet (KaTeX's, on every page with math) or a script is not text before the figure."""
    style = "<style>" + ".katex { font: normal 1.21em KaTeX_Main; }" * 100 + "</style>"
    script = "<script>" + "var x = 1;" * 200 + "</script>"
    assert lazy(ARTICLE + style + script + "<h1>A lesson</h1><p>A short start.</p>" + FIGURE + FIGURE, tmp_path) == [
        False, True
    ]
    long_start = "<p>" + "words " * figures.EAGER_TEXT_CHARS + "</p>"
    assert lazy(ARTICLE + style + long_start + FIGURE, tmp_path) == [True]


def test_every_script_from_another_host_is_dropped_however_its_src_is_quoted() -> None:
    kept = ['<script src="assets/javascripts/bundle.js"></script>', "<script src='../local.js'></script>",
            "<script>var a = '//x';</script>"]
    dropped = ['<script src="https://cdn.example.org/a.js"></script>',
               "<script src='https://cdn.example.org/b.js'></script>",
               "<script src=https://cdn.example.org/c.js></script>",
               '<script async src = "//cdn.example.org/d.js" crossorigin="anonymous">\n</script>',
               "<SCRIPT SRC=//cdn.example.org/e.js></SCRIPT>"]
    page = "<head>" + "\n".join(kept + dropped) + "</head>"
    assert math_render.drop_remote_scripts(page) == "<head>" + "\n".join(kept + [""] * len(dropped)) + "</head>"
