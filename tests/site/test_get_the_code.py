"""The way to the code on the built site: the wheel, the repository links, the lab's executed copy, no placeholder.

Checks site/ (built by `make build`) against what the build should have resolved from this environment
(tools/site_build/site_links.py), and builds a two-page site with the same hooks twice, once with
SITE_REPO/SITE_URL set and once with none of the environment (but PATH and the interpreter's PYTHON* settings) and
no git remote, to check both sides of the fallback.
"""

from __future__ import annotations

import html
import json
import os
import re
import subprocess
from pathlib import Path

import pytest
from tiny_project import build_env, run_python

ROOT = Path(__file__).resolve().parents[2]
SITE = ROOT / "site"
if not (SITE / "index.html").exists():
    pytest.fail("site/ is not built: run `make build` first (make test does)", pytrace=False)
import site_links  # noqa: E402
from build_wheel import build_wheel, source_date_epoch  # noqa: E402

import lessons_src  # noqa: E402

LINKS = site_links.resolve(os.environ, site_links.git_remote(ROOT))
WHEEL = f"mha_computed-{lessons_src.__version__}-py3-none-any.whl"


def text(page: str) -> str:
    return (SITE / page).read_text(encoding="utf-8")


def plain(html_text: str) -> str:
    """The page's text, without tags (code is highlighted token by token)."""
    return html.unescape(re.sub(r"<[^>]+>", "", html_text))


def test_no_placeholder_host_anywhere() -> None:
    hits = [p.relative_to(SITE).as_posix() for p in SITE.rglob("*") if p.is_file() and b"example.github.io" in
            p.read_bytes()]
    assert hits == []


def test_published_wheel_is_this_sources_wheel(tmp_path: Path) -> None:
    published = SITE / "downloads" / WHEEL
    assert published.is_file(), sorted(p.name for p in (SITE / "downloads").iterdir())
    fresh = build_wheel(tmp_path, epoch=source_date_epoch())
    assert fresh.name == WHEEL and fresh.read_bytes() == published.read_bytes()


def test_get_the_code_page_installs_the_published_wheel() -> None:
    page = text("get-the-code/index.html")
    if LINKS.site_url:
        assert f"pip install {LINKS.site_url}downloads/{WHEEL}" in plain(page)
    else:
        assert f'href="../downloads/{WHEEL}"' in page  # relative: resolves to the file (tests/site/test_links.py)
        assert "pip install ./" + WHEEL in plain(page)
    for extra, _, _ in site_links.extras():
        assert f"mha-computed[{extra}]" in plain(page)
    for modules in site_links.module_summaries().values():
        for path, _ in modules:
            assert f"<code>{path}</code>" in page
    assert 'href="get-the-code/"' in text("index.html")
    # the CPU-only torch line (pip's default torch on Linux is the CUDA build), and what [lab] pulls in
    assert "pip install torch --index-url https://download.pytorch.org/whl/cpu" in plain(page)
    assert re.search(r"mha-computed\[lab\] adds \d+ distributions.*sentence-transformers.*transformers.*"
                     r"scikit-learn", plain(page), re.S)
    assert "numpy" in plain(page)  # a core dependency: `import torch` warns without it


def test_get_the_code_is_early_in_the_reading_order_and_home_says_how_to_run() -> None:
    import yaml

    nav = yaml.safe_load((ROOT / "mkdocs.yml").read_text(encoding="utf-8"))["nav"]
    flat: list[str] = []

    def walk(items: list) -> None:  # type: ignore[type-arg]
        for item in items:
            value = next(iter(item.values())) if isinstance(item, dict) else item
            walk(value) if isinstance(value, list) else flat.append(value)

    walk(nav)
    assert "get-the-code.md" in flat[:6], flat[:8]
    home = plain(text("index.html"))
    assert "To run it yourself" in home and "Get the code" in home


def test_repository_links_exactly_when_known() -> None:
    home, lesson = text("index.html"), text("lessons/pitfalls/index.html")
    assert 'data-md-component="source"' not in home  # Material would fetch star counts from GitHub's API
    if LINKS.repo_url:
        assert f'href="{LINKS.repo_url}"' in home
        assert f'href="{LINKS.repo_url}/raw/main/docs/lessons/pitfalls.md"' in lesson  # Material's view button
        assert f'href="{LINKS.repo_url}/blob/main/docs/lessons/pitfalls.md"' in lesson  # the closing source line
        assert f"git clone {LINKS.repo_url}.git" in plain(text("get-the-code/index.html"))
    else:
        for page in SITE.rglob("*.html"):
            assert "md-source" not in page.read_text(encoding="utf-8") and "colab.research" not in page.read_text(
                encoding="utf-8"), page
        assert "<code>docs/lessons/pitfalls.md</code>" in lesson
    assert 'href="../../reference/code/layer/"' in lesson  # the module it runs, always linked


def test_lab_download_is_this_builds_executed_copy() -> None:
    copy = json.loads(text("practice/lab/lab.ipynb"))
    page = text("practice/lab/index.html")
    assert 'href="lab.ipynb" download' in page
    code = [c for c in copy["cells"] if c["cell_type"] == "code"]
    first = "".join(code[0]["source"])
    assert f'WHEEL = "{LINKS.site_url + "downloads/" + WHEEL if LINKS.site_url else WHEEL}"' in first
    assert code[0]["outputs"] == []  # the package is installed where the site is built: nothing to do
    for cell in code[1:]:
        assert cell["execution_count"] and cell["outputs"], "".join(cell["source"])[:80]
        for out in cell["outputs"]:
            assert out["output_type"] == "stream"
            for line in "".join(out["text"]).splitlines():
                assert line.strip() in plain(page), line
    assert ("colab.research.google.com/github/" in page) == bool(LINKS.repo_url)


MINI_PAGE = """# Demo

```python
from lessons_src import MultiHeadAttention
```
"""


def build_mini(tmp_path: Path, env: dict[str, str]) -> Path:
    docs = tmp_path / "docs"
    (docs / "lessons").mkdir(parents=True)
    (docs / "reference" / "code").mkdir(parents=True)
    (docs / "index.md").write_text("# Home\n", encoding="utf-8")
    (docs / "lessons" / "demo.md").write_text(MINI_PAGE, encoding="utf-8")
    (docs / "reference" / "code" / "layer.md").write_text("# layer.py\n", encoding="utf-8")
    (tmp_path / "mkdocs.yml").write_text(
        "site_name: mini\nstrict: true\n"
        "theme:\n  name: material\n  features: [content.action.view]\n"
        f"hooks:\n  - {ROOT / 'tools' / 'site_build' / 'mkdocs_code_hooks.py'}\n"
        f"  - {ROOT / 'tools' / 'site_build' / 'postbuild.py'}\n",  # it drops the header's star-count fetch
        encoding="utf-8",
    )
    empty_git = tmp_path / "git"
    subprocess.run(["git", "init", "--quiet", str(empty_git)], check=True)  # no remote
    # Nothing of the test's environment but PATH and the interpreter's own settings (the PYTHON* variables, with
    # PYTHONPATH at this checkout; they let the build run in a child of the warm build server: run_python).
    interpreter = {k: v for k, v in build_env().items() if k.startswith("PYTHON")}
    proc = run_python(
        ["-m", "mkdocs", "build", "--site-dir", str(tmp_path / "site")], cwd=tmp_path,
        env={"PATH": os.environ["PATH"], "HOME": str(tmp_path), "SOURCE_DATE_EPOCH": "1700000000",
             "GIT_DIR": str(empty_git / ".git"), "NO_MKDOCS_2_WARNING": "1", **interpreter, **env},
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return tmp_path / "site"


def test_fallback_chain_end_to_end(tmp_path: Path) -> None:
    known = build_mini(tmp_path / "known", {"SITE_REPO": "octo-org/mha", "SITE_URL": "https://docs.example.org/mha"})
    lesson = (known / "lessons" / "demo" / "index.html").read_text(encoding="utf-8")
    assert 'href="https://github.com/octo-org/mha"' in lesson  # the header's repository link ...
    assert 'data-md-component="source"' not in lesson  # ... which Material's script would not fetch counts for
    assert 'href="https://github.com/octo-org/mha/raw/main/docs/lessons/demo.md"' in lesson
    assert 'href="https://github.com/octo-org/mha/blob/main/lessons_src/layer.py"' in lesson
    assert '<link rel="canonical" href="https://docs.example.org/mha/lessons/demo/">' in lesson
    assert (known / "downloads" / WHEEL).is_file()

    unknown = build_mini(tmp_path / "unknown", {})
    lesson = (unknown / "lessons" / "demo" / "index.html").read_text(encoding="utf-8")
    assert "github.com" not in lesson and "md-source" not in lesson
    assert 'href="../../reference/code/layer/"' in lesson and "<code>docs/lessons/demo.md</code>" in lesson
    assert re.search(r"<loc>http://127\.0\.0\.1:8000/lessons/demo/</loc>", (unknown / "sitemap.xml").read_text())
