"""The post-build step's handling of a page's HTML (tools/site_build/figures.py, math_render.py), on small pages.

The built site is checked whole in tests/site/ and tests/browser/; these cases are the HTML those pages do not
happen to hold yet.
"""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
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


def _material_asset(folder: str, pattern: str) -> str:
    import material

    found = sorted((Path(material.__file__).parent / "templates" / "assets" / folder).glob(pattern))
    assert len(found) == 1, found
    return found[0].read_text(encoding="utf-8")


def test_the_installed_theme_wraps_and_styles_only_tables_without_a_class() -> None:
    """The pinned Material, as pip installed it (no build needed): its script mounts (re-wraps) the article's tables
    with the selector ``table:not([class])``, once, so a table wrap_tables gave a class is left where it is; and its
    stylesheet styles tables with that selector too, so site.css must set for ``table.course-table`` every property
    the theme sets for a bare table. A theme release that mounts tables another way, or styles them with a property
    site.css does not set, fails here, at the upgrade."""
    import re

    js = _material_asset("javascripts", "bundle.*.min.js")
    mounts = re.findall(r"\w+\(\"table:not\(\[class\]\)\",\w+\)\.map\(\w+=>\w+\(\w+\)\)", js)
    assert js.count('"table:not([class])"') == 1 and len(mounts) == 1, (
        "Material no longer mounts tables with table:not([class]) once: review page_fixes.wrap_tables")

    def properties(css: str, selector: str) -> set[str]:
        rules = re.findall(r"([^{}]*)\{([^{}]*)\}", re.sub(r"/\*.*?\*/", "", css, flags=re.S))
        return {d.split(":")[0].strip() for sel, body in rules if selector in sel for d in body.split(";") if ":" in d}

    theirs = properties(_material_asset("stylesheets", "main.*.min.css"), "table:not([class])")
    ours = properties((ROOT / "docs" / "assets" / "site.css").read_text(encoding="utf-8"), "table.course-table")
    assert {"border", "padding", "font-size", "text-align"} <= theirs, theirs  # the parser reads the theme
    assert theirs <= ours, f"site.css leaves these table properties to the theme, which no longer applies them: " \
        f"{sorted(theirs - ours)}"


def test_wrap_tables_wraps_each_bare_table_of_the_article_once_and_marks_it() -> None:
    from page_fixes import TABLE_CLASS, wrap_tables

    wrap = '<div class="md-typeset__scrollwrap"><div class="md-typeset__table">'
    bare = '<table data-phone="cards"><tr><td>1</td></tr></table>'
    coded = '<table class="highlighttable"><tr><td>x</td></tr></table>'
    page = "<nav><table><tr><td>menu</td></tr></table></nav>" + ARTICLE + bare + coded + "<table>\n</table>"
    out = wrap_tables(page)
    marked = f'{wrap}<table class="{TABLE_CLASS}" data-phone="cards"><tr><td>1</td></tr></table></div></div>'
    assert out == ("<nav><table><tr><td>menu</td></tr></table></nav>" + ARTICLE + marked + coded
                   + f'{wrap}<table class="{TABLE_CLASS}">\n</table></div></div>')
    assert wrap_tables(out) == out  # the step may run again
    assert wrap_tables("<p>no article</p><table></table>") == "<p>no article</p><table></table>"


