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


def test_the_installed_themes_bundle_mounts_tables_with_the_selector_page_fixes_patches(tmp_path: Path) -> None:
    """The pinned Material's bundle, as pip installed it (no build needed): the string page_fixes.patch_bundle rewrites
    is there once, as the selector of the call that mounts (re-wraps) the article's tables, and the patch takes.

    A theme release that changes how tables are mounted fails here, at the upgrade, naming the patch; a release
    that keeps the string for something else fails the browser check that each table is wrapped exactly once
    (tests/browser/test_pages.py)."""
    import re
    import shutil

    import material
    from page_fixes import BUNDLE_TABLES, BUNDLE_TABLES_PATCHED, patch_bundle

    scripts = Path(material.__file__).parent / "templates" / "assets" / "javascripts"
    bundles = sorted(scripts.glob("bundle.*.min.js"))
    assert len(bundles) == 1, bundles
    js = bundles[0].read_text(encoding="utf-8")
    mounts = re.findall(r"\w+\(" + re.escape(BUNDLE_TABLES) + r",\w+\)\.map\(\w+=>\w+\(\w+\)\)", js)
    assert js.count(BUNDLE_TABLES) == 1 and len(mounts) == 1, (
        f"{bundles[0].name}: Material no longer mounts tables with {BUNDLE_TABLES} once: review "
        "page_fixes.wrap_tables and patch_bundle against the new theme")
    site = tmp_path / "assets" / "javascripts"
    site.mkdir(parents=True)
    shutil.copy(bundles[0], site / bundles[0].name)
    patch_bundle(tmp_path)
    patched = (site / bundles[0].name).read_text(encoding="utf-8")
    assert patched.count(BUNDLE_TABLES_PATCHED) == 1 and BUNDLE_TABLES not in patched
