"""The coding exercises on the built site: lesson links resolve, every shown block runs alone or is a true
excerpt of the package, every solution's check passed at build, and the notebook is offered as the lab's is.

Code blocks on the exercise pages are printed by the pages' hidden blocks (so tests/site/test_snippets.py,
which reads the Markdown sources, does not see them): this file checks them in the built HTML. A block
titled with a package file's path (``title="lessons_src/masks.py"``, shown above it) is marked as an
excerpt of that file and must appear in it verbatim; every other Python block is run alone, each in a
fresh namespace, in one new interpreter.
"""

from __future__ import annotations

import html
import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SITE = ROOT / "site"
if not (SITE / "index.html").exists():
    pytest.fail("site/ is not built: run `make build` first (make test does)", pytrace=False)
import exercise_pages  # noqa: E402
import site_links  # noqa: E402

from lessons_src.lab.exercises import EXERCISES, MISCONCEPTIONS  # noqa: E402

PAGES = ["practice/exercises.md", *exercise_pages.PAGES]
_BLOCK = re.compile(
    r'<div class="(?:language-\w+ )?(?P<kind>[\w-]*) ?highlight(?: result)?">'
    r'(?:<span class="filename">(?P<title>[^<]*)</span>)?'
    r"<pre>.*?<code>(?P<code>.*?)</code></pre></div>", re.S,
)
RUN = r"""
import contextlib, io, json, sys
blocks = json.load(sys.stdin)
printed = []
for code in blocks:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(code, "<snippet>", "exec"), {"__name__": "__main__"})
    printed.append(out.getvalue())
print(json.dumps(printed))
"""


def built(src: str) -> str:
    return (SITE / src.removesuffix(".md") / "index.html").read_text(encoding="utf-8")


def blocks(src: str) -> list[tuple[str, str | None, str]]:
    found = []
    for m in _BLOCK.finditer(built(src)):
        code = html.unescape(re.sub(r"<[^>]+>", "", m.group("code")))
        found.append((m.group("kind"), m.group("title"), code))
    return found


def ids(src: str) -> set[str]:
    return set(re.findall(r'\bid="([^"]+)"', built(src)))


def test_every_lesson_link_of_the_catalogue_resolves_in_the_built_site() -> None:
    links = [ex.lesson for ex in EXERCISES.values()] + [m.lesson for m in MISCONCEPTIONS.values()]
    for link in links:
        assert (DOCS_FILE := ROOT / "docs" / link.page).is_file(), DOCS_FILE
        assert link.anchor in ids(link.page), f"{link.path}: no element with id {link.anchor!r} in the built page"


def test_each_exercise_is_on_its_page_with_hints_mistakes_and_a_passing_solution() -> None:
    for name in EXERCISES:
        page = exercise_pages.page_of(name)
        text = built(page)
        assert name.replace("_", "-") in ids(page)
        assert f"check {name} my_attention.py" in html.unescape(text)
        assert f"passed {name} (" in text, f"{name}: the solution's check did not print 'passed' at build"
        assert text.count("Hint ") >= len(EXERCISES[name].hints)


def test_shown_python_runs_alone_and_excerpts_are_verbatim() -> None:
    to_run: list[str] = []
    excerpts = 0
    for page in exercise_pages.PAGES:
        kinds = [kind for kind, _, _ in blocks(page)]
        assert kinds.count("exercise-stub") == kinds.count("exercise-solution") == len(exercise_pages.PAGES[page])
        for kind, title, code in blocks(page):
            if kind == "package-excerpt":  # marked as an excerpt of a package file
                assert title, f"{page}: an excerpt must name its file"
                text = (ROOT / title).read_text(encoding="utf-8")
                assert any(textwrap.indent(code.rstrip("\n"), " " * k) in text for k in (0, 4, 8)), (
                    f"{page}: the block titled {title} is not an excerpt of it:\n{code}"
                )
                excerpts += 1
            elif kind in {"exercise-stub", "exercise-solution"}:
                to_run.append(code)
            else:  # the rest is what the solutions printed and the commands to run
                assert kind == "" and (code.startswith("passed ") or code.startswith("python -m ")), code
    assert len(to_run) == 2 * len(EXERCISES)  # a stub and a solution for each exercise
    assert excerpts >= sum(len(ex.package_code) for ex in EXERCISES.values())
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST")}
    env["PYTHONPATH"] = str(ROOT)
    proc = subprocess.run([sys.executable, "-c", RUN], input=json.dumps(to_run), cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    printed = json.loads(proc.stdout)
    passed = [p for p in printed if p.startswith("passed ")]
    assert len(passed) == len(EXERCISES) and all(p == "" for p in printed if p not in passed)


def test_the_intro_shows_a_diagnosis_printed_at_build() -> None:
    """markdown-exec shows only what a block prints itself: the example prints the checker's verdict."""
    text = html.unescape(re.sub(r"<[^>]+>", "", built("practice/exercises.md")))
    assert "FAILED gqa_attention: on case 1 of" in text
    assert "Known mistake: `repeat` instead of `repeat_interleave`" in text


def test_the_notebook_is_offered_to_download_and_in_colab() -> None:
    page = built("practice/exercises.md")
    assert 'href="../exercises.ipynb" download' in page
    links = site_links.resolve(os.environ, site_links.git_remote(ROOT))
    colab = links.colab_url("docs/practice/exercises.ipynb")
    assert (colab is not None and html.escape(colab) in page) or (colab is None and "colab" not in page.lower())
    published = json.loads((SITE / "practice" / "exercises.ipynb").read_text(encoding="utf-8"))
    repo = json.loads((ROOT / "docs" / "practice" / "exercises.ipynb").read_text(encoding="utf-8"))
    first = "".join(next(c for c in published["cells"] if c["cell_type"] == "code")["source"])
    wheel = f"mha_computed-{__import__('lessons_src').__version__}-py3-none-any.whl"
    want = f"{links.site_url}downloads/{wheel}" if links.site_url else wheel
    assert f'WHEEL = "{want}"' in first
    assert [c["source"] for c in published["cells"][2:]] == [c["source"] for c in repo["cells"][2:]]
    assert not (SITE / "practice" / "exercises" / "exercises.ipynb").exists()  # a download, not a page
