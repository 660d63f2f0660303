"""No silent failures: a lesson whose code fails makes `mkdocs build --strict` fail.

Each test builds a tiny MkDocs project with the site's own configuration (mkdocs.yml: theme, hooks,
markdown-exec, mkdocs-jupyter, extensions, strict), only the pages replaced, and checks the outcome. The
first proves that the tiny project builds when its code is fine, so the failures below are caused by the
failing code and nothing else.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from warm_python import WarmPython

ROOT = Path(__file__).resolve().parents[2]


class _TolerantLoader(yaml.SafeLoader):
    """Reads mkdocs.yml's plain values; tags MkDocs resolves itself (!ENV, !!python/name:...) become None."""


_TolerantLoader.add_multi_constructor("", lambda loader, suffix, node: None)

GOOD_MD = '# Fine\n\n$a^2$\n\n```python exec="on" source="above" result="text"\nprint(6 * 7)\n```\n'
FAILING_MD = '# Broken\n\n```python exec="on" source="above" result="text"\nprint(1 / 0)\n```\n'
CHECKS = "from lessons_src.lab.checks import claim, close\nimport torch\n"
TRUE_CLAIM_MD = (  # a sentence backed by a claim that holds, and a comparison that holds
    '# Claims\n\nSix sevens are more than forty.\n\n```python exec="on"\n' + CHECKS
    + 'claim("t/more-than-forty", 6 * 7 > 40, "6 * 7 = 42")\n```\n\n'
    '```python exec="on" result="text"\n' + CHECKS
    + 'close("doubled == added", torch.ones(2) * 2, torch.ones(2) + 1)\n```\n'
)
FALSE_CLAIM_MD = (  # the planted false claim: the sentence says more than the data
    '# Claims\n\nSix sevens are more than fifty.\n\n```python exec="on"\n' + CHECKS
    + 'claim("t/more-than-fifty", 6 * 7 > 50, "6 * 7 = 42")\n```\n'
)
FAILING_CLOSE_MD = (  # a printed comparison that does not hold: the page must not print it
    '# Close\n\n```python exec="on" result="text"\n' + CHECKS
    + 'close("output == reference", torch.tensor([1.0, 2.0]), torch.tensor([1.0, 2.5]))\n```\n'
)


def notebook(source: str) -> str:
    cell = {"cell_type": "code", "execution_count": None, "metadata": {}, "outputs": [], "source": [source]}
    nb = {
        "cells": [{"cell_type": "markdown", "metadata": {}, "source": ["# Notebook"]}, cell],
        "metadata": {"kernelspec": {"display_name": "Python 3", "language": "python", "name": "python3"}},
        "nbformat": 4,
        "nbformat_minor": 5,
    }
    return json.dumps(nb)


def build(
    tmp_path: Path, pages: dict[str, str], generator: str = "mkdocs", env_extra: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """Build `pages` (name -> text) with the site's mkdocs.yml; return the finished `mkdocs build` process.

    ``generator``: the module that builds it (``mkdocs``, or ``properdocs``: tests/site/test_generators.py);
    ``env_extra``: variables added to the build's environment.
    """
    write_project(tmp_path, pages)
    return run_python(["-m", generator, "build", "--strict", "-f", str(tmp_path / "mkdocs.yml")], cwd=tmp_path,
                      env=build_env(env_extra), timeout=300, warm=generator == "mkdocs")


# The third-party imports of a tiny build (python -X importtime on one), paid once per test process: none reads
# the project (tests/warm_python.py).
_WARM = WarmPython(("jupytext", "markdown", "mkdocs.commands.build", "mkdocs.config", "mkdocs_jupyter.plugin",
                    "nbconvert", "pygments.lexers", "pymdownx.util", "torch"), env=lambda: build_env())


def run_python(
    args: list[str], *, cwd: Path, env: dict[str, str], timeout: float, warm: bool = True
) -> subprocess.CompletedProcess[str]:
    """``python ARGS`` (``-m mkdocs build ...``, a script) in ``cwd`` with the environment ``env``, captured.

    With ``warm``, in a child forked from tests/warm_python.py (third-party imports paid once per test process, not
    per build) when ``env`` starts a Python as that parent's does (the same ``PYTHON*`` variables);
    otherwise, or when ``warm`` is false (a module that must not find MkDocs already imported, like ProperDocs),
    in a new interpreter.
    """
    if warm:
        return _WARM.run(args, cwd=cwd, env=env, timeout=timeout)
    return subprocess.run([sys.executable, *args], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=timeout, check=False)


def build_env(env_extra: dict[str, str] | None = None) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(ROOT), "NO_MKDOCS_2_WARNING": "1", "MPLBACKEND": "Agg", **(env_extra or {})}


def write_project(tmp_path: Path, pages: dict[str, str]) -> Path:
    """Write a tiny project of `pages` (name -> text) into `tmp_path`; returns its mkdocs.yml.

    The tiny project's mkdocs.yml INHERITs the site's, so it has the same theme, plugins, extensions and
    strictness; only the pages (docs_dir, nav), the output folder and the hooks' paths are its own.
    """
    docs = tmp_path / "docs"
    shutil.copytree(ROOT / "docs" / "assets", docs / "assets")
    for name, text in pages.items():
        (docs / name).write_text(text, encoding="utf-8")
    hooks = yaml.load((ROOT / "mkdocs.yml").read_text(encoding="utf-8"), Loader=_TolerantLoader).get("hooks", [])
    config = {
        "INHERIT": str(ROOT / "mkdocs.yml"),
        "docs_dir": str(docs),
        "site_dir": str(tmp_path / "site"),
        "nav": [{name.split(".")[0]: name} for name in pages],
        "hooks": [str(ROOT / hook) for hook in hooks],
    }
    (tmp_path / "mkdocs.yml").write_text(yaml.safe_dump(config), encoding="utf-8")
    return tmp_path / "mkdocs.yml"


def test_the_tiny_project_builds_when_its_code_is_fine(tmp_path: Path) -> None:
    proc = build(tmp_path, {"index.md": GOOD_MD, "nb.ipynb": notebook("print(6 * 7)"), "claims.md": TRUE_CLAIM_MD})
    assert proc.returncode == 0, proc.stderr[-3000:]
    page = (tmp_path / "site" / "index.html").read_text(encoding="utf-8")
    assert "42" in page and 'class="katex"' in page  # the block ran, the hooks rendered the math
    assert "42" in (tmp_path / "site" / "nb" / "index.html").read_text(encoding="utf-8")
    claims = (tmp_path / "site" / "claims" / "index.html").read_text(encoding="utf-8")
    assert "more than forty" in claims and "doubled == added: yes" in claims  # a true claim and a check that holds


@pytest.fixture(scope="module")
def failing_checks_build(tmp_path_factory: pytest.TempPathFactory) -> subprocess.CompletedProcess[str]:
    """One build for both failing checks below: strict mode reports every failing block, then aborts."""
    return build(tmp_path_factory.mktemp("checks"), {"index.md": FALSE_CLAIM_MD, "close.md": FAILING_CLOSE_MD})


def test_a_false_claim_fails_the_build(failing_checks_build: subprocess.CompletedProcess[str]) -> None:
    proc = failing_checks_build
    assert proc.returncode != 0
    assert "ClaimFailed: claim 't/more-than-fifty' no longer holds: 6 * 7 = 42" in proc.stderr, proc.stderr[-3000:]


def test_a_failing_close_fails_the_build(failing_checks_build: subprocess.CompletedProcess[str]) -> None:
    proc = failing_checks_build
    assert proc.returncode != 0
    assert "CheckFailed: output == reference: 1 of 2 entries exceed the tolerance; the first, [1]" in proc.stderr, (
        proc.stderr[-3000:]
    )


def test_a_failing_exec_block_fails_the_build(tmp_path: Path) -> None:
    proc = build(tmp_path, {"index.md": FAILING_MD})
    assert proc.returncode != 0
    assert "ZeroDivisionError" in proc.stderr or "exited with errors" in proc.stderr, proc.stderr[-3000:]


@pytest.mark.slow
def test_a_failing_notebook_cell_fails_the_build(tmp_path: Path) -> None:
    proc = build(tmp_path, {"index.md": "# Home\n", "nb.ipynb": notebook("raise RuntimeError('cell failed')")})
    assert proc.returncode != 0
    assert "cell failed" in proc.stderr, proc.stderr[-3000:]


def test_a_formula_katex_cannot_parse_fails_the_build(tmp_path: Path) -> None:
    proc = build(tmp_path, {"index.md": "# Math\n\n$\\frac{1}{$\n"})
    assert proc.returncode != 0
    assert "KaTeX" in proc.stderr, proc.stderr[-3000:]
