"""The repository and site addresses: environment, else the GitHub remote, else none (tools/site_build/site_links.py).

Also the build hook's helpers that read pages and notebooks (which modules a lesson's code uses, the lab
notebook's install line).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parents[2]
import mkdocs_code_hooks  # noqa: E402
import site_links  # noqa: E402
from site_links import Links, git_remote, github_repo, resolve  # noqa: E402

import lessons_src  # noqa: E402


@pytest.mark.parametrize(
    "remote",
    [
        "https://github.com/octo-org/multi-head-attention.git",
        "https://github.com/octo-org/multi-head-attention",
        "https://x-access-token:abc@github.com/octo-org/multi-head-attention.git",
        "git@github.com:octo-org/multi-head-attention.git",
        "ssh://git@github.com/octo-org/multi-head-attention.git",
        "https://github.com/octo-org/multi-head-attention/",
    ],
)
def test_github_remotes_in_every_form(remote: str) -> None:
    assert github_repo(remote) == ("octo-org", "multi-head-attention")
    links = resolve({}, remote)
    assert links == Links(
        repo_url="https://github.com/octo-org/multi-head-attention",
        site_url="https://octo-org.github.io/multi-head-attention/",
        repo_from="git remote",
        site_from="git remote",
    )


@pytest.mark.parametrize(
    "remote", ["https://gitlab.com/octo-org/mha.git", "/srv/git/mha.git", "git@example.com:octo/mha.git",
               "https://github.com/octo-org", "https://github.com.evil.example/octo/mha"]
)
def test_other_remotes_give_no_links(remote: str) -> None:
    assert github_repo(remote) is None
    assert resolve({}, remote) == Links(None, None, "none", "none")


def test_nothing_known_gives_no_links() -> None:
    links = resolve({}, None)
    assert links.repo_url is None and links.site_url is None
    assert links.blob_url("docs/index.md") is None and links.colab_url("docs/practice/lab.ipynb") is None


def test_environment_wins_over_the_remote() -> None:
    env = {"SITE_REPO": "someone/fork", "SITE_URL": "https://docs.example.org/mha"}
    links = resolve(env, "git@github.com:octo-org/multi-head-attention.git")
    assert links == Links("https://github.com/someone/fork", "https://docs.example.org/mha/", "SITE_REPO", "SITE_URL")
    assert links.blob_url("docs/index.md") == "https://github.com/someone/fork/blob/main/docs/index.md"
    assert links.colab_url("docs/practice/lab.ipynb") == (
        "https://colab.research.google.com/github/someone/fork/blob/main/docs/practice/lab.ipynb"
    )


def test_site_repo_alone_gives_the_default_pages_address() -> None:
    links = resolve({"SITE_REPO": "Octo-Org/mha", "SITE_URL": ""}, None)  # an empty SITE_URL counts as unset
    assert links.site_url == "https://octo-org.github.io/mha/" and links.site_from == "SITE_REPO"
    assert resolve({"SITE_REPO": "octo/octo.github.io"}, None).site_url == "https://octo.github.io/"


def test_site_url_alone_gives_no_repository() -> None:
    links = resolve({"SITE_URL": "https://docs.example.org/"}, None)
    assert links.repo_url is None and links.site_url == "https://docs.example.org/"


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"SITE_REPO": "https://github.com/octo/mha"}, "SITE_REPO='https://github.com/octo/mha'.*owner/name"),
        ({"SITE_REPO": "octo"}, "SITE_REPO='octo'"),
        ({"SITE_URL": "octo.github.io/mha"}, "SITE_URL='octo.github.io/mha'.*http"),
        ({"SITE_URL": "ftp://octo.github.io/"}, "SITE_URL='ftp://octo.github.io/'"),
    ],
)
def test_bad_environment_values_are_named(env: dict[str, str], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        resolve(env, None)


def test_git_remote_reads_origin(tmp_path: Path) -> None:
    subprocess.run(["git", "init", "--quiet", str(tmp_path)], check=True)
    assert git_remote(tmp_path) is None
    subprocess.run(["git", "-C", str(tmp_path), "remote", "add", "origin", "git@github.com:octo/mha.git"], check=True)
    assert git_remote(tmp_path) == "git@github.com:octo/mha.git"
    assert git_remote(tmp_path / "not-a-repository-either") is None


def test_local_url_is_the_serve_address() -> None:
    assert site_links.local_url() == "http://127.0.0.1:8000/"
    (ROOT / "Makefile").read_text(encoding="utf-8").index("mkdocs serve --dev-addr 127.0.0.1:8000")


def test_extras_and_their_comments_come_from_pyproject() -> None:
    extras = {name: (reqs, why) for name, reqs, why in site_links.extras()}
    assert set(extras) == {"plot", "toy", "minilm", "transformers", "triton", "lab"}
    assert "triton>=3.2" in extras["triton"][0] and "TRITON_INTERPRET=1" in extras["triton"][1]
    assert "transformers>=5" in extras["transformers"][0] and "real model" in extras["transformers"][1]
    assert extras["plot"][0] == ["matplotlib"] and "plotting" in extras["plot"][1]
    assert site_links.dependencies() == ["torch>=2.5", "numpy"]


def test_module_summaries_cover_every_module() -> None:
    parts = site_links.module_summaries()
    listed = {path for modules in parts.values() for path, _ in modules}
    assert listed == {p.relative_to(ROOT).as_posix() for p in (ROOT / "lessons_src").rglob("*.py")}
    assert all("/lab/" in path for path, _ in parts["lab"]) and not any("/lab/" in p for p, _ in parts["core"])
    assert all(summary for modules in parts.values() for _, summary in modules)


def test_modules_used_by_a_page() -> None:
    markdown = """
```python
from lessons_src import MultiHeadAttention, causal_mask
from lessons_src.lab import heads, read_artifact_json
from lessons_src.kv_cache import (
    KVCache,
    LatentCache,
)
import lessons_src.rope
```
--8<-- "lessons_src/mla.py"
"""
    assert mkdocs_code_hooks.modules_used(markdown) == [
        "lessons_src/kv_cache.py", "lessons_src/lab/__init__.py", "lessons_src/lab/heads.py",
        "lessons_src/layer.py", "lessons_src/masks.py", "lessons_src/mla.py", "lessons_src/rope.py",
    ]
    assert mkdocs_code_hooks.modules_used("import torch\nfrom lessons_src_extra import x\n") == []


def test_stamp_points_the_notebook_at_the_sites_wheel(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    wheel = tmp_path / f"mha_computed-{lessons_src.__version__}-py3-none-any.whl"
    monkeypatch.setattr(site_links, "WHEEL_PATH", wheel)
    nb = nbformat.read(ROOT / "docs" / "practice" / "lab.ipynb", as_version=4)
    monkeypatch.setattr(site_links, "CURRENT", resolve({"SITE_URL": "https://octo.github.io/mha/"}, None))
    first = next(c for c in mkdocs_code_hooks.stamp(nb).cells if c.cell_type == "code")
    assert f'WHEEL = "https://octo.github.io/mha/downloads/{wheel.name}"' in first.source
    monkeypatch.setattr(site_links, "CURRENT", resolve({}, None))
    nb = nbformat.read(ROOT / "docs" / "practice" / "lab.ipynb", as_version=4)
    first = next(c for c in mkdocs_code_hooks.stamp(nb).cells if c.cell_type == "code")
    assert f'WHEEL = "{wheel.name}"' in first.source
    nb.cells[1].source = "import torch"
    with pytest.raises(ValueError, match="no line WHEEL"):
        mkdocs_code_hooks.stamp(nb)


def test_committed_notebook_has_no_outputs_and_names_this_wheel() -> None:
    """The repository keeps the lab without outputs (Colab opens it clean); the build adds them to its copy."""
    nb = json.loads((ROOT / "docs" / "practice" / "lab.ipynb").read_text(encoding="utf-8"))
    code = [c for c in nb["cells"] if c["cell_type"] == "code"]
    assert code, "the lab has no code cell"
    for cell in code:
        assert cell["outputs"] == [] and cell["execution_count"] is None, "".join(cell["source"])[:80]
        assert "execution" not in cell["metadata"]
    first = "".join(code[0]["source"])
    # The copy Colab opens names this version's wheel: by its full address (`make lab-address` writes the one the
    # site's links give), or by its file name alone, where the first cell says how to go on (the notebook test).
    # An address that is not the one this checkout's links give fails: a stale address must not ship. A clone
    # whose links know an address while the notebook names the file alone passes: CI's clone must not fail
    # because nobody has run `make lab-address` yet.
    wheel = f"mha_computed-{lessons_src.__version__}-py3-none-any.whl"
    named = re.search(r'^WHEEL = "(.*)"$', first, re.M)
    assert named, "the lab's first cell sets no WHEEL"
    target = mkdocs_code_hooks.repository_wheel_target(resolve(os.environ, git_remote(ROOT)), lessons_src.__version__)
    assert named.group(1) in {wheel, target}, f"the lab notebook names {named.group(1)}: run `make lab-address`"
    assert target.endswith(wheel)
    assert "find_spec(\"lessons_src\")" in first and "%pip install" in first


def test_repository_copy_of_the_lab_names_the_sites_wheel_address() -> None:
    known = resolve({}, "git@github.com:octo/mha.git")
    assert (mkdocs_code_hooks.repository_wheel_target(known, "9.9")
            == "https://octo.github.io/mha/downloads/mha_computed-9.9-py3-none-any.whl")
    assert mkdocs_code_hooks.repository_wheel_target(resolve({}, None), "9.9") == "mha_computed-9.9-py3-none-any.whl"
