"""The site's exits from MkDocs (issue 36), on the tiny project of test_build_fails_loudly.py (seconds, not the site).

Two builds, side by side: MkDocs as `make build` runs it, and ProperDocs (the maintained fork of MkDocs 1.6,
pinned in requirements.txt) with the post-build step (tools/site_build/postbuild.py) switched off
(``SITE_POSTBUILD=skip``). Then:

* the step, run alone over ProperDocs' output, gives MkDocs' site: the same files, byte for byte, but for the
  generator meta tag, which names ProperDocs and its version. So the step needs no generator, and ProperDocs
  builds the site's theme, plugins, extensions and other hooks as MkDocs does;
* a second run of the step changes nothing; a formula KaTeX rejects fails the step run alone, naming its page.

The whole site under ProperDocs is ``make build-properdocs`` (by hand; its differences are listed in
docs/_data/generators/properdocs.json and explained in tools/README.md).
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from tiny_project import build

ROOT = Path(__file__).resolve().parents[2]
SITE_BUILD = ROOT / "tools" / "site_build"

# What the post-build step rewrites, each on the tiny page: math, a printed result, a table too wide for a phone,
# a figure (two SVGs moved to files), the theme's head (aria-labels, deferred scripts, KaTeX's CSS inlined).
FIGURE = (
    "from lessons_src.lab.plotting import figure, svg\n"
    "fig = figure(figsize=(3, 2))\nfig.add_subplot().plot([0, 1, 2], [1, 0, 1])\n"
    'print(svg(fig, title="A line that falls and rises"))\n'
)
PAGE = (
    "# Tiny\n\nInline $a^2 + b^2$ and displayed:\n\n$$\n\\frac{QK^\\top}{\\sqrt{d}}\n$$\n\n"
    '```python exec="on" result="text"\nprint(6 * 7)\n```\n\n'
    "| configuration name | heads | sequence length in tokens | parameters per layer |\n| --- | --- | --- | --- |\n"
    "| multi-head-attention-baseline | 12 | 4096 | 2359296 |\n\n"
    '```python exec="on" html="true"\n' + FIGURE + "```\n"
)
SECOND = "# Second\n\nMore $x_i$ here.\n"
PAGES = {"index.md": PAGE, "second.md": SECOND}


GENERATOR = re.compile(r'<meta name="generator" content="[^"]*">')


def _tree(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def _differences(a: dict[str, bytes], b: dict[str, bytes]) -> list[str]:
    only = sorted(set(a) ^ set(b))
    return [f"only in one: {n}" for n in only] + [n for n in sorted(set(a) & set(b)) if a[n] != b[n]]


@pytest.fixture(scope="module")
def builds(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The tiny project built by MkDocs (with the step) and by ProperDocs (without it), side by side."""
    same_date = {"SOURCE_DATE_EPOCH": "315532800"}  # the sitemap's dates: one for both, even across midnight
    runs = {"mkdocs": ("mkdocs", same_date), "properdocs": ("properdocs", {**same_date, "SITE_POSTBUILD": "skip"})}
    dirs = {name: tmp_path_factory.mktemp(name) for name in runs}
    with ThreadPoolExecutor(len(runs)) as pool:
        procs = {name: pool.submit(build, dirs[name], PAGES, gen, env) for name, (gen, env) in runs.items()}
        for name, proc in procs.items():
            result = proc.result()
            assert result.returncode == 0, f"{name} build failed:\n{result.stderr[-3000:]}"
    return {name: d / "site" for name, d in dirs.items()}


def run_step(site: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(SITE_BUILD / "postbuild.py"), str(site)],
                          capture_output=True, text=True, check=False)


def test_the_step_alone_on_properdocs_output_gives_the_mkdocs_site(builds: dict[str, Path], tmp_path: Path) -> None:
    from importlib.metadata import version

    mkdocs_site, proper_site = builds["mkdocs"], tmp_path / "site"
    shutil.copytree(builds["properdocs"], proper_site)
    before = (proper_site / "index.html").read_text(encoding="utf-8")
    assert 'class="arithmatex"' in before and "42" in before, "ProperDocs ran no block, or the step was not skipped"
    tag = f'<meta name="generator" content="mkdocs-ProperDocs {version("properdocs")}, mkdocs-material-'
    assert tag in before, GENERATOR.findall(before)
    proc = run_step(proper_site)
    assert proc.returncode == 0, proc.stderr
    proper, mk = _tree(proper_site), _tree(mkdocs_site)
    differing = _differences(proper, mk)
    assert differing and all(n.endswith(".html") for n in differing), differing
    assert [n for n in differing if GENERATOR.sub("", proper[n].decode()) != GENERATOR.sub("", mk[n].decode())] == []
    page = mk["index.html"].decode("utf-8")  # what the step did, so the comparison above compares something
    assert 'class="katex-display"' in page and 'class="arithmatex"' not in page and 'data-phone="cards"' in page
    assert 'class="language-text highlight result"' in page and 'aria-label="Search this site"' in page
    figures = [n for n in mk if n.startswith("assets/figures/")]
    assert len(figures) == 2 and "lesson-figure-wide" not in page and page.count("<picture>") == 1


def test_the_step_run_twice_changes_nothing(builds: dict[str, Path], tmp_path: Path) -> None:
    again = tmp_path / "site"
    shutil.copytree(builds["mkdocs"], again)
    proc = run_step(again)
    assert proc.returncode == 0 and "0 HTML files rewritten" in proc.stdout, proc.stdout + proc.stderr
    assert _differences(_tree(builds["mkdocs"]), _tree(again)) == []


def test_a_formula_katex_rejects_fails_the_step_alone(tmp_path: Path) -> None:
    (tmp_path / "index.html").write_text('<p><span class="arithmatex">\\(\\frac{1}{\\)</span></p>', encoding="utf-8")
    proc = run_step(tmp_path)
    assert proc.returncode == 1
    assert 'KaTeX could not render "\\\\frac{1}{" on index.html' in proc.stderr, proc.stderr
